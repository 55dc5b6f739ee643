"""gso-segment: a GSO super-packet that must become ordinary packets in software.

Super-packets (TCP, UDP GSO; up to 64 KiB, kept whole in a jumbo slot) normally traverse
the graph once and leave whole with their virtio-net header: the kernel segments them only
if it must. Three paths need ordinary packets: IPv4 fragmentation (DF clear and segments
larger than the egress MTU), SRv6 (encapsulation, local SIDs) and host punts to a Linux
mirror (a punt record holds 2032 bytes). Those send the packet
here with the node to continue at in M_AUX (``divert``). Each segment (headers copied;
lengths, ids, sequence numbers and checksums rewritten, as the kernel's tcp_gso_segment /
__udp_gso_segment: packet/gso.py) takes a spare slot and continues there with the
super-packet's metadata; the super-packet itself ends here (``gso-segmented``).
"""

import numpy as np
from numba import njit

from vecroute.graph import counters as C
from vecroute.graph.frames import drop, enqueue
from vecroute.graph.registry import NodeDecl
from vecroute.packet.batch import (
    F_CSUM_PARTIAL,
    F_GSO,
    M_ADJ,
    M_AUX,
    M_ERR,
    M_FIB,
    M_FLAGS,
    M_GSO,
    M_HASH,
    M_L3,
    M_L4,
    M_LEN,
    M_NEXT,
    M_OFF,
    M_ORIG,
    M_PROTO,
    M_RX,
    M_SEQ,
    M_TRACE,
    M_TX,
)
from vecroute.packet.gso import GSO_WAIT, VNET_F_NEEDS_CSUM, VNET_GSO_UDP_L4, segment
from vecroute.packet.node_ids import DONE_DROP, GSO_SEGMENT

NODES = (
    NodeDecl(
        "gso-segment",
        next=("srv6-localsid", "srv6-encap", "ip4-rewrite", "error-drop", "punt"),
        counters=("gso-segmented", "gso-bad", "gso-no-buffer"),
    ),
)


@njit(cache=True, inline="always")
def divert(frames, frame_n, meta, i, then) -> None:
    """Send super-packet i to be cut, its segments to continue at node ``then``."""
    meta[M_AUX, i] = then
    enqueue(frames, frame_n, meta, GSO_SEGMENT, i)


@njit(cache=True, inline="always")
def segment_l3_len(buf, meta, i) -> int:
    """The IP length of the segments super-packet i would be cut into (the MTU check)."""
    gso = meta[M_GSO, i]
    l4 = meta[M_L4, i]
    thl = 8 if (gso & 0xFF) == VNET_GSO_UDP_L4 else (np.int64(buf[l4 + 12]) >> 4) * 4
    return np.int64(l4 - meta[M_L3, i]) + thl + (gso >> 8)


@njit(cache=True, _nrt=True)
def gso_segment(work, k, buf, meta, frames, frame_n, dp, nalloc) -> None:
    cap = meta.shape[1]
    ts = np.zeros(cap, np.int64)  # segment() stamps its slots; the graph keeps no times
    for j in range(k):
        i = work[j]
        off = np.int64(meta[M_OFF, i])
        l3 = np.int64(meta[M_L3, i])
        l4 = np.int64(meta[M_L4, i])
        gso = meta[M_GSO, i]
        first = nalloc[0]
        if l4 <= l3 or first >= cap:
            drop(frames, frame_n, meta, i, C.C_GSO_BAD if l4 <= l3 else C.C_GSO_NO_BUFFER)
            continue
        n, _ = segment(buf, off, False, 0, 0, np.int64(meta[M_LEN, i]), gso & 0xFF, gso >> 8,
                       VNET_F_NEEDS_CSUM, l4 - off, buf, meta, ts, first, cap - first,
                       cap - first, meta[M_RX, i], 0)
        if n <= 0:
            drop(frames, frame_n, meta, i, C.C_GSO_NO_BUFFER if n == GSO_WAIT else C.C_GSO_BAD)
            continue
        nalloc[0] = first + n
        then = meta[M_AUX, i]
        flags = meta[M_FLAGS, i] & ~(F_GSO | F_CSUM_PARTIAL)
        for s in range(first, first + n):
            o = np.int64(meta[M_OFF, s])
            meta[M_L3, s] = o + (l3 - off)
            meta[M_L4, s] = o + (l4 - off)
            meta[M_PROTO, s] = meta[M_PROTO, i]
            meta[M_FIB, s] = meta[M_FIB, i]
            meta[M_ADJ, s] = meta[M_ADJ, i]
            meta[M_TX, s] = meta[M_TX, i]
            meta[M_HASH, s] = meta[M_HASH, i]
            meta[M_FLAGS, s] = flags
            meta[M_ORIG, s] = meta[M_ORIG, i]
            meta[M_TRACE, s] = meta[M_TRACE, i]
            meta[M_ERR, s] = meta[M_ERR, i]  # a host punt's reason (frames.host_punt)
            meta[M_SEQ, s] = s - first
            enqueue(frames, frame_n, meta, then, s)
        dp.counters[C.C_GSO_SEGMENTED] += 1
        meta[M_NEXT, i] = DONE_DROP  # it lives on as its segments: no drop counted
        meta[M_ERR, i] = -1  # (nor captured as one: a host punt's reason went on with them)
