"""Bounded single-producer single-consumer rings between a worker and the control plane.

A worker never waits on the control plane and never hands it unbounded work: what the
graph punts (ARP, ND, packets for an unresolved next hop) is policed per reason and per
destination, then copied into a fixed ring of fixed records; a full ring drops with a
counter. The other way, the control plane injects packets (released after resolution,
ICMP errors to raise for them, frames to send as they are: ARP/ND answers, later what a
Linux mirror sends) into the worker's inject ring, which the worker empties at the start
of a batch. Each ring lives in anonymous shared memory (so a process-based worker could
use it unchanged) and has one writer per index: the producer moves ``head``, the
consumer ``tail``; a fence orders the record before the index that publishes it.

Records: an int64 header row and up to ``REC_BYTES`` of packet bytes.
"""

from __future__ import annotations

import mmap

import numpy as np
from numba import njit

from vecroute.fib.layout import A_FAMILY, A_IF, A_NH4, A_NH6, A_TYPE, ADJ_GLEAN
from vecroute.graph import counters as C
from vecroute.graph.flow_hash import mix64
from vecroute.graph.state import TB_BURST, TB_COLS, TB_CREDIT, TB_LAST, TB_RATE
from vecroute.graph.token_bucket import NANO, has_token
from vecroute.io.syscalls import fence
from vecroute.packet.batch import (
    F_INJ_L2,
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
    reset_slot,
)
from vecroute.packet.headers import rd32
from vecroute.packet.node_ids import (
    DONE_PUNT,
    ICMP4_ERROR,
    ICMP6_ERROR,
    INTERFACE_OUTPUT,
    IP4_LOOKUP,
    IP6_LOOKUP,
)

REC_BYTES = 2048
INJECT_MAX = SLOT - HEADROOM - 16  # the most an injected record may hold (2032 bytes)
# ring control words (int64 [RING_CTL]); head and tail on separate cache lines
R_HEAD = 0  # records published (producer)
R_DROPS = 1  # records refused because the ring was full (producer)
R_POLICED = 2  # records refused by the policer (producer)
R_TAIL = 8  # records consumed (consumer)
RING_CTL = 16

# punt record header (int64 [cap, PH_COLS])
PH_REASON = 0  # counter id: why it was punted (C_ARP_PUNT, C_ND_PUNT, C_NEIGHBOR_QUEUED)
PH_RX = 1
PH_LEN = 2  # bytes in the record: the frame (ARP, ND) or the L3 packet (pending)
PH_FIB = 3
PH_FLAGS = 4
PH_NH_IF = 5  # pending: the next hop's interface, family and address (two words for ip6)
PH_NH_FAMILY = 6
PH_NH0 = 7
PH_NH1 = 8
PH_COLS = 9

# inject record header (int64 [cap, IH_COLS])
INJ_LOOKUP = 0  # an L3 packet that waited for a neighbour: enters at the lookup again
INJ_ERROR = 1  # an L3 packet to answer with an ICMP error (IH_REASON, IH_AUX)
INJ_FRAME = 2  # an Ethernet frame to send as it is on IH_PORT
IH_KIND = 0
IH_RX = 1
IH_LEN = 2
IH_FIB = 3
IH_FLAGS = 4
IH_FAMILY = 5
IH_REASON = 6  # INJ_ERROR: the drop counter of the packet
IH_AUX = 7  # INJ_ERROR: icmp type << 8 | code
IH_PORT = 8  # INJ_FRAME: the interface it leaves by
IH_COLS = 9

# punt policer (int64 [POLICE_ROWS, TB_COLS]): one bucket per reason and port (a flood on
# one port cannot starve the ARP replies of another), then per-destination buckets hashed
# by (reason, interface, address); a collision only makes two keys share one
P_ARP = 0
P_ND = 1
P_PENDING = 2
P_HOST = 3  # linux-cp: frames for the port's Linux mirror (per port only: a BGP session
            # is one source sending fast, a per-source bucket would throttle it)
POLICE_PORTS = 64  # ports beyond share the last row
POLICE_REASONS = 4 * POLICE_PORTS
POLICE_KEYS = 1024
POLICE_ROWS = POLICE_REASONS + POLICE_KEYS
#: defaults (rate per second, burst): per reason, then per destination (Linux queues
#: unres_qlen = 101 packets per unresolved neighbour; VPP's punt policer works per reason)
PUNT_RATES = {"arp": (2000, 512), "nd": (2000, 512), "pending": (2000, 512),
              "host": (20000, 256)}  # (linux-cp sets its own: [linux_cp] punt_rate/burst)
