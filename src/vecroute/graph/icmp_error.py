"""icmp4-error / icmp6-error: the dedicated slow path that answers a dropped packet.

The error is built in place: the new IP and ICMP headers are written into the headroom in
front of the offending packet, which becomes the quote (RFC 1812 4.3.2.3: up to 576 bytes
in all; RFC 4443 2.4(c): up to the 1280-byte minimum MTU), so nothing is copied unless the
slot lacks the room (an SRv6-encapsulated packet): then make_room moves the quote within
the slot first — nothing is ever written outside it. The error is routed back to the
source through the FIB (one lookup for the new packet) and leaves from the router's
address on the interface it leaves by; an error to a link-local source skips the FIB and
leaves by the interface the packet came in on, to the MAC it came from (RFC 4291 2.5.6).
Never sent in answer to an ICMP error, a non-first fragment (ip4), a multicast/broadcast
destination or an invalid source; a global token bucket limits the rate (Linux:
icmp_msgs_per_sec / _burst). ``icmp-error-sent`` counts errors when they leave.
"""

import numpy as np
from numba import njit

from vecroute.fib.layout import (
    A_IF,
    A_NH4,
    A_TYPE,
    ADJ_LOCAL,
    I_IP4,
    I_REPLY_ADJ,
    IF6_GLOBAL,
    IF6_LL,
)
from vecroute.graph import counters as C
from vecroute.graph.flow_hash import mix64
from vecroute.graph.frames import enqueue
from vecroute.graph.ip4_input import is_link_local4, is_martian4
from vecroute.graph.ip6_input import is_our_ll
from vecroute.graph.lookup import resolve4, resolve6, to_adjacency
from vecroute.graph.registry import NodeDecl
from vecroute.graph.rewrite import save_reply_mac
from vecroute.graph.state import IFS_DROPS, TB_IP_ID
from vecroute.graph.token_bucket import take_token
from vecroute.packet.batch import (
    F_ANSWER,
    F_FRAG_NONFIRST,
    F_FW_SKIP,
    F_ICMP_ERROR,
    F_IP6,
    F_L2_MCAST,
    F_LOCAL_ORIGIN,
    F_REDIRECT,
    L2_ROOM,
    M_ADJ,
    M_AUX,
    M_AUX2,
    M_ERR,
    M_FIB,
    M_FLAGS,
    M_L3,
    M_L4,
    M_LEN,
    M_OFF,
    M_PROTO,
    M_RX,
    make_room,
)
from vecroute.packet.checksum import checksum, pseudo_header6
from vecroute.packet.headers import (
    ETH_HLEN,
    ICMP4_REDIRECT,
    ICMP6_PACKET_TOO_BIG,
    ICMP6_PARAM_PROBLEM,
    IP4_HLEN,
    IP6_HLEN,
    PROTO_ICMP,
    PROTO_ICMPV6,
    rd32,
    rd64,
    wr16,
    wr32,
)
from vecroute.packet.node_ids import ERROR_DROP

NODES = (
    NodeDecl(
        "icmp4-error",
        next=(
            "ip4-local", "gso-segment", "srv6-encap", "icmp4-error", "fw-out", "ip4-rewrite",
            "error-drop",
        ),
        counters=(
            "fib-lookups", "blackhole", "route-unreachable", "route-prohibit",
            "icmp-error-suppressed", "icmp-rate-limited", "icmp-error-no-route", "fw-reject",
        ),
    ),
    NodeDecl(
        "icmp6-error",
        next=(
            "ip6-local", "gso-segment", "srv6-localsid", "srv6-encap", "icmp6-error", "fw-out",
            "ip6-rewrite", "error-drop",
        ),
        counters=(
            "fib-lookups", "blackhole", "route-unreachable", "route-prohibit",
            "icmp-error-suppressed", "icmp-rate-limited", "icmp-error-no-route", "fw-reject",
        ),
    ),
)

ICMP4_MAX_LEN = 576  # RFC 1812 4.3.2.3
ICMP6_MAX_LEN = 1280  # RFC 4443 2.4(c)


