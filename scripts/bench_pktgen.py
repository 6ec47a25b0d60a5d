#!/usr/bin/env python3
"""pktgen-dpdk drives Spillway over net_memif, unattended (docs/load-testing.md, "pktgen").

Spillway is the memif server (one worker, the load balancer with one UDP service whose backend
is pktgen's own address, so the encapsulated packets come back to pktgen); pktgen 23.03 is the
client, started from a command file (``range`` mode: up to 24,576 flows of 64-byte UDP to the
VIP; pktgen also answers Spillway's ARP requests for its address: ``enable 0 process``). The
script:

1. warms up, then measures for ``--seconds``: what pktgen sent (Spillway's port received it or
   missed it: ``ipackets + imissed``), what Spillway forwarded (its worker's forward counters) and
   sent back, as rates; and Spillway's drop reasons, apart for the warm-up (``drops_before``),
   the measured seconds (``drops_during``) and the reconnects (``drops_over_reconnects``);
2. kills pktgen (SIGKILL) and starts it again ``--reconnects`` times, each time checking that
   Spillway is still running and forwards the new pktgen's traffic;
3. prints the figures and writes them to ``target/bench/pktgen.json``.

pktgen is not a Debian package and its code is not shipped here: build it with
``scripts/pktgen-build.sh SRC`` and pass the binary. Lcores on a 2-CPU machine: Spillway's
worker on CPU 1, its control thread on CPU 0; pktgen's sending lcore on CPU 0 and its main
lcore (display and CLI, which spins) on CPU 1 under SCHED_IDLE, so it never takes the worker's
CPU from it.

Usage: scripts/bench-pktgen.sh PKTGEN_BINARY [--seconds S] [--reconnects N] [--flows N]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SPILLWAY = Path(os.environ.get("SPILLWAY_BIN", REPO / "target" / "release" / "spillway"))
SPW_MAC = "02:53:57:00:00:01"
PG_MAC = "02:53:57:00:00:02"
PG_IP = "198.18.10.1"
VIP = "198.18.0.100"
PORT = 9


def config(sock: Path, admin: Path) -> dict:
    return {
        "dataplane": {
            "eal_args": ["--no-pci", "-l", "0-1", "--file-prefix", "spw-pktgen",
                         "--vdev", f"net_memif0,role=server,socket={sock},socket-abstract=no,mac={SPW_MAC}",
                         "--log-level", "lib.eal:error", "--no-telemetry"],
            "hugepages": "preferred",
            "ports": ["net_memif0"],
            "workers": 1,
            "mempool_size": 16383,
            "conntrack_capacity": 1048576,
            "node": {"ipv4": "198.18.0.2/16"},
        },
        "admin": {"listen": f"unix:{admin}"},
        "topology": {"region": "r", "zones": [{"name": "a"}]},
        "services": [{
            "name": "web",
            "forwarding_rules": [{"vip": VIP, "protocol": "UDP", "ports": [PORT]}],
            "backend_service": {"backends": [{"group": "pg", "zone": "a", "endpoints": [PG_IP]}]},
        }],
    }


def pkt_file(flows: int) -> str:
    """pktgen commands: range mode over `flows` flows. pktgen steps the source address and the
    source port together, so the flows are the least common multiple of their counts: 23 ports
    (a prime) and a count of addresses that 23 does not divide give their product."""
    ports = min(flows, 23)
    addrs = max(1, flows // ports)
    if addrs > 1 and addrs % ports == 0:
        addrs -= 1
    last = ipaddr_add("198.18.20.0", addrs - 1)
    return "\n".join([
        f"set 0 dst mac {SPW_MAC}",
        f"set 0 src ip {PG_IP}/16",
        f"set 0 dst ip {VIP}",
        "set 0 proto udp",
        "set 0 size 64",
        f"range 0 dst mac start {SPW_MAC}",
        f"range 0 src mac start {PG_MAC}",
        "range 0 src ip start 198.18.20.0",
        "range 0 src ip min 198.18.20.0",
        f"range 0 src ip max {last}",
        "range 0 src ip inc 0.0.0.1",
        f"range 0 dst ip start {VIP}",
        f"range 0 dst ip min {VIP}",
        f"range 0 dst ip max {VIP}",
        "range 0 dst ip inc 0.0.0.0",
        "range 0 proto udp",
        "range 0 src port start 1024",
        "range 0 src port min 1024",
        f"range 0 src port max {1024 + ports - 1}",
        "range 0 src port inc 1",
        f"range 0 dst port start {PORT}",
        f"range 0 dst port min {PORT}",
        f"range 0 dst port max {PORT}",
        "range 0 dst port inc 0",
        "range 0 size start 64",
        "range 0 size min 64",
        "range 0 size max 64",
        "range 0 size inc 0",
        "enable 0 range",
        "enable 0 process",
        "set 0 rate 100",
        "start 0",
        "",
    ])


def ipaddr_add(a: str, n: int) -> str:
    import ipaddress
    return str(ipaddress.IPv4Address(a) + n)


def pktgen_rates(log: str) -> list[tuple[int, int]]:
    """pktgen's own (RX, TX) packets per second of port 0, one pair per display refresh: without
    a terminal it prints its stats page as lines, the link state (`<UP-...>`) and then the
    values in the page's order, `Pkts/s Rx` and `Tx` first."""
    lines = [l.strip() for l in re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "\n", log).splitlines() if l.strip()]
    out = []
    for i, l in enumerate(lines):
        if l.startswith("<UP-") and i + 2 < len(lines) and lines[i + 1].isdigit() and lines[i + 2].isdigit():
            out.append((int(lines[i + 1]), int(lines[i + 2])))
    return out


