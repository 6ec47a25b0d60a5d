"""Run the real ``spillway`` daemon inside a :class:`topo.Topology`.

:func:`make_config` writes a configuration for the topology (node 198.18.0.2 / fd00::2 on a
``net_tap`` port, zones a and b, client subnets, one or more services over the topology's
backends); :class:`Spillway` starts the daemon in the balancer namespace, enslaves its tap
to the bridge, waits until it answers (an echo to the VIP), and on :meth:`Spillway.stop`
sends SIGTERM and parses the ``final ...`` counter lines it prints.

Configurations are written as JSON, which is YAML.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from topo import REPO, VIP4, VIP6, Topology

BIN = Path(os.environ.get("SPILLWAY_BIN", REPO / "target" / "debug" / "spillway"))


def zones_topology(topo: Topology) -> dict:
    """The `topology:` section: region-1 with one zone per topology zone."""
    return {
        "region": "region-1",
        "zones": [{"name": f"zone-{z.name}"} for z in topo.zones],
        "client_subnets": [
            {"prefix": net, "zone": f"zone-{z.name}"}
            for z in topo.zones
            for net in (z.client_net4, z.client_net6)
        ],
    }


def service(topo: Topology, name: str = "web", vips=(VIP4, VIP6), encap: str = "IPIP",
            family: int = 4, backend_service: dict | None = None, groups=None) -> dict:
    """A service over every backend of the topology, one group per zone."""
    if groups is None:
        groups = [
            {
                "group": f"{name}-{z.name}",
                "zone": f"zone-{z.name}",
                "endpoints": [b.ipv4 if family == 4 else b.ipv6 for b in topo.backends_in(z.name)],
            }
            for z in topo.zones
        ]
    bs = {"backends": groups}
    bs.update(backend_service or {})
    enc = {"type": encap}
    if encap == "GUE":
        enc["port"] = 6080
    return {
        "name": name,
        "forwarding_rules": [{"vip": v, "protocol": "L3_DEFAULT", "ports": "ALL"} for v in vips],
        "encapsulation": enc,
        "backend_service": bs,
    }


def make_config(topo: Topology, services: list[dict], mtu: int = 1500, workers: int = 1,
                health_checks: dict | None = None, admin: str | None = None) -> dict:
    tap = f"{topo.prefix}-tap"
    return {
        "dataplane": {
            "eal_args": [
                "--no-huge", "-m", "256", "--no-pci", "-l", f"0-{workers}",
                "--file-prefix", f"{topo.prefix}-spw", "--log-level", "lib.eal:error",
                "--vdev", f"net_tap0,iface={tap}",
            ],
            "ports": ["net_tap0"],
            "workers": workers,
            "conntrack_capacity": 65536,
            "node": {"ipv4": "198.18.0.2/16", "ipv6": "fd00::2/64", "mtu": mtu},
        },
        "admin": {"listen": admin or f"unix:{topo.state_dir}/admin.sock"},
        "topology": zones_topology(topo),
        "health_checks": health_checks or {},
        "services": services,
    }


class Spillway:
    """The daemon in the balancer namespace, as a context manager."""

    def __init__(self, topo: Topology, config: dict, tap_mtu: int | None = None):
        self.topo = topo
        self.tap = config["dataplane"]["eal_args"][-1].split("iface=")[1]
        self.path = Path(topo.state_dir) / "spillway.yaml"
        self.write(config)
        self.log = Path(topo.state_dir) / "spillway.log"
        self.proc = topo.lb.popen([str(BIN), "--config", str(self.path), "--stats-interval", "0"],
                                  log="spillway.log", env={**os.environ, "RUST_LOG": "info"})
        self.final: dict[str, int] = {}
        # Attach only once the port is started: the driver sets the kernel side's MAC until
        # then, and attach_when_present gives the kernel side a MAC of its own.
        deadline = time.time() + 120
        while "spillway: running" not in self.output():
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"spillway did not start ({self.proc.poll()}):\n{self.output()}")
            time.sleep(0.05)
        topo.lb.attach_when_present(self.tap, timeout=10, mtu=tap_mtu)

    def write(self, config: dict) -> None:
        self.path.write_text(json.dumps(config, indent=1))

    def wait_ready(self, client, timeout: float = 30) -> None:
        """Wait until the balancer answers an echo to the VIP from `client`."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"spillway exited {self.proc.returncode}:\n{self.output()}")
            r = client.run(["ping", "-c", "1", "-W", "1", VIP4], check=False)
            if r.returncode == 0:
                return
        raise TimeoutError(f"spillway did not answer on {VIP4}:\n{self.output()}")

    def reload(self) -> None:
        self.proc.send_signal(signal.SIGHUP)

    def output(self) -> str:
        try:
            return self.log.read_text()
        except OSError:
            return ""

    def stop(self) -> dict[str, int]:
        """SIGTERM, wait, and parse the final counters: `forward.new_connection`,
        `drop.bad_ihl`, `rx`, `tx`, `echo_replies`, ..."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        out = self.output()
        final: dict[str, int] = {}
        for m in re.finditer(r"^final (forward|drop)=(\w+) packets=(\d+)", out, re.M):
            final[f"{m[1]}.{m[2]}"] = final.get(f"{m[1]}.{m[2]}", 0) + int(m[3])
        for m in re.finditer(r"^final (\w+)=(\d+)$", out, re.M):
            final[m[1]] = int(m[2])
        for m in re.finditer(r"^final worker=\d+ lcore=\d+ rx=(\d+) tx=(\d+) dropped=(\d+)", out, re.M):
            final["rx"] = final.get("rx", 0) + int(m[1])
            final["tx"] = final.get("tx", 0) + int(m[2])
            final["dropped"] = final.get("dropped", 0) + int(m[3])
        self.final = final
        return final

    def __enter__(self) -> "Spillway":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
