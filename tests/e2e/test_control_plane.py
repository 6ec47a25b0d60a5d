"""Control plane, end to end: the real ``spillway`` daemon in the balancer namespace with real
health checks (HTTP probes from the balancer host's kernel to the backends' servers), its admin
API on a Unix socket (``spillwayctl --json``) and its Prometheus metrics (parsed with
``prometheus_client``'s reference text parser), and real traffic from client namespaces.

What is shown:

1. Health (HC-1, HC-3, CP-1): a backend whose HTTP server stops is reported unhealthy within
   ``interval x unhealthy_threshold + interval`` (plus a stated margin), not before
   ``unhealthy_threshold`` failed probes; new connections avoid it while an established TCP
   connection keeps going to it (its packets are still decapsulated there, and only there);
   restarted, it is healthy again within ``healthy_threshold x interval + interval`` and gets
   new connections again. ``spillway_backend_healthy`` goes 1 -> 0 -> 1, probe counters grow.
2. Reload that removes a backend with ``draining_timeout_sec`` (CD-1, CD-3, NX-4), through the
   API and through SIGHUP: its pinned UDP flows keep reaching it while it drains (checked against
   the daemon's own clock: still draining after each check), then, once the deadline has passed
   and the idle sweep has reclaimed their entries, move as new connections; new flows never reach
   it; flows of backends that stay keep their backend even when the reload moved their hash to
   another backend.
3. Reload with an invalid file (NX-3): ``spillwayctl reload`` fails naming the field, line and
   column; the snapshot generation, the backends and the traffic are exactly as before; a
   SIGHUP with the same file is logged as rejected and changes nothing either.
4. ``/metrics`` parsed by ``prometheus_client``: forwarded packets by reason and per-backend new
   connections equal the traffic sent; ``spillway_service_failover_active`` 0 -> 1 when every
   primary is overridden unhealthy (and traffic goes to the failover backends);
   ``spillway_service_zonal_spill_active`` 0 -> 1 for a zone whose backends fail their health
   checks under ``ZONAL_AFFINITY_SPILL_CROSS_ZONE`` (and that zone's clients go cross-zone).

Timing margins: the machine has 2 cores and the daemon busy-polls one of them, so every bound
on a health transition gets ``MARGIN`` seconds on top of what the thresholds allow.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import socket
import struct
import time
from collections import Counter

import pytest

import pcapng
import topo as T
from balancer import BIN, CTL, Spillway, make_config, needs_built, service

pytestmark = needs_built(BIN, CTL)

HTTP_RE = re.compile(r"(b\d+) (\S+):(\d+)\n")
UDP_RE = re.compile(r"(b\d+) len=(\d+) sha256=[0-9a-f]{64}")

# Health check of test 1 (and of the zonal service of test 4).
INTERVAL, TIMEOUT, UNHEALTHY_T, HEALTHY_T = 1.0, 0.5, 2, 2
HC = {"web-http": {"type": "HTTP", "port": T.HTTP_PORT, "path": "/", "check_interval_sec": INTERVAL,
                   "timeout_sec": TIMEOUT, "healthy_threshold": HEALTHY_T, "unhealthy_threshold": UNHEALTHY_T}}
# Extra seconds allowed on a health transition: a loaded 2-core machine (one core busy-polled by
# the daemon, the other shared by the probes' runtime, spillwayctl and the test).
MARGIN = 1.5
# Probes start every interval +-5 % (health.rs); a probe in flight as the server stops may fail
# just before the clock starts: the least time `n` consecutive failures can take is about
# (n - 1) x interval x (1 - LOW).
LOW = 0.15

# Draining timeout of test 2, and how close to its deadline (by the daemon's clock) the late
# check runs; the worker sweeps its whole connection table once per SWEEP_PERIOD_SECS
# (dataplane/src/worker.rs).
DRAIN_SEC = 8
LATE_MS = 2500
SWEEP_PERIOD_SECS = 10
VIP_FO = "198.18.0.101"
VIP_ZA = "198.18.0.102"


# ---- helpers ------------------------------------------------------------------------------------
@contextlib.contextmanager
def started(t: T.Topology, services: list[dict], health_checks: dict | None = None):
    """The daemon with `services`, answering on its first VIP, every backend resolved."""
    lb = Spillway(t, make_config(t, services, health_checks=health_checks))
    with lb:
        lb.wait_ready(t.clients[0])
        lb.wait_neighbours()
        yield lb


def with_check(svc: dict, check: str = "web-http") -> dict:
    for g in svc["backend_service"]["backends"]:
        g["health_check"] = check
    return svc


def curl(c: T.Client, vip: str = T.VIP4) -> str:
    """GET / through the VIP with curl (a new TCP connection): the backend that answered."""
    r = c.run(["curl", "-sS", "-m", "5", "--connect-timeout", "3", f"http://{vip}/"], check=False)
    m = HTTP_RE.fullmatch(r.stdout)
    assert m and m[2] == c.ipv4, f"curl from {c.short} to {vip}: {r.stdout!r} {r.stderr!r}"
    return m[1]


def udp_flow(c: T.Client) -> socket.socket:
    """A UDP socket in `c` bound to a fixed source port: one flow for as long as it is open."""
    s = c.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((c.ipv4, 0))
    s.settimeout(3)
    return s


def udp_ask(s: socket.socket, vip: str = T.VIP4, payload: bytes = b"ping") -> str:
    """One datagram on the flow `s` to VIP:5353; the backend named in the reply (from the VIP)."""
    s.sendto(payload, (vip, T.UDP_PORT))
    data, addr = s.recvfrom(2048)
    assert addr == (vip, T.UDP_PORT), f"reply from {addr}"
    m = UDP_RE.fullmatch(data.decode())
    assert m and int(m[2]) == len(payload), data
    return m[1]


def delta(before: dict, after: dict, key: str) -> dict[str, int]:
    return {b: after[b][key] - before[b][key] for b in before}


def holders(t: T.Topology, client_ip: str, port: int, timeout: float = 2.0) -> list[str]:
    """Backends with an established TCP socket VIP:80 <-> client_ip:port (`ss`)."""
    peers = {f"{client_ip}:{port}", f"[::ffff:{client_ip}]:{port}"}
    return T.wait_until(
        lambda: [b.short for b in t.backends
                 if peers & set(b.run(["ss", "-Htn", "state", "established"]).stdout.split())],
        f"a backend with an established connection from {client_ip}:{port}", timeout=timeout, poll=0.02)


def flow_args(src: str, sport: int, proto: str, dst: str = T.VIP4, dport: int | None = None) -> list[str]:
    dport = dport or (T.HTTP_PORT if proto == "tcp" else T.UDP_PORT)
    return ["--src", src, "--dst", dst, "--proto", proto, "--sport", str(sport), "--dport", str(dport)]


def entry_backends(lb: Spillway, *flow) -> list[str]:
    """The backends of the flow's conntrack entries on every worker (`spillwayctl lookup`)."""
    reply = lb.ctl("lookup", *flow_args(*flow))
    return [w["entry"]["backend"] for w in reply["workers"] if w["state"] == "found"]


def fwd(m) -> dict[str, float]:
    return m.by("spillway_forwarded_packets_total", "reason")


def wait_metrics(lb: Spillway, cond, timeout: float = 3.0):
    """Scrape until `cond(metrics)` holds (worker counters are read, not pushed); that scrape."""
    last = [None]

    def met():
        last[0] = lb.metrics()
        return last[0] if cond(last[0]) else None

    return T.wait_until(met, lambda: f"a metrics condition; forwarded by reason: {fwd(last[0])}", timeout=timeout)


