"""The fused common path: plain unicast IPv4/IPv6 forwarding and SRv6 in one set of passes.

Most packets a router sees are valid unicast IPv4 or IPv6 without options, for a
destination with a resolved next hop on another port — or, on an SRv6 router, packets to
steer into a policy or to one of its SIDs. For them, walking five to eight nodes costs more
than the work itself: every node re-reads the metadata, enqueues each packet and writes its
next node (about 110 ns per IPv4 packet in node clocks). This pass does the same work for
them in one go, straight from the received frame:

1. parse and validate (ethernet-input + ip4/ip6-input: destination MAC, RFC 1812 5.2.2
   and RFC 8200 checks, the IPv4 header checksum, martians, TTL / hop limit); an IPv6
   packet may carry one SRH (routing type 4) right after its header,
2. one vector lookup per family (the prefetching kernels ip4/ip6-lookup use),
3. ECMP bucket and the adjacency, planned without writing anything:
   - a resolved rewrite within the port's MTU (and, for a packet leaving by the port it came
     in on, no redirect due): plain forwarding;
   - an SR policy (srv6-encap, RFC 8986 5.1/5.2): segment list by flow hash, the first
     hop from the list's cached route (the seed's dst_cache), outer header within the MTU
     and the headroom;
   - a local SID (srv6-localsid, RFC 8986 4.1-4.8): End / End.T / End.X with a valid SRH
     and Segments Left > 0 (not PSP's pop), the decapsulations with SL = 0 and an inner
     packet ip4/ip6-input would route with nothing to note;
4. the second vector lookup for End / End.T (the next segment) and End.DT4/DT6/DT46 (the
   inner destination in the SID's table) — RFC 8986's own second lookup, which the SID
   requires; End.X and End.DX4/DX6 use the SID's adjacency,
5. the commit: TTL / hop limit (RFC 1624 for IPv4), the SRH update or the outer header
   copy (one memcpy of the precomputed header), the L2 rewrite and the transmit list
   (ip4/ip6-rewrite + interface-output).

Anything else (errors, options, other extension headers, fragments, multicast, link-local,
local delivery, SRv6 error cases and PSP, unresolved or reply adjacencies, redirects, MTU,
headroom moves, GSO, re-injected packets) is left in ethernet-input's frame untouched, and
the graph handles it exactly as before. Nothing is written to a packet or its metadata
before it is known to take this path, so a packet handed back is bit-for-bit as it arrived.

With a firewall, fw-in classifies the candidates right after parsing and fw-out those
about to leave, with the nodes' own code (graph/firewall.py fw_classify, fw_act). A
classified packet cannot go back to ethernet-input (its rules were counted, its state
kept): what the fused path does not forward then goes on from the node it would have
reached, with the metadata ip4/ip6-input left; SRv6 adjacencies then take the nodes from
the lookup on. One difference with the nodes: within one batch, the candidates are
classified before the packets that walk the nodes, so a keep-state rule created by a
non-plain packet is seen by a plain one of the same batch only from the next batch on.
When no rule can tell the two passes apart (``FW_OUT_REPEATS``,
firewall/compiler.py out_repeats_in), fw-out does not classify again: it counts the rule
that passed each packet at fw-in once more, which is what classifying would have done.

The counters are those the nodes would have raised (interface rx/tx, fib-lookups,
ip4/ip6-forwarded, srv6-encapsulated/end/decapsulated, the firewall's) and ``show runtime``
keeps its per-node packets: the pass counts one call of each node it covers, and splits
each pass's clocks among the nodes it stands for by their packets (see _account). The
dispatcher skips this pass while a trace is selecting packets (every traced packet keeps
its per-node trail) and when ``OPT_NO_FUSED`` is set.
"""

import numpy as np
from numba import njit

from vecroute.fib.host6 import host6_lookup
from vecroute.fib.layout import (
    A_IF,
    A_NH4,
    A_RWLEN,
    A_SR_FLOW,
    A_SR_LIST,
    A_TYPE,
    ADJ_REWRITE,
    ADJ_SRV6_ENCAP,
    ADJ_SRV6_LOCALSID,
    I_FIB4,
    I_FIB6,
    I_MTU,
    LB_N,
    LB_START,
)
from vecroute.fib.lpm_kernels import lpm4_lookup_vec_in, lpm6_lookup_vec_in
from vecroute.firewall.classify import fw_batch_tables, fw_count, fw_count_many
from vecroute.firewall.keys import TK_ROWS
from vecroute.firewall.layout import DIR_IN, DIR_OUT, V_PASS
from vecroute.firewall.states import FC_COUNT
from vecroute.graph import counters as C
from vecroute.graph.cycles import readcyclecounter
from vecroute.graph.firewall import fw_act, fw_classify, table_keys
from vecroute.graph.flow_hash import flow_hash4_at, flow_hash6_at, flow_hash6_dst
from vecroute.graph.frames import enqueue
from vecroute.graph.rewrite import redirect4_wanted_at, redirect6_wanted_at
from vecroute.graph.srv6_encap import first_hop_miss, write_outer
from vecroute.graph.srv6_localsid import (
    END_DT4,
    END_DT6,
    END_DT46,
    END_DX4,
    END_DX6,
    END_T,
    END_X,
    FLAVOR_PSP,
)
from vecroute.graph.state import (
    FW_OUT_REPEATS,
    FW_RUN_IN,
    FW_RUN_OUT,
    FW_TABLES,
    IFS_RX_BYTES,
    IFS_RX_PKTS,
    IFS_TX_BYTES,
    IFS_TX_PKTS,
    NS_CALLS,
    NS_CLOCKS,
    NS_PACKETS,
    OPT_FIB_GEN,
    OPT_FW,
)
from vecroute.graph.token_bucket import has_token
from vecroute.packet.batch import (
    F_FW_SKIP,
    F_HLIM_DONE,
    F_ICMP_ERROR,
    F_IP6,
    L2_ROOM,
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
    SLOT,
)
from vecroute.packet.checksum import fold, ttl_decrement
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
    PROTO_IPIP,
    PROTO_IPV6,
    PROTO_ROUTING,
    ip_length,
    rd16,
    rd32,
    rd64,
)
from vecroute.packet.intrinsics import memcpy
from vecroute.packet.node_ids import (
    DONE_TX,
    ETHERNET_INPUT,
    FW_IN,
    FW_OUT,
    INTERFACE_OUTPUT,
    IP4_INPUT,
    IP4_LOOKUP,
    IP4_REWRITE,
    IP6_INPUT,
    IP6_LOOKUP,
    IP6_REWRITE,
    N_NODES,
    SRV6_ENCAP,
    SRV6_LOCALSID,
)
from vecroute.srv6.layout import (
    CACHE_ADJ,
    CACHE_GEN,
    CACHE_LB,
    FLOW_HASH,
    LIST_HDRLEN,
    POL_BN,
    POL_BSTART,
    SID_ADJ,
    SID_BEHAVIOR,
    SID_FIB4,
    SID_FIB6,
    SID_FLAVOR,
)


