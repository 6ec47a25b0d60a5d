#!/usr/bin/env python3
"""Spillway demo: a load balancer, its clients and its backends, all in network namespaces.

Builds (with tests/e2e/topo.py) one L2 segment with:

* two client namespaces, c1 in zone-a (198.18.10.1) and c2 in zone-b (198.18.20.1);
* four backends, b1 b2 in zone-a and b3 b4 in zone-b, each decapsulating IPIP/GUE in user
  space and serving HTTP on :80 and a UDP echo on :5353 that both say which backend answered;
* `spillway` on a DPDK net_tap port, owning the VIPs 198.18.0.100 (service `web`: TCP/80 and
  UDP/5353 over IPIP, zonal affinity with spill-over, HTTP health checks every second) and
  198.18.0.101 (service `dns`: UDP/5353 over GUE).

Then it sends real requests through the VIPs from both zones and prints which backend answered
each one, takes backends down and back up (their health checks fail and recover) and shows the
traffic move and return, and prints the balancer's counters. At each stage it also prints the
control plane's gauges from the balancer's Prometheus endpoint (``/metrics`` on the admin Unix
socket): each backend's effective health, the eligible set sizes (per client zone for a
service with zonal affinity), whether a service is on its failover backends and whether a
zone's clients spill over to other zones. Everything it created is removed at the end, also
on Ctrl-C.

Run it through scripts/demo.sh (installs dependencies, builds the release binary). Directly:
``SPILLWAY_BIN=target/release/spillway python3 scripts/demo.py [--requests N] [--show-config]``
as root.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
os.environ.setdefault("SPILLWAY_BIN", str(REPO / "target" / "release" / "spillway"))

import balancer as B  # noqa: E402
import topo as T  # noqa: E402

VIP_WEB = T.VIP4  # 198.18.0.100
VIP_DNS = "198.18.0.101"
SPILL_RATIO = 0.5
WIDTH = 78


# ---- output ---------------------------------------------------------------------------------------
def banner(title: str) -> None:
    print()
    print("=" * WIDTH)
    print(f" {title}")
    print("=" * WIDTH)


def say(text: str = "") -> None:
    print(text, flush=True)


class LogTail:
    """New lines of the daemon's log since the last call, without timestamps."""

    LINE = re.compile(r"^\S+Z\s+(\w+)\s+[\w:]+: (.*)$")

    def __init__(self, lb: B.Spillway):
        self.lb = lb
        self.pos = 0

    def new(self) -> list[str]:
        text = self.lb.output()
        lines = text[self.pos:].splitlines()
        self.pos = len(text)
        out = []
        for line in lines:
            m = self.LINE.match(line)
            if m:
                out.append(f"{m[1]:5} {m[2]}")
        return out

    def wait_for(self, patterns: list[str], timeout: float = 20) -> list[str]:
        """Read new lines until each pattern matched one of them; returns every line read."""
        seen: list[str] = []
        rxs = [re.compile(p) for p in patterns]
        deadline = time.time() + timeout
        while not all(any(rx.search(l) for l in seen) for rx in rxs):
            if time.time() > deadline:
                raise TimeoutError(f"not all of {patterns} in the balancer's log after {timeout}s:\n"
                                   + "\n".join(seen))
            if self.lb.proc.poll() is not None:
                raise RuntimeError(f"spillway exited:\n{self.lb.output()[-3000:]}")
            seen += self.new()
            time.sleep(0.1)
        return seen


def show_gauges(lb: B.Spillway, t: T.Topology, cfg: dict) -> None:
    """The control plane's gauges, read from the balancer's /metrics (Prometheus text, parsed with
    prometheus_client): effective health per backend, eligible set sizes, failover and zonal
    spill-over per service."""
    try:
        m = lb.metrics()
    except Exception as e:  # noqa: BLE001 - the demo goes on without its gauges
        say(f" (gauges unavailable: {e})")
        return
    short = {b.ipv4: b.short for b in t.backends}
    say(" Gauges from the balancer's /metrics:")
    for svc in cfg["services"]:
        name = svc["name"]
        health = m.by("spillway_backend_healthy", "backend", service=name)
        named = sorted((short.get(ip, ip), v) for ip, v in health.items())
        hs = " ".join(f"{b}={int(v)}" for b, v in named)
        eligible = f"{int(m.value('spillway_service_eligible_backends', service=name))}"
        zonal = "zonal_affinity" in svc["backend_service"]
        if zonal:
            sizes = m.by("spillway_service_zone_eligible_backends", "zone", service=name)
            eligible += " (" + ", ".join(f"{z} {int(v)}" for z, v in sorted(sizes.items())) + ")"
        say(f"   {name:4} backend healthy  {hs:22}  eligible set {eligible}")
        line = f"        failover active  {int(m.value('spillway_service_failover_active', service=name)):<22}"
        if zonal:
            spill = m.by("spillway_service_zonal_spill_active", "zone", service=name)
            line += "  zonal spill  " + " ".join(f"{z}={int(v)}" for z, v in sorted(spill.items()))
        say(line.rstrip())


