/*
 * dprintf and friends for libengram_preload.so.
 *
 * glibc's dprintf/vdprintf write through an internal write on the descriptor itself, so on
 * an EngramFS descriptor (a placeholder) the data would never reach the pool. These format
 * into a buffer with vsnprintf and hand the bytes to the shim's write path instead.
 * Variadic functions cannot be defined in stable Rust: the exported symbols are naked Rust
 * trampolines (printf.rs) that jump here with every register and stack argument intact.
 *
 * Descriptors that are not EngramFS's go to the real functions unchanged.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

/* In Rust (printf.rs): whether fd is one of the shim's (one atomic load), and a write of
 * all n bytes through the shim (guarded: never unwinds). */
extern int engram_preload_is_ours(int fd);
extern ssize_t engram_preload_write_all(int fd, const char *buf, size_t n);

/* glibc's fortified formatter (keeps the %n and argument checks of _FORTIFY_SOURCE). */
extern int __vsnprintf_chk(char *s, size_t maxlen, int flag, size_t slen, const char *fmt,
                           va_list ap);

typedef int (*vdprintf_fn)(int, const char *, va_list);
typedef int (*vdprintf_chk_fn)(int, int, const char *, va_list);

static void *next(const char *name, void **cache) {
    void *p = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
    if (!p) {
        p = dlsym(RTLD_NEXT, name);
        if (!p)
            p = dlsym(RTLD_DEFAULT, name);
        if (!p)
            abort();
        __atomic_store_n(cache, p, __ATOMIC_RELEASE);
    }
    return p;
}

static int real_vdprintf(int fd, const char *fmt, va_list ap) {
    static void *cache;
    return ((vdprintf_fn)next("vdprintf", &cache))(fd, fmt, ap);
}

static int real_vdprintf_chk(int fd, int flag, const char *fmt, va_list ap) {
    static void *cache;
    return ((vdprintf_chk_fn)next("__vdprintf_chk", &cache))(fd, flag, fmt, ap);
}

static int format(char *buf, size_t size, int chk, int flag, const char *fmt, va_list ap) {
    if (chk)
        return __vsnprintf_chk(buf, size, flag, size, fmt, ap);
    return vsnprintf(buf, size, fmt, ap);
}

/* Format and write to one of the shim's descriptors: the number of bytes, or -1. */
static int ours(int fd, int chk, int flag, const char *fmt, va_list ap) {
    char small[1024];
    char *buf = small;
    va_list aq;
    va_copy(aq, ap);
    int n = format(small, sizeof small, chk, flag, fmt, aq);
    va_end(aq);
    if (n < 0)
        return -1;
    if ((size_t)n >= sizeof small) {
        buf = malloc((size_t)n + 1);
        if (!buf) {
            errno = ENOMEM;
            return -1;
        }
        n = format(buf, (size_t)n + 1, chk, flag, fmt, ap);
    }
    ssize_t w = n < 0 ? -1 : engram_preload_write_all(fd, buf, (size_t)n);
    if (buf != small) {
        int e = errno;
        free(buf);
        errno = e;
    }
    return w < 0 ? -1 : (int)w;
}

__attribute__((visibility("hidden"))) int engram_c_vdprintf(int fd, const char *fmt,
                                                             va_list ap) {
    if (!engram_preload_is_ours(fd))
        return real_vdprintf(fd, fmt, ap);
    return ours(fd, 0, 0, fmt, ap);
}

__attribute__((visibility("hidden"))) int engram_c_vdprintf_chk(int fd, int flag,
                                                                 const char *fmt, va_list ap) {
    if (!engram_preload_is_ours(fd))
        return real_vdprintf_chk(fd, flag, fmt, ap);
    return ours(fd, 1, flag, fmt, ap);
}

__attribute__((visibility("hidden"))) int engram_c_dprintf(int fd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = engram_c_vdprintf(fd, fmt, ap);
    va_end(ap);
    return r;
}

__attribute__((visibility("hidden"))) int engram_c_dprintf_chk(int fd, int flag,
                                                                const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = engram_c_vdprintf_chk(fd, flag, fmt, ap);
    va_end(ap);
    return r;
}