@njit(cache=True, inline="always")
def for_us(buf, o, macs, stride, rx) -> bool:
    """Unicast to the receiving port's own MAC (multicast and broadcast take the graph).
    ``macs``: the ports' MACs, flat, ``stride`` bytes a port (``if_mac.shape[1]``);
    compared as a 32- and a 16-bit word (a byte loop with an exit per byte cost ~2 ns a
    packet)."""
    m = np.int64(rx) * stride
    return ((buf[o] & 1) == 0 and rd32(buf, o) == rd32(macs, m)
            and rd16(buf, o + 4) == rd16(macs, m + 4))


@njit(cache=True, inline="always")
def plain4(buf, l3, avail) -> bool:
    """An IPv4 packet ip4-input would route with nothing to note: IHL 5, lengths, header
    checksum (five 32-bit words summed, RFC 1071), no fragment, unicast source and
    destination outside 0/8, 127/8, 169.254/16 and 224/3, TTL above 1."""
    if avail < IP4_HLEN or buf[l3] != 0x45:
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
def _ext_header(nh) -> bool:
    """An extension header ip6-input walks (the upper layer is past it)."""
    return (nh == PROTO_HOPOPT or nh == PROTO_ROUTING or nh == PROTO_FRAGMENT
            or nh == PROTO_DSTOPTS or nh == PROTO_AH)


@njit(cache=True, inline="always")
def _unicast6(buf, l3, avail) -> bool:
    """An IPv6 header ip6-input would route with nothing to note, its extension headers
    aside: lengths, source and destination neither in 00xx::/8 (unspecified, loopback,
    ...) nor multicast nor link-local, hop limit above 1."""
    if avail < IP6_HLEN or (buf[l3] >> 4) != 6:
        return False
    if IP6_HLEN + np.int64(rd16(buf, l3 + 4)) > avail:
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
def plain6(buf, l3, avail) -> bool:
    """_unicast6 with no extension header at all (an inner packet of a decapsulation)."""
    return _unicast6(buf, l3, avail) and not _ext_header(buf[l3 + 6])


@njit(cache=True, inline="always")
def _srh6(buf, l3, end) -> np.int64:
    """The upper-layer offset of an IPv6 packet with at most one extension header, an SRH
    (routing type 4) right after the IPv6 header, within the packet and followed by no
    other extension header; -1 for anything else (the nodes walk it)."""
    nh = buf[l3 + 6]
    if nh != PROTO_ROUTING:
        return -1 if _ext_header(nh) else l3 + IP6_HLEN
    p = l3 + IP6_HLEN
    if p + 8 > end or buf[p + 2] != 4:
        return -1
    l4 = p + (np.int64(buf[p + 1]) + 1) * 8
    if l4 > end or _ext_header(buf[p]):
        return -1
    return l4


@njit(cache=True, inline="always")
def icmp_error_flag(buf, l4, end, proto, ip6) -> int:
    """F_ICMP_ERROR when the packet is an ICMP error message (as ip4/ip6-input decide)."""
    if ip6:
        if proto == PROTO_ICMPV6 and l4 < end and buf[l4] < 128:
            return F_ICMP_ERROR
        return 0
    if proto == PROTO_ICMP and l4 < end:
        t = buf[l4]  # ip4-input's is_icmp4_error_type
        if t == 3 or t == 4 or t == 5 or t == 11 or t == 12 or t > 18:
            return F_ICMP_ERROR
    return 0


@njit(cache=True, inline="always")
def _stage(buf, meta, if_stats, pk, i, ln, l4, ulp, fib, six) -> None:
    """Slot i's metadata as ethernet-input and ip4/ip6-input would have left it, and their
    counts (ethernet-input's receive count before the padding goes, their packets in
    ``pk``): for a packet that leaves the pass for a node after it was classified."""
    pk[ETHERNET_INPUT] += 1
    pk[IP6_INPUT if six else IP4_INPUT] += 1
    l3 = np.int64(meta[M_OFF, i]) + ETH_HLEN
    rx = meta[M_RX, i]
    if_stats[rx, IFS_RX_PKTS] += 1
    if_stats[rx, IFS_RX_BYTES] += meta[M_LEN, i]
    meta[M_LEN, i] = ETH_HLEN + ln
    meta[M_L3, i] = l3
    meta[M_L4, i] = l4
    meta[M_PROTO, i] = ulp
    meta[M_FIB, i] = fib
    meta[M_FLAGS, i] = (F_IP6 if six else 0) | icmp_error_flag(buf, l4, l3 + ln, ulp, six)


