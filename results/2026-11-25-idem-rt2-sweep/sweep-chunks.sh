#!/usr/bin/env bash
# IDEM's overload-mode sweep (reject_threshold=2, all faults) in chunks of seeds, each under a
# time and memory limit, so that a seed on which the linearizability checker's search blows up
# (seeds 789 and 5804 at 3 replicas, see ../2026-11-25-idem-restart) costs only its chunk;
# seeds named in SKIP are left out (and listed in the output).
#   bash sweep-chunks.sh BIN OUTDIR REPLICAS FIRST LAST CHUNK "SKIP..."
set -uo pipefail
bin=$1 out=$2 replicas=$3 first=$4 last=$5 chunk=$6 skip=${7:-}
mkdir -p "$out"
run() { # start count
  local f="$out/r${replicas}-$1-$2.txt"
  ( ulimit -v 3000000; timeout 900 "$bin" check --protocol idem --param reject_threshold=2 --faults all \
      --replicas "$replicas" --start-seed "$1" --seeds "$2" >"$f" 2>&1 )
  echo "seeds $1..$(($1 + $2 - 1)) rc=$? $(grep -m1 '^schedules run:' "$f" || echo 'did not finish')"
}
s=$first
while [ "$s" -le "$last" ]; do
  e=$((s + chunk - 1)); [ "$e" -gt "$last" ] && e=$last
  # split the chunk around skipped seeds
  a=$s
  for k in $skip; do
    if [ "$k" -ge "$a" ] && [ "$k" -le "$e" ]; then
      [ "$k" -gt "$a" ] && run "$a" $((k - a))
      echo "seed $k skipped"
      a=$((k + 1))
    fi
  done
  [ "$a" -le "$e" ] && run "$a" $((e - a + 1))
  s=$((e + 1))
done
