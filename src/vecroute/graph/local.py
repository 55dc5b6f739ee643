"""ip4-local / ip6-local: packets addressed to the router itself.

Echo requests are answered in place (addresses swapped, checksums updated incrementally)
and the reply is routed through the lookup like any packet; neighbour discovery is handed
to the control plane; anything else is counted and dropped.
"""

import numpy as np
from numba import njit

from vecroute.graph import counters as C
from vecroute.graph.frames import drop, enqueue
from vecroute.graph.node_ids import IP4_LOOKUP, IP4_REASS, IP6_LOOKUP, IP6_REASS, PUNT
from vecroute.graph.state import IF6_LL, IFS_PUNTS
from vecroute.packet.batch import (
    F_FRAG,
    F_IP6,
    F_LOCAL_ORIGIN,
    M_ERR,
    M_FLAGS,
    M_L3,
    M_L4,
    M_LEN,
    M_OFF,
    M_PROTO,
    M_RX,
)
from vecroute.packet.checksum import checksum, fold, incremental_update, pseudo_header6, sum_bytes
from vecroute.packet.headers import (
    ICMP4_ECHO_REPLY,
    ICMP4_ECHO_REQUEST,
    ICMP6_ECHO_REPLY,
    ICMP6_ECHO_REQUEST,
    PROTO_ICMP,
    PROTO_ICMPV6,
    rd16,
    rd32,
    wr16,
)

DEFAULT_TTL = 64


@njit(cache=True, inline="always")
def punt(frames, frame_n, meta, dp, i, reason) -> None:
    meta[M_ERR, i] = reason
    dp.if_stats[meta[M_RX, i], IFS_PUNTS] += 1
    enqueue(frames, frame_n, meta, PUNT, i)


@njit(cache=True)
def ip4_local(work, k, buf, meta, frames, frame_n, dp) -> None:
    for j in range(k):
        i = work[j]
        if meta[M_FLAGS, i] & F_FRAG:  # reassembled first (graph/ip_reass.py)
            enqueue(frames, frame_n, meta, IP4_REASS, i)
            continue
        l3 = meta[M_L3, i]
        l4 = meta[M_L4, i]
        end = meta[M_OFF, i] + meta[M_LEN, i]
        dst = rd32(buf, l3 + 16)
        if (meta[M_PROTO, i] != PROTO_ICMP or meta[M_FLAGS, i] & F_FRAG or l4 + 8 > end
                or buf[l4] != ICMP4_ECHO_REQUEST or buf[l4 + 1] != 0
                or dst == np.uint32(0xFFFFFFFF)):
            drop(frames, frame_n, meta, i, C.C_LOCAL_UNHANDLED)
            continue
        if fold(sum_bytes(buf, l4, end - l4, np.uint64(0))) != 0xFFFF:
            drop(frames, frame_n, meta, i, C.C_LOCAL_BAD_CHECKSUM)
            continue
        # swap addresses: the header checksum does not change
        for b in range(4):
            t = buf[l3 + 12 + b]
            buf[l3 + 12 + b] = buf[l3 + 16 + b]
            buf[l3 + 16 + b] = t
        old = rd16(buf, l3 + 8)
        new = np.uint32((DEFAULT_TTL << 8) | buf[l3 + 9])
        wr16(buf, l3 + 8, new)
        wr16(buf, l3 + 10, incremental_update(rd16(buf, l3 + 10), old, new))
        buf[l4] = ICMP4_ECHO_REPLY
        # a full sum, not RFC 1624: a reply can be all zeros (id 0, seq 0, no data), whose
        # checksum is 0xFFFF, but the incremental update yields 0x0000 there (no pseudo
        # header keeps the ICMPv4 sum away from zero, unlike ICMPv6)
        wr16(buf, l4 + 2, 0)
        wr16(buf, l4 + 2, checksum(buf, l4, end - l4, np.uint64(0)))
        meta[M_FLAGS, i] = F_LOCAL_ORIGIN
        dp.counters[C.C_ECHO_REPLY_SENT] += 1
        enqueue(frames, frame_n, meta, IP4_LOOKUP, i)


@njit(cache=True)
def ip6_local(work, k, buf, meta, frames, frame_n, dp) -> None:
    for j in range(k):
        i = work[j]
        if meta[M_FLAGS, i] & F_FRAG:  # reassembled first (graph/ip_reass.py)
            enqueue(frames, frame_n, meta, IP6_REASS, i)
            continue
        l3 = meta[M_L3, i]
        l4 = meta[M_L4, i]
        end = meta[M_OFF, i] + meta[M_LEN, i]
        if meta[M_PROTO, i] != PROTO_ICMPV6 or meta[M_FLAGS, i] & F_FRAG or l4 + 8 > end:
            drop(frames, frame_n, meta, i, C.C_LOCAL_UNHANDLED)
            continue
        t = buf[l4]
        if t >= 133 and t <= 137:
            punt(frames, frame_n, meta, dp, i, C.C_ND_PUNT)
            continue
        if t != ICMP6_ECHO_REQUEST or buf[l4 + 1] != 0:
            drop(frames, frame_n, meta, i, C.C_LOCAL_UNHANDLED)
            continue
        acc = pseudo_header6(buf, l3, PROTO_ICMPV6, end - l4)
        if fold(sum_bytes(buf, l4, end - l4, acc)) != 0xFFFF:
            drop(frames, frame_n, meta, i, C.C_LOCAL_BAD_CHECKSUM)
            continue
        mcast = buf[l3 + 24] == 0xFF
        for b in range(16):
            t2 = buf[l3 + 8 + b]
            buf[l3 + 8 + b] = buf[l3 + 24 + b]
            buf[l3 + 24 + b] = t2
        buf[l3 + 7] = DEFAULT_TTL
        buf[l4] = ICMP6_ECHO_REPLY
        if mcast:
            # a reply never comes from a multicast address: answer from our link-local
            rx = meta[M_RX, i]
            for b in range(16):
                buf[l3 + 8 + b] = dp.if_ip6[rx, IF6_LL, b]
            wr16(buf, l4 + 2, 0)
            wr16(buf, l4 + 2, checksum(buf, l4, end - l4,
                                       pseudo_header6(buf, l3, PROTO_ICMPV6, end - l4)))
        else:
            wr16(buf, l4 + 2, incremental_update(rd16(buf, l4 + 2),
                                                 np.uint32(ICMP6_ECHO_REQUEST << 8),
                                                 np.uint32(ICMP6_ECHO_REPLY << 8)))
        meta[M_FLAGS, i] = F_LOCAL_ORIGIN | F_IP6
        dp.counters[C.C_ECHO_REPLY_SENT] += 1
        enqueue(frames, frame_n, meta, IP6_LOOKUP, i)