def show_log(lines: list[str]) -> None:
    interesting = [l for l in lines if "verdict" in l or "eligible set" in l]
    for l in interesting:
        say(f"    balancer log | {l}")


# ---- configuration ---------------------------------------------------------------------------------
def demo_config(t: T.Topology) -> dict:
    web = B.service(t, name="web", vips=(VIP_WEB,), encap="IPIP", backend_service={
        "zonal_affinity": {"spillover": "ZONAL_AFFINITY_SPILL_CROSS_ZONE", "spillover_ratio": SPILL_RATIO},
    })
    web["forwarding_rules"] = [
        {"vip": VIP_WEB, "protocol": "TCP", "ports": [80]},
        {"vip": VIP_WEB, "protocol": "UDP", "ports": [5353]},
    ]
    for group in web["backend_service"]["backends"]:
        group["health_check"] = "web-http"
    dns = B.service(t, name="dns", vips=(VIP_DNS,), encap="GUE")
    dns["forwarding_rules"] = [{"vip": VIP_DNS, "protocol": "UDP", "ports": [5353]}]
    health = {"web-http": {"type": "HTTP", "port": 80, "path": "/", "check_interval_sec": 1,
                           "timeout_sec": 1, "healthy_threshold": 2, "unhealthy_threshold": 2}}
    cfg = B.make_config(t, [web, dns], health_checks=health)
    cfg["dataplane"]["eal_args"] += ["--no-telemetry"]
    return cfg


def describe(t: T.Topology, cfg: dict) -> None:
    say("Topology (one L2 segment, all in private network namespaces):")
    for z in t.zones:
        cs = ", ".join(f"{c.short} {c.ipv4}" for c in t.clients_in(z.name))
        bs = ", ".join(f"{b.short} {b.ipv4}" for b in t.backends_in(z.name))
        say(f"  zone-{z.name}: clients {cs:22} backends {bs}")
    say(f"  balancer: node address {T.LB_NODE_V4} on a DPDK net_tap port; "
        f"backends answer clients directly (DSR)")
    say()
    say("Services (the config is JSON, which is YAML; --show-config prints it):")
    for svc in cfg["services"]:
        rules = ", ".join(f"{r['protocol']}/{','.join(map(str, r['ports']))}" for r in svc["forwarding_rules"])
        enc = svc["encapsulation"]
        enc_s = enc["type"] + (f" (UDP {enc['port']})" if enc["type"] == "GUE" else "")
        za = svc["backend_service"].get("zonal_affinity")
        za_s = f"{za['spillover']} ratio {za['spillover_ratio']}" if za else "no zonal affinity"
        hc = {g.get("health_check") for g in svc["backend_service"]["backends"]} - {None}
        hc_s = ", ".join(f"{h}: {cfg['health_checks'][h]['type']} :{cfg['health_checks'][h]['port']} "
                         f"every {cfg['health_checks'][h]['check_interval_sec']} s" for h in hc) or "no health check"
        say(f"  {svc['name']:4} VIP {svc['forwarding_rules'][0]['vip']:13} {rules:18} -> {enc_s}")
        say(f"       {za_s}; {hc_s}")


COUNTER_HINTS = {
    "worker=": "<- per worker: received, sent, dropped",
    "forward=new_connection": "<- first packets: backend chosen, flow recorded",
    "forward=conntrack_hit": "<- later packets of a recorded flow",
    "forward=replaced": "<- recorded flow re-pinned (backend gone/unhealthy)",
    "drop=not_for_us": "<- other hosts' frames (ARP, IPv6 multicast)",
    "drop=neighbour_unresolved": "<- backend MAC not known yet",
    "neighbour_replies": "<- ARP answers for the VIPs / node address",
    "echo_replies": "<- pings answered",
    "conntrack_entries": "<- flows recorded now",
}


