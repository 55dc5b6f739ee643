"""The graph dispatcher: runs every node with a non-empty frame until all frames drain.

First the fused common path (graph/fast_path.py) forwards the plain packets of the batch
in one pass; what it leaves walks the nodes.

One compiled call per batch. Each node call is timed with the cycle counter and counted
(calls, packets, clocks), like VPP's ``show runtime``.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from vecroute.firewall.keys import K_COLS
from vecroute.firewall.layout import DIR_IN, DIR_OUT, FW
from vecroute.graph.arp_input import arp_input
from vecroute.graph.call import GraphCall, new_graph_call
from vecroute.graph.cycles import readcyclecounter
from vecroute.graph.ethernet_input import ethernet_input
from vecroute.graph.fast_path import fused_pass
from vecroute.graph.firewall import fw_node
from vecroute.graph.gso_segment import gso_segment
from vecroute.graph.icmp_error import icmp4_error, icmp6_error
from vecroute.graph.ip4_frag import ip4_frag
from vecroute.graph.ip4_input import ip4_input
from vecroute.graph.ip6_input import ip6_input
from vecroute.graph.ip_reass import ip4_reass, ip6_reass, reass_due, reass_expire
from vecroute.graph.local import ip4_local, ip6_local
from vecroute.graph.lookup import ip4_lookup, ip6_lookup
from vecroute.graph.neighbor_request import neighbor_request
from vecroute.graph.output import error_drop, interface_output, punt_node
from vecroute.graph.rewrite import ip4_rewrite, ip6_rewrite
from vecroute.graph.srv6_encap import srv6_encap
from vecroute.graph.srv6_localsid import srv6_localsid
from vecroute.graph.state import (
    DP,
    FW_OUT_REPEATS,
    FW_RUN_IN,
    FW_RUN_OUT,
    FW_TABLES,
    NS_CALLS,
    NS_CLOCKS,
    NS_PACKETS,
    OPT_FW,
    OPT_NO_FUSED,
    RG_USED,
    DataPlaneState,
)
from vecroute.graph.tcp_reset import tcp_reset
from vecroute.graph.trace import (
    TR_DIRTY,
    TR_LEFT,
    TR_NODE,
    trace_begin,
    trace_record,
    trace_record_fw,
    trace_select,
)
from vecroute.packet import node_ids as N
from vecroute.packet.batch import F_INJ_L2, M_FLAGS, M_NEXT, PacketBatch


@njit(cache=True)
def run_graph(n, now, g) -> None:
    """One batch through the graph: ``g`` is a GraphCall (graph/call.py), the batch's and
    the graph's arrays as one argument; with a firewall or without (its nodes are compiled
    away), one specialisation each."""
    run_nodes(n, now, g.meta, g.buf, g.nalloc, g.frames, g.frame_n, g.work, g.txl, g.txn,
              g.dp, g.fw, g.fwk, g.fwv, g.sc, g.fl, g.acc)


@njit(cache=True, _nrt=False)
def run_nodes(n, now, meta, buf, nalloc, frames, frame_n, work, txl, txn, dp, fw, fwk, fwv,
              sc, fl, acc):
    """Every node with packets, until all frames drain (run_graph's body; a compiled
    worker loop calls it directly). ``sc, fl, acc``: the fused pass's scratch
    (fast_path.fused_scratch of at least n), which a loop allocates once.

    Compiled without reference counting, like the fused pass: a compiled function that
    counts references takes one on every array it is handed, on entry, and gives it back
    on return (45 a batch here without a firewall, 69 with one: gdb on NRT_incref). So
    nothing in it may allocate; the nodes it calls count their own, and are called only
    when they have packets."""
    node_stats = dp.node_stats
    trace = dp.trace_ctl
    # below, a helper is called only when it has work: each call of a compiled function
    # counts a reference to every array it is handed (dp alone is 35), every batch
    if trace[TR_DIRTY] != 0:
        trace_begin(meta, dp)
    frame_n[:] = 0
    txn[0] = 0
    fw_out = fw is not None and (dp.opts[OPT_FW] & FW_RUN_OUT) != 0
    for i in range(n):  # usually ethernet-input; re-injected packets enter at a lookup
        first = meta[M_NEXT, i]
        if first < 0 or first >= N.N_NODES:  # already disposed of (a batch run twice)
            continue
        if fw_out and first == N.INTERFACE_OUTPUT and meta[M_FLAGS, i] & F_INJ_L2:
            first = N.FW_OUT  # a frame from Linux: fw-out first
        frames[first, frame_n[first]] = i
        frame_n[first] += 1
    k = frame_n[N.ETHERNET_INPUT]
    if k > 0 and dp.opts[OPT_NO_FUSED] == 0 and trace[TR_LEFT] <= 0:  # the plain packets
        fused_pass(buf, meta, frames, frame_n, txl, txn, dp, fw, fwk, fwv, now, sc, fl, acc)
    if dp.reass_glob[RG_USED] != 0:
        reass_expire(buf, meta, nalloc, frames, frame_n, dp, now)  # bounded: the oldest few
    busy = True
    while busy:
        busy = False
        for node in range(N.N_NODES):
            k = frame_n[node]
            if k == 0:
                continue
            busy = True
            for j in range(k):
                work[j] = frames[node, j]
            frame_n[node] = 0
            if trace[TR_LEFT] > 0 and node == trace[TR_NODE]:
                trace_select(work, k, buf, meta, dp, node, now)
            t0 = readcyclecounter()
            if node == N.ETHERNET_INPUT:
                ethernet_input(work, k, buf, meta, frames, frame_n, dp)
            elif node == N.ARP_INPUT:
                arp_input(work, k, buf, meta, frames, frame_n, dp, nalloc)
            elif node == N.IP4_INPUT:
                ip4_input(work, k, buf, meta, frames, frame_n, dp)
            elif node == N.IP6_INPUT:
                ip6_input(work, k, buf, meta, frames, frame_n, dp)
            elif node == N.FW_IN:
                fw_node(work, k, buf, meta, frames, frame_n, dp, fw, fwk, fwv, now, DIR_IN)
            elif node == N.IP4_LOCAL:
                ip4_local(work, k, buf, meta, frames, frame_n, dp)
            elif node == N.IP6_LOCAL:
                ip6_local(work, k, buf, meta, frames, frame_n, dp)
            elif node == N.IP4_REASS:
                ip4_reass(work, k, buf, meta, frames, frame_n, dp, nalloc, now)
            elif node == N.IP6_REASS:
                ip6_reass(work, k, buf, meta, frames, frame_n, dp, nalloc, now)
            elif node == N.IP4_LOOKUP:
                ip4_lookup(work, k, buf, meta, frames, frame_n, dp)
            elif node == N.IP6_LOOKUP:
                ip6_lookup(work, k, buf, meta, frames, frame_n, dp)
            elif node == N.GSO_SEGMENT:
                gso_segment(work, k, buf, meta, frames, frame_n, dp, nalloc)
            elif node == N.SRV6_LOCALSID:
                srv6_localsid(work, k, buf, meta, frames, frame_n, dp)
            elif node == N.SRV6_ENCAP:
                srv6_encap(work, k, buf, meta, frames, frame_n, dp)
            elif node == N.ICMP4_ERROR:
                icmp4_error(work, k, buf, meta, frames, frame_n, dp, now)
            elif node == N.ICMP6_ERROR:
                icmp6_error(work, k, buf, meta, frames, frame_n, dp, now)
            elif node == N.TCP_RESET:
                tcp_reset(work, k, buf, meta, frames, frame_n, dp, now)
            elif node == N.FW_OUT:  # frames from Linux that it does not classify leave work
                k = fw_node(work, k, buf, meta, frames, frame_n, dp, fw, fwk, fwv, now, DIR_OUT)
            elif node == N.IP4_REWRITE:
                ip4_rewrite(work, k, buf, meta, frames, frame_n, dp, nalloc, now)
            elif node == N.IP6_REWRITE:
                ip6_rewrite(work, k, buf, meta, frames, frame_n, dp, nalloc, now)
            elif node == N.IP4_FRAG:
                ip4_frag(work, k, buf, meta, frames, frame_n, dp, nalloc)
            elif node == N.NEIGHBOR_REQUEST:
                neighbor_request(work, k, buf, meta, frames, frame_n, dp, nalloc, now)
            elif node == N.INTERFACE_OUTPUT:
                interface_output(work, k, meta, dp, txl, txn)
            elif node == N.ERROR_DROP:
                error_drop(work, k, meta, dp)
            else:
                punt_node(work, k, meta, dp)
            t1 = readcyclecounter()
            node_stats[node, NS_CALLS] += 1
            node_stats[node, NS_PACKETS] += k
            node_stats[node, NS_CLOCKS] += np.int64(t1 - t0)
            if trace[TR_DIRTY] != 0:
                if node == N.FW_IN or node == N.FW_OUT:
                    trace_record_fw(work, k, buf, meta, dp, node, now, fw, fwv)
                else:
                    trace_record(work, k, buf, meta, dp, node, now)


class Graph:
    """Runs batches through the node graph against a swappable forwarding state and, when
    given one, a firewall (whose arrays are re-read whenever its generation changes)."""

    def __init__(self, state: DataPlaneState, batch: PacketBatch, firewall=None) -> None:
        self.state = state
        cap = batch.capacity
        self.frames = np.zeros((N.N_NODES, cap), dtype=np.int32)
        self.frame_n = np.zeros(N.N_NODES, dtype=np.int32)
        self.work = np.zeros(cap, dtype=np.int32)
        self.txl = np.zeros(cap, dtype=np.int32)
        self.txn = np.zeros(1, dtype=np.int32)
        self.firewall = None
        self._fw_args: tuple = ()
        self._fw_gen = -1
        self._fw_scratch = (np.zeros((cap, K_COLS), np.int64), np.zeros((3, cap), np.int32))
        self._calls: dict = {}  # batch -> (its meta, buf, nalloc, GraphCall, entry point)
        self._entries: dict = {}  # GraphCall type -> run_graph's compiled entry point
        self.attach_firewall(firewall)

    def _unbind(self) -> None:
        """The arrays changed: each batch builds its GraphCall again."""
        self._calls.clear()

    def _bound(self, batch: PacketBatch) -> tuple:
        """(meta, buf, nalloc, GraphCall, entry point) of ``batch``: built again when the
        batch's arrays or the graph's changed (a call on arrays it was not built from
        would index frames with another batch's metadata). The entry point is called
        directly: the dispatcher's own type resolution costs ~1 us a call."""
        bound = self._calls.get(batch)
        if (bound is not None and bound[0] is batch.meta and bound[1] is batch.buf
                and bound[2] is batch.nalloc):
            return bound
        if batch.capacity > self.work.shape[0]:  # its slots would index past the frames
            raise ValueError(f"a batch of {batch.capacity} slots for a graph built for "
                             f"{self.work.shape[0]}")
        frames, frame_n, work, txl, txn, dp, fw, fwk, fwv = self.loop_args()
        call = new_graph_call(batch.buf, batch.meta, batch.nalloc, frames, frame_n, work, txl,
                              txn, dp, fw, fwk, fwv)
        ty = call._numba_type_
        entry = self._entries.get(ty)
        if entry is None:  # compile() takes numba's lock: ~30 us
            entry = self._entries[ty] = run_graph.compile((types.int64, types.int64, ty))
        if len(self._calls) >= 4:  # a few batches in turn (double buffering), not every one
            self._calls.clear()
        bound = self._calls[batch] = (batch.meta, batch.buf, batch.nalloc, call, entry)
        return bound

    def graph_call(self, batch: PacketBatch) -> GraphCall:
        """What run_graph is handed for ``batch`` now (tools that time the call itself);
        stale, and unsafe to hand over, after any change that rebuilds it."""
        if self.firewall is not None:
            self.sync_firewall()
        return self._bound(batch)[3]

    def attach_firewall(self, firewall, directions: int = FW_RUN_IN | FW_RUN_OUT) -> None:
        """Run ``firewall`` (a :class:`vecroute.firewall.Firewall`) at input and output from
        the next batch on; ``None`` removes it."""
        self.firewall = firewall
        self._fw_gen = -1
        self._fw_args = ()
        self.state.opts[OPT_FW] = directions if firewall is not None else 0
        self._unbind()

    def swap_state(self, state: DataPlaneState) -> None:
        """Install new tables between batches; this graph's runtime (counters, rate
        limiters, partial datagrams) carries over (DataPlaneState.with_runtime)."""
        self.state = state.with_runtime(self.state)
        self._unbind()

    def reass_due(self, now_ns: int) -> bool:
        """A reassembly context has timed out: an idle caller should run an empty batch
        (the timer runs once per batch) so its Time Exceeded is not late."""
        st = self.state
        return reass_due(st.reass_ctl, st.reass_glob, now_ns)

    def sync_firewall(self) -> None:
        """Between batches: let the firewall grow its state table and re-read its arrays
        when they changed (new rules, tables, a grown state table)."""
        fw = self.firewall
        if fw is None:
            return
        fw.maintain()
        if fw.generation != self._fw_gen:
            self._fw_gen = fw.generation
            self._fw_args = (*fw.args(), *self._fw_scratch)
            self._unbind()
            trivial = fw.compiled.trivial_directions()  # bit 1 << DIR_IN / DIR_OUT
            repeats = FW_OUT_REPEATS if fw.compiled.out_repeats_in() else 0
            tables = FW_TABLES if fw.compiled.tables_only() else 0
            opts = self.state.opts
            opts[OPT_FW] = ((opts[OPT_FW] & (FW_RUN_IN | FW_RUN_OUT)) | (trivial << 2) | repeats
                            | tables)

    def loop_args(self) -> tuple:
        """(frames, frame_n, work, txl, txn, DP, FW or None, keys, verdicts): the graph as
        a compiled multi-batch loop takes it (call after sync_firewall)."""
        dp = DP(*self.state.args())
        if self.firewall is None:
            return (self.frames, self.frame_n, self.work, self.txl, self.txn, dp, None, None,
                    None)
        n = len(FW._fields)
        return (self.frames, self.frame_n, self.work, self.txl, self.txn, dp,
                FW(*self._fw_args[:n]), *self._fw_scratch)

    def run(self, batch: PacketBatch, now_ns: int) -> np.ndarray:
        """Process the batch; returns the indices of packets to transmit, in order."""
        if self.firewall is not None:
            self.sync_firewall()
        n = batch.n
        if not 0 <= n <= batch.capacity:
            raise ValueError(f"a batch of {n} packets in {batch.capacity} slots")
        bound = self._bound(batch)
        bound[4](n, now_ns, bound[3])
        return self.txl[: self.txn[0]]
