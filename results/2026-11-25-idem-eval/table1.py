#!/usr/bin/env python3
"""IDEM Table 1 from table1-bytes.sh output: per protocol and load, the replica-to-replica
bytes per successful request in every round, their median, and idem / idem-nopr.
Usage: table1.py <bytes.csv> [<bytes.csv> ...]"""
import csv, statistics, sys

rows = {}
for path in sys.argv[1:]:
    for r in csv.DictReader(open(path)):
        rows.setdefault((int(r["clients"]), r["protocol"]), []).append(r)
load = {4: "0.5x", 8: "1x", 32: "4x"}
print(f"{'load':<5} {'clients':>7} {'protocol':<10} {'rounds':>6} {'bytes/ok per round':<44} {'median':>7} {'ok':>6} {'rejected+amb':>12}")
med = {}
for (c, p), rs in sorted(rows.items()):
    per = [float(r["bytes_per_ok"]) for r in rs]
    med[(c, p)] = statistics.median(per)
    rej = statistics.median(int(r["rejected"]) + int(r["ambivalent"]) for r in rs)
    ok = statistics.median(int(r["ok"]) for r in rs)
    print(f"{load.get(c, '?'):<5} {c:>7} {p:<10} {len(rs):>6} {' '.join(f'{x:.0f}' for x in per):<44} {med[(c, p)]:>7.0f} {ok:>6.0f} {rej:>12.0f}")
for c in sorted({c for c, _ in rows}):
    if (c, "idem") in med and (c, "idem-nopr") in med:
        print(f"{load.get(c, '?')}: idem / idem-nopr (medians) = {med[(c, 'idem')] / med[(c, 'idem-nopr')]:.3f}")
