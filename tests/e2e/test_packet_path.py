"""Packet path, end to end: the real ``spillway`` daemon on a DPDK ``net_tap`` port in the
balancer namespace, real clients and backends in their own namespaces (``topo.py``), backends
that decapsulate in user space and answer the clients directly (DSR).

Each test starts its own topology and daemon (about a second each) because the daemon's
counters are only printed, as ``final ...`` lines, when it stops; every assertion on counters
is an exact comparison with what the test sent or what the backends received.

What is shown:

* TCP (curl) and UDP through a VIP reach a backend over IPIP and GUE (IPv4) and over IP6IP6
  and GUE (IPv6); replies come straight from the backend (its MAC, the VIP's address); the
  balancer forwarded exactly the clients' packets, every one decapsulated by the backend that
  answered that flow, and never saw a reply.
* A long TCP connection keeps its backend while 240 other flows spread over all backends.
* An ICMP "fragmentation needed" about a flow reaches that flow's backend, and only it.
* Fragmented UDP datagrams (3000 and 8000 bytes, IPv4 and IPv6) reach one backend whole (SA-6).
* Malformed frames injected at the tap are dropped under their own counters, exactly, and
  forwarding goes on.
* The balancer answers ARP / ND and echo for the VIPs and its node address, and nothing else.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import re
import socket
import struct
import threading
import time
from collections import Counter

import pytest

import pcapng
import topo as T
from balancer import BIN, Spillway, make_config, needs_built, service

pytestmark = needs_built(BIN)

HTTP_RE = re.compile(r"(b\d+) (\S+):(\d+)\n")
UDP_RE = re.compile(r"(b\d+) len=(\d+) sha256=([0-9a-f]{64})")


# ---- helpers ------------------------------------------------------------------------------------
@contextlib.contextmanager
def running(t: T.Topology, services: list[dict], mtu: int = 1500):
    """The daemon with `services`, answering on its first VIP, every backend resolved."""
    lb = Spillway(t, make_config(t, services, mtu=mtu))
    with lb:
        lb.wait_ready(t.clients[0])
        lb.wait_neighbours()
        yield lb


def delta(before: dict, after: dict, key: str) -> dict[str, int]:
    return {b: after[b][key] - before[b][key] for b in before}


def forwarded(final: dict) -> int:
    return sum(v for k, v in final.items() if k.startswith("forward."))


def vip_url(vip: str, path: str = "/") -> str:
    return f"http://[{vip}]{path}" if ":" in vip else f"http://{vip}{path}"


def curl(client: T.Client, vip: str) -> tuple[str, int]:
    """GET / through the VIP with curl: (backend, client port); checks the body names the client."""
    r = client.run(["curl", "-sS", "-m", "5", "--connect-timeout", "3", vip_url(vip)])
    m = HTTP_RE.fullmatch(r.stdout)
    assert m, f"unexpected answer {r.stdout!r}"
    assert m[2] == (client.ipv6 if ":" in vip else client.ipv4), r.stdout
    return m[1], int(m[3])


def http_get(client: T.Client, vip: str) -> tuple[str, int]:
    """GET / through the VIP from a Python socket (faster than curl): (backend, client port)."""
    fam = socket.AF_INET6 if ":" in vip else socket.AF_INET
    with client.socket(fam, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect((vip, T.HTTP_PORT))
        port = s.getsockname()[1]
        s.sendall(b"GET / HTTP/1.0\r\nHost: vip\r\n\r\n")
        data = recv_all(s)
    body = data.split(b"\r\n\r\n", 1)[1].decode()
    m = HTTP_RE.fullmatch(body)
    assert m and int(m[3]) == port, body
    return m[1], port


def recv_all(s: socket.socket) -> bytes:
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return out


def udp_ask(client: T.Client, vip: str, payload: bytes, sock: socket.socket | None = None) -> tuple[str, int]:
    """Send one datagram to VIP:5353 (from a fresh socket unless given); the reply must come
    from VIP:5353 and carry the datagram's length and digest. Returns (backend, source port)."""
    fam = socket.AF_INET6 if ":" in vip else socket.AF_INET
    own = sock is None
    s = sock or client.socket(fam, socket.SOCK_DGRAM)
    try:
        if own:
            s.bind((client.ipv6 if fam == socket.AF_INET6 else client.ipv4, 0))
        s.settimeout(3)
        s.sendto(payload, (vip, T.UDP_PORT))
        data, addr = s.recvfrom(65536)
        assert (addr[0], addr[1]) == (vip, T.UDP_PORT), f"reply from {addr}, not from the VIP"
        m = UDP_RE.fullmatch(data.decode())
        assert m, data
        assert int(m[2]) == len(payload) and m[3] == hashlib.sha256(payload).hexdigest(), \
            f"{m[1]} got a different datagram: {data!r} for {len(payload)} bytes"
        return m[1], s.getsockname()[1]
    finally:
        if own:
            s.close()