PUNT_KEY_RATE = (100, 128)


def _shared(nbytes: int) -> mmap.mmap:
    return mmap.mmap(-1, max(nbytes, mmap.PAGESIZE), flags=mmap.MAP_SHARED)


class Ring:
    """One SPSC ring: ``ctl`` (int64 [RING_CTL]), ``hdr`` (int64 [cap, cols]), ``data``
    (uint8 [cap, REC_BYTES]), all views of one shared mapping."""

    def __init__(self, capacity: int, cols: int) -> None:
        if capacity < 1:
            raise ValueError(f"ring capacity must be >= 1, not {capacity}")
        self.capacity = capacity
        sizes = (RING_CTL * 8, capacity * cols * 8, capacity * REC_BYTES)
        self._mem = _shared(sum(sizes))
        self.ctl = np.frombuffer(self._mem, np.int64, RING_CTL, 0)
        self.hdr = np.frombuffer(self._mem, np.int64, capacity * cols, sizes[0]).reshape(
            capacity, cols
        )
        self.data = np.frombuffer(
            self._mem, np.uint8, capacity * REC_BYTES, sizes[0] + sizes[1]
        ).reshape(capacity, REC_BYTES)

    def __len__(self) -> int:
        return int(self.ctl[R_HEAD] - self.ctl[R_TAIL])

    # Python ends (the control plane): the numpy stores happen in program order, and x86
    # keeps stores in order, so the record is visible before the index that publishes it

    def push(self, header: tuple[int, ...], payload: bytes) -> bool:
        """Producer side from Python: False (counted in R_DROPS) when full or too long."""
        head = int(self.ctl[R_HEAD])
        if head - int(self.ctl[R_TAIL]) >= self.capacity or len(payload) > INJECT_MAX:
            self.ctl[R_DROPS] += 1
            return False
        k = head % self.capacity
        self.hdr[k, :] = 0
        self.hdr[k, : len(header)] = header
        self.data[k, : len(payload)] = np.frombuffer(payload, np.uint8)
        self.ctl[R_HEAD] = head + 1
        return True

    def pop(self, limit: int) -> list[tuple[np.ndarray, bytes]]:
        """Consumer side from Python: up to ``limit`` records as (header copy, bytes)."""
        tail = int(self.ctl[R_TAIL])
        n = min(int(self.ctl[R_HEAD]) - tail, limit)
        out = []
        for j in range(n):
            k = (tail + j) % self.capacity
            h = self.hdr[k].copy()
            out.append((h, self.data[k, : int(h[PH_LEN])].tobytes()))
        self.ctl[R_TAIL] = tail + n
        return out


def punt_policer(rates: dict[str, tuple[int, int]] | None = None,
                 key_rate: tuple[int, int] = PUNT_KEY_RATE) -> np.ndarray:
    """Full token buckets: one per reason (``rates``), then POLICE_KEYS per destination."""
    rates = {**PUNT_RATES, **(rates or {})}
    pol = np.zeros((POLICE_ROWS, TB_COLS), np.int64)
    for row, name in ((P_ARP, "arp"), (P_ND, "nd"), (P_PENDING, "pending"), (P_HOST, "host")):
        rows = slice(row * POLICE_PORTS, (row + 1) * POLICE_PORTS)
        pol[rows, TB_RATE], pol[rows, TB_BURST] = rates[name]
    pol[POLICE_REASONS:, TB_RATE], pol[POLICE_REASONS:, TB_BURST] = key_rate
    pol[:, TB_CREDIT] = pol[:, TB_BURST] * 1_000_000_000
    pol[:, TB_LAST] = -1
    return pol


# -- compiled ends (the worker) ---------------------------------------------------------------


@njit(cache=True, nogil=True)
def ring_slot(ctl, capacity) -> int:
    """The record a producer may fill, or -1 when the ring is full (counted)."""
    head = ctl[R_HEAD]
    if head - ctl[R_TAIL] >= capacity:
        ctl[R_DROPS] += 1
        return -1
    return head % capacity


