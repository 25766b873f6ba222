/*
 * A read-only shared mapping of a file opened read-only shows the file's later writes, as
 * on Linux: the process's own pwrite, another descriptor's, a child's, a truncate and a
 * growing write within the mapping's pages. Made writable with mprotect it is EACCES.
 * Before 2026-11-27 the shim mapped a copy taken at mmap time (a read-only SQLite
 * connection or LMDB environment with mmap read stale pages). As root, a user who may not
 * write the file still maps it and reads its bytes.
 *
 * Usage: romap DIR. Prints ROMAP-OK.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

static char dir[4096];

/* What a forked child's pwrite of `c` at `off` of `path` leaves in the mapping `m`. */
static void child_writes(const char *path, char c, off_t off) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int w = open(path, O_WRONLY);
        _exit(w >= 0 && pwrite(w, &c, 1, off) == 1 && close(w) == 0 ? 0 : 1);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void sees_writes(void) {
    const char *path = joined(dir, "f");
    int w = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(w >= 0);
    static char page[8192];
    memset(page, 'a', sizeof page);
    CHECK(pwrite(w, page, 6000, 0) == 6000);
    int r = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(r >= 0);
    char *m = mmap(NULL, 8192, PROT_READ, MAP_SHARED, r, 0);
    CHECK(m != MAP_FAILED);
    CHECK(m[0] == 'a' && m[5999] == 'a' && m[6000] == 0);
    CHECK(pwrite(w, "b", 1, 0) == 1);
    CHECK(m[0] == 'b');
    int w2 = open(path, O_WRONLY | O_CLOEXEC);
    CHECK(w2 >= 0 && pwrite(w2, "c", 1, 4096) == 1 && close(w2) == 0);
    CHECK(m[4096] == 'c');
    child_writes(path, 'd', 1);
    CHECK(m[1] == 'd');
    /* A growing write inside the mapped pages shows; a truncate zeroes what it cut in
     * its last page (the pages past it are gone: SIGBUS, on Linux too). */
    CHECK(pwrite(w, "e", 1, 7000) == 1);
    CHECK(m[7000] == 'e' && m[6500] == 0);
    CHECK(ftruncate(w, 100) == 0);
    CHECK(m[99] == 'a' && m[100] == 0);
    /* Writable later: refused, the descriptor is read-only. */
    CHECK(mprotect(m, 4096, PROT_READ | PROT_WRITE) == -1 && errno == EACCES);
    /* Two read-only mappings of the file, one through each kind of descriptor. */
    char *m2 = mmap(NULL, 4096, PROT_READ, MAP_SHARED, w, 0);
    CHECK(m2 != MAP_FAILED);
    CHECK(pwrite(w, "f", 1, 2) == 1);
    CHECK(m[2] == 'f' && m2[2] == 'f');
    CHECK(munmap(m2, 4096) == 0);
    CHECK(pwrite(w, "g", 1, 3) == 1 && m[3] == 'g');
    CHECK(munmap(m, 8192) == 0);
    char got[4];
    CHECK(pread(r, got, 4, 0) == 4 && memcmp(got, "bdfg", 4) == 0);
    CHECK(close(r) == 0 && close(w) == 0);
}

/* As root: a user who may not write the file maps it read-only and reads its bytes. */
static void other_user_reads(void) {
    if (geteuid() != 0)
        return;
    const char *path = joined(dir, "root");
    int w = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(w >= 0 && pwrite(w, "root bytes", 10, 0) == 10);
    CHECK(chmod(dir, 0755) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(2);
        int r = open(path, O_RDONLY);
        if (r < 0)
            _exit(3);
        char *m = mmap(NULL, 4096, PROT_READ, MAP_SHARED, r, 0);
        if (m == MAP_FAILED)
            _exit(4);
        _exit(memcmp(m, "root bytes", 10) == 0 && m[10] == 0 ? 0 : 5);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(close(w) == 0 && unlink(path) == 0);
}

int main(int argc, char **argv) {
    CHECK(argc == 2 && strlen(argv[1]) < 2000);
    strcpy(dir, argv[1]);
    setvbuf(stdout, NULL, _IONBF, 0);
    sees_writes();
    other_user_reads();
    CHECK(unlink(joined(dir, "f")) == 0);
    printf("ROMAP-OK\n");
    return 0;
}
