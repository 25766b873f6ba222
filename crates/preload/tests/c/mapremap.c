/* Readers that map a file shared (PROT_READ, through O_RDWR descriptors, as SQLite with
 * mmap_size does) and map it again every few hundred looks, while a writer pwrites
 * increasing values into its pages: a page never shows less than what the writer had
 * finished writing before the look, and at the end each page holds its last write. (A
 * first mapper of a backing file nobody held once wrote the file back from it, and so
 * reverted writes whose copies had not landed yet.) argv[1]: the directory; argv[2]:
 * writes.
 * Prints MAPREMAP-OK. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define PG 4096
#define PAGES 64
#define READERS 2

struct shared {
    _Atomic uint64_t finished[PAGES];
    _Atomic int done;
};

static long reader(const char *path, struct shared *s) {
    int fd = open(path, O_RDWR | O_CLOEXEC);
    CHECK(fd >= 0);
    char *m = mmap(NULL, PAGES * PG, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(m != MAP_FAILED);
    long stale = 0;
    srandom(getpid());
    for (long loops = 1; !atomic_load(&s->done); loops++) {
        if (loops % 100 == 0) {
            CHECK(munmap(m, PAGES * PG) == 0);
            m = mmap(NULL, PAGES * PG, PROT_READ, MAP_SHARED, fd, 0);
            CHECK(m != MAP_FAILED);
        }
        for (int k = 0; k < 16; k++) {
            int p = random() % PAGES;
            uint64_t want = atomic_load(&s->finished[p]), v;
            memcpy(&v, m + (size_t)p * PG, sizeof v);
            if (v < want && stale++ < 3)
                fprintf(stderr, "page %d shows %lu after %lu was written\n", p, (unsigned long)v,
                        (unsigned long)want);
        }
    }
    CHECK(munmap(m, PAGES * PG) == 0 && close(fd) == 0);
    return stale;
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    char path[512];
    snprintf(path, sizeof path, "%s/mapremap.bin", argv[1]);
    long writes = atol(argv[2]);
    struct shared *s =
        mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(s != MAP_FAILED);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && ftruncate(fd, PAGES * PG) == 0);
    pid_t kids[READERS];
    for (int r = 0; r < READERS; r++) {
        kids[r] = fork();
        CHECK(kids[r] >= 0);
        if (kids[r] == 0)
            _exit(reader(path, s) == 0 ? 0 : 2);
    }
    uint64_t last[PAGES] = {0};
    srandom(1);
    for (long i = 1; i <= writes; i++) {
        int p = random() % PAGES;
        uint64_t v = (uint64_t)i;
        CHECK(pwrite(fd, &v, sizeof v, (off_t)p * PG) == sizeof v);
        last[p] = v;
        atomic_store(&s->finished[p], v);
    }
    atomic_store(&s->done, 1);
    int bad = 0;
    for (int r = 0; r < READERS; r++) {
        int st;
        CHECK(waitpid(kids[r], &st, 0) == kids[r] && WIFEXITED(st));
        if (WEXITSTATUS(st) != 0) {
            fprintf(stderr, "reader %d saw older data\n", r);
            bad = 1;
        }
    }
    for (int p = 0; p < PAGES; p++) {
        uint64_t v;
        CHECK(pread(fd, &v, sizeof v, (off_t)p * PG) == sizeof v);
        if (v != last[p]) {
            fprintf(stderr, "page %d holds %lu, its last write was %lu\n", p, (unsigned long)v,
                    (unsigned long)last[p]);
            bad = 1;
        }
    }
    CHECK(!bad && close(fd) == 0);
    printf("MAPREMAP-OK\n");
    return 0;
}
