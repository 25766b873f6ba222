/*
 * copy_file_range and sendfile between files of DIR, pipes, sockets and directories,
 * answered as Linux answers them (checked on tmpfs and ext4), in the order Linux checks:
 * copy_file_range refuses a range that overlaps itself within one file (EINVAL, after the
 * count is cut to the end of the input), a pipe, socket or device at either end (EINVAL,
 * without reading or blocking on it), a directory (EISDIR, before any other kind or mode),
 * offsets that wrap (EOVERFLOW) or are negative (EINVAL); sendfile refuses an input that is
 * not a regular file (EINVAL: a pipe, a socket, a directory) and an offset on an input that
 * cannot seek (ESPIPE). Through the shim such calls were reads and writes: a pipe was read
 * (an empty one blocked for ever), an overlapping copy went ahead. copy_file_range between
 * DIR and OTHER_DIR, two file systems, is EXDEV (after the kinds and modes, before the
 * offsets, also for a count of 0), where the shim copied; sendfile between them copies. A
 * raw syscall(SYS_sendfile) is sendfile.
 *
 * Usage: xfer DIR OTHER_DIR   (OTHER_DIR outside DIR, another file system through the shim).
 * Prints XFER-OK.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "check.h"

#define FAILS(call, err) CHECK((call) == -1 && errno == (err))
#define SIZE 10000

static char dir[4096], other[4096];
static int tmpfs; /* whether DIR is on tmpfs, whose files may be larger than ext4's */

/* The file's SIZE bytes are still byte i = 'a' + i % 26. */
static void unchanged(int fd) {
    static char got[SIZE + 1];
    struct stat st;
    CHECK(fstat(fd, &st) == 0 && st.st_size == SIZE && pread(fd, got, SIZE + 1, 0) == SIZE);
    for (int i = 0; i < SIZE; i++)
        CHECK(got[i] == 'a' + i % 26);
}

/* Whether the pipe holds exactly `want` (then empty). */
static void pipe_holds(int r, const char *want) {
    char got[64];
    size_t n = strlen(want);
    CHECK(fcntl(r, F_SETFL, O_NONBLOCK) == 0);
    if (n > 0)
        CHECK(read(r, got, sizeof got) == (ssize_t)n && memcmp(got, want, n) == 0);
    FAILS(read(r, got, sizeof got), EAGAIN);
    CHECK(fcntl(r, F_SETFL, 0) == 0);
}

