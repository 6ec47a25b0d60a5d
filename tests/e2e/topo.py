"""Network-namespace topologies for Spillway end-to-end tests.

One L2 segment (a Linux bridge ``br0`` in the balancer namespace) joins:

* the **balancer namespace** ``<p>-lb``: ``br0`` holds the balancer host's
  kernel address (198.18.0.1/16, fd00::1/64, used later by control-plane
  health checks). The DPDK ``net_tap`` port created by the balancer process is
  enslaved to ``br0`` with :meth:`Balancer.attach_when_present`; that port owns
  the node address (198.18.0.2 / fd00::2) and the VIPs (198.18.0.100,
  fd00::100) and answers ARP/ND for them -- the lb kernel holds neither.
* **client namespaces** ``<p>-c1``... with ``eth0`` in 198.18.(10*z).i/16,
  fd00::(10*z):i/64 (zone a: z=1 -> 198.18.10.1, fd00::10:1).
* **backend namespaces** ``<p>-b1``... with ``eth0`` in 198.18.z.i/16,
  fd00::z:i/64 (zone a: 198.18.1.1, fd00::1:1), the VIPs on ``lo``,
  ``arp_ignore=1`` / ``arp_announce=2`` (never answer ARP for a VIP; Linux
  answers ND only for addresses of the receiving interface), rp_filter 0, a
  TUN device ``tun0`` fed by ``scripts/decap.py`` and
  ``scripts/backend_server.py`` (HTTP :80, UDP :5353).

Backends are numbered globally in zone order (zones a,b with 2 each: b1 b2 in
zone a, b3 b4 in zone b); clients likewise (c1 zone a, c2 zone b).

Names: prefix ``sw`` + 4 random hex digits, unique per run. Namespaces are
``<p>-lb``, ``<p>-b1``, ``<p>-c1``; the bridge-side veth of host ``b1`` is
``<p>-b1`` inside the lb namespace; inside each host namespace it is ``eth0``.

MTU: everything is 1500 by default. For large encapsulated frames (outer
headers add 20 bytes for IPIP, 28 GUE/IPv4, 40 IPv6-in-IPv6, 48 GUE/IPv6) use
``Topology(fabric_mtu=9000)``: br0, the lb-side and backend-side veths of the
backends and (via ``attach_when_present``) the DPDK tap get 9000, clients stay
at ``client_mtu`` (1500), and each backend gets routes to the client subnets
(198.18.(10*z).0/24, fd00::(10*z):0/112) with ``mtu client_mtu`` so that its
direct replies fit the clients' links. Note: DPDK 22.11's ``net_tap`` accepts
frames of at most 1522 bytes (port MTU <= 1504), so a balancer on ``net_tap`` cannot
use a jumbo fabric; give the clients a smaller MTU instead (``client_mtu=1400``).

Usage::

    with Topology() as topo:              # builds, starts decap + servers
        b1, c1 = topo.backend("b1"), topo.client("c1")
        topo.lb.popen([...balancer...])   # tracked, killed on close()
        topo.lb.attach_when_present("dtap0")
        out = c1.run(["curl", "-s", f"http://{VIP4}/"]).stdout
        topo.decap_stats(b1)["ipip"]

Everything created is removed by :meth:`Topology.close` (also from ``atexit``
and on SIGINT/SIGTERM): tracked processes and any process left in the
topology's namespaces are killed, namespaces deleted, the state directory
``/tmp/spillway-e2e/<p>/`` (stats files, logs) removed unless the environment
has ``SPILLWAY_E2E_KEEP=1``.

The module also has small packet builders (:func:`ipv4`, :func:`ipv6`,
:func:`udp`, :func:`tcp`, :func:`fragment_ipv4`) and :meth:`Topology.send_encap`
to inject encapsulated packets from the lb namespace without a balancer.

Requires root, ``ip`` (iproute2) and ``/dev/net/tun``. Standard library only.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
STATE_ROOT = Path("/tmp/spillway-e2e")

# ---- addressing defaults ----------------------------------------------------
LB_KERNEL_V4 = "198.18.0.1"  # on br0: the balancer host's kernel address
LB_KERNEL_V6 = "fd00::1"
LB_NODE_V4 = "198.18.0.2"  # the DPDK port's own node address (not in the kernel)
LB_NODE_V6 = "fd00::2"
VIP4 = "198.18.0.100"
VIP6 = "fd00::100"
PREFIX_LEN4 = 16
PREFIX_LEN6 = 64
HTTP_PORT = 80
UDP_PORT = 5353
ECHO_PORT = 7000  # backend_server.py's line echo (long-lived TCP connections)
# The tests' virtualenv (scripts/install-deps.sh): aioquic for scripts/quic_peer.py.
TEST_VENV_PYTHON = Path(os.environ.get("SPILLWAY_TEST_VENV", "/opt/spillway-test-venv")) / "bin" / "python"
GUE_PORT = 6080
DEFAULT_MTU = 1500
# dataplane.idle_sleep_us of the balancers the tests run: a worker that finds nothing sleeps
# 200 us instead of polling a core at 100%, so that balancers sharing the machine (several in
# the fleet tests, more in a suite split by hand with pytest -n 2) leave the CPU to the traffic.
WORKER_IDLE_SLEEP_US = 200
BRIDGE = "br0"
HOST_IF = "eth0"
TUN_IF = "tun0"

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


class TopologyError(RuntimeError):
    pass


def wait_until(cond: Callable[[], object], what: str | Callable[[], str], timeout: float = 10.0,
               poll: float = 0.05):
    """Wait for a condition, with a deadline: call ``cond()`` every ``poll`` seconds until it
    returns something true, and return that. After ``timeout`` seconds raise ``TimeoutError``
    ("timed out after N s waiting for WHAT"); ``what`` is a string, or a callable called then,
    which can describe the last state seen. Every wait of the e2e tests goes through here (or
    has its own deadline): a test that waits fails, it never hangs."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what() if callable(what) else what}")
        time.sleep(poll)


