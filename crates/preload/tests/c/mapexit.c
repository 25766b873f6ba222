/* Stores through a shared writable mapping reach the file without munmap or msync when
 * the process exits (return from main) or execs, as on Linux. argv[1]: the mount prefix;
 * argv[2]: "exec" to store into a second file and exec /bin/true. Prints MAPEXIT-OK. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void store(const char *path, const char *text) {
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && ftruncate(fd, 4096) == 0);
    char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED);
    strcpy(p, text);
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
            close(fd);
        }
        printf("MAPEXIT-OK\n");
        return 0;
    }
    snprintf(path, sizeof path, "%s/before-exit", argv[1]);
    store(path, "stored before exit");
    return 0;
}
