#!/usr/bin/env python3
"""Medians over rounds of a sweep scenario run several times (one --out per round).

Usage: summarize.py DIR [DIR ...]   (each DIR one run of the scenario; runs.csv files below)

Per variant and sweep point (class `all`): rounds, goodput (ok/s), ok p50, rejects/s, reject
p50 (both kinds), definitive and ambivalent reject p50 and counts, and the ratio reject p50 /
ok p50 (per round, then the median). Then per variant the saturation ratio p50(point) /
p50(lowest point), per round and its median."""
import csv, glob, os, statistics, sys
from collections import defaultdict

rows = defaultdict(list)  # (target, clients) -> [row per round]
for d in sys.argv[1:]:
    for path in sorted(glob.glob(os.path.join(d, "**", "runs.csv"), recursive=True)):
        for r in csv.DictReader(open(path)):
            if r["class"] == "all":
                r["_run"] = d
                rows[(r["target"], int(r["point"].split("=")[1]))].append(r)

def f(r, k):
    v = r.get(k, "")
    return float(v) if v not in ("", None) else 0.0

def med(xs):
    xs = list(xs)
    return statistics.median(xs) if xs else float("nan")

print(f"{'variant':<22} {'clients':>7} {'rnds':>4} {'goodput':>8} {'ok p50':>7} {'rej/s':>6} "
      f"{'rej p50':>8} {'def p50':>8} {'amb p50':>8} {'def n':>6} {'amb n':>6} {'rej/ok':>7}")
for (t, c), rs in sorted(rows.items()):
    ratios = [f(r, "reject_p50_ms") / f(r, "p50_ms") for r in rs if f(r, "p50_ms") > 0 and f(r, "reject_ops_s") > 0]
    print(f"{t:<22} {c:>7} {len(rs):>4} {med(f(r,'throughput_ops_s') for r in rs):>8.0f} "
          f"{med(f(r,'p50_ms') for r in rs):>7.2f} {med(f(r,'reject_ops_s') for r in rs):>6.0f} "
          f"{med(f(r,'reject_p50_ms') for r in rs):>8.2f} "
          f"{med(f(r,'definitive_reject_p50_ms') for r in rs):>8.2f} "
          f"{med(f(r,'ambivalent_reject_p50_ms') for r in rs):>8.2f} "
          f"{med(f(r,'rejected') for r in rs):>6.0f} {med(f(r,'ambivalent') for r in rs):>6.0f} "
          f"{med(ratios):>7.2f}")

print("\nsaturation: p50(point) / p50(lowest point), per round (same run), median")
targets = sorted({t for t, _ in rows})
for t in targets:
    points = sorted(c for tt, c in rows if tt == t)
    base = {r["_run"]: f(r, "p50_ms") for r in rows[(t, points[0])]}
    for c in points[1:]:
        per = [f(r, "p50_ms") / base[r["_run"]] for r in rows[(t, c)] if base.get(r["_run"], 0) > 0]
        print(f"{t:<22} {c:>3} vs {points[0]:<3} " + " ".join(f"{x:.2f}" for x in per) + f"  median {med(per):.2f}")
