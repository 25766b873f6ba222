/* A signal handler that stats a missing path behind a real symlink while the program
 * mallocs and frees: stat is async-signal-safe, so the shim's handling of the failed call
 * (reallinks.rs: does the path reach the prefix through the link?) must allocate nothing
 * and take no lock; an allocation there re-entered malloc in the middle of its work
 * ("malloc assertion failure in sysmalloc", "corrupted double-linked list"). The link is
 * made in the real directory argv[2] (argv[1], the mount prefix, is not used): LINK -> sub,
 * the path LINK/no-such-file. SIGALRM every 50 µs for two seconds. Without the shim the
 * program passes too. Prints SIGSTAT-OK. */
#define _GNU_SOURCE
#include "check.h"
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static char P[PATH_MAX];
static volatile sig_atomic_t calls, wrong;

static void on_alarm(int sig) {
    (void)sig;
    int e = errno;
    struct stat st;
    if (stat(P, &st) != -1 || errno != ENOENT)
        wrong = 1;
    calls++;
    errno = e;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    CHECK(argc >= 3);
    const char *r = argv[2];
    char sub[PATH_MAX / 2], link[PATH_MAX / 2];
    snprintf(sub, sizeof sub, "%s/sub", r);
    snprintf(link, sizeof link, "%s/link", r);
    CHECK(mkdir(sub, 0755) == 0 || errno == EEXIST);
    unlink(link);
    CHECK(symlink(sub, link) == 0);
    snprintf(P, sizeof P, "%s/no-such-file", link);
    struct stat st;
    errno = 0;
    CHECK(stat(P, &st) == -1 && errno == ENOENT);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGALRM, &sa, NULL) == 0);
    struct itimerval it = {{0, 50}, {0, 50}};
    CHECK(setitimer(ITIMER_REAL, &it, NULL) == 0);

    /* Sizes from a few bytes to past the mmap threshold, so that malloc splits, merges
     * and grows its heap (sysmalloc) while the handler runs. */
    enum { SLOTS = 256 };
    static void *slot[SLOTS];
    uint64_t x = 88172645463325252ull;
    unsigned long rounds = 0;
    double end = now() + 2.0;
    while (now() < end) {
        for (int k = 0; k < 1000; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            size_t i = x % SLOTS;
            free(slot[i]);
            size_t n = (x >> 8) % 8 == 0 ? (x >> 16) % (256 << 10) : (x >> 16) % 4096 + 1;
            slot[i] = malloc(n);
            CHECK(slot[i] != NULL);
            memset(slot[i], (int)k, n < 64 ? n : 64);
        }
        rounds++;
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    CHECK(setitimer(ITIMER_REAL, &off, NULL) == 0);
    for (int i = 0; i < SLOTS; i++)
        free(slot[i]);
    CHECK(!wrong);
    CHECK(calls > 1000);
    CHECK(unlink(link) == 0);
    printf("%d signals, %lu rounds\n", (int)calls, rounds);
    printf("SIGSTAT-OK\n");
    return 0;
}
