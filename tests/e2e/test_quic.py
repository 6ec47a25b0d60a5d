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
* A fifth backend added by a reload (the table changes), then the 50 connections move: each
  keeps the backend it began on, and the new backend's server never sees one of them.
* Two instances behind an ECMP router (``fleet.py``), without fleet sync: the 50 connections
  move to new ports, then one instance is killed (SIGKILL). The survivor has no entry for the
  connections the dead one carried, and routes every one of them by its connection ID to the
  backend it began on (the hash of their tuples would have sent some elsewhere).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter

import pytest

import topo as T
from balancer import BIN, needs_built, service
from fleet import SPILLWAY_BIN, SPILLWAYCTL_BIN, VIP_WEB, Fleet, needs_bird, spillway_config, start_all
from test_packet_path import running

pytestmark = needs_built(BIN)

PEER = str(T.SCRIPTS / "quic_peer.py")
PORT = 443
# Config id 1: the servers' IDs start with 0b001 (the rotation bits), 3 octets of server ID.
# Connection IDs of 1 + 3 + nonce octets; never 8 or 16 (the lengths of aioquic's own random
# draws, which quic_peer.py tells apart from connection IDs by length).
MODES = {"plaintext": (6, False), "single_pass": (13, True), "four_pass": (5, True)}


def quic_lb(t: T.Lab, nonce: int, key_file: str | None, backends=None) -> tuple[dict, dict[str, str]]:
    """The `quic_lb:` section for `backends` (default: every backend of `t`), and each
    backend's server ID (hex; by its place in `t`, so the same whichever are given)."""
    ids = {b.short: f"0a01{i + 1:02x}" for i, b in enumerate(t.backends)}
    config = {"id": 1, "server_id_length": 3, "nonce_length": nonce}
    if key_file:
        config["key_file"] = key_file
    section = {
        "configs": [config],
        "server_ids": [{"endpoint": b.ipv4, "config": 1, "server_id": ids[b.short]}
                       for b in (t.backends if backends is None else backends)],
    }
    return section, ids


def write_key(t: T.Lab, key: str, name: str = "quic-lb.key") -> str:
    """`key` (hex) in a file of `t`'s state directory that only its owner reads: its absolute path."""
    path = t.state_dir / name
    path.write_text(key + "\n")
    path.chmod(0o600)
    return str(path.resolve())


def quic_servers(t: T.Lab, vip: str, ids: dict[str, str], conf: str, backends=None, stats: bool = False) -> list:
    """A QUIC echo server on `vip`:443 in each of `backends` (default: every backend of `t`),
    issuing connection IDs with its server ID under `conf` (`id:sidlen:noncelen[:key]`); with
    `stats`, each writes its counters to `quic_<backend>.stats.json` in the state directory."""
    return [b.popen([T.TEST_VENV_PYTHON, PEER, "serve", "--listen", f"{vip}:{PORT}", "--name", b.short,
                     "--server-id", ids[b.short], "--config", conf,
                     *(["--stats", str(t.state_dir / f"quic_{b.short}.stats.json")] if stats else [])],
                    log=f"quic_{b.short}.log")
            for b in (t.backends if backends is None else backends)]


def stop_all(procs: list) -> None:
    for p in procs:
        p.terminate()
        p.wait(10)


def quic_flows(get, vip: str) -> dict[int, str]:
    """The connection table's entries of QUIC flows to `vip`:443: {client port: backend}. `get`
    is an admin API GET (parsed)."""
    reply = get(f"/v1/conntrack/flows?vip={vip}&proto=udp&dport={PORT}&limit=1000")
    return {int(f["client"].rsplit(":", 1)[1]): f["backend"] for f in reply["flows"]}


def quic_cid(m) -> float:
    return m.value("spillway_forwarded_packets_total", 0.0, reason="quic_cid")


