/*
 * Calls no other test reaches, run under libengram_preload.so against a daemon-served pool
 * mounted at /mnt/engram. Every result is checked here; the first failure prints its line,
 * the expression and errno, and exits 1. Success prints CALLS-OK.
 *
 * Usage: calls REAL_DIR   (an empty real directory for the boundary checks)
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <utime.h>
#include <unistd.h>

#define M "/mnt/engram"

extern char **environ;

static const char *section = "start";

#define CHECK(cond)                                                                        \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            int e_ = errno;                                                                \
            fprintf(stderr, "FAIL [%s] line %d: %s (errno %d: %s)\n", section, __LINE__,  \
                    #cond, e_, strerror(e_));                                              \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static char real_dir[4096];

static void put(const char *path, const char *data) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, data, strlen(data)) == (ssize_t)strlen(data));
    CHECK(close(fd) == 0);
}

/* The whole content of a file (static buffer), read with open/read. */
static const char *get(const char *path) {
    static char buf[1 << 16];
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    CHECK(n >= 0);
    buf[n] = 0;
    CHECK(close(fd) == 0);
    return buf;
}

static off_t size_of(const char *path) {
    struct stat st;
    CHECK(stat(path, &st) == 0);
    return st.st_size;
}

static int is_dot(const char *n) { return !strcmp(n, ".") || !strcmp(n, ".."); }

static void directories(void) {
    section = "readdir_r";
    CHECK(mkdir(M "/d", 0755) == 0);
    put(M "/d/a", "a");
    put(M "/d/b", "bb");
    put(M "/d/c", "ccc");
    DIR *d = opendir(M "/d");
    CHECK(d != NULL);
    int seen = 0, n = 0;
    struct dirent ent, *res;
    for (;;) {
        CHECK(readdir_r(d, &ent, &res) == 0);
        if (!res)
            break;
        CHECK(res == &ent);
        if (is_dot(ent.d_name))
            continue;
        CHECK(strlen(ent.d_name) == 1 && ent.d_name[0] >= 'a' && ent.d_name[0] <= 'c');
        seen |= 1 << (ent.d_name[0] - 'a');
        n++;
        CHECK(ent.d_type == DT_REG);
    }
    CHECK(seen == 7 && n == 3);

    section = "readdir64_r";
    rewinddir(d);
    struct dirent64 ent64, *res64;
    seen = n = 0;
    for (;;) {
        CHECK(readdir64_r(d, &ent64, &res64) == 0);
        if (!res64)
            break;
        if (is_dot(ent64.d_name))
            continue;
        seen |= 1 << (ent64.d_name[0] - 'a');
        n++;
    }
    CHECK(seen == 7 && n == 3);

    section = "seekdir/telldir/rewinddir";
    rewinddir(d);
    struct dirent *e = readdir(d);
    CHECK(e != NULL);
    char first[256];
    strcpy(first, e->d_name);
    long pos = telldir(d);
    CHECK(pos != -1);
    e = readdir(d);
    CHECK(e != NULL);
    char second[256];
    strcpy(second, e->d_name);
    CHECK(strcmp(first, second) != 0);
    e = readdir(d);
    CHECK(e != NULL);
    seekdir(d, pos);
    CHECK(telldir(d) == pos);
    e = readdir(d);
    CHECK(e != NULL && !strcmp(e->d_name, second));
    rewinddir(d);
    e = readdir(d);
    CHECK(e != NULL && !strcmp(e->d_name, first));
    CHECK(dirfd(d) >= 0);
    CHECK(closedir(d) == 0);

    section = "getdents64";
    int fd = open(M "/d", O_RDONLY | O_DIRECTORY);
    CHECK(fd >= 0);
    char buf[4096];
    seen = n = 0;
    for (;;) {
        ssize_t got = getdents64(fd, buf, sizeof buf);
        CHECK(got >= 0);
        if (got == 0)
            break;
        for (ssize_t off = 0; off < got;) {
            struct dirent64 *r = (struct dirent64 *)(buf + off);
            CHECK(r->d_reclen > 0 && off + r->d_reclen <= got);
            if (!is_dot(r->d_name)) {
                seen |= 1 << (r->d_name[0] - 'a');
                n++;
            }
            off += r->d_reclen;
        }
    }
    CHECK(seen == 7 && n == 3);
    CHECK(close(fd) == 0);
}

static void locks(void) {
    section = "F_OFD_SETLK/F_OFD_GETLK";
    put(M "/lk", "0123456789");
    int a = open(M "/lk", O_RDWR), b = open(M "/lk", O_RDWR);
    CHECK(a >= 0 && b >= 0);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10};
    CHECK(fcntl(a, F_OFD_SETLK, &fl) == 0);
    struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 5, .l_len = 1};
    CHECK(fcntl(b, F_OFD_GETLK, &q) == 0);
    CHECK(q.l_type == F_WRLCK && q.l_start == 0 && q.l_len == 10 && q.l_pid == -1);
    struct flock w = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 2, .l_len = 2};
    CHECK(fcntl(b, F_OFD_SETLK, &w) == -1 && (errno == EAGAIN || errno == EACCES));

    section = "F_GETLK";
    /* A POSIX lock query conflicts with the other description's OFD lock too. */
    struct flock g = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    CHECK(fcntl(b, F_GETLK, &g) == 0);
    CHECK(g.l_type == F_WRLCK && g.l_pid == -1);
    fl.l_type = F_UNLCK;
    CHECK(fcntl(a, F_OFD_SETLK, &fl) == 0);
    q = (struct flock){.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 5, .l_len = 1};
    CHECK(fcntl(b, F_OFD_GETLK, &q) == 0 && q.l_type == F_UNLCK);
    /* A POSIX lock, seen by a child process with the parent's pid. */
    struct flock p = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 100, .l_len = 10};
    CHECK(fcntl(a, F_SETLK, &p) == 0);
    pid_t parent = getpid();
    pid_t c = fork();
    CHECK(c >= 0);
    if (c == 0) {
        struct flock cq = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 105, .l_len = 1};
        CHECK(fcntl(b, F_GETLK, &cq) == 0);
        CHECK(cq.l_type == F_WRLCK && cq.l_pid == parent && cq.l_start == 100);
        cq.l_type = F_WRLCK;
        CHECK(fcntl(b, F_SETLK, &cq) == -1 && (errno == EAGAIN || errno == EACCES));
        _exit(0);
    }
    int st;
    CHECK(waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0);

    section = "lockf";
    CHECK(lseek(a, 200, SEEK_SET) == 200);
    CHECK(lockf(a, F_LOCK, 10) == 0);
    CHECK(lockf(a, F_TEST, 10) == 0); /* our own lock */
    c = fork();
    CHECK(c >= 0);
    if (c == 0) {
        CHECK(lseek(b, 200, SEEK_SET) == 200);
        CHECK(lockf(b, F_TEST, 10) == -1 && (errno == EACCES || errno == EAGAIN));
        CHECK(lockf(b, F_TLOCK, 10) == -1);
        CHECK(lseek(b, 300, SEEK_SET) == 300);
        CHECK(lockf(b, F_TEST, 10) == 0);
        _exit(0);
    }
    CHECK(waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(lseek(a, 200, SEEK_SET) == 200);
    CHECK(lockf(a, F_ULOCK, 10) == 0);
    c = fork();
    CHECK(c >= 0);
    if (c == 0) {
        CHECK(lseek(b, 200, SEEK_SET) == 200);
        CHECK(lockf(b, F_TEST, 10) == 0);
        _exit(0);
    }
    CHECK(waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0);

    section = "close releases POSIX locks";
    /* Closing any descriptor of the file, a duplicate too, releases the process's POSIX
     * locks on it (Linux); the description's own OFD lock stays. */
    struct flock pl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 400, .l_len = 10};
    CHECK(fcntl(a, F_SETLK, &pl) == 0);
    struct flock ol = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 500, .l_len = 10};
    CHECK(fcntl(a, F_OFD_SETLK, &ol) == 0);
    int dupped = dup(a);
    CHECK(dupped >= 0 && close(dupped) == 0);
    struct flock probe = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 400, .l_len = 10};
    CHECK(fcntl(b, F_OFD_GETLK, &probe) == 0 && probe.l_type == F_UNLCK);
    probe = (struct flock){.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 500, .l_len = 10};
    CHECK(fcntl(b, F_OFD_GETLK, &probe) == 0 && probe.l_type == F_WRLCK);
    CHECK(close(a) == 0 && close(b) == 0);
}

