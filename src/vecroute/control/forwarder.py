"""A data path stepped from Python, one batch per call: rings -> batch -> graph -> rings.

The live router runs its workers' compiled loop (vecroute.io.worker); this Forwarder runs
the same pieces — the inject ring emptied into the batch, the graph, the punt ring filled
with the same policing — one batch at a time from Python, for ports that are not packet
sockets (the in-memory ports of the neighbour tests) and for tools that step a data path.
"""

from __future__ import annotations

import numpy as np

from vecroute.control.punts import IcmpError, Pending, decode_punts, inject_packets
from vecroute.fib.fib import Fib
from vecroute.graph.dataplane import fib_state
from vecroute.graph.dispatch import Graph
from vecroute.graph.state import OPT_LIVE, DataPlaneState
from vecroute.io.channel import IH_COLS, PH_COLS, Ring, punt_policer, punts_to_ring, ring_to_batch
from vecroute.packet.batch import M_TX, PacketBatch

RING = 1024


class Forwarder:
    def __init__(
        self,
        fib: Fib,
        sockets: list,
        vector_size: int,
        state: DataPlaneState | None = None,
        firewall=None,
    ) -> None:
        self.fib = fib
        self.socks = sockets
        self.batch = PacketBatch(vector_size)
        st = state or fib_state(fib)
        st.opts[OPT_LIVE] = 1
        self.graph = Graph(st, self.batch, firewall)
        self.inject = Ring(RING, IH_COLS)  # what the control plane sends back
        self.punt = Ring(RING, PH_COLS)
        self.policer = punt_policer()

    def refresh(self) -> None:
        """Swap in the FIB's current arrays (after a route or neighbour change)."""
        self.graph.swap_state(fib_state(self.fib))

    def reinject(self, packets: list[Pending], error: IcmpError | None = None) -> None:
        """Queue packets that waited for a neighbour for the next batch: to be forwarded
        (``error`` None) or answered with ``error``."""
        inject_packets(self.inject, packets, error)

    def forward(self, now: int, send_direct=None) -> tuple[int, list[tuple]]:
        """One batch: returns (packets in, punted items). ``send_direct(ifx, frame)`` is used
        when this forwarder has no ring sockets (the parent re-injecting)."""
        b = self.batch
        inj = self.inject
        n = ring_to_batch(inj.ctl, inj.hdr, inj.data, b.buf, b.meta, b.ts, 0, b.vector_size, 0)
        for ifx, s in enumerate(self.socks):
            if n >= b.vector_size:
                break
            n += s.recv_batch(b.buf, b.meta, b.ts, n, b.vector_size - n, ifx)
        if n == 0 and not self.graph.reass_due(now):  # idle: still expire reassemblies
            return 0, []
        b.n = n
        b.nalloc[0] = n
        tx = self.graph.run(b, now)
        if tx.size:
            ports = b.meta[M_TX, tx]
            for p in np.unique(ports):
                idx = tx[ports == p]
                if self.socks:
                    self.socks[int(p)].send_batch(b.buf, b.meta, idx, idx.size)
                elif send_direct is not None:
                    for i in idx:
                        send_direct(int(p), b.frame(int(i)))
        st = self.graph.state
        p = self.punt
        punts_to_ring(b.buf, b.meta, b.nalloc, st.adj, st.counters, self.policer, p.ctl, p.hdr,
                      p.data, now)
        return n, decode_punts(0, p.pop(p.capacity))
