"""QUIC connections routed by their connection ID (QUIC-LB, docs/quic.md, QL-1..QL-4), end to
end: the real daemon on its ``net_tap`` port, real QUIC peers (aioquic, ``scripts/quic_peer.py``
in the tests' virtual environment). Each backend runs a QUIC echo server on the VIP whose
connection IDs carry its server ID, encoded by the tests' own generator (``quiclb.py``, written
from the draft and checked against its vectors); the backends decapsulate in user space and
answer the clients directly.

* 50 connections exchange a line every 100 ms; halfway each moves to a new source port (or to
  a new client address) and to another of its server's connection IDs: every line is answered,
  by the backend the connection began on, with plaintext, single-pass AES and four-pass IDs.
  The balancer counts the moved connections' first packets as ``quic_cid`` (without QUIC-LB the
  4-tuple's hash would have sent about three in four of them to another backend).
"""

from __future__ import annotations

import json
import os
import time

import pytest

import topo as T
from balancer import BIN, needs_built, service
from test_packet_path import running

pytestmark = needs_built(BIN)

PEER = str(T.SCRIPTS / "quic_peer.py")
PORT = 443
# Config id 1: the servers' IDs start with 0b001 (the rotation bits), 3 octets of server ID.
# Connection IDs of 1 + 3 + nonce octets; never 8 or 16 (the lengths of aioquic's own random
# draws, which quic_peer.py tells apart from connection IDs by length).
MODES = {"plaintext": (6, False), "single_pass": (13, True), "four_pass": (5, True)}


def quic_lb(t: T.Topology, nonce: int, key_file: str | None) -> tuple[dict, dict[str, str]]:
    """The `quic_lb:` section for every backend of `t`, and each backend's server ID (hex)."""
    ids = {b.short: f"0a01{i + 1:02x}" for i, b in enumerate(t.backends)}
    config = {"id": 1, "server_id_length": 3, "nonce_length": nonce}
    if key_file:
        config["key_file"] = key_file
    section = {
        "configs": [config],
        "server_ids": [{"endpoint": b.ipv4, "config": 1, "server_id": ids[b.short]} for b in t.backends],
    }
    return section, ids


# Every mode with a NAT rebinding; a migration to a new address with the four-pass IDs (the
# balancer's path is the same for both moves: a 4-tuple without an entry).
@pytest.mark.parametrize("mode,move", [("plaintext", "port"), ("single_pass", "port"),
                                       ("four_pass", "port"), ("four_pass", "address")])
def test_ql_3_quic_connections_that_move_keep_their_backend(mode, move):
    assert T.TEST_VENV_PYTHON.exists(), f"{T.TEST_VENV_PYTHON}: run scripts/install-deps.sh"
    nonce, encrypted = MODES[mode]
    with T.Topology() as t:
        key = os.urandom(16).hex() if encrypted else None
        key_file = None
        if key:
            path = t.state_dir / "quic-lb.key"
            path.write_text(key + "\n")
            path.chmod(0o600)
            key_file = str(path.resolve())
        section, ids = quic_lb(t, nonce, key_file)
        svc = service(t, vips=(T.VIP4,))
        svc["backend_service"]["quic_lb"] = section
        conf = f"1:3:{nonce}" + (f":{key}" if key else "")
        servers = [b.popen([T.TEST_VENV_PYTHON, PEER, "serve", "--listen", f"{T.VIP4}:{PORT}", "--name", b.short,
                            "--server-id", ids[b.short], "--config", conf], log=f"quic_{b.short}.log")
                   for b in t.backends]
        c = t.clients[0]
        argv = [T.TEST_VENV_PYTHON, PEER, "client", "--connect", f"{T.VIP4}:{PORT}", "--n", "50",
                "--period", "0.1", "--duration", "4", "--rebind-at", "2", "--new-cid", "--drain", "2"]
        if move == "address":
            moved_to = "198.18.10.201"
            c.ip("addr", "add", f"{moved_to}/16", "dev", "eth0")
            argv += ["--source", c.ipv4, "--rebind-source", moved_to]
        try:
            with running(t, [svc]) as lb:
                time.sleep(1.0)  # the servers listen
                out = c.run(argv, timeout=60)
                metrics = lb.metrics()
        finally:
            for s in servers:
                s.terminate()
                s.wait(10)
        rep = json.loads(out.stdout)
        assert rep["established"] == 50 and rep["errors"] == 0, {k: v for k, v in rep.items() if k != "per_connection"}
        for conn in rep["per_connection"]:
            # A line every 0.1 s for 4 s, the move at 2 s: every line answered, by one backend.
            assert conn["sent"] >= 30 and conn["answered"] == conn["sent"], conn
            assert len(conn["backends"]) == 1, conn
        assert rep["backends_changed"] == 0, rep
        spread = {b for conn in rep["per_connection"] for b in conn["backends"]}
        assert len(spread) >= 3, spread
        # Every moved connection's first packet found no entry and went by its connection ID.
        routed = metrics.value("spillway_forwarded_packets_total", reason="quic_cid")
        assert routed >= 50, routed
        fallbacks = metrics.values("spillway_quic_fallback_total")
        assert sum(fallbacks.values()) == 0, fallbacks

