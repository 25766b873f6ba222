/* A tree deeper than PATH_MAX, in the pool (argv[1]) and in a real directory (argv[2]),
 * worked in through directory descriptors and through chdir: Linux limits only the path
 * string a program passes, not how deep the directory it starts from lies, and every call
 * here must give the same result on both sides. Prints DEEP-OK. */
#define _GNU_SOURCE
#include "check.h"
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

/* 24 levels of 200-byte names: 4,824 bytes below the top. */
#define LEVELS 24
static char name[201];

/* Open the directories from `top` down to the bottom into fds[0..=LEVELS]. */
static void descend(const char *top, int fds[LEVELS + 1]) {
    fds[0] = open(top, O_RDONLY | O_DIRECTORY);
    CHECK(fds[0] >= 0);
    for (int i = 0; i < LEVELS; i++) {
        fds[i + 1] = openat(fds[i], name, O_RDONLY | O_DIRECTORY);
        CHECK(fds[i + 1] >= 0);
    }
}

/* What an nftw of the tree saw: entries, and the deepest level. */
static int walked, deepest;

static int on_entry(const char *fpath, const struct stat *st, int flag, struct FTW *f) {
    (void)fpath, (void)st;
    CHECK(flag == FTW_F || flag == FTW_D || flag == FTW_DP);
    walked++;
    if (f->level > deepest) deepest = f->level;
    return 0;
}

/* Entries of directory `path` other than "." and "..". */
static int entries_in(const char *path) {
    DIR *d = opendir(path);
    CHECK(d != NULL);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    CHECK(closedir(d) == 0);
    return n;
}

static void run(const char *top) {
    char buf[64];
    struct stat st;
    int fds[LEVELS + 1];

    /* Make the tree through descriptors. */
    int fd = open(top, O_RDONLY | O_DIRECTORY);
    CHECK(fd >= 0);
    for (int i = 0; i < LEVELS; i++) {
        CHECK(mkdirat(fd, name, 0755) == 0);
        int next = openat(fd, name, O_RDONLY | O_DIRECTORY);
        CHECK(next >= 0);
        CHECK(close(fd) == 0);
        fd = next;
    }

    /* The *at calls at the bottom. */
    int f = openat(fd, "f", O_CREAT | O_WRONLY | O_EXCL, 0644);
    CHECK(f >= 0);
    CHECK(write(f, "hello", 5) == 5);
    CHECK(close(f) == 0);
    CHECK(fstatat(fd, "f", &st, 0) == 0 && st.st_size == 5);
    CHECK(renameat(fd, "f", fd, "g") == 0);
    CHECK(symlinkat("g", fd, "s") == 0);
    ssize_t n = readlinkat(fd, "s", buf, sizeof buf);
    CHECK(n == 1 && buf[0] == 'g');
    CHECK(fstatat(fd, "s", &st, 0) == 0 && S_ISREG(st.st_mode) && st.st_size == 5);
    CHECK(fchmodat(fd, "g", 0600, 0) == 0);
    CHECK(linkat(fd, "g", fd, "h", 0) == 0);
    CHECK(fstatat(fd, "g", &st, 0) == 0 && st.st_nlink == 2 && (st.st_mode & 07777) == 0600);
    CHECK(unlinkat(fd, "h", 0) == 0);
    CHECK(unlinkat(fd, "s", 0) == 0);
    CHECK(faccessat(fd, "g", R_OK, 0) == 0);

    /* Relative paths from a current directory that deep. */
    CHECK(fchdir(fd) == 0);
    f = open("g", O_RDONLY);
    CHECK(f >= 0);
    CHECK(read(f, buf, sizeof buf) == 5 && memcmp(buf, "hello", 5) == 0);
    CHECK(close(f) == 0);
    CHECK(mkdir("x", 0755) == 0);
    f = open("x/y", O_CREAT | O_WRONLY, 0644);
    CHECK(f >= 0 && close(f) == 0);
    CHECK(stat("x/y", &st) == 0 && S_ISREG(st.st_mode));
    CHECK(stat("../", &st) == 0 && S_ISDIR(st.st_mode));
    char up[512];
    snprintf(up, sizeof up, "../%s/g", name);
    CHECK(access(up, F_OK) == 0);
    CHECK(unlink("x/y") == 0);
    CHECK(rmdir("x") == 0);
    CHECK(entries_in(".") == 1);

    /* The current directory's name is longer than PATH_MAX: too long for a buffer that
     * size, given whole when getcwd allocates. */
    char small[PATH_MAX];
    errno = 0;
    CHECK(getcwd(small, sizeof small) == NULL && errno == ERANGE);
    char *cwd = getcwd(NULL, 0);
    CHECK(cwd != NULL && strlen(cwd) == strlen(top) + LEVELS * 201);
    CHECK(strncmp(cwd, top, strlen(top)) == 0);
    free(cwd);

    /* chdir down the tree one name at a time. */
    CHECK(chdir(top) == 0);
    for (int i = 0; i < LEVELS; i++)
        CHECK(chdir(name) == 0);
    CHECK(access("g", R_OK) == 0);
    CHECK(chdir("/") == 0);
    CHECK(close(fd) == 0);

    /* nftw walks the whole tree (its paths, joined by the walker, pass PATH_MAX), before
     * and after the entries of each directory. */
    for (int depth_first = 0; depth_first < 2; depth_first++) {
        walked = deepest = 0;
        CHECK(nftw(top, on_entry, 16, FTW_PHYS | (depth_first ? FTW_DEPTH : 0)) == 0);
        CHECK(walked == LEVELS + 2 && deepest == LEVELS + 1);
    }

    /* A path string of PATH_MAX bytes or more is refused, whichever side it names. */
    char *lng = malloc(PATH_MAX + 64);
    CHECK(lng != NULL);
    int at = snprintf(lng, PATH_MAX + 64, "%s/", top);
    while (at < PATH_MAX + 8)
        lng[at++] = 'x';
    lng[at] = 0;
    errno = 0;
    CHECK(open(lng, O_RDONLY) < 0 && errno == ENAMETOOLONG);
    errno = 0;
    CHECK(mkdir(lng + strlen(top) + 1, 0755) < 0 && errno == ENAMETOOLONG);
    errno = 0;
    CHECK(nftw(lng, on_entry, 16, FTW_PHYS) < 0 && errno == ENAMETOOLONG);
    /* But a long string naming a short path outside the pool is libc's to resolve, one
     * component at a time. */
    at = 0;
    for (int i = 0; i < PATH_MAX / 2 + 8; i++, at += 2)
        memcpy(lng + at, "/.", 2);
    strcpy(lng + at, "/tmp");
    char *tmp = realpath(lng, NULL);
    CHECK(tmp != NULL && strcmp(tmp, "/tmp") == 0);
    free(tmp);
    free(lng);

    /* Remove it all, bottom up, through descriptors. */
    descend(top, fds);
    CHECK(unlinkat(fds[LEVELS], "g", 0) == 0);
    for (int i = LEVELS - 1; i >= 0; i--) {
        CHECK(unlinkat(fds[i], name, AT_REMOVEDIR) == 0);
        CHECK(close(fds[i + 1]) == 0);
    }
    CHECK(close(fds[0]) == 0);
    CHECK(entries_in(top) == 0);
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    memset(name, 'd', 200);
    name[200] = 0;
    run(argv[2]);
    run(argv[1]);
    puts("DEEP-OK");
    return 0;
}
