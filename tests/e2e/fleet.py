"""A fleet of Spillway instances behind an ECMP router that learns the VIPs over BGP (BIRD 2).

Layout (:class:`Fleet`, defaults)::

  <p>-c1 198.19.0.1/24 ─┐  brc   ┌───────── <p>-r (router) ─────────┐   br0 (the fabric)  ┌─ <p>-b1 198.18.1.1/16
  <p>-c2 198.19.0.2/24 ─┴────────┤ 198.19.0.254/24 on brc            ├─────────────────────┼─ <p>-b2 198.18.1.2/16
     default via .254            │ 198.18.0.254/16 on br0            │                     ├─ <p>-b3 198.18.2.1/16
                                 │ ip_forward, rp_filter 0,          │                     └─ <p>-b4 198.18.2.2/16
                                 │ fib_multipath_hash_policy=1 (L4)  │                        default via 198.18.0.254
                                 │ BIRD AS 65000: eBGP to each       │                        VIPs on lo, decap.py,
                                 │ instance, ECMP into the FIB       │                        backend_server.py
                                 └───────────────┬───────────────────┘
                         br0 ─┬──────────────────┴──┬─ ...
                   <p>-i1 eth0 ─ brd          <p>-i2 eth0 ─ brd          (instance namespaces)

* Router namespace ``<p>-r``: bridges ``br0`` (fabric, 198.18.0.254/16) and ``brc`` (clients,
  198.19.0.254/24); forwards (``ip_forward=1``, rp_filter 0) and hashes multipath routes on
  the L4 4-tuple (``fib_multipath_hash_policy=1``). Its BIRD (AS 65000, router id
  198.18.0.254) has one eBGP session ``i<k>`` per instance (neighbor 198.18.0.(10+k), AS
  65001, ``import all; export none``) and a kernel protocol with ``merge paths on``: the main
  FIB holds ONE multipath route per VIP with one next hop per instance that announces it
  (:meth:`Fleet.router_nexthops`).
* Instance namespaces ``<p>-i<k>``: a veth ``eth0`` (peer ``<p>-i<k>`` in br0) enslaved to a
  bridge ``brd``, no addresses, IPv6 off on both. Spillway's DPDK ``net_tap`` data port
  (``dtap0``) is enslaved to ``brd`` by :meth:`Fleet.attach_data_port`. Spillway creates its
  kernel interface ``spl0`` itself (the exception path) with the node address
  198.18.0.(10+k)/16 and default gateway 198.18.0.254, and installs each VIP it serves as
  ``<vip>/32 dev spl0 proto 252 table 100``. The instance's BIRD (AS 65001, router id = node
  address) learns those routes (kernel protocol on table 100 with ``learn``) and announces
  them to the router (eBGP, ``uplink``), next hop = the node address.
* Clients ``<p>-c<n>`` 198.19.0.n/24 (default via 198.19.0.254) on ``brc``; backends as in
  :mod:`topo` (198.18.z.i/16, zone a: b1 b2, zone b: b3 b4) on ``br0`` with default route via
  198.18.0.254 (their direct replies go through the router), the VIPs (198.19.200.1 "web",
  198.19.200.2 "other") on ``lo``, decap.py and backend_server.py (HTTP :80, UDP :5353, TCP
  line echo :7000 for long-lived connections, :class:`LongLived`).

BGP timers: hold 3 s, keepalive 1 s, connect delay / retry 1 s, error wait 1-3 s; with
``Fleet(bfd=True)`` both sides also run BFD (100 ms, multiplier 3) and tie the sessions to it.

:meth:`Fleet.spillway` runs the real daemon in an instance namespace (:class:`FleetSpillway`,
configured by :func:`spillway_config`: services ``web`` and ``other``, the kernel interface
``spl0``, VIPs announced into table 100 for the instance's BIRD, the admin API on
``<state>/i<k>.admin.sock``): it starts it, waits for ``spillway: running``, enslaves the data
port to ``brd``, gives the kernel a default route via the router over ``spl0``, and offers
``api``/``instance``/``ctl``/``metrics``, ``stop`` (SIGTERM, exit code, ``final`` counters),
``kill`` (SIGKILL) and ``reload``. :meth:`Fleet.standin_instance` builds a control-plane
stand-in instead (:class:`StandIn`: a veth ``spl0`` into ``brd`` with the node address, and the
table-100 routes), so that BGP and the router's ECMP FIB can be tested without Spillway. It
forwards no VIP traffic.

Everything (namespaces, BIRD and other processes, the state dir ``/tmp/spillway-e2e/<p>/``
with BIRD configs, sockets and logs) goes on :meth:`Fleet.close` like a :class:`topo.Topology`.
Requires root, iproute2, /dev/net/tun and BIRD 2 (``bird``, ``birdc``; Debian ``bird2``);
:class:`FleetSpillway` the built daemon and ``spillwayctl`` (``SPILLWAY_BIN``,
``SPILLWAYCTL_BIN``). Standard library only (but :meth:`FleetSpillway.metrics`, which parses with
``balancer.Metrics``: prometheus_client).
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import ipaddress
import json
import os
import re
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterable, Sequence

import topo as T
from topo import Backend, Client, Lab, Namespace, TopologyError, _sh, wait_until

# ---- addressing --------------------------------------------------------------------------------
ROUTER_FABRIC_V4 = "198.18.0.254"  # on br0, the instances' BGP neighbor and everyone's gateway
ROUTER_CLIENT_V4 = "198.19.0.254"  # on brc, the clients' gateway
FABRIC_PLEN = 16
CLIENT_NET4 = "198.19.0.0/24"
CLIENT_PLEN = 24
VIP_WEB = "198.19.200.1"  # service "web": TCP 80 (HTTP) and 7000 (long-lived echo)
VIP_OTHER = "198.19.200.2"  # service "other"
VIPS = (VIP_WEB, VIP_OTHER)
# With Fleet(ipv6=True): the same layout in IPv6 beside it (fd00::/8), and an IPv6 VIP for web.
ROUTER_FABRIC_V6 = "fd00:18::fe"
ROUTER_CLIENT_V6 = "fd00:19::fe"
PLEN6 = 64
VIP_WEB6 = "fd00:200::1"  # service "web6": web's backends by their IPv6 addresses (IP6IP6)
ECHO_PORT = T.ECHO_PORT
FABRIC_BRIDGE = T.BRIDGE  # "br0", in the router namespace
CLIENT_BRIDGE = "brc"  # in the router namespace
INSTANCE_BRIDGE = "brd"  # in each instance namespace
KERNEL_IF = "spl0"  # Spillway's kernel interface (exception path)
DATA_PORT = "dtap0"  # Spillway's DPDK net_tap data port
VIP_TABLE = 100  # Spillway installs <vip>/32 dev spl0 proto 252 table 100
VIP_PROTO = 252
ROUTER_AS = 65000
INSTANCE_AS = 65001

BIRD = shutil.which("bird") or ("/usr/sbin/bird" if os.path.exists("/usr/sbin/bird") else None)
BIRDC = shutil.which("birdc") or ("/usr/sbin/birdc" if os.path.exists("/usr/sbin/birdc") else None)


def node_address(k: int) -> str:
    """Instance ``k``'s node address (1-based): 198.18.0.(10+k)."""
    if not 1 <= k <= 200:
        raise ValueError(f"instance number out of range: {k}")
    return f"198.18.0.{10 + k}"


def node_address6(k: int) -> str:
    """Instance ``k``'s IPv6 node address (with ``Fleet(ipv6=True)``): fd00:18::(10+k)."""
    node_address(k)
    return f"fd00:18::{10 + k}"


def needs_bird():
    """Mark for a module or test that runs BIRD. Without ``bird``/``birdc`` the test is skipped
    with the reason -- outside CI; in CI (``CI`` set, or root) the skip is a failure
    (``strict_skips.py``)."""
    import pytest

    return pytest.mark.skipif(
        BIRD is None or BIRDC is None,
        reason="bird2 not installed: needs bird and birdc (Debian package bird2: scripts/install-deps.sh installs it)")


class BirdError(TopologyError):
    pass


# ---- BIRD configurations -------------------------------------------------------------------------
def _timers(hold: int, keepalive: int) -> str:
    return (f"hold time {hold}; keepalive time {keepalive}; "
            "connect delay time 1; connect retry time 1; error wait time 1,3; error forget time 10;")


def _bfd_protocol(interval_ms: int, multiplier: int) -> str:
    return (f"protocol bfd {{\n"
            f"  interface \"*\" {{ interval {interval_ms} ms; multiplier {multiplier}; }};\n"
            f"}}\n")


_COMMON = """\
log stderr all;
timeformat log iso long ms;
timeformat protocol iso long ms;
debug protocols { states, events };
"""


