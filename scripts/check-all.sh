#!/usr/bin/env bash
# Simulation sweep over every registered protocol: seeded fault schedules with the
# linearizability and agreement checkers. Sized for CI (a few minutes on 2 cores).
# Longer soak for developers: SEEDS=100000 bash scripts/check-all.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${SEEDS:-5000}
SEEDS5=${SEEDS5:-$((SEEDS / 4))}
bin="${CARGO_TARGET_DIR:-target}/release/synod"
[ -x "$bin" ] || cargo build --release -p synod
status=0
for p in $("$bin" protocols | awk '{print $1}'); do
  echo "== $p: $SEEDS seeds, 3 replicas, all faults"
  "$bin" check --protocol "$p" --seeds "$SEEDS" --faults all || status=1
  echo "== $p: $SEEDS5 seeds, 5 replicas, all faults"
  "$bin" check --protocol "$p" --seeds "$SEEDS5" --replicas 5 --start-seed 1000000 --faults all || status=1
done
# Non-default protocol options that change what is replicated or trimmed, and a tiny
# catch-up chunk so that the simulated histories (tens of slots) reach the paths taken by a
# far-behind replica (catch-up in chunks, Behind instead of a promise).
for opts in "holipaxos trim=quorum" "holipaxos trim=snapshot" "multipaxos catchup_chunk=2" "holipaxos catchup_chunk=2" \
  "nezha commutativity=off" "nezha catchup_chunk=2" "nezha speculate=off"; do
  set -- $opts
  p=$1; shift
  params=(); for kv in "$@"; do params+=(--param "$kv"); done
  echo "== $p $*: $SEEDS5 seeds, 3 replicas, all faults"
  "$bin" check --protocol "$p" "${params[@]}" --seeds "$SEEDS5" --start-seed 2000000 --faults all || status=1
done
exit $status