# ---- traffic --------------------------------------------------------------------------------------
def http(c: T.Client, vip: str) -> str:
    r = c.run(["curl", "-s", "-m", "2", f"http://{vip}/"], check=False)
    m = re.match(r"(b\d+) ", r.stdout)
    return m[1] if m else "--"


def udp(c: T.Client, vip: str, payload: bytes) -> str:
    with c.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((c.ipv4, 0))
        s.settimeout(1)
        try:
            s.sendto(payload, (vip, T.UDP_PORT))
            data, src = s.recvfrom(2048)
        except OSError:
            return "--"
    m = re.match(r"(b\d+) len=", data.decode(errors="replace"))
    return m[1] if m and src[0] == vip else "--"


def round_of_traffic(t: T.Topology, n: int, note: str = "", with_dns: bool = False) -> dict:
    """n HTTP requests (curl, each a new TCP connection) and n UDP datagrams (each from a new
    source port) through the VIP from every client; prints who answered each."""
    say()
    say(f" Traffic: from each client, {n} HTTP requests (curl, one new TCP connection each) and")
    say(f" {n} UDP datagrams (one new source port each), through the VIP.")
    if note:
        for line in note.splitlines():
            say(f" {line}")
    say()
    bs = t.backends
    col = max(2 * n + 2, 33)
    zone_hdr = " | ".join(" ".join(f"{b.short:>3}" for b in t.backends_in(z.name)) for z in t.zones)
    say(f" {'client':11} {'service':19} {'backend that answered, in order':{col}} {zone_hdr}")
    zones_line = " | ".join(f"{'zone-' + z.name:>{4 * len(t.backends_in(z.name)) - 1}}" for z in t.zones)
    say(f" {'':11} {'':19} {'':{col}} {zones_line}")
    results = {}
    kinds = [("HTTP", "web HTTP :80"), ("UDP", "web UDP  :5353")]
    if with_dns:
        kinds.append(("DNS", "dns UDP  :5353 GUE"))
    for c in t.clients:
        for kind, label in kinds:
            if kind == "HTTP":
                answers = [http(c, VIP_WEB) for _ in range(n)]
            elif kind == "UDP":
                answers = [udp(c, VIP_WEB, f"hello {i}".encode()) for i in range(n)]
            else:
                answers = [udp(c, VIP_DNS, f"query {i}".encode()) for i in range(n)]
            results[(c.short, kind)] = answers
            counts = Counter(answers)
            seq = " ".join(a[1:] if a != "--" else "-" for a in answers)  # "1 2 2 1 ..."
            per_zone = " | ".join(" ".join(f"{counts.get(b.short, 0) or '.':>3}" for b in t.backends_in(z.name))
                                  for z in t.zones)
            who = f"{c.short} zone-{c.zone.name}"
            say(f" {who:11} {label:19} {seq:{col}} {per_zone}")
    failed = sum(a.count("--") for a in results.values())
    say()
    say(f" (digits = backend number, b1..b{len(bs)}; '.' = none; "
        f"{'every request answered' if not failed else f'{failed} request(s) got no answer'})")
    return results


# ---- the story ----------------------------------------------------------------------------------------
def wait_health(tail: LogTail, backends: list[T.Backend], healthy: bool, what: str,
                gauges=None) -> None:
    want = "true" if healthy else "false"
    t0 = time.time()
    lines = tail.wait_for([rf"verdict changed backend=\S*{re.escape(b.ipv4)}\b.* healthy={want}" for b in backends])
    time.sleep(0.3)
    lines += tail.new()
    say(f" {what}: the health checks noticed after {time.time() - t0:.1f} s. What the balancer logged:")
    show_log(lines)
    if gauges is not None:
        gauges()


