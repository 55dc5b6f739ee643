"""neighbor-request: the packet's next hop has no MAC yet; ask for it (ARP / NS).

The packet itself is dropped (``neighbor-incomplete``); a request leaves on the
adjacency's interface at most once per neighbour per second: incomplete adjacencies keep
their last request time, glean (connected-subnet) targets a small direct-mapped table.
The control plane fills the adjacency when the answer comes; the data path never looks a
neighbour up per packet.
"""

import numpy as np
from numba import njit

from vecroute.fib.layout import A_FAMILY, A_IF, A_NH4, A_NH6, A_TYPE, ADJ_GLEAN, I_IP4, IF6_LL
from vecroute.graph import counters as C
from vecroute.graph.flow_hash import mix64
from vecroute.graph.frames import drop, enqueue
from vecroute.graph.local import punt
from vecroute.graph.registry import NodeDecl
from vecroute.graph.state import OPT_LIVE
from vecroute.packet.batch import (
    F_IP6,
    HEADROOM,
    M_ADJ,
    M_FLAGS,
    M_L3,
    M_LEN,
    M_OFF,
    M_RX,
    M_SEQ,
    M_TX,
    SLOT,
    alloc_slot,
)
from vecroute.packet.checksum import checksum, pseudo_header6
from vecroute.packet.headers import (
    ETH_P_ARP,
    ETH_P_IPV6,
    ICMP6_NEIGHBOR_SOLICIT,
    PROTO_ICMPV6,
    rd32,
    rd64,
    wr16,
    wr32,
)
from vecroute.packet.node_ids import INTERFACE_OUTPUT

NODES = (
    NodeDecl(
        "neighbor-request",
        next=("interface-output", "error-drop", "punt"),
        counters=(
            "neighbor-incomplete", "arp-request-sent", "ns-sent", "neighbor-request-limited",
            "request-no-buffer", "neighbor-queued",
        ),
        # a queued packet whose resolution failed: re-injected into icmp-error with it
        raised_by=(("neighbor-failed", "vecroute.control.punts"),),
    ),
)

REQUEST_INTERVAL_NS = 1_000_000_000
ARP_FRAME_LEN = 42
NS_FRAME_LEN = 14 + 40 + 32


@njit(cache=True)
def _may_send(dp, a, ifx, hi, lo, glean, now) -> bool:
    if not glean:
        if now - dp.adj_last_req[a] < REQUEST_INTERVAL_NS:
            return False
        dp.adj_last_req[a] = now
        return True
    slot = np.int64(mix64(hi ^ mix64(lo ^ np.uint64(ifx))) & np.uint64(dp.glean.shape[0] - 1))
    e = dp.glean[slot]
    if (e[0] == ifx + 1 and e[1] == np.int64(hi) and e[2] == np.int64(lo)
            and now - e[3] < REQUEST_INTERVAL_NS):
        return False
    e[0] = ifx + 1
    e[1] = np.int64(hi)
    e[2] = np.int64(lo)
    e[3] = now
    return True


@njit(cache=True)
def build_arp_request(buf, o, mac, spa, tpa) -> None:
    for b in range(6):
        buf[o + b] = 0xFF
        buf[o + 6 + b] = mac[b]
        buf[o + 22 + b] = mac[b]
        buf[o + 32 + b] = 0
    wr16(buf, o + 12, ETH_P_ARP)
    wr16(buf, o + 14, 1)
    wr16(buf, o + 16, 0x0800)
    buf[o + 18] = 6
    buf[o + 19] = 4
    wr16(buf, o + 20, 1)
    wr32(buf, o + 28, spa)
    wr32(buf, o + 38, tpa)


