"""ip4-rewrite / ip6-rewrite: TTL, MTU, neighbour state, then the precomputed L2 header.

RFC 1812 order: TTL check, MTU check (DF set: frag-needed; ip6: packet-too-big), TTL
decrement with an RFC 1624 incremental checksum update, and the adjacency's rewrite
bytes (dst MAC, src MAC, ethertype) copied once in front of the L3 header. An adjacency
whose neighbour is not resolved sends the packet to neighbor-request instead. An answer
to a link-local source (reply adjacency) gets the L2 header back to the MAC it came from.
A packet that leaves by the interface it came in on, to a next hop on the sender's subnet,
also triggers an ICMP redirect (RFC 1812 5.2.7.2; per-interface switch, on by default),
and an IPv6 packet to a destination on the sender's own link an ND redirect (RFC 4861 8.2).
"""

import numpy as np
from numba import njit

from vecroute.fib.layout import (
    A_FAMILY,
    A_IF,
    A_NH4,
    A_NH6,
    A_RWLEN,
    A_TYPE,
    ADJ_REPLY,
    ADJ_REWRITE,
    I_IP4,
    I_IP4_MASK,
    I_MTU,
    I_REDIRECTS,
    IF6_LL,
)
from vecroute.graph import counters as C
from vecroute.graph.frames import enqueue, icmp_error
from vecroute.graph.gso_segment import divert, segment_l3_len
from vecroute.graph.registry import NodeDecl
from vecroute.graph.token_bucket import has_token, take_token
from vecroute.packet.batch import (
    F_ANSWER,
    F_FRAG_NONFIRST,
    F_GSO,
    F_HLIM_DONE,
    F_ICMP_ERROR,
    F_IP6,
    F_LOCAL_ORIGIN,
    F_REDIRECT,
    HEADROOM,
    M_ADJ,
    M_AUX,
    M_AUX2,
    M_ERR,
    M_FIB,
    M_FLAGS,
    M_L3,
    M_L4,
    M_LEN,
    M_NEXT,
    M_OFF,
    M_PROTO,
    M_RX,
    M_SEQ,
    M_TX,
    SLOT,
    alloc_slot,
)
from vecroute.packet.checksum import checksum, pseudo_header6, ttl_decrement
from vecroute.packet.headers import (
    ETH_P_IP,
    ETH_P_IPV6,
    ICMP4_DEST_UNREACH,
    ICMP4_FRAG_NEEDED,
    ICMP4_REDIRECT,
    ICMP4_TIME_EXCEEDED,
    ICMP6_PACKET_TOO_BIG,
    ICMP6_REDIRECT,
    ICMP6_TIME_EXCEEDED,
    IP6_HLEN,
    IP6_MIN_MTU,
    PROTO_ICMPV6,
    rd16,
    rd32,
    wr16,
    wr32,
)
from vecroute.packet.intrinsics import memcpy
from vecroute.packet.node_ids import INTERFACE_OUTPUT, IP4_FRAG, IP4_REWRITE, NEIGHBOR_REQUEST

NODES = (
    NodeDecl(
        "ip4-rewrite",
        next=("gso-segment", "icmp4-error", "ip4-frag", "neighbor-request", "interface-output"),
        counters=(
            "ttl-expired", "mtu-exceeded", "ip4-forwarded", "icmp-error-sent", "redirect-sent",
            "tcp-reset-sent",
        ),
    ),
    NodeDecl(
        "ip6-rewrite",
        next=("icmp6-error", "neighbor-request", "interface-output"),
        counters=(
            "ttl-expired", "mtu-exceeded", "ip6-forwarded", "icmp-error-sent", "redirect-sent",
            "tcp-reset-sent",
        ),
    ),
)


