"""Hostile input on the balancer's segment, end to end: the real daemon on a DPDK ``net_tap``
port, clients and backends in their own namespaces (``topo.py``).

What is shown:

* Neighbour poisoning: forged ARP replies and gratuitous ARPs that claim a backend's address
  for another MAC change nothing (the table keeps the backend's MAC, the backend keeps
  receiving its flows, the forger receives none), and are counted; when the backend really
  moves to a new MAC, a fresh resolution picks the new MAC up and traffic follows it.
"""

from __future__ import annotations

import os
import time

import topo as T
from balancer import BIN, Spillway, make_config, needs_built, service
from test_packet_path import udp_ask

pytestmark = needs_built(BIN)

FORGED_MAC = "02:66:66:66:66:66"


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
                    time.sleep(0.05)
                seen = spread(t)
                time.sleep(0.5)
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
            T.wait_until(lambda: b1.send_frames(b1.ifname, [announce]) and
                         neighbour_mac(lb, b1.ipv4) == new,
                         "the balancer to take b1's new MAC", timeout=15, poll=0.5)
            moved = lb.ctl("neighbours")["answers"]
            assert moved["changed"] == before["changed"] + 1, moved
            seen = spread(t)
            assert seen.get("b1", 0) > 0 and sum(seen.values()) == 48, seen
