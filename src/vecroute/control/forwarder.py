"""The data-path side of a live router: rings -> batch -> graph -> rings.

A Forwarder is what one worker runs: it owns its packet sockets, its batch and its graph
(its own copy of the forwarding state). What the graph punts comes back as plain tuples
for the control plane, which may live in the same process (one worker) or in the parent
(several workers).
"""

from __future__ import annotations

import ipaddress
import time
from typing import NamedTuple

import numpy as np

from vecroute.fib.adjacency import ADJ_GLEAN
from vecroute.fib.fib import Fib
from vecroute.graph import counters as C
from vecroute.graph.dispatch import Graph
from vecroute.graph.node_ids import DONE_PUNT, ICMP4_ERROR, ICMP6_ERROR, IP4_LOOKUP, IP6_LOOKUP
from vecroute.graph.state import OPT_LIVE, DataPlaneState
from vecroute.packet.batch import (
    F_IP6,
    HEADROOM,
    M_ADJ,
    M_AUX,
    M_AUX2,
    M_ERR,
    M_FIB,
    M_FLAGS,
    M_L3,
    M_L4,
    M_LEN,
    M_NEXT,
    M_OFF,
    M_PROTO,
    M_RX,
    M_TX,
    SLOT,
    PacketBatch,
    reset_slot,
)
from vecroute.packet.headers import ICMP4_DEST_UNREACH, ICMP4_HOST_UNREACH, ICMP6_DEST_UNREACH

# A packet waiting for a neighbour: (rx interface, family, L3 bytes, FIB index, flags)
Pending = tuple[int, int, bytes, int, int]


class IcmpError(NamedTuple):
    """Re-inject into icmp4-error / icmp6-error instead of the lookup: the error node
    answers the packet's source (quote, source address, suppression, rate limit) and counts
    ``reason`` as the packet's drop, exactly as for an error raised inside the graph."""

    reason: int  # counter id (a drop)
    icmp4: tuple[int, int]  # (type, code) for an IPv4 packet
    icmp6: tuple[int, int]  # (type, code) for an IPv6 packet


ICMP6_ADDRESS_UNREACHABLE = 3  # RFC 4443 3.1
# address resolution failed: RFC 4861 7.2.2; IPv4 host unreachable, as Linux answers
ADDRESS_UNREACHABLE = IcmpError(
    C.C_NEIGHBOR_FAILED,
    (ICMP4_DEST_UNREACH, ICMP4_HOST_UNREACH),
    (ICMP6_DEST_UNREACH, ICMP6_ADDRESS_UNREACHABLE),
)


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
        st = state or fib.state()
        st.opts[OPT_LIVE] = 1
        self.graph = Graph(st, self.batch, firewall)
        self.inject: list[tuple[Pending, IcmpError | None]] = []

    def warm(self) -> None:
        """Compile (or load from the cache) the graph before the first packet arrives, so
        the first ping does not wait for the JIT."""
        b = self.batch
        b.n = 0
        b.nalloc[0] = 0
        self.graph.run(b, 0)
        for s in self.socks:
            s.recv_batch(b.buf, b.meta, b.ts, 0, 0, 0)
            s.send_batch(b.buf, b.meta, np.zeros(0, dtype=np.int32), 0)

    def refresh(self) -> None:
        """Swap in the FIB's current arrays (after a route or neighbour change)."""
        self.graph.swap_state(self.fib.state())

    def reinject(self, packets: list[Pending], error: IcmpError | None = None) -> None:
        """Queue packets that waited for a neighbour for the next batch: to be forwarded
        (``error`` None) or answered with ``error``."""
        self.inject.extend((p, error) for p in packets)

    def _load_injected(self) -> int:
        """Re-injected packets enter at a lookup: their route may have changed while they
        waited, which costs them a second lookup. Packets to answer enter the ICMP error
        node directly: they never reach a lookup or neighbor-request again, so they cannot
        be queued twice (their error may wait for its own next hop, and an error is never
        answered)."""
        b = self.batch
        n = 0
        while self.inject and n < b.vector_size:
            (rx, family, l3b, fib, flags), error = self.inject.pop(0)
            if len(l3b) > SLOT - HEADROOM - 16:
                continue
            reset_slot(b.meta, n, rx, len(l3b))
            o = n * SLOT + HEADROOM + 16
            b.buf[o : o + len(l3b)] = np.frombuffer(l3b, dtype=np.uint8)
            m = b.meta
            m[M_OFF, n] = o
            m[M_L3, n] = o
            m[M_FIB, n] = fib
            m[M_FLAGS, n] = flags
            if family == 4:
                m[M_NEXT, n] = IP4_LOOKUP
                m[M_PROTO, n] = l3b[9]
                m[M_L4, n] = o + (l3b[0] & 15) * 4
            else:
                m[M_NEXT, n] = IP6_LOOKUP
                m[M_PROTO, n] = l3b[6]
                m[M_L4, n] = o + 40
            if error is not None:
                typ, code = error.icmp4 if family == 4 else error.icmp6
                m[M_NEXT, n] = ICMP4_ERROR if family == 4 else ICMP6_ERROR
                m[M_ERR, n] = error.reason
                m[M_AUX, n] = (typ << 8) | code
                m[M_AUX2, n] = 0
            b.ts[n] = time.time_ns()
            n += 1
        return n

    def forward(self, now: int, send_direct=None) -> tuple[int, list[tuple]]:
        """One batch: returns (packets in, punted items). ``send_direct(ifx, frame)`` is used
        when this forwarder has no ring sockets (the parent re-injecting)."""
        b = self.batch
        n = self._load_injected()
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
        return n, self._punts()

    def _punts(self) -> list[tuple]:
        b = self.batch
        m = b.meta
        out: list[tuple] = []
        total = int(b.nalloc[0])
        for i in np.nonzero(m[M_NEXT, :total] == DONE_PUNT)[0]:
            i = int(i)
            reason = int(m[M_ERR, i])
            rx = int(m[M_RX, i])
            if reason == C.C_NEIGHBOR_QUEUED:
                out.append(("pending", *self._pending(i)))
            elif reason == C.C_ARP_PUNT:
                out.append(("arp", rx, b.frame(i)))
            elif reason == C.C_ND_PUNT:
                out.append(("nd", rx, b.frame(i)))
        return out

    def _pending(self, i: int) -> tuple[int, str, Pending]:
        b = self.batch
        m = b.meta
        key = self.fib.adjs.keys[int(m[M_ADJ, i])]
        l3 = int(m[M_L3, i])
        end = int(m[M_OFF, i] + m[M_LEN, i])
        l3b = b.buf[l3:end].tobytes()
        ip6 = bool(m[M_FLAGS, i] & F_IP6)
        if key.kind == ADJ_GLEAN:
            nh = ipaddress.IPv6Address(l3b[24:40]) if ip6 else ipaddress.IPv4Address(l3b[16:20])
        else:
            nh = ipaddress.ip_address(key.nh) if key.family == 4 else ipaddress.IPv6Address(key.nh)
        pkt = (int(m[M_RX, i]), 6 if ip6 else 4, l3b, int(m[M_FIB, i]), int(m[M_FLAGS, i]))
        return key.ifx, str(nh), pkt
