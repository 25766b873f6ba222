/* syscall(2) of renameat2 with paths under the prefix (argv[1]), as gnulib's renameat2
 * makes it, and of another number (passed to the kernel). Prints SYSCALL-OK. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv) {
    CHECK(argc == 2);
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/a", argv[1]);
    snprintf(b, sizeof b, "%s/b", argv[1]);
    int fd = open(a, O_CREAT | O_WRONLY, 0644);
    CHECK(fd >= 0 && write(fd, "A", 1) == 1 && close(fd) == 0);
    fd = open(b, O_CREAT | O_WRONLY, 0644);
    CHECK(fd >= 0 && close(fd) == 0);
    errno = 0;
    CHECK(syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, RENAME_NOREPLACE) == -1 &&
          errno == EEXIST);
    CHECK(syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, 0) == 0);
    CHECK(access(a, F_OK) == -1 && errno == ENOENT);
    struct stat st;
    CHECK(stat(b, &st) == 0 && st.st_size == 1);
    CHECK(syscall(SYS_getpid) == getpid());
    printf("SYSCALL-OK\n");
    return 0;
}
