/* Wide-character stdio, and fopen's and fdopen's append position and access checks, on
 * streams of files in the pool (argv[1]) and in a real directory (argv[2]): every check
 * runs on both, each result is recorded, and the two records must be the same (glibc's
 * own results on the real files). Checks whose answer is known are also CHECKed, so that
 * a record that is wrong the same way on both sides still fails. Prints STDIO-OK.
 *
 * Covered: a rev-like fgetws loop, fgetwc and ungetwc (and ftell around them), UTF-8 of
 * two to four bytes under C.UTF-8, EILSEQ on an invalid and end of file on a truncated
 * sequence, fwide, fputwc/putwc/fputws/fwprintf written and read back (bytes and
 * characters), the _unlocked and fortified forms, the C locale (EILSEQ on input,
 * transliteration or '?' on output), the locale fixed at orientation, fwscanf (across
 * lines, a matching failure, the end, a line longer than its read-ahead), getwchar,
 * wscanf, wprintf and putwchar on a stdin and stdout freopen'd to the files, perror on
 * such a stderr, ftell of "a"/"a+" streams and fdopen's access checks. */
#define _GNU_SOURCE
#include "check.h"
#include <fcntl.h>
#include <locale.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <wchar.h>

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

static volatile int big_n = 64; /* not a constant: fgetws goes to __fgetws_chk */

/* rev: lines through fgetws, with a buffer shorter than some lines. */
static void rev_like(void) {
    PUT("rev", "ab\nxyz\nh\xc3\xa9llo w\xc3\xb6rld \xe2\x82\xac\n\nno newline");
    FILE *f = fopen(at("rev"), "r");
    CHECK(f);
    wchar_t buf[5], line[256];
    size_t len = 0;
    int lines = 0;
    while (fgetws(buf, 5, f)) {
        size_t k = wcslen(buf);
        CHECK(len + k < 256);
        wmemcpy(line + len, buf, k);
        len += k;
        if (line[len - 1] != L'\n' && !feof(f))
            continue;
        rec("rev%d=", lines++);
        for (size_t i = len; i-- > 0;)
            if (line[i] != L'\n')
                rec("%lc", (wint_t)line[i]);
        rec("\n");
        len = 0;
    }
    CHECK(feof(f) && !ferror(f) && lines == 5);
    CHECK(fclose(f) == 0);
    /* The same through the fortified fgetws and fgetws_unlocked, whole lines. */
    f = fopen(at("rev"), "r");
    wchar_t big[64];
    CHECK(fgetws(big, big_n, f) == big && wcscmp(big, L"ab\n") == 0);
    flockfile(f);
    CHECK(fgetws_unlocked(big, big_n, f) == big && wcscmp(big, L"xyz\n") == 0);
    funlockfile(f);
    CHECK(fgetws(big, big_n, f) == big && wcscmp(big, L"h\u00e9llo w\u00f6rld \u20ac\n") == 0);
    /* Plain fgetws (not the fortified one), n of 1 and 0. */
    wchar_t *(*plain)(wchar_t *, int, FILE *) = fgetws;
    CHECK(plain(big, 64, f) == big && wcscmp(big, L"\n") == 0);
    big[0] = L'x';
    CHECK(plain(big, 1, f) == big && big[0] == 0);
    CHECK(plain(big, 0, f) == NULL);
    CHECK(plain(big, 64, f) == big && wcscmp(big, L"no newline") == 0);
    CHECK(plain(big, 64, f) == NULL && feof(f));
    CHECK(fclose(f) == 0);
}

