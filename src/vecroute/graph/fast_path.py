"""The fused common path: plain unicast IPv4/IPv6 forwarding in three passes over the vector.

Most packets a router sees are valid unicast IPv4 or IPv6 without options or extension
headers, for a destination with a resolved next hop on another port. For them, walking
five nodes costs more than the work itself: every node re-reads the metadata, enqueues
each packet and writes its next node (about 110 ns per IPv4 packet in node clocks). This
pass does the same work for them in one go, straight from the received frame:

1. parse and validate (ethernet-input + ip4/ip6-input: destination MAC, RFC 1812 5.2.2
   and RFC 8200 checks, the IPv4 header checksum, martians, TTL / hop limit),
2. one vector lookup per family (the prefetching kernels ip4/ip6-lookup use),
3. ECMP bucket, then, when the adjacency is a resolved rewrite within the port's MTU
   (and, for a packet leaving by the port it came in on, no redirect is due): TTL / hop
   limit with the RFC 1624 update, the L2 rewrite and the transmit list
   (ip4/ip6-rewrite + interface-output).

Anything else (errors, options, extension headers, fragments, multicast, link-local,
local delivery, SRv6, unresolved or reply adjacencies, redirects, MTU, GSO, re-injected
packets) is left in ethernet-input's frame untouched, and the graph handles it exactly
as before. Nothing is written to a packet or its metadata before it is known to take this
path, so a packet handed back is bit-for-bit as it arrived.

The counters are those the nodes would have raised (interface rx/tx, fib-lookups,
ip4/ip6-forwarded) and ``show runtime`` keeps its per-node packets: the pass counts one
call of each node it covers, and splits its clocks among them (see _attribute). The
dispatcher skips this pass while a firewall runs or a trace is selecting packets (every
traced packet keeps its per-node trail), and when ``OPT_NO_FUSED`` is set.
"""

import numpy as np
from numba import njit

from vecroute.fib.lpm_kernels import lpm4_lookup_vec, lpm6_lookup_vec
from vecroute.graph import counters as C
from vecroute.graph.cycles import readcyclecounter
from vecroute.graph.flow_hash import flow_hash4_at, flow_hash6_at
from vecroute.graph.node_ids import (
    DONE_TX,
    ETHERNET_INPUT,
    INTERFACE_OUTPUT,
    IP4_INPUT,
    IP4_LOOKUP,
    IP4_REWRITE,
    IP6_INPUT,
    IP6_LOOKUP,
    IP6_REWRITE,
)
from vecroute.graph.rewrite import redirect4_wanted_at, redirect6_wanted_at
from vecroute.graph.state import (
    A_IF,
    A_RWLEN,
    A_TYPE,
    ADJ_REWRITE,
    I_FIB4,
    I_FIB6,
    I_MTU,
    IFS_RX_BYTES,
    IFS_RX_PKTS,
    IFS_TX_BYTES,
    IFS_TX_PKTS,
    LB_N,
    LB_START,
    NS_CALLS,
    NS_CLOCKS,
    NS_PACKETS,
)
from vecroute.graph.token_bucket import has_token
from vecroute.packet.batch import (
    F_ICMP_ERROR,
    F_IP6,
    M_ADJ,
    M_FIB,
    M_FLAGS,
    M_HASH,
    M_L3,
    M_L4,
    M_LEN,
    M_NEXT,
    M_OFF,
    M_PROTO,
    M_RX,
    M_TX,
    MAX_FRAME,
)
from vecroute.packet.checksum import fold, incremental_update
from vecroute.packet.headers import (
    ETH_HLEN,
    ETH_P_IP,
    ETH_P_IPV6,
    IP4_HLEN,
    IP6_HLEN,
    PROTO_AH,
    PROTO_DSTOPTS,
    PROTO_FRAGMENT,
    PROTO_HOPOPT,
    PROTO_ICMP,
    PROTO_ICMPV6,
    PROTO_ROUTING,
    rd16,
    rd32,
    rd64,
    wr16,
)
from vecroute.packet.intrinsics import memcpy

FAM4 = 1
FAM6 = 2


@njit(cache=True, inline="always")
def _for_us(buf, o, if_mac, rx) -> bool:
    """Unicast to the receiving port's own MAC (multicast and broadcast take the graph)."""
    if buf[o] & 1:
        return False
    for b in range(6):
        if buf[o + b] != if_mac[rx, b]:
            return False
    return True


