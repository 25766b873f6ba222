/*
 * A file mapped shared, unmapped and mapped again while the process keeps it open, as
 * gdbm, TDB and Kyoto Cabinet do each time their file grows: every mapping shows the
 * file's bytes, whatever was written, truncated or punched between the mappings, by this
 * process or another, or stored by another process's mapping (checked on tmpfs and ext4).
 * Through the shim the backing file of the first mapping is kept while the file is open
 * (a refill costs about 1 ms per MiB), so the mappings after the first join it instead.
 *
 * Usage: maplinger DIR [MAPFILE-PREFIX]. With the prefix of the pool's mapping files in
 * /dev/shm (white-box, shim only), also checks that the backing file stays while the file
 * is open and unmapped, and goes at its close. Prints MAPLINGER-OK.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define PG 4096

static const char *prefix;

/* How many mapping files of the inode of `fd` (at `path`) exist (white-box). An open is
 * a call to the daemon, which first waits for the requests this process posted (an
 * unmapping's, a close's) to be handled. */
static int backing_files(int fd, const char *path) {
    int t = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(t >= 0 && close(t) == 0);
    struct stat st;
    CHECK(fstat(fd, &st) == 0);
    char pat[4096];
    snprintf(pat, sizeof pat, "%s%llu-*", prefix, (unsigned long long)st.st_ino);
    glob_t g;
    int r = glob(pat, 0, NULL, &g);
    int n = r == 0 ? (int)g.gl_pathc : 0;
    if (r == 0)
        globfree(&g);
    return n;
}

static char *map(int fd, size_t len) {
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(m != MAP_FAILED);
    return m;
}

static int all(const char *p, char c, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != c)
            return 0;
    return 1;
}

/* Run `child` in a forked process (another client of the daemon). */
static pid_t start_child(void (*child)(const char *), const char *path) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        child(path);
        _exit(0);
    }
    return pid;
}

static void wait_child(pid_t pid) {
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void in_child(void (*child)(const char *), const char *path) {
    wait_child(start_child(child, path));
}

static void child_writes(const char *path) {
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    CHECK(pwrite(fd, "three", 5, 20) == 5);
    CHECK(ftruncate(fd, 3 * PG) == 0);
    CHECK(pwrite(fd, "four", 4, 2 * PG + 5) == 4);
    CHECK(close(fd) == 0);
}

/* Pipes between the parent and `child_stores`: stored, and read. */
static int stored[2], seen[2];

static void child_stores(const char *path) {
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    char *m = map(fd, PG);
    memcpy(m + 40, "seven", 5);
    /* The parent reads while this mapping is live and its store not written back. */
    char c = 's';
    CHECK(write(stored[1], &c, 1) == 1 && read(seen[0], &c, 1) == 1);
    CHECK(munmap(m, PG) == 0);
    CHECK(close(fd) == 0);
}

int main(int argc, char **argv) {
    CHECK((argc == 2 || argc == 3) && strlen(argv[1]) < 2000);
    prefix = argc == 3 ? argv[2] : NULL;
    const char *path = joined(argv[1], "f");
    setvbuf(stdout, NULL, _IONBF, 0);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    static char page[4 * PG];
    memset(page, 'a', 2 * PG);
    CHECK(pwrite(fd, page, 2 * PG, 0) == 2 * PG);

    /* Stored, unmapped, written by this process: the next mapping shows both. */
    char *m = map(fd, 2 * PG);
    memcpy(m, "one", 3);
    CHECK(munmap(m, 2 * PG) == 0);
    if (prefix)
        CHECK(backing_files(fd, path) == 1);
    CHECK(pwrite(fd, "two", 3, 10) == 3);
    char buf[64];
    CHECK(pread(fd, buf, 3, 0) == 3 && memcmp(buf, "one", 3) == 0);
    m = map(fd, 2 * PG);
    CHECK(memcmp(m, "one", 3) == 0 && memcmp(m + 10, "two", 3) == 0);
    CHECK(munmap(m, 2 * PG) == 0);

    /* Another process writes and grows it meanwhile. */
    in_child(child_writes, path);
    m = map(fd, 3 * PG);
    CHECK(memcmp(m, "one", 3) == 0 && memcmp(m + 10, "two", 3) == 0);
    CHECK(memcmp(m + 20, "three", 5) == 0 && all(m + PG, 'a', PG));
    CHECK(all(m + 2 * PG, 0, 5) && memcmp(m + 2 * PG + 5, "four", 4) == 0);
    CHECK(all(m + 2 * PG + 9, 0, PG - 9));
    CHECK(munmap(m, 3 * PG) == 0);

    /* This process shrinks and grows it again: the bytes cut off come back as zeros. */
    CHECK(pwrite(fd, "five", 4, 30) == 4);
    CHECK(ftruncate(fd, PG + 100) == 0);
    CHECK(ftruncate(fd, 2 * PG) == 0);
    m = map(fd, 2 * PG);
    CHECK(memcmp(m + 30, "five", 4) == 0 && all(m + PG, 'a', 100));
    CHECK(all(m + PG + 100, 0, PG - 100));
    memcpy(m + PG + 50, "six", 3);
    CHECK(munmap(m, 2 * PG) == 0);

    /* A hole punched between the mappings. */
    CHECK(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, PG) == 0);
    m = map(fd, 2 * PG);
    CHECK(all(m, 0, PG) && memcmp(m + PG + 50, "six", 3) == 0);
    CHECK(munmap(m, 2 * PG) == 0);

    /* Another process's mapping stores while this one keeps the file open unmapped: a
     * read sees the store while that mapping is live, and after it is gone. */
    CHECK(pipe(stored) == 0 && pipe(seen) == 0);
    pid_t pid = start_child(child_stores, path);
    char c;
    CHECK(read(stored[0], &c, 1) == 1);
    CHECK(pread(fd, buf, 5, 40) == 5 && memcmp(buf, "seven", 5) == 0);
    CHECK(write(seen[1], &c, 1) == 1);
    wait_child(pid);
    CHECK(pread(fd, buf, 5, 40) == 5 && memcmp(buf, "seven", 5) == 0);
    m = map(fd, 2 * PG);
    CHECK(memcmp(m + 40, "seven", 5) == 0 && all(m, 0, 40));
    CHECK(munmap(m, 2 * PG) == 0);

    /* Closed: the bytes are the file's, through a new descriptor. */
    if (prefix)
        CHECK(backing_files(fd, path) == 1);
    CHECK(close(fd) == 0);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    CHECK(pread(fd, buf, 5, 40) == 5 && memcmp(buf, "seven", 5) == 0);
    CHECK(pread(fd, buf, 3, PG + 50) == 3 && memcmp(buf, "six", 3) == 0);
    if (prefix) {
        /* The close is posted: the next request (this open's) follows it. */
        CHECK(backing_files(fd, path) == 0);
    }
    CHECK(close(fd) == 0);
    printf("MAPLINGER-OK\n");
    return 0;
}