def wait_logged(lb: Spillway, text: str, mark: int, timeout: float = 10.0) -> str:
    """Wait until the daemon's log, after offset `mark`, contains `text`; that part of the log."""
    return T.wait_until(lambda: text in lb.output()[mark:] and lb.output()[mark:],
                        lambda: f"{text!r} in the log; logged: {lb.output()[mark:]!r}", timeout=timeout)


def raw_tcp(c: T.Client, sport: int, n: int, dst: str = T.VIP4) -> None:
    """`n` ACK segments with a byte of data each on the connection c:sport -> dst:80, from a raw
    socket (the client's own socket may already be reset)."""
    with c.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP) as raw:
        raw.bind((c.ipv4, 0))
        for i in range(n):
            seg = T.tcp(c.ipv4, dst, sport, T.HTTP_PORT, flags=T.TCP_ACK | T.TCP_PSH, seq=50_000 + i, ack=1,
                        payload=b"z")
            raw.sendto(seg, (dst, 0))


# ---- 1: health checks, CP-1 ---------------------------------------------------------------------
def test_health_check_takes_a_dead_backend_out_and_back():
    with T.Topology(clients_per_zone=2) as t, \
            started(t, [with_check(service(t, vips=(T.VIP4,)))], health_checks=HC) as lb:
        key = {b.short: f"web/{b.ipv4}" for b in t.backends}
        # HC-3: pessimistic start; every backend passes its two probes.
        lb.wait_health({k: True for k in key.values()}, timeout=15)
        states = lb.backends()
        assert all(b["probe"] == "healthy" and b["check"] == "web-http" and b["eligible"] for b in states.values())

        # A long connection (half an HTTP request: the server waits for the rest).
        c1 = t.client("c1")
        long = c1.socket(socket.AF_INET, socket.SOCK_STREAM)
        long.settimeout(5)
        long.connect((T.VIP4, T.HTTP_PORT))
        port = long.getsockname()[1]
        long.sendall(b"GET / HTTP/1.1\r\nHost: vip\r\n")
        owners = holders(t, c1.ipv4, port)
        assert len(owners) == 1, owners
        owner = t.backend(owners[0])
        assert entry_backends(lb, c1.ipv4, port, "tcp") == [owner.ipv4]
        m0 = lb.metrics()
        assert m0.value("spillway_backend_healthy", service="web", backend=owner.ipv4) == 1

        # Its server stops: probes are refused; two in a row make it unhealthy.
        t.stop_server(owner)
        down = lb.wait_health({key[owner.short]: False}, timeout=15)
        bound = INTERVAL * UNHEALTHY_T + INTERVAL
        assert (UNHEALTHY_T - 1) * INTERVAL * (1 - LOW) <= down <= bound + MARGIN, \
            f"unhealthy after {down:.2f} s (allowed {bound} s + {MARGIN} s)"
        st = lb.backends()[key[owner.short]]
        assert (st["probe"], st["healthy"], st["eligible"], st["last_result"]) == \
            ("unhealthy", False, False, "refused"), st
        assert sum(b["healthy"] for b in lb.backends().values()) == 3
        m1 = lb.metrics()
        assert m1.value("spillway_backend_healthy", service="web", backend=owner.ipv4) == 0
        assert m1.value("spillway_backend_probe_healthy", service="web", backend=owner.ipv4) == 0
        assert m1.value("spillway_service_eligible_backends", service="web") == 3
        probes = "spillway_health_check_probes_total"
        lbl = dict(service="web", backend=owner.ipv4, check="web-http")
        # HC-1: the failures in a row that made it unhealthy (the last refused, asserted above;
        # one probe under way while the server stopped can fail otherwise, a reset: `error`).
        failed = sum(m1.value(probes, result=r, **lbl) - m0.value(probes, result=r, **lbl)
                     for r in ("refused", "timeout", "bad_status", "bad_reply", "error"))
        assert failed >= UNHEALTHY_T, failed
        for b in t.backends:
            if b is not owner:
                assert m1.value("spillway_backend_healthy", service="web", backend=b.ipv4) == 1

        # New connections avoid it: 40 curls from four clients in two zones.
        answers = Counter(curl(c) for _ in range(10) for c in t.clients)
        assert sum(answers.values()) == 40 and owner.short not in answers, answers
        assert len(answers) == 3, f"new connections not spread over the 3 healthy backends: {answers}"

        # CP-1 (DEFAULT_FOR_PROTOCOL, PER_CONNECTION): the established TCP connection persists on
        # the unhealthy backend. Its next bytes (and 5 more segments of the same connection) are
        # decapsulated by the owner only (whose kernel answers with RST: nothing listens now).
        before, mb = t.settled_decaps(), lb.metrics()
        long.sendall(b"X-Later: yes\r\n\r\n")
        raw_tcp(c1, port, 5)
        with contextlib.suppress(TimeoutError):  # the assertion below says where they went
            t.wait_decap(owner, {"inner_tcp": before[owner.short]["inner_tcp"] + 6})
        after = t.settled_decaps()
        d = delta(before, after, "inner_tcp")
        assert d[owner.short] == 6 and all(n == 0 for b, n in d.items() if b != owner.short), \
            f"segments of the connection held by {owner.short} were decapsulated by {d}"
        ma = wait_metrics(lb, lambda m: fwd(m)["conntrack_hit"] - fwd(mb)["conntrack_hit"] >= 6)
        assert fwd(ma)["conntrack_hit"] - fwd(mb)["conntrack_hit"] == 6
        assert fwd(ma)["replaced_unhealthy"] == fwd(mb)["replaced_unhealthy"] == 0
        assert fwd(ma)["new_connection"] == fwd(mb)["new_connection"]
        pk = {b.short: ma.value("spillway_backend_packets_total", service="web", backend=b.ipv4)
              - mb.value("spillway_backend_packets_total", service="web", backend=b.ipv4) for b in t.backends}
        assert pk == {b: (6 if b == owner.short else 0) for b in pk}, pk
        assert entry_backends(lb, c1.ipv4, port, "tcp") == [owner.ipv4]
        long.close()

        # The server comes back: two successful probes make it healthy again.
        t.start_server(owner)
        up = lb.wait_health({key[owner.short]: True}, timeout=15)
        bound = HEALTHY_T * INTERVAL + INTERVAL
        assert (HEALTHY_T - 1) * INTERVAL * (1 - LOW) <= up <= bound + MARGIN, \
            f"healthy after {up:.2f} s (allowed {bound} s + {MARGIN} s)"
        m2 = lb.metrics()
        assert m2.value("spillway_backend_healthy", service="web", backend=owner.ipv4) == 1
        assert m2.value("spillway_backend_probe_healthy", service="web", backend=owner.ipv4) == 1
        assert m2.value(probes, result="success", **lbl) - m1.value(probes, result="success", **lbl) >= HEALTHY_T
        assert m2.value("spillway_health_check_duration_seconds_count", **lbl) > \
            m1.value("spillway_health_check_duration_seconds_count", **lbl)
        assert m2.value("spillway_service_eligible_backends", service="web") == 4
        answers = Counter(curl(c) for _ in range(10) for c in t.clients)
        assert sum(answers.values()) == 40 and owner.short in answers, answers
        final = lb.stop()
    print(f"\nhealth: unhealthy after {down:.2f} s, healthy again after {up:.2f} s")
    assert final.get("drop.neighbour_unresolved", 0) == 0, final


