"""srv6-encap: H.Encaps / H.Encaps.Red (RFC 8986 5.1, 5.2) into the batch headroom.

The outer IPv6 header and SRH of each segment list are precomputed by the control plane
(like an adjacency's L2 rewrite): encapsulating is one copy of that header in front of the
packet plus a few patched fields — payload length, next header (41 or 4), hop limit and
traffic class from the inner packet, flow label from the inner flow hash (RFC 6437, 6438;
or the inner packet's own label, or 0, as the policy's ``flow_label`` says). No
copy of the packet body unless the slot lacks headroom (the seed: "expand the head only
if necessary"). The route to the first segment is cached per segment list and revalidated
against the FIB generation (the seed's dst_cache): the inner packet had its one lookup, the
outer gets none.
"""

import numpy as np
from numba import njit

from vecroute.fib.layout import (
    A_IF,
    A_NH4,
    A_SR_LIST,
    A_TYPE,
    ADJ_REWRITE,
    ADJ_SRV6_ENCAP,
    I_MTU,
    LB_N,
    LB_START,
)
from vecroute.fib.lpm import lpm6_lookup
from vecroute.graph import counters as C
from vecroute.graph.flow_hash import flow_hash4, flow_hash6
from vecroute.graph.frames import drop, enqueue, icmp_error
from vecroute.graph.lookup import to_adjacency
from vecroute.graph.registry import NodeDecl
from vecroute.graph.state import OPT_FIB_GEN
from vecroute.packet.batch import (
    F_ANSWER,
    F_FW_SKIP,
    F_HLIM_DONE,
    F_IP6,
    F_LOCAL_ORIGIN,
    F_REDIRECT,
    L2_ROOM,
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
from vecroute.packet.checksum import ttl_decrement
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
    copy_moves,
    rd16,
    rd32,
    rd64,
)
from vecroute.packet.intrinsics import store_be16, store_be32
from vecroute.packet.node_ids import IP6_REWRITE
from vecroute.srv6.layout import (
    CACHE_ADJ,
    CACHE_GEN,
    CACHE_LB,
    FLOW_HASH,
    FLOW_INNER,
    LIST_FIB,
    LIST_FLOW,
    LIST_HDRLEN,
    LIST_SRH,
    POL_BN,
    POL_BSTART,
)

NODES = (
    NodeDecl(
        "srv6-encap",
        next=(
            "ip6-local", "gso-segment", "srv6-localsid", "srv6-encap", "icmp4-error", "icmp6-error",
            "fw-out", "ip6-rewrite", "error-drop",
        ),
        counters=(
            "blackhole", "route-unreachable", "route-prohibit", "ttl-expired", "mtu-exceeded",
            "srv6-encapsulated", "srv6-no-route", "srv6-policy-empty", "srv6-no-headroom",
            "srv6-encap-too-big",
        ),
    ),
)


@njit(cache=True, _nrt=False)
def first_hop_miss(fib6_roots, fib6_groups, lbt, lbb, sr_list, sr_hdr, sr_cache, lst,
                   gen) -> None:
    """Look the list's first segment up again (the FIB changed): fill its cache entry, the
    load-balance and, when it has one bucket, its adjacency (the fused pass takes that
    without the load-balance's two reads; the generation moves with any bucket change,
    fib/adjacency.py)."""
    fib = sr_list[lst, LIST_FIB]
    v = -1
    if 0 <= fib < fib6_roots.shape[0]:
        v = lpm6_lookup(fib6_roots, fib6_groups, fib, rd64(sr_hdr[lst], 24),
                        rd64(sr_hdr[lst], 32))
    sr_cache[lst, CACHE_GEN] = gen
    sr_cache[lst, CACHE_LB] = v
    sr_cache[lst, CACHE_ADJ] = lbb[lbt[v, LB_START]] if v >= 0 and lbt[v, LB_N] == 1 else -1


@njit(cache=True, inline="always")
def write_outer(buf, l3, ip6, iplen, h, sr_hdr, sr_list, lst):
    """Put segment list lst's precomputed outer header (IPv6, and the SRH unless it is a
    one-segment .Red) in front of the inner packet at l3: one copy in 32-byte moves
    (``copy_moves``: the header is 40 bytes or more, srv6/tables.outer_header), then its payload
    length, next header (41 or 4), hop limit and traffic class from the inner packet (whose
    TTL was already decremented) and the flow label as the list's LIST_FLOW says: from the
    flow hash h, the inner IPv6 packet's label, or 0. Returns the outer
    header's offset and the protocol after it (routing, or the inner packet's). The caller
    has checked the headroom."""
    if ip6:
        tc = ((np.uint32(buf[l3]) & np.uint32(0xF)) << np.uint32(4)) | (
            np.uint32(buf[l3 + 1]) >> np.uint32(4))
        hlim = buf[l3 + 7]
    else:
        tc = np.uint32(buf[l3 + 1])
        hlim = buf[l3 + 8]
    fm = sr_list[lst, LIST_FLOW]
    if fm == FLOW_HASH:
        label = h & np.uint32(0xFFFFF)
    elif fm == FLOW_INNER and ip6:
        label = rd32(buf, l3) & np.uint32(0xFFFFF)
    else:  # FLOW_ZERO, or an IPv4 packet (it has no label to copy)
        label = np.uint32(0)
    hdrlen = np.int64(sr_list[lst, LIST_HDRLEN])
    n = l3 - hdrlen
    copy_moves(buf, n, sr_hdr, np.int64(lst) * sr_hdr.shape[1], hdrlen)  # the header, once
    # one store each (wr32 / wr16 write byte by byte: ~2 ns a packet more here)
    store_be32(buf, n, np.uint32(0x60000000) | (tc << np.uint32(20)) | label)
    store_be16(buf, n + 4, hdrlen - 40 + iplen)
    buf[n + 7] = hlim
    inner = PROTO_IPV6 if ip6 else PROTO_IPIP
    if sr_list[lst, LIST_SRH]:
        buf[n + 40] = inner
        return n, PROTO_ROUTING
    buf[n + 6] = inner
    return n, inner


