/* Programs stored in the pool (argv[1]): a script and a copy of /bin/true, run through
 * execv, execvp, execve, fexecve, execveat (relative to a directory descriptor, and of the
 * descriptor itself with AT_EMPTY_PATH), execl, execlp, execle and posix_spawn from forked
 * children; a file without
 * execute permission gives EACCES. Prints EXEC-OK. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void copy(const char *from, const char *to, mode_t mode) {
    int in = open(from, O_RDONLY), out = open(to, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CHECK(in >= 0 && out >= 0);
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0) CHECK(write(out, buf, n) == n);
    CHECK(n == 0 && close(in) == 0 && close(out) == 0 && chmod(to, mode) == 0);
}

/* Run `how` in a child whose stdout is a pipe; return what it printed and its status. */
static int run(void (*how)(const char *), const char *prog, char *out, size_t size) {
    int p[2];
    CHECK(pipe(p) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        how(prog);
        printf("exec failed: %s\n", strerror(errno));
        fflush(stdout);
        _exit(errno == EACCES ? 13 : 99);
    }
    close(p[1]);
    ssize_t n = read(p[0], out, size - 1);
    out[n > 0 ? n : 0] = 0;
    close(p[0]);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st));
    return WEXITSTATUS(st);
}

static void by_execv(const char *prog) {
    char *av[] = {(char *)prog, "execv", NULL};
    execv(prog, av);
}
static void by_execvp(const char *prog) {
    char *av[] = {(char *)prog, "execvp", NULL};
    execvp(prog, av);
}
static void by_execve(const char *prog) {
    char *av[] = {(char *)prog, "execve", NULL};
    execve(prog, av, environ);
}
static void by_execl(const char *prog) { execl(prog, prog, "execl", (char *)NULL); }
static void by_execlp(const char *prog) { execlp(prog, prog, "execlp", (char *)NULL); }
static void by_execle(const char *prog) {
    /* Its own environment, which the script prints ($ENGRAM_TEST_ENV). */
    char *env[] = {"ENGRAM_TEST_ENV=+env", "PATH=/usr/bin:/bin", NULL};
    execle(prog, prog, "execle", (char *)NULL, env);
}
static void by_fexecve(const char *prog) {
    int fd = open(prog, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char *av[] = {(char *)prog, "fexecve", NULL};
    fexecve(fd, av, environ);
}

static void by_execveat(const char *prog) {
    /* Relative to its directory's descriptor. */
    char dir[512];
    snprintf(dir, sizeof dir, "%s", prog);
    *strrchr(dir, '/') = 0;
    int d = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d < 0) return;
    char *av[] = {(char *)prog, "execveat", NULL};
    execveat(d, strrchr(prog, '/') + 1, av, environ, 0);
}
static void by_execveat_fd(const char *prog) {
    int fd = open(prog, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char *av[] = {(char *)prog, "execveat-fd", NULL};
    execveat(fd, "", av, environ, AT_EMPTY_PATH);
}
static void by_execveat_nofollow(const char *prog) {
    char *av[] = {(char *)prog, "nofollow", NULL};
    execveat(AT_FDCWD, prog, av, environ, AT_SYMLINK_NOFOLLOW);
}

static void by_fexecve_rdwr(const char *prog) {
    int fd = open(prog, O_RDWR | O_CLOEXEC);
    if (fd < 0) return;
    char *av[] = {(char *)prog, "rdwr", NULL};
    fexecve(fd, av, environ);
}

static void by_execveat_badflags(const char *prog) {
    char *av[] = {(char *)prog, "badflags", NULL};
    execveat(AT_FDCWD, prog, av, environ, 0x1);
}

static void put_script(const char *path, const char *text) {
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0755);
    CHECK(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text) && close(fd) == 0);
}