def holders(t: T.Topology, client_ip: str, port: int, timeout: float = 2.0) -> list[str]:
    """Backends with an established TCP socket VIP:80 <-> client_ip:port (from `ss`); waits
    up to `timeout` for one (the client's final ACK of the handshake may still be on its way)."""
    return T.wait_until(lambda: _holders(t, client_ip, port),
                        f"a backend with an established connection from {client_ip}:{port}",
                        timeout=timeout, poll=0.02)


def _holders(t: T.Topology, client_ip: str, port: int) -> list[str]:
    # The backend's server is dual-stack: an IPv4 peer shows as [::ffff:a.b.c.d]:port.
    peers = {f"[{client_ip}]:{port}"} if ":" in client_ip else {f"{client_ip}:{port}", f"[::ffff:{client_ip}]:{port}"}
    out = []
    for b in t.backends:
        ss = b.run(["ss", "-Htn", "state", "established"]).stdout.split()
        if peers & set(ss):
            out.append(b.short)
    return out


def to_vip(frames, vip: str, c: T.Client | None = None):
    """TCP/UDP frames a client sent to the VIP (captured on its eth0)."""
    return [f for f in frames if f.outgoing and f.dst == vip and f.proto in (6, 17)
            and (c is None or f.src in (c.ipv4, c.ipv6))]


def from_vip(frames, vip: str):
    return [f for f in frames if not f.outgoing and f.src == vip and f.proto in (6, 17)]


# ---- 1 + 3: TCP and UDP through a VIP, DSR replies ---------------------------------------------------
@pytest.mark.parametrize("encap,family,kind", [
    ("IPIP", 4, "ipip"),
    ("GUE", 4, "gue4"),
    ("IPIP", 6, "ip6ip6"),
    ("GUE", 6, "gue6"),
], ids=["ipip", "gue4", "ip6ip6", "gue6"])
def test_vip_reaches_backends_and_replies_bypass_balancer(encap, family, kind):
    vip = T.VIP4 if family == 4 else T.VIP6
    with T.Topology() as t, running(t, [service(t, vips=(vip,), encap=encap, family=family)]) as lb, \
            contextlib.ExitStack() as stack:
        lb_mac = lb.port_mac
        backend_macs = {b.mac_address: b.short for b in t.backends}
        before = t.decaps()
        flows: dict[tuple[str, int, int], str] = {}  # (client, proto, port) -> backend that answered
        curls = 0
        caps = {c.short: c.capture() for c in t.clients}
        tap = t.lb.capture(lb.tap)
        for c in t.clients:
            for _ in range(4):
                b, port = curl(c, vip)
                flows[(c.short, 6, port)] = b
                curls += 1
            # UDP: one datagram per source port; the sockets stay open so that no port is
            # reused (a reused port is the same flow: a conntrack hit, not a new entry).
            for i in range(4):
                s = stack.enter_context(c.socket(socket.AF_INET6 if family == 6 else socket.AF_INET))
                s.bind((c.ipv6 if family == 6 else c.ipv4, 0))
                b, port = udp_ask(c, vip, f"datagram {i} from {c.short}".encode() * (i + 1), sock=s)
                flows[(c.short, 17, port)] = b
        frames = {name: cap.stop() for name, cap in caps.items()}
        tap_frames = tap.stop()
        after = t.settled_decaps()
        final = lb.stop()

    # Every backend named in a reply; at least two different ones (the flows are spread).
    assert len(set(flows.values())) >= 2, flows
    # The clients' packets to the VIP went to the balancer's MAC; the replies came from the
    # VIP but from the MAC of the backend that answered that flow: never through the balancer.
    sent = []
    per_backend = Counter()
    for c in t.clients:
        out = to_vip(frames[c.short], vip, c)
        assert out and all(f.dst_mac == lb_mac for f in out)
        for f in out:
            per_backend[flows[(c.short, f.proto, f.sport)]] += 1
        sent += out
        replies = from_vip(frames[c.short], vip)
        assert replies, f"{c.short} saw no reply from {vip}"
        for f in replies:
            assert f.src_mac != lb_mac, "a reply came through the balancer"
            owner = flows[(c.short, f.proto, f.dport)]
            assert backend_macs.get(f.src_mac) == owner, \
                f"reply for port {f.dport} from {f.src_mac}, flow answered by {owner}"
    # The balancer forwarded exactly those packets, each decapsulated ({kind}) by the backend
    # that owns its flow; nothing arrived in another encapsulation.
    d = delta(before, after, kind)
    assert forwarded(final) == len(sent) == sum(d.values()), (final, len(sent), d)
    assert {b: n for b, n in d.items() if n} == dict(per_backend), (d, per_backend)
    for other in ("ipip", "ip6ip6", "ip4in6", "gue4", "gue6", "junk"):
        if other != kind:
            assert sum(delta(before, after, other).values()) == 0, other
    # Every new flow made one entry: one SYN per curl, one datagram per UDP socket.
    assert final.get("forward.new_connection") == curls + len([k for k in flows if k[1] == 17]), final
    # It never handled a reply: none reached its port, none left it, nothing unmatched.
    assert not [f for f in tap_frames if f.src == vip and f.proto in (6, 17)], "a reply crossed the tap"
    assert final.get("drop.no_matching_rule", 0) == 0, final
    assert final.get("drop.neighbour_unresolved", 0) == 0, final
    # What it sent: the encapsulated packets (seen on the tap: outer node -> backend, inner
    # client -> VIP), its ARP/ND and echo answers, and its own neighbour requests (a few).
    node = T.LB_NODE_V4 if family == 4 else T.LB_NODE_V6
    encapsulated = [f for f in tap_frames if not f.outgoing and f.inner is not None]
    assert len(encapsulated) == len(sent)
    for f in encapsulated:
        assert f.src == node and f.dst in {b.ipv4 if family == 4 else b.ipv6 for b in t.backends}
        assert f.inner.dst == vip and f.inner.src in {c.ipv4 if family == 4 else c.ipv6 for c in t.clients}
    answers = forwarded(final) + final.get("echo_replies", 0) + final.get("neighbour_replies", 0)
    requests = final["tx"] - answers
    assert 0 <= requests <= 3 * len(t.backends), final


