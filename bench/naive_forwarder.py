"""A straightforward per-packet Python IPv4 forwarder: the baseline of bench/live.py.

    python -m bench.naive_forwarder --port IF0=MAC --port IF1=MAC \
        --route 198.51.100.0/24=IF0,NEXTHOP_MAC --route 203.0.113.0/24=IF1,NEXTHOP_MAC

What a programmer who knows sockets but not vectors would write, done fairly: one
AF_PACKET raw socket per port (bound to the interface, PACKET_IGNORE_OUTGOING so it never
sees its own transmissions), one ``poll()`` over them, and for each readable socket a
drain loop of non-blocking ``recv_into`` into one preallocated buffer.  Per packet:

* accept only frames addressed to the port's MAC, EtherType IPv4, version 4 with a sane
  header length and total length, a valid header checksum (RFC 1071 sum of the header
  words) and TTL > 1 (otherwise dropped and counted; no ICMP errors are generated);
* longest-prefix match over a short list of (network, mask) routes (sorted by prefix
  length, first match wins);
* TTL - 1 with the RFC 1624 incremental checksum update, destination MAC := the route's
  next hop, source MAC := the output port's MAC (slice assignments on the buffer);
* one ``send()`` of the frame on the output port's socket.

No ARP: the hosts need permanent neighbour entries for the ports' addresses, and the
routes name the next hop MAC.  SIGTERM/SIGINT stop it and print the counters as one
JSON line on stdout.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import select
import signal
import socket
import struct
import sys

SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23
ETH_P_ALL = 0x0003
FRAME_MAX = 2048
DRAIN_MAX = 256  # frames read from one socket before looking at the others again


def mac_bytes(text: str) -> bytes:
    b = bytes.fromhex(text.replace(":", "").replace("-", ""))
    if len(b) != 6:
        raise argparse.ArgumentTypeError(f"{text!r}: not a MAC address")
    return b


def open_port(ifname: str) -> socket.socket:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.bind((ifname, ETH_P_ALL))
    s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.setblocking(False)
    return s


def run(ports: list[tuple[str, bytes]], routes: list[tuple[str, str, bytes]]) -> dict[str, int]:
    names = [name for name, _ in ports]
    socks = [open_port(name) for name in names]
    macs = [mac for _, mac in ports]
    # (net, mask, output socket, frame header bytes 0..11 = next hop MAC + port MAC)
    table = []
    for prefix, ifname, nh_mac in routes:
        net = ipaddress.IPv4Network(prefix)
        out = names.index(ifname)
        table.append((net.prefixlen, int(net.network_address), int(net.netmask), out, nh_mac))
    table.sort(key=lambda r: -r[0])
    rt = [(net, mask, socks[out], nh + macs[out]) for _, net, mask, out, nh in table]

    counts = dict.fromkeys(
        ("rx", "tx", "not_for_us", "not_ip4", "bad_header", "bad_checksum", "ttl_expired",
         "no_route", "tx_error"), 0)  # fmt: skip
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    poller = select.poll()
    by_fd = {}
    for s, mac in zip(socks, macs, strict=True):
        poller.register(s.fileno(), select.POLLIN)
        by_fd[s.fileno()] = (s, mac)
    buf = bytearray(FRAME_MAX)
    view = memoryview(buf)
    unpack_from = struct.unpack_from
    while not stop:
        try:
            events = poller.poll(200)
        except InterruptedError:
            continue
        for fd, _ in events:
            s, my_mac = by_fd[fd]
            for _ in range(DRAIN_MAX):
                try:
                    n = s.recv_into(buf, FRAME_MAX, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    break
                counts["rx"] += 1
                if buf[0:6] != my_mac:
                    counts["not_for_us"] += 1
                    continue
                if n < 34 or buf[12] != 0x08 or buf[13] != 0x00:
                    counts["not_ip4"] += 1
                    continue
                vihl = buf[14]
                ihl = (vihl & 15) * 4
                total = (buf[16] << 8) | buf[17]
                if vihl >> 4 != 4 or ihl < 20 or total < ihl or 14 + total > n:
                    counts["bad_header"] += 1
                    continue
                c = sum(unpack_from(f"!{ihl // 2}H", buf, 14))
                c = (c & 0xFFFF) + (c >> 16)
                c = (c & 0xFFFF) + (c >> 16)
                if c != 0xFFFF:
                    counts["bad_checksum"] += 1
                    continue
                ttl = buf[22]
                if ttl <= 1:
                    counts["ttl_expired"] += 1
                    continue
                dst = (buf[30] << 24) | (buf[31] << 16) | (buf[32] << 8) | buf[33]
                for net, mask, out, l2 in rt:  # noqa: B007 - used after the break
                    if dst & mask == net:
                        break
                else:
                    counts["no_route"] += 1
                    continue
                # TTL - 1, RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'), m = TTL|protocol word
                old = (ttl << 8) | buf[23]
                hc = (buf[24] << 8) | buf[25]
                x = (~hc & 0xFFFF) + (~old & 0xFFFF) + (old - 0x100)
                x = (x & 0xFFFF) + (x >> 16)
                x = ~((x & 0xFFFF) + (x >> 16)) & 0xFFFF
                buf[22] = ttl - 1
                buf[24] = x >> 8
                buf[25] = x & 0xFF
                buf[0:12] = l2
                try:
                    out.send(view[:n])
                    counts["tx"] += 1
                except OSError:
                    counts["tx_error"] += 1
    for s in socks:
        s.close()
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--port",
        action="append",
        required=True,
        metavar="IFNAME=MAC",
        help="a router port and its MAC (frames to other MACs are ignored)",
    )
    ap.add_argument("--route", action="append", required=True, metavar="PREFIX=IFNAME,MAC",
                    help="IPv4 prefix, output port and next hop MAC")  # fmt: skip
    args = ap.parse_args(argv)
    ports = []
    for p in args.port:
        name, _, mac = p.partition("=")
        ports.append((name, mac_bytes(mac)))
    routes = []
    for r in args.route:
        prefix, _, rest = r.partition("=")
        ifname, _, mac = rest.partition(",")
        if ifname not in [n for n, _ in ports]:
            ap.error(f"route {r!r}: {ifname!r} is not a --port")
        routes.append((prefix, ifname, mac_bytes(mac)))
    counts = run(ports, routes)
    print(json.dumps(counts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
