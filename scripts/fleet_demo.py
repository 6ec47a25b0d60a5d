#!/usr/bin/env python3
"""Spillway fleet demo: two instances behind a BGP/ECMP router, one killed, connections going on.

Builds (with tests/e2e/fleet.py), in network namespaces:

* a router running BIRD with ECMP (``merge paths``) and BFD towards the instances, clients
  c1, c2 on its other side;
* two Spillway instances, each in its own namespace with its own BIRD, which peers with the
  router over the instance's kernel interface ``spl0`` (Spillway's exception path) and exports
  the VIPs Spillway announces in kernel table 100;
* four backends that decapsulate IPIP in user space and answer HTTP, UDP and a line echo with
  their name.

Then it shows the router's FIB (one next hop per instance), spreads new connections over both
instances, opens 20 long-lived connections that exchange a line every 100 ms, adds a fifth
backend on both instances (a reload: some connections are now pinned to a backend the new
tables would not pick, and the instances share those entries, fleet sync), kills instance 1
with SIGKILL, and shows BFD taking it out of the router's FIB and every connection carrying on,
on the backend it had. Everything it created is removed at the end, also on Ctrl-C.

Run it through scripts/demo.sh (installs dependencies, builds the release binaries). Directly:
``SPILLWAY_BIN=target/release/spillway python3 scripts/fleet_demo.py`` as root.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
os.environ.setdefault("SPILLWAY_BIN", str(REPO / "target" / "release" / "spillway"))
os.environ.setdefault("SPILLWAYCTL_BIN", str(Path(os.environ["SPILLWAY_BIN"]).parent / "spillwayctl"))

import topo as T  # noqa: E402
from demo import banner, say  # noqa: E402  (scripts/demo.py: the same output style)
from fleet import (VIP_WEB, VIPS, Fleet, LongLived, answered_now, carriers, http_get,  # noqa: E402
                   spillway_config, start_all, summary, wait_all_progress, wait_synced)

CONNECTIONS = 20


def fib(f: Fleet) -> None:
    for vip in VIPS:
        out = f.router.run(["ip", "route", "show", vip]).stdout.strip()
        say("  router$ ip route show " + vip)
        for line in out.splitlines():
            say("    " + line.strip())


def main() -> int:
    for b in (os.environ["SPILLWAY_BIN"], os.environ["SPILLWAYCTL_BIN"]):
        if not Path(b).exists():
            say(f"fleet demo: {b} is not built (cargo build --release -p spillway -p spillway-ctl)")
            return 1
    banner("A router (BIRD, ECMP, BFD), two Spillway instances with their own BIRD, six backends")
    with Fleet(instances=2, bfd=True, backends_per_zone=3) as f:
        t0 = time.monotonic()
        for i in f.instances:
            f.spillway(i.k, config=spillway_config(f, i.k, sync=True), start=False)
        sps = start_all(f)
        say(f"both instances serving and announced, BGP and BFD up: {time.monotonic() - t0:.1f} s")
        for sp in sps:
            st = sp.instance()
            say(f"  {sp.inst.short}: phase {st['phase']}, announces {', '.join(st['announced'])}; "
                f"web's table fingerprint {st['fingerprints']['web']}")
        fib(f)

        banner("200 new connections from the clients: ECMP spreads them over the instances")
        before = [sp.metrics().value("spillway_service_new_connections_total", service="web") for sp in sps]
        answers: Counter[str] = Counter()
        for i in range(200):
            c = f.client("c1" if i % 2 == 0 else "c2")
            answers[http_get(c, VIP_WEB).split()[0].decode()] += 1
        after = [sp.metrics().value("spillway_service_new_connections_total", service="web") for sp in sps]
        for sp, a, b in zip(sps, before, after):
            say(f"  {sp.inst.short} took {int(b - a)} new connections")
        say(f"  backends that answered: {dict(sorted(answers.items()))}")

        banner(f"{CONNECTIONS} long-lived connections, a line every 100 ms, each echoed by its backend")
        ll = LongLived(f.client("c1"), VIP_WEB, port=T.ECHO_PORT, n=CONNECTIONS, period=0.1).start()
        T.wait_until(lambda: all(c["answered"] >= 3 for c in ll.report()["per_connection"]),
                     "every connection answered 3 times", timeout=10)
        on = carriers(sps, ll)
        say(f"  through i1: {len(on['i1'])} connections, through i2: {len(on['i2'])}")
        backend_of = {c["id"]: c["backend"] for c in ll.report()["per_connection"]}

        banner("a fifth backend for web, added by a reload on both instances")
        for sp in sps:
            sp.reload(spillway_config(f, sp.inst.k, sync=True, extra_web=("b5",)))
        synced = wait_synced(sps)
        for k, (_, s) in sorted(synced.items()):
            say(f"  {k}: {s['entries_sent']} connection entries now pinned elsewhere than the new table "
                "would pick, sent to its peer")

        banner("kill -9 instance 1")
        mark = answered_now(ll)
        t0 = time.monotonic()
        sps[0].kill()
        gone = f.wait_nexthops(VIP_WEB, [f.instance(2).node], timeout=10, since=t0)
        say(f"  the router dropped i1 after {gone:.2f} s (BFD: 3 x 100 ms)")
        fib(f)
        wait_all_progress(ll, mark, more=5, timeout=30)
        say(f"  every connection answered again {time.monotonic() - t0:.2f} s after the kill")
        rep = ll.stop(drain=2.0)
        moved = [c for c in rep["per_connection"] if c["id"] in on["i1"]]
        same = sum(1 for c in rep["per_connection"] if c["backends"] == [backend_of[c["id"]]])
        say(f"  connections: {rep['connections']}, open to the end: {rep['open']}, resets: {rep['resets']}")
        say(f"  messages: {rep['sent']} sent, {rep['answered']} answered, {rep['lost']} lost")
        taken = sps[1].metrics().value("spillway_forwarded_packets_total", reason="sync_takeover")
        say(f"  on the backend they had before: {same} of {rep['connections']} "
            f"(of the {len(moved)} i2 took over, {int(taken)} by the entries i1 had shared, the others "
            "by the consistent hash)")
        if moved:
            say(f"  longest stall of a moved connection: {max(c['longest_stall_s'] for c in moved):.2f} s")
        ok = rep["resets"] == 0 and rep["lost"] == 0 and same == rep["connections"]
        banner("the fleet carried on" if ok else "something went wrong: " + str(summary(rep)))
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