@njit(cache=True, nogil=True)
def ring_publish(ctl) -> None:
    fence()
    ctl[R_HEAD] += 1


@njit(cache=True, nogil=True)
def _police(pol, row, rx, k0, k1, k2, now) -> bool:
    """Per reason and port, and per destination: both buckets must have a token, and
    only then is one taken from each (a refused punt costs no bucket anything)."""
    h = mix64(np.uint64(k0) ^ mix64(np.uint64(k1) ^ mix64(np.uint64(k2) ^ np.uint64(row))))
    key = POLICE_REASONS + np.int64(h & np.uint64(POLICE_KEYS - 1))
    reason = row * POLICE_PORTS + min(max(rx, 0), POLICE_PORTS - 1)
    if not (has_token(pol[key], now) and has_token(pol[reason], now)):
        return False
    pol[key, TB_CREDIT] -= NANO
    pol[reason, TB_CREDIT] -= NANO
    return True


@njit(cache=True, nogil=True)
def _police_port(pol, row, rx, now) -> bool:
    """Per reason and port only (host punts: a BGP session is one source sending fast,
    a per-source bucket would throttle it)."""
    reason = row * POLICE_PORTS + min(max(rx, 0), POLICE_PORTS - 1)
    if not has_token(pol[reason], now):
        return False
    pol[reason, TB_CREDIT] -= NANO
    return True


@njit(cache=True, nogil=True)
def punts_to_ring(buf, meta, nalloc, adj, counters, pol, ctl, hdr, data, now) -> int:
    """Copy what the graph punted (M_NEXT == DONE_PUNT) into the punt ring, policed;
    returns the records published. The next hop of a pending packet is read from the
    worker's own adjacency table, so the control plane never interprets an index of a
    table it may have replaced meanwhile."""
    cap = hdr.shape[0]
    total = nalloc[0]
    pushed = 0
    for i in range(total):
        if meta[M_NEXT, i] != DONE_PUNT:
            continue
        reason = meta[M_ERR, i]
        rx = np.int64(meta[M_RX, i])
        off = np.int64(meta[M_OFF, i])
        ln = np.int64(meta[M_LEN, i])
        nh_if = -1
        fam = 0
        nh0 = np.int64(0)
        nh1 = np.int64(0)
        if reason == C.C_NEIGHBOR_QUEUED:
            a = meta[M_ADJ, i]
            l3 = np.int64(meta[M_L3, i])
            ln = off + ln - l3
            off = l3
            ip6 = (meta[M_FLAGS, i] & F_IP6) != 0
            if a < 0 or a >= adj.shape[0] or ln < (40 if ip6 else 20):
                counters[C.C_PUNT_MALFORMED] += 1
                continue
            nh_if = np.int64(adj[a, A_IF])
            if adj[a, A_TYPE] == ADJ_GLEAN:  # the destination itself
                fam = 6 if ip6 else 4
                if ip6:
                    nh0 = (np.int64(rd32(buf, l3 + 24)) << 32) | np.int64(rd32(buf, l3 + 28))
                    nh1 = (np.int64(rd32(buf, l3 + 32)) << 32) | np.int64(rd32(buf, l3 + 36))
                else:
                    nh0 = np.int64(rd32(buf, l3 + 16))
            else:
                fam = np.int64(adj[a, A_FAMILY])
                if fam == 6:
                    w = adj[a, A_NH6:A_NH6 + 4]
                    nh0 = (np.int64(np.uint32(w[0])) << 32) | np.int64(np.uint32(w[1]))
                    nh1 = (np.int64(np.uint32(w[2])) << 32) | np.int64(np.uint32(w[3]))
                else:
                    nh0 = np.int64(np.uint32(adj[a, A_NH4]))
            row = P_PENDING
            k0, k1 = nh0, nh1
        elif reason == C.C_ARP_PUNT:
            row = P_ARP
            k0 = np.int64(rd32(buf, off + 28)) if ln >= 32 else 0  # sender IP
            k1 = np.int64(0)
        elif reason == C.C_HOST_PUNT:  # the whole frame, as the port received it
            row = P_HOST
            k0 = np.int64(0)
            k1 = np.int64(0)
        elif reason == C.C_ND_PUNT:
            row = P_ND
            k0 = (np.int64(rd32(buf, off + 22)) << 32) | np.int64(rd32(buf, off + 26)) \
                if ln >= 54 else 0  # IPv6 source
            k1 = (np.int64(rd32(buf, off + 30)) << 32) | np.int64(rd32(buf, off + 34)) \
                if ln >= 54 else 0
        else:
            counters[C.C_PUNT_MALFORMED] += 1  # a reason the control plane has no use for
            continue
        if ln > INJECT_MAX or ln < 0:  # it could never come back through the inject ring
            counters[C.C_PUNT_MALFORMED] += 1
            continue
        if row == P_HOST:
            if not _police_port(pol, row, rx, now):
                counters[C.C_PUNT_POLICED] += 1
                ctl[R_POLICED] += 1
                continue
        elif not _police(pol, row, rx, k0, k1, rx * 8 + (nh_if + 1), now):
            counters[C.C_PUNT_POLICED] += 1
            ctl[R_POLICED] += 1
            continue
        k = ring_slot(ctl, cap)
        if k < 0:
            counters[C.C_PUNT_QUEUE_FULL] += 1
            continue
        h = hdr[k]
        h[PH_REASON] = reason
        h[PH_RX] = rx
        h[PH_LEN] = ln
        h[PH_FIB] = meta[M_FIB, i]
        h[PH_FLAGS] = meta[M_FLAGS, i]
        h[PH_NH_IF] = nh_if
        h[PH_NH_FAMILY] = fam
        h[PH_NH0] = nh0
        h[PH_NH1] = nh1
        d = data[k]
        for j in range(ln):
            d[j] = buf[off + j]
        ring_publish(ctl)
        pushed += 1
    return pushed


