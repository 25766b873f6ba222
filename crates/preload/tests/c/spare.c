/* A number the program closed is closed to it, also when the shim keeps the number's
 * placeholder open for its next open (a "spare", in-process pools): every call on it
 * fails with EBADF instead of acting on the /dev/null behind it. Run in-process by
 * tests/shim.rs; argv[1] is the pool's mount prefix. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv) {
    CHECK(argc == 2);
    char path[4096];
    snprintf(path, sizeof path, "%s/spare", argv[1]);
    int fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    CHECK(fd >= 3 && write(fd, "n", 1) == 1);
    CHECK(close(fd) == 0);
    /* The number is closed; the shim may keep it for its next open. */
    char ch;
    struct stat st;
    int n = 0;
    CHECK(read(fd, &ch, 1) == -1 && errno == EBADF);
    CHECK(write(fd, "x", 1) == -1 && errno == EBADF);
    CHECK(pread(fd, &ch, 1, 0) == -1 && errno == EBADF);
    CHECK(pwrite(fd, "x", 1, 0) == -1 && errno == EBADF);
    CHECK(lseek(fd, 0, SEEK_SET) == -1 && errno == EBADF);
    CHECK(fstat(fd, &st) == -1 && errno == EBADF);
    CHECK(fstatat(fd, "", &st, AT_EMPTY_PATH) == -1 && errno == EBADF);
    CHECK(fsync(fd) == -1 && errno == EBADF);
    CHECK(ftruncate(fd, 0) == -1 && errno == EBADF);
    CHECK(fchmod(fd, 0600) == -1 && errno == EBADF);
    CHECK(dup(fd) == -1 && errno == EBADF);
    CHECK(dup2(fd, 100) == -1 && errno == EBADF);
    CHECK(flock(fd, LOCK_SH) == -1 && errno == EBADF);
    CHECK(ioctl(fd, FIONREAD, &n) == -1 && errno == EBADF);
    CHECK(fdopen(fd, "r") == NULL && errno == EBADF);
    CHECK(fchdir(fd) == -1 && errno == EBADF);
    CHECK(lockf(fd, F_TEST, 0) == -1 && errno == EBADF);
    CHECK(posix_fadvise(fd, 0, 0, POSIX_FADV_NORMAL) == EBADF);
    CHECK(posix_fallocate(fd, 0, 1) == EBADF);
    int other = open("/dev/zero", O_RDONLY | O_CLOEXEC); /* the kernel's */
    CHECK(other >= 0 && other != fd);
    CHECK(copy_file_range(other, NULL, fd, NULL, 1, 0) == -1 && errno == EBADF);
    CHECK(sendfile(fd, other, NULL, 1) == -1 && errno == EBADF);
    CHECK(close(other) == 0);
    CHECK(fcntl(fd, F_GETFD) == -1 && errno == EBADF);
    CHECK(close(fd) == -1 && errno == EBADF);
    /* The next open takes the number, as the kernel would give it. */
    int again = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(again == fd && read(again, &ch, 1) == 1 && ch == 'n');
    CHECK(close(again) == 0);
    puts("SPARE-OK");
    return 0;
}
