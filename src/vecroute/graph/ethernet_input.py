"""ethernet-input: classify frames by ethertype after the destination MAC check."""

from numba import njit

from vecroute.fib.layout import I_FIB4, I_FIB6
from vecroute.graph import counters as C
from vecroute.graph.frames import drop, enqueue
from vecroute.graph.registry import NodeDecl
from vecroute.graph.state import IFS_RX_BYTES, IFS_RX_PKTS
from vecroute.packet.batch import (
    F_GSO,
    F_IP6,
    F_L2_MCAST,
    M_FIB,
    M_FLAGS,
    M_L3,
    M_LEN,
    M_OFF,
    M_RX,
    MAX_FRAME,
)
from vecroute.packet.headers import ETH_HLEN, ETH_P_ARP, ETH_P_IP, ETH_P_IPV6, rd16
from vecroute.packet.node_ids import ARP_INPUT, IP4_INPUT, IP6_INPUT

NODES = (
    NodeDecl(
        "ethernet-input",
        next=("arp-input", "ip4-input", "ip6-input", "error-drop"),
        counters=("eth-too-short", "frame-too-long", "not-for-us", "unknown-ethertype"),
    ),
)


@njit(cache=True, _nrt=True)
def ethernet_input(work, k, buf, meta, frames, frame_n, dp) -> None:
    if_mac = dp.if_mac
    for j in range(k):
        i = work[j]
        ln = meta[M_LEN, i]
        rx = meta[M_RX, i]
        dp.if_stats[rx, IFS_RX_PKTS] += 1
        dp.if_stats[rx, IFS_RX_BYTES] += ln
        if ln > MAX_FRAME and not meta[M_FLAGS, i] & F_GSO:  # a super-packet kept whole
            drop(frames, frame_n, meta, i, C.C_FRAME_TOO_LONG)
            continue
        if ln < ETH_HLEN:
            drop(frames, frame_n, meta, i, C.C_ETH_TOO_SHORT)
            continue
        o = meta[M_OFF, i]
        if buf[o] & 1:
            meta[M_FLAGS, i] |= F_L2_MCAST
        else:
            mine = True
            for b in range(6):
                if buf[o + b] != if_mac[rx, b]:
                    mine = False
                    break
            if not mine:
                drop(frames, frame_n, meta, i, C.C_NOT_FOR_US)
                continue
        et = rd16(buf, o + 12)
        meta[M_L3, i] = o + ETH_HLEN
        if et == ETH_P_IP:
            meta[M_FIB, i] = dp.ifc[rx, I_FIB4]
            enqueue(frames, frame_n, meta, IP4_INPUT, i)
        elif et == ETH_P_IPV6:
            meta[M_FIB, i] = dp.ifc[rx, I_FIB6]
            meta[M_FLAGS, i] |= F_IP6
            enqueue(frames, frame_n, meta, IP6_INPUT, i)
        elif et == ETH_P_ARP:
            meta[M_FIB, i] = dp.ifc[rx, I_FIB4]
            enqueue(frames, frame_n, meta, ARP_INPUT, i)
        else:
            drop(frames, frame_n, meta, i, C.C_UNKNOWN_ETHERTYPE)


