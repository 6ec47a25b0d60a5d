"""Fleet sync at production scale and over a fleet's whole life (fleet.py's namespaces: real BIRD,
ECMP, long-lived TCP connections with a message every 100 ms unless said otherwise):

* a bulk sync of more than 50,000 entries at risk, with steady traffic through the peer, and
  again while the peer's snapshots change every second: it ends "done", and every connection
  the joiner then takes keeps its backend (each flow's backend on both, compared);
* a reused tuple: connections made at risk, closed with RST and reopened from the same ports,
  then their owner killed: no reset (FS-8);
* a quiet connection (one message per idle timeout - 1 s) whose owner dies at any point of the
  interval: no reset (FS-2);
* an instance restarted with an epoch lower than its peers have seen: taken back within
  seconds (FS-6);
* recorded sync datagrams replayed after the receiver restarts: nothing installed, no bulk
  answer, each counted (FS-6);
* a key rotation by reloads and restarts under 60 connections and a backend added: no reset;
* a key holder's flood of 1M valid entries from a configured peer's address (the tests' own
  peer, syncwire.py): the instance's own connections keep and get their entries, the excess is
  counted (FS-9);
* the first packets after a start, to a backend whose MAC answers late: every SYN forwarded;
* the table file: consumed once read; a link or a FIFO at its path refused, the start going on.

Figures go to target/reliability/fleet.json (``record``) and are printed with ``pytest -s``.
"""

from __future__ import annotations

import json
import os
import random
import re
import socket
import subprocess
import time

import pytest

import topo as T
from balancer import needs_built
from fleet import (SPILLWAY_BIN, SPILLWAYCTL_BIN, VIP_OTHER, VIP_WEB, VIPS, Fleet, FleetSpillway, LongLived,
                   answered_now, carriers, data_mac, needs_bird, spillway_config, start_all, summary,
                   sync_key, wait_all_progress, wait_backends_healthy, wait_synced)
from syncwire import Entry, SyncPeer, parse_header, read_key_file, write_key_file
from test_fleet import SYNC_BFD, check_clean, long_lived, long_lived_on_all, record, restart

GEN = SPILLWAY_BIN.parent / "spillway-gen"

pytestmark = [needs_built(SPILLWAY_BIN, SPILLWAYCTL_BIN, GEN), needs_bird()]


def sync_state(sp: FleetSpillway) -> dict:
    return sp.instance()["fleet_sync"]


def previous_table_counts(sps: list[FleetSpillway]) -> dict[str, float]:
    """Per instance: packets given the previous tables' backend (FS-11)."""
    return {sp.inst.short: sp.metrics().value("spillway_forwarded_packets_total", reason="previous_table")
            for sp in sps if sp.running}


def add_b5(f: Fleet, sps: list[FleetSpillway], **kw) -> None:
    """A fifth backend for ``web`` on every instance (a reload each), then the same tables on all."""
    for sp in sps:
        assert sp.reload(spillway_config(f, sp.inst.k, sync=True, extra_web=("b5",), **kw))["added"]
    wait_backends_healthy(sps)
    T.wait_until(lambda: len({json.dumps(sp.instance()["fingerprints"], sort_keys=True) for sp in sps}) == 1,
                 "every instance to have the same new tables", timeout=15)


# ---- bulk sync at scale ---------------------------------------------------------------------------
def gen(f: Fleet, k: int, args: list[str], name: str, wait: bool = True, timeout: float = 120.0):
    """spillway-gen on a net_tap port joined to instance ``k``'s bridge, its frames addressed to
    the instance's data port (as if from the router). Its report, or the running process."""
    inst = f.instance(k)
    tap = f"{f.prefix}{name}"[:15]
    prefix = f"{f.prefix}-{name}"
    argv = [str(GEN), "--port", "net_tap0", "--dst-mac", data_mac(k), "--json", "--stats-interval", "0",
            "--delay", "1.5", "--mbufs", "8191", *args,
            "--", "--no-pci", "--lcores", "0@0,1@1", "--file-prefix", prefix, "--log-level", "lib.eal:error",
            "--no-telemetry", "--vdev", f"net_tap0,iface={tap}"]
    p = inst.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    T.wait_until(lambda: inst.link_exists(tap) or p.poll() is not None, f"{tap} to appear", timeout=30)
    inst.ip("link", "set", "dev", tap, "master", inst.bridge)
    inst.ip("link", "set", "dev", tap, "up")
    if not wait:
        return p
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, f"spillway-gen: {out.decode()}\n{err.decode()}"
    return json.loads([line for line in out.decode().splitlines() if line.startswith("{")][-1])


