/* CHECK for the small in-process test programs (spare.c, locks.c): on a false condition,
 * say which line and errno, and exit 1; and `joined` for the paths of the programs that
 * take directories as arguments. */
#ifndef ENGRAM_TEST_CHECK_H
#define ENGRAM_TEST_CHECK_H
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            int e_ = errno;                                                                \
            fprintf(stderr, "FAIL line %d: %s (errno %d: %s)\n", __LINE__, #cond, e_,      \
                    strerror(e_));                                                         \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

/* BASE/NAME, in one of four buffers used in turn. */
static inline char *joined(const char *base, const char *name) {
    static char bufs[4][4096];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, 4096, "%s/%s", base, name);
    return b;
}

#endif
