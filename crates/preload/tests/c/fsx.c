/*
 * fsx.c - a self-contained fsx-like random file I/O exerciser.
 *
 * usage: fsx [flags] PATH [SEED] [NUMOPS] [MAXSIZE]
 *   SEED default 1, NUMOPS default 10000, MAXSIZE default 1 MiB (suffix K/M accepted)
 * flags (disable op kinds):
 *   -R no mmap reads         -W no mmap writes      -F no fallocate (any mode)
 *   -P no punch hole         -Z no zero range       -K no KEEP_SIZE allocate
 *   -C no copy_file_range    -V no readv/writev      -A no O_APPEND writes
 *   -O no close/reopen       -T no truncate          -H no SEEK_DATA/SEEK_HOLE
 *   -S no fsync/fdatasync    -E no check of zeros past EOF in mapped last page
 *   -o N max op length (default 65536)   -c N full check interval (default 1000)
 *   -M  keep a long-lived MAP_SHARED mapping of the whole range and read/write through it
 *   -X  (with -M) store garbage past EOF in EOF's page through it (must never reach the file)
 *   -Y  (with -M) msync(MS_SYNC) every store through it at once (EngramFS: reads see stores only once written back)
 *   -v  print every op        -q  quiet (no summary)
 * The second file (copy_file_range source) is PATH.cfr.
 * Exit 0 ok, 1 mismatch / error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>
#include <linux/falloc.h>

#define PAGE 4096
#define LOGN 50

enum {
	OP_READ, OP_READ_SEEK, OP_PREADV, OP_READV, OP_MAPREAD, OP_MAPREAD_RO,
	OP_WRITE, OP_WRITE_SEEK, OP_PWRITEV, OP_WRITEV, OP_MAPWRITE, OP_APPEND,
	OP_TRUNC_GROW, OP_TRUNC_SHRINK, OP_FALLOC, OP_FALLOC_KEEP, OP_PUNCH,
	OP_ZERO, OP_ZERO_KEEP, OP_COPY_SELF, OP_COPY_OTHER, OP_CLOSEOPEN,
	OP_FSYNC, OP_FDATASYNC, OP_SEEKDH, OP_PMAPREAD, OP_PMAPWRITE, OP_PMAPTAIL, OP_PMAPREMAP, OP_NOPS
};
static const char *opname[OP_NOPS] = {
	"read", "read_seek", "preadv", "readv", "mapread", "mapread_ro",
	"write", "write_seek", "pwritev", "writev", "mapwrite", "append",
	"trunc_grow", "trunc_shrink", "falloc", "falloc_keep", "punch",
	"zero", "zero_keep", "copy_self", "copy_other", "closeopen",
	"fsync", "fdatasync", "seek_data_hole", "pmapread", "pmapwrite", "pmaptail", "pmapremap"
};
static unsigned long opcount[OP_NOPS];
static int disabled[OP_NOPS];

static char *path, *path2;
static int fd = -1, fd_app = -1, fd_ro = -1, fd_src = -1;
static unsigned char *good, *tmpbuf, *srcgood;
static off_t fsize;          /* model size */
static off_t maxlen = 1 << 20;
static size_t maxop = 65536;
static size_t srclen;
static unsigned long numops = 10000, opno, seed = 1;
static int verbose, quiet, check_eof_zero = 1, pmap_syncall;
static unsigned long check_every = 1000;
static uint32_t *pagelast;   /* last op number that changed each page of the model */
static long pagesz;
static unsigned char *pmap;  /* -M: a long-lived MAP_SHARED mapping of [0, pmaplen) */
static size_t pmaplen;

static char oplog[LOGN][200];
static unsigned long oplogno[LOGN];

static uint64_t rs;
static uint64_t rnd(void)
{
	rs ^= rs >> 12; rs ^= rs << 25; rs ^= rs >> 27;
	return rs * 2685821657736338717ULL;
}
static uint64_t rndn(uint64_t n) { return n ? rnd() % n : 0; }

static void logop(const char *fmt, ...)
{
	int i = opno % LOGN;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(oplog[i], sizeof oplog[i], fmt, ap);
	va_end(ap);
	oplogno[i] = opno;
	if (verbose)
		printf("%lu %s\n", opno, oplog[i]);
}

static void dumplog(void)
{
	unsigned long first = opno >= LOGN - 1 ? opno - (LOGN - 1) : 0;
	fprintf(stderr, "LOG of last ops (seed %lu):\n", seed);
	for (unsigned long n = first; n <= opno; n++) {
		int i = n % LOGN;
		if (oplogno[i] == n && oplog[i][0])
			fprintf(stderr, "  %6lu %s\n", n, oplog[i]);
	}
}

static void fail(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "FAIL at op %lu: ", opno);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	dumplog();
	exit(1);
}

static void mark(off_t off, off_t len)
{
	if (len <= 0) return;
	for (off_t p = off / PAGE; p <= (off + len - 1) / PAGE; p++)
		pagelast[p] = opno;
}

