"""tcp-reset: answer with a RST a TCP segment that a firewall ``reset`` rule rejected or
that was sent to a router address (no TCP listens there).

The RST is built in place over the offending packet (its fields are read first) and
routed back through the lookup from the address the segment was sent to, as the peer
would have answered (RFC 9293 3.10.7.1: with an ACK in the segment the RST takes its
sequence number from it, otherwise sequence 0 with ACK = SEG.SEQ + SEG.LEN). It is marked
so that fw-out does not filter it again (ipfw's ``M_SKIP_FIREWALL``). No RST answers a
segment from or to a multicast/broadcast or invalid address, nor a RST (RFC 9293 3.10.7.1).
An answer to a link-local source leaves by the interface the segment came in on.

A token bucket of its own (``icmp_tb[TB_RST:]``, ``[icmp] tcp_reset_rate`` /
``tcp_reset_burst``, default 1000/s and 50) limits the RSTs, like FreeBSD's
``badport_bandlim`` limits RSTs for closed ports: a SYN flood from spoofed sources would
otherwise make the router a reflector at line rate. Past the limit the segment is only
dropped (``tcp-reset-rate-limited``).
"""

import numpy as np
from numba import njit

from vecroute.graph import counters as C
from vecroute.graph.frames import enqueue
from vecroute.graph.icmp_error import answer_on_link, count_drop, give_up
from vecroute.graph.ip4_input import is_link_local4, is_martian4
from vecroute.graph.registry import NodeDecl
from vecroute.graph.state import TB_IP_ID, TB_RST
from vecroute.graph.token_bucket import take_token_at
from vecroute.packet.batch import (
    F_ANSWER,
    F_FORCED_ADJ,
    F_FW_SKIP,
    F_IP6,
    F_L2_MCAST,
    F_LOCAL_ORIGIN,
    M_ADJ,
    M_ERR,
    M_FLAGS,
    M_L3,
    M_L4,
    M_LEN,
    M_OFF,
    M_PROTO,
)
from vecroute.packet.checksum import checksum, pseudo_header4, pseudo_header6
from vecroute.packet.headers import IP4_HLEN, IP6_HLEN, PROTO_TCP, rd16, rd32, wr16, wr32
from vecroute.packet.node_ids import IP4_LOOKUP, IP6_LOOKUP

NODES = (
    NodeDecl(
        "tcp-reset",
        next=("ip4-lookup", "ip6-lookup", "error-drop"),
        counters=("fw-reset-suppressed", "tcp-reset-rate-limited"),
    ),
)

TCP_HLEN = 20
TH_FIN = 0x01
TH_SYN = 0x02
TH_RST = 0x04
TH_ACK = 0x10
RST_TTL = 64