# ---- 2: reload removing a backend, connection draining --------------------------------------------
def without(cfg: dict, addr: str) -> dict:
    cfg = copy.deepcopy(cfg)
    bs = cfg["services"][0]["backend_service"]
    for g in bs["backends"]:
        g["endpoints"] = [e for e in g["endpoints"] if e != addr]
    bs["backends"] = [g for g in bs["backends"] if g["endpoints"]]
    return cfg


@pytest.mark.parametrize("how", ["api", "sighup"])
def test_reload_removing_a_backend_drains_its_flows(how):
    with T.Topology() as t:
        svc = service(t, vips=(T.VIP4,), backend_service={"connection_draining": {"draining_timeout_sec": DRAIN_SEC}})
        with started(t, [svc]) as lb, contextlib.ExitStack() as stack:
            # 24 UDP flows (fixed source ports), each pinned to the backend that answered it.
            socks = [stack.enter_context(udp_flow(c)) for _ in range(12) for c in t.clients]
            pinned = {s: udp_ask(s) for s in socks}
            x = t.backend(pinned[socks[0]])  # the backend to remove
            xkey = f"web/{x.ipv4}"
            gone = [s for s in socks if pinned[s] == x.short]
            stay = [s for s in socks if pinned[s] != x.short]
            assert stay, pinned
            status0 = lb.ctl("status")
            gen0, uptime0 = status0["generation"], status0["uptime_ms"]

            # The new file: without x, and the backend left in x's group weighs 4 (CH-3), which
            # moves much of the hash space between the backends that stay: their flows must not move.
            cfg = without(lb.config, x.ipv4)
            other = next(g for g in cfg["services"][0]["backend_service"]["backends"]
                         if g["zone"] == f"zone-{x.zone.name}")
            other["weight"] = 4
            lb.write(cfg)
            m0 = lb.metrics()
            if how == "api":
                reply = lb.ctl("reload")
                assert [r["backend"] for r in reply["removed"]] == [xkey], reply
                assert reply["added"] == [] and reply["generation"] > gen0, reply
            else:
                mark = len(lb.output())
                lb.reload()
                logged = wait_logged(lb, "configuration reloaded", mark)
                assert f"backend removed, draining backend={xkey}" in logged, logged
                assert lb.ctl("status")["generation"] > gen0
            st = lb.backends()
            assert st[xkey]["status"] == "draining" and not st[xkey]["eligible"], st
            # CD-3: the deadline is T after the reload, on the daemon's clock: at least T after
            # its uptime read before the reload, at most T after its clock now.
            remaining = st[xkey]["draining_remaining_ms"]
            assert st[xkey]["draining_deadline_ms"] >= uptime0 + DRAIN_SEC * 1000, (uptime0, st[xkey])
            assert 0 < remaining <= DRAIN_SEC * 1000, st[xkey]
            m = lb.metrics()
            assert m.value("spillway_backend_draining", service="web", backend=x.ipv4) == 1
            assert m.value("spillway_service_eligible_backends", service="web") == 3

            def still_draining(what: str) -> int:
                """`what` (just done) happened before the deadline: x is still draining after it.
                The milliseconds left."""
                b = lb.backends().get(xkey)
                assert b is not None and b["status"] == "draining" and b["draining_remaining_ms"] > 0, \
                    f"{what} ended after the {DRAIN_SEC} s draining deadline (machine too slow?): {b}"
                return b["draining_remaining_ms"]

            # While x drains: every flow still reaches its backend, x included (CD-3, NX-4).
            assert {s: udp_ask(s) for s in socks} == pinned
            assert entry_backends(lb, t.clients[0].ipv4, socks[0].getsockname()[1], "udp") == [x.ipv4]
            # CD-1: new flows never select x. Each stays open until the end, so that no two get
            # the same source port (a port the kernel reused would be an earlier flow, tracked,
            # not a new one).
            new = Counter()
            for _ in range(20):
                for c in t.clients:
                    new[udp_ask(stack.enter_context(udp_flow(c)))] += 1
            assert sum(new.values()) == 40 and x.short not in new, new
            m1 = wait_metrics(lb, lambda m: fwd(m)["new_connection"] - fwd(m0)["new_connection"] >= 40)
            assert fwd(m1)["conntrack_hit"] - fwd(m0)["conntrack_hit"] == len(socks)
            assert fwd(m1)["new_connection"] - fwd(m0)["new_connection"] == 40
            assert fwd(m1)["replaced_drained"] == 0
            still_draining("sending the flows while x drains")
            # Late in the draining time (the daemon's clock says so), x's flows still reach x.
            T.wait_until(lambda: still_draining("waiting for the late check") <= LATE_MS,
                         f"{xkey} to have at most {LATE_MS} ms of draining left", timeout=DRAIN_SEC, poll=0.1)
            assert {s: udp_ask(s) for s in gone} == {s: x.short for s in gone}
            late = still_draining("the late check")

            # After the deadline (CD-3): the daemon frees x's slot and republishes; the worker's idle
            # sweep reclaims x's entries, which are invalid for every packet now
            # (decide::is_reclaimable), within one sweep period (every bucket once per
            # SWEEP_PERIOD_SECS, dataplane/src/worker.rs). Wait for both; then the moved flows are
            # new connections (not `replaced_drained`, which needs a packet before the sweep: the
            # decision-rule tests cover that), one new entry each; the others stay.
            T.wait_until(lambda: xkey not in lb.backends(), f"{xkey} to be freed after its deadline",
                         timeout=late / 1000 + 5, poll=0.1)
            T.wait_until(lambda: all(entry_backends(lb, s.getsockname()[0], s.getsockname()[1], "udp") == []
                                     for s in gone),
                         lambda: f"the sweep to reclaim the entries of {x.short}'s flows: "
                                 f"{[entry_backends(lb, s.getsockname()[0], s.getsockname()[1], 'udp') for s in gone]}",
                         timeout=SWEEP_PERIOD_SECS + 10, poll=0.2)
            m2 = lb.metrics()
            after_gone = {s: udp_ask(s) for s in gone}
            assert x.short not in after_gone.values(), after_gone
            assert {s: udp_ask(s) for s in stay} == {s: pinned[s] for s in stay}
            total = len(gone) + len(stay)
            m3 = wait_metrics(lb, lambda m: sum(fwd(m).values()) - sum(fwd(m2).values()) >= total)
            d = {k: fwd(m3)[k] - fwd(m2)[k] for k in fwd(m3)}
            assert d == {**{k: 0 for k in d}, "conntrack_hit": len(stay), "new_connection": len(gone)}, d
            assert m3.value("spillway_service_new_connections_total", service="web") - \
                m2.value("spillway_service_new_connections_total", service="web") == len(gone)
            # Re-pinned: the next datagram of a moved flow is a conntrack hit on its new backend.
            assert {s: udp_ask(s) for s in gone} == after_gone
            # NX-4 is not just consistent hashing: some flows of staying backends now hash
            # elsewhere, and still went to their backend above.
            moved = [s for s in stay if lb.ctl("explain", *flow_args(s.getsockname()[0], s.getsockname()[1], "udp"))
                     ["hashed_backend"] != t.backend(pinned[s]).ipv4]
            assert moved, "the reload moved no staying flow's hash: NX-4 not exercised"
            final = lb.stop()
    print(f"\ndrain ({how}): {len(gone)} flow(s) drained from {x.short}, {len(stay)} stayed, "
          f"{len(moved)} of them hash elsewhere now; deadline {remaining / 1000:.2f} s after the reload, "
          f"late check {late} ms before it; moved flows counted as {d}")
    assert final.get("forward.replaced_drained", 0) == 0, final


