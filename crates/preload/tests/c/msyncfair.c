/* One thread stores into a mapped file and msyncs it in a tight loop while another pwrites
 * other pages of the file: no write waits through more than a few msyncs. (A write waits
 * for the backing file's fill lock while an msync holds it; the lock keeps no queue, and
 * the msyncing thread took it again before the woken writer ran: on a pool in an ordinary
 * file, 1,780 writes in 60 s against 20,000 msyncs.) Counts, never times: how many msyncs
 * finished while each write was in its call. argv[1]: the directory; argv[2]: writes;
 * argv[3]: the most msyncs one write may see finish.
 * Prints MSYNCFAIR-OK and the counts. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>

#define PG 4096
#define PAGES 32

static int fd;
static char *m;
static _Atomic int done;
static _Atomic long syncs;

static void *syncer(void *arg) {
    (void)arg;
    for (long i = 0; !atomic_load(&done); i++) {
        /* A store each time: every msync writes a page back. */
        m[i % 64] = 'A' + i % 26;
        CHECK(msync(m, PAGES * PG, MS_SYNC) == 0);
        atomic_fetch_add(&syncs, 1);
    }
    return NULL;
}

int main(int argc, char **argv) {
    CHECK(argc == 4);
    char path[512];
    snprintf(path, sizeof path, "%s/msyncfair.bin", argv[1]);
    long writes = atol(argv[2]), most = atol(argv[3]);
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && ftruncate(fd, PAGES * PG) == 0);
    m = mmap(NULL, PAGES * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(m != MAP_FAILED);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, syncer, NULL) == 0);
    /* The syncer is under way before the first write. */
    while (atomic_load(&syncs) < 2)
        sched_yield();
    char buf[PG];
    long worst = 0, over = 0;
    for (long i = 0; i < writes; i++) {
        memset(buf, 'a' + i % 26, sizeof buf);
        long before = atomic_load(&syncs);
        CHECK(pwrite(fd, buf, sizeof buf, (off_t)(1 + i % (PAGES - 1)) * PG) == PG);
        long seen = atomic_load(&syncs) - before;
        if (seen > worst)
            worst = seen;
        over += seen > most;
    }
    atomic_store(&done, 1);
    CHECK(pthread_join(t, NULL) == 0);
    long all = atomic_load(&syncs);
    CHECK(munmap(m, PAGES * PG) == 0);
    char got[PG];
    long last = writes - 1;
    CHECK(pread(fd, got, PG, (off_t)(1 + last % (PAGES - 1)) * PG) == PG);
    CHECK(got[0] == 'a' + last % 26 && got[PG - 1] == 'a' + last % 26);
    CHECK(close(fd) == 0);
    printf("%ld writes, %ld msyncs, at most %ld during one write (%ld writes over %ld)\n", writes,
           all, worst, over, most);
    CHECK(over == 0);
    printf("MSYNCFAIR-OK\n");
    return 0;
}