/* compare buf (file bytes) with good[off..off+len) */
static void compare(const unsigned char *buf, off_t off, size_t len, const char *what)
{
	if (memcmp(buf, good + off, len) == 0)
		return;
	size_t first = 0;
	while (buf[first] == good[off + first]) first++;
	size_t last = len - 1;
	while (buf[last] == good[off + last]) last--;
	fprintf(stderr, "FAIL at op %lu: %s: data mismatch at file offset 0x%llx..0x%llx "
		"(checked 0x%llx+0x%zx), model size 0x%llx\n", opno, what,
		(long long)(off + first), (long long)(off + last),
		(long long)off, len, (long long)fsize);
	fprintf(stderr, "  OFFSET   GOOD  BAD   (page last changed by op)\n");
	int shown = 0;
	for (size_t i = first; i <= last && shown < 32; i++) {
		if (buf[i] != good[off + i]) {
			fprintf(stderr, "  0x%06llx 0x%02x 0x%02x  op %u\n", (long long)(off + i),
				good[off + i], buf[i], pagelast[(off + i) / PAGE]);
			shown++;
		}
	}
	size_t nd = 0;
	for (size_t i = first; i <= last; i++) nd += buf[i] != good[off + i];
	fprintf(stderr, "  %zu bytes differ\n", nd);
	dumplog();
	exit(1);
}

static void check_size(const char *what)
{
	struct stat st;
	if (fstat(fd, &st) < 0) fail("%s: fstat: %s", what, strerror(errno));
	if (st.st_size != fsize)
		fail("%s: fstat size 0x%llx, model 0x%llx", what, (long long)st.st_size, (long long)fsize);
}

static void fill(unsigned char *b, size_t len)
{
	/* nonzero bytes, varying with the op so stale data shows */
	uint64_t r = rnd();
	unsigned char base = (unsigned char)(opno * 7 + 1);
	for (size_t i = 0; i < len; i++) {
		if ((i & 7) == 0) r = r * 6364136223846793005ULL + 1442695040888963407ULL;
		unsigned char c = (unsigned char)(r >> (8 * (i & 7))) ^ base;
		b[i] = c ? c : 0x5a;
	}
}

static void full_check(const char *what)
{
	check_size(what);
	off_t done = 0;
	while (done < fsize) {
		size_t n = fsize - done > (off_t)maxop ? maxop : fsize - done;
		ssize_t r = pread(fd, tmpbuf, n, done);
		if (r < 0) fail("%s: full check pread: %s", what, strerror(errno));
		if ((size_t)r != n) fail("%s: full check short read %zd of %zu at 0x%llx", what, r, n, (long long)done);
		compare(tmpbuf, done, n, what);
		done += n;
	}
	ssize_t r = pread(fd, tmpbuf, 16, fsize);
	if (r != 0) fail("%s: read at EOF returned %zd (%s)", what, r, r < 0 ? strerror(errno) : "");
}

static void do_open(void)
{
	fd = open(path, O_RDWR);
	if (fd < 0) fail("open %s: %s", path, strerror(errno));
	fd_app = open(path, O_WRONLY | O_APPEND);
	if (fd_app < 0) fail("open append %s: %s", path, strerror(errno));
	fd_ro = open(path, O_RDONLY);
	if (fd_ro < 0) fail("open ro %s: %s", path, strerror(errno));
}

static void do_close(void)
{
	if (close(fd) < 0) fail("close: %s", strerror(errno));
	if (close(fd_app) < 0) fail("close app: %s", strerror(errno));
	if (close(fd_ro) < 0) fail("close ro: %s", strerror(errno));
}

/* random offset in [0, lim), biased toward page boundaries */
static off_t pick_off(off_t lim)
{
	if (lim <= 0) return 0;
	off_t o;
	switch (rndn(4)) {
	case 0: {
		off_t p = rndn(lim / PAGE + 1) * PAGE;
		o = p + (off_t)rndn(17) - 8;
		if (o < 0) o = 0;
		if (o >= lim) o = lim - 1;
		break;
	}
	default:
		o = rndn(lim);
	}
	return o;
}

static size_t pick_len(void)
{
	switch (rndn(8)) {
	case 0: return 1 + rndn(16);
	case 1: return PAGE + (off_t)rndn(17) - 8;
	case 2: return 1 + rndn(PAGE);
	default: return 1 + rndn(maxop);
	}
}

static void model_zero_from(off_t from)
{
	if (from < maxlen) memset(good + from, 0, maxlen - from);
}

static void model_write(off_t off, const unsigned char *b, size_t len)
{
	memcpy(good + off, b, len);
	mark(off, len);
	if (off + (off_t)len > fsize) fsize = off + len;
}

static void build_iov(struct iovec *iov, int *niov, unsigned char *b, size_t len)
{
	int n = 1 + rndn(8);
	size_t left = len;
	int i = 0;
	for (; i < n - 1 && left > 0; i++) {
		size_t l = rndn(left + 1);
		iov[i].iov_base = b; iov[i].iov_len = l;
		b += l; left -= l;
	}
	iov[i].iov_base = b; iov[i].iov_len = left;
	*niov = i + 1;
}