static void getwc_ungetwc(void) {
    PUT("g", "x\xc3\xa9y\xe2\x82\xac\xf0\x9f\x98\x80\n");
    FILE *f = fopen(at("g"), "r");
    CHECK(f);
    CHECK(fgetwc(f) == L'x');
    wint_t c = fgetwc(f);
    CHECK(c == 0xe9);
    rec("tell_after_e9=%ld\n", ftell(f));
    CHECK(ungetwc(c, f) == c);
    rec("tell_after_unget=%ld\n", ftell(f));
    CHECK(ftell(f) == 1);
    CHECK(getwc(f) == 0xe9);
    flockfile(f);
    CHECK(fgetwc_unlocked(f) == L'y');
    CHECK(getwc_unlocked(f) == 0x20ac);
    funlockfile(f);
    CHECK(fgetwc(f) == 0x1f600);
    rec("tell_after_4byte=%ld\n", ftell(f));
    CHECK(fgetwc(f) == L'\n');
    CHECK(ungetwc(WEOF, f) == WEOF);
    CHECK(fgetwc(f) == WEOF && feof(f) && !ferror(f));
    /* A push-back clears the end of file; a character that was never read goes back too. */
    CHECK(ungetwc(L'z', f) == L'z' && !feof(f));
    CHECK(fgetwc(f) == L'z' && fgetwc(f) == WEOF);
    /* fseek drops pushed-back characters. */
    CHECK(ungetwc(0x20ac, f) == 0x20ac);
    CHECK(fseek(f, 3, SEEK_SET) == 0 && fgetwc(f) == L'y');
    CHECK(fclose(f) == 0);
}

static void bad_input(void) {
    PUT("bad", "a\xc3(b");
    FILE *f = fopen(at("bad"), "r");
    CHECK(fgetwc(f) == L'a');
    for (int i = 0; i < 2; i++) {
        errno = 0;
        CHECK(fgetwc(f) == WEOF && errno == EILSEQ && ferror(f) && !feof(f));
        rec("bad_tell%d=%ld\n", i, ftell(f));
    }
    clearerr(f);
    rec("bad_byte=%d\n", fgetc(f));
    CHECK(fclose(f) == 0);

    /* A sequence cut short by the end of the file is the end of the file. */
    PUT("cut", "ab\xc3");
    f = fopen(at("cut"), "r");
    CHECK(fgetwc(f) == L'a' && fgetwc(f) == L'b');
    errno = 0;
    CHECK(fgetwc(f) == WEOF && errno == 0 && feof(f) && !ferror(f));
    rec("cut_tell=%ld\n", ftell(f));
    CHECK(fgetwc(f) == WEOF && feof(f));
    CHECK(fclose(f) == 0);

    /* fgetws fails on an invalid byte in the middle of a line, after consuming its start. */
    PUT("badline", "ab\xffz\n");
    f = fopen(at("badline"), "r");
    wchar_t b[16];
    errno = 0;
    CHECK(fgetws(b, 16, f) == NULL && errno == EILSEQ && ferror(f));
    rec("badline_tell=%ld\n", ftell(f));
    CHECK(fclose(f) == 0);
}

static void orientation(void) {
    PUT("o", "abc\n");
    FILE *f = fopen(at("o"), "r");
    CHECK(fwide(f, 0) == 0);
    CHECK(fwide(f, 1) == 1 && fwide(f, -1) == 1 && fwide(f, 0) == 1);
    CHECK(fgetwc(f) == L'a');
    CHECK(fclose(f) == 0);

    f = fopen(at("o"), "r+");
    CHECK(fwide(f, -1) == -1 && fwide(f, 1) == -1 && fwide(f, 0) == -1);
    CHECK(fgetwc(f) == WEOF && !ferror(f));
    CHECK(fputwc(L'x', f) == WEOF);
    CHECK(fputws(L"x", f) == -1);
    CHECK(fwprintf(f, L"x") == -1);
    wchar_t b[8];
    CHECK(fgetws(b, 8, f) == NULL);
    CHECK(fclose(f) == 0);

    /* Byte functions orient a stream too. */
    f = fopen(at("o"), "r");
    CHECK(fgetc(f) == 'a' && fwide(f, 0) == -1 && fgetwc(f) == WEOF);
    CHECK(fclose(f) == 0);
    f = fopen(at("o2"), "w");
    CHECK(fputs("z", f) >= 0 && fwide(f, 0) == -1 && fputwc(L'a', f) == WEOF);
    CHECK(fclose(f) == 0);
    rec_bytes("o2", "o2");

    /* fdopen's stream starts unoriented too. */
    int fd = open(at("o"), O_RDONLY);
    f = fdopen(fd, "r");
    CHECK(f && fwide(f, 0) == 0 && fgetwc(f) == L'a' && fwide(f, 0) == 1);
    CHECK(fclose(f) == 0);

    /* Two streams on one descriptor each read wide characters (the first one's buffered
     * read takes the file's four bytes, so the second finds the end). */
    fd = open(at("o"), O_RDONLY);
    FILE *f1 = fdopen(fd, "r"), *f2 = fdopen(fd, "r");
    CHECK(f1 && f2);
    CHECK(fgetwc(f1) == L'a' && fgetwc(f2) == WEOF && !ferror(f2));
    CHECK(fwide(f1, 0) == 1 && fwide(f2, 0) == 1 && fgetwc(f1) == L'b');
    CHECK(fclose(f2) == 0);
    fclose(f1); /* its descriptor is closed already: EBADF, as with glibc's streams */
}

