#!/usr/bin/env bash
# Compare builds of `target_loop` on one operation, runs alternated, each run kept only if the
# host's cross-core hand-off measured before and after it was fast (< 60 ns) or slow
# (> 100 ns): on this kind of virtual machine the daemon's rows move with the hand-off, which
# changes every few seconds to minutes, so unclassified runs mix two populations.
#
#   scripts/ab-handoff.sh ROUNDS "OP COUNT [daemon]" DIR...
#
# Each DIR holds a `target_loop` (copy target/release/examples/target_loop of each build
# there). Prints, per DIR, the sorted ns/op of the fast runs and of the slow runs.
set -euo pipefail
if [ $# -lt 3 ]; then
    sed -n '2,10p' "$0"
    exit 2
fi
rounds=$1
args=$2
shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
pingpong=$here/target/release/examples/pingpong
[ -x "$pingpong" ] || cargo build --release -q -p engram-bench --example pingpong
handoff() { timeout 20 "$pingpong" 300000 | cut -d' ' -f1; }
declare -A fast slow
for _ in $(seq "$rounds"); do
    for d in "$@"; do
        before=$(handoff)
        # shellcheck disable=SC2086 # the operation's words are separate arguments
        ns=$("$d/target_loop" $args 2>&1 | tail -1 | sed -E 's/.*: ([0-9]+) ns per operation.*/\1/')
        after=$(handoff)
        if awk -v a="$before" -v b="$after" 'BEGIN { exit !(a < 60 && b < 60) }'; then
            fast[$d]="${fast[$d]:-} $ns"
        elif awk -v a="$before" -v b="$after" 'BEGIN { exit !(a > 100 && b > 100) }'; then
            slow[$d]="${slow[$d]:-} $ns"
        fi
    done
done
sorted() { tr ' ' '\n' | grep . | sort -n | tr '\n' ' '; }
for d in "$@"; do
    echo "$d: fast: $(echo "${fast[$d]:-}" | sorted)| slow: $(echo "${slow[$d]:-}" | sorted)"
done