static void mappings(void) {
    section = "sync_file_range";
    int fd = open(M "/map", O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    const char *text = "hello private mapping";
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    CHECK(sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE) == 0);
    CHECK(sync_file_range(fd, -1, 0, 0) == -1 && errno == EINVAL);

    section = "mmap MAP_PRIVATE";
    char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    CHECK(p != MAP_FAILED);
    CHECK(memcmp(p, text, strlen(text)) == 0);
    p[0] = 'J';
    char back[64] = {0};
    CHECK(pread(fd, back, sizeof back - 1, 0) == (ssize_t)strlen(text));
    CHECK(strcmp(back, text) == 0); /* a private copy: the file is unchanged */
    CHECK(msync(p, 4096, MS_SYNC) == 0);
    CHECK(munmap(p, 4096) == 0);
    /* Nor by msync or munmap (MAP_PRIVATE is 2, which MAP_SHARED_VALIDATE, 3, contains:
       the shim once took it for a shared mapping and wrote its stores back). */
    memset(back, 0, sizeof back);
    CHECK(pread(fd, back, sizeof back - 1, 0) == (ssize_t)strlen(text));
    CHECK(strcmp(back, text) == 0);

    section = "mprotect of a shared mapping";
    /* Mapped read-only, then made writable: its stores reach the file. */
    p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED);
    CHECK(mprotect(p, 4096, PROT_READ | PROT_WRITE) == 0);
    p[0] = 'M';
    /* Made inaccessible before it is unmapped: its stores still reach the file. */
    CHECK(mprotect(p, 4096, PROT_NONE) == 0);
    CHECK(munmap(p, 4096) == 0);
    CHECK(pread(fd, back, 5, 0) == 5 && memcmp(back, "Mello", 5) == 0);
    /* Mapped inaccessible, then made writable alone: its stores reach the file too. */
    int wo = open(M "/map", O_RDWR);
    CHECK(wo >= 0);
    p = mmap(NULL, 4096, PROT_NONE, MAP_SHARED, wo, 0);
    CHECK(p != MAP_FAILED);
    CHECK(mprotect(p, 4096, PROT_WRITE) == 0);
    p[1] = 'E';
    CHECK(msync(p, 4096, MS_SYNC) == 0);
    CHECK(pread(fd, back, 5, 0) == 5 && memcmp(back, "MEllo", 5) == 0);
    CHECK(munmap(p, 4096) == 0);
    CHECK(close(wo) == 0);
    CHECK(pwrite(fd, "he", 2, 0) == 2);

    section = "mremap and mprotect of copies";
    /* Two pages, 'A' then 'B'. A private mapping of the first grown to both shows the
       file's second page, and so does a shared one of a descriptor opened read-only (a
       copy in the shim); that one cannot be made writable (EACCES), a private one can. */
    char pages[8192];
    memset(pages, 'A', 4096);
    memset(pages + 4096, 'B', 4096);
    CHECK(pwrite(fd, pages, sizeof pages, 8192) == (ssize_t)sizeof pages);
    int rd = open(M "/map", O_RDONLY);
    CHECK(rd >= 0);
    char *q = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, rd, 8192);
    CHECK(q != MAP_FAILED && q[0] == 'A');
    q = mremap(q, 4096, 8192, MREMAP_MAYMOVE);
    CHECK(q != MAP_FAILED && q[0] == 'A' && q[4096] == 'B' && q[8191] == 'B');
    CHECK(mprotect(q, 8192, PROT_READ | PROT_WRITE) == 0);
    q[0] = 'p'; /* private */
    CHECK(munmap(q, 8192) == 0);
    q = mmap(NULL, 4096, PROT_READ, MAP_SHARED, rd, 8192);
    CHECK(q != MAP_FAILED);
    q = mremap(q, 4096, 8192, MREMAP_MAYMOVE);
    CHECK(q != MAP_FAILED && q[4096] == 'B');
    CHECK(mprotect(q, 8192, PROT_READ | PROT_WRITE) == -1 && errno == EACCES);
    CHECK(munmap(q, 8192) == 0);
    CHECK(close(rd) == 0);
    CHECK(pread(fd, back, 1, 8192) == 1 && back[0] == 'A');
    CHECK(ftruncate(fd, 8192) == 0);

    section = "mmap MAP_SHARED + msync";
    CHECK(ftruncate(fd, 8192) == 0);
    p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED);
    memcpy(p + 4096, "shared write", 12);
    memcpy(p, "H", 1);
    CHECK(msync(p, 8192, MS_SYNC) == 0);
    memset(back, 0, sizeof back);
    CHECK(pread(fd, back, 12, 4096) == 12);
    CHECK(memcmp(back, "shared write", 12) == 0);
    CHECK(pread(fd, back, 5, 0) == 5 && memcmp(back, "Hello", 5) == 0);
    CHECK(munmap(p, 8192) == 0);
    CHECK(close(fd) == 0);
    /* A new open sees it too. */
    fd = open(M "/map", O_RDONLY);
    CHECK(fd >= 0);
    CHECK(pread(fd, back, 12, 4096) == 12 && memcmp(back, "shared write", 12) == 0);
    CHECK(close(fd) == 0);

    section = "stores past the end of file, then a write that grows the file";
    fd = open(M "/tail", O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && pwrite(fd, "0123456789", 10, 0) == 10);
    unsigned char *t = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(t != MAP_FAILED);
    memset(t + 10, 0xa5, 4096 - 10); /* past the end: not the file's */
    CHECK(msync(t, 4096, MS_SYNC) == 0);
    CHECK(pwrite(fd, "y", 1, 8192) == 1); /* the gap becomes the file's: zeros, as ext4 */
    CHECK(t[10] == 0 && t[4095] == 0);
    CHECK(munmap(t, 4096) == 0);
    unsigned char tail[4096];
    CHECK(pread(fd, tail, sizeof tail, 0) == sizeof tail);
    int nonzero = 0;
    for (int i = 10; i < 4096; i++) nonzero += tail[i] != 0;
    CHECK(nonzero == 0 && memcmp(tail, "0123456789", 10) == 0);
    CHECK(close(fd) == 0 && unlink(M "/tail") == 0);
}

