/*
 * A file mapped shared and unmapped while the process keeps it open, then opened again
 * with O_TRUNC by the same process and written one byte: a new mapping shows the byte,
 * and zeros past the end of file in its page (checked on tmpfs and ext4). Through the
 * shim, the count of the first mapping lingers while the file is open, and its backing
 * file kept the bytes the O_TRUNC cut off. Then a mapping that stays: another process
 * opens the file with O_TRUNC (as `> file` does) and writes two bytes, and the mapping
 * shows them and zeros after them in its page, as a read does. Through the shim an
 * O_TRUNC did not zero the backing file as ftruncate does, and the mapping showed the
 * bytes cut off. Usage: maptrunc DIR. Prints MAPTRUNC-OK.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/wait.h>
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
    CHECK(close(fd2) == 0);

    /* Mapped live here, truncated at open and written by another process. */
    CHECK(pwrite(fd, page, PG, 0) == PG);
    m = mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(m != MAP_FAILED && m[100] == 'a');
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int c = open(path, O_WRONLY | O_TRUNC);
        _exit(c >= 0 && write(c, "xy", 2) == 2 && close(c) == 0 ? 0 : 1);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(m[0] == 'x' && m[1] == 'y');
    for (int i = 2; i < PG; i++)
        CHECK(m[i] == 0);
    char buf[8];
    CHECK(pread(fd, buf, sizeof buf, 0) == 2 && memcmp(buf, "xy", 2) == 0);
    CHECK(munmap(m, PG) == 0);
    CHECK(close(fd) == 0);
    printf("MAPTRUNC-OK\n");
    return 0;
}