@njit(cache=True, inline="always")
def _repeat_pass(fw, fwv, iplen, state, nc, dflt, now) -> np.int64:
    """fw-out when it must end as fw-in did (``FW_OUT_REPEATS``): each pending candidate
    counted again for the rule that passed it at fw-in (fwv by candidate), the default
    rule once for all of its packets. Returns how many were pending."""
    pending = np.int64(0)
    nd = np.int64(0)
    nbytes = np.int64(0)
    for c in range(nc):
        if state[c] != PENDING:
            continue
        pending += 1
        r = np.int64(fwv[1, c])
        if r == dflt:
            nd += 1
            nbytes += iplen[c]
        else:
            fw_count(fw, r, iplen[c], now)
    if nd > 0:
        fw_count_many(fw, dflt, nd, nbytes, now)
    return pending


@njit(cache=True, inline="always")
def _sid_like(nh) -> bool:
    """An IPv6 next header that an SRv6 endpoint's packet has: the SRH, or an inner IPv6
    or IPv4 packet (H.Encaps.Red with one segment, RFC 8986 5.2)."""
    return nh == PROTO_ROUTING or nh == PROTO_IPV6 or nh == PROTO_IPIP


@njit(cache=True, inline="always")
def _hash(buf, l3, l4, end, proto, ip6) -> np.uint32:
    """The flow hash the lookup nodes compute (graph/flow_hash.py) from offsets."""
    if ip6:
        return flow_hash6_at(buf, l3, l4, end, proto, 0)
    return flow_hash4_at(buf, l3, l4, end, proto, 0)


@njit(cache=True, inline="always")
def _gather(buf, l3, six, c, t, idx4, dst4, tab4, n4, idx6, hi6, lo6, tab6, n6):
    """Queue candidate c's lookup of the destination of the packet at l3 in table t on its
    family's vector; returns the vectors' new lengths."""
    if six:
        idx6[n6] = c
        hi6[n6] = rd64(buf, l3 + 24)
        lo6[n6] = rd64(buf, l3 + 32)
        tab6[n6] = t
        return n4, n6 + 1
    idx4[n4] = c
    dst4[n4] = rd32(buf, l3 + 16)
    tab4[n4] = t
    return n4 + 1, n6


@njit(cache=True, inline="always")
def _bucket(lb, lbb, v, h) -> np.int64:
    """The load-balance entry v's adjacency for flow hash h (lookup.pick_adjacency)."""
    nb = lb[v, LB_N]
    if nb == 1:
        return np.int64(lbb[lb[v, LB_START]])
    return np.int64(lbb[lb[v, LB_START] + np.int64(h % np.uint32(nb))])


@njit(cache=True, inline="always")
def _leaves(adj, ifc, a, iplen) -> bool:
    """Adjacency a is a resolved rewrite whose port takes iplen bytes of IP."""
    return a >= 0 and a < adj.shape[0] and adj[a, A_TYPE] == ADJ_REWRITE and iplen <= ifc[
        adj[a, A_IF], I_MTU]


# what a candidate's adjacency asks (kinds)
K_PLAIN = 0  # forward
K_ENCAP = 1  # H.Encaps / H.Encaps.Red, then forward by the first segment's route
K_END = 2  # End / End.T: the next segment, looked up (again)
K_END_X = 3  # End.X: the next segment, to the SID's adjacency
K_DX = 4  # End.DX4 / End.DX6: the inner packet to the SID's adjacency
K_DT = 5  # End.DT4 / End.DT6 / End.DT46: the inner packet, looked up in the SID's table


@njit(cache=True, inline="always")
def _plan_localsid(buf, l3, end, l4, ulp, sr_sid, sid):
    """What srv6-localsid would do with this packet, when it is the common case: (kind,
    offset, table column, inner is IPv6); kind -1 for anything the node must handle (no
    SRH or SL 0 for End, a bad SRH, PSP's pop, a next segment we do not route here, SL not
    0 for a decapsulation, an inner packet ip4/ip6-input would not route plainly). The
    offset is the next segment's (End) or the inner packet's (decapsulations)."""
    beh = sr_sid[sid, SID_BEHAVIOR]
    srh = l3 + IP6_HLEN if buf[l3 + 6] == PROTO_ROUTING else -1
    sl = np.int64(buf[srh + 3]) if srh >= 0 else 0
    if beh <= END_T:
        if sl == 0:
            return -1, 0, 0, False
        hel = np.int64(buf[srh + 1])
        le = np.int64(buf[srh + 4])
        if le > hel // 2 - 1 or sl > le + 1:
            return -1, 0, 0, False
        if sr_sid[sid, SID_FLAVOR] == FLAVOR_PSP and sl == 1:
            return -1, 0, 0, False
        seg = srh + 8 + 16 * (sl - 1)
        if buf[seg] == 0xFF or buf[seg] == 0 or (buf[seg] == 0xFE and (buf[seg + 1] & 0xC0)
                                                 == 0x80):
            return -1, 0, 0, False
        if beh == END_X:
            return K_END_X, seg, SID_ADJ, True
        return K_END, seg, SID_FIB6 if beh == END_T else -1, True
    if sl != 0:
        return -1, 0, 0, False
    want6 = beh == END_DX6 or beh == END_DT6 or beh == END_DT46
    want4 = beh == END_DX4 or beh == END_DT4 or beh == END_DT46
    dx = beh == END_DX4 or beh == END_DX6
    if ulp == PROTO_IPV6 and want6 and plain6(buf, l4, end - l4):
        return (K_DX if dx else K_DT), l4, SID_ADJ if dx else SID_FIB6, True
    if ulp == PROTO_IPIP and want4 and plain4(buf, l4, end - l4):
        return (K_DX if dx else K_DT), l4, SID_ADJ if dx else SID_FIB4, False
    return -1, 0, 0, False


