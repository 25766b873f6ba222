#!/usr/bin/env bash
# Table 2 of docs/performance.md: the microbenchmarks through every front end, one thread.
# Two runs of `engram bench --quick --filter micro`, because a process loads the shim with
# one configuration: run 1 with the shim opening its pool in-process (`engram-shim`) and a
# FUSE mount (`engram-fuse`); run 2 with the shim through a daemon under `engram run`
# (`engram-shim-daemon`). Each run also measures the native targets and the baselines, so
# every ratio compares numbers taken side by side. Needs root (FUSE, the huge-page tmpfs).
# Usage: scripts/bench-frontends.sh [--full] [OUT_DIR]   (default /tmp/engram-frontends)
# --full: the microbenchmarks at full scale (longer rows, steadier ratios; about 6 minutes)
# instead of --quick (about a minute).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
scale=--quick
if [ "${1:-}" = --full ]; then
    scale=
    shift
fi
out=${1:-/tmp/engram-frontends}
mkdir -p "$out"
engram=$PWD/target/release/engram
shim=$PWD/target/release/libengram_preload.so
cargo build --release -p engram-cli -p engram-preload >&2

# The front ends' pools on a huge-page tmpfs like the bench's own pools (docs/architecture.md
# item 16), when one can be mounted.
pools=$(mktemp -d /tmp/engram-frontends-pools.XXXXXX)
fmnt=$(mktemp -d /tmp/engram-frontends-fuse.XXXXXX)
mount -t tmpfs -o huge=within_size,size=8G tmpfs "$pools" 2>/dev/null ||
    echo "note: no huge-page tmpfs for the front ends' pools; they live in $pools" >&2
cleanup() {
    "$engram" umount "$fmnt" 2>/dev/null || true
    # The daemon of `engram run` may still hold its pool for a moment (idle exit): detach.
    umount "$pools" 2>/dev/null || umount -l "$pools" 2>/dev/null || true
    rm -rf "$pools" "$fmnt"
}
trap cleanup EXIT

# Every page of the front ends' pools faulted in once, as the bench does for its own pools
# (a huge-page tmpfs zeroes a 2 MiB page on first touch, inside the timed rows otherwise:
# 4 KiB appends through the shim ran at a ninth of their speed). Each byte read and written
# back unchanged, before anything uses the pool.
prefault() {
    python3 -c 'import mmap, sys
with open(sys.argv[1], "r+b") as f:
    m = mmap.mmap(f.fileno(), 0)
    for i in range(0, len(m), 4096):
        m[i] = m[i]
    m.close()' "$1"
}
for p in fuse shim shimd; do
    "$engram" mkfs "$pools/$p.pool" --size 2G >/dev/null
    prefault "$pools/$p.pool"
done
"$engram" mount "$pools/fuse.pool" "$fmnt"
mkdir "$fmnt/b"

echo "== run 1: shim in-process, FUSE" >&2
LD_PRELOAD=$shim ENGRAM_POOL=$pools/shim.pool ENGRAM_MOUNT=/mnt/engram-ip \
    sh -c 'mkdir -p /mnt/engram-ip/b'
LD_PRELOAD=$shim ENGRAM_POOL=$pools/shim.pool ENGRAM_MOUNT=/mnt/engram-ip \
    ENGRAM_BENCH_SHIM_DIR=/mnt/engram-ip/b ENGRAM_BENCH_FUSE_DIR=$fmnt/b \
    "$engram" bench $scale --filter micro --threads 1 --json "$out/run1.json" |
    tee "$out/run1.txt"

echo "== run 2: shim through the daemon" >&2
"$engram" run --pool "$pools/shimd.pool" -- sh -c \
    "mkdir -p /mnt/engram/b && ENGRAM_BENCH_SHIM_DAEMON_DIR=/mnt/engram/b \
     exec '$engram' bench $scale --filter micro --threads 1 --json '$out/run2.json'" |
    tee "$out/run2.txt"