static void copy_within_one_file(int a) {
    off_t i, o;
    char got[26];
    /* Overlapping ranges, through one descriptor or two. */
    i = 0, o = 0;
    FAILS(copy_file_range(a, &i, a, &o, 100, 0), EINVAL);
    i = 0, o = 5;
    FAILS(copy_file_range(a, &i, a, &o, 10, 0), EINVAL);
    i = 5, o = 0;
    FAILS(copy_file_range(a, &i, a, &o, 10, 0), EINVAL);
    CHECK(i == 5 && o == 0);
    int a2 = open(joined(dir, "a"), O_RDWR | O_CLOEXEC);
    CHECK(a2 >= 0);
    i = 1000, o = 1500;
    FAILS(copy_file_range(a, &i, a2, &o, 1000, 0), EINVAL);
    /* Through the descriptors' own offsets. */
    CHECK(lseek(a, 0, SEEK_SET) == 0 && lseek(a2, 50, SEEK_SET) == 50);
    FAILS(copy_file_range(a, NULL, a2, NULL, 100, 0), EINVAL);
    CHECK(lseek(a, 0, SEEK_CUR) == 0 && lseek(a2, 0, SEEK_CUR) == 50);
    /* Over the chunk a copy is made in (1 MiB through the shim). */
    int big = open(joined(dir, "big"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(big >= 0 && ftruncate(big, 3 << 20) == 0 && pwrite(big, "x", 1, 0) == 1);
    i = 0, o = 512 << 10;
    FAILS(copy_file_range(big, &i, big, &o, 2 << 20, 0), EINVAL);
    CHECK(pread(big, got, 2, 512 << 10) == 2 && got[0] == 0 && got[1] == 0);
    CHECK(close(big) == 0 && unlink(joined(dir, "big")) == 0);
    /* The count is cut to the end of the input first: what remains may not overlap. */
    i = 9950, o = 9990;
    FAILS(copy_file_range(a, &i, a, &o, 100, 0), EINVAL);
    i = 20000, o = 20000;
    CHECK(copy_file_range(a, &i, a, &o, 100, 0) == 0);
    i = 9950, o = 10000;
    CHECK(copy_file_range(a, &i, a, &o, 100, 0) == 50 && i == 10000 && o == 10050);
    CHECK(ftruncate(a, SIZE) == 0);
    /* Disjoint ranges of one file copy, both ways. */
    i = 26, o = 5200;
    CHECK(copy_file_range(a, &i, a2, &o, 26, 0) == 26 && i == 52 && o == 5226);
    CHECK(pread(a, got, 26, 5200) == 26 && memcmp(got, "abcdefghijklmnopqrstuvwxyz", 26) == 0);
    i = 5200, o = 5226;
    CHECK(copy_file_range(a, &i, a, &o, 26, 0) == 26);
    CHECK(pread(a, got, 26, 5226) == 26 && memcmp(got, "abcdefghijklmnopqrstuvwxyz", 26) == 0);
    close(a2);
}

/* copy_file_range(in, NULL, out, NULL, count, flags) fails with err (the line says which). */
struct refusal {
    int in, out;
    size_t count;
    unsigned flags;
    int err, line;
};
#define REFUSED(in, out, count, flags, err) {(in), (out), (count), (flags), (err), __LINE__}

static void refused(const struct refusal *r, size_t n) {
    for (size_t k = 0; k < n; k++) {
        errno = 0;
        ssize_t got = copy_file_range(r[k].in, NULL, r[k].out, NULL, r[k].count, r[k].flags);
        if (got != -1 || errno != r[k].err) {
            fprintf(stderr, "FAIL line %d: copy_file_range gave %zd (errno %d: %s), not %s\n",
                    r[k].line, got, errno, strerror(errno), strerror(r[k].err));
            exit(1);
        }
    }
}

static void copy_ends_of_other_kinds(int a, int b, int dirfd, int realdir) {
    int p[2], sv[2];
    CHECK(pipe2(p, O_CLOEXEC) == 0 && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    /* An empty pipe as input: EINVAL, not a read that waits. */
    FAILS(copy_file_range(p[0], NULL, b, NULL, 10, 0), EINVAL);
    CHECK(write(p[1], "piped", 5) == 5);
    off_t o = 0;
    FAILS(copy_file_range(p[0], &o, b, NULL, 10, 0), EINVAL);
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    int ro = open(joined(dir, "b"), O_RDONLY | O_CLOEXEC);
    int wo = open(joined(dir, "a"), O_WRONLY | O_CLOEXEC);
    int path = open(joined(dir, "a"), O_PATH | O_CLOEXEC);
    CHECK(null >= 0 && ro >= 0 && wo >= 0 && path >= 0);
    const struct refusal cases[] = {
        /* A pipe, a socket or a device at either end: EINVAL, without reading or writing. */
        REFUSED(p[0], b, 10, 0, EINVAL),
        REFUSED(p[1], b, 10, 0, EINVAL), /* not EBADF */
        REFUSED(a, p[1], 10, 0, EINVAL),
        REFUSED(a, p[0], 10, 0, EINVAL),
        REFUSED(a, sv[0], 10, 0, EINVAL),
        REFUSED(sv[1], b, 10, 0, EINVAL),
        REFUSED(a, null, 10, 0, EINVAL),
        REFUSED(null, b, 10, 0, EINVAL),
        /* A directory at either end: EISDIR, before a pipe's EINVAL and any mode's EBADF. */
        REFUSED(a, dirfd, 10, 0, EISDIR),
        REFUSED(dirfd, b, 10, 0, EISDIR),
        REFUSED(a, realdir, 10, 0, EISDIR),
        REFUSED(realdir, b, 10, 0, EISDIR),
        REFUSED(dirfd, p[1], 10, 0, EISDIR),
        REFUSED(p[0], dirfd, 10, 0, EISDIR),
        REFUSED(dirfd, dirfd, 0, 0, EISDIR),
        /* The kinds before the modes: a pipe and a read-only output are EINVAL. */
        REFUSED(p[0], ro, 10, 0, EINVAL),
        REFUSED(wo, p[1], 10, 0, EINVAL),
        REFUSED(a, ro, 10, 0, EBADF),
        REFUSED(wo, b, 10, 0, EBADF),
        REFUSED(wo, b, 0, 0, EBADF),
        /* Bad descriptors and O_PATH first of all, flags next. */
        REFUSED(path, b, 10, 0, EBADF),
        REFUSED(a, path, 10, 0, EBADF),
        REFUSED(path, dirfd, 10, 0, EBADF),
        REFUSED(999, dirfd, 10, 0, EBADF),
        REFUSED(dirfd, 999, 10, 0, EBADF),
        REFUSED(dirfd, b, 10, 1, EINVAL),
        REFUSED(a, ro, 10, 1, EINVAL),
        REFUSED(a, 999, 10, 1, EBADF),
    };
    refused(cases, sizeof cases / sizeof *cases);
    pipe_holds(p[0], "piped");
    int fds[] = {null, ro, wo, path, p[0], p[1], sv[0], sv[1]};
    for (size_t k = 0; k < sizeof fds / sizeof *fds; k++)
        CHECK(close(fds[k]) == 0);
}

/* Between the two file systems: copy_file_range is EXDEV, sendfile copies. */
static void across_file_systems(int a, int b) {
    int r = open(joined(other, "r"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int rro = open(joined(other, "r"), O_RDONLY | O_CLOEXEC);
    int ro = open(joined(dir, "b"), O_RDONLY | O_CLOEXEC);
    CHECK(r >= 0 && rro >= 0 && ro >= 0 && write(r, "real", 4) == 4);
    off_t i = -1, o = 0;
    const struct refusal cases[] = {
        REFUSED(a, r, 10, 0, EXDEV),
        REFUSED(r, b, 10, 0, EXDEV),
        REFUSED(r, b, 0, 0, EXDEV),
        /* The modes first. */
        REFUSED(a, rro, 10, 0, EBADF),
        REFUSED(r, ro, 10, 0, EBADF),
    };
    refused(cases, sizeof cases / sizeof *cases);
    FAILS(copy_file_range(a, &i, r, &o, 10, 0), EXDEV); /* before the offsets */
    struct stat st;
    CHECK(fstat(r, &st) == 0 && st.st_size == 4);
    /* sendfile, and the raw system call, copy either way (at the output's position). */
    CHECK(lseek(r, 0, SEEK_SET) == 0);
    o = 0;
    CHECK(sendfile(r, a, &o, 26) == 26 && o == 26);
    o = 26;
    CHECK(syscall(SYS_sendfile, r, a, &o, 4) == 4 && o == 30);
    char got[30];
    CHECK(pread(r, got, sizeof got, 0) == 30 && memcmp(got, "abcdefghijklmnopqrstuvwxyzabcd", 30) == 0);
    CHECK(lseek(r, 0, SEEK_SET) == 0 && lseek(b, 0, SEEK_SET) == 0);
    CHECK(syscall(SYS_sendfile, b, r, NULL, 30) == 30 && lseek(r, 0, SEEK_CUR) == 30);
    CHECK(pread(b, got, sizeof got, 0) == 30 && memcmp(got, "abcdefghijklmnopqrstuvwxyzabcd", 30) == 0);
    CHECK(ftruncate(b, 0) == 0 && lseek(b, 0, SEEK_SET) == 0);
    close(r);
    close(rro);
    close(ro);
    CHECK(unlink(joined(other, "r")) == 0);
}

static void copy_offsets(int a, int b) {
    off_t i, o;
    int ro = open(joined(dir, "b"), O_RDONLY | O_CLOEXEC);
    CHECK(ro >= 0);
    /* Offsets that wrap with the count are EOVERFLOW; a negative one that does not, EINVAL. */
    i = -1, o = 0;
    FAILS(copy_file_range(a, &i, b, &o, 100, 0), EOVERFLOW);
    i = 0, o = -5;
    FAILS(copy_file_range(a, &i, b, &o, 100, 0), EOVERFLOW);
    i = -100, o = 0;
    FAILS(copy_file_range(a, &i, b, &o, 10, 0), EINVAL);
    i = 0, o = -100;
    FAILS(copy_file_range(a, &i, b, &o, 10, 0), EINVAL);
    i = -1, o = 0;
    FAILS(copy_file_range(a, &i, b, &o, 0, 0), EINVAL);
    i = 1, o = 0;
    FAILS(copy_file_range(a, &i, b, &o, SIZE_MAX, 0), EOVERFLOW);
    CHECK(i == 1 && o == 0);
    i = -1, o = 0;
    FAILS(copy_file_range(a, &i, ro, &o, 100, 0), EBADF); /* the modes before the offsets */
    i = -1, o = 0;
    FAILS(copy_file_range(a, &i, a, &o, 100, 0), EOVERFLOW);
    /* A count past SSIZE_MAX is cut to the end of the input before it is checked. */
    i = 0, o = 0;
    CHECK(copy_file_range(a, &i, b, &o, SIZE_MAX, 0) == SIZE && i == SIZE && o == SIZE);
    i = 0, o = 0;
    CHECK(copy_file_range(a, &i, b, &o, (size_t)1 << 62, 0) == SIZE);
    unchanged(b);
    /* At or past the end of the input: nothing. */
    i = SIZE, o = 0;
    CHECK(copy_file_range(a, &i, b, &o, 100, 0) == 0 && i == SIZE && o == 0);
    i = (off_t)1 << 40, o = 0;
    CHECK(copy_file_range(a, &i, b, &o, 100, 0) == 0);
    CHECK(copy_file_range(a, NULL, b, NULL, 0, 0) == 0);
    /* Into past the largest file: EFBIG, even with nothing to copy (as on ext4). */
    i = 0, o = (off_t)1 << 50;
    if (tmpfs)
        CHECK(copy_file_range(a, &i, b, &o, 100, 0) == 100 && ftruncate(b, SIZE) == 0);
    else
        FAILS(copy_file_range(a, &i, b, &o, 100, 0), EFBIG);
    i = SIZE, o = (off_t)1 << 50;
    if (!tmpfs)
        FAILS(copy_file_range(a, &i, b, &o, 100, 0), EFBIG);
    close(ro);
}

static void sendfile_ends(int a, int b, int dirfd, int realdir) {
    int p[2], sv[2];
    CHECK(pipe2(p, O_CLOEXEC) == 0 && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    off_t o = 0;
    /* Into a pipe or a socket from a file: sent. */
    CHECK(sendfile(p[1], a, &o, 5) == 5 && o == 5);
    pipe_holds(p[0], "abcde");
    CHECK(lseek(a, 20, SEEK_SET) == 20 && sendfile(sv[0], a, NULL, 3) == 3);
    CHECK(lseek(a, 0, SEEK_CUR) == 23);
    char got[8];
    CHECK(read(sv[1], got, sizeof got) == 3 && memcmp(got, "uvw", 3) == 0);
    o = SIZE;
    CHECK(sendfile(p[1], a, &o, 5) == 0 && o == SIZE);
    /* From a pipe or a socket into a file: EINVAL, the data left where it is (ESPIPE with
     * an offset); an empty pipe too, without waiting. */
    FAILS(sendfile(b, p[0], NULL, 10), EINVAL);
    CHECK(write(p[1], "piped", 5) == 5);
    FAILS(sendfile(b, p[0], NULL, 10), EINVAL);
    o = 0;
    FAILS(sendfile(b, p[0], &o, 10), ESPIPE);
    FAILS(sendfile(999, p[0], &o, 10), ESPIPE);
    pipe_holds(p[0], "piped");
    CHECK(write(sv[1], "sock", 4) == 4);
    FAILS(sendfile(b, sv[0], NULL, 10), EINVAL);
    CHECK(read(sv[0], got, sizeof got) == 4);
    /* From a directory: EINVAL, into a file, a pipe or a socket; once the output passed. */
    o = 0;
    FAILS(sendfile(b, dirfd, &o, 10), EINVAL);
    FAILS(sendfile(p[1], dirfd, NULL, 10), EINVAL);
    /* A count of 0 reads nothing from a directory, but an input that cannot seek is
     * refused whatever the count. */
    CHECK(sendfile(b, dirfd, NULL, 0) == 0 && sendfile(p[1], dirfd, NULL, 0) == 0);
    FAILS(sendfile(b, p[0], NULL, 0), EINVAL);
    FAILS(sendfile(b, sv[0], NULL, 0), EINVAL);
    FAILS(sendfile(sv[0], dirfd, NULL, 10), EINVAL);
    FAILS(sendfile(b, realdir, NULL, 10), EINVAL);
    FAILS(sendfile(dirfd, a, NULL, 10), EBADF); /* a directory is never open for writing */
    int ro = open(joined(dir, "b"), O_RDONLY | O_CLOEXEC);
    int wo = open(joined(dir, "a"), O_WRONLY | O_CLOEXEC);
    int ap = open(joined(dir, "b"), O_WRONLY | O_APPEND | O_CLOEXEC);
    CHECK(ro >= 0 && wo >= 0 && ap >= 0);
    FAILS(sendfile(ro, dirfd, NULL, 10), EBADF);
    FAILS(sendfile(ap, dirfd, NULL, 10), EINVAL);
    FAILS(sendfile(b, wo, NULL, 10), EBADF);
    FAILS(sendfile(p[1], wo, NULL, 10), EBADF);
    FAILS(sendfile(ro, a, NULL, 10), EBADF);
    FAILS(sendfile(ap, a, NULL, 10), EINVAL);
    /* The input's offset and count are checked before the output. */
    o = -1;
    FAILS(sendfile(b, a, &o, 10), EINVAL);
    FAILS(sendfile(999, a, &o, 10), EINVAL);
    o = 0;
    FAILS(sendfile(b, a, &o, SIZE_MAX), EINVAL);
    FAILS(sendfile(999, a, &o, 0), EBADF);
    /* Between two places of one file: no overlap check. */
    o = 0;
    CHECK(lseek(a, 26, SEEK_SET) == 26 && sendfile(a, a, &o, 10) == 10 && o == 10);
    unchanged(a);
    CHECK(sendfile(b, a, NULL, 0) == 0);
    /* From past the largest file: EOVERFLOW (as on ext4, where files are smaller than on
     * tmpfs). */
    o = (off_t)1 << 50;
    if (tmpfs)
        CHECK(sendfile(p[1], a, &o, 1) == 0);
    else
        FAILS(sendfile(p[1], a, &o, 1), EOVERFLOW);
    close(ro);
    close(wo);
    close(ap);
    close(p[0]);
    close(p[1]);
    close(sv[0]);
    close(sv[1]);
}

int main(int argc, char **argv) {
    CHECK(argc == 3 && strlen(argv[1]) < 2000 && strlen(argv[2]) < 2000);
    strcpy(dir, argv[1]);
    strcpy(other, argv[2]);
    setvbuf(stdout, NULL, _IONBF, 0);
    struct statfs sf;
    CHECK(statfs(dir, &sf) == 0);
    tmpfs = sf.f_type == 0x01021994; /* TMPFS_MAGIC */
    int a = open(joined(dir, "a"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int b = open(joined(dir, "b"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(mkdir(joined(dir, "d"), 0755) == 0 || errno == EEXIST);
    CHECK(mkdir(joined(other, "d"), 0755) == 0 || errno == EEXIST);
    int dirfd = open(joined(dir, "d"), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int realdir = open(joined(other, "d"), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(a >= 0 && b >= 0 && dirfd >= 0 && realdir >= 0);
    static char buf[SIZE];
    for (int i = 0; i < SIZE; i++)
        buf[i] = 'a' + i % 26;
    CHECK(write(a, buf, SIZE) == SIZE);
    copy_within_one_file(a);
    unchanged(a);
    copy_ends_of_other_kinds(a, b, dirfd, realdir);
    copy_offsets(a, b);
    across_file_systems(a, b);
    sendfile_ends(a, b, dirfd, realdir);
    unchanged(a);
    close(a);
    close(b);
    close(dirfd);
    close(realdir);
    CHECK(unlink(joined(dir, "a")) == 0 && unlink(joined(dir, "b")) == 0);
    CHECK(rmdir(joined(dir, "d")) == 0 && rmdir(joined(other, "d")) == 0);
    printf("XFER-OK\n");
    return 0;
}
