#!/usr/bin/env bash
# Fig. 6 with the fq NIC (per-peer fair queueing, sparse flows first: the default since this
# change) and its FIFO-NIC ablation, ROUNDS interleaved rounds; each job is SCENARIO:TAG:SIZE
# and runs scenarios/SCENARIO-SIZE.toml (five protocols one after another) with sample.sh
# beside it. Usage (from the repository root):
#   results/2026-11-26-crossword-fig6-fq/run.sh ROUNDS crossword-fig6:fig6:128k crossword-fig6:fig6:8b crossword-fig6-fifo:fifo:128k
set -u
dir=results/2026-11-26-crossword-fig6-fq
rounds=${1:-3}; shift || true
for r in $(seq 1 "$rounds"); do
  for job in "$@"; do
    IFS=: read -r scen tag s <<< "$job"
    out=$dir/$tag-$s-r$r
    echo "$(date -u +%T) round $r $scen-$s: $(uptime)" | tee -a $dir/load.txt
    $dir/sample.sh 20000 5 > $dir/sample-$tag-$s-r$r.txt 2>/dev/null &
    sampler=$!
    ${SYNOD:-target/release/synod} scenario run scenarios/$scen-$s.toml --base-port 20000 --out $out > $dir/log-$tag-$s-r$r.txt 2>&1
    kill $sampler
    echo "$(date -u +%T) done $scen-$s r$r: $(uptime)" | tee -a $dir/load.txt
    rm -rf $out/*/memory.* $out/*/*.json $out/*/*.png $out/*/logs
  done
done
