#!/bin/bash
# Several processes on one SQLite database, every result checked: NSMALL+NLARGE writers
# (ROWS single-row transactions each, small or 2 KB rows), NUPD updaters (INCS increments of
# a shared and an own counter), and NREAD readers (odd: one long-lived sqlite3 with 400
# counts and 20 integrity checks; even: a loop of short-lived sqlite3 processes, count and
# integrity check, for as long as the first writer runs). GAP=N runs a query of N
# recursive rows after each transaction (outside it). Prints
# "TAG PASS|FAIL time=… reader_integrity_checks=… switches=… pages=… [what failed]";
# switches counts how often consecutive rows come from different writers.
#
#   scripts/sqlite-stress.sh DIR JOURNAL(wal|delete) MMAP NSMALL NLARGE ROWS NUPD INCS NREAD TAG
#
# On EngramFS through the daemon, and natively beside it:
#   engram mkfs /dev/shm/s.pool --size 512M
#   GAP=1000 engram run --pool /dev/shm/s.pool -- scripts/sqlite-stress.sh /mnt/engram/s delete 0 4 2 500 2 500 2 e
#   GAP=1000 scripts/sqlite-stress.sh /dev/shm/s-native delete 0 4 2 500 2 500 2 n
# (docs/performance.md, "Several processes on one SQLite database").
set -u
DIR=$1; JM=$2; MMAP=$3; NSMALL=$4; NLARGE=$5; ROWS=$6; NUPD=$7; INCS=$8; NREAD=$9; TAG=${10}
S=${TMPDIR:-/tmp}/engram-sqlite-stress-$TAG; rm -rf "$S"; mkdir -p "$S" "$DIR"
DB=$DIR/test.db; rm -f "$DB" "$DB-wal" "$DB-shm" "$DB-journal"
PRE="PRAGMA busy_timeout=30000; PRAGMA mmap_size=$MMAP;"
if [ "$JM" = wal ]; then PRE="$PRE PRAGMA wal_autocheckpoint=8;"; fi
NW=$((NSMALL+NLARGE))
GAP=${GAP:-0}; GAPSQL=""
[ "$GAP" -gt 0 ] && GAPSQL=" WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM g WHERE i<$GAP) SELECT count(*) FROM g;"
sqlite3 "$DB" >/dev/null 2>"$S/init.err" <<SQL
PRAGMA journal_mode=$JM;
CREATE TABLE t(w INTEGER, seq INTEGER, d TEXT, r BLOB);
CREATE INDEX t_ws ON t(w,seq);
CREATE TABLE counters(id INTEGER PRIMARY KEY, n INTEGER NOT NULL);
WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM c WHERE i<$NUPD) INSERT INTO counters SELECT i,0 FROM c;
SQL
# payload expressions: deterministic, verifiable
small="printf('w%d-s%d',W,Q)"
large="substr(replace(hex(zeroblob(1000)),'00',printf('%d-%d;',W,Q)),1,2000)"
for w in $(seq 1 $NW); do
  if [ $w -le $NSMALL ]; then e=$small; r="NULL"; else e=$large; r="randomblob(2000)"; fi
  awk -v gap="$GAPSQL" -v w=$w -v n=$ROWS -v e="$e" -v r="$r" -v pre="$PRE" 'BEGIN{print pre;
    for(i=1;i<=n;i++){x=e; gsub(/W/,w,x); gsub(/Q/,i,x);
      print "BEGIN IMMEDIATE; INSERT INTO t VALUES(" w "," i "," x "," r "); COMMIT;" gap}}' > "$S/w$w.sql"
done
for u in $(seq 1 $NUPD); do
  awk -v gap="$GAPSQL" -v u=$u -v n=$INCS -v pre="$PRE" 'BEGIN{print pre;
    for(i=1;i<=n;i++) print "BEGIN IMMEDIATE; UPDATE counters SET n=n+1 WHERE id=0; UPDATE counters SET n=n+1 WHERE id=" u "; COMMIT;" gap}' > "$S/u$u.sql"
done
# long-lived reader: count(*) many times and quick_check/integrity_check
awk -v pre="$PRE" 'BEGIN{print pre; for(i=1;i<=400;i++){print "SELECT \"C\", count(*) FROM t;"; if(i%20==0) print "PRAGMA integrity_check;"}}' > "$S/r.sql"
t0=$(date +%s.%N)
pids=()
for w in $(seq 1 $NW); do sqlite3 "$DB" < "$S/w$w.sql" >/dev/null 2>"$S/w$w.err" & pids+=($!); done
for u in $(seq 1 $NUPD); do sqlite3 "$DB" < "$S/u$u.sql" >/dev/null 2>"$S/u$u.err" & pids+=($!); done
rpids=()
for k in $(seq 1 $NREAD); do
  if [ $((k%2)) = 1 ]; then
    sqlite3 "$DB" < "$S/r.sql" > "$S/r$k.out" 2>"$S/r$k.err" & rpids+=($!)
  else  # many short-lived reader processes
    ( while kill -0 ${pids[0]} 2>/dev/null; do
        sqlite3 "$DB" "PRAGMA busy_timeout=30000" "PRAGMA mmap_size=$MMAP" "SELECT 'C', count(*) FROM t" "PRAGMA integrity_check" ; done ) > "$S/r$k.out" 2>"$S/r$k.err" & rpids+=($!)
  fi
