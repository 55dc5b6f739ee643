"""The control plane's ends of the worker rings: decode punts, encode injections.

A worker publishes fixed records (vecroute.io.channel); here they become what the
neighbour table understands — ("arp", ifx, frame), ("nd", ifx, frame) and
("pending", ifx, next hop, Pending) — and what it sends back becomes inject records:
frames to transmit as they are, packets to look up again, packets to answer with an
ICMP error. The worker that punted a packet gets it back (its firewall holds the flow's
state).
"""

from __future__ import annotations

import ipaddress
from typing import NamedTuple

from vecroute.graph import counters as C
from vecroute.io.channel import (
    INJ_ERROR,
    INJ_FRAME,
    INJ_LOOKUP,
    PH_FIB,
    PH_FLAGS,
    PH_NH0,
    PH_NH1,
    PH_NH_FAMILY,
    PH_NH_IF,
    PH_REASON,
    PH_RX,
    Ring,
)
from vecroute.packet.batch import F_INJ_L2, F_IP6, F_REINJECTED
from vecroute.packet.headers import ICMP4_DEST_UNREACH, ICMP4_HOST_UNREACH, ICMP6_DEST_UNREACH


class Pending(NamedTuple):
    """A packet waiting for a neighbour: its L3 bytes and what the lookup needs again."""

    worker: int
    rx: int
    family: int
    l3: bytes
    fib: int
    flags: int


class IcmpError(NamedTuple):
    """Re-inject into icmp4-error / icmp6-error instead of the lookup: the error node
    answers the packet's source (quote, source address, suppression, rate limit) and counts
    ``reason`` as the packet's drop, exactly as for an error raised inside the graph."""

    reason: int  # counter id (a drop)
    icmp4: tuple[int, int]  # (type, code) for an IPv4 packet
    icmp6: tuple[int, int]  # (type, code) for an IPv6 packet


ICMP6_ADDRESS_UNREACHABLE = 3  # RFC 4443 3.1
# address resolution failed: RFC 4861 7.2.2; IPv4 host unreachable, as Linux answers
ADDRESS_UNREACHABLE = IcmpError(
    C.C_NEIGHBOR_FAILED,
    (ICMP4_DEST_UNREACH, ICMP4_HOST_UNREACH),
    (ICMP6_DEST_UNREACH, ICMP6_ADDRESS_UNREACHABLE),
)


def _next_hop(h) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if int(h[PH_NH_FAMILY]) == 6:
        hi, lo = int(h[PH_NH0]) & (2**64 - 1), int(h[PH_NH1]) & (2**64 - 1)
        return ipaddress.IPv6Address((hi << 64) | lo)
    return ipaddress.IPv4Address(int(h[PH_NH0]) & 0xFFFFFFFF)


def decode_punts(worker: int, records: list) -> list[tuple]:
    """Punt records (Ring.pop) as the neighbour table's punt tuples."""
    out: list[tuple] = []
    for h, data in records:
        reason, rx = int(h[PH_REASON]), int(h[PH_RX])
        if reason == C.C_ARP_PUNT:
            out.append(("arp", rx, data))
        elif reason == C.C_ND_PUNT:
            out.append(("nd", rx, data))
        elif reason == C.C_HOST_PUNT:  # linux-cp: for the port's mirror, as received
            out.append(("host", rx, data))
        elif reason == C.C_NEIGHBOR_QUEUED:
            flags = int(h[PH_FLAGS])
            pkt = Pending(worker, rx, 6 if flags & F_IP6 else 4, data, int(h[PH_FIB]), flags)
            out.append(("pending", int(h[PH_NH_IF]), str(_next_hop(h)), pkt))
    return out


def inject_frame(ring: Ring, port: int, frame: bytes, linux: bool = False) -> bool:
    """An Ethernet frame to send on ``port`` as it is (False: ring full, counted).
    ``linux``: a frame Linux sent on a mirror (linux-cp). It passes fw-out (F_INJ_L2; the
    control plane's own ARP/ND answers do not), and it is refused, uncounted (the caller
    counts), unless more than a quarter of the ring stays free: that room is kept for the
    control plane's answers and the packets that waited for a neighbour, so Linux,
    however busy, cannot crowd them out."""
    if linux and ring.capacity - len(ring) <= ring.capacity // 4:
        return False
    flags = F_INJ_L2 if linux else 0
    return ring.push((INJ_FRAME, port, len(frame), 0, flags, 0, 0, 0, port), frame)


def inject_packets(ring: Ring, packets: list[Pending], error: IcmpError | None) -> int:
    """Packets to look up again (``error`` None) or to answer with ``error``; returns
    how many the ring refused (counted in its R_DROPS). A packet sent back to the lookup
    is marked F_REINJECTED: it is re-injected at most once (NeighborTable.resolve)."""
    refused = 0
    for p in packets:
        if error is None:
            hdr = (INJ_LOOKUP, p.rx, len(p.l3), p.fib, p.flags | F_REINJECTED, p.family)
        else:
            typ, code = error.icmp4 if p.family == 4 else error.icmp6
            hdr = (INJ_ERROR, p.rx, len(p.l3), p.fib, p.flags, p.family, error.reason,
                   (typ << 8) | code)
        if not ring.push(hdr, p.l3):
            refused += 1
    return refused