# ---- 2: a long connection keeps its backend ------------------------------------------------------------
def test_long_connection_keeps_backend_while_flows_spread():
    with T.Topology() as t, running(t, [service(t, vips=(T.VIP4,))]) as lb, contextlib.ExitStack() as stack:
        c1, c2 = t.client("c1"), t.client("c2")
        long = c1.socket(socket.AF_INET, socket.SOCK_STREAM)
        long.settimeout(5)
        long.connect((T.VIP4, T.HTTP_PORT))
        port = long.getsockname()[1]
        # Half a request: the backend's server waits for the rest (up to 10 s per read).
        long.sendall(b"GET / HTTP/1.1\r\nHost: vip\r\n")
        owner = holders(t, c1.ipv4, port)
        assert len(owner) == 1, f"connection {c1.ipv4}:{port} held by {owner}"
        owner = owner[0]
        before = t.decaps()

        spread = Counter()
        t0 = time.monotonic()
        for i in range(20):  # TCP flows from both zones' clients
            for c in (c1, c2):
                spread[http_get(c, T.VIP4)[0]] += 1
        for i in range(100):  # UDP flows: one datagram each from its own source port
            for c in (c1, c2):
                s = stack.enter_context(c.socket(socket.AF_INET, socket.SOCK_DGRAM))
                s.bind((c.ipv4, 0))  # kept open: no port is used twice
                spread[udp_ask(c, T.VIP4, f"flow {i}".encode(), sock=s)[0]] += 1
        assert time.monotonic() - t0 < 9, "flows took too long for the half-open request"
        assert sum(spread.values()) == 240
        assert set(spread) == {b.short for b in t.backends}, f"not every backend got flows: {spread}"
        assert min(spread.values()) >= 20, f"flows not spread: {spread}"

        # The long connection is still held by the same backend, and its next bytes reach it.
        assert holders(t, c1.ipv4, port) == [owner]
        mid = t.settled_decaps()
        long.sendall(b"X-Later: yes\r\n\r\n")
        reply = recv_all(long).decode()
        long.close()
        body = reply.split("\r\n\r\n", 1)[1]
        assert HTTP_RE.fullmatch(body), reply
        assert body == f"{owner} {c1.ipv4}:{port}\n", f"long connection answered by {body!r}, was {owner}"
        after = t.settled_decaps()
        final = lb.stop()
    # Only the owner received the long connection's last packets.
    d = delta(mid, after, "inner_tcp")
    assert d[owner] >= 1 and all(n == 0 for b, n in d.items() if b != owner), d
    # The flows' packets are what the backends decapsulated (and every flow was a new entry).
    assert sum(delta(before, mid, "ipip").values()) > 240
    assert final.get("forward.new_connection") == 241, final  # SYNs of 1 long + 40 TCP, 200 UDP flows
    assert final.get("drop.neighbour_unresolved", 0) == 0, final


