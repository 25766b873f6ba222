/* The file ctorlib.c's constructor made in the pool (argv[1]) is there. Prints CTOR-OK. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

extern int ctor_fd;

int main(int argc, char **argv) {
    CHECK(argc >= 2);
    CHECK(ctor_fd >= 0);
    char path[512], buf[8] = {0};
    snprintf(path, sizeof path, "%s/from-ctor", argv[1]);
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0 && read(fd, buf, sizeof buf) == 4 && strcmp(buf, "ctor") == 0);
    printf("CTOR-OK\n");
    return 0;
}
