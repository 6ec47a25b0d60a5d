#!/usr/bin/env python3
"""Draw docs/img/performance.png from the pipeline benchmark's JSON lines.

    scripts/perf_chart.py target/bench/pipeline.json docs/img/performance.png

The left panel: Mpps of one worker per scenario, with the io-forward baseline of the same
run as the first bar and the peers' published per-core figures (Katran, Maglev, DPVS; other
hardware, see docs/performance.md) as dashed lines. The right panel: the replay-source
scaling run, one worker vs two.
"""

import json
import sys

try:
    import matplotlib
except ImportError:
    sys.exit(
        "perf_chart.py: matplotlib is not installed (Debian: apt-get install -y "
        "python3-matplotlib); the chart was not drawn, the benchmark's results are in the JSON "
        "file given"
    )

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PEERS = [("Katran (XDP)", 5.2), ("DPVS", 2.9), ("Maglev (2016)", 2.7)]
LABELS = {
    "io_forward": "io-forward\nbaseline",
    "established_ipip_1k": "established\nIPIP 1K",
    "established_ipip_1m": "established\nIPIP 1M",
    "established_gue_1k": "established\nGUE 1K",
    "established_ipv6_1k": "established\nIPv6 1K",
    "syn_100": "100% SYN",
    "mix": "mix\n1M flows",
    "syn_flood_guarded": "SYN flood\n(guarded)",
    "floor_touch": "floor:\ntouch only",
    "floor_table_1m": "floor: touch\n+ 1M table",
    "floor_two_lines_1m": "floor: touch\n+ 1M table,\n2 lines",
    "io_forward_end": "io-forward\nagain, last",
}
# Not Spillway: the bench's floor loops (the least any balancer does), drawn in light grey.
FLOORS = {"floor_touch", "floor_table_1m", "floor_two_lines_1m"}


def color(name: str) -> str:
    """Grey for the baselines, light grey for the floors, blue for Spillway."""
    if name.startswith("io_forward"):
        return "#9e9e9e"
    return "#d9d9d9" if name in FLOORS else "#1f77b4"


def main(src: str, dst: str) -> None:
    rows = [json.loads(line) for line in open(src) if line.strip()]
    bars = [r for r in rows if r["name"] in LABELS]
    scaling = next((r for r in rows if r["name"] == "scaling_replay"), None)

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [4, 1]})
    names = [LABELS[r["name"]] for r in bars]
    values = [r["mpps"] for r in bars]
    colors = [color(r["name"]) for r in bars]
    ax.bar(names, values, color=colors)
    for i, r in enumerate(bars):
        ratio = r["mpps"] / r["baseline_mpps"] * 100 if r["baseline_mpps"] else 0
        label = f"{r['mpps']:.1f}" + ("" if r["name"] == "io_forward" else f"\n{ratio:.0f}%")
        ax.text(i, r["mpps"], label, ha="center", va="bottom", fontsize=8)
    for name, mpps in PEERS:
        ax.axhline(mpps, linestyle="--", linewidth=1, color="#d62728")
        ax.text(len(bars) - 0.5, mpps, f" {name} {mpps}", va="top" if mpps < 2.8 else "bottom",
                ha="right", fontsize=8,
                color="#d62728")
    ax.set_ylabel("Mpps, one worker (64-byte frames)")
    ax.set_title("Generator lcore -> net_ring -> Spillway worker -> net_null (same run)")
    ax.tick_params(axis="x", labelsize=8)
    ax.set_ylim(0, max(values + [p for _, p in PEERS]) * 1.2)

    if scaling:
        one, two = scaling["baseline_mpps"], scaling["mpps"]
        ax2.bar(["1 worker", "2 workers"], [one, two], color=["#1f77b4", "#2ca02c"])
        ax2.text(1, two, f"{two:.1f}\n{two / one:.2f}x", ha="center", va="bottom", fontsize=8)
        ax2.text(0, one, f"{one:.1f}", ha="center", va="bottom", fontsize=8)
        ax2.set_ylim(0, two * 1.25)
        ax2.set_title("Replay source, 1M flows/worker")
        ax2.set_ylabel("Mpps, total")
    fig.tight_layout()
    fig.savefig(dst, dpi=110)
    print(f"wrote {dst}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: perf_chart.py PIPELINE_JSON OUTPUT_PNG")
    main(sys.argv[1], sys.argv[2])
