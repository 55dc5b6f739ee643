"""ip4-local / ip6-local: packets addressed to the router itself.

Echo requests are answered in place (addresses swapped, checksums updated incrementally;
an IPv6 reply carries none of the request's extension headers) and the reply is routed
through the lookup like any packet, except that an answer to a link-local source leaves
by the interface the request came in on (RFC 4291 2.5.6, RFC 3927). Neighbour discovery
is handed to the control plane. As any host would: UDP gets port unreachable (RFC 1122
3.2.2.1, RFC 4443 3.1), TCP a RST (RFC 9293 3.10.7.1), an unknown protocol protocol
unreachable / parameter problem code 1 (RFC 8200 4); checksums are verified first.
IPv6 destination options honour the action bits of unknown options (RFC 8200 4.2) and a
routing header with segments left > 0 gets parameter problem code 0 (RFC 8200 4.4: we are
no SRv6 SID for this address, and RH0 is never processed, RFC 5095).
"""

import numpy as np
from numba import njit

from vecroute.fib.layout import A_NH4, A_TYPE, ADJ_LOCAL, I_HOST, IF6_GLOBAL, IF6_LL, LOCAL_ANYCAST
from vecroute.graph import counters as C
from vecroute.graph.frames import drop, enqueue, host_punt, icmp_error, punt
from vecroute.graph.icmp_error import answer_on_link
from vecroute.graph.ip4_input import is_link_local4
from vecroute.graph.ip6_input import OPT_OK, option_verdict, scan_options
from vecroute.graph.registry import NodeDecl
from vecroute.packet.batch import (
    F_FORCED_ADJ,
    F_FRAG,
    F_IP6,
    F_LOCAL_ORIGIN,
    M_ADJ,
    M_ERR,
    M_FLAGS,
    M_L3,
    M_L4,
    M_LEN,
    M_OFF,
    M_PROTO,
    M_RX,
)
from vecroute.packet.checksum import (
    checksum,
    fold,
    incremental_update,
    pseudo_header4,
    pseudo_header6,
    sum_bytes,
)
from vecroute.packet.headers import (
    ICMP4_DEST_UNREACH,
    ICMP4_ECHO_REPLY,
    ICMP4_ECHO_REQUEST,
    ICMP4_PORT_UNREACH,
    ICMP4_PROTO_UNREACH,
    ICMP6_DEST_UNREACH,
    ICMP6_ECHO_REPLY,
    ICMP6_ECHO_REQUEST,
    ICMP6_PARAM_PROBLEM,
    ICMP6_PORT_UNREACH,
    IP6_HLEN,
    PROTO_AH,
    PROTO_DSTOPTS,
    PROTO_FRAGMENT,
    PROTO_HOPOPT,
    PROTO_ICMP,
    PROTO_ICMPV6,
    PROTO_NONE,
    PROTO_ROUTING,
    PROTO_TCP,
    PROTO_UDP,
    copy_bytes,
    rd16,
    rd32,
    wr16,
)
from vecroute.packet.node_ids import (
    IP4_LOOKUP,
    IP4_REASS,
    IP6_LOOKUP,
    IP6_REASS,
    TCP_RESET,
)

NODES = (
    NodeDecl(
        "ip4-local",
        next=(
            "ip4-reass", "ip4-lookup", "gso-segment", "icmp4-error", "tcp-reset", "error-drop",
            "punt",
        ),
        counters=(
            "echo-reply-sent", "local-unhandled", "udp-port-unreachable", "tcp-port-closed",
            "protocol-unreachable", "local-bad-checksum", "host-punt",
        ),
    ),
    NodeDecl(
        "ip6-local",
        next=(
            "ip6-reass", "ip6-lookup", "gso-segment", "icmp6-error", "tcp-reset", "error-drop",
            "punt",
        ),
        counters=(
            "ip6-bad-ext-header", "ip6-unknown-option", "echo-reply-sent", "local-unhandled",
            "udp-port-unreachable", "tcp-port-closed", "protocol-unreachable", "ip6-routing-header",
            "local-bad-checksum", "nd-punt", "host-punt",
        ),
    ),
)

DEFAULT_TTL = 64
TCP_HLEN = 20


@njit(cache=True, inline="always")
def _l4_sum_ok(buf, l3, l4, n, proto, ip6) -> bool:
    """The upper-layer checksum over n bytes from l4 verifies (pseudo header included)."""
    acc = pseudo_header6(buf, l3, proto, n) if ip6 else pseudo_header4(buf, l3, proto, n)
    return fold(sum_bytes(buf, l4, n, acc)) == 0xFFFF


