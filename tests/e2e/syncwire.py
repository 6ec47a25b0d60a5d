"""The tests' own fleet-sync peer: protocol version 2, written from its description (the module
doc of ``control/src/sync/mod.rs`` and docs/scale-out.md), not from Spillway's code.

It seals and opens datagrams with libsodium's XChaCha20-Poly1305 (PyNaCl, Debian's
``python3-nacl``), names services with the reference C xxHash (``libxxhash.so.0``), proves
itself live to an instance the way a peer does (hellos: a challenge each way, echoed), and can
then send what a key holder can: entries, removals, bulk requests. The e2e tests use it to
play a configured peer that floods, and to read recorded sync traffic.

    peer = SyncPeer(ns, me=2, me_addr="198.18.0.12", key=keys[0], peer=1, peer_addr="198.18.0.11")
    peer.handshake()
    peer.send_entries([entry(...), ...])
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import socket
import struct
import time
from dataclasses import dataclass

from nacl.bindings import (crypto_aead_xchacha20poly1305_ietf_decrypt as _open,
                           crypto_aead_xchacha20poly1305_ietf_encrypt as _seal)

MAGIC = b"SPSY"
VERSION = 2
HEADER = 34
TAG = 16
MAX_DATAGRAM = 1400
ENTRY = 69
PER_DATAGRAM = 19
ENTRIES, REMOVE, BULK_REQUEST, ANSWER, ANSWER_END, BULK_ACK, HELLO = range(1, 8)
KIND_NAMES = {1: "entries", 2: "remove", 3: "bulk_request", 4: "answer", 5: "answer_end", 6: "bulk_ack",
              7: "hello"}
ALL_WORKERS = 0xFFFF
PORT = 7455
KEY_ID_NONCE = b"\x00spillway sync key id\x00\x00\x00"
SERVICE_DOMAIN = b"spillway/sync/service/v1\x00"

_xxhash = ctypes.CDLL("libxxhash.so.0")
_xxh3 = _xxhash.XXH3_64bits
_xxh3.restype = ctypes.c_uint64
_xxh3.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def service_identity(name: str) -> int:
    """A service's identity across instances: xxh3-64 of the domain and the name."""
    data = SERVICE_DOMAIN + name.encode()
    return _xxh3(data, len(data))


def key_id(key: bytes) -> int:
    """The key's id: the first four bytes of XChaCha20's keystream under the key and the fixed
    key-id nonce (the AEAD's first ciphertext bytes of four zero bytes)."""
    return struct.unpack("!I", _seal(b"\x00" * 4, b"", KEY_ID_NONCE, key)[:4])[0]


def read_key_file(path: str) -> list[bytes]:
    """The keys of a key file: one or two lines of 64 hex digits."""
    with open(path) as f:
        return [bytes.fromhex(line) for line in f.read().split("\n") if line]


def write_key_file(path: str, keys: list[bytes]) -> None:
    """A key file (mode 0600) holding `keys`, the first the one to seal with."""
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("".join(k.hex() + "\n" for k in keys))
    os.chmod(path + ".tmp", 0o600)
    os.replace(path + ".tmp", path)


def mapped(addr: str) -> bytes:
    """16 bytes: an IPv6 address, or an IPv4 one as IPv4-mapped IPv6."""
    a = ipaddress.ip_address(addr)
    return (b"\x00" * 10 + b"\xff\xff" + a.packed) if a.version == 4 else a.packed


@dataclass(frozen=True)
class Entry:
    """One synced entry: a TCP or UDP 5-tuple, the service by name, the backend."""
    src: str
    sport: int
    dst: str
    dport: int
    proto: int
    service: str
    backend: str
    backend_port: int = 0
    age_ms: int = 0
    flags: int = 0

    def record(self) -> bytes:
        return (mapped(self.src) + mapped(self.dst) + struct.pack("!HHBB", self.sport, self.dport, self.proto, 5)
                + struct.pack("!Q", service_identity(self.service)) + mapped(self.backend)
                + struct.pack("!HIB", self.backend_port, self.age_ms, self.flags))


@dataclass
class Datagram:
    kind: int
    sender: int
    recipient: int
    key_id: int
    epoch: int
    seq: int
    salt: int
    payload: bytes | None  # None when not opened (no key)

    @property
    def kind_name(self) -> str:
        return KIND_NAMES.get(self.kind, str(self.kind))


