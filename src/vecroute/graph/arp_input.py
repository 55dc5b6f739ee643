"""arp-input: answer ARP requests for the router's addresses; hand the rest to the
control plane (which learns neighbours from replies and gratuitous ARP).

A request for another host is dropped (``arp-not-for-us``) unless a live control plane
runs: then it is punted too, because RFC 826 merges the sender of every ARP packet into an
existing entry (a neighbour that changed its MAC is followed); the table creates nothing
for it.
"""

import numpy as np
from numba import njit

from vecroute.fib.layout import A_TYPE, ADJ_LOCAL
from vecroute.graph import counters as C
from vecroute.graph.frames import drop, enqueue
from vecroute.graph.local import punt
from vecroute.graph.lookup import resolve4
from vecroute.graph.registry import NodeDecl
from vecroute.graph.state import OPT_LIVE
from vecroute.packet.batch import M_FIB, M_L3, M_LEN, M_OFF, M_RX, M_TX, alloc_slot
from vecroute.packet.headers import ARP_LEN, rd16, rd32, wr16
from vecroute.packet.node_ids import INTERFACE_OUTPUT

NODES = (
    NodeDecl(
        "arp-input",
        next=("interface-output", "error-drop", "punt"),
        counters=("arp-malformed", "arp-not-for-us", "arp-reply-sent", "arp-punt"),
    ),
)


@njit(cache=True, _nrt=True)
def arp_input(work, k, buf, meta, frames, frame_n, dp, nalloc) -> None:
    live = dp.opts[OPT_LIVE] != 0
    for j in range(k):
        i = work[j]
        o = meta[M_OFF, i]
        l3 = meta[M_L3, i]
        if (meta[M_LEN, i] - (l3 - o) < ARP_LEN or rd16(buf, l3) != 1
                or rd16(buf, l3 + 2) != 0x0800 or buf[l3 + 4] != 6 or buf[l3 + 5] != 4):
            drop(frames, frame_n, meta, i, C.C_ARP_MALFORMED)
            continue
        op = rd16(buf, l3 + 6)
        spa = rd32(buf, l3 + 14)
        tpa = rd32(buf, l3 + 24)
        if op != 1 or spa == tpa:
            punt(frames, frame_n, meta, dp, i, C.C_ARP_PUNT)  # reply or gratuitous
            continue
        a = resolve4(dp, meta[M_FIB, i], tpa, np.uint32(0))
        if a < 0 or dp.adj[a, A_TYPE] != ADJ_LOCAL:
            if live:  # RFC 826 merge: a known sender's entry is updated even so
                punt(frames, frame_n, meta, dp, i, C.C_ARP_PUNT)
            else:
                drop(frames, frame_n, meta, i, C.C_ARP_NOT_FOR_US)
            continue
        rx = meta[M_RX, i]
        if live:  # the control plane learns the requester from a copy (RFC 826 merge)
            s = alloc_slot(meta, nalloc, i, rx)
            if s >= 0:
                n = meta[M_LEN, i]
                for b in range(n):
                    buf[meta[M_OFF, s] + b] = buf[o + b]
                meta[M_LEN, s] = n
                meta[M_L3, s] = meta[M_OFF, s] + (l3 - o)
                punt(frames, frame_n, meta, dp, s, C.C_ARP_PUNT)
        wr16(buf, l3 + 6, 2)
        for b in range(6):
            sha = buf[l3 + 8 + b]
            buf[l3 + 18 + b] = sha  # tha = requester
            buf[o + b] = sha  # ethernet destination
            buf[l3 + 8 + b] = dp.if_mac[rx, b]
            buf[o + 6 + b] = dp.if_mac[rx, b]
        for b in range(4):
            buf[l3 + 24 + b] = buf[l3 + 14 + b]  # tpa = requester's address
        buf[l3 + 14] = (tpa >> 24) & 0xFF
        buf[l3 + 15] = (tpa >> 16) & 0xFF
        buf[l3 + 16] = (tpa >> 8) & 0xFF
        buf[l3 + 17] = tpa & 0xFF
        meta[M_TX, i] = rx
        dp.counters[C.C_ARP_REPLY_SENT] += 1
        enqueue(frames, frame_n, meta, INTERFACE_OUTPUT, i)
