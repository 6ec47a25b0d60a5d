"""Spillway on a `net_memif` port, driven by `dpdk-testpmd` in another process (docs/memif.md).

Spillway is the memif server; testpmd, the client, connects over a socket file in a private
directory, each process with its own `--file-prefix`. The peer is then made to go away again
and again while traffic flows (SIGKILL at varied moments, during the handshake too, and clean
exits): Spillway must stay up, answer its admin API, accept the peer back and forward again.
DPDK 22.11's memif driver unmaps the peer's memory on disconnect under running bursts; without
Spillway's poll gate (dataplane/dpdk/src/memif.rs) these tests die with SIGSEGV.

Lcores: both processes use CPUs 0-1; Spillway's worker is lcore 1, testpmd's forwarding core
lcore 0 (`--main-lcore 1`), so the two poll loops do not share a CPU. Nothing leaves the host:
memif is a socket file plus shared memory. `SPILLWAY_MEMIF_SEED` replays a run's kill timings.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import topo as T
from balancer import BIN, Metrics, needs_built

TESTPMD = shutil.which("dpdk-testpmd")
SPW_MAC = "02:53:57:00:00:01"
PEER_MAC = "02:53:57:00:00:02"
VIP = "198.18.0.100"
BACKENDS = ["198.18.1.1", "198.18.1.2", "198.18.1.3", "198.18.1.4"]

# Outside CI these skip (listed in the summary); in CI (CI set, or root) they fail instead
# (strict_skips.py).
pytestmark = [
    pytest.mark.skipif(TESTPMD is None, reason="dpdk-testpmd not installed (Debian package dpdk-dev: "
                                               "scripts/install-deps.sh installs it)"),
    pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two CPUs (one poll loop each)"),
    needs_built(BIN),
]

STATS = re.compile(r"^stats t=\S+ worker=0 lcore=\d+ rx=(\d+) tx=(\d+) dropped=(\d+)", re.M)


class Run:
    """A private directory, unique file prefixes, and every process started; `close()` kills
    what is left and removes the sockets, the directory and the EAL runtime directories."""

    def __init__(self, name: str):
        self.dir = Path(tempfile.mkdtemp(prefix=f"spw-memif-{name}-"))
        tag = f"{os.getpid()}-{random.randrange(1 << 20):05x}"
        self.spw_prefix = f"spwm-{tag}"
        self.peer_prefix = f"spwp-{tag}"
        self.sock = self.dir / "memif.sock"
        self.procs: list[subprocess.Popen] = []
        self.spw: subprocess.Popen | None = None
        self.spw_log = self.dir / "spillway.log"
        self.peer_log = self.dir / "testpmd.log"

    # -- Spillway -------------------------------------------------------------------------------
    def config(self, balance: bool) -> dict:
        cfg = {
            "dataplane": {
                "eal_args": [
                    "--no-pci", "-l", "0-1", "--file-prefix", self.spw_prefix,
                    "--vdev", f"net_memif0,role=server,socket={self.sock},socket-abstract=no,mac={SPW_MAC}",
                    "--log-level", "lib.eal:error", "--no-telemetry",
                ],
                "hugepages": "preferred",
                "ports": ["net_memif0"],
                "workers": 1,
            },
        }
        if balance:
            cfg["dataplane"].update({"conntrack_capacity": 65536, "node": {"ipv4": "198.18.0.2/16"}})
            cfg["admin"] = {"listen": f"unix:{self.dir}/admin.sock"}
            cfg["topology"] = {"region": "region-1", "zones": [{"name": "zone-a"}]}
            cfg["services"] = [{
                "name": "web",
                "forwarding_rules": [{"vip": VIP, "protocol": "UDP", "ports": [9]}],
                "encapsulation": {"type": "IPIP"},
                "backend_service": {"backends": [{
                    "group": "web-a", "zone": "zone-a",
                    "endpoints": BACKENDS,
                }]},
            }]
        return cfg

    def start_spillway(self, balance: bool) -> None:
        path = self.dir / "spillway.yaml"
        path.write_text(json.dumps(self.config(balance), indent=1))  # JSON is YAML
        self.spw = self._popen([str(BIN), "--config", str(path), "--stats-interval", "0.2"],
                               self.spw_log, env={**os.environ, "RUST_LOG": "info"})
        deadline = time.time() + 60
        while "spillway: running" not in self.spw_output():
            self.check_alive()
            assert time.time() < deadline, f"spillway did not start:\n{self.spw_output()}"
            time.sleep(0.05)

    def spw_output(self) -> str:
        return self.spw_log.read_text(errors="replace") if self.spw_log.exists() else ""

    def check_alive(self) -> None:
        code = self.spw.poll()
        if code is not None:
            how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
            pytest.fail(f"spillway died ({how}):\n{self.spw_output()[-4000:]}")

    def counters(self) -> tuple[int, int, int]:
        """Worker 0's (rx, tx, dropped) from the latest stats line."""
        found = STATS.findall(self.spw_output())
        return tuple(map(int, found[-1])) if found else (0, 0, 0)

    def wait_counters(self, what: str, done, timeout: float = 15) -> tuple[int, int, int]:
        deadline = time.time() + timeout
        while True:
            self.check_alive()
            c = self.counters()
            if done(c):
                return c
            if time.time() > deadline:
                raise AssertionError(f"{what}: counters {c} after {timeout}s\n"
                                     f"spillway:\n{self.spw_output()[-2000:]}\n"
                                     f"testpmd:\n{self.peer_output()[-2000:]}")
            time.sleep(0.05)

    def admin_get(self, path: str) -> str:
        sock = f"{self.dir}/admin.sock"
        r = subprocess.run(["curl", "-sS", "--fail", "-m", "5", "--unix-socket", sock,
                            f"http://localhost{path}"], capture_output=True, text=True, timeout=10)
        assert r.returncode == 0, f"admin API did not answer: {r.stderr}"
        return r.stdout

    def metrics(self) -> Metrics:
        return Metrics(self.admin_get("/metrics"))

    def stop_spillway(self) -> dict[str, int]:
        self.check_alive()
        self.spw.send_signal(signal.SIGTERM)
        code = self.spw.wait(timeout=30)
        out = self.spw_output()
        assert code == 0, f"spillway exited {code}:\n{out[-4000:]}"
        final = {m[1]: int(m[2]) for m in re.finditer(r"^final (\w+)=(\d+)$", out, re.M)}
        m = re.search(r"^final worker=0 lcore=\d+ rx=(\d+) tx=(\d+)", out, re.M)
        assert m, out[-2000:]
        final["rx"], final["tx"] = int(m[1]), int(m[2])
        return final

    # -- the peer -------------------------------------------------------------------------------
    def start_peer(self, mode: str, interactive: bool = False) -> subprocess.Popen:
        modes = {
            # Both directions: testpmd sends one burst first, then both sides forward what
            # they receive, so the same packets go round and round.
            "io": ["--forward-mode=io", "--tx-first"],
            # A one-way flood: testpmd sends as fast as it can and never receives, so Spillway's
            # TX ring towards it fills (a new connection gives Spillway a new, empty ring).
            "txonly": ["--forward-mode=txonly", "--txpkts=64", f"--tx-ip=198.18.10.1,{VIP}",
                       f"--eth-peer=0,{SPW_MAC}"],
        }
        argv = [
            TESTPMD, "--no-huge", "-m", "128", "--no-pci", "--file-prefix", self.peer_prefix,
            "-l", "0-1", "--main-lcore", "1",
            "--vdev", f"net_memif0,role=client,socket={self.sock},socket-abstract=no,mac={PEER_MAC}",
            "--log-level", "lib.eal:error", "--",
            "--nb-cores=1", "--total-num-mbufs=8192",
            *(["-i"] if interactive else ["--stats-period", "1", *modes[mode]]),
        ]
        if interactive:
            argv += modes["txonly"][2:]  # packet size, addresses, peer MAC; modes are set live
        return self._popen(argv, self.peer_log, stdin=subprocess.PIPE if interactive else subprocess.DEVNULL)

    def peer_output(self) -> str:
        return self.peer_log.read_text(errors="replace") if self.peer_log.exists() else ""

    @staticmethod
    def end_peer(p: subprocess.Popen, sig: int) -> None:
        if p.poll() is None:
            p.send_signal(sig)
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    # -- plumbing -------------------------------------------------------------------------------
    def _popen(self, argv, log: Path, env=None, stdin=subprocess.DEVNULL) -> subprocess.Popen:
        with open(log, "a") as f:
            p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=stdin, env=env,
                                 text=True)
        self.procs.append(p)
        return p

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for prefix in (self.spw_prefix, self.peer_prefix):
            shutil.rmtree(Path("/var/run/dpdk") / prefix, ignore_errors=True)
        if os.environ.get("SPILLWAY_E2E_KEEP"):
            print(f"kept {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def run(request):
    r = Run(request.node.name.split("[")[0].removeprefix("test_")[:16])
    try:
        yield r
    finally:
        r.close()


def seeded() -> random.Random:
    seed = int(os.environ.get("SPILLWAY_MEMIF_SEED", time.time_ns() % 1_000_000))
    print(f"SPILLWAY_MEMIF_SEED={seed}")
    return random.Random(seed)


def test_peer_goes_away_ioforward(run):
    """16 peers in a row, killed with SIGKILL (two during the handshake) or ending cleanly,
    mid-traffic; Spillway (io-forward) keeps running and forwards each new peer's traffic."""
    rng = seeded()
    run.start_spillway(balance=False)
    plan = ["kill", "kill", "clean", "early", "kill", "clean", "kill", "kill",
            "clean", "kill", "early", "kill", "clean", "kill", "kill", "clean"]
    for i, how in enumerate(plan):
        mode = "io" if i % 2 == 0 else "txonly"
        rx0, tx0, _ = run.counters()
        peer = run.start_peer(mode)
        if how == "early":
            # Gone while it starts up or connects (the memif handshake on Spillway's side).
            # The random (seeded) moments here and below are what is tested, not waits.
            time.sleep(rng.uniform(0.1, 0.6))
            run.end_peer(peer, signal.SIGKILL)
            run.check_alive()
            continue
        # Traffic flows both ways with this peer: Spillway receives and forwards.
        run.wait_counters(f"cycle {i} ({mode}): traffic from the new peer",
                          lambda c: c[0] > rx0 + 1000 and c[1] > tx0)
        time.sleep(rng.uniform(0.0, 0.5))
        run.end_peer(peer, signal.SIGKILL if how == "kill" else signal.SIGINT)
        time.sleep(rng.uniform(0.0, 0.2))
        run.check_alive()

    # After all that, a peer still gets its packets forwarded, both ways, at speed.
    rx0, tx0, _ = run.counters()
    peer = run.start_peer("io")
    rx1, tx1, _ = run.wait_counters("forwarding after the peer came back",
                                    lambda c: c[0] > rx0 + 50_000 and c[1] > tx0 + 50_000)
    run.end_peer(peer, signal.SIGINT)
    final = run.stop_spillway()
    assert final["rx"] >= rx1 and final["tx"] >= tx1
    # The gate was closed by the memif control messages (the mitigation is in force).
    assert final.get("memif_gate_closings", 0) >= len(plan), final


def test_spillway_stops_under_traffic(run):
    """Spillway stopped (SIGTERM) while the peer sends, and once just as the peer is killed:
    a clean exit every time (exit code 0, the socket file removed), and a new Spillway accepts
    a new peer on the same socket."""
    rng = seeded()
    for i in range(3):
        run.start_spillway(balance=False)
        rx0 = run.counters()[0]
        peer = run.start_peer("txonly")
        run.wait_counters(f"round {i}: traffic", lambda c: c[0] > rx0 + 1000)
        if i == 2:
            peer.kill()
            time.sleep(rng.uniform(0.0, 0.01))  # a random (seeded) moment, just after the kill
        final = run.stop_spillway()
        assert final["rx"] > 1000
        assert not run.sock.exists(), "the memif socket file outlived Spillway"
        run.end_peer(peer, signal.SIGKILL)
        run.spw_log.unlink()


def test_restart_after_a_kill_reuses_the_stale_socket(run):
    """A Spillway killed with SIGKILL leaves its socket file; the next one removes it (nobody
    listens on it), starts, and forwards a new peer's traffic."""
    run.start_spillway(balance=False)
    run.spw.kill()
    run.spw.wait(timeout=30)
    assert run.sock.exists(), "a killed Spillway leaves its socket file"
    run.spw_log.unlink()
    run.start_spillway(balance=False)
    assert "removed a stale memif socket" in run.spw_output()
    peer = run.start_peer("txonly")
    run.wait_counters("traffic after the restart", lambda c: c[0] > 1000)
    final = run.stop_spillway()
    assert final["rx"] > 1000
    run.end_peer(peer, signal.SIGKILL)


def test_peer_goes_away_balancer(run):
    """Load-balance mode: UDP to the VIP from testpmd is decided and sent (IPIP) to backends
    whose MAC testpmd answered; the peer is killed or ends cleanly 6 times; the admin API
    answers while it is gone, and each new peer's traffic is forwarded again."""
    rng = seeded()
    run.start_spillway(balance=True)

    def forwarded() -> float:
        return sum(run.metrics().values("spillway_forwarded_packets_total").values())

    # First peer: answer Spillway's ARP requests for the backends (testpmd's icmpecho mode
    # replies to every ARP request with its own MAC), then send to the VIP.
    peer = run.start_peer("txonly", interactive=True)

    def cmd(line: str) -> None:
        peer.stdin.write(line + "\n")
        peer.stdin.flush()

    cmd("set fwd icmpecho")
    cmd("start")
    # Resolved once an ARP reply has come back (Spillway asks every 500 ms until answered).
    run.wait_counters("ARP replies from the peer", lambda c: c[0] >= 4, timeout=20)
    # ... and in the table the worker uses once published: every backend, at the peer's MAC.
    table: list = []

    def published() -> bool:
        run.check_alive()
        table[:] = json.loads(run.admin_get("/v1/neighbours"))["neighbours"]
        return {n["addr"] for n in table} >= set(BACKENDS)

    T.wait_until(published, lambda: f"every backend in the published neighbour table: {table}", timeout=10)
    cmd("stop")
    cmd("set fwd txonly")
    for i, sig in enumerate([signal.SIGKILL, signal.SIGINT, signal.SIGKILL, signal.SIGKILL,
                             signal.SIGINT, signal.SIGKILL]):
        f0 = forwarded()
        _, tx0, _ = run.counters()
        if i == 0:
            cmd("start")
        else:
            peer = run.start_peer("txonly")
        # Decided and handed to the driver (a new peer brings a new, empty TX ring).
        run.wait_counters(f"cycle {i}: forwarding to the new peer", lambda c: c[1] > tx0 + 500)
        assert forwarded() > f0 + 1000
        time.sleep(rng.uniform(0.0, 0.4))
        run.end_peer(peer, sig)
        run.check_alive()
        # The control plane is still there while no peer is connected.
        m = run.metrics()
        assert m.value("spillway_workers") == 1
    final = run.stop_spillway()
    assert final.get("memif_gate_closings", 0) >= 6, final
