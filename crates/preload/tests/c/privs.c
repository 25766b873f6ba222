/* Set-id bits, O_NOATIME and the times of calls that change little, as Linux has them
 * (argv[1]: a directory; run as root). Found by pjdfstest and by probing:
 * - a write, pwrite, ftruncate or O_TRUNC open by a user without CAP_FSETID clears
 *   set-user-ID, and set-group-ID where group execute is set (file_remove_privs); root's
 *   write keeps them; every chown of a file clears them, also to -1, -1 or the same owner;
 * - ftruncate through a descriptor open for writing needs no write permission now (a
 *   file created with mode 0);
 * - a process that drops to nobody before its first call reaches the pool (exec'd fresh:
 *   "first" below);
 * - O_NOATIME on another user's file is EPERM, at open and at F_SETFL;
 * - fallocate inside the file changes mtime and ctime; futimens with both UTIME_OMIT
 *   changes nothing; chown(-1, -1) changes ctime (it did not on a FUSE mount);
 * - an O_CREAT|O_TRUNC open that makes the file truncates nothing (Linux truncates only a
 *   file that was there): nobody's set-user-ID bit given at creation stays, a file made
 *   read-only by O_CREAT|O_RDONLY|O_TRUNC opens, creat's new file has one time for atime,
 *   mtime and ctime (review of the shim's truncation after the open: it truncated new
 *   files too, and these three failed).
 * Prints PRIVS-OK. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void drop(void) {
    CHECK(setgroups(0, NULL) == 0 && setgid(65534) == 0 && setuid(65534) == 0);
}

static mode_t mode_of(const char *p) {
    struct stat st;
    CHECK(stat(p, &st) == 0);
    return st.st_mode & 07777;
}

/* Root makes `p` with `mode`; a child as nobody (or root, if !as_nobody) changes it with
 * `how`; returns the mode after. */
static mode_t after(const char *p, mode_t mode, int how, int as_nobody) {
    unlink(p);
    int fd = open(p, O_CREAT | O_EXCL | O_WRONLY, 0600);
    CHECK(fd >= 0 && write(fd, "0123456789", 10) == 10 && close(fd) == 0);
    CHECK(chmod(p, mode) == 0 && mode_of(p) == mode);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (as_nobody)
            drop();
        switch (how) {
        case 0:
            fd = open(p, O_WRONLY);
            CHECK(fd >= 0 && write(fd, "x", 1) == 1);
            break;
        case 1:
            fd = open(p, O_WRONLY);
            CHECK(fd >= 0 && pwrite(fd, "x", 1, 3) == 1);
            break;
        case 2:
            fd = open(p, O_WRONLY);
            CHECK(fd >= 0 && ftruncate(fd, 4) == 0);
            break;
        default:
            fd = open(p, O_WRONLY | O_TRUNC);
            CHECK(fd >= 0);
        }
        CHECK(close(fd) == 0);
        _exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    return mode_of(p);
}

