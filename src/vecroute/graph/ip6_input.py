"""ip6-input: RFC 8200 validation and the extension header walk, then to the lookup.

The walk follows hop-by-hop, routing, fragment, destination-options and AH headers to the
upper layer so that later nodes (local delivery, ICMP errors, firewall, SRv6) know the
upper-layer protocol and offset. Hop-by-hop options are processed here for every packet,
as Linux does (RFC 8200 4.2 action bits); destination options at local delivery.
Link-local destinations are never routed.
"""

import numpy as np
from numba import njit

from vecroute.fib.layout import I_HOST, IF6_LL
from vecroute.graph import counters as C
from vecroute.graph.frames import drop, enqueue, host_punt, icmp_error
from vecroute.graph.registry import NodeDecl
from vecroute.graph.state import FW_RUN_IN, OPT_FW
from vecroute.packet.batch import (
    F_FRAG,
    F_FRAG_NONFIRST,
    F_ICMP_ERROR,
    F_LINK_LOCAL,
    M_FLAGS,
    M_L3,
    M_L4,
    M_LEN,
    M_OFF,
    M_PROTO,
    M_RX,
)
from vecroute.packet.headers import (
    ICMP6_PARAM_PROBLEM,
    IP6_HLEN,
    PROTO_AH,
    PROTO_DSTOPTS,
    PROTO_FRAGMENT,
    PROTO_HOPOPT,
    PROTO_ICMPV6,
    PROTO_ROUTING,
    rd16,
    rd64,
)
from vecroute.packet.node_ids import FW_IN, IP6_LOCAL, IP6_LOOKUP

NODES = (
    NodeDecl(
        "ip6-input",
        next=(
            "fw-in", "ip6-local", "ip6-lookup", "gso-segment", "icmp6-error", "error-drop", "punt",
        ),
        counters=(
            "ip6-too-short", "ip6-bad-version", "ip6-bad-length", "ip6-bad-ext-header",
            "ip6-bad-source", "ip6-link-local", "ip6-dst-multicast", "ip6-bad-destination",
            "ip6-unknown-option", "host-punt",
        ),
    ),
)

MAX_EXT_HEADERS = 16
OPT_PAD1 = 0
OPT_PADN = 1
OPT_ROUTER_ALERT = 5
# scan_options results: what RFC 8200 4.2's two high-order bits of an unknown option say
OPT_OK = 0
OPT_DISCARD = 1  # 01: discard silently
OPT_PARAM_PROBLEM = 2  # 10: discard, parameter problem code 2 even to a multicast destination
OPT_PARAM_PROBLEM_UNICAST = 3  # 11: the same, unless the destination is multicast
OPT_MALFORMED = 4  # an option runs past its header, or padding / option counts Linux refuses
MAX_PAD = 7  # consecutive padding bytes (RFC 4942 2.1.9.5; Linux ip6_parse_tlv)
MAX_OPTIONS = 8  # options other than padding per header (Linux max_{hbh,dst}_opts_cnt)


@njit(cache=True)
def walk_ext_headers(buf, l3: int, end: int):
    """Follow the extension header chain. Returns (proto, l4 offset, frag flags, ok)."""
    nh = np.int32(buf[l3 + 6])
    p = l3 + IP6_HLEN
    flags = 0
    for n in range(MAX_EXT_HEADERS):
        if nh == PROTO_HOPOPT and n > 0:
            return nh, p, flags, False  # hop-by-hop must come first (RFC 8200 4.1)
        if nh == PROTO_HOPOPT or nh == PROTO_ROUTING or nh == PROTO_DSTOPTS or nh == PROTO_AH:
            if p + 2 > end:
                return nh, p, flags, False
            if nh == PROTO_AH:  # RFC 4302: length in 4-octet units, minus 2
                hl = (np.int32(buf[p + 1]) + 2) * 4
            else:
                hl = (np.int32(buf[p + 1]) + 1) * 8
            if p + hl > end:
                return nh, p, flags, False
            nh = np.int32(buf[p])
            p += hl
        elif nh == PROTO_FRAGMENT:
            if p + 8 > end:
                return nh, p, flags, False
            fo = rd16(buf, p + 2)
            flags |= F_FRAG
            nxt = np.int32(buf[p])
            p += 8
            if fo & 0xFFF8:
                flags |= F_FRAG_NONFIRST
                return nxt, p, flags, True  # no upper-layer header in this fragment
            nh = nxt
        else:
            return nh, p, flags, True
    return nh, p, flags, False


