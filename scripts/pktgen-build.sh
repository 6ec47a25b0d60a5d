#!/usr/bin/env bash
# Builds pktgen-dpdk 23.03 against Debian 12's DPDK 22.11 (docs/load-testing.md, "pktgen").
#
# pktgen is not a Debian package and Spillway does not ship its code: get its source yourself
# (`git clone https://github.com/pktgen/Pktgen-DPDK; git -C Pktgen-DPDK checkout pktgen-23.03.0`)
# and pass the directory. This script installs the build tools (meson, ninja, libpcap, libnuma),
# makes the two local adjustments 23.03 needs against DPDK 22.11, and builds. It prints the
# path of the binary, for scripts/bench-pktgen.sh.
#
# The adjustments (idempotent; the script says whether each was needed):
#   1. app/pktgen-port-cfg.c: rte_eth_dev_set_mtu() returning -ENOTSUP (net_memif, net_ring and
#      other virtual devices have no MTU to set) is not fatal.
#   2. lib/lua/meson.build: the Lua library is built from a file that includes DPDK headers
#      even without Lua support, so it needs the `dpdk` dependency.
#
# Usage: scripts/pktgen-build.sh PKTGEN_SOURCE_DIR
set -euo pipefail

src="${1:-}"
if [ -z "$src" ] || [ ! -f "$src/meson.build" ] || [ ! -f "$src/app/pktgen-port-cfg.c" ]; then
    echo "usage: scripts/pktgen-build.sh PKTGEN_SOURCE_DIR (a checkout of pktgen-23.03.0)" >&2
    exit 2
fi
version=$(cat "$src/VERSION" 2>/dev/null || echo unknown)
case "$version" in
    23.03*) ;;
    *) echo "pktgen-build: $src is pktgen $version; these adjustments are for 23.03.x" >&2 ;;
esac

need=()
for p in meson ninja-build pkg-config libpcap-dev libnuma-dev libdpdk-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if ((${#need[@]})); then
    echo "pktgen-build: installing ${need[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
fi

port_cfg="$src/app/pktgen-port-cfg.c"
if grep -q 'rte_eth_dev_set_mtu(pid, pktgen.eth_mtu)) < 0)$' "$port_cfg"; then
    sed -i 's/rte_eth_dev_set_mtu(pid, pktgen.eth_mtu)) < 0)$/rte_eth_dev_set_mtu(pid, pktgen.eth_mtu)) < 0 \&\& ret != -ENOTSUP)/' "$port_cfg"
    echo "pktgen-build: adjusted $port_cfg: -ENOTSUP from rte_eth_dev_set_mtu is not fatal"
else
    echo "pktgen-build: $port_cfg already tolerates -ENOTSUP (or differs): left as is"
fi
lua_meson="$src/lib/lua/meson.build"
if grep -q "^	liblua = library('lua', sources)$" "$lua_meson"; then
    sed -i "s/^	liblua = library('lua', sources)$/	liblua = library('lua', sources, dependencies: [dpdk])/" "$lua_meson"
    echo "pktgen-build: adjusted $lua_meson: the Lua library depends on dpdk"
else
    echo "pktgen-build: $lua_meson already has its dependency (or differs): left as is"
fi

cd "$src"
if [ ! -d build ]; then
    meson setup build --buildtype=release -Denable_lua=false -Denable_gui=false
fi
ninja -C build
bin="$PWD/build/app/pktgen"
[ -x "$bin" ] || { echo "pktgen-build: no binary at $bin" >&2; exit 1; }
echo "pktgen-build: built $bin"