def router_bird_config(nodes: Sequence[str], bfd: bool = False, hold: int = 3, keepalive: int = 1,
                       bfd_interval_ms: int = 100, bfd_multiplier: int = 3, nodes6: Sequence[str] = ()) -> str:
    """The router's BIRD config: eBGP session ``i<k>`` to each of ``nodes`` (k = position + 1),
    everything learned goes into the kernel FIB, equal paths merged into one multipath route.
    With ``nodes6`` also an IPv6 session ``i<k>v6`` to each, into the IPv6 FIB the same way."""
    out = [_COMMON, f"router id {ROUTER_FABRIC_V4};\n\n",
           "protocol device { scan time 10; }\n\n",
           "# One ECMP route per VIP in the main table: one next hop per instance announcing it.\n"
           "protocol kernel {\n  scan time 10;\n  merge paths on;\n  ipv4 { import none; export all; };\n}\n\n"]
    if bfd:
        out.append(_bfd_protocol(bfd_interval_ms, bfd_multiplier) + "\n")
    out.append("template bgp spillway {\n"
               f"  local {ROUTER_FABRIC_V4} as {ROUTER_AS};\n"
               f"  {_timers(hold, keepalive)}\n"
               "  graceful restart off;  # a dead instance's routes must go at once, not be kept as stale\n"
               "  long lived graceful restart off;\n"
               f"  bfd {'on' if bfd else 'off'};\n"
               "  ipv4 { import all; export none; };\n"
               "}\n\n")
    for k, node in enumerate(nodes, 1):
        out.append(f"protocol bgp i{k} from spillway {{ neighbor {node} as {INSTANCE_AS}; }}\n")
    if nodes6:
        out.append("\nprotocol kernel kernel6 {\n  scan time 10;\n  merge paths on;\n"
                   "  ipv6 { import none; export all; };\n}\n\n"
                   "template bgp spillway6 {\n"
                   f"  local {ROUTER_FABRIC_V6} as {ROUTER_AS};\n"
                   f"  {_timers(hold, keepalive)}\n"
                   "  graceful restart off;\n"
                   "  long lived graceful restart off;\n"
                   f"  bfd {'on' if bfd else 'off'};\n"
                   "  ipv6 { import all; export none; };\n"
                   "}\n\n")
        for k, node in enumerate(nodes6, 1):
            out.append(f"protocol bgp i{k}v6 from spillway6 {{ neighbor {node} as {INSTANCE_AS}; }}\n")
    return "".join(out)


def instance_bird_config(node: str, bfd: bool = False, hold: int = 3, keepalive: int = 1,
                         bfd_interval_ms: int = 100, bfd_multiplier: int = 3, table: int = VIP_TABLE,
                         ipv6: bool = False) -> str:
    """An instance's BIRD config: learn the VIP routes Spillway installs in kernel table
    ``table`` (any protocol number but BIRD's own, e.g. 252) and announce exactly those to the
    router (eBGP ``uplink``), next hop = the node address. With ``ipv6`` the IPv6 VIP routes
    the same way (``vips6``, ``uplink6`` to the router's IPv6 address)."""
    out = [_COMMON, f"router id {node};\n\n",
           "protocol device { scan time 10; }\n\n",
           "# The VIPs Spillway serves: <vip>/32 dev spl0 proto 252 table 100. `learn` imports the\n"
           "# routes of other protocols (not BIRD's own, nor proto kernel without `learn all`);\n"
           "# netlink notifications bring changes at once, the 1 s scan is a safety net.\n"
           "protocol kernel vips {\n"
           f"  kernel table {table};\n"
           "  learn;\n"
           "  scan time 1;\n"
           "  ipv4 { import all; export none; };\n"
           "}\n\n"]
    if bfd:
        out.append(_bfd_protocol(bfd_interval_ms, bfd_multiplier) + "\n")
    out.append("protocol bgp uplink {\n"
               f"  local as {INSTANCE_AS};\n"
               f"  neighbor {ROUTER_FABRIC_V4} as {ROUTER_AS};\n"
               f"  {_timers(hold, keepalive)}\n"
               "  graceful restart off;\n"
               "  long lived graceful restart off;\n"
               f"  bfd {'on' if bfd else 'off'};\n"
               "  ipv4 {\n"
               "    import none;\n"
               "    export where source = RTS_INHERIT;  # only the routes learned from the kernel\n"
               "    next hop self;\n"
               "  };\n"
               "}\n")
    if ipv6:
        out.append("\nprotocol kernel vips6 {\n"
                   f"  kernel table {table};\n"
                   "  learn;\n"
                   "  scan time 1;\n"
                   "  ipv6 { import all; export none; };\n"
                   "}\n\n"
                   "protocol bgp uplink6 {\n"
                   f"  local as {INSTANCE_AS};\n"
                   f"  neighbor {ROUTER_FABRIC_V6} as {ROUTER_AS};\n"
                   f"  {_timers(hold, keepalive)}\n"
                   "  graceful restart off;\n"
                   "  long lived graceful restart off;\n"
                   f"  bfd {'on' if bfd else 'off'};\n"
                   "  ipv6 {\n"
                   "    import none;\n"
                   "    export where source = RTS_INHERIT;\n"
                   "    next hop self;\n"
                   "  };\n"
                   "}\n")
    return "".join(out)


# ---- one BIRD process -----------------------------------------------------------------------------
class Bird:
    """One BIRD daemon in a namespace, with its own config, control socket, pid file and log
    (``<name>.bird.conf/.ctl/.pid/.log`` in the lab's state dir), started in the foreground
    (``bird -f``) through :meth:`Namespace.popen`, so the lab tracks and kills it."""

    def __init__(self, ns: Namespace, lab: Lab, name: str):
        self.ns, self.name = ns, name
        self._lab = lab
        d = lab.state_dir
        self.conf = d / f"{name}.bird.conf"
        self.sock = d / f"{name}.bird.ctl"
        self.pidfile = d / f"{name}.bird.pid"
        self.log = d / f"{name}.bird.log"
        self.proc: subprocess.Popen | None = None

    def __repr__(self) -> str:
        return f"<Bird {self.name} in {self.ns.name} {'running' if self.running else 'stopped'}>"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def write_config(self, text: str) -> None:
        """Write the config and check it parses (``bird -p``); :class:`BirdError` otherwise."""
        self.conf.write_text(text)
        self.check()

    def check(self) -> None:
        r = _sh([BIRD or "bird", "-p", "-c", self.conf], check=False)
        if r.returncode != 0:
            raise BirdError(f"BIRD config {self.conf} does not parse: {(r.stderr or r.stdout).strip()}\n"
                            f"--- {self.conf.name} ---\n{self.conf.read_text()}")

    def start(self, timeout: float = 10.0) -> None:
        """Start ``bird -f -c conf -s sock -P pid`` in the namespace; returns once it answers
        on its control socket."""
        if self.running:
            return
        if BIRD is None or BIRDC is None:
            raise BirdError("bird/birdc not installed (Debian package bird2)")
        self.check()
        with contextlib.suppress(FileNotFoundError):
            self.sock.unlink()
        self.proc = self.ns.popen([BIRD, "-f", "-c", self.conf, "-s", self.sock, "-P", self.pidfile],
                                  log=self.log.name)

        def up():
            if self.proc.poll() is not None:
                raise BirdError(f"bird {self.name} exited with {self.proc.returncode}: {self.log_tail()}")
            return self.sock.exists() and "Daemon is up" in self.birdc("show status", check=False)

        wait_until(up, f"bird {self.name} to answer on {self.sock}", timeout=timeout)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop it: SIGTERM (BIRD closes its sessions with a Cease notification), or e.g.
        ``sig=signal.SIGKILL`` to make it vanish (the kernel closes its TCP sessions: the peer
        notices at once, no hold timer involved)."""
        if self.proc is None:
            return
        if sig != signal.SIGTERM and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5)
        self._lab.kill(self.proc)
        self.proc = None

    def birdc(self, cmd: str | Sequence[str], check: bool = True, timeout: float = 10.0) -> str:
        """Run a birdc command (``"show protocols all i1"``); its output without the banner."""
        argv = cmd.split() if isinstance(cmd, str) else list(cmd)
        r = _sh([BIRDC or "birdc", "-s", self.sock, *argv], check=False, timeout=timeout)
        out = "\n".join(line for line in r.stdout.splitlines() if not line.startswith("BIRD ") or " ready." not in line)
        if check and (r.returncode != 0 or "Unable to connect" in r.stdout + r.stderr):
            raise BirdError(f"birdc -s {self.sock} {' '.join(argv)} -> {r.returncode}: {(r.stderr or r.stdout).strip()}")
        return out

    def configure(self, text: str | None = None) -> str:
        """(Write ``text`` as the new config and) ``birdc configure``."""
        if text is not None:
            self.write_config(text)
        return self.birdc("configure")

    def protocols(self) -> dict[str, dict]:
        """``show protocols``: {name: {"proto", "table", "state", "since", "info"}}."""
        out = {}
        for line in self.birdc("show protocols").splitlines():
            f = line.split()
            if len(f) < 4 or f[0] == "Name":
                continue
            # since = date + time with timeformat protocol iso long ms
            out[f[0]] = {"proto": f[1], "table": f[2], "state": f[3], "since": " ".join(f[4:6]),
                         "info": " ".join(f[6:])}
        return out

    def bgp_state(self, proto: str) -> str | None:
        """The BGP state of session ``proto`` ("Established", "Active", "Connect", "Idle", ...),
        None when BIRD does not report one."""
        m = re.search(r"BGP state:\s+(\S+)", self.birdc(["show", "protocols", "all", proto], check=False))
        return m.group(1) if m else None

    def bfd_sessions(self) -> dict[str, str]:
        """``show bfd sessions``: {neighbor address: state ("Up", "Down", "Init")}."""
        out = {}
        for line in self.birdc("show bfd sessions", check=False).splitlines():
            f = line.split()
            if len(f) >= 3:
                with contextlib.suppress(ValueError):
                    ipaddress.ip_address(f[0])
                    out[f[0]] = f[2]
        return out

    def wait_established(self, protos: Iterable[str], timeout: float = 20.0) -> None:
        protos = list(protos)
        states: dict[str, str | None] = {}

        def ok():
            if self.proc is not None and self.proc.poll() is not None:
                raise BirdError(f"bird {self.name} exited with {self.proc.returncode}: {self.log_tail()}")
            states.update({p: self.bgp_state(p) for p in protos})
            return all(s == "Established" for s in states.values())

        wait_until(ok, lambda: f"BGP sessions {protos} of bird {self.name} to be Established; last: {states}",
                   timeout=timeout, poll=0.1)

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"


def birdc(ns: "Router | Instance", cmd: str | Sequence[str], check: bool = True) -> str:
    """``birdc`` against the BIRD of a router or instance namespace."""
    return ns.bird.birdc(cmd, check=check)


def bgp_state(ns: "Router | Instance", proto: str) -> str | None:
    """The BGP state ("Established", ...) of session ``proto`` of the BIRD in ``ns``."""
    return ns.bird.bgp_state(proto)


def wait_established(ns: "Router | Instance", protos: Iterable[str], timeout: float = 20.0) -> None:
    """Wait until every session in ``protos`` of the BIRD in ``ns`` is Established."""
    ns.bird.wait_established(protos, timeout=timeout)


# ---- namespaces -------------------------------------------------------------------------------------
def _parse_nexthops(routes: list[dict]) -> list[str]:
    hops = []
    for r in routes:
        if "nexthops" in r:
            hops += [h["gateway"] for h in r["nexthops"] if "gateway" in h]
        elif "gateway" in r:
            hops.append(r["gateway"])
    return sorted(hops, key=ipaddress.ip_address)


class Router(Namespace):
    """The router namespace: br0 (fabric), brc (clients), BIRD AS 65000."""

    fabric_ipv4 = ROUTER_FABRIC_V4
    client_ipv4 = ROUTER_CLIENT_V4

    def __init__(self, name: str, lab: "Fleet"):
        super().__init__(name, lab)
        self.bird = Bird(self, lab, "router")

    def routes(self, prefix: str, table: str | int = "main") -> list[dict]:
        """``ip -j route show table <table> <prefix>`` (exact prefix), parsed."""
        out = self.ip("-j", "route", "show", "table", str(table), prefix).stdout.strip()
        return json.loads(out) if out else []

    def nexthops(self, vip: str) -> list[str]:
        """The kernel FIB's next hops for ``vip``/32 (/128; sorted; [] without a route)."""
        if ":" in vip:
            out = self.ip("-6", "-j", "route", "show", "table", "main", f"{vip}/128").stdout.strip()
            return _parse_nexthops(json.loads(out) if out else [])
        return _parse_nexthops(self.routes(f"{vip}/32"))


