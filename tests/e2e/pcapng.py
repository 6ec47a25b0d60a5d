"""Reading pcapng files in the e2e tests (what dpdk-dumpcap and ``spillwayctl capture`` write),
by hand from the format's definition: blocks of type, total length, body, total length;
enhanced packet blocks (type 6) with interface, timestamp, captured and original lengths, the
bytes padded to 4, then options (code, length, value padded to 4; code 1 a comment, 0 the
end). Little-endian files only (both writers use the host's order)."""

from __future__ import annotations

import struct
import subprocess


def packets(data: bytes) -> list[dict]:
    """The enhanced packet blocks of ``data``: ``iface``, ``ts`` (in the interface's unit),
    ``orig`` (length on the wire), ``data`` (the bytes kept) and ``comment`` ("" without)."""
    out, off = [], 0
    assert data[:4] == b"\x0a\x0d\x0d\x0a", f"not a pcapng section header: {data[:4]!r}"
    while off + 12 <= len(data):
        btype, blen = struct.unpack_from("<II", data, off)
        if blen < 12 or off + blen > len(data):
            break
        body = data[off + 8: off + blen - 4]
        if btype == 6:
            iface, hi, lo, cap, orig = struct.unpack_from("<IIIII", body, 0)
            pkt = body[20:20 + cap]
            opts, comment = body[20 + (cap + 3) // 4 * 4:], ""
            while len(opts) >= 4:
                code, olen = struct.unpack_from("<HH", opts, 0)
                if code == 0:
                    break
                if code == 1:
                    comment = opts[4:4 + olen].decode()
                opts = opts[4 + (olen + 3) // 4 * 4:]
            out.append({"iface": iface, "ts": (hi << 32) | lo, "orig": orig, "data": pkt, "comment": comment})
        off += blen
    return out


def tcpdump_count(path) -> int:
    """How many packets ``tcpdump -r`` reads from a capture file (it fails on a bad file)."""
    r = subprocess.run(["tcpdump", "-nn", "-r", str(path)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return len([line for line in r.stdout.splitlines() if line.strip()])
