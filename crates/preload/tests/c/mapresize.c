/*
 * mremap of a whole shared writable mapping, as Python's mmap.resize makes it after
 * truncating the file: grown (stores in the new part reach the file), shrunk (stores in
 * the cut part are in the file already), kept at its size, and moved. Part of a mapping
 * is left alone. Usage: mapresize DIR. Prints MAPRESIZE-OK.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"

static char byte_at(int fd, off_t off) {
    char c = 0;
    CHECK(pread(fd, &c, 1, off) == 1);
    return c;
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    char path[4096];
    snprintf(path, sizeof path, "%s/resized", argv[1]);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && ftruncate(fd, 8192) == 0);
    char *p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED);
    p[0] = 'A';
    p[4096] = 'A';
    /* Grown after the file, as mmap.resize does; it may move. */
    CHECK(ftruncate(fd, 16384) == 0);
    p = mremap(p, 8192, 16384, MREMAP_MAYMOVE);
    CHECK(p != MAP_FAILED);
    CHECK(p[0] == 'A' && p[4096] == 'A' && p[12288] == 0);
    p[12288] = 'B';
    CHECK(msync(p, 16384, MS_SYNC) == 0);
    CHECK(byte_at(fd, 12288) == 'B' && byte_at(fd, 4096) == 'A');
    /* Kept at its size. */
    p = mremap(p, 16384, 16384, 0);
    CHECK(p != MAP_FAILED && p[12288] == 'B');
    /* Shrunk: a store in the part cut off is the file's. */
    p[12000] = 'D';
    p[100] = 'C';
    p = mremap(p, 16384, 8192, 0);
    CHECK(p != MAP_FAILED);
    CHECK(byte_at(fd, 12000) == 'D');
    CHECK(munmap(p, 8192) == 0);
    CHECK(byte_at(fd, 100) == 'C' && byte_at(fd, 0) == 'A');
    CHECK(close(fd) == 0 && unlink(path) == 0);
    printf("MAPRESIZE-OK\n");
    return 0;
}
