"""Soak: the real daemon for minutes under everything at once, through the namespace topology.

* mixed traffic from ``spillway-gen`` (TCP and UDP, 20% IPv6, 5% new connections, 2%
  fragments, 100k flows) through the VIPs, the whole time;
* real clients: fresh UDP flows every second, each answered by a backend;
* a backend whose health flaps (its HTTP port refused, then not, every 5 s; thresholds of 1);
* a reload every 3 s (alternating two configurations: weights and the idle timeout);
* a slow admin client (request headers that never end) beside normal status requests.

Asserted: the daemon never exits; its RSS, file descriptors and connection-table entries stay
within bounds after the warm-up; every client flow is answered; and at the end every packet it
received is counted exactly once (a forward or drop reason, an answer sent or heard):
``rx = sum(forward) + sum(drop) - drop.tx_full + neighbour_replies + echo_replies +
neighbour_answers_heard``.

CI runs it for 3 minutes; the hour: ``SPILLWAY_SOAK_SECONDS=3600 python3 -m pytest -s
tests/e2e/test_soak.py``. The figures go to ``target/reliability/soak.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

import topo as T
from balancer import BIN, Spillway, make_config, needs_built, service
from test_hardening import api, exchange, record, rss_kib

pytestmark = needs_built(BIN)

GEN = Path(os.environ.get("SPILLWAY_GEN_BIN", BIN.parent / "spillway-gen"))
SOAK_SECONDS = float(os.environ.get("SPILLWAY_SOAK_SECONDS", "180"))
WARM_UP = 20.0
CAPACITY = 65536

HC = {"web-http": {"type": "HTTP", "port": T.HTTP_PORT, "path": "/", "check_interval_sec": 1,
                   "timeout_sec": 0.5, "healthy_threshold": 1, "unhealthy_threshold": 1}}


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


# The generator's client prefixes: addresses that exist nowhere on the segment.
GEN_SRC_V4 = "198.18.128.0/17"
GEN_SRC_V6 = "fd00:0:0:1::/64"


def start_gen(t: T.Topology, lb: Spillway, seconds: float,
              flood: str | None = None) -> tuple[subprocess.Popen, str]:
    """spillway-gen on a net_tap port joined to br0: mixed traffic at 2,000 packets/s (the
    backends decapsulate in Python: more would starve this 2-core machine), or with `flood`,
    new TCP connections from random sources to that VIP at 25,000 a second (flat out, the
    sender's core starves the backends' Python processes, which share it, and their answers
    are late; the in-memory benchmark measures the flood flat out).

    The backends drop their answers to the generator's sources (blackhole routes): those
    addresses exist nowhere, and asking for each of them (tens of thousands of sources in the
    soak) overflowed the kernel's ARP table, which every namespace shares (`gc_thresh3`, 1,024
    entries by default: "neighbour: arp_cache: neighbor table overflow!"), until a backend
    could not resolve a real client either and that client's flows went unanswered."""
    for b in t.backends:
        b.run(["ip", "route", "replace", "blackhole", GEN_SRC_V4])
        b.run(["ip", "-6", "route", "replace", "blackhole", GEN_SRC_V6])
    tap = prefix = f"{t.prefix}-sk"
    traffic = (["--dst", flood, "--syn-share", "1", "--flows", "1000", "--rate", "25k"] if flood else
               ["--flows", "100000", "--syn-share", "0.05", "--udp-share", "0.5",
                "--ipv6-share", "0.2", "--fragment-share", "0.02", "--rate", "2k"])
    argv = [
        str(GEN), "--port", "net_tap0", "--dst-mac", lb.port_mac, "--json", "--stats-interval", "0",
        "--delay", "1.5", "--mbufs", "4095", "--src-v4", GEN_SRC_V4, "--src-v6", GEN_SRC_V6,
        *traffic, "--duration", str(seconds),
        "--", "--no-pci", "--lcores", "0@0,1@0", "--file-prefix", prefix,
        "--log-level", "lib.eal:error", "--no-telemetry", "--vdev", f"net_tap0,iface={tap}",
    ]
    p = t.lb.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    t.lb.attach_when_present(tap, timeout=30)
    return p, prefix


def slow_admin_client(path: str, stop: threading.Event, stats: dict) -> None:
    """Opens the admin socket and sends request headers that never end, over and over."""
    while not stop.is_set():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            s.sendall(b"GET /v1/status HTTP/1.1\r\nHost: x\r\n")
            for _ in range(20):
                if stop.wait(0.5):
                    break
                s.sendall(b"X-Slow: 1\r\n")
            stats["slow"] += 1
        except OSError:
            stats["cut"] += 1  # the server closed it (header timeout): expected
        finally:
            s.close()