static void doread(int kind)
{
	off_t off = fsize ? pick_off(fsize + 8192) : pick_off(8192);
	size_t len = pick_len();
	size_t expect = off >= fsize ? 0 : (fsize - off < (off_t)len ? fsize - off : len);
	ssize_t r;
	struct iovec iov[8];
	int niov = 0;
	memset(tmpbuf, 0xee, len);
	switch (kind) {
	case OP_READ:
		logop("%-12s 0x%llx len 0x%zx (size 0x%llx)", "pread", (long long)off, len, (long long)fsize);
		r = pread(fd, tmpbuf, len, off);
		break;
	case OP_READ_SEEK: {
		int f = rndn(2) ? fd : fd_ro;
		logop("%-12s 0x%llx len 0x%zx (size 0x%llx)%s", "lseek+read", (long long)off, len,
		      (long long)fsize, f == fd_ro ? " via ro fd" : "");
		off_t s = lseek(f, off, SEEK_SET);
		if (s != off) fail("lseek SET returned %lld: %s", (long long)s, strerror(errno));
		r = read(f, tmpbuf, len);
		if (r >= 0) {
			off_t cur = lseek(f, 0, SEEK_CUR);
			if (cur != off + r) fail("offset after read 0x%llx, expected 0x%llx", (long long)cur, (long long)(off + r));
		}
		break;
	}
	case OP_PREADV:
		build_iov(iov, &niov, tmpbuf, len);
		logop("%-12s 0x%llx len 0x%zx niov %d (size 0x%llx)", "preadv", (long long)off, len, niov, (long long)fsize);
		r = preadv(fd, iov, niov, off);
		break;
	default: /* OP_READV */
		build_iov(iov, &niov, tmpbuf, len);
		logop("%-12s 0x%llx len 0x%zx niov %d (size 0x%llx)", "lseek+readv", (long long)off, len, niov, (long long)fsize);
		if (lseek(fd, off, SEEK_SET) != off) fail("lseek: %s", strerror(errno));
		r = readv(fd, iov, niov);
		break;
	}
	if (r < 0) fail("%s: %s", opname[kind], strerror(errno));
	if ((size_t)r != expect) fail("%s: returned 0x%zx, expected 0x%zx", opname[kind], r, expect);
	compare(tmpbuf, off, expect, opname[kind]);
}

static void dowrite(int kind)
{
	off_t off = pick_off(maxlen);
	size_t len = pick_len();
	if (off + (off_t)len > maxlen) len = maxlen - off;
	fill(tmpbuf, len);
	ssize_t r;
	struct iovec iov[8];
	int niov = 0;
	switch (kind) {
	case OP_WRITE:
		logop("%-12s 0x%llx len 0x%zx (size 0x%llx)%s", "pwrite", (long long)off, len, (long long)fsize,
		      off > fsize ? " HOLE" : "");
		r = pwrite(fd, tmpbuf, len, off);
		break;
	case OP_WRITE_SEEK:
		logop("%-12s 0x%llx len 0x%zx (size 0x%llx)%s", "lseek+write", (long long)off, len, (long long)fsize,
		      off > fsize ? " HOLE" : "");
		if (lseek(fd, off, SEEK_SET) != off) fail("lseek: %s", strerror(errno));
		r = write(fd, tmpbuf, len);
		if (r >= 0 && lseek(fd, 0, SEEK_CUR) != off + r) fail("offset after write wrong");
		break;
	case OP_PWRITEV:
		build_iov(iov, &niov, tmpbuf, len);
		logop("%-12s 0x%llx len 0x%zx niov %d (size 0x%llx)%s", "pwritev", (long long)off, len, niov,
		      (long long)fsize, off > fsize ? " HOLE" : "");
		r = pwritev(fd, iov, niov, off);
		break;
	default:
		build_iov(iov, &niov, tmpbuf, len);
		logop("%-12s 0x%llx len 0x%zx niov %d (size 0x%llx)%s", "lseek+writev", (long long)off, len, niov,
		      (long long)fsize, off > fsize ? " HOLE" : "");
		if (lseek(fd, off, SEEK_SET) != off) fail("lseek: %s", strerror(errno));
		r = writev(fd, iov, niov);
		break;
	}
	if (r < 0) fail("%s: %s", opname[kind], strerror(errno));
	if ((size_t)r != len) fail("%s: short write 0x%zx of 0x%zx", opname[kind], r, len);
	model_write(off, tmpbuf, len);
}

static void doappend(void)
{
	if (fsize >= maxlen) return;
	size_t len = pick_len();
	if (fsize + (off_t)len > maxlen) len = maxlen - fsize;
	fill(tmpbuf, len);
	int usepw = rndn(3) == 0;
	off_t bogus = usepw ? pick_off(fsize + 1) : 0;
	logop("%-12s len 0x%zx at size 0x%llx%s", "append", len, (long long)fsize,
	      usepw ? " (pwrite on O_APPEND fd)" : "");
	ssize_t r = usepw ? pwrite(fd_app, tmpbuf, len, bogus) : write(fd_app, tmpbuf, len);
	if (r < 0) fail("append: %s", strerror(errno));
	if ((size_t)r != len) fail("append short 0x%zx of 0x%zx", r, len);
	if (!usepw) {
		off_t cur = lseek(fd_app, 0, SEEK_CUR);
		if (cur != fsize + (off_t)len)
			fail("append: offset after write 0x%llx, expected 0x%llx", (long long)cur, (long long)(fsize + len));
	}
	model_write(fsize, tmpbuf, len);
}