@njit(cache=True, _nrt=False)
def _account(node_stats, pk, clocks) -> None:
    """The fused pass in ``show runtime``: one call of each node that saw packets, with the
    packets it would have seen; each pass's clocks split among the nodes it stands for, by
    their packets. The passes: parse (ethernet-input, ip4/ip6-input), fw-in, the lookups,
    fw-out, the commit (rewrites, SRv6, interface-output)."""
    groups = ((ETHERNET_INPUT, IP4_INPUT, IP6_INPUT, -1, -1), (FW_IN, -1, -1, -1, -1),
              (IP4_LOOKUP, IP6_LOOKUP, -1, -1, -1), (FW_OUT, -1, -1, -1, -1),
              (IP4_REWRITE, IP6_REWRITE, SRV6_ENCAP, SRV6_LOCALSID, INTERFACE_OUTPUT))
    for g in range(5):
        nodes = groups[g]
        tot = 0
        for n in nodes:
            if n >= 0:
                tot += pk[n]
        for n in nodes:
            if n >= 0 and pk[n] > 0:
                node_stats[n, NS_CALLS] += 1
                node_stats[n, NS_PACKETS] += pk[n]
                node_stats[n, NS_CLOCKS] += clocks[g] * pk[n] // tot


# the nodes this pass stands for: what it sends and counts, one of them declares
# (tests/test_node_registry.py checks it)
ACTS_FOR = ("ethernet-input", "ip4-input", "ip6-input", "fw-in", "ip4-lookup", "ip6-lookup",
            "srv6-encap", "srv6-localsid", "fw-out", "ip4-rewrite", "ip6-rewrite",
            "interface-output")

# what became of a candidate
PENDING = 0  # still on the fused path
SENT = 1  # forwarded
GONE = 2  # handed to a node past ethernet-input (a firewall verdict, or on to the lookup)
BACK = 3  # back to ethernet-input, untouched


@njit(cache=True, inline="always")
def fused_scratch(k):
    """The pass's scratch for up to k candidates, allocated once and reused by every pass
    (three allocations; one per scratch row would cost ~1 us a batch): per candidate its
    slot, its place in the frame, IP length, table, value, adjacency, flow hash,
    upper-layer offset and protocol, kind, its kind's offset (next segment, inner packet,
    segment list); per family the lookups' inputs, and their scratch; the table keys
    (``TK_ROWS``) of a table-only rule set; flags: family,
    fate; packets per node and the passes' clocks, for show runtime. The pass clears what
    it reads before writing it."""
    return (np.empty((25 + TK_ROWS, k), np.int64), np.empty((4, k), np.uint8),
            np.empty(N_NODES + 5, np.int64))


@njit(cache=True)
def fused_forward(buf, meta, frames, frame_n, txl, txn, dp, fw, fwk, fwv, now) -> None:
    """Forward the common packets of ethernet-input's frame; leave the rest in it.

    With a firewall (``fw``, its key and verdict scratch ``fwk``/``fwv``) the candidates
    are classified in the same pass (fw-in after parsing, fw-out with the adjacency
    chosen); once classified, a packet cannot go back: what the fused path does not
    forward then continues at the node it would have reached (the verdict's, or the
    lookup), with its metadata as ip4/ip6-input and fw-in would have left it.

    The pass itself (:func:`fused_pass`) is compiled without reference counting; the
    dispatcher calls it directly with :func:`fused_scratch` (a call to this wrapper would
    count a reference to each of the ~60 arrays it is handed, every batch)."""
    k = frame_n[ETHERNET_INPUT]
    if k == 0:
        return
    sc, fl, acc = fused_scratch(k)
    fused_pass(buf, meta, frames, frame_n, txl, txn, dp, fw, fwk, fwv, now, sc, fl, acc)