class Instance(Namespace):
    """Instance namespace ``<p>-i<k>``: ``eth0`` (into the router's br0) in bridge ``brd``;
    :attr:`node` is the node address Spillway puts on ``spl0``; :attr:`bird` its BIRD."""

    def __init__(self, k: int, lab: "Fleet"):
        super().__init__(f"{lab.prefix}-i{k}", lab)
        self.k = k
        self.short = f"i{k}"
        self.node = node_address(k)
        self.node6 = node_address6(k)  # used with Fleet(ipv6=True)
        self.gateway = ROUTER_FABRIC_V4
        self.bridge = INSTANCE_BRIDGE
        self.kernel_if = KERNEL_IF
        self.bridge_port = f"{lab.prefix}-i{k}"  # veth peer in the router's br0
        self.router_proto = f"i{k}"  # the router's BGP session with this instance
        self.bird = Bird(self, lab, self.short)
        self.standin: StandIn | None = None

    def __repr__(self) -> str:
        return f"<Instance {self.short} {self.name} node={self.node}>"

    def attach_data_port(self, ifname: str = DATA_PORT, timeout: float = 30.0, mtu: int | None = None) -> None:
        """Wait until ``ifname`` (the DPDK net_tap port) appears here, give its kernel side a
        MAC of its own, IPv6 off, enslave it to ``brd``, bring it up. Raises TimeoutError."""
        self.enslave_when_present(ifname, self.bridge, timeout=timeout, mtu=mtu, disable_ipv6=True)

    def vip_routes(self, table: int = VIP_TABLE) -> list[dict]:
        """The routes in the VIP table (``ip -j route show table 100``)."""
        out = self.ip("-j", "route", "show", "table", str(table)).stdout.strip()
        return json.loads(out) if out else []

    def learned(self) -> str:
        """What BIRD learned from the kernel table (``show route protocol vips``)."""
        return self.bird.birdc("show route protocol vips")


class StandIn:
    """A control-plane stand-in for Spillway in an instance namespace (no data path).

    :meth:`up` creates a veth ``spl0`` (peer ``spl0-brd`` enslaved to ``brd``), puts the node
    address 198.18.0.(10+k)/16 on it, the default route via 198.18.0.254, and for each VIP
    ``<vip>/32 dev spl0 proto 252 table 100`` -- what Spillway does. :meth:`down` deletes
    ``spl0`` (the instance vanishes from the fabric: no BGP notification reaches the router,
    only the hold timer or BFD notice); :meth:`withdraw` / :meth:`announce` delete / add one
    table-100 route (a service going away / coming back on this instance)."""

    peer = "spl0-brd"

    def __init__(self, inst: Instance, vips: Sequence[str] = (VIP_WEB,)):
        self.inst = inst
        self.vips = list(vips)

    def __repr__(self) -> str:
        return f"<StandIn {self.inst.short} vips={self.vips}>"

    @property
    def is_up(self) -> bool:
        return self.inst.link_exists(KERNEL_IF)

    def up(self) -> "StandIn":
        i = self.inst
        if not i.link_exists(KERNEL_IF):
            i.ip("link", "add", "name", KERNEL_IF, "type", "veth", "peer", "name", self.peer)
            i.sysctl(**{f"net.ipv6.conf.{KERNEL_IF}.disable_ipv6": 1, f"net.ipv6.conf.{self.peer}.disable_ipv6": 1})
            i.ip("link", "set", "dev", self.peer, "master", i.bridge)
            i.ip("link", "set", "dev", self.peer, "up")
            i.ip("addr", "add", f"{i.node}/{FABRIC_PLEN}", "dev", KERNEL_IF)
            i.ip("link", "set", "dev", KERNEL_IF, "up")
            i.ip("route", "replace", "default", "via", i.gateway, "dev", KERNEL_IF)
        for v in self.vips:
            self._route("replace", v)
        return self

    def down(self) -> None:
        """Delete ``spl0`` (and its peer, addresses, routes): like a Spillway that died."""
        self.inst.ip("link", "del", "dev", KERNEL_IF, check=False)

    def link_down(self) -> None:
        """``ip link set spl0 down`` (the kernel drops its routes; the address stays)."""
        self.inst.ip("link", "set", "dev", KERNEL_IF, "down")

    def _route(self, op: str, vip: str) -> None:
        self.inst.ip("route", op, f"{vip}/32", "dev", KERNEL_IF, "proto", str(VIP_PROTO), "table", str(VIP_TABLE))

    def announce(self, vip: str = VIP_WEB) -> None:
        if vip not in self.vips:
            self.vips.append(vip)
        self._route("replace", vip)

    def withdraw(self, vip: str = VIP_WEB) -> None:
        if vip in self.vips:
            self.vips.remove(vip)
        self._route("del", vip)


