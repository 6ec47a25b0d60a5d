#!/usr/bin/env bash
# Installs the Debian 12 packages Spillway needs to build, test and run its demo, skipping what
# is already installed (apt-get update only runs when something is missing). Needs root.
# The Rust toolchain itself (rustup, pinned by rust-toolchain.toml) is expected to be present.
set -euo pipefail

packages=(
    libdpdk-dev dpdk          # DPDK 22.11 headers, libraries and PMDs (net_tap, net_null, ...)
    dpdk-dev                  # dpdk-testpmd: the memif peer of tests/e2e/test_memif.py
    clang libclang-dev        # bindgen (dpdk-sys) parses the DPDK headers with libclang
    gcc libc6-dev pkg-config  # cc compiles the static-inline wrappers; pkg-config finds libdpdk
    iproute2 procps           # network namespaces (ip netns), kill
    nftables                  # tests/e2e/test_soak.py: a backend's health port refused, then not
    python3 python3-pytest    # traffic scripts and the end-to-end tests
    python3-venv              # the tests' virtualenv (below): aioquic is not packaged by Debian
    python3-cryptography      # tests/e2e/quiclb.py: the tests' own QUIC-LB connection IDs (AES)
    python3-pytest-xdist      # pytest -n 2: the end-to-end tests split over processes by hand
    python3-nacl              # tests/e2e/syncwire.py: the tests' own fleet sync peer (XChaCha20-Poly1305)
    libxxhash0                # shared/tests/maglev_reference.py hashes with the C xxHash
    python3-prometheus-client # the e2e tests parse /metrics with the reference parser
    curl iputils-ping         # clients in the end-to-end tests and the demo
    tcpdump                   # the e2e tests read capture files with tcpdump -r
    dpkg-dev mmdebstrap       # the Debian package: cargo-deb's dependency scan, a throwaway root
    bird2                     # tests/e2e/test_fleet.py: BGP between a router and the instances
)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if ((${#missing[@]})); then
    echo "install-deps: installing ${missing[*]}"
    if [ "$(id -u)" -ne 0 ]; then
        echo "install-deps: need root to install packages" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The tests' QUIC peers (scripts/quic_peer.py) run on aioquic, from PyPI, in a virtualenv of
# their own so that Debian's python3 stays as packaged. 1.2.0: later versions need a pylsqpack
# newer than the package index offers here.
venv="${SPILLWAY_TEST_VENV:-/opt/spillway-test-venv}"
if ! "$venv/bin/python" -c 'import aioquic' 2>/dev/null; then
    echo "install-deps: aioquic into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check aioquic==1.2.0
fi

if ! command -v cargo >/dev/null; then
    echo "install-deps: cargo not found: install Rust (rustup) first" >&2
    exit 1
fi
