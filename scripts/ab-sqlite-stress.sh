#!/usr/bin/env bash
# Compare builds on scripts/sqlite-stress.sh, runs alternated (one round runs each build
# once), each build under `engram run` on a pool of its own, and natively on /dev/shm.
#
#   scripts/ab-sqlite-stress.sh ROUNDS NREAD ENGRAM...
#
# ENGRAM is an `engram` binary (its shim is found beside it); NREAD 0 runs the writers and
# updaters only, 2 adds the readers. GAP=1000, DELETE journal, 4 small and 2 large writers
# of 500 rows, 2 updaters of 500 increments. Prints each run, then per build the median
# and the sorted times.
set -euo pipefail
if [ $# -lt 3 ]; then
    sed -n '2,10p' "$0"
    exit 2
fi
rounds=$1
nread=$2
shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
stress=$here/scripts/sqlite-stress.sh
args=(delete 0 4 2 500 2 500 "$nread")
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for _ in $(seq "$rounds"); do
    k=0
    for e in "$@" native; do
        k=$((k + 1))
        if [ "$e" = native ]; then
            line=$(GAP=1000 "$stress" /dev/shm/engram-ab-native "${args[@]}" native)
        else
            pool=/dev/shm/engram-ab-$k.pool
            [ -e "$pool" ] || "$e" mkfs "$pool" --size 512M >/dev/null
            line=$(GAP=1000 "$e" run --pool "$pool" -- "$stress" /mnt/engram/s "${args[@]}" "$k")
        fi
        echo "$line"
        echo "$line" >>"$out"
    done
done
rm -rf /dev/shm/engram-ab-native
echo "--- medians (s)"
k=0
for e in "$@" native; do
    k=$((k + 1))
    tag=$k
    [ "$e" = native ] && tag=native
    times=$(awk -v t="$tag" '$1 == t && $2 == "PASS" { sub("time=", "", $3); sub("s$", "", $3); print $3 }' "$out" | sort -n)
    failed=$(awk -v t="$tag" '$1 == t && $2 != "PASS"' "$out" | wc -l)
    median=$(echo "$times" | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }')
    echo "$e: median ${median:-none} of $(echo "$times" | grep -c .) runs: $(echo $times)$([ "$failed" = 0 ] || echo " ($failed failed)")"
done
echo "(the pools /dev/shm/engram-ab-*.pool are kept for the next run; remove them when done)"