@njit(cache=True, inline="always")
def _plain4(buf, l3, avail) -> bool:
    """An IPv4 packet ip4-input would route with nothing to note: IHL 5, lengths, header
    checksum (five 32-bit words summed, RFC 1071), no fragment, unicast source and
    destination outside 0/8, 127/8, 169.254/16 and 224/3, TTL above 1."""
    if buf[l3] != 0x45:
        return False
    tot = np.int64(rd16(buf, l3 + 2))
    if tot < IP4_HLEN or tot > avail:
        return False
    s = (np.uint64(rd32(buf, l3)) + np.uint64(rd32(buf, l3 + 4)) + np.uint64(rd32(buf, l3 + 8))
         + np.uint64(rd32(buf, l3 + 12)) + np.uint64(rd32(buf, l3 + 16)))
    if fold(s) != 0xFFFF:
        return False
    if rd16(buf, l3 + 6) & 0x3FFF or buf[l3 + 8] <= 1:
        return False
    src = rd32(buf, l3 + 12)
    dst = rd32(buf, l3 + 16)
    ts = src >> np.uint32(24)
    td = dst >> np.uint32(24)
    if ts == 0 or ts == 127 or ts >= 224 or td == 0 or td == 127 or td >= 224:
        return False
    return (src >> np.uint32(16)) != np.uint32(0xA9FE) and (dst >> np.uint32(16)) != np.uint32(
        0xA9FE)


@njit(cache=True, inline="always")
def _plain6(buf, l3, avail) -> bool:
    """An IPv6 packet ip6-input would route with nothing to note: lengths, no extension
    header, source and destination neither in 00xx::/8 (unspecified, loopback, ...) nor
    multicast nor link-local, hop limit above 1."""
    if (buf[l3] >> 4) != 6 or avail < IP6_HLEN:
        return False
    if IP6_HLEN + np.int64(rd16(buf, l3 + 4)) > avail:
        return False
    nh = buf[l3 + 6]
    if (nh == PROTO_HOPOPT or nh == PROTO_ROUTING or nh == PROTO_FRAGMENT
            or nh == PROTO_DSTOPTS or nh == PROTO_AH):
        return False
    if buf[l3 + 7] <= 1:
        return False
    s0 = buf[l3 + 8]
    d0 = buf[l3 + 24]
    if s0 == 0 or s0 == 0xFF or d0 == 0 or d0 == 0xFF:
        return False
    if s0 == 0xFE and (buf[l3 + 9] & 0xC0) == 0x80:
        return False
    return not (d0 == 0xFE and (buf[l3 + 25] & 0xC0) == 0x80)


@njit(cache=True, inline="always")
def _attribute(node_stats, nodes, n, clocks) -> None:
    """One call and n packets for each node of a fused stage, the stage's clocks split
    evenly among them."""
    share = clocks // np.int64(len(nodes))
    for nd in nodes:
        node_stats[nd, NS_CALLS] += 1
        node_stats[nd, NS_PACKETS] += n
        node_stats[nd, NS_CLOCKS] += share


