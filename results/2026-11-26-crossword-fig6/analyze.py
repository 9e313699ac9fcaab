#!/usr/bin/env python3
"""Medians over rounds of each variant's mean throughput in the windows from 5 s on (the
shaping starts at 0 s; the first window is the transition), per value size, the ratios to
MultiPaxos, and per run the leader's egress (Mbit/s, from sample.sh) and the busiest
replica's CPU share. Usage: analyze.py DIR [PREFIX=fig6]"""
import csv, glob, os, re, statistics, sys

d = sys.argv[1]
prefix = sys.argv[2] if len(sys.argv) > 2 else "fig6"
runs = {}
for w in sorted(glob.glob(f"{d}/{prefix}-*-r*/*/windows.csv")):
    run, variant = w.split("/")[-3], w.split("/")[-2]
    size, rnd = re.match(rf"{prefix}-(.+)-r(\d+)", run).groups()
    rows = [r for r in csv.DictReader(open(w)) if float(r["window_start_s"]) >= 5.0]
    if rows:
        runs.setdefault(size, {}).setdefault(variant, []).append(statistics.mean(float(r["throughput_ops_s"]) for r in rows))
for size, variants in runs.items():
    base = [v for v in variants if v.startswith("multipaxos")]
    mp = statistics.median(variants[base[0]]) if base else None
    print(f"== {size}")
    for v, xs in variants.items():
        med = statistics.median(xs)
        ratio = f" {med / mp:.2f}x MultiPaxos" if mp else ""
        print(f"  {v:45s} median {med:7.0f} ops/s of {[round(x) for x in xs]}{ratio}")
for f in sorted(glob.glob(f"{d}/sample-*.txt")):
    egress, cpu = [], []
    for line in open(f):
        p = line.split()
        if len(p) >= 5 and p[1] == "net":
            egress.append(float(p[4].split("=")[1]))
        elif len(p) >= 5 and p[1] == "cpu" and "crossword-" in line:
            cpu.append(int(p[3].rstrip("%")))
    top = sorted(egress)[-10:]
    print(f"{os.path.basename(f)}: highest node egress samples {top} Mbit/s; busiest own process {max(cpu) if cpu else '-'}% of a core")
