/* A removed current directory, in the pool (argv[1]) and in a real directory (argv[2]):
 * every call here must give the same result on both sides, Linux's (each expectation was
 * measured on ext4 and tmpfs). Linux keeps the directory while it is in use: it lists
 * nothing, has no links, takes no new names, getcwd fails, and ".." leads to the parent it
 * had when it was removed, also once that was removed too. The directories are removed by
 * this process and, where another process can reach the pool (through a daemon; argv[3] is
 * "others"), by a child. Prints REMOVEDCWD-OK. */
#define _GNU_SOURCE
#include "check.h"
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static int others;

static ino_t ino_of(const char *path) {
    struct stat st;
    CHECK(stat(path, &st) == 0);
    return st.st_ino;
}

/* The call failed with `e`. */
#define FAILS(call, e)                                                                     \
    do {                                                                                   \
        errno = 0;                                                                         \
        CHECK((call) < 0 && errno == (e));                                                 \
    } while (0)

/* Remove the directories named, in order: by a child when other processes may, else here. */
static void remove_dirs(const char *a, const char *b) {
    if (!others) {
        CHECK(rmdir(a) == 0);
        CHECK(b == NULL || rmdir(b) == 0);
        return;
    }
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0)
        _exit(rmdir(a) != 0 || (b != NULL && rmdir(b) != 0));
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* The current directory's name is `want` (top joined with `rel`). */
static void cwd_is(const char *top, const char *rel) {
    char want[PATH_MAX], buf[PATH_MAX];
    snprintf(want, sizeof want, "%s/%s", top, rel);
    CHECK(getcwd(buf, sizeof buf) != NULL && strcmp(buf, want) == 0);
}

/* "." is a removed directory: there, no links, lists nothing, takes no names. */
static void removed_here(void) {
    char buf[PATH_MAX];
    struct stat st;
    CHECK(stat(".", &st) == 0 && S_ISDIR(st.st_mode) && st.st_nlink == 0);
    CHECK(lstat(".", &st) == 0 && st.st_nlink == 0);
    CHECK(stat("./", &st) == 0 && st.st_nlink == 0);
    CHECK(access(".", X_OK) == 0);
    FAILS(stat("x", &st), ENOENT);

    /* Opened, it lists nothing, not even its dots: getdents gives ENOENT, readdir ends. */
    int fd = open(".", O_RDONLY | O_DIRECTORY);
    CHECK(fd >= 0);
    CHECK(fstat(fd, &st) == 0 && st.st_nlink == 0);
    FAILS(syscall(SYS_getdents64, fd, buf, sizeof buf), ENOENT);
    CHECK(close(fd) == 0);
    DIR *d = opendir(".");
    CHECK(d != NULL);
    errno = 0;
    CHECK(readdir(d) == NULL && errno == 0);
    CHECK(closedir(d) == 0);
    struct dirent **list;
    CHECK(scandir(".", &list, NULL, alphasort) == 0);
    free(list);

    /* Nothing can be made in it, nor found. */
    FAILS(open("x", O_CREAT | O_WRONLY, 0644), ENOENT);
    FAILS(open("x", O_RDONLY), ENOENT);
    FAILS(mkdir("x", 0755), ENOENT);
    FAILS(symlink("t", "x"), ENOENT);
    FAILS(mknod("x", S_IFREG | 0644, 0), ENOENT);
    FAILS(unlink("x"), ENOENT);
    FAILS(rmdir("x"), ENOENT);
    FAILS(rmdir("."), EINVAL);
    FAILS(mkdir(".", 0755), EEXIST);

    /* It has no name. */
    errno = 0;
    CHECK(getcwd(buf, sizeof buf) == NULL && errno == ENOENT);
    errno = 0;
    CHECK(realpath(".", NULL) == NULL && errno == ENOENT);
    errno = 0;
    CHECK(realpath("..", NULL) == NULL && errno == ENOENT);

    /* Its attributes still change. */
    CHECK(chmod(".", 0700) == 0);
    CHECK(stat(".", &st) == 0 && (st.st_mode & 07777) == 0700);
    fd = open(".", O_RDONLY);
    CHECK(fd >= 0 && fchmod(fd, 0755) == 0 && close(fd) == 0);
    CHECK(stat(".", &st) == 0 && (st.st_mode & 07777) == 0755);
    CHECK(chdir(".") == 0);
    CHECK(stat(".", &st) == 0 && st.st_nlink == 0);
}