@njit(cache=True, inline="always")
def rewrite_from(buf, meta, adj, adj_rw, i, a) -> None:
    """Prepend the adjacency's L2 header: one copy of 14 bytes into the headroom."""
    l3 = meta[M_L3, i]
    n = adj[a, A_RWLEN]
    o = l3 - n
    memcpy(buf, o, adj_rw[a], 0, n)
    meta[M_LEN, i] = meta[M_LEN, i] - (o - meta[M_OFF, i])
    meta[M_OFF, i] = o
    meta[M_TX, i] = adj[a, A_IF]


@njit(cache=True, inline="always")
def apply_rewrite(buf, meta, dp, i, a) -> None:
    """rewrite_from with the forwarding state's arrays (off the hot loops)."""
    rewrite_from(buf, meta, dp.adj, dp.adj_rw, i, a)


@njit(cache=True, inline="always")
def save_reply_mac(buf, meta, i, o) -> None:
    """Keep the MAC at buf[o:o+6] (the asker's) for the reply adjacency's L2 header."""
    meta[M_AUX, i] = (np.int32(buf[o]) << 16) | (np.int32(buf[o + 1]) << 8) | buf[o + 2]
    meta[M_AUX2, i] = (np.int32(buf[o + 3]) << 16) | (np.int32(buf[o + 4]) << 8) | buf[o + 5]


@njit(cache=True, inline="always")
def reply_rewrite(buf, meta, adj, if_mac, i, a) -> None:
    """The L2 header of an answer to a link-local source: from the interface the question
    came in on, to the MAC it came from (RFC 4291 2.5.6: it never leaves that link)."""
    o = meta[M_L3, i] - 14
    m0 = meta[M_AUX, i]
    m1 = meta[M_AUX2, i]
    for b in range(3):
        buf[o + b] = np.uint8((m0 >> (16 - 8 * b)) & 0xFF)
        buf[o + 3 + b] = np.uint8((m1 >> (16 - 8 * b)) & 0xFF)
    ifx = adj[a, A_IF]
    for b in range(6):
        buf[o + 6 + b] = if_mac[ifx, b]
    wr16(buf, o + 12, ETH_P_IPV6 if meta[M_FLAGS, i] & F_IP6 else ETH_P_IP)
    meta[M_LEN, i] = meta[M_LEN, i] - (o - meta[M_OFF, i])
    meta[M_OFF, i] = o
    meta[M_TX, i] = ifx


@njit(cache=True)
def rewrite_l2(buf, meta, dp, i, a) -> None:
    """apply_rewrite or, for a reply adjacency, reply_rewrite (off the hot path: fragments)."""
    if dp.adj[a, A_TYPE] == ADJ_REPLY:
        reply_rewrite(buf, meta, dp.adj, dp.if_mac, i, a)
    else:
        apply_rewrite(buf, meta, dp, i, a)


@njit(cache=True, inline="always")
def _gateway4(buf, l3, adj, a) -> np.uint32:
    gw = np.uint32(adj[a, A_NH4])
    return gw if gw != 0 else rd32(buf, l3 + 16)


@njit(cache=True, inline="always")
def redirect4_wanted_at(buf, l3, rx, flags, ifc, adj, a) -> bool:
    """RFC 1812 5.2.7.2: the packet at l3 (received on rx, leaving by rx again) goes to a
    next hop on its source's subnet, the interface sends redirects, and it is no ICMP
    error. Plain arrays only: this runs for every such packet (dp per call costs refcounts)."""
    if ifc[rx, I_REDIRECTS] == 0 or flags & F_ICMP_ERROR:
        return False
    if adj[a, A_FAMILY] == 6:  # an IPv6 next hop (RFC 5549): no IPv4 gateway to name
        return False
    src = rd32(buf, l3 + 12)
    gw = _gateway4(buf, l3, adj, a)
    me = np.uint32(ifc[rx, I_IP4])
    mask = np.uint32(ifc[rx, I_IP4_MASK])
    return not (me == 0 or (src ^ me) & mask or (gw ^ me) & mask or src == gw)


