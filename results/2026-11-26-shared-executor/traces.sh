#!/bin/sh
# usage: traces.sh BINARY OUTDIR
B=$1; O=$2; mkdir -p $O
for p in multipaxos raft epaxos nezha idem chain crossword; do
  $B check --protocol $p --seeds 300 --faults all 2>&1 | "$(dirname "$0")"/norm.sh > $O/$p.sum
  for s in 0 1 2 7 42 123 299; do
    $B check --protocol $p --seed $s --faults all --trace 2>&1 | "$(dirname "$0")"/norm.sh | md5sum | sed "s/-/$p seed $s/"
  done
done > $O/traces.md5