@njit(cache=True, _nrt=False)
def fused_pass(buf, meta, frames, frame_n, txl, txn, dp, fw, fwk, fwv, now, sc, fl,
                acc) -> None:
    """fused_forward's pass over scratch it is given (fused_scratch). Compiled with ``_nrt=False``:
    with reference counting, every array an inlined helper is handed (the buffer to
    ``rd16``, the tables to ``_bucket``) cost an atomic increment and decrement, up to
    half of the pass's time (``perf`` on bench.srv6: 35 % of plain IPv6's samples, 50 %
    of End.DX6's, in NRT_incref / NRT_decref). Nothing in it may allocate."""
    k = frame_n[ETHERNET_INPUT]
    # the scratch is reused batch after batch: clear what is read before it is written
    for x in range(acc.shape[0]):
        acc[x] = 0
    for c in range(k):
        fl[1, c] = 0
        fl[3, c] = 0
    # the arrays once, out of dp: a dp access in a per-packet loop costs reference counts
    ifc, if_mac, if_ip6, if_stats, adj, lb, lbb, tb = (
        dp.ifc, dp.if_mac, dp.if_ip6, dp.if_stats, dp.adj, dp.lb, dp.lb_buckets, dp.icmp_tb)
    sr_sid, sr_pol, sr_bucket, sr_list, sr_hdr, sr_cache = (
        dp.sr_sid, dp.sr_pol, dp.sr_bucket, dp.sr_list, dp.sr_hdr, dp.sr_cache)
    gen = dp.opts[OPT_FIB_GEN]
    f4r, f4g, f6r, f6g = dp.fib4_roots, dp.fib4_groups, dp.fib6_roots, dp.fib6_groups
    hk, hv = dp.fib6_host_keys, dp.fib6_host_vals
    hosts = hv.shape[0] > 1  # any /128 at all (an empty table is one free slot)
    rwf = dp.adj_rw.reshape(-1)  # rows by offset: a row view per packet costs refcounts
    macs, mstride = if_mac.reshape(-1), np.int64(if_mac.shape[1])
    rww = np.int64(dp.adj_rw.shape[1])
    fw_in = False
    fw_out = False
    tables = False  # FW_TABLES: classified from the header's addresses, no key rows
    repeats = False  # fw-out counts fw-in's rule again (FW_OUT_REPEATS)
    dflt = 0
    if fw is not None:
        fopt = dp.opts[OPT_FW]
        fw_in = (fopt & FW_RUN_IN) != 0
        fw_out = (fopt & FW_RUN_OUT) != 0
        nostates = fw.ctl[FC_COUNT] == 0  # none to sweep (and these rule sets make none)
        tables = (fopt & FW_TABLES) != 0 and nostates
        repeats = fw_in and (fopt & FW_OUT_REPEATS) != 0 and nostates
        dflt = fw.rinfo.shape[0] - 1
    # a classified packet cannot go back to ethernet-input: what leaves the pass after
    # fw-in goes on at a node, with its metadata. The key extraction reads the metadata,
    # so every candidate's is written up front ("staged"); a table-only rule set reads the
    # header itself, and only the packets that leave are staged, one by one
    fwpath = fw_in or fw_out
    staged = (fw_in and not tables) or (fw_out and not tables and not repeats)
    t0 = readcyclecounter()
    # -- 1. parse and validate: the candidates, in arrival order
    slot, pos, iplen, tab, val, adjs, hashes = sc[0], sc[1], sc[2], sc[3], sc[4], sc[5], sc[6]
    idx4, dst4, tab4, out4, idx6, hi6, lo6, tab6, out6 = (
        sc[7], sc[8], sc[9], sc[10], sc[11], sc[12], sc[13], sc[14], sc[15])
    work, back = sc[16], sc[17]  # fw-out's vector, and the candidate of each entry
    l4s, ulps, kinds, aux, ilen = sc[18], sc[19], sc[20], sc[21], sc[22]
    ents, active = sc[23].view(np.uint32), sc[24]  # the vector lookups' own
    tk = sc[25:]  # a table-only rule set's keys (FW_TABLES), filled while parsing
    ip6, state, keep, in6 = fl[0], fl[1], fl[2], fl[3]
    pk, clocks = acc[:N_NODES], acc[N_NODES:]
    nc = 0
    for j in range(k):
        i = frames[ETHERNET_INPUT, j]
        ln = np.int64(meta[M_LEN, i])
        if meta[M_FLAGS, i] != 0 or ln > MAX_FRAME or ln < ETH_HLEN + IP4_HLEN:
            continue
        o = np.int64(meta[M_OFF, i])
        rx = meta[M_RX, i]
        if not for_us(buf, o, macs, mstride, rx):
            continue
        et = rd16(buf, o + 12)
        l3 = o + ETH_HLEN
        if et == ETH_P_IP:
            if not plain4(buf, l3, ln - ETH_HLEN):
                continue
            iplen[nc] = rd16(buf, l3 + 2)
            tab[nc] = ifc[rx, I_FIB4]
            l4s[nc] = l3 + IP4_HLEN
            ulps[nc] = buf[l3 + 9]
            ip6[nc] = False
        elif et == ETH_P_IPV6:
            if not _unicast6(buf, l3, ln - ETH_HLEN):
                continue
            n = IP6_HLEN + np.int64(rd16(buf, l3 + 4))
            l4 = _srh6(buf, l3, l3 + n)
            if l4 < 0:
                continue
            iplen[nc] = n
            tab[nc] = ifc[rx, I_FIB6]
            l4s[nc] = l4
            ulps[nc] = buf[l3 + IP6_HLEN] if l4 != l3 + IP6_HLEN else buf[l3 + 6]
            ip6[nc] = True
        else:
            continue
        slot[nc] = i
        pos[nc] = j
        nc += 1
    if nc == 0:
        return  # nothing plain: the graph pays only this scan
    if tables:  # the keys the rule set reads, in a loop of their own: the parse's is long
        for c in range(nc):
            table_keys(buf, np.int64(meta[M_OFF, slot[c]]) + ETH_HLEN, ip6[c] != 0, iplen[c],
                       tk, c)
    if staged:  # past ip4/ip6-input for good: its metadata, as the nodes would have it
        for c in range(nc):
            _stage(buf, meta, if_stats, pk, slot[c], iplen[c], l4s[c], ulps[c], tab[c],
                   ip6[c] != 0)
    t1 = readcyclecounter()
    # -- fw-in over the candidates
    if fw_in:
        stopped = nc
        if tables:  # from the keys the parse wrote
            stopped = fw_batch_tables(fw, tk, nc, now, fwv[0], fwv[1], fwv[2])
        else:
            fw_classify(slot, nc, buf, meta, dp, fw, fwk, fwv, now, DIR_IN)
        for c in range(nc if stopped > 0 else 0):
            if fwv[0, c] != V_PASS:
                i = slot[c]
                if not staged:
                    _stage(buf, meta, if_stats, pk, i, iplen[c], l4s[c], ulps[c], tab[c],
                           ip6[c] != 0)
                fw_act(frames, frame_n, meta, i, fwv[0, c], fwv[2, c], ip6[c] != 0)
                state[c] = GONE
        pk[FW_IN] = nc
    t2 = readcyclecounter()
    # -- 2. one vector lookup per family; a destination that is likely a local SID (an
    # SRH or an IP-in-IPv6 packet behind the header) is probed in the /128s first: a hit is
    # the trie's answer without its 15 levels (fib/host6.py)
    n4 = 0
    n6 = 0
    for c in range(nc):
        if state[c] != PENDING:
            continue
        l3 = np.int64(meta[M_OFF, slot[c]]) + ETH_HLEN
        if hosts and ip6[c] and _sid_like(buf[l3 + 6]):
            v = host6_lookup(hk, hv, tab[c], rd64(buf, l3 + 24), rd64(buf, l3 + 32))
            if v >= 0:
                val[c] = v
                continue
        n4, n6 = _gather(buf, l3, ip6[c] != 0, c, tab[c], idx4, dst4, tab4, n4, idx6, hi6,
                         lo6, tab6, n6)
    lpm4_lookup_vec_in(f4r, f4g, tab4, dst4, n4, out4, ents)
    lpm6_lookup_vec_in(f6r, f6g, tab6, hi6, lo6, n6, out6, ents, active)
    for q in range(n4):
        val[idx4[q]] = out4[q]
    for q in range(n6):
        val[idx6[q]] = out6[q]
    t3 = readcyclecounter()
    # -- 3. the adjacency: one this path can finish, or the nodes take over
    n4 = 0  # the second lookups (End, End.T, End.DTx), in the same arrays
    n6 = 0
    for c in range(nc):
        if state[c] != PENDING:
            continue
        i = slot[c]
        v = val[c]
        ok = v >= 0
        if ok:
            rx = meta[M_RX, i]
            l3 = np.int64(meta[M_OFF, i]) + ETH_HLEN
            six = ip6[c] != 0
            end = l3 + iplen[c]
            h = np.uint32(0)
            if lb[v, LB_N] > 1:
                h = _hash(buf, l3, l4s[c], end, ulps[c], six)
            a = _bucket(lb, lbb, v, h)
            t = adj[a, A_TYPE]
            kinds[c] = K_PLAIN
            if t == ADJ_REWRITE:
                ifx = adj[a, A_IF]
                if iplen[c] > ifc[ifx, I_MTU]:
                    ok = False
                elif ifx == rx:  # back out the way it came: the node would send a redirect?
                    flags = icmp_error_flag(buf, l4s[c], end, ulps[c], six)
                    if six:
                        ok = not redirect6_wanted_at(buf, l3, ETH_HLEN, rx, flags | F_IP6,
                                                     ifc, adj, if_ip6, a)
                    else:
                        ok = not (redirect4_wanted_at(buf, l3, rx, flags, ifc, adj, a)
                                  and has_token(tb, now))
            elif fwpath:
                ok = False  # SRv6 with a firewall: the nodes from the lookup on
            elif t == ADJ_SRV6_ENCAP:  # srv6-encap: its segment list, its first hop
                ok = False
                # the flow hash where srv6-encap uses it: the flow label of a FLOW_HASH
                # policy (from the adjacency, at once: it overlaps the reads below), the
                # choice among lists, among the first hop's paths
                if h == 0 and adj[a, A_SR_FLOW] == FLOW_HASH:
                    h = _hash(buf, l3, l4s[c], end, ulps[c], six)
                lst = np.int64(adj[a, A_SR_LIST])  # the policy's one list: no more reads
                if lst < 0:
                    pol = adj[a, A_NH4]
                    nb = sr_pol[pol, POL_BN]
                    if nb > 0:
                        if h == 0 and nb > 1:
                            h = _hash(buf, l3, l4s[c], end, ulps[c], six)
                        lst = sr_bucket[sr_pol[pol, POL_BSTART] + (
                            0 if nb == 1 else np.int64(h % np.uint32(nb)))]  # a division
                if lst >= 0:
                    if sr_cache[lst, CACHE_GEN] != gen:  # the node would refresh it just the same
                        first_hop_miss(f6r, f6g, lb, lbb, sr_list, sr_hdr, sr_cache, lst, gen)
                    hl = np.int64(sr_list[lst, LIST_HDRLEN])
                    if sr_cache[lst, CACHE_LB] >= 0 and l3 - hl - L2_ROOM >= i * SLOT:
                        a = sr_cache[lst, CACHE_ADJ]  # its one adjacency, or the load-balance's
                        if a < 0:
                            if h == 0:
                                h = _hash(buf, l3, l4s[c], end, ulps[c], six)
                            a = _bucket(lb, lbb, sr_cache[lst, CACHE_LB], h)
                        ok = _leaves(adj, ifc, a, iplen[c] + hl)
                        kinds[c] = K_ENCAP
                        aux[c] = lst
            elif t == ADJ_SRV6_LOCALSID and six:  # srv6-localsid: End, End.X, End.T, decaps
                sid = adj[a, A_NH4]
                kd, off, col, inner6 = _plan_localsid(buf, l3, end, l4s[c], ulps[c], sr_sid,
                                                      sid)
                ok = kd >= 0
                kinds[c] = kd
                aux[c] = off
                in6[c] = inner6
                if kd == K_END_X or kd == K_DX:  # the SID's adjacency
                    a = np.int64(sr_sid[sid, SID_ADJ])
                    if kd == K_DX:
                        h = np.uint32(0)  # the node drops the outer flow's hash at decap
                        ilen[c] = ip_length(buf, off, inner6)
                        ok = _leaves(adj, ifc, a, ilen[c]) and adj[a, A_IF] != rx
                    else:
                        ok = _leaves(adj, ifc, a, iplen[c])
                elif kd == K_END:  # the next segment, in this table or the SID's
                    if col >= 0:
                        tab[c] = sr_sid[sid, col]
                    idx6[n6] = c
                    hi6[n6] = rd64(buf, off)
                    lo6[n6] = rd64(buf, off + 8)
                    tab6[n6] = tab[c]
                    n6 += 1
                elif kd == K_DT:  # the inner destination, in the SID's table
                    tab[c] = sr_sid[sid, col]
                    ilen[c] = ip_length(buf, off, inner6)
                    n4, n6 = _gather(buf, off, inner6, c, tab[c], idx4, dst4, tab4, n4, idx6,
                                     hi6, lo6, tab6, n6)
            else:
                ok = False
            adjs[c] = a
            hashes[c] = h
        if not ok:
            if fwpath:  # the lookup node takes it from here (and looks it up itself)
                if not staged:
                    _stage(buf, meta, if_stats, pk, i, iplen[c], l4s[c], ulps[c], tab[c],
                           ip6[c] != 0)
                enqueue(frames, frame_n, meta, IP6_LOOKUP if ip6[c] else IP4_LOOKUP, i)
                state[c] = GONE
            else:
                state[c] = BACK
        elif staged:
            pk[IP6_LOOKUP if ip6[c] else IP4_LOOKUP] += 1
    t4 = readcyclecounter()
    # -- 4. the second lookups: RFC 8986's own, for End / End.T and End.DTx
    if n4 + n6 > 0:
        lpm4_lookup_vec_in(f4r, f4g, tab4, dst4, n4, out4, ents)
        lpm6_lookup_vec_in(f6r, f6g, tab6, hi6, lo6, n6, out6, ents, active)
        for q in range(n4 + n6):
            c = idx4[q] if q < n4 else idx6[q - n4]
            if state[c] != PENDING:
                continue
            v = out4[q] if q < n4 else out6[q - n4]
            ok = v >= 0
            if ok:
                i = slot[c]
                l3 = np.int64(meta[M_OFF, i]) + ETH_HLEN
                off = aux[c]
                h = np.uint32(0)
                if kinds[c] == K_END:
                    if lb[v, LB_N] > 1:
                        h = flow_hash6_dst(buf, l3, rd64(buf, off), rd64(buf, off + 8),
                                           l4s[c], l3 + iplen[c], ulps[c], 0)
                        hashes[c] = h
                    a = _bucket(lb, lbb, v, h)
                    ok = _leaves(adj, ifc, a, iplen[c])
                else:  # the inner packet's own flow, as ip4/ip6-lookup hash it
                    six = in6[c] != 0
                    if lb[v, LB_N] > 1:
                        h = _hash(buf, off, off + (IP6_HLEN if six else IP4_HLEN),
                                  off + ilen[c], np.int64(buf[off + (6 if six else 9)]), six)
                    hashes[c] = h
                    a = _bucket(lb, lbb, v, h)
                    ok = _leaves(adj, ifc, a, ilen[c]) and adj[a, A_IF] != meta[M_RX, i]
                adjs[c] = a
            if not ok:
                state[c] = BACK
    t5 = readcyclecounter()
    # -- fw-out over what would leave
    nout = 0
    fw_lookups = 0  # packets fw-out stops after their lookup (the lookup nodes' count)
    if fw_out and not staged:
        # no metadata read: fw-in's rules again (the rule set cannot tell the passes apart:
        # CompiledFirewall.out_repeats_in; fw-in passed them all, so none stops here), or
        # a table-only rule set's own pass over the parse's keys of the pending packets,
        # moved up in place (fw-out alone; or after fw-in when a rule no packet can meet
        # counts, logs or names an interface, so the passes do not repeat each other)
        if repeats:
            nout = _repeat_pass(fw, fwv, iplen, state, nc, dflt, now)
        else:
            for c in range(nc):
                if state[c] == PENDING:
                    for x in range(TK_ROWS):
                        tk[x, nout] = tk[x, c]
                    back[nout] = c
                    nout += 1
            stopped = fw_batch_tables(fw, tk, nout, now, fwv[0], fwv[1], fwv[2])
            for q in range(nout if stopped > 0 else 0):  # fwv by q here
                if fwv[0, q] != V_PASS:
                    c = back[q]
                    i = slot[c]
                    _stage(buf, meta, if_stats, pk, i, iplen[c], l4s[c], ulps[c], tab[c],
                           ip6[c] != 0)
                    pk[IP6_LOOKUP if ip6[c] else IP4_LOOKUP] += 1
                    fw_lookups += 1
                    meta[M_ADJ, i] = adjs[c]
                    fw_act(frames, frame_n, meta, i, fwv[0, q], fwv[2, q], ip6[c] != 0)
                    state[c] = GONE
        pk[FW_OUT] = nout
    elif fw_out:
        for c in range(nc):
            if state[c] == PENDING:
                i = slot[c]
                meta[M_ADJ, i] = adjs[c]
                work[nout] = i
                back[nout] = c
                nout += 1
        if repeats:  # as above (fw-in passed them all), over the staged packets
            _repeat_pass(fw, fwv, iplen, state, nc, dflt, now)
        else:
            fw_classify(work, nout, buf, meta, dp, fw, fwk, fwv, now, DIR_OUT)
            for q in range(nout):
                if fwv[0, q] != V_PASS:
                    c = back[q]
                    fw_act(frames, frame_n, meta, slot[c], fwv[0, q], fwv[2, q],
                           ip6[c] != 0)
                    state[c] = GONE
        pk[FW_OUT] = nout
    t6 = readcyclecounter()
    # -- 5. the commit: TTL, SRv6, the rewrite and the transmit list
    tx = txn[0]
    f4 = 0
    f6 = 0
    lookups = 0
    n_encap = 0
    n_end = 0
    n_decap = 0
    for c in range(nc):
        if state[c] != PENDING:
            continue
        state[c] = SENT
        i = slot[c]
        a = adjs[c]
        ifx = adj[a, A_IF]
        rx = meta[M_RX, i]
        l3 = np.int64(meta[M_OFF, i]) + ETH_HLEN
        ln = iplen[c]
        six = ip6[c] != 0
        kd = kinds[c]
        if not staged:  # ethernet-input's count, before the padding goes
            if_stats[rx, IFS_RX_PKTS] += 1
            if_stats[rx, IFS_RX_BYTES] += meta[M_LEN, i]
            pk[ETHERNET_INPUT] += 1
            pk[IP6_INPUT if six else IP4_INPUT] += 1
            pk[IP6_LOOKUP if six else IP4_LOOKUP] += 1
        l4 = l4s[c]
        proto = ulps[c]
        flags = (F_IP6 if six else 0) | icmp_error_flag(buf, l4, l3 + ln, proto, six)
        fib = tab[c]
        if kd == K_PLAIN:
            ttl_decrement(buf, l3, six)
            lookups += 1
        elif kd == K_ENCAP:  # RFC 8986 5.1: the inner TTL first, then the outer header
            ttl_decrement(buf, l3, six)
            n, proto = write_outer(buf, l3, six, ln, np.uint32(hashes[c]), sr_hdr, sr_list,
                                   aux[c])
            ln += l3 - n
            l3 = n
            l4 = n + IP6_HLEN
            six = True
            flags = F_IP6 | F_HLIM_DONE | F_FW_SKIP
            lookups += 1
            n_encap += 1
            pk[SRV6_ENCAP] += 1
        elif kd == K_END or kd == K_END_X:  # RFC 8986 4.1: SL - 1, the next segment
            buf[l3 + 7] -= 1
            buf[l3 + IP6_HLEN + 3] -= 1
            # the next segment as the destination: one 16-byte move (a byte loop cost ~4 ns);
            # _plan_localsid's SL >= 1 and Last Entry / Hdr Ext Len checks put it inside
            # the SRH, at l3 + 48 or after: never overlapping the destination field
            memcpy(buf, l3 + 24, buf, aux[c], 16)
            flags |= F_HLIM_DONE
            lookups += 2 if kd == K_END else 1
            n_end += 1
            pk[SRV6_LOCALSID] += 1
            if kd == K_END:
                pk[IP6_LOOKUP] += 1
        else:  # RFC 8986 4.4-4.8: the inner packet on, as ip4/ip6-input leave it
            l3 = aux[c]
            six = in6[c] != 0
            ln = ilen[c]
            l4 = l3 + (IP6_HLEN if six else IP4_HLEN)
            proto = np.int64(buf[l3 + (6 if six else 9)])
            flags = (F_IP6 if six else 0) | icmp_error_flag(buf, l4, l3 + ln, proto, six)
            ttl_decrement(buf, l3, six)
            if kd == K_DX:
                lookups += 1
            else:
                lookups += 2
            n_decap += 1
            pk[SRV6_LOCALSID] += 1
            pk[IP6_INPUT if six else IP4_INPUT] += 1
            pk[IP6_LOOKUP if six else IP4_LOOKUP] += 1
        if six:
            f6 += 1
        else:
            f4 += 1
        rw = np.int64(adj[a, A_RWLEN])
        out = l3 - rw
        if rw == ETH_HLEN:  # a constant size: the copy is inlined (no memcpy call)
            memcpy(buf, out, rwf, a * rww, ETH_HLEN)
        else:
            memcpy(buf, out, rwf, a * rww, rw)
        if not staged:  # what the nodes would have noted (staged: done above)
            meta[M_L3, i] = l3
            meta[M_L4, i] = l4
            meta[M_PROTO, i] = proto
            meta[M_FIB, i] = fib
            meta[M_FLAGS, i] = flags
        if_stats[ifx, IFS_TX_PKTS] += 1
        if_stats[ifx, IFS_TX_BYTES] += rw + ln
        meta[M_OFF, i] = out
        meta[M_LEN, i] = rw + ln
        meta[M_ADJ, i] = a
        meta[M_HASH, i] = np.int32(np.uint32(hashes[c]))
        meta[M_TX, i] = ifx
        meta[M_NEXT, i] = DONE_TX
        txl[tx] = i
        tx += 1
    txn[0] = tx
    pk[IP4_REWRITE] += f4
    pk[IP6_REWRITE] += f6
    pk[INTERFACE_OUTPUT] += f4 + f6
    # what goes back to ethernet-input, in arrival order
    keep[:] = 1
    for c in range(nc):
        if state[c] != BACK:
            keep[pos[c]] = 0
    rest = 0
    for j in range(k):
        if keep[j]:
            frames[ETHERNET_INPUT, rest] = frames[ETHERNET_INPUT, j]
            rest += 1
    frame_n[ETHERNET_INPUT] = rest
    t7 = readcyclecounter()
    counters = dp.counters
    counters[C.C_FIB_LOOKUPS] += ((pk[IP4_LOOKUP] + pk[IP6_LOOKUP]) if staged
                                  else lookups + fw_lookups)
    counters[C.C_IP4_FORWARDED] += f4
    counters[C.C_IP6_FORWARDED] += f6
    counters[C.C_SRV6_ENCAPSULATED] += n_encap
    counters[C.C_SRV6_END] += n_end
    counters[C.C_SRV6_DECAPSULATED] += n_decap
    clocks[0] = np.int64(t1 - t0)
    clocks[1] = np.int64(t2 - t1)
    clocks[2] = np.int64(t3 - t2) + np.int64(t4 - t3) + np.int64(t5 - t4)
    clocks[3] = np.int64(t6 - t5)
    clocks[4] = np.int64(t7 - t6)
    _account(dp.node_stats, pk, clocks)
