/* FIFOs, sockets and device nodes in a new directory "special" of DIR (argv[1]): in the
 * pool through the shim, or in a real directory without it, where every expectation here
 * is Linux's own (tests/special.rs runs both). Devices are made only as root (EPERM
 * otherwise), and open only where the file system is not mounted nodev (statvfs says; the
 * pool says it is). Prints SPECIAL-OK. */
#define _GNU_SOURCE
#include "check.h"
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

/* The call failed with `e`. */
#define FAILS(call, e)                                                                     \
    do {                                                                                   \
        errno = 0;                                                                         \
        CHECK((call) < 0 && errno == (e));                                                 \
    } while (0)

static struct stat lst(const char *name) {
    struct stat st;
    CHECK(lstat(name, &st) == 0);
    return st;
}

/* The d_type readdir gives `name` in the current directory. */
static int dtype(const char *name) {
    DIR *d = opendir(".");
    CHECK(d != NULL);
    struct dirent *e;
    int t = -1;
    while ((e = readdir(d)) != NULL)
        if (!strcmp(e->d_name, name))
            t = e->d_type;
    closedir(d);
    return t;
}

/* A child opens the FIFO by name for writing with `flags` and writes `what`; this process
 * opens it for reading and reads it: each open waits for the other. */
static void across_processes(const char *fifo, int flags, const char *what) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int w = open(fifo, flags, 0644);
        _exit(w >= 0 && write(w, what, strlen(what)) == (ssize_t)strlen(what) ? 0 : 1);
    }
    int r = open(fifo, O_RDONLY);
    CHECK(r >= 0);
    char buf[64] = {0};
    ssize_t n = 0, got;
    while ((got = read(r, buf + n, sizeof buf - 1 - n)) > 0)
        n += got;
    CHECK(got == 0 && !strcmp(buf, what));
    close(r);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void make_and_stat(int root) {
    CHECK(mkfifo("fifo", 0666) == 0);
    FAILS(mkfifo("fifo", 0666), EEXIST);
    CHECK(mknod("sock", S_IFSOCK | 0755, 0) == 0);
    CHECK(mknod("reg", S_IFREG | 0644, 0) == 0);
    CHECK(mknod("zero", 0600, 0) == 0);
    FAILS(mknod("dir", S_IFDIR | 0755, 0), EPERM);
    FAILS(mknod("bad", 0050000 | 0644, 0), EINVAL);
    /* The name is looked up before the caller's right to make devices. */
    FAILS(mknod("fifo", S_IFCHR | 0644, makedev(1, 3)), EEXIST);
    FAILS(mknod("wide", S_IFCHR | 0644, 1ULL << 32), EINVAL);
    int dirfd = open(".", O_RDONLY | O_DIRECTORY);
    CHECK(dirfd >= 0);
    CHECK(mkfifoat(dirfd, "fifo2", 0600) == 0);
    CHECK(mknodat(dirfd, "sock2", S_IFSOCK | 0600, 0) == 0);
    if (root) {
        CHECK(mknod("null", S_IFCHR | 0666, makedev(1, 3)) == 0);
        CHECK(mknodat(dirfd, "blk", S_IFBLK | 0600, makedev(8, 1)) == 0);
    } else {
        FAILS(mknod("null", S_IFCHR | 0666, makedev(1, 3)), EPERM);
    }

    struct stat st = lst("fifo");
    CHECK(S_ISFIFO(st.st_mode) && (st.st_mode & 07777) == 0644);
    CHECK(st.st_size == 0 && st.st_rdev == 0 && st.st_nlink == 1);
    CHECK(S_ISSOCK(lst("sock").st_mode) && lst("sock").st_rdev == 0);
    CHECK(S_ISREG(lst("reg").st_mode) && S_ISREG(lst("zero").st_mode));
    CHECK(S_ISFIFO(lst("fifo2").st_mode) && S_ISSOCK(lst("sock2").st_mode));
    CHECK(dtype("fifo") == DT_FIFO && dtype("sock") == DT_SOCK && dtype("reg") == DT_REG);
    if (root) {
        CHECK(stat("null", &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3));
        CHECK(fstatat(dirfd, "blk", &st, AT_SYMLINK_NOFOLLOW) == 0);
        CHECK(S_ISBLK(st.st_mode) && major(st.st_rdev) == 8 && minor(st.st_rdev) == 1);
        struct statx sx;
        CHECK(statx(AT_FDCWD, "null", AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &sx) == 0);
        CHECK(S_ISCHR(sx.stx_mode) && sx.stx_rdev_major == 1 && sx.stx_rdev_minor == 3);
        CHECK(dtype("null") == DT_CHR && dtype("blk") == DT_BLK);
    }
    close(dirfd);
}

