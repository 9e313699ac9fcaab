#!/usr/bin/env bash
# Fig. 6 with the fq NIC (per-peer fair queueing, sparse flows first; the default since this
# change): ROUNDS interleaved rounds of the given value sizes (each scenario runs its five
# protocols one after another), sample.sh beside every run. SCEN selects the scenario prefix
# (default crossword-fig6; the qdisc comparison uses crossword-fig6-qdisc).
# Usage (from the repository root): results/2026-11-26-crossword-fig6-fq/run.sh ROUNDS [SIZES...]
set -u
dir=results/2026-11-26-crossword-fig6-fq
scen=${SCEN:-crossword-fig6}
tag=${TAG:-fig6}
rounds=${1:-3}; shift || true
sizes=${*:-8b 128k}
for r in $(seq 1 "$rounds"); do
  for s in $sizes; do
    out=$dir/$tag-$s-r$r
    echo "$(date -u +%T) round $r $scen $s: $(uptime)" | tee -a $dir/load.txt
    $dir/sample.sh 20000 5 > $dir/sample-$tag-$s-r$r.txt 2>/dev/null &
    sampler=$!
    ${SYNOD:-target/release/synod} scenario run scenarios/$scen-$s.toml --base-port 20000 --out $out > $dir/log-$tag-$s-r$r.txt 2>&1
    kill $sampler
    echo "$(date -u +%T) done $scen $s r$r: $(uptime)" | tee -a $dir/load.txt
    rm -rf $out/*/memory.* $out/*/*.json $out/*/*.png $out/*/logs
  done
done