static void write_read_back(void) {
    FILE *f = fopen(at("w"), "w+");
    CHECK(f);
    CHECK(fputwc(0xe9, f) == 0xe9);
    CHECK(putwc(L'!', f) == L'!');
    int r = fputws(L" \u20ac and \U0001F600\n", f);
    CHECK(r >= 0);
    rec("fputws=%d\n", r);
    rec("fwprintf=%d\n",
        fwprintf(f, L"%d %ls %s|%5.2f|%lc\n", 42, L"w\u00f6rd", "n\xc3\xa4rrow", 3.14159,
                 (wint_t)0x20ac));
    int (*plain)(FILE *, const wchar_t *, ...) = fwprintf;
    rec("plain_fwprintf=%d\n", plain(f, L"[%5ls]\n", L"\u00e9"));
    flockfile(f);
    CHECK(fputwc_unlocked(L'u', f) == L'u' && putwc_unlocked(L'v', f) == L'v');
    CHECK(fputws_unlocked(L"\u00fc\n", f) >= 0);
    funlockfile(f);
    /* A long one, past the formatter's and the converter's buffers. */
    wchar_t longw[3001];
    for (int i = 0; i < 3000; i++)
        longw[i] = i % 2 ? L'\u00e9' : L'a';
    longw[3000] = 0;
    rec("fwprintf_long=%d\n", fwprintf(f, L"%ls\n", longw));
    CHECK(fflush(f) == 0);
    rec("tell_written=%ld\n", ftell(f));
    rewind(f);
    wchar_t b[4000];
    int n = 0;
    while (fgetws(b, 4000, f)) {
        rec("line%d=%zu:", n++, wcslen(b));
        for (size_t i = 0; i < wcslen(b) && i < 40; i++)
            rec("%04x.", (unsigned)b[i]);
        rec("\n");
    }
    CHECK(n == 5 && feof(f));
    CHECK(fclose(f) == 0);
    rec_bytes("w", "w");
}

static void c_locale(void) {
    CHECK(setlocale(LC_ALL, "C"));
    PUT("c", "a\xc3\xa9");
    FILE *f = fopen(at("c"), "r");
    CHECK(fgetwc(f) == L'a');
    errno = 0;
    CHECK(fgetwc(f) == WEOF && errno == EILSEQ && ferror(f));
    CHECK(fclose(f) == 0);
    /* Output in the C locale: transliterated (the euro sign as EUR) or '?'. */
    f = fopen(at("cw"), "w");
    errno = 0;
    CHECK(fputws(L"a\u20acb\u00e9c\u2018d", f) >= 0 && errno == 0);
    CHECK(fclose(f) == 0);
    rec_bytes("c_out", "cw");
    /* The conversion is the locale's when the stream was oriented. */
    PUT("fixed", "x\xc3\xa9");
    f = fopen(at("fixed"), "r");
    CHECK(fwide(f, 1) == 1);
    CHECK(setlocale(LC_ALL, "C.UTF-8"));
    CHECK(fgetwc(f) == L'x');
    errno = 0;
    CHECK(fgetwc(f) == WEOF && errno == EILSEQ);
    CHECK(fclose(f) == 0);
    f = fopen(at("fixed"), "r");
    CHECK(fgetwc(f) == L'x' && fgetwc(f) == 0xe9);
    CHECK(fclose(f) == 0);
}