static void streams(void) {
    section = "fdopen";
    int fd = open(M "/fd.txt", O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    FILE *f = fdopen(fd, "r+");
    CHECK(f != NULL);
    CHECK(fileno(f) == fd);
    CHECK(fprintf(f, "line %d\n", 1) == 7);
    CHECK(fputs("line 2\n", f) >= 0);
    CHECK(fflush(f) == 0);
    CHECK(fseek(f, 0, SEEK_SET) == 0);
    char line[64];
    CHECK(fgets(line, sizeof line, f) && !strcmp(line, "line 1\n"));
    CHECK(fgets(line, sizeof line, f) && !strcmp(line, "line 2\n"));
    CHECK(fclose(f) == 0);
    CHECK(fcntl(fd, F_GETFD) == -1 && errno == EBADF); /* fclose closed the descriptor */
    CHECK(!strcmp(get(M "/fd.txt"), "line 1\nline 2\n"));

    section = "freopen";
    f = fopen(M "/fr1.txt", "w");
    CHECK(f != NULL);
    CHECK(fputs("first", f) >= 0);
    f = freopen(M "/fr2.txt", "w", f);
    CHECK(f != NULL);
    CHECK(fputs("second", f) >= 0);
    CHECK(fclose(f) == 0);
    CHECK(!strcmp(get(M "/fr1.txt"), "first"));
    CHECK(!strcmp(get(M "/fr2.txt"), "second"));
    /* A stream of a real file reopened onto a pool file, and back. */
    char real[4200];
    snprintf(real, sizeof real, "%s/real.txt", real_dir);
    f = fopen(real, "w");
    CHECK(f != NULL);
    f = freopen(M "/fr3.txt", "w+", f);
    CHECK(f != NULL);
    CHECK(fprintf(f, "pool %s", "side") > 0);
    CHECK(fflush(f) == 0);
    rewind(f);
    CHECK(fgets(line, sizeof line, f) && !strcmp(line, "pool side"));
    f = freopen(real, "w", f);
    CHECK(f != NULL);
    CHECK(fputs("real side", f) >= 0);
    CHECK(fclose(f) == 0);
    CHECK(!strcmp(get(M "/fr3.txt"), "pool side"));
    CHECK(!strcmp(get(real), "real side"));

    section = "dprintf";
    fd = open(M "/dp.txt", O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(dprintf(fd, "%d-%s-%.1f\n", 42, "x", 2.5) == 9);
    static char big[3000];
    memset(big, 'y', sizeof big - 1);
    CHECK(dprintf(fd, "%s\n", big) == (int)sizeof big);
    CHECK(lseek(fd, 0, SEEK_CUR) == 9 + (off_t)sizeof big);
    CHECK(close(fd) == 0);
    const char *got = get(M "/dp.txt");
    CHECK(strncmp(got, "42-x-2.5\nyyy", 12) == 0 && strlen(got) == 9 + sizeof big);
    /* vdprintf through a real descriptor still goes to libc. */
    int pfd[2];
    CHECK(pipe(pfd) == 0);
    CHECK(dprintf(pfd[1], "pipe %d", 7) == 6);
    CHECK(read(pfd[0], line, sizeof line) == 6 && !memcmp(line, "pipe 7", 6));
    CHECK(close(pfd[0]) == 0 && close(pfd[1]) == 0);
}

static void descriptors(void) {
    section = "dup3";
    int fd = open(M "/dup.txt", O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(dup3(fd, fd, 0) == -1 && errno == EINVAL);
    CHECK(dup3(fd, 50, O_CLOEXEC) == 50);
    CHECK(fcntl(50, F_GETFD) == FD_CLOEXEC);
    CHECK(fcntl(fd, F_GETFD) == 0);
    CHECK(write(50, "abc", 3) == 3);
    CHECK(lseek(fd, 0, SEEK_CUR) == 3); /* one description */
    CHECK(write(fd, "def", 3) == 3);
    CHECK(close(50) == 0);
    CHECK(!strcmp(get(M "/dup.txt"), "abcdef"));

    section = "posix_spawn";
    CHECK(lseek(fd, 3, SEEK_SET) == 3);
    int out[2];
    CHECK(pipe(out) == 0);
    posix_spawn_file_actions_t fa;
    CHECK(posix_spawn_file_actions_init(&fa) == 0);
    CHECK(posix_spawn_file_actions_adddup2(&fa, fd, 0) == 0);
    CHECK(posix_spawn_file_actions_adddup2(&fa, out[1], 1) == 0);
    CHECK(posix_spawn_file_actions_addclose(&fa, out[0]) == 0);
    pid_t c;
    char *argv[] = {"cat", NULL};
    CHECK(posix_spawn(&c, "/bin/cat", &fa, NULL, argv, environ) == 0);
    CHECK(posix_spawn_file_actions_destroy(&fa) == 0);
    CHECK(close(out[1]) == 0);
    char buf[64] = {0};
    ssize_t n, got = 0;
    while ((n = read(out[0], buf + got, sizeof buf - 1 - got)) > 0)
        got += n;
    CHECK(got == 3 && !strcmp(buf, "def"));
    int st;
    CHECK(waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(close(out[0]) == 0);
    CHECK(lseek(fd, 0, SEEK_CUR) == 6); /* the child read through the shared offset */
    /* posix_spawnp with a shell that writes through an inherited descriptor. */
    char cmd[128];
    snprintf(cmd, sizeof cmd, "printf spawned >&%d", fd);
    char *argv2[] = {"sh", "-c", cmd, NULL};
    CHECK(posix_spawnp(&c, "sh", NULL, NULL, argv2, environ) == 0);
    CHECK(waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(lseek(fd, 0, SEEK_CUR) == 13);
    CHECK(close(fd) == 0);
    CHECK(!strcmp(get(M "/dup.txt"), "abcdefspawned"));
}

#define RECS 2000
#define RECLEN 16

static int shared_fd;

static void *writer(void *arg) {
    char tag = *(char *)arg;
    char rec[RECLEN + 1];
    for (int i = 0; i < RECS; i++) {
        snprintf(rec, sizeof rec, "%c%014d\n", tag, i);
        if (write(shared_fd, rec, RECLEN) != RECLEN)
            return (void *)1;
    }
    return NULL;
}

static void threads(void) {
    section = "two threads, one descriptor";
    shared_fd = open(M "/threads.txt", O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(shared_fd >= 0);
    pthread_t t1, t2;
    char a = 'A', b = 'B';
    CHECK(pthread_create(&t1, NULL, writer, &a) == 0);
    CHECK(pthread_create(&t2, NULL, writer, &b) == 0);
    void *r1, *r2;
    CHECK(pthread_join(t1, &r1) == 0 && pthread_join(t2, &r2) == 0);
    CHECK(r1 == NULL && r2 == NULL);
    CHECK(lseek(shared_fd, 0, SEEK_CUR) == 2 * RECS * RECLEN);
    CHECK(size_of(M "/threads.txt") == 2 * RECS * RECLEN);
    /* Every record is whole and each appears once: the shared offset was never lost. */
    static char all[2 * RECS * RECLEN];
    CHECK(pread(shared_fd, all, sizeof all, 0) == (ssize_t)sizeof all);
    static char seen[2][RECS];
    for (int k = 0; k < 2 * RECS; k++) {
        char *rec = all + k * RECLEN;
        CHECK((rec[0] == 'A' || rec[0] == 'B') && rec[RECLEN - 1] == '\n');
        int i = atoi(rec + 1);
        CHECK(i >= 0 && i < RECS && !seen[rec[0] - 'A'][i]);
        seen[rec[0] - 'A'][i] = 1;
    }
    CHECK(close(shared_fd) == 0);
}

static void filesystem_info(void) {
    section = "statfs/fstatfs/statvfs";
    struct statfs s1, s2;
    CHECK(statfs(M, &s1) == 0);
    CHECK(s1.f_bsize > 0 && s1.f_blocks > 0 && s1.f_bfree <= s1.f_blocks);
    int fd = open(M "/d/a", O_RDONLY);
    CHECK(fd >= 0);
    CHECK(fstatfs(fd, &s2) == 0);
    CHECK(s2.f_blocks == s1.f_blocks && s2.f_bsize == s1.f_bsize);
    struct statvfs v1, v2;
    CHECK(statvfs(M "/d", &v1) == 0 && fstatvfs(fd, &v2) == 0);
    CHECK(v1.f_blocks == v2.f_blocks && v1.f_blocks > 0 && v1.f_frsize > 0);
    CHECK((uint64_t)v1.f_blocks * v1.f_frsize == (uint64_t)s1.f_blocks * s1.f_bsize);
    /* Reads never update atime: the pool says it is mounted noatime. */
    CHECK((v1.f_flag & ST_NOATIME) && (v2.f_flag & ST_NOATIME));
    /* A real file system answers for itself. */
    struct statfs r;
    CHECK(statfs("/", &r) == 0 && (r.f_blocks != s1.f_blocks || r.f_type != s1.f_type));

    section = "__xstat";
    typedef int (*xstat_fn)(int, const char *, struct stat *);
    typedef int (*fxstat_fn)(int, int, struct stat *);
    xstat_fn xs = (xstat_fn)dlsym(RTLD_DEFAULT, "__xstat");
    fxstat_fn fxs = (fxstat_fn)dlsym(RTLD_DEFAULT, "__fxstat");
    if (xs && fxs) {
        struct stat st;
        CHECK(xs(1, M "/d/b", &st) == 0 && st.st_size == 2 && S_ISREG(st.st_mode));
        CHECK(fxs(1, fd, &st) == 0 && st.st_size == 1);
        xstat_fn lxs = (xstat_fn)dlsym(RTLD_DEFAULT, "__lxstat");
        CHECK(lxs != NULL);
        CHECK(lxs(1, M "/d", &st) == 0 && S_ISDIR(st.st_mode));
    } else {
        printf("__xstat not found by dlsym; skipped\n");
    }
    CHECK(close(fd) == 0);

    section = "inotify of a pool path: refused, not a watch of the real directory";
    int in = inotify_init1(IN_CLOEXEC);
    CHECK(in >= 0);
    CHECK(inotify_add_watch(in, M, IN_ALL_EVENTS) == -1 && errno == EOPNOTSUPP);
    CHECK(inotify_add_watch(in, "/tmp", IN_CREATE) >= 0); /* outside: the kernel's */
    CHECK(close(in) == 0);
}

static void vectored(void) {
    section = "pwritev/preadv/preadv2";
    int fd = open(M "/vec", O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    char a[] = "hello ", b[] = "vectors";
    struct iovec w[2] = {{a, 6}, {b, 7}};
    CHECK(pwritev(fd, w, 2, 10) == 13);
    CHECK(lseek(fd, 0, SEEK_CUR) == 0); /* positional */
    CHECK(size_of(M "/vec") == 23);
    char x[4] = {0}, y[32] = {0};
    struct iovec r[2] = {{x, 3}, {y, 31}};
    CHECK(preadv(fd, r, 2, 10) == 13);
    CHECK(!memcmp(x, "hel", 3) && !strcmp(y, "lo vectors"));
    char z[10];
    CHECK(preadv(fd, (struct iovec[]){{z, 10}}, 1, 0) == 10);
    for (int i = 0; i < 10; i++)
        CHECK(z[i] == 0); /* the hole before offset 10 */
    /* preadv2 at the file offset (-1) advances it; at an explicit offset it does not. */
    CHECK(lseek(fd, 16, SEEK_SET) == 16);
    memset(y, 0, sizeof y);
    CHECK(preadv2(fd, (struct iovec[]){{y, 4}}, 1, -1, 0) == 4 && !memcmp(y, "vect", 4));
    CHECK(lseek(fd, 0, SEEK_CUR) == 20);
    CHECK(preadv2(fd, (struct iovec[]){{y, 3}}, 1, 10, 0) == 3 && !memcmp(y, "hel", 3));
    CHECK(lseek(fd, 0, SEEK_CUR) == 20);
    CHECK(pwritev2(fd, (struct iovec[]){{"!!!", 3}}, 1, -1, 0) == 3);
    CHECK(lseek(fd, 0, SEEK_CUR) == 23);
    CHECK(close(fd) == 0);
    const char *g = get(M "/vec");
    CHECK(!memcmp(g + 10, "hello vect!!!", 13));

    section = "pwritev2 flags";
    fd = open(M "/flags", O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, "0123456789", 10) == 10);
    /* RWF_APPEND writes at the end, whatever the offset says. */
    CHECK(pwritev2(fd, (struct iovec[]){{"AP", 2}}, 1, 0, RWF_APPEND) == 2);
    CHECK(!strcmp(get(M "/flags"), "0123456789AP"));
    /* Flags that change nothing here are accepted; unknown ones are not. */
    CHECK(pwritev2(fd, (struct iovec[]){{"S", 1}}, 1, 0, RWF_DSYNC | RWF_SYNC | RWF_HIPRI) == 1);
    CHECK(pwritev2(fd, (struct iovec[]){{"x", 1}}, 1, 0, 0x40000000) == -1 && errno == EOPNOTSUPP);
    CHECK(preadv2(fd, (struct iovec[]){{y, 1}}, 1, 0, 0x40000000) == -1 && errno == EOPNOTSUPP);
    CHECK(close(fd) == 0);
    /* RWF_NOAPPEND writes where the offset says on a descriptor opened for appending. */
    fd = open(M "/flags", O_WRONLY | O_APPEND);
    CHECK(fd >= 0);
    CHECK(pwritev2(fd, (struct iovec[]){{"NA", 2}}, 1, 1, RWF_NOAPPEND) == 2);
    CHECK(pwritev2(fd, (struct iovec[]){{"!", 1}}, 1, 0, 0) == 1); /* O_APPEND: the end */
    CHECK(close(fd) == 0);
    CHECK(!strcmp(get(M "/flags"), "SNA3456789AP!"));

    section = "truncate/truncate64";
    CHECK(truncate(M "/vec", 15) == 0);
    CHECK(size_of(M "/vec") == 15);
    CHECK(truncate64(M "/vec", 100000) == 0);
    CHECK(size_of(M "/vec") == 100000);
    fd = open(M "/vec", O_RDONLY);
    CHECK(fd >= 0);
    char tail[8];
    CHECK(pread(fd, tail, 8, 12) == 8 && !memcmp(tail, "llo\0\0\0\0\0", 8));
    CHECK(close(fd) == 0);
    CHECK(truncate(M "/nope/x", 0) == -1 && errno == ENOENT);

    /* Data in pages 0 and 12 of 25 (as tmpfs and ext4 give them). */
    section = "SEEK_DATA/SEEK_HOLE";
    fd = open(M "/vec", O_RDWR);
    CHECK(fd >= 0 && pwrite(fd, "z", 1, 50000) == 1);
    CHECK(lseek(fd, 0, SEEK_DATA) == 0);
    CHECK(lseek(fd, 0, SEEK_HOLE) == 4096);
    CHECK(lseek(fd, 5000, SEEK_DATA) == 49152);
    CHECK(lseek(fd, 49152, SEEK_HOLE) == 53248);
    CHECK(lseek(fd, 60000, SEEK_DATA) == -1 && errno == ENXIO);
    CHECK(lseek(fd, 60000, SEEK_HOLE) == 60000);
    CHECK(lseek(fd, 100000, SEEK_HOLE) == -1 && errno == ENXIO);
    CHECK(lseek(fd, 0, SEEK_CUR) == 60000); /* a failed seek leaves the offset */
    CHECK(close(fd) == 0);
}

static void boundary(void) {
    section = "EXDEV";
    char real[4200], real2[4200];
    snprintf(real, sizeof real, "%s/cross", real_dir);
    snprintf(real2, sizeof real2, "%s/cross2", real_dir);
    put(M "/cross", "pool");
    put(real, "real");
    CHECK(rename(M "/cross", real2) == -1 && errno == EXDEV);
    CHECK(rename(real, M "/cross2") == -1 && errno == EXDEV);
    CHECK(renameat2(AT_FDCWD, M "/cross", AT_FDCWD, real2, 0) == -1 && errno == EXDEV);
    CHECK(renameat2(AT_FDCWD, real, AT_FDCWD, M "/cross2", RENAME_NOREPLACE) == -1 &&
          errno == EXDEV);
    CHECK(linkat(AT_FDCWD, real, AT_FDCWD, M "/cross2", 0) == -1 && errno == EXDEV);
    CHECK(linkat(AT_FDCWD, M "/cross", AT_FDCWD, real2, 0) == -1 && errno == EXDEV);
    CHECK(link(M "/cross", real2) == -1 && errno == EXDEV);
    /* What Linux looks up before it compares file systems comes first (checked with
     * /dev/shm against /tmp on ext4): each name's directory (ENOENT, ENOTDIR), a link's
     * existing name (ENOENT) and its new name (EEXIST); not a rename's old name itself. */
    char nodir[4200], under_file[4200];
    snprintf(nodir, sizeof nodir, "%s/nodir/x", real_dir);
    snprintf(under_file, sizeof under_file, "%s/cross/x", real_dir);
    CHECK(rename(M "/cross", nodir) == -1 && errno == ENOENT);
    CHECK(rename(M "/nodir/x", real2) == -1 && errno == ENOENT);
    CHECK(rename(M "/cross", under_file) == -1 && errno == ENOTDIR);
    CHECK(rename(M "/cross/x", real2) == -1 && errno == ENOTDIR);
    CHECK(rename(M "/nonexistent", real2) == -1 && errno == EXDEV);
    CHECK(rename(M "/cross", real) == -1 && errno == EXDEV);
    CHECK(link(M "/nonexistent", real2) == -1 && errno == ENOENT);
    CHECK(link(real, M "/cross") == -1 && errno == EEXIST);
    CHECK(link(M "/cross", real) == -1 && errno == EEXIST);
    CHECK(link(M "/cross", nodir) == -1 && errno == ENOENT);
    /* Nothing moved. */
    CHECK(!strcmp(get(M "/cross"), "pool") && !strcmp(get(real), "real"));
    CHECK(access(real2, F_OK) == -1 && errno == ENOENT);
    CHECK(access(M "/cross2", F_OK) == -1 && errno == ENOENT);
    /* Within one side, renameat2 works. */
    CHECK(renameat2(AT_FDCWD, M "/cross", AT_FDCWD, M "/cross2", RENAME_NOREPLACE) == 0);
    CHECK(!strcmp(get(M "/cross2"), "pool"));
}

static void relative(void) {
    section = "openat(AT_FDCWD) after chdir into the prefix";
    char home[4096];
    CHECK(getcwd(home, sizeof home) != NULL);
    CHECK(chdir(M "/d") == 0);
    char cwd[4096];
    CHECK(getcwd(cwd, sizeof cwd) && !strcmp(cwd, M "/d"));
    int fd = openat(AT_FDCWD, "rel.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, "relative", 8) == 8);
    CHECK(close(fd) == 0);
    CHECK(size_of(M "/d/rel.txt") == 8);
    fd = openat(AT_FDCWD, "../top.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(close(fd) == 0);
    CHECK(access(M "/top.txt", F_OK) == 0);
    fd = openat(AT_FDCWD, "./a", O_RDONLY);
    CHECK(fd >= 0);
    char c;
    CHECK(read(fd, &c, 1) == 1 && c == 'a');
    CHECK(close(fd) == 0);
    CHECK(openat(AT_FDCWD, "missing", O_RDONLY) == -1 && errno == ENOENT);
    struct stat st;
    CHECK(fstatat(AT_FDCWD, "b", &st, 0) == 0 && st.st_size == 2);
    /* getwd answers the virtual directory too. */
    char wd[PATH_MAX];
    CHECK(getwd(wd) && !strcmp(wd, M "/d"));
    CHECK(chdir(home) == 0);
    CHECK(getcwd(cwd, sizeof cwd) && !strcmp(cwd, home));
    CHECK(openat(AT_FDCWD, "rel.txt", O_RDONLY) == -1 && errno == ENOENT);

    section = "openat(real directory, path into the prefix)";
    int root = open("/", O_RDONLY | O_DIRECTORY);
    CHECK(root >= 0);
    fd = openat(root, "mnt/engram/d/rel.txt", O_RDONLY);
    CHECK(fd >= 0);
    char buf[16] = {0};
    CHECK(read(fd, buf, sizeof buf) == 8 && !strcmp(buf, "relative"));
    CHECK(close(fd) == 0);
    CHECK(fstatat(root, "./mnt//engram/d/b", &st, 0) == 0 && st.st_size == 2);
    CHECK(mkdirat(root, "mnt/engram/viaroot", 0755) == 0);
    CHECK(access(M "/viaroot", F_OK) == 0);
    int tmp = open("/tmp", O_RDONLY | O_DIRECTORY);
    CHECK(tmp >= 0);
    fd = openat(tmp, "../mnt/engram/d/a", O_RDONLY);
    CHECK(fd >= 0 && read(fd, &c, 1) == 1 && c == 'a');
    CHECK(close(fd) == 0);
    /* Paths that stay outside are the kernel's, as before. */
    CHECK(fstatat(root, "tmp", &st, 0) == 0 && S_ISDIR(st.st_mode));
    CHECK(openat(root, "mnt/engramx", O_RDONLY) == -1 && errno == ENOENT);
    CHECK(close(root) == 0 && close(tmp) == 0);
}

/* Paths the pool walks natively unless they may leave it: absolute symlinks (into the
   mount prefix or out of it), ".." above the pool's root, relative links. */
static void symlinks(void) {
    section = "symlinks";
    char real_file[4200], link_target[4200];
    struct stat st, real_st;
    snprintf(real_file, sizeof real_file, "%s/outside.txt", real_dir);
    int fd = open(real_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && write(fd, "outside!", 8) == 8 && close(fd) == 0);
    CHECK(mkdir(M "/sl", 0755) == 0 && mkdir(M "/sl/in", 0755) == 0);
    put(M "/sl/in/f", "inside");
    CHECK(symlink("in", M "/sl/rel") == 0);
    CHECK(symlink(M "/sl/in", M "/sl/abs_in") == 0);
    CHECK(symlink(real_dir, M "/sl/abs_out") == 0);
    CHECK(stat(M "/sl/rel/f", &st) == 0 && st.st_size == 6);
    CHECK(stat(M "/sl/abs_in/f", &st) == 0 && st.st_size == 6);
    CHECK(lstat(M "/sl/abs_in", &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(stat(M "/sl/abs_in", &st) == 0 && S_ISDIR(st.st_mode));
    /* Out of the pool: the real file, whatever the pool holds under the same name. */
    CHECK(stat(real_file, &real_st) == 0);
    CHECK(stat(M "/sl/abs_out/outside.txt", &st) == 0);
    CHECK(st.st_ino == real_st.st_ino && st.st_dev == real_st.st_dev && st.st_size == 8);
    CHECK(!strcmp(get(M "/sl/abs_out/outside.txt"), "outside!"));
    /* ".." above the pool's root leads to the mount's parent directory. */
    CHECK(stat(M "/../sl/in/f", &st) == -1 && errno == ENOENT);
    CHECK(stat(M "/../engram/sl/in/f", &st) == 0 && st.st_size == 6);
    CHECK(stat(M "/sl/../../engram/sl/rel/f", &st) == 0 && st.st_size == 6);
    CHECK(symlink("/mnt", M "/sl/mnt") == 0);
    CHECK(stat(M "/sl/mnt/engram/sl/in/f", &st) == 0 && st.st_size == 6);
    fd = open(M "/sl/mnt/engram/sl/in/g", O_WRONLY | O_CREAT | O_EXCL, 0644);
    CHECK(fd >= 0 && close(fd) == 0);
    CHECK(stat(M "/sl/in/g", &st) == 0 && S_ISREG(st.st_mode));
    /* Created through links: inside, and out of the pool. */
    fd = open(M "/sl/abs_in/new", O_WRONLY | O_CREAT | O_EXCL, 0644);
    CHECK(fd >= 0 && close(fd) == 0);
    CHECK(stat(M "/sl/in/new", &st) == 0 && S_ISREG(st.st_mode));
    fd = open(M "/sl/abs_out/made_through_link", O_WRONLY | O_CREAT | O_EXCL, 0644);
    CHECK(fd >= 0 && write(fd, "r", 1) == 1 && close(fd) == 0);
    snprintf(link_target, sizeof link_target, "%s/made_through_link", real_dir);
    CHECK(stat(link_target, &real_st) == 0 && real_st.st_size == 1);
    CHECK(unlink(link_target) == 0 && unlink(real_file) == 0);
    /* Errors stay the kernel's. */
    CHECK(stat(M "/sl/in/f/x", &st) == -1 && errno == ENOTDIR);
    CHECK(stat(M "/sl/in/nothing", &st) == -1 && errno == ENOENT);
    CHECK(stat(M "/sl/in/f/", &st) == -1 && errno == ENOTDIR);
    CHECK(stat(M "/sl/abs_out/nothing", &st) == -1 && errno == ENOENT);
}

/* The *at calls relative to a descriptor of a pool directory: they walk from that
 * directory itself (so a rename of it changes nothing), ".." climbs out of it, and a path
 * that leaves the pool through ".." reaches the real file system. */
static void at_calls(void) {
    section = "at_calls";
    struct stat st;
    CHECK(mkdir(M "/at", 0755) == 0 && mkdir(M "/at/sub", 0755) == 0);
    int dfd = open(M "/at/sub", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(dfd >= 0);
    int fd = openat(dfd, "f", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    CHECK(fd >= 0 && write(fd, "at!", 3) == 3 && close(fd) == 0);
    CHECK(openat(dfd, "f", O_WRONLY | O_CREAT | O_EXCL, 0644) == -1 && errno == EEXIST);
    CHECK(fstatat(dfd, "f", &st, 0) == 0 && st.st_size == 3 && S_ISREG(st.st_mode));
    CHECK(mkdirat(dfd, "d", 0700) == 0);
    CHECK(fstatat(dfd, "d", &st, 0) == 0 && S_ISDIR(st.st_mode));
    CHECK(renameat(dfd, "f", dfd, "d/g") == 0);
    CHECK(fstatat(dfd, "f", &st, 0) == -1 && errno == ENOENT);
    CHECK(fstatat(dfd, "d/g", &st, 0) == 0 && st.st_size == 3);
    CHECK(fstatat(dfd, "d/g/", &st, 0) == -1 && errno == ENOTDIR);
    /* ".." from the descriptor's directory, and a rename of that directory. */
    CHECK(fstatat(dfd, "../sub/d/g", &st, 0) == 0 && st.st_size == 3);
    CHECK(rename(M "/at/sub", M "/at/moved") == 0);
    CHECK(fstatat(dfd, "d/g", &st, 0) == 0 && st.st_size == 3);
    fd = openat(dfd, "d/h", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    CHECK(fd >= 0 && close(fd) == 0);
    CHECK(stat(M "/at/moved/d/h", &st) == 0 && (st.st_mode & 0777) == 0600);
    /* linkat from the descriptor's directory (renamed since it was opened), both names
     * relative to it, then across to an absolute path; a flag linkat does not know. */
    CHECK(linkat(dfd, "d/h", dfd, "d/h2", 0) == 0);
    CHECK(stat(M "/at/moved/d/h2", &st) == 0 && st.st_nlink == 2);
    CHECK(linkat(dfd, "d/h", AT_FDCWD, M "/at/h3", 0) == 0);
    CHECK(stat(M "/at/moved/d/h", &st) == 0 && st.st_nlink == 3);
    CHECK(linkat(dfd, "d/h", dfd, "d/h2", 0) == -1 && errno == EEXIST);
    CHECK(linkat(dfd, "d/none", dfd, "d/h4", 0) == -1 && errno == ENOENT);
    CHECK(linkat(dfd, "d", dfd, "d2", 0) == -1 && errno == EPERM);
    CHECK(unlink(M "/at/h3") == 0 && unlinkat(dfd, "d/h2", 0) == 0);
    CHECK(unlinkat(dfd, "d/h", 0) == 0 && stat(M "/at/moved/d/h", &st) == -1);
    CHECK(unlinkat(dfd, "d", AT_REMOVEDIR) == -1 && errno == ENOTEMPTY);
    CHECK(unlinkat(dfd, "d/g", AT_REMOVEDIR) == -1 && errno == ENOTDIR);
    CHECK(unlinkat(dfd, "d", 0) == -1 && errno == EISDIR);
    CHECK(unlinkat(dfd, "d/g", 0) == 0 && unlinkat(dfd, "d", AT_REMOVEDIR) == 0);
    CHECK(unlinkat(dfd, "nothing", 0) == -1 && errno == ENOENT);
    /* Across two descriptors, and out of the pool through ".." above its root. */
    int top = open(M "/at", O_RDONLY | O_DIRECTORY);
    CHECK(top >= 0);
    put(M "/at/moved/x", "x");
    CHECK(renameat(dfd, "x", top, "y") == 0 && !strcmp(get(M "/at/y"), "x"));
    CHECK(fstatat(top, "../../engram/at/y", &st, 0) == 0 && st.st_size == 1);
    CHECK(fstatat(top, "../..", &st, 0) == 0 && S_ISDIR(st.st_mode));
    CHECK(fstatat(top, "../../engram-nothing", &st, 0) == -1 && errno == ENOENT);
    /* A directory removed while open: nothing can be created in it (ENOENT, as Linux). */
    CHECK(mkdir(M "/at/gone", 0755) == 0);
    int gone = open(M "/at/gone", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(gone >= 0 && rmdir(M "/at/gone") == 0);
    CHECK(openat(gone, "x", O_WRONLY | O_CREAT, 0644) == -1 && errno == ENOENT);
    CHECK(mkdirat(gone, "y", 0755) == -1 && errno == ENOENT);
    CHECK(close(gone) == 0);
    /* Errors of the descriptor itself. */
    fd = openat(top, "y", O_RDONLY);
    CHECK(fd >= 0);
    CHECK(fstatat(fd, "z", &st, 0) == -1 && errno == ENOTDIR);
    CHECK(openat(fd, "z", O_RDONLY) == -1 && errno == ENOTDIR);
    CHECK(close(fd) == 0 && close(top) == 0 && close(dfd) == 0);
    CHECK(fstatat(dfd, "d", &st, 0) == -1 && errno == EBADF);
}

/* closefrom(3) through the shim (glibc 2.34 has it, but say so without a warning). */
static int closefrom_(int low) { return close_range(low, ~0U, 0); }

/* Descriptor numbers: an open of ours takes the lowest free number, as the kernel's does,
 * also when it reuses the placeholder of a closed file; a number closed by the program is
 * closed to it (EBADF) and free for its own calls (dup2 onto it). */
static void descriptor_numbers(void) {
    section = "descriptor_numbers";
    put(M "/num", "n");
    int a = open(M "/num", O_RDONLY | O_CLOEXEC);
    int b = open(M "/num", O_RDONLY | O_CLOEXEC);
    CHECK(a >= 3 && b > a);
    CHECK(close(a) == 0 && close(b) == 0);
    int c = open(M "/num", O_RDONLY | O_CLOEXEC);
    CHECK(c == a);
    int d = open(M "/num", O_RDONLY | O_CLOEXEC);
    CHECK(d == b);
    char ch;
    CHECK(read(c, &ch, 1) == 1 && ch == 'n' && read(d, &ch, 1) == 1 && ch == 'n');
    CHECK(close(d) == 0);
    /* d's number: closed as far as the program knows. */
    CHECK(close(d) == -1 && errno == EBADF);
    CHECK(fcntl(d, F_GETFD) == -1 && errno == EBADF);
    /* A closed number of ours taken by the program's own dup2, then ours again. */
    CHECK(close(c) == 0);
    int real = open(real_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(real >= 0);
    CHECK(dup2(real, c) == c);
    struct stat st, real_st;
    CHECK(fstat(c, &st) == 0 && stat(real_dir, &real_st) == 0 && st.st_ino == real_st.st_ino);
    CHECK(close(c) == 0 && close(real) == 0);
    int e = open(M "/num", O_RDONLY | O_CLOEXEC);
    CHECK(e >= 3 && read(e, &ch, 1) == 1 && ch == 'n');
    /* close_range takes every number in its range back. */
    int f = open(M "/num", O_RDONLY | O_CLOEXEC);
    CHECK(f > e && close(f) == 0);
    CHECK(close_range(e, f, 0) == 0);
    CHECK(fcntl(e, F_GETFD) == -1 && errno == EBADF);
    CHECK(fcntl(f, F_GETFD) == -1 && errno == EBADF);
    int g = open(M "/num", O_RDONLY | O_CLOEXEC);
    CHECK(g == e && read(g, &ch, 1) == 1 && ch == 'n' && close(g) == 0);
    /* dup2 onto one of the shim's own numbers (its /dev/null, found as the kernel lists it)
     * makes the number the program's: its close then closes it. */
    int shims_null = -1;
    for (int fd = 64; fd < 1024 && shims_null < 0; fd++) {
        char link[64], target[64] = {0};
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        if (readlink(link, target, sizeof target - 1) > 0 && strcmp(target, "/dev/null") == 0)
            shims_null = fd;
    }
    CHECK(shims_null >= 64);
    CHECK(close(shims_null) == -1 && errno == EBADF); /* not the program's */
    int mine = open(real_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(mine >= 0 && dup2(mine, shims_null) == shims_null);
    CHECK(close(shims_null) == 0 && close(mine) == 0);
    int again = open(M "/num", O_RDONLY | O_CLOEXEC); /* the shim opens another /dev/null */
    CHECK(again >= 0 && close(again) == 0);
    /* The shim's daemon socket cannot be taken with dup2 (its number is how the shim talks
     * to the daemon); close_range's own errors stay the kernel's. */
    int shims_socket = -1;
    for (int fd = 64; fd < 1024 && shims_socket < 0; fd++) {
        char link[64], target[64] = {0};
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        if (readlink(link, target, sizeof target - 1) > 0 && strncmp(target, "socket:", 7) == 0)
            shims_socket = fd;
    }
    CHECK(shims_socket >= 64);
    CHECK(dup2(0, shims_socket) == -1 && errno == EBUSY);
    CHECK(close_range(10, 5, 0) == -1 && errno == EINVAL);
    CHECK(close_range(1000, 1001, 1u << 30) == -1 && errno == EINVAL);
    /* A child that closes every descriptor but 0-2, with closefrom, close_range or a loop of
     * close, goes on using the pool: the shim's own descriptors (its daemon connection) are
     * not the program's to close. */
    for (int how = 0; how < 3; how++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            struct stat cst;
            if (stat(M "/num", &cst) != 0)
                _exit(2);
            if (how == 0 && closefrom_(3) != 0)
                _exit(3);
            if (how == 1 && close_range(3, ~0U, 0) != 0)
                _exit(4);
            if (how == 2)
                for (int fd = 3; fd < 4096; fd++)
                    close(fd);
            char name[64];
            snprintf(name, sizeof name, M "/after-close-%d", how);
            int k = open(name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
            char back[3] = {0};
            if (k < 0 || write(k, "ok", 2) != 2 || pread(k, back, 2, 0) != 2 ||
                strcmp(back, "ok") != 0 || close(k) != 0)
                _exit(5);
            /* Numbers the program opens now are its own to close. */
            int z = open("/dev/null", O_RDONLY);
            _exit(z >= 0 && close(z) == 0 ? 0 : 6);
        }
        int status;
        CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status));
        if (WEXITSTATUS(status) != 0)
            fprintf(stderr, "close variant %d: child exit %d\n", how, WEXITSTATUS(status));
        CHECK(WEXITSTATUS(status) == 0);
    }
    /* Without O_CLOEXEC: inheritable, still the lowest number. */
    int h = open(M "/num", O_RDONLY);
    CHECK(h == e && (fcntl(h, F_GETFD) & FD_CLOEXEC) == 0 && close(h) == 0);
}

/* What Linux refuses, refused the same way in the pool. */
static void refusals(void) {
    section = "O_CREAT|O_DIRECTORY";
    CHECK(open(M "/nodir", O_RDONLY | O_CREAT | O_DIRECTORY, 0755) == -1 && errno == EINVAL);
    CHECK(access(M "/nodir", F_OK) == -1 && errno == ENOENT); /* nothing made */

    section = "copy_file_range and sendfile into O_APPEND";
    int in = open(M "/src", O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(in >= 0 && write(in, "abc", 3) == 3);
    int ap = open(M "/dst", O_WRONLY | O_CREAT | O_APPEND, 0644);
    CHECK(ap >= 0);
    off_t o = 0;
    CHECK(copy_file_range(in, &o, ap, NULL, 3, 0) == -1 && errno == EBADF);
    CHECK(sendfile(ap, in, &o, 3) == -1 && errno == EINVAL);
    CHECK(close(ap) == 0);

    section = "a null name beside a pool name (pjdfstest)";
    CHECK(link(M "/src", NULL) == -1 && errno == EFAULT);
    CHECK(rename(NULL, M "/src") == -1 && errno == EFAULT);
    CHECK(access(M "/src", F_OK) == 0);

    section = "lseek past the largest file";
    CHECK(lseek(in, (off_t)1 << 62, SEEK_SET) == -1 && errno == EINVAL); /* as ext4 */
    CHECK(lseek(in, 0, SEEK_CUR) == 3); /* unmoved */
    CHECK(close(in) == 0);

    section = "O_PATH descriptors";
    int p = open(M "/src", O_PATH);
    CHECK(p >= 0);
    CHECK(fchmod(p, 0600) == -1 && errno == EBADF);
    CHECK(fchown(p, 0, 0) == -1 && errno == EBADF);
    CHECK(fsync(p) == -1 && errno == EBADF);
    struct stat st;
    CHECK(fstat(p, &st) == 0 && (st.st_mode & 07777) == 0644); /* fstat works */
    CHECK(close(p) == 0);
    int pd = open(M, O_PATH | O_DIRECTORY);
    CHECK(pd >= 0);
    char dents[256];
    CHECK(syscall(SYS_getdents64, pd, dents, sizeof dents) == -1 && errno == EBADF);
    char target[16];
    CHECK(readlinkat(pd, "", target, sizeof target) == -1 && errno == ENOENT);
    CHECK(close(pd) == 0);

    section = "O_PATH asks no permission of the file; flags it ignores";
    CHECK(chmod(M "/src", 0) == 0);
    p = open(M "/src", O_PATH | O_CREAT | O_TRUNC | O_WRONLY, 0600);
    CHECK(p >= 0);
    CHECK(fstat(p, &st) == 0 && st.st_size == 3 && (st.st_mode & 07777) == 0); /* not truncated */
    CHECK((fcntl(p, F_GETFL) & (O_PATH | O_ACCMODE | O_TRUNC | O_CREAT)) == O_PATH);
    CHECK(chmod(M "/src", 0644) == 0);

    section = "linkat of a descriptor (AT_EMPTY_PATH)";
    CHECK(linkat(p, "", AT_FDCWD, M "/src2", AT_EMPTY_PATH) == 0);
    CHECK(stat(M "/src2", &st) == 0 && st.st_nlink == 2);
    CHECK(linkat(p, "", AT_FDCWD, "/dev/shm/engram-calls-outside", AT_EMPTY_PATH) == -1 &&
          errno == EXDEV);
    CHECK(unlink(M "/src2") == 0);
    CHECK(close(p) == 0);

    section = "O_PATH|O_NOFOLLOW opens a symlink itself";
    CHECK(symlink("src", M "/plink") == 0);
    int pl = open(M "/plink", O_PATH | O_NOFOLLOW);
    CHECK(pl >= 0);
    CHECK((fcntl(pl, F_GETFL) & (O_PATH | O_NOFOLLOW)) == (O_PATH | O_NOFOLLOW));
    CHECK(fstat(pl, &st) == 0 && S_ISLNK(st.st_mode) && st.st_size == 3);
    CHECK(fstatat(pl, "", &st, AT_EMPTY_PATH) == 0 && S_ISLNK(st.st_mode));
    CHECK(readlinkat(pl, "", target, sizeof target) == 3 && memcmp(target, "src", 3) == 0);
    CHECK(readlinkat(pl, "", target, 2) == 2);
    CHECK(read(pl, target, 1) == -1 && errno == EBADF);
    CHECK(fchdir(pl) == -1 && errno == ENOTDIR);
    CHECK(openat(pl, "x", O_RDONLY) == -1 && errno == ENOTDIR);
    CHECK(open(M "/plink", O_PATH | O_NOFOLLOW | O_DIRECTORY) == -1 && errno == ENOTDIR);
    CHECK(open(M "/plink", O_RDONLY | O_NOFOLLOW) == -1 && errno == ELOOP);
    CHECK(linkat(pl, "", AT_FDCWD, M "/plink2", AT_EMPTY_PATH) == 0);
    CHECK(lstat(M "/plink2", &st) == 0 && S_ISLNK(st.st_mode) && st.st_nlink == 2);
    CHECK(unlink(M "/plink") == 0 && unlink(M "/plink2") == 0);
    /* The descriptor keeps the link, with no name left. */
    CHECK(fstat(pl, &st) == 0 && st.st_nlink == 0);
    CHECK(readlinkat(pl, "", target, sizeof target) == 3);
    CHECK(linkat(pl, "", AT_FDCWD, M "/plink3", AT_EMPTY_PATH) == -1 && errno == ENOENT);
    CHECK(close(pl) == 0);
    int rd = open(M "/src", O_RDONLY | O_NOFOLLOW);
    CHECK(rd >= 0 && (fcntl(rd, F_GETFL) & (O_NOFOLLOW | O_ACCMODE)) == O_NOFOLLOW);
    CHECK(close(rd) == 0);

    section = "write to a directory descriptor";
    int wd = open(M, O_RDONLY | O_DIRECTORY);
    CHECK(wd >= 0 && write(wd, "x", 1) == -1 && errno == EBADF);
    CHECK(pwrite(wd, "x", 1, 0) == -1 && errno == EBADF);
    CHECK(close(wd) == 0);

    section = "times beyond the pool's range are clamped, not refused or wrapped";
    put(M "/times", "t");
    struct timeval far[2] = {{16725225600LL, 0}, {16725225600LL, 0}}; /* 2500-01-01 */
    CHECK(utimes(M "/times", far) == 0);
    CHECK(stat(M "/times", &st) == 0 && st.st_mtime > 7258118400LL); /* after 2200 */
    struct timespec early[2] = {{-11676096000LL, 0}, {-11676096000LL, 0}}; /* 1600-01-01 */
    CHECK(utimensat(AT_FDCWD, M "/times", early, 0) == 0);
    CHECK(stat(M "/times", &st) == 0 && st.st_mtime < -1000000000LL); /* before 1940 (ext4: 1901) */
    struct utimbuf ub = {16725225600LL, 16725225600LL};
    CHECK(utime(M "/times", &ub) == 0);
    CHECK(stat(M "/times", &st) == 0 && st.st_mtime > 7258118400LL);
    CHECK(unlink(M "/times") == 0);

    section = "sendfile into a non-blocking socket that fills";
    {
        size_t size = 3 << 20;
        unsigned char *data = malloc(size), *got = malloc(size);
        CHECK(data && got);
        for (size_t i = 0; i < size; i++) data[i] = (unsigned char)(i * 7 + i / 4096);
        int f = open(M "/sendsrc", O_RDWR | O_CREAT | O_TRUNC, 0644);
        CHECK(f >= 0 && write(f, data, size) == (ssize_t)size && lseek(f, 0, SEEK_SET) == 0);
        int sv[2];
        CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
        CHECK(fcntl(sv[0], F_SETFL, O_NONBLOCK) == 0 && fcntl(sv[1], F_SETFL, O_NONBLOCK) == 0);
        /* Each call sends what the socket takes and says so; the file offset (NULL) and the
         * caller's offset move by exactly that, so the bytes arrive once, in order. */
        size_t have = 0, sent = 0;
        for (int round = 0; have < size; round++) {
            int by_pointer = round % 2;
            off_t off = (off_t)sent;
            CHECK(lseek(f, (off_t)sent, SEEK_SET) == (off_t)sent);
            ssize_t r = by_pointer ? sendfile(sv[0], f, &off, size - sent)
                                   : sendfile(sv[0], f, NULL, size - sent);
            CHECK(r > 0 || (r == -1 && errno == EAGAIN));
            size_t before = sent;
            if (r > 0) sent += (size_t)r;
            if (by_pointer)
                CHECK(off == (off_t)sent && lseek(f, 0, SEEK_CUR) == (off_t)before);
            else
                CHECK(lseek(f, 0, SEEK_CUR) == (off_t)sent);
            ssize_t k;
            while ((k = read(sv[1], got + have, size - have)) > 0) have += (size_t)k;
            CHECK(have == sent);
        }
        CHECK(memcmp(got, data, size) == 0);
        CHECK(close(sv[0]) == 0 && close(sv[1]) == 0 && close(f) == 0 && unlink(M "/sendsrc") == 0);
        free(data);
        free(got);
    }

    section = "fchmodat of a symlink itself";
    CHECK(symlink("src", M "/srclink") == 0);
    CHECK(fchmodat(AT_FDCWD, M "/srclink", 0700, AT_SYMLINK_NOFOLLOW) == -1 &&
          errno == EOPNOTSUPP);
    CHECK(lstat(M "/srclink", &st) == 0 && (st.st_mode & 07777) == 0777);
    CHECK(unlink(M "/srclink") == 0 && unlink(M "/src") == 0 && unlink(M "/dst") == 0);
}

int main(int argc, char **argv) {
    CHECK(argc == 2 && strlen(argv[1]) < sizeof real_dir);
    strcpy(real_dir, argv[1]);
    setvbuf(stdout, NULL, _IONBF, 0);
    directories();
    locks();
    mappings();
    streams();
    descriptors();
    threads();
    filesystem_info();
    vectored();
    refusals();
    boundary();
    relative();
    symlinks();
    at_calls();
    descriptor_numbers();
    printf("CALLS-OK\n");
    return 0;
}
