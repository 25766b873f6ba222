/* A program with its own malloc that calls readlink while it initialises itself, as
 * jemalloc does (statically linked in rustc): its first call comes from inside libc's or
 * the shim's start-up, before the shim's constructor has read its configuration. The shim
 * must pass such calls straight to the kernel without allocating; an allocation would
 * re-enter this malloc (jemalloc waited on its own lock for ever; here it aborts). Then the
 * pool (argv[1]) works as usual. Prints EARLYMALLOC-OK. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Alignas(64) char heap[64 << 20];
static size_t used;
static int initialising, ready;

/* Blocks carry their size in the 64 bytes before them (so realloc copies what it has). */
static void *take(size_t align, size_t n) {
    if (!ready) {
        if (initialising) {
            static const char msg[] = "earlymalloc: malloc re-entered during its set-up\n";
            write(2, msg, sizeof msg - 1);
            abort();
        }
        initialising = 1;
        char buf[256];
        readlink("/etc/malloc.conf", buf, sizeof buf);
        initialising = 0;
        ready = 1;
    }
    if (align < 64)
        align = 64;
    size_t start = (used + 64 + align - 1) & ~(align - 1);
    if (start + n > sizeof heap)
        return NULL;
    used = start + n;
    *(size_t *)(heap + start - 64) = n;
    return heap + start;
}

void *malloc(size_t n) { return take(16, n); }
void free(void *p) { (void)p; }
void *calloc(size_t a, size_t b) {
    void *p = take(16, a * b);
    if (p)
        memset(p, 0, a * b);
    return p;
}
void *realloc(void *p, size_t n) {
    void *q = take(16, n);
    if (q && p) {
        size_t old = *(size_t *)((char *)p - 64);
        memcpy(q, p, old < n ? old : n);
    }
    return q;
}
int posix_memalign(void **out, size_t align, size_t n) {
    *out = take(align, n);
    return *out ? 0 : 12;
}
void *aligned_alloc(size_t align, size_t n) { return take(align, n); }
void *memalign(size_t align, size_t n) { return take(align, n); }

int main(int argc, char **argv) {
    CHECK(argc >= 2 && ready);
    char path[512], buf[16] = {0};
    snprintf(path, sizeof path, "%s/early", argv[1]);
    int fd = open(path, O_CREAT | O_RDWR, 0644);
    CHECK(fd >= 0 && write(fd, "early", 5) == 5 && pread(fd, buf, 5, 0) == 5);
    CHECK(strcmp(buf, "early") == 0 && close(fd) == 0);
    printf("EARLYMALLOC-OK\n");
    return 0;
}
