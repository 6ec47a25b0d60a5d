#!/usr/bin/env python3
"""Seed corpora for the fuzz targets, and expected frames for the builder tests.

`parse` and `path`: frames written here. `config`: the repository's configurations
(configs/, the simulator tests' configs), beside the hand-written `fleet_sync.yaml`, which this
script leaves alone. `scenario`: the simulator tests' scenarios. `api`: requests to the admin
API (method byte, target line, body). `sync`: a mode byte, then a datagram, a kind and payload
to seal, a table file, or entry records (fuzz_targets/sync.rs).

Plain `struct`, no scapy: every header and checksum here is written independently of the
Rust code under test.

    python3 fuzz/make_corpus.py            # (re)write fuzz/corpus/parse/*
    python3 fuzz/make_corpus.py --expect   # print the Rust constants used by
                                           # shared/tests/wire_build.rs
"""
import os
import struct
import sys

# ---------------------------------------------------------------- helpers


def csum(data: bytes) -> int:
    """RFC 1071 checksum (complemented)."""
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def mac(s: str) -> bytes:
    return bytes(int(x, 16) for x in s.split(":"))


def ip4(s: str) -> bytes:
    return bytes(int(x) for x in s.split("."))


def ip6(s: str) -> bytes:
    import ipaddress
    return ipaddress.IPv6Address(s).packed


CLIENT_MAC, LB_MAC, ROUTER_MAC = mac("02:00:00:00:0c:01"), mac("02:00:00:00:1b:01"), mac("02:00:00:00:0a:01")
CLIENT4, VIP4, LB4, BACKEND4 = ip4("203.0.113.9"), ip4("198.51.100.10"), ip4("192.0.2.1"), ip4("10.1.0.7")
CLIENT6, VIP6, LB6, BACKEND6 = ip6("2001:db8:c::9"), ip6("2001:db8:100::10"), ip6("2001:db8:2::1"), ip6("fd00:1::7")


def eth(dst: bytes, src: bytes, ethertype: int, payload: bytes, vlans=()) -> bytes:
    tags = b"".join(struct.pack("!HH", tpid, tci) for tpid, tci in vlans)
    return dst + src + tags + struct.pack("!H", ethertype) + payload


