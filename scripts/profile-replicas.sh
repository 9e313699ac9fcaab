#!/usr/bin/env bash
# Where a replica's CPU goes under load (issue 19, docs/performance.md): starts a 3-replica
# MultiPaxos cluster (fsync per write, data on /dev/shm), drives it with `synod bench`
# (YCSB-A, 500 B values, 10,000 records, 64 clients), and over a 6 s window in the middle of
# the run prints per process the CPU µs per operation (utime+stime from /proc), the syscalls
# and the context switches per operation (`perf stat`); then `perf record`s the leader and one
# follower for 5 s.
#
# Usage: scripts/profile-replicas.sh [OUT]          (OUT default: a fresh /tmp directory)
# Env:   SYNOD_BIN   the binary (default target/release/synod; keep its path free of
#                    /tmp/perf-: perf takes such files for JIT maps)
#        BASE_PORT   first port (default 26800; uses BASE_PORT+1..+203)
#        RECORD=0    skip `perf record`;   CALL_GRAPH  perf's --call-graph (default fp;
#                    `dwarf,32768` gives whole stacks through inlined frames, much larger files)
# Then:  perf report -i OUT/leader.data --no-children --sort comm,dso,symbol --stdio -g none
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(readlink -f "${SYNOD_BIN:-target/release/synod}")
bp=${BASE_PORT:-26800}
out=${1:-$(mktemp -d /tmp/synod-profile-XXXXXX)}
mkdir -p "$out"
shm=/dev/shm; [[ -d $shm ]] || shm=/tmp
data=$(mktemp -d "$shm/synod-profile-XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$data"
}
trap cleanup EXIT

"$bin" local --nodes 3 --fsync always --data-dir "$data/cluster" --base-port "$bp" --log-level warn \
  >"$out/local.log" 2>&1 &
cluster=$!
pids+=("$cluster")
sleep 3
"$bin" bench --target "synod=127.0.0.1:$((bp + 101)),127.0.0.1:$((bp + 102)),127.0.0.1:$((bp + 103))" \
  -c 64 --records 10000 --value-size 500 -d 30s --warmup 2s --no-plots -o "$out/bench" >"$out/bench.log" 2>&1 &
bench=$!
pids+=("$bench")
sleep 9 # the load phase and the warm-up

declare -A pid role
for i in 1 2 3; do pid[$i]=$(pgrep -P "$cluster" -f "node$i.toml" | head -1); done
requests() {
  local total=0 v
  for i in 1 2 3; do
    v=$(curl -s "127.0.0.1:$((bp + 200 + i))/metrics" | awk '/^synod_client_requests_total/ {s+=$2} END {printf "%d", s}')
    total=$((total + v))
  done
  echo "$total"
}
# The highest committed log position among the replicas (slots / entries, not commands).
committed() {
  local best=0 v
  for i in 1 2 3; do
    v=$(curl -s "127.0.0.1:$((bp + 200 + i))/status" | python3 -c 'import json,sys; print(json.load(sys.stdin)["commit_index"])' 2>/dev/null || echo 0)
    ((v > best)) && best=$v
  done
  echo "$best"
}
ticks() { awk '{split($0,a,") "); split(a[2],f," "); print f[12]+f[13]}' "/proc/$1/stat"; }

declare -A t0 t1
r0=$(requests)
c0=$(committed)
for i in 1 2 3; do t0[$i]=$(ticks "${pid[$i]}"); done
b0=$(ticks "$bench")
stats=()
for i in 1 2 3; do
  perf stat -e context-switches,raw_syscalls:sys_enter -p "${pid[$i]}" -o "$out/stat$i" -- sleep 6 &
  stats+=($!)
done
wait "${stats[@]}"
r1=$(requests)
c1=$(committed)
for i in 1 2 3; do t1[$i]=$(ticks "${pid[$i]}"); done
b1=$(ticks "$bench")
ops=$((r1 - r0))
# Roles as of the end of the window (a loaded machine may elect late).
for i in 1 2 3; do
  role[$i]=$(curl -s "127.0.0.1:$((bp + 200 + i))/status" |
    python3 -c 'import json,sys; s=json.load(sys.stdin); print("leader" if s.get("leader")==s.get("id") else "follower")')
done
hz=$(getconf CLK_TCK)
echo "$(date -u '+%F %H:%M UTC') binary $bin; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "operations in the 6 s window: $ops ($((ops / 6))/s); log positions committed: $((c1 - c0))" \
  "($(python3 -c "print('%.1f' % ($ops / max(1, $c1 - $c0)))") operations per position)"
for i in 1 2 3; do
  cs=$(awk '/context-switches/ {gsub(",","",$1); print $1}' "$out/stat$i")
  sc=$(awk '/raw_syscalls/ {gsub(",","",$1); print $1}' "$out/stat$i")
  python3 -c "print('n$i ${role[$i]}: CPU %.1f µs/op, syscalls %.2f/op, context switches %.3f/op' % ((${t1[$i]}-${t0[$i]})*1e6/$hz/$ops, $sc/$ops, $cs/$ops))"
done
python3 -c "print('bench client: CPU %.1f µs/op' % (($b1-$b0)*1e6/$hz/$ops))"

if [[ ${RECORD:-1} == 1 ]]; then
  leader= follower=
  for i in 1 2 3; do
    if [[ ${role[$i]} == leader ]]; then leader=${pid[$i]}; else follower=${pid[$i]}; fi
  done
  recs=()
  for r in leader follower; do
    perf record -F 1999 --call-graph "${CALL_GRAPH:-fp}" -p "${!r}" -o "$out/$r.data" -- sleep 5 >/dev/null 2>&1 &
    recs+=($!)
  done
  wait "${recs[@]}"
  echo "profiles: $out/leader.data $out/follower.data"
fi
