/* fopen's and fdopen's append position and access checks on streams of files in the pool
 * (argv[1]) and in a real directory (argv[2]): every check runs on both, each result is
 * recorded, and the two records must be the same (glibc's own results on the real files).
 * Checks whose answer is known are also CHECKed, so that a record that is wrong the same
 * way on both sides still fails. Prints STDIO-OK. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

static char log_[65536];
static size_t log_len;

/* Record one result. */
static void rec(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(log_ + log_len, sizeof log_ - log_len, fmt, ap);
    va_end(ap);
    CHECK(n >= 0 && (size_t)n < sizeof log_ - log_len);
    log_len += (size_t)n;
}

static const char *dir;

static const char *at(const char *name) {
    static char p[4][512];
    static int i;
    i = (i + 1) % 4;
    snprintf(p[i], sizeof p[i], "%s/%s", dir, name);
    return p[i];
}

static void put_bytes(const char *name, const char *b, size_t n) {
    FILE *f = fopen(at(name), "w");
    CHECK(f && fwrite(b, 1, n, f) == n && fclose(f) == 0);
}

/* The file's first bytes, non-ASCII shown as \xNN, and its size. */
static void rec_bytes(const char *label, const char *name) {
    FILE *f = fopen(at(name), "r");
    CHECK(f);
    rec("%s=", label);
    int c;
    long n = 0;
    while ((c = getc(f)) != EOF)
        if (n++ < 100)
            rec(c >= 0x20 && c < 0x7f ? "%c" : "\\x%02x", c);
    rec(" (%ld bytes)\n", n);
    CHECK(fclose(f) == 0);
}

/* Write a string literal's bytes (without its NUL). */
#define PUT(name, lit) put_bytes(name, lit, sizeof lit - 1)

static void append_and_fdopen(void) {
    PUT("a", "hello world\n");
    FILE *f = fopen(at("a"), "a");
    CHECK(f && ftell(f) == 12);
    CHECK(fputs("x", f) >= 0 && ftell(f) == 13);
    CHECK(fclose(f) == 0);
    f = fopen(at("a"), "a+");
    CHECK(f && ftell(f) == 0);
    CHECK(fclose(f) == 0);
    /* fdopen "a" starts at the end where it added O_APPEND itself. */
    int fd = open(at("a"), O_WRONLY);
    f = fdopen(fd, "a");
    CHECK(f && ftell(f) == 13 && (fcntl(fd, F_GETFL) & O_APPEND));
    CHECK(fclose(f) == 0);
    fd = open(at("a"), O_WRONLY | O_APPEND);
    f = fdopen(fd, "a");
    CHECK(f && ftell(f) == 0);
    CHECK(fclose(f) == 0);
    fd = open(at("a"), O_RDWR);
    f = fdopen(fd, "a+");
    CHECK(f && ftell(f) == 0);
    CHECK(fclose(f) == 0);

    /* The mode may not ask for access the descriptor lacks. */
    static const char *modes[] = {"r", "w", "a", "r+", "w+", "a+"};
    static const int flags[] = {O_RDONLY, O_WRONLY, O_RDWR};
    for (int i = 0; i < 3; i++)
        for (int m = 0; m < 6; m++) {
            fd = open(at("a"), flags[i]);
            CHECK(fd >= 0);
            errno = 0;
            f = fdopen(fd, modes[m]);
            int write_mode = modes[m][0] != 'r' || modes[m][1] == '+';
            int read_mode = modes[m][0] == 'r' || modes[m][1] == '+';
            int ok = flags[i] == O_RDWR || (flags[i] == O_RDONLY && !write_mode) ||
                     (flags[i] == O_WRONLY && !read_mode);
            rec("fdopen_%d_%s=%d,%d\n", flags[i], modes[m], f != NULL, errno);
            if (ok) {
                CHECK(f != NULL);
                CHECK(fclose(f) == 0);
            } else {
                CHECK(f == NULL && errno == EINVAL);
                CHECK(close(fd) == 0); /* still open */
            }
        }
    rec_bytes("a", "a");
}

static void run(const char *d) {
    dir = d;
    append_and_fdopen();
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    char pool_dir[512], real_dir[512];
    snprintf(pool_dir, sizeof pool_dir, "%s/stdio-files", argv[1]);
    snprintf(real_dir, sizeof real_dir, "%s/stdio-files", argv[2]);
    CHECK(mkdir(pool_dir, 0755) == 0 && mkdir(real_dir, 0755) == 0);
    run(real_dir);
    static char real_log[sizeof log_];
    memcpy(real_log, log_, log_len + 1);
    log_len = 0;
    run(pool_dir);
    if (strcmp(real_log, log_) != 0) {
        fprintf(stderr, "FAIL: the pool differs from a real directory\n--- real\n%s--- pool\n%s",
                real_log, log_);
        return 1;
    }
    printf("%sSTDIO-OK\n", log_);
    return 0;
}
