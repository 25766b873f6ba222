/* A process that maps a file shared and writable, stores into its first page and msyncs
 * the whole mapping again and again, while another process pwrites increasing values into
 * the other pages: the writer reads back at least what it wrote, and at the end each page
 * holds its last write and the first page the last store. (msync writes back every page
 * that differs from the file; it once did so while a write had reached the file but not
 * yet the mapping, and so wrote the older bytes back over it.) argv[1]: the directory;
 * argv[2]: writes; argv[3]: map again every so many msyncs (0: never).
 * Prints MAPSYNC-OK. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define PG 4096
#define PAGES 16

struct shared {
    _Atomic int done;
    _Atomic uint64_t stored;
};

static int syncer(const char *path, struct shared *s, long remap) {
    int fd = open(path, O_RDWR | O_CLOEXEC);
    CHECK(fd >= 0);
    char *m = mmap(NULL, PAGES * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(m != MAP_FAILED);
    uint64_t v = 0;
    while (!atomic_load(&s->done)) {
        v++;
        memcpy(m, &v, sizeof v);
        CHECK(msync(m, PAGES * PG, MS_SYNC) == 0);
        if (remap > 0 && v % remap == 0) {
            CHECK(munmap(m, PAGES * PG) == 0);
            m = mmap(NULL, PAGES * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            CHECK(m != MAP_FAILED);
        }
    }
    atomic_store(&s->stored, v);
    CHECK(munmap(m, PAGES * PG) == 0 && close(fd) == 0);
    return 0;
}

int main(int argc, char **argv) {
    CHECK(argc == 4);
    char path[512];
    snprintf(path, sizeof path, "%s/mapsync.bin", argv[1]);
    long writes = atol(argv[2]), remap = atol(argv[3]);
    struct shared *s =
        mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(s != MAP_FAILED);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && ftruncate(fd, PAGES * PG) == 0);
    pid_t kid = fork();
    CHECK(kid >= 0);
    if (kid == 0)
        _exit(syncer(path, s, remap));
    uint64_t last[PAGES] = {0};
    long lost = 0;
    srandom(1);
    for (long i = 1; i <= writes; i++) {
        int p = 1 + random() % (PAGES - 1);
        uint64_t v = (uint64_t)i, got;
        CHECK(pwrite(fd, &v, sizeof v, (off_t)p * PG) == sizeof v);
        last[p] = v;
        CHECK(pread(fd, &got, sizeof got, (off_t)p * PG) == sizeof got);
        if (got != v && lost++ < 3)
            fprintf(stderr, "write %lu to page %d reads back as %lu\n", (unsigned long)v, p,
                    (unsigned long)got);
    }
    atomic_store(&s->done, 1);
    int st;
    CHECK(waitpid(kid, &st, 0) == kid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    int bad = lost != 0;
    for (int p = 0; p < PAGES; p++) {
        uint64_t v, want = p == 0 ? atomic_load(&s->stored) : last[p];
        CHECK(pread(fd, &v, sizeof v, (off_t)p * PG) == sizeof v);
        if (v != want) {
            fprintf(stderr, "page %d holds %lu, its last write was %lu\n", p, (unsigned long)v,
                    (unsigned long)want);
            bad = 1;
        }
    }
    if (lost)
        fprintf(stderr, "%ld writes read back older bytes\n", lost);
    CHECK(!bad && close(fd) == 0);
    printf("MAPSYNC-OK\n");
    return 0;
}
