/* A library whose constructor makes a file in the pool: it runs before the shim's own
 * constructor (a program's libraries are initialised before the preloaded shim), so the
 * shim routes it without having read its configuration. Linked into ctor.c's program. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int ctor_fd = -2;

__attribute__((constructor)) static void make_file(void) {
    char path[512];
    const char *m = getenv("ENGRAM_MOUNT");
    snprintf(path, sizeof path, "%s/from-ctor", m ? m : "/mnt/engram");
    ctor_fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (ctor_fd >= 0) {
        if (write(ctor_fd, "ctor", 4) != 4)
            ctor_fd = -3;
        close(ctor_fd);
    }
}
