/* A shared mapping shows what other processes write to the file with write(2), including
 * processes that do not map it themselves (SQLite with mmap_size reads its database through
 * a mapping and other connections write it with pwrite). argv[1]: the mount prefix. Run
 * through a daemon. The writers are this program again, run by fork and exec (a forked
 * child that did not exec would still hold the parent's mappings). Also a hole punched and
 * a range zeroed (fallocate). Prints MAPSHARE-OK. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <unistd.h>

static const char *self;

static void wait_ok(pid_t pid) {
    int st;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* Run this program as `self ROLE path [arg]` and wait for it to succeed. */
static void in_child_arg(const char *role, const char *path, const char *arg) {
    pid_t pid = fork();
    if (pid == 0) {
        execl(self, self, role, path, arg, (char *)NULL);
        _exit(127);
    }
    wait_ok(pid);
}

static void in_child(const char *role, const char *path) {
    in_child_arg(role, path, NULL);
}

/* Appends "xyz" through O_APPEND, then pwrite "QQQ" at 0 on that descriptor, which Linux
 * puts at the end of file as well. */
static void append(const char *path) {
    int fd = open(path, O_WRONLY | O_APPEND);
    CHECK(fd >= 0);
    CHECK(write(fd, "xyz", 3) == 3);
    CHECK(pwrite(fd, "QQQ", 3, 0) == 3);
    CHECK(close(fd) == 0);
}

/* A shared mapping of a descriptor this image inherited and never used. */
static void map_inherited(int fd) {
    char *p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED);
    CHECK(p[0] == 'a' || p[0] == 'h');
    CHECK(munmap(p, 4096) == 0);
}

static void write_hello(const char *path) {
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0);
    CHECK(pwrite(fd, "hello from a child", 18, 100) == 18);
    CHECK(pwrite(fd, "second page", 11, 4096 + 7) == 11);
    CHECK(close(fd) == 0);
}

/* Punches a hole over "hello from a child" (mode 0), or zeroes that range (mode 1). */
static void clear(const char *path, int zero) {
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    int mode = zero ? FALLOC_FL_ZERO_RANGE : FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
    CHECK(fallocate(fd, mode, 100, 18) == 0);
    CHECK(close(fd) == 0);
}

static void write_again(const char *path) {
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    CHECK(pwrite(fd, "again", 5, 100) == 5);
    CHECK(close(fd) == 0);
}

int main(int argc, char **argv) {
    CHECK(argc >= 2);
    self = argv[0];
    if (argc == 3 && strcmp(argv[1], "hello") == 0) {
        write_hello(argv[2]);
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "again") == 0) {
        write_again(argv[2]);
        return 0;
    }
    if (argc == 3 && (strcmp(argv[1], "punch") == 0 || strcmp(argv[1], "zero") == 0)) {
        clear(argv[2], argv[1][0] == 'z');
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "append") == 0) {
        append(argv[2]);
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "inherited") == 0) {
        map_inherited(atoi(argv[3]));
        return 0;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/mapshare", argv[1]);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    char page[8192];
    memset(page, 'a', sizeof page);
    CHECK(write(fd, page, sizeof page) == (ssize_t)sizeof page);

    /* A read-only shared mapping of a file open for writing (SQLite's). */
    char *p = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED);
    CHECK(p[100] == 'a');
    in_child("hello", path);
    CHECK(memcmp(p + 100, "hello from a child", 18) == 0);
    CHECK(memcmp(p + 4096 + 7, "second page", 11) == 0);

    /* A second mapping, writable, of the same file: one backing file, both see it. */
    char *q = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(q != MAP_FAILED);
    in_child("again", path);
    CHECK(memcmp(p + 100, "again from a child", 18) == 0);
    CHECK(memcmp(q + 100, "again from a child", 18) == 0);
    CHECK(munmap(q, 8192) == 0 && munmap(p, 8192) == 0);

    /* Mapped anew after the writes: the file's contents. */
    p = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED);
    CHECK(memcmp(p + 100, "again from a child", 18) == 0);
    in_child("hello", path);
    CHECK(memcmp(p + 100, "hello from a child", 18) == 0);
    CHECK(munmap(p, 8192) == 0);

    /* Appends are seen where they land, also a pwrite on an O_APPEND descriptor. */
    CHECK(ftruncate(fd, 100) == 0);
    char *r = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(r != MAP_FAILED);
    in_child("append", path);
    CHECK(memcmp(r + 100, "xyzQQQ", 6) == 0);
    CHECK(memcmp(r, "aaa", 3) == 0);

    /* A forked child, and an image exec'd with the descriptor, map it without having
     * used it before. */
    pid_t pid = fork();
    if (pid == 0) {
        map_inherited(fd);
        /* The child gives up its copy of the parent's mapping: the parent's stays
         * counted and keeps its backing file. */
        CHECK(munmap(r, 4096) == 0);
        _exit(0);
    }
    wait_ok(pid);
    char num[16];
    snprintf(num, sizeof num, "%d", fd);
    in_child_arg("inherited", path, num);
    in_child("hello", path);
    CHECK(memcmp(r + 100, "hello from a child", 18) == 0);

    /* A hole punched and a range zeroed by another process read as zeros. */
    static const char zeros[18];
    in_child("punch", path);
    CHECK(memcmp(r + 100, zeros, 18) == 0 && r[99] == 'a');
    in_child("hello", path);
    CHECK(memcmp(r + 100, "hello from a child", 18) == 0);
    in_child("zero", path);
    CHECK(memcmp(r + 100, zeros, 18) == 0 && r[99] == 'a');
    CHECK(munmap(r, 4096) == 0);
    CHECK(close(fd) == 0);
    printf("MAPSHARE-OK\n");
    return 0;
}
