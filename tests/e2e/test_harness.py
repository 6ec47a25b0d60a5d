"""Tests of the e2e harness itself (topo.py, decap.py, backend_server.py), no balancer.

The lb namespace stands in for the balancer: it crafts encapsulated packets
(outer source = the node address 198.18.0.2 / fd00::2, put on br0 for these
tests only) whose inner packet goes client -> VIP; the backend decapsulates
and must answer the client directly from the VIP.
"""

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

import topo as T


@pytest.fixture(scope="module")
def topo():
    with T.Topology() as t:
        # No DPDK here: the kernel holds the node address so that it can be the outer source.
        t.lb.add_address(f"{T.LB_NODE_V4}/16")
        t.lb.add_address(f"{T.LB_NODE_V6}/64")
        yield t


def client_udp(client, v6=False):
    fam = socket.AF_INET6 if v6 else socket.AF_INET
    s = client.socket(fam, socket.SOCK_DGRAM)
    s.bind((client.ipv6 if v6 else client.ipv4, 0))
    s.settimeout(3)
    return s


def expect_reply(backend, payload):
    return f"{backend.short} len={len(payload)} sha256={hashlib.sha256(payload).hexdigest()}".encode()


def test_layout(topo):
    p = topo.prefix
    assert len(p) == 6 and p.startswith("sw")
    names = set(T.netns_list())
    assert {f"{p}-lb", f"{p}-c1", f"{p}-c2", f"{p}-b1", f"{p}-b2", f"{p}-b3", f"{p}-b4"} <= names
    assert [(b.short, b.zone.name, b.ipv4, b.ipv6) for b in topo.backends] == [
        ("b1", "a", "198.18.1.1", "fd00::1:1"),
        ("b2", "a", "198.18.1.2", "fd00::1:2"),
        ("b3", "b", "198.18.2.1", "fd00::2:1"),
        ("b4", "b", "198.18.2.2", "fd00::2:2"),
    ]
    assert [(c.short, c.zone.name, c.ipv4, c.ipv6) for c in topo.clients] == [
        ("c1", "a", "198.18.10.1", "fd00::10:1"),
        ("c2", "b", "198.18.20.1", "fd00::20:1"),
    ]
    assert topo.zones[1].client_net4 == "198.18.20.0/24" and topo.zones[0].backend_net6 == "fd00::1:0/112"
    for h in topo.hosts:
        assert len(h.bridge_port) <= 15
        master = json.loads(topo.lb.ip("-j", "link", "show", "dev", h.bridge_port).stdout)[0]["master"]
        assert master == "br0"
    b1 = topo.backend("b1")
    lo = b1.ip("addr", "show", "dev", "lo").stdout
    assert "198.18.0.100/32" in lo and "fd00::100/128" in lo
    assert b1.run(["sysctl", "-n", "net.ipv4.conf.all.arp_ignore"]).stdout.strip() == "1"
    assert b1.run(["sysctl", "-n", "net.ipv4.conf.all.arp_announce"]).stdout.strip() == "2"
    assert b1.link_exists("tun0")
    c1 = topo.client("c1")
    for dst in ("198.18.0.1", "fd00::1", "198.18.2.2", "fd00::2:2"):
        c1.run(["ping", "-c1", "-W2", dst])


def test_nobody_answers_arp_nd_for_the_vip(topo):
    """Without a balancer no one may resolve the VIP: backends hold it on lo only."""
    c2 = topo.client("c2")
    with c2.socket(socket.AF_INET) as s4, c2.socket(socket.AF_INET6) as s6:
        s4.sendto(b"x", (T.VIP4, 9))
        s6.sendto(b"x", (T.VIP6, 9))
        # A window in which nothing may answer (an answer that never comes cannot be waited
        # for): longer than the 1 s between the kernel's ARP / ND retries.
        time.sleep(1.2)
    for v in (T.VIP4, T.VIP6):
        neigh = json.loads(c2.ip("-j", "neigh", "show", "to", v).stdout)
        assert all("lladdr" not in n for n in neigh), neigh


