/*
 * Built static (no libc to interpose, as a Go program): writes ARG's bytes to descriptor 1;
 * with "read" reads descriptor 0 to its end; with "trunc" opens /dev/stdout anew with
 * O_TRUNC. Prints what the system calls gave on descriptor 2: "wrote N" / "write errno E",
 * "read N" / "read errno E", "trunc opened" / "trunc errno E".
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 2)
        return 2;
    if (strcmp(argv[1], "read") == 0) {
        char buf[65536];
        long total = 0;
        ssize_t n;
        while ((n = read(0, buf, sizeof buf)) > 0)
            total += n;
        if (n < 0)
            fprintf(stderr, "read errno %d\n", errno);
        else
            fprintf(stderr, "read %ld\n", total);
        return 0;
    }
    if (strcmp(argv[1], "trunc") == 0) {
        int fd = open("/dev/stdout", O_WRONLY | O_TRUNC);
        if (fd < 0)
            fprintf(stderr, "trunc errno %d\n", errno);
        else
            fprintf(stderr, "trunc opened\n");
        return 0;
    }
    ssize_t n = write(1, argv[1], strlen(argv[1]));
    if (n < 0)
        fprintf(stderr, "write errno %d\n", errno);
    else
        fprintf(stderr, "wrote %zd\n", n);
    return 0;
}