def parse_header(d: bytes) -> Datagram | None:
    if len(d) < HEADER + TAG or d[:4] != MAGIC or d[4] != VERSION:
        return None
    kind, sender, recipient, kid, epoch, seq, salt = struct.unpack("!BHHIQQI", d[5:HEADER])
    return Datagram(kind, sender, recipient, kid, epoch, seq, salt, None)


def nonce(sender: int, recipient: int, epoch: int, seq: int, salt: int) -> bytes:
    return struct.pack("!HHQQI", sender, recipient, epoch, seq, salt)


def open_datagram(d: bytes, keys: list[bytes]) -> Datagram | None:
    """The datagram with its payload, if one of `keys` opens it."""
    h = parse_header(d)
    if h is None:
        return None
    for k in keys:
        if key_id(k) != h.key_id:
            continue
        try:
            h.payload = _open(d[HEADER:], d[:HEADER], nonce(h.sender, h.recipient, h.epoch, h.seq, h.salt), k)
            return h
        except Exception:
            return None
    return None


class SyncPeer:
    """One instance's sync end, played by the test: instance `me` at `me_addr`, talking to the
    Spillway instance `peer` at `peer_addr`. The socket is made in namespace `ns` (whose
    address `me_addr` must be), bound to the fleet port."""

    def __init__(self, ns, me: int, me_addr: str, key: bytes, peer: int, peer_addr: str,
                 epoch: int | None = None, port: int = PORT):
        self.me, self.peer, self.key = me, peer, key
        self.peer_addr = (peer_addr, port)
        self.epoch = epoch if epoch is not None else int(time.time() * 1000)
        self.salt = struct.unpack("!I", os.urandom(4))[0]
        self.challenge = struct.unpack("!Q", os.urandom(8))[0] | 1
        self.their_challenge = 0
        self.seq = 0
        self.session = 0  # the instance's epoch this peer accepts
        self.accepted = False  # the instance said it accepts this peer's life
        with ns.entered():
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        self.sock.bind((me_addr, port))

    def close(self) -> None:
        self.sock.close()

    def seal(self, kind: int, payload: bytes) -> bytes:
        self.seq += 1
        header = MAGIC + struct.pack("!BBHHIQQI", VERSION, kind, self.me, self.peer, key_id(self.key), self.epoch,
                                     self.seq, self.salt)
        ct = _seal(payload, header, nonce(self.me, self.peer, self.epoch, self.seq, self.salt), self.key)
        return header + ct

    def send(self, kind: int, payload: bytes) -> None:
        self.sock.sendto(self.seal(kind, payload), self.peer_addr)

    def hello(self, fingerprint: int = 0, phase: int = 1) -> None:
        self.send(HELLO, struct.pack("!QBQQQ", fingerprint, phase, self.challenge, self.their_challenge,
                                     self.session))

    def receive(self, timeout: float) -> list[Datagram]:
        """Every datagram that comes within `timeout`, opened; hellos update the handshake."""
        got = []
        self.sock.settimeout(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.001, deadline - time.monotonic()))
            try:
                d, _ = self.sock.recvfrom(2048)
            except (TimeoutError, socket.timeout):
                break
            dg = open_datagram(d, [self.key])
            if dg is None:
                continue
            if dg.kind == HELLO:
                _fp, _phase, challenge, echo, session = struct.unpack("!QBQQQ", dg.payload)
                self.their_challenge = challenge
                if echo == self.challenge:
                    self.session = dg.epoch
                self.accepted = session == self.epoch
            got.append(dg)
        return got

    def handshake(self, timeout: float = 10.0) -> None:
        """Hellos until each side accepts the other: this peer has echoed the instance's
        challenge, and the instance's hello says it accepts this peer's life."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.hello()
            self.receive(0.05)
            if self.session and self.accepted:
                self.hello()
                return
        raise TimeoutError(f"sync handshake with instance {self.peer}: session={self.session} "
                           f"accepted={self.accepted}")

    def entry_datagrams(self, entries: list[Entry], kind: int = ENTRIES) -> list[bytes]:
        out = []
        for i in range(0, len(entries), PER_DATAGRAM):
            chunk = entries[i:i + PER_DATAGRAM]
            out.append(self.seal(kind, struct.pack("!H", len(chunk)) + b"".join(e.record() for e in chunk)))
        return out

    def send_entries(self, entries: list[Entry], kind: int = ENTRIES) -> int:
        """Send `entries` (or removals) as fast as the socket takes them; datagrams sent."""
        n = 0
        for d in self.entry_datagrams(entries, kind):
            self.sock.sendto(d, self.peer_addr)
            n += 1
        return n
