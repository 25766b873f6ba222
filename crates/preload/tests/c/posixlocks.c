/* A process's POSIX record locks on a file keep excluding other processes whatever else it
 * does with the file: other opens of it (and locks, flocks and OFD locks through them), a
 * forked or spawned child, that child's exit. Closing any descriptor of the file, of any
 * description, releases them all, as on Linux. Each argument is a directory to run the
 * checks in (the mount prefix, a real directory); "probe PATH START PID" is the spawned
 * child (see probe_in_child). */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static int setlk(int fd, int cmd, short type, off_t start, off_t len) {
    struct flock f = {.l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len};
    return fcntl(fd, cmd, &f);
}

/* In a child: a write lock on byte START of PATH through a new description. Exit 0 when
 * it is granted; 1 when F_SETLK is refused and F_GETLK names the holder as `pid` (-1 for
 * an OFD lock); 2 when anything else happens. */
static int probe_in_child(const char *path, off_t start, pid_t pid) {
    int fd = open(path, O_RDWR);
    if (fd < 0)
        return 2;
    if (setlk(fd, F_SETLK, F_WRLCK, start, 1) == 0)
        return 0;
    if (errno != EAGAIN && errno != EACCES)
        return 2;
    struct flock f = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = start, .l_len = 1};
    if (fcntl(fd, F_GETLK, &f) != 0 || f.l_type == F_UNLCK || f.l_pid != pid)
        return 2;
    return 1;
}

/* Whether another process finds byte START of PATH locked (by `pid`), asked from a forked
 * child and from a spawned one (a new image). */
static int held(const char *path, off_t start, pid_t pid) {
    int st, r = -1;
    pid_t c = fork();
    CHECK(c >= 0);
    if (c == 0)
        _exit(probe_in_child(path, start, pid));
    CHECK(waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) < 2);
    r = WEXITSTATUS(st);

    char s[32], p[32];
    snprintf(s, sizeof s, "%lld", (long long)start);
    snprintf(p, sizeof p, "%d", (int)pid);
    char *argv[] = {"posixlocks", "probe", (char *)path, s, p, NULL};
    CHECK(posix_spawn(&c, "/proc/self/exe", NULL, NULL, argv, environ) == 0);
    CHECK(waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) < 2);
    /* Both children see the same, and neither's exit changed it. */
    CHECK((int)WEXITSTATUS(st) == r);
    return r == 1;
}

static int open_in(const char *dir, const char *name, int flags) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, flags | O_CREAT | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    return fd;
}

static void run(const char *dir) {
    pid_t me = getpid();
    char path[4096];

    /* The report: a lock, then a second open of the file, then a child. */
    snprintf(path, sizeof path, "%s/opened-after", dir);
    int a = open_in(dir, "opened-after", O_RDWR);
    CHECK(lockf(a, F_LOCK, 0) == 0);
    int b = open_in(dir, "opened-after", O_RDONLY);
    CHECK(held(path, 0, me));
    CHECK(held(path, 0, me)); /* the children's exits released nothing */
    CHECK(close(b) == 0);     /* any close releases them */
    CHECK(!held(path, 0, me));
    CHECK(close(a) == 0);

    /* The other description opened first, and the lock taken through it (read-only). */
    snprintf(path, sizeof path, "%s/opened-before", dir);
    b = open_in(dir, "opened-before", O_RDONLY);
    a = open_in(dir, "opened-before", O_RDWR);
    CHECK(setlk(b, F_SETLK, F_RDLCK, 0, 0) == 0);
    CHECK(held(path, 0, me));
    CHECK(close(a) == 0);
    CHECK(!held(path, 0, me));
    CHECK(close(b) == 0);

    /* Locks through several descriptions, a flock and an OFD lock through others, all
     * before any child: each POSIX lock stays, the OFD lock is the description's. */
    snprintf(path, sizeof path, "%s/several", dir);
    a = open_in(dir, "several", O_RDWR);
    CHECK(setlk(a, F_SETLK, F_WRLCK, 0, 10) == 0);
    b = open_in(dir, "several", O_RDWR);
    CHECK(setlk(b, F_SETLK, F_WRLCK, 20, 10) == 0);
    int c = open_in(dir, "several", O_RDWR);
    CHECK(flock(c, LOCK_SH) == 0);
    int d = open_in(dir, "several", O_RDWR);
    CHECK(setlk(d, F_OFD_SETLK, F_RDLCK, 100, 10) == 0);
    CHECK(held(path, 0, me) && held(path, 25, me) && held(path, 105, -1));
    CHECK(!held(path, 50, me));
    CHECK(close(d) == 0); /* the OFD lock goes with its description, the POSIX ones too */
    CHECK(!held(path, 0, me) && !held(path, 25, me) && !held(path, 105, -1));
    CHECK(close(c) == 0 && close(b) == 0 && close(a) == 0);

    /* A description that never locked, opened and closed with no child in between: its
     * close releases the process's locks all the same. */
    snprintf(path, sizeof path, "%s/never-locked", dir);
    a = open_in(dir, "never-locked", O_RDWR);
    CHECK(setlk(a, F_SETLK, F_WRLCK, 0, 0) == 0);
    b = open_in(dir, "never-locked", O_RDONLY);
    CHECK(close(b) == 0);
    CHECK(!held(path, 0, me));
    CHECK(close(a) == 0);
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "probe") == 0)
        return probe_in_child(argv[2], atoll(argv[3]), atoi(argv[4]));
    CHECK(argc >= 2);
    for (int i = 1; i < argc; i++)
        run(argv[i]);
    puts("POSIXLOCKS-OK");
    return 0;
}
