/*
 * The fwprintf and fwscanf families for libengram_preload.so, on the shim's own streams
 * (made with fopencookie, which have no wide-character data: glibc's own crash on them;
 * see src/wide/mod.rs). Every other stream goes to glibc's functions unchanged. Variadic
 * functions cannot be defined in stable Rust: the exported symbols are naked Rust
 * trampolines (wide/mod.rs) that jump here with every register and stack argument intact.
 *
 * fwprintf formats with glibc's own vfwprintf into a wide memory stream, and the shim
 * writes the characters to the stream in its locale (engram_preload_wide_put).
 *
 * fwscanf runs glibc's own vfwscanf on a real wide stream over a memfd that holds the
 * input read so far from the shim's stream, a line at a time, as a terminal would give it.
 * Where the scan reached the end of that input while the stream has more, another line is
 * read and the scan runs again from the start, with the same arguments: what it stored the
 * first time is stored again or overwritten, since a scan of the longer input goes the same
 * way up to where the shorter one ended (only a %m allocation of the first run is lost).
 * The bytes the final scan did not consume (ftell of the memfd stream) go back onto the
 * shim's stream with ungetc.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <locale.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <wchar.h>

/* In Rust (wide/): whether fp is one of the shim's streams (no lock, errno untouched);
 * with its lock held, make it wide-oriented (1, or -1 where it is byte-oriented) and give
 * its locale (NULL: the thread's); write n wide characters to it (0, or -1). */
extern int engram_preload_wide_ours(FILE *fp);
extern int engram_preload_wide_orient(FILE *fp, locale_t *loc);
extern int engram_preload_wide_put(FILE *fp, const wchar_t *ws, size_t n);

typedef int (*vfwprintf_fn)(FILE *, const wchar_t *, va_list);
typedef int (*vfwprintf_chk_fn)(FILE *, int, const wchar_t *, va_list);
typedef int (*vwprintf_fn)(const wchar_t *, va_list);
typedef int (*vwprintf_chk_fn)(int, const wchar_t *, va_list);
typedef int (*vfwscanf_fn)(FILE *, const wchar_t *, va_list);
typedef int (*vwscanf_fn)(const wchar_t *, va_list);

static void *next(const char *name, const char *fallback, void **cache) {
    void *p = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
    if (!p) {
        p = dlsym(RTLD_NEXT, name);
        /* __isoc23_ names came with glibc 2.38; an older glibc has only the C99 ones. */
        if (!p && fallback)
            p = dlsym(RTLD_NEXT, fallback);
        if (!p)
            abort();
        __atomic_store_n(cache, p, __ATOMIC_RELEASE);
    }
    return p;
}

#define REAL(type, name, fallback)                                                         \
    ({                                                                                     \
        static void *cache_;                                                               \
        (type) next(name, fallback, &cache_);                                              \
    })

/* ---- fwprintf ---- */

/* Whether fp (ours) is or becomes wide-oriented, and its locale in *loc. */
static int orient(FILE *fp, locale_t *loc) {
    flockfile(fp);
    int r = engram_preload_wide_orient(fp, loc);
    funlockfile(fp);
    return r == 1;
}

/* Format into a wide memory stream with glibc's vfwprintf (the fortified one where `chk`),
 * then write to fp: the number of wide characters, or -1. glibc takes its list of streams
 * before a stream's lock (fflush(NULL) holds the list while it takes each lock), so the
 * memory stream is made and closed while fp's lock is not held. */
static int print_ours(FILE *fp, int chk, int flag, const wchar_t *fmt, va_list ap) {
    if (!orient(fp, NULL))
        return -1;
    wchar_t *buf = NULL;
    size_t len = 0;
    FILE *m = open_wmemstream(&buf, &len);
    if (!m)
        return -1;
    int n;
    if (chk)
        n = REAL(vfwprintf_chk_fn, "__vfwprintf_chk", NULL)(m, flag, fmt, ap);
    else
        n = REAL(vfwprintf_fn, "vfwprintf", NULL)(m, fmt, ap);
    if (fclose(m) != 0)
        n = -1;
    if (n >= 0) {
        flockfile(fp);
        if (engram_preload_wide_put(fp, buf, len) != 0)
            n = -1;
        funlockfile(fp);
    }
    int e = errno;
    free(buf);
    errno = e;
    return n;
}

#define EXPORT __attribute__((visibility("hidden")))

EXPORT int engram_c_vfwprintf(FILE *fp, const wchar_t *fmt, va_list ap) {
    if (!engram_preload_wide_ours(fp))
        return REAL(vfwprintf_fn, "vfwprintf", NULL)(fp, fmt, ap);
    return print_ours(fp, 0, 0, fmt, ap);
}