def run(args: argparse.Namespace) -> int:
    if os.geteuid() != 0:
        say("demo: run as root (network namespaces, DPDK, tap devices)")
        return 1
    if not B.BIN.exists():
        say(f"demo: {B.BIN} not found: build it (cargo build --release -p spillway)")
        return 1
    T.cleanup_stale()
    started = time.time()
    banner("Spillway demo: an L4 load balancer (DPDK, userspace) between two zones")
    with T.Topology(vips4=(VIP_WEB, VIP_DNS)) as t:
        cfg = demo_config(t)
        describe(t, cfg)
        if args.show_config:
            say()
            say(json.dumps(cfg, indent=2))
        say()
        say(f"Starting {B.BIN.relative_to(REPO) if B.BIN.is_relative_to(REPO) else B.BIN} in namespace {t.lb.name} ...")
        lb = B.Spillway(t, cfg)
        try:
            tail = LogTail(lb)
            gauges = lambda: show_gauges(lb, t, cfg)  # noqa: E731
            lb.wait_ready(t.clients[0], addr=VIP_WEB)
            lb.wait_neighbours()
            say(f" running: port MAC {lb.port_mac}, answering ARP and ping for {VIP_WEB}, {VIP_DNS} "
                f"and {T.LB_NODE_V4}")
            say(f" memory: {lb.memory}")
            say(" health checks start pessimistic (every backend unhealthy until 2 probes pass) ...")
            wait_health(tail, t.backends, True, "all four backends healthy", gauges)

            banner("1. All backends healthy")
            round_of_traffic(
                t, args.requests,
                f"Zonal affinity: a client's new connections stay in its own zone while at least\n"
                f"{SPILL_RATIO:.0%} of that zone's backends are healthy. The dns service has no zonal\n"
                f"affinity: it spreads over all four backends.",
                with_dns=True)

            b1, b2 = t.backend("b1"), t.backend("b2")
            banner("2. b1 goes down (its HTTP and UDP servers stop)")
            t.stop_server(b1)
            wait_health(tail, [b1], False, "b1 unhealthy", gauges)
            round_of_traffic(
                t, args.requests,
                f"zone-a has 1 of 2 backends healthy: 0.5 >= spillover ratio {SPILL_RATIO}, so zone-a's\n"
                f"clients stay in zone-a, all on b2.")

            banner("3. b2 goes down too")
            t.stop_server(b2)
            wait_health(tail, [b2], False, "b2 unhealthy", gauges)
            round_of_traffic(
                t, args.requests,
                f"zone-a has no healthy backend: 0 < {SPILL_RATIO}, so zone-a's clients spill over to\n"
                f"zone-b (b3, b4).")

            banner("4. b1 and b2 come back (servers restarted)")
            t.start_server(b1)
            t.start_server(b2)
            wait_health(tail, [b1, b2], True, "b1 and b2 healthy again", gauges)
            round_of_traffic(t, args.requests, "Each zone's traffic is back in its own zone.")

            banner("Backends: packets each one decapsulated")
            say(f" {'backend':8} {'zone':7} {'IPIP':>6} {'GUE':>6}   (IPIP carries web, GUE carries dns)")
            for b in t.backends:
                s = t.decap_stats(b)
                say(f" {b.short:8} zone-{b.zone.name:2} {s['ipip']:>6} {s['gue4']:>6}")
        finally:
            final = lb.stop()
        banner("Balancer counters (printed by spillway as it stopped)")
        for line in lb.output().splitlines():
            if line.startswith("final "):
                label = line[6:].split(" ")[0]
                hint = next((h for k, h in COUNTER_HINTS.items() if label.startswith(k)), "")
                say(f" {line[6:]:58} {hint}")
        say()
        say(f" {sum(v for k, v in final.items() if k.startswith('forward.'))} packets forwarded: the "
            f"client->VIP direction only. Replies go from")
        say(" the backends straight to the clients (direct server return).")
    banner(f"Done in {time.time() - started:.0f} s; namespaces, processes and files removed.")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=12, help="requests per client, protocol and round")
    ap.add_argument("--show-config", action="store_true", help="print the balancer's configuration")
    args = ap.parse_args()
    try:
        return run(args)
    except KeyboardInterrupt:
        print("\ndemo: interrupted; everything it created has been removed", file=sys.stderr)
        return 130
    except SystemExit as e:  # SIGTERM (topo.py cleans up, then exits with 128 + signal)
        if e.code in (130, 143):
            print("\ndemo: stopped; everything it created has been removed", file=sys.stderr)
        raise


if __name__ == "__main__":
    sys.exit(main())