def ipv4(src, dst, proto, payload, ttl=64, ident=0x1c46, df=True, mf=False, offset=0,
         tos=0, options=b"", total=None, ihl=None):
    hl = 20 + len(options)
    assert hl % 4 == 0
    flags = (0x4000 if df else 0) | (0x2000 if mf else 0) | offset
    tl = hl + len(payload) if total is None else total
    h = struct.pack("!BBHHHBBH4s4s", 0x40 | ((ihl if ihl is not None else hl // 4) & 0xF),
                    tos, tl, ident, flags, ttl, proto, 0, src, dst) + options
    h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
    return h + payload


def ipv6(src, dst, nh, payload, hlim=64, tc=0, flow=0, plen=None):
    return struct.pack("!IHBB16s16s", (6 << 28) | (tc << 20) | flow,
                       len(payload) if plen is None else plen, nh, hlim, src, dst) + payload


def pseudo(src, dst, proto, length):
    if len(src) == 4:
        return src + dst + struct.pack("!BBH", 0, proto, length)
    return src + dst + struct.pack("!IxxxB", length, proto)


def tcp(src, dst, sport, dport, flags=0x02, seq=1, ack=0, options=b"", data=b"", doff=None):
    hl = 20 + len(options)
    h = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, ((doff or hl // 4) << 4), flags,
                    64240, 0, 0) + options
    c = csum(pseudo(src, dst, 6, len(h) + len(data)) + h + data)
    return h[:16] + struct.pack("!H", c) + h[18:] + data


def udp(src, dst, sport, dport, data, zero_csum=False, length=None):
    ln = 8 + len(data) if length is None else length
    h = struct.pack("!HHHH", sport, dport, ln, 0)
    c = 0 if zero_csum else (csum(pseudo(src, dst, 17, 8 + len(data)) + h + data) or 0xFFFF)
    return h[:6] + struct.pack("!H", c) + data


def icmp(typ, code, rest, data):
    m = struct.pack("!BBH", typ, code, 0) + rest + data
    return m[:2] + struct.pack("!H", csum(m)) + m[4:]


def icmp6(src, dst, typ, code, rest, data):
    m = struct.pack("!BBH", typ, code, 0) + rest + data
    c = csum(pseudo(src, dst, 58, len(m)) + m)
    return m[:2] + struct.pack("!H", c) + m[4:]


def arp(op, sha, spa, tha, tpa):
    return struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, op, sha, spa, tha, tpa)


def pad60(frame):
    return frame + b"\0" * max(0, 60 - len(frame))


DNS_QUERY = struct.pack("!HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + b"\x07example\x03com\x00" + \
    struct.pack("!HH", 1, 1)
SYN_OPTS = bytes.fromhex("020405b40402080a0000000100000000" "01030307")

# ---------------------------------------------------------------- corpus


def corpus():
    c = {}
    syn4 = ipv4(CLIENT4, VIP4, 6, tcp(CLIENT4, VIP4, 40000, 80, options=SYN_OPTS))
    syn6 = ipv6(CLIENT6, VIP6, 6, tcp(CLIENT6, VIP6, 40000, 80, options=SYN_OPTS))
    c["eth_ipv4_tcp_syn"] = eth(LB_MAC, ROUTER_MAC, 0x0800, syn4)
    c["eth_ipv6_tcp_syn"] = eth(LB_MAC, ROUTER_MAC, 0x86DD, syn6)
    c["eth_ipv4_tcp_ack_padded"] = pad60(eth(LB_MAC, ROUTER_MAC, 0x0800, ipv4(
        CLIENT4, VIP4, 6, tcp(CLIENT4, VIP4, 40000, 80, flags=0x10, seq=2, ack=99)))) + b"\0" * 0
    c["eth_ipv4_udp_dns"] = eth(LB_MAC, ROUTER_MAC, 0x0800,
                                ipv4(CLIENT4, VIP4, 17, udp(CLIENT4, VIP4, 53000, 53, DNS_QUERY)))
    c["eth_ipv6_udp_dns"] = eth(LB_MAC, ROUTER_MAC, 0x86DD,
                                ipv6(CLIENT6, VIP6, 17, udp(CLIENT6, VIP6, 53000, 53, DNS_QUERY)))
    c["vlan_ipv4_tcp_syn"] = eth(LB_MAC, ROUTER_MAC, 0x0800, syn4, vlans=[(0x8100, 100)])
    c["qinq_ipv6_tcp_syn"] = eth(LB_MAC, ROUTER_MAC, 0x86DD, syn6,
                                 vlans=[(0x88A8, 0x2007), (0x8100, 100)])
    c["arp_request"] = pad60(eth(b"\xff" * 6, ROUTER_MAC, 0x0806,
                                 arp(1, ROUTER_MAC, ip4("192.0.2.254"), b"\0" * 6, VIP4)))
    c["vlan_arp_request"] = pad60(eth(b"\xff" * 6, ROUTER_MAC, 0x0806,
                                      arp(1, ROUTER_MAC, ip4("192.0.2.254"), b"\0" * 6, LB4),
                                      vlans=[(0x8100, 7)]))
    echo = icmp(8, 0, struct.pack("!HH", 0x77, 1), bytes(range(56)))
    c["icmp_echo_request"] = eth(LB_MAC, ROUTER_MAC, 0x0800, ipv4(CLIENT4, VIP4, 1, echo))
    rr = bytes([7, 11, 4]) + b"\0" * 8 + b"\0"  # record route, 2 slots, EOL
    c["ipv4_options_icmp_echo"] = eth(LB_MAC, ROUTER_MAC, 0x0800,
                                      ipv4(CLIENT4, VIP4, 1, echo, options=rr))
    # A 2000-byte UDP datagram in two fragments.
    dgram = udp(CLIENT4, VIP4, 53000, 53, b"q" * 1992)
    c["ipv4_frag_first"] = eth(LB_MAC, ROUTER_MAC, 0x0800,
                               ipv4(CLIENT4, VIP4, 17, dgram[:1480], df=False, mf=True, ident=7))
    c["ipv4_frag_last"] = eth(LB_MAC, ROUTER_MAC, 0x0800,
                              ipv4(CLIENT4, VIP4, 17, dgram[1480:], df=False, offset=185, ident=7))
    echo6 = icmp6(CLIENT6, VIP6, 128, 0, struct.pack("!HH", 0x77, 1), bytes(range(56)))
    c["icmpv6_echo_request"] = eth(LB_MAC, ROUTER_MAC, 0x86DD, ipv6(CLIENT6, VIP6, 58, echo6))
    # IPv6: hop-by-hop (PadN) + destination options + Fragment + UDP, first and last fragment.
    d6 = udp(CLIENT6, VIP6, 53000, 53, b"r" * 1992)
    hbh = bytes([60, 0, 1, 4, 0, 0, 0, 0])
    dst = bytes([44, 0, 1, 4, 0, 0, 0, 0])
    frag0 = struct.pack("!BBHI", 17, 0, (0 << 3) | 1, 0xABCD)
    frag1 = struct.pack("!BBHI", 17, 0, (1448 // 8) << 3, 0xABCD)
    c["ipv6_hbh_dst_frag_first"] = eth(LB_MAC, ROUTER_MAC, 0x86DD,
                                       ipv6(CLIENT6, VIP6, 0, hbh + dst + frag0 + d6[:1448]))
    c["ipv6_hbh_dst_frag_last"] = eth(LB_MAC, ROUTER_MAC, 0x86DD,
                                      ipv6(CLIENT6, VIP6, 0, hbh + dst + frag1 + d6[1448:]))
    # ICMP frag-needed from a router, quoting a TCP segment VIP:80 -> client:40000 (DSR reply).
    reply = ipv4(VIP4, CLIENT4, 6, tcp(VIP4, CLIENT4, 80, 40000, flags=0x10, data=b"h" * 1400))
    c["icmp_frag_needed_tcp"] = eth(LB_MAC, ROUTER_MAC, 0x0800, ipv4(
        ip4("198.18.0.1"), VIP4, 1, icmp(3, 4, struct.pack("!HH", 0, 1400), reply[:548]),
        tos=0xC0, df=False))
    c["icmp_time_exceeded_udp"] = eth(LB_MAC, ROUTER_MAC, 0x0800, ipv4(
        ip4("198.18.0.1"), VIP4, 1, icmp(11, 0, b"\0" * 4, ipv4(VIP4, CLIENT4, 17, udp(
            VIP4, CLIENT4, 53, 53000, DNS_QUERY))[:28])))
    reply6 = ipv6(VIP6, CLIENT6, 6, tcp(VIP6, CLIENT6, 80, 40000, flags=0x10, data=b"h" * 1400))
    c["icmpv6_packet_too_big_tcp"] = eth(LB_MAC, ROUTER_MAC, 0x86DD, ipv6(
        ip6("2001:db8:ffff::1"), VIP6, 58,
        icmp6(ip6("2001:db8:ffff::1"), VIP6, 2, 0, struct.pack("!I", 1280), reply6[:1232])))
    lla = lambda t, m: bytes([t, 1]) + m  # noqa: E731
    c["ndp_neighbor_solicitation"] = eth(b"\x33\x33\xff" + LB6[13:], ROUTER_MAC, 0x86DD, ipv6(
        ip6("fe80::1"), ip6("ff02::1:ff00:1") , 58,
        icmp6(ip6("fe80::1"), ip6("ff02::1:ff00:1"), 135, 0, b"\0" * 4, LB6 + lla(1, ROUTER_MAC)),
        hlim=255))
    c["ndp_neighbor_advertisement"] = eth(LB_MAC, ROUTER_MAC, 0x86DD, ipv6(
        ip6("fe80::1"), LB6, 58,
        icmp6(ip6("fe80::1"), LB6, 136, 0, bytes([0x60, 0, 0, 0]), ip6("fe80::1") + lla(2, ROUTER_MAC)),
        hlim=255))
    c["lldp"] = pad60(eth(mac("01:80:c2:00:00:0e"), ROUTER_MAC, 0x88CC, bytes.fromhex(
        "020704020000000a01040305657468300602007800000000")))
    c["ipip_outer"] = eth(LB_MAC, ROUTER_MAC, 0x0800, ipv4(LB4, BACKEND4, 4, syn4))
    gue = udp(LB6, BACKEND6, 0xC123, 6080, syn4)
    c["gue_v6_outer"] = eth(LB_MAC, ROUTER_MAC, 0x86DD, ipv6(LB6, BACKEND6, 17, gue))
    return c


# ---------------------------------------------------------------- builder expectations


def rust_const(name, doc, b):
    h = b.hex()
    lines = [h[i:i + 88] for i in range(0, len(h), 88)]
    body = "".join(f'    "{ln}",\n' for ln in lines)
    return f"/// {doc}\nconst {name}: &str = concat!(\n{body});\n"


def expect():
    """Frames the builders must produce for the inputs in wire_build.rs."""
    out = []
    src4, dst4 = ip4("192.0.2.1"), ip4("10.1.0.7")
    src6, dst6 = ip6("2001:db8:2::1"), ip6("fd00:1::7")
    smac, dmac = mac("02:00:00:00:1b:01"), mac("02:00:00:00:be:01")
    inner4 = ipv4(CLIENT4, VIP4, 6, tcp(CLIENT4, VIP4, 40000, 80, options=SYN_OPTS), tos=0x2E)
    inner6 = ipv6(CLIENT6, VIP6, 6, tcp(CLIENT6, VIP6, 40000, 80, options=SYN_OPTS), tc=0xB8)
    h = 0x1234_5678_9ABC_DEF0
    sport = 0xC000 | (h & 0x3FFF)
    label = ((h ^ (h >> 32)) & 0xFFFFF)
    out.append(rust_const("INNER_V4", "Inner IPv4 TCP SYN, DSCP/ECN 0x2e.", inner4))
    out.append(rust_const("INNER_V6", "Inner IPv6 TCP SYN, traffic class 0xb8.", inner6))
    out.append(rust_const("EXPECT_IPIP_V4", "IPIP: outer IPv4 (DF, id 0, TTL 64, proto 4) + inner.",
                          eth(dmac, smac, 0x0800, ipv4(src4, dst4, 4, inner4, ident=0, tos=0x2E))))
    out.append(rust_const("EXPECT_GUE_V4_6IN4", "GUE over IPv4, IPv6 inner: UDP checksum 0.",
                          eth(dmac, smac, 0x0800, ipv4(src4, dst4, 17, udp(
                              src4, dst4, sport, 6080, inner6, zero_csum=True), ident=0, tos=0xB8))))
    out.append(rust_const("EXPECT_IPIP_V6_4IN6", "IPIP over IPv6 (next header 4), flow label from hash.",
                          eth(dmac, smac, 0x86DD, ipv6(src6, dst6, 4, inner4, tc=0x2E, flow=label))))
    out.append(rust_const("EXPECT_GUE_V6", "GUE over IPv6, IPv4 inner: full UDP checksum.",
                          eth(dmac, smac, 0x86DD, ipv6(src6, dst6, 17, udp(
                              src6, dst6, sport, 6080, inner4), tc=0x2E, flow=label))))
    # Neighbour advertisement answering the captured NS (fd09:1::2 asks for fd09:1::1).
    na = icmp6(ip6("fd09:1::1"), ip6("fd09:1::2"), 136, 0, bytes([0x60, 0, 0, 0]),
               ip6("fd09:1::1") + bytes([2, 1]) + mac("02:00:00:00:0a:01"))
    out.append(rust_const("EXPECT_NA", "NA fd09:1::1 -> fd09:1::2, S|O, TLLA 02:00:00:00:0a:01.",
                          eth(mac("02:00:00:00:0c:01"), mac("02:00:00:00:0a:01"), 0x86DD, ipv6(
                              ip6("fd09:1::1"), ip6("fd09:1::2"), 58, na, hlim=255))))
    return "\n".join(out)


def captured(path):
    """The real frames captured from Linux (hex constants of the Rust test fixtures)."""
    import re
    out = {}
    try:
        text = open(path).read()
    except OSError:
        return out
    for m in re.finditer(r'pub const (\w+): &str = (?:concat!\((.*?)\)|"([0-9a-f]*)");', text, re.S):
        hexes = re.findall(r'"([^"]*)"', m.group(2)) if m.group(2) else [m.group(3)]
        out["captured_" + m.group(1).lower()] = unhex("".join(hexes))
    return out


def unhex(s):
    """The fixtures' hex, whose long runs are written (xx*n): n bytes xx, and (xx+n): n bytes
    counting up from xx."""
    import re
    out, pos = bytearray(), 0
    for m in re.finditer(r"\((\w\w)([*+])(\d+)\)", s):
        out += bytes.fromhex(s[pos:m.start()])
        first, step = int(m.group(1), 16), m.group(2) == "+"
        out += bytes((first + i * step) % 256 for i in range(int(m.group(3))))
        pos = m.end()
    return bytes(out + bytes.fromhex(s[pos:]))


def main():
    if "--expect" in sys.argv:
        print(expect())
        return
    here = os.path.dirname(os.path.abspath(__file__))
    d = os.path.join(here, "corpus", "parse")
    os.makedirs(d, exist_ok=True)
    frames = corpus()
    frames.update(captured(os.path.join(here, "..", "shared", "tests", "wire_fixtures.rs")))
    for name, frame in sorted(frames.items()):
        with open(os.path.join(d, name), "wb") as f:
            f.write(frame)
    print(f"wrote {len(frames)} frames to {d}")
    # The `path` target reads a burst: a byte whose bits mark frames as shared buffers, then
    # frames each preceded by a 2-byte big-endian length. One input per frame, one with every
    # frame as a burst, and the same burst with every other frame shared.
    d = os.path.join(here, "corpus", "path")
    os.makedirs(d, exist_ok=True)

    def burst(shared, fs):
        return bytes([shared]) + b"".join(struct.pack("!H", len(f)) + f for f in fs)

    items = sorted(frames.items())
    inputs = {name: burst(0, [frame]) for name, frame in items}
    inputs["burst_all"] = burst(0, [f for _, f in items][:32])
    inputs["burst_shared"] = burst(0x55, [f for _, f in items][:32])
    for name, data in inputs.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(inputs)} bursts to {d}")
    text_corpora(here)
    quic_corpus(here)


def text_corpora(here):
    """`config` and `scenario`: copies of the repository's YAML files; `api`: requests."""
    import glob
    import shutil
    root = os.path.join(here, "..")
    sources = {
        "config": sorted(glob.glob(os.path.join(root, "configs", "*.yaml")))
        + sorted(glob.glob(os.path.join(root, "control", "tests", "scenarios", "configs", "*.yaml"))),
        "scenario": sorted(glob.glob(os.path.join(root, "control", "tests", "scenarios", "*.yaml"))),
    }
    for target, files in sources.items():
        d = os.path.join(here, "corpus", target)
        os.makedirs(d, exist_ok=True)
        for f in files:
            name = os.path.relpath(f, root).replace(os.sep, "_")
            shutil.copyfile(f, os.path.join(d, name))
        print(f"wrote {len(files)} files to {d}")
    # The api target: method index (0 GET, 1 POST, 2 PUT, 3 DELETE, 4 HEAD), target, body.
    requests = {
        "status": (0, "/v1/status", b""),
        "services": (0, "/v1/services", b""),
        "backends": (0, "/v1/backends?service=web", b""),
        "health": (1, "/v1/backends/10.0.1.1/health", b'{"health":"unhealthy","service":"web"}'),
        "health_auto": (1, "/v1/backends/10.0.1.1/health", b'{"health":"auto"}'),
        "drain": (1, "/v1/backends/10.0.1.2/drain", b'{"service":"web"}'),
        "undrain": (1, "/v1/backends/10.0.1.2/undrain", b""),
        "reload": (1, "/v1/reload", b""),
        "neighbours": (0, "/v1/neighbours", b""),
        "conntrack": (0, "/v1/conntrack", b""),
        "lookup": (0, "/v1/conntrack/lookup?src=192.0.2.7&dst=198.51.100.10&proto=tcp&sport=40000&dport=80", b""),
        "explain": (0, "/v1/explain?src=192.0.2.7&dst=198.51.100.10&proto=tcp&sport=40000&dport=80&syn=true", b""),
        "explain6": (0, "/v1/explain?src=2001:db8::7&dst=2001:db8::10&proto=udp&sport=5000&dport=53", b""),
        "metrics": (0, "/metrics", b""),
        "bad_json": (1, "/v1/backends/10.0.1.1/health", b'{"health":'),
        "bad_addr": (1, "/v1/backends/..%2F..%2Fetc/drain", b""),
        "unknown": (2, "/v1/nothing?x=1", b"x"),
    }
    d = os.path.join(here, "corpus", "api")
    os.makedirs(d, exist_ok=True)
    for name, (method, target, body) in requests.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(bytes([method]) + target.encode() + b"\n" + body)
    print(f"wrote {len(requests)} requests to {d}")
    sync_corpus(here)


def sync_entry(src, dst, sport, dport, proto, kind, service, backend, port, idle_ms, flags):
    """One 69-byte record of spillway_control::sync::SyncedEntry (big-endian)."""
    def v4(a):
        return bytes(10) + b"\xff\xff" + ip4(a)
    return (v4(src) + (v4(dst) if dst else bytes(16)) + struct.pack("!HHBBQ", sport, dport, proto, kind, service)
            + v4(backend) + struct.pack("!HIB", port, idle_ms, flags))


def sync_corpus(here):
    """The `sync` target: mode 0 a datagram as received, 1 a kind and payload the target seals
    (then flips the byte the next one points at), 2 a table file, 3 records to encode."""
    five = sync_entry("203.0.113.9", "198.51.100.10", 40000, 443, 6, 5, 0x1122334455667788, "10.1.0.7", 0, 1500, 0)
    udp = sync_entry("203.0.113.9", "198.51.100.10", 5000, 53, 17, 5, 0x1122334455667788, "10.1.0.8", 53, 0, 1)
    one = sync_entry("203.0.113.9", None, 0, 0, 0, 1, 0x99, "10.1.0.9", 0, 0xFFFFFFFF, 0)
    bad = sync_entry("203.0.113.9", "198.51.100.10", 1, 2, 1, 5, 0x99, "10.1.0.9", 0, 0, 0)
    # Version 2: magic, version, kind, sender, recipient, key id, epoch, sequence, salt.
    header = b"SPSY" + struct.pack("!BBHHIQQI", 2, 7, 2, 1, 0, 1765000000000, 1, 0x5a5a5a5a)
    inputs = {
        "wire_hello": b"\x00" + header + struct.pack("!QBQQQ", 42, 1, 9, 0, 0) + bytes(16),
        "wire_short": b"\x00SPSY",
        "sealed_entries": b"\x01\x01\x80" + struct.pack("!H", 3) + five + udp + one,
        "sealed_remove": b"\x01\x02\x10" + struct.pack("!H", 1) + five,
        "sealed_bulk_request": b"\x01\x03\x00" + struct.pack("!QHH", 7, 0, 0xFFFF),
        "sealed_answer": b"\x01\x04\x20" + struct.pack("!QHHH", 7, 0, 1, 2) + five + udp,
        "sealed_answer_end": b"\x01\x05\xff" + struct.pack("!QHHHQ", 7, 0, 1, 2, 1000000),
        "sealed_bulk_ack": b"\x01\x06\x30" + struct.pack("!QQ", 7, 64),
        "sealed_hello": b"\x01\x07\x40" + struct.pack("!QBQQQ", 0x5350, 1, 9, 0xc0ffee00, 0),
        "table": b"\x02SPTB" + struct.pack("!HQQQ", 1, 0x53505442, 1765000000000, 2) + five + udp + bytes(8),
        "records": b"\x03" + five + bad + udp + one,
    }
    write_inputs(here, "sync", inputs)


def write_inputs(here, target, inputs):
    """Write each named input to fuzz/corpus/TARGET/NAME."""
    d = os.path.join(here, "corpus", target)
    os.makedirs(d, exist_ok=True)
    for name, data in inputs.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(inputs)} inputs to {d}")


def quic_corpus(here):
    """The `quic` target: a shape octet (the configurations' lengths), a 16-octet key, then a
    UDP payload: short headers carrying the QUIC-LB draft's appendix connection IDs, a long
    header (an Initial), an unroutable ID and truncated ones."""
    key = unhex("8f95f09245765f80256934e50c66207f")
    cids = ["0720b1d07b359d3c", "2fcc381bc74cb4fbad2823a3d1f8fed2", "504dd2d05a7b0de9b2b9907afb5ecf8cc3",
            "725779c9cc86beb3a3a4a3ca96fce4bfe0cdbc", "07c4605e4504cc4f", "2a350d28b42003487d970b"]
    inputs = {f"short_{i}": bytes([0x21 * i]) + key + b"\x41" + unhex(c) + b"payload" for i, c in enumerate(cids)}
    inputs["initial"] = b"\x00" + key + b"\xc3\x00\x00\x00\x01\x08" + unhex("0720b1d07b359d3c") + b"\x04abcd\x00"
    inputs["unroutable"] = b"\x07" + key + b"\x41\xe7" + bytes(18)
    inputs["short_truncated"] = b"\x10" + key + b"\x41\x07\x20"
    inputs["long_truncated"] = b"\x10" + key + b"\xc3\x00\x00\x00\x01\x14\x07"
    write_inputs(here, "quic", inputs)


if __name__ == "__main__":
    main()