done
rc=0
for p in "${pids[@]}"; do wait $p || rc=1; done
for p in "${rpids[@]}"; do wait $p || rc=1; done
t1=$(date +%s.%N)
# verification
[ -n "${FAULT:-}" ] && sqlite3 "$DB" "$FAULT"
V=$(sqlite3 "$DB" 2>&1 <<SQL
PRAGMA busy_timeout=30000; PRAGMA mmap_size=$MMAP;
.mode list
SELECT 'rows', count(*) FROM t;
SELECT 'dups', count(*) FROM (SELECT w,seq FROM t GROUP BY w,seq HAVING count(*)>1);
SELECT 'distinct', count(*) FROM (SELECT DISTINCT w,seq FROM t);
SELECT 'badw', count(*) FROM (SELECT w, count(*) c, min(seq) a, max(seq) b FROM t GROUP BY w) WHERE c!=$ROWS OR a!=1 OR b!=$ROWS;
SELECT 'nw', count(DISTINCT w) FROM t;
SELECT 'badsmall', count(*) FROM t WHERE w<=$NSMALL AND (d IS NOT printf('w%d-s%d',w,seq) OR r IS NOT NULL);
SELECT 'badlarge', count(*) FROM t WHERE w>$NSMALL AND (d IS NOT substr(replace(hex(zeroblob(1000)),'00',printf('%d-%d;',w,seq)),1,2000) OR length(r)!=2000);
SELECT 'c0', n FROM counters WHERE id=0;
SELECT 'cbad', count(*) FROM counters WHERE id>0 AND n!=$INCS;
SELECT 'switches', count(*) FROM (SELECT w, lag(w) OVER (ORDER BY rowid) pw FROM t) WHERE w!=pw;
SELECT 'pages', page_count FROM pragma_page_count;
PRAGMA integrity_check;
SQL
)
exp_rows=$((NW*ROWS)); exp_c0=$((NUPD*INCS))
get(){ echo "$V" | awk -F'|' -v k=$1 '$1==k{print $2}'; }
ok=1; msg=""
[ "$(get rows)" = "$exp_rows" ] || { ok=0; msg="$msg rows=$(get rows)/exp$exp_rows"; }
[ "$(get dups)" = 0 ] || { ok=0; msg="$msg dups=$(get dups)"; }
[ "$(get distinct)" = "$exp_rows" ] || { ok=0; msg="$msg distinct=$(get distinct)"; }
[ "$(get badw)" = 0 ] || { ok=0; msg="$msg badw=$(get badw)"; }
[ "$(get nw)" = "$NW" ] || { ok=0; msg="$msg nw=$(get nw)"; }
[ "$(get badsmall)" = 0 ] || { ok=0; msg="$msg badsmall=$(get badsmall)"; }
[ "$(get badlarge)" = 0 ] || { ok=0; msg="$msg badlarge=$(get badlarge)"; }
[ "$(get c0)" = "$exp_c0" ] || { ok=0; msg="$msg c0=$(get c0)/exp$exp_c0"; }
[ "$(get cbad)" = 0 ] || { ok=0; msg="$msg cbad=$(get cbad)"; }
echo "$V" | grep -qx ok || { ok=0; msg="$msg integrity:$(echo "$V" | grep -v '|' | head -3 | tr '\n' ' ')"; }
# reader checks: every integrity_check line 'ok', counts monotonic in long-lived readers
rbad=0; nint=0
for k in $(seq 1 $NREAD); do
  f=$S/r$k.out
  b=$(grep -v '^C|' "$f" | grep -vx ok | grep -vx 30000 | grep -vx "$MMAP" | grep -vx 8 | wc -l); rbad=$((rbad+b))
  nint=$((nint+$(grep -cx ok "$f")))
  if [ $((k%2)) = 1 ]; then
    m=$(awk -F'|' '/^C\|/{if($2<p)bad++; p=$2} END{print bad+0}' "$f"); [ "$m" = 0 ] || { ok=0; msg="$msg nonmono_r$k=$m"; }
  fi
done
[ $rbad = 0 ] || { ok=0; msg="$msg reader_bad_lines=$rbad"; }
errs=$(cat "$S"/*.err | wc -l)
[ "$errs" = 0 ] || { ok=0; msg="$msg stderr_lines=$errs: $(cat "$S"/*.err | sort | uniq -c | head -5 | tr '\n' ' ')"; }
[ $rc = 0 ] || { ok=0; msg="$msg nonzero_exit"; }
printf '%s %s time=%.1fs reader_integrity_checks=%d switches=%s pages=%s %s\n' "$TAG" "$([ $ok = 1 ] && echo PASS || echo FAIL)" "$(echo "$t1 - $t0" | bc)" "$nint" "$(get switches)" "$(get pages)" "$msg"
[ $ok = 1 ]