@pytest.mark.parametrize(
    "kind,bname,v6",
    [("ipip", "b1", False), ("gue4", "b2", False), ("ip6ip6", "b3", True), ("gue6", "b4", True), ("ip4in6", "b4", False)],
)
def test_encapsulated_udp_answered_from_vip(topo, kind, bname, v6):
    b, c = topo.backend(bname), topo.client("c1")
    vip = T.VIP6 if v6 else T.VIP4
    before = topo.decap_stats(b)
    payload = f"hello via {kind}".encode() * 7
    with client_udp(c, v6) as s:
        cip, cport = s.getsockname()[:2]
        l4 = T.udp(cip, vip, cport, T.UDP_PORT, payload)
        inner = T.ipv6(cip, vip, 17, l4) if v6 else T.ipv4(cip, vip, 17, l4)
        outer_src = T.LB_NODE_V6 if kind in ("ip6ip6", "ip4in6", "gue6") else T.LB_NODE_V4
        topo.send_encap(kind, b, inner, outer_src=outer_src)
        data, src = s.recvfrom(2048)
    assert src[:2] == (vip, T.UDP_PORT)
    assert data == expect_reply(b, payload)
    after = topo.wait_decap(b, {kind: before[kind] + 1, "written": before["written"] + 1})
    assert after["junk"] == before["junk"]


def test_fragmented_inner_datagram_reassembled(topo):
    b, c = topo.backend("b2"), topo.client("c2")
    before = topo.decap_stats(b)
    payload = os.urandom(4000)
    with client_udp(c) as s:
        cip, cport = s.getsockname()
        frags = T.fragment_ipv4(cip, T.VIP4, 17, T.udp(cip, T.VIP4, cport, T.UDP_PORT, payload), size=1400)
        assert len(frags) == 3 and all(len(f) + 20 <= 1500 for f in frags)
        topo.send_encap("ipip", b, frags, outer_src=T.LB_NODE_V4)
        data, src = s.recvfrom(2048)
    assert src == (T.VIP4, T.UDP_PORT)
    assert data == expect_reply(b, payload)
    topo.wait_decap(b, {"ipip": before["ipip"] + 3, "inner_fragments": before["inner_fragments"] + 3})


def test_ipip_tcp_syn_gets_synack_from_vip(topo):
    b, c = topo.backend("b4"), topo.client("c1")
    cport, seq = 40123, 123456
    with c.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP) as cap:
        cap.settimeout(0.5)
        syn = T.ipv4(c.ipv4, T.VIP4, 6, T.tcp(c.ipv4, T.VIP4, cport, T.HTTP_PORT, T.TCP_SYN, seq=seq))
        topo.send_encap("ipip", b, syn, outer_src=T.LB_NODE_V4)
        deadline = time.monotonic() + 3
        got = None
        while got is None and time.monotonic() < deadline:
            try:
                t = T.parse_tcp4(cap.recv(4096))
            except socket.timeout:
                continue
            if t and (t.src, t.sport, t.dst, t.dport) == (T.VIP4, T.HTTP_PORT, c.ipv4, cport):
                got = t
    assert got is not None, "no SYN-ACK from the VIP at the client"
    assert got.flags & (T.TCP_SYN | T.TCP_ACK) == T.TCP_SYN | T.TCP_ACK
    assert got.ack == seq + 1
    topo.wait_decap(b, {"ipip": 1, "inner_tcp": 1})


def test_junk_is_counted_not_written(topo):
    b = topo.backend("b3")
    before = topo.decap_stats(b)
    topo.send_encap("ipip", b, b"\x00not an ip packet at all", outer_src=T.LB_NODE_V4)
    topo.send_encap("gue4", b, b"\xff" * 30, outer_src=T.LB_NODE_V4)
    after = topo.wait_decap(b, {"junk": before["junk"] + 2})
    assert after["written"] == before["written"]


