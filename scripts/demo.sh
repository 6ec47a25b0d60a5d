#!/usr/bin/env bash
# Spillway in action on a fresh Debian 12 machine, as root, with no NIC. It reserves 2 MiB
# hugepages at run time (scripts/hugepages.sh) and falls back to ordinary memory, said aloud,
# when the kernel cannot give them.
#
# Installs what is missing (scripts/install-deps.sh), builds the release binaries, then runs
# the fleet demo, scripts/fleet_demo.py: in network namespaces, a router running BIRD with ECMP
# and BFD, two Spillway instances (DPDK net_tap data port, the kernel interface spl0 for BGP and
# health checks, each with its own BIRD announcing the VIPs Spillway puts in table 100), four
# decapsulating backends and two clients. It shows the router's FIB with one next hop per
# instance, spreads new connections over both, opens long-lived connections, kills one instance
# with SIGKILL and shows every connection carrying on, on the backend it had. About 20 s after
# the build.
#
# `--single` runs the single-instance demo instead (scripts/demo.py: two zones of clients, four
# backends, real HTTP and UDP through the VIPs, backends going down and back; `--requests N`,
# `--show-config`). Everything either creates is removed on exit, also on Ctrl-C.
#
# Usage: scripts/demo.sh [--single [--requests N] [--show-config]]
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
cargo build --release -q -p spillway -p spillway-ctl
export SPILLWAY_BIN="$target/release/spillway"
export SPILLWAYCTL_BIN="$target/release/spillwayctl"

demo=scripts/fleet_demo.py
if [ "${1:-}" = "--single" ]; then
    shift
    demo=scripts/demo.py
fi

# Debian's python3 (pytest etc. are not needed here, only the standard library).
py=/usr/bin/python3
[ -x "$py" ] || py=python3

demo_pid=""
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [ -n "$demo_pid" ] && kill -0 "$demo_pid" 2>/dev/null; then
        # The demo removes what it created on SIGTERM/SIGINT; give it time to do so.
        kill -TERM "$demo_pid" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$demo_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$demo_pid" 2>/dev/null || true
    fi
    wait 2>/dev/null || true
    # Safety net if the demo itself was killed: namespaces of runs whose owner is gone.
    "$py" -c 'import sys; sys.path.insert(0, "tests/e2e"); import topo; topo.cleanup_stale()' \
        2>/dev/null || true
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# In the background + wait, so that the traps run as soon as a signal arrives.
"$py" "$demo" "$@" &
demo_pid=$!
wait "$demo_pid"
