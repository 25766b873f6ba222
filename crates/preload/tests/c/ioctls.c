/*
 * ioctl on files of DIR as Linux's file systems answer it (checked on tmpfs and ext4):
 * FIONREAD, FIGETBSZ, FIOQSIZE, FIONBIO, FICLONE/FICLONERANGE/FIDEDUPERANGE (no reflinks:
 * EOPNOTSUPP after the kernel's checks, EXDEV across file systems), inode flags and
 * extended attributes (none kept, none set), FS_IOC_FIEMAP, a tty request and an unknown
 * one; on a description shared with a forked child too. Through the shim the kernel would
 * answer for the placeholder behind a pool descriptor instead (found by probing Node.js:
 * copyFile with COPYFILE_FICLONE_FORCE got EINVAL).
 *
 * Usage: ioctls DIR OTHER_DIR   (OTHER_DIR on another file system). Prints IOCTLS-OK.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "check.h"

#define FAILS(call, err) CHECK((call) == -1 && errno == (err))

static char dir[4096], other[4096];

/* The answers that depend on the file and the description's offset. */
static void sizes(int fd, int dirfd) {
    int n = -1;
    CHECK(lseek(fd, 0, SEEK_SET) == 0 && ioctl(fd, FIONREAD, &n) == 0 && n == 10000);
    CHECK(lseek(fd, 4000, SEEK_SET) == 4000 && ioctl(fd, FIONREAD, &n) == 0 && n == 6000);
    /* Past the end: Linux gives the difference, negative. */
    CHECK(lseek(fd, 20000, SEEK_SET) == 20000 && ioctl(fd, FIONREAD, &n) == 0 && n == -10000);
    FAILS(ioctl(fd, FIONREAD, NULL), EFAULT);
    FAILS(ioctl(dirfd, FIONREAD, &n), ENOTTY);
    int bs = 0;
    CHECK(ioctl(fd, FIGETBSZ, &bs) == 0 && bs == 4096);
    struct stat st;
    long long q = -1;
    /* fsync: ext4's delayed allocation counts its blocks in st_blocks only. */
    CHECK(fsync(fd) == 0 && fstat(fd, &st) == 0 && ioctl(fd, FIOQSIZE, &q) == 0 && q == st.st_blocks * 512);
    CHECK(q >= 10000);
}

