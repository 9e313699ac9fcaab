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
  # Per-protocol seed scale (percent) for the slower ones: rspaxos runs ~36 schedules/s
  # (5000 seeds would take ~140 s on 2 cores; its stalls under the fault phase's crashes
  # lengthen every schedule).
  case "$p" in
    rspaxos) scale=50 ;;
    # fast-paxos: ~32 schedules/s under load (collisions end in recoveries and new rounds).
    fast-paxos) scale=50 ;;
    # craft: ~31 schedules/s with 3 replicas, ~16/s with 5 under load (fills, gathers and
    # snapshot transfers on every failover).
    craft) scale=50 ;;
    *) scale=100 ;;
  esac
  s3=$((SEEDS * scale / 100)); s5=$((SEEDS5 * scale / 100))
  echo "== $p: $s3 seeds, 3 replicas, all faults"
  "$bin" check --protocol "$p" --seeds "$s3" --faults all || status=1
  echo "== $p: $s5 seeds, 5 replicas, all faults"
  "$bin" check --protocol "$p" --seeds "$s5" --replicas 5 --start-seed 1000000 --faults all || status=1
done
# Non-default protocol options that change what is replicated or trimmed, and a tiny
# catch-up chunk so that the simulated histories (tens of slots) reach the paths taken by a
# far-behind replica (catch-up in chunks, Behind instead of a promise).
# crossword config=rotate: every (c, q) of the boundary mixed in one schedule (the default
# chooser picks the full copy for the simulator's small values). idem-nopr with RT=2 moves
# the implicit-GC window (n x RT slots) close behind the log head, so lagging replicas take
# the snapshot path; paxos-lbr with RT=2 rejects at its leader; idem with RT=2 is the
# overload mode (the simulator's clients exceed the threshold: rejections, definitive ones,
# retransmissions of rejected ids, forwards; the restart hazard of seed 419); raft-admit with
# RT=2 rejects in front of Raft (crate::admit). read_lease=on: leaders answer
# Gets from their lease (readers=1: one client only reads, so a deposed leader's stale
# answer would be seen; it is `synod check --readers 1`, not a protocol option). chain
# snapshot_every=5: rejoining nodes get state transfers (snapshot + suffix), and a reader
# exposes a deposed tail answering from its lease.
# epaxos barrier_every=3: session barriers are on by default (one per 256 commands of a
# command leader), which the simulated histories never reach; 3 puts several in every
# schedule (each depends on every instance before it: the incremental executor's barrier
# edges and waiting chains).
for opts in "holipaxos trim=quorum" "holipaxos trim=snapshot" "multipaxos catchup_chunk=2" "holipaxos catchup_chunk=2" \
  "mencius catchup_chunk=2" "epaxos reply=commit" "epaxos barrier_every=3" "crossword config=rotate" "crossword config=1" \
  "crossword assign=unbalanced config=rotate" \
  "idem-nopr reject_threshold=2 compact_every=10" "paxos-lbr reject_threshold=2" "idem reject_threshold=2" "raft-admit reject_threshold=2" \
  "nezha commutativity=off" "nezha catchup_chunk=2" "nezha speculate=off" \
  "multipaxos read_lease=on readers=1" "crossword read_lease=on config=rotate readers=1" "rspaxos read_lease=on readers=1" \
  "raft+ read_lease=on readers=1" "craft read_lease=on readers=1" "chain snapshot_every=5 readers=1"; do
  set -- $opts
  p=$1; shift
  params=()
  for kv in "$@"; do
    case "$kv" in
      readers=*) params+=(--readers "${kv#readers=}") ;;
      *) params+=(--param "$kv") ;;
    esac
  done
  echo "== $p $*: $SEEDS5 seeds, 3 replicas, all faults"
  "$bin" check --protocol "$p" "${params[@]}" --seeds "$SEEDS5" --start-seed 2000000 --faults all || status=1
done
# Nezha with clocks that jump (±200 ms, backwards too) and change drift during the run, and
# its ablation options (quorum checks at the leader, release on arrival).
echo "== nezha: $SEEDS5 seeds, 3 replicas, all faults + clock-jump"
"$bin" check --protocol nezha --seeds "$SEEDS5" --start-seed 3000000 --faults all,clock-jump || status=1
for opts in "offload=false" "dom=false"; do
  echo "== nezha $opts: $((SEEDS5 / 2)) seeds, 3 replicas, all faults"
  "$bin" check --protocol nezha --param "$opts" --seeds "$((SEEDS5 / 2))" --start-seed 2000000 --faults all || status=1
done
# Long, rich histories (lists, INCRBY, multi-key operations, scans, MULTI/EXEC with WATCH;
# 20 clients x 500 operations = 10^4 per schedule) with every fault, storage faults included.
for p in multipaxos raft; do
  echo "== $p: rich workload, 2 seeds of 10^4 operations, all faults"
  "$bin" check --protocol "$p" --workload rich --clients 20 --ops 500 --keys 64 --seeds 2 --start-seed 4000000 --faults all || status=1
done
# EPaxos's basic fast quorum (2F) differs from the default optimized one only at 5 replicas.
echo "== epaxos fast_quorum=basic: $((SEEDS5 / 4)) seeds, 5 replicas, all faults"
"$bin" check --protocol epaxos --param fast_quorum=basic --seeds "$((SEEDS5 / 4))" --replicas 5 --start-seed 4000000 --faults all || status=1
exit $status
