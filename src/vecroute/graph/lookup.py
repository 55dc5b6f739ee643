"""ip4-lookup / ip6-lookup: the one FIB lookup of a routed packet.

The lookup yields a load-balance index; the flow hash picks one ECMP bucket, whose
adjacency index then travels in the packet metadata to rewrite and output. Nothing after
this node looks the route up again.
"""

import numpy as np
from numba import njit

from vecroute.fib.layout import (
    A_IF,
    A_NEXT4,
    A_NEXT6,
    A_TYPE,
    ADJ_DROP,
    ADJ_LOCAL,
    ADJ_PROHIBIT,
    LB_N,
    LB_START,
)
from vecroute.fib.lpm import lpm4_lookup, lpm6_lookup
from vecroute.fib.lpm_kernels import lpm4_lookup_vec, lpm6_lookup_vec
from vecroute.graph import counters as C
from vecroute.graph.flow_hash import flow_hash4, flow_hash6
from vecroute.graph.frames import drop, enqueue, icmp_error
from vecroute.graph.gso_segment import divert
from vecroute.graph.registry import NodeDecl
from vecroute.graph.state import FW_RUN_OUT, OPT_FW
from vecroute.packet.batch import (
    F_FORCED_ADJ,
    F_FW_SKIP,
    F_GSO,
    F_HLIM_DONE,
    F_L2_MCAST,
    F_LINK_LOCAL,
    F_LOCAL_ORIGIN,
    M_ADJ,
    M_FIB,
    M_FLAGS,
    M_HASH,
    M_L3,
    M_RX,
)
from vecroute.packet.headers import (
    ICMP4_DEST_UNREACH,
    ICMP4_HOST_UNREACH,
    ICMP4_NET_UNREACH,
    ICMP6_BEYOND_SCOPE,
    ICMP6_DEST_UNREACH,
    ICMP6_NO_ROUTE,
    ICMP6_TIME_EXCEEDED,
    rd32,
    rd64,
)
from vecroute.packet.node_ids import (
    ERROR_DROP,
    FW_OUT,
    ICMP4_ERROR,
    ICMP6_ERROR,
    IP4_REWRITE,
    IP6_REWRITE,
    SRV6_ENCAP,
    SRV6_LOCALSID,
)

NODES = (
    NodeDecl(
        "ip4-lookup",
        next=(
            "ip4-local", "gso-segment", "srv6-encap", "icmp4-error", "fw-out", "ip4-rewrite",
            "error-drop",
        ),
        counters=(
            "fib-lookups", "no-route", "fib-table-missing", "blackhole", "route-unreachable",
            "route-prohibit", "l2-multicast-unicast", "ip4-link-local",
        ),
    ),
    NodeDecl(
        "ip6-lookup",
        next=(
            "ip6-local", "gso-segment", "srv6-localsid", "srv6-encap", "icmp6-error", "fw-out",
            "ip6-rewrite", "error-drop",
        ),
        counters=(
            "ip6-link-local", "fib-lookups", "no-route", "fib-table-missing", "blackhole",
            "route-unreachable", "route-prohibit", "l2-multicast-unicast", "ttl-expired",
        ),
    ),
)

ICMP4_ADMIN_PROHIBITED = 13  # RFC 1812 5.2.7.1: communication administratively prohibited
ICMP6_ADMIN_PROHIBITED = 1  # RFC 4443 3.1


@njit(cache=True, inline="always")
def pick_adjacency(dp, lbi: int, h: np.uint32) -> int:
    """Map a load-balance index and a flow hash to an adjacency (ECMP bucket)."""
    n = dp.lb[lbi, LB_N]
    start = dp.lb[lbi, LB_START]
    if n == 1:
        return dp.lb_buckets[start]
    return dp.lb_buckets[start + np.int64(h % np.uint32(n))]


@njit(cache=True)
def resolve4(dp, fib: int, dst: np.uint32, h: np.uint32) -> int:
    """FIB lookup + ECMP choice for one ip4 destination; -1 on a miss."""
    if fib < 0 or fib >= dp.fib4_roots.shape[0]:
        return -1
    v = lpm4_lookup(dp.fib4_roots, dp.fib4_groups, fib, dst)
    if v < 0:
        return -1
    return pick_adjacency(dp, v, h)


