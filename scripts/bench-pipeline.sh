#!/usr/bin/env bash
# The whole-pipeline benchmark and its chart (docs/performance.md).
#   scripts/bench-pipeline.sh [--quick] [--seconds S] [--hugepages required|preferred|off]
#   scripts/bench-pipeline.sh --hugepages-ab [N] [--quick] [--seconds S]
# Writes target/bench/pipeline.json, target/bench/slices.json (the established 1M-flow share in
# interleaved slices) and docs/img/performance.png. Run as root on an otherwise
# idle machine: the generator and the worker each need a core of their own. DPDK runs on
# hugepages when enough are free (this script reserves them: scripts/hugepages.sh), else on
# ordinary memory; the output's first line says which.
# --hugepages-ab runs the benchmark N times (default 2) on each kind of memory, alternating
# (no-huge, hugepages, no-huge, ...), and prints the medians side by side
# (target/bench/ab-*.json; scripts/hugepages_ab.py).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p target/bench
bash scripts/hugepages.sh 1024
if [ "${1:-}" = "--hugepages-ab" ]; then
    shift
    n=2
    if [[ "${1:-}" =~ ^[0-9]+$ ]]; then n=$1; shift; fi
    rm -f target/bench/ab-*.json
    for i in $(seq "$n"); do
        for policy in off required; do
            cargo bench -q -p spillway-gen --bench pipeline -- \
                --json "$PWD/target/bench/ab-$policy-$i.json" --hugepages "$policy" "$@"
        done
    done
    /usr/bin/python3 scripts/hugepages_ab.py target/bench/ab-*.json
    exit 0
fi
cargo bench -p spillway-gen --bench pipeline -- --json "$PWD/target/bench/pipeline.json" "$@"
# The established 1M-flow share again, in interleaved half-second slices against the baseline
# on the same setup and frames: the steadiest ratio this host gives (docs/performance.md).
if [ "${1:-}" != "--quick" ]; then
    cargo bench -q -p spillway-gen --bench pipeline -- --only established_ipip_1m --slices 8 \
        --json "$PWD/target/bench/slices.json" | grep -E '^(slices|pair)'
fi
# The chart needs matplotlib; without it the script says so, and the results stay in the JSON.
/usr/bin/python3 scripts/perf_chart.py target/bench/pipeline.json docs/img/performance.png ||
    echo "bench-pipeline.sh: no chart drawn; results in target/bench/pipeline.json" >&2
