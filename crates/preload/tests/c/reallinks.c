/* Symlinks of a real directory (argv[2]) that lead into the pool (argv[1], the mount
 * prefix): through a link as an intermediate component, as the last one, through chains
 * of links, a relative target, a link to the prefix itself, a dangling link that O_CREAT
 * follows, and a loop through both sides; also an absolute path that reaches the prefix
 * through ".." from a real directory, with no link. Calls that do not follow a last link (lstat,
 * readlink, O_NOFOLLOW, unlink) act on the real link itself. Every expectation is
 * Linux's: run without the shim with argv[1] a real directory, on ext4 and on tmpfs, the
 * program passes too. Prints REALLINKS-OK. */
#define _GNU_SOURCE
#include "check.h"
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <spawn.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static char M[PATH_MAX], R[PATH_MAX];

/* The call failed with `e`. */
#define FAILS(call, e)                                                                     \
    do {                                                                                   \
        errno = 0;                                                                         \
        CHECK((call) < 0 && errno == (e));                                                 \
    } while (0)

static void put(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    CHECK(close(fd) == 0);
}

/* The file at `path` (opened with `flags`) holds exactly `text`. */
static void holds_with(const char *path, int flags, const char *text) {
    char buf[256];
    int fd = open(path, O_RDONLY | flags);
    CHECK(fd >= 0);
    ssize_t n = read(fd, buf, sizeof buf);
    CHECK(n == (ssize_t)strlen(text) && memcmp(buf, text, n) == 0);
    CHECK(close(fd) == 0);
}

static void holds(const char *path, const char *text) { holds_with(path, 0, text); }

static void link_to(const char *target, const char *link) {
    unlink(link);
    CHECK(symlink(target, link) == 0);
}

/* Whether directory `path` lists `name`. */
static int lists(const char *path, const char *name) {
    DIR *d = opendir(path);
    CHECK(d != NULL);
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d)) != NULL)
        found |= strcmp(e->d_name, name) == 0;
    CHECK(closedir(d) == 0);
    return found;
}

