"""srv6-encap: H.Encaps / H.Encaps.Red (RFC 8986 5.1, 5.2) into the batch headroom.

The outer IPv6 header and SRH of each segment list are precomputed by the control plane
(like an adjacency's L2 rewrite): encapsulating is one copy of that header in front of the
packet plus a few patched fields — payload length, next header (41 or 4), hop limit and
traffic class from the inner packet, flow label from the inner flow hash (RFC 6437). No
copy of the packet body unless the slot lacks headroom (the seed: "expand the head only
if necessary"). The route to the first segment is cached per segment list and revalidated
against the FIB generation (the seed's dst_cache): the inner packet had its one lookup, the
outer gets none.
"""

import numpy as np
from numba import njit

from vecroute.fib.lpm import lpm6_lookup
from vecroute.graph import counters as C
from vecroute.graph.flow_hash import flow_hash4, flow_hash6
from vecroute.graph.frames import drop, icmp_error
from vecroute.graph.lookup import pick_adjacency, to_adjacency
from vecroute.graph.state import (
    A_IF,
    A_NH4,
    I_MTU,
    LIST_FIB,
    LIST_HDRLEN,
    LIST_SRH,
    OPT_FIB_GEN,
    POL_BN,
    POL_BSTART,
)
from vecroute.packet.batch import (
    F_HLIM_DONE,
    F_IP6,
    F_LOCAL_ORIGIN,
    M_ADJ,
    M_FLAGS,
    M_HASH,
    M_L3,
    M_L4,
    M_LEN,
    M_OFF,
    M_PROTO,
    SLOT,
)
from vecroute.packet.checksum import incremental_update
from vecroute.packet.headers import (
    ICMP4_DEST_UNREACH,
    ICMP4_FRAG_NEEDED,
    ICMP4_TIME_EXCEEDED,
    ICMP6_PACKET_TOO_BIG,
    ICMP6_TIME_EXCEEDED,
    PROTO_IPIP,
    PROTO_IPV6,
    PROTO_ROUTING,
    copy_bytes,
    rd16,
    rd64,
    wr16,
    wr32,
)


@njit(cache=True, inline="always")
def first_hop(dp, lst, h, gen) -> int:
    """The cached load-balance of the route to the list's first segment -> an adjacency."""
    if dp.sr_cache[lst, 0] != gen:
        fib = dp.sr_list[lst, LIST_FIB]
        v = -1
        if 0 <= fib < dp.fib6_roots.shape[0]:
            v = lpm6_lookup(dp.fib6_roots, dp.fib6_groups, fib, rd64(dp.sr_hdr[lst], 24),
                            rd64(dp.sr_hdr[lst], 32))
        dp.sr_cache[lst, 0] = gen
        dp.sr_cache[lst, 1] = v
    v = dp.sr_cache[lst, 1]
    if v < 0:
        return -1
    return pick_adjacency(dp, v, h)


