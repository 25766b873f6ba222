#!/usr/bin/env bash
# Install the system packages the test suite needs, if they are missing. Idempotent: does
# nothing (and needs no network) when everything is present. Only root installs; others are
# told what is missing.
set -euo pipefail

# fuse3: FUSE mounts (fusermount3); sqlite3, git, fio, rocksdb-tools (db_bench), python3,
# make, patch, nodejs: programs the FUSE and shim tests run (under CI a missing one fails
# its test); gcc: the shim's C part (dprintf) and the shim's C test programs; strace: the
# check that an exec with nothing to inherit skips its scan of /proc/self/fd; bsdextrautils:
# colrm, which reads with glibc's wide-character functions.
PACKAGES=(fuse3 sqlite3 git fio rocksdb-tools python3 gcc make patch nodejs strace bsdextrautils)

missing=()
for pkg in "${PACKAGES[@]}"; do
    if ! dpkg -s "$pkg" >/dev/null 2>&1; then
        missing+=("$pkg")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all ${#PACKAGES[@]} required packages present${PACKAGES[*]:+ (${PACKAGES[*]})}"
    exit 0
fi

echo "install-deps: missing: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: not root; install them with: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-deps: apt-get not found; install ${missing[*]} with your package manager" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: installed ${missing[*]}"
