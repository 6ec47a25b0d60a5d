#!/usr/bin/env python3
"""An independent reference for Spillway's weighted Maglev tables (CH-1..CH-3).

Written from the description of the method (the module doc of shared/src/maglev.rs, the Maglev
paper's Pseudocode 1, Envoy's weighted turn rule), not from the Rust code, and hashing with the
reference C xxHash (``XXH3_64bits_withSeed`` from ``libxxhash.so.0``, Debian's libxxhash0,
which apt itself depends on) instead of the crate's xxhash-rust. ``tests/maglev_props.rs`` runs
it and requires the Rust table to be the same, entry for entry; its pinned table
(``ch_1_known_members_give_a_pinned_table``) is what ``--pinned`` prints.

The method:

* A backend's identity is the deployment's keyed hash (seed, CH-4) of the 18 bytes
  ``address (16, IPv4 as ::ffff:a.b.c.d) || port (2, little-endian)``.
* Its permutation of the M positions (M prime) comes from its identity alone:
  ``offset = XXH3(identity as 8 little-endian bytes, OFFSET_SEED) mod M``,
  ``skip = XXH3(same bytes, SKIP_SEED) mod (M - 1) + 1``, position j of the permutation is
  ``(offset + j * skip) mod M``.
* Backends of weight 0 are left out; the others take turns in ascending (identity, id) order,
  round after round (round r = 1, 2, ...); in round r a backend of weight w takes a turn only
  while it holds fewer than r * w / w_max entries. A turn walks the backend's permutation from
  where it stopped last to the first free position and takes it. The table is full after M turns.

Usage:

    maglev_reference.py --pinned         the pinned case of maglev_props.rs, as Rust literals
    maglev_reference.py < cases          one case per line: SEED SIZE ADDR,PORT,WEIGHT ...
                                         (SEED decimal or 0x-hex; member ids are 0, 1, ... in
                                         the order given); prints two lines per case:
                                         "identities HEX ..." and "entries ID ..."
"""

from __future__ import annotations

import ctypes
import ipaddress
import struct
import sys

DEFAULT_HASH_SEED = 0x5350_494C_4C57_4159  # "SPILLWAY"
OFFSET_SEED = 0x6D67_6C2D_6F66_6673  # "mgl-offs"
SKIP_SEED = 0x6D67_6C2D_736B_6970  # "mgl-skip"

try:
    _xxhash = ctypes.CDLL("libxxhash.so.0")
except OSError as e:
    sys.exit(f"maglev_reference.py: the reference C xxHash is needed (Debian package libxxhash0): {e}")
_xxh3 = _xxhash.XXH3_64bits_withSeed
_xxh3.restype = ctypes.c_uint64
_xxh3.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]


def xxh3(data: bytes, seed: int) -> int:
    return _xxh3(data, len(data), seed)


def identity(seed: int, addr: str, port: int) -> int:
    ip = ipaddress.ip_address(addr)
    if ip.version == 4:
        ip = ipaddress.IPv6Address(f"::ffff:{ip}")
    return xxh3(ip.packed + struct.pack("<H", port), seed)


def populate(members: list[tuple[int, int, int]], m: int) -> list[int]:
    """members: (id, identity, weight); the table: the owning id of each of the m positions."""
    live = sorted((ident, mid, w) for mid, ident, w in members if w > 0)
    assert live and len(live) <= m, "no member, or more members than positions"
    offset, skip = [], []
    for ident, _, _ in live:
        key = struct.pack("<Q", ident)
        offset.append(xxh3(key, OFFSET_SEED) % m)
        skip.append(xxh3(key, SKIP_SEED) % (m - 1) + 1)
    w_max = max(w for _, _, w in live)
    nxt = [0] * len(live)  # the paper's next[i]: how far member i has walked its permutation
    held = [0] * len(live)
    entry = [-1] * m
    filled = 0
    rnd = 0
    while filled < m:
        rnd += 1
        for i, (_, mid, w) in enumerate(live):
            # Fewer than rnd * w / w_max entries so far (compared exactly, in integers).
            if held[i] * w_max >= rnd * w:
                continue
            c = (offset[i] + nxt[i] * skip[i]) % m
            while entry[c] >= 0:
                nxt[i] += 1
                c = (offset[i] + nxt[i] * skip[i]) % m
            entry[c] = mid
            nxt[i] += 1
            held[i] += 1
            filled += 1
            if filled == m:
                break
    return entry


def run_case(line: str) -> tuple[list[int], list[int]]:
    seed, size, *specs = line.split()
    members = []
    for mid, spec in enumerate(specs):
        addr, port, weight = spec.split(",")
        members.append((mid, identity(int(seed, 0), addr, int(port)), int(weight)))
    return [ident for _, ident, _ in members], populate(members, int(size))


def main() -> None:
    if sys.argv[1:] == ["--pinned"]:
        # Three backends 10.0.0.1..3:80, weights 1, 2, 3, the default seed, M = 251.
        ids, table = run_case(f"{DEFAULT_HASH_SEED} 251 10.0.0.1,80,1 10.0.0.2,80,2 10.0.0.3,80,3")
        print("identities:", ", ".join(f"0x{i:016x}" for i in ids))
        print("first 32 entries:", ", ".join(map(str, table[:32])))
        print("entries per member:", [table.count(i) for i in range(3)])
        return
    if sys.argv[1:]:
        sys.exit(__doc__)
    for line in sys.stdin:
        if line.strip():
            ids, table = run_case(line)
            print("identities", " ".join(f"{i:016x}" for i in ids))
            print("entries", " ".join(map(str, table)))


if __name__ == "__main__":
    main()