@njit(cache=True, inline="always")
def _transport(frames, frame_n, meta, buf, i, l3, l4, end, proto, ip6) -> bool:
    """UDP / TCP to a router address, where nothing listens: answer as a host does.
    Returns False when proto is neither."""
    if proto == PROTO_UDP:
        ulen = np.int64(rd16(buf, l4 + 4)) if l4 + 8 <= end else np.int64(0)
        if ulen < 8 or l4 + ulen > end:
            drop(frames, frame_n, meta, i, C.C_LOCAL_UNHANDLED)  # truncated datagram
        elif (rd16(buf, l4 + 6) != 0 or ip6) and not _l4_sum_ok(buf, l3, l4, ulen, proto, ip6):
            drop(frames, frame_n, meta, i, C.C_LOCAL_BAD_CHECKSUM)  # ip6: 0 is not allowed
        elif ip6:
            icmp_error(frames, frame_n, meta, i, True, C.C_UDP_PORT_UNREACHABLE,
                       ICMP6_DEST_UNREACH, ICMP6_PORT_UNREACH, 0)
        else:
            icmp_error(frames, frame_n, meta, i, False, C.C_UDP_PORT_UNREACHABLE,
                       ICMP4_DEST_UNREACH, ICMP4_PORT_UNREACH, 0)
        return True
    if proto == PROTO_TCP:
        if l4 + TCP_HLEN > end:
            drop(frames, frame_n, meta, i, C.C_LOCAL_UNHANDLED)
        elif not _l4_sum_ok(buf, l3, l4, end - l4, proto, ip6):
            drop(frames, frame_n, meta, i, C.C_LOCAL_BAD_CHECKSUM)
        else:
            meta[M_ERR, i] = C.C_TCP_PORT_CLOSED
            enqueue(frames, frame_n, meta, TCP_RESET, i)
        return True
    return False


@njit(cache=True, inline="always")
def _route_reply(frames, frame_n, meta, buf, dp, i, ll, lookup) -> None:
    """Send an answer on: through the lookup, or, to a link-local address, back to the
    asker by the interface it came in on (the lookup honours the forced adjacency)."""
    flags = meta[M_FLAGS, i]
    if ll:
        a = answer_on_link(buf, meta, dp, i)
        if a < 0:
            drop(frames, frame_n, meta, i, C.C_LOCAL_UNHANDLED)
            return
        meta[M_ADJ, i] = a
        flags |= F_FORCED_ADJ
    meta[M_FLAGS, i] = flags
    enqueue(frames, frame_n, meta, lookup, i)


@njit(cache=True, inline="always")
def _for_linux4(meta, buf, i, l4, end, proto) -> bool:
    """On a port with a Linux mirror, Linux takes all but the echo requests the router
    answers itself: TCP/UDP (BGP, …), other protocols and ICMP types, limited broadcasts
    and fragments (Linux reassembles them)."""
    if meta[M_FLAGS, i] & F_FRAG or proto != PROTO_ICMP:
        return True
    return l4 + 8 > end or buf[l4] != ICMP4_ECHO_REQUEST or rd32(buf, meta[M_L3, i] + 16) == \
        np.uint32(0xFFFFFFFF)