@njit(cache=True)
def scan_options(buf, p: int, hbh: bool):
    """The TLV options of the hop-by-hop (hbh) or destination options header at p.
    Returns (OPT_* verdict, offset of the option that decided it)."""
    q = p + 2
    end = p + (np.int32(buf[p + 1]) + 1) * 8
    pad = 0
    count = 0
    while q < end:
        t = np.int32(buf[q])
        if t == OPT_PAD1:
            pad += 1
            if pad > MAX_PAD:
                return OPT_MALFORMED, q
            q += 1
            continue
        if q + 2 > end:
            return OPT_MALFORMED, q
        ln = np.int32(buf[q + 1])
        if q + 2 + ln > end:
            return OPT_MALFORMED, q
        if t == OPT_PADN:
            pad += 2 + ln
            if pad > MAX_PAD:
                return OPT_MALFORMED, q
            for b in range(ln):  # RFC 4942: PadN carries zeros only
                if buf[q + 2 + b] != 0:
                    return OPT_MALFORMED, q
        else:
            pad = 0
            count += 1
            if count > MAX_OPTIONS:
                return OPT_MALFORMED, q
            if not (hbh and t == OPT_ROUTER_ALERT):
                act = t >> 6
                if act != 0:
                    return act, q
        q += 2 + ln
    return OPT_OK, 0


@njit(cache=True, inline="always")
def option_verdict(frames, frame_n, meta, buf, i, l3, act, q) -> None:
    """Send packet i where an option verdict (not OPT_OK) says."""
    if act == OPT_MALFORMED:
        drop(frames, frame_n, meta, i, C.C_IP6_BAD_EXT)
    elif act == OPT_DISCARD or (act == OPT_PARAM_PROBLEM_UNICAST and buf[l3 + 24] == 0xFF):
        drop(frames, frame_n, meta, i, C.C_IP6_UNKNOWN_OPTION)
    else:
        icmp_error(frames, frame_n, meta, i, True, C.C_IP6_UNKNOWN_OPTION,
                   ICMP6_PARAM_PROBLEM, 2, q - l3)


@njit(cache=True, inline="always")
def is_our_ll(dp, rx, buf, l3) -> bool:
    """The packet at l3 is addressed to interface rx's link-local address."""
    for b in range(16):
        if buf[l3 + 24 + b] != dp.if_ip6[rx, IF6_LL, b]:
            return False
    return True


@njit(cache=True, inline="always")
def _wanted_multicast(dp, rx, buf, l3) -> bool:
    """ff02::1, ff02::2 and the solicited-node groups of the interface's addresses."""
    if buf[l3 + 24] != 0xFF or buf[l3 + 25] != 0x02:
        return False
    for b in range(2, 11):
        if buf[l3 + 24 + b] != 0:
            return False
    if buf[l3 + 35] == 0 and buf[l3 + 36] == 0 and buf[l3 + 37] == 0 and buf[l3 + 38] == 0:
        last = buf[l3 + 39]
        return last == 1 or last == 2
    if buf[l3 + 35] != 1 or buf[l3 + 36] != 0xFF:
        return False
    # ff02::1:ffXX:XXXX: only the solicited-node groups of our addresses (RFC 4291 2.7.1)
    for r in range(dp.if_ip6.shape[1]):
        a = dp.if_ip6[rx, r]
        if (a[0] != 0 and a[13] == buf[l3 + 37] and a[14] == buf[l3 + 38]
                and a[15] == buf[l3 + 39]):
            return True
    return False


