#!/usr/bin/env python3
"""Userspace decapsulation agent for Spillway test backends.

The test machine's kernel has no IPIP / FOU / ip6tnl devices, so a backend
namespace runs this agent instead. It receives encapsulated packets, strips
the outer headers and writes the inner IP packet into a TUN device; the
backend kernel then delivers it to the VIP held on ``lo`` and answers the
client directly (direct server return).

Receives, in one select loop:

* ``ipip``   IPv4-in-IPv4   AF_INET  SOCK_RAW proto 4   (the socket sees the
             outer IPv4 header too: IHL*4 bytes are stripped)
* ``ip6ip6`` IPv6-in-IPv6   AF_INET6 SOCK_RAW proto 41  (payload only)
* ``ip4in6`` IPv4-in-IPv6   AF_INET6 SOCK_RAW proto 4   (payload only)
* ``gue4`` / ``gue6``  GUE over UDP/IPv4 resp. UDP/IPv6 on ``--gue-port``.
  Variant 1 (the UDP payload is directly the inner IPv4/IPv6 packet) is the
  one Spillway sends; variant 0 with a plain header (no flags/options used,
  proto 4 or 41) is accepted too.

Anything that is not a plausible IP packet is counted as ``junk`` and dropped.

Counters are written as JSON to ``--stats`` (atomically: temp file + rename)
right after start-up (this doubles as the readiness signal), at most every
``--stats-interval`` seconds while they change, and on exit. Exits cleanly on
SIGTERM/SIGINT.

Only the Python standard library is used. Must run as root in the backend's
network namespace.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import json
import os
import select
import signal
import socket
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
IFF_UP = 0x1
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
SIOCSIFMTU = 0x8922

IPPROTO_IPIP = 4
IPPROTO_IPV6 = 41
IPPROTO_TCP = 6
IPPROTO_UDP = 17
IPPROTO_ICMP = 1
IPPROTO_ICMPV6 = 58
IPV6_FRAGMENT = 44

KINDS = ("ipip", "ip6ip6", "ip4in6", "gue4", "gue6")
COUNTERS = KINDS + (
    "junk",  # received but not decapsulable
    "written",  # inner packets written to the TUN device
    "write_errors",
    "bytes",  # inner bytes written
    "inner_v4",
    "inner_v6",
    "inner_tcp",
    "inner_udp",
    "inner_icmp",
    "inner_fragments",  # inner IPv4 fragment (MF or offset) / IPv6 with a fragment header
)


def open_tun(name: str, mtu: int) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
    ifr = struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI)
    fcntl.ioctl(fd, TUNSETIFF, ifr)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        if mtu:
            try:
                fcntl.ioctl(s, SIOCSIFMTU, struct.pack("16si", name.encode(), mtu))
            except OSError:
                pass  # keep the default MTU; receiving does not depend on it
        flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sH", name.encode(), 0))[:18])[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH", name.encode(), flags | IFF_UP))
    # The inner source (a client) is not routed via the TUN device: no reverse-path filtering.
    for path in (f"/proc/sys/net/ipv4/conf/{name}/rp_filter",):
        try:
            with open(path, "w") as f:
                f.write("0")
        except OSError:
            pass
    return fd


def classify_inner(pkt: bytes, stats: dict) -> bool:
    """Validate an inner packet and count its kind. Returns False for junk."""
    if len(pkt) < 20:
        return False
    version = pkt[0] >> 4
    if version == 4:
        ihl = (pkt[0] & 0x0F) * 4
        total = struct.unpack_from("!H", pkt, 2)[0]
        if ihl < 20 or total < ihl or total > len(pkt):
            return False
        stats["inner_v4"] += 1
        frag = struct.unpack_from("!H", pkt, 6)[0]
        if frag & 0x3FFF:
            stats["inner_fragments"] += 1
        proto = pkt[9]
    elif version == 6:
        if len(pkt) < 40:
            return False
        plen = struct.unpack_from("!H", pkt, 4)[0]
        if 40 + plen > len(pkt):
            return False
        stats["inner_v6"] += 1
        proto = pkt[6]
        if proto == IPV6_FRAGMENT:
            stats["inner_fragments"] += 1
            if len(pkt) >= 41:
                proto = pkt[40]
    else:
        return False
    if proto == IPPROTO_TCP:
        stats["inner_tcp"] += 1
    elif proto == IPPROTO_UDP:
        stats["inner_udp"] += 1
    elif proto in (IPPROTO_ICMP, IPPROTO_ICMPV6):
        stats["inner_icmp"] += 1
    return True


def trim(pkt: bytes) -> bytes:
    """Cut trailing bytes beyond the inner packet's own length (padding)."""
    if pkt[0] >> 4 == 4:
        return pkt[: struct.unpack_from("!H", pkt, 2)[0]]
    return pkt[: 40 + struct.unpack_from("!H", pkt, 4)[0]]