# ---- the fleet ----------------------------------------------------------------------------------------
class Fleet(Lab):
    """Router + instances + clients + backends, BIRD on the router and in each instance.

    Parameters (defaults): ``instances=2`` (up to 3 or more: i1..iN), ``clients=2``,
    ``backends_per_zone=2`` (zones a, b: b1 b2 / b3 b4), ``vips4=(VIP_WEB, VIP_OTHER)`` (on
    every backend's ``lo``), ``bfd=False``, ``hold=3`` / ``keepalive=1`` (BGP, s),
    ``bfd_interval_ms=100`` / ``bfd_multiplier=3``, ``start_bird=True`` (router's and
    instances' BIRD started, without waiting for the sessions: :meth:`wait_established`),
    ``start_services=True`` (decap.py + backend_server.py on every backend),
    ``prefix=None`` (``sw`` + 4 hex digits), ``ipv6=False``: with it, IPv6 beside IPv4
    (clients fd00:19::n/64 via fd00:19::fe, backends fd00:18::z:i/64 via fd00:18::fe, the
    instances' node addresses fd00:18::(10+k) on ``spl0``, IPv6 BGP sessions ``i<k>v6`` /
    ``uplink6`` into an IPv6 ECMP FIB, and :data:`VIP_WEB6` on the backends).

    A failed build cleans up; :meth:`close` (context exit, atexit, SIGINT/SIGTERM) removes
    everything.
    """

    def __init__(self, instances: int = 2, clients: int = 2, backends_per_zone: int = 2,
                 vips4: Sequence[str] = VIPS, bfd: bool = False, hold: int = 3, keepalive: int = 1,
                 bfd_interval_ms: int = 100, bfd_multiplier: int = 3, start_bird: bool = True,
                 start_services: bool = True, mtu: int = T.DEFAULT_MTU, prefix: str | None = None,
                 ipv6: bool = False):
        if not 1 <= instances <= 200:
            raise TopologyError(f"instances out of range: {instances}")
        super().__init__(zones=("a", "b"), vips4=vips4, vips6=(VIP_WEB6,) if ipv6 else (), client_mtu=mtu,
                         fabric_mtu=mtu, prefix=prefix)
        self.ipv6 = ipv6
        self.bfd = bfd
        self.bird_opts = dict(bfd=bfd, hold=hold, keepalive=keepalive, bfd_interval_ms=bfd_interval_ms,
                              bfd_multiplier=bfd_multiplier)
        self.router = Router(f"{self.prefix}-r", self)
        self.instances: list[Instance] = [Instance(k, self) for k in range(1, instances + 1)]
        self._spillways: dict[int, FleetSpillway] = {}

        def build():
            self._build(clients, backends_per_zone)
            if start_bird:
                self.start_birds()

        self._start(build, start_services)

    def _hubs(self) -> list[Namespace]:
        return [self.router]

    @property
    def namespaces(self) -> list[Namespace]:
        return [self.router, *self.instances, *self.hosts]

    # -- construction ---------------------------------------------------------------
    def _build(self, n_clients: int, backends_per_zone: int) -> None:
        r = self.router
        self._add_ns(r)
        r.sysctl(**{"net.ipv4.ip_forward": 1, "net.ipv4.fib_multipath_hash_policy": 1})
        if self.ipv6:
            r.sysctl(**{"net.ipv6.conf.all.forwarding": 1, "net.ipv6.fib_multipath_hash_policy": 1})
        for br, addr, addr6 in ((FABRIC_BRIDGE, f"{ROUTER_FABRIC_V4}/{FABRIC_PLEN}", f"{ROUTER_FABRIC_V6}/{PLEN6}"),
                                (CLIENT_BRIDGE, f"{ROUTER_CLIENT_V4}/{CLIENT_PLEN}", f"{ROUTER_CLIENT_V6}/{PLEN6}")):
            r.ip("link", "add", "name", br, "type", "bridge", "stp_state", "0", "mcast_snooping", "0")
            r.ip("link", "set", "dev", br, "mtu", str(self.fabric_mtu))
            r.ip("addr", "add", addr, "dev", br)
            if self.ipv6:
                r.ip("addr", "add", addr6, "dev", br, "nodad")
            r.ip("link", "set", "dev", br, "up")
        self._bridge_nf_off(r)

        for n in range(1, n_clients + 1):
            zone = self.zones[(n - 1) % len(self.zones)]
            c = Client(f"c{n}", self, "client", zone, n, f"198.19.0.{n}", f"fd00:19::{n}" if self.ipv6 else None)
            self._add_host(c, self.client_mtu, hub=r, bridge=CLIENT_BRIDGE, plen4=CLIENT_PLEN, plen6=PLEN6,
                           gateway4=ROUTER_CLIENT_V4, gateway6=ROUTER_CLIENT_V6 if self.ipv6 else None)
            self.clients.append(c)
        n = 0
        for zone in self.zones:
            for i in range(1, backends_per_zone + 1):
                n += 1
                b = Backend(f"b{n}", self, "backend", zone, i, f"198.18.{zone.index}.{i}",
                            f"fd00:18::{zone.index}:{i}" if self.ipv6 else None)
                self._add_host(b, self.fabric_mtu, hub=r, bridge=FABRIC_BRIDGE, plen4=FABRIC_PLEN, plen6=PLEN6,
                               gateway4=ROUTER_FABRIC_V4, gateway6=ROUTER_FABRIC_V6 if self.ipv6 else None)
                self._setup_backend(b)
                self.backends.append(b)
        for inst in self.instances:
            self._add_instance(inst)

    @staticmethod
    def _bridge_nf_off(ns: Namespace) -> None:
        # As in topo.Topology: with br_netfilter loaded, bridged frames would meet iptables.
        for knob in ("bridge-nf-call-iptables", "bridge-nf-call-ip6tables", "bridge-nf-call-arptables"):
            ns.run(["sh", "-c", f"f=/proc/sys/net/bridge/{knob}; [ ! -e $f ] || echo 0 > $f"], check=False)

    def _add_instance(self, inst: Instance) -> None:
        r, mtu = self.router, self.fabric_mtu
        if len(inst.bridge_port) > 15:
            raise TopologyError(f"interface name too long: {inst.bridge_port}")
        self._add_ns(inst)
        r.ip("link", "add", inst.bridge_port, "mtu", str(mtu), "type", "veth",
             "peer", "name", T.HOST_IF, "mtu", str(mtu), "netns", inst.name)
        r.ip("link", "set", inst.bridge_port, "master", FABRIC_BRIDGE)
        r.ip("link", "set", inst.bridge_port, "up")
        # "name"/"dev" spelled out: `ip link add brd ...` would read brd as "broadcast".
        inst.ip("link", "add", "name", INSTANCE_BRIDGE, "type", "bridge", "stp_state", "0", "mcast_snooping", "0")
        inst.ip("link", "set", "dev", INSTANCE_BRIDGE, "mtu", str(mtu))
        # The bridge stands for the wire the NIC is on: the namespace's kernel must not answer on
        # it (weak host model: it would answer ARP for the node address, held by spl0, with the
        # bridge's MAC, and a peer would then send the node's traffic to a MAC nobody serves).
        inst.sysctl(**{f"net.ipv6.conf.{INSTANCE_BRIDGE}.disable_ipv6": 1,
                       f"net.ipv6.conf.{T.HOST_IF}.disable_ipv6": 1,
                       f"net.ipv4.conf.{INSTANCE_BRIDGE}.arp_ignore": 8,
                       f"net.ipv4.conf.{T.HOST_IF}.arp_ignore": 8})
        inst.ip("link", "set", "dev", T.HOST_IF, "master", INSTANCE_BRIDGE)
        inst.ip("link", "set", "dev", T.HOST_IF, "up")
        inst.ip("link", "set", "dev", INSTANCE_BRIDGE, "up")
        self._bridge_nf_off(inst)

    # -- lookup ---------------------------------------------------------------------
    def instance(self, k: int | str) -> Instance:
        """Instance ``k`` (1-based), or by short name ``"i1"`` / namespace name / node address."""
        for inst in self.instances:
            if k in (inst.k, inst.short, inst.name, inst.node):
                return inst
        raise KeyError(k)

    # -- BIRD -------------------------------------------------------------------------
    def router_config(self) -> str:
        nodes6 = [i.node6 for i in self.instances] if self.ipv6 else []
        return router_bird_config([i.node for i in self.instances], nodes6=nodes6, **self.bird_opts)

    def instance_config(self, k: int | str) -> str:
        return instance_bird_config(self.instance(k).node, ipv6=self.ipv6, **self.bird_opts)

    def start_birds(self) -> None:
        """Write the configs (each checked with ``bird -p``) and start every BIRD."""
        self.start_router_bird()
        for inst in self.instances:
            self.start_instance_bird(inst.k)

    def start_router_bird(self) -> Bird:
        self.router.bird.write_config(self.router_config())
        self.router.bird.start()
        return self.router.bird

    def start_instance_bird(self, k: int | str) -> Bird:
        inst = self.instance(k)
        inst.bird.write_config(self.instance_config(inst.k))
        inst.bird.start()
        return inst.bird

    def birdc(self, who: int | str, cmd: str | Sequence[str], check: bool = True) -> str:
        """birdc on the router (``who="router"``) or instance ``who``."""
        return self._ns(who).bird.birdc(cmd, check=check)

    def _ns(self, who: int | str) -> Router | Instance:
        return self.router if who in ("router", "r", self.router.name) else self.instance(who)

    def bgp_state(self, k: int | str, side: str = "router") -> str | None:
        """State of the session between the router and instance ``k``, as the router
        (``side="router"``) or the instance (``side="instance"``) sees it."""
        inst = self.instance(k)
        if side == "router":
            return self.router.bird.bgp_state(inst.router_proto)
        return inst.bird.bgp_state("uplink")

    def wait_established(self, ks: Iterable[int | str] | None = None, timeout: float = 20.0) -> float:
        """Wait until the sessions with instances ``ks`` (default: all) are Established on
        both sides (and with ``bfd=True`` the router's BFD sessions Up); returns the seconds
        waited."""
        t0 = time.monotonic()
        insts = [self.instance(k) for k in ks] if ks is not None else list(self.instances)
        protos = [i.router_proto for i in insts] + ([f"{i.router_proto}v6" for i in insts] if self.ipv6 else [])
        self.router.bird.wait_established(protos, timeout=timeout)
        for i in insts:
            i.bird.wait_established(["uplink", *(["uplink6"] if self.ipv6 else [])],
                                    timeout=max(1.0, timeout - (time.monotonic() - t0)))
        if self.bfd:
            self.wait_bfd_up([i.k for i in insts], timeout=max(1.0, timeout - (time.monotonic() - t0)))
        return time.monotonic() - t0

    def wait_bfd_up(self, ks: Iterable[int | str] | None = None, timeout: float = 10.0) -> None:
        """With ``bfd=True``: wait until the router's BFD sessions with instances ``ks``
        (default: all) are Up (BGP may be Established before BFD is)."""
        insts = [self.instance(k) for k in ks] if ks is not None else list(self.instances)
        nodes = [i.node for i in insts] + ([i.node6 for i in insts] if self.ipv6 else [])
        seen: dict[str, str] = {}

        def up():
            seen.clear()
            seen.update(self.router.bird.bfd_sessions())
            return all(seen.get(n) == "Up" for n in nodes)

        wait_until(up, lambda: f"the router's BFD sessions with {nodes} to be Up; last: {seen}", timeout=timeout,
                   poll=0.05)

    # -- the router's FIB ------------------------------------------------------------
    def router_nexthops(self, vip: str) -> list[str]:
        """The router kernel FIB's next hops for ``vip``/32 (sorted node addresses)."""
        return self.router.nexthops(vip)

    def wait_nexthops(self, vip: str, want: Iterable[str], timeout: float = 10.0, since: float | None = None,
                      poll: float = 0.01) -> float:
        """Wait until the router's next hops for ``vip`` are exactly ``want`` (any order);
        returns the seconds from ``since`` (a ``time.monotonic()`` value, default: now)."""
        t0 = time.monotonic() if since is None else since
        want_l = sorted(want, key=ipaddress.ip_address)
        seen: list[list[str]] = [[]]

        def ok():
            seen[0] = self.router_nexthops(vip)
            return seen[0] == want_l

        wait_until(ok, lambda: f"router next hops for {vip} to be {want_l}; last: {seen[0]}", timeout=timeout,
                   poll=poll)
        return time.monotonic() - t0

    # -- instances ---------------------------------------------------------------------
    def attach_data_port(self, k: int | str, ifname: str = DATA_PORT, timeout: float = 30.0) -> None:
        """Wait for Spillway's DPDK tap in instance ``k``'s namespace, enslave it to brd."""
        self.instance(k).attach_data_port(ifname, timeout=timeout)

    def popen(self, k: int | str, argv: Sequence[str], log: str | None = None, **kw) -> subprocess.Popen:
        """Start a process in instance ``k``'s namespace (tracked, killed on close)."""
        return self.instance(k).popen(argv, log=log, **kw)

    def spillway(self, k: int | str, config: dict | None = None, start: bool = True,
                 timeout: float = 60.0) -> "FleetSpillway":
        """The real daemon in instance ``k`` (:class:`FleetSpillway`; the same object for the
        same ``k``), configured by ``config`` (default :func:`spillway_config`) and started
        unless ``start=False``."""
        inst = self.instance(k)
        sp = self._spillways.get(inst.k)
        if sp is None:
            sp = self._spillways[inst.k] = FleetSpillway(self, inst.k, config)
        elif config is not None:
            sp.config = config
        if start and not sp.running:
            sp.start(timeout=timeout)
        return sp

    def close(self) -> None:
        super().close()
        for sp in list(getattr(self, "_spillways", {}).values()):
            sp._remove_runtime_dir()  # EAL leaves /var/run/dpdk/<file-prefix> behind

    def standin_instance(self, k: int | str, vips: Sequence[str] = (VIP_WEB,)) -> StandIn:
        """Put a control-plane stand-in for Spillway into instance ``k`` (:class:`StandIn`), up."""
        inst = self.instance(k)
        if inst.standin is None:
            inst.standin = StandIn(inst, vips)
        return inst.standin.up()


