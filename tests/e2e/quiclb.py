"""The test's own QUIC-LB connection-ID generator and decoder, written from the draft
(draft-ietf-quic-load-balancers-21, "Server ID Encoding in Connection IDs"), not from
Spillway's code: the test QUIC servers issue connection IDs with it, and tests read them back
to know which server a connection ID names.

    cfg = Config(id=0, sid_len=3, nonce_len=4, key=bytes.fromhex("8f95..."))
    cid = cfg.issue(bytes.fromhex("ed793a"))       # a fresh nonce each time
    assert cfg.server_id(cid) == bytes.fromhex("ed793a")

The first octet carries the config id in its three most significant bits and the length of the
rest in the other five (length self-description, as the draft's test vectors do). With a key,
a 16-octet server ID + nonce is one AES-128-ECB block; any other length goes through the
four-pass Feistel network. AES comes from ``cryptography`` (Debian's python3-cryptography).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes


def _aes_ecb(key: bytes, block: bytes, decrypt: bool = False) -> bytes:
    c = Cipher(algorithms.AES(key), modes.ECB())
    op = c.decryptor() if decrypt else c.encryptor()
    return op.update(block) + op.finalize()


@dataclass(frozen=True)
class Config:
    id: int
    sid_len: int
    nonce_len: int
    key: bytes | None = None

    def __post_init__(self):
        assert 0 <= self.id <= 6, "config ids are 0..6 (7 is unroutable)"
        assert self.sid_len >= 1 and self.nonce_len >= 4 and self.sid_len + self.nonce_len <= 19
        assert self.key is None or len(self.key) == 16

    @property
    def cid_len(self) -> int:
        return 1 + self.sid_len + self.nonce_len

    @property
    def mode(self) -> str:
        if self.key is None:
            return "plaintext"
        return "single_pass" if self.sid_len + self.nonce_len == 16 else "four_pass"

    def issue(self, sid: bytes, nonce: bytes | None = None) -> bytes:
        """A connection ID for server ``sid`` (a random nonce unless given)."""
        assert len(sid) == self.sid_len
        nonce = os.urandom(self.nonce_len) if nonce is None else nonce
        assert len(nonce) == self.nonce_len
        plain = sid + nonce
        first = bytes([(self.id << 5) | (len(plain) & 0x1F)])
        if self.key is None:
            return first + plain
        if len(plain) == 16:
            return first + _aes_ecb(self.key, plain)
        return first + self._four_pass(plain, encrypt=True)

    def server_id(self, cid: bytes) -> bytes:
        """The server ID in ``cid`` (which must name this config)."""
        assert cid[0] >> 5 == self.id and len(cid) >= self.cid_len
        body = cid[1:self.cid_len]
        if self.key is None:
            return body[:self.sid_len]
        if len(body) == 16:
            return _aes_ecb(self.key, body, decrypt=True)[:self.sid_len]
        return self._four_pass(body, encrypt=False)[:self.sid_len]

    # -- the four-pass Feistel network ("Algorithm Description", steps 1-12) ------------------
    def _four_pass(self, data: bytes, encrypt: bool) -> bytes:
        n = len(data)
        half = (n + 1) // 2
        odd = n % 2 == 1

        def expand(pass_: int, h: bytes) -> bytes:
            return h + bytes(14 - len(h)) + bytes([n, pass_])

        def f(pass_: int, h: bytes) -> bytes:
            return _aes_ecb(self.key, expand(pass_, h))[:half]

        def xor(a: bytes, b: bytes) -> bytes:
            return bytes(x ^ y for x, y in zip(a, b))

        def clear_first(h: bytes) -> bytes:
            return bytes([h[0] & 0x0F]) + h[1:] if odd else h

        def clear_last(h: bytes) -> bytes:
            return h[:-1] + bytes([h[-1] & 0xF0]) if odd else h

        left = clear_last(data[:half])
        right = clear_first(data[n - half:])
        if encrypt:
            right = clear_first(xor(right, f(1, left)))
            left = clear_last(xor(left, f(2, right)))
            right = clear_first(xor(right, f(3, left)))
            left = clear_last(xor(left, f(4, right)))
        else:
            left = clear_last(xor(left, f(4, right)))
            right = clear_first(xor(right, f(3, left)))
            left = clear_last(xor(left, f(2, right)))
            right = clear_first(xor(right, f(1, left)))
        if odd:
            return left[:-1] + bytes([left[-1] | right[0]]) + right[1:]
        return left + right


def self_test() -> None:
    """The draft's appendix vectors and worked example (the two misprinted rows read as the
    notes in spillway_core::quic_lb say)."""
    k = bytes.fromhex("8f95f09245765f80256934e50c66207f")
    rows = [
        (Config(0, 3, 4), "c4605e", "4504cc4f", "07c4605e4504cc4f"),
        (Config(1, 5, 5), "350d28b420", "03487d970b", "2a350d28b42003487d970b"),
        (Config(0, 3, 4, k), "ed793a", "ee080dbf", "0720b1d07b359d3c"),
        (Config(1, 10, 5, k), "ed793a51d49b8f5fab65", "ee080dbf48", "2fcc381bc74cb4fbad2823a3d1f8fed2"),
        (Config(2, 8, 8, k), "ed793a51d49b8f5f", "ee080dbf48c0d1e5", "504dd2d05a7b0de9b2b9907afb5ecf8cc3"),
        (Config(3, 9, 9, k), "ed793a51d49b8f5fab", "ee080dbf48c0d1e55d", "725779c9cc86beb3a3a4a3ca96fce4bfe0cdbc"),
        (Config(0, 3, 4, bytes.fromhex("fdf726a9893ec05c0632d3956680baf0")), "31441a", "9c69c275",
         "0767947d29be054a"),
    ]
    for cfg, sid, nonce, cid in rows:
        got = cfg.issue(bytes.fromhex(sid), bytes.fromhex(nonce)).hex()
        assert got == cid, (cfg, got, cid)
        assert cfg.server_id(bytes.fromhex(cid)).hex() == sid, (cfg, cid)


if __name__ == "__main__":
    self_test()
    print("quiclb: the draft's vectors pass")
