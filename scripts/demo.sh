#!/usr/bin/env bash
# Runs Spillway on a fresh Debian 12 machine, as root, with no NIC and no hugepages: installs
# missing packages, builds the release binary, starts `spillway` inside a private network
# namespace on a DPDK net_tap port, sends Ethernet frames into the tap interface from a kernel
# socket, and shows the live per-worker counters while the worker forwards them back.
# Stops after DEMO_SECONDS (default 10) or on Ctrl-C, and removes everything it created.
#
# Usage: scripts/demo.sh            DEMO_SECONDS=30 DEMO_RATE=5000 scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${DEMO_SECONDS:-10}"
rate="${DEMO_RATE:-2000}"
ns=spw-demo
iface=spwdemo0                      # must match configs/demo.yaml
prefix=spw-demo                     # EAL --file-prefix in configs/demo.yaml
target="${CARGO_TARGET_DIR:-target}"

if [ "$(id -u)" -ne 0 ]; then
    echo "demo: run as root (DPDK, network namespaces and tap devices need it)" >&2
    exit 1
fi

bash scripts/install-deps.sh
echo "demo: building spillway (release)"
cargo build --release -q -p spillway-dataplane

spw_pid=""
traffic_pid=""
cleanup() {
    trap - EXIT INT TERM
    [ -n "$traffic_pid" ] && kill "$traffic_pid" 2>/dev/null || true
    if [ -n "$spw_pid" ] && kill -0 "$spw_pid" 2>/dev/null; then
        kill -TERM "$spw_pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$spw_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$spw_pid" 2>/dev/null || true
    fi
    wait 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "/var/run/dpdk/$prefix"
    echo "demo: cleaned up (namespace $ns removed)"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns del "$ns" 2>/dev/null || true
ip netns add "$ns"
echo "demo: starting spillway in namespace $ns on net_tap0 ($iface)"
ip netns exec "$ns" "$target/release/spillway" --config configs/demo.yaml --stats-interval 1 &
spw_pid=$!

# The tap interface appears once the port has started.
for _ in $(seq 100); do
    ip netns exec "$ns" test -e "/sys/class/net/$iface" && break
    kill -0 "$spw_pid" 2>/dev/null || { echo "demo: spillway exited" >&2; exit 1; }
    sleep 0.1
done

echo "demo: sending $rate frames/s into $iface for ${seconds}s (Ctrl-C stops early)"
ip netns exec "$ns" python3 scripts/tap_traffic.py "$iface" --seconds "$seconds" --rate "$rate" &
traffic_pid=$!
wait "$traffic_pid" || true
traffic_pid=""

kill -TERM "$spw_pid"
wait "$spw_pid" || true
spw_pid=""