static void dotrunc(int grow)
{
	off_t ns;
	if (grow) ns = fsize + rndn(maxlen - fsize + 1);
	else ns = rndn(fsize + 1);
	if (rndn(4) == 0) ns = (ns / PAGE) * PAGE + (rndn(2) ? 0 : (off_t)rndn(9) - 4);
	if (ns < 0) ns = 0;
	if (ns > maxlen) ns = maxlen;
	logop("%-12s 0x%llx -> 0x%llx", grow ? "trunc_grow" : "trunc_shrink", (long long)fsize, (long long)ns);
	if (ftruncate(fd, ns) < 0) fail("ftruncate: %s", strerror(errno));
	if (ns < fsize) { model_zero_from(ns); mark(ns, fsize - ns); }
	fsize = ns;
}

static void dofalloc(int kind)
{
	int mode;
	const char *nm;
	switch (kind) {
	case OP_FALLOC: mode = 0; nm = "falloc"; break;
	case OP_FALLOC_KEEP: mode = FALLOC_FL_KEEP_SIZE; nm = "falloc_keep"; break;
	case OP_PUNCH: mode = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE; nm = "punch_hole"; break;
	case OP_ZERO: mode = FALLOC_FL_ZERO_RANGE; nm = "zero_range"; break;
	default: mode = FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE; nm = "zero_range_keep"; break;
	}
	off_t off = pick_off((kind == OP_PUNCH || kind == OP_ZERO_KEEP) && rndn(4) ? (fsize ? fsize : 1) : maxlen);
	off_t len = pick_len();
	if (rndn(8) == 0) len = rndn(8) * PAGE + PAGE;
	if (off + len > maxlen) len = maxlen - off;
	if (len <= 0) return;
	logop("%-12s 0x%llx len 0x%llx (size 0x%llx)", nm, (long long)off, (long long)len, (long long)fsize);
	if (fallocate(fd, mode, off, len) < 0) {
		if (errno == EOPNOTSUPP) {
			fprintf(stderr, "note: %s not supported, disabling\n", nm);
			disabled[kind] = 1;
			opcount[kind]--;
			return;
		}
		fail("%s: %s", nm, strerror(errno));
	}
	off_t end = off + len;
	if (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) {
		off_t zend = (mode & FALLOC_FL_KEEP_SIZE) ? (end < fsize ? end : fsize) : end;
		if (zend > off) { memset(good + off, 0, zend - off); mark(off, zend - off); }
	}
	if (!(mode & FALLOC_FL_KEEP_SIZE) && end > fsize) fsize = end;
}

static void domapread(int kind)
{
	if (fsize == 0) return;
	off_t off = pick_off(fsize);
	size_t len = pick_len();
	if (off + (off_t)len > fsize) len = fsize - off;
	off_t pg = off & ~(off_t)(pagesz - 1);
	size_t mlen = len + (off - pg);
	int f = kind == OP_MAPREAD_RO ? fd_ro : fd;
	/* sometimes map to the end of the page containing EOF to check zeros past EOF */
	int eofchk = check_eof_zero && disabled[OP_PMAPTAIL] && off + (off_t)len == fsize && (fsize % pagesz) && rndn(2);
	if (eofchk) mlen = ((fsize - pg) + pagesz - 1) & ~(pagesz - 1);
	logop("%-12s 0x%llx len 0x%zx (size 0x%llx)%s%s", kind == OP_MAPREAD ? "mapread" : "mapread_ro",
	      (long long)off, len, (long long)fsize, eofchk ? " +eofpage" : "", f == fd_ro ? " (ro fd)" : "");
	unsigned char *p = mmap(NULL, mlen, PROT_READ, MAP_SHARED, f, pg);
	if (p == MAP_FAILED) fail("mmap read: %s", strerror(errno));
	memcpy(tmpbuf, p + (off - pg), len);
	if (eofchk) {
		for (off_t i = fsize - pg; i < (off_t)mlen; i++)
			if (p[i])
				fail("mapread: byte 0x%llx past EOF 0x%llx in mapped last page is 0x%02x, not 0",
				     (long long)(pg + i), (long long)fsize, p[i]);
	}
	if (munmap(p, mlen) < 0) fail("munmap: %s", strerror(errno));
	compare(tmpbuf, off, len, opname[kind]);
}