def _sh(cmd: Sequence[str], check: bool = True, timeout: float = 30, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise TopologyError(f"{' '.join(cmd)} -> {r.returncode}: {r.stderr.strip() or r.stdout.strip()}")
    return r


def netns_list() -> list[str]:
    """Names of all network namespaces (``ip netns list``)."""
    out = _sh(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


# ---- zones ------------------------------------------------------------------
@dataclass(frozen=True)
class Zone:
    """A zone with index ``index`` (1-based): subnets of its clients and backends.

    All of them lie in one /16 + /64 L2 segment; the /24 and /112 here are what
    a balancer config uses to map addresses to zones.
    """

    name: str
    index: int

    @property
    def client_net4(self) -> str:
        return f"198.18.{10 * self.index}.0/24"

    @property
    def client_net6(self) -> str:
        return f"fd00::{10 * self.index}:0/112"

    @property
    def backend_net4(self) -> str:
        return f"198.18.{self.index}.0/24"

    @property
    def backend_net6(self) -> str:
        return f"fd00::{self.index}:0/112"


# ---- namespaces -------------------------------------------------------------
class Namespace:
    """A network namespace. Processes started with :meth:`popen` are tracked by
    the owning :class:`Topology` and killed on close."""

    def __init__(self, name: str, topo: "Lab | None" = None):
        self.name = name
        self._topo = weakref.ref(topo) if topo is not None else (lambda: None)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    def cmd(self, argv: Sequence[str]) -> list[str]:
        """``argv`` prefixed with ``ip netns exec <name>``."""
        return ["ip", "netns", "exec", self.name, *map(str, argv)]

    def run(self, argv: Sequence[str], check: bool = True, timeout: float = 30, **kw) -> subprocess.CompletedProcess:
        """Run a command in the namespace; text output captured. Raises
        :class:`TopologyError` on a non-zero exit when ``check``."""
        return _sh(self.cmd(argv), check=check, timeout=timeout, **kw)

    def popen(self, argv: Sequence[str], log: str | None = None, **kw) -> subprocess.Popen:
        """Start a command in the namespace in its own session (process group).

        Output goes to ``log`` (a file name in the topology's state dir) when
        given, else to ``/dev/null`` unless ``stdout``/``stderr`` are passed.
        The process is killed by ``Topology.close()`` / :meth:`Topology.kill`.
        """
        topo = self._topo()
        logf = None
        if log is not None and topo is not None:
            logf = open(topo.state_dir / log, "ab")
            kw.setdefault("stdout", logf)
            kw.setdefault("stderr", subprocess.STDOUT)
        else:
            kw.setdefault("stdout", subprocess.DEVNULL)
            kw.setdefault("stderr", subprocess.DEVNULL)
        kw.setdefault("stdin", subprocess.DEVNULL)
        try:
            p = subprocess.Popen(self.cmd(argv), start_new_session=True, **kw)
        finally:
            if logf is not None:
                logf.close()
        if topo is not None:
            topo._procs.append(p)
        return p

    def ip(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """``ip -n <name> args...``"""
        return _sh(["ip", "-n", self.name, *map(str, args)], check=check)

    def sysctl(self, **settings) -> None:
        """Set sysctls, keys with ``/`` or ``.``: ``ns.sysctl(**{"net.ipv4.ip_forward": 1})``."""
        script = "; ".join(f"echo {v} > /proc/sys/{k.replace('.', '/')}" for k, v in settings.items())
        self.run(["sh", "-ec", script])

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """Switch the *calling thread* into this namespace (setns) for the block.

        Sockets created inside stay in this namespace after the block. Do not
        spawn processes inside the block (use :meth:`run`/:meth:`popen`)."""
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            tgt = os.open(f"/run/netns/{self.name}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _libc.setns(tgt, CLONE_NEWNET) != 0:
                    e = ctypes.get_errno()
                    raise OSError(e, f"setns({self.name}): {os.strerror(e)}")
            finally:
                os.close(tgt)
            try:
                yield
            finally:
                if _libc.setns(own, CLONE_NEWNET) != 0:  # pragma: no cover - would be fatal
                    e = ctypes.get_errno()
                    raise OSError(e, f"setns(back): {os.strerror(e)}")
        finally:
            os.close(own)

    def socket(self, family: int = socket.AF_INET, type: int = socket.SOCK_DGRAM, proto: int = 0) -> socket.socket:
        """A socket created inside this namespace (usable from the test process)."""
        with self.entered():
            return socket.socket(family, type, proto)

    def link_exists(self, ifname: str) -> bool:
        return self.ip("link", "show", "dev", ifname, check=False).returncode == 0

    def mac(self, ifname: str) -> str:
        info = json.loads(self.ip("-j", "link", "show", "dev", ifname).stdout)
        return info[0]["address"]

    def pids(self) -> list[int]:
        out = _sh(["ip", "netns", "pids", self.name], check=False).stdout
        return [int(x) for x in out.split()]

    def enslave_when_present(self, ifname: str, bridge: str, timeout: float = 30.0, mtu: int | None = None,
                             disable_ipv6: bool = False) -> None:
        """Wait until ``ifname`` (e.g. a DPDK net_tap port) exists in this namespace, give it
        a MAC of its own, set its MTU (when given), enslave it to ``bridge`` and bring it up.
        Raises ``TimeoutError``. :meth:`Balancer.attach_when_present` and the fleet's
        ``attach_data_port`` use it."""
        wait_until(lambda: self.link_exists(ifname), f"{ifname} to appear in {self.name}", timeout=timeout)
        if mtu:
            self.ip("link", "set", "dev", ifname, "mtu", str(mtu))
        # DPDK's net_tap gives the kernel interface the port's own MAC. A bridge delivers
        # frames for a port's own MAC to the local stack instead of forwarding them out of
        # the port, so the kernel side gets another (locally administered) MAC.
        kernel_mac = "02:" + ":".join(f"{b:02x}" for b in secrets.token_bytes(5))
        self.ip("link", "set", "dev", ifname, "address", kernel_mac)
        if disable_ipv6:
            self.sysctl(**{f"net.ipv6.conf.{ifname}.disable_ipv6": 1})
        self.ip("link", "set", "dev", ifname, "master", bridge)
        self.ip("link", "set", "dev", ifname, "up")

    def capture(self, ifname: str = HOST_IF) -> "Capture":
        """Start capturing every frame seen on ``ifname`` (both directions) with an
        AF_PACKET socket; use as a context manager, read :attr:`Capture.frames`."""
        return Capture(self, ifname)

    def send_frames(self, ifname: str, frames: Iterable[bytes]) -> int:
        """Transmit raw Ethernet frames on ``ifname`` (AF_PACKET, no bridge, no IP stack
        checks: malformed frames go out as they are). Returns how many were sent."""
        n = 0
        with self.socket(socket.AF_PACKET, socket.SOCK_RAW, 0) as s:
            s.bind((ifname, 0))
            for f in frames:
                s.send(bytes(f))
                n += 1
        return n


class Balancer(Namespace):
    """The balancer namespace: bridge ``br0`` with the kernel address."""

    bridge = BRIDGE
    ipv4 = LB_KERNEL_V4
    ipv6 = LB_KERNEL_V6

    def add_address(self, cidr: str, dev: str = BRIDGE) -> None:
        """Add a kernel address (``nodad`` for IPv6), e.g. ``lb.add_address("198.18.0.2/16")``
        to stand in for the DPDK node address when no balancer runs. Removed
        with the namespace; never do this while DPDK owns that address."""
        extra = ["nodad"] if ":" in cidr else []
        self.ip("addr", "add", cidr, "dev", dev, *extra)

    def del_address(self, cidr: str, dev: str = BRIDGE) -> None:
        self.ip("addr", "del", cidr, "dev", dev, check=False)

    def attach_when_present(self, ifname: str, timeout: float = 30.0, mtu: int | None = None) -> None:
        """Wait until ``ifname`` (e.g. the DPDK net_tap port) exists in this
        namespace, enslave it to br0, set its MTU (default: the topology's
        fabric MTU) and bring it up. Raises ``TimeoutError``."""
        topo = self._topo()
        if mtu is None and topo is not None:
            mtu = topo.fabric_mtu
        self.enslave_when_present(ifname, BRIDGE, timeout=timeout, mtu=mtu)


class Host(Namespace):
    """A client or backend namespace with one veth ``eth0`` into br0."""

    def __init__(self, name: str, topo: "Lab", role: str, zone: Zone, index: int, ipv4: str, ipv6: str | None):
        super().__init__(f"{topo.prefix}-{name}", topo)
        self.short = name  # "b1", "c1"
        self.role = role  # "backend" | "client"
        self.zone = zone
        self.index = index  # 1-based within the zone
        self.ipv4 = ipv4
        self.ipv6 = ipv6
        self.ifname = HOST_IF
        self.bridge_port = f"{topo.prefix}-{name}"  # veth peer inside the hub (lb / router) namespace

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.short} zone={self.zone.name} {self.ipv4} {self.ipv6}>"

    @property
    def mac_address(self) -> str:
        return self.mac(self.ifname)


class Client(Host):
    pass


class Backend(Host):
    """Runs decap.py (stats in :attr:`stats_file`) and backend_server.py."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.decap_proc: subprocess.Popen | None = None
        self.server_proc: subprocess.Popen | None = None
        topo = self._topo()
        self.stats_file = topo.state_dir / f"{self.short}.decap.json"


# ---- topology -----------------------------------------------------------------
_live: "weakref.WeakSet[Lab]" = weakref.WeakSet()
_handlers_installed = False
_prev_handlers: dict[int, object] = {}
_cleaning = False


def _close_all() -> None:
    for t in list(_live):
        try:
            t.close()
        except Exception as e:  # pragma: no cover - best effort at exit
            print(f"topo: cleanup of {t.prefix} failed: {e}", file=sys.stderr)


def _on_signal(signum, frame):
    global _cleaning
    if _cleaning:
        # A second signal while the first one's cleanup runs (Ctrl-C twice, or `timeout`
        # forwarding to its child the SIGTERM that was also sent to the child): raising here
        # would abandon that cleanup half-way, with namespaces and processes left behind.
        return
    _cleaning = True
    try:
        _close_all()
    finally:
        _cleaning = False
    prev = _prev_handlers.get(signum)
    if callable(prev):
        prev(signum, frame)
    elif signum == signal.SIGINT:
        raise KeyboardInterrupt
    else:
        raise SystemExit(128 + signum)


def _install_handlers() -> None:
    global _handlers_installed
    if _handlers_installed:
        return
    atexit.register(_close_all)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            prev = signal.getsignal(sig)
            if prev == signal.SIG_IGN:  # e.g. a background job: respect it
                continue
            _prev_handlers[sig] = prev
            signal.signal(sig, _on_signal)
    _handlers_installed = True


def cleanup_stale() -> list[str]:
    """Delete namespaces of earlier runs whose owning process is gone
    (state dirs under /tmp/spillway-e2e record the owner pid). Returns the
    prefixes removed. Safe with runs side by side: live owners are kept."""
    removed = []
    if not STATE_ROOT.is_dir():
        return removed
    names = netns_list()
    for d in STATE_ROOT.iterdir():
        try:
            owner = int((d / "owner").read_text())
        except (OSError, ValueError):
            continue
        try:
            os.kill(owner, 0)
            continue  # still alive
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        for ns in names:
            if ns.startswith(d.name + "-"):
                for pid in Namespace(ns).pids():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                _sh(["ip", "netns", "del", ns], check=False)
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d.name)
    return removed


class Lab:
    """What every namespace lab of the e2e tests shares (:class:`Topology`, ``fleet.Fleet``):
    the prefix (``sw`` + 4 hex digits), the state dir ``/tmp/spillway-e2e/<p>/`` with the
    owner pid (for :func:`cleanup_stale`), tracked processes, client and backend hosts with
    veths into a bridge of a hub namespace, the backends' services (decap.py,
    backend_server.py) and their counters, and :meth:`close`.

    A subclass builds its layout with :meth:`_add_ns`, :meth:`_add_host`,
    :meth:`_setup_backend` inside :meth:`_start` (which cleans up when the build fails) and
    names its hub namespaces (deleted first on close) in :meth:`_hubs`.
    """

    def __init__(
        self,
        *,
        zones: Sequence[str] = ("a", "b"),
        vips4: Sequence[str] = (VIP4,),
        vips6: Sequence[str] = (VIP6,),
        client_mtu: int = DEFAULT_MTU,
        fabric_mtu: int = DEFAULT_MTU,
        backend_route_mtu: int | None = None,
        http_port: int = HTTP_PORT,
        udp_port: int = UDP_PORT,
        gue_port: int = GUE_PORT,
        echo_port: int = ECHO_PORT,
        prefix: str | None = None,
    ):
        if os.geteuid() != 0:
            raise TopologyError(f"{type(self).__name__} needs root")
        if len(zones) > 25:
            raise TopologyError("at most 25 zones")
        self.prefix = prefix or self._fresh_prefix()
        if not re.fullmatch(r"[a-z][a-z0-9]{1,8}", self.prefix):
            raise TopologyError(f"bad prefix {self.prefix!r}")
        self.zones = [Zone(z, i + 1) for i, z in enumerate(zones)]
        self.vips4 = list(vips4)
        self.vips6 = list(vips6)
        self.client_mtu = client_mtu
        self.fabric_mtu = fabric_mtu
        if backend_route_mtu is None and fabric_mtu > client_mtu:
            backend_route_mtu = client_mtu
        self.backend_route_mtu = backend_route_mtu
        self.http_port, self.udp_port, self.gue_port = http_port, udp_port, gue_port
        self.echo_port = echo_port
        self.state_dir = STATE_ROOT / self.prefix
        self._procs: list[subprocess.Popen] = []
        self._closed = False
        self._lock = threading.RLock()
        self.clients: list[Client] = []
        self.backends: list[Backend] = []

        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / "owner").write_text(str(os.getpid()))
        _install_handlers()
        _live.add(self)

    def _start(self, build: Callable[[], None], start_services: bool) -> None:
        """Run ``build()`` then (optionally) :meth:`start_services`; on any failure
        :meth:`close` (everything built so far goes) and re-raise."""
        try:
            build()
            if start_services:
                self.start_services()
        except BaseException:
            self.close()
            raise

    def _hubs(self) -> list[Namespace]:
        """Namespaces holding the bridges: deleted first on close (the veths go with them)."""
        return []

    # -- construction -----------------------------------------------------------
    @staticmethod
    def _fresh_prefix() -> str:
        existing = netns_list()
        for _ in range(100):
            p = "sw" + secrets.token_hex(2)
            if not any(n.startswith(p + "-") for n in existing) and not (STATE_ROOT / p).exists():
                return p
        raise TopologyError("no free prefix")

    def _add_ns(self, ns: Namespace) -> None:
        _sh(["ip", "netns", "add", ns.name])
        ns.ip("link", "set", "lo", "up")
        ns.sysctl(**{
            "net.ipv6.conf.all.accept_dad": 0,
            "net.ipv6.conf.default.accept_dad": 0,
            "net.ipv6.conf.all.dad_transmits": 0,
            "net.ipv6.conf.default.dad_transmits": 0,
            "net.ipv4.conf.all.rp_filter": 0,
            "net.ipv4.conf.default.rp_filter": 0,
        })

    def _add_host(self, h: Host, mtu: int, hub: Namespace | None = None, bridge: str = BRIDGE,
                  plen4: int = PREFIX_LEN4, plen6: int = PREFIX_LEN6, gateway4: str | None = None,
                  gateway6: str | None = None) -> None:
        """Create ``h``'s namespace and a veth ``eth0`` in it whose peer ``h.bridge_port`` is
        enslaved to ``bridge`` in ``hub`` (default: the lb namespace's br0); addresses
        ``h.ipv4/plen4`` (and ``h.ipv6/plen6`` unless None), default routes when given."""
        hub = hub if hub is not None else self.lb
        if len(h.bridge_port) > 15:
            raise TopologyError(f"interface name too long: {h.bridge_port}")
        self._add_ns(h)
        hub.ip("link", "add", h.bridge_port, "mtu", str(mtu), "type", "veth",
               "peer", "name", HOST_IF, "mtu", str(mtu), "netns", h.name)
        hub.ip("link", "set", h.bridge_port, "master", bridge)
        hub.ip("link", "set", h.bridge_port, "up")
        h.ip("addr", "add", f"{h.ipv4}/{plen4}", "dev", HOST_IF)
        if h.ipv6:
            h.ip("addr", "add", f"{h.ipv6}/{plen6}", "dev", HOST_IF, "nodad")
        h.ip("link", "set", HOST_IF, "up")
        if gateway4:
            h.ip("route", "add", "default", "via", gateway4, "dev", HOST_IF)
        if gateway6:
            h.ip("-6", "route", "add", "default", "via", gateway6, "dev", HOST_IF)

    def _setup_backend(self, b: Backend) -> None:
        """The VIPs on ``lo``, never answer ARP for them, rp_filter off, and (when
        ``backend_route_mtu``) routes with that MTU to the zones' client subnets."""
        for v in self.vips4:
            b.ip("addr", "add", f"{v}/32", "dev", "lo")
        for v in self.vips6:
            b.ip("addr", "add", f"{v}/128", "dev", "lo", "nodad")
        b.sysctl(**{
            "net.ipv4.conf.all.arp_ignore": 1,
            "net.ipv4.conf.all.arp_announce": 2,
            f"net.ipv4.conf.{HOST_IF}.arp_ignore": 1,
            f"net.ipv4.conf.{HOST_IF}.arp_announce": 2,
            f"net.ipv4.conf.{HOST_IF}.rp_filter": 0,
            "net.ipv4.conf.lo.rp_filter": 0,
        })
        if self.backend_route_mtu:
            for z in self.zones:
                b.ip("route", "add", z.client_net4, "dev", HOST_IF, "mtu", str(self.backend_route_mtu))
                b.ip("route", "add", z.client_net6, "dev", HOST_IF, "mtu", str(self.backend_route_mtu))

    # -- lookup --------------------------------------------------------------------
    @property
    def hosts(self) -> list[Host]:
        return [*self.clients, *self.backends]

    @property
    def namespaces(self) -> list[Namespace]:
        return [*self._hubs(), *self.hosts]

    def backend(self, name: str) -> Backend:
        """By short name (``"b1"``) or address."""
        for b in self.backends:
            if name in (b.short, b.name, b.ipv4, b.ipv6):
                return b
        raise KeyError(name)

    def client(self, name: str) -> Client:
        for c in self.clients:
            if name in (c.short, c.name, c.ipv4, c.ipv6):
                return c
        raise KeyError(name)

    def backends_in(self, zone: str) -> list[Backend]:
        return [b for b in self.backends if b.zone.name == zone]

    def clients_in(self, zone: str) -> list[Client]:
        return [c for c in self.clients if c.zone.name == zone]

    # -- services ------------------------------------------------------------------
    def start_services(self) -> None:
        """Start decap + server on every backend, wait until all are ready."""
        for b in self.backends:
            self.start_decap(b, wait=False)
            self.start_server(b, wait=False)
        for b in self.backends:
            self._wait_file(b.stats_file, b.decap_proc, f"decap on {b.short}")
            self._wait_file(self._ready_file(b), b.server_proc, f"server on {b.short}")

    def _ready_file(self, b: Backend) -> Path:
        return self.state_dir / f"{b.short}.server.ready"

    @staticmethod
    def _wait_file(path: Path, proc: subprocess.Popen | None, what: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not path.exists():
            if proc is not None and proc.poll() is not None:
                raise TopologyError(f"{what} exited with {proc.returncode} (see {path.parent}/*.log)")
            if time.monotonic() > deadline:
                raise TopologyError(f"{what} not ready after {timeout}s")
            time.sleep(0.02)

    def start_decap(self, b: Backend, wait: bool = True) -> subprocess.Popen:
        if b.decap_proc is not None and b.decap_proc.poll() is None:
            return b.decap_proc
        with contextlib.suppress(FileNotFoundError):
            b.stats_file.unlink()
        b.decap_proc = b.popen(
            [sys.executable, SCRIPTS / "decap.py", "--tun", TUN_IF, "--gue-port", self.gue_port, "--stats", b.stats_file],
            log=f"{b.short}.decap.log",
        )
        if wait:
            self._wait_file(b.stats_file, b.decap_proc, f"decap on {b.short}")
        return b.decap_proc

    def start_server(self, b: Backend | str, wait: bool = True) -> subprocess.Popen:
        """(Re)start backend_server.py on ``b``; returns once it listens."""
        b = self.backend(b) if isinstance(b, str) else b
        if b.server_proc is not None and b.server_proc.poll() is None:
            return b.server_proc
        ready = self._ready_file(b)
        with contextlib.suppress(FileNotFoundError):
            ready.unlink()
        b.server_proc = b.popen(
            [sys.executable, SCRIPTS / "backend_server.py", "--name", b.short,
             "--http-port", self.http_port, "--udp-port", self.udp_port, "--echo-port", self.echo_port,
             "--ready-file", ready],
            log=f"{b.short}.server.log",
        )
        if wait:
            self._wait_file(ready, b.server_proc, f"server on {b.short}")
        return b.server_proc

    def stop_server(self, b: Backend | str) -> None:
        """Stop backend_server.py on ``b`` (its ports then refuse: TCP RST, ICMP
        port unreachable). For health-check tests."""
        b = self.backend(b) if isinstance(b, str) else b
        if b.server_proc is not None:
            self.kill(b.server_proc)
            b.server_proc = None
        with contextlib.suppress(FileNotFoundError):
            self._ready_file(b).unlink()

    def server_running(self, b: Backend | str) -> bool:
        b = self.backend(b) if isinstance(b, str) else b
        return b.server_proc is not None and b.server_proc.poll() is None

    def kill(self, p: subprocess.Popen, timeout: float = 3.0) -> None:
        """SIGTERM the process group of ``p``, SIGKILL after ``timeout``."""
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            if p.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, sig)
            try:
                p.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)  # leftovers of the group
        with contextlib.suppress(ValueError):
            self._procs.remove(p)

    # -- decap counters ----------------------------------------------------------------
    def decap_stats(self, b: Backend | str) -> dict:
        """Latest counters of ``b``'s decap agent: ipip, ip6ip6, ip4in6, gue4,
        gue6, junk, written, write_errors, bytes, inner_v4, inner_v6,
        inner_tcp, inner_udp, inner_icmp, inner_fragments (cumulative since
        the agent started; written every 50 ms while changing)."""
        b = self.backend(b) if isinstance(b, str) else b
        for _ in range(20):
            try:
                return json.loads(b.stats_file.read_text())
            except (OSError, ValueError):
                time.sleep(0.01)
        raise TopologyError(f"no decap stats for {b.short}")

    def wait_decap(self, b: Backend | str, cond: Callable[[dict], bool] | Mapping[str, int],
                   timeout: float = 3.0) -> dict:
        """Wait until ``cond(stats)`` holds, or with a mapping until each counter
        is at least the given value; returns the stats, raises TimeoutError."""
        if not callable(cond):
            want = dict(cond)
            cond = lambda s: all(s.get(k, 0) >= v for k, v in want.items())  # noqa: E731
        last: dict = {}

        def met():
            last.clear()
            last.update(self.decap_stats(b))
            return dict(last) if cond(last) else None

        return wait_until(met, lambda: f"decap stats of {b} to meet the condition; last: {last}",
                          timeout=timeout, poll=0.02)

    def decaps(self) -> dict[str, dict]:
        """Every backend's decap counters now: {backend name: :meth:`decap_stats`}."""
        return {b.short: self.decap_stats(b) for b in self.backends}

    def settled_decaps(self, quiet: float = 0.15, timeout: float = 10.0) -> dict[str, dict]:
        """Every backend's decap counters once they stop moving: two reads ``quiet`` seconds
        apart are equal (the agents write them every 50 ms while they change). Raises
        TimeoutError when they still move after ``timeout`` seconds."""
        seen = [self.decaps()]

        def still() -> dict[str, dict] | None:
            time.sleep(quiet)
            cur = self.decaps()
            if cur == seen[-1]:
                return cur
            seen.append(cur)
            return None

        return wait_until(still, lambda: f"the decap counters to settle; last two reads: {seen[-2:]}",
                          timeout=timeout, poll=0)

    # -- teardown -------------------------------------------------------------------------------
    def close(self) -> None:
        """Kill every process started through this topology and any process
        left in its namespaces, delete the namespaces and the state dir.
        Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for p in list(self._procs):
                with contextlib.suppress(Exception):
                    if p.poll() is None:
                        os.killpg(p.pid, signal.SIGTERM)
            deadline = time.monotonic() + 3
            for p in list(self._procs):
                with contextlib.suppress(Exception):
                    p.wait(max(0.0, deadline - time.monotonic()))
            for p in list(self._procs):
                with contextlib.suppress(Exception):
                    os.killpg(p.pid, signal.SIGKILL)
                with contextlib.suppress(Exception):
                    p.wait(2)
            self._procs.clear()
            mine = [n for n in netns_list() if n.startswith(self.prefix + "-")]
            for n in mine:  # anything else still running inside (e.g. children that escaped)
                for pid in Namespace(n).pids():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            hubs = {h.name for h in self._hubs()}
            for n in sorted(mine, key=lambda x: x not in hubs):  # hubs first: the veths go with them
                _sh(["ip", "netns", "del", n], check=False)
            if os.environ.get("SPILLWAY_E2E_KEEP") != "1":
                shutil.rmtree(self.state_dir, ignore_errors=True)
            _live.discard(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.prefix}: {len(self.clients)} clients, {len(self.backends)} backends>"


class Topology(Lab):
    """Builds the namespaces, bridge, veths, VIPs, decap agents and backend servers.

    Parameters (defaults):

    * ``zones=("a", "b")`` -- zone names, zone i (1-based) -> addresses above.
    * ``backends_per_zone=2`` / ``clients_per_zone=1`` -- an int, or a mapping
      ``{"a": 3, "b": 1}``.
    * ``vips4=(VIP4,)``, ``vips6=(VIP6,)`` -- put on every backend's ``lo``.
    * ``client_mtu=1500``, ``fabric_mtu=1500`` (br0, backends' veths, tap),
      ``backend_route_mtu=None`` (-> client_mtu when fabric_mtu > client_mtu).
    * ``http_port=80``, ``udp_port=5353``, ``gue_port=6080``, ``echo_port=7000`` (0: none).
    * ``start_services=True`` -- start decap.py and backend_server.py on build.
    * ``prefix=None`` -- ``sw`` + 4 random hex digits.

    Build happens in ``__init__`` (or ``__enter__``); a failed build cleans up.
    """

    def __init__(
        self,
        zones: Sequence[str] = ("a", "b"),
        backends_per_zone: int | Mapping[str, int] = 2,
        clients_per_zone: int | Mapping[str, int] = 1,
        vips4: Sequence[str] = (VIP4,),
        vips6: Sequence[str] = (VIP6,),
        client_mtu: int = DEFAULT_MTU,
        fabric_mtu: int = DEFAULT_MTU,
        backend_route_mtu: int | None = None,
        http_port: int = HTTP_PORT,
        udp_port: int = UDP_PORT,
        gue_port: int = GUE_PORT,
        start_services: bool = True,
        prefix: str | None = None,
        echo_port: int = ECHO_PORT,
    ):
        super().__init__(
            zones=zones, vips4=vips4, vips6=vips6, client_mtu=client_mtu, fabric_mtu=fabric_mtu,
            backend_route_mtu=backend_route_mtu, http_port=http_port, udp_port=udp_port, gue_port=gue_port,
            echo_port=echo_port, prefix=prefix)
        self.lb = Balancer(f"{self.prefix}-lb", self)
        self._start(lambda: self._build(backends_per_zone, clients_per_zone), start_services)

    # -- construction -----------------------------------------------------------
    @staticmethod
    def _counts(spec: int | Mapping[str, int], zones: list[Zone]) -> list[tuple[Zone, int]]:
        if isinstance(spec, int):
            return [(z, spec) for z in zones]
        return [(z, int(spec.get(z.name, 0))) for z in zones]

    def _build(self, backends_per_zone, clients_per_zone) -> None:
        lb = self.lb
        self._add_ns(lb)
        lb.ip("link", "add", BRIDGE, "type", "bridge", "stp_state", "0", "mcast_snooping", "0")
        lb.ip("addr", "add", f"{LB_KERNEL_V4}/{PREFIX_LEN4}", "dev", BRIDGE)
        lb.ip("addr", "add", f"{LB_KERNEL_V6}/{PREFIX_LEN6}", "dev", BRIDGE, "nodad")

        n = 0
        for zone, count in self._counts(clients_per_zone, self.zones):
            for i in range(1, count + 1):
                n += 1
                c = Client(f"c{n}", self, "client", zone, i, f"198.18.{10 * zone.index}.{i}", f"fd00::{10 * zone.index}:{i}")
                self._add_host(c, self.client_mtu)
                self.clients.append(c)
        n = 0
        for zone, count in self._counts(backends_per_zone, self.zones):
            for i in range(1, count + 1):
                n += 1
                b = Backend(f"b{n}", self, "backend", zone, i, f"198.18.{zone.index}.{i}", f"fd00::{zone.index}:{i}")
                self._add_host(b, self.fabric_mtu)
                self._setup_backend(b)
                self.backends.append(b)

        lb.ip("link", "set", BRIDGE, "mtu", str(self.fabric_mtu))  # explicit: sticks regardless of ports
        lb.ip("link", "set", BRIDGE, "up")
        # With br_netfilter loaded on the host, bridged IPv4/IPv6 frames go through the
        # iptables hooks, which validate (and drop) malformed IP headers and may defragment:
        # switch that off in this namespace so that br0 is a plain L2 switch.
        for knob in ("bridge-nf-call-iptables", "bridge-nf-call-ip6tables", "bridge-nf-call-arptables"):
            lb.run(["sh", "-c", f"f=/proc/sys/net/bridge/{knob}; [ ! -e $f ] || echo 0 > $f"], check=False)

    def _hubs(self) -> list[Namespace]:
        return [self.lb]

    # -- injecting encapsulated packets (no balancer) -----------------------------------------
    def send_encap(self, kind: str, backend: Backend | str, inner: bytes | Iterable[bytes],
                   outer_src: str | None = None) -> None:
        """Send inner packet(s) from the lb namespace to ``backend``, encapsulated.

        ``kind``: ``ipip`` (IPv4-in-IPv4), ``gue4`` (GUE variant 1 over
        UDP/IPv4), ``ip6ip6``, ``ip4in6``, ``gue6``. The kernel builds the outer
        header, with source ``outer_src`` (default: the kernel address
        198.18.0.1 / fd00::1; to use the node address first
        ``lb.add_address("198.18.0.2/16")``)."""
        b = self.backend(backend) if isinstance(backend, str) else backend
        pkts = [inner] if isinstance(inner, (bytes, bytearray)) else list(inner)
        v6 = kind in ("ip6ip6", "ip4in6", "gue6")
        fam = socket.AF_INET6 if v6 else socket.AF_INET
        if kind in ("gue4", "gue6"):
            s = self.lb.socket(fam, socket.SOCK_DGRAM)
            dport = self.gue_port
        else:
            proto = {"ipip": 4, "ip4in6": 4, "ip6ip6": 41}[kind]
            s = self.lb.socket(fam, socket.SOCK_RAW, proto)
            dport = 0
        with s:
            src = outer_src or (LB_KERNEL_V6 if v6 else LB_KERNEL_V4)
            s.bind((src, 0))
            dst = b.ipv6 if v6 else b.ipv4
            for p in pkts:
                s.sendto(bytes(p), (dst, dport))

    def __enter__(self) -> "Topology":
        return self


# ---- packet builders --------------------------------------------------------------------------------
def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _pseudo(src: str, dst: str, proto: int, length: int) -> bytes:
    a, b = ipaddress.ip_address(src), ipaddress.ip_address(dst)
    if a.version == 4:
        return a.packed + b.packed + struct.pack("!BBH", 0, proto, length)
    return a.packed + b.packed + struct.pack("!IxxxB", length, proto)


def udp(src: str, dst: str, sport: int, dport: int, payload: bytes) -> bytes:
    """A UDP datagram (header + payload) with the checksum for src/dst."""
    length = 8 + len(payload)
    hdr = struct.pack("!HHHH", sport, dport, length, 0)
    c = checksum(_pseudo(src, dst, 17, length) + hdr + payload) or 0xFFFF
    return struct.pack("!HHHH", sport, dport, length, c) + payload


TCP_FIN, TCP_SYN, TCP_RST, TCP_PSH, TCP_ACK = 0x01, 0x02, 0x04, 0x08, 0x10


def tcp(src: str, dst: str, sport: int, dport: int, flags: int = TCP_SYN, seq: int = 1000, ack: int = 0,
        window: int = 64240, payload: bytes = b"", mss: int | None = 1460) -> bytes:
    """A TCP segment with checksum; an MSS option when ``flags`` has SYN."""
    opts = struct.pack("!BBH", 2, 4, mss) if (flags & TCP_SYN and mss) else b""
    off = (20 + len(opts)) // 4
    hdr = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, off << 4, flags, window, 0, 0) + opts
    c = checksum(_pseudo(src, dst, 6, len(hdr) + len(payload)) + hdr + payload)
    return hdr[:16] + struct.pack("!H", c) + hdr[18:] + payload


def ipv4(src: str, dst: str, proto: int, payload: bytes, ttl: int = 64, ident: int = 0, df: bool = False,
         mf: bool = False, frag_offset: int = 0) -> bytes:
    """An IPv4 packet (20-byte header, checksum). ``frag_offset`` in bytes (multiple of 8)."""
    flags = (0x4000 if df else 0) | (0x2000 if mf else 0) | (frag_offset // 8)
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), ident, flags, ttl, proto, 0,
                      ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed)
    return hdr[:10] + struct.pack("!H", checksum(hdr)) + hdr[12:] + payload


def ipv6(src: str, dst: str, nh: int, payload: bytes, hlim: int = 64, flow: int = 0) -> bytes:
    """An IPv6 packet (no extension headers)."""
    return struct.pack("!IHBB16s16s", (6 << 28) | flow, len(payload), nh, hlim,
                       ipaddress.IPv6Address(src).packed, ipaddress.IPv6Address(dst).packed) + payload


def fragment_ipv4(src: str, dst: str, proto: int, l4: bytes, size: int = 1400, ident: int = 0x4242) -> list[bytes]:
    """Split an L4 payload (e.g. from :func:`udp`) into IPv4 fragments with at most
    ``size`` bytes of data each (rounded down to a multiple of 8)."""
    size -= size % 8
    out = []
    for off in range(0, len(l4), size):
        chunk = l4[off:off + size]
        out.append(ipv4(src, dst, proto, chunk, ident=ident, mf=off + size < len(l4), frag_offset=off))
    return out


def fragment_ipv6(src: str, dst: str, nh: int, l4: bytes, size: int = 1400, ident: int = 0x4242) -> list[bytes]:
    """Split an L4 payload into IPv6 fragments (fragment extension header)."""
    size -= size % 8
    out = []
    for off in range(0, len(l4), size):
        chunk = l4[off:off + size]
        more = 1 if off + size < len(l4) else 0
        fh = struct.pack("!BBHI", nh, 0, off | more, ident)
        out.append(ipv6(src, dst, 44, fh + chunk))
    return out


@dataclass
class TcpInfo:
    src: str
    dst: str
    sport: int
    dport: int
    seq: int
    ack: int
    flags: int
    payload: bytes = field(repr=False, default=b"")


def parse_tcp4(pkt: bytes) -> TcpInfo | None:
    """Parse an IPv4+TCP packet (as read from an AF_INET SOCK_RAW IPPROTO_TCP socket)."""
    if len(pkt) < 40 or pkt[0] >> 4 != 4 or pkt[9] != 6:
        return None
    ihl = (pkt[0] & 0xF) * 4
    sport, dport, seq, ack, off, flags = struct.unpack_from("!HHIIBB", pkt, ihl)
    return TcpInfo(socket.inet_ntoa(pkt[12:16]), socket.inet_ntoa(pkt[16:20]), sport, dport, seq, ack, flags,
                   pkt[ihl + (off >> 4) * 4:])


ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800
ETH_P_ARP = 0x0806
ETH_P_IPV6 = 0x86DD
PACKET_OUTGOING = 4  # sll_pkttype of a frame the interface transmitted


def mac_bytes(mac: str) -> bytes:
    return bytes.fromhex(mac.replace(":", ""))


def mac_str(b: bytes) -> str:
    return ":".join(f"{x:02x}" for x in b)


def ether(dst_mac: str, src_mac: str, ethertype: int, payload: bytes) -> bytes:
    """An Ethernet II frame (no padding: the harness's links do not need it)."""
    return mac_bytes(dst_mac) + mac_bytes(src_mac) + struct.pack("!H", ethertype) + payload


def arp(op: int, sender_mac: str, sender_ip: str, target_ip: str, target_mac: str = "00:00:00:00:00:00") -> bytes:
    """An Ethernet/IPv4 ARP packet (op 1 request, 2 reply), without the Ethernet header."""
    return struct.pack("!HHBBH", 1, ETH_P_IP, 6, 4, op) + mac_bytes(sender_mac) + \
        socket.inet_aton(sender_ip) + mac_bytes(target_mac) + socket.inet_aton(target_ip)


def icmp4(icmp_type: int, code: int, rest: int = 0, payload: bytes = b"") -> bytes:
    """An ICMP message with checksum; ``rest`` is the 32-bit word after the checksum
    (e.g. the next-hop MTU in its low 16 bits for type 3 code 4)."""
    hdr = struct.pack("!BBHI", icmp_type, code, 0, rest)
    c = checksum(hdr + payload)
    return struct.pack("!BBHI", icmp_type, code, c, rest) + payload


@dataclass
class FrameInfo:
    """A decoded Ethernet frame (see :func:`decode_frame`)."""

    raw: bytes = field(repr=False)
    outgoing: bool  # transmitted by the capturing interface (else received)
    dst_mac: str
    src_mac: str
    ethertype: int
    src: str | None = None  # IP (or ARP sender) address
    dst: str | None = None  # IP (or ARP target) address
    proto: int | None = None  # IP protocol / IPv6 next header (after a fragment header)
    sport: int | None = None
    dport: int | None = None
    fragment: bool = False
    arp_op: int | None = None
    icmp_type: int | None = None
    inner: "FrameInfo | None" = None  # the decapsulated packet of IPIP / IP6IP6 / GUE (port 6080)

    @property
    def l3(self) -> bytes:
        return self.raw[14:]


def _decode_ip(b: bytes, info: FrameInfo) -> None:
    if len(b) < 20:
        return
    v = b[0] >> 4
    if v == 4:
        ihl = (b[0] & 0xF) * 4
        if ihl < 20 or len(b) < ihl:
            return
        info.src, info.dst = socket.inet_ntoa(b[12:16]), socket.inet_ntoa(b[16:20])
        info.proto = b[9]
        fl = struct.unpack_from("!H", b, 6)[0]
        info.fragment = bool(fl & 0x3FFF)
        first = (fl & 0x1FFF) == 0
        l4 = b[ihl:]
    elif v == 6 and len(b) >= 40:
        info.src = str(ipaddress.IPv6Address(b[8:24]))
        info.dst = str(ipaddress.IPv6Address(b[24:40]))
        info.proto = b[6]
        l4 = b[40:]
        first = True
        if info.proto == 44 and len(l4) >= 8:
            info.fragment = True
            info.proto = l4[0]
            first = (struct.unpack_from("!H", l4, 2)[0] & 0xFFF8) == 0
            l4 = l4[8:]
    else:
        return
    if not first:
        return
    if info.proto in (6, 17) and len(l4) >= 4:
        info.sport, info.dport = struct.unpack_from("!HH", l4)
    elif info.proto in (1, 58) and len(l4) >= 1:
        info.icmp_type = l4[0]
    if info.proto in (4, 41):  # IPIP, IP6IP6 / 6in4
        info.inner = FrameInfo(l4, info.outgoing, "", "", 0)
        _decode_ip(l4, info.inner)
    elif info.proto == 17 and info.dport == GUE_PORT and len(l4) >= 28 and not info.fragment:
        # GUE variant 1: the UDP payload is the inner IP packet itself.
        info.inner = FrameInfo(l4[8:], info.outgoing, "", "", 0)
        _decode_ip(l4[8:], info.inner)


def decode_frame(raw: bytes, outgoing: bool = False) -> FrameInfo:
    """Decode an Ethernet frame: MACs, ethertype; for IP the addresses, protocol, ports,
    fragment flag, ICMP type and an encapsulated inner packet; for ARP op, sender/target IP."""
    info = FrameInfo(raw, outgoing, mac_str(raw[0:6]), mac_str(raw[6:12]),
                     struct.unpack_from("!H", raw, 12)[0] if len(raw) >= 14 else 0)
    body = raw[14:]
    if info.ethertype == ETH_P_ARP and len(body) >= 28:
        info.arp_op = struct.unpack_from("!H", body, 6)[0]
        info.src, info.dst = socket.inet_ntoa(body[14:18]), socket.inet_ntoa(body[24:28])
    elif info.ethertype in (ETH_P_IP, ETH_P_IPV6):
        _decode_ip(body, info)
    return info


class Capture:
    """Frames seen on one interface of a namespace, both directions, captured by a thread
    from an AF_PACKET socket until :meth:`stop` (or the end of the ``with`` block)."""

    def __init__(self, ns: Namespace, ifname: str):
        self.ns, self.ifname = ns, ifname
        self.frames: list[FrameInfo] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock = ns.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self._sock.bind((ifname, 0))
        self._sock.settimeout(0.05)
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"capture-{ifname}")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data, addr = self._sock.recvfrom(65536)
            except socket.timeout:
                continue
            except OSError:
                break
            f = decode_frame(data, outgoing=addr[2] == PACKET_OUTGOING)
            with self._lock:
                self.frames.append(f)

    def snapshot(self) -> list[FrameInfo]:
        with self._lock:
            return list(self.frames)

    def stop(self, settle: float = 0.2) -> list[FrameInfo]:
        """Wait ``settle`` seconds for frames in flight, stop, return every frame."""
        if not self._stop.is_set():
            time.sleep(settle)
            self._stop.set()
            self._thread.join(2)
            self._sock.close()
        return self.snapshot()

    def __enter__(self) -> "Capture":
        return self

    def __exit__(self, *exc) -> None:
        self.stop(settle=0 if exc[0] else 0.2)


__all__ = [
    "Lab", "Topology", "Namespace", "Balancer", "Host", "Client", "Backend", "Zone", "TopologyError",
    "cleanup_stale", "netns_list",
    "LB_KERNEL_V4", "LB_KERNEL_V6", "LB_NODE_V4", "LB_NODE_V6", "VIP4", "VIP6",
    "HTTP_PORT", "UDP_PORT", "GUE_PORT", "ECHO_PORT", "wait_until", "BRIDGE", "HOST_IF", "TUN_IF", "SCRIPTS",
    "checksum", "udp", "tcp", "ipv4", "ipv6", "fragment_ipv4", "fragment_ipv6", "parse_tcp4", "TcpInfo",
    "TCP_FIN", "TCP_SYN", "TCP_RST", "TCP_PSH", "TCP_ACK",
    "Capture", "FrameInfo", "decode_frame", "ether", "arp", "icmp4", "mac_bytes", "mac_str",
    "ETH_P_IP", "ETH_P_ARP", "ETH_P_IPV6", "PACKET_OUTGOING",
]
