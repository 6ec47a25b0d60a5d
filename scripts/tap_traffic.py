#!/usr/bin/env python3
"""Sends Ethernet frames into a tap interface and checks that they come back byte for byte.

Frames use the local experimental ethertype 0x88b5 and a unique payload, so the kernel's own
traffic on the interface (IPv6 ND/MLD) is ignored; frames this socket sent itself are ignored
too (PACKET_OUTGOING).

  tap_traffic.py IFACE --count N             send N frames, wait for all echoes (exit 1 if not)
  tap_traffic.py IFACE --seconds S --rate R  send R frames/s for S seconds, report echoes
"""

import argparse
import os
import socket
import sys
import time

ETH_P = 0x88B5


def frame(i):
    dst = bytes.fromhex("02aabbccddee")
    src = bytes.fromhex("02112233") + (i & 0xFFFF).to_bytes(2, "big")
    payload = b"spillway-tap-%08d-" % i + os.urandom(16) + bytes(range(64))
    return dst + src + ETH_P.to_bytes(2, "big") + payload


def wait_iface(iface, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with open("/sys/class/net/%s/operstate" % iface) as f:
                if f.read().strip() in ("up", "unknown"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    sys.exit("tap_traffic: interface %s is not up after %ss" % (iface, timeout))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("iface")
    ap.add_argument("--count", type=int)
    ap.add_argument("--seconds", type=float)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--timeout", type=float, default=15.0)
    args = ap.parse_args()

    wait_iface(args.iface, args.timeout)
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P))
    s.bind((args.iface, ETH_P))
    s.setblocking(False)
    outstanding, echoed, unexpected, sent = set(), 0, 0, 0

    def drain():
        nonlocal echoed, unexpected
        while True:
            try:
                data, addr = s.recvfrom(65535)
            except BlockingIOError:
                return
            if addr[2] == socket.PACKET_OUTGOING:
                continue
            if data in outstanding:
                outstanding.discard(data)
                echoed += 1
            else:
                unexpected += 1

    if args.count is not None:
        for i in range(args.count):
            f = frame(i)
            outstanding.add(f)
            s.send(f)
            sent += 1
        deadline = time.time() + args.timeout
        while outstanding and time.time() < deadline:
            drain()
            time.sleep(0.01)
    else:
        start = time.time()
        end = start + (args.seconds or 5.0)
        try:
            while time.time() < end:
                target = int((time.time() - start) * args.rate)
                while sent < target:
                    f = frame(sent)
                    outstanding.add(f)
                    s.send(f)
                    sent += 1
                drain()
                time.sleep(0.005)
            time.sleep(0.2)
            drain()
        except KeyboardInterrupt:
            drain()
    print("tap_traffic: sent %d echoed %d/%d unexpected=%d" % (sent, echoed, sent, unexpected))
    sys.exit(0 if echoed == sent else 1)


if __name__ == "__main__":
    main()
