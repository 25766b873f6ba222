/*
 * A file mapped shared and unmapped while the process keeps it open, then opened again
 * with O_TRUNC by the same process and written one byte: a new mapping shows the byte,
 * and zeros past the end of file in its page (checked on tmpfs and ext4). Through the
 * shim, the count of the first mapping lingers while the file is open, and its backing
 * file kept the bytes the O_TRUNC cut off (an O_TRUNC, unlike ftruncate, does not zero
 * the backing file). Usage: maptrunc DIR. Prints MAPTRUNC-OK.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"

#define PG 4096

int main(int argc, char **argv) {
    CHECK(argc == 2 && strlen(argv[1]) < 2000);
    const char *path = joined(argv[1], "f");
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    static char page[2 * PG];
    memset(page, 'a', sizeof page);
    CHECK(pwrite(fd, page, sizeof page, 0) == sizeof page);
    char *m = mmap(NULL, 2 * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(m != MAP_FAILED);
    CHECK(munmap(m, 2 * PG) == 0);
    int fd2 = open(path, O_RDWR | O_TRUNC | O_CLOEXEC);
    CHECK(fd2 >= 0);
    CHECK(pwrite(fd2, "b", 1, 0) == 1);
    m = mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(m != MAP_FAILED);
    CHECK(m[0] == 'b');
    for (int i = 1; i < PG; i++)
        CHECK(m[i] == 0);
    CHECK(munmap(m, PG) == 0);
    CHECK(close(fd2) == 0 && close(fd) == 0);
    printf("MAPTRUNC-OK\n");
    return 0;
}