static void domapwrite(void)
{
	off_t off = pick_off(maxlen);
	size_t len = pick_len();
	if (off + (off_t)len > maxlen) len = maxlen - off;
	off_t pg = off & ~(off_t)(pagesz - 1);
	size_t mlen = len + (off - pg);
	int grew = 0;
	if (off + (off_t)len > fsize) {
		/* extend first, as classic fsx does (a mapping cannot grow the file) */
		if (ftruncate(fd, off + len) < 0) fail("mapwrite ftruncate: %s", strerror(errno));
		grew = 1;
	}
	fill(tmpbuf, len);
	int sync = rndn(3);
	logop("%-12s 0x%llx len 0x%zx (size 0x%llx)%s%s", "mapwrite", (long long)off, len, (long long)fsize,
	      grew ? " (grown by ftruncate)" : "", sync == 0 ? " msync" : sync == 1 ? " msync_async" : "");
	if (grew) fsize = off + len;
	unsigned char *p = mmap(NULL, mlen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, pg);
	if (p == MAP_FAILED) fail("mmap write: %s", strerror(errno));
	memcpy(p + (off - pg), tmpbuf, len);
	if (sync == 0 && msync(p, mlen, MS_SYNC) < 0) fail("msync: %s", strerror(errno));
	if (sync == 1 && msync(p, mlen, MS_ASYNC) < 0) fail("msync async: %s", strerror(errno));
	if (munmap(p, mlen) < 0) fail("munmap: %s", strerror(errno));
	model_write(off, tmpbuf, len);
}

static ssize_t cfr_all(int in, off_t *inoff, int out, off_t *outoff, size_t len, size_t *done)
{
	*done = 0;
	while (*done < len) {
		ssize_t r = copy_file_range(in, inoff, out, outoff, len - *done, 0);
		if (r < 0) return r;
		if (r == 0) break;
		*done += r;
	}
	return 0;
}

static void docopy(int kind)
{
	if (kind == OP_COPY_SELF) {
		if (fsize < 2) return;
		size_t len = pick_len();
		if ((off_t)len > fsize / 2) len = 1 + rndn(fsize / 2);
		off_t src = pick_off(fsize - len + 1);
		off_t dst;
		int tries = 0;
		do {
			dst = pick_off(maxlen - len + 1);
			if (++tries > 50) return;
		} while (!(dst + (off_t)len <= src || dst >= src + (off_t)len));
		logop("%-12s src 0x%llx -> dst 0x%llx len 0x%zx (size 0x%llx)", "copy_self",
		      (long long)src, (long long)dst, len, (long long)fsize);
		off_t so = src, dof = dst;
		size_t done;
		if (cfr_all(fd, &so, fd, &dof, len, &done) < 0) fail("copy_file_range self: %s", strerror(errno));
		if (done != len) fail("copy_file_range self: copied 0x%zx of 0x%zx", done, len);
		if (so != src + (off_t)len || dof != dst + (off_t)len) fail("copy_file_range offsets not advanced");
		memmove(tmpbuf, good + src, len);
		model_write(dst, tmpbuf, len);
	} else {
		size_t len = pick_len();
		if (len > srclen) len = srclen;
		off_t src = rndn(srclen - len + 1);
		off_t dst = pick_off(maxlen - len + 1);
		int usecur = rndn(2);
		logop("%-12s src 0x%llx -> dst 0x%llx len 0x%zx (size 0x%llx)%s", "copy_other",
		      (long long)src, (long long)dst, len, (long long)fsize, usecur ? " (file offsets)" : "");
		size_t done;
		if (usecur) {
			if (lseek(fd_src, src, SEEK_SET) != src || lseek(fd, dst, SEEK_SET) != dst) fail("lseek: %s", strerror(errno));
			if (cfr_all(fd_src, NULL, fd, NULL, len, &done) < 0) fail("copy_file_range other: %s", strerror(errno));
			if (lseek(fd, 0, SEEK_CUR) != dst + (off_t)done) fail("copy_file_range: dst file offset not advanced");
			if (lseek(fd_src, 0, SEEK_CUR) != src + (off_t)done) fail("copy_file_range: src file offset not advanced");
		} else {
			off_t so = src, dof = dst;
			if (cfr_all(fd_src, &so, fd, &dof, len, &done) < 0) fail("copy_file_range other: %s", strerror(errno));
		}
		if (done != len) fail("copy_file_range other: copied 0x%zx of 0x%zx", done, len);
		model_write(dst, srcgood + src, len);
	}
}

static int allzero(off_t a, off_t b)
{
	for (off_t i = a; i < b; i++)
		if (good[i]) return 0;
	return 1;
}

