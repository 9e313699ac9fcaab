#!/bin/bash
# Fig. 8/9 after the executor fix: 3 rounds, alternating Fig. 8 and Fig. 9, one binary copied
# out of the build tree (so a rebuild does not change it mid-run). Usage: run.sh BIN
set -u
BIN=$1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
for r in 1 2 3; do
  for fig in 8 9; do
    if [ $fig = 8 ]; then f=scenarios/epaxos-fig8-latency-throughput.toml; port=25000; else f=scenarios/epaxos-fig9-batching-5replicas.toml; port=25400; fi
    echo "== fig$fig round $r start $(date -u +%T) $(uptime)" | tee -a "$here/uptime.txt"
    timeout 1500 "$BIN" scenario run "$f" --base-port $port --out "$here/fig$fig-round$r" > "$here/fig$fig-round$r.log" 2>&1
    echo "== fig$fig round $r end rc=$? $(date -u +%T) $(uptime)" | tee -a "$here/uptime.txt"
  done
done