@njit(cache=True, inline="always")
def _inner_flow(buf, meta, i, ip6) -> np.uint32:
    """The packet's flow hash, noted in its metadata (computed only where it is used)."""
    h = flow_hash6(buf, meta, i) if ip6 else flow_hash4(buf, meta, i)
    meta[M_HASH, i] = np.int32(h)
    return h


@njit(cache=True, _nrt=True)
def srv6_encap(work, k, buf, meta, frames, frame_n, dp) -> None:
    # the arrays are taken out of dp once: handing dp to an inlined helper per packet costs a
    # reference count update of every array it holds (about half the node's time)
    gen = dp.opts[OPT_FIB_GEN]
    adj, ifc, lbt, lbb = dp.adj, dp.ifc, dp.lb, dp.lb_buckets
    sr_pol, sr_bucket, sr_list, sr_hdr, sr_cache = (
        dp.sr_pol, dp.sr_bucket, dp.sr_list, dp.sr_hdr, dp.sr_cache)
    done = 0
    for j in range(k):
        i = work[j]
        pol = adj[meta[M_ADJ, i], A_NH4]
        flags = meta[M_FLAGS, i]
        ip6 = (flags & F_IP6) != 0
        l3 = meta[M_L3, i]
        iplen = meta[M_LEN, i] - (l3 - meta[M_OFF, i])
        if not (flags & (F_LOCAL_ORIGIN | F_HLIM_DONE)):  # RFC 8986 5.1 S05: inner TTL
            if (buf[l3 + 7] if ip6 else buf[l3 + 8]) <= 1:
                icmp_error(frames, frame_n, meta, i, ip6, C.C_TTL_EXPIRED,
                           ICMP6_TIME_EXCEEDED if ip6 else ICMP4_TIME_EXCEEDED, 0, 0)
                continue
        nb = sr_pol[pol, POL_BN]
        if nb == 0:
            drop(frames, frame_n, meta, i, C.C_SRV6_POLICY_EMPTY)
            continue
        # the flow hash only where it is used: the choice among lists, among the first
        # hop's paths, and the flow label of FLOW_HASH lists (the fused pass likewise)
        h = np.uint32(meta[M_HASH, i])
        if h == 0 and nb > 1 and adj[meta[M_ADJ, i], A_SR_LIST] < 0:  # several lists
            h = _inner_flow(buf, meta, i, ip6)  # (one list's weight only copies buckets)
        lst = sr_bucket[sr_pol[pol, POL_BSTART] + np.int64(h % np.uint32(nb))]
        # the route to the first segment, cached per list (the seed's dst_cache)
        if sr_cache[lst, CACHE_GEN] != gen:
            first_hop_miss(dp.fib6_roots, dp.fib6_groups, lbt, lbb, sr_list, sr_hdr, sr_cache,
                           lst, gen)
        v = sr_cache[lst, CACHE_LB]
        if v < 0:
            drop(frames, frame_n, meta, i, C.C_SRV6_NO_ROUTE)
            continue
        nlb = lbt[v, LB_N]
        if h == 0 and (nlb > 1 or sr_list[lst, LIST_FLOW] == FLOW_HASH):
            h = _inner_flow(buf, meta, i, ip6)
        a = lbb[lbt[v, LB_START] + (0 if nlb == 1 else np.int64(h % np.uint32(nlb)))]
        if h == 0 and adj[a, A_TYPE] == ADJ_SRV6_ENCAP:  # a policy after this one chooses
            h = _inner_flow(buf, meta, i, ip6)  # by the inner flow: the outer header is one
            # flow for every packet of the list
        hdrlen = sr_list[lst, LIST_HDRLEN]
        ifx = adj[a, A_IF]  # -1: a local SID or another policy; its node checks the MTU
        mtu = ifc[ifx, I_MTU] if ifx >= 0 else np.int32(0x7FFFFFFF)
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
        if l3 - hdrlen - L2_ROOM < base:  # not enough headroom: move the packet once
            d = base + L2_ROOM + hdrlen - l3
            if l3 + d + iplen > base + SLOT:
                drop(frames, frame_n, meta, i, C.C_SRV6_NO_HEADROOM)
                continue
            copy_bytes(buf, l3 + d, buf, l3, iplen)
            l3 += d
        if not (flags & (F_LOCAL_ORIGIN | F_HLIM_DONE)):
            ttl_decrement(buf, l3, ip6)
        n, proto = write_outer(buf, l3, ip6, iplen, h, sr_hdr, sr_list, lst)
        meta[M_PROTO, i] = proto
        meta[M_OFF, i] = n
        meta[M_L3, i] = n
        meta[M_L4, i] = n + 40
        meta[M_LEN, i] = hdrlen + iplen
        # the inner packet passed fw-in; the outer one is not filtered at output
        meta[M_FLAGS, i] = F_IP6 | F_HLIM_DONE | F_FW_SKIP | (
            flags & (F_LOCAL_ORIGIN | F_ANSWER | F_REDIRECT))
        done += 1
        if adj[a, A_TYPE] == ADJ_REWRITE:
            meta[M_ADJ, i] = a
            enqueue(frames, frame_n, meta, IP6_REWRITE, i)
        else:  # incomplete, glean, local SID, another policy: the lookup's dispatch
            to_adjacency(frames, frame_n, meta, dp, i, a, True)
    dp.counters[C.C_SRV6_ENCAPSULATED] += done