FLOWS = 170_000


def flows_of(sp: FleetSpillway, prefixes: list[str]) -> dict[str, str]:
    """Every entry of ``web`` from the generator's clients, as ``client:port`` -> backend,
    read a client prefix at a time (a reply lists 100,000 at most)."""
    out: dict[str, str] = {}
    for p in prefixes:
        r = sp.api(f"/v1/conntrack/flows?service=web&client={p}&limit=100000", timeout=120)
        assert len(r["flows"]) == r["matched"], (p, r["matched"])
        for fl in r["flows"]:
            out[fl["client"]] = fl["backend"]
    return out


@pytest.mark.long
@pytest.mark.parametrize("change", ["steady", "snapshots_every_second"])
def test_fs_5_a_bulk_sync_of_50000_entries_at_risk_ends_whole_under_load(change):
    """i1 alone holds 170,000 flows (the generator's TCP flows, an entry each, default
    ``conntrack_capacity``); two more backends (six instead of four) put about a third of them
    at risk. i2 joins while
    the generator keeps 20,000 packets/s flowing through i1 (and, in the second case, while i1
    publishes a new snapshot every second: an override of ``other``'s backend toggled). Its
    bulk sync ends "done", not timed out, each answer's counts agreeing, with every entry at
    risk stored. Then i1 dies and every flow, sent again through i2, reaches the backend i1 had
    given it: the 260,000 backends compared one by one."""
    big = dict(conntrack_capacity=1 << 20)
    with Fleet(instances=2, **SYNC_BFD, backends_per_zone=3) as f:
        def config(k: int, **kw) -> dict:
            cfg = spillway_config(f, k, sync=True, **kw)
            # web without health checks: its backends count healthy, so its tables are the
            # configuration's alone, the same on both instances whatever the generator does to
            # the backends' decapsulating agents (a probe that fails under that load would change
            # them, and the test would measure health, not sync).
            for s in cfg["services"]:
                if s["name"] == "web":
                    for g in s["backend_service"]["backends"]:
                        g.pop("health_check", None)
            cfg["dataplane"].update(big)
            # i1 starts alone (its peer is not there to answer); i2 joins, patient.
            cfg["fleet"]["sync"]["bulk_timeout_sec"] = 60 if k == 2 else 1
            return cfg

        sp1 = f.spillway(1, config=config(1))
        sp1.wait_phase("serving", timeout=60)
        # Every flow (sequential: each of FLOWS frames a new flow), twice: a frame the tap
        # dropped the first time comes again; then the fifth backend.
        held = lambda: sp1.api("/v1/conntrack/flows?service=web&limit=0", timeout=60)["matched"]  # noqa: E731
        counts = []
        for round_ in ("g1", "g1b", "g1c"):
            sent = gen(f, 1, ["--flows", str(FLOWS), "--order", "sequential", "--count", str(FLOWS),
                              "--rate", "20k", "--dst", VIP_WEB, "--src-v4", "198.18.128.0/17"], round_)
            assert sent["sent"] == FLOWS, sent
            counts.append(held())
            if counts[-1] >= FLOWS * 0.98:
                break
        assert counts[-1] >= FLOWS * 0.98, counts
        # Two more backends: a third of the table's positions move, a third of the flows at risk.
        assert sp1.reload(config(1, extra_web=("b5", "b6")))["added"]
        T.wait_until(lambda: sync_state(sp1)["scanned_generation"] >= sp1.api("/v1/status")["generation"],
                     "i1's pass over its table after the change", timeout=60)
        prefixes = [f"198.18.{128 + 16 * i}.0/20" for i in range(8)]
        on_i1 = flows_of(sp1, prefixes)
        assert len(on_i1) >= FLOWS * 0.98, len(on_i1)
        # Steady traffic through i1 while i2 joins.
        load = gen(f, 1, ["--flows", str(FLOWS), "--rate", "20k", "--duration", "60", "--dst", VIP_WEB,
                          "--src-v4", "198.18.128.0/17"], "g2", wait=False)
        toggler = None
        try:
            if change == "snapshots_every_second":
                toggler = SnapshotToggler(sp1).start()
            t0 = time.monotonic()
            sp2 = f.spillway(2, config=config(2, extra_web=("b5", "b6")))
            sp2.wait_phase("serving", timeout=90)
            joined_s = time.monotonic() - t0
            changes = toggler.stop() if toggler else 0
        finally:
            if toggler:
                toggler.stop()
            load.terminate()
            load.wait(10)
        s1, s2 = sync_state(sp1), sync_state(sp2)
        sync_log = "\n".join(ln for ln in sp1.output().splitlines() if "sync" in ln)
        assert s2["bulk"] == "done", (s1, s2, sync_log[-3000:])
        assert s2["peers"][0]["bulk_answered"], s2
        # Counts: what i1 answered (every send, retries too), what i2 received of it (the same,
        # but for what its counts found missing and asked again), what its worker stored.
        answered = s1["answer_entries_sent"]
        copies = sp2.metrics().value("spillway_sync_worker_copies", worker="0")
        assert s2["bulk_entries"] + s2["lost"]["bulk_missing"] == answered, (s1, s2)
        # i1 dies; every flow, sent again through i2, reaches i1's backend.
        sp1.kill()
        fps = sp2.instance()["fingerprints"]
        for round_ in ("g3", "g3b", "g3c"):
            again = gen(f, 2, ["--flows", str(FLOWS), "--order", "sequential", "--count", str(FLOWS),
                               "--rate", "15k", "--dst", VIP_WEB, "--src-v4", "198.18.128.0/17"], round_)
            assert again["sent"] == FLOWS
            if sp2.api("/v1/conntrack/flows?service=web&limit=0", timeout=60)["matched"] >= len(on_i1):
                break
        assert sp2.instance()["fingerprints"] == fps, "i2's tables changed meanwhile: the test proves nothing"
        on_i2 = flows_of(sp2, prefixes)
        moved = {k: (b, on_i2.get(k)) for k, b in on_i1.items() if on_i2.get(k) != b}
        taken = sp2.metrics().value("spillway_forwarded_packets_total", reason="sync_takeover")
        figures = {"flows": len(on_i1), "at_risk_answered": answered, "copies_stored": copies,
                   "bulk_entries_received": s2["bulk_entries"], "bulk_ms": s2["bulk_ms"],
                   "bulk_retries": s2["bulk_retries"], "lost": s2["lost"], "joined_s": round(joined_s, 2),
                   "snapshot_changes_during_join": changes, "taken_over_on_i2": taken,
                   "backends_changed": len(moved)}
        record(f"sync_bulk_at_scale_{change}", figures)
        # Every flow kept its backend: each of those at risk through its copy (taken over),
        # the others by the same tables. At least 50,000 were at risk, and i2 held them all.
        assert not moved, (figures, list(moved.items())[:5])
        assert taken >= 50_000, figures
        assert copies >= taken, figures