def gue_inner(payload: bytes) -> bytes | None:
    if not payload:
        return None
    variant = payload[0] >> 6
    if variant == 1:  # the payload is directly an IPv4 (0x4_) or IPv6 (0x6_) packet
        return payload
    if variant == 0 and len(payload) >= 4:
        hlen = (payload[0] & 0x1F) * 4
        control = payload[0] & 0x20
        proto = payload[1]
        if not control and proto in (IPPROTO_IPIP, IPPROTO_IPV6):
            return payload[4 + hlen :]
    return None


class Agent:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.stats = {k: 0 for k in COUNTERS}
        self.dirty = True
        self.running = True
        self.tun = open_tun(args.tun, args.tun_mtu)
        self.socks: dict[int, tuple[socket.socket, str]] = {}
        self._add(socket.socket(socket.AF_INET, socket.SOCK_RAW, IPPROTO_IPIP), "ipip")
        self._add(socket.socket(socket.AF_INET6, socket.SOCK_RAW, IPPROTO_IPV6), "ip6ip6")
        self._add(socket.socket(socket.AF_INET6, socket.SOCK_RAW, IPPROTO_IPIP), "ip4in6")
        if args.gue_port:
            u4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            u4.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            u4.bind(("0.0.0.0", args.gue_port))
            self._add(u4, "gue4")
            u6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            u6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            u6.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            u6.bind(("::", args.gue_port))
            self._add(u6, "gue6")

    def _add(self, s: socket.socket, kind: str) -> None:
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        except OSError:
            pass
        s.setblocking(False)
        self.socks[s.fileno()] = (s, kind)

    def write_stats(self) -> None:
        if not self.args.stats:
            return
        doc = dict(self.stats, pid=os.getpid(), tun=self.args.tun, time=time.time())
        tmp = f"{self.args.stats}.tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, self.args.stats)
        self.dirty = False

    def handle(self, s: socket.socket, kind: str) -> None:
        for _ in range(64):  # drain a burst, then give the other sockets a turn
            try:
                data = s.recv(65535)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.stats["junk"] += 1
                self.dirty = True
                return
            self.dirty = True
            inner: bytes | None
            if kind == "ipip":
                if len(data) < 20 or data[0] >> 4 != 4:
                    inner = None
                else:
                    inner = data[(data[0] & 0x0F) * 4 :]
            elif kind in ("ip6ip6", "ip4in6"):
                inner = data
            else:
                inner = gue_inner(data)
            want = {"ip6ip6": 6, "ip4in6": 4, "ipip": 4}.get(kind)
            if not inner or (want and inner[0] >> 4 != want) or not classify_inner(inner, self.stats):
                self.stats["junk"] += 1
                continue
            self.stats[kind] += 1
            inner = trim(inner)
            try:
                os.write(self.tun, inner)
                self.stats["written"] += 1
                self.stats["bytes"] += len(inner)
            except OSError:
                self.stats["write_errors"] += 1

    def run(self) -> None:
        self.write_stats()
        fds = list(self.socks)
        last = time.monotonic()
        while self.running:
            try:
                ready, _, _ = select.select(fds, [], [], self.args.stats_interval)
            except InterruptedError:
                ready = []
            for fd in ready:
                s, kind = self.socks[fd]
                self.handle(s, kind)
            now = time.monotonic()
            if self.dirty and now - last >= self.args.stats_interval:
                self.write_stats()
                last = now
        self.write_stats()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tun", default="tun0", help="TUN device to create/open (default tun0)")
    ap.add_argument("--gue-port", type=int, default=6080, help="GUE UDP port, 0 disables (default 6080)")
    ap.add_argument("--stats", help="JSON counters file")
    ap.add_argument("--stats-interval", type=float, default=0.05, help="seconds between stats writes")
    ap.add_argument("--tun-mtu", type=int, default=65000, help="MTU set on the TUN device")
    args = ap.parse_args(argv)

    try:
        agent = Agent(args)
    except OSError as e:
        print(f"decap: setup failed: {e}", file=sys.stderr)
        return 1

    def stop(_sig, _frm):
        agent.running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        agent.run()
    except OSError as e:
        if e.errno != errno.EBADF:
            raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