@njit(cache=True, inline="always")
def redirect4_wanted(buf, meta, ifc, adj, i, a) -> bool:
    """redirect4_wanted_at for packet i."""
    return redirect4_wanted_at(buf, meta[M_L3, i], meta[M_RX, i], meta[M_FLAGS, i], ifc, adj, a)


@njit(cache=True)
def send_redirect4(buf, meta, frames, frame_n, dp, nalloc, i, a) -> None:
    """Tell the source of packet i (redirect4_wanted) of the better gateway: host redirect,
    code 1, as Linux does when send_redirects is on. The packet itself is still forwarded;
    the redirect is a copy of its header + 64 bits of data in a spare slot, built and
    rate-limited by icmp4-error."""
    rx = meta[M_RX, i]
    l3 = meta[M_L3, i]
    gw = _gateway4(buf, l3, dp.adj, a)
    s = alloc_slot(meta, nalloc, i, rx)
    if s < 0:
        return
    ihl = np.int32(buf[l3] & 15) * 4
    n = min(meta[M_LEN, i] - (l3 - meta[M_OFF, i]), ihl + 8)
    o = s * SLOT + HEADROOM + 14
    for b in range(n):
        buf[o + b] = buf[l3 + b]
    meta[M_OFF, s] = o
    meta[M_L3, s] = o
    meta[M_LEN, s] = n
    meta[M_FIB, s] = meta[M_FIB, i]
    meta[M_PROTO, s] = meta[M_PROTO, i]
    meta[M_L4, s] = o + ihl
    # not F_LOCAL_ORIGIN: icmp4-error answers it (but, as any error, not a later fragment)
    meta[M_FLAGS, s] = F_REDIRECT | (meta[M_FLAGS, i] & F_FRAG_NONFIRST)
    meta[M_SEQ, s] = meta[M_SEQ, i] + 1
    meta[M_ERR, s] = -1  # nothing died: icmp4-error counts no drop for it
    icmp_error(frames, frame_n, meta, s, False, -1, ICMP4_REDIRECT, 1, np.int32(gw))


@njit(cache=True, inline="always")
def _nh6_is(adj, a, buf, o) -> bool:
    """The adjacency's IPv6 next hop is the 16 bytes at buf[o:]."""
    for w in range(4):
        if np.uint32(adj[a, A_NH6 + w]) != rd32(buf, o + 4 * w):
            return False
    return True


@njit(cache=True, inline="always")
def _on_link6(if_ip6, rx, buf, o) -> bool:
    """The address at buf[o:] is link-local or in a /64 of the interface's addresses."""
    if buf[o] == 0xFE and (buf[o + 1] & 0xC0) == 0x80:
        return True
    for r in range(1, if_ip6.shape[1]):
        a = if_ip6[rx, r]
        if a[0] == 0:
            continue
        same = True
        for b in range(8):
            if a[b] != buf[o + b]:
                same = False
                break
        if same:
            return True
    return False


@njit(cache=True, inline="always")
def redirect6_wanted_at(buf, l3, l2len, rx, flags, ifc, adj, if_ip6, a) -> bool:
    """RFC 4861 8.2: the packet at l3 (received on rx with an L2 header of l2len bytes,
    leaving by rx again) is for a destination on the sender's own link (its adjacency's
    next hop is the destination itself, and the source is on-link). A better router on the
    link would have to be named by its link-local address, which configured next hops do
    not give: no redirect then (Linux sends none for a non-link-local target either).
    Plain arrays only (see redirect4_wanted_at)."""
    if ifc[rx, I_REDIRECTS] == 0 or flags & F_ICMP_ERROR:
        return False
    return (l2len == 14 and if_ip6[rx, IF6_LL, 0] != 0
            and _nh6_is(adj, a, buf, l3 + 24) and _on_link6(if_ip6, rx, buf, l3 + 8))