@njit(cache=True, inline="always")
def count_drop(meta, dp, i) -> None:
    e = meta[M_ERR, i]
    if e >= 0:  # a redirect's copy is not a drop
        dp.counters[e] += 1
        dp.if_stats[meta[M_RX, i], IFS_DROPS] += 1


@njit(cache=True, inline="always")
def answer_on_link(buf, meta, dp, i) -> int:
    """The reply adjacency for an answer to a link-local source (the asker's MAC kept for
    it), or -1 when the packet no longer has the Ethernet header it came with."""
    o = meta[M_OFF, i]
    if meta[M_L3, i] - o != ETH_HLEN:
        return -1
    save_reply_mac(buf, meta, i, o + 6)
    return dp.ifc[meta[M_RX, i], I_REPLY_ADJ]


@njit(cache=True, inline="always")
def answer_flags(flags) -> int:
    """How interface-output counts what the node built: an answer or a redirect."""
    return F_REDIRECT if flags & F_REDIRECT else F_ANSWER


@njit(cache=True, inline="always")
def give_up(frames, frame_n, meta, dp, i, why) -> None:
    """No error is sent: the original is already counted; count why and free the slot."""
    dp.counters[why] += 1
    meta[M_ERR, i] = -1
    meta[M_AUX2, i] = why  # for a packet trace: why no error was sent
    enqueue(frames, frame_n, meta, ERROR_DROP, i)


@njit(cache=True, _nrt=True)
def icmp4_error(work, k, buf, meta, frames, frame_n, dp, now) -> None:
    for j in range(k):
        i = work[j]
        count_drop(meta, dp, i)
        reject = meta[M_ERR, i] == C.C_FW_REJECT  # the firewall's answer: not filtered again
        flags = meta[M_FLAGS, i]
        l3 = meta[M_L3, i]
        src = rd32(buf, l3 + 12)
        dst = rd32(buf, l3 + 16)
        if (
            flags & (F_ICMP_ERROR | F_FRAG_NONFIRST | F_L2_MCAST | F_LOCAL_ORIGIN)
            or (dst >> np.uint32(28)) >= 14
            or is_martian4(src)
        ):
            give_up(frames, frame_n, meta, dp, i, C.C_ICMP_ERROR_SUPPRESSED)
            continue
        aux = meta[M_AUX, i]
        param = meta[M_AUX2, i]
        if is_link_local4(src):  # RFC 3927: on-link, never through the FIB
            a = answer_on_link(buf, meta, dp, i)
            if a < 0:
                give_up(frames, frame_n, meta, dp, i, C.C_ICMP_ERROR_SUPPRESSED)
                continue
        else:
            h = np.uint32(mix64(np.uint64(src)) >> np.uint64(40))
            a = resolve4(dp, meta[M_FIB, i], src, h)
            dp.counters[C.C_FIB_LOOKUPS] += 1  # the error's own lookup, found or not
            if a < 0 or dp.adj[a, A_TYPE] == ADJ_LOCAL:
                give_up(frames, frame_n, meta, dp, i, C.C_ICMP_ERROR_NO_ROUTE)
                continue
        out_if = dp.adj[a, A_IF]  # -1 behind an SR policy: use the receiving interface
        me = np.uint32(dp.ifc[out_if, I_IP4]) if out_if >= 0 else np.uint32(0)
        if me == 0:
            me = np.uint32(dp.ifc[meta[M_RX, i], I_IP4])
        if me == 0:
            give_up(frames, frame_n, meta, dp, i, C.C_ICMP_ERROR_NO_ROUTE)
            continue
        if not take_token(dp.icmp_tb, now):
            give_up(frames, frame_n, meta, dp, i, C.C_ICMP_RATE_LIMITED)
            continue
        iplen = meta[M_LEN, i] - (l3 - meta[M_OFF, i])
        quote = min(iplen, ICMP4_MAX_LEN - IP4_HLEN - 8)
        l3 = make_room(buf, meta, i, IP4_HLEN + 8 + L2_ROOM, quote)
        if l3 < 0:  # cannot happen (a quote is far smaller than a slot): counted if it does
            give_up(frames, frame_n, meta, dp, i, C.C_ICMP_ERROR_SUPPRESSED)
            continue
        n = l3 - IP4_HLEN - 8
        tos = buf[l3 + 1]
        total = IP4_HLEN + 8 + quote
        buf[n] = 0x45
        buf[n + 1] = np.uint8((tos & 0x1E) | 0xC0)  # precedence "internetwork control"
        wr16(buf, n + 2, total)
        dp.icmp_tb[TB_IP_ID] = (dp.icmp_tb[TB_IP_ID] + 1) & 0xFFFF
        wr16(buf, n + 4, dp.icmp_tb[TB_IP_ID])
        wr16(buf, n + 6, 0)
        buf[n + 8] = 64
        buf[n + 9] = PROTO_ICMP
        wr16(buf, n + 10, 0)
        wr32(buf, n + 12, me)
        wr32(buf, n + 16, src)
        wr16(buf, n + 10, checksum(buf, n, IP4_HLEN, np.uint64(0)))
        c = n + IP4_HLEN
        buf[c] = np.uint8(aux >> 8)
        buf[c + 1] = np.uint8(aux & 0xFF)
        wr16(buf, c + 2, 0)
        if (aux >> 8) == ICMP4_REDIRECT:
            wr32(buf, c + 4, np.uint32(np.int64(param) & 0xFFFFFFFF))  # the better gateway
        else:
            wr32(buf, c + 4, param & 0xFFFF)  # frag-needed: next-hop MTU (RFC 1191)
        wr16(buf, c + 2, checksum(buf, c, 8 + quote, np.uint64(0)))
        meta[M_OFF, i] = n
        meta[M_L3, i] = n
        meta[M_L4, i] = c
        meta[M_LEN, i] = total
        meta[M_PROTO, i] = PROTO_ICMP
        meta[M_FLAGS, i] = (F_LOCAL_ORIGIN | F_ICMP_ERROR | answer_flags(flags)
                            | (F_FW_SKIP if reject else 0))
        meta[M_ADJ, i] = a
        meta[M_ERR, i] = -1
        to_adjacency(frames, frame_n, meta, dp, i, a, False)  # rewrite, or an SR policy


