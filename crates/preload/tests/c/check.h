/* CHECK for the small in-process test programs (spare.c, locks.c): on a false condition,
 * say which line and errno, and exit 1. */
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

#endif
