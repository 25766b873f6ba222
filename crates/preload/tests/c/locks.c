/* Record locks on a pool opened in-process, which the shim answers without the kernel
 * while only POSIX locks are used: they never conflict within the process, closing any
 * descriptor of a file releases them, and an OFD lock still conflicts with them (they go
 * to the kernel then), and once they do, other descriptions of the file leave them. Run
 * in-process by tests/shim.rs; argv[1] is the mount prefix. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

static int setlk(int fd, int cmd, short type, off_t start, off_t len) {
    struct flock f = {.l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len};
    return fcntl(fd, cmd, &f);
}

/* The type F_GETLK (or F_OFD_GETLK) reports for a write lock on [start, start + len). */
static short getlk(int fd, int cmd, off_t start, off_t len) {
    struct flock f = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = start, .l_len = len};
    CHECK(fcntl(fd, cmd, &f) == 0);
    return f.l_type;
}

static int open_file(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    return fd;
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    const char *dir = argv[1];

    /* POSIX locks of one process never conflict with each other. */
    int a = open_file(dir, "one");
    int b = open_file(dir, "one");
    CHECK(setlk(a, F_SETLK, F_WRLCK, 0, 100) == 0);
    CHECK(setlk(b, F_SETLK, F_WRLCK, 50, 100) == 0);
    CHECK(setlk(b, F_SETLKW, F_RDLCK, 0, 0) == 0);
    CHECK(getlk(a, F_GETLK, 0, 0) == F_UNLCK);
    CHECK(lockf(a, F_TLOCK, 10) == 0 && lockf(a, F_TEST, 10) == 0);
    /* An OFD lock conflicts with them: they are the kernel's from now on. */
    int c = open_file(dir, "one");
    CHECK(setlk(c, F_OFD_SETLK, F_WRLCK, 20, 1) == -1 && (errno == EAGAIN || errno == EACCES));
    CHECK(getlk(c, F_OFD_GETLK, 20, 1) != F_UNLCK);
    /* Unlocked (the process's locks span [0, end) as read locks after the last call, the
     * first 10 bytes write-locked by lockf): the OFD lock is granted, and POSIX F_GETLK,
     * now the kernel's, sees it. */
    CHECK(setlk(a, F_SETLK, F_UNLCK, 0, 0) == 0);
    CHECK(setlk(c, F_OFD_SETLK, F_WRLCK, 20, 1) == 0);
    CHECK(getlk(a, F_GETLK, 20, 1) == F_WRLCK);
    CHECK(setlk(a, F_SETLK, F_WRLCK, 20, 1) == -1 && (errno == EAGAIN || errno == EACCES));
    CHECK(close(c) == 0 && close(b) == 0 && close(a) == 0);

    /* Closing any descriptor of a file releases the process's POSIX locks on it. */
    int d = open_file(dir, "two");
    int e = open_file(dir, "two");
    CHECK(setlk(d, F_SETLK, F_WRLCK, 0, 0) == 0);
    CHECK(close(e) == 0);
    int g = open_file(dir, "two");
    CHECK(setlk(g, F_OFD_SETLK, F_WRLCK, 0, 0) == 0);
    CHECK(close(g) == 0 && close(d) == 0);

    /* Held locks that are not released go to the kernel whole when an OFD lock comes. */
    int h = open_file(dir, "three");
    CHECK(setlk(h, F_SETLK, F_RDLCK, 0, 10) == 0);
    CHECK(setlk(h, F_SETLK, F_WRLCK, 100, 0) == 0);
    int k = open_file(dir, "three");
    CHECK(setlk(k, F_OFD_SETLK, F_RDLCK, 5, 1) == 0);  /* read with read: fine */
    CHECK(setlk(k, F_OFD_SETLK, F_WRLCK, 20, 10) == 0); /* between the two */
    CHECK(setlk(k, F_OFD_SETLK, F_RDLCK, 1000, 1) == -1 && (errno == EAGAIN || errno == EACCES));

    /* Once the kernel answers (an OFD lock was taken), closing a duplicate still releases
     * the process's POSIX locks. */
    int p = open_file(dir, "five");
    int x = open_file(dir, "five");
    CHECK(setlk(x, F_OFD_SETLK, F_RDLCK, 1000, 1) == 0);
    CHECK(setlk(p, F_SETLK, F_WRLCK, 0, 10) == 0);
    CHECK(getlk(x, F_OFD_GETLK, 0, 10) == F_WRLCK);
    int q = dup(p);
    CHECK(q >= 0 && close(q) == 0);
    CHECK(getlk(x, F_OFD_GETLK, 0, 10) == F_UNLCK);
    CHECK(setlk(x, F_OFD_SETLK, F_WRLCK, 0, 10) == 0);

    /* Once the kernel answers, the POSIX locks stay through other descriptions' first
     * locks, flocks and OFD locks; a close of a description that never locked releases
     * them. */
    int s = open_file(dir, "six");
    int t = open_file(dir, "six");
    CHECK(setlk(t, F_OFD_SETLK, F_RDLCK, 1000, 1) == 0);
    CHECK(setlk(s, F_SETLK, F_WRLCK, 0, 10) == 0);
    int u = open_file(dir, "six");
    CHECK(setlk(u, F_SETLK, F_WRLCK, 20, 10) == 0);
    int v = open_file(dir, "six");
    CHECK(flock(v, LOCK_SH) == 0);
    int w = open_file(dir, "six");
    CHECK(setlk(w, F_OFD_SETLK, F_RDLCK, 100, 1) == 0);
    CHECK(getlk(t, F_OFD_GETLK, 0, 10) == F_WRLCK && getlk(t, F_OFD_GETLK, 20, 10) == F_WRLCK);
    int y = open_file(dir, "six");
    CHECK(close(y) == 0);
    CHECK(getlk(t, F_OFD_GETLK, 0, 30) == F_UNLCK);
    CHECK(close(w) == 0 && close(v) == 0 && close(u) == 0 && close(t) == 0 && close(s) == 0);

    /* Bad requests fail as the kernel's do. */
    struct flock bad = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 5, .l_len = -10};
    int m = open_file(dir, "four");
    CHECK(fcntl(m, F_SETLK, &bad) == -1 && errno == EINVAL);
    bad.l_type = 42;
    bad.l_len = 1;
    CHECK(fcntl(m, F_SETLK, &bad) == -1 && errno == EINVAL);
    bad.l_type = F_UNLCK;
    CHECK(fcntl(m, F_GETLK, &bad) == -1 && errno == EINVAL);
    puts("LOCKS-OK");
    return 0;
}