class SnapshotToggler:
    """A new snapshot on ``sp`` every second: an override of ``other``'s backend b2 set and
    cleared in turn (``web``'s tables never change)."""

    def __init__(self, sp: FleetSpillway):
        self.sp, self.changes, self._stop = sp, 0, False
        import threading
        self._t = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "SnapshotToggler":
        self._t.start()
        return self

    def _run(self) -> None:
        state = "unhealthy"
        while not self._stop:
            b2 = self.sp.fleet.backend("b2").ipv4
            self.sp.ctl_run("set-health", b2, state, "--service", "other")
            state = "auto" if state == "unhealthy" else "unhealthy"
            self.changes += 1
            time.sleep(1.0)

    def stop(self) -> int:
        if not self._stop:
            self._stop = True
            self._t.join(10)
            self.sp.ctl_run("set-health", self.sp.fleet.backend("b2").ipv4, "auto", "--service", "other")
        return self.changes


# ---- a reused tuple ---------------------------------------------------------------------------------
def test_fs_8_a_reused_tuple_meets_no_stale_copy_when_its_owner_dies():
    """48 long-lived connections from fixed client ports over two instances; a fifth backend
    puts some at risk (shared). They are closed with RST and reopened from the same ports: new
    connections on the same 5-tuples, each at the table's current pick, which their owners tell
    the peer (FS-8: the copies it held are dropped). Then each connection's owner is killed:
    the survivor gives every connection the backend it was reopened on, no reset."""
    with Fleet(instances=2, **SYNC_BFD, backends_per_zone=3) as f:
        f.router.sysctl(**{"net.ipv4.fib_multipath_hash_policy": 3,
                           "net.ipv4.fib_multipath_hash_fields": "0x37"})
        for i in f.instances:
            f.spillway(i.k, config=spillway_config(f, i.k, sync=True), start=False)
        sps = start_all(f)
        ports = list(range(41_000, 41_048))
        ll = LongLived(f.client("c1"), VIP_WEB, port=T.ECHO_PORT, n=48, period=0.1, ports=ports).start()
        wait_all_progress(ll, {}, more=3)
        add_b5(f, sps)
        synced = wait_synced(sps)
        shared = sum(s["entries_sent"] for _, s in synced.values())
        assert shared > 0, synced
        ll.reset_and_reopen()
        rep = ll.report()
        assert rep["established"] == 48, summary(rep)
        wait_all_progress(ll, {}, more=5)
        removes = [sync_state(sp)["removes_sent"] for sp in sps]
        T.wait_until(lambda: sum(sync_state(sp)["removes_received"] for sp in sps) >= sum(removes),
                     "every removal received", timeout=10)
        on = carriers(sps, ll)
        victim = max(sps, key=lambda sp: len(on[sp.inst.short]))
        other = next(sp for sp in sps if sp is not victim)
        mark = answered_now(ll)
        t0 = time.monotonic()
        victim.kill()
        f.wait_nexthops(VIP_WEB, [other.inst.node], timeout=10, since=t0)
        wait_all_progress(ll, mark, more=5, timeout=30)
        rep = ll.stop(drain=3.0)
        record("sync_reused_tuple", {
            "connections": rep["connections"], "shared_before_reopen": shared, "removes_sent": sum(removes),
            "on_killed_instance": len(on[victim.inst.short]), "resets": rep["resets"],
            "backends_changed": rep["backends_changed"], "lost": rep["lost"]})
        assert sum(removes) > 0, "a connection at risk reopened on its tuple must be removed from the peer"
        check_clean(rep, "connections reopened on reused tuples, then their owner killed")


