/* posix_spawn file actions that name pool paths (argv[1] the prefix): a chdir into a pool
 * directory, an open of a pool file as the child's stdout, a dup2 and a close, for
 * posix_spawn and posix_spawnp (Rust's Command::current_dir uses addchdir_np); a spawn
 * whose action fails, or whose program is missing, returns the error. Prints SPAWNFA-OK. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void read_file(const char *path, char *buf, size_t n) {
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    ssize_t got = read(fd, buf, n - 1);
    CHECK(got >= 0);
    buf[got] = 0;
    close(fd);
}

int main(int argc, char **argv) {
    CHECK(argc >= 2);
    char dir[512], out[512], want[600], buf[1024];
    snprintf(dir, sizeof dir, "%s/sub", argv[1]);
    snprintf(out, sizeof out, "%s/sub/out.txt", argv[1]);
    CHECK(mkdir(dir, 0755) == 0);

    posix_spawn_file_actions_t fa;
    CHECK(posix_spawn_file_actions_init(&fa) == 0);
    CHECK(posix_spawn_file_actions_addchdir_np(&fa, dir) == 0);
    CHECK(posix_spawn_file_actions_addopen(&fa, 5, "out.txt", O_WRONLY | O_CREAT | O_TRUNC,
                                           0644) == 0);
    CHECK(posix_spawn_file_actions_adddup2(&fa, 5, 1) == 0);
    CHECK(posix_spawn_file_actions_addclose(&fa, 5) == 0);
    char *pwd[] = {"pwd", NULL};
    pid_t pid;
    CHECK(posix_spawn(&pid, "/bin/pwd", &fa, NULL, pwd, environ) == 0);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    read_file(out, buf, sizeof buf);
    snprintf(want, sizeof want, "%s\n", dir);
    CHECK(strcmp(buf, want) == 0);

    /* posix_spawnp, searching PATH, into the same file. */
    char *echo[] = {"echo", "spawned", NULL};
    CHECK(posix_spawnp(&pid, "echo", &fa, NULL, echo, environ) == 0);
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    read_file(out, buf, sizeof buf);
    CHECK(strcmp(buf, "spawned\n") == 0);

    /* fchdir to a pool directory's descriptor, and a signal handler of the parent that
     * the child must not run (it is reset to its default before the exec). */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    CHECK(dfd >= 0);
    posix_spawn_file_actions_t fc;
    CHECK(posix_spawn_file_actions_init(&fc) == 0);
    CHECK(posix_spawn_file_actions_addfchdir_np(&fc, dfd) == 0);
    CHECK(posix_spawn_file_actions_addopen(&fc, 1, "out.txt", O_WRONLY | O_TRUNC, 0) == 0);
    CHECK(posix_spawn(&pid, "/bin/pwd", &fc, NULL, pwd, environ) == 0);
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    read_file(out, buf, sizeof buf);
    CHECK(strcmp(buf, want) == 0);
    CHECK(posix_spawn_file_actions_destroy(&fc) == 0 && close(dfd) == 0);

    /* posix_spawnp gives ENOEXEC for a file the kernel cannot run (no /bin/sh). */
    char script[600];
    snprintf(script, sizeof script, "%s/noshebang", dir);
    int sfd = open(script, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    CHECK(sfd >= 0 && write(sfd, "echo ran-by-sh\n", 15) == 15 && close(sfd) == 0);
    char *ns[] = {"noshebang", NULL};
    char *saved = getenv("PATH") ? strdup(getenv("PATH")) : NULL;
    CHECK(setenv("PATH", dir, 1) == 0);
    int rr = posix_spawnp(&pid, "noshebang", &fa, NULL, ns, environ);
    if (saved)
        setenv("PATH", saved, 1);
    CHECK(rr == ENOEXEC);

    /* A missing program: posix_spawn's error, no child left. */
    CHECK(posix_spawn(&pid, "/no/such/program", &fa, NULL, pwd, environ) == ENOENT);
    CHECK(posix_spawn_file_actions_destroy(&fa) == 0);

    /* An action that fails: a chdir into a pool path that is not there. */
    CHECK(posix_spawn_file_actions_init(&fa) == 0);
    snprintf(dir, sizeof dir, "%s/missing", argv[1]);
    CHECK(posix_spawn_file_actions_addchdir_np(&fa, dir) == 0);
    CHECK(posix_spawn(&pid, "/bin/pwd", &fa, NULL, pwd, environ) == ENOENT);
    CHECK(posix_spawn_file_actions_destroy(&fa) == 0);
    printf("SPAWNFA-OK\n");
    return 0;
}
