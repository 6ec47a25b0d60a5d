"""Run the real ``spillway`` daemon inside a :class:`topo.Topology`.

:func:`make_config` writes a configuration for the topology (node 198.18.0.2 / fd00::2 on a
``net_tap`` port, zones a and b, client subnets, one or more services over the topology's
backends); :class:`Spillway` starts the daemon in the balancer namespace, enslaves its tap
to the bridge, waits until it answers (an echo to the VIP), and on :meth:`Spillway.stop`
sends SIGTERM and parses the ``final ...`` counter lines it prints.

Configurations are written as JSON, which is YAML.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from topo import LB_NODE_V4, LB_NODE_V6, REPO, VIP4, VIP6, WORKER_IDLE_SLEEP_US, Topology, wait_until

BIN = Path(os.environ.get("SPILLWAY_BIN", REPO / "target" / "debug" / "spillway"))
# spillwayctl: next to the daemon's binary unless given.
CTL = Path(os.environ.get("SPILLWAYCTL_BIN", BIN.parent / "spillwayctl"))


def needs_built(*binaries: Path):
    """Mark for a module or test that runs these binaries. When one is missing the test is
    skipped with a reason that says how to build it -- outside CI; in CI (``CI`` set, or root)
    the skip is a failure (``strict_skips.py``)."""
    missing = [str(b) for b in binaries if not Path(b).exists()]
    return pytest.mark.skipif(
        bool(missing),
        reason=f"not built: {', '.join(missing)} (cargo build -p spillway -p spillway-ctl -p spillway-gen)")


class CtlError(RuntimeError):
    """`spillwayctl` exited non-zero: `code`, `stdout`, `stderr` (the daemon's error, as JSON
    with `--json`)."""

    def __init__(self, args, code: int, stdout: str, stderr: str):
        super().__init__(f"spillwayctl {' '.join(args)} -> {code}: {stderr.strip() or stdout.strip()}")
        self.code, self.stdout, self.stderr = code, stdout, stderr


class Metrics:
    """One scrape of `/metrics`, parsed by `prometheus_client`'s text parser.

    `families` maps a family name (without `_total`, as the parser names counters) to its
    `Metric`; :meth:`value` / :meth:`values` read samples by sample name and labels."""

    def __init__(self, text: str):
        from prometheus_client.parser import text_string_to_metric_families

        self.text = text
        self.families = {f.name: f for f in text_string_to_metric_families(text)}
        self.samples = [s for f in self.families.values() for s in f.samples]

    def values(self, name: str, **labels) -> dict[tuple, float]:
        """Samples called `name` whose labels include `labels`: {sorted label items: value}."""
        out = {}
        for s in self.samples:
            if s.name == name and all(s.labels.get(k) == str(v) for k, v in labels.items()):
                out[tuple(sorted(s.labels.items()))] = s.value
        return out

    def value(self, name: str, default: float | None = None, **labels) -> float:
        """The one sample `name` with exactly these labels (`default` when absent)."""
        want = tuple(sorted((k, str(v)) for k, v in labels.items()))
        for s in self.samples:
            if s.name == name and tuple(sorted(s.labels.items())) == want:
                return s.value
        if default is None:
            raise KeyError(f"no sample {name}{dict(want)}")
        return default

    def by(self, name: str, label: str, **labels) -> dict[str, float]:
        """Samples `name` matching `labels`, keyed by the value of `label`."""
        return {dict(k)[label]: v for k, v in self.values(name, **labels).items()}


def parse_final(out: str) -> dict[str, int]:
    """The daemon's `final ...` counter lines (printed at exit) as a dict: `forward.REASON`,
    `drop.REASON`, `NAME` for the other counters, `rx`/`tx`/`dropped` summed over workers."""
    final: dict[str, int] = {}
    for m in re.finditer(r"^final (forward|drop)=(\w+) packets=(\d+)", out, re.M):
        final[f"{m[1]}.{m[2]}"] = final.get(f"{m[1]}.{m[2]}", 0) + int(m[3])
    for m in re.finditer(r"^final (\w+)=(\d+)$", out, re.M):
        final[m[1]] = int(m[2])
    for m in re.finditer(r"^final worker=\d+ lcore=\d+ rx=(\d+) tx=(\d+) dropped=(\d+)", out, re.M):
        final["rx"] = final.get("rx", 0) + int(m[1])
        final["tx"] = final.get("tx", 0) + int(m[2])
        final["dropped"] = final.get("dropped", 0) + int(m[3])
    return final


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
                "--no-pci", "-l", f"0-{workers}",
                "--file-prefix", f"{topo.prefix}-spw", "--log-level", "lib.eal:error",
                "--vdev", f"net_tap0,iface={tap}",
            ],
            # Hugepages when the host has them free (scripts/test.sh reserves them).
            "hugepages": "preferred",
            "ports": ["net_tap0"],
            "workers": workers,
            "conntrack_capacity": 65536,
            # Idle workers sleep: several balancers share this machine's two cores.
            "idle_sleep_us": WORKER_IDLE_SLEEP_US,
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
        self.config = config
        vdev = [a for a in config["dataplane"]["eal_args"] if "iface=" in a][-1]
        self.tap = vdev.split("iface=")[1].split(",")[0]
        # A daemon started earlier in the same topology had another port MAC: forget what the
        # hosts learned about the VIPs and the node address.
        for h in topo.hosts:
            h.ip("neigh", "flush", "dev", h.ifname, check=False)
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
        self.config = config
        self.path.write_text(json.dumps(config, indent=1))

    def vips(self) -> list[str]:
        """The exact VIPs of the configured forwarding rules, in config order."""
        out: list[str] = []
        for svc in self.config.get("services", []):
            for r in svc.get("forwarding_rules", []):
                if r.get("vip") and r["vip"] not in out:
                    out.append(r["vip"])
        return out

    def endpoints(self) -> list[str]:
        """Every configured endpoint address (ports and brackets stripped)."""
        out: list[str] = []
        for svc in self.config.get("services", []):
            for g in svc["backend_service"]["backends"]:
                for e in g["endpoints"]:
                    if e.startswith("["):
                        e = e[1:].split("]")[0]
                    elif e.count(":") == 1:
                        e = e.split(":")[0]
                    if e not in out:
                        out.append(e)
        return out

    @property
    def memory(self) -> str:
        """The daemon's `spillway: memory:` line: what the configuration needs and what EAL got,
        on hugepages or not."""
        m = re.search(r"spillway: memory: (.*)", self.output())
        return m[1] if m else "(no memory line in the log)"

    @property
    def port_mac(self) -> str:
        """The DPDK port's MAC (from the daemon's `port started` log line)."""
        m = re.search(r"port started .*? mac=([0-9a-f:]{17})", self.output())
        if not m:
            raise RuntimeError(f"no 'port started' line in the log:\n{self.output()}")
        return m[1]

    def wait_ready(self, client, timeout: float = 30, addr: str | None = None) -> None:
        """Wait until the balancer answers an echo from `client` to `addr` (default: the
        first configured VIP, else 198.18.0.100)."""
        if addr is None:
            vips = self.vips()
            addr = vips[0] if vips else VIP4
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"spillway exited {self.proc.returncode}:\n{self.output()}")
            r = client.run(["ping", "-c", "1", "-W", "1", addr], check=False)
            if r.returncode == 0:
                return
        raise TimeoutError(f"spillway did not answer on {addr}:\n{self.output()}")

    def wait_neighbours(self, timeout: float = 10) -> None:
        """Wait until the balancer has resolved every configured endpoint of the topology.

        The balancer asks for its backends' MACs (ARP / neighbour solicitation) as it starts,
        partly before its tap joins the bridge; a packet for an unresolved backend is dropped
        (`neighbour_unresolved`). A backend that answered has learned the node address from
        the request, so this waits until each endpoint's namespace has a neighbour entry for
        the node address with the port's MAC, then until the table the workers use
        (`GET /v1/neighbours`) has each endpoint with its MAC."""
        mac = self.port_mac
        todo = []
        for e in self.endpoints():
            try:
                b = self.topo.backend(e)
            except KeyError:
                continue  # not a host of this topology
            todo.append((b, LB_NODE_V6 if ":" in e else LB_NODE_V4, e))
        want = {ipaddress.ip_address(e): b.mac_address.lower() for b, _, e in todo}
        deadline = time.time() + timeout
        while todo:
            todo = [(b, node, e) for b, node, e in todo
                    if mac not in b.ip("neigh", "show", "to", node, "dev", b.ifname, check=False).stdout]
            if not todo:
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"spillway exited {self.proc.returncode}:\n{self.output()}")
            if time.time() > deadline:
                raise TimeoutError(f"balancer did not resolve {[(b.short, n) for b, n, _ in todo]}")
            time.sleep(0.05)
        published: dict = {}

        def in_table() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"spillway exited {self.proc.returncode}:\n{self.output()}")
            published.clear()
            published.update({ipaddress.ip_address(n["addr"]): n["mac"].lower()
                              for n in json.loads(self.admin_get("/v1/neighbours"))["neighbours"]})
            return all(published.get(a) == m for a, m in want.items())

        wait_until(in_table, lambda: f"the balancer to publish {want}: its table {published}",
                   timeout=max(1.0, deadline - time.time()), poll=0.02)

    def reload(self) -> None:
        self.proc.send_signal(signal.SIGHUP)

    # -- admin API ----------------------------------------------------------------------------
    @property
    def admin(self) -> str:
        """`admin.listen` of the configuration (`unix:/path` or `host:port`)."""
        return self.config.get("admin", {}).get("listen", "unix:/run/spillway/admin.sock")

    def ctl_run(self, *args, json_out: bool = True, timeout: float = 15) -> subprocess.CompletedProcess:
        """Run `spillwayctl --admin ADMIN [--json] args...` (from the host: the admin socket
        is a file; a TCP admin address runs it in the balancer namespace)."""
        argv = [str(CTL), "--admin", self.admin, *(["--json"] if json_out else []), *map(str, args)]
        if not self.admin.startswith("unix:"):
            argv = self.topo.lb.cmd(argv)
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)

    def ctl(self, *args, timeout: float = 15):
        """`spillwayctl --json args...`: the parsed JSON reply; raises :class:`CtlError` on a
        non-zero exit."""
        r = self.ctl_run(*args, timeout=timeout)
        if r.returncode != 0:
            raise CtlError(args, r.returncode, r.stdout, r.stderr)
        return json.loads(r.stdout)

    def admin_get(self, path: str, timeout: float = 10) -> str:
        """`GET path` of the admin API as text (curl over the Unix socket, or in the balancer
        namespace; no token)."""
        if self.admin.startswith("unix:"):
            argv = ["curl", "-sS", "--fail", "-m", str(timeout), "--unix-socket", self.admin[5:],
                    f"http://localhost{path}"]
        else:
            argv = self.topo.lb.cmd(["curl", "-sS", "--fail", "-m", str(timeout), f"http://{self.admin}{path}"])
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout + 5)
        if r.returncode != 0:
            raise RuntimeError(f"GET {path} failed ({r.returncode}): {r.stderr.strip()}")
        return r.stdout

    def metrics_text(self, timeout: float = 10) -> str:
        """`GET /metrics` as text (curl over the Unix socket, or in the balancer namespace)."""
        return self.admin_get("/metrics", timeout)

    def metrics(self) -> Metrics:
        """`GET /metrics`, parsed with `prometheus_client.parser` (raises on bad syntax)."""
        return Metrics(self.metrics_text())

    def backends(self, service: str | None = None) -> dict[str, dict]:
        """`spillwayctl backends --json`, keyed by `service/address` (`/address:port` with a port)."""
        reply = self.ctl("backends", *(["--service", service] if service else []))
        return {f"{b['service']}/{b['address']}" + (f":{b['port']}" if b["port"] else ""): b
                for b in reply["backends"]}

    def wait_health(self, want: dict[str, bool], timeout: float = 20, poll: float = 0.05) -> float:
        """Wait until each `service/address` in `want` has that effective health (API); returns
        the seconds it took. Raises TimeoutError with the last state."""
        t0 = time.monotonic()
        while True:
            got = self.backends()
            if all(k in got and got[k]["healthy"] == v for k, v in want.items()):
                return time.monotonic() - t0
            if self.proc.poll() is not None:
                raise RuntimeError(f"spillway exited {self.proc.returncode}:\n{self.output()}")
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"health not {want} after {timeout}s: "
                                   f"{ {k: (b['healthy'], b['probe'], b['last_result']) for k, b in got.items()} }")
            time.sleep(poll)

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
        self._remove_runtime_dir()
        final = parse_final(self.output())
        self.final = final
        return final

    def _remove_runtime_dir(self) -> None:
        """EAL leaves its runtime directory (/var/run/dpdk/<file-prefix>) behind: remove it."""
        args = self.config["dataplane"].get("eal_args", [])
        if "--file-prefix" in args[:-1]:
            prefix = args[args.index("--file-prefix") + 1]
            if prefix and "/" not in prefix and not prefix.startswith("."):
                shutil.rmtree(Path("/var/run/dpdk") / prefix, ignore_errors=True)

    def __enter__(self) -> "Spillway":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