static void clones(int a, int b, int dirfd) {
    int ro = open(joined(dir, "a"), O_RDONLY | O_CLOEXEC);
    int ap = open(joined(dir, "b"), O_WRONLY | O_APPEND | O_CLOEXEC);
    int path = open(joined(dir, "a"), O_PATH | O_CLOEXEC);
    int elsewhere = open(joined(other, "x"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(ro >= 0 && ap >= 0 && path >= 0 && elsewhere >= 0);
    FAILS(ioctl(b, FICLONE, a), EOPNOTSUPP);
    struct file_clone_range r = {.src_fd = a, .src_length = 4096};
    FAILS(ioctl(b, FICLONERANGE, &r), EOPNOTSUPP);
    FAILS(ioctl(b, FICLONE, dirfd), EISDIR);
    FAILS(ioctl(dirfd, FICLONE, a), EISDIR);
    FAILS(ioctl(ap, FICLONE, a), EBADF);
    FAILS(ioctl(ro, FICLONE, a), EBADF);
    FAILS(ioctl(b, FICLONE, 999), EBADF);
    FAILS(ioctl(b, FICLONE, path), EBADF);
    /* Between two file systems, either way. */
    FAILS(ioctl(b, FICLONE, elsewhere), EXDEV);
    FAILS(ioctl(elsewhere, FICLONE, a), EXDEV);
    r.src_fd = a;
    FAILS(ioctl(elsewhere, FICLONERANGE, &r), EXDEV);
    struct {
        struct file_dedupe_range r;
        struct file_dedupe_range_info i[1];
    } d = {.r = {.src_length = 4096, .dest_count = 1}, .i = {{.dest_fd = b}}};
    FAILS(ioctl(a, FIDEDUPERANGE, &d), EOPNOTSUPP);
    /* O_PATH takes no ioctl at all. */
    int n;
    FAILS(ioctl(path, FIONREAD, &n), EBADF);
    FAILS(ioctl(path, FIGETBSZ, &n), EBADF);
    close(ro);
    close(ap);
    close(path);
    close(elsewhere);
    unlink(joined(other, "x"));
}

static void attributes(int fd, int dirfd) {
    int flags = -1;
    CHECK(ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0 && (flags & FS_COMPR_FL) == 0);
    flags = 0;
    CHECK(ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0);
    flags = -1;
    CHECK(ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0 && (flags & FS_IMMUTABLE_FL) == 0);
    FAILS(ioctl(fd, FS_IOC_GETFLAGS, NULL), EFAULT);
    flags = -1;
    CHECK(ioctl(dirfd, FS_IOC_GETFLAGS, &flags) == 0 && (flags & FS_IMMUTABLE_FL) == 0);
    struct fsxattr x;
    memset(&x, 0xff, sizeof x);
    CHECK(ioctl(fd, FS_IOC_FSGETXATTR, &x) == 0 && x.fsx_xflags == 0 && x.fsx_projid == 0);
    memset(&x, 0, sizeof x);
    CHECK(ioctl(fd, FS_IOC_FSSETXATTR, &x) == 0);
    struct termios t;
    FAILS(ioctl(fd, TCGETS, &t), ENOTTY);
    CHECK(!isatty(fd));
    FAILS(ioctl(fd, 0x1234, 0), ENOTTY);
    /* Setting flags is the owner's (or root's): another user gets EPERM. */
    if (geteuid() == 0) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            CHECK(setuid(65534) == 0);
            flags = 0;
            FAILS(ioctl(fd, FS_IOC_SETFLAGS, &flags), EPERM);
            CHECK(ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0);
            _exit(0);
        }
        int status;
        CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
}

static void descriptor_flags(int fd) {
    CHECK(ioctl(fd, FIONBIO, &(int){1}) == 0 && (fcntl(fd, F_GETFL) & O_NONBLOCK));
    CHECK(ioctl(fd, FIONBIO, &(int){0}) == 0 && !(fcntl(fd, F_GETFL) & O_NONBLOCK));
    CHECK(ioctl(fd, FIOCLEX) == 0 && (fcntl(fd, F_GETFD) & FD_CLOEXEC));
    CHECK(ioctl(fd, FIONCLEX) == 0 && !(fcntl(fd, F_GETFD) & FD_CLOEXEC));
    CHECK(ioctl(fd, FIOASYNC, &(int){0}) == 0);
}

int main(int argc, char **argv) {
    CHECK(argc == 3 && strlen(argv[1]) < 2000 && strlen(argv[2]) < 2000);
    strcpy(dir, argv[1]);
    strcpy(other, argv[2]);
    setvbuf(stdout, NULL, _IONBF, 0);
    int a = open(joined(dir, "a"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int b = open(joined(dir, "b"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(mkdir(joined(dir, "d"), 0755) == 0 || errno == EEXIST);
    int dirfd = open(joined(dir, "d"), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(a >= 0 && b >= 0 && dirfd >= 0);
    char buf[10000];
    memset(buf, 'x', sizeof buf);
    CHECK(write(a, buf, sizeof buf) == sizeof buf);
    sizes(a, dirfd);
    clones(a, b, dirfd);
    attributes(a, dirfd);
    descriptor_flags(a);
    /* A description a forked child shares (through the shim, published to a memfd): the
     * same answers, for the offset the two share. */
    int shared = open(joined(dir, "a"), O_RDWR);
    CHECK(shared >= 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        CHECK(lseek(shared, 1000, SEEK_SET) == 1000);
        _exit(0);
    }
    int status, n = -1;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(ioctl(shared, FIONREAD, &n) == 0 && n == 9000);
    FAILS(ioctl(b, FICLONE, shared), EOPNOTSUPP);
    descriptor_flags(shared);
    sizes(shared, dirfd);
    close(shared);
    close(a);
    close(b);
    close(dirfd);
    CHECK(unlink(joined(dir, "a")) == 0 && unlink(joined(dir, "b")) == 0 && rmdir(joined(dir, "d")) == 0);
    printf("IOCTLS-OK\n");
    return 0;
}