# ---- a quiet connection ----------------------------------------------------------------------------
@pytest.mark.long
def test_fs_2_a_quiet_connection_survives_its_owners_death_at_any_point_of_its_interval():
    """60 connections, each sending one message per (idle timeout - 1 s) = 59 s (the smallest
    idle timeout, 60 s), their first messages spread over the interval, so that when the owner
    dies each one is at another point of its interval (some just after a message that no
    refresh has carried yet: the case that needs a copy to outlast the owner's entry; the others
    still quiet since their handshake). A fifth backend makes some of them at risk; i1 and i2
    refresh their shared entries every 5 s. The instance that carries most is killed at a
    random moment of the first interval; every connection's next message still reaches its
    backend through the other, no reset."""
    idle = dict(idle_timeout_sec=60)
    with Fleet(instances=2, **SYNC_BFD, backends_per_zone=3) as f:
        def config(k: int, **kw) -> dict:
            cfg = spillway_config(f, k, sync=True, **kw)
            cfg["fleet"]["sync"]["refresh_sec"] = 5
            for s in cfg["services"]:
                s["backend_service"]["connection_tracking_policy"] = dict(idle)
            return cfg

        for i in f.instances:
            f.spillway(i.k, config=config(i.k), start=False)
        sps = start_all(f)
        f.wait_nexthops(VIP_WEB, [i.node for i in f.instances], timeout=15)
        ll = LongLived(f.client("c1"), VIP_WEB, port=T.ECHO_PORT, n=60, period=59.0).start()
        started = time.monotonic()
        for sp in sps:
            assert sp.reload(config(sp.inst.k, extra_web=("b5",)))["added"]
        wait_backends_healthy(sps)
        T.wait_until(lambda: len({json.dumps(sp.instance()["fingerprints"], sort_keys=True) for sp in sps}) == 1,
                     "the same new tables", timeout=15)
        wait_synced(sps)
        on = carriers(sps, ll, fresh_ms=61_000)
        victim = max(sps, key=lambda sp: len(on[sp.inst.short]))
        other = next(sp for sp in sps if sp is not victim)
        shared = sync_state(victim)["entries_sent"]
        # A random moment of the first interval: the connections whose first message (spread
        # over 59 s) is already sent are at some point after it, the others are still quiet.
        time.sleep(max(0.0, started + random.uniform(10.0, 50.0) - time.monotonic()))
        sent_first = sum(1 for c in ll.report()["per_connection"] if c["sent"] >= 1)
        mark = answered_now(ll)
        t0 = time.monotonic()
        victim.kill()
        f.wait_nexthops(VIP_WEB, [other.inst.node], timeout=10, since=t0)
        # Each connection's next message, at most 59 s away.
        wait_all_progress(ll, mark, more=1, timeout=75)
        rep = ll.stop(drain=3.0)
        taken = other.metrics().value("spillway_forwarded_packets_total", reason="sync_takeover")
        record("sync_quiet_connection", {
            "connections": rep["connections"], "on_killed_instance": len(on[victim.inst.short]),
            "first_message_sent_before_the_kill": sent_first, "shared_by_killed": shared, "taken_over": taken, "resets": rep["resets"],
            "backends_changed": rep["backends_changed"], "lost": rep["lost"]})
        assert shared > 0 and taken > 0, (shared, taken)
        check_clean(rep, "quiet connections, their owner killed in their interval")


