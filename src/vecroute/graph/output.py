"""interface-output, error-drop and punt: where every packet's journey ends.

interface-output appends to the batch's transmit list (the I/O layer writes it out);
error-drop
counts the reason once and the receiving interface's drops (and, for an answer the router
built, that it never left); punt leaves the packet in place for the control plane.
"""

from numba import njit

from vecroute.graph import counters as C
from vecroute.graph.registry import NodeDecl
from vecroute.graph.state import IFS_DROPS, IFS_TX_BYTES, IFS_TX_PKTS
from vecroute.packet.batch import (
    F_ANSWER,
    F_REDIRECT,
    M_ERR,
    M_FLAGS,
    M_LEN,
    M_NEXT,
    M_RX,
    M_TX,
)
from vecroute.packet.node_ids import DONE_DROP, DONE_PUNT, DONE_TX

NODES = (
    NodeDecl(
        "interface-output",
    ),
    NodeDecl(
        "error-drop",
        counters=("answer-dropped",),
    ),
    NodeDecl(
        "punt",
        counters=("punt",),
        raised_by=(
            ("punt-policed", "vecroute.io.channel"),
            ("punt-queue-full", "vecroute.io.channel"),
            ("punt-malformed", "vecroute.io.channel"),
        ),
    ),
)


@njit(cache=True, _nrt=True)
def interface_output(work, k, meta, dp, txl, txn) -> None:
    n = txn[0]
    for j in range(k):
        i = work[j]
        tx = meta[M_TX, i]
        dp.if_stats[tx, IFS_TX_PKTS] += 1
        dp.if_stats[tx, IFS_TX_BYTES] += meta[M_LEN, i]
        meta[M_NEXT, i] = DONE_TX
        txl[n] = i
        n += 1
    txn[0] = n


@njit(cache=True, _nrt=True)
def error_drop(work, k, meta, dp) -> None:
    for j in range(k):
        i = work[j]
        e = meta[M_ERR, i]
        if e >= 0:
            dp.counters[e] += 1
            dp.if_stats[meta[M_RX, i], IFS_DROPS] += 1
            if meta[M_FLAGS, i] & (F_ANSWER | F_REDIRECT):
                dp.counters[C.C_ANSWER_DROPPED] += 1
        meta[M_NEXT, i] = DONE_DROP


@njit(cache=True, _nrt=True)
def punt_node(work, k, meta, dp) -> None:
    for j in range(k):
        i = work[j]
        e = meta[M_ERR, i]
        if e >= 0:
            dp.counters[e] += 1  # why it was punted (arp-punt, nd-punt, neighbor-queued)
        meta[M_NEXT, i] = DONE_PUNT
    dp.counters[C.C_PUNT] += k