static void run(const char *top) {
    struct stat st;
    char path[PATH_MAX], buf[PATH_MAX];
    CHECK(chdir(top) == 0);
    CHECK(mkdir("a", 0755) == 0 && mkdir("a/b", 0755) == 0);
    CHECK(mkdir("a/b/c", 0755) == 0 && mkdir("a/sib", 0755) == 0);
    ino_t a = ino_of("a"), b = ino_of("a/b");

    /* Removed by this process. */
    CHECK(chdir("a/b/c") == 0);
    CHECK(rmdir("../c") == 0);
    removed_here();
    CHECK(stat("..", &st) == 0 && st.st_ino == b && st.st_nlink == 2);
    CHECK(ino_of("../..") == a && ino_of("./..") == b);
    CHECK(stat("../../sib", &st) == 0 && S_ISDIR(st.st_mode));
    FAILS(stat("../c", &st), ENOENT);
    int up = open("..", O_RDONLY | O_DIRECTORY);
    CHECK(up >= 0 && fstat(up, &st) == 0 && st.st_ino == b && close(up) == 0);
    FAILS(rename("../../sib", "x"), ENOENT);

    /* A descriptor of it works as the current directory does, also to come back to. */
    int dfd = open(".", O_RDONLY | O_DIRECTORY);
    CHECK(dfd >= 0);
    CHECK(fstatat(dfd, "..", &st, 0) == 0 && st.st_ino == b);
    FAILS(openat(dfd, "x", O_CREAT | O_WRONLY, 0644), ENOENT);
    FAILS(mkdirat(dfd, "x", 0755), ENOENT);
    CHECK(fchmodat(dfd, ".", 0750, 0) == 0);
    CHECK(fstat(dfd, &st) == 0 && (st.st_mode & 07777) == 0750);
    CHECK(chdir("..") == 0);
    cwd_is(top, "a/b");
    CHECK(fchdir(dfd) == 0);
    removed_here();
    CHECK(close(dfd) == 0);
    CHECK(chdir("..") == 0);
    cwd_is(top, "a/b");

    /* Its parent removed too (by another process where one can): ".." is that parent,
     * removed, and its ".." the grandparent. */
    CHECK(mkdir("p", 0755) == 0 && mkdir("p/q", 0755) == 0);
    CHECK(chdir("p/q") == 0);
    FAILS(rmdir(".."), ENOTEMPTY);
    snprintf(path, sizeof path, "%s/a/b/p/q", top);
    snprintf(buf, sizeof buf, "%s/a/b/p", top);
    remove_dirs(path, buf);
    removed_here();
    CHECK(stat("..", &st) == 0 && S_ISDIR(st.st_mode) && st.st_nlink == 0);
    CHECK(ino_of("../..") == b);
    FAILS(stat("../q", &st), ENOENT);
    FAILS(open("../x", O_CREAT | O_WRONLY, 0644), ENOENT);
    FAILS(mkdir("../x", 0755), ENOENT);
    up = open("..", O_RDONLY | O_DIRECTORY);
    CHECK(up >= 0);
    FAILS(syscall(SYS_getdents64, up, buf, sizeof buf), ENOENT);
    CHECK(close(up) == 0);
    CHECK(chdir("..") == 0);
    removed_here();
    CHECK(chdir("..") == 0);
    cwd_is(top, "a/b");

    /* Moved, then removed: ".." is where it was when removed. */
    CHECK(mkdir("m", 0755) == 0 && mkdir("m/n", 0755) == 0 && mkdir("o", 0755) == 0);
    ino_t o = ino_of("o");
    CHECK(chdir("m/n") == 0);
    CHECK(rename("../n", "../../o/n") == 0);
    CHECK(rmdir("../n") == 0);
    CHECK(ino_of("..") == o);
    CHECK(chdir("..") == 0);
    cwd_is(top, "a/b/o");
    CHECK(chdir("..") == 0);

    /* Removed, and another directory made with its name: "." is still the removed one. */
    CHECK(mkdir("r", 0755) == 0);
    CHECK(chdir("r") == 0);
    snprintf(path, sizeof path, "%s/a/b/r", top);
    remove_dirs(path, NULL);
    CHECK(mkdir("../r", 0755) == 0);
    CHECK(ino_of("../r") != ino_of("."));
    removed_here();
    if (others) {
        /* A child forked here is in it too. */
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            removed_here();
            _exit(ino_of("..") != b);
        }
        int status;
        CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    CHECK(chdir("..") == 0);

    /* Clean up. */
    CHECK(rmdir("r") == 0 && rmdir("o") == 0 && rmdir("m") == 0);
    CHECK(chdir(top) == 0);
    CHECK(rmdir("a/b") == 0 && rmdir("a/sib") == 0 && rmdir("a") == 0);
    CHECK(chdir("/") == 0);
}

int main(int argc, char **argv) {
    CHECK(argc >= 3);
    others = 1;
    run(argv[2]);
    others = argc > 3 && strcmp(argv[3], "others") == 0;
    run(argv[1]);
    puts("REMOVEDCWD-OK");
    return 0;
}