class Run:
    def __init__(self, pktgen: Path, flows: int):
        self.dir = Path(tempfile.mkdtemp(prefix="spw-pktgen-"))
        self.sock = self.dir / "memif.sock"
        self.admin = self.dir / "admin.sock"
        self.pktgen = pktgen
        self.pkt = self.dir / "spillway.pkt"
        self.pkt.write_text(pkt_file(flows))
        self.cfg = self.dir / "spillway.yaml"
        self.cfg.write_text(json.dumps(config(self.sock, self.admin), indent=1))
        self.spw = None
        self.pg = None
        self.pg_runs = 0

    def start_spillway(self) -> None:
        log = open(self.dir / "spillway.log", "w")
        self.spw = subprocess.Popen([str(SPILLWAY), "--config", str(self.cfg), "--stats-interval", "0"],
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 60
        while "spillway: running" not in self.spw_log():
            if self.spw.poll() is not None or time.time() > deadline:
                sys.exit(f"bench-pktgen: spillway did not start:\n{self.spw_log()[-3000:]}")
            time.sleep(0.1)

    def spw_log(self) -> str:
        return (self.dir / "spillway.log").read_text(errors="replace")

    def start_pktgen(self) -> None:
        self.pg_runs += 1
        log = open(self.dir / f"pktgen.{self.pg_runs}.log", "w")
        argv = [str(self.pktgen), "-l", "0-1", "--main-lcore", "1", "--file-prefix", f"pg{self.pg_runs}",
                "-m", "2048", "--no-pci", "--no-telemetry", "--log-level", "lib.eal:error",
                "--vdev", f"net_memif0,role=client,socket={self.sock},socket-abstract=no,mac={PG_MAC}",
                "--", "-P", "-m", "0.0", "-f", str(self.pkt)]
        # pktgen reads its CLI from a terminal: give it one that stays open (a pipe nobody
        # writes), and stop it with a signal.
        self.pg = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True, cwd=self.pktgen.parent)
        # Its main lcore (display, CLI) spins on CPU 1, the worker's: idle priority only.
        time.sleep(0.5)
        subprocess.run(["chrt", "-i", "-p", "0", str(self.pg.pid)], capture_output=True)

    def kill_pktgen(self) -> None:
        if self.pg and self.pg.poll() is None:
            os.killpg(self.pg.pid, signal.SIGKILL)
            self.pg.wait(timeout=10)
        subprocess.run(["rm", "-rf", f"/var/run/dpdk/pg{self.pg_runs}"], capture_output=True)

    def metrics(self) -> str:
        r = subprocess.run(["curl", "-s", "--unix-socket", str(self.admin), "http://x/metrics"],
                           capture_output=True, text=True, timeout=10)
        return r.stdout

    def counter(self, text: str, name: str, **labels) -> float:
        total = 0.0
        for line in text.splitlines():
            if not line.startswith(name):
                continue
            m = re.match(r"^(\w+)(\{[^}]*\})? ([0-9.e+-]+)$", line)
            if not m or m.group(1) != name:
                continue
            lab = m.group(2) or ""
            if all(f'{k}="{v}"' in lab for k, v in labels.items()):
                total += float(m.group(3))
        return total

    def sample(self) -> dict:
        t = self.metrics()
        return {
            "t": time.monotonic(),
            "rx": self.counter(t, "spillway_worker_rx_packets_total"),
            "tx": self.counter(t, "spillway_worker_tx_packets_total"),
            "forwarded": self.counter(t, "spillway_forwarded_packets_total"),
            "dropped": {m.group(1): float(m.group(2)) for m in
                        re.finditer(r'^spillway_dropped_packets_total\{reason="(\w+)"\} ([0-9.e+]+)$', t, re.M)
                        if float(m.group(2)) > 0},
        }

    def stop(self) -> str:
        self.kill_pktgen()
        out = ""
        if self.spw and self.spw.poll() is None:
            self.spw.send_signal(signal.SIGTERM)
            try:
                self.spw.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.spw.kill()
            out = self.spw_log()
        return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pktgen", type=Path, help="the pktgen binary (scripts/pktgen-build.sh)")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--reconnects", type=int, default=5)
    ap.add_argument("--flows", type=int, default=24576, help="at most 24,576 in range mode")
    a = ap.parse_args()
    if not a.pktgen.is_file() or not os.access(a.pktgen, os.X_OK):
        print(f"bench-pktgen: {a.pktgen}: no pktgen binary there. pktgen is not a Debian package: "
              "build it with scripts/pktgen-build.sh (docs/load-testing.md, \"pktgen\")", file=sys.stderr)
        return 2
    if not SPILLWAY.exists():
        print(f"bench-pktgen: {SPILLWAY} is not built (cargo build --release -p spillway)", file=sys.stderr)
        return 2
    r = Run(a.pktgen.resolve(), min(a.flows, 24576))
    result: dict = {"flows": min(a.flows, 24576), "seconds": a.seconds}
    try:
        r.start_spillway()
        r.start_pktgen()
        # Warm-up: ARP answered, every flow's entry made.
        deadline = time.time() + 30
        while r.sample()["forwarded"] < 100_000:
            if time.time() > deadline or r.pg.poll() is not None:
                print(r.spw_log()[-2000:], file=sys.stderr)
                sys.exit("bench-pktgen: Spillway forwards nothing from pktgen (see the logs in "
                         f"{r.dir})")
            time.sleep(0.2)
        time.sleep(2)
        s0 = r.sample()
        time.sleep(a.seconds)
        s1 = r.sample()
        dt = s1["t"] - s0["t"]
        # pktgen's own view of the same seconds: its last refreshes.
        seen = pktgen_rates((r.dir / "pktgen.1.log").read_text(errors="replace"))
        last = seen[-int(a.seconds):] or [(0, 0)]
        result["pktgen_rx_mpps"] = round(sorted(x for x, _ in last)[len(last) // 2] / 1e6, 3)
        result["pktgen_tx_mpps"] = round(sorted(y for _, y in last)[len(last) // 2] / 1e6, 3)
        result.update({
            "spillway_rx_mpps": round((s1["rx"] - s0["rx"]) / dt / 1e6, 3),
            "spillway_forwarded_mpps": round((s1["forwarded"] - s0["forwarded"]) / dt / 1e6, 3),
            "spillway_tx_mpps": round((s1["tx"] - s0["tx"]) / dt / 1e6, 3),
            "drops_during": {k: s1["dropped"].get(k, 0) - s0["dropped"].get(k, 0) for k in s1["dropped"]},
            # Before the measured seconds: pktgen sends before it answers Spillway's first ARP
            # request for the next hop (`neighbour_unresolved`) and while the entries are made.
            "drops_before": s0["dropped"],
        })
        reconnects = []
        for i in range(a.reconnects):
            r.kill_pktgen()
            time.sleep(0.5)
            assert r.spw.poll() is None, "spillway exited when pktgen was killed"
            before = r.sample()["forwarded"]
            t0 = time.monotonic()
            r.start_pktgen()
            deadline = time.time() + 30
            while r.sample()["forwarded"] < before + 10_000:
                if time.time() > deadline:
                    sys.exit(f"bench-pktgen: no forwarding after reconnect {i + 1} (logs in {r.dir})")
                time.sleep(0.1)
            reconnects.append(round(time.monotonic() - t0, 2))
        result["reconnects_forwarding_again_s"] = reconnects
        s2 = r.sample()
        result["drops_over_reconnects"] = {
            k: s2["dropped"].get(k, 0) - s1["dropped"].get(k, 0) for k in s2["dropped"]
        }
        result["spillway_alive_after_reconnects"] = r.spw.poll() is None
    finally:
        out = r.stop()
    finals = [l for l in out.splitlines() if l.startswith("final")]
    result["spillway_final"] = finals[-20:]
    print(json.dumps(result, indent=1))
    dest = REPO / "target" / "bench" / "pktgen.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(result, indent=1))
    print(f"written: {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
