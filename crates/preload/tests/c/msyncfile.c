/* One thread pwrites a mapped file while another stores into the mapping and msyncs it,
 * on a pool whose engine makes writes durable with msync (a pool in an ordinary file):
 * both finish, and the file holds the last write and the last store. (The engine's msync
 * went through the shim's, whose lock a thread writing a mapping back holds while it
 * waits for the writer: the two hung for good, found in review.) argv[1]: the directory.
 * Prints MSYNCFILE-OK. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#define PG 4096
#define PAGES 32
#define ROUNDS 300

static int fd;
static char *m;

static void *writer(void *arg) {
    (void)arg;
    char buf[PG];
    for (int i = 0; i < ROUNDS; i++) {
        memset(buf, 'a' + i % 26, sizeof buf);
        CHECK(pwrite(fd, buf, sizeof buf, (off_t)(1 + i % (PAGES - 1)) * PG) == PG);
    }
    return NULL;
}

static void *syncer(void *arg) {
    (void)arg;
    struct timespec pause = {0, 100 * 1000};
    for (int i = 0; i < ROUNDS; i++) {
        m[i % 64] = 'A' + i % 26;
        CHECK(msync(m, PAGES * PG, MS_SYNC) == 0);
        nanosleep(&pause, NULL);
    }
    return NULL;
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    char path[512];
    snprintf(path, sizeof path, "%s/msyncfile.bin", argv[1]);
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && ftruncate(fd, PAGES * PG) == 0);
    m = mmap(NULL, PAGES * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(m != MAP_FAILED);
    pthread_t a, b;
    CHECK(pthread_create(&a, NULL, writer, NULL) == 0 && pthread_create(&b, NULL, syncer, NULL) == 0);
    CHECK(pthread_join(a, NULL) == 0 && pthread_join(b, NULL) == 0);
    CHECK(munmap(m, PAGES * PG) == 0);
    char got[PG];
    int last = ROUNDS - 1;
    CHECK(pread(fd, got, PG, (off_t)(1 + last % (PAGES - 1)) * PG) == PG);
    CHECK(got[0] == 'a' + last % 26 && got[PG - 1] == 'a' + last % 26);
    CHECK(pread(fd, got, 64, 0) == 64);
    CHECK(got[last % 64] == 'A' + last % 26);
    CHECK(close(fd) == 0);
    printf("MSYNCFILE-OK\n");
    return 0;
}