@njit(cache=True, _nrt=True)
def tcp_reset(work, k, buf, meta, frames, frame_n, dp, now) -> None:
    for j in range(k):
        i = work[j]
        count_drop(meta, dp, i)
        l3 = meta[M_L3, i]
        l4 = meta[M_L4, i]
        end = meta[M_OFF, i] + meta[M_LEN, i]
        ip6 = (buf[l3] >> 4) == 6
        src = rd32(buf, l3 + 12)
        if ip6:
            bad = (
                buf[l3 + 8] == 0xFF  # multicast source
                or buf[l3 + 24] == 0xFF  # multicast destination
                or (rd32(buf, l3 + 8) | rd32(buf, l3 + 12) | rd32(buf, l3 + 16)) == 0
            )  # unspecified, loopback or v4-compatible source
        else:
            bad = (rd32(buf, l3 + 16) >> np.uint32(28)) >= 14 or is_martian4(src)
        if (bad or meta[M_FLAGS, i] & F_L2_MCAST or l4 <= 0 or l4 + TCP_HLEN > end
                or buf[l4 + 13] & TH_RST):
            give_up(frames, frame_n, meta, dp, i, C.C_FW_RESET_SUPPRESSED)
            continue
        if ip6:
            ll = buf[l3 + 8] == 0xFE and (buf[l3 + 9] & 0xC0) == 0x80
        else:
            ll = is_link_local4(src)
        forced = 0
        if ll:  # on the link it came from, never through the FIB
            a = answer_on_link(buf, meta, dp, i)
            if a < 0:
                give_up(frames, frame_n, meta, dp, i, C.C_FW_RESET_SUPPRESSED)
                continue
            meta[M_ADJ, i] = a
            forced = F_FORCED_ADJ
        if not take_token_at(dp.icmp_tb, TB_RST, now):
            give_up(frames, frame_n, meta, dp, i, C.C_TCP_RESET_RATE_LIMITED)
            continue
        sport = rd16(buf, l4)
        dport = rd16(buf, l4 + 2)
        seq = rd32(buf, l4 + 4)
        ack = rd32(buf, l4 + 8)
        doff = np.int64(buf[l4 + 12] >> 4) * 4
        flags = buf[l4 + 13]
        seglen = end - l4 - max(doff, TCP_HLEN)
        if seglen < 0:
            seglen = 0
        if flags & TH_SYN:
            seglen += 1
        if flags & TH_FIN:
            seglen += 1
        if ip6:
            wr32(buf, l3, np.uint32(0x60000000))
            wr16(buf, l3 + 4, TCP_HLEN)
            buf[l3 + 6] = PROTO_TCP
            buf[l3 + 7] = RST_TTL
            for b in range(16):  # the addresses, swapped on the way back
                x = buf[l3 + 8 + b]
                buf[l3 + 8 + b] = buf[l3 + 24 + b]
                buf[l3 + 24 + b] = x
            hl = IP6_HLEN
        else:
            dst = rd32(buf, l3 + 16)
            buf[l3] = 0x45
            buf[l3 + 1] = 0
            wr16(buf, l3 + 2, IP4_HLEN + TCP_HLEN)
            dp.icmp_tb[TB_IP_ID] = (dp.icmp_tb[TB_IP_ID] + 1) & 0xFFFF
            wr16(buf, l3 + 4, dp.icmp_tb[TB_IP_ID])
            wr16(buf, l3 + 6, 0)
            buf[l3 + 8] = RST_TTL
            buf[l3 + 9] = PROTO_TCP
            wr16(buf, l3 + 10, 0)
            wr32(buf, l3 + 12, dst)
            wr32(buf, l3 + 16, src)
            wr16(buf, l3 + 10, checksum(buf, l3, IP4_HLEN, np.uint64(0)))
            hl = IP4_HLEN
        t = l3 + hl
        wr16(buf, t, dport)
        wr16(buf, t + 2, sport)
        if flags & TH_ACK:
            wr32(buf, t + 4, ack)
            wr32(buf, t + 8, np.uint32(0))
            buf[t + 13] = TH_RST
        else:
            wr32(buf, t + 4, np.uint32(0))
            wr32(buf, t + 8, np.uint32((np.int64(seq) + seglen) & 0xFFFFFFFF))
            buf[t + 13] = TH_RST | TH_ACK
        buf[t + 12] = 0x50
        wr16(buf, t + 14, 0)  # window
        wr16(buf, t + 16, 0)  # checksum
        wr16(buf, t + 18, 0)  # urgent pointer
        if ip6:
            acc = pseudo_header6(buf, l3, PROTO_TCP, TCP_HLEN)
        else:
            acc = pseudo_header4(buf, l3, PROTO_TCP, TCP_HLEN)
        wr16(buf, t + 16, checksum(buf, t, TCP_HLEN, acc))
        meta[M_OFF, i] = l3
        meta[M_L4, i] = t
        meta[M_LEN, i] = hl + TCP_HLEN
        meta[M_PROTO, i] = PROTO_TCP
        meta[M_FLAGS, i] = F_LOCAL_ORIGIN | F_FW_SKIP | F_ANSWER | forced | (F_IP6 if ip6 else 0)
        meta[M_ERR, i] = -1
        enqueue(frames, frame_n, meta, IP6_LOOKUP if ip6 else IP4_LOOKUP, i)