# ---- the real daemon in an instance namespace ---------------------------------------------------
SPILLWAY_BIN = Path(os.environ.get("SPILLWAY_BIN", T.REPO / "target" / "debug" / "spillway"))
SPILLWAYCTL_BIN = Path(os.environ.get("SPILLWAYCTL_BIN", SPILLWAY_BIN.parent / "spillwayctl"))
HEALTH_PORT = T.HTTP_PORT  # service "web"'s check: TCP connect to :80 of b1..b4
OTHER_HEALTH_PORT = T.ECHO_PORT  # service "other"'s check: TCP connect to :7000 of b2 and b4
OTHER_BACKENDS = ("b2", "b4")


def data_mac(k: int) -> str:
    """Instance ``k``'s data port MAC: fixed, as a physical NIC's is across restarts (a tap
    port's would otherwise be new at every start, and its peers' kernels would keep sending to
    the old one until their neighbour entries expire)."""
    return f"02:5a:00:00:00:{k:02x}"


def sync_key(fleet: "Fleet") -> str:
    """The fleet's sync key file in the state directory (32 random bytes as hex, mode 0600),
    made on first use."""
    path = fleet.state_dir / "sync.key"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(os.urandom(32).hex() + "\n")
    return str(path)


def spillway_config(fleet: "Fleet", k: int, hash_seed: int = 1234, quiet_sec: float = 1.0,
                    stop_grace_sec: float = 10.0, check_interval: float = 0.5, healthy_threshold: int = 1,
                    unhealthy_threshold: int = 2,
                    sync: bool = False, extra_web: Sequence[str] = (), drop_web: Sequence[str] = (),
                    web_b_weight: int | None = None, draining_sec: int = 0) -> dict:
    """Instance ``k``'s configuration (JSON is YAML): one worker on a ``net_tap`` data port
    (``dtap0``), node address 198.18.0.(10+k)/16 with the router as gateway, the kernel
    interface ``spl0``, the admin API on ``<state>/i<k>.admin.sock``, VIPs announced into table
    100 (BIRD: the instance's control socket), and two services:

    * ``web`` 198.19.200.1, TCP (every port: HTTP :80 and the echo :7000): group ``web-a``
      (b1 b2, zone a) and ``web-b`` (b3 b4, zone b), check ``h`` (TCP :80);
    * ``other`` 198.19.200.2, TCP: groups ``other-a`` (b2) and ``other-b`` (b4), check ``ho``
      (TCP :7000), so that blocking :7000 on b2 and b4 empties ``other`` and leaves ``web``
      alone.

    Checks every ``check_interval`` s (timeout the same), healthy after ``healthy_threshold``
    successes, unhealthy after ``unhealthy_threshold`` failures (2). ``extra_web`` adds backends (by short name) to
    ``web-b``, ``drop_web`` removes them from ``web``, ``web_b_weight`` sets ``web-b``'s weight,
    ``draining_sec`` web's connection draining (all of them web6's too, with
    ``Fleet(ipv6=True)``: the service ``web6`` on :data:`VIP_WEB6` over the same backends'
    IPv6 addresses, node address fd00:18::(10+k)); ``sync`` shares connection state with every other instance (``fleet.sync``: ids
    are the instances' numbers, the key :func:`sync_key`)."""
    inst = fleet.instance(k)
    sd = fleet.state_dir
    ips = {b.short: b.ipv4 for b in fleet.backends}

    def check(port: int) -> dict:
        return {"type": "TCP", "port": port, "check_interval_sec": check_interval, "timeout_sec": check_interval,
                "healthy_threshold": healthy_threshold, "unhealthy_threshold": unhealthy_threshold}

    cfg = {
        "dataplane": {
            "eal_args": ["--no-pci", "-l", "0-1", "--file-prefix", f"{fleet.prefix}-{inst.short}",
                         "--log-level", "lib.eal:error", "--vdev", f"net_tap0,iface={DATA_PORT},mac={data_mac(k)}"],
            "hugepages": "preferred",
            "ports": ["net_tap0"],
            "workers": 1,
            "conntrack_capacity": 65536,
            "idle_sleep_us": T.WORKER_IDLE_SLEEP_US,
            "hash_seed": hash_seed,
            "node": {"ipv4": f"{inst.node}/{FABRIC_PLEN}", "gateway_ipv4": ROUTER_FABRIC_V4},
            "kernel_interface": {"name": KERNEL_IF},
        },
        "admin": {"listen": f"unix:{sd}/{inst.short}.admin.sock"},
        "announce": {"table": VIP_TABLE, "bird_socket": str(inst.bird.sock), "stop_grace_sec": stop_grace_sec,
                     "quiet_sec": quiet_sec},
        "topology": {"region": "r", "zones": [{"name": "a", "region": "r"}, {"name": "b", "region": "r"}]},
        "health_checks": {"h": check(HEALTH_PORT), "ho": check(OTHER_HEALTH_PORT)},
        "services": [
            {"name": "web", "forwarding_rules": [{"vip": VIP_WEB, "protocol": "TCP"}], "announce": "when_healthy",
             "backend_service": {"backends": [
                 {"group": "web-a", "zone": "a", "health_check": "h", "endpoints": [ips["b1"], ips["b2"]]},
                 {"group": "web-b", "zone": "b", "health_check": "h",
                  "endpoints": [ips["b3"], ips["b4"], *(ips[b] for b in extra_web)]}]}},
            {"name": "other", "forwarding_rules": [{"vip": VIP_OTHER, "protocol": "TCP"}], "announce": "when_healthy",
             "backend_service": {"backends": [
                 {"group": "other-a", "zone": "a", "health_check": "ho", "endpoints": [ips["b2"]]},
                 {"group": "other-b", "zone": "b", "health_check": "ho", "endpoints": [ips["b4"]]}]}},
        ],
    }
    if fleet.ipv6:
        # web6: web's groups by the backends' IPv6 addresses, behind an IPv6 VIP (IP6IP6).
        cfg["dataplane"]["node"].update(ipv6=f"{inst.node6}/{PLEN6}", gateway_ipv6=ROUTER_FABRIC_V6)
        ips6 = {b.short: b.ipv6 for b in fleet.backends}
        web6 = json.loads(json.dumps(cfg["services"][0]))
        web6.update(name="web6", forwarding_rules=[{"vip": VIP_WEB6, "protocol": "TCP"}])
        for g in web6["backend_service"]["backends"]:
            g["group"] = g["group"].replace("web", "web6")
            g["endpoints"] = [ips6[b.short] for b in fleet.backends if b.ipv4 in g["endpoints"]]
        cfg["services"].append(web6)
    drop = {ips[b] for b in drop_web} | ({fleet.backend(b).ipv6 for b in drop_web} if fleet.ipv6 else set())
    for web in (s["backend_service"] for s in cfg["services"] if s["name"] in ("web", "web6")):
        for g in web["backends"]:
            g["endpoints"] = [e for e in g["endpoints"] if e not in drop]
            if g["group"] in ("web-b", "web6-b") and web_b_weight is not None:
                g["weight"] = web_b_weight
        if draining_sec:
            web["connection_draining"] = {"draining_timeout_sec": draining_sec}
    if sync:
        cfg["fleet"] = {"sync": {
            "instance_id": inst.k, "key_file": sync_key(fleet), "bulk_timeout_sec": 5,
            "epoch_file": str(sd / f"{inst.short}.sync-epoch"),
            "peers": [{"id": o.k, "address": o.node} for o in fleet.instances if o.k != inst.k]}}
    return cfg


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float = 10.0):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