@njit(cache=True)
def fused_forward(buf, meta, frames, frame_n, txl, txn, dp, now) -> None:
    """Forward the plain packets of ethernet-input's frame; leave the rest in it."""
    k = frame_n[ETHERNET_INPUT]
    if k == 0:
        return
    # the arrays once, out of dp: a dp access in a per-packet loop costs reference counts
    ifc, if_mac, if_ip6, if_stats, adj, adj_rw, lb, lbb, tb = (
        dp.ifc, dp.if_mac, dp.if_ip6, dp.if_stats, dp.adj, dp.adj_rw, dp.lb, dp.lb_buckets,
        dp.icmp_tb)
    t0 = readcyclecounter()
    fam = np.zeros(k, np.uint8)
    idx4 = np.empty(k, np.int64)
    tab4 = np.empty(k, np.int64)
    dst4 = np.empty(k, np.uint32)
    idx6 = np.empty(k, np.int64)
    tab6 = np.empty(k, np.int64)
    hi6 = np.empty(k, np.uint64)
    lo6 = np.empty(k, np.uint64)
    n4 = 0
    n6 = 0
    for j in range(k):
        i = frames[ETHERNET_INPUT, j]
        ln = np.int64(meta[M_LEN, i])
        if meta[M_FLAGS, i] != 0 or ln > MAX_FRAME or ln < ETH_HLEN + IP4_HLEN:
            continue
        o = np.int64(meta[M_OFF, i])
        rx = meta[M_RX, i]
        if not _for_us(buf, o, if_mac, rx):
            continue
        et = rd16(buf, o + 12)
        l3 = o + ETH_HLEN
        if et == ETH_P_IP:
            if _plain4(buf, l3, ln - ETH_HLEN):
                fam[j] = FAM4
                idx4[n4] = j
                tab4[n4] = ifc[rx, I_FIB4]
                dst4[n4] = rd32(buf, l3 + 16)
                n4 += 1
        elif et == ETH_P_IPV6:
            if _plain6(buf, l3, ln - ETH_HLEN):
                fam[j] = FAM6
                idx6[n6] = j
                tab6[n6] = ifc[rx, I_FIB6]
                hi6[n6] = rd64(buf, l3 + 24)
                lo6[n6] = rd64(buf, l3 + 32)
                n6 += 1
    if n4 + n6 == 0:
        return  # nothing plain: the graph pays only this scan
    t1 = readcyclecounter()
    v4 = np.empty(n4, np.int32)
    v6 = np.empty(n6, np.int32)
    lpm4_lookup_vec(dp.fib4_roots, dp.fib4_groups, tab4, dst4, n4, v4)
    lpm6_lookup_vec(dp.fib6_roots, dp.fib6_groups, tab6, hi6, lo6, n6, v6)
    t2 = readcyclecounter()
    tx = txn[0]
    f4 = 0
    for q in range(n4):
        j = idx4[q]
        v = v4[q]
        fam[j] = 0  # handed back unless it leaves below
        if v < 0:
            continue
        i = frames[ETHERNET_INPUT, j]
        rx = meta[M_RX, i]
        l3 = np.int64(meta[M_OFF, i]) + ETH_HLEN
        tot = np.int64(rd16(buf, l3 + 2))
        proto = np.int32(buf[l3 + 9])
        nb = lb[v, LB_N]
        h = np.uint32(0)
        if nb > 1:
            h = flow_hash4_at(buf, l3, l3 + IP4_HLEN, l3 + tot, proto, 0)
            a = lbb[lb[v, LB_START] + np.int64(h % np.uint32(nb))]
        else:
            a = lbb[lb[v, LB_START]]
        flags = 0
        if proto == PROTO_ICMP and tot > IP4_HLEN:
            t = buf[l3 + IP4_HLEN]  # an error message (ip4-input's is_icmp4_error_type)
            if t == 3 or t == 4 or t == 5 or t == 11 or t == 12 or t > 18:
                flags = F_ICMP_ERROR
        ifx = adj[a, A_IF]
        if adj[a, A_TYPE] != ADJ_REWRITE or tot > ifc[ifx, I_MTU] or (
                ifx == rx and redirect4_wanted_at(buf, l3, rx, flags, ifc, adj, a)
                and has_token(tb, now)):  # ip4-rewrite would send a redirect
            continue
        fam[j] = FAM4
        f4 += 1
        old = rd16(buf, l3 + 8)
        new = np.uint32(old - np.uint32(0x100))
        wr16(buf, l3 + 8, new)
        wr16(buf, l3 + 10, incremental_update(rd16(buf, l3 + 10), old, new))
        rw = np.int64(adj[a, A_RWLEN])
        out = l3 - rw
        memcpy(buf, out, adj_rw[a], 0, rw)
        if_stats[rx, IFS_RX_PKTS] += 1
        if_stats[rx, IFS_RX_BYTES] += meta[M_LEN, i]
        if_stats[ifx, IFS_TX_PKTS] += 1
        if_stats[ifx, IFS_TX_BYTES] += rw + tot
        meta[M_FLAGS, i] = flags
        meta[M_OFF, i] = out
        meta[M_LEN, i] = rw + tot
        meta[M_L3, i] = l3
        meta[M_L4, i] = l3 + IP4_HLEN
        meta[M_PROTO, i] = proto
        meta[M_FIB, i] = tab4[q]
        meta[M_ADJ, i] = a
        meta[M_HASH, i] = np.int32(h)
        meta[M_TX, i] = ifx
        meta[M_NEXT, i] = DONE_TX
        txl[tx] = i
        tx += 1
    f6 = 0
    for q in range(n6):
        j = idx6[q]
        v = v6[q]
        fam[j] = 0
        if v < 0:
            continue
        i = frames[ETHERNET_INPUT, j]
        rx = meta[M_RX, i]
        l3 = np.int64(meta[M_OFF, i]) + ETH_HLEN
        iplen = IP6_HLEN + np.int64(rd16(buf, l3 + 4))
        proto = np.int32(buf[l3 + 6])
        nb = lb[v, LB_N]
        h = np.uint32(0)
        if nb > 1:
            h = flow_hash6_at(buf, l3, l3 + IP6_HLEN, l3 + iplen, proto, 0)
            a = lbb[lb[v, LB_START] + np.int64(h % np.uint32(nb))]
        else:
            a = lbb[lb[v, LB_START]]
        flags = F_IP6
        if proto == PROTO_ICMPV6 and iplen > IP6_HLEN and buf[l3 + IP6_HLEN] < 128:
            flags |= F_ICMP_ERROR
        ifx = adj[a, A_IF]
        if adj[a, A_TYPE] != ADJ_REWRITE or iplen > ifc[ifx, I_MTU] or (ifx == rx and (
                redirect6_wanted_at(buf, l3, ETH_HLEN, rx, flags, ifc, adj, if_ip6, a))):
            continue
        fam[j] = FAM6
        f6 += 1
        buf[l3 + 7] -= 1
        rw = np.int64(adj[a, A_RWLEN])
        out = l3 - rw
        memcpy(buf, out, adj_rw[a], 0, rw)
        if_stats[rx, IFS_RX_PKTS] += 1
        if_stats[rx, IFS_RX_BYTES] += meta[M_LEN, i]
        if_stats[ifx, IFS_TX_PKTS] += 1
        if_stats[ifx, IFS_TX_BYTES] += rw + iplen
        meta[M_FLAGS, i] = flags
        meta[M_OFF, i] = out
        meta[M_LEN, i] = rw + iplen
        meta[M_L3, i] = l3
        meta[M_L4, i] = l3 + IP6_HLEN
        meta[M_PROTO, i] = proto
        meta[M_FIB, i] = tab6[q]
        meta[M_ADJ, i] = a
        meta[M_HASH, i] = np.int32(h)
        meta[M_TX, i] = ifx
        meta[M_NEXT, i] = DONE_TX
        txl[tx] = i
        tx += 1
    txn[0] = tx
    rest = 0  # the graph's share, in arrival order
    for j in range(k):
        if fam[j] == 0:
            frames[ETHERNET_INPUT, rest] = frames[ETHERNET_INPUT, j]
            rest += 1
    frame_n[ETHERNET_INPUT] = rest
    t3 = readcyclecounter()
    counters = dp.counters
    counters[C.C_FIB_LOOKUPS] += f4 + f6
    counters[C.C_IP4_FORWARDED] += f4
    counters[C.C_IP6_FORWARDED] += f6
    _account(dp.node_stats, f4, f6, np.int64(t1 - t0), np.int64(t2 - t1), np.int64(t3 - t2))