static void scanning(void) {
    PUT("s", "  42 h\xc3\xa9llo 3.5\nnext 7\n\n\n  9 abc");
    FILE *f = fopen(at("s"), "r");
    int i = 0, j = 0;
    double d = 0;
    wchar_t w[64];
    CHECK(fwscanf(f, L"%d %ls %lf", &i, w, &d) == 3);
    CHECK(i == 42 && wcscmp(w, L"h\u00e9llo") == 0 && d == 3.5);
    rec("scan_tell1=%ld\n", ftell(f));
    CHECK(fgetwc(f) == L'\n');
    /* A scan whose input goes on over several lines. */
    CHECK(fwscanf(f, L"%ls %d %d", w, &i, &j) == 3 && wcscmp(w, L"next") == 0 && i == 7 &&
          j == 9);
    rec("scan_tell2=%ld\n", ftell(f));
    /* A matching failure leaves the character unread. */
    CHECK(fwscanf(f, L"%d", &i) == 0 && fgetwc(f) == L'a');
    int (*plain)(FILE *, const wchar_t *, ...) = fwscanf;
    CHECK(plain(f, L"%ls%n", w, &i) == 1 && wcscmp(w, L"bc") == 0 && i == 2 && feof(f));
    CHECK(fwscanf(f, L"%d", &i) == EOF && feof(f));
    CHECK(fclose(f) == 0);

    /* A token longer than the first read-ahead (whose pieces end in the middle of a
     * two-byte character), and what follows it. */
    static char longb[20010];
    longb[0] = 'x';
    for (int k = 0; k < 9999; k++)
        memcpy(longb + 1 + 2 * k, "\xc3\xa9", 2);
    memcpy(longb + 19999, " 5 rest\n", 8);
    put_bytes("sl", longb, 20007);
    f = fopen(at("sl"), "r");
    static wchar_t lw[20001];
    CHECK(fwscanf(f, L"%ls %d", lw, &i) == 2 && wcslen(lw) == 10000 && lw[9999] == 0xe9 &&
          i == 5);
    rec("scan_long_tell=%ld\n", ftell(f));
    CHECK(fgetws(w, 64, f) && wcscmp(w, L" rest\n") == 0);
    CHECK(fclose(f) == 0);

    /* An invalid byte: glibc's scanner stops there with EILSEQ. */
    PUT("sb", "12 a\xff\n");
    f = fopen(at("sb"), "r");
    errno = 0;
    int r = fwscanf(f, L"%d %ls", &i, w);
    rec("scan_bad=%d,%d,%d,%d,%ld\n", r, i, errno, ferror(f) != 0, ftell(f));
    CHECK(fclose(f) == 0);
}

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

/* stdin, stdout and stderr freopen'd to the directory's files, in a child. */
static void standard_streams(void) {
    PUT("in", "h\xc3\xa9 12 w\xc3\xb6rd\nrest\n");
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (!freopen(at("in"), "r", stdin) || !freopen(at("out"), "w", stdout) ||
            !freopen(at("err"), "w", stderr))
            _exit(2);
        int i = 0;
        wchar_t w[32];
        if (getwchar() != L'h' || getwchar() != 0xe9 || wscanf(L"%d %ls", &i, w) != 2 ||
            i != 12 || wcscmp(w, L"w\u00f6rd") != 0 || getwchar() != L'\n')
            _exit(3);
        int (*plain)(const wchar_t *, ...) = wprintf;
        if (wprintf(L"%d:%ls\n", i, w) != 8 || plain(L"[%lc]", (wint_t)0x20ac) != 3 ||
            putwchar(L'\n') != L'\n')
            _exit(4);
        errno = ENOENT;
        perror("pe");
        fflush(NULL);
        _exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st));
    rec("child=%d\n", WEXITSTATUS(st));
    CHECK(WEXITSTATUS(st) == 0);
    rec_bytes("out", "out");
    rec_bytes("err", "err");
}

static void run(const char *d) {
    dir = d;
    CHECK(setlocale(LC_ALL, "C.UTF-8"));
    rev_like();
    getwc_ungetwc();
    bad_input();
    orientation();
    write_read_back();
    c_locale();
    scanning();
    append_and_fdopen();
    standard_streams();
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