# ---- 3: a rejected reload changes nothing ---------------------------------------------------------
def test_invalid_reload_is_rejected_and_changes_nothing():
    with T.Topology() as t:
        with started(t, [service(t, vips=(T.VIP4,))]) as lb, contextlib.ExitStack() as stack:
            socks = [stack.enter_context(udp_flow(c)) for _ in range(8) for c in t.clients]
            pinned = {s: udp_ask(s) for s in socks}
            status0, backends0, services0 = lb.ctl("status"), lb.backends(), lb.ctl("services")
            gen0 = status0["generation"]

            def hashed() -> dict[int, str]:
                # Where a new flow from each of 12 source ports would go now (Maglev, CH-1).
                return {p: lb.ctl("explain", *flow_args(t.clients[0].ipv4, p, "udp"))["hashed_backend"]
                        for p in range(40000, 40012)}

            hashed0 = hashed()
            assert len(set(hashed0.values())) >= 2, hashed0

            # Only b4 stays (which, if applied, would move every flow) and one invalid value.
            cfg = without(without(without(lb.config, "198.18.1.1"), "198.18.1.2"), "198.18.2.1")
            cfg["services"][0]["backend_service"]["connection_draining"] = {"draining_timeout_sec": 7200}
            lb.write(cfg)
            text = lb.path.read_text()
            line = text[:text.index('"draining_timeout_sec": 7200')].count("\n") + 1
            field = "services[0].backend_service.connection_draining.draining_timeout_sec"

            r = lb.ctl_run("reload")
            assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
            err = json.loads(r.stderr)
            assert [(e["field"], e["line"]) for e in err["errors"]] == [(field, line)], err
            assert "7200" in err["errors"][0]["message"]
            plain = lb.ctl_run("reload", json_out=False)
            assert plain.returncode == 1
            assert re.search(rf"{re.escape(str(lb.path))}:{line}:\d+: field `{re.escape(field)}`", plain.stderr), \
                plain.stderr
            assert lb.ctl("status")["generation"] == gen0
            assert lb.backends() == backends0
            assert lb.metrics().value("spillway_snapshot_generation") == gen0

            def same_traffic() -> None:
                # Same snapshot, same hash tables; pinned flows keep their backend; new flows
                # still spread.
                assert lb.ctl("status")["generation"] == gen0
                assert lb.backends() == backends0
                assert lb.ctl("services") == services0
                assert hashed() == hashed0
                assert {s: udp_ask(s) for s in socks} == pinned
                new = Counter()
                for _ in range(10):
                    for c in t.clients:
                        with udp_flow(c) as s:
                            new[udp_ask(s)] += 1
                new += Counter(curl(c) for c in t.clients for _ in range(2))
                assert len(new) >= 3, f"new flows no longer spread: {new}"

            same_traffic()

            # SIGHUP with the same file: logged as rejected, nothing changes.
            mark = len(lb.output())
            lb.reload()
            logged = wait_logged(lb, "reload rejected", mark)
            assert "running configuration kept" in logged and field in logged and f":{line}:" in logged, logged
            assert "configuration reloaded" not in logged
            assert lb.ctl("status")["generation"] == gen0
            assert lb.backends() == backends0
            same_traffic()
            final = lb.stop()
    assert final.get("forward.replaced_drained", 0) == final.get("forward.replaced_unhealthy", 0) == 0, final


