"""ip4-rewrite / ip6-rewrite: TTL, MTU, neighbour state, then the precomputed L2 header.

RFC 1812 order: TTL check, MTU check (DF set: frag-needed; ip6: packet-too-big), TTL
decrement with an RFC 1624 incremental checksum update, and the adjacency's rewrite
bytes (dst MAC, src MAC, ethertype) copied once in front of the L3 header. An adjacency
whose neighbour is not resolved sends the packet to neighbor-request instead.
"""

import numpy as np
from numba import njit

from vecroute.graph import counters as C
from vecroute.graph.frames import drop, enqueue, icmp_error
from vecroute.graph.node_ids import INTERFACE_OUTPUT, IP4_FRAG, NEIGHBOR_REQUEST
from vecroute.graph.state import A_IF, A_RWLEN, A_TYPE, ADJ_REWRITE, I_MTU
from vecroute.packet.batch import (
    F_HLIM_DONE,
    F_LOCAL_ORIGIN,
    F_SRC_LINK_LOCAL,
    M_ADJ,
    M_FLAGS,
    M_L3,
    M_LEN,
    M_OFF,
    M_TX,
)
from vecroute.packet.checksum import incremental_update
from vecroute.packet.headers import (
    ICMP4_DEST_UNREACH,
    ICMP4_FRAG_NEEDED,
    ICMP4_TIME_EXCEEDED,
    ICMP6_PACKET_TOO_BIG,
    ICMP6_TIME_EXCEEDED,
    rd16,
    wr16,
)
from vecroute.packet.intrinsics import memcpy


@njit(cache=True, inline="always")
def apply_rewrite(buf, meta, dp, i, a) -> None:
    """Prepend the adjacency's L2 header: one copy of 14 bytes into the headroom."""
    l3 = meta[M_L3, i]
    n = dp.adj[a, A_RWLEN]
    o = l3 - n
    memcpy(buf, o, dp.adj_rw[a], 0, n)
    meta[M_LEN, i] = meta[M_LEN, i] - (o - meta[M_OFF, i])
    meta[M_OFF, i] = o
    meta[M_TX, i] = dp.adj[a, A_IF]


@njit(cache=True)
def ip4_rewrite(work, k, buf, meta, frames, frame_n, dp) -> None:
    fwd = 0
    for j in range(k):
        i = work[j]
        a = meta[M_ADJ, i]
        l3 = meta[M_L3, i]
        local = meta[M_FLAGS, i] & F_LOCAL_ORIGIN
        keep_ttl = meta[M_FLAGS, i] & (F_LOCAL_ORIGIN | F_HLIM_DONE)
        ttl = np.int32(buf[l3 + 8])
        if not keep_ttl and ttl <= 1:
            icmp_error(frames, frame_n, meta, i, False, C.C_TTL_EXPIRED,
                       ICMP4_TIME_EXCEEDED, 0, 0)
            continue
        iplen = meta[M_LEN, i] - (l3 - meta[M_OFF, i])
        mtu = dp.ifc[dp.adj[a, A_IF], I_MTU]
        need_frag = iplen > mtu
        if need_frag and rd16(buf, l3 + 6) & 0x4000:
            icmp_error(frames, frame_n, meta, i, False, C.C_MTU_EXCEEDED,
                       ICMP4_DEST_UNREACH, ICMP4_FRAG_NEEDED, mtu)
            continue
        if dp.adj[a, A_TYPE] != ADJ_REWRITE:
            enqueue(frames, frame_n, meta, NEIGHBOR_REQUEST, i)
            continue
        if not keep_ttl:
            old = rd16(buf, l3 + 8)
            new = np.uint32(old - np.uint32(0x100))
            wr16(buf, l3 + 8, new)
            wr16(buf, l3 + 10, incremental_update(rd16(buf, l3 + 10), old, new))
        if not local:
            fwd += 1
        if need_frag:
            enqueue(frames, frame_n, meta, IP4_FRAG, i)
        else:
            apply_rewrite(buf, meta, dp, i, a)
            enqueue(frames, frame_n, meta, INTERFACE_OUTPUT, i)
    dp.counters[C.C_IP4_FORWARDED] += fwd


@njit(cache=True)
def ip6_rewrite(work, k, buf, meta, frames, frame_n, dp) -> None:
    fwd = 0
    for j in range(k):
        i = work[j]
        a = meta[M_ADJ, i]
        l3 = meta[M_L3, i]
        flags = meta[M_FLAGS, i]
        local = flags & F_LOCAL_ORIGIN
        keep_hlim = flags & (F_LOCAL_ORIGIN | F_HLIM_DONE)
        if not local and flags & F_SRC_LINK_LOCAL:
            drop(frames, frame_n, meta, i, C.C_IP6_LINK_LOCAL)
            continue
        if not keep_hlim and buf[l3 + 7] <= 1:
            icmp_error(frames, frame_n, meta, i, True, C.C_TTL_EXPIRED,
                       ICMP6_TIME_EXCEEDED, 0, 0)
            continue
        iplen = meta[M_LEN, i] - (l3 - meta[M_OFF, i])
        mtu = dp.ifc[dp.adj[a, A_IF], I_MTU]
        if iplen > mtu:
            icmp_error(frames, frame_n, meta, i, True, C.C_MTU_EXCEEDED,
                       ICMP6_PACKET_TOO_BIG, 0, mtu)
            continue
        if dp.adj[a, A_TYPE] != ADJ_REWRITE:
            enqueue(frames, frame_n, meta, NEIGHBOR_REQUEST, i)
            continue
        if not keep_hlim:
            buf[l3 + 7] -= 1
        if not local:
            fwd += 1
        apply_rewrite(buf, meta, dp, i, a)
        enqueue(frames, frame_n, meta, INTERFACE_OUTPUT, i)
    dp.counters[C.C_IP6_FORWARDED] += fwd


