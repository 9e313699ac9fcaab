#!/usr/bin/env bash
# The long real-process nemesis (issue 20 item 7): crates/synod/tests/nemesis.rs with more
# fault cycles per protocol, on 3 and then 5 replicas, every history kept. CI runs the same
# test with one cycle on 3 replicas (~9 s per protocol).
#
#   bash scripts/nemesis.sh                          # every protocol, 3 and 5 replicas
#   ROUNDS=10 NODES="3" bash scripts/nemesis.sh raft # one protocol, 3 replicas only
#   OUT=results/2026-11-26-nemesis bash scripts/nemesis.sh
#
# ROUNDS: fault cycles per run (default 5); PHASE_MS: length of a fault phase (default 500);
# NODES: replica counts (default "3 5"). Each cycle: kill -9 the leader and restart it,
# SIGSTOP/SIGCONT the leader, isolate the leader from every other replica, jump two clocks
# (+1.5 s, -0.8 s), heal. The mutant run (multipaxos-lease-unchecked) must be caught.
#
# OUT/<n>-replicas/ gets each protocol's history (<protocol>.json.gz, the format of
# docs/history-format.md, checkable again with tools/porcupine), its fault log and a line in
# summary.tsv. Exit status 1 if any run failed (a violation, a liveness failure, a missed
# mutant); the per-run logs say which.
set -uo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
PHASE_MS=${PHASE_MS:-500}
NODES=${NODES:-3 5}
OUT=${OUT:-results/$(date -u +%Y-%m-%d)-nemesis}
mkdir -p "$OUT"
if [ $# -gt 0 ]; then
  exact=(--exact)
  filters=()
  for p in "$@"; do filters+=("nemesis_$(echo "$p" | tr -- '-+' '__' | sed 's/_$/_plus/')"); done
else
  exact=()
  filters=("nemesis_")
fi
# Built once; the runs below use this executable (editing the tree meanwhile changes nothing;
# rebuilding target/release/synod does). NEMESIS_TEST_BIN: use this test executable instead.
bin=${NEMESIS_TEST_BIN:-}
[ -n "$bin" ] || bin=$(cargo test --release -p synod --test nemesis --no-run --message-format=json \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "nemesis" and m.get("executable"):
        print(m["executable"])') || exit 2
[ -x "$bin" ] || { echo "could not build the nemesis test"; exit 2; }
status=0
for n in $NODES; do
  dir="$OUT/$n-replicas"
  mkdir -p "$dir"
  : > "$dir/summary.tsv"
  for f in "${filters[@]}"; do
    echo "== $n replicas, $ROUNDS rounds: $f (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    SYNOD_NEMESIS_OUT="$dir" SYNOD_NEMESIS_NODES="$n" SYNOD_NEMESIS_ROUNDS="$ROUNDS" SYNOD_NEMESIS_PHASE_MS="$PHASE_MS" \
      "$bin" --test-threads 1 "${exact[@]}" "$f" >> "$dir/test.log" 2>&1 || status=1
  done
  gzip -9f "$dir"/*.json
  grep -E "^test |test result" "$dir/test.log" | tail -n 40
done
exit $status
