#!/usr/bin/env bash
# The Debian package: builds it with cargo-deb and, with --test, installs it into a throwaway
# Debian 12 root (mmdebstrap) and runs it from there.
#   scripts/package.sh [--test]          (root for --test; writes target/debian/spillway_*.deb)
#   scripts/package.sh --test-built      (the test alone, of the .deb a run without --test made)
#
# The test proves the package is complete on a clean system: apt resolves its dependencies
# (the DPDK 22.11 runtime libraries) from Debian alone; `spillway --version`, `spillwayctl
# --version` and `spillway check` run from the installed paths; and the daemon itself starts
# from the package's own files on a net_null port, which needs the ring mempool handler that
# DPDK loads as a plugin (a dependency no linker sees), then stops cleanly. The root is removed
# on exit, also on failure.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_DEB_VERSION=3.8.0
say() { printf 'package: %s\n' "$*"; }

build() {
    if ! cargo deb --version 2>/dev/null | grep -qx "cargo-deb $CARGO_DEB_VERSION"; then
        say "installing cargo-deb $CARGO_DEB_VERSION (crates.io)"
        cargo install --locked --quiet cargo-deb --version "$CARGO_DEB_VERSION"
    fi
    say "building the release binaries"
    cargo build --release --quiet -p spillway -p spillway-ctl -p spillway-gen
    rm -f target/debian/spillway_*.deb
    cargo deb -p spillway --no-build --quiet -o target/debian/
}
[ "${1:-}" = "--test-built" ] || build
deb=$(ls target/debian/spillway_*.deb)
say "built $deb ($(du -h "$deb" | cut -f1))"
dpkg-deb --field "$deb" Depends

[ "${1:-}" = "--test" ] || [ "${1:-}" = "--test-built" ] || exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "package: --test needs root (mmdebstrap, chroot, mounts)" >&2
    exit 1
fi

root=$(mktemp -d /tmp/spw-pkgroot.XXXXXX)
cleanup() {
    for m in dev sys proc; do umount -R "$root/$m" 2>/dev/null || true; done
    rm -rf --one-file-system "$root"
}
trap cleanup EXIT

say "installing it into a fresh Debian 12 root ($root)"
# minbase: essential packages and apt only. In a hook (the chroot still has apt's package
# lists), apt installs the .deb and resolves its dependencies from the Debian archive.
# librte-net-null23 gives the smoke run below a port that needs no kernel.
mmdebstrap --quiet --variant=minbase \
    --customize-hook="copy-in $deb /tmp" \
    --customize-hook='chroot "$1" apt-get install -y -qq --no-install-recommends /tmp/'"$(basename "$deb")"' librte-net-null23' \
    bookworm "$root" http://deb.debian.org/debian
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
in_root() { chroot "$root" "$@"; }

say "installed files"
in_root dpkg -L spillway | grep -E '^/(usr/bin|etc|usr/lib/systemd)/' | sed 's/^/  /'
in_root test -x /usr/bin/spillway
in_root test -f /usr/lib/systemd/system/spillway.service
in_root test -f /usr/share/doc/spillway/deployment.md

say "postinst: the admin socket's group and a private API token"
in_root getent group spillway | sed 's/^/  /'
[ "$(in_root stat -c %a /etc/spillway/admin.token)" = 600 ]
grep -Eqx '[0-9a-f]{64}' "$root/etc/spillway/admin.token"
echo "  /etc/spillway/admin.token: mode 600, 64 hex digits"

say "spillway --version / spillwayctl --version"
version=$(in_root spillway --version)
echo "  $version"
[[ "$version" == "spillway $(dpkg-deb --field "$deb" Version | cut -d- -f1)" ]]
in_root spillwayctl --version | sed 's/^/  /'

say "spillway check --config /etc/spillway/spillway.yaml (the example: a NIC that is not here)"
set +e
out=$(in_root spillway check --config /etc/spillway/spillway.yaml 2>&1)
rc=$?
set -e
echo "$out" | sed 's/^/  /'
# The installed example is valid but names a PCI NIC this host lacks: exit 1, with the reason.
[ "$rc" -eq 1 ] || { say "expected exit 1, got $rc"; exit 1; }
grep -q '^PASS  config: /etc/spillway/spillway.yaml: valid' <<<"$out"
grep -q '^FAIL  port: dataplane.ports\[0\]: this host has no PCI device 0000:3b:00.0' <<<"$out"
grep -q '^PASS  admin: admin.token_file /etc/spillway/admin.token: a 64-byte token' <<<"$out"
grep -q '^PASS  admin: admin.socket_group spillway' <<<"$out"

say "the daemon from the package, 1 s on net_null"
cat >"$root/tmp/null.yaml" <<'YAML'
dataplane:
  eal_args: ["--no-pci", "-l", "0-1", "--file-prefix", "spw-pkgtest", "--vdev", "net_null0",
             "--log-level", "lib.eal:error", "--no-telemetry"]
  hugepages: preferred
  ports: [net_null0]
  workers: 1
YAML
in_root spillway check --config /tmp/null.yaml 2>&1 | sed 's/^/  /'
out=$(in_root spillway --config /tmp/null.yaml --duration 1 --stats-interval 0 2>&1)
echo "$out" | grep -E '^spillway: (memory|running)|^final' | sed 's/^/  /'
grep -q '^spillway: running 1 worker(s)' <<<"$out"
grep -Eq '^final worker=0 lcore=1 rx=[1-9][0-9]* tx=[1-9]' <<<"$out"
say "ok: the package installs on Debian 12 and runs"