@njit(cache=True)
def _account(node_stats, f4, f6, parse, lookup, rewrite) -> None:
    """The fused pass in ``show runtime``: each stage's clocks go to the nodes it stands
    for, by family in proportion to the packets forwarded."""
    f = f4 + f6
    if f == 0:
        return
    if f4 > 0:
        w = np.float64(f4) / f
        _attribute(node_stats, (ETHERNET_INPUT, IP4_INPUT), f4, np.int64(parse * w))
        _attribute(node_stats, (IP4_LOOKUP,), f4, np.int64(lookup * w))
        _attribute(node_stats, (IP4_REWRITE, INTERFACE_OUTPUT), f4, np.int64(rewrite * w))
    if f6 > 0:
        w = np.float64(f6) / f
        if f4 > 0:  # ethernet-input: one call for the whole vector
            node_stats[ETHERNET_INPUT, NS_CALLS] -= 1
        _attribute(node_stats, (ETHERNET_INPUT, IP6_INPUT), f6, np.int64(parse * w))
        _attribute(node_stats, (IP6_LOOKUP,), f6, np.int64(lookup * w))
        _attribute(node_stats, (IP6_REWRITE, INTERFACE_OUTPUT), f6, np.int64(rewrite * w))
        if f4 > 0:
            node_stats[INTERFACE_OUTPUT, NS_CALLS] -= 1
