/* nftw, ftw, glob and scandirat of the same tree in the pool (argv[1]) and in a real
 * directory (argv[2]): glibc's own results on the real tree are what the shim must give on
 * the pool's. Prints WALKS-OK. */
#define _GNU_SOURCE
#include "check.h"
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX 64
#define LINE 600
static char got[MAX][512];
static int n;
static size_t root_len;
static int stop_at_b;

static int by_text(const void *a, const void *b) { return strcmp(a, b); }

static void add(const char *fpath, int flag, int level, int base) {
    CHECK(n < MAX);
    /* The path below the root, the flag, the level and the name at `base`. */
    snprintf(got[n++], sizeof got[0], "%.200s %d %d %.200s", fpath + root_len, flag, level,
             fpath + base);
}

static int on_nftw(const char *fpath, const struct stat *st, int flag, struct FTW *f) {
    add(fpath, flag, f->level, f->base);
    /* A dangling symlink comes with its own lstat. */
    CHECK(flag != FTW_SLN || S_ISLNK(st->st_mode));
    if (flag == FTW_F && st->st_size == 0 && strcmp(fpath + f->base, "empty.txt") != 0) {
        fprintf(stderr, "FAIL: %s reported with size 0\n", fpath);
        exit(1);
    }
    if (stop_at_b && strcmp(fpath + f->base, "b.txt") == 0) return stop_at_b;
    return 0;
}

static int skip_sub(const char *fpath, const struct stat *st, int flag, struct FTW *f) {
    (void)st;
    add(fpath, flag, f->level, f->base);
    return strcmp(fpath + f->base, "sub") == 0 ? FTW_SKIP_SUBTREE : FTW_CONTINUE;
}

/* Where a walk under FTW_CHDIR started (relative paths are reported from there). */
static char walk_start[PATH_MAX];

/* Under FTW_CHDIR the current directory is the one holding the object, and for FTW_DP the
 * directory itself. */
static int in_parent(const char *fpath, const struct stat *st, int flag, struct FTW *f) {
    (void)st;
    char cwd[PATH_MAX], dir[PATH_MAX], want[PATH_MAX + 8];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    if (flag == FTW_DP)
        snprintf(dir, sizeof dir, "%s", fpath);
    else if (f->base == 0)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", f->base > 1 ? f->base - 1 : 1, fpath);
    if (dir[0] == '/')
        snprintf(want, sizeof want, "%s", dir);
    else if (strcmp(dir, ".") == 0)
        snprintf(want, sizeof want, "%s", walk_start);
    else
        snprintf(want, sizeof want, "%.2000s/%.2000s", walk_start, dir);
    if (strcmp(cwd, want) != 0) {
        fprintf(stderr, "FAIL: at %s (flag %d) the directory is %s, not %s\n", fpath, flag, cwd,
                want);
        exit(1);
    }
    add(fpath, flag, f->level, f->base);
    return 0;
}

static int on_ftw(const char *fpath, const struct stat *st, int flag) {
    (void)st;
    add(fpath, flag, 0, (int)root_len);
    return 0;
}

static void make_tree(const char *root) {
    char p[PATH_MAX];
#define AT(rel) (snprintf(p, sizeof p, "%s/%s", root, rel), p)
    CHECK(mkdir(root, 0755) == 0);
    CHECK(mkdir(AT("sub"), 0755) == 0);
    CHECK(mkdir(AT("sub/deep"), 0755) == 0);
    CHECK(mkdir(AT("empty"), 0755) == 0);
    const char *files[] = {"a.txt", "sub/b.txt", "sub/deep/c.txt", ".hidden"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        int fd = open(AT(files[i]), O_CREAT | O_WRONLY, 0644);
        CHECK(fd >= 0 && write(fd, "data", 4) == 4 && close(fd) == 0);
    }
    int fd = open(AT("empty.txt"), O_CREAT | O_WRONLY, 0644);
    CHECK(fd >= 0 && close(fd) == 0);
    /* Followed, a link to a directory inside the tree would make the walk's result depend
     * on the directory order (whichever comes first is walked, the other skipped). */
    CHECK(mkdir(AT("../out"), 0755) == 0);
    fd = open(AT("../out/o.txt"), O_CREAT | O_WRONLY, 0644);
    CHECK(fd >= 0 && write(fd, "out", 3) == 3 && close(fd) == 0);
    CHECK(symlink("../out", AT("dirlink")) == 0);
    CHECK(symlink("a.txt", AT("filelink")) == 0);
    CHECK(symlink("nowhere", AT("dangling")) == 0);
#undef AT
}

