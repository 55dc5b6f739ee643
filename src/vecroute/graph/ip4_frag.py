"""ip4-frag: RFC 791 fragmentation when the egress MTU is smaller and DF is clear.

Fragments 2..n are built in spare batch slots (header copied, only options with the
"copied" bit kept, RFC 791 3.1), then the original slot is cut down into fragment 1 in
place. A packet that is already a fragment keeps its offset base and its MF bit on the
last piece. Each fragment gets the adjacency's L2 rewrite and goes to interface-output.
"""

import numpy as np
from numba import njit

from vecroute.fib.layout import A_IF, I_MTU
from vecroute.graph import counters as C
from vecroute.graph.frames import drop, enqueue
from vecroute.graph.registry import NodeDecl
from vecroute.graph.rewrite import count_answer, rewrite_l2
from vecroute.packet.batch import (
    F_ANSWER,
    F_FRAG,
    F_FRAG_NONFIRST,
    F_LOCAL_ORIGIN,
    F_REDIRECT,
    HEADROOM,
    M_ADJ,
    M_AUX,
    M_AUX2,
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
    M_SEQ,
    SLOT,
    alloc_slot,
)
from vecroute.packet.checksum import checksum
from vecroute.packet.headers import IP4_HLEN, rd16, wr16
from vecroute.packet.node_ids import FREE, INTERFACE_OUTPUT

NODES = (
    NodeDecl(
        "ip4-frag",
        next=("interface-output", "error-drop"),
        counters=(
            "fragments-created", "frag-no-buffer", "frag-options-too-long", "frag-offset-overflow",
            "icmp-error-sent", "redirect-sent", "tcp-reset-sent",
        ),
    ),
)


@njit(cache=True)
def copied_options(buf, l3: int, ihl: int, dst, do: int) -> int:
    """Write the options with the copied flag (type bit 7) at dst[do:]; return their
    padded length (a multiple of 4)."""
    p = l3 + IP4_HLEN
    end = l3 + ihl
    n = 0
    while p < end:
        t = buf[p]
        if t == 0:
            break
        if t == 1:
            p += 1
            continue
        if p + 1 >= end:
            break
        ln = np.int32(buf[p + 1])
        if ln < 2 or p + ln > end:
            break
        if t & 0x80:
            for b in range(ln):
                dst[do + n + b] = buf[p + b]
            n += ln
        p += ln
    while n & 3:
        dst[do + n] = 0
        n += 1
    return n


@njit(cache=True, _nrt=True)
def ip4_frag(work, k, buf, meta, frames, frame_n, dp, nalloc) -> None:
    made = np.empty(meta.shape[1], dtype=np.int32)
    for j in range(k):
        i = work[j]
        a = meta[M_ADJ, i]
        l3 = meta[M_L3, i]
        mtu = dp.ifc[dp.adj[a, A_IF], I_MTU]
        ihl = np.int32(buf[l3] & 15) * 4
        tot = np.int32(rd16(buf, l3 + 2))
        fo = rd16(buf, l3 + 6)
        base = np.int32(fo & 0x1FFF) * 8
        last_mf = fo & 0x2000
        if base + tot - ihl > 65535:  # RFC 791: the offset field cannot say where it goes
            drop(frames, frame_n, meta, i, C.C_FRAG_OFFSET_OVERFLOW)
            continue
        first_room = ((mtu - ihl) // 8) * 8
        if first_room < 8:
            drop(frames, frame_n, meta, i, C.C_FRAG_OPTIONS_TOO_LONG)
            continue
        data0 = l3 + ihl
        dlen = tot - ihl
        pos = first_room
        seq = 1
        ok = True
        reason = C.C_FRAG_NO_BUFFER
        while pos < dlen:
            s = alloc_slot(meta, nalloc, i, meta[M_RX, i])
            if s < 0:
                ok = False
                break
            made[seq - 1] = s
            meta[M_NEXT, s] = FREE
            n3 = s * SLOT + HEADROOM + 14
            for b in range(IP4_HLEN):
                buf[n3 + b] = buf[l3 + b]
            olen = copied_options(buf, l3, ihl, buf, n3 + IP4_HLEN)
            h = IP4_HLEN + olen
            room = ((mtu - h) // 8) * 8
            if room < 8:
                reason = C.C_FRAG_OPTIONS_TOO_LONG
                ok = False
                break
            part = min(room, dlen - pos)
            for b in range(part):
                buf[n3 + h + b] = buf[data0 + pos + b]
            buf[n3] = np.uint8(0x40 | (h // 4))
            wr16(buf, n3 + 2, h + part)
            more = 0x2000 if (pos + part < dlen or last_mf) else 0
            wr16(buf, n3 + 6, (fo & 0x4000) | more | ((base + pos) // 8))
            wr16(buf, n3 + 10, 0)
            wr16(buf, n3 + 10, checksum(buf, n3, h, np.uint64(0)))
            meta[M_OFF, s] = n3
            meta[M_L3, s] = n3
            meta[M_LEN, s] = h + part
            meta[M_ADJ, s] = a
            meta[M_FIB, s] = meta[M_FIB, i]
            meta[M_PROTO, s] = meta[M_PROTO, i]
            meta[M_L4, s] = 0
            meta[M_HASH, s] = meta[M_HASH, i]
            meta[M_AUX, s] = meta[M_AUX, i]  # a reply adjacency's MAC
            meta[M_AUX2, s] = meta[M_AUX2, i]
            meta[M_FLAGS, s] = F_LOCAL_ORIGIN | F_FRAG | F_FRAG_NONFIRST
            meta[M_SEQ, s] = meta[M_SEQ, i] + seq
            seq += 1
            pos += part
        if not ok:
            for m in range(seq - 1):
                meta[M_NEXT, made[m]] = FREE
            drop(frames, frame_n, meta, i, reason)
            continue
        for m in range(seq - 1):
            rewrite_l2(buf, meta, dp, made[m], a)
            enqueue(frames, frame_n, meta, INTERFACE_OUTPUT, made[m])
        dp.counters[C.C_FRAGMENTS_CREATED] += seq
        if meta[M_FLAGS, i] & (F_ANSWER | F_REDIRECT):  # an error of ours, fragmented: sent
            count_answer(dp.counters, meta[M_FLAGS, i])
        wr16(buf, l3 + 2, ihl + first_room)
        wr16(buf, l3 + 6, (fo & 0x4000) | 0x2000 | (base // 8))
        wr16(buf, l3 + 10, 0)
        wr16(buf, l3 + 10, checksum(buf, l3, ihl, np.uint64(0)))
        meta[M_LEN, i] = (l3 - meta[M_OFF, i]) + ihl + first_room
        meta[M_FLAGS, i] |= F_FRAG
        rewrite_l2(buf, meta, dp, i, a)
        enqueue(frames, frame_n, meta, INTERFACE_OUTPUT, i)