def against_the_hash(get, src: str, vip: str, flows: dict[int, str]) -> list[int]:
    """The client ports of `flows` whose entry's backend is not the one the current tables
    give their 4-tuple (``explain``'s ``hashed_backend``): without QUIC-LB those connections
    would have been sent to a backend that does not know them."""
    def hashed(port: int) -> str:
        return get(f"/v1/explain?src={src}&dst={vip}&proto=udp&sport={port}&dport={PORT}")["hashed_backend"]

    return [port for port, backend in flows.items() if hashed(port) != backend]


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


def test_ql_3_a_backend_added_then_quic_connections_that_move_keep_their_backend():
    """50 connections (four-pass IDs) over b1..b4; a reload adds b5 (with its own server ID and
    a QUIC server of its own), which changes the table: the dry run of the reload says some
    4-tuples now hash elsewhere. Then every connection moves to a new port and another of its
    IDs. Every line is answered by the backend the connection began on, every move was routed by
    its connection ID (no fallback), b5's server never saw a datagram of them, and the new
    tuples of many of them hash to another backend under the new table (QUIC-LB is what kept
    them)."""
    assert T.TEST_VENV_PYTHON.exists(), f"{T.TEST_VENV_PYTHON}: run scripts/install-deps.sh"
    with T.Topology(backends_per_zone={"a": 2, "b": 3}) as t:
        new = t.backends[-1]
        old = [b for b in t.backends if b is not new]
        key = os.urandom(16).hex()
        path = write_key(t, key)
        section, ids = quic_lb(t, 5, path, backends=old)
        svc = service(t, vips=(T.VIP4,))
        for g in svc["backend_service"]["backends"]:
            g["endpoints"] = [e for e in g["endpoints"] if e != new.ipv4]
        svc["backend_service"]["quic_lb"] = section
        # b5's server runs from the start: once the reload adds b5, a packet the balancer sent
        # it by mistake would meet a real server (that does not know the connection).
        servers = quic_servers(t, T.VIP4, ids, f"1:3:5:{key}", stats=True)
        c = t.clients[0]
        report = t.state_dir / "quic_client.json"
        try:
            with running(t, [svc]) as lb:
                def get(p: str) -> dict:
                    return json.loads(lb.admin_get(p))

                time.sleep(1.0)  # the servers listen
                client = c.popen([T.TEST_VENV_PYTHON, PEER, "client", "--connect", f"{T.VIP4}:{PORT}", "--n", "50",
                                  "--period", "0.1", "--duration", "7", "--rebind-at", "4", "--new-cid",
                                  "--drain", "2", "--report", str(report)], log="quic_client.log")
                # The 50 connections' first tuples, each with its entry (made by the hash).
                first = T.wait_until(lambda: (f := quic_flows(get, T.VIP4)) and len(f) == 50 and f,
                                     "an entry for each of the 50 connections", timeout=10)
                time.sleep(1.0)  # a few lines each
                # The reload adds b5 and its server ID. Its dry run first: how many of the
                # connections' (current) tuples the new table hashes to another backend.
                config = json.loads(json.dumps(lb.config))
                web = config["services"][0]["backend_service"]
                next(g for g in web["backends"] if g["zone"] == f"zone-{new.zone.name}")["endpoints"].append(new.ipv4)
                web["quic_lb"]["server_ids"].append({"endpoint": new.ipv4, "config": 1, "server_id": ids[new.short]})
                candidate = t.state_dir / "with-b5.yaml"
                candidate.write_text(json.dumps(config))
                r = lb.ctl_run("reload", "--dry-run", str(candidate))
                assert r.returncode in (0, 4), r
                preview = json.loads(r.stdout)
                lb.write(config)
                reply = lb.ctl("reload")
                assert reply["added"] == [f"web/{new.ipv4}"], reply
                assert quic_cid(lb.metrics()) == 0, "the connections moved before the reload"
                # The move (at 4 s): each connection's first packet from its new port is routed
                # by its connection ID and makes an entry.
                T.wait_until(lambda: quic_cid(lb.metrics()) >= 50, "the 50 connections to move", timeout=10)
                moved = {port: b for port, b in quic_flows(get, T.VIP4).items() if port not in first}
                rehashed = against_the_hash(get, c.ipv4, T.VIP4, moved)
                assert client.wait(30) == 0
                metrics = lb.metrics()
                time.sleep(0.6)  # the servers' last counters
        finally:
            stop_all(servers)
        rep = json.loads(report.read_text())
        assert rep["established"] == 50 and rep["errors"] == 0, {k: v for k, v in rep.items() if k != "per_connection"}
        for conn in rep["per_connection"]:
            # A line every 0.1 s for 7 s, the move at 4 s: every line answered, by one backend.
            assert conn["sent"] >= 50 and conn["answered"] == conn["sent"], conn
            assert len(conn["backends"]) == 1, conn
        began = {conn["backends"][0] for conn in rep["per_connection"]}
        assert new.short not in began and len(began) >= 3, began
        # The table changed under the connections: some of their tuples hash elsewhere now.
        assert preview["connections"]["moves"] > 0, preview["connections"]
        # Every connection moved, each to an entry of the backend it began on, though many of
        # the new tuples hash to another backend under the new table.
        assert len(moved) == 50 and Counter(moved.values()) == Counter(first.values()), (first, moved)
        assert len(rehashed) >= 10, (rehashed, moved)
        stats = json.loads((t.state_dir / f"quic_{new.short}.stats.json").read_text())
        assert stats["datagrams"] == 0, stats
        assert metrics.value("spillway_forwarded_packets_total", reason="quic_cid") >= 50
        fallbacks = metrics.values("spillway_quic_fallback_total")
        assert sum(fallbacks.values()) == 0, fallbacks
        print(f"\nquic/backend_added: moves_in_preview={preview['connections']['moves']} "
              f"moved={len(moved)} against_the_new_hash={len(rehashed)}")