static long long ns(struct timespec t) {
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "first") == 0) {
        /* Exec'd fresh: nothing of the pool touched before the drop. */
        drop();
        char d[512];
        snprintf(d, sizeof d, "%s/nobody's", argv[2]);
        CHECK(mkdir(d, 0755) == 0);
        struct stat st;
        CHECK(stat(d, &st) == 0 && st.st_uid == 65534);
        printf("FIRST-OK\n");
        return 0;
    }
    CHECK(argc == 2 && geteuid() == 0);
    /* A directory anyone may write, for nobody's files. */
    char top[400], p[512];
    snprintf(top, sizeof top, "%s/privs", argv[1]);
    CHECK(mkdir(top, 0777) == 0 && chmod(top, 0777) == 0);
    argv[1] = top;
    snprintf(p, sizeof p, "%s/setid", argv[1]);

    for (int how = 0; how < 4; how++) {
        CHECK(after(p, 06777, how, 1) == 0777);
        CHECK(after(p, 04755 | 0022, how, 1) == 0777);
        /* Without group execute, set-group-ID (a mandatory-lock mark) stays for a caller
         * in the file's group only: nobody is not in root's group. */
        CHECK(after(p, 02666, how, 1) == 0666);
        CHECK(after(p, 06777, how, 0) == 06777); /* root: CAP_FSETID */
    }
    /* The owner's own write clears them too. */
    CHECK(after(p, 06777, 0, 1) == 0777);
    CHECK(chown(p, 65534, 65534) == 0 && chmod(p, 06775) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        drop();
        int fd = open(p, O_WRONLY);
        CHECK(fd >= 0 && write(fd, "y", 1) == 1 && close(fd) == 0);
        _exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(mode_of(p) == 0775);

    /* Every chown of a file clears them, whoever asks and whatever the ids. */
    CHECK(chown(p, 0, 0) == 0);
    const struct {
        uid_t u;
        gid_t g;
    } ids[] = {{-1, -1}, {0, 0}, {0, -1}, {5, 5}};
    for (int i = 0; i < 4; i++) {
        CHECK(chmod(p, 06755) == 0 && chown(p, ids[i].u, ids[i].g) == 0);
        CHECK(mode_of(p) == 0755);
        CHECK(chown(p, 0, 0) == 0 && chmod(p, 06755) == 0);
        int fd = open(p, O_RDONLY);
        CHECK(fd >= 0 && fchown(fd, ids[i].u, ids[i].g) == 0 && close(fd) == 0);
        CHECK(mode_of(p) == 0755);
        CHECK(chown(p, 0, 0) == 0);
    }
    /* chown(-1, -1) asks no permission and changes ctime. */
    struct stat c0, c1;
    CHECK(stat(p, &c0) == 0);
    struct timespec tick = {0, 20 * 1000 * 1000};
    nanosleep(&tick, NULL);
    CHECK(chown(p, -1, -1) == 0 && stat(p, &c1) == 0);
    CHECK(c1.st_ctim.tv_sec * 1000000000LL + c1.st_ctim.tv_nsec >
          c0.st_ctim.tv_sec * 1000000000LL + c0.st_ctim.tv_nsec);
    /* Someone else's chown(-1, -1) of a set-id file is a mode change: EPERM, bits kept. */
    CHECK(chmod(p, 04755) == 0);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        drop();
        CHECK(chown(p, -1, -1) == -1 && errno == EPERM);
        _exit(0);
    }
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(mode_of(p) == 04755 && chmod(p, 0755) == 0);
    /* A directory keeps them. */
    char d[512];
    snprintf(d, sizeof d, "%s/setgid-dir", argv[1]);
    CHECK(mkdir(d, 0755) == 0 && chmod(d, 02755) == 0 && chown(d, -1, -1) == 0);
    CHECK(mode_of(d) == 02755);

    /* ftruncate needs the descriptor, not the mode: a file created with mode 0. */
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        drop();
        char q[512];
        snprintf(q, sizeof q, "%s/mode0", argv[1]);
        int fd = open(q, O_CREAT | O_EXCL | O_RDWR, 0);
        CHECK(fd >= 0 && write(fd, "abc", 3) == 3 && ftruncate(fd, 1) == 0);
        CHECK(truncate(q, 0) == -1 && errno == EACCES);
        CHECK(close(fd) == 0);
        /* O_NOATIME on root's file: EPERM at open and at F_SETFL. */
        CHECK(open(p, O_RDONLY | O_NOATIME) == -1 && errno == EPERM);
        fd = open(p, O_RDONLY);
        CHECK(fd >= 0 && fcntl(fd, F_SETFL, O_NOATIME) == -1 && errno == EPERM);
        CHECK(close(fd) == 0);
        _exit(0);
    }
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    int fd = open(p, O_RDONLY | O_NOATIME);
    CHECK(fd >= 0 && close(fd) == 0); /* root may */

    /* An O_CREAT|O_TRUNC open that makes the file truncates nothing. */
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        drop();
        char q[512];
        snprintf(q, sizeof q, "%s/made-setuid", argv[1]);
        int fd = open(q, O_CREAT | O_WRONLY | O_TRUNC, 04755);
        CHECK(fd >= 0 && close(fd) == 0 && mode_of(q) == 04755);
        snprintf(q, sizeof q, "%s/made-readonly", argv[1]);
        fd = open(q, O_CREAT | O_RDONLY | O_TRUNC, 0444);
        CHECK(fd >= 0 && close(fd) == 0);
        CHECK(open(q, O_RDONLY | O_TRUNC) == -1 && errno == EACCES);
        snprintf(q, sizeof q, "%s/made-by-creat", argv[1]);
        struct stat s;
        fd = creat(q, 0644);
        CHECK(fd >= 0 && fstat(fd, &s) == 0 && close(fd) == 0);
        CHECK(ns(s.st_mtim) == ns(s.st_atim) && ns(s.st_ctim) == ns(s.st_atim));
        _exit(0);
    }
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);

    /* fallocate within the file changes mtime and ctime; OMIT, OMIT changes nothing. */
    struct stat a, b;
    fd = open(p, O_RDWR);
    CHECK(fd >= 0 && ftruncate(fd, 65536) == 0 && fstat(fd, &a) == 0);
    struct timespec pause = {0, 20 * 1000 * 1000};
    nanosleep(&pause, NULL);
    CHECK(fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 65536) == 0 && fstat(fd, &b) == 0);
    CHECK(ns(b.st_mtim) > ns(a.st_mtim) && ns(b.st_ctim) > ns(a.st_ctim));
    nanosleep(&pause, NULL);
    CHECK(fallocate(fd, 0, 0, 4096) == 0 && fstat(fd, &a) == 0);
    CHECK(ns(a.st_mtim) > ns(b.st_mtim) && ns(a.st_ctim) > ns(b.st_ctim));
    nanosleep(&pause, NULL);
    struct timespec omit[2] = {{0, UTIME_OMIT}, {0, UTIME_OMIT}};
    CHECK(futimens(fd, omit) == 0 && fstat(fd, &b) == 0);
    CHECK(ns(b.st_ctim) == ns(a.st_ctim) && ns(b.st_mtim) == ns(a.st_mtim));
    CHECK(utimensat(AT_FDCWD, "/no/such/path", omit, 0) == 0); /* not even looked up */
    CHECK(close(fd) == 0);

    /* A fresh process that drops before its first call. */
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        execl(argv[0], argv[0], "first", argv[1], (char *)NULL);
        _exit(3);
    }
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    printf("PRIVS-OK\n");
    return 0;
}
