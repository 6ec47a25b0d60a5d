"""Smoke tests of the fleet harness (fleet.py): router, instances, BIRD, ECMP, long-lived TCP.

No Spillway here: each instance namespace gets a control-plane stand-in (``Fleet.standin_instance``:
a veth ``spl0`` with the node address and ``<vip>/32 dev spl0 proto 252 table 100``), so these
tests check the plumbing the fleet tests build on -- the BGP sessions, the router's multipath
FIB, how fast a withdrawn VIP or a vanished instance leaves it (hold timer vs BFD) -- and the
long-lived connection harness (through the router to a backend's own address).

Needs BIRD 2 (Debian ``bird2``); without it the tests skip outside CI and fail in CI
(strict_skips.py). Figures are printed (``pytest -s``).
"""

from __future__ import annotations

import json
import signal
import threading
import time

import pytest

import topo as T
from fleet import (DATA_PORT, INSTANCE_BRIDGE, VIP_OTHER, VIP_WEB, Bird, BirdError, Fleet, LongLived,
                   needs_bird, node_address)

pytestmark = [needs_bird()]

A, B = node_address(1), node_address(2)
FIGURES: dict[str, float] = {}


def link(ns, ifname):
    return json.loads(ns.ip("-j", "addr", "show", "dev", ifname).stdout)[0]


def test_layout_data_port_and_long_lived_connections():
    with Fleet() as f:
        p, r = f.prefix, f.router
        assert {f"{p}-r", f"{p}-i1", f"{p}-i2", f"{p}-c1", f"{p}-c2", f"{p}-b1", f"{p}-b4"} <= set(T.netns_list())
        assert [(b.short, b.ipv4) for b in f.backends] == [
            ("b1", "198.18.1.1"), ("b2", "198.18.1.2"), ("b3", "198.18.2.1"), ("b4", "198.18.2.2")]
        assert [c.ipv4 for c in f.clients] == ["198.19.0.1", "198.19.0.2"]
        sysctl = lambda k: r.run(["sysctl", "-n", k]).stdout.strip()  # noqa: E731
        assert sysctl("net.ipv4.ip_forward") == "1" and sysctl("net.ipv4.fib_multipath_hash_policy") == "1"
        for inst in f.instances:
            for dev in (INSTANCE_BRIDGE, "eth0"):
                info = link(inst, dev)
                assert not info.get("addr_info"), info  # no IPv4, no IPv6 (disabled)
            assert link(inst, "eth0")["master"] == INSTANCE_BRIDGE
            assert inst.run(["sysctl", "-n", f"net.ipv6.conf.{INSTANCE_BRIDGE}.disable_ipv6"]).stdout.strip() == "1"
        b1 = f.backend("b1")
        lo = b1.ip("addr", "show", "dev", "lo").stdout
        assert f"{VIP_WEB}/32" in lo and f"{VIP_OTHER}/32" in lo
        c1 = f.client("c1")
        for dst in ("198.18.0.254", "198.18.1.1", "198.18.2.2"):  # through the router, both ways
            c1.run(["ping", "-c1", "-W2", dst])

        # The data port: enslaved to brd once it appears (here a plain tap stands in for DPDK's).
        i1 = f.instance(1)
        threading.Timer(0.3, lambda: i1.ip("tuntap", "add", "dev", DATA_PORT, "mode", "tap")).start()
        f.attach_data_port(1, timeout=5)
        info = link(i1, DATA_PORT)
        assert info["master"] == INSTANCE_BRIDGE and "UP" in info["flags"]
        with pytest.raises(TimeoutError):
            f.attach_data_port(2, "nosuchif0", timeout=0.2)

        # A config that does not parse is refused with the file and BIRD's message.
        with pytest.raises(BirdError, match="does not parse"):
            Bird(r, f, "bad").write_config("protocol nonsense {\n")

        # Long-lived connections, from c1 through the router to b1's echo port.
        with LongLived(c1, b1.ipv4, n=20, period=0.1) as ll:
            T.wait_until(lambda: ll.report()["answered"] >= 200, "200 answers", timeout=10)
            rep = ll.stop()
        print(f"\nlong-lived, steady: {({k: v for k, v in rep.items() if k != 'per_connection'})}")
        assert rep["established"] == 20 and rep["resets"] == 0 and rep["errors"] == 0 and rep["closed"] == 0
        assert rep["backends"] == {"b1": 20} and rep["backends_changed"] == 0
        assert rep["lost"] == 0 and rep["answered"] == rep["sent"] >= 200
        assert rep["longest_stall_s"] < 1.0
        assert all(c["answered"] >= 5 for c in rep["per_connection"])

        # The backend resets them (ss -K: the kernel aborts its sockets with a RST): every
        # connection counts as a reset and stays closed.
        ll = LongLived(c1, b1.ipv4, n=5, period=0.05).start()
        T.wait_until(lambda: ll.report()["answered"] >= 25, "25 answers", timeout=10)
        b1.run(["ss", "-K", "-t", "state", "established", "dst", c1.ipv4, "sport", "=", ":7000"])
        T.wait_until(lambda: ll.report()["open"] == 0,
                     lambda: f"the connections to be reset (ss -K needs CONFIG_INET_DIAG_DESTROY): {ll.report()['open']} open",
                     timeout=5)
        time.sleep(0.3)  # a quiet window, not a wait: nothing reopens them within it
        rep = ll.stop(drain=0)
        assert rep["resets"] == 5 and rep["open"] == 0 and rep["lost"] == rep["sent"] - rep["answered"], rep
        assert all(c["state"] == "reset" and "reset" in c["error"] for c in rep["per_connection"]), rep

        # The backend's server goes away: every connection ends (EOF, or reset), none survives.
        ll = LongLived(c1, b1.ipv4, n=10, period=0.05).start()
        T.wait_until(lambda: ll.report()["answered"] >= 50, "50 answers", timeout=10)
        f.stop_server(b1)
        T.wait_until(lambda: ll.report()["open"] == 0, lambda: f"connections to end: {ll.report()['open']} open",
                     timeout=10)
        rep = ll.stop(drain=0)
        print(f"long-lived, server stopped: resets={rep['resets']} closed={rep['closed']} errors={rep['errors']} "
              f"lost={rep['lost']}")
        assert rep["resets"] + rep["closed"] + rep["errors"] == 10