/* Every walk of the tree at `root`, as one sorted list of lines. */
static int walks(const char *root, char out[][LINE]) {
    int total = 0;
    root_len = strlen(root);
    const int flags[] = {0, FTW_PHYS, FTW_DEPTH, FTW_PHYS | FTW_DEPTH, FTW_MOUNT | FTW_PHYS};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) {
        n = 0;
        CHECK(nftw(root, on_nftw, 4, flags[i]) == 0);
        qsort(got, n, sizeof got[0], by_text);
        for (int j = 0; j < n; j++) snprintf(out[total++], LINE, "nftw%d %.500s", flags[i], got[j]);
    }
    n = 0;
    CHECK(nftw(root, skip_sub, 4, FTW_ACTIONRETVAL | FTW_PHYS) == 0);
    qsort(got, n, sizeof got[0], by_text);
    for (int j = 0; j < n; j++) snprintf(out[total++], LINE, "skip %.500s", got[j]);
    char before[PATH_MAX], after[PATH_MAX];
    CHECK(getcwd(before, sizeof before) != NULL);
    const int chdirs[] = {FTW_CHDIR | FTW_PHYS, FTW_CHDIR | FTW_DEPTH | FTW_PHYS};
    for (size_t i = 0; i < 2; i++) {
        n = 0;
        snprintf(walk_start, sizeof walk_start, "%s", before);
        CHECK(nftw(root, in_parent, 4, chdirs[i]) == 0);
        CHECK(getcwd(after, sizeof after) != NULL && strcmp(before, after) == 0);
        qsort(got, n, sizeof got[0], by_text);
        for (int j = 0; j < n; j++) snprintf(out[total++], LINE, "chdir%d %.500s", chdirs[i], got[j]);
        /* From the root's parent, with the root named relatively: paths stay relative. */
        char parent[PATH_MAX];
        snprintf(parent, sizeof parent, "%.*s", (int)(strrchr(root, '/') - root), root);
        CHECK(chdir(parent) == 0 && getcwd(walk_start, sizeof walk_start) != NULL);
        size_t saved = root_len;
        root_len = 0;
        n = 0;
        CHECK(nftw("t", in_parent, 4, chdirs[i]) == 0);
        root_len = saved;
        CHECK(getcwd(after, sizeof after) != NULL && strcmp(after, walk_start) == 0);
        CHECK(chdir(before) == 0);
        qsort(got, n, sizeof got[0], by_text);
        for (int j = 0; j < n; j++) snprintf(out[total++], LINE, "relative%d %.500s", chdirs[i], got[j]);
    }
    n = 0;
    stop_at_b = 42;
    CHECK(nftw(root, on_nftw, 4, FTW_PHYS) == 42);
    /* With FTW_ACTIONRETVAL an answer other than the four named ones also stops the walk. */
    stop_at_b = 7;
    CHECK(nftw(root, on_nftw, 4, FTW_PHYS | FTW_ACTIONRETVAL) == 7);
    stop_at_b = 0;
    n = 0;
    CHECK(ftw(root, on_ftw, 4) == 0);
    qsort(got, n, sizeof got[0], by_text);
    for (int j = 0; j < n; j++) snprintf(out[total++], LINE, "ftw %.500s", got[j]);

    /* A missing root: -1 and ENOENT. */
    char missing[PATH_MAX];
    snprintf(missing, sizeof missing, "%s/missing", root);
    errno = 0;
    CHECK(nftw(missing, on_nftw, 4, 0) == -1 && errno == ENOENT);

    const char *patterns[] = {"*", "*/*.txt", "s*/d*/*", "*.none", ".*"};
    const int gflags[] = {0, GLOB_MARK, GLOB_ONLYDIR, GLOB_NOCHECK, GLOB_PERIOD};
    for (size_t i = 0; i < sizeof patterns / sizeof *patterns; i++) {
        for (size_t k = 0; k < sizeof gflags / sizeof *gflags; k++) {
            char pat[512];
            snprintf(pat, sizeof pat, "%s/%s", root, patterns[i]);
            glob_t g;
            int r = glob(pat, gflags[k], NULL, &g);
            snprintf(out[total++], LINE, "glob %s %d -> %d %zu", patterns[i], gflags[k],
                     r, r == 0 ? g.gl_pathc : 0);
            for (size_t j = 0; r == 0 && j < g.gl_pathc; j++)
                snprintf(out[total++], LINE, "  %s", g.gl_pathv[j] + root_len);
            if (r == 0) globfree(&g);
        }
    }

    int dfd = open(root, O_RDONLY | O_DIRECTORY);
    CHECK(dfd >= 0);
    struct dirent **list;
    int m = scandirat(dfd, "sub", &list, NULL, alphasort);
    CHECK(m == 4);
    for (int j = 0; j < m; j++) {
        snprintf(out[total++], LINE, "scandirat %s", list[j]->d_name);
        free(list[j]);
    }
    free(list);
    CHECK(close(dfd) == 0);
    return total;
}

static char pool_out[512][LINE], real_out[512][LINE];

int main(int argc, char **argv) {
    CHECK(argc == 3);
    char pool_root[PATH_MAX], real_root[PATH_MAX];
    snprintf(pool_root, sizeof pool_root, "%s/t", argv[1]);
    snprintf(real_root, sizeof real_root, "%s/t", argv[2]);
    make_tree(pool_root);
    make_tree(real_root);
    int a = walks(pool_root, pool_out);
    int b = walks(real_root, real_out);
    for (int i = 0; i < (a > b ? a : b); i++) {
        const char *x = i < a ? pool_out[i] : "(none)", *y = i < b ? real_out[i] : "(none)";
        if (strcmp(x, y) != 0) {
            fprintf(stderr, "FAIL: line %d: pool \"%s\", libc \"%s\"\n", i, x, y);
            return 1;
        }
    }
    CHECK(a == b && a > 100);
    printf("WALKS-OK %d\n", a);
    return 0;
}
