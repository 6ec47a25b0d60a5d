#!/usr/bin/env python3
"""Compares pipeline benchmark runs on ordinary memory and on hugepages (scripts/bench-pipeline.sh
--hugepages-ab): for each scenario, the median Mpps of each side, its share of the io-forward
baseline of the same run, and the ratio hugepages / ordinary memory.

Usage: hugepages_ab.py RUN.json...   (each file: one pipeline run, JSON lines)
"""
import json
import statistics
import sys


def load(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    memory = next(r for r in rows if r["name"] == "memory")
    return memory["hugepages"], {r["name"]: r for r in rows if r.get("mpps")}


def main(paths):
    runs = {False: [], True: []}
    for p in paths:
        huge, rows = load(p)
        runs[huge].append(rows)
    if not runs[False] or not runs[True]:
        sys.exit("hugepages_ab: need at least one run on each kind of memory")
    names = [n for n in runs[False][0] if all(n in r for side in runs.values() for r in side)]
    med = lambda side, n, key: statistics.median(r[n][key] for r in runs[side])  # noqa: E731
    print(f"{len(runs[False])} run(s) on ordinary memory (--no-huge), {len(runs[True])} on 2 MiB hugepages; medians")
    print(f"{'scenario':24} {'no-huge Mpps':>12} {'huge Mpps':>10} {'huge/no-huge':>13} {'% io_fwd (no-huge)':>19} {'% io_fwd (huge)':>16}")
    for n in names:
        a, b = med(False, n, "mpps"), med(True, n, "mpps")
        share = lambda side: statistics.median(  # noqa: E731
            r[n]["mpps"] / r["io_forward"]["mpps"] * 100 for r in runs[side])
        print(f"{n:24} {a:12.2f} {b:10.2f} {b / a:12.2f}x {share(False):18.1f}% {share(True):15.1f}%")


if __name__ == "__main__":
    main(sys.argv[1:])
