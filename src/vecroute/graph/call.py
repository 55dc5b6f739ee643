"""A batch's call into the compiled graph as one object (a numba structref).

A compiled function unboxes every array argument on every call: about 100 ns each (a
MemInfo is allocated for it on entry and freed on return). The graph takes ~50 arrays
without a firewall and ~75 with one, 5-9 us a batch, more than the forwarding of a
hundred packets. A structref crosses the boundary as one pointer: its arrays were unboxed
once, when :func:`new_graph_call` built it, and stay referenced by it until it is
dropped. ``Graph`` builds one per batch object and rebuilds it whenever the arrays it
holds change (a state swap, a firewall generation).
"""

from __future__ import annotations

from numba import njit, types
from numba.experimental import structref

from vecroute.graph.fast_path import fused_scratch

GRAPH_CALL_FIELDS = (
    "buf", "meta", "nalloc",  # the batch
    "frames", "frame_n", "work", "txl", "txn",  # the graph's frames and transmit list
    "dp", "fw", "fwk", "fwv",  # the DP tuple; the FW tuple and its scratch, or three Nones
    "sc", "fl", "acc",  # the fused pass's scratch (fast_path.fused_scratch)
)


@structref.register
class GraphCallType(types.StructRef):
    """The numba type of a :class:`GraphCall` (one per combination of field types)."""

    def preprocess_fields(self, fields):  # type: ignore[no-untyped-def]
        return tuple((name, types.unliteral(t)) for name, t in fields)


class GraphCall(structref.StructRefProxy):
    """What ``run_graph`` is handed besides the packet count and the time."""


structref.define_proxy(GraphCall, GraphCallType, GRAPH_CALL_FIELDS)


@njit(cache=True)
def new_graph_call(buf, meta, nalloc, frames, frame_n, work, txl, txn, dp, fw, fwk, fwv):
    """A GraphCall over these arrays, with the fused pass's scratch for a full batch."""
    sc, fl, acc = fused_scratch(meta.shape[1])
    return GraphCall(buf, meta, nalloc, frames, frame_n, work, txl, txn, dp, fw, fwk, fwv,
                     sc, fl, acc)
