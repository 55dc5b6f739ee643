"""Per-node frames: how a node hands packets to the next node without moving them."""

import numpy as np
from numba import njit

from vecroute.graph.counters import C_HOST_PUNT
from vecroute.graph.state import IFS_PUNTS
from vecroute.packet.batch import F_GSO, M_AUX, M_AUX2, M_ERR, M_FLAGS, M_NEXT, M_RX
from vecroute.packet.node_ids import ERROR_DROP, GSO_SEGMENT, ICMP4_ERROR, ICMP6_ERROR, PUNT


@njit(cache=True, inline="always")
def enqueue(frames: np.ndarray, frame_n: np.ndarray, meta: np.ndarray, node: int, i: int) -> None:
    k = frame_n[node]
    frames[node, k] = i
    frame_n[node] = k + 1
    meta[M_NEXT, i] = node


@njit(cache=True, inline="always")
def drop(frames: np.ndarray, frame_n: np.ndarray, meta: np.ndarray, i: int, reason: int) -> None:
    """Send packet i to error-drop, which counts ``reason`` (a counter id)."""
    meta[M_ERR, i] = reason
    enqueue(frames, frame_n, meta, ERROR_DROP, i)


@njit(cache=True, inline="always")
def icmp_error(frames, frame_n, meta, i, ip6, reason, icmp_type, icmp_code, param) -> None:
    """Send packet i to the ICMP error node: it counts ``reason`` and answers the source."""
    meta[M_ERR, i] = reason
    meta[M_AUX, i] = (icmp_type << 8) | icmp_code
    meta[M_AUX2, i] = param
    enqueue(frames, frame_n, meta, ICMP6_ERROR if ip6 else ICMP4_ERROR, i)


@njit(cache=True, inline="always")
def punt(frames, frame_n, meta, dp, i, reason) -> None:
    """Hand packet i to the control plane through the punt ring, ``reason`` a counter id
    (the punt node counts it)."""
    meta[M_ERR, i] = reason
    dp.if_stats[meta[M_RX, i], IFS_PUNTS] += 1
    enqueue(frames, frame_n, meta, PUNT, i)


@njit(cache=True, inline="always")
def host_punt(frames, frame_n, meta, dp, i) -> None:
    """Hand packet i, its whole frame, to its port's Linux mirror (linux-cp). A GRO
    super-packet (a fast TCP sender to the router: a BGP peer sending a full table) is
    cut first, its segments go on to the punt node (a punt record holds 2032 bytes)."""
    if meta[M_FLAGS, i] & F_GSO:
        meta[M_ERR, i] = C_HOST_PUNT  # the segments inherit it
        meta[M_AUX, i] = PUNT
        dp.if_stats[meta[M_RX, i], IFS_PUNTS] += 1
        enqueue(frames, frame_n, meta, GSO_SEGMENT, i)
        return
    punt(frames, frame_n, meta, dp, i, C_HOST_PUNT)
