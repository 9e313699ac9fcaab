#!/usr/bin/env python3
"""Per-round throughput ratios against a baseline target (same round, side by side), and
their median over the rounds. Usage: python3 ratios.py"""
import csv, glob, os, statistics
here = os.path.dirname(os.path.abspath(__file__))
for fig, base in (("fig8", "multipaxos"), ("fig9", "multipaxos-batch")):
    per = {}  # (round, target, point) -> tput
    for path in glob.glob(f"{here}/{fig}-round*/*/medians.csv"):
        rnd = path.split(f"{fig}-round")[1].split("/")[0]
        for r in csv.DictReader(open(path)):
            per[(rnd, r["target"], r["point"])] = float(r["throughput_ops_s"])
    rounds = sorted({k[0] for k in per})
    print(f"== {fig}: throughput / {base} (same round), per round and median")
    for t in sorted({k[1] for k in per} - {base}):
        for pt in sorted({k[2] for k in per if k[1] == t}, key=lambda p: int(p.split("=")[1])):
            rs = [per[(r, t, pt)] / per[(r, base, pt)] for r in rounds if (r, t, pt) in per and (r, base, pt) in per]
            print(f"{t:20} {pt:12} " + " ".join(f"{x:.2f}" for x in rs) + f"  median {statistics.median(rs):.2f}")
