"""ip4-input: RFC 1812 5.2.2 validation, then to the lookup.

Checks version, IHL, total length against the frame (Ethernet padding is trimmed), the
header checksum (full sum), martian sources and multicast destinations; records the
upper-layer offset and fragment flags for later nodes.
"""

import numpy as np
from numba import njit

from vecroute.fib.layout import I_HOST
from vecroute.graph import counters as C
from vecroute.graph.frames import drop, enqueue, host_punt
from vecroute.graph.registry import NodeDecl
from vecroute.graph.state import FW_RUN_IN, OPT_FW
from vecroute.packet.batch import (
    F_FRAG,
    F_FRAG_NONFIRST,
    F_ICMP_ERROR,
    F_LINK_LOCAL,
    M_FLAGS,
    M_L3,
    M_L4,
    M_LEN,
    M_OFF,
    M_PROTO,
    M_RX,
)
from vecroute.packet.checksum import fold, sum_bytes
from vecroute.packet.headers import IP4_HLEN, PROTO_ICMP, rd16, rd32
from vecroute.packet.node_ids import FW_IN, IP4_LOCAL, IP4_LOOKUP

NODES = (
    NodeDecl(
        "ip4-input",
        next=("fw-in", "ip4-local", "ip4-lookup", "gso-segment", "error-drop", "punt"),
        counters=(
            "ip4-too-short", "ip4-bad-version", "ip4-bad-ihl", "ip4-bad-length", "ip4-bad-checksum",
            "martian-source", "ip4-dst-multicast", "martian-destination", "host-punt",
        ),
    ),
)


@njit(cache=True, inline="always")
def is_martian4(src: np.uint32) -> bool:
    """0/8, 127/8, 224/4 (multicast), 240/4 (reserved, incl. 255.255.255.255)."""
    top = src >> np.uint32(24)
    return top == 0 or top == 127 or top >= 224


@njit(cache=True, inline="always")
def is_link_local4(a: np.uint32) -> bool:
    """169.254/16 (RFC 3927)."""
    return (a >> np.uint32(16)) == np.uint32(0xA9FE)


@njit(cache=True, inline="always")
def is_icmp4_error_type(t: int) -> bool:
    """RFC 792 errors, and (as Linux assumes) any type past 18 that nobody defined here."""
    return t == 3 or t == 4 or t == 5 or t == 11 or t == 12 or t > 18


@njit(cache=True, _nrt=True)
def ip4_input(work, k, buf, meta, frames, frame_n, dp) -> None:
    routed = FW_IN if dp.opts[OPT_FW] & FW_RUN_IN else IP4_LOOKUP  # the input firewall
    for j in range(k):
        i = work[j]
        o = meta[M_OFF, i]
        l3 = meta[M_L3, i]
        avail = meta[M_LEN, i] - (l3 - o)
        if avail < IP4_HLEN:
            drop(frames, frame_n, meta, i, C.C_IP4_TOO_SHORT)
            continue
        b0 = buf[l3]
        if (b0 >> 4) != 4:
            drop(frames, frame_n, meta, i, C.C_IP4_BAD_VERSION)
            continue
        ihl = np.int32(b0 & 15) * 4
        if ihl < IP4_HLEN or ihl > avail:
            drop(frames, frame_n, meta, i, C.C_IP4_BAD_IHL)
            continue
        tot = np.int32(rd16(buf, l3 + 2))
        if tot < ihl or tot > avail:
            drop(frames, frame_n, meta, i, C.C_IP4_BAD_LENGTH)
            continue
        if fold(sum_bytes(buf, l3, ihl, np.uint64(0))) != 0xFFFF:
            drop(frames, frame_n, meta, i, C.C_IP4_BAD_CHECKSUM)
            continue
        meta[M_LEN, i] = (l3 - o) + tot  # trim Ethernet padding
        src = rd32(buf, l3 + 12)
        if is_martian4(src):
            drop(frames, frame_n, meta, i, C.C_MARTIAN_SOURCE)
            continue
        dst = rd32(buf, l3 + 16)
        top = dst >> np.uint32(24)
        if top == 0 or top == 127 or (top >= 240 and dst != np.uint32(0xFFFFFFFF)):
            drop(frames, frame_n, meta, i, C.C_MARTIAN_DESTINATION)  # RFC 1812 5.3.7
            continue
        flags = meta[M_FLAGS, i]
        if is_link_local4(src) or is_link_local4(dst):
            flags |= F_LINK_LOCAL  # RFC 3927 2.7: delivered if ours, never forwarded
        fo = rd16(buf, l3 + 6)
        if fo & 0x3FFF:
            flags |= F_FRAG
            if fo & 0x1FFF:
                flags |= F_FRAG_NONFIRST
        proto = np.int32(buf[l3 + 9])
        l4 = l3 + ihl
        meta[M_PROTO, i] = proto
        meta[M_L4, i] = l4
        if proto == PROTO_ICMP and not (flags & F_FRAG_NONFIRST) and l4 < l3 + tot:
            if is_icmp4_error_type(buf[l4]):
                flags |= F_ICMP_ERROR
        meta[M_FLAGS, i] = flags
        if dst == np.uint32(0xFFFFFFFF):
            enqueue(frames, frame_n, meta, IP4_LOCAL, i)  # limited broadcast: never routed
        elif (dst >> np.uint32(28)) == 14:
            if (dst >> np.uint32(8)) == np.uint32(0xE00000) and dp.ifc[meta[M_RX, i], I_HOST]:
                host_punt(frames, frame_n, meta, dp, i)  # 224.0.0.0/24: OSPF, VRRP, ...
            else:
                drop(frames, frame_n, meta, i, C.C_IP4_DST_MULTICAST)
        else:
            enqueue(frames, frame_n, meta, routed, i)
