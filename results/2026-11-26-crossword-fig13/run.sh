#!/usr/bin/env bash
# Crossword Fig. 13 (§5.6): YCSB-A Zipfian over 1k keys, all Puts, keys in 5 disjoint ranges,
# one 5-replica group per range, a sharded client routing each key to its group; client sweep.
# Each group is a `synod local` cluster (5 processes); the 5 groups run side by side on this
# machine (25 replica processes). Link emulation per process (see README: what differs).
# Usage (repository root): results/2026-11-26-crossword-fig13/run.sh [PROTOCOL...]
# Env: ROUND (outputs go to r$ROUND/, default 1), SYNOD (binary), CLIENTS (sweep, default 5,15,40), DURATION (default 8s),
#      MBIT (egress per replica process, default 6.25 = the paper's 1 Gbps/32 host NIC split
#      over the host's 5 processes), BASE (first base port, default 22000).
set -u
dir=results/2026-11-26-crossword-fig13
out=$dir/r${ROUND:-1}
mkdir -p "$out"
synod=${SYNOD:-target/release/synod}
clients=${CLIENTS:-5,15,40}
duration=${DURATION:-8s}
mbit=${MBIT:-6.25}
base=${BASE:-22000}
protocols=${*:-multipaxos raft crossword rspaxos craft chain}
# TiDB-like payload sizes scaled by 1/32 like Fig. 6 (see README: an assumption).
sizes=${SIZES:-mix:4@0.5,64@0.25,512@0.15,2048@0.08,8192@0.02}
params_of() {
  case $1 in
    crossword) echo "--param gossip_gap=12800" ;;
    rspaxos) echo "--param gossip_gap=off" ;;
    *) echo "" ;;
  esac
}
for p in $protocols; do
  work=/tmp/chain-fig13/$p
  rm -rf "$work"; mkdir -p "$work"
  pids=()
  for g in 0 1 2 3 4; do
    # shellcheck disable=SC2046
    $synod local --protocol "$p" --nodes 5 --base-port $((base + 10 * g)) --data-dir "$work/g$g" \
      --log-level warn $(params_of "$p") > "$work/g$g.out" 2>&1 &
    pids+=($!)
  done
  for g in 0 1 2 3 4; do
    for _ in $(seq 1 600); do [ -f "$work/g$g/cluster.toml" ] && break; sleep 0.2; done
  done
  target=""
  for g in 0 1 2 3 4; do
    eps=$(seq -s, 1 5 | tr , '\n' | while read -r i; do printf '127.0.0.1:%d,' $((base + 10 * g + 100 + i)); done)
    target="$target${eps%,};"
    $synod fault --cluster "$work/g$g" link --links '*' --delay-ms 4 > /dev/null
    for i in 1 2 3 4 5; do $synod fault --cluster "$work/g$g" egress --mbit "$mbit" $i > /dev/null; done
  done
  target=${target%;}
  echo "$(date -u +%T) $p: $(uptime)" | tee -a $dir/load.txt
  $synod bench --target "$p:synod=$target" -w a --mix update=1.0 --distribution zipfian --records 1000 \
    --value-size "$sizes" --sweep "clients=$clients" -d "$duration" --warmup 2s --op-timeout 10s \
    --no-plots -o "$out/$p" > "$out/bench-$p.txt" 2>&1
  echo "$(date -u +%T) $p done: $(uptime)" | tee -a $dir/load.txt
  for g in 0 1 2 3 4; do  # where each group's leader (chain: head) ended up
    eps=$(for i in 1 2 3 4 5; do printf '127.0.0.1:%d,' $((base + 10 * g + 100 + i)); done)
    echo "group $g"; $synod ctl --endpoints "${eps%,}" status
  done > "$out/status-$p.txt" 2>&1
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  wait
done