@njit(cache=True, inline="always")
def redirect6_wanted(buf, meta, ifc, adj, if_ip6, i, a) -> bool:
    """redirect6_wanted_at for packet i."""
    l3 = meta[M_L3, i]
    return redirect6_wanted_at(buf, l3, l3 - meta[M_OFF, i], meta[M_RX, i], meta[M_FLAGS, i],
                               ifc, adj, if_ip6, a)


@njit(cache=True)
def send_redirect6(buf, meta, frames, frame_n, dp, nalloc, i, a, now) -> None:
    """The ND redirect for packet i (redirect6_wanted): from our link-local address, the
    target's link-layer address and as much of the packet as fits in 1280 bytes."""
    rx = meta[M_RX, i]
    l3 = meta[M_L3, i]
    ll = dp.if_ip6[rx, IF6_LL]
    if not take_token(dp.icmp_tb, now):
        return
    s = alloc_slot(meta, nalloc, i, rx)
    if s < 0:
        return
    iplen = meta[M_LEN, i] - (l3 - meta[M_OFF, i])
    fixed = IP6_HLEN + 40 + 8  # IPv6, the redirect message, target link-layer address
    rd = min(IP6_MIN_MTU - fixed, iplen + 8) & ~7  # redirected header option (Linux too)
    o = s * SLOT + HEADROOM
    m0 = meta[M_AUX, i]  # the sender's MAC, kept by ip6-rewrite: it is on this link
    m1 = meta[M_AUX2, i]
    for b in range(3):
        buf[o + b] = np.uint8((m0 >> (16 - 8 * b)) & 0xFF)
        buf[o + 3 + b] = np.uint8((m1 >> (16 - 8 * b)) & 0xFF)
    for b in range(6):
        buf[o + 6 + b] = dp.if_mac[rx, b]
    wr16(buf, o + 12, ETH_P_IPV6)
    n = o + 14
    plen = 40 + 8 + rd
    wr32(buf, n, np.uint32(0x60000000))
    wr16(buf, n + 4, plen)
    buf[n + 6] = PROTO_ICMPV6
    buf[n + 7] = 255
    for b in range(16):
        buf[n + 8 + b] = ll[b]
        buf[n + 24 + b] = buf[l3 + 8 + b]  # the packet's source
    c = n + IP6_HLEN
    buf[c] = ICMP6_REDIRECT
    buf[c + 1] = 0
    wr16(buf, c + 2, 0)
    wr32(buf, c + 4, 0)
    for b in range(16):
        buf[c + 8 + b] = buf[l3 + 24 + b]  # target = destination: it is on-link
        buf[c + 24 + b] = buf[l3 + 24 + b]
    t = c + 40
    buf[t] = 2  # target link-layer address
    buf[t + 1] = 1
    for b in range(6):
        buf[t + 2 + b] = dp.adj_rw[a, b]
    h = t + 8
    buf[h] = 4  # redirected header
    buf[h + 1] = rd // 8
    for b in range(6):
        buf[h + 2 + b] = 0
    q = rd - 8
    memcpy(buf, h + 8, buf, l3, q)
    wr16(buf, c + 2, checksum(buf, c, plen, pseudo_header6(buf, n, PROTO_ICMPV6, plen)))
    meta[M_OFF, s] = o
    meta[M_L3, s] = n
    meta[M_LEN, s] = 14 + IP6_HLEN + plen
    meta[M_TX, s] = rx
    meta[M_PROTO, s] = PROTO_ICMPV6
    meta[M_L4, s] = c
    meta[M_FLAGS, s] = F_REDIRECT | F_LOCAL_ORIGIN | F_IP6 | F_ICMP_ERROR
    meta[M_SEQ, s] = meta[M_SEQ, i] + 1
    dp.counters[C.C_REDIRECT_SENT] += 1  # nothing can stop it now
    enqueue(frames, frame_n, meta, INTERFACE_OUTPUT, s)


