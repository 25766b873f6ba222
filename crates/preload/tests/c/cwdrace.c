/* The current directory changed by one thread while others use it (argv[1]: the pool,
 * argv[2]: a real directory): one thread moves between two pool directories and a real
 * one, one renames a pool directory back and forth, and two make relative calls and ask
 * getcwd. Each relative call must find the file of one of the directories, and getcwd
 * must name one of the places the current directory has been (or give ENOENT when its
 * search for a renamed directory keeps missing the rename in flight, which Linux would
 * not): no crash, no hang, no third answer. Prints CWDRACE-OK. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <unistd.h>

static char pool_a[512], pool_b[512], pool_b2[512], real[PATH_MAX];
static atomic_int stop;

static void *mover(void *arg) {
    (void)arg;
    for (int i = 0; !atomic_load(&stop); i++) {
        const char *to = i % 3 == 0 ? pool_a : i % 3 == 1 ? pool_b : real;
        /* pool_b may be renamed at this moment: ENOENT is a fine answer. */
        if (chdir(to) != 0) CHECK(errno == ENOENT);
    }
    return NULL;
}

static void *renamer(void *arg) {
    (void)arg;
    while (!atomic_load(&stop)) {
        CHECK(rename(pool_b, pool_b2) == 0);
        CHECK(rename(pool_b2, pool_b) == 0);
    }
    return NULL;
}

static void *user(void *arg) {
    (void)arg;
    char buf[64], cwd[1024];
    while (!atomic_load(&stop)) {
        int fd = open("which", O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            ssize_t n = read(fd, buf, sizeof buf - 1);
            CHECK(n == 1 && (buf[0] == 'a' || buf[0] == 'b' || buf[0] == 'r'));
            CHECK(close(fd) == 0);
        } else {
            CHECK(errno == ENOENT);
        }
        if (getcwd(cwd, sizeof cwd) != NULL) {
            CHECK(strcmp(cwd, pool_a) == 0 || strcmp(cwd, pool_b) == 0 ||
                  strcmp(cwd, pool_b2) == 0 || strcmp(cwd, real) == 0);
        } else {
            CHECK(errno == ENOENT);
        }
    }
    return NULL;
}

static void put(const char *dir, const char *what) {
    char p[600];
    snprintf(p, sizeof p, "%s/which", dir);
    int fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CHECK(fd >= 0 && write(fd, what, 1) == 1 && close(fd) == 0);
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    snprintf(pool_a, sizeof pool_a, "%s/a", argv[1]);
    snprintf(pool_b, sizeof pool_b, "%s/b", argv[1]);
    snprintf(pool_b2, sizeof pool_b2, "%s/b2", argv[1]);
    CHECK(realpath(argv[2], real) != NULL);
    CHECK(mkdir(pool_a, 0755) == 0 && mkdir(pool_b, 0755) == 0);
    /* Start in one of the places getcwd may name. */
    CHECK(chdir(real) == 0);
    put(pool_a, "a");
    put(pool_b, "b");
    put(real, "r");
    pthread_t t[4];
    CHECK(pthread_create(&t[0], NULL, mover, NULL) == 0);
    CHECK(pthread_create(&t[1], NULL, renamer, NULL) == 0);
    CHECK(pthread_create(&t[2], NULL, user, NULL) == 0);
    CHECK(pthread_create(&t[3], NULL, user, NULL) == 0);
    usleep(1500 * 1000);
    atomic_store(&stop, 1);
    for (int i = 0; i < 4; i++) CHECK(pthread_join(t[i], NULL) == 0);
    puts("CWDRACE-OK");
    return 0;
}
