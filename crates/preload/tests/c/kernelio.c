/*
 * Reads and writes that bypass libc (Linux AIO, the raw system call instruction, as
 * MariaDB's io_uring and Go programs make them) on a file of DIR opened close-on-exec
 * (private to the process) and one opened inheritable (shared through the shim's page):
 * each either does what it says, the file then holding the bytes written and the read
 * giving the file's bytes, or fails. Never success without the bytes. On a real file
 * system they succeed; through the shim they fail with EBADF. (Before 2026-11-27 a
 * private descriptor was /dev/null opened for writing: the writes reported success and
 * the file stayed empty, MariaDB's data files zeros; a shared one's AIO read at offset 0
 * returned the shim's page.)
 *
 * Usage: kernelio DIR. Prints KERNELIO-OK.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "check.h"

static char dir[4096];

/* pwrite64 or pread64 by the system call instruction, as a program without libc does. */
static long raw_io(long nr, int fd, void *buf, long n, long off) {
    long r;
    register long r10 __asm__("r10") = off;
    __asm__ volatile("syscall"
                     : "=a"(r)
                     : "0"(nr), "D"((long)fd), "S"(buf), "d"(n), "r"(r10)
                     : "rcx", "r11", "memory");
    return r;
}

/* One Linux AIO request; its result (bytes or -errno). */
static long aio(int fd, int op, void *buf, long n, long off) {
    aio_context_t ctx = 0;
    CHECK(syscall(SYS_io_setup, 4, &ctx) == 0);
    struct iocb cb;
    memset(&cb, 0, sizeof cb);
    cb.aio_lio_opcode = op;
    cb.aio_fildes = fd;
    cb.aio_buf = (uintptr_t)buf;
    cb.aio_nbytes = n;
    cb.aio_offset = off;
    struct iocb *cbs[1] = {&cb};
    long r;
    if (syscall(SYS_io_submit, ctx, 1, cbs) == 1) {
        struct io_event ev;
        CHECK(syscall(SYS_io_getevents, ctx, 1, 1, &ev, NULL) == 1);
        r = ev.res;
    } else {
        r = -errno;
    }
    CHECK(syscall(SYS_io_destroy, ctx) == 0);
    return r;
}

/* Whether the file at fd holds `want` (n bytes) at `off`, read through libc. */
static int holds(int fd, const char *want, long n, long off) {
    char got[4096];
    return pread(fd, got, n, off) == n && memcmp(got, want, n) == 0;
}

static void one(const char *name, int flags) {
    int fd = open(joined(dir, name), O_RDWR | O_CREAT | O_TRUNC | flags, 0644);
    CHECK(fd >= 0);
    static char data[4096], back[4096];
    memset(data, 'Z', sizeof data);
    CHECK(pwrite(fd, "0123456789", 10, 0) == 10);
    long w = aio(fd, IOCB_CMD_PWRITE, data, 4096, 100);
    CHECK(w == -EBADF || (w == 4096 && holds(fd, data, 4096, 100)));
    w = raw_io(SYS_pwrite64, fd, "raw", 3, 10);
    CHECK(w == -EBADF || (w == 3 && holds(fd, "raw", 3, 10)));
    memset(back, 0, sizeof back);
    long r = aio(fd, IOCB_CMD_PREAD, back, 10, 0);
    CHECK(r < 0 || (r == 10 && memcmp(back, "0123456789", 10) == 0));
    memset(back, 0, sizeof back);
    r = raw_io(SYS_pread64, fd, back, 10, 0);
    CHECK(r < 0 || (r == 10 && memcmp(back, "0123456789", 10) == 0));
    /* The file is as libc's calls left it, plus what the kernel said it wrote. */
    CHECK(holds(fd, "0123456789", 10, 0) || holds(fd, "0123456789raw", 13, 0));
    CHECK(close(fd) == 0 && unlink(joined(dir, name)) == 0);
}

int main(int argc, char **argv) {
    CHECK(argc == 2 && strlen(argv[1]) < 2000);
    strcpy(dir, argv[1]);
    setvbuf(stdout, NULL, _IONBF, 0);
    one("private", O_CLOEXEC);
    one("shared", 0);
    printf("KERNELIO-OK\n");
    return 0;
}
