/* mkstemp and its family, mkdtemp and mktemp under the prefix (argv[1]) and outside it
 * (argv[2]): glibc creates these with its own internal calls, which the shim must replace
 * for templates under the prefix. Also a walk from an exit handler (after the program's
 * thread-locals are destroyed). Prints TEMPFILES-OK. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char exit_file[512];

static void remove_at_exit(void) {
    /* git removes its lock files this way: the walk runs after thread-local destructors. */
    if (unlink(exit_file) != 0) {
        fprintf(stderr, "FAIL: unlink from an exit handler: %s\n", strerror(errno));
        _exit(3);
    }
}

static void check_file(const char *path, int fd, mode_t umask_bits) {
    struct stat st;
    CHECK(fd >= 0);
    CHECK(stat(path, &st) == 0);
    CHECK(S_ISREG(st.st_mode));
    CHECK((st.st_mode & 0777) == (0600 & ~umask_bits));
    CHECK(write(fd, "abc", 3) == 3);
    CHECK(lseek(fd, 0, SEEK_SET) == 0);
    char b[4] = {0};
    CHECK(read(fd, b, 3) == 3 && memcmp(b, "abc", 3) == 0);
    CHECK(close(fd) == 0);
}

static void family(const char *dir) {
    char t[512], u[600];
    mode_t old = umask(022);

    snprintf(t, sizeof t, "%s/a-XXXXXX", dir);
    strcpy(u, t);
    int fd = mkstemp(t);
    CHECK(strncmp(t, u, strlen(u) - 6) == 0 && strstr(t, "XXXXXX") == NULL);
    check_file(t, fd, 022);
    /* A second name differs, and the first file is still there. */
    fd = mkstemp(u);
    CHECK(strcmp(t, u) != 0);
    check_file(u, fd, 022);
    CHECK(access(t, F_OK) == 0);

    snprintf(t, sizeof t, "%s/b-XXXXXX", dir);
    fd = mkostemp(t, O_CLOEXEC | O_APPEND);
    CHECK(fd >= 0);
    CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    CHECK(fcntl(fd, F_GETFL) & O_APPEND);
    CHECK((fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDWR);
    CHECK(close(fd) == 0);

    snprintf(t, sizeof t, "%s/c-XXXXXX.txt", dir);
    fd = mkstemps(t, 4);
    CHECK(strcmp(t + strlen(t) - 4, ".txt") == 0 && strstr(t, "XXXXXX") == NULL);
    check_file(t, fd, 022);

    snprintf(t, sizeof t, "%s/d-XXXXXX.log", dir);
    fd = mkostemps(t, 4, O_CLOEXEC);
    CHECK(fd >= 0 && (fcntl(fd, F_GETFD) & FD_CLOEXEC));
    CHECK(close(fd) == 0);

    /* A bad template: EINVAL, and the template is left as it was. */
    snprintf(t, sizeof t, "%s/e-XXXXX", dir);
    strcpy(u, t);
    errno = 0;
    CHECK(mkstemp(t) == -1 && errno == EINVAL && strcmp(t, u) == 0);
    snprintf(t, sizeof t, "%s/f-XXXXXX.txt", dir);
    errno = 0;
    CHECK(mkstemps(t, 5) == -1 && errno == EINVAL);
    errno = 0;
    CHECK(mkstemps(t, -1) == -1 && errno == EINVAL);

    snprintf(t, sizeof t, "%s/g-XXXXXX", dir);
    char *d = mkdtemp(t);
    CHECK(d == t && strstr(t, "XXXXXX") == NULL);
    struct stat st;
    CHECK(stat(t, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700);
    snprintf(u, sizeof u, "%s/inside", t);
    CHECK((fd = open(u, O_CREAT | O_WRONLY, 0644)) >= 0 && close(fd) == 0);

    snprintf(t, sizeof t, "%s/h-XXXXXX", dir);
    CHECK(mktemp(t) == t && strstr(t, "XXXXXX") == NULL);
    CHECK(access(t, F_OK) == -1 && errno == ENOENT);

    /* The directory does not exist: ENOENT, as glibc gives. */
    snprintf(t, sizeof t, "%s/missing/i-XXXXXX", dir);
    errno = 0;
    CHECK(mkstemp(t) == -1 && errno == ENOENT);
    snprintf(t, sizeof t, "%s/missing/j-XXXXXX", dir);
    errno = 0;
    CHECK(mkdtemp(t) == NULL && errno == ENOENT);
    umask(old);
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    family(argv[1]);
    family(argv[2]);
    snprintf(exit_file, sizeof exit_file, "%s/at-exit", argv[1]);
    int fd = open(exit_file, O_CREAT | O_WRONLY, 0644);
    CHECK(fd >= 0 && close(fd) == 0);
    CHECK(atexit(remove_at_exit) == 0);
    printf("TEMPFILES-OK\n");
    return 0;
}
