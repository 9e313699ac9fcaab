#!/usr/bin/env python3
"""Summarize a sweep scenario's output: one line per variant and sweep point (medians over
rounds): goodput (successful ops/s), p50/p99 of successes, rejects (definitive + ambivalent)
per second and their p50/p99, reject share. Usage: summarize.py <scenario out dir>"""
import csv, glob, os, statistics, sys

root = sys.argv[1]
rows = {}
for path in sorted(glob.glob(os.path.join(root, "**", "runs.csv"), recursive=True)):
    for r in csv.DictReader(open(path)):
        if r["class"] != "all":
            continue
        rows.setdefault((r["target"], r["point"]), []).append(r)

def med(rs, k):
    return statistics.median(float(r[k]) for r in rs)

print(f"{'variant':<28} {'point':<12} {'rounds':>6} {'goodput':>9} {'p50 ms':>8} {'p99 ms':>8} "
      f"{'rej/s':>8} {'rej p50':>8} {'rej p99':>8} {'rej %':>6} {'errors':>6}")
for (t, p), rs in sorted(rows.items(), key=lambda kv: (kv[0][0], int(kv[0][1].split('=')[1]))):
    good = med(rs, "throughput_ops_s")
    rej = med(rs, "reject_ops_s") if "reject_ops_s" in rs[0] else 0.0
    share = 100 * rej / (good + rej) if good + rej > 0 else 0
    print(f"{t:<28} {p:<12} {len(rs):>6} {good:>9.0f} {med(rs,'p50_ms'):>8.3f} {med(rs,'p99_ms'):>8.3f} "
          f"{rej:>8.0f} {med(rs,'reject_p50_ms') if rej else 0:>8.3f} {med(rs,'reject_p99_ms') if rej else 0:>8.3f} "
          f"{share:>6.1f} {med(rs,'errors'):>6.0f}")