@njit(cache=True, inline="always")
def _copy_addr(buf, o, dp, ifx, slot) -> bool:
    nz = False
    for b in range(16):
        v = dp.if_ip6[ifx, slot, b]
        buf[o + b] = v
        if v != 0:
            nz = True
    return nz


@njit(cache=True, _nrt=True)
def icmp6_error(work, k, buf, meta, frames, frame_n, dp, now) -> None:
    for j in range(k):
        i = work[j]
        count_drop(meta, dp, i)
        reject = meta[M_ERR, i] == C.C_FW_REJECT  # the firewall's answer: not filtered again
        flags = meta[M_FLAGS, i]
        l3 = meta[M_L3, i]
        aux = meta[M_AUX, i]
        typ = aux >> 8
        code = aux & 0xFF
        # RFC 4443 2.4(e.3): to multicast only packet too big and an unknown option whose
        # action bits are 10 (not 11: RFC 8200 4.2); the pointer names the option
        ptr = meta[M_AUX2, i]
        mcast_ok = typ == ICMP6_PACKET_TOO_BIG or (
            typ == ICMP6_PARAM_PROBLEM and code == 2
            and 0 <= ptr < meta[M_LEN, i] - (l3 - meta[M_OFF, i])
            and (buf[l3 + ptr] & 0xC0) == 0x80)
        src_hi = rd64(buf, l3 + 8)
        src_lo = rd64(buf, l3 + 16)
        bad_src = buf[l3 + 8] == 0xFF or (src_hi == 0 and (src_lo == 0 or src_lo == 1))
        if (
            flags & (F_ICMP_ERROR | F_LOCAL_ORIGIN)
            or bad_src
            or (not mcast_ok and (flags & F_L2_MCAST or buf[l3 + 24] == 0xFF))
        ):
            give_up(frames, frame_n, meta, dp, i, C.C_ICMP_ERROR_SUPPRESSED)
            continue
        param = meta[M_AUX2, i]
        oa = meta[M_ADJ, i]  # RFC 4443 2.2(a): to one of our unicast addresses: from it
        if oa < 0 and buf[l3 + 24] != 0xFF:  # an error from ip6-input, before the lookup:
            oa = resolve6(dp, meta[M_FIB, i], rd64(buf, l3 + 24), rd64(buf, l3 + 32),
                          np.uint32(0))  # was it for us?
            dp.counters[C.C_FIB_LOOKUPS] += 1
        to_us = (oa >= 0 and dp.adj[oa, A_TYPE] == ADJ_LOCAL and dp.adj[oa, A_NH4] == 0
                 and buf[l3 + 24] != 0xFF) or is_our_ll(dp, meta[M_RX, i], buf, l3)
        ll = buf[l3 + 8] == 0xFE and (buf[l3 + 9] & 0xC0) == 0x80
        if ll:  # RFC 4291 2.5.6: back on the link it came from, never through the FIB
            a = answer_on_link(buf, meta, dp, i)
            if a < 0:
                give_up(frames, frame_n, meta, dp, i, C.C_ICMP_ERROR_SUPPRESSED)
                continue
        else:
            h = np.uint32(mix64(src_hi ^ mix64(src_lo)) >> np.uint64(40))
            a = resolve6(dp, meta[M_FIB, i], src_hi, src_lo, h)
            dp.counters[C.C_FIB_LOOKUPS] += 1  # the error's own lookup, found or not
            if a < 0 or dp.adj[a, A_TYPE] == ADJ_LOCAL:
                give_up(frames, frame_n, meta, dp, i, C.C_ICMP_ERROR_NO_ROUTE)
                continue
        if not take_token(dp.icmp_tb, now):
            give_up(frames, frame_n, meta, dp, i, C.C_ICMP_RATE_LIMITED)
            continue
        iplen = meta[M_LEN, i] - (l3 - meta[M_OFF, i])
        quote = min(iplen, ICMP6_MAX_LEN - IP6_HLEN - 8)
        l3 = make_room(buf, meta, i, IP6_HLEN + 8 + L2_ROOM, quote)
        if l3 < 0:  # cannot happen (a quote is far smaller than a slot): counted if it does
            give_up(frames, frame_n, meta, dp, i, C.C_ICMP_ERROR_SUPPRESSED)
            continue
        n = l3 - IP6_HLEN - 8
        # destination = the offending packet's source (copied before the source is written)
        for b in range(16):
            buf[n + 24 + b] = buf[l3 + 8 + b]
        out_if = dp.adj[a, A_IF]
        if out_if < 0:  # behind an SR policy: answer from the receiving interface
            out_if = meta[M_RX, i]
        if to_us:
            for b in range(16):
                buf[n + 8 + b] = buf[l3 + 24 + b]
        elif ll:  # to a link-local address, from ours (RFC 6724 scope)
            _copy_addr(buf, n + 8, dp, out_if, IF6_LL)
        elif not _copy_addr(buf, n + 8, dp, out_if, IF6_GLOBAL):
            if not _copy_addr(buf, n + 8, dp, meta[M_RX, i], IF6_GLOBAL):
                _copy_addr(buf, n + 8, dp, out_if, IF6_LL)
        wr32(buf, n, np.uint32(0x60000000))
        wr16(buf, n + 4, 8 + quote)
        buf[n + 6] = PROTO_ICMPV6
        buf[n + 7] = 64
        c = n + IP6_HLEN
        buf[c] = np.uint8(typ)
        buf[c + 1] = np.uint8(code)
        wr16(buf, c + 2, 0)
        wr32(buf, c + 4, np.uint32(param))
        wr16(
            buf, c + 2, checksum(buf, c, 8 + quote, pseudo_header6(buf, n, PROTO_ICMPV6, 8 + quote))
        )
        meta[M_OFF, i] = n
        meta[M_L3, i] = n
        meta[M_L4, i] = c
        meta[M_LEN, i] = IP6_HLEN + 8 + quote
        meta[M_PROTO, i] = PROTO_ICMPV6
        meta[M_FLAGS, i] = (F_LOCAL_ORIGIN | F_ICMP_ERROR | F_IP6 | answer_flags(flags)
                            | (F_FW_SKIP if reject else 0))
        meta[M_ADJ, i] = a
        meta[M_ERR, i] = -1
        to_adjacency(frames, frame_n, meta, dp, i, a, True)