@njit(cache=True)
def srv6_encap(work, k, buf, meta, frames, frame_n, dp) -> None:
    gen = dp.opts[OPT_FIB_GEN]
    done = 0
    for j in range(k):
        i = work[j]
        pol = dp.adj[meta[M_ADJ, i], A_NH4]
        flags = meta[M_FLAGS, i]
        ip6 = (flags & F_IP6) != 0
        l3 = meta[M_L3, i]
        iplen = meta[M_LEN, i] - (l3 - meta[M_OFF, i])
        if not (flags & (F_LOCAL_ORIGIN | F_HLIM_DONE)):  # RFC 8986 5.1 S05: inner TTL
            if (buf[l3 + 7] if ip6 else buf[l3 + 8]) <= 1:
                icmp_error(frames, frame_n, meta, i, ip6, C.C_TTL_EXPIRED,
                           ICMP6_TIME_EXCEEDED if ip6 else ICMP4_TIME_EXCEEDED, 0, 0)
                continue
        nb = dp.sr_pol[pol, POL_BN]
        if nb == 0:
            drop(frames, frame_n, meta, i, C.C_SRV6_POLICY_EMPTY)
            continue
        h = np.uint32(meta[M_HASH, i])
        if h == 0:
            h = flow_hash6(buf, meta, i) if ip6 else flow_hash4(buf, meta, i)
            meta[M_HASH, i] = np.int32(h)
        lst = dp.sr_bucket[dp.sr_pol[pol, POL_BSTART] + np.int64(h % np.uint32(nb))]
        a = first_hop(dp, lst, h, gen)
        if a < 0:
            drop(frames, frame_n, meta, i, C.C_SRV6_NO_ROUTE)
            continue
        hdrlen = dp.sr_list[lst, LIST_HDRLEN]
        ifx = dp.adj[a, A_IF]  # -1: a local SID or another policy; its node checks the MTU
        mtu = dp.ifc[ifx, I_MTU] if ifx >= 0 else np.int32(0x7FFFFFFF)
        if iplen + hdrlen > mtu:  # the source must shrink its packets by the overhead
            if ip6:
                icmp_error(frames, frame_n, meta, i, True, C.C_MTU_EXCEEDED,
                           ICMP6_PACKET_TOO_BIG, 0, mtu - hdrlen)
            elif rd16(buf, l3 + 6) & 0x4000:
                icmp_error(frames, frame_n, meta, i, False, C.C_MTU_EXCEEDED,
                           ICMP4_DEST_UNREACH, ICMP4_FRAG_NEEDED, mtu - hdrlen)
            else:
                drop(frames, frame_n, meta, i, C.C_SRV6_ENCAP_TOO_BIG)
            continue
        base = i * SLOT
        if l3 - hdrlen - 14 < base:  # not enough headroom: move the packet once
            d = base + 14 + hdrlen - l3
            if l3 + d + iplen > base + SLOT:
                drop(frames, frame_n, meta, i, C.C_SRV6_NO_HEADROOM)
                continue
            copy_bytes(buf, l3 + d, buf, l3, iplen)
            l3 += d
        if not (flags & (F_LOCAL_ORIGIN | F_HLIM_DONE)):
            if ip6:
                buf[l3 + 7] -= 1
            else:
                old = rd16(buf, l3 + 8)
                new = np.uint32(old - np.uint32(0x100))
                wr16(buf, l3 + 8, new)
                wr16(buf, l3 + 10, incremental_update(rd16(buf, l3 + 10), old, new))
        if ip6:
            tc = ((np.uint32(buf[l3]) & np.uint32(0xF)) << np.uint32(4)) | (
                np.uint32(buf[l3 + 1]) >> np.uint32(4))
            hlim = buf[l3 + 7]
        else:
            tc = np.uint32(buf[l3 + 1])
            hlim = buf[l3 + 8]
        n = l3 - hdrlen
        hdr = dp.sr_hdr[lst]
        for b in range(hdrlen):
            buf[n + b] = hdr[b]
        wr32(buf, n, np.uint32(0x60000000) | (tc << np.uint32(20)) | (h & np.uint32(0xFFFFF)))
        wr16(buf, n + 4, hdrlen - 40 + iplen)
        buf[n + 7] = hlim
        inner = PROTO_IPV6 if ip6 else PROTO_IPIP
        if dp.sr_list[lst, LIST_SRH]:
            buf[n + 40] = inner
            meta[M_PROTO, i] = PROTO_ROUTING
        else:
            buf[n + 6] = inner
            meta[M_PROTO, i] = inner
        meta[M_OFF, i] = n
        meta[M_L3, i] = n
        meta[M_L4, i] = n + 40
        meta[M_LEN, i] = hdrlen + iplen
        meta[M_FLAGS, i] = F_IP6 | F_HLIM_DONE | (flags & F_LOCAL_ORIGIN)
        done += 1
        to_adjacency(frames, frame_n, meta, dp, i, a, True)
    dp.counters[C.C_SRV6_ENCAPSULATED] += done
