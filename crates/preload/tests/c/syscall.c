/* syscall(2) of renameat2 with paths under the prefix (argv[1]), as gnulib's renameat2
 * makes it; the descriptor calls libuv (Node.js) makes raw (close, statx, read, write...)
 * on pool files; and of another number (passed to the kernel). argv[2] is a directory
 * outside the pool. Prints SYSCALL-OK. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

int main(int argc, char **argv) {
    CHECK(argc == 3);
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/a", argv[1]);
    snprintf(b, sizeof b, "%s/b", argv[1]);
    int fd = open(a, O_CREAT | O_WRONLY, 0644);
    CHECK(fd >= 0 && write(fd, "A", 1) == 1 && close(fd) == 0);
    fd = open(b, O_CREAT | O_WRONLY, 0644);
    CHECK(fd >= 0 && close(fd) == 0);
    errno = 0;
    CHECK(syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, RENAME_NOREPLACE) == -1 &&
          errno == EEXIST);
    CHECK(syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, 0) == 0);
    CHECK(access(a, F_OK) == -1 && errno == ENOENT);
    struct stat st;
    CHECK(stat(b, &st) == 0 && st.st_size == 1);
    CHECK(syscall(SYS_getpid) == getpid());

    /* Descriptor calls made raw on a pool file. */
    char c[512], real[512], buf[64];
    snprintf(c, sizeof c, "%s/c", argv[1]);
    snprintf(real, sizeof real, "%s/real.txt", argv[2]);
    fd = syscall(SYS_openat, AT_FDCWD, c, O_CREAT | O_RDWR | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(syscall(SYS_write, fd, "hello raw", 9) == 9);
    CHECK(syscall(SYS_pwrite64, fd, "R", 1, 6) == 1);
    CHECK(syscall(SYS_lseek, fd, 0, SEEK_SET) == 0);
    memset(buf, 0, sizeof buf);
    CHECK(syscall(SYS_read, fd, buf, sizeof buf) == 9 && strcmp(buf, "hello Raw") == 0);
    memset(buf, 0, sizeof buf);
    CHECK(syscall(SYS_pread64, fd, buf, 3, 6) == 3 && strcmp(buf, "Raw") == 0);
    struct iovec iov = {.iov_base = buf, .iov_len = 5};
    memset(buf, 0, sizeof buf);
    CHECK(syscall(SYS_preadv2, fd, &iov, 1, 0, 0, 0) == 5 && strcmp(buf, "hello") == 0);
    CHECK(syscall(SYS_fstat, fd, &st) == 0 && st.st_size == 9);
    struct statx sx;
    CHECK(syscall(SYS_statx, AT_FDCWD, c, 0, STATX_SIZE, &sx) == 0 && sx.stx_size == 9);
    CHECK(syscall(SYS_newfstatat, AT_FDCWD, c, &st, 0) == 0 && st.st_size == 9);
    CHECK(syscall(SYS_ftruncate, fd, 5) == 0 && syscall(SYS_fsync, fd) == 0);
    CHECK(stat(c, &st) == 0 && st.st_size == 5);
    /* A raw close frees the number in the shim too: a real file that gets it next is
     * read, not the pool file (libuv's way of closing). */
    CHECK(syscall(SYS_close, fd) == 0);
    int rfd = open(real, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CHECK(rfd >= 0 && write(rfd, "REAL", 4) == 4 && close(rfd) == 0);
    rfd = open(real, O_RDONLY);
    CHECK(rfd == fd);
    memset(buf, 0, sizeof buf);
    CHECK(read(rfd, buf, sizeof buf) == 4 && strcmp(buf, "REAL") == 0);
    CHECK(fstat(rfd, &st) == 0 && st.st_size == 4 && close(rfd) == 0);
    errno = 0;
    CHECK(syscall(SYS_close, fd) == -1 && errno == EBADF);
    printf("SYSCALL-OK\n");
    return 0;
}
