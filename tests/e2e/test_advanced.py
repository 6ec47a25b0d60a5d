"""Advanced load balancing on real traffic (SPEC section 7, AL-4 WATERFALL_BY_ZONE).

Each backend endpoint may take 20 new connections per second; zone-a has two endpoints, so
40/s. A zone-a client opens new UDP flows at twice that (80/s). With WATERFALL_BY_ZONE the
zone's groups fill up to capacity first and only the excess overflows to zone-b: about half
of the client's new connections stay in zone-a. The control loop measures load every second
and smooths it (5 s time constant), so the split is measured after a warm-up.
"""

from __future__ import annotations

import select
import socket
import subprocess
import time

from balancer import BIN, Spillway, make_config, needs_built, service
from topo import VIP4, Topology, UDP_PORT

CAPACITY_PER_ENDPOINT = 20  # new connections per second
RATE = 80                   # twice zone-a's capacity (2 endpoints x 20)
WARMUP_S = 15
MEASURE_S = 12
TOLERANCE = 0.15            # the in-zone share must be 0.5 +- 0.15
REPLY_WAIT_S = 0.5          # a flow with no answer by then counts as lost

pytestmark = needs_built(BIN)


def open_flows(client, rate: int, seconds: float) -> list[str]:
    """Open `rate` new UDP flows per second (a fresh socket each) and return the answering
    backends' names in the order the flows were opened ("-" for a flow with no answer within
    REPLY_WAIT_S).

    Sends keep to the schedule whatever the answers do: a lost or slow reply is waited for
    beside the next sends, never before them, so the balancer sees `rate` new connections per
    second even on a slow machine (a blocking wait per flow would lower the offered rate, and
    with it the share the balancer is right to keep in zone-a)."""
    names: list[str] = []
    waiting: dict[socket.socket, tuple[int, float]] = {}  # socket -> (index, give-up time)
    interval = 1.0 / rate
    start = time.monotonic()
    sends = int(rate * seconds)
    sent = 0
    while sent < sends or waiting:
        now = time.monotonic()
        if sent < sends and now >= start + sent * interval:
            s = client.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setblocking(False)
            names.append("-")
            try:
                s.sendto(b"x", (VIP4, UDP_PORT))
                waiting[s] = (sent, now + REPLY_WAIT_S)
            except OSError:
                s.close()
            sent += 1
            continue
        next_send = start + sent * interval if sent < sends else float("inf")
        give_up = min((t for _, t in waiting.values()), default=float("inf"))
        timeout = max(0.0, min(next_send, give_up) - now)
        if not waiting:
            time.sleep(timeout)
            continue
        ready, _, _ = select.select(list(waiting), [], [], timeout)
        for s in ready:
            index, _ = waiting.pop(s)
            try:
                reply, _ = s.recvfrom(256)
                names[index] = reply.split()[0].decode()
            except OSError:
                pass
            s.close()
        now = time.monotonic()
        for s in [s for s, (_, t) in waiting.items() if t <= now]:
            del waiting[s]
            s.close()
    return names


def scrape(topo: Topology) -> dict:
    """The advanced-LB gauges from /metrics, parsed by the reference Prometheus parser."""
    from prometheus_client.parser import text_string_to_metric_families

    text = subprocess.run(
        ["curl", "-sf", "--unix-socket", f"{topo.state_dir}/admin.sock", "http://spillway/metrics"],
        check=True, capture_output=True, text=True,
    ).stdout
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "spillway_group_capacity":
                out[(s.name, s.labels["group"])] = s.value
            if s.name == "spillway_client_zone_group_share":
                out[(s.name, s.labels["client_zone"], s.labels["group"])] = s.value
    return out


def test_waterfall_by_zone_overflows_only_the_excess():
    with Topology() as topo:
        groups = [
            {
                "group": f"web-{z.name}",
                "zone": f"zone-{z.name}",
                "endpoints": [b.ipv4 for b in topo.backends_in(z.name)],
                "capacity": {"max_rate_per_endpoint": CAPACITY_PER_ENDPOINT},
            }
            for z in topo.zones
        ]
        svc = service(topo, vips=(VIP4,), groups=groups,
                      backend_service={"advanced": {"algorithm": "WATERFALL_BY_ZONE"}})
        with Spillway(topo, make_config(topo, [svc])) as lb:
            c1 = topo.client("c1")
            lb.wait_ready(c1)
            lb.wait_neighbours()
            zone_of = {b.short: b.zone.name for b in topo.backends}
            # Below capacity (10/s) everything stays in zone-a.
            calm = open_flows(c1, 10, 4)
            assert calm and all(zone_of.get(n) == "a" for n in calm), calm
            open_flows(c1, RATE, WARMUP_S)
            names = open_flows(c1, RATE, MEASURE_S)
            gauges = scrape(topo)
        # The steering is visible: zone-a's capacity and its clients' split (SPEC section 7).
        assert gauges[("spillway_group_capacity", "web-a")] == 2 * CAPACITY_PER_ENDPOINT
        share_a = gauges[("spillway_client_zone_group_share", "zone-a", "web-a")]
        share_b = gauges[("spillway_client_zone_group_share", "zone-a", "web-b")]
        assert abs(share_a - 0.5) <= TOLERANCE and abs(share_a + share_b - 1) < 0.01, gauges
        answered = [n for n in names if n in zone_of]
        assert len(answered) >= 0.9 * len(names), f"{len(names) - len(answered)} lost"
        in_zone = sum(zone_of[n] == "a" for n in answered) / len(answered)
        print(f"zone-a kept {in_zone:.3f} of {len(answered)} new connections at {RATE}/s")
        assert abs(in_zone - 0.5) <= TOLERANCE, (
            f"zone-a kept {in_zone:.2f} of {len(answered)} new connections at twice its capacity"
        )
        assert lb.final.get("forward.new_connection", 0) >= len(answered)
