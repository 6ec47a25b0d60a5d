#!/usr/bin/env python3
"""Tiny backend services for Spillway end-to-end tests.

* HTTP (dual-stack, one thread per connection, daemon threads) on
  ``--http-port``: any GET/HEAD/POST answers 200 with the body
  ``<name> <client-ip>:<client-port>\\n`` (client-ip without ``::ffff:`` for
  IPv4; for IPv6 split with ``rsplit(":", 1)``). Header ``X-Backend: <name>``.
  ``GET /bytes/<N>`` pads the body to N bytes (for large DSR replies).
* UDP on ``--udp-port`` (IPv4 and IPv6 sockets): each datagram is answered
  with ``<name> len=<N> sha256=<hex>`` -- a short reply even for a large
  (fragmented) datagram. The reply is sent *from the address the datagram was
  sent to* (IP_PKTINFO / IPV6_PKTINFO), i.e. from the VIP, not from the
  backend's own address.
* TCP line echo (dual-stack, one thread per connection, daemon threads) on
  ``--echo-port`` (default 7000): for each line received the connection gets
  ``<name> <line>\n`` back, for as long as it stays open -- for long-lived
  connections whose backend must never change (``tests/e2e/fleet.py``
  ``LongLived``).

Writes ``--ready-file`` once every socket listens. Exits on SIGTERM/SIGINT.
Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import ipaddress
import os
import signal
import socket
import socketserver
import struct
import sys
import threading

IP_PKTINFO = 8  # <linux/in.h>; not exported by Python's socket module
IPV6_RECVPKTINFO = getattr(socket, "IPV6_RECVPKTINFO", 49)
IPV6_PKTINFO = getattr(socket, "IPV6_PKTINFO", 50)
MAX_PAD = 16 << 20


def client_ip(addr: str) -> str:
    try:
        ip = ipaddress.ip_address(addr.split("%", 1)[0])
    except ValueError:
        return addr
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        return str(ip.ipv4_mapped)
    return str(ip)


def make_handler(name: str):
    class Handler(http.server.BaseHTTPRequestHandler):
        server_version = "spillway-backend"
        sys_version = ""
        timeout = 10  # a stuck client must not hold a thread forever

        def _answer(self, send_body: bool) -> None:
            body = f"{name} {client_ip(self.client_address[0])}:{self.client_address[1]}\n".encode()
            parts = self.path.split("?", 1)[0].strip("/").split("/")
            if len(parts) == 2 and parts[0] == "bytes" and parts[1].isdigit():
                want = min(int(parts[1]), MAX_PAD)
                if want > len(body):
                    body = body + b"x" * (want - len(body) - 1) + b"\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Backend", name)
            self.end_headers()
            if send_body:
                self.wfile.write(body)

        def do_GET(self):  # noqa: N802 (http.server naming)
            self._answer(True)

        def do_HEAD(self):  # noqa: N802
            self._answer(False)

        def do_POST(self):  # noqa: N802
            try:
                n = min(int(self.headers.get("Content-Length", "0")), MAX_PAD)
                if n > 0:
                    self.rfile.read(n)
            except (ValueError, OSError):
                pass
            self._answer(True)

        def log_message(self, *args):  # quiet
            pass

    return Handler


class DualStackHTTPServer(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()

    def handle_error(self, request, client_address):  # never die, never spam
        pass


def udp_loop(sock: socket.socket, family: int, name: str) -> None:
    while True:
        try:
            data, anc, _flags, peer = sock.recvmsg(65535, socket.CMSG_SPACE(64))
        except InterruptedError:
            continue
        except OSError:
            if sock.fileno() < 0:
                return
            continue
        reply = f"{name} len={len(data)} sha256={hashlib.sha256(data).hexdigest()}".encode()
        cmsgs = []
        for level, ctype, cdata in anc:
            if family == socket.AF_INET and level == socket.IPPROTO_IP and ctype == IP_PKTINFO and len(cdata) >= 12:
                # struct in_pktinfo { int ifindex; in_addr spec_dst; in_addr addr; }: reply from addr.
                dst = cdata[8:12]
                cmsgs.append((socket.IPPROTO_IP, IP_PKTINFO, struct.pack("i4s4s", 0, dst, b"\0" * 4)))
            elif family == socket.AF_INET6 and level == socket.IPPROTO_IPV6 and ctype == IPV6_PKTINFO and len(cdata) >= 20:
                # struct in6_pktinfo { in6_addr addr; unsigned ifindex; }
                cmsgs.append((socket.IPPROTO_IPV6, IPV6_PKTINFO, cdata[:16] + struct.pack("I", 0)))
        try:
            sock.sendmsg([reply], cmsgs, 0, peer)
        except OSError:
            try:
                sock.sendto(reply, peer)
            except OSError:
                pass


def start_udp(port: int, name: str) -> list[socket.socket]:
    socks = []
    s4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s4.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s4.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
    s4.bind(("0.0.0.0", port))
    socks.append((s4, socket.AF_INET))
    s6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s6.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s6.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVPKTINFO, 1)
    s6.bind(("::", port))
    socks.append((s6, socket.AF_INET6))
    for s, fam in socks:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        threading.Thread(target=udp_loop, args=(s, fam, name), daemon=True, name=f"udp{fam}").start()
    return [s for s, _ in socks]


class EchoHandler(socketserver.StreamRequestHandler):
    """``<name> <line>\n`` for every line, until the peer closes (no idle timeout:
    the connections are meant to live long)."""

    name = "?"

    def handle(self):
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        prefix = self.name.encode() + b" "
        try:
            for line in self.rfile:
                self.wfile.write(prefix + line.rstrip(b"\r\n") + b"\n")
        except OSError:
            pass


class DualStackTCPServer(socketserver.ThreadingTCPServer):
    address_family = socket.AF_INET6
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()

    def handle_error(self, request, client_address):  # never die, never spam
        pass


def start_echo(port: int, name: str) -> DualStackTCPServer:
    handler = type("Echo", (EchoHandler,), {"name": name})
    srv = DualStackTCPServer(("::", port), handler)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True, name="echo").start()
    return srv


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--name", required=True, help="backend name put into every answer")
    ap.add_argument("--http-port", type=int, default=80, help="0 disables (default 80)")
    ap.add_argument("--udp-port", type=int, default=5353, help="0 disables (default 5353)")
    ap.add_argument("--echo-port", type=int, default=7000, help="TCP line echo, 0 disables (default 7000)")
    ap.add_argument("--ready-file", help="written once all sockets listen")
    args = ap.parse_args(argv)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    try:
        if args.udp_port:
            start_udp(args.udp_port, args.name)
        if args.http_port:
            httpd = DualStackHTTPServer(("::", args.http_port), make_handler(args.name))
            threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True, name="http").start()
        if args.echo_port:
            start_echo(args.echo_port, args.name)
    except OSError as e:
        print(f"backend_server {args.name}: {e}", file=sys.stderr)
        return 1

    if args.ready_file:
        with open(args.ready_file + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(args.ready_file + ".tmp", args.ready_file)
    while not stop.wait(0.5):
        pass
    return 0  # daemon threads die with the process; the kernel closes the sockets


if __name__ == "__main__":
    sys.exit(main())