# ---- a lower epoch ---------------------------------------------------------------------------------
def test_fs_6_an_instance_back_with_a_lower_epoch_is_taken_back_within_seconds():
    """i2 runs a while (its peer sees its epoch); it stops, and starts again with an epoch an
    hour lower (as after a clock stepped back across the restart with its epoch file lost;
    injected by the test-only setting ``SPILLWAY_TEST_SYNC_EPOCH``, the host's clock untouched).
    i1 takes it back after one exchange of hellos: proven, its bulk sync done, within
    seconds."""
    with Fleet(instances=2, **SYNC_BFD) as f:
        for i in f.instances:
            f.spillway(i.k, config=spillway_config(f, i.k, sync=True), start=False)
        sp1, sp2 = start_all(f)
        first = next(p for p in sync_state(sp1)["peers"] if p["id"] == 2)
        assert first["proven"] and first["epoch"], first
        sp2.stop()
        sp2.wait_gone()
        # The epoch file only lets the epoch grow: a lower one comes from the test-only setting.
        lower = first["epoch"] - 3_600_000
        sp2.env["SPILLWAY_TEST_SYNC_EPOCH"] = str(lower)
        t0 = time.monotonic()
        sp2.start(timeout=60)
        assert "SPILLWAY_TEST_SYNC_EPOCH" in sp2.output(), "the override is said"
        T.wait_until(lambda: next(p for p in sync_state(sp1)["peers"] if p["id"] == 2)["epoch"] == lower,
                     lambda: f"i1 to take i2 back: {sync_state(sp1)['peers']}", timeout=15)
        taken_back_s = time.monotonic() - t0
        sp2.wait_phase("serving", timeout=30)
        s2 = sync_state(sp2)
        assert s2["epoch"] == lower and s2["bulk"] == "done", s2
        refused = sync_state(sp1)["refused"]
        record("sync_lower_epoch", {"epoch_before": first["epoch"], "epoch_after": lower,
                                    "taken_back_s": round(taken_back_s, 2), "refused_meanwhile": refused})
        assert taken_back_s < 10, taken_back_s