static void doseek(void)
{
	off_t off = fsize ? pick_off(fsize + 4096) : 0;
	logop("%-12s at 0x%llx (size 0x%llx)", "seek_data_hole", (long long)off, (long long)fsize);
	errno = 0;
	off_t d = lseek(fd, off, SEEK_DATA);
	int de = errno;
	errno = 0;
	off_t h = lseek(fd, off, SEEK_HOLE);
	int he = errno;
	if (off >= fsize) {
		if (d != -1 || de != ENXIO) fail("SEEK_DATA at/after EOF: %lld (%s), expected ENXIO", (long long)d, strerror(de));
		if (h != -1 || he != ENXIO) fail("SEEK_HOLE at/after EOF: %lld (%s), expected ENXIO", (long long)h, strerror(he));
		return;
	}
	if (h == -1) fail("SEEK_HOLE 0x%llx: %s", (long long)off, strerror(he));
	if (h < off || h > fsize) fail("SEEK_HOLE 0x%llx returned 0x%llx (size 0x%llx)", (long long)off, (long long)h, (long long)fsize);
	if (d == -1) {
		if (de != ENXIO) fail("SEEK_DATA 0x%llx: %s", (long long)off, strerror(de));
		if (!allzero(off, fsize)) fail("SEEK_DATA 0x%llx said ENXIO but nonzero data lies before EOF", (long long)off);
		if (h != off) fail("SEEK_DATA ENXIO but SEEK_HOLE 0x%llx != 0x%llx", (long long)h, (long long)off);
		return;
	}
	if (d < off || d >= fsize) fail("SEEK_DATA 0x%llx returned 0x%llx (size 0x%llx)", (long long)off, (long long)d, (long long)fsize);
	if (!allzero(off, d)) {
		off_t nz = off;
		while (!good[nz]) nz++;
		fail("SEEK_DATA 0x%llx returned 0x%llx but byte 0x%llx is nonzero data", (long long)off, (long long)d, (long long)nz);
	}
	if (d > off && h != off) fail("SEEK_DATA 0x%llx -> 0x%llx (hole at off) but SEEK_HOLE -> 0x%llx", (long long)off, (long long)d, (long long)h);
	if (d == off && h == off) fail("offset 0x%llx both data and hole", (long long)off);
	/* the hole found must not hide data */
	if (h < fsize) {
		errno = 0;
		off_t d2 = lseek(fd, h, SEEK_DATA);
		if (d2 == -1) {
			if (errno != ENXIO) fail("SEEK_DATA 0x%llx: %s", (long long)h, strerror(errno));
			if (!allzero(h, fsize)) fail("SEEK_DATA from hole 0x%llx: ENXIO but data before EOF", (long long)h);
		} else if (!allzero(h, d2)) {
			fail("hole 0x%llx..0x%llx (SEEK_HOLE/SEEK_DATA) contains nonzero data", (long long)h, (long long)d2);
		}
	}
}