@njit(cache=True)
def resolve6(dp, fib: int, hi: np.uint64, lo: np.uint64, h: np.uint32) -> int:
    """FIB lookup + ECMP choice for one ip6 destination; -1 on a miss."""
    if fib < 0 or fib >= dp.fib6_roots.shape[0]:
        return -1
    v = lpm6_lookup(dp.fib6_roots, dp.fib6_groups, fib, hi, lo)
    if v < 0:
        return -1
    return pick_adjacency(dp, v, h)


@njit(cache=True)
def _reject(frames, frame_n, meta, i, prohibit, ip6) -> None:
    """A reject route, answered as Linux's ip_error / ip6_pkt_discard and ip6_pkt_prohibit
    do: unreachable -> IPv4 host unreachable (code 1), ICMPv6 no route (0); prohibit ->
    IPv4 communication administratively prohibited (13), ICMPv6 code 1. Our own packets
    are dropped (never an error about an error we made)."""
    reason = C.C_ROUTE_PROHIBIT if prohibit else C.C_ROUTE_UNREACHABLE
    if meta[M_FLAGS, i] & F_LOCAL_ORIGIN:
        drop(frames, frame_n, meta, i, reason)
    elif ip6:
        icmp_error(frames, frame_n, meta, i, True, reason, ICMP6_DEST_UNREACH,
                   ICMP6_ADMIN_PROHIBITED if prohibit else ICMP6_NO_ROUTE, 0)
    else:
        icmp_error(frames, frame_n, meta, i, False, reason, ICMP4_DEST_UNREACH,
                   ICMP4_ADMIN_PROHIBITED if prohibit else ICMP4_HOST_UNREACH, 0)


@njit(cache=True, inline="always")
def to_adjacency(frames, frame_n, meta, dp, i, a, ip6) -> None:
    """Send packet i on to the next node its adjacency names (the control plane chose it:
    fib/adjacency.py ADJ_NEXT); only the rarer next nodes need a second look here."""
    meta[M_ADJ, i] = a
    nxt = dp.adj[a, A_NEXT6 if ip6 else A_NEXT4]
    # all of dp is read here, not in a branch: there numba reference-counts dp's arrays per
    # packet (measured: dp.opts in a branch, ip4-lookup 20 -> 140 ns; the kind read only for
    # a reject route, 58 -> 460 ns), so the reject's flavour comes from the same row now
    prohibit = dp.adj[a, A_TYPE] == ADJ_PROHIBIT
    fw_out = dp.opts[OPT_FW] & FW_RUN_OUT
    if nxt == IP4_REWRITE or nxt == IP6_REWRITE:
        if fw_out != 0 and not meta[M_FLAGS, i] & F_FW_SKIP:
            nxt = FW_OUT  # the output firewall, then rewrite
    elif nxt == ERROR_DROP:
        drop(frames, frame_n, meta, i, C.C_BLACKHOLE)
        return
    elif nxt == ICMP4_ERROR or nxt == ICMP6_ERROR:
        _reject(frames, frame_n, meta, i, prohibit, ip6)
        return
    elif (nxt == SRV6_ENCAP or nxt == SRV6_LOCALSID) and meta[M_FLAGS, i] & F_GSO:
        # SRv6 takes ordinary packets: cut it first
        divert(frames, frame_n, meta, i, SRV6_ENCAP if nxt == SRV6_ENCAP else SRV6_LOCALSID)
        return
    enqueue(frames, frame_n, meta, nxt, i)


@njit(cache=True, inline="always")
def _not_forwarded(frames, frame_n, meta, buf, i, flags, ip6) -> None:
    """A packet that may be delivered to us but never forwarded, routed elsewhere."""
    if flags & F_L2_MCAST:  # RFC 1812 5.3.4 (and Linux for ip6: pkt_type != PACKET_HOST)
        drop(frames, frame_n, meta, i, C.C_L2_MULTICAST_UNICAST)
    elif ip6 and buf[meta[M_L3, i] + 7] <= 1 and not flags & F_HLIM_DONE:
        icmp_error(frames, frame_n, meta, i, True, C.C_TTL_EXPIRED,  # checked first, as
                   ICMP6_TIME_EXCEEDED, 0, 0)  # Linux's ip6_forward does
    elif ip6:  # RFC 4291 2.5.6: never to another link; RFC 4443 3.1 "beyond scope of source"
        icmp_error(frames, frame_n, meta, i, True, C.C_IP6_LINK_LOCAL,
                   ICMP6_DEST_UNREACH, ICMP6_BEYOND_SCOPE, 0)
    else:  # RFC 3927 2.7: a link-local address never leaves its link
        drop(frames, frame_n, meta, i, C.C_IP4_LINK_LOCAL)