# ---- 4: ICMP errors reach the flow's backend ------------------------------------------------------------
def test_frag_needed_reaches_the_flows_backend():
    with T.Topology() as t, running(t, [service(t, vips=(T.VIP4,))]) as lb:
        c = t.client("c1")
        conns = []  # (socket, port, backend, backend's ISN)
        with c.capture() as cap:
            while len({b for *_, b, _ in conns}) < 2:
                assert len(conns) < 16, "every connection went to one backend"
                s = c.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.settimeout(5)
                s.connect((T.VIP4, T.HTTP_PORT))
                port = s.getsockname()[1]
                owner = holders(t, c.ipv4, port)
                assert len(owner) == 1, owner
                conns.append((s, port, owner[0], None))
        synacks = {f.dport: f for f in cap.frames if not f.outgoing and f.src == T.VIP4 and f.proto == 6
                   and f.l3[20 + 13] & T.TCP_SYN}
        s, port, owner, _ = conns[0]
        isn = struct.unpack_from("!I", synacks[port].l3, 20 + 4)[0]

        # A router on the client's path says the backend's reply (VIP:80 -> client) is too big.
        router = "198.18.10.254"
        c.ip("addr", "add", f"{router}/16", "dev", c.ifname)
        reply_dir = T.ipv4(T.VIP4, c.ipv4, 6, T.tcp(T.VIP4, c.ipv4, T.HTTP_PORT, port, flags=T.TCP_ACK,
                                                      seq=isn + 1, payload=b"x" * 1460), df=True)
        msg = T.icmp4(3, 4, rest=1280, payload=reply_dir[:28])
        before = t.settled_decaps()
        with c.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP) as raw:
            raw.bind((router, 0))
            raw.sendto(msg, (T.VIP4, 0))
        t.wait_decap(owner, {"inner_icmp": before[owner]["inner_icmp"] + 1})
        # The backend's kernel takes it: the path MTU to the client becomes 1280.
        routes: list[str] = []

        def lowered() -> str | None:
            routes.append(t.backend(owner).run(["ip", "route", "get", c.ipv4, "from", T.VIP4]).stdout)
            return routes[-1] if "mtu 1280" in routes[-1] else None

        route = T.wait_until(lowered, lambda: f"{owner}'s path MTU to {c.ipv4} to be 1280: {routes[-1]!r}",
                             timeout=5, poll=0.02)
        after = t.settled_decaps()
        for sock, *_ in conns:
            sock.close()
        final = lb.stop()
    d = delta(before, after, "inner_icmp")
    assert d == {b.short: int(b.short == owner) for b in t.backends}, (owner, d)
    assert final.get("icmp_errors_forwarded") == 1, final
    assert "mtu 1280" in route, route