class SpillwayError(TopologyError):
    pass


class FleetSpillway:
    """The real ``spillway`` daemon in instance ``k``'s namespace (:meth:`Fleet.spillway`).

    :meth:`start` writes the configuration (``<state>/i<k>.spillway.yaml``), starts the daemon
    in the namespace (output appended to ``i<k>.spillway.log``), waits for ``spillway:
    running``, enslaves the data port to ``brd`` and gives the kernel a default route via the
    router over ``spl0`` (Spillway gives it none). :meth:`stop` (SIGTERM: exit code and the
    ``final ...`` counters), :meth:`kill` (SIGKILL), :meth:`reload` (new config + ``POST
    /v1/reload``); :meth:`api`, :meth:`ctl`, :meth:`metrics` talk to its admin socket."""

    def __init__(self, fleet: "Fleet", k: int, config: dict | None = None):
        self.fleet = fleet
        self.inst = fleet.instance(k)
        self.k = self.inst.k
        self.config = config or spillway_config(fleet, self.k)
        self.path = fleet.state_dir / f"{self.inst.short}.spillway.yaml"
        self.log = fleet.state_dir / f"{self.inst.short}.spillway.log"
        self.proc: subprocess.Popen | None = None
        self.returncode: int | None = None
        self.final: dict[str, int] = {}
        self._mark = 0
        self.started_at: float | None = None  # time.monotonic() of the last start
        self.running_at: float | None = None  # ... when it printed "spillway: running"
        self.env: dict[str, str] = {}  # more environment for the next starts

    def __repr__(self) -> str:
        return f"<FleetSpillway {self.inst.short} {'running' if self.running else 'stopped'}>"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def admin(self) -> str:
        return self.config["admin"]["listen"]

    @property
    def admin_path(self) -> str:
        return self.admin.removeprefix("unix:")

    def write(self, config: dict | None = None) -> None:
        if config is not None:
            self.config = config
        self.path.write_text(json.dumps(self.config, indent=1))

    # -- life ----------------------------------------------------------------------
    def start(self, timeout: float = 60.0, attach: bool = True) -> "FleetSpillway":
        if self.running:
            raise SpillwayError(f"spillway in {self.inst.short} is running already")
        self.write()
        self._remove_runtime_dir()
        self._mark = self.log.stat().st_size if self.log.exists() else 0
        self.started_at = time.monotonic()
        self.proc = self.inst.popen([SPILLWAY_BIN, "--config", self.path, "--stats-interval", "0"],
                                    log=self.log.name, env={**os.environ, "RUST_LOG": "info", **self.env})
        self.returncode = None

        def running():
            if self.proc.poll() is not None:
                raise SpillwayError(f"spillway in {self.inst.short} exited with {self.proc.returncode}:\n"
                                    f"{self.output()[-3000:]}")
            return "spillway: running" in self.output()

        wait_until(running, lambda: f"spillway in {self.inst.short} to print 'spillway: running':\n"
                                    f"{self.output()[-2000:]}", timeout=timeout)
        self.running_at = time.monotonic()
        if attach:
            self.attach()
        return self

    def attach(self) -> None:
        """Enslave the data port to ``brd`` (only once the port runs: the driver sets the
        kernel side's MAC until then) and give the kernel its default route over ``spl0``."""
        self.inst.attach_data_port(timeout=10)
        self._default_route()

    def _default_route(self, timeout: float = 10.0) -> None:
        i = self.inst

        def addressed():
            out = i.ip("-j", "addr", "show", "dev", KERNEL_IF, check=False).stdout.strip()
            info = json.loads(out) if out else []
            return info and any(a.get("local") == i.node for a in info[0].get("addr_info", []))

        wait_until(addressed, f"{KERNEL_IF} in {i.short} to carry {i.node}", timeout=timeout)
        i.ip("route", "replace", "default", "via", ROUTER_FABRIC_V4, "dev", KERNEL_IF)
        if self.fleet.ipv6:
            def addressed6():
                out = i.ip("-6", "-j", "addr", "show", "dev", KERNEL_IF, check=False).stdout.strip()
                info = json.loads(out) if out else []
                return info and any(a.get("local") == i.node6 for a in info[0].get("addr_info", []))

            wait_until(addressed6, f"{KERNEL_IF} in {i.short} to carry {i.node6}", timeout=timeout)
            i.ip("-6", "route", "replace", "default", "via", ROUTER_FABRIC_V6, "dev", KERNEL_IF)

    def stop(self, timeout: float = 30.0) -> dict[str, int]:
        """SIGTERM, wait (``timeout``; SIGKILL after it), parse the ``final ...`` lines of this
        run; :attr:`returncode` is the exit code."""
        if self.proc is None:
            return self.final
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.fleet.kill(self.proc)
                raise SpillwayError(f"spillway in {self.inst.short} did not stop within {timeout} s "
                                    f"of SIGTERM:\n{self.output()[-3000:]}")
        self.returncode = self.proc.returncode
        self._forget()
        from balancer import parse_final

        self.final = final = parse_final(self.output())
        return final

    def kill(self) -> None:
        """SIGKILL (no withdrawal, no goodbye: the routers notice by BFD or the hold timer)."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        self.returncode = self.proc.returncode
        self.fleet.kill(self.proc)
        self._forget()

    def _forget(self) -> None:
        with contextlib.suppress(ValueError):
            self.fleet._procs.remove(self.proc)
        self.proc = None
        self._remove_runtime_dir()

    def _remove_runtime_dir(self) -> None:
        args = self.config["dataplane"]["eal_args"]
        prefix = args[args.index("--file-prefix") + 1]
        shutil.rmtree(Path("/var/run/dpdk") / prefix, ignore_errors=True)

    def wait_gone(self, timeout: float = 10.0) -> None:
        """Wait until the kernel interface and the data port are gone (after a stop or kill),
        so that a new daemon can create them again."""
        wait_until(lambda: not self.inst.link_exists(KERNEL_IF) and not self.inst.link_exists(DATA_PORT),
                   f"{KERNEL_IF} and {DATA_PORT} to vanish from {self.inst.short}", timeout=timeout)

    def output(self) -> str:
        """What the daemon printed since the last :meth:`start`."""
        try:
            with open(self.log, "rb") as fh:
                fh.seek(self._mark)
                return fh.read().decode(errors="replace")
        except OSError:
            return ""

    def reload(self, config: dict) -> dict:
        """Write ``config`` and ``POST /v1/reload``; the reply."""
        self.write(config)
        return self.api("/v1/reload", "POST")

    # -- admin --------------------------------------------------------------------------
    def api(self, path: str, method: str = "GET", timeout: float = 10.0) -> dict:
        """One admin API request over the Unix socket; the JSON reply (SpillwayError unless 200)."""
        c = _UnixHTTP(self.admin_path, timeout=timeout)
        try:
            c.request(method, path)
            r = c.getresponse()
            body = r.read()
        finally:
            c.close()
        if r.status != 200:
            raise SpillwayError(f"{method} {path} on {self.inst.short} -> {r.status}: {body[:500]!r}")
        return json.loads(body)

    def instance(self) -> dict:
        """``GET /v1/instance``."""
        return self.api("/v1/instance")

    def ctl_run(self, *args, timeout: float = 30.0) -> subprocess.CompletedProcess:
        """``spillwayctl --admin unix:... args...`` (from the host: the socket is a file)."""
        return subprocess.run([str(SPILLWAYCTL_BIN), "--admin", self.admin, *map(str, args)],
                              capture_output=True, text=True, timeout=timeout)

    def ctl(self, *args, timeout: float = 30.0) -> dict:
        """``spillwayctl --json args...``: the JSON reply; SpillwayError on a non-zero exit."""
        r = self.ctl_run("--json", *args, timeout=timeout)
        if r.returncode != 0:
            raise SpillwayError(f"spillwayctl {' '.join(map(str, args))} -> {r.returncode}: "
                                f"{r.stderr.strip() or r.stdout.strip()}")
        return json.loads(r.stdout)

    def metrics_text(self) -> str:
        c = _UnixHTTP(self.admin_path)
        try:
            c.request("GET", "/metrics")
            r = c.getresponse()
            body = r.read().decode()
        finally:
            c.close()
        if r.status != 200:
            raise SpillwayError(f"GET /metrics on {self.inst.short} -> {r.status}")
        return body

    def metrics(self):
        """``GET /metrics`` parsed (:class:`balancer.Metrics`)."""
        from balancer import Metrics

        return Metrics(self.metrics_text())

    def new_connections(self, service: str = "web") -> float:
        return self.metrics().value("spillway_service_new_connections_total", 0.0, service=service)

    def wait_phase(self, phase: str, timeout: float = 30.0) -> dict:
        """Wait until ``/v1/instance`` says ``phase``; the reply."""
        seen: dict = {}

        def ok():
            if self.proc is not None and self.proc.poll() is not None:
                raise SpillwayError(f"spillway in {self.inst.short} exited with {self.proc.returncode}:\n"
                                    f"{self.output()[-3000:]}")
            with contextlib.suppress(OSError):
                seen.clear()
                seen.update(self.instance())
            return dict(seen) if seen.get("phase") == phase else None

        return wait_until(ok, lambda: f"{self.inst.short} to be {phase}; last: {seen}", timeout=timeout, poll=0.05)

    def wait_announced(self, vips: Iterable[str], timeout: float = 30.0) -> dict:
        """Wait until ``/v1/instance`` ``announced`` is exactly ``vips``; the reply."""
        want = sorted(vips)
        seen: dict = {}

        def ok():
            seen.clear()
            seen.update(self.instance())
            return dict(seen) if sorted(seen.get("announced", [])) == want else None

        return wait_until(ok, lambda: f"{self.inst.short} to announce {want}; last: {seen}", timeout=timeout,
                          poll=0.05)

    def table_vips(self) -> list[str]:
        """The VIPs in the instance's table 100 (``ip route show table 100``), sorted."""
        return sorted(r["dst"].split("/")[0] for r in self.inst.vip_routes())


