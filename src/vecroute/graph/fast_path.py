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

With a firewall, fw-in classifies the candidates right after parsing and fw-out those
about to leave, with the nodes' own code (graph/firewall.py fw_classify, fw_act). A
classified packet cannot go back to ethernet-input (its rules were counted, its state
kept): what the fused path does not forward then goes on from the node it would have
reached, with the metadata ip4/ip6-input left. One difference with the nodes: within one
batch, the candidates are classified before the packets that walk the nodes, so a
keep-state rule created by a non-plain packet is seen by a plain one of the same batch
only from the next batch on.

The counters are those the nodes would have raised (interface rx/tx, fib-lookups,
ip4/ip6-forwarded, the firewall's) and ``show runtime`` keeps its per-node packets: the
pass counts one call of each node it covers, and splits its clocks among them (see
_account). The dispatcher skips this pass while a trace is selecting packets (every traced
packet keeps its per-node trail) and when ``OPT_NO_FUSED`` is set.
"""

import numpy as np
from numba import njit

from vecroute.fib.lpm_kernels import lpm4_lookup_vec, lpm6_lookup_vec
from vecroute.firewall.layout import DIR_IN, DIR_OUT, V_PASS
from vecroute.graph import counters as C
from vecroute.graph.cycles import readcyclecounter
from vecroute.graph.firewall import fw_act, fw_classify
from vecroute.graph.flow_hash import flow_hash4_at, flow_hash6_at
from vecroute.graph.frames import enqueue
from vecroute.graph.node_ids import (
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
)
from vecroute.graph.rewrite import redirect4_wanted_at, redirect6_wanted_at
from vecroute.graph.state import (
    A_IF,
    A_RWLEN,
    A_TYPE,
    ADJ_REWRITE,
    FW_RUN_IN,
    FW_RUN_OUT,
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
    OPT_FW,
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
def _charge(node_stats, node, pkts, clocks) -> None:
    """One call of ``node`` with ``pkts`` packets and ``clocks`` cycles (none: nothing)."""
    if pkts > 0:
        node_stats[node, NS_CALLS] += 1
        node_stats[node, NS_PACKETS] += pkts
        node_stats[node, NS_CLOCKS] += clocks


@njit(cache=True)
def _account(node_stats, parsed4, parsed6, fwin, looked4, looked6, fwout, fwd4, fwd6,
             clk_parse, clk_fwin, clk_lookup, clk_fwout, clk_rewrite) -> None:
    """The fused pass in ``show runtime``: the packets each node would have seen, and each
    pass's clocks split among the nodes it stands for (two-node passes evenly, the
    families in proportion to their packets)."""
    p = max(parsed4 + parsed6, 1)
    _charge(node_stats, ETHERNET_INPUT, parsed4 + parsed6, clk_parse // 2)
    _charge(node_stats, IP4_INPUT, parsed4, clk_parse // 2 * parsed4 // p)
    _charge(node_stats, IP6_INPUT, parsed6, clk_parse // 2 * parsed6 // p)
    _charge(node_stats, FW_IN, fwin, clk_fwin)
    lk = max(looked4 + looked6, 1)
    _charge(node_stats, IP4_LOOKUP, looked4, clk_lookup * looked4 // lk)
    _charge(node_stats, IP6_LOOKUP, looked6, clk_lookup * looked6 // lk)
    _charge(node_stats, FW_OUT, fwout, clk_fwout)
    f = max(fwd4 + fwd6, 1)
    _charge(node_stats, IP4_REWRITE, fwd4, clk_rewrite // 2 * fwd4 // f)
    _charge(node_stats, IP6_REWRITE, fwd6, clk_rewrite // 2 * fwd6 // f)
    _charge(node_stats, INTERFACE_OUTPUT, fwd4 + fwd6, clk_rewrite // 2)


@njit(cache=True, inline="always")
def _icmp_error_flag(buf, l3, iplen, proto, ip6) -> int:
    """F_ICMP_ERROR when the packet is an ICMP error message (as ip4/ip6-input decide)."""
    if ip6:
        if proto == PROTO_ICMPV6 and iplen > IP6_HLEN and buf[l3 + IP6_HLEN] < 128:
            return F_ICMP_ERROR
        return 0
    if proto == PROTO_ICMP and iplen > IP4_HLEN:
        t = buf[l3 + IP4_HLEN]  # ip4-input's is_icmp4_error_type
        if t == 3 or t == 4 or t == 5 or t == 11 or t == 12 or t > 18:
            return F_ICMP_ERROR
    return 0


# the nodes this pass stands for: what it sends and counts, one of them declares
# (tests/test_node_registry.py checks it)
ACTS_FOR = ("ethernet-input", "ip4-input", "ip6-input", "fw-in", "ip4-lookup", "ip6-lookup",
            "fw-out", "ip4-rewrite", "ip6-rewrite", "interface-output")

# what became of a candidate
PENDING = 0  # still on the fused path
SENT = 1  # forwarded
GONE = 2  # handed to a node past ethernet-input (a firewall verdict, or on to the lookup)
BACK = 3  # back to ethernet-input, untouched


@njit(cache=True)
def fused_forward(buf, meta, frames, frame_n, txl, txn, dp, fw, fwk, fwv, now) -> None:
    """Forward the plain packets of ethernet-input's frame; leave the rest in it.

    With a firewall (``fw``, its key and verdict scratch ``fwk``/``fwv``) the candidates
    are classified in the same pass (fw-in after parsing, fw-out with the adjacency
    chosen); once classified, a packet cannot go back: what the fused path does not
    forward then continues at the node it would have reached (the verdict's, or the
    lookup), with its metadata as ip4/ip6-input and fw-in would have left it."""
    k = frame_n[ETHERNET_INPUT]
    if k == 0:
        return
    # the arrays once, out of dp: a dp access in a per-packet loop costs reference counts
    ifc, if_mac, if_ip6, if_stats, adj, lb, lbb, tb = (
        dp.ifc, dp.if_mac, dp.if_ip6, dp.if_stats, dp.adj, dp.lb, dp.lb_buckets, dp.icmp_tb)
    rwf = dp.adj_rw.reshape(-1)  # rows by offset: a row view per packet costs refcounts
    rww = np.int64(dp.adj_rw.shape[1])
    fw_in = False
    fw_out = False
    if fw is not None:
        fw_in = (dp.opts[OPT_FW] & FW_RUN_IN) != 0
        fw_out = (dp.opts[OPT_FW] & FW_RUN_OUT) != 0
    staged = fw_in or fw_out
    t0 = readcyclecounter()
    # -- 1. parse and validate: the candidates, in arrival order
    # scratch rows in two allocations (one each would cost ~1 us a batch): per candidate
    # its slot, its place in the frame, IP length, table, value, adjacency, flow hash;
    # per family the lookup's inputs; flags: family, fate
    sc = np.empty((18, k), np.int64)
    slot, pos, iplen, tab, val, adjs, hashes = sc[0], sc[1], sc[2], sc[3], sc[4], sc[5], sc[6]
    idx4, dst4, tab4, out4, idx6, hi6, lo6, tab6, out6 = (
        sc[7], sc[8], sc[9], sc[10], sc[11], sc[12], sc[13], sc[14], sc[15])
    work, back = sc[16], sc[17]  # fw-out's vector, and the candidate of each entry
    fl = np.zeros((3, k), np.uint8)
    ip6, state, keep = fl[0], fl[1], fl[2]
    nc = 0
    parsed4 = 0
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
            if not _plain4(buf, l3, ln - ETH_HLEN):
                continue
            iplen[nc] = rd16(buf, l3 + 2)
            tab[nc] = ifc[rx, I_FIB4]
            parsed4 += 1
        elif et == ETH_P_IPV6:
            if not _plain6(buf, l3, ln - ETH_HLEN):
                continue
            iplen[nc] = IP6_HLEN + np.int64(rd16(buf, l3 + 4))
            tab[nc] = ifc[rx, I_FIB6]
            ip6[nc] = True
        else:
            continue
        slot[nc] = i
        pos[nc] = j
        nc += 1
    if nc == 0:
        return  # nothing plain: the graph pays only this scan
    parsed6 = nc - parsed4
    if staged:  # past ip4/ip6-input for good: its metadata, as the nodes would have it
        for c in range(nc):
            i = slot[c]
            l3 = np.int64(meta[M_OFF, i]) + ETH_HLEN
            proto = np.int32(buf[l3 + 9]) if not ip6[c] else np.int32(buf[l3 + 6])
            rx = meta[M_RX, i]
            if_stats[rx, IFS_RX_PKTS] += 1  # ethernet-input's, before the padding goes
            if_stats[rx, IFS_RX_BYTES] += meta[M_LEN, i]
            meta[M_LEN, i] = ETH_HLEN + iplen[c]
            meta[M_L3, i] = l3
            meta[M_L4, i] = l3 + (IP6_HLEN if ip6[c] else IP4_HLEN)
            meta[M_PROTO, i] = proto
            meta[M_FIB, i] = tab[c]
            meta[M_FLAGS, i] = (F_IP6 if ip6[c] else 0) | _icmp_error_flag(
                buf, l3, iplen[c], proto, ip6[c])
    t1 = readcyclecounter()
    # -- fw-in over the candidates
    if fw_in:
        fw_classify(slot, nc, buf, meta, dp, fw, fwk, fwv, now, DIR_IN)
        for c in range(nc):
            if fwv[0, c] != V_PASS:
                fw_act(frames, frame_n, meta, slot[c], fwv[0, c], fwv[2, c], ip6[c] != 0)
                state[c] = GONE
    t2 = readcyclecounter()
    # -- 2. one vector lookup per family
    n4 = 0
    n6 = 0
    for c in range(nc):
        if state[c] != PENDING:
            continue
        l3 = np.int64(meta[M_OFF, slot[c]]) + ETH_HLEN
        if ip6[c]:
            idx6[n6] = c
            hi6[n6] = rd64(buf, l3 + 24)
            lo6[n6] = rd64(buf, l3 + 32)
            tab6[n6] = tab[c]
            n6 += 1
        else:
            idx4[n4] = c
            dst4[n4] = rd32(buf, l3 + 16)
            tab4[n4] = tab[c]
            n4 += 1
    lpm4_lookup_vec(dp.fib4_roots, dp.fib4_groups, tab4, dst4, n4, out4)
    lpm6_lookup_vec(dp.fib6_roots, dp.fib6_groups, tab6, hi6, lo6, n6, out6)
    for q in range(n4):
        val[idx4[q]] = out4[q]
    for q in range(n6):
        val[idx6[q]] = out6[q]
    t3 = readcyclecounter()
    # -- 3. the adjacency: one this path can finish, or the nodes take over
    looked4 = 0
    looked6 = 0
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
            proto = np.int32(buf[l3 + 6]) if six else np.int32(buf[l3 + 9])
            nb = lb[v, LB_N]
            h = np.uint32(0)
            if nb > 1:
                if six:
                    h = flow_hash6_at(buf, l3, l3 + IP6_HLEN, l3 + iplen[c], proto, 0)
                else:
                    h = flow_hash4_at(buf, l3, l3 + IP4_HLEN, l3 + iplen[c], proto, 0)
                a = lbb[lb[v, LB_START] + np.int64(h % np.uint32(nb))]
            else:
                a = lbb[lb[v, LB_START]]
            ifx = adj[a, A_IF]
            flags = _icmp_error_flag(buf, l3, iplen[c], proto, six)
            if adj[a, A_TYPE] != ADJ_REWRITE or iplen[c] > ifc[ifx, I_MTU]:
                ok = False
            elif ifx == rx:  # back out the way it came: the node would send a redirect?
                if six:
                    ok = not redirect6_wanted_at(buf, l3, ETH_HLEN, rx, flags | F_IP6, ifc,
                                                 adj, if_ip6, a)
                else:
                    ok = not (redirect4_wanted_at(buf, l3, rx, flags, ifc, adj, a)
                              and has_token(tb, now))
            adjs[c] = a
            hashes[c] = h
        if not ok:
            if staged:  # the lookup node takes it from here (and looks it up itself)
                enqueue(frames, frame_n, meta, IP6_LOOKUP if ip6[c] else IP4_LOOKUP, i)
                state[c] = GONE
            else:
                state[c] = BACK
        elif ip6[c]:
            looked6 += 1
        else:
            looked4 += 1
    t4 = readcyclecounter()
    # -- fw-out over what would leave
    nout = 0
    if fw_out:
        for c in range(nc):
            if state[c] == PENDING:
                i = slot[c]
                meta[M_ADJ, i] = adjs[c]
                work[nout] = i
                back[nout] = c
                nout += 1
        fw_classify(work, nout, buf, meta, dp, fw, fwk, fwv, now, DIR_OUT)
        for q in range(nout):
            if fwv[0, q] != V_PASS:
                c = back[q]
                fw_act(frames, frame_n, meta, slot[c], fwv[0, q], fwv[2, q], ip6[c] != 0)
                state[c] = GONE
    t5 = readcyclecounter()
    # -- the rewrite and the transmit list
    tx = txn[0]
    f4 = 0
    f6 = 0
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
        if six:
            buf[l3 + 7] -= 1
            proto = np.int32(buf[l3 + 6])
            f6 += 1
        else:
            old = rd16(buf, l3 + 8)
            new = np.uint32(old - np.uint32(0x100))
            wr16(buf, l3 + 8, new)
            wr16(buf, l3 + 10, incremental_update(rd16(buf, l3 + 10), old, new))
            proto = np.int32(buf[l3 + 9])
            f4 += 1
        rw = np.int64(adj[a, A_RWLEN])
        out = l3 - rw
        if rw == ETH_HLEN:  # a constant size: the copy is inlined (no memcpy call)
            memcpy(buf, out, rwf, a * rww, ETH_HLEN)
        else:
            memcpy(buf, out, rwf, a * rww, rw)
        if not staged:  # what ip4/ip6-input would have noted (staged: done above)
            if_stats[rx, IFS_RX_PKTS] += 1
            if_stats[rx, IFS_RX_BYTES] += meta[M_LEN, i]
            meta[M_L3, i] = l3
            meta[M_L4, i] = l3 + (IP6_HLEN if six else IP4_HLEN)
            meta[M_PROTO, i] = proto
            meta[M_FIB, i] = tab[c]
            meta[M_FLAGS, i] = (F_IP6 if six else 0) | _icmp_error_flag(buf, l3, ln, proto,
                                                                        six)
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
    t6 = readcyclecounter()
    counters = dp.counters
    counters[C.C_FIB_LOOKUPS] += looked4 + looked6
    counters[C.C_IP4_FORWARDED] += f4
    counters[C.C_IP6_FORWARDED] += f6
    if not staged:  # only what left counts at the parsing nodes
        parsed4 = f4
        parsed6 = f6
    _account(dp.node_stats, parsed4, parsed6, nc if fw_in else 0, looked4, looked6, nout,
             f4, f6, np.int64(t1 - t0), np.int64(t2 - t1), np.int64(t3 - t2) + np.int64(
                 t4 - t3), np.int64(t5 - t4), np.int64(t6 - t5))
