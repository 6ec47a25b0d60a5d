#!/usr/bin/env python3
"""QUIC peers for the QUIC-LB tests, on aioquic's sans-I/O connection (the tests' virtualenv:
scripts/install-deps.sh puts aioquic there).

    quic_peer.py serve --listen 198.18.0.100:4433 --name b1 --server-id c4605e \\
        --config 0:3:4[:KEYHEX] [--config 1:3:5:KEYHEX ...]
    quic_peer.py client --connect 198.18.0.100:4433 --n 50 --period 0.1 --duration 6 \\
        [--rebind-at 3] [--rebind-source 198.18.10.2] [--new-cid] --report out.json

``serve`` answers every line a client sends on a stream with ``<name> <line>``, and issues
connection IDs that carry ``--server-id`` under the first ``--config`` (QUIC-LB, written from
the draft in tests/e2e/quiclb.py). SIGUSR1 moves it to the next ``--config`` for the IDs it
issues from then on (a configuration rotation: the connections keep the IDs they have).

``client`` opens ``--n`` connections, each from its own UDP socket (its own source port), and
sends ``<conn> <seq>`` every ``--period`` s on one stream. At ``--rebind-at`` s every
connection moves to a new socket: a new source port (a NAT rebinding), from
``--rebind-source`` if given (a new address), and with ``--new-cid`` it also switches to another
connection ID the server issued (a migration). The JSON report has, per connection, the
backends that answered, messages sent and answered, the connection IDs used and the closing
error if any.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import select
import signal
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "e2e"))

import quiclb  # noqa: E402
from aioquic.quic import connection as qc  # noqa: E402
from aioquic.quic.configuration import QuicConfiguration  # noqa: E402
from aioquic.quic.events import ConnectionTerminated, HandshakeCompleted, StreamDataReceived  # noqa: E402
from aioquic.quic.packet import QuicPacketType, pull_quic_header  # noqa: E402
from aioquic.buffer import Buffer  # noqa: E402

ALPN = ["spillway-test"]


def parse_config(s: str) -> quiclb.Config:
    parts = s.split(":")
    key = bytes.fromhex(parts[3]) if len(parts) > 3 and parts[3] else None
    return quiclb.Config(int(parts[0]), int(parts[1]), int(parts[2]), key)


def split_addr(s: str) -> tuple[str, int]:
    host, _, port = s.rpartition(":")
    return host.strip("[]"), int(port)


def self_signed(name: str):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    return cert, key


class CidIssuer:
    """Stands in for the ``os`` module inside aioquic's connection module: its connection IDs
    (``urandom`` of the configured length) carry the server ID; every other use is random."""

    def __init__(self, configs: list[quiclb.Config], sid: bytes):
        self.configs, self.sid, self.current = configs, sid, 0
        assert len({c.cid_len for c in configs}) == 1, "one connection ID length for aioquic"
        assert configs[0].cid_len not in (8, 16), "8 and 16 octets are aioquic's other random draws"

    def urandom(self, n: int) -> bytes:
        cfg = self.configs[self.current]
        if n == cfg.cid_len:
            return cfg.issue(self.sid[:cfg.sid_len])
        return os.urandom(n)

    def __getattr__(self, name):
        return getattr(os, name)


def serve(a) -> None:
    configs = [parse_config(c) for c in a.config]
    issuer = CidIssuer(configs, bytes.fromhex(a.server_id))
    qc.os = issuer
    signal.signal(signal.SIGUSR1, lambda *_: setattr(issuer, "current", min(issuer.current + 1, len(configs) - 1)))
    cert, key = self_signed(a.name)
    host, port = split_addr(a.listen)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((host, port))
    sock.setblocking(False)
    conns: dict[bytes, qc.QuicConnection] = {}
    stats = {"datagrams": 0, "connections": 0, "lines": 0}
    stats_file = Path(a.stats) if a.stats else None
    last_stats = 0.0
    while True:
        timers = [c.get_timer() for c in set(conns.values()) if c.get_timer() is not None]
        timeout = max(0.0, min(timers) - time.time()) if timers else 0.5
        r, _, _ = select.select([sock], [], [], min(timeout, 0.5))
        now = time.time()
        if r:
            while True:
                try:
                    data, addr = sock.recvfrom(65535)
                except BlockingIOError:
                    break
                stats["datagrams"] += 1
                try:
                    header = pull_quic_header(Buffer(data=data), host_cid_length=configs[0].cid_len)
                except ValueError:
                    continue
                conn = conns.get(header.destination_cid)
                if conn is None and header.packet_type == QuicPacketType.INITIAL:
                    cfg = QuicConfiguration(is_client=False, alpn_protocols=ALPN,
                                            connection_id_length=configs[0].cid_len, idle_timeout=30.0)
                    cfg.certificate, cfg.private_key = cert, key
                    conn = qc.QuicConnection(configuration=cfg,
                                             original_destination_connection_id=header.destination_cid)
                    stats["connections"] += 1
                if conn is None:
                    continue
                conn.receive_datagram(data, addr, now)
                for c in conn._host_cids:
                    conns[c.cid] = conn
                conns[header.destination_cid] = conn
        for conn in set(conns.values()):
            t = conn.get_timer()
            if t is not None and t <= now:
                conn.handle_timer(now)
            while (ev := conn.next_event()) is not None:
                if isinstance(ev, StreamDataReceived) and ev.data:
                    for line in ev.data.decode(errors="replace").splitlines():
                        stats["lines"] += 1
                        conn.send_stream_data(ev.stream_id, f"{a.name} {line}\n".encode())
            for data, addr in conn.datagrams_to_send(now=now):
                try:
                    sock.sendto(data, addr)
                except OSError:
                    pass
            for c in conn._host_cids:
                conns.setdefault(c.cid, conn)
        if stats_file and now - last_stats > 0.5:
            stats_file.write_text(json.dumps(stats))
            last_stats = now


class Client:
    def __init__(self, i: int, server: tuple[str, int], source: str | None):
        self.id, self.server = i, server
        cfg = QuicConfiguration(is_client=True, alpn_protocols=ALPN, idle_timeout=30.0)
        cfg.verify_mode = 0
        self.conn = qc.QuicConnection(configuration=cfg)
        self.sock = self._socket(source)
        self.old_socks: list[socket.socket] = []
        self.conn.connect(server, now=time.time())
        self.stream = None
        self.seq = self.sent = self.answered = 0
        self.backends: list[str] = []
        self.cids: list[str] = []
        self.error = None
        self.ready = False
        self.buf = b""

    def _socket(self, source: str | None) -> socket.socket:
        fam = socket.AF_INET6 if ":" in self.server[0] else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_DGRAM)
        s.bind((source or ("::" if fam == socket.AF_INET6 else "0.0.0.0"), 0))
        s.setblocking(False)
        return s

    def rebind(self, source: str | None, new_cid: bool) -> None:
        # The old socket stays open until the run ends: closed, its port could go to another
        # connection's new socket, whose tuple would then meet the old one's conntrack entry.
        self.old_socks.append(self.sock)
        self.sock = self._socket(source)
        if new_cid:
            self.conn.change_connection_id()

    def pump(self, now: float) -> None:
        t = self.conn.get_timer()
        if t is not None and t <= now:
            self.conn.handle_timer(now)
        while (ev := self.conn.next_event()) is not None:
            if isinstance(ev, HandshakeCompleted):
                self.ready = True
                self.stream = self.conn.get_next_available_stream_id()
            elif isinstance(ev, StreamDataReceived):
                self.buf += ev.data
                while b"\n" in self.buf:
                    line, self.buf = self.buf.split(b"\n", 1)
                    parts = line.decode(errors="replace").split()
                    if parts and (not self.backends or self.backends[-1] != parts[0]):
                        self.backends.append(parts[0])
                    self.answered += 1
            elif isinstance(ev, ConnectionTerminated):
                self.error = f"{ev.error_code}: {ev.reason_phrase}"
        dcid = self.conn._peer_cid.cid.hex()
        if not self.cids or self.cids[-1] != dcid:
            self.cids.append(dcid)
        for data, addr in self.conn.datagrams_to_send(now=now):
            try:
                self.sock.sendto(data, addr)
            except OSError:
                pass

    def send(self) -> None:
        if self.ready and self.error is None:
            self.conn.send_stream_data(self.stream, f"{self.id} {self.seq}\n".encode())
            self.seq += 1
            self.sent += 1


def client(a) -> None:
    server = split_addr(a.connect)
    clients = [Client(i, server, a.source) for i in range(a.n)]
    start = time.time()
    next_send = start
    rebound = False
    while (now := time.time()) - start < a.duration:
        if a.rebind_at is not None and not rebound and now - start >= a.rebind_at:
            for c in clients:
                c.rebind(a.rebind_source, a.new_cid)
            rebound = True
        if now >= next_send:
            for c in clients:
                c.send()
            next_send += a.period
        socks = {c.sock: c for c in clients}
        r, _, _ = select.select(list(socks), [], [], 0.01)
        for s in r:
            c = socks[s]
            while True:
                try:
                    data, addr = s.recvfrom(65535)
                except (BlockingIOError, OSError):
                    break
                c.conn.receive_datagram(data, addr, time.time())
        for c in clients:
            c.pump(time.time())
    # Let the last answers arrive.
    end = time.time() + a.drain
    while time.time() < end:
        socks = {c.sock: c for c in clients}
        r, _, _ = select.select(list(socks), [], [], 0.05)
        for s in r:
            try:
                data, addr = s.recvfrom(65535)
                socks[s].conn.receive_datagram(data, addr, time.time())
            except (BlockingIOError, OSError):
                pass
        for c in clients:
            c.pump(time.time())
    report = {
        "connections": len(clients),
        "established": sum(c.ready for c in clients),
        "sent": sum(c.sent for c in clients),
        "answered": sum(c.answered for c in clients),
        "errors": sum(c.error is not None for c in clients),
        "backends_changed": sum(len(c.backends) > 1 for c in clients),
        "per_connection": [{"id": c.id, "backends": c.backends, "sent": c.sent, "answered": c.answered,
                            "cids": c.cids, "error": c.error} for c in clients],
    }
    out = json.dumps(report)
    if a.report:
        Path(a.report).write_text(out)
    else:
        print(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--listen", required=True)
    s.add_argument("--name", required=True)
    s.add_argument("--server-id", required=True)
    s.add_argument("--config", action="append", required=True)
    s.add_argument("--stats")
    c = sub.add_parser("client")
    c.add_argument("--connect", required=True)
    c.add_argument("--n", type=int, default=10)
    c.add_argument("--period", type=float, default=0.1)
    c.add_argument("--duration", type=float, default=5.0)
    c.add_argument("--drain", type=float, default=1.0)
    c.add_argument("--source")
    c.add_argument("--rebind-at", type=float)
    c.add_argument("--rebind-source")
    c.add_argument("--new-cid", action="store_true")
    c.add_argument("--report")
    a = p.parse_args()
    serve(a) if a.cmd == "serve" else client(a)


if __name__ == "__main__":
    main()
