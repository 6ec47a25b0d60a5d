#!/usr/bin/env bash
# The whole-pipeline benchmark and its chart (docs/performance.md).
#   scripts/bench-pipeline.sh [--quick] [--seconds S]
# Writes target/bench/pipeline.json and docs/img/performance.png. Run as root on an otherwise
# idle machine: the generator and the worker each need a core of their own.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p target/bench
cargo bench -p spillway-gen --bench pipeline -- --json target/bench/pipeline.json "$@"
/usr/bin/python3 scripts/perf_chart.py target/bench/pipeline.json docs/img/performance.png