@njit(cache=True, _nrt=True)
def ip4_local(work, k, buf, meta, frames, frame_n, dp) -> None:
    for j in range(k):
        i = work[j]
        host = dp.ifc[meta[M_RX, i], I_HOST] != 0
        l3 = meta[M_L3, i]
        l4 = meta[M_L4, i]
        end = meta[M_OFF, i] + meta[M_LEN, i]
        proto = meta[M_PROTO, i]
        if host and _for_linux4(meta, buf, i, l4, end, proto):
            host_punt(frames, frame_n, meta, dp, i)
            continue
        if meta[M_FLAGS, i] & F_FRAG:  # reassembled first (graph/ip_reass.py)
            enqueue(frames, frame_n, meta, IP4_REASS, i)
            continue
        dst = rd32(buf, l3 + 16)
        if dst == np.uint32(0xFFFFFFFF):
            drop(frames, frame_n, meta, i, C.C_LOCAL_UNHANDLED)
            continue
        if proto != PROTO_ICMP:
            if not _transport(frames, frame_n, meta, buf, i, l3, l4, end, proto, False):
                icmp_error(frames, frame_n, meta, i, False, C.C_PROTOCOL_UNREACHABLE,
                           ICMP4_DEST_UNREACH, ICMP4_PROTO_UNREACH, 0)
            continue
        if l4 + 8 > end or buf[l4] != ICMP4_ECHO_REQUEST:  # any code: Linux answers it too
            drop(frames, frame_n, meta, i, C.C_LOCAL_UNHANDLED)
            continue
        if fold(sum_bytes(buf, l4, end - l4, np.uint64(0))) != 0xFFFF:
            drop(frames, frame_n, meta, i, C.C_LOCAL_BAD_CHECKSUM)
            continue
        ll = is_link_local4(rd32(buf, l3 + 12))
        # swap addresses: the header checksum does not change
        for b in range(4):
            t = buf[l3 + 12 + b]
            buf[l3 + 12 + b] = buf[l3 + 16 + b]
            buf[l3 + 16 + b] = t
        old = rd16(buf, l3 + 8)
        new = np.uint32((DEFAULT_TTL << 8) | buf[l3 + 9])
        wr16(buf, l3 + 8, new)
        wr16(buf, l3 + 10, incremental_update(rd16(buf, l3 + 10), old, new))
        buf[l4] = ICMP4_ECHO_REPLY
        # a full sum, not RFC 1624: a reply can be all zeros (id 0, seq 0, no data), whose
        # checksum is 0xFFFF, but the incremental update yields 0x0000 there (no pseudo
        # header keeps the ICMPv4 sum away from zero, unlike ICMPv6)
        wr16(buf, l4 + 2, 0)
        wr16(buf, l4 + 2, checksum(buf, l4, end - l4, np.uint64(0)))
        meta[M_FLAGS, i] = F_LOCAL_ORIGIN
        dp.counters[C.C_ECHO_REPLY_SENT] += 1
        _route_reply(frames, frame_n, meta, buf, dp, i, ll, IP4_LOOKUP)


@njit(cache=True, inline="always")
def _for_linux6(meta, buf, i, l4, end) -> bool:
    """On a port with a Linux mirror, Linux takes all but what the router answers itself:
    echo requests and neighbour discovery (which the control plane copies to Linux)."""
    if meta[M_FLAGS, i] & F_FRAG or meta[M_PROTO, i] != PROTO_ICMPV6 or l4 + 8 > end:
        return True
    t = buf[l4]
    return t != ICMP6_ECHO_REQUEST and not (t >= 133 and t <= 137)