EXPORT int engram_c_vfwprintf_chk(FILE *fp, int flag, const wchar_t *fmt, va_list ap) {
    if (!engram_preload_wide_ours(fp))
        return REAL(vfwprintf_chk_fn, "__vfwprintf_chk", NULL)(fp, flag, fmt, ap);
    return print_ours(fp, 1, flag, fmt, ap);
}

EXPORT int engram_c_vwprintf(const wchar_t *fmt, va_list ap) {
    if (!engram_preload_wide_ours(stdout))
        return REAL(vwprintf_fn, "vwprintf", NULL)(fmt, ap);
    return print_ours(stdout, 0, 0, fmt, ap);
}

EXPORT int engram_c_vwprintf_chk(int flag, const wchar_t *fmt, va_list ap) {
    if (!engram_preload_wide_ours(stdout))
        return REAL(vwprintf_chk_fn, "__vwprintf_chk", NULL)(flag, fmt, ap);
    return print_ours(stdout, 1, flag, fmt, ap);
}

/* A variadic front for function `v` whose arguments are `params` and then `last`. */
#define VARIADIC(name, v, last, params, args)                                              \
    EXPORT int name params {                                                               \
        va_list ap;                                                                        \
        va_start(ap, last);                                                                \
        int r = v args;                                                                    \
        va_end(ap);                                                                        \
        return r;                                                                          \
    }

VARIADIC(engram_c_fwprintf, engram_c_vfwprintf, fmt, (FILE * fp, const wchar_t *fmt, ...),
         (fp, fmt, ap))
VARIADIC(engram_c_fwprintf_chk, engram_c_vfwprintf_chk, fmt,
         (FILE * fp, int flag, const wchar_t *fmt, ...), (fp, flag, fmt, ap))
VARIADIC(engram_c_wprintf, engram_c_vwprintf, fmt, (const wchar_t *fmt, ...), (fmt, ap))
VARIADIC(engram_c_wprintf_chk, engram_c_vwprintf_chk, fmt, (int flag, const wchar_t *fmt, ...),
         (flag, fmt, ap))

/* ---- fwscanf ---- */

/* glibc's scanners: plain (GNU %a), C99 and C23 (%b, 0b) flavours. */
enum { PLAIN, ISOC99, ISOC23 };

static vfwscanf_fn real_vfwscanf(int kind) {
    switch (kind) {
    case ISOC99:
        return REAL(vfwscanf_fn, "__isoc99_vfwscanf", NULL);
    case ISOC23:
        return REAL(vfwscanf_fn, "__isoc23_vfwscanf", "__isoc99_vfwscanf");
    default:
        return REAL(vfwscanf_fn, "vfwscanf", NULL);
    }
}

static vwscanf_fn real_vwscanf(int kind) {
    switch (kind) {
    case ISOC99:
        return REAL(vwscanf_fn, "__isoc99_vwscanf", NULL);
    case ISOC23:
        return REAL(vwscanf_fn, "__isoc23_vwscanf", "__isoc99_vwscanf");
    default:
        return REAL(vwscanf_fn, "vwscanf", NULL);
    }
}

struct input {
    char *data;
    size_t len, cap;
};

/* Read another line of fp into `in` (in pieces of at most about `limit` bytes, each ending
 * where a character does, in fp's locale): 1, 0 at fp's end or error, -1 out of memory. */
static int feed(FILE *fp, struct input *in, size_t limit, locale_t loc) {
    locale_t old = loc ? uselocale(loc) : NULL;
    mbstate_t st;
    memset(&st, 0, sizeof st);
    int r = 1;
    for (size_t got = 0; got < limit || !mbsinit(&st); got++) {
        if (in->len == in->cap) {
            size_t cap = in->cap ? 2 * in->cap : 256;
            char *d = realloc(in->data, cap);
            if (!d) {
                r = -1;
                break;
            }
            in->data = d;
            in->cap = cap;
        }
        int c = getc_unlocked(fp);
        if (c == EOF) {
            r = 0;
            break;
        }
        in->data[in->len++] = (char)c;
        char b = (char)c;
        if (mbrtowc(NULL, &b, 1, &st) == (size_t)-1)
            memset(&st, 0, sizeof st); /* the scan stops there */
        if (c == '\n')
            break;
    }
    if (old)
        uselocale(old);
    return r;
}

/* Push bytes back onto fp, last first. */
static void unread(FILE *fp, const char *b, size_t n) {
    while (n > 0)
        ungetc((unsigned char)b[--n], fp);
}

struct scan {
    int ret, err, at_end, failed;
    long used;
};

/* Scan the input read so far, from its start, on m (a real wide stream over memfd fd,
 * which holds its first `*stored` bytes): 0, or -1 (errno) where they could not be stored. */
