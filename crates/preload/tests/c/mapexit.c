/* Stores through a shared writable mapping reach the file without munmap or msync when
 * the process exits (return from main) or execs, as on Linux; a page unmapped early is
 * written back then, and what later takes its address (an anonymous MAP_FIXED mapping)
 * never reaches the file. argv[1]: the mount prefix; argv[2]: "exec" to store into a
 * second file and exec /bin/true, "check" to check both. Prints MAPEXIT-OK. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void store(const char *path, const char *text) {
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && ftruncate(fd, 8192) == 0);
    char *p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED);
    strcpy(p, text);
    strcpy(p + 4096, "second page");
    CHECK(munmap(p + 4096, 4096) == 0);
    char *q = mmap(p + 4096, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                   -1, 0);
    CHECK(q == p + 4096);
    strcpy(q, "GARBAGE FROM ANONYMOUS MEMORY");
    CHECK(close(fd) == 0);
}

int main(int argc, char **argv) {
    CHECK(argc >= 2);
    char path[512];
    if (argc == 3 && strcmp(argv[2], "exec") == 0) {
        snprintf(path, sizeof path, "%s/before-exec", argv[1]);
        store(path, "stored before exec");
        fflush(stdout);
        execl("/bin/true", "true", (char *)NULL);
        return 1;
    }
    if (argc == 3 && strcmp(argv[2], "check") == 0) {
        const char *want[] = {"before-exit", "stored before exit", "before-exec",
                              "stored before exec"};
        for (int i = 0; i < 4; i += 2) {
            char buf[64] = {0};
            snprintf(path, sizeof path, "%s/%s", argv[1], want[i]);
            int fd = open(path, O_RDONLY);
            CHECK(fd >= 0 && read(fd, buf, sizeof buf - 1) > 0);
            CHECK(strcmp(buf, want[i + 1]) == 0);
            memset(buf, 0, sizeof buf);
            CHECK(pread(fd, buf, sizeof buf - 1, 4096) > 0 && strcmp(buf, "second page") == 0);
            close(fd);
        }
        printf("MAPEXIT-OK\n");
        return 0;
    }
    snprintf(path, sizeof path, "%s/before-exit", argv[1]);
    store(path, "stored before exit");
    return 0;
}