@njit(cache=True, inline="always")
def count_answer(counters, flags) -> None:
    """An ICMP error, RST or redirect the router built leaves now: count it as sent
    (after the neighbour check, the last place it could die; ip4-frag counts its own)."""
    if flags & F_REDIRECT:
        counters[C.C_REDIRECT_SENT] += 1
    elif flags & F_ICMP_ERROR:
        counters[C.C_ICMP_ERROR_SENT] += 1
    else:
        counters[C.C_TCP_RESET_SENT] += 1


@njit(cache=True, _nrt=True)
def ip4_rewrite(work, k, buf, meta, frames, frame_n, dp, nalloc, now) -> None:
    # the arrays are taken out of dp once and no call in the loop takes dp: a dp argument
    # costs a reference count update of every array it holds, per call
    ifc, adj, adj_rw, if_mac, tb, counters = (
        dp.ifc, dp.adj, dp.adj_rw, dp.if_mac, dp.icmp_tb, dp.counters)
    fwd = 0
    for j in range(k):
        i = work[j]
        a = meta[M_ADJ, i]
        l3 = meta[M_L3, i]
        flags = meta[M_FLAGS, i]
        local = flags & F_LOCAL_ORIGIN
        keep_ttl = flags & (F_LOCAL_ORIGIN | F_HLIM_DONE)
        ttl = np.int32(buf[l3 + 8])
        if not keep_ttl and ttl <= 1:
            icmp_error(frames, frame_n, meta, i, False, C.C_TTL_EXPIRED,
                       ICMP4_TIME_EXCEEDED, 0, 0)
            continue
        iplen = meta[M_LEN, i] - (l3 - meta[M_OFF, i])
        ifx = adj[a, A_IF]
        mtu = ifc[ifx, I_MTU]
        need_frag = iplen > mtu
        if need_frag and flags & F_GSO:  # whole, it leaves as segments of this size
            need_frag = segment_l3_len(buf, meta, i) > mtu
        if need_frag and rd16(buf, l3 + 6) & 0x4000:
            icmp_error(frames, frame_n, meta, i, False, C.C_MTU_EXCEEDED,
                       ICMP4_DEST_UNREACH, ICMP4_FRAG_NEEDED, mtu)
            continue
        if need_frag and flags & F_GSO:  # DF clear: its segments come back here, one by one
            divert(frames, frame_n, meta, i, IP4_REWRITE)
            continue
        t = adj[a, A_TYPE]
        if t != ADJ_REWRITE and t != ADJ_REPLY:
            enqueue(frames, frame_n, meta, NEIGHBOR_REQUEST, i)
            continue
        if not keep_ttl:
            ttl_decrement(buf, l3, False)
        if not local:
            fwd += 1
        if need_frag:
            enqueue(frames, frame_n, meta, IP4_FRAG, i)
        else:
            if t == ADJ_REWRITE:  # a reply adjacency's header: in the pass below
                rewrite_from(buf, meta, adj, adj_rw, i, a)
            enqueue(frames, frame_n, meta, INTERFACE_OUTPUT, i)
    counters[C.C_IP4_FORWARDED] += fwd
    # the rare cases in a pass of their own: any code for them in the loop above cost
    # every packet ~10 ns (measured). Our answers: the reply L2 header, counted as sent;
    # forwarded packets back out the way they came: redirects (the IP header + 8 bytes are
    # still in place, only L2 changed)
    for j in range(k):
        i = work[j]
        nx = meta[M_NEXT, i]
        if nx != INTERFACE_OUTPUT and nx != IP4_FRAG:
            continue
        f = meta[M_FLAGS, i]
        a = meta[M_ADJ, i]
        if f & F_LOCAL_ORIGIN:
            if nx == INTERFACE_OUTPUT:
                if adj[a, A_TYPE] == ADJ_REPLY:
                    reply_rewrite(buf, meta, adj, if_mac, i, a)
                if f & (F_ANSWER | F_REDIRECT):
                    count_answer(counters, f)
        elif (adj[a, A_IF] == meta[M_RX, i] and ifc[adj[a, A_IF], I_REDIRECTS]
                and redirect4_wanted(buf, meta, ifc, adj, i, a) and has_token(tb, now)):
            send_redirect4(buf, meta, frames, frame_n, dp, nalloc, i, a)


