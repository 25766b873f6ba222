/*
 * Stores through a shared mapping are seen at once by read and pread of the file, through
 * the storing descriptor, another one and another process, also by a read that runs past
 * the mapped part, as Linux's page cache shows them (checked on tmpfs and ext4). Tokyo
 * Cabinet stores records through its mapping and reads their headers with pread; before
 * 2026-11-27 such reads gave the bytes from before the stores until a write-back.
 *
 * Usage: mapread DIR. Prints MAPREAD-OK.
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
    setvbuf(stdout, NULL, _IONBF, 0);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    static char page[3 * PG];
    memset(page, 'f', sizeof page);
    CHECK(pwrite(fd, page, sizeof page, 0) == sizeof page);
    /* The first page only is mapped. */
    char *m = mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(m != MAP_FAILED);
    memcpy(m + 100, "hello-mapped", 12);
    memcpy(m + PG - 4, "edge", 4);
    char buf[64] = {0};
    CHECK(pread(fd, buf, 12, 100) == 12 && memcmp(buf, "hello-mapped", 12) == 0);
    /* Across the end of the mapped part: the store, then the file's bytes. */
    CHECK(pread(fd, buf, 8, PG - 4) == 8 && memcmp(buf, "edgeffff", 8) == 0);
    int other = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(other >= 0);
    CHECK(lseek(other, 100, SEEK_SET) == 100 && read(other, buf, 12) == 12 &&
          memcmp(buf, "hello-mapped", 12) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int c = open(path, O_RDONLY);
        char got[12];
        _exit(c >= 0 && pread(c, got, 12, 100) == 12 && memcmp(got, "hello-mapped", 12) == 0
                  ? 0
                  : 1);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* A write shows in the mapping and in reads; a store over it too. */
    CHECK(pwrite(fd, "written", 7, 200) == 7 && memcmp(m + 200, "written", 7) == 0);
    memcpy(m + 200, "stored!", 7);
    CHECK(pread(other, buf, 7, 200) == 7 && memcmp(buf, "stored!", 7) == 0);
    /* Past the end of file: nothing, whatever the mapping's page holds. */
    CHECK(ftruncate(fd, 300) == 0);
    CHECK(pread(other, buf, 64, 290) == 10 && memcmp(buf, "ffffffffff", 10) == 0);
    CHECK(pread(other, buf, 64, 300) == 0);
    /* Unmapped (written back): the same bytes. */
    CHECK(munmap(m, PG) == 0);
    CHECK(pread(other, buf, 12, 100) == 12 && memcmp(buf, "hello-mapped", 12) == 0);
    CHECK(pread(other, buf, 7, 200) == 7 && memcmp(buf, "stored!", 7) == 0);
    CHECK(close(other) == 0 && close(fd) == 0 && unlink(path) == 0);
    printf("MAPREAD-OK\n");
    return 0;
}
