"""srv6-localsid: the endpoint behaviours of RFC 8986 on packets whose destination is one
of our SIDs (found by the same FIB lookup as any packet: a SID is a /128 or a locator
prefix whose adjacency names the local SID).

End, End.X, End.T process the SRH exactly as RFC 8986 4.1 (with RFC 8754 4.3.1.1's
checks): Segments Left and Last Entry validated against Hdr Ext Len (ICMPv6 parameter
problem code 0 pointing at Segments Left), hop limit (time exceeded), Segments Left
decremented and the next segment copied into the destination; the PSP flavour pops the
SRH at the penultimate SID. SL == 0 (or no SRH) means the upper-layer header is for us:
ICMPv6 goes to local delivery, anything else gets parameter problem code 4. The
decapsulating behaviours act only when SL == 0 and hand the inner packet to ip4-input /
ip6-input (validated like any received packet) with the SID's table or adjacency.
TLVs after the segment list are skipped (Hdr Ext Len covers them); HMAC TLVs are not
verified.
"""

import numpy as np
from numba import njit

from vecroute.fib.layout import A_NH4
from vecroute.graph import counters as C
from vecroute.graph.frames import enqueue, icmp_error
from vecroute.graph.lookup import to_adjacency
from vecroute.graph.registry import NodeDecl
from vecroute.packet.batch import (
    F_FORCED_ADJ,
    F_HLIM_DONE,
    F_IP6,
    M_ADJ,
    M_FIB,
    M_FLAGS,
    M_HASH,
    M_L3,
    M_L4,
    M_LEN,
    M_OFF,
    M_PROTO,
)
from vecroute.packet.headers import (
    ICMP6_PARAM_PROBLEM,
    ICMP6_TIME_EXCEEDED,
    PROTO_DSTOPTS,
    PROTO_HOPOPT,
    PROTO_ICMPV6,
    PROTO_IPIP,
    PROTO_IPV6,
    PROTO_ROUTING,
    copy_bytes,
    rd16,
    wr16,
)
from vecroute.packet.node_ids import IP4_INPUT, IP6_INPUT, IP6_LOCAL, IP6_LOOKUP
from vecroute.srv6.layout import SID_ADJ, SID_BEHAVIOR, SID_FIB4, SID_FIB6, SID_FLAVOR

NODES = (
    NodeDecl(
        "srv6-localsid",
        next=(
            "ip4-input", "ip6-input", "ip6-local", "ip6-lookup", "gso-segment", "srv6-localsid",
            "srv6-encap", "icmp6-error", "fw-out", "ip6-rewrite", "error-drop",
        ),
        counters=(
            "blackhole", "route-unreachable", "route-prohibit", "ttl-expired", "srv6-end",
            "srv6-decapsulated", "srv6-bad-srh", "srv6-sl-not-zero", "srv6-upper-layer",
        ),
    ),
)

# behaviours (sr_sid[:, SID_BEHAVIOR]); names in vecroute.srv6.tables.BEHAVIORS
END, END_X, END_T, END_DX4, END_DX6, END_DT4, END_DT6, END_DT46 = range(8)
FLAVOR_PSP = 1


@njit(cache=True, inline="always")
def _upper_layer(frames, frame_n, meta, i, l3, ul_off) -> None:
    """RFC 8986 4.1.1: ICMPv6 to a SID is processed locally; other upper layers are not."""
    if meta[M_PROTO, i] == PROTO_ICMPV6:
        enqueue(frames, frame_n, meta, IP6_LOCAL, i)
    else:
        icmp_error(frames, frame_n, meta, i, True, C.C_SRV6_UPPER_LAYER,
                   ICMP6_PARAM_PROBLEM, 4, ul_off - l3)