@njit(cache=True, nogil=True)
def ring_to_batch(ctl, hdr, data, buf, meta, ts, start, max_packets, tsv) -> int:
    """Load injected records into slots start.. (at most max_packets); returns the slots
    filled. L3 packets sit behind HEADROOM + 16 bytes (room for any L2 header) and enter
    at a lookup or an ICMP error node; frames enter interface-output with their header
    as it is. A record that does not fit a slot is consumed and dropped."""
    cap = hdr.shape[0]
    n = 0
    while n < max_packets:
        tail = ctl[R_TAIL]
        if tail == ctl[R_HEAD]:
            break
        fence()
        k = tail % cap
        h = hdr[k]
        kind = h[IH_KIND]
        ln = h[IH_LEN]
        slot = start + n
        if ln < 1 or ln > INJECT_MAX:
            fence()
            ctl[R_TAIL] = tail + 1
            continue
        reset_slot(meta, slot, h[IH_RX], ln)
        o = slot * SLOT + HEADROOM + 16
        d = data[k]
        for j in range(ln):
            buf[o + j] = d[j]
        meta[M_OFF, slot] = o
        if kind == INJ_FRAME:
            meta[M_TX, slot] = h[IH_PORT]
            meta[M_NEXT, slot] = INTERFACE_OUTPUT  # Linux's (F_INJ_L2): fw-out first
            meta[M_FLAGS, slot] = h[IH_FLAGS] & F_INJ_L2
        else:
            meta[M_L3, slot] = o
            meta[M_FIB, slot] = h[IH_FIB]
            # F_INJ_L2 belongs to Linux's frames only: a packet that enters at a lookup
            # never skips classification as one, whoever wrote its record
            meta[M_FLAGS, slot] = h[IH_FLAGS] & ~F_INJ_L2
            v4 = h[IH_FAMILY] == 4
            if v4:
                meta[M_NEXT, slot] = IP4_LOOKUP
                meta[M_PROTO, slot] = buf[o + 9]
                meta[M_L4, slot] = o + (buf[o] & 15) * 4
            else:
                meta[M_NEXT, slot] = IP6_LOOKUP
                meta[M_PROTO, slot] = buf[o + 6]
                meta[M_L4, slot] = o + 40
            if kind == INJ_ERROR:
                meta[M_NEXT, slot] = ICMP4_ERROR if v4 else ICMP6_ERROR
                meta[M_ERR, slot] = h[IH_REASON]
                meta[M_AUX, slot] = h[IH_AUX]
                meta[M_AUX2, slot] = 0
        ts[slot] = tsv
        fence()
        ctl[R_TAIL] = tail + 1
        n += 1
    return n