static void pmap_open(void)
{
	pmaplen = (maxlen + pagesz - 1) & ~(pagesz - 1);
	pmap = mmap(NULL, pmaplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (pmap == MAP_FAILED) fail("persistent mmap: %s", strerror(errno));
}

static void pmap_close(void)
{
	if (munmap(pmap, pmaplen) < 0) fail("persistent munmap: %s", strerror(errno));
	pmap = NULL;
}

static void pmap_check(const char *what)
{
	/* the mapping must show the file: every byte below EOF, and zeros to the end of EOF's page */
	for (off_t o = 0; o < fsize; o += maxop) {
		size_t n = fsize - o > (off_t)maxop ? maxop : (size_t)(fsize - o);
		memcpy(tmpbuf, pmap + o, n);
		compare(tmpbuf, o, n, what);
	}
	if (check_eof_zero && !disabled[OP_PMAPTAIL]) return; /* tail garbage is allowed in the map itself */
	off_t end = (fsize + pagesz - 1) & ~(pagesz - 1);
	if (check_eof_zero)
		for (off_t i = fsize; i < end; i++)
			if (pmap[i]) fail("%s: mapped byte 0x%llx past EOF 0x%llx is 0x%02x", what, (long long)i, (long long)fsize, pmap[i]);
}

static void dopmap(int kind)
{
	if (kind == OP_PMAPREMAP) {
		logop("%-12s", "pmap munmap+mmap");
		pmap_close();
		pmap_open();
		return;
	}
	if (kind == OP_PMAPTAIL) {
		/* store garbage past EOF in EOF's page: never part of the file (Linux zeroes it when the file grows) */
		if (fsize % pagesz == 0) return;
		off_t end = (fsize + pagesz - 1) & ~(pagesz - 1);
		logop("%-12s 0x%llx..0x%llx garbage past EOF", "pmaptail", (long long)fsize, (long long)end);
		memset(pmap + fsize, 0xa5, end - fsize);
		if ((pmap_syncall || rndn(2)) && msync(pmap, pmaplen, MS_SYNC) < 0) fail("msync: %s", strerror(errno));
		return;
	}
	if (kind == OP_PMAPREAD) {
		if (fsize == 0) return;
		off_t off = pick_off(fsize);
		size_t len = pick_len();
		if (off + (off_t)len > fsize) len = fsize - off;
		logop("%-12s 0x%llx len 0x%zx (size 0x%llx)", "pmapread", (long long)off, len, (long long)fsize);
		memcpy(tmpbuf, pmap + off, len);
		compare(tmpbuf, off, len, "pmapread");
		return;
	}
	off_t off = pick_off(maxlen);
	size_t len = pick_len();
	if (off + (off_t)len > maxlen) len = maxlen - off;
	int grew = 0;
	if (off + (off_t)len > fsize) {
		if (ftruncate(fd, off + len) < 0) fail("pmapwrite ftruncate: %s", strerror(errno));
		grew = 1;
	}
	fill(tmpbuf, len);
	int sync = pmap_syncall ? 0 : rndn(3);
	logop("%-12s 0x%llx len 0x%zx (size 0x%llx)%s%s", "pmapwrite", (long long)off, len, (long long)fsize,
	      grew ? " (grown by ftruncate)" : "", sync == 0 ? " msync" : "");
	if (grew) fsize = off + len;
	memcpy(pmap + off, tmpbuf, len);
	if (sync == 0) {
		off_t pg = off & ~(off_t)(pagesz - 1);
		if (msync(pmap + pg, len + (off - pg), MS_SYNC) < 0) fail("msync: %s", strerror(errno));
	}
	model_write(off, tmpbuf, len);
}

static void docloseopen(void)
{
	int keepmap = pmap && rndn(2);
	logop("%-12s%s", "close/reopen", pmap ? (keepmap ? " (pmap kept)" : " (pmap remapped)") : "");
	int had = pmap != NULL;
	if (had && !keepmap) pmap_close();
	do_close();
	do_open();
	if (had && !keepmap) pmap_open();
	full_check("after reopen");
}

static void dosync(int kind)
{
	int f = rndn(2) ? fd : fd_app;
	logop("%-12s", kind == OP_FSYNC ? "fsync" : "fdatasync");
	if ((kind == OP_FSYNC ? fsync(f) : fdatasync(f)) < 0) fail("%s: %s", opname[kind], strerror(errno));
}

static off_t parsesize(const char *s)
{
	char *e;
	off_t v = strtoll(s, &e, 0);
	if (*e == 'k' || *e == 'K') v <<= 10;
	else if (*e == 'm' || *e == 'M') v <<= 20;
	else if (*e == 'g' || *e == 'G') v <<= 30;
	return v;
}

int main(int argc, char **argv)
{
	int c, usepmap = 0, pmaptail = 0;
	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((c = getopt(argc, argv, "RWFPZKCVAOTHSEMXYo:c:vq")) != -1) {
		switch (c) {
		case 'R': disabled[OP_MAPREAD] = disabled[OP_MAPREAD_RO] = 1; break;
		case 'W': disabled[OP_MAPWRITE] = 1; break;
		case 'F': disabled[OP_FALLOC] = disabled[OP_FALLOC_KEEP] = disabled[OP_PUNCH] =
			disabled[OP_ZERO] = disabled[OP_ZERO_KEEP] = 1; break;
		case 'P': disabled[OP_PUNCH] = 1; break;
		case 'Z': disabled[OP_ZERO] = disabled[OP_ZERO_KEEP] = 1; break;
		case 'K': disabled[OP_FALLOC_KEEP] = 1; break;
		case 'C': disabled[OP_COPY_SELF] = disabled[OP_COPY_OTHER] = 1; break;
		case 'V': disabled[OP_PREADV] = disabled[OP_READV] = disabled[OP_PWRITEV] = disabled[OP_WRITEV] = 1; break;
		case 'A': disabled[OP_APPEND] = 1; break;
		case 'O': disabled[OP_CLOSEOPEN] = 1; break;
		case 'T': disabled[OP_TRUNC_GROW] = disabled[OP_TRUNC_SHRINK] = 1; break;
		case 'H': disabled[OP_SEEKDH] = 1; break;
		case 'S': disabled[OP_FSYNC] = disabled[OP_FDATASYNC] = 1; break;
		case 'E': check_eof_zero = 0; break;
		case 'M': usepmap = 1; break;
		case 'X': pmaptail = 1; break;
		case 'Y': pmap_syncall = 1; break;
		case 'o': maxop = parsesize(optarg); break;
		case 'c': check_every = strtoul(optarg, NULL, 0); break;
		case 'v': verbose = 1; break;
		case 'q': quiet = 1; break;
		default:
			fprintf(stderr, "usage: fsx [-RWFPZKCVAOTHSE] [-o maxop] [-c checkevery] [-v] [-q] PATH [SEED] [NUMOPS] [MAXSIZE]\n");
			return 2;
		}
	}
	if (optind >= argc) { fprintf(stderr, "need a path\n"); return 2; }
	path = argv[optind++];
	if (optind < argc) seed = strtoul(argv[optind++], NULL, 0);
	if (optind < argc) numops = strtoul(argv[optind++], NULL, 0);
	if (optind < argc) maxlen = parsesize(argv[optind++]);
	if (maxlen < 2 * PAGE) maxlen = 2 * PAGE;
	if ((off_t)maxop > maxlen) maxop = maxlen;
	rs = seed * 0x9E3779B97F4A7C15ULL + 0x1234567;
	if (!rs) rs = 1;
	for (int i = 0; i < 10; i++) rnd();
	pagesz = sysconf(_SC_PAGESIZE);

	good = calloc(maxlen + PAGE, 1);
	tmpbuf = malloc(maxop + 2 * PAGE + maxlen % 1 + 65536);
	pagelast = calloc(maxlen / PAGE + 2, sizeof *pagelast);
	if (!good || !tmpbuf || !pagelast) { perror("malloc"); return 1; }

	/* the copy source */
	if (asprintf(&path2, "%s.cfr", path) < 0) return 1;
	srclen = maxop * 2;
	srcgood = malloc(srclen);
	opno = 0;
	fill(srcgood, srclen);
	fd_src = open(path2, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd_src < 0) { fprintf(stderr, "open %s: %s\n", path2, strerror(errno)); return 1; }
	if (pwrite(fd_src, srcgood, srclen, 0) != (ssize_t)srclen) { perror("write src"); return 1; }

	int f0 = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (f0 < 0) { fprintf(stderr, "open %s: %s\n", path, strerror(errno)); return 1; }
	close(f0);
	do_open();
	fsize = 0;
	if (!usepmap) disabled[OP_PMAPREAD] = disabled[OP_PMAPWRITE] = disabled[OP_PMAPREMAP] = 1;
	if (!usepmap || !pmaptail) disabled[OP_PMAPTAIL] = 1;
	if (usepmap) pmap_open();

	/* op weights */
	static const int weight[OP_NOPS] = {
		[OP_READ] = 10, [OP_READ_SEEK] = 4, [OP_PREADV] = 3, [OP_READV] = 3,
		[OP_MAPREAD] = 5, [OP_MAPREAD_RO] = 3,
		[OP_WRITE] = 10, [OP_WRITE_SEEK] = 4, [OP_PWRITEV] = 3, [OP_WRITEV] = 3,
		[OP_MAPWRITE] = 6, [OP_APPEND] = 3,
		[OP_TRUNC_GROW] = 2, [OP_TRUNC_SHRINK] = 3, [OP_FALLOC] = 2, [OP_FALLOC_KEEP] = 2,
		[OP_PUNCH] = 3, [OP_ZERO] = 2, [OP_ZERO_KEEP] = 2, [OP_COPY_SELF] = 3,
		[OP_COPY_OTHER] = 3, [OP_CLOSEOPEN] = 1, [OP_FSYNC] = 1, [OP_FDATASYNC] = 1,
		[OP_SEEKDH] = 4, [OP_PMAPREAD] = 8, [OP_PMAPWRITE] = 8, [OP_PMAPTAIL] = 2, [OP_PMAPREMAP] = 1,
	};

	for (opno = 1; opno <= numops; opno++) {
		int tot = 0;
		for (int k = 0; k < OP_NOPS; k++) if (!disabled[k]) tot += weight[k];
		if (!tot) break;
		int x = rndn(tot), k;
		for (k = 0; k < OP_NOPS; k++) {
			if (disabled[k]) continue;
			if (x < weight[k]) break;
			x -= weight[k];
		}
		/* keep the file from staying tiny: shrink less when small */
		if (k == OP_TRUNC_SHRINK && fsize < maxlen / 8 && rndn(2)) k = OP_WRITE;
		oplog[opno % LOGN][0] = 0;
		opcount[k]++;
		switch (k) {
		case OP_READ: case OP_READ_SEEK: case OP_PREADV: case OP_READV: doread(k); break;
		case OP_WRITE: case OP_WRITE_SEEK: case OP_PWRITEV: case OP_WRITEV: dowrite(k); break;
		case OP_MAPREAD: case OP_MAPREAD_RO: domapread(k); break;
		case OP_MAPWRITE: domapwrite(); break;
		case OP_APPEND: doappend(); break;
		case OP_TRUNC_GROW: dotrunc(1); break;
		case OP_TRUNC_SHRINK: dotrunc(0); break;
		case OP_FALLOC: case OP_FALLOC_KEEP: case OP_PUNCH: case OP_ZERO: case OP_ZERO_KEEP: dofalloc(k); break;
		case OP_COPY_SELF: case OP_COPY_OTHER: docopy(k); break;
		case OP_CLOSEOPEN: docloseopen(); break;
		case OP_FSYNC: case OP_FDATASYNC: dosync(k); break;
		case OP_SEEKDH: doseek(); break;
		case OP_PMAPREAD: case OP_PMAPWRITE: case OP_PMAPTAIL: case OP_PMAPREMAP: dopmap(k); break;
		}
		check_size(opname[k]);
		if (check_every && opno % check_every == 0) {
			full_check("periodic check");
			if (pmap) pmap_check("periodic check of persistent map");
		}
	}
	opno = numops;
	full_check("final check");
	if (pmap) { pmap_check("final check of persistent map"); pmap_close(); full_check("final check after munmap"); }
	/* the copy source must be untouched */
	unsigned char *sb = malloc(srclen);
	if (pread(fd_src, sb, srclen, 0) != (ssize_t)srclen || memcmp(sb, srcgood, srclen))
		fail("copy source file changed");
	do_close();
	close(fd_src);
	if (!quiet) {
		printf("fsx %s seed %lu: %lu ops OK, max size 0x%llx, final size 0x%llx\n", path, seed, numops,
		       (long long)maxlen, (long long)fsize);
		for (int k = 0; k < OP_NOPS; k++)
			printf("  %-15s %8lu%s\n", opname[k], opcount[k], disabled[k] ? " (disabled)" : "");
	}
	return 0;
}
