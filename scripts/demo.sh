#!/usr/bin/env bash
# Spillway in action on a fresh Debian 12 machine, as root, with no NIC. It reserves 2 MiB
# hugepages at run time (scripts/hugepages.sh) and falls back to ordinary memory, said aloud,
# when the kernel cannot give them.
#
# Installs what is missing (scripts/install-deps.sh), builds the release binary, then runs
# scripts/demo.py: network namespaces for clients in two zones and four backends (two per zone,
# each decapsulating IPIP/GUE and serving HTTP + a UDP echo that name the backend), `spillway`
# on a DPDK net_tap port in its own namespace with two services (web: TCP/80 + UDP/5353 over
# IPIP with zonal affinity and HTTP health checks; dns: UDP/5353 over GUE). It sends real
# requests through the VIPs from both zones, shows which backend answered each one, takes
# backends down and brings them back, and prints the balancer's counters. About 10 s after the
# build. Everything it creates is removed on exit, also on Ctrl-C.
#
# Usage: scripts/demo.sh [--requests N] [--show-config]
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
    echo "demo: run as root (DPDK, network namespaces and tap devices need it)" >&2
    exit 1
fi

bash scripts/install-deps.sh
bash scripts/hugepages.sh 1024
target="${CARGO_TARGET_DIR:-$PWD/target}"
echo "demo: building spillway (release; the first build takes a few minutes)"
cargo build --release -q -p spillway
export SPILLWAY_BIN="$target/release/spillway"

# Debian's python3 (pytest etc. are not needed here, only the standard library).
py=/usr/bin/python3
[ -x "$py" ] || py=python3

demo_pid=""
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [ -n "$demo_pid" ] && kill -0 "$demo_pid" 2>/dev/null; then
        # demo.py removes what it created on SIGTERM/SIGINT; give it time to do so.
        kill -TERM "$demo_pid" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$demo_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$demo_pid" 2>/dev/null || true
    fi
    wait 2>/dev/null || true
    # Safety net if demo.py itself was killed: namespaces of runs whose owner is gone.
    "$py" -c 'import sys; sys.path.insert(0, "tests/e2e"); import topo; topo.cleanup_stale()' \
        2>/dev/null || true
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# In the background + wait, so that the traps run as soon as a signal arrives.
"$py" scripts/demo.py "$@" &
demo_pid=$!
wait "$demo_pid"