/* posix_spawn `prog` with `arg`; what it printed, and its exit status. */
static int spawned(const char *prog, const char *arg, char *out, size_t size) {
    char *av[] = {(char *)prog, (char *)arg, NULL};
    posix_spawn_file_actions_t fa;
    int p[2], st;
    pid_t pid;
    CHECK(pipe(p) == 0 && posix_spawn_file_actions_init(&fa) == 0);
    CHECK(posix_spawn_file_actions_adddup2(&fa, p[1], 1) == 0);
    int e = posix_spawn(&pid, prog, &fa, NULL, av, environ);
    close(p[1]);
    if (e != 0) {
        close(p[0]);
        return -e;
    }
    ssize_t n = read(p[0], out, size - 1);
    out[n > 0 ? n : 0] = 0;
    close(p[0]);
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st));
    return WEXITSTATUS(st);
}

/* Scripts whose interpreter is itself in the pool (a venv's bin/python is a pool symlink):
 * the interpreter gets the kernel's arguments (its name, its one optional argument, the
 * script's path as run, then the caller's after the first), so $0 is the script's path. */
static void interpreters_in_the_pool(const char *dir) {
    char sh[512], shlink[512], s1[512], s2[512], s3[512], text[1200], out[1024], want[1200];
    snprintf(sh, sizeof sh, "%s/sh", dir);
    snprintf(shlink, sizeof shlink, "%s/shlink", dir);
    copy("/bin/sh", sh, 0755);
    CHECK(symlink("/bin/sh", shlink) == 0);
    snprintf(s1, sizeof s1, "%s/s1", dir);
    snprintf(text, sizeof text, "#!%s -e\necho \"1:$0|$1|$2\"\n", sh);
    put_script(s1, text);
    snprintf(s2, sizeof s2, "%s/s2", dir);
    snprintf(text, sizeof text, "#! %s  \t\n. \"$(dirname \"$0\")/lib.sh\"\n", shlink);
    put_script(s2, text);
    snprintf(text, sizeof text, "%s/lib.sh", dir);
    put_script(text, "echo lib $1\n");
    snprintf(s3, sizeof s3, "%s/s3", dir);
    snprintf(text, sizeof text, "#!%s\n", s1);
    put_script(s3, text);

    CHECK(run(by_execve, s1, out, sizeof out) == 0);
    snprintf(want, sizeof want, "1:%s|execve|\n", s1);
    CHECK(strcmp(out, want) == 0);
    CHECK(run(by_execve, s2, out, sizeof out) == 0 && strcmp(out, "lib execve\n") == 0);
    /* A script as the interpreter of another: s1 runs with s3's path as its argument. */
    CHECK(run(by_execv, s3, out, sizeof out) == 0);
    snprintf(want, sizeof want, "1:%s|%s|execv\n", s1, s3);
    CHECK(strcmp(out, want) == 0);
    /* A new environment without the shim: the interpreter (a copy) reads a copy of the
     * script, as /dev/fd/N (the kernel gives the script's own path). */
    CHECK(run(by_execle, s1, out, sizeof out) == 0);
    CHECK(strncmp(out, "1:/", 3) == 0 && strstr(out, "|execle|\n"));
    CHECK(spawned(s1, "spawned", out, sizeof out) == 0);
    snprintf(want, sizeof want, "1:%s|spawned|\n", s1);
    CHECK(strcmp(out, want) == 0);
    /* Relative to the current directory, as run. */
    char cwd[512];
    CHECK(getcwd(cwd, sizeof cwd) && chdir(dir) == 0);
    CHECK(run(by_execve, "./s1", out, sizeof out) == 0 && strcmp(out, "1:./s1|execve|\n") == 0);
    CHECK(chdir(cwd) == 0);

    /* A script outside the pool whose interpreter is in it. */
    char outside[128];
    snprintf(outside, sizeof outside, "/tmp/engram-exec-outside-%d", (int)getpid());
    snprintf(text, sizeof text, "#!%s\necho outside \"$0\" \"$1\"\n", sh);
    put_script(outside, text);
    CHECK(run(by_execve, outside, out, sizeof out) == 0);
    snprintf(want, sizeof want, "outside %s execve\n", outside);
    CHECK(strcmp(out, want) == 0);
    snprintf(text, sizeof text, "#!%s/no-such-interpreter\n", dir);
    put_script(outside, text);
    CHECK(run(by_execve, outside, out, sizeof out) == 99 && strstr(out, "No such file"));
    CHECK(unlink(outside) == 0);

    /* Five scripts in a chain run; a sixth is ELOOP, as the kernel has it. */
    char link[6][512];
    for (int i = 0; i < 6; i++) {
        snprintf(link[i], sizeof link[i], "%s/chain%d", dir, i);
        if (i == 0)
            snprintf(text, sizeof text, "#!%s\necho chain \"$0\"\n", sh);
        else
            snprintf(text, sizeof text, "#!%s\n", link[i - 1]);
        put_script(link[i], text);
    }
    CHECK(run(by_execve, link[4], out, sizeof out) == 0);
    snprintf(want, sizeof want, "chain %s\n", link[0]);
    CHECK(strcmp(out, want) == 0);
    CHECK(run(by_execve, link[5], out, sizeof out) == 99 && strstr(out, "symbolic links"));

    /* An interpreter that is not there, or not a program. */
    snprintf(text, sizeof text, "#!%s/no-such-interpreter\n", dir);
    put_script(s3, text);
    CHECK(run(by_execve, s3, out, sizeof out) == 99 && strstr(out, "No such file"));
    snprintf(text, sizeof text, "#!%s\n", dir);
    put_script(s3, text);
    CHECK(run(by_execve, s3, out, sizeof out) == 13);
    CHECK(spawned(s3, "x", out, sizeof out) == -EACCES);
    put_script(s3, "#!\n");
    CHECK(run(by_execv, s3, out, sizeof out) == 99 && strstr(out, "Exec format error"));
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    char script[512], binary[512], plain[512], out[256];
    snprintf(script, sizeof script, "%s/s.sh", argv[1]);
    snprintf(binary, sizeof binary, "%s/true", argv[1]);
    snprintf(plain, sizeof plain, "%s/plain.sh", argv[1]);
    int fd = open(script, O_CREAT | O_WRONLY, 0755);
    const char *text = "#!/bin/sh\necho ran \"$1$ENGRAM_TEST_ENV\"\n";
    CHECK(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text) && close(fd) == 0);
    copy("/bin/true", binary, 0755);
    copy(script, plain, 0644);
    char bare[512];
    snprintf(bare, sizeof bare, "%s/bare.sh", argv[1]);
    fd = open(bare, O_CREAT | O_WRONLY, 0755);
    const char *body = "echo bare \"$1\"\n";
    CHECK(fd >= 0 && write(fd, body, strlen(body)) == (ssize_t)strlen(body) && close(fd) == 0);
    /* No "#!": execvp runs it with /bin/sh, as glibc does; execv does not. */
    CHECK(run(by_execvp, bare, out, sizeof out) == 0 && strcmp(out, "bare execvp\n") == 0);
    CHECK(run(by_execv, bare, out, sizeof out) == 99);

    void (*ways[])(const char *) = {by_execv, by_execvp, by_execve,   by_fexecve,   by_execveat,
                                    by_execveat_fd, by_execl, by_execlp, by_execle};
    const char *names[] = {"execv",       "execvp", "execve", "fexecve", "execveat",
                           "execveat-fd", "execl",  "execlp", "execle"};
    for (int i = 0; i < 9; i++) {
        char want[64];
        snprintf(want, sizeof want, "ran %s%s\n", names[i],
                 strcmp(names[i], "execle") == 0 ? "+env" : "");
        int st = run(ways[i], script, out, sizeof out);
        if (st != 0 || strcmp(out, want) != 0) {
            fprintf(stderr, "FAIL: %s of a script: status %d, printed \"%s\"\n", names[i], st, out);
            return 1;
        }
        CHECK(run(ways[i], binary, out, sizeof out) == 0 && out[0] == 0);
        CHECK(run(ways[i], plain, out, sizeof out) == 13);
    }

    /* execveat with AT_SYMLINK_NOFOLLOW refuses a final symlink (ELOOP) and runs the file. */
    char link[512];
    snprintf(link, sizeof link, "%s/true-link", argv[1]);
    CHECK(symlink("true", link) == 0);
    CHECK(run(by_execveat_nofollow, link, out, sizeof out) == 99 && strstr(out, "symbolic links"));
    CHECK(run(by_execveat_nofollow, binary, out, sizeof out) == 0 && out[0] == 0);
    /* Also a dangling one (ELOOP before any lookup of its target), and flags the kernel
     * does not know are EINVAL. */
    char dangling[512];
    snprintf(dangling, sizeof dangling, "%s/dangling", argv[1]);
    CHECK(symlink("no-such-file", dangling) == 0);
    CHECK(run(by_execveat_nofollow, dangling, out, sizeof out) == 99 && strstr(out, "symbolic links"));
    CHECK(run(by_execveat_badflags, binary, out, sizeof out) == 99 && strstr(out, "Invalid argument"));
    /* A file open for writing does not run (ETXTBSY), as the kernel has it. */
    CHECK(run(by_fexecve_rdwr, binary, out, sizeof out) == 99 && strstr(out, "Text file busy"));

    /* A PATH naming a pool directory: execvp and execlp find the program there, and still
     * find programs in the real directories after it. */
    char bin[512], tool[600], path[1200];
    snprintf(bin, sizeof bin, "%s/bin", argv[1]);
    snprintf(tool, sizeof tool, "%s/pooltool", bin);
    CHECK(mkdir(bin, 0755) == 0);
    copy(script, tool, 0755);
    snprintf(path, sizeof path, "%s:%s", bin, getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
    CHECK(setenv("PATH", path, 1) == 0);
    CHECK(run(by_execvp, "pooltool", out, sizeof out) == 0 && strcmp(out, "ran execvp\n") == 0);
    CHECK(run(by_execlp, "pooltool", out, sizeof out) == 0 && strcmp(out, "ran execlp\n") == 0);
    CHECK(run(by_execvp, "true", out, sizeof out) == 0);
    CHECK(run(by_execvp, "no-such-program", out, sizeof out) == 99);
    {
        pid_t child;
        int q[2], status;
        char *tav[] = {"pooltool", "spawnp", NULL};
        posix_spawn_file_actions_t acts;
        CHECK(pipe(q) == 0 && posix_spawn_file_actions_init(&acts) == 0);
        CHECK(posix_spawn_file_actions_adddup2(&acts, q[1], 1) == 0);
        CHECK(posix_spawnp(&child, "pooltool", &acts, NULL, tav, environ) == 0);
        close(q[1]);
        ssize_t k = read(q[0], out, sizeof out - 1);
        out[k > 0 ? k : 0] = 0;
        close(q[0]);
        CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status));
        CHECK(strcmp(out, "ran spawnp\n") == 0);
        CHECK(posix_spawnp(&child, "no-such-program", NULL, NULL, tav, environ) == ENOENT);
        /* A program outside the pool, after the pool directory in PATH; a directory named
         * like it in the pool directory is passed over. */
        char *trav[] = {"true", NULL};
        char shadow[700];
        snprintf(shadow, sizeof shadow, "%s/true", bin);
        CHECK(mkdir(shadow, 0755) == 0);
        CHECK(posix_spawnp(&child, "true", NULL, NULL, trav, environ) == 0);
        CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
        CHECK(run(by_execvp, "true", out, sizeof out) == 0);
    }

    interpreters_in_the_pool(argv[1]);

    pid_t pid;
    char *av[] = {binary, NULL};
    /* posix_spawn answers with the error (no execute permission), not -1 and errno. */
    char *pav[] = {plain, NULL};
    CHECK(posix_spawn(&pid, plain, NULL, NULL, pav, environ) == EACCES);
    CHECK(posix_spawn(&pid, binary, NULL, NULL, av, environ) == 0);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char *sav[] = {script, "spawned", NULL};
    posix_spawn_file_actions_t fa;
    int p[2];
    CHECK(pipe(p) == 0 && posix_spawn_file_actions_init(&fa) == 0);
    CHECK(posix_spawn_file_actions_adddup2(&fa, p[1], 1) == 0);
    CHECK(posix_spawnp(&pid, script, &fa, NULL, sav, environ) == 0);
    close(p[1]);
    ssize_t n = read(p[0], out, sizeof out - 1);
    out[n > 0 ? n : 0] = 0;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(strcmp(out, "ran spawned\n") == 0);
    printf("EXEC-OK\n");
    return 0;
}
