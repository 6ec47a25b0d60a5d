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
* A configuration rotated by a reload mid-run (a second configuration added, the servers moved
  to it): the connections opened before and after both keep their backends when they move.
"""

from __future__ import annotations

import json
import os
import signal
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




def test_ql_1_a_configuration_rotated_by_a_reload_keeps_old_and_new_connections():
    """The rotation of docs/quic.md: 25 connections open on configuration 1 (four-pass IDs); a
    reload adds configuration 2 (the same lengths, as aioquic needs, another key) and the
    servers move to it (SIGUSR1: the IDs they issue from then on are configuration 2's); 25
    more connections open, on configuration 2's IDs. Then every connection, old and new, moves to a new port and to
    another of its IDs. Every line is answered by the backend the connection began on, and
    no packet fell back."""
    assert T.TEST_VENV_PYTHON.exists(), f"{T.TEST_VENV_PYTHON}: run scripts/install-deps.sh"
    with T.Topology() as t:
        keys = {1: os.urandom(16).hex(), 2: os.urandom(16).hex()}
        files = {}
        for n, k in keys.items():
            path = t.state_dir / f"quic-lb-{n}.key"
            path.write_text(k + "\n")
            path.chmod(0o600)
            files[n] = str(path.resolve())
        section, ids = quic_lb(t, 5, files[1])
        svc = service(t, vips=(T.VIP4,))
        svc["backend_service"]["quic_lb"] = section
        servers = [b.popen([T.TEST_VENV_PYTHON, PEER, "serve", "--listen", f"{T.VIP4}:{PORT}", "--name", b.short,
                            "--server-id", ids[b.short], "--config", f"1:3:5:{keys[1]}",
                            "--config", f"2:3:5:{keys[2]}"], log=f"quic_{b.short}.log")
                   for b in t.backends]
        c = t.clients[0]
        reports = {n: t.state_dir / f"quic_client_{n}.json" for n in ("old", "new")}

        def client(name: str, duration: float, rebind_at: float):
            return c.popen([T.TEST_VENV_PYTHON, PEER, "client", "--connect", f"{T.VIP4}:{PORT}", "--n", "25",
                            "--period", "0.1", "--duration", str(duration), "--rebind-at", str(rebind_at),
                            "--new-cid", "--drain", "2", "--report", str(reports[name])], log=f"quic_{name}.log")

        try:
            with running(t, [svc]) as lb:
                time.sleep(1.0)  # the servers listen
                old = client("old", 7.0, 5.0)
                time.sleep(2.0)
                # The balancer learns configuration 2 (a reload), then the servers use it.
                config = json.loads(lb.path.read_text())
                q = config["services"][0]["backend_service"]["quic_lb"]
                q["configs"].append({"id": 2, "server_id_length": 3, "nonce_length": 5, "key_file": files[2]})
                q["server_ids"] += [{**sid, "config": 2} for sid in q["server_ids"]]
                lb.write(config)
                lb.ctl("reload")
                for s in servers:
                    s.send_signal(signal.SIGUSR1)
                time.sleep(0.5)
                new = client("new", 4.5, 2.5)
                assert old.wait(30) == 0 and new.wait(30) == 0
                metrics = lb.metrics()
        finally:
            for s in servers:
                s.terminate()
                s.wait(10)
        first_config = {}
        for name, path in reports.items():
            rep = json.loads(path.read_text())
            assert rep["established"] == 25 and rep["errors"] == 0, (name, {k: v for k, v in rep.items() if k != "per_connection"})
            for conn in rep["per_connection"]:
                assert conn["sent"] >= 40 and conn["answered"] == conn["sent"], (name, conn)
                assert len(conn["backends"]) == 1, (name, conn)
            # The servers' first connection ID for each (after the client's own): its config.
            first_config[name] = {int(conn["cids"][1][:2], 16) >> 5 for conn in rep["per_connection"]}
        assert first_config == {"old": {1}, "new": {2}}, first_config
        assert metrics.value("spillway_forwarded_packets_total", reason="quic_cid") >= 50
        fallbacks = metrics.values("spillway_quic_fallback_total")
        assert sum(fallbacks.values()) == 0, fallbacks