@njit(cache=True, _nrt=True)
def ip6_input(work, k, buf, meta, frames, frame_n, dp) -> None:
    routed = FW_IN if dp.opts[OPT_FW] & FW_RUN_IN else IP6_LOOKUP  # the input firewall
    for j in range(k):
        i = work[j]
        o = meta[M_OFF, i]
        l3 = meta[M_L3, i]
        avail = meta[M_LEN, i] - (l3 - o)
        if avail < IP6_HLEN:
            drop(frames, frame_n, meta, i, C.C_IP6_TOO_SHORT)
            continue
        if (buf[l3] >> 4) != 6:
            drop(frames, frame_n, meta, i, C.C_IP6_BAD_VERSION)
            continue
        plen = np.int32(rd16(buf, l3 + 4))
        if IP6_HLEN + plen > avail:
            drop(frames, frame_n, meta, i, C.C_IP6_BAD_LENGTH)
            continue
        meta[M_LEN, i] = (l3 - o) + IP6_HLEN + plen
        s0 = buf[l3 + 8]
        if s0 == 0xFF:
            drop(frames, frame_n, meta, i, C.C_IP6_BAD_SOURCE)
            continue
        src_zero_hi = True
        for b in range(15):
            if buf[l3 + 8 + b] != 0:
                src_zero_hi = False
                break
        d0 = buf[l3 + 24]
        if d0 == 0 and rd64(buf, l3 + 24) == 0 and rd64(buf, l3 + 32) <= 1:
            drop(frames, frame_n, meta, i, C.C_IP6_BAD_DESTINATION)  # :: or ::1
            continue
        if src_zero_hi and buf[l3 + 23] == 1:
            drop(frames, frame_n, meta, i, C.C_IP6_BAD_SOURCE)  # ::1
            continue
        if src_zero_hi and buf[l3 + 23] == 0 and d0 != 0xFF:
            drop(frames, frame_n, meta, i, C.C_IP6_BAD_SOURCE)  # :: only for DAD
            continue
        proto, l4, fflags, ok = walk_ext_headers(buf, l3, l3 + IP6_HLEN + plen)
        if not ok:
            drop(frames, frame_n, meta, i, C.C_IP6_BAD_EXT)
            continue
        flags = meta[M_FLAGS, i] | fflags
        meta[M_PROTO, i] = proto
        meta[M_L4, i] = l4
        if (proto == PROTO_ICMPV6 and not (flags & F_FRAG_NONFIRST)
                and l4 < l3 + IP6_HLEN + plen and buf[l4] < 128):
            flags |= F_ICMP_ERROR
        if s0 == 0xFE and (buf[l3 + 9] & 0xC0) == 0x80:
            flags |= F_LINK_LOCAL
        meta[M_FLAGS, i] = flags
        if buf[l3 + 6] == PROTO_HOPOPT:  # hop-by-hop options: every node looks (like Linux)
            act, q = scan_options(buf, l3 + IP6_HLEN, True)
            if act != OPT_OK:
                option_verdict(frames, frame_n, meta, buf, i, l3, act, q)
                continue
        rx = meta[M_RX, i]
        if d0 == 0xFF:
            if _wanted_multicast(dp, rx, buf, l3):
                enqueue(frames, frame_n, meta, IP6_LOCAL, i)
            elif dp.ifc[rx, I_HOST] and (buf[l3 + 25] & 0x0F) == 2:
                host_punt(frames, frame_n, meta, dp, i)  # link scope: OSPFv3, MLD, …
            else:
                drop(frames, frame_n, meta, i, C.C_IP6_DST_MULTICAST)
        elif d0 == 0xFE and (buf[l3 + 25] & 0xC0) == 0x80:
            if is_our_ll(dp, rx, buf, l3):
                enqueue(frames, frame_n, meta, IP6_LOCAL, i)
            else:
                drop(frames, frame_n, meta, i, C.C_IP6_LINK_LOCAL)
        else:
            enqueue(frames, frame_n, meta, routed, i)