static void pipes(void) {
    /* A reader that does not wait, then a writer, in one process. */
    int r = open("fifo", O_RDONLY | O_NONBLOCK);
    CHECK(r >= 0);
    int w = open("fifo", O_WRONLY);
    CHECK(w >= 0);
    struct stat st;
    CHECK(fstat(r, &st) == 0 && S_ISFIFO(st.st_mode));
    CHECK(write(w, "ping", 4) == 4);
    char buf[8] = {0};
    CHECK(read(r, buf, sizeof buf) == 4 && !memcmp(buf, "ping", 4));
    FAILS(read(r, buf, sizeof buf), EAGAIN);
    close(w);
    CHECK(read(r, buf, sizeof buf) == 0);
    close(r);
    /* No reader: a writer that may not wait is refused. */
    FAILS(open("fifo", O_WRONLY | O_NONBLOCK), ENXIO);
    /* Between processes, by name; O_CREAT and O_TRUNC (a shell's `>`) open it too. */
    across_processes("fifo", O_WRONLY, "from a child");
    across_processes("fifo", O_WRONLY | O_CREAT | O_TRUNC, "created? no, opened");
    FAILS(open("fifo", O_WRONLY | O_CREAT | O_EXCL, 0644), EEXIST);
    FAILS(open("fifo", O_RDONLY | O_DIRECTORY), ENOTDIR);
    CHECK(S_ISFIFO(lst("fifo").st_mode));
}

static void refused(int root) {
    FAILS(open("sock", O_RDONLY), ENXIO);
    FAILS(open("sock", O_WRONLY | O_NONBLOCK), ENXIO);
    if (root) {
        struct statvfs vfs;
        CHECK(statvfs(".", &vfs) == 0);
        if (vfs.f_flag & ST_NODEV) {
            FAILS(open("null", O_RDONLY), EACCES);
            FAILS(open("blk", O_RDONLY | O_NONBLOCK), EACCES);
        } else {
            int fd = open("null", O_RDWR);
            CHECK(fd >= 0 && write(fd, "x", 1) == 1);
            close(fd);
        }
        FAILS(truncate("null", 0), EINVAL);
    }
    FAILS(truncate("fifo", 0), EINVAL);
    FAILS(truncate("sock", 0), EINVAL);
    CHECK(access("fifo", R_OK | W_OK) == 0);
}

static void names_and_attributes(void) {
    CHECK(link("fifo", "fifo.link") == 0);
    CHECK(lst("fifo").st_nlink == 2);
    CHECK(rename("fifo.link", "moved") == 0);
    CHECK(chmod("moved", 0600) == 0);
    struct stat st = lst("fifo");
    CHECK(S_ISFIFO(st.st_mode) && (st.st_mode & 07777) == 0600);
    struct timespec ts[2] = {{1000, 5}, {2000, 6}};
    CHECK(utimensat(AT_FDCWD, "moved", ts, AT_SYMLINK_NOFOLLOW) == 0);
    CHECK(lst("fifo").st_mtim.tv_sec == 2000 && lst("fifo").st_atim.tv_nsec == 5);
    CHECK(unlink("moved") == 0);
    CHECK(lst("fifo").st_nlink == 1);
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    umask(022);
    int root = geteuid() == 0;
    CHECK(chdir(argv[1]) == 0);
    CHECK(mkdir("special", 0755) == 0);
    CHECK(chdir("special") == 0);
    make_and_stat(root);
    pipes();
    refused(root);
    names_and_attributes();
    const char *all[] = {"fifo", "fifo2", "sock", "sock2", "reg", "zero", "null", "blk"};
    for (unsigned i = 0; i < sizeof all / sizeof *all; i++)
        CHECK(unlink(all[i]) == 0 || (!root && errno == ENOENT));
    CHECK(chdir("..") == 0);
    CHECK(rmdir("special") == 0);
    printf("SPECIAL-OK\n");
    return 0;
}