@njit(cache=True)
def build_ns(buf, o, mac, src_ll, target_hi, target_lo) -> None:
    """Neighbour Solicitation to the target's solicited-node group (RFC 4861 4.3)."""
    t = np.empty(16, dtype=np.uint8)
    for b in range(8):
        t[b] = np.uint8((target_hi >> np.uint64(56 - 8 * b)) & np.uint64(0xFF))
        t[8 + b] = np.uint8((target_lo >> np.uint64(56 - 8 * b)) & np.uint64(0xFF))
    buf[o] = 0x33
    buf[o + 1] = 0x33
    buf[o + 2] = 0xFF
    buf[o + 3] = t[13]
    buf[o + 4] = t[14]
    buf[o + 5] = t[15]
    for b in range(6):
        buf[o + 6 + b] = mac[b]
    wr16(buf, o + 12, ETH_P_IPV6)
    l3 = o + 14
    wr32(buf, l3, np.uint32(0x60000000))
    wr16(buf, l3 + 4, 32)
    buf[l3 + 6] = PROTO_ICMPV6
    buf[l3 + 7] = 255
    for b in range(16):
        buf[l3 + 8 + b] = src_ll[b]
        buf[l3 + 24 + b] = 0
    buf[l3 + 24] = 0xFF
    buf[l3 + 25] = 0x02
    buf[l3 + 35] = 0x01
    buf[l3 + 36] = 0xFF
    buf[l3 + 37] = t[13]
    buf[l3 + 38] = t[14]
    buf[l3 + 39] = t[15]
    c = l3 + 40
    buf[c] = ICMP6_NEIGHBOR_SOLICIT
    buf[c + 1] = 0
    wr16(buf, c + 2, 0)
    wr32(buf, c + 4, 0)
    for b in range(16):
        buf[c + 8 + b] = t[b]
    buf[c + 24] = 1  # source link-layer address option
    buf[c + 25] = 1
    for b in range(6):
        buf[c + 26 + b] = mac[b]
    wr16(buf, c + 2, checksum(buf, c, 32, pseudo_header6(buf, l3, PROTO_ICMPV6, 32)))


@njit(cache=True, _nrt=True)
def neighbor_request(work, k, buf, meta, frames, frame_n, dp, nalloc, now) -> None:
    live = dp.opts[OPT_LIVE] != 0
    for j in range(k):
        i = work[j]
        if live:  # the control plane queues it, asks, and re-injects it when answered
            punt(frames, frame_n, meta, dp, i, C.C_NEIGHBOR_QUEUED)
            continue
        a = meta[M_ADJ, i]
        ifx = dp.adj[a, A_IF]
        glean = dp.adj[a, A_TYPE] == ADJ_GLEAN
        # which protocol asks: the next hop's family (an IPv4 route via an IPv6 next hop,
        # RFC 5549, resolves it with ND); a glean resolves the packet's own destination
        ip6 = (meta[M_FLAGS, i] & F_IP6) if glean else dp.adj[a, A_FAMILY] == 6
        l3 = meta[M_L3, i]
        if ip6:
            if glean:
                hi = rd64(buf, l3 + 24)
                lo = rd64(buf, l3 + 32)
            else:
                hi = (np.uint64(np.uint32(dp.adj[a, A_NH6])) << np.uint64(32)) | np.uint64(
                    np.uint32(dp.adj[a, A_NH6 + 1]))
                lo = (np.uint64(np.uint32(dp.adj[a, A_NH6 + 2])) << np.uint64(32)) | np.uint64(
                    np.uint32(dp.adj[a, A_NH6 + 3]))
        else:
            hi = np.uint64(0)
            lo = np.uint64(rd32(buf, l3 + 16)) if glean else np.uint64(np.uint32(dp.adj[a, A_NH4]))
        if _may_send(dp, a, ifx, hi, lo, glean, now):
            s = alloc_slot(meta, nalloc, i, meta[M_RX, i])
            if s < 0:
                dp.counters[C.C_REQUEST_NO_BUFFER] += 1
            else:
                o = s * SLOT + HEADROOM
                if ip6:
                    build_ns(buf, o, dp.if_mac[ifx], dp.if_ip6[ifx, IF6_LL], hi, lo)
                    meta[M_LEN, s] = NS_FRAME_LEN
                    meta[M_FLAGS, s] |= F_IP6
                    dp.counters[C.C_NS_SENT] += 1
                else:
                    build_arp_request(buf, o, dp.if_mac[ifx], np.uint32(dp.ifc[ifx, I_IP4]),
                                      np.uint32(lo))
                    meta[M_LEN, s] = ARP_FRAME_LEN
                    dp.counters[C.C_ARP_REQUEST_SENT] += 1
                meta[M_OFF, s] = o
                meta[M_L3, s] = o + 14
                meta[M_TX, s] = ifx
                meta[M_SEQ, s] = meta[M_SEQ, i] + 1
                enqueue(frames, frame_n, meta, INTERFACE_OUTPUT, s)
        else:
            dp.counters[C.C_NEIGHBOR_REQUEST_LIMITED] += 1
        drop(frames, frame_n, meta, i, C.C_NEIGHBOR_INCOMPLETE)
