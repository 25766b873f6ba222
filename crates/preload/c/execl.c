/*
 * execl, execlp and execle for libengram_preload.so.
 *
 * glibc's build their argument vector and call its own internal execve, which never
 * reaches the shim: a program stored in the pool could not run that way. These build the
 * vector and call the shim's execv, execvp and execve (the shim is linked with
 * -Bsymbolic-functions, so the calls bind to its own exports). Variadic functions cannot
 * be defined in stable Rust: the exported symbols are naked Rust trampolines (exec.rs) that
 * jump here with every register and stack argument intact.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

/* The arguments after `arg` up to the NULL, counted; `arg` itself is the first. */
#define COUNT(arg, n)                                                                      \
    do {                                                                                   \
        va_list ap;                                                                        \
        va_start(ap, arg);                                                                 \
        n = arg != NULL;                                                                   \
        if (arg != NULL)                                                                   \
            while (va_arg(ap, char *) != NULL)                                             \
                n++;                                                                       \
        va_end(ap);                                                                        \
    } while (0)

/* Fill argv[0..n] from `arg` and the variadic list (argv[n] is the NULL); `ap` is left
 * after the NULL, where execle's environment is. */
static void fill(char **argv, size_t n, const char *arg, va_list *ap) {
    argv[0] = (char *)arg;
    for (size_t i = 1; i < n; i++)
        argv[i] = va_arg(*ap, char *);
    if (n > 0)
        (void)va_arg(*ap, char *); /* the NULL */
    argv[n] = NULL;
}

/* The argument vector of an execl-style call, on the stack; `ap` is left after the NULL. */
#define ARGV(arg)                                                                          \
    size_t n;                                                                              \
    COUNT(arg, n);                                                                         \
    char *argv[n + 1];                                                                     \
    va_list ap;                                                                            \
    va_start(ap, arg);                                                                     \
    fill(argv, n, arg, &ap)

__attribute__((visibility("hidden"))) int engram_c_execl(const char *path, const char *arg,
                                                          ...) {
    ARGV(arg);
    va_end(ap);
    return execv(path, argv);
}

__attribute__((visibility("hidden"))) int engram_c_execlp(const char *file, const char *arg,
                                                           ...) {
    ARGV(arg);
    va_end(ap);
    return execvp(file, argv);
}

__attribute__((visibility("hidden"))) int engram_c_execle(const char *path, const char *arg,
                                                           ...) {
    ARGV(arg);
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    return execve(path, argv, envp);
}