# ---- 4: metrics, failover and zonal spill gauges ----------------------------------------------------
def test_metrics_parse_and_match_traffic_failover_and_zonal_spill():
    with T.Topology(vips4=(T.VIP4, VIP_FO, VIP_ZA)) as t:
        b = {x.short: x.ipv4 for x in t.backends}
        web = service(t, name="web", vips=(T.VIP4,))
        fo = service(t, name="fo", vips=(VIP_FO,), groups=[
            {"group": "fo-primary", "zone": "zone-a", "endpoints": [b["b1"], b["b2"]]},
            {"group": "fo-failover", "zone": "zone-b", "failover": True, "endpoints": [b["b3"], b["b4"]]},
        ])
        za = with_check(service(t, name="za", vips=(VIP_ZA,), backend_service={
            "zonal_affinity": {"spillover": "ZONAL_AFFINITY_SPILL_CROSS_ZONE"}}))
        with started(t, [web, fo, za], health_checks=HC) as lb, contextlib.ExitStack() as stack:
            lb.wait_health({f"za/{ip}": True for ip in b.values()}, timeout=15)
            m0 = lb.metrics()  # parsed by prometheus_client: raises on anything malformed
            assert set(fwd(m0)) >= {"new_connection", "conntrack_hit", "replaced_expired", "replaced_drained",
                                    "replaced_flushed", "replaced_unhealthy"}
            assert sum(fwd(m0).values()) == 0, fwd(m0)
            assert m0.value("spillway_snapshot_generation") == lb.ctl("status")["generation"]

            # web: 16 UDP flows of 3 datagrams each -> 16 new_connection + 32 conntrack_hit.
            flows, per_backend = 16, Counter()
            for i in range(flows // 2):
                for c in t.clients:
                    s = stack.enter_context(udp_flow(c))
                    got = {udp_ask(s, T.VIP4, b"x" * (k + 1)) for k in range(3)}
                    assert len(got) == 1, got
                    per_backend[got.pop()] += 1
            m1 = wait_metrics(lb, lambda m: sum(fwd(m).values()) >= 3 * flows)
            assert fwd(m1) == {**{k: 0 for k in fwd(m1)}, "new_connection": flows, "conntrack_hit": 2 * flows}, fwd(m1)
            nc = m1.by("spillway_backend_new_connections_total", "backend", service="web")
            assert sum(nc.values()) == flows
            assert {x: nc[ip] for x, ip in b.items() if nc[ip]} == dict(per_backend), (nc, per_backend)
            assert m1.value("spillway_service_new_connections_total", service="web") == flows
            assert m1.value("spillway_service_packets_total", service="web") == 3 * flows
            pk = m1.by("spillway_backend_packets_total", "backend", service="web")
            assert {x: pk[ip] for x, ip in b.items() if pk[ip]} == {x: 3 * n for x, n in per_backend.items()}
            assert sum(m1.by("spillway_conntrack_inserts_total", "worker").values()) == flows

            # fo: primaries healthy -> no failover; traffic on the primaries only.
            assert m1.value("spillway_service_failover_active", service="fo") == 0
            assert m1.value("spillway_service_eligible_kind", service="fo", kind="HealthyPrimary") == 1
            assert m1.value("spillway_service_failover_active", service="web") == 0
            seen = Counter(udp_ask(stack.enter_context(udp_flow(c)), VIP_FO) for _ in range(8) for c in t.clients)
            assert set(seen) <= {"b1", "b2"}, seen
            # Every primary overridden unhealthy (HC-2, this service only) -> HealthyFailover.
            for ip in (b["b1"], b["b2"]):
                reply = lb.ctl("set-health", ip, "unhealthy", "--service", "fo")
                assert [(x["service"], x["override"], x["healthy"]) for x in reply["backends"]] == \
                    [("fo", "unhealthy", False)], reply
            m2 = lb.metrics()
            assert m2.value("spillway_service_failover_active", service="fo") == 1
            assert m2.value("spillway_service_eligible_kind", service="fo", kind="HealthyFailover") == 1
            assert m2.value("spillway_service_eligible_kind", service="fo", kind="HealthyPrimary") == 0
            assert m2.value("spillway_service_eligible_backends", service="fo") == 2
            assert m2.value("spillway_backend_health_override", service="fo", backend=b["b1"],
                            override="unhealthy") == 1
            assert m2.value("spillway_backend_healthy", service="fo", backend=b["b1"]) == 0
            assert m2.value("spillway_backend_healthy", service="web", backend=b["b1"]) == 1  # other service untouched
            assert m2.value("spillway_service_failover_active", service="web") == 0
            seen = Counter(udp_ask(stack.enter_context(udp_flow(c)), VIP_FO) for _ in range(8) for c in t.clients)
            assert set(seen) == {"b3", "b4"}, f"new flows not on the failover backends: {seen}"
            for ip in (b["b1"], b["b2"]):
                lb.ctl("set-health", ip, "auto", "--service", "fo")
            assert lb.metrics().value("spillway_service_failover_active", service="fo") == 0

            # za: zone-a's clients stay in zone-a while it has a healthy backend.
            c1 = t.client("c1")  # zone-a
            assert m2.value("spillway_service_zonal_match", service="za", zone="zone-a") == 1
            assert m2.value("spillway_service_zonal_spill_active", service="za", zone="zone-a") == 0
            assert m2.value("spillway_service_zone_eligible_backends", service="za", zone="zone-a") == 2
            seen = Counter(curl(c1, VIP_ZA) for _ in range(8))
            assert set(seen) <= {"b1", "b2"}, seen
            # zone-a's backends fail their health checks: zone-a spills to the whole eligible set.
            for x in ("b1", "b2"):
                t.stop_server(x)
            lb.wait_health({f"za/{b['b1']}": False, f"za/{b['b2']}": False}, timeout=15)
            m3 = lb.metrics()
            assert m3.value("spillway_service_zonal_spill_active", service="za", zone="zone-a") == 1
            assert m3.value("spillway_service_zonal_spill_active", service="za", zone="zone-b") == 0
            assert m3.value("spillway_service_zone_eligible_backends", service="za", zone="zone-a") == 2
            assert m3.value("spillway_service_eligible_backends", service="za") == 2
            za_info = next(s for s in lb.ctl("services")["services"] if s["name"] == "za")
            zones = {z["zone"]: z for z in za_info["zones"]}
            assert zones["zone-a"]["spilled"] and not zones["zone-b"]["spilled"], zones
            seen = Counter(curl(c1, VIP_ZA) for _ in range(8))
            assert set(seen) <= {"b3", "b4"} and sum(seen.values()) == 8, seen
            # Back: the servers restart, zone-a stops spilling.
            for x in ("b1", "b2"):
                t.start_server(x)
            lb.wait_health({f"za/{b['b1']}": True, f"za/{b['b2']}": True}, timeout=15)
            m4 = lb.metrics()
            assert m4.value("spillway_service_zonal_spill_active", service="za", zone="zone-a") == 0
            seen = Counter(curl(c1, VIP_ZA) for _ in range(8))
            assert set(seen) <= {"b1", "b2"}, seen
            # web and fo have no health check: their backends never changed health.
            assert all(v == 1 for v in m4.by("spillway_backend_healthy", "backend", service="web").values())
            final = lb.stop()
    assert final.get("drop.no_eligible_backend", 0) == 0, final


@contextlib.contextmanager
def udp_clients(client: T.Client, n: int):
    """``n`` UDP sockets of ``client``, bound to its address; closed at the end."""
    socks = [client.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(n)]
    try:
        for s in socks:
            s.bind((client.ipv4, 0))
        yield socks
    finally:
        for s in socks:
            s.close()


def test_flows_lists_the_connection_table_with_filters_and_counts():
    """``spillwayctl flows``: 40 UDP flows from c1 through the VIP, each answered by a backend;
    the dump lists exactly those flows, each with the client's port and the backend that
    answered it; ``--backend`` lists that backend's flows only, ``--sport``/``--dport`` the one
    flow of a client port; ``--count-by backend`` counts
    what the replies counted; a client prefix with no flows matches none; ``--limit`` lists
    fewer and still counts all; ``--json`` is one JSON object per line."""
    from test_hardening import exchange

    with T.Topology(vips4=(T.VIP4,)) as t, started(t, [service(t, vips=(T.VIP4,))]) as lb:
        c1 = t.client("c1")
        with udp_clients(c1, 40) as socks:
            answered = exchange(socks, "dump")
            assert len(answered) == len(socks), answered
            port_backend = {socks[i].getsockname()[1]: t.backend(b).ipv4 for i, b in answered.items()}
            udp = ["flows", "--vip", T.VIP4, "--proto", "udp"]
            r = lb.ctl_run(*udp)
            assert r.returncode == 0, r.stderr
            lines = [json.loads(x) for x in r.stdout.splitlines()]
            flows, totals = lines[:-1], lines[-1]
            listed = {int(f["client"].rsplit(":", 1)[1]): f["backend"].rsplit(":", 1)[0] for f in flows
                      if f["client"].startswith(c1.ipv4 + ":")}
            assert listed == port_backend, (listed, port_backend)
            assert all(f["state"] == "live" and f["service"] == "web" and not f["peer"] for f in flows)
            assert totals["matched"] == len(socks) and totals["incomplete_workers"] == [], totals

            b = next(iter(port_backend.values()))
            mine = lb.ctl_run(*udp, "--backend", b)
            got = {int(json.loads(x)["client"].rsplit(":", 1)[1]) for x in mine.stdout.splitlines()[:-1]}
            assert got == {p for p, be in port_backend.items() if be == b}, (b, got)

            counted = json.loads(lb.ctl_run(*udp, "--count-by", "backend").stdout.splitlines()[-1])["counts"]
            want = Counter(port_backend.values())
            assert {k.rsplit(":", 1)[0]: v for k, v in counted.items()} == dict(want), (counted, want)

            # The flow filter capture uses: one client port names one flow, to its backend.
            port, its_backend = next(iter(port_backend.items()))
            one = lb.ctl_run(*udp, "--client", c1.ipv4, "--sport", str(port), "--dport", str(T.UDP_PORT))
            one_flows = [json.loads(x) for x in one.stdout.splitlines()[:-1]]
            assert [(f["client"], f["backend"].rsplit(":", 1)[0]) for f in one_flows] == \
                [(f"{c1.ipv4}:{port}", its_backend)], one_flows
            other_dport = json.loads(lb.ctl_run(*udp, "--dport", str(T.UDP_PORT + 1)).stdout.splitlines()[-1])
            assert other_dport["matched"] == 0, other_dport
            none = json.loads(lb.ctl_run(*udp, "--client", "198.18.99.0/24").stdout.splitlines()[-1])
            assert none["matched"] == 0 and none["listed"] == 0, none
            few = json.loads(lb.ctl_run(*udp, "--limit", "5").stdout.splitlines()[-1])
            assert few["listed"] == 5 and few["matched"] == len(socks), few

            table = lb.ctl_run(*udp, "--count-by", "service", json_out=False)
            assert table.returncode == 0 and "40 flows matched (40 listed)" in table.stdout, table.stdout
            bad = lb.ctl_run("flows", "--client", "not-an-address")
            assert bad.returncode != 0 and "client" in (bad.stderr + bad.stdout), bad


def test_reload_preview_reports_what_a_candidate_would_do_and_applies_nothing():
    """``spillwayctl reload --dry-run FILE``: 40 UDP flows through the VIP; a candidate without
    backend b1 and without draining would drop exactly b1's flows (exit 4, ``would_drop``);
    the same candidate with 60 s of draining would drain them and drop none (exit 0); the
    running configuration itself changes nothing (all stay); an invalid candidate is refused
    (exit 1). Nothing is applied: the generation stays and every flow keeps its backend."""
    from test_hardening import exchange

    with T.Topology(vips4=(T.VIP4,)) as t:
        cfg = make_config(t, [service(t, vips=(T.VIP4,))])
        lb = Spillway(t, cfg)
        with lb:
            lb.wait_ready(t.clients[0])
            lb.wait_neighbours()
            c1 = t.client("c1")
            with udp_clients(c1, 40) as socks:
                first = exchange(socks, "before")
                assert len(first) == len(socks), first
                on_b1 = sum(1 for b in first.values() if b == "b1")
                assert on_b1 > 0, first
                b1 = t.backend("b1").ipv4
                generation = lb.ctl("status")["generation"]

                def candidate(name: str, draining: int | None, drop_b1: bool = True) -> str:
                    c = copy.deepcopy(cfg)
                    web = c["services"][0]["backend_service"]
                    for g in web["backends"]:
                        g["endpoints"] = [e for e in g["endpoints"] if not (drop_b1 and e == b1)]
                    web["backends"] = [g for g in web["backends"] if g["endpoints"]]
                    if draining is not None:
                        web["connection_draining"] = {"draining_timeout_sec": draining}
                    path = t.state_dir / f"{name}.yaml"
                    path.write_text(json.dumps(c))
                    return str(path)

                def preview(path: str) -> tuple[int, dict]:
                    r = lb.ctl_run("reload", "--dry-run", path)
                    return r.returncode, (json.loads(r.stdout) if r.stdout.strip() else {"stderr": r.stderr})

                code, p = preview(candidate("no-draining", None))
                assert code == 4 and p["would_drop"], (code, p)
                fates = p["connections"]
                assert fates["dropped"] == on_b1 and fates["drain"] == 0, (on_b1, p)
                assert fates["stay"] + fates["moves"] == len(socks) - on_b1, p
                assert p["by_backend"][f"web/{b1}"]["dropped"] == on_b1, p
                assert p["removed"] == [f"web/{b1}"] and p["added"] == [], p
                web = next(s for s in p["services"] if s["service"] == "web")
                assert web["change"] == "changed" and 0 < web["positions_changed"] < 1, p
                shares = {b["backend"]: b for b in p["backends"]}
                assert shares[b1]["share_before"] > 0 and shares[b1]["share_after"] == 0, shares

                code, p = preview(candidate("draining", 60))
                assert code == 0 and not p["would_drop"], (code, p)
                assert p["connections"]["drain"] == on_b1 and p["connections"]["dropped"] == 0, p

                code, p = preview(candidate("same", None, drop_b1=False))
                assert code == 0 and p["connections"] == {"stay": len(socks), "moves": 0, "drain": 0,
                                                           "dropped": 0}, p
                assert all(s["change"] == "same" for s in p["services"]), p

                bad = t.state_dir / "bad.yaml"
                bad.write_text("services: [{name: web, bogus: 1}]\n")
                code, p = preview(str(bad))
                assert code == 1, (code, p)

                text = lb.ctl_run("reload", "--dry-run", candidate("text", None), "--verbose", json_out=False)
                assert text.returncode == 4 and "DROPPED" in text.stdout and b1 in text.stdout, text.stdout

                missing = lb.ctl_run("reload", "--dry-run", str(t.state_dir / "missing.yaml"))
                assert missing.returncode == 2 and "cannot read" in missing.stderr, missing
                assert lb.ctl("status")["generation"] == generation, "a preview applied nothing"
                again = exchange(socks, "after")
                assert again == first, (first, again)


def test_top_shows_the_live_view_and_quits_on_q():
    """``spillwayctl top`` in a terminal (a pseudo-terminal here, as over SSH): after 20 UDP
    flows, ``GET /v1/counters`` counts them (20 new connections for ``web``, spread over the
    backend slots); ``top`` draws the workers, services and backends tables under the instance's
    phase and exits 0 on ``q``."""
    import fcntl
    import os
    import pty
    import select
    import struct
    import subprocess
    import termios
    from test_hardening import exchange

    with T.Topology(vips4=(T.VIP4,)) as t, started(t, [service(t, vips=(T.VIP4,))]) as lb:
        c1 = t.client("c1")
        with udp_clients(c1, 20) as socks:
            assert len(exchange(socks, "top")) == len(socks)
        counters = json.loads(lb.admin_get("/v1/counters"))
        web = next(s for s in counters["services"] if s["service"] == "web")
        assert web["new_connections"] == 20, counters
        assert sum(s["new_connections"] for s in counters["slots"]) == 20, counters
        assert counters["workers"][0]["rx_packets"] >= 20, counters

        leader, follower = pty.openpty()
        # A terminal of 40 rows and 120 columns (a new pseudo-terminal has none).
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        os.set_blocking(leader, False)
        env = dict(os.environ, TERM="xterm", COLUMNS="120", LINES="40")
        p = subprocess.Popen([str(CTL), "--admin", lb.admin, "top"], stdin=follower, stdout=follower,
                             stderr=follower, env=env, close_fds=True)
        os.close(follower)
        seen = b""
        try:
            deadline = time.monotonic() + 10
            words = (b"spillway:", b"WORKER", b"DROPS", b"SERVICE", b"BACKEND", b"ACTIVE", b"quit")
            while time.monotonic() < deadline and not all(w in seen for w in words):
                if select.select([leader], [], [], 0.2)[0]:
                    try:
                        seen += os.read(leader, 65536)
                    except OSError:
                        break
            assert all(w in seen for w in words), seen[-2000:]
            os.write(leader, b"q")
            assert p.wait(timeout=5) == 0
        finally:
            if p.poll() is None:
                p.kill()
            os.close(leader)


def capture_running(lb: Spillway) -> bool:
    """Whether a capture runs now (``GET /v1/capture``, a 404 until the first has started)."""
    try:
        return bool(json.loads(lb.admin_get("/v1/capture")).get("running"))
    except RuntimeError:
        return False


def test_capture_writes_what_the_worker_decided_as_pcapng():
    """``spillwayctl capture`` against the running balancer: 10 UDP flows from c1 to the VIP,
    two rounds (a new connection, then a hit); a capture of the VIP's UDP at ``received`` and
    ``sent`` with ``--count 40`` ends itself after exactly those 40 packets. Each received
    packet is the client's datagram to the VIP; each sent one is IPIP to the backend that
    answered that client socket; every comment names the decision of its round
    (``new_connection`` then ``conntrack_hit``), the service and that backend. A second
    capture while one runs is refused (409); the summary says 40 packets, 0 lost."""
    import socket as so
    import struct
    import subprocess
    from test_hardening import exchange

    with T.Topology(vips4=(T.VIP4,)) as t, started(t, [service(t, vips=(T.VIP4,))]) as lb:
        c1 = t.client("c1")
        path = t.state_dir / "capture.pcapng"
        argv = [str(CTL), "--admin", lb.admin, "capture", "--vip", T.VIP4, "--proto", "udp",
                "--dport", str(T.UDP_PORT), "--point", "received,sent", "--count", "40",
                "--duration", "30", "-w", str(path)]
        if not lb.admin.startswith("unix:"):
            argv = t.lb.cmd(argv)
        cap = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            T.wait_until(lambda: capture_running(lb),
                         "the capture to start")
            busy = lb.ctl_run("capture", "-w", str(t.state_dir / "second.pcapng"), "--count", "1")
            assert busy.returncode == 1 and "under way" in busy.stderr, busy
            with udp_clients(c1, 10) as socks:
                rounds = [exchange(socks, "first"), exchange(socks, "second")]
                assert all(len(r) == len(socks) for r in rounds), rounds
                assert rounds[0] == rounds[1], rounds
                port_backend = {socks[i].getsockname()[1]: t.backend(b).ipv4 for i, b in rounds[0].items()}
            _, err = cap.communicate(timeout=30)
        finally:
            if cap.poll() is None:
                cap.kill()
        assert cap.returncode == 0, err
        assert "40 packets (received 20, sent 20, dropped 0)" in err and "stopped by count" in err, err
        assert "lost" not in err, err
        summary = json.loads(lb.admin_get("/v1/capture"))
        assert summary["packets"] == 40 and summary["lost"] == 0 and not summary["running"], summary
        # Filters that can match nothing are refused, saying why.
        for args, says in ((("--backend", "198.18.9.9"), "no backend at `198.18.9.9`"),
                           (("--port", "net_tap9"), "no port named `net_tap9` (ports: net_tap0)")):
            bad = lb.ctl_run("capture", "-w", str(t.state_dir / "bad.pcapng"), *args, json_out=False)
            assert bad.returncode == 1 and says in bad.stderr, bad

        packets = pcapng.packets(path.read_bytes())
        assert len(packets) == 40, [p["comment"] for p in packets]
        seen: Counter = Counter()
        for p in packets:
            fields = dict(kv.split("=", 1) for kv in p["comment"].split()[1:])
            frame = p["data"]
            assert struct.unpack_from("!H", frame, 12)[0] == 0x0800, frame[:14].hex()
            ip = frame[14:]
            if fields["point"] == "received":
                src, dst = so.inet_ntoa(ip[12:16]), so.inet_ntoa(ip[16:20])
                sport, dport = struct.unpack_from("!HH", ip, 20)
                assert (src, dst, ip[9], dport) == (c1.ipv4, T.VIP4, 17, T.UDP_PORT), p
            else:
                assert fields["point"] == "sent", p
                assert ip[9] == 4, f"IPIP: {ip[:20].hex()}"
                inner = ip[20:]
                sport = struct.unpack_from("!H", inner, 20)[0]
                assert so.inet_ntoa(inner[16:20]) == T.VIP4, p
                assert so.inet_ntoa(ip[16:20]) == port_backend[sport], (p, port_backend)
            assert fields["backend"] == port_backend[sport], (fields, port_backend)
            assert fields["service"] == "web", fields
            seen[(fields["point"], fields["decision"])] += 1
        assert seen == {("received", "new_connection"): 10, ("sent", "new_connection"): 10,
                        ("received", "conntrack_hit"): 10, ("sent", "conntrack_hit"): 10}, seen


def test_capture_by_backend_at_the_drop_point_and_with_a_full_ring():
    """``spillwayctl capture`` with the filters and points an operator debugs with, each file
    read by ``tcpdump -r`` as well:

    * ``--backend B`` while 40 UDP flows are answered: exactly the datagrams of B's flows, as
      received (to the VIP) and as sent (IPIP to B), every comment naming B;
    * ``--point dropped`` while malformed frames are injected at the tap: each of them, as it
      came, with its drop reason as the comment;
    * ``--ring 16`` under a burst of 400 new flows: the capture reports records lost (its
      workers' rings were full), and every one of the 400 datagrams is answered all the same."""
    import subprocess
    from test_hardening import exchange
    from test_packet_path import malformed_frames

    with T.Topology(vips4=(T.VIP4,)) as t, started(t, [service(t, vips=(T.VIP4,))]) as lb:
        c1 = t.client("c1")

        def capture(name: str, *args) -> tuple[subprocess.Popen, object]:
            path = t.state_dir / f"{name}.pcapng"
            argv = [str(CTL), "--admin", lb.admin, "capture", "-w", str(path), *map(str, args)]
            p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            T.wait_until(lambda: capture_running(lb),
                         f"capture {name} to start")
            return p, path

        def finished(p: subprocess.Popen) -> tuple[str, dict]:
            _, err = p.communicate(timeout=30)
            assert p.returncode == 0, err
            return err, json.loads(lb.admin_get("/v1/capture"))

        # By backend.
        b1 = t.backend("b1").ipv4
        p, by_backend = capture("backend", "--backend", b1, "--point", "received,sent", "--duration", "3")
        with udp_clients(c1, 40) as socks:
            answered = exchange(socks, "by-backend")
            assert len(answered) == len(socks), answered
            b1_ports = {socks[i].getsockname()[1] for i, b in answered.items() if b == "b1"}
        err, summary = finished(p)
        assert b1_ports and summary["stopped_by"] == "duration", summary
        packets = pcapng.packets(by_backend.read_bytes())
        assert len(packets) == 2 * len(b1_ports) == pcapng.tcpdump_count(by_backend), (len(packets), b1_ports)
        for pk in packets:
            fields = dict(kv.split("=", 1) for kv in pk["comment"].split()[1:])
            assert fields["backend"] == b1 and fields["decision"] == "new_connection", fields
            ip = pk["data"][14:]
            inner = ip[20:] if fields["point"] == "sent" else ip
            if fields["point"] == "sent":
                assert ip[9] == 4 and socket.inet_ntoa(ip[16:20]) == b1, ip[:20].hex()
            assert struct.unpack_from("!H", inner, 20)[0] in b1_ports, pk

        # At the drop point.
        frames = malformed_frames(lb.port_mac, "02:00:00:00:00:99", c1)
        injected = sum(len(fs) for fs in frames.values())
        p, dropped = capture("dropped", "--point", "dropped", "--duration", 3)
        for fs in frames.values():
            t.lb.send_frames(lb.tap, fs)
        err, summary = finished(p)
        packets = pcapng.packets(dropped.read_bytes())
        assert summary["dropped"] == len(packets) == pcapng.tcpdump_count(dropped), (summary, err)
        # The injected frames, as they came, each with its reason (the segment's own chatter,
        # IPv6 neighbour discovery to other hosts, is dropped too: not_for_us).
        sent_frames = {bytes(f) for fs in frames.values() for f in fs}
        mine = [pk for pk in packets if pk["data"] in sent_frames]
        got = Counter(dict(kv.split("=", 1) for kv in pk["comment"].split()[1:])["decision"] for pk in mine)
        assert got == {c.removeprefix("drop."): len(fs) for c, fs in frames.items()}, (got, len(packets))
        assert len(mine) == injected

        # A full ring.
        p, _ = capture("ring", "--ring", 16, "--count", 100000, "--duration", 3)
        with udp_clients(c1, 400) as socks:
            answered = exchange(socks, "burst")
        err, summary = finished(p)
        assert len(answered) == 400, len(answered)
        assert summary["lost"] > 0 and f"lost: {summary['lost']} packets" in err, (summary, err)


def test_reload_preview_predicts_what_the_reload_then_does():
    """Each preview checked against reality: 40 UDP flows to ``web`` (VIP4) and 20 to ``api``
    (a second VIP), each pinned to the backend that answered it. Four candidates are previewed,
    then applied (in this order), and what the preview said is what happens:

    * b4 added to web: the flows it says would move if they lost their entry are exactly those
      whose new-connection choice (``explain``'s ``hashed_backend``) is no longer their backend;
      every flow keeps its backend;
    * b1 removed from web without draining: the flows it says are dropped are exactly web's
      flows on b1, and after the reload exactly those lose their backend (UDP: another answers);
    * b2 removed from web with 60 s of draining: the flows it says drain are web's flows on b2;
      after the reload they are still answered by b2, and ``flows --state draining`` counts them;
    * the api service (its VIP) removed: its 20 flows are dropped; after the reload none is
      answered.
    """
    from test_hardening import exchange

    vip_api = "198.18.0.104"
    with T.Topology(vips4=(T.VIP4, vip_api)) as t:
        b = {n: t.backend(n).ipv4 for n in ("b1", "b2", "b4")}
        full = make_config(t, [service(t, vips=(T.VIP4,)), service(t, name="api", vips=(vip_api,))])
        start = without(full, b["b4"])
        lb = Spillway(t, start)
        with lb:
            lb.wait_ready(t.clients[0])
            lb.wait_neighbours()
            c1 = t.client("c1")
            with udp_clients(c1, 40) as web, udp_clients(c1, 20) as api:
                pinned = exchange(web, "start")
                pinned_api = exchange(api, "start", vip=vip_api)
                assert len(pinned) == 40 and len(pinned_api) == 20, (pinned, pinned_api)

                def preview(cfg: dict, name: str) -> dict:
                    path = t.state_dir / f"{name}.yaml"
                    path.write_text(json.dumps(cfg))
                    r = lb.ctl_run("reload", "--dry-run", str(path))
                    assert r.returncode in (0, 4), r
                    return json.loads(r.stdout)

                def apply(cfg: dict) -> None:
                    lb.write(cfg)
                    lb.ctl("reload")

                def hashed(i: int) -> str:
                    x = lb.ctl("explain", "--src", c1.ipv4, "--dst", T.VIP4, "--proto", "udp",
                               "--sport", web[i].getsockname()[1], "--dport", T.UDP_PORT)
                    return x["hashed_backend"]

                # 1. A backend added.
                cfg = full
                p = preview(cfg, "added")
                apply(cfg)
                moved = [i for i in range(40) if hashed(i) != t.backend(pinned[i]).ipv4]
                assert p["connections"]["moves"] == len(moved) > 0, (p["connections"], moved)
                assert p["connections"]["dropped"] == 0 and p["connections"]["drain"] == 0, p
                assert exchange(web, "added") == pinned, "every flow keeps its entry's backend"

                # 2. b1 removed without draining.
                cfg = without(cfg, b["b1"])
                p = preview(cfg, "no-b1")
                on_b1 = {i for i, n in pinned.items() if n == "b1"}
                assert on_b1 and p["connections"]["dropped"] == len(on_b1) and p["would_drop"], (on_b1, p)
                apply(cfg)
                after = exchange(web, "no-b1")
                assert len(after) == 40, after
                assert {i for i in range(40) if after[i] != pinned[i]} == on_b1, (pinned, after)
                assert "b1" not in after.values()
                pinned = after

                # 3. b2 removed with draining.
                cfg = without(cfg, b["b2"])
                cfg["services"][0]["backend_service"]["connection_draining"] = {"draining_timeout_sec": 60}
                p = preview(cfg, "drain-b2")
                on_b2 = {i for i, n in pinned.items() if n == "b2"}
                assert on_b2 and p["connections"]["drain"] == len(on_b2) and not p["would_drop"], (on_b2, p)
                assert p["connections"]["dropped"] == 0, p
                apply(cfg)
                assert exchange(web, "drain-b2") == pinned, "the draining flows stay on b2"
                r = lb.ctl_run("flows", "--vip", T.VIP4, "--state", "draining")
                draining = json.loads(r.stdout.splitlines()[-1])
                assert draining["matched"] == len(on_b2), (draining, r.stderr)

                # 4. The api service (and its VIP) removed.
                cfg = copy.deepcopy(cfg)
                cfg["services"] = [s for s in cfg["services"] if s["name"] != "api"]
                p = preview(cfg, "no-api")
                assert p["connections"]["dropped"] == 20 and p["would_drop"], p
                assert p["by_backend"] and all(k.startswith(("web/", "api/")) for k in p["by_backend"]), p
                apply(cfg)
                assert exchange(api, "no-api", timeout=2.0, vip=vip_api) == {}, "api's flows are gone"
                assert exchange(web, "still") == pinned


def test_reload_preview_judges_entries_as_the_path_does_persistence_turned_off():
    """The preview judges each connection with the judgement the packet path applies to the entry
    its next packet finds (``decide::judge_entry``), not by its backend's presence alone: 40 UDP
    flows to ``web`` with ``ALWAYS_PERSIST``; b1 is set unhealthy, its flows stay on it. A
    candidate that only turns persistence to ``NEVER_PERSIST`` keeps every backend configured,
    yet the preview says b1's flows are dropped (their entries replaced: their backend is
    unhealthy and the service no longer persists on it) and every other flow stays. Applied,
    exactly b1's flows change backend, counted as ``replaced_unhealthy``."""
    from test_hardening import exchange

    with T.Topology(vips4=(T.VIP4,)) as t:
        persist = {"connection_tracking_policy": {
            "connection_persistence_on_unhealthy_backends": "ALWAYS_PERSIST"}}
        cfg = make_config(t, [service(t, vips=(T.VIP4,), backend_service=persist)])
        lb = Spillway(t, cfg)
        with lb:
            lb.wait_ready(t.clients[0])
            lb.wait_neighbours()
            c1 = t.client("c1")
            b1 = t.backend("b1").ipv4
            with udp_clients(c1, 40) as web:
                pinned = exchange(web, "start")
                on_b1 = {i for i, n in pinned.items() if n == "b1"}
                assert len(pinned) == 40 and on_b1, pinned
                lb.ctl("set-health", b1, "unhealthy", "--service", "web")
                assert exchange(web, "unhealthy") == pinned, "ALWAYS_PERSIST keeps b1's flows on b1"

                candidate = copy.deepcopy(cfg)
                tracking = candidate["services"][0]["backend_service"]["connection_tracking_policy"]
                tracking["connection_persistence_on_unhealthy_backends"] = "NEVER_PERSIST"
                path = t.state_dir / "never-persist.yaml"
                path.write_text(json.dumps(candidate))
                r = lb.ctl_run("reload", "--dry-run", str(path))
                assert r.returncode == 4, r
                p = json.loads(r.stdout)
                assert p["connections"]["dropped"] == len(on_b1) and p["would_drop"], (on_b1, p)
                assert p["connections"]["stay"] + p["connections"]["moves"] == 40 - len(on_b1), p
                assert p["by_backend"][f"web/{b1}"]["dropped"] == len(on_b1), p
                why = {x["why"] for x in p["examples"] if x["fate"] == "dropped"}
                assert why == {"its backend is unhealthy and the service no longer persists on it"}, p

                before = lb.metrics().value("spillway_forwarded_packets_total", reason="replaced_unhealthy")
                lb.write(candidate)
                lb.ctl("reload")
                after = exchange(web, "applied")
                assert len(after) == 40, after
                assert {i for i in range(40) if after[i] != pinned[i]} == on_b1, (pinned, after)
                replaced = lb.metrics().value("spillway_forwarded_packets_total", reason="replaced_unhealthy")
                assert replaced - before == len(on_b1), (before, replaced, on_b1)