@njit(cache=True, _nrt=True)
def ip6_rewrite(work, k, buf, meta, frames, frame_n, dp, nalloc, now) -> None:
    ifc, adj, adj_rw, if_mac, if_ip6, counters = (
        dp.ifc, dp.adj, dp.adj_rw, dp.if_mac, dp.if_ip6, dp.counters)  # as in ip4-rewrite
    # ND redirects first, in a pass of their own (see ip4-rewrite), for packets that will
    # be forwarded back out the way they came: quoted as they came, like Linux
    for j in range(k):
        i = work[j]
        a = meta[M_ADJ, i]
        ifx = adj[a, A_IF]
        if (ifx == meta[M_RX, i] and _nh6_is(adj, a, buf, meta[M_L3, i] + 24)
                and not meta[M_FLAGS, i] & (F_LOCAL_ORIGIN | F_HLIM_DONE)
                and adj[a, A_TYPE] == ADJ_REWRITE and buf[meta[M_L3, i] + 7] > 1
                and meta[M_LEN, i] - (meta[M_L3, i] - meta[M_OFF, i]) <= ifc[ifx, I_MTU]
                and redirect6_wanted(buf, meta, ifc, adj, if_ip6, i, a)):
            save_reply_mac(buf, meta, i, meta[M_OFF, i] + 6)  # the sender's MAC
            send_redirect6(buf, meta, frames, frame_n, dp, nalloc, i, a, now)
    fwd = 0
    for j in range(k):
        i = work[j]
        a = meta[M_ADJ, i]
        l3 = meta[M_L3, i]
        flags = meta[M_FLAGS, i]
        local = flags & F_LOCAL_ORIGIN
        keep_hlim = flags & (F_LOCAL_ORIGIN | F_HLIM_DONE)
        if not keep_hlim and buf[l3 + 7] <= 1:
            icmp_error(frames, frame_n, meta, i, True, C.C_TTL_EXPIRED,
                       ICMP6_TIME_EXCEEDED, 0, 0)
            continue
        iplen = meta[M_LEN, i] - (l3 - meta[M_OFF, i])
        ifx = adj[a, A_IF]
        mtu = ifc[ifx, I_MTU]
        if iplen > mtu and not (flags & F_GSO and segment_l3_len(buf, meta, i) <= mtu):
            icmp_error(frames, frame_n, meta, i, True, C.C_MTU_EXCEEDED,
                       ICMP6_PACKET_TOO_BIG, 0, mtu)
            continue
        t = adj[a, A_TYPE]
        if t != ADJ_REWRITE and t != ADJ_REPLY:
            enqueue(frames, frame_n, meta, NEIGHBOR_REQUEST, i)
            continue
        if not local:
            fwd += 1
        if not keep_hlim:
            buf[l3 + 7] -= 1
        if t == ADJ_REWRITE:  # a reply adjacency's header: in the pass below
            rewrite_from(buf, meta, adj, adj_rw, i, a)
        enqueue(frames, frame_n, meta, INTERFACE_OUTPUT, i)
    counters[C.C_IP6_FORWARDED] += fwd
    for j in range(k):  # our answers (see ip4-rewrite): reply L2 header, counted as sent
        i = work[j]
        f = meta[M_FLAGS, i]
        if meta[M_NEXT, i] != INTERFACE_OUTPUT or not f & F_LOCAL_ORIGIN:
            continue
        a = meta[M_ADJ, i]
        if adj[a, A_TYPE] == ADJ_REPLY:
            reply_rewrite(buf, meta, adj, if_mac, i, a)
        if f & (F_ANSWER | F_REDIRECT):
            count_answer(counters, f)