@njit(cache=True, _nrt=True)
def ip6_local(work, k, buf, meta, frames, frame_n, dp) -> None:
    for j in range(k):
        i = work[j]
        l3 = meta[M_L3, i]
        l4 = meta[M_L4, i]
        end = meta[M_OFF, i] + meta[M_LEN, i]
        if dp.ifc[meta[M_RX, i], I_HOST] and _for_linux6(meta, buf, i, l4, end):
            host_punt(frames, frame_n, meta, dp, i)
            continue
        if meta[M_FLAGS, i] & F_FRAG:  # reassembled first (graph/ip_reass.py)
            enqueue(frames, frame_n, meta, IP6_REASS, i)
            continue
        # the extension headers ip6-input validated: they are for us now
        nh = np.int32(buf[l3 + 6])
        nh_at = l3 + 6  # where the next header field naming the upper layer is
        p = l3 + IP6_HLEN
        done = False
        while (nh == PROTO_HOPOPT or nh == PROTO_DSTOPTS or nh == PROTO_ROUTING
               or nh == PROTO_AH or nh == PROTO_FRAGMENT):
            if nh == PROTO_FRAGMENT:  # only an atomic one reaches here (RFC 6946)
                if rd16(buf, p + 2) & 0xFFF9:
                    drop(frames, frame_n, meta, i, C.C_IP6_BAD_EXT)  # a fragment inside it
                    done = True
                    break
                nh_at = p
                nh = np.int32(buf[p])
                p += 8
                continue
            if nh == PROTO_AH:  # no IPsec here: an unknown next header (as Linux without it)
                icmp_error(frames, frame_n, meta, i, True, C.C_PROTOCOL_UNREACHABLE,
                           ICMP6_PARAM_PROBLEM, 1, nh_at - l3)
                done = True
                break
            if nh == PROTO_DSTOPTS:
                act, q = scan_options(buf, p, False)
                if act != OPT_OK:
                    option_verdict(frames, frame_n, meta, buf, i, l3, act, q)
                    done = True
                    break
            elif nh == PROTO_ROUTING and buf[p + 3] != 0:
                icmp_error(frames, frame_n, meta, i, True, C.C_IP6_ROUTING_HEADER,
                           ICMP6_PARAM_PROBLEM, 0, p + 2 - l3)
                done = True
                break
            nh_at = p
            hl = (np.int32(buf[p + 1]) + 1) * 8
            nh = np.int32(buf[p])
            p += hl
        if done:
            continue
        proto = meta[M_PROTO, i]
        if proto != PROTO_ICMPV6:
            if proto == PROTO_NONE:
                drop(frames, frame_n, meta, i, C.C_LOCAL_UNHANDLED)
            elif not _transport(frames, frame_n, meta, buf, i, l3, l4, end, proto, True):
                icmp_error(frames, frame_n, meta, i, True, C.C_PROTOCOL_UNREACHABLE,
                           ICMP6_PARAM_PROBLEM, 1, nh_at - l3)
            continue
        if l4 + 8 > end:
            drop(frames, frame_n, meta, i, C.C_LOCAL_UNHANDLED)
            continue
        t = buf[l4]
        if t >= 133 and t <= 137:
            punt(frames, frame_n, meta, dp, i, C.C_ND_PUNT)
            continue
        if t != ICMP6_ECHO_REQUEST:  # any code, as Linux
            drop(frames, frame_n, meta, i, C.C_LOCAL_UNHANDLED)
            continue
        acc = pseudo_header6(buf, l3, PROTO_ICMPV6, end - l4)
        if fold(sum_bytes(buf, l4, end - l4, acc)) != 0xFFFF:
            drop(frames, frame_n, meta, i, C.C_LOCAL_BAD_CHECKSUM)
            continue
        if l4 != l3 + IP6_HLEN:  # the reply is a new packet: none of the request's headers
            n = end - l4
            copy_bytes(buf, l3 + IP6_HLEN, buf, l4, n)
            l4 = l3 + IP6_HLEN
            end = l4 + n
            buf[l3 + 6] = PROTO_ICMPV6
            wr16(buf, l3 + 4, n)
            meta[M_L4, i] = l4
            meta[M_LEN, i] = end - meta[M_OFF, i]
        a = meta[M_ADJ, i]  # multicast, or the subnet-router anycast address: not a source
        mcast = buf[l3 + 24] == 0xFF or (a >= 0 and dp.adj[a, A_TYPE] == ADJ_LOCAL
                                         and dp.adj[a, A_NH4] == LOCAL_ANYCAST)
        ll = buf[l3 + 8] == 0xFE and (buf[l3 + 9] & 0xC0) == 0x80
        for b in range(16):
            t2 = buf[l3 + 8 + b]
            buf[l3 + 8 + b] = buf[l3 + 24 + b]
            buf[l3 + 24 + b] = t2
        buf[l3 + 7] = DEFAULT_TTL
        buf[l4] = ICMP6_ECHO_REPLY
        if mcast:
            # answer from a unicast address of the interface of the scope of the asker's
            # (RFC 6724, as Linux): link-local for a link-local asker, else the global one
            rx = meta[M_RX, i]
            row = IF6_LL if ll or dp.if_ip6[rx, IF6_GLOBAL, 0] == 0 else IF6_GLOBAL
            for b in range(16):
                buf[l3 + 8 + b] = dp.if_ip6[rx, row, b]
            wr16(buf, l4 + 2, 0)
            wr16(buf, l4 + 2, checksum(buf, l4, end - l4,
                                       pseudo_header6(buf, l3, PROTO_ICMPV6, end - l4)))
        else:
            wr16(buf, l4 + 2, incremental_update(rd16(buf, l4 + 2),
                                                 np.uint32(ICMP6_ECHO_REQUEST << 8),
                                                 np.uint32(ICMP6_ECHO_REPLY << 8)))
        meta[M_FLAGS, i] = F_LOCAL_ORIGIN | F_IP6
        meta[M_PROTO, i] = PROTO_ICMPV6
        dp.counters[C.C_ECHO_REPLY_SENT] += 1
        _route_reply(frames, frame_n, meta, buf, dp, i, ll, IP6_LOOKUP)
