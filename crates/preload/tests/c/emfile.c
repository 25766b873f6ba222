/*
 * An open with O_TRUNC that fails for want of a descriptor (EMFILE) leaves the file as it
 * was, as Linux fails such an open before it truncates anything (checked on tmpfs and
 * ext4); and once a descriptor is free the same open truncates. Through the shim the file
 * was truncated first and the open failed after. Usage: emfile DIR. Prints EMFILE-OK.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

int main(int argc, char **argv) {
    CHECK(argc == 2 && strlen(argv[1]) < 2000);
    const char *path = joined(argv[1], "f");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(fd >= 0 && write(fd, "kept", 4) == 4 && close(fd) == 0);
    struct rlimit r;
    CHECK(getrlimit(RLIMIT_NOFILE, &r) == 0);
    struct rlimit low = {.rlim_cur = 256, .rlim_max = r.rlim_max};
    CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
    /* Filled with descriptors of the file itself (through the shim, its spare descriptors
     * go too). */
    int last = -1;
    for (;;) {
        int n = open(path, O_RDONLY | O_CLOEXEC);
        if (n < 0) {
            CHECK(errno == EMFILE);
            break;
        }
        last = n;
    }
    CHECK(last >= 0);
    errno = 0;
    CHECK(open(path, O_WRONLY | O_TRUNC | O_CLOEXEC) == -1 && errno == EMFILE);
    errno = 0;
    CHECK(creat(path, 0644) == -1 && errno == EMFILE);
    struct stat st;
    CHECK(stat(path, &st) == 0 && st.st_size == 4);
    CHECK(close(last) == 0);
    fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
    CHECK(fd >= 0 && fstat(fd, &st) == 0 && st.st_size == 0 && close(fd) == 0);
    printf("EMFILE-OK\n");
    return 0;
}