# ---- 5: fragmented datagrams reach one backend whole (SA-6) ---------------------------------------------
def test_fragmented_datagrams_reach_one_backend_whole():
    # DPDK 22.11's net_tap takes frames of at most 1522 bytes (MTU 1504), so the fabric cannot
    # be jumbo here: the clients' links are 1400 instead, which leaves room for the outer
    # headers (IPIP 20, IP6IP6 40) of a full-size fragment on the 1500-byte fabric.
    with T.Topology(client_mtu=1400) as t, running(
            t, [service(t, vips=(T.VIP4,)), service(t, name="web6", vips=(T.VIP6,), family=6)]) as lb:
        assert t.client("c1").run(["cat", "/sys/class/net/eth0/mtu"]).stdout.strip() == "1400"
        before = t.decaps()
        answered: dict[tuple[str, str], set[str]] = {}
        sizes = Counter()
        caps = {c.short: c.capture() for c in t.clients}
        for c in t.clients:
            for vip in (T.VIP4, T.VIP6):
                fam = socket.AF_INET6 if ":" in vip else socket.AF_INET
                for i in range(3):  # several source ports
                    with c.socket(fam, socket.SOCK_DGRAM) as s:
                        s.bind((c.ipv6 if ":" in vip else c.ipv4, 0))
                        for n in (3000, 8000):
                            payload = hashlib.sha512(f"{c.short}{vip}{i}{n}".encode()).digest() * (n // 64 + 1)
                            b, _ = udp_ask(c, vip, payload[:n], sock=s)
                            answered.setdefault((c.short, vip), set()).add(b)
                            sizes[n] += 1
        frames = {name: cap.stop() for name, cap in caps.items()}
        after = t.settled_decaps()
        final = lb.stop()
    assert sizes == {3000: 12, 8000: 12}
    # SA-6: every fragment uses the 3-tuple, so one client's datagrams to one VIP share a backend.
    for key, backends in answered.items():
        assert len(backends) == 1, f"{key}: datagrams answered by {backends}"
    # The clients really sent fragments (MTU 1500), and every one was forwarded and
    # decapsulated as a fragment.
    frags = [f for c in t.clients for f in to_vip(frames[c.short], T.VIP4) + to_vip(frames[c.short], T.VIP6)
             if f.fragment]
    per_dgram = {3000: 3, 8000: 6}  # IPv4: 1376-byte pieces; IPv6: 1352: same counts here
    assert len(frags) == sum(per_dgram[n] * k for n, k in sizes.items()), len(frags)
    assert sum(delta(before, after, "inner_fragments").values()) == len(frags)
    assert forwarded(final) == len(frags), final
    assert sum(delta(before, after, "ipip").values()) + sum(delta(before, after, "ip6ip6").values()) == len(frags)
    assert final.get("drop.too_big", 0) == 0 and final.get("drop.bad_fragment", 0) == 0, final


# ---- 6: malformed frames are counted, forwarding goes on ---------------------------------------------
def malformed_frames(dst_mac: str, src_mac: str, client: T.Client) -> dict[str, list[bytes]]:
    """Frames for each malformed counter, addressed to the balancer."""
    src, vip = client.ipv4, T.VIP4
    good_tcp = T.tcp(src, vip, 40000, 80, flags=T.TCP_SYN)

    def eth(l3: bytes, et: int = T.ETH_P_IP) -> bytes:
        return T.ether(dst_mac, src_mac, et, l3)

    def patched(pkt: bytes, off: int, value: bytes) -> bytes:
        return pkt[:off] + value + pkt[off + len(value):]

    syn = T.ipv4(src, vip, 6, good_tcp)
    bad_offset = patched(good_tcp, 12, bytes([4 << 4]))  # TCP data offset 4 (< 5)
    udp_short_len = patched(T.udp(src, vip, 40001, 5353, b"payload"), 4, struct.pack("!H", 4))
    return {
        "drop.truncated": [eth(syn[:12]), eth(syn[:19]), eth(T.ipv6(client.ipv6, T.VIP6, 6, good_tcp)[:30], T.ETH_P_IPV6)],
        "drop.bad_version": [eth(bytes([0x65]) + syn[1:]), eth(syn, T.ETH_P_IPV6)],
        "drop.bad_ihl": [eth(bytes([0x44]) + syn[1:]), eth(bytes([0x41]) + syn[1:])],
        "drop.bad_length": [eth(patched(syn, 2, struct.pack("!H", 1000))), eth(patched(syn, 2, struct.pack("!H", 12)))],
        "drop.bad_transport_header": [eth(T.ipv4(src, vip, 6, bad_offset)), eth(T.ipv4(src, vip, 17, udp_short_len)),
                                      eth(T.ipv4(src, vip, 6, good_tcp[:12]))],
        "drop.bad_fragment": [
            # RFC 1858 tiny first fragment: 8 bytes of TCP, MF set.
            eth(T.ipv4(src, vip, 6, good_tcp[:8], ident=7, mf=True)),
            # RFC 1858 overlap: a TCP fragment at offset 8 bytes.
            eth(T.ipv4(src, vip, 6, good_tcp[8:16], ident=7, frag_offset=8)),
            # A non-last fragment whose length is not a multiple of 8.
            eth(T.ipv4(src, vip, 17, b"x" * 13, ident=8, mf=True)),
        ],
        "drop.bad_icmp": [eth(T.ipv4(src, vip, 1, T.icmp4(3, 4, 1400, syn[:20])))],  # quote without 8 L4 bytes
    }


def test_malformed_frames_are_counted_and_forwarding_goes_on():
    with T.Topology() as t, running(t, [service(t)]) as lb:
        c1 = t.client("c1")
        # The balancer's MAC, as the client learned it for the VIP.
        neigh = c1.ip("neigh", "show", T.VIP4, "dev", c1.ifname).stdout.split()
        mac = neigh[neigh.index("lladdr") + 1]
        assert mac == lb.port_mac
        frames = malformed_frames(mac, "02:00:00:00:00:99", c1)
        sent = Counter()
        for _ in range(2):
            for counter, fs in frames.items():
                # Injected at the tap from the balancer host's side (no bridge, no IP stack).
                sent[counter] += t.lb.send_frames(lb.tap, fs)
        # Until the balancer has counted them all (each exactly so, checked on its exit).
        counted: dict[str, float] = {}

        def all_counted() -> bool:
            m = lb.metrics()
            counted.update({c: m.value("spillway_dropped_packets_total", 0.0, reason=c.removeprefix("drop."))
                            for c in sent})
            return all(counted[c] >= n for c, n in sent.items())

        T.wait_until(all_counted, lambda: f"the malformed frames to be counted: sent {dict(sent)}, counted {counted}",
                     timeout=5)
        # Forwarding goes on: TCP and UDP through the VIP, and a ping to it.
        with c1.capture() as cap:
            curl(c1, T.VIP4)
            udp_ask(c1, T.VIP4, b"still there?")
        assert c1.run(["ping", "-c", "1", "-W", "2", T.VIP4], check=False).returncode == 0
        final = lb.stop()
    for counter, n in sent.items():
        assert final.get(counter, 0) == n, f"{counter}: sent {n}, counted {final.get(counter, 0)}"
    assert final.get("drop.bad_extension_header", 0) == 0
    assert forwarded(final) == len(to_vip(cap.frames, T.VIP4)), final


# ---- 7: ARP, ND and echo for the node's addresses only --------------------------------------------------
def arp_probe(c: T.Client, answered: list[str], unanswered: list[str], count: int = 2) -> dict[str, list[T.FrameInfo]]:
    """Broadcast `count` ARP requests from `c` for each target, wait until each of `answered`
    has had `count` replies; the ARP replies each target got. For `unanswered` the capture's
    settle time as it stops (0.2 s) is the window in which no reply may come."""
    me = c.mac_address
    targets = [*answered, *unanswered]

    def replies(frames: list[T.FrameInfo]) -> dict[str, list[T.FrameInfo]]:
        return {ip: [f for f in frames if not f.outgoing and f.arp_op == 2 and f.src == ip
                     and f.dst_mac == me] for ip in targets}

    with c.capture() as cap:
        frames = [T.ether("ff:ff:ff:ff:ff:ff", me, T.ETH_P_ARP, T.arp(1, me, c.ipv4, ip)) for ip in targets]
        for _ in range(count):
            c.send_frames(c.ifname, frames)
        T.wait_until(lambda: all(len(replies(cap.snapshot())[ip]) >= count for ip in answered),
                     lambda: f"{count} ARP replies for each of {answered}: "
                             f"{ {ip: len(r) for ip, r in replies(cap.snapshot()).items()} }",
                     timeout=5, poll=0.02)
    return replies(cap.frames)


def test_answers_arp_nd_and_echo_for_its_addresses_only():
    unknown4, unknown6 = "198.18.0.77", "fd00::77"
    with T.Topology() as t:
        lb = Spillway(t, make_config(t, [service(t)]))  # VIPs 198.18.0.100 and fd00::100
        with lb, t.lb.capture(lb.tap) as tap:
            lb.wait_ready(t.clients[0])
            c1, c2 = t.client("c1"), t.client("c2")
            mac = lb.port_mac
            replies = arp_probe(c1, [T.VIP4, T.LB_NODE_V4], [unknown4])
            pings = {addr: c.run(["ping", "-c", "2", "-i", "0.2", "-W", "1", addr], check=False)
                     for c in (c1, c2) for addr in (T.VIP4, T.LB_NODE_V4, T.VIP6, T.LB_NODE_V6)}
            lost = {addr: c1.run(["ping", "-c", "1", "-W", "1", addr], check=False)
                    for addr in (unknown4, unknown6)}
            neigh6 = c1.ip("neigh", "show", T.VIP6, "dev", c1.ifname).stdout
            final = lb.stop()
        frames = tap.stop(settle=0)
    ours = {T.VIP4, T.LB_NODE_V4, T.VIP6, T.LB_NODE_V6}
    # ARP: one reply per request for the VIP and the node address, from the port's MAC.
    for ip in (T.VIP4, T.LB_NODE_V4):
        assert len(replies[ip]) == 2 and all(f.src_mac == mac for f in replies[ip]), (ip, replies[ip])
    assert replies[unknown4] == []
    # Echo for the VIPs and node addresses, both families, from both clients; not for others.
    for addr, r in pings.items():
        assert r.returncode == 0 and "2 received" in r.stdout, (addr, r.stdout, r.stderr)
    for addr, r in lost.items():
        assert r.returncode != 0, f"something answered {addr}: {r.stdout}"
    assert mac in neigh6, neigh6
    # On the tap: it answered exactly the requests for its own addresses.
    into = [f for f in frames if f.outgoing]
    out = [f for f in frames if not f.outgoing]
    arp_asked = [f for f in into if f.arp_op == 1 and f.dst in ours]
    ns_asked = [f for f in into if f.proto == 58 and f.icmp_type == 135 and _ns_target(f) in ours]
    echo_asked = [f for f in into if f.icmp_type in (8, 128) and f.dst in ours and f.proto in (1, 58)]
    assert [f for f in out if f.arp_op == 2 and f.src not in ours] == []
    assert [f for f in out if f.arp_op == 2 and f.src in (T.VIP4, T.LB_NODE_V4)]
    assert not [f for f in out if f.proto == 58 and f.icmp_type == 136 and _na_target(f) not in ours]
    assert final.get("neighbour_replies") == len(arp_asked) + len(ns_asked), (final, len(arp_asked), len(ns_asked))
    assert final.get("echo_replies") == len(echo_asked) >= 16, (final, len(echo_asked))
    echo_out = [f for f in out if f.icmp_type in (0, 129) and f.proto in (1, 58)]
    assert len(echo_out) == len(echo_asked) and {f.src for f in echo_out} == ours
    # Requests for the unknown addresses reached it and were not for it.
    assert any(f.arp_op == 1 and f.dst == unknown4 for f in into)
    assert final.get("drop.not_for_us", 0) >= 4


def _ns_target(f: T.FrameInfo) -> str | None:
    l3 = f.l3
    return str(ipaddress.IPv6Address(l3[48:64])) if len(l3) >= 64 else None


_na_target = _ns_target


# ---- DF packets too big to encapsulate: frag-needed / packet-too-big back to the client -----------
@pytest.mark.parametrize("family", [4, 6], ids=["ipv4", "ipv6"])
def test_too_big_for_the_tunnel_is_answered_and_the_client_adapts(family):
    vip = T.VIP4 if family == 4 else T.VIP6
    overhead = 20 if family == 4 else 40  # IPIP / IP6IP6
    with T.Topology() as t, running(t, [service(t, vips=(vip,), family=family)]) as lb:
        c1 = t.client("c1")
        body = bytes(range(256)) * 24  # 6144 bytes: full-size (1500, DF) segments
        r = c1.run(["curl", "-sS", "-m", "10", "--data-binary", "@-", vip_url(vip)],
                   input=body.decode("latin-1"), check=False)
        route = c1.run(["ip", "route", "get", vip]).stdout
        final = lb.stop()
    assert r.returncode == 0 and HTTP_RE.fullmatch(r.stdout), (r.stdout, r.stderr)
    # The balancer answered the full-size segments (DF) with ICMP, advertising its MTU minus
    # the tunnel's overhead, and the client's kernel took it (path MTU cached).
    assert f"mtu {1500 - overhead}" in route, route
    assert final.get("drop.too_big", 0) >= 1, final


@pytest.mark.parametrize("edge", ["start", "health"])
def test_first_packets_to_an_unresolved_backend_wait_for_its_mac(edge):
    """The first packets to a backend whose MAC is not known yet wait for the answer instead
    of being dropped as ``neighbour_unresolved``. Backend b1 ignores ARP (so the balancer
    cannot know its MAC) while the balancer starts and the clients send (``start``), or while
    it is marked unhealthy and then, just before the clients send, eligible again
    (``health``: ``set-health b1 unhealthy``, later ``auto``); then it answers ARP. Every
    datagram of the round is answered, by the backend its flow maps to, exactly b1's waited,
    and none was dropped (a frame whose next hop stays silent for 1 s is dropped and counted:
    dataplane/tests/worker_tx.rs). Before frames could wait, b1's flows lost their first
    datagram."""
    from test_hardening import exchange

    with T.Topology() as t:
        b1 = t.backend("b1")
        b1.sysctl(**{"net.ipv4.conf.all.arp_ignore": 8})
        lb = Spillway(t, make_config(t, [service(t, vips=(T.VIP4,))]))
        with lb:
            if edge == "health":
                lb.ctl("set-health", b1.ipv4, "unhealthy")
            lb.wait_ready(t.clients[0])
            # Only b1 unresolved: the others' flows must not fill the wait queue (16 frames a
            # next hop) that b1's use.
            others = {t.backend(n).ipv4 for n in ("b2", "b3", "b4")}
            T.wait_until(lambda: others <= {n["addr"] for n in lb.ctl("neighbours")["neighbours"]},
                         "the other backends to be resolved")
            if edge == "health":
                assert b1.ipv4 not in {n["addr"] for n in lb.ctl("neighbours")["neighbours"]}
                lb.ctl("set-health", b1.ipv4, "auto")
            c1 = t.client("c1")
            # 32 flows: b1 gets fewer than 16 of them but once in about 5,000 runs.
            socks = [c1.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(32)]
            try:
                for s in socks:
                    s.bind((c1.ipv4, 0))
                # b1 answers ARP again while the first round's frames for it wait.
                threading.Timer(0.3, lambda: b1.sysctl(**{"net.ipv4.conf.all.arp_ignore": 0})).start()
                first = exchange(socks, "first", timeout=3.0)
                m = lb.metrics()
                waited = m.value("spillway_neighbour_waited_frames_total", worker=0)
                again = exchange(socks, "again", timeout=3.0)
            finally:
                for s in socks:
                    s.close()
            final = lb.stop()
        report = {"edge": edge, "answered_first": len(first), "answered_again": len(again), "waited": waited,
                  "on_b1": sum(1 for b in first.values() if b == "b1"),
                  "unresolved": final.get("drop.neighbour_unresolved", 0)}
        print("first packets:", report)
        assert len(first) == len(socks) and first == again, report
        assert report["on_b1"] > 0 and waited == report["on_b1"], "b1's first datagrams, and only they, waited"
        assert report["unresolved"] == 0, (report, final)


@pytest.mark.parametrize("how", ["api", "sighup"])
def test_a_reload_resolves_the_backends_it_adds_before_it_publishes(how):
    """A reload that adds backend b4 (through the API, or SIGHUP) publishes the new tables
    only once b4's MAC is known. New UDP flows from c1 start every millisecond, from before the
    reload to after it; once it has applied, b4 is a neighbour, the flows that started after it
    and map to b4 are answered by b4, and not one datagram had to wait for b4's MAC
    (``spillway_neighbour_waited_frames_total`` stays 0) or was dropped as
    ``neighbour_unresolved``. When a reload published first and resolved after, the API's
    reply came back before b4 was a neighbour, and the first datagrams to b4 waited (5 in a
    run)."""
    import resource
    import selectors
    from test_control_plane import without

    flows = 600
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2048:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(2048, hard), hard))
    with T.Topology() as t:
        b4 = t.backend("b4")
        full = make_config(t, [service(t, vips=(T.VIP4,))])
        lb = Spillway(t, without(full, b4.ipv4))
        with lb:
            lb.wait_ready(t.clients[0])
            lb.wait_neighbours()

            def neighbours() -> set[str]:
                return {n["addr"] for n in lb.ctl("neighbours")["neighbours"]}

            assert b4.ipv4 not in neighbours()
            generation = lb.ctl("status")["generation"]
            lb.write(full)
            c1 = t.client("c1")
            socks = [c1.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(flows)]
            sent_at: list[float] = []
            try:
                for s in socks:
                    s.bind((c1.ipv4, 0))

                def send_all():
                    for i, s in enumerate(socks):
                        s.sendto(f"flow {i}".encode(), (T.VIP4, T.UDP_PORT))
                        sent_at.append(time.monotonic())
                        time.sleep(0.001)

                sender = threading.Thread(target=send_all)
                sender.start()
                T.wait_until(lambda: len(sent_at) >= flows // 5, "the first flows to start")
                if how == "api":
                    reply = lb.ctl("reload")
                    assert reply["added"] == [f"web/{b4.ipv4}"], reply
                else:
                    lb.reload()
                    T.wait_until(lambda: lb.ctl("status")["generation"] > generation,
                                 lambda: f"the SIGHUP reload: {lb.output()[-1500:]}")
                applied = time.monotonic()
                assert b4.ipv4 in neighbours(), "published before b4's MAC was known"
                sender.join()
                answers: dict[int, str] = {}
                with selectors.DefaultSelector() as sel:
                    for i, s in enumerate(socks):
                        sel.register(s, selectors.EVENT_READ, i)
                    deadline = time.monotonic() + 5
                    while len(answers) < flows and time.monotonic() < deadline:
                        for key, _ in sel.select(0.2):
                            data, _ = key.fileobj.recvfrom(2048)
                            answers[key.data] = data.split(b" ", 1)[0].decode()
                            sel.unregister(key.fileobj)
            finally:
                for s in socks:
                    s.close()
            waited = lb.metrics().value("spillway_neighbour_waited_frames_total", worker=0)
            final = lb.stop()
        after = [i for i in range(flows) if sent_at[i] > applied]
        report = {"answered": len(answers), "started_after_the_reload": len(after),
                  "on_b4": sum(1 for b in answers.values() if b == "b4"),
                  "waited": waited, "unresolved": final.get("drop.neighbour_unresolved", 0)}
        print("reload adding b4 under new flows:", report)
        assert report["answered"] == flows and report["on_b4"] > 0 and after, report
        assert report["waited"] == 0 and report["unresolved"] == 0, (report, final)


def test_dpdk_dumpcap_captures_what_the_port_receives_and_sends():
    """DPDK's own capture tool works against a running Spillway (docs/operations.md):
    ``dpdk-dumpcap --file-prefix=PREFIX -i net_tap0`` captures the clients' UDP datagrams to
    the VIP as received and the IPIP packets to the backends as sent, in pcapng."""
    import shutil
    import subprocess
    from test_hardening import exchange

    dumpcap = shutil.which("dpdk-dumpcap")
    assert dumpcap, "dpdk-dumpcap (Debian package dpdk) is needed"
    with T.Topology(vips4=(T.VIP4,)) as t:
        cfg = make_config(t, [service(t, vips=(T.VIP4,))])
        lb = Spillway(t, cfg)
        with lb:
            lb.wait_ready(t.clients[0])
            lb.wait_neighbours()
            assert "packet capture: dpdk-dumpcap --file-prefix=" in lb.output(), lb.output()[-2000:]
            out = t.state_dir / "capture.pcapng"
            prefix = cfg["dataplane"]["eal_args"][cfg["dataplane"]["eal_args"].index("--file-prefix") + 1]
            cap = t.lb.popen([dumpcap, f"--file-prefix={prefix}", "-i", "net_tap0", "-w", str(out),
                              "-f", "udp or ip proto 4", "-a", "duration:8", "-q"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            c1 = t.client("c1")
            socks = [c1.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(10)]
            try:
                for s in socks:
                    s.bind((c1.ipv4, 0))
                # Until the capture is running: the first rounds may come before it.
                deadline = time.monotonic() + 6
                while time.monotonic() < deadline and not (out.exists() and out.stat().st_size > 2000):
                    answered = exchange(socks, "capture")
                    assert len(answered) == len(socks), answered
                    time.sleep(0.2)
            finally:
                for s in socks:
                    s.close()
            log, _ = cap.communicate(timeout=30)
            assert cap.returncode == 0, log.decode()
        packets = [p["data"] for p in pcapng.packets(out.read_bytes())]
        assert pcapng.tcpdump_count(out) == len(packets), "tcpdump -r reads the same file"
        received = [p for p in packets if p[12:14] == b"\x08\x00" and p[23] == 17
                    and socket.inet_ntoa(p[30:34]) == T.VIP4]
        sent = [p for p in packets if p[12:14] == b"\x08\x00" and p[23] == 4]
        print("captured:", len(packets), "received to the VIP:", len(received), "sent IPIP:", len(sent))
        assert received and sent, (len(packets), log.decode())
        # What was sent is what was received, encapsulated: the inner packet is the client's.
        inner = {p[34:] for p in sent}
        assert any(r[14:] in inner for r in received), "an encapsulated copy of a received datagram"
        assert all(socket.inet_ntoa(p[30:34]) in {b.ipv4 for b in t.backends} for p in sent)