# ---- long-lived TCP connections --------------------------------------------------------------------
class _Conn:
    __slots__ = ("id", "sock", "state", "local", "connected_at", "sent", "answered", "backend", "backends",
                 "rx", "tx", "pending", "last_answer", "longest_gap", "error", "reset", "next_send", "seq")

    def __init__(self, cid: int, sock: socket.socket):
        self.id, self.sock = cid, sock
        self.state = "connecting"  # -> open -> reset | closed | error | failed (connect) | done
        self.local = None
        self.connected_at = None
        self.sent = self.answered = 0
        self.backend: str | None = None
        self.backends: list[str] = []  # every distinct backend name seen, in order
        self.rx = b""
        self.tx = b""
        self.pending: dict[int, float] = {}  # seq -> time sent
        self.last_answer: float | None = None
        self.longest_gap = 0.0
        self.error: str | None = None
        self.reset = False
        self.next_send = 0.0
        self.seq = 0


class LongLived:
    """``n`` long-lived TCP connections from a client namespace to ``vip:port`` (the backends'
    line echo, ``backend_server.py --echo-port``), driven by one thread with non-blocking
    sockets: each connection sends ``<conn> <seq>\\n`` every ``period`` seconds and reads
    ``<backend> <conn> <seq>`` back.

    Per connection it records the backend of every reply (it must never change), messages
    sent / answered, a reset (ECONNRESET / EPIPE: counted, never reopened) or other end (EOF,
    error), and the longest gap between consecutive answers -- counted from the first send,
    and up to the end for messages still unanswered then (a stall). A message unanswered for
    long is a stall, not lost; only what is still unanswered when :meth:`stop` ends (after
    ``drain`` seconds) counts as lost.

    ``start()`` returns once every connection is established (or failed, ``connect_timeout``);
    ``stop()`` returns the report (also :meth:`report` at any time; ``open`` counts the
    connections alive -- after ``stop()``, those that lived to the end)::

        {"connections", "established", "connect_failed", "open", "sent", "answered", "lost",
         "resets", "closed", "errors", "backends_changed", "backends": {name: connections},
         "longest_stall_s", "duration_s", "per_connection": [{"id", "local", "state",
         "backend", "backends", "sent", "answered", "lost", "reset", "error",
         "longest_stall_s"}, ...]}
    """

    def __init__(self, client_ns: Namespace, vip: str, port: int = ECHO_PORT, n: int = 60, period: float = 0.1,
                 connect_timeout: float = 5.0, ports: Sequence[int] | None = None):
        self.ns, self.vip, self.port, self.n, self.period = client_ns, vip, port, n, period
        self.connect_timeout = connect_timeout
        # Fixed client ports (connection i from ports[i]), or the kernel's choice.
        self.ports = list(ports) if ports is not None else None
        assert self.ports is None or len(self.ports) == n
        self.conns: list[_Conn] = []
        self._sel = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sending = True
        self._thread: threading.Thread | None = None
        self._t_start = self._t_end = None
        self._exc: BaseException | None = None

    # -- public -------------------------------------------------------------------------
    def _connect(self, i: int) -> _Conn:
        """Connection ``i``'s socket, connecting (from its fixed port, if any)."""
        fam = socket.AF_INET6 if ":" in self.vip else socket.AF_INET
        with self.ns.entered():  # the sockets live in the client namespace
            s = socket.socket(fam, socket.SOCK_STREAM)
        s.setblocking(False)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.ports is not None:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            src = self.ns.ipv6 if fam == socket.AF_INET6 else self.ns.ipv4
            s.bind((src, self.ports[i]))
        c = _Conn(i, s)
        rc = s.connect_ex((self.vip, self.port))
        if rc not in (0, errno.EINPROGRESS):
            c.state, c.error = "failed", f"connect: {os.strerror(rc)}"
            s.close()
        else:
            self._sel.register(s, selectors.EVENT_WRITE, c)
        return c

    def reset_and_reopen(self, timeout: float = 10.0) -> None:
        """Close every open connection with a RST (``SO_LINGER`` 0: no TIME_WAIT) and open it
        again from the same client port (``ports`` given): the same 5-tuples, new connections
        (SYNs). The report then describes the new connections only."""
        assert self.ports is not None, "reset_and_reopen needs fixed client ports"
        with self._lock:
            for i, c in enumerate(self.conns):
                with contextlib.suppress(Exception):
                    self._sel.unregister(c.sock)
                with contextlib.suppress(Exception):
                    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    c.sock.close()
            self.conns = [self._connect(i) for i in range(self.n)]
            self._t_start = time.monotonic()
        wait_until(lambda: all(c.state != "connecting" for c in self.conns),
                   lambda: f"{self.n} connections to {self.vip}:{self.port} to be established again",
                   timeout=timeout)

    def start(self) -> "LongLived":
        for i in range(self.n):
            self.conns.append(self._connect(i))
        self._t_start = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"longlived-{self.vip}")
        self._thread.start()
        try:
            wait_until(lambda: self._exc is not None or all(c.state != "connecting" for c in self.conns),
                       lambda: f"{self.n} connections to {self.vip}:{self.port} to be established",
                       timeout=self.connect_timeout + 2)
            if self._exc is not None:
                raise self._exc
        except BaseException:
            self.stop(drain=0)
            raise
        return self

    def stop(self, drain: float = 1.0) -> dict:
        """Stop sending, wait up to ``drain`` s for the outstanding answers, close every
        connection, return :meth:`report`."""
        if self._thread is None:
            return self.report()
        self._sending = False
        deadline = time.monotonic() + drain
        while time.monotonic() < deadline:
            with self._lock:
                if not any(c.pending for c in self.conns if c.state == "open"):
                    break
            time.sleep(0.02)
        self._t_end = time.monotonic()
        self._stop.set()
        self._thread.join(5)
        self._thread = None
        for c in self.conns:
            with contextlib.suppress(Exception):
                self._sel.unregister(c.sock)
            with contextlib.suppress(Exception):
                c.sock.close()
        self._sel.close()
        if self._exc is not None:
            raise self._exc
        return self.report()

    def __enter__(self) -> "LongLived":
        return self.start()

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self.stop(drain=0 if exc[0] else 1.0)

    def report(self) -> dict:
        now = self._t_end or time.monotonic()
        with self._lock:
            per = []
            for c in self.conns:
                gap = c.longest_gap
                if c.state == "open" and c.pending:  # stalled until now
                    ref = c.last_answer if c.last_answer is not None else min(c.pending.values())
                    gap = max(gap, now - ref)
                per.append({"id": c.id, "local": c.local, "state": c.state, "backend": c.backend,
                            "backends": list(c.backends), "sent": c.sent, "answered": c.answered,
                            "lost": c.sent - c.answered, "reset": c.reset, "error": c.error,
                            "longest_stall_s": round(gap, 4)})
        backends: dict[str, int] = {}
        for p in per:
            if p["backend"]:
                backends[p["backend"]] = backends.get(p["backend"], 0) + 1
        return {
            "connections": self.n,
            "established": sum(1 for p in per if p["local"] is not None),
            "connect_failed": sum(1 for p in per if p["state"] == "failed"),
            "open": sum(1 for p in per if p["state"] == "open"),
            "sent": sum(p["sent"] for p in per),
            "answered": sum(p["answered"] for p in per),
            "lost": sum(p["lost"] for p in per),
            "resets": sum(1 for p in per if p["reset"]),
            "closed": sum(1 for p in per if p["state"] == "closed"),
            "errors": sum(1 for p in per if p["state"] == "error"),
            "backends_changed": sum(1 for p in per if len(p["backends"]) > 1),
            "backends": backends,
            "longest_stall_s": max((p["longest_stall_s"] for p in per), default=0.0),
            "duration_s": round(now - self._t_start, 3) if self._t_start else 0.0,
            "per_connection": per,
        }

    # -- the thread ------------------------------------------------------------------------
    def _fail(self, c: _Conn, state: str, error: str, reset: bool = False) -> None:
        c.state, c.error, c.reset = state, error, reset
        with contextlib.suppress(Exception):
            self._sel.unregister(c.sock)
        with contextlib.suppress(Exception):
            c.sock.close()

    def _on_error(self, c: _Conn, e: OSError, what: str) -> None:
        if isinstance(e, (ConnectionResetError, BrokenPipeError)):
            self._fail(c, "reset", f"{what}: {e.strerror or e}", reset=True)
        else:
            self._fail(c, "error", f"{what}: {e.strerror or e}")

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as e:  # pragma: no cover - surfaced by start()/stop()
            self._exc = e

    def _loop(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            with self._lock:
                for c in self.conns:
                    if c.state == "connecting" and now - self._t_start > self.connect_timeout:
                        self._fail(c, "failed", "connect: timed out")
                    elif c.state == "open" and self._sending and now >= c.next_send:
                        c.seq += 1
                        c.tx += f"{c.id} {c.seq}\n".encode()
                        c.pending[c.seq] = now
                        c.sent += 1
                        if c.last_answer is None and c.sent == 1:
                            c.last_answer = now  # the first gap counts from the first send
                        c.next_send += self.period
                        if c.next_send < now:  # never burst to catch up
                            c.next_send = now + self.period
                        self._flush(c)
                next_due = min((c.next_send for c in self.conns if c.state == "open"), default=now + 0.05)
            timeout = max(0.0, min(0.05, next_due - time.monotonic()))
            events = self._sel.select(timeout) if self._sel.get_map() else (time.sleep(timeout) or [])
            now = time.monotonic()
            with self._lock:
                for key, mask in events:
                    c: _Conn = key.data
                    if c.state == "connecting":
                        err = c.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                        if err:
                            self._fail(c, "failed", f"connect: {os.strerror(err)}", reset=err == errno.ECONNRESET)
                            continue
                        c.state, c.local, c.connected_at = "open", c.sock.getsockname()[1], now
                        # Stagger the first sends over one period.
                        c.next_send = now + self.period * (c.id / max(1, self.n))
                        self._sel.modify(c.sock, selectors.EVENT_READ, c)
                        continue
                    if c.state != "open":
                        continue
                    if mask & selectors.EVENT_WRITE:
                        self._flush(c)
                        if c.state != "open":
                            continue
                    if mask & selectors.EVENT_READ:
                        self._read(c, now)

    def _flush(self, c: _Conn) -> None:
        if not c.tx:
            return
        try:
            n = c.sock.send(c.tx)
            c.tx = c.tx[n:]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as e:
            self._on_error(c, e, "send")
            return
        want = selectors.EVENT_READ | (selectors.EVENT_WRITE if c.tx else 0)
        with contextlib.suppress(Exception):
            self._sel.modify(c.sock, want, c)

    def _read(self, c: _Conn, now: float) -> None:
        try:
            data = c.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._on_error(c, e, "recv")
            return
        if not data:
            self._fail(c, "closed", "connection closed by the peer (EOF)")
            return
        c.rx += data
        *lines, c.rx = c.rx.split(b"\n")
        for line in lines:
            f = line.decode(errors="replace").split()
            if len(f) != 3 or not f[2].isdigit():
                c.error = f"unexpected answer {line[:80]!r}"
                continue
            name, seq = f[0], int(f[2])
            if c.backend is None:
                c.backend = name
            if name not in c.backends:
                c.backends.append(name)
            if c.pending.pop(seq, None) is not None:
                c.answered += 1
                if c.last_answer is not None:
                    c.longest_gap = max(c.longest_gap, now - c.last_answer)
                c.last_answer = now


__all__ = [
    "Fleet", "Router", "Instance", "StandIn", "Bird", "BirdError", "LongLived", "FleetSpillway", "SpillwayError",
    "spillway_config", "SPILLWAY_BIN", "SPILLWAYCTL_BIN", "OTHER_BACKENDS", "OTHER_HEALTH_PORT", "HEALTH_PORT",
    "birdc", "bgp_state", "wait_established", "needs_bird", "node_address", "node_address6", "VIP_WEB6",
    "router_bird_config", "instance_bird_config",
    "VIP_WEB", "VIP_OTHER", "VIPS", "ECHO_PORT", "ROUTER_FABRIC_V4", "ROUTER_CLIENT_V4", "CLIENT_NET4",
    "KERNEL_IF", "DATA_PORT", "VIP_TABLE", "VIP_PROTO", "ROUTER_AS", "INSTANCE_AS", "BIRD", "BIRDC",
]


# ---- helpers for tests and the demo ----------------------------------------------------------
def summary(rep: dict) -> dict:
    """A LongLived report without the per-connection rows."""
    return {k: v for k, v in rep.items() if k != "per_connection"}


def start_all(f: Fleet, timeout: float = 30.0) -> list[FleetSpillway]:
    """Start the daemon in every instance; wait until each serves and announces every VIP
    (web6's too with ``Fleet(ipv6=True)``), the sessions are up and the router has every
    instance as a next hop for each."""
    sps = [f.spillway(i.k) for i in f.instances]
    vips = (*VIPS, VIP_WEB6) if f.ipv6 else VIPS
    for sp in sps:
        sp.wait_phase("serving", timeout=timeout)
        sp.wait_announced(vips, timeout=timeout)
    f.wait_established(timeout=timeout)
    for vip in vips:
        nodes = [i.node6 if ":" in vip else i.node for i in f.instances]
        f.wait_nexthops(vip, nodes, timeout=timeout)
    return sps


def http_get(c: T.Client, host: str, port: int = T.HTTP_PORT, path: str = "/", timeout: float = 5.0) -> bytes:
    """One HTTP/1.0 GET over a fresh TCP connection from client ``c``; the body."""
    s = c.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        s.connect((host, port))
        s.sendall(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    finally:
        s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.") and b" 200 " in head.split(b"\r\n")[0], head[:200]
    return body


def wait_backends_healthy(sps: list["FleetSpillway"], timeout: float = 15.0) -> None:
    """Wait until every configured backend is healthy on every instance: a backend a reload
    adds is unhealthy until its first probe passes (HC-3), and the tables change only then."""
    def verdicts():
        return {sp.inst.short: {b["address"]: b["healthy"] for b in sp.api("/v1/backends")["backends"]
                                if b["status"] == "active"} for sp in sps}

    T.wait_until(lambda: all(all(v.values()) for v in verdicts().values()),
                 lambda: f"every backend healthy on every instance: {verdicts()}", timeout=timeout)


def wait_synced(sps: list["FleetSpillway"], timeout: float = 15.0) -> dict:
    """Wait until every instance's workers have scanned their tables against its current
    snapshot (fleet sync) and every peer has received all that was sent to it; the replies."""
    def state():
        return {sp.inst.short: (sp.api("/v1/status")["generation"], sp.instance()["fleet_sync"]) for sp in sps}

    def ok():
        st = state()
        sent = sum(s["entries_sent"] + s["answer_entries_sent"] for _, s in st.values())
        received = sum(s["entries_received"] for _, s in st.values())
        # Two instances: what one sent (to the peers and in bulk answers) the other received.
        return all(s["scanned_generation"] == g for g, s in st.values()) and sent == received

    T.wait_until(ok, lambda: f"fleet sync to settle: {state()}", timeout=timeout)
    return state()


def answered_now(ll: LongLived) -> dict[int, int]:
    return {c["id"]: c["answered"] for c in ll.report()["per_connection"]}


def wait_all_progress(ll: LongLived, since: dict[int, int], more: int = 3, timeout: float = 15.0) -> None:
    """Wait until every connection has ``more`` answers more than in ``since``."""
    def ok():
        return all(c["answered"] >= since.get(c["id"], 0) + more and c["state"] == "open"
                   for c in ll.report()["per_connection"])

    T.wait_until(ok, lambda: f"every connection to be answered {more} more times: {summary(ll.report())}",
                 timeout=timeout)


def carriers(sps: list[FleetSpillway], ll: LongLived, fresh_ms: int = 400) -> dict[str, list[int]]:
    """Which instance carries each open connection now: the one whose connection table has an
    entry for it used within ``fresh_ms`` (messages go every 100 ms). {instance: [conn ids]}."""
    out: dict[str, list[int]] = {sp.inst.short: [] for sp in sps}
    out["none"] = []
    src = ll.ns.ipv6 if ":" in ll.vip else ll.ns.ipv4
    for c in ll.report()["per_connection"]:
        if c["state"] != "open":
            continue
        q = (f"/v1/conntrack/lookup?src={src}&dst={ll.vip}&proto=tcp&sport={c['local']}"
             f"&dport={ll.port}")
        holder = "none"
        for sp in sps:
            if not sp.running:
                continue
            for w in sp.api(q)["workers"]:
                if w["state"] == "found" and w["entry"]["idle_ms"] <= fresh_ms:
                    holder = sp.inst.short
        out[holder].append(c["id"])
    return out