# ---- replay ----------------------------------------------------------------------------------------
def test_fs_6_datagrams_recorded_from_a_live_fleet_replayed_after_a_restart_install_nothing():
    """i2's sync traffic from i1 is recorded on i2's kernel interface while the fleet lives: i1's
    hellos, its bulk request when it (re)starts, the entries at risk a fifth backend puts it to
    share. i1 stops for good; i2 restarts; the recorded datagrams are sent again from i1's
    address. i2 installs nothing, answers no bulk request, does not mark i1 up, and counts every
    one by its reason."""
    with Fleet(instances=2, **SYNC_BFD, backends_per_zone=3) as f:
        for i in f.instances:
            f.spillway(i.k, config=spillway_config(f, i.k, sync=True), start=False)
        sp1, sp2 = start_all(f)
        i1, i2 = f.instance(1), f.instance(2)
        pcap = f.state_dir / "sync.pcap"
        dump = i2.popen(["tcpdump", "-i", "spl0", "-w", str(pcap), "-U", "udp", "and", "port", "7455",
                         "and", "src", i1.node], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(1.0)
            ll = long_lived(f, n=60)
            add_b5(f, [sp1, sp2])  # its entries at risk
            wait_synced([sp1, sp2])
            restart(f, sp1)  # its bulk request, its hellos, acknowledgements
            ll.stop(drain=1.0)
            time.sleep(1.0)
        finally:
            dump.terminate()
            dump.wait(10)
        recorded = read_udp_payloads(pcap)
        kinds: dict[str, int] = {}
        for d in recorded:
            h = parse_header(d)
            if h is not None:
                kinds[h.kind_name] = kinds.get(h.kind_name, 0) + 1
        assert kinds.get("entries", 0) > 0 and kinds.get("bulk_request", 0) > 0 and kinds.get("hello", 0) > 0, kinds
        sp1.stop()
        sp1.wait_gone()
        restart_s = time.monotonic()
        sp2.stop()
        sp2.wait_gone()
        sp2.start(timeout=60)
        before = sync_state(sp2)
        # i1's address on a plain interface in its namespace (its Spillway is gone).
        f.standin_instance(1, vips=())
        with i1.entered():
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((i1.node, 7455))
        for d in recorded:
            s.sendto(d, (i2.node, 7455))
            time.sleep(0.001)
        s.close()
        replayed = [d for d in recorded if parse_header(d) and parse_header(d).kind_name != "hello"]
        hellos = len(recorded) - len(replayed)
        T.wait_until(lambda: sync_state(sp2)["refused"].get("unproven", 0) >= len(replayed)
                     and sync_state(sp2)["hellos_unproven"] >= hellos,
                     lambda: f"every replayed datagram counted: {sync_state(sp2)}", timeout=10)
        after = sync_state(sp2)
        peer = after["peers"][0]
        record("sync_replay", {"recorded": kinds, "refused": after["refused"],
                               "hellos_unproven": after["hellos_unproven"],
                               "entries_received": after["entries_received"] - before["entries_received"],
                               "bulk_answers": sp2.metrics().value("spillway_sync_bulk_answers_total")})
        assert after["entries_received"] == before["entries_received"], (before, after)
        assert sp2.metrics().value("spillway_sync_bulk_answers_total") == 0
        assert not peer["up"] and not peer["proven"], peer
        assert sp2.metrics().value("spillway_sync_worker_copies", worker="0") == 0
        assert time.monotonic() - restart_s < 60


def read_udp_payloads(pcap) -> list[bytes]:
    """The UDP payloads of an Ethernet pcap (IPv4, no options), in order."""
    data = pcap.read_bytes()
    out, off = [], 24
    while off + 16 <= len(data):
        incl = int.from_bytes(data[off + 8:off + 12], "little")
        frame = data[off + 16:off + 16 + incl]
        off += 16 + incl
        if len(frame) < 42 or frame[12:14] != b"\x08\x00":
            continue
        ihl = (frame[14] & 0x0F) * 4
        udp = 14 + ihl
        out.append(frame[udp + 8:])
    return out


# ---- key rotation ----------------------------------------------------------------------------------
def test_a_key_rotation_by_reloads_and_restarts_loses_no_connection():
    """Every instance moves from key A to key B, in the documented steps (docs/scale-out.md,
    "Rotating the key"): [A, B] everywhere by reloads; [B, A] on i1 by a restart and on i2 by a
    reload; a fifth backend added meanwhile; [B] everywhere, i1 by a reload and i2 by a restart.
    60 long-lived connections throughout: none reset, every entry at risk shared, no datagram
    refused for its key."""
    with Fleet(instances=2, **SYNC_BFD, backends_per_zone=3) as f:
        a, b = os.urandom(32), os.urandom(32)
        files = {k: str(f.state_dir / f"i{k}.sync.key") for k in (1, 2)}

        def config(k: int, **kw) -> dict:
            cfg = spillway_config(f, k, sync=True, **kw)
            cfg["fleet"]["sync"]["key_file"] = files[k]
            return cfg

        for k in (1, 2):
            write_key_file(files[k], [a])
            f.spillway(k, config=config(k), start=False)
        sps = start_all(f)
        sp1, sp2 = sps
        ll = long_lived(f)
        mark = answered_now(ll)
        key_ids = []

        def keys(k: int, ring: list[bytes]) -> None:
            write_key_file(files[k], ring)

        for k, sp in ((1, sp1), (2, sp2)):  # step 1: accept B too
            keys(k, [a, b])
            sp.reload(config(k))
        keys(1, [b, a])  # step 2: seal with B
        restart(f, sp1)
        key_ids.append(sync_state(sp1)["key_id"])
        keys(2, [b, a])
        sp2.reload(config(2))
        for sp in sps:  # a backend added meanwhile: entries at risk shared under key B
            assert sp.reload(config(sp.inst.k, extra_web=("b5",)))["added"]
        # b5 turns healthy on both, and its entries at risk are shared, before i2 restarts.
        wait_backends_healthy(sps)
        T.wait_until(lambda: len({json.dumps(sp.instance()["fingerprints"], sort_keys=True) for sp in sps}) == 1,
                     "the same new tables", timeout=15)
        synced = wait_synced(sps)
        keys(1, [b])  # step 3: B alone
        sp1.reload(config(1, extra_web=("b5",)))
        keys(2, [b])
        sp2.config = config(2, extra_web=("b5",))
        restart(f, sp2)
        key_ids.append(sync_state(sp2)["key_id"])
        wait_all_progress(ll, mark, more=10, timeout=30)
        rep = ll.stop(drain=3.0)
        refused = {sp.inst.short: sync_state(sp)["refused"] for sp in sps}
        record("sync_key_rotation", {
            "connections": rep["connections"], "key_ids": key_ids, "refused": refused,
            "entries_shared": {k: s["entries_sent"] for k, (_, s) in synced.items()},
            "previous_table": previous_table_counts(sps),
            "resets": rep["resets"], "backends_changed": rep["backends_changed"], "lost": rep["lost"]})
        for r in refused.values():
            assert not r.get("unknown_key") and not r.get("auth_failed"), refused
        assert len(set(key_ids)) == 1, key_ids
        check_clean(rep, "a key rotation by reloads and restarts")


# ---- a key holder's flood --------------------------------------------------------------------------
@pytest.mark.long
def test_fs_9_a_key_holders_flood_of_a_million_entries_leaves_the_instances_own_entries_alone():
    """The tests' own sync peer (syncwire.py) holds the key and plays instance 2 from its
    address: it proves itself live, then sends 1,000,000 valid entries of ``web`` as fast as
    it can. i1 stores copies up to their share of its table and counts the rest; its 40
    long-lived connections carry on, keep their entries, and 60 new connections opened after
    the flood get entries of their own."""
    with Fleet(instances=2, bfd=True) as f:
        cfg = spillway_config(f, 1, sync=True)
        cfg["fleet"]["sync"]["bulk_timeout_sec"] = 1
        sp1 = f.spillway(1, config=cfg)
        sp1.wait_phase("serving", timeout=60)
        f.wait_established([1], timeout=30)
        ll = long_lived(f, n=40)
        f.standin_instance(2, vips=())
        i2 = f.instance(2)
        key = read_key_file(sync_key(f))[0]
        peer = SyncPeer(i2, me=2, me_addr=i2.node, key=key, peer=1, peer_addr=f.instance(1).node)
        peer.handshake()
        backends = [f.backend(n).ipv4 for n in ("b1", "b2", "b3", "b4")]
        rng = random.Random(7)
        t0 = time.monotonic()
        sent = 0
        batch = 19 * 500
        while sent < 1_000_000:
            entries = [Entry(src=f"198.18.{rng.randrange(128, 256)}.{rng.randrange(1, 255)}",
                             sport=rng.randrange(1024, 65535), dst=VIP_WEB, dport=80, proto=6, service="web",
                             backend=backends[rng.randrange(4)]) for _ in range(min(batch, 1_000_000 - sent))]
            peer.send_entries(entries)
            sent += len(entries)
        flood_s = time.monotonic() - t0
        peer.close()
        T.wait_until(lambda: sync_state(sp1)["entries_received"] > 0, "the flood received", timeout=10)
        time.sleep(2.0)
        mark = answered_now(ll)
        wait_all_progress(ll, mark, more=5, timeout=15)
        # The instance's own connections: the old ones keep their entries, new ones get theirs.
        new = LongLived(f.client("c2"), VIP_WEB, port=T.ECHO_PORT, n=60, period=0.1).start()
        wait_all_progress(new, {}, more=3, timeout=15)
        m = sp1.metrics()
        copies = m.value("spillway_sync_worker_copies", worker="0")
        stored = {r: m.value("spillway_sync_worker_stored_total", worker="0", result=r)
                  for r in ("installed", "copy_limit", "table_full")}
        state = sync_state(sp1)
        own = sp1.api("/v1/conntrack/flows?service=web&client=198.19.0.0/24&limit=1000")
        own_entries = [fl for fl in own["flows"] if not fl.get("peer")]
        rep, rep_new = ll.stop(drain=2.0), new.stop(drain=2.0)
        figures = {"entries_sent": sent, "flood_s": round(flood_s, 2), "received": state["entries_received"],
                   "copies": copies, "stored": stored, "limited": state["limited"], "lost": state["lost"],
                   "own_entries": len(own_entries), "resets": rep["resets"] + rep_new["resets"]}
        record("sync_key_holder_flood", figures)
        capacity = 65536
        assert copies <= capacity * 0.5 + 16, figures
        assert stored["copy_limit"] + stored["table_full"] + sum(state["limited"].values()) \
            + state["lost"]["kernel_drops"] > 0, figures
        assert len(own_entries) == 100, figures
        check_clean(rep, "established connections under a key holder's flood")
        check_clean(rep_new, "connections opened after a key holder's flood")


# ---- first packets ---------------------------------------------------------------------------------
def test_the_first_packets_after_a_start_all_reach_a_backend_whose_mac_answers_late():
    """``other`` has one backend, b2, whose namespace drops every ARP request for the first 3 s
    after the instance starts: its MAC answers late. The router is told to send ``other``'s VIP
    to i1 already (a static route), and 100 SYNs go to it within the first 100 ms of i1
    serving. All 100 connections are answered by b2; i1 counts no ``neighbour_unresolved``."""
    with Fleet(instances=1, bfd=True) as f:
        cfg = spillway_config(f, 1)
        for s in cfg["services"]:
            if s["name"] == "other":
                s["backend_service"]["backends"] = [
                    {"group": "other-a", "zone": "a", "health_check": "ho", "endpoints": [f.backend("b2").ipv4]}]
        i1, b2 = f.instance(1), f.backend("b2")
        f.router.ip("route", "add", f"{VIP_OTHER}/32", "via", i1.node, "metric", "1")
        b2.run(["nft", "add table arp late"])
        b2.run(["nft", "add chain arp late in { type filter hook input priority 0; policy drop; }"])
        sp = f.spillway(1, config=cfg, start=False)
        t_start = time.monotonic()
        sp.start(timeout=60)
        while time.monotonic() - t_start < 3.0:
            time.sleep(0.05)
        b2.run(["nft", "delete table arp late"])
        T.wait_until(lambda: sp.instance()["phase"] == "serving", "i1 serving", timeout=30, poll=0.01)
        c = f.client("c1")
        socks = []
        for _ in range(100):
            s = c.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            s.connect_ex((VIP_OTHER, T.ECHO_PORT))
            socks.append(s)
        import selectors
        sel = selectors.DefaultSelector()
        for s in socks:
            sel.register(s, selectors.EVENT_WRITE)
        deadline = time.monotonic() + 0.9  # before a SYN is sent again (1 s)
        done = set()
        while time.monotonic() < deadline and len(done) < 100:
            for key, _ in sel.select(0.05):
                if key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    done.add(key.fileobj)
                sel.unregister(key.fileobj)
        for s in socks:
            s.close()
        m = sp.metrics()
        unresolved = sum(m.values("spillway_dropped_packets_total", reason="neighbour_unresolved").values())
        waited = sum(m.values("spillway_neighbour_waited_frames_total").values())
        record("first_packets", {"connections_answered": len(done), "neighbour_unresolved": unresolved,
                                 "waited_for_mac": waited, "phase_waited_for": sp.instance().get("waiting_for")})
        assert unresolved == 0
        assert len(done) == 100, len(done)


# ---- the table file --------------------------------------------------------------------------------
def test_the_table_file_is_consumed_once_read_and_a_link_or_fifo_is_refused():
    """One instance with ``fleet.table_file``: a clean stop writes it; the next start restores it
    and removes it; killed, started again: nothing to restore. A symbolic link, then a FIFO, at
    the path: refused with a line saying why, and the start goes on."""
    with Fleet(instances=1) as f:
        table = f.state_dir / "i1.conntrack.table"
        cfg = spillway_config(f, 1, stop_grace_sec=1.0)
        cfg["fleet"] = {"table_file": str(table)}
        sp = f.spillway(1, config=cfg)
        sp.wait_phase("serving", timeout=60)
        f.wait_established([1], timeout=30)
        ll = long_lived(f, n=20)
        sp.stop()
        ll.stop(drain=0)
        assert table.exists()
        sp.wait_gone()
        sp.start(timeout=60)
        restored = re.search(r"restored (\d+) of (\d+) entries.*the file is removed", sp.output())
        assert restored and int(restored[1]) >= 20, sp.output()[-2000:]
        assert not table.exists()
        sp.kill()
        sp.start(timeout=60)
        assert "does not exist" in sp.output() and "restored" not in sp.output(), sp.output()[-2000:]
        sp.stop()
        sp.wait_gone()
        lines = {}
        elsewhere = f.state_dir / "elsewhere.table"
        elsewhere.write_bytes(b"SPTB")
        for kind in ("link", "fifo"):
            table.unlink(missing_ok=True)  # what the clean stop before wrote
            if kind == "link":
                os.symlink(elsewhere, table)
            else:
                os.mkfifo(table)
            sp.start(timeout=60)
            sp.wait_phase("serving", timeout=60)
            line = next((ln for ln in sp.output().splitlines() if "fleet.table_file" in ln), "")
            lines[kind] = line
            sp.kill()
            sp.wait_gone()
            assert os.path.lexists(table), "left in place"
            os.unlink(table)
        record("table_file_consumed", {"restored": int(restored[1]), "refusals": lines})
        assert "a symbolic link" in lines["link"] and "refused" in lines["link"], lines
        assert "a FIFO" in lines["fifo"] and "refused" in lines["fifo"], lines