@pytest.mark.long
def test_soak_mixed_traffic_flaps_reloads_and_a_slow_admin_client():
    with T.Topology() as t:
        b4 = t.backend("b4")

        def config(variant: int) -> dict:
            groups = [
                {"group": "web-a", "zone": "zone-a", "weight": 1 + variant, "health_check": "web-http",
                 "endpoints": [b.ipv4 for b in t.backends_in("a")]},
                {"group": "web-b", "zone": "zone-b", "weight": 2 - variant, "health_check": "web-http",
                 "endpoints": [b.ipv4 for b in t.backends_in("b")]},
            ]
            svc = service(t, groups=groups, backend_service={
                "connection_tracking_policy": {"idle_timeout_sec": 60 if variant else 120},
            })
            cfg = make_config(t, [svc], health_checks=HC)
            cfg["dataplane"]["conntrack_capacity"] = CAPACITY
            return cfg

        lb = Spillway(t, config(0))
        with lb:
            lb.wait_ready(t.clients[0])
            lb.wait_neighbours()
            lb.wait_health({f"web/{b.ipv4}": True for b in t.backends}, timeout=20)
            pid = lb.proc.pid
            gen, prefix = start_gen(t, lb, SOAK_SECONDS)
            stop = threading.Event()
            slow = {"slow": 0, "cut": 0}
            slow_thread = threading.Thread(
                target=slow_admin_client, args=(lb.admin.removeprefix("unix:"), stop, slow), daemon=True)
            slow_thread.start()
            c1 = t.client("c1")
            samples, flows, lost, reloads, flaps = [], 0, 0, 0, 0
            # (seconds, flows lost, b4's HTTP port, the backends that answered in that round)
            lost_at: list[tuple[float, int, str, list[str]]] = []
            refused = False
            start = time.monotonic()
            next_reload = next_flap = next_sample = start
            try:
                while (now := time.monotonic()) - start < SOAK_SECONDS:
                    assert lb.proc.poll() is None, f"spillway exited {lb.proc.returncode}"
                    if now >= next_reload:
                        reloads += 1
                        lb.write(config(reloads % 2))
                        api(lb, "POST", "/v1/reload")
                        next_reload += 3
                    if now >= next_flap:
                        flaps += 1
                        refused = not refused
                        if refused:
                            b4.run(["nft", "add table inet soak; add chain inet soak in "
                                    "{ type filter hook input priority 0; }; add rule inet soak in "
                                    f"tcp dport {T.HTTP_PORT} reject with tcp reset"])
                        else:
                            b4.run(["nft", "delete table inet soak"])
                        next_flap += 5
                    if now >= next_sample:
                        m = lb.metrics()
                        samples.append({
                            "t": round(now - start, 1), "rss_kib": rss_kib(pid), "fds": fds(pid),
                            "conntrack": m.value("spillway_conntrack_entries", worker=0),
                        })
                        next_sample += 10
                    socks = [c1.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(20)]
                    try:
                        for s in socks:
                            s.bind((c1.ipv4, 0))
                        got = exchange(socks, f"soak{flows}")
                        flows += len(socks)
                        lost += len(socks) - len(got)
                        if len(got) < len(socks):
                            lost_at.append((round(now - start, 1), len(socks) - len(got),
                                            "refused" if refused else "accepted",
                                            sorted(set(got.values()))))
                    finally:
                        for s in socks:
                            s.close()
                    api(lb, "GET", "/v1/status")
                    time.sleep(0.5)  # pacing: half a second between rounds of fresh flows
            finally:
                stop.set()
                slow_thread.join(timeout=15)
                b4.run(["nft", "delete table inet soak"], check=False)
                try:
                    out, _ = gen.communicate(timeout=60)
                finally:
                    shutil.rmtree(Path("/var/run/dpdk") / prefix, ignore_errors=True)
            gen_report = json.loads([x for x in out.decode().splitlines() if x.startswith("{")][-1])
            changes = sum(lb.metrics().values("spillway_backend_health_changes_total").values())
            # What each backend's user-space decapsulation did with what reached it.
            decap = {b.short: {k: v for k, v in t.decap_stats(b).items()
                               if k in ("written", "write_errors", "junk")} for b in t.backends}
            final = lb.stop()
        assert lb.proc.returncode == 0, lb.output()[-3000:]
        fwd = sum(v for k, v in final.items() if k.startswith("forward."))
        drop = sum(v for k, v in final.items() if k.startswith("drop."))
        accounted = (fwd + drop - final.get("drop.tx_full", 0) + final.get("neighbour_replies", 0)
                     + final.get("echo_replies", 0) + final.get("neighbour_answers_heard", 0))
        warm = [s for s in samples if s["t"] >= WARM_UP] or samples[-1:]
        report = {
            "seconds": SOAK_SECONDS, "generator_sent": gen_report["sent"], "rx": final.get("rx", 0),
            "accounted": accounted, "client_flows": flows, "client_lost": lost, "reloads": reloads,
            "flaps": flaps, "health_changes": changes, "slow_admin_connections": slow,
            "rss_kib_warm": warm[0]["rss_kib"], "rss_kib_max": max(s["rss_kib"] for s in warm),
            "fds_first": samples[0]["fds"], "fds_max": max(s["fds"] for s in samples),
            "conntrack_max": max(s["conntrack"] for s in samples), "samples": len(samples),
            "lost_at": lost_at[:50], "decap": decap,
            "drops": {k: v for k, v in sorted(final.items()) if k.startswith("drop.") and v},
        }
        record("soak", report)
        assert final.get("rx", 0) > 0 and accounted == final["rx"], (final, report)
        assert lost <= flows // 200, report  # every client flow answered (0.5% for the Python backends)
        assert report["rss_kib_max"] - report["rss_kib_warm"] < 16 * 1024, report
        assert report["fds_max"] - report["fds_first"] <= 8, report
        assert report["conntrack_max"] <= CAPACITY, report
        assert changes >= flaps // 2, report  # the flaps were seen by the health checks
        assert reloads >= SOAK_SECONDS // 3 - 1, report