static void is_link(const char *path) {
    struct stat st;
    CHECK(lstat(path, &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(fstatat(AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode));
}

static void is_file(const char *path, off_t size) {
    struct stat st;
    CHECK(stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == size);
}

/* A relative link target from R that leads to M/`rest` lexically: up to the root, down. */
static void relative_to_m(const char *rest, char *out, size_t n) {
    out[0] = 0;
    for (const char *c = R; *c; c++)
        if (*c == '/' && c[1] != 0 && c[1] != '/') strncat(out, "../", n - strlen(out) - 1);
    strncat(out, M + 1, n - strlen(out) - 1);
    strncat(out, "/", n - strlen(out) - 1);
    strncat(out, rest, n - strlen(out) - 1);
}

static void setup(void) {
    mkdir(joined(M, "proj"), 0755);
    mkdir(joined(M, "proj/sub"), 0755);
    put(joined(M, "proj/file"), "hello");
    put(joined(M, "proj/sub/deep"), "deep");
    link_to("file", joined(M, "proj/plink"));
    unlink(joined(M, "newfile"));
    /* A loop through both sides: the pool's link to the real one, and back. */
    link_to(joined(R, "loopa"), joined(M, "loop"));

    link_to(joined(M, "proj"), joined(R, "p"));
    link_to(joined(M, "proj/file"), joined(R, "f"));
    link_to("c2", joined(R, "c1"));
    link_to(joined(R, "p"), joined(R, "c2"));
    link_to(M, joined(R, "root"));
    link_to(joined(M, "newfile"), joined(R, "dang"));
    link_to(joined(M, "loop"), joined(R, "loopa"));
    link_to("l2", joined(R, "l1"));
    link_to("l1", joined(R, "l2"));
    char rel[PATH_MAX];
    relative_to_m("proj", rel, sizeof rel);
    link_to(rel, joined(R, "rel"));
}

/* Reading and looking up through links. */
static void lookups(void) {
    struct stat st;
    holds(joined(R, "p/file"), "hello");
    holds(joined(R, "f"), "hello");
    holds(joined(R, "c1/file"), "hello");
    holds(joined(R, "c1/sub/deep"), "deep");
    holds(joined(R, "rel/file"), "hello");
    holds(joined(R, "root/proj/file"), "hello");
    holds(joined(R, "p/plink"), "hello");
    holds(joined(R, "p/./sub/../file"), "hello");
    /* No symlink, but ".." up from the real directory to the root and down to the prefix:
     * R/../../(...)/mnt/engram/proj/file. */
    char up[3 * PATH_MAX];
    int n = snprintf(up, sizeof up, "%s", R);
    for (const char *c = R; *c; c++)
        if (*c == '/')
            n += snprintf(up + n, sizeof up - n, "/..");
    snprintf(up + n, sizeof up - n, "%s/proj/file", M);
    holds(up, "hello");
    is_file(up, 5);
    is_file(joined(R, "p/file"), 5);
    is_file(joined(R, "f"), 5);
    CHECK(stat(joined(R, "p"), &st) == 0 && S_ISDIR(st.st_mode));
    CHECK(stat(joined(R, "p/"), &st) == 0 && S_ISDIR(st.st_mode));
    CHECK(stat(joined(R, "root"), &st) == 0 && S_ISDIR(st.st_mode));
    CHECK(stat(joined(R, "c1"), &st) == 0 && S_ISDIR(st.st_mode));
    CHECK(access(joined(R, "p/file"), R_OK) == 0);
    CHECK(access(joined(R, "c1/sub/deep"), R_OK) == 0);
    CHECK(faccessat(AT_FDCWD, joined(R, "f"), R_OK, 0) == 0);
    struct statx sx;
    CHECK(statx(AT_FDCWD, joined(R, "p/file"), 0, STATX_SIZE, &sx) == 0 && sx.stx_size == 5);
    CHECK(fstatat(AT_FDCWD, joined(R, "rel/file"), &st, 0) == 0 && st.st_size == 5);
    FILE *f = fopen(joined(R, "p/sub/deep"), "r");
    CHECK(f != NULL);
    char buf[16] = {0};
    CHECK(fgets(buf, sizeof buf, f) != NULL && strcmp(buf, "deep") == 0);
    CHECK(fclose(f) == 0);

    /* What is not there is still not there. */
    FAILS(stat(joined(R, "p/none"), &st), ENOENT);
    FAILS(open(joined(R, "c1/none"), O_RDONLY), ENOENT);
    FAILS(stat(joined(R, "none"), &st), ENOENT);
    FAILS(stat(joined(R, "f/x"), &st), ENOTDIR);
    FAILS(stat(joined(R, "dang"), &st), ENOENT);

    /* A loop: the kernel's own, and one through both sides. */
    FAILS(stat(joined(R, "l1"), &st), ELOOP);
    FAILS(stat(joined(R, "loopa"), &st), ELOOP);
    FAILS(open(joined(R, "loopa"), O_RDONLY), ELOOP);
}

/* The last link itself: not followed by lstat, readlink, O_NOFOLLOW, unlink, rmdir. */
static void the_link_itself(void) {
    char buf[PATH_MAX];
    is_link(joined(R, "f"));
    is_link(joined(R, "p"));
    is_link(joined(R, "dang"));
    ssize_t n = readlink(joined(R, "f"), buf, sizeof buf);
    CHECK(n == (ssize_t)strlen(joined(M, "proj/file")));
    CHECK(memcmp(buf, joined(M, "proj/file"), n) == 0);
    FAILS(open(joined(R, "f"), O_RDONLY | O_NOFOLLOW), ELOOP);
    FAILS(rmdir(joined(R, "p")), ENOTDIR);
    FAILS(mkdir(joined(R, "dang"), 0755), EEXIST);
    FAILS(open(joined(R, "dang"), O_WRONLY | O_CREAT | O_EXCL, 0644), EEXIST);
    FAILS(symlink("x", joined(R, "dang")), EEXIST);

    /* Links further in are followed, the pool's own last link is not. */
    holds_with(joined(R, "p/file"), O_NOFOLLOW, "hello");
    is_link(joined(R, "p/plink"));
    is_link(joined(R, "c1/plink"));
    n = readlink(joined(R, "p/plink"), buf, sizeof buf);
    CHECK(n == 4 && memcmp(buf, "file", 4) == 0);
    n = readlinkat(AT_FDCWD, joined(R, "rel/plink"), buf, sizeof buf);
    CHECK(n == 4 && memcmp(buf, "file", 4) == 0);
    FAILS(open(joined(R, "p/plink"), O_RDONLY | O_NOFOLLOW), ELOOP);
    struct stat st;
    CHECK(lstat(joined(R, "p/file"), &st) == 0 && S_ISREG(st.st_mode));
}

/* Making, changing and removing through links. */
static void changes(void) {
    struct stat st;
    /* A dangling link: O_CREAT makes its target. */
    int fd = open(joined(R, "dang"), O_WRONLY | O_CREAT, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, "made", 4) == 4);
    CHECK(close(fd) == 0);
    holds(joined(M, "newfile"), "made");
    is_link(joined(R, "dang"));
    CHECK(unlink(joined(M, "newfile")) == 0);
    fd = creat(joined(R, "dang"), 0644);
    CHECK(fd >= 0 && close(fd) == 0);
    is_file(joined(M, "newfile"), 0);

    put(joined(R, "p/new"), "x");
    holds(joined(M, "proj/new"), "x");
    CHECK(truncate(joined(R, "c1/new"), 0) == 0);
    is_file(joined(M, "proj/new"), 0);
    CHECK(chmod(joined(R, "p/new"), 0600) == 0);
    CHECK(stat(joined(M, "proj/new"), &st) == 0 && (st.st_mode & 07777) == 0600);
    struct timespec t[2] = {{.tv_sec = 1000000000}, {.tv_sec = 1000000000}};
    CHECK(utimensat(AT_FDCWD, joined(R, "f"), t, 0) == 0);
    CHECK(stat(joined(M, "proj/file"), &st) == 0 && st.st_mtime == 1000000000);
    CHECK(rename(joined(R, "p/new"), joined(R, "c1/renamed")) == 0);
    is_file(joined(M, "proj/renamed"), 0);
    CHECK(link(joined(R, "p/renamed"), joined(R, "rel/hard")) == 0);
    CHECK(stat(joined(M, "proj/hard"), &st) == 0 && st.st_nlink == 2);
    CHECK(unlink(joined(R, "p/hard")) == 0);
    CHECK(unlink(joined(R, "p/renamed")) == 0);
    FAILS(stat(joined(M, "proj/renamed"), &st), ENOENT);

    CHECK(mkdir(joined(R, "p/dir"), 0755) == 0);
    CHECK(stat(joined(M, "proj/dir"), &st) == 0 && S_ISDIR(st.st_mode));
    CHECK(symlink("../file", joined(R, "p/dir/up")) == 0);
    holds(joined(R, "c1/dir/up"), "hello");
    CHECK(unlink(joined(R, "p/dir/up")) == 0);
    CHECK(rmdir(joined(R, "root/proj/dir")) == 0);
    FAILS(stat(joined(M, "proj/dir"), &st), ENOENT);

    /* Between the real directory and the pool: EXDEV when they are two file systems. */
    struct stat sm, sr;
    CHECK(stat(M, &sm) == 0 && stat(R, &sr) == 0);
    put(joined(R, "p/cross"), "c");
    if (sm.st_dev != sr.st_dev) {
        FAILS(rename(joined(R, "p/cross"), joined(R, "cross")), EXDEV);
        FAILS(link(joined(R, "p/cross"), joined(R, "cross")), EXDEV);
    }
    CHECK(unlink(joined(R, "p/cross")) == 0);

    /* unlink of the last link removes the link, not what it names. */
    CHECK(unlink(joined(R, "f")) == 0);
    FAILS(lstat(joined(R, "f"), &st), ENOENT);
    is_file(joined(M, "proj/file"), 5);
    link_to(joined(M, "proj/file"), joined(R, "f"));
}

/* Directories through links: the current directory, streams, descriptors. */
static void directories(void) {
    char cwd[PATH_MAX], buf[PATH_MAX];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    CHECK(chdir(joined(R, "p")) == 0);
    holds("file", "hello");
    holds("sub/deep", "deep");
    /* The kernel keeps the directory, not the way there. */
    CHECK(getcwd(buf, sizeof buf) != NULL && strcmp(buf, joined(M, "proj")) == 0);
    put("here", "h");
    holds(joined(M, "proj/here"), "h");
    CHECK(unlink("here") == 0);
    CHECK(chdir(joined(R, "c1/sub")) == 0);
    holds("deep", "deep");
    holds("../file", "hello");
    CHECK(chdir(joined(R, "root")) == 0);
    holds("proj/file", "hello");
    /* Relative paths from the real directory holding the links. */
    CHECK(chdir(R) == 0);
    holds("p/file", "hello");
    holds("./c1/sub/../file", "hello");
    CHECK(lists("root/", "proj"));
    CHECK(chdir("rel") == 0);
    holds("plink", "hello");
    CHECK(chdir(cwd) == 0);

    CHECK(lists(joined(R, "p"), "file"));
    CHECK(lists(joined(R, "p"), "plink"));
    CHECK(lists(joined(R, "c1/"), "sub"));
    CHECK(lists(joined(R, "root"), "proj"));

    /* Relative to a descriptor of the real directory. */
    int rfd = open(R, O_RDONLY | O_DIRECTORY);
    CHECK(rfd >= 0);
    int fd = openat(rfd, "p/file", O_RDONLY);
    CHECK(fd >= 0 && close(fd) == 0);
    struct stat st;
    CHECK(fstatat(rfd, "c1/sub/deep", &st, 0) == 0 && st.st_size == 4);
    CHECK(fstatat(rfd, "f", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode));
    CHECK(fstatat(rfd, "f", &st, 0) == 0 && S_ISREG(st.st_mode));
    CHECK(close(rfd) == 0);

    /* realpath names the file where it is. */
    char *rp = realpath(joined(R, "c1/sub/../file"), NULL);
    CHECK(rp != NULL && strcmp(rp, joined(M, "proj/file")) == 0);
    free(rp);
    rp = realpath(joined(R, "rel"), NULL);
    CHECK(rp != NULL && strcmp(rp, joined(M, "proj")) == 0);
    free(rp);
}

static int walked, walked_deep, walked_link;
static char *deep_path;

static int on_entry(const char *path, const struct stat *st, int flag, struct FTW *f) {
    (void)st;
    (void)f;
    walked++;
    walked_deep += strcmp(path, deep_path) == 0 && flag == FTW_F;
    walked_link += flag == FTW_SL;
    return 0;
}

/* glibc's own walks and searches, which the shim makes itself: scandir, nftw, glob. */
static void walks(void) {
    struct dirent **names;
    int k = scandir(joined(R, "p"), &names, NULL, alphasort);
    CHECK(k == 5);
    CHECK(strcmp(names[2]->d_name, "file") == 0 && strcmp(names[4]->d_name, "sub") == 0);
    while (k > 0)
        free(names[--k]);
    free(names);
    FAILS(scandir(joined(R, "p/none"), &names, NULL, alphasort), ENOENT);

    deep_path = strdup(joined(R, "p/sub/deep"));
    CHECK(nftw(joined(R, "p"), on_entry, 8, 0) == 0);
    CHECK(walked == 5 && walked_deep == 1 && walked_link == 0);
    walked = 0;
    CHECK(nftw(joined(R, "p"), on_entry, 8, FTW_PHYS) == 0);
    CHECK(walked == 1 && walked_link == 1);
    FAILS(nftw(joined(R, "p/none"), on_entry, 8, 0), ENOENT);
    free(deep_path);

    glob_t g;
    CHECK(glob(joined(R, "p/*"), 0, NULL, &g) == 0);
    CHECK(g.gl_pathc == 3 && strcmp(g.gl_pathv[0], joined(R, "p/file")) == 0);
    globfree(&g);
    CHECK(glob(joined(R, "c1/s*/d*"), 0, NULL, &g) == 0);
    CHECK(g.gl_pathc == 1 && strcmp(g.gl_pathv[0], joined(R, "c1/sub/deep")) == 0);
    globfree(&g);
}

/* A program in the pool run through a link: execve, execv, execvp, execl, posix_spawn and
 * posix_spawnp. */
static void programs(void) {
    put(joined(M, "proj/seven.sh"), "#!/bin/sh\nexit 7\n");
    CHECK(chmod(joined(M, "proj/seven.sh"), 0755) == 0);
    char *args[] = {"seven", NULL};
    for (int how = 0; how < 4; how++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            if (how == 0) execve(joined(R, "c1/seven.sh"), args, environ);
            if (how == 1) execv(joined(R, "p/seven.sh"), args);
            if (how == 2) execvp(joined(R, "rel/seven.sh"), args);
            if (how == 3) execl(joined(R, "root/proj/seven.sh"), "seven", (char *)NULL);
            _exit(99);
        }
        int status;
        CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status));
        CHECK(WEXITSTATUS(status) == 7);
    }
    static const char *spawned[] = {"p/seven.sh", "c1/seven.sh"};
    for (int how = 0; how < 2; how++) {
        pid_t pid;
        char path[PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/%s", R, spawned[how]);
        int e = how ? posix_spawnp(&pid, path, NULL, NULL, args, environ)
                    : posix_spawn(&pid, path, NULL, NULL, args, environ);
        CHECK(e == 0);
        int status;
        CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status));
        CHECK(WEXITSTATUS(status) == 7);
    }
    pid_t pid;
    CHECK(posix_spawn(&pid, joined(R, "p/none"), NULL, NULL, args, environ) == ENOENT);
    FAILS(execv(joined(R, "p/none"), args), ENOENT);
    FAILS(execvp(joined(R, "p/none"), args), ENOENT);
}

int main(int argc, char **argv) {
    CHECK(argc >= 3);
    /* Canonical names, as the kernel gives them back (getcwd, realpath). */
    snprintf(M, sizeof M, "%s", argv[1]);
    CHECK(realpath(argv[2], R) != NULL);
    if (realpath(argv[1], M) == NULL) snprintf(M, sizeof M, "%s", argv[1]);
    setup();
    lookups();
    the_link_itself();
    changes();
    directories();
    walks();
    programs();
    printf("REALLINKS-OK\n");
    return 0;
}
