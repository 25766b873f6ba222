/* Stores through a shared writable mapping outlive a process that ends without munmap,
 * msync or exit handlers (_exit, SIGKILL), as on Linux: the pool's server writes them back
 * once it sees that no process maps the file any more.
 *   mapdeath PREFIX store NAME exit|kill   write, map, store, then end abruptly
 *   mapdeath PREFIX split NAME -            map the file read-only (O_APPEND), fork a child
 *                                           that maps the end, stores and ends by _exit;
 *                                           the stores are in the file at once
 *   mapdeath PREFIX truncated NAME -        map, shrink and regrow the file, store, _exit
 *   mapdeath PREFIX untruncated NAME -      check: the bytes cut off stay zeros
 *   mapdeath PREFIX waited NAME ROUNDS      ROUNDS times: a child maps, stores and ends by
 *                                           _exit; the parent reads the stores as soon as
 *                                           waitpid returns (through a daemon too)
 *   mapdeath PREFIX unseen NAME ROUNDS      ROUNDS times: a child maps and stores and dies;
 *                                           the parent, told by a pipe, unmaps its own
 *                                           mapping (the last) before any wait
 *   mapdeath PREFIX sigchld NAME CHILDREN   fork CHILDREN children that exit at once while a
 *                                           SIGCHLD handler reaps them with waitpid
 *   mapdeath PREFIX resize NAME ROUNDS      threads grow the mapped file and write it at
 *                                           once; the mapping must show the write
 *   mapdeath PREFIX nofsetid NAME -         without CAP_FSETID (the kernel then clears a
 *                                           file's set-user-ID at every write): map, write,
 *                                           and map again
 *   mapdeath PREFIX check NAME MS           wait up to MS ms for the stores, then check
 * The file is 3 pages and 100 bytes; the mapping covers 4 pages, and a store past the end
 * of file must not become file data (Linux drops it too). Prints MAPDEATH-OK. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <linux/capability.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define PG 4096
#define SIZE (3 * PG + 100)

static const char WRITTEN[] = "written with write()\n";
static const char FIRST[] = "stored in the first page";
static const char THIRD[] = "stored in the third page";
static const char BEYOND[] = "stored past the end of file";

static void reap(int sig) {
    (void)sig;
    int saved = errno, st;
    while (waitpid(-1, &st, WNOHANG) > 0)
        ;
    errno = saved;
}

static int resize_fd;

static void *grow(void *arg) {
    (void)arg;
    CHECK(ftruncate(resize_fd, PG) == 0);
    return NULL;
}

static int stored(int fd) {
    char buf[64];
    if (pread(fd, buf, sizeof FIRST - 1, 100) != sizeof FIRST - 1 ||
        memcmp(buf, FIRST, sizeof FIRST - 1) != 0)
        return 0;
    if (pread(fd, buf, sizeof THIRD - 1, 2 * PG + 10) != sizeof THIRD - 1 ||
        memcmp(buf, THIRD, sizeof THIRD - 1) != 0)
        return 0;
    return 1;
}

int main(int argc, char **argv) {
    CHECK(argc == 5);
    char path[512];
    snprintf(path, sizeof path, "%s/%s", argv[1], argv[3]);
    if (strcmp(argv[2], "store") == 0) {
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
        CHECK(fd >= 0);
        CHECK(write(fd, WRITTEN, sizeof WRITTEN - 1) == sizeof WRITTEN - 1);
        CHECK(ftruncate(fd, SIZE) == 0);
        char *p = mmap(NULL, 4 * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        CHECK(p != MAP_FAILED);
        CHECK(memcmp(p, WRITTEN, sizeof WRITTEN - 1) == 0);
        memcpy(p + 100, FIRST, sizeof FIRST - 1);
        memcpy(p + 2 * PG + 10, THIRD, sizeof THIRD - 1);
        memcpy(p + SIZE + 50, BEYOND, sizeof BEYOND - 1);
        if (strcmp(argv[4], "kill") == 0)
            raise(SIGKILL);
        _exit(0);
    }
    if (strcmp(argv[2], "split") == 0) {
        /* The parent maps the whole file read-only, on a descriptor opened for appending;
         * a child maps the last pages, stores and dies. Its stores reach the file at its
         * death, where they belong (not appended), while the parent still maps the file. */
        int setup = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
        CHECK(setup >= 0);
        CHECK(write(setup, WRITTEN, sizeof WRITTEN - 1) == sizeof WRITTEN - 1);
        CHECK(ftruncate(setup, SIZE) == 0);
        CHECK(pwrite(setup, FIRST, sizeof FIRST - 1, 100) == sizeof FIRST - 1);
        CHECK(close(setup) == 0);
        int fd = open(path, O_RDWR | O_APPEND);
        CHECK(fd >= 0);
        char *p = mmap(NULL, 4 * PG, PROT_READ, MAP_SHARED, fd, 0);
        CHECK(p != MAP_FAILED);
        pid_t child = fork();
        CHECK(child >= 0);
        if (child == 0) {
            char *q = mmap(NULL, 2 * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 2 * PG);
            if (q == MAP_FAILED)
                _exit(2);
            memcpy(q + 10, THIRD, sizeof THIRD - 1);
            memcpy(q + SIZE - 2 * PG + 50, BEYOND, sizeof BEYOND - 1);
            _exit(0);
        }
        int status;
        CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) &&
              WEXITSTATUS(status) == 0);
        CHECK(memcmp(p + 2 * PG + 10, THIRD, sizeof THIRD - 1) == 0);
        CHECK(stored(fd));
        CHECK(munmap(p, 4 * PG) == 0);
        /* A writable mapping on that descriptor is written back in place too. */
        char *w = mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        CHECK(w != MAP_FAILED);
        memcpy(w + 500, "in place", 8);
        CHECK(munmap(w, PG) == 0);
        char buf[8];
        CHECK(pread(fd, buf, 8, 500) == 8 && memcmp(buf, "in place", 8) == 0);
        struct stat st;
        CHECK(fstat(fd, &st) == 0 && st.st_size == SIZE);
        close(fd);
        return 0;
    }
    if (strcmp(argv[2], "truncated") == 0) {
        /* Bytes cut off by truncate are gone from the mapping too, and never come back as
         * if they had been stored: after a shrink and a regrow the mapping and the file
         * read zeros there, also once the process has died without unmapping. */
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
        CHECK(fd >= 0);
        char page[PG];
        memset(page, 'x', PG);
        for (int i = 0; i < 3; i++)
            CHECK(write(fd, page, PG) == PG);
        char *p = mmap(NULL, 3 * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        CHECK(p != MAP_FAILED && p[PG] == 'x');
        CHECK(ftruncate(fd, 100) == 0 && ftruncate(fd, 3 * PG) == 0);
        CHECK(p[99] == 'x' && p[100] == 0 && p[2 * PG] == 0);
        p[50] = 'y';
        _exit(0);
    }
    if (strcmp(argv[2], "untruncated") == 0) {
        int fd = open(path, O_RDONLY);
        CHECK(fd >= 0);
        char buf[3 * PG];
        CHECK(pread(fd, buf, sizeof buf, 0) == sizeof buf);
        for (int i = 0; i < 3 * PG; i++)
            CHECK(buf[i] == (i == 50 ? 'y' : i < 100 ? 'x' : 0));
        printf("MAPDEATH-OK untruncated\n");
        return 0;
    }
    if (strcmp(argv[2], "waited") == 0) {
        for (int round = 0; round < atoi(argv[4]); round++) {
            int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
            CHECK(fd >= 0 && ftruncate(fd, PG) == 0);
            char want[32], got[32] = {0};
            snprintf(want, sizeof want, "round %d", round);
            pid_t child = fork();
            CHECK(child >= 0);
            if (child == 0) {
                char *q = mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
                if (q == MAP_FAILED)
                    _exit(2);
                strcpy(q, want);
                _exit(0);
            }
            int status;
            CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) &&
                  WEXITSTATUS(status) == 0);
            CHECK(pread(fd, got, strlen(want), 0) == (ssize_t)strlen(want));
            CHECK(strcmp(got, want) == 0);
            close(fd);
        }
        printf("MAPDEATH-OK waited\n");
        return 0;
    }
    if (strcmp(argv[2], "unseen") == 0) {
        for (int round = 0; round < atoi(argv[4]); round++) {
            int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
            CHECK(fd >= 0 && ftruncate(fd, 4 * PG) == 0);
            char *p = mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            CHECK(p != MAP_FAILED);
            int pipefd[2];
            CHECK(pipe(pipefd) == 0);
            pid_t child = fork();
            CHECK(child >= 0);
            if (child == 0) {
                close(pipefd[0]);
                char *q = mmap(NULL, 2 * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 2 * PG);
                if (q == MAP_FAILED)
                    _exit(2);
                strcpy(q + 10, THIRD);
                _exit(0);
            }
            close(pipefd[1]);
            char c;
            CHECK(read(pipefd[0], &c, 1) == 0); /* the child is gone */
            close(pipefd[0]);
            CHECK(munmap(p, PG) == 0);
            int status;
            CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) &&
                  WEXITSTATUS(status) == 0);
            char got[sizeof THIRD] = {0};
            CHECK(pread(fd, got, sizeof THIRD - 1, 2 * PG + 10) == sizeof THIRD - 1);
            CHECK(strcmp(got, THIRD) == 0);
            close(fd);
        }
        printf("MAPDEATH-OK unseen\n");
        return 0;
    }
    if (strcmp(argv[2], "sigchld") == 0) {
        /* A SIGCHLD that lands inside fork runs the handler there: its waitpid must not
         * wait for the fork. */
        alarm(60);
        struct sigaction sa = {0};
        sa.sa_handler = reap;
        sa.sa_flags = SA_RESTART;
        CHECK(sigaction(SIGCHLD, &sa, NULL) == 0);
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
        CHECK(fd >= 0);
        for (int i = 0; i < atoi(argv[4]); i++) {
            pid_t child = fork();
            CHECK(child >= 0);
            if (child == 0)
                _exit(0);
        }
        close(fd);
        printf("MAPDEATH-OK sigchld\n");
        return 0;
    }
    if (strcmp(argv[2], "resize") == 0) {
        /* A write racing a truncate that grows the file stays in the mapping. */
        for (int round = 0; round < atoi(argv[4]); round++) {
            int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
            CHECK(fd >= 0);
            char *p = mmap(NULL, PG, PROT_READ, MAP_SHARED, fd, 0);
            CHECK(p != MAP_FAILED);
            resize_fd = fd;
            pthread_t t;
            CHECK(pthread_create(&t, NULL, grow, NULL) == 0);
            CHECK(pwrite(fd, "DATADATA", 8, 0) == 8);
            CHECK(pthread_join(t, NULL) == 0);
            CHECK(memcmp(p, "DATADATA", 8) == 0);
            CHECK(munmap(p, PG) == 0);
            close(fd);
        }
        printf("MAPDEATH-OK resize\n");
        return 0;
    }
    if (strcmp(argv[2], "nofsetid") == 0) {
        /* As an ordinary user runs: writes into the backing file must leave the marks a
         * later mapping checks. */
        struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
        struct __user_cap_data_struct caps[2];
        CHECK(syscall(SYS_capget, &hdr, caps) == 0);
        caps[0].effective &= ~(1u << CAP_FSETID);
        caps[0].permitted &= ~(1u << CAP_FSETID);
        caps[0].inheritable &= ~(1u << CAP_FSETID);
        CHECK(syscall(SYS_capset, &hdr, caps) == 0);
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
        CHECK(fd >= 0 && ftruncate(fd, 2 * PG) == 0);
        char *p = mmap(NULL, 2 * PG, PROT_READ, MAP_SHARED, fd, 0);
        CHECK(p != MAP_FAILED);
        CHECK(pwrite(fd, "written", 7, PG) == 7);
        CHECK(memcmp(p + PG, "written", 7) == 0);
        char *q = mmap(NULL, 2 * PG, PROT_READ, MAP_SHARED, fd, 0);
        CHECK(q != MAP_FAILED);
        CHECK(memcmp(q + PG, "written", 7) == 0);
        CHECK(munmap(p, 2 * PG) == 0 && munmap(q, 2 * PG) == 0);
        close(fd);
        printf("MAPDEATH-OK nofsetid\n");
        return 0;
    }
    CHECK(strcmp(argv[2], "check") == 0);
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    long waited = 0, limit = atol(argv[4]);
    struct timespec ms = {0, 1000000};
    /* Through a daemon the write-back follows the daemon's notice of the death, which
     * comes a moment after the process is gone. */
    while (!stored(fd) && waited < limit) {
        nanosleep(&ms, NULL);
        waited++;
    }
    CHECK(stored(fd));
    char buf[PG];
    CHECK(pread(fd, buf, sizeof WRITTEN - 1, 0) == sizeof WRITTEN - 1);
    CHECK(memcmp(buf, WRITTEN, sizeof WRITTEN - 1) == 0);
    struct stat st;
    CHECK(fstat(fd, &st) == 0 && st.st_size == SIZE);
    /* Grown again, the file reads zeros where the mapping stored past its end. */
    CHECK(ftruncate(fd, 4 * PG) == 0);
    CHECK(pread(fd, buf, PG, 3 * PG) == PG);
    for (int i = 100; i < PG; i++)
        CHECK(buf[i] == 0);
    close(fd);
    printf("MAPDEATH-OK waited %ld ms\n", waited);
    return 0;
}