def http_get(client, addr, path="/"):
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    with client.socket(fam, socket.SOCK_STREAM) as s:
        s.settimeout(3)
        s.connect((addr, T.HTTP_PORT))
        s.sendall(f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
        buf = b""
        while chunk := s.recv(65536):
            buf += chunk
        return s.getsockname()[:2], buf.split(b"\r\n\r\n", 1)[1].decode()


def test_echo_port_answers_every_line_on_one_connection(topo):
    c, b = topo.client("c1"), topo.backend("b2")
    for addr, fam in ((b.ipv4, socket.AF_INET), (b.ipv6, socket.AF_INET6)):
        with c.socket(fam, socket.SOCK_STREAM) as s:
            s.settimeout(3)
            s.connect((addr, T.ECHO_PORT))
            f = s.makefile("rwb", buffering=0)
            for i in range(3):
                s.sendall(f"hello {i}\n".encode())
                assert f.readline() == f"b2 hello {i}\n".encode()


def test_http_and_server_stop_start(topo):
    c = topo.client("c2")
    b = topo.backend("b3")
    (cip, cport), body = http_get(c, b.ipv4)
    assert body == f"b3 {cip}:{cport}\n"
    (cip, cport), body = http_get(c, b.ipv6)
    assert body == f"b3 {cip}:{cport}\n" and cip == c.ipv6
    _, body = http_get(c, b.ipv4, "/bytes/3000")
    assert len(body) == 3000 and body.startswith("b3 ")
    topo.stop_server(b)
    assert not topo.server_running(b)
    with pytest.raises(ConnectionRefusedError):
        http_get(c, b.ipv4)
    topo.start_server(b)
    assert topo.server_running(b)
    assert http_get(c, b.ipv4)[1].startswith("b3 ")


def test_attach_when_present(topo):
    name = f"{topo.prefix}-tap"
    threading.Timer(0.3, lambda: topo.lb.ip("tuntap", "add", "dev", name, "mode", "tap")).start()
    topo.lb.attach_when_present(name, timeout=5)
    link = json.loads(topo.lb.ip("-j", "link", "show", "dev", name).stdout)[0]
    assert link["master"] == "br0" and "UP" in link["flags"]
    with pytest.raises(TimeoutError):
        topo.lb.attach_when_present("nosuchif0", timeout=0.2)


def test_close_removes_everything():
    t = T.Topology(zones=("a",), backends_per_zone=1, clients_per_zone=1)
    prefix, state = t.prefix, t.state_dir
    pids = [p.pid for p in t._procs]
    assert len(pids) == 2 and any(n.startswith(prefix + "-") for n in T.netns_list())
    t.close()
    t.close()  # idempotent
    assert not [n for n in T.netns_list() if n.startswith(prefix + "-")]
    assert not state.exists()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


# A process that builds a small topology, prints its prefix and its processes' pids, and
# waits to be signalled. On its first `ip netns del` it sends itself a second SIGTERM: the
# second signal that Ctrl-C twice, or `timeout` forwarding the SIGTERM its child also got,
# delivers while the first signal's cleanup runs.
_SIGNALLED_TWICE = """
import json, os, signal, sys, time
sys.path.insert(0, sys.argv[1])
import topo as T
t = T.Topology(zones=("a",), backends_per_zone=1, clients_per_zone=1)
sh, sent = T._sh, []
def second_signal_during_cleanup(cmd, *a, **kw):
    if cmd[:3] == ["ip", "netns", "del"] and not sent:
        sent.append(1)
        os.kill(os.getpid(), signal.SIGTERM)
    return sh(cmd, *a, **kw)
T._sh = second_signal_during_cleanup
print(json.dumps({"prefix": t.prefix, "pids": [p.pid for p in t._procs]}), flush=True)
time.sleep(60)
"""


def test_a_second_signal_during_cleanup_does_not_leave_namespaces_behind():
    child = subprocess.Popen([sys.executable, "-c", _SIGNALLED_TWICE, os.path.dirname(T.__file__)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    prefix = None
    try:
        started = json.loads(child.stdout.readline())
        prefix, pids = started["prefix"], started["pids"]
        assert len(pids) == 2 and any(n.startswith(prefix + "-") for n in T.netns_list())
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=30) == 128 + signal.SIGTERM, child.stderr.read()
        left = [n for n in T.netns_list() if n.startswith(prefix + "-")]
        assert not left, f"namespaces left behind: {left}"
        for pid in pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if prefix:  # whatever the outcome, nothing of the child's stays (its owner is gone)
            T.cleanup_stale()


def test_jumbo_fabric_for_large_encapsulated_frames():
    """fabric_mtu=9000: an unfragmented 1500-byte inner packet plus the outer header
    crosses br0 to the backend; clients stay at 1500 and the backend's route to
    the client subnets has MTU 1500."""
    with T.Topology(zones=("a",), backends_per_zone=1, clients_per_zone=1, fabric_mtu=9000) as t:
        b, c = t.backend("b1"), t.client("c1")
        assert json.loads(t.lb.ip("-j", "link", "show", "dev", "br0").stdout)[0]["mtu"] == 9000
        assert json.loads(b.ip("-j", "link", "show", "dev", "eth0").stdout)[0]["mtu"] == 9000
        assert json.loads(c.ip("-j", "link", "show", "dev", "eth0").stdout)[0]["mtu"] == 1500
        assert "mtu 1500" in b.ip("route", "get", c.ipv4).stdout
        payload = os.urandom(1472)  # inner packet of exactly 1500 bytes, outer 1520
        with client_udp(c) as s:
            cip, cport = s.getsockname()
            inner = T.ipv4(cip, T.VIP4, 17, T.udp(cip, T.VIP4, cport, T.UDP_PORT, payload), df=True)
            assert len(inner) == 1500
            t.send_encap("ipip", b, inner)
            data, src = s.recvfrom(2048)
        assert src == (T.VIP4, T.UDP_PORT) and data == expect_reply(b, payload)
        assert t.decap_stats(b)["inner_fragments"] == 0
        _, body = http_get(c, b.ipv4, "/bytes/20000")  # long reply over the 1500 route MTU
        assert len(body) == 20000


def test_quic_lb_generator_reproduces_the_drafts_vectors():
    """quiclb.py, the connection-ID generator of the tests' QUIC servers (written from the
    QUIC-LB draft, not from Spillway), issues and reads back the draft's appendix vectors and
    its worked four-pass example, and round-trips every length combination and mode."""
    import quiclb
    quiclb.self_test()
    key = bytes(range(16))
    for sid_len in range(1, 16):
        for nonce_len in range(4, 20 - sid_len):
            for k in (None, key):
                cfg = quiclb.Config(sid_len % 7, sid_len, nonce_len, k)
                sid = os.urandom(sid_len)
                cid = cfg.issue(sid)
                assert len(cid) == cfg.cid_len and cid[0] >> 5 == cfg.id
                assert cfg.server_id(cid) == sid, (cfg, cid.hex())


def test_quic_peers_issue_server_ids_and_survive_a_rebinding(topo):
    """scripts/quic_peer.py, the QUIC-LB tests' peers (aioquic): a server in b2 issues
    connection IDs that carry its server ID under an encrypted configuration; 8 clients from c1
    exchange lines with it, each moving to a new source port halfway (and to another of the
    server's connection IDs), and every line is answered by b2 before and after the move."""
    import quiclb
    assert T.TEST_VENV_PYTHON.exists(), f"{T.TEST_VENV_PYTHON}: run scripts/install-deps.sh"
    c, b = topo.client("c1"), topo.backend("b2")
    key = "8f95f09245765f80256934e50c66207f"
    cfg = quiclb.Config(0, 3, 5, bytes.fromhex(key))
    peer = str(T.SCRIPTS / "quic_peer.py")
    server = b.popen([T.TEST_VENV_PYTHON, peer, "serve", "--listen", f"{b.ipv4}:4433", "--name", "b2",
                      "--server-id", "0a0b0c", "--config", f"0:3:5:{key}"], log="quic_server.log")
    try:
        time.sleep(1.0)
        out = c.run([T.TEST_VENV_PYTHON, peer, "client", "--connect", f"{b.ipv4}:4433", "--n", "8",
                     "--period", "0.1", "--duration", "3", "--rebind-at", "1.5", "--new-cid"], timeout=30)
    finally:
        server.terminate()
        server.wait(10)
    rep = json.loads(out.stdout)
    assert rep["established"] == 8 and rep["errors"] == 0, rep
    for conn in rep["per_connection"]:
        # Lines every 0.1 s for 3 s, the move at 1.5 s: answered on both sides of it (the last
        # line may still be on its way).
        assert conn["sent"] >= 20 and conn["answered"] >= conn["sent"] - 1, conn
        assert conn["backends"] == ["b2"], conn
        # The client's own initial DCID, then the server's IDs: at least two after the move.
        issued = [bytes.fromhex(x) for x in conn["cids"][1:]]
        assert len(issued) >= 2 and all(cfg.server_id(x) == bytes.fromhex("0a0b0c") for x in issued), conn
