"""``spillway-gen`` against the real balancer, end to end.

The generator runs in the balancer namespace on its own DPDK ``net_tap`` port, whose kernel
side is enslaved to the topology's bridge ``br0`` like a client's veth: its frames, addressed
to the balancer port's MAC, cross the bridge into the balancer's own ``net_tap`` port. The
balancer encapsulates them to the backends, whose decap agents count what arrives.

What is shown, for each run, exactly:

* the generator reports every frame taken by its driver (``sent == count``, nothing refused);
* the balancer forwarded that many packets: one ``new_connection`` per established flow and
  per new connection the generator opened (SYNs, first UDP packets), ``conntrack_hit`` for
  the rest; ``spillway_backend_new_connections`` sums to the same number of distinct flows;
* every backend's decap agent received exactly the packets ``/metrics`` says the balancer sent
  it (``spillway_backend_packets``), and their sum is what the generator sent; the inner
  protocol and family counts match the generator's report.

Run as root with the binaries built, e.g.::

    CARGO_TARGET_DIR=/work/tgt/gen cargo build --release -p spillway -p spillway-gen
    SPILLWAY_BIN=/work/tgt/gen/release/spillway /usr/bin/python3 -m pytest -q tests/e2e/test_generator.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import topo as T
from balancer import BIN, Spillway, make_config, needs_built, service

GEN = Path(os.environ.get("SPILLWAY_GEN_BIN", BIN.parent / "spillway-gen"))

pytestmark = needs_built(BIN, GEN)


def run_gen(t: T.Topology, lb: Spillway, name: str, args: list[str]) -> dict:
    """Runs spillway-gen on a net_tap port joined to br0; returns its JSON report."""
    tap = f"{t.prefix}-{name}"  # at most 15 characters
    prefix = f"{t.prefix}-{name}"
    argv = [
        str(GEN), "--port", "net_tap0", "--dst-mac", lb.port_mac, "--json", "--stats-interval", "0",
        # Sending starts once the tap has joined the bridge (attach below takes ~0.1 s).
        "--delay", "1.5", "--mbufs", "4095", *args,
        "--", "--no-pci", "--lcores", "0@0,1@0", "--file-prefix", prefix,
        "--log-level", "lib.eal:error", "--no-telemetry", "--vdev", f"net_tap0,iface={tap}",
    ]
    try:
        p = t.lb.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        t.lb.attach_when_present(tap, timeout=30)
        out, err = p.communicate(timeout=60)
    finally:
        shutil.rmtree(Path("/var/run/dpdk") / prefix, ignore_errors=True)
    out, err = out.decode(), err.decode()
    assert p.returncode == 0, f"spillway-gen failed ({p.returncode}):\n{out}\n{err}"
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, f"no JSON report:\n{out}\n{err}"
    report = json.loads(lines[-1])
    assert report["error"] is None, report
    return report


def backend_metrics(lb: Spillway) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """(packets per backend address, new connections per backend address, forwarded by reason)."""
    m = lb.metrics()
    packets: dict[str, float] = {}
    new: dict[str, float] = {}
    for name, out in (("spillway_backend_packets_total", packets),
                      ("spillway_backend_new_connections_total", new)):
        for labels, v in m.values(name).items():
            addr = dict(labels)["backend"]
            out[addr] = out.get(addr, 0) + v
    return packets, new, m.by("spillway_forwarded_packets_total", "reason")


def wait_forwarded(lb: Spillway, total: int, timeout: float = 5.0):
    """Scrape until the balancer has forwarded `total` packets (counters are read, not pushed)."""
    last: list = [None]

    def done():
        last[0] = backend_metrics(lb)
        return last[0] if sum(last[0][2].values()) >= total else None

    return T.wait_until(done, lambda: f"{total} forwarded packets; forwarded by reason: {last[0][2]}",
                        timeout=timeout)


def host_of(t: T.Topology, label: str) -> str:
    """The backend host of a metrics `backend` label (`addr`, `addr:port` or `[v6]:port`)."""
    if label.startswith("["):
        label = label[1:].split("]")[0]
    elif label.count(":") == 1:
        label = label.split(":")[0]
    return t.backend(label).short


def check_run(t: T.Topology, lb: Spillway, before_decap, before_metrics, report: dict, count: int,
              flows: int) -> None:
    assert report["sent"] == count and report["refused"] == 0, report
    assert report["frames"] == count and report["packets"] == count, report
    packets0, new0, fwd0 = before_metrics
    packets1, new1, fwd1 = wait_forwarded(lb, sum(fwd0.values()) + count)

    def delta(a, b):
        return {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b)}

    fwd = delta(fwd0, fwd1)
    # Every frame reached the balancer and was forwarded; one new entry per distinct flow.
    assert sum(fwd.values()) == count, fwd
    assert fwd.get("new_connection", 0) == flows + report["syn"], (fwd, report)
    assert fwd.get("conntrack_hit", 0) == count - flows - report["syn"], (fwd, report)
    assert sum(delta(new0, new1).values()) == flows + report["syn"]
    # Per backend host: what the balancer says it sent is what the decap agent received.
    sent_to: dict[str, float] = {}
    for addr, n in delta(packets0, packets1).items():
        if n:
            sent_to[host_of(t, addr)] = sent_to.get(host_of(t, addr), 0) + n
    assert sum(sent_to.values()) == count, sent_to
    assert len(sent_to) >= 2, f"{flows} flows all went to one backend: {sent_to}"
    after = t.settled_decaps(quiet=0.2)
    got = {b: sum(after[b][k] - before_decap[b][k] for k in ("ipip", "ip6ip6")) for b in after}
    assert got == {b: sent_to.get(b, 0) for b in got}, (got, sent_to)
    total = {k: sum(after[b][k] - before_decap[b][k] for b in after)
             for k in ("inner_v4", "inner_v6", "inner_tcp", "inner_udp", "inner_fragments", "junk")}
    assert total == {"inner_v4": report["ipv4"], "inner_v6": report["ipv6"], "inner_tcp": report["tcp"],
                     "inner_udp": report["udp"], "inner_fragments": 0, "junk": 0}, (total, report)


def test_generator_traffic_is_balanced_and_counted_exactly():
    with T.Topology() as t:
        services = [
            service(t, name="web4", vips=(T.VIP4,), encap="IPIP", family=4),
            service(t, name="web6", vips=(T.VIP6,), encap="IPIP", family=6),
        ]
        with Spillway(t, make_config(t, services)) as lb:
            lb.wait_ready(t.clients[0])
            lb.wait_neighbours()

            # 1: 2000 ACKs over 50 established IPv4 TCP flows, paced at 5000/s.
            d0, m0 = t.settled_decaps(quiet=0.2), backend_metrics(lb)
            r = run_gen(t, lb, "g1", ["--flows", "50", "--count", "2000", "--rate", "5k",
                                      "--dst", T.VIP4])
            assert (r["ipv4"], r["tcp"], r["syn"]) == (2000, 2000, 0), r
            check_run(t, lb, d0, m0, r, 2000, 50)

            # 2: a mix from other prefixes (so that no flow of run 1 is reused): IPv6, UDP and
            # new connections (SYNs and first UDP packets from fresh sources).
            d1, m1 = t.settled_decaps(quiet=0.2), backend_metrics(lb)
            r = run_gen(t, lb, "g2", ["--flows", "40", "--count", "1500", "--rate", "5k",
                                      "--ipv6-share", "0.3", "--udp-share", "0.4", "--syn-share", "0.2",
                                      "--src-v4", "198.18.64.0/18", "--src-v6", "fd00::7:0/112",
                                      "--dst", T.VIP4, "--dst", T.VIP6, "--seed", "9", "--size", "128"])
            assert r["ipv6"] > 0 and r["udp"] > 0 and r["syn"] > 0, r
            assert r["bytes"] == 1500 * 128, r
            check_run(t, lb, d1, m1, r, 1500, 40)