@needs_built(SPILLWAY_BIN, SPILLWAYCTL_BIN)
@needs_bird()
def test_ql_3_quic_connections_that_move_keep_their_backend_across_an_instances_kill_9_without_fleet_sync():
    """Two instances announce web's VIP (fleet.py, without ``fleet.sync``: nothing is shared
    between them), the router spreads the flows by ECMP on the 5-tuple (``fib_multipath_hash_policy``
    3, fields 0x37). 50 connections (four-pass IDs) exchange lines; each moves to a new port and
    another of its IDs, and ECMP spreads the new tuples over both instances, each routing the
    first packet by the connection ID and making an entry. Then i1 is killed (SIGKILL): the
    router drops it (BFD), and the connections it carried reach i2, which has no entry for their
    tuples. i2 routes each one by its connection ID to the backend it began on (made the same
    entries i1 had, counted ``quic_cid``, none taken over by sync), though the hash of many of
    their tuples names another backend. Every line sent is answered (QUIC retransmits what the
    failover lost), each connection by one backend."""
    assert T.TEST_VENV_PYTHON.exists(), f"{T.TEST_VENV_PYTHON}: run scripts/install-deps.sh"
    # BFD at 100 ms x 10: the router drops i1 within a second of the kill, and a stall of the
    # shared cores (two instances and 55 Python peers on this machine) does not drop i2.
    with Fleet(instances=2, bfd=True, bfd_multiplier=10) as f:
        # Flows spread and move by their tuples: a new source port is a new ECMP choice.
        f.router.sysctl(**{"net.ipv4.fib_multipath_hash_policy": 3,
                           "net.ipv4.fib_multipath_hash_fields": "0x37"})
        key = os.urandom(16).hex()
        section, ids = quic_lb(f, 5, write_key(f, key))

        def config(k: int) -> dict:
            cfg = spillway_config(f, k)
            assert "fleet" not in cfg, "no fleet sync"
            web = cfg["services"][0]
            web["forwarding_rules"].append({"vip": VIP_WEB, "protocol": "UDP", "ports": [PORT]})
            web["backend_service"]["quic_lb"] = section
            return cfg

        for i in f.instances:
            f.spillway(i.k, config=config(i.k), start=False)
        sp1, sp2 = sps = start_all(f)
        i2 = f.instance(2)
        servers = quic_servers(f, VIP_WEB, ids, f"1:3:5:{key}")
        c = f.client("c1")
        report = f.state_dir / "quic_client.json"
        duration = 12.0
        try:
            time.sleep(1.0)  # the servers listen
            t0 = time.monotonic()
            client = c.popen([T.TEST_VENV_PYTHON, PEER, "client", "--connect", f"{VIP_WEB}:{PORT}", "--n", "50",
                              "--period", "0.1", "--duration", str(duration), "--rebind-at", "3", "--new-cid",
                              "--drain", "3", "--report", str(report)], log="quic_client.log")

            def flows() -> dict[str, dict[int, str]]:
                return {sp.inst.short: quic_flows(sp.api, VIP_WEB) for sp in sps}

            # The connections' first tuples, over both instances (the hash made their entries).
            first = T.wait_until(lambda: (fl := flows()) and sum(map(len, fl.values())) == 50 and fl,
                                 "an entry for each of the 50 connections", timeout=15)
            first_ports = {port for on in first.values() for port in on}
            assert len(first_ports) == 50, first
            # The move (at 3 s): each connection's first packet from its new port, on the
            # instance ECMP picks for the new tuple, is routed by its connection ID.
            T.wait_until(lambda: sum(quic_cid(sp.metrics()) for sp in sps) >= 50, "the 50 connections to move",
                         timeout=15)
            time.sleep(0.5)  # a few lines each on the new tuples
            on_i1 = {port: b for port, b in quic_flows(sp1.api, VIP_WEB).items() if port not in first_ports}
            routed_i1, before_i2 = quic_cid(sp1.metrics()), quic_cid(sp2.metrics())
            assert routed_i1 + before_i2 == 50 and len(on_i1) == routed_i1 > 0 and before_i2 > 0, (
                routed_i1, before_i2, on_i1)
            # Both instances have the same tables: the tuples whose entries name another backend
            # than their hash are the connections only the connection ID keeps.
            against = against_the_hash(sp1.api, c.ipv4, VIP_WEB, on_i1)
            killed_at = time.monotonic()
            sp1.kill()
            gone_s = f.wait_nexthops(VIP_WEB, [i2.node], timeout=10, since=killed_at)
            assert time.monotonic() - t0 < duration - 3, "too little exchange left after the failover"
            # i1's connections reach i2 (the next line, or QUIC's retransmission): each finds
            # no entry and is routed by its connection ID to the backend i1 had it on.
            T.wait_until(lambda: quic_cid(sp2.metrics()) - before_i2 >= routed_i1,
                         lambda: f"i2 to route i1's {routed_i1} connections: {quic_cid(sp2.metrics()) - before_i2}",
                         timeout=10)
            on_i2 = quic_flows(sp2.api, VIP_WEB)
            assert client.wait(30) == 0
            m2 = sp2.metrics()
        finally:
            stop_all(servers)
        rep = json.loads(report.read_text())
        assert rep["established"] == 50 and rep["errors"] == 0, {k: v for k, v in rep.items() if k != "per_connection"}
        for conn in rep["per_connection"]:
            # A line every 0.1 s for 12 s, the move at 3 s, the kill after: every line answered
            # (what the failover lost, retransmitted), by one backend.
            assert conn["sent"] >= 70 and conn["answered"] == conn["sent"], conn
            assert len(conn["backends"]) == 1, conn
        assert rep["backends_changed"] == 0, rep
        # i2 made, for each of i1's connections, the entry i1 had: the same backend.
        assert {port: on_i2.get(port) for port in on_i1} == on_i1, (on_i1, on_i2)
        assert against, ("every moved tuple hashed to its own backend: nothing shown", on_i1)
        assert quic_cid(m2) - before_i2 == routed_i1, (quic_cid(m2), before_i2, routed_i1)
        assert m2.value("spillway_forwarded_packets_total", 0.0, reason="sync_takeover") == 0
        fallbacks = m2.values("spillway_quic_fallback_total")
        assert sum(fallbacks.values()) == 0, fallbacks
        print(f"\nquic/kill_9: on_i1={routed_i1} on_i2={before_i2} against_the_hash={len(against)} "
              f"router_without_i1_s={gone_s:.3f} sent={rep['sent']} answered={rep['answered']}")