@njit(cache=True, inline="always")
def _finish(work, idx, vals, m, buf, meta, frames, frame_n, dp, ip6) -> None:
    """After the vector lookup: ICMP for misses, ECMP bucket, on by adjacency type."""
    for q in range(m):
        i = work[idx[q]]
        v = vals[q]
        if v == -2:
            drop(frames, frame_n, meta, i, C.C_FIB_TABLE_MISSING)
            continue
        flags = meta[M_FLAGS, i]
        if v < 0:
            if flags & F_LOCAL_ORIGIN:
                drop(frames, frame_n, meta, i, C.C_NO_ROUTE)
            elif ip6:
                icmp_error(frames, frame_n, meta, i, True, C.C_NO_ROUTE,
                           ICMP6_DEST_UNREACH, ICMP6_NO_ROUTE, 0)
            else:
                icmp_error(frames, frame_n, meta, i, False, C.C_NO_ROUTE,
                           ICMP4_DEST_UNREACH, ICMP4_NET_UNREACH, 0)
            continue
        if dp.lb[v, LB_N] > 1:
            h = flow_hash6(buf, meta, i) if ip6 else flow_hash4(buf, meta, i)
            meta[M_HASH, i] = np.int32(h)
        else:
            h = np.uint32(0)
        a = pick_adjacency(dp, v, h)
        if flags & (F_L2_MCAST | F_LINK_LOCAL) and not flags & F_LOCAL_ORIGIN:
            t = dp.adj[a, A_TYPE]
            # delivered to us, or a blackhole: as any packet; an ip6 link-local source may
            # go back out onto its own link (RFC 4291 2.5.6 forbids other links; Linux too)
            if not (t == ADJ_LOCAL or t == ADJ_DROP or (
                    ip6 and not flags & F_L2_MCAST and dp.adj[a, A_IF] == meta[M_RX, i])):
                _not_forwarded(frames, frame_n, meta, buf, i, flags, ip6)
                continue
        to_adjacency(frames, frame_n, meta, dp, i, a, ip6)


@njit(cache=True, _nrt=True)
def ip4_lookup(work, k, buf, meta, frames, frame_n, dp) -> None:
    """Gather the destinations, look the whole vector up (misses overlapped), finish."""
    idx = np.empty(k, np.int64)
    tables = np.empty(k, np.int64)
    addrs = np.empty(k, np.uint32)
    vals = np.empty(k, np.int32)
    m = 0
    for j in range(k):
        i = work[j]
        if meta[M_FLAGS, i] & F_FORCED_ADJ:  # End.DX4: the SID chose the adjacency
            meta[M_FLAGS, i] &= ~F_FORCED_ADJ
            to_adjacency(frames, frame_n, meta, dp, i, meta[M_ADJ, i], False)
            continue
        idx[m] = j
        tables[m] = meta[M_FIB, i]
        addrs[m] = rd32(buf, meta[M_L3, i] + 16)
        m += 1
    lpm4_lookup_vec(dp.fib4_roots, dp.fib4_groups, tables, addrs, m, vals)
    _finish(work, idx, vals, m, buf, meta, frames, frame_n, dp, False)
    dp.counters[C.C_FIB_LOOKUPS] += m


@njit(cache=True, _nrt=True)
def ip6_lookup(work, k, buf, meta, frames, frame_n, dp) -> None:
    idx = np.empty(k, np.int64)
    tables = np.empty(k, np.int64)
    his = np.empty(k, np.uint64)
    los = np.empty(k, np.uint64)
    vals = np.empty(k, np.int32)
    m = 0
    for j in range(k):
        i = work[j]
        if meta[M_FLAGS, i] & F_FORCED_ADJ:  # End.X / End.DX6: the SID chose the adjacency
            meta[M_FLAGS, i] &= ~F_FORCED_ADJ
            to_adjacency(frames, frame_n, meta, dp, i, meta[M_ADJ, i], True)
            continue
        l3 = meta[M_L3, i]
        idx[m] = j
        tables[m] = meta[M_FIB, i]
        his[m] = rd64(buf, l3 + 24)
        los[m] = rd64(buf, l3 + 32)
        m += 1
    lpm6_lookup_vec(dp.fib6_roots, dp.fib6_groups, tables, his, los, m, vals)
    _finish(work, idx, vals, m, buf, meta, frames, frame_n, dp, True)
    dp.counters[C.C_FIB_LOOKUPS] += m