static int scan_input(const struct input *in, int fd, size_t *stored, FILE *m,
                      vfwscanf_fn scanner, const wchar_t *fmt, va_list ap, struct scan *s) {
    while (*stored < in->len) {
        ssize_t k = pwrite(fd, in->data + *stored, in->len - *stored, (off_t)*stored);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        *stored += (size_t)k;
    }
    if (fseek(m, 0, SEEK_SET) != 0)
        return -1;
    clearerr(m);
    va_list aq;
    va_copy(aq, ap);
    errno = 0;
    s->ret = scanner(m, fmt, aq);
    s->err = errno;
    va_end(aq);
    s->at_end = feof(m);
    s->failed = ferror(m);
    s->used = ftell(m);
    if (s->used < 0 || (size_t)s->used > in->len)
        s->used = (long)in->len;
    return 0;
}

/* A memfd and an unoriented real stream over it, made before fp's lock is taken (see
 * print_ours). */
static FILE *scratch_stream(int *fd) {
    *fd = memfd_create("engram-wscanf", MFD_CLOEXEC);
    if (*fd < 0)
        return NULL;
    FILE *m = fdopen(*fd, "r");
    if (!m) {
        int e = errno;
        close(*fd);
        errno = e;
    }
    return m;
}

static int scan_ours(FILE *fp, vfwscanf_fn scanner, const wchar_t *fmt, va_list ap) {
    int fd;
    FILE *m = scratch_stream(&fd);
    if (!m)
        return EOF;
    locale_t loc = NULL;
    flockfile(fp);
    if (engram_preload_wide_orient(fp, &loc) != 1) {
        funlockfile(fp);
        fclose(m);
        return EOF;
    }
    /* A wide stream's conversion is fixed when it is oriented: fp's. */
    locale_t old = loc ? uselocale(loc) : NULL;
    fwide(m, 1);
    if (old)
        uselocale(old);
    int eof_before = fp->_flags & _IO_EOF_SEEN;
    struct input in = {0};
    struct scan s = {0};
    size_t stored = 0, limit = 4096;
    int more = 1, err = 0;
    for (;;) {
        if (more) {
            more = feed(fp, &in, limit, loc);
            /* A long line is read in growing pieces: few scans, a bounded push-back. */
            if (limit < ((size_t)1 << 24))
                limit *= 2;
        }
        if (more < 0 || scan_input(&in, fd, &stored, m, scanner, fmt, ap, &s) < 0) {
            err = more < 0 ? ENOMEM : errno;
            break;
        }
        if (!s.at_end || !more)
            break;
    }
    int eof_after = fp->_flags & _IO_EOF_SEEN;
    if (err) {
        unread(fp, in.data, in.len);
        s.ret = EOF;
        s.err = err;
        fp->_flags |= _IO_ERR_SEEN;
    } else {
        unread(fp, in.data + s.used, in.len - (size_t)s.used);
        if (s.failed)
            fp->_flags |= _IO_ERR_SEEN;
    }
    /* The end-of-file indicator is set only where the scan reached the end. */
    fp->_flags &= ~_IO_EOF_SEEN;
    fp->_flags |= (!err && s.at_end) ? eof_after : eof_before;
    funlockfile(fp);
    free(in.data);
    fclose(m);
    errno = s.err;
    return s.ret;
}

static int vfwscanf_as(int kind, FILE *fp, const wchar_t *fmt, va_list ap) {
    if (!engram_preload_wide_ours(fp))
        return real_vfwscanf(kind)(fp, fmt, ap);
    return scan_ours(fp, real_vfwscanf(kind), fmt, ap);
}

static int vwscanf_as(int kind, const wchar_t *fmt, va_list ap) {
    if (!engram_preload_wide_ours(stdin))
        return real_vwscanf(kind)(fmt, ap);
    return scan_ours(stdin, real_vfwscanf(kind), fmt, ap);
}

#define SCANNERS(prefix, kind)                                                             \
    EXPORT int engram_c_##prefix##vfwscanf(FILE *fp, const wchar_t *fmt, va_list ap) {     \
        return vfwscanf_as(kind, fp, fmt, ap);                                             \
    }                                                                                      \
    EXPORT int engram_c_##prefix##vwscanf(const wchar_t *fmt, va_list ap) {                \
        return vwscanf_as(kind, fmt, ap);                                                  \
    }                                                                                      \
    VARIADIC(engram_c_##prefix##fwscanf, vfwscanf_as, fmt,                                 \
             (FILE * fp, const wchar_t *fmt, ...), (kind, fp, fmt, ap))                    \
    VARIADIC(engram_c_##prefix##wscanf, vwscanf_as, fmt, (const wchar_t *fmt, ...),        \
             (kind, fmt, ap))

SCANNERS(, PLAIN)
SCANNERS(isoc99_, ISOC99)
SCANNERS(isoc23_, ISOC23)
