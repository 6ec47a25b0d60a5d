"""Hostile input on the balancer's segment, end to end: the real daemon on a DPDK ``net_tap``
port, clients and backends in their own namespaces (``topo.py``).

What is shown:

* Neighbour poisoning: forged ARP replies and gratuitous ARPs that claim a backend's address
  for another MAC change nothing (the table keeps the backend's MAC, the backend keeps
  receiving its flows, the forger receives none), and are counted; when the backend really
  moves to a new MAC, a fresh resolution picks the new MAC up and traffic follows it.
* A SYN flood from an outside sender (``spillway-gen`` on the segment, new connections from
  random sources flat out) against a small connection table with the flood guard on, while
  200 established client flows run: none is lost or moves, no entry is evicted, and the flood
  is forwarded by the hash alone (counted as bypassed).
* A reload storm under traffic: 200 reloads alternating two configurations (a backend removed
  and re-added within its draining time, group weights and the idle timeout changed) while
  1,000 established UDP flows and new flows run. No established flow moves (CD-3/CD-4: the
  removed backend's entries drain and are kept when it comes back), no datagram is lost, new
  flows never reach the removed backend (CD-1), every retired snapshot is freed, the daemon's
  memory does not grow, and the time from a reload request to every worker deciding with the
  new snapshot is measured.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import resource
import selectors
import socket
import statistics
import threading
import time
from pathlib import Path

import topo as T
from balancer import BIN, Metrics, Spillway, make_config, needs_built, service
from test_packet_path import udp_ask

pytestmark = needs_built(BIN)

FORGED_MAC = "02:66:66:66:66:66"


def record(name: str, report: dict) -> None:
    """Writes a test's figures to target/reliability/NAME.json (scripts/reliability.py puts them
    in docs/reliability.md) and prints them."""
    out = T.REPO / "target" / "reliability"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(report, indent=1))
    print(f"{name}:", json.dumps(report))


def neighbour_mac(lb: Spillway, addr: str) -> str | None:
    return next((n["mac"] for n in lb.ctl("neighbours")["neighbours"] if n["addr"] == addr), None)


def spread(t: T.Topology, flows: int = 48) -> dict[str, int]:
    """UDP flows from fresh sockets of c1 through the VIP: every one must be answered; returns
    the answers per backend."""
    c1 = t.client("c1")
    seen: dict[str, int] = {}
    for i in range(flows):
        backend, _ = udp_ask(c1, T.VIP4, f"flow {i} {os.urandom(4).hex()}".encode())
        seen[backend] = seen.get(backend, 0) + 1
    return seen


def test_forged_arp_for_a_backend_changes_nothing_and_a_real_move_is_picked_up():
    with T.Topology() as t:
        lb = Spillway(t, make_config(t, [service(t)]))
        with lb:
            lb.wait_ready(t.clients[0])
            lb.wait_neighbours()
            b1, c2 = t.backend("b1"), t.client("c2")
            real = b1.mac_address
            assert neighbour_mac(lb, b1.ipv4) == real
            before = lb.ctl("neighbours")["answers"]

            # c2 claims b1's address: unsolicited replies to the balancer and gratuitous ARPs,
            # 20 of each over a second, while traffic runs.
            forged = [
                T.ether(lb.port_mac, FORGED_MAC, T.ETH_P_ARP,
                        T.arp(2, FORGED_MAC, b1.ipv4, T.LB_NODE_V4, target_mac=lb.port_mac)),
                T.ether("ff:ff:ff:ff:ff:ff", FORGED_MAC, T.ETH_P_ARP,
                        T.arp(1, FORGED_MAC, b1.ipv4, b1.ipv4)),
            ]
            with c2.capture() as cap:
                for _ in range(20):
                    c2.send_frames(c2.ifname, forged)
                    time.sleep(0.05)  # pacing: the forgeries spread over a second, not a wait
                seen = spread(t)
                # Until every forged answer has been counted (below: each exactly once).
                T.wait_until(lambda: lb.ctl("neighbours")["answers"]["ignored_conflict"]
                             - before["ignored_conflict"] >= 40,
                             lambda: f"the 40 forged answers to be counted: {lb.ctl('neighbours')['answers']}",
                             timeout=5)
            assert neighbour_mac(lb, b1.ipv4) == real, lb.ctl("neighbours")
            assert seen.get("b1", 0) > 0 and sum(seen.values()) == 48, seen
            # Nothing for the VIP reached the forger (frames to its MAC, encapsulated or not).
            stolen = [f for f in cap.frames if not f.outgoing and f.dst_mac == FORGED_MAC]
            assert stolen == [], stolen[:3]
            after = lb.ctl("neighbours")["answers"]
            # Every forged answer counted, once.
            assert after["ignored_conflict"] - before["ignored_conflict"] == 40, (before, after)
            assert after["changed"] == before["changed"], (before, after)
            metrics = lb.metrics_text()
            assert 'spillway_neighbour_answers_total{outcome="ignored_conflict"}' in metrics

            # b1 really moves to a new MAC and announces it (gratuitous ARP): a fresh
            # resolution gets only the new MAC, and the balancer follows. At most one change
            # per next hop every 5 s: announce until it is taken.
            new = "02:00:5e:10:00:b1"
            b1.ip("link", "set", "dev", b1.ifname, "address", new)
            announce = T.ether("ff:ff:ff:ff:ff:ff", new, T.ETH_P_ARP, T.arp(1, new, b1.ipv4, b1.ipv4))
            t_move = time.monotonic()
            T.wait_until(lambda: b1.send_frames(b1.ifname, [announce]) and
                         neighbour_mac(lb, b1.ipv4) == new,
                         "the balancer to take b1's new MAC", timeout=15, poll=0.5)
            took = time.monotonic() - t_move
            moved = lb.ctl("neighbours")["answers"]
            assert moved["changed"] == before["changed"] + 1, moved
            seen_after = spread(t)
            assert seen_after.get("b1", 0) > 0 and sum(seen_after.values()) == 48, seen_after
        record("neighbour_poisoning", {
            "forged_answers": 40, "ignored_conflict": after["ignored_conflict"] - before["ignored_conflict"],
            "table_changes_from_forgery": after["changed"] - before["changed"],
            "frames_to_forger": len(stolen), "flows_answered_during_forgery": sum(seen.values()),
            "move_picked_up_s": round(took, 2), "flows_answered_after_move": sum(seen_after.values()),
        })


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: str):
        super().__init__("localhost", timeout=10)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(self.unix_path)
        self.sock = s


def api(lb: Spillway, method: str, path: str) -> dict:
    """One admin API request over the Unix socket, from this process (no spillwayctl process
    per call: the reload latency below is the daemon's, not a process start's)."""
    c = _UnixHTTP(lb.admin.removeprefix("unix:"))
    try:
        c.request(method, path)
        r = c.getresponse()
        body = r.read()
        assert r.status == 200, (method, path, r.status, body)
        return json.loads(body)
    finally:
        c.close()


def rss_kib(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def exchange(socks: list[socket.socket], tag: str, timeout: float = 5.0, vip: str = T.VIP4) -> dict[int, str]:
    """One datagram from every socket to ``vip``:5353 and every reply: socket index -> backend.
    In batches of 100, so that the backends' user-space decapsulation and servers (Python)
    are not handed more at once than their socket buffers hold."""
    got: dict[int, str] = {}
    for start in range(0, len(socks), 100):
        batch = list(enumerate(socks))[start:start + 100]
        for i, s in batch:
            s.sendto(f"{tag} {i}".encode(), (vip, T.UDP_PORT))
        with selectors.DefaultSelector() as sel:  # epoll: more descriptors than select() takes
            for i, s in batch:
                sel.register(s, selectors.EVENT_READ, i)
            deadline = time.monotonic() + timeout
            left = len(batch)
            while left and time.monotonic() < deadline:
                for key, _ in sel.select(0.2):
                    data, addr = key.fileobj.recvfrom(2048)
                    assert addr == (vip, T.UDP_PORT), addr
                    got[key.data] = data.split(b" ", 1)[0].decode()
                    sel.unregister(key.fileobj)
                    left -= 1
    return got


def test_reload_storm_moves_no_established_flow():
    flows, reloads = 1000, 200
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
    with T.Topology() as t:
        b4 = t.backend("b4")

        def config(removed: bool) -> dict:
            groups = [
                {"group": "web-a", "zone": "zone-a", "weight": 1 if removed else 3,
                 "endpoints": [b.ipv4 for b in t.backends_in("a")]},
                {"group": "web-b", "zone": "zone-b", "weight": 2,
                 "endpoints": [b.ipv4 for b in t.backends_in("b") if not (removed and b is b4)]},
            ]
            svc = service(t, groups=groups, backend_service={
                "connection_tracking_policy": {"idle_timeout_sec": 300 if removed else 600},
                "connection_draining": {"draining_timeout_sec": 600},
            })
            return make_config(t, [svc])

        lb = Spillway(t, config(False))
        with lb:
            lb.wait_ready(t.clients[0])
            lb.wait_neighbours()
            c1 = t.client("c1")
            socks = []
            for _ in range(flows):
                s = c1.socket(socket.AF_INET, socket.SOCK_DGRAM)
                s.bind((c1.ipv4, 0))
                socks.append(s)
            try:
                first = exchange(socks, "hello")
                assert len(first) == flows, f"{flows - len(first)} of {flows} flows unanswered"
                assert set(first.values()) == {"b1", "b2", "b3", "b4"}, set(first.values())
                pid = lb.proc.pid
                rss0 = rss_kib(pid)
                pub0 = lb.metrics().value("spillway_snapshots_published_total")
                # Meanwhile, 200 more established flows exchange datagrams without pause.
                bg = [c1.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(200)]
                for s in bg:
                    s.bind((c1.ipv4, 0))
                bg_first = exchange(bg, "bg")
                assert len(bg_first) == len(bg)
                bg_stats = {"rounds": 0, "lost": 0, "moved": 0}
                stop = threading.Event()

                def background():
                    while not stop.is_set():
                        got = exchange(bg, f"bg{bg_stats['rounds']}")
                        bg_stats["rounds"] += 1
                        bg_stats["lost"] += len(bg) - len(got)
                        bg_stats["moved"] += sum(1 for k, b in got.items() if b != bg_first[k])

                bg_thread = threading.Thread(target=background, daemon=True)
                bg_thread.start()
                latencies, api_times, moved, lost, new_on_b4 = [], [], 0, 0, 0
                for i in range(reloads):
                    removed = i % 2 == 0
                    lb.write(config(removed))
                    t0 = time.monotonic()
                    generation = api(lb, "POST", "/v1/reload")["generation"]
                    api_times.append(time.monotonic() - t0)
                    while min(api(lb, "GET", "/v1/status")["worker_generations"]) < generation:
                        assert time.monotonic() - t0 < 5, "the workers did not take the reload"
                        time.sleep(0.0005)
                    latencies.append(time.monotonic() - t0)
                    if i % 10 == 0 or i == reloads - 1:
                        # The established flows, and 20 new ones.
                        got = exchange(socks, f"r{i}")
                        lost += flows - len(got)
                        moved += sum(1 for k, b in got.items() if b != first[k])
                        fresh = [c1.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(20)]
                        for s in fresh:
                            s.bind((c1.ipv4, 0))
                        try:
                            answers = exchange(fresh, f"n{i}")
                            lost += len(fresh) - len(answers)
                            if removed:
                                new_on_b4 += sum(1 for b in answers.values() if b == "b4")
                        finally:
                            for s in fresh:
                                s.close()
                stop.set()
                bg_thread.join(timeout=10)
                # Until every worker is past its next sweep: the retired snapshots released, but
                # one a worker may still hold until its next burst (asserted below).
                scrapes: list[Metrics] = []

                def released() -> Metrics | None:
                    scrapes.append(lb.metrics())
                    m = scrapes[-1]
                    retained = m.value("spillway_snapshots_retained")
                    done = retained <= 1 and m.value("spillway_snapshots_reclaimed_total") == (
                        m.value("spillway_snapshots_published_total") - retained)
                    return m if done else None

                T.wait_until(released, lambda: "the retired snapshots to be released: " + ", ".join(
                    f"{n} {scrapes[-1].value(n)}" for n in ("spillway_snapshots_published_total",
                                                            "spillway_snapshots_reclaimed_total",
                                                            "spillway_snapshots_retained")), timeout=5)
                api(lb, "GET", "/v1/status")
                m = lb.metrics()
                rss1 = rss_kib(pid)
                published_total = m.value("spillway_snapshots_published_total")
                published = published_total - pub0
                reclaimed = m.value("spillway_snapshots_reclaimed_total")
                retained = m.value("spillway_snapshots_retained")
            finally:
                for s in socks + bg:
                    s.close()
            final = lb.stop()
        lat = sorted(latencies)
        report = {
            "reloads": reloads, "moved": moved, "lost": lost, "new_on_removed": new_on_b4,
            "background": bg_stats,
            "published": published, "reclaimed": reclaimed, "retained": retained,
            "rss_kib_before": rss0, "rss_kib_after": rss1,
            "latency_ms_p50": round(statistics.median(lat) * 1000, 2),
            "latency_ms_p99": round(lat[int(len(lat) * 0.99) - 1] * 1000, 2),
            "latency_ms_max": round(lat[-1] * 1000, 2),
            "api_ms_p50": round(statistics.median(api_times) * 1000, 2),
        }
        record("reload_storm", report)
        assert moved == 0 and lost == 0 and new_on_b4 == 0, report
        assert bg_stats["rounds"] >= 10 and bg_stats["lost"] == 0 and bg_stats["moved"] == 0, report
        assert published >= reloads, report
        # Every retired snapshot freed, but one a worker may still hold until its next burst.
        assert retained <= 1 and reclaimed == published_total - retained, report
        assert rss1 - rss0 < 8 * 1024, report
        for reason in ("no_eligible_backend", "no_matching_rule", "neighbour_unresolved", "tx_full"):
            assert final.get(f"drop.{reason}", 0) == 0, (reason, final)


FLOOD_VIP = "198.18.0.103"


def test_syn_flood_from_outside_keeps_established_flows():
    """The flood's service has one backend that is not on the segment: its packets are decided
    (and tracked or bypassed) like any others, then dropped as neighbour_unresolved, so that the
    Python backends are not flooded too; the established flows go to the web service."""
    from test_soak import start_gen  # the generator on a tap joined to br0

    with T.Topology(vips4=(T.VIP4, FLOOD_VIP)) as t:
        web = service(t, vips=(T.VIP4,))
        flood = service(t, name="flood", vips=(FLOOD_VIP,),
                        groups=[{"group": "nowhere", "zone": "zone-a", "endpoints": ["198.18.99.1"]}])
        cfg = make_config(t, [web, flood])
        cfg["dataplane"]["conntrack_capacity"] = 4096
        cfg["dataplane"]["conntrack_max_inserts_per_sec"] = 1000
        lb = Spillway(t, cfg)
        with lb:
            lb.wait_ready(t.clients[0])
            lb.wait_neighbours()
            c1 = t.client("c1")
            socks = [c1.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(200)]
            try:
                for s in socks:
                    s.bind((c1.ipv4, 0))
                first = exchange(socks, "before")
                assert len(first) == len(socks)
                m0 = lb.metrics()
                gen, prefix = start_gen(t, lb, 8, flood=FLOOD_VIP)
                rounds = lost = moved = first_try_lost = 0
                lost_by_round = []
                t_start = time.monotonic()
                try:
                    deadline = time.monotonic() + 9
                    while time.monotonic() < deadline:
                        got = exchange(socks, f"flood{rounds}", timeout=1.0)
                        # A datagram the starved machine lost (the generator flat out on one
                        # core, Python backends on the other) is asked once more, still inside
                        # the flood: a flow the balancer dropped or sent elsewhere fails again.
                        unanswered = [i for i in range(len(socks)) if i not in got]
                        first_try_lost += len(unanswered)
                        if unanswered:
                            again = exchange([socks[i] for i in unanswered], f"again{rounds}",
                                             timeout=1.0)
                            got.update({unanswered[j]: b for j, b in again.items()})
                        rounds += 1
                        lost += len(socks) - len(got)
                        lost_by_round.append((round(time.monotonic() - t_start, 1),
                                              len(unanswered), len(socks) - len(got)))
                        moved += sum(1 for k, b in got.items() if b != first[k])
                        time.sleep(0.2)  # pacing: a round of the established flows every 0.2 s
                finally:
                    out, _ = gen.communicate(timeout=60)
                    shutil.rmtree(Path("/var/run/dpdk") / prefix, ignore_errors=True)
                m1 = lb.metrics()
            finally:
                for s in socks:
                    s.close()
            final = lb.stop()
        sent = json.loads([x for x in out.decode().splitlines() if x.startswith("{")][-1])["sent"]
        report = {
            "flood_sent": sent, "flood_rate_pps": round(sent / 8),
            "bypassed": m1.value("spillway_conntrack_bypassed_total", worker=0)
            - m0.value("spillway_conntrack_bypassed_total", worker=0),
            "evictions": m1.value("spillway_conntrack_evictions_total", worker=0),
            "table": m1.value("spillway_conntrack_entries", worker=0),
            "established_rounds": rounds, "established_lost": lost, "established_moved": moved,
            "established_lost_first_try": first_try_lost,
            "unresolved_drops": final.get("drop.neighbour_unresolved", 0),
            "lost_by_round": lost_by_round,
        }
        record("syn_flood_outside", report)
        assert rounds >= 10 and lost == 0 and moved == 0, report
        assert report["evictions"] == 0, report
        assert report["bypassed"] > sent // 2, report
