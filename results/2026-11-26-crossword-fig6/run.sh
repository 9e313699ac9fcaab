#!/usr/bin/env bash
# Fig. 6 with per-replica egress shaping: ROUNDS interleaved rounds of the three value sizes
# (each scenario runs its protocols one after another), sample.sh beside every run.
# Usage (from the repository root): results/2026-11-26-crossword-fig6/run.sh ROUNDS [SIZES...]
set -u
dir=results/2026-11-26-crossword-fig6
rounds=${1:-3}; shift || true
sizes=${*:-8b 128k mix}
for r in $(seq 1 "$rounds"); do
  for s in $sizes; do
    out=$dir/fig6-$s-r$r
    echo "$(date -u +%T) round $r $s: $(uptime)" | tee -a $dir/load.txt
    $dir/sample.sh 20000 5 > $dir/sample-$s-r$r.txt 2>/dev/null &
    sampler=$!
    ${SYNOD:-target/release/synod} scenario run scenarios/crossword-fig6-$s.toml --base-port 20000 --out $out > $dir/log-$s-r$r.txt 2>&1
    kill $sampler
    echo "$(date -u +%T) done $s r$r: $(uptime)" | tee -a $dir/load.txt
    rm -rf $out/*/memory.* $out/*/*.json $out/*/*.png $out/*/logs
  done
done