def test_bgp_ecmp_withdraw_and_restore():
    with Fleet(start_services=False) as f:
        s1 = f.standin_instance(1, vips=(VIP_WEB,))
        f.standin_instance(2, vips=(VIP_WEB, VIP_OTHER))
        took = f.wait_established()
        assert f.bgp_state(1) == f.bgp_state(2) == "Established"
        assert f.bgp_state(1, side="instance") == "Established"
        print(f"\nsessions established {took:.2f} s after the stand-ins came up")
        f.wait_nexthops(VIP_WEB, [A, B], timeout=5)
        f.wait_nexthops(VIP_OTHER, [B], timeout=5)  # only instance 2 serves "other"
        assert f.router_nexthops(VIP_WEB) == [A, B]
        assert "198.19.200.1/32" in f.instance(1).learned()

        withdraws, announces = [], []
        for _ in range(3):
            t0 = time.monotonic()
            s1.withdraw(VIP_WEB)
            withdraws.append(f.wait_nexthops(VIP_WEB, [B], timeout=5, since=t0))
            t0 = time.monotonic()
            s1.announce(VIP_WEB)
            announces.append(f.wait_nexthops(VIP_WEB, [A, B], timeout=5, since=t0))
        print(f"table-100 route deleted -> router FIB without i1: {[round(x * 1000) for x in withdraws]} ms; "
              f"re-added -> back: {[round(x * 1000) for x in announces]} ms")
        assert max(withdraws) < 2.0 and max(announces) < 2.0

        # The instance's BIRD dies: the kernel closes its session, the router drops i1 at once;
        # a new BIRD learns the route already in table 100 on its first scan.
        t0 = time.monotonic()
        f.instance(1).bird.stop(signal.SIGKILL)
        killed = f.wait_nexthops(VIP_WEB, [B], timeout=5, since=t0)
        t0 = time.monotonic()
        f.start_instance_bird(1)
        f.wait_established([1])
        back = f.wait_nexthops(VIP_WEB, [A, B], timeout=10, since=t0)
        print(f"instance BIRD SIGKILLed -> FIB without i1: {killed * 1000:.0f} ms; restarted -> back: {back:.2f} s")
        assert killed < 2.0
        FIGURES["withdraw_ms"] = max(withdraws) * 1000


@pytest.mark.parametrize("bfd", [False, True], ids=["hold-time", "bfd"])
def test_failover_when_an_instance_vanishes(bfd):
    """spl0 deleted in instance 1: nothing reaches the router any more, so only the hold timer
    (3 s) or BFD (3 x 100 ms) can take i1 out of the FIB."""
    with Fleet(bfd=bfd, start_services=False) as f:
        s1 = f.standin_instance(1)
        f.standin_instance(2)
        f.wait_established()
        f.wait_nexthops(VIP_WEB, [A, B], timeout=5)
        times = []
        for _ in range(2):
            t0 = time.monotonic()
            s1.down()
            times.append(f.wait_nexthops(VIP_WEB, [B], timeout=10, since=t0))
            assert f.bgp_state(1) != "Established"
            t0 = time.monotonic()
            s1.up()
            f.wait_established([1])
            back = f.wait_nexthops(VIP_WEB, [A, B], timeout=15, since=t0)
        kind = "bfd" if bfd else "hold-time"
        print(f"\n{kind} failover: spl0 deleted -> router FIB without i1: {[round(t, 3) for t in times]} s; "
              f"spl0 back -> both next hops again after {back:.2f} s")
        FIGURES[kind] = max(times)
        if bfd:
            assert max(times) < 1.0
            if "hold-time" in FIGURES:
                assert max(times) < FIGURES["hold-time"]
        else:
            # The hold timer fires 3 s after the last keepalive (sent every second).
            assert 1.5 < min(times) and max(times) < 4.5
