#!/usr/bin/env bash
# pktgen-dpdk, the load tester Spillway's users name, drives Spillway over net_memif,
# unattended: the rate Spillway forwards, then five pktgen kills and reconnects with Spillway
# still forwarding (scripts/bench_pktgen.py; docs/load-testing.md, "pktgen"). Not a CI test:
# pktgen is not a Debian package; build it with scripts/pktgen-build.sh and pass the binary.
#
# Usage: scripts/bench-pktgen.sh PKTGEN_BINARY [--seconds S] [--reconnects N] [--flows N]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
    echo "bench-pktgen: run as root (DPDK, hugepages)" >&2
    exit 1
fi
if [ $# -lt 1 ] || [ ! -x "$1" ]; then
    echo "bench-pktgen: give the path of a pktgen binary (got '${1:-}'). pktgen-dpdk is not a" >&2
    echo "Debian package: build 23.03 with scripts/pktgen-build.sh SRC (docs/load-testing.md)." >&2
    exit 2
fi
bash scripts/hugepages.sh 1536
cargo build --release -q -p spillway
export SPILLWAY_BIN="${CARGO_TARGET_DIR:-$PWD/target}/release/spillway"
exec /usr/bin/python3 scripts/bench_pktgen.py "$@"