@njit(cache=True, _nrt=True)
def srv6_localsid(work, k, buf, meta, frames, frame_n, dp) -> None:
    ends = 0
    decaps = 0
    for j in range(k):
        i = work[j]
        sid = dp.adj[meta[M_ADJ, i], A_NH4]
        beh = dp.sr_sid[sid, SID_BEHAVIOR]
        l3 = meta[M_L3, i]
        end = meta[M_OFF, i] + meta[M_LEN, i]
        # find the SRH (routing type 4) and the upper-layer header (RFC 8200: after all
        # extension headers, a destination options header after the SRH included) in the
        # chain ip6-input already validated
        srh = -1
        nh = np.int32(buf[l3 + 6])
        p = l3 + 40
        while (nh == PROTO_HOPOPT or nh == PROTO_DSTOPTS or nh == PROTO_ROUTING) and p + 8 <= end:
            if srh < 0 and nh == PROTO_ROUTING and buf[p + 2] == 4:
                srh = p
            nh = np.int32(buf[p])
            p += (np.int32(buf[p + 1]) + 1) * 8
        sl = 0
        after = p  # the upper-layer header nh (the inner packet of a decapsulation)
        if srh >= 0:
            sl = np.int32(buf[srh + 3])
        if beh <= END_T:
            if sl == 0:
                _upper_layer(frames, frame_n, meta, i, l3, after)
                continue
            if buf[l3 + 7] <= 1:
                icmp_error(frames, frame_n, meta, i, True, C.C_TTL_EXPIRED,
                           ICMP6_TIME_EXCEEDED, 0, 0)
                continue
            hel = np.int32(buf[srh + 1])
            le = np.int32(buf[srh + 4])
            if le > hel // 2 - 1 or sl > le + 1:
                icmp_error(frames, frame_n, meta, i, True, C.C_SRV6_BAD_SRH,
                           ICMP6_PARAM_PROBLEM, 0, srh + 3 - l3)
                continue
            buf[l3 + 7] -= 1
            sl -= 1
            buf[srh + 3] = sl
            seg = srh + 8 + 16 * sl
            for b in range(16):
                buf[l3 + 24 + b] = buf[seg + b]
            if (dp.sr_sid[sid, SID_FLAVOR] == FLAVOR_PSP and sl == 0 and srh == l3 + 40):
                srhlen = (hel + 1) * 8  # pop the SRH: the IPv6 header moves up to the payload
                buf[l3 + 6] = buf[srh]
                wr16(buf, l3 + 4, rd16(buf, l3 + 4) - srhlen)
                copy_bytes(buf, l3 + srhlen, buf, l3, 40)
                l3 += srhlen
                meta[M_L3, i] = l3
                meta[M_OFF, i] = l3
                meta[M_LEN, i] = end - l3
                meta[M_PROTO, i] = nh  # the upper layer has not moved
                meta[M_L4, i] = after
            meta[M_FLAGS, i] |= F_HLIM_DONE
            ends += 1
            if beh == END_X:
                to_adjacency(frames, frame_n, meta, dp, i, dp.sr_sid[sid, SID_ADJ], True)
            else:
                if beh == END_T:
                    meta[M_FIB, i] = dp.sr_sid[sid, SID_FIB6]
                enqueue(frames, frame_n, meta, IP6_LOOKUP, i)
            continue
        # decapsulating behaviours
        if sl != 0:
            icmp_error(frames, frame_n, meta, i, True, C.C_SRV6_SL_NOT_ZERO,
                       ICMP6_PARAM_PROBLEM, 0, srh + 3 - l3)
            continue
        want6 = beh == END_DX6 or beh == END_DT6 or beh == END_DT46
        want4 = beh == END_DX4 or beh == END_DT4 or beh == END_DT46
        if (nh == PROTO_IPV6 and want6) or (nh == PROTO_IPIP and want4):
            meta[M_OFF, i] = after
            meta[M_L3, i] = after
            meta[M_LEN, i] = end - after
            meta[M_PROTO, i] = -1
            meta[M_L4, i] = 0
            meta[M_HASH, i] = 0  # the outer flow's hash is not the inner flow's
            decaps += 1
            ip6 = nh == PROTO_IPV6
            flags = F_IP6 if ip6 else 0
            if beh == END_DX4 or beh == END_DX6:
                meta[M_ADJ, i] = dp.sr_sid[sid, SID_ADJ]
                flags |= F_FORCED_ADJ
            else:
                meta[M_FIB, i] = dp.sr_sid[sid, SID_FIB6 if ip6 else SID_FIB4]
            meta[M_FLAGS, i] = flags
            enqueue(frames, frame_n, meta, IP6_INPUT if ip6 else IP4_INPUT, i)
        else:
            _upper_layer(frames, frame_n, meta, i, l3, after)
    dp.counters[C.C_SRV6_END] += ends
    dp.counters[C.C_SRV6_DECAPSULATED] += decaps


