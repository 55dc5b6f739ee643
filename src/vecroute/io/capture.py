"""Packet capture at a port (VPP's ``pcap trace``): the worker's side.

The control plane sets a worker's capture words (``cap_cfg``): which directions (frames
received on a port, frames sent on it, packets error-drop discarded), which port (or any),
how many bytes of each and how many records in all. The forwarding loop copies matching
frames into a bounded capture ring (io/channel.Ring: fixed records, a full ring counts
``CP_LOST`` and drops the copy, never waits); the control plane drains it into a pcapng
file (control/capture.py). With no capture running, the loop checks one word per batch.

Received frames are copied before the graph (as they arrived), sent ones after it (as
they leave, rewritten), drops after it with their reason (the packet as error-drop saw
it: for a packet dropped after its L2 header was rewritten, the rewritten bytes).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from vecroute.io.channel import REC_BYTES, ring_publish, ring_slot
from vecroute.packet.batch import M_ERR, M_LEN, M_NEXT, M_OFF, M_RX, M_TX
from vecroute.packet.intrinsics import memcpy
from vecroute.packet.node_ids import DONE_DROP

CAPTURE_RING = 4096  # records per worker (8 MiB of shared memory, mapped when touched)

# cap_cfg int64 [CP_COLS]
CP_MODE = 0  # CAP_RX | CAP_TX | CAP_DROP bits, 0 = off
CP_IF = 1  # the port, -1 = any
CP_SNAP = 2  # bytes kept per frame (<= REC_BYTES)
CP_LEFT = 3  # records this worker may still write
CP_TAKEN = 4  # records written
CP_LOST = 5  # frames not captured: the ring was full
CP_COLS = 8
CAP_RX = 1
CAP_TX = 2
CAP_DROP = 4

# capture record header (int64 [CAPTURE_RING, CR_COLS]); CR_CAPLEN is column 2 like the
# other rings' length, so Ring.pop returns the right bytes
CR_IF = 0
CR_DIR = 1  # CAP_RX / CAP_TX / CAP_DROP
CR_CAPLEN = 2
CR_LEN = 3  # the frame's length on the wire
CR_REASON = 4  # CAP_DROP: the counter id of the reason
CR_TS = 5  # CLOCK_REALTIME ns
CR_COLS = 6


def capture_config() -> np.ndarray:
    cfg = np.zeros(CP_COLS, np.int64)
    cfg[CP_IF] = -1
    return cfg


@njit(cache=True, nogil=True)
def _put(cfg, ctl, hdr, data, buf, meta, i, ifx, direction, reason, ts) -> None:
    if cfg[CP_LEFT] <= 0:
        cfg[CP_MODE] = 0  # this worker's share is written (the control plane counts them all)
        return
    k = ring_slot(ctl, hdr.shape[0])
    if k < 0:
        cfg[CP_LOST] += 1
        return
    off = np.int64(meta[M_OFF, i])
    ln = np.int64(meta[M_LEN, i])
    n = max(min(ln, cfg[CP_SNAP], np.int64(REC_BYTES), np.int64(buf.shape[0]) - off), 0)
    h = hdr[k]
    h[CR_IF] = ifx
    h[CR_DIR] = direction
    h[CR_CAPLEN] = n
    h[CR_LEN] = ln
    h[CR_REASON] = reason
    h[CR_TS] = ts
    memcpy(data[k], 0, buf, off, n)
    ring_publish(ctl)
    cfg[CP_LEFT] -= 1
    cfg[CP_TAKEN] += 1


@njit(cache=True, nogil=True)
def capture_received(cfg, ctl, hdr, data, buf, meta, ts, first, n) -> None:
    """Frames received into slots first..n-1 (before the graph runs)."""
    if cfg[CP_MODE] & CAP_RX == 0:
        return
    want = cfg[CP_IF]
    for i in range(first, n):
        rx = meta[M_RX, i]
        if want < 0 or rx == want:
            _put(cfg, ctl, hdr, data, buf, meta, i, rx, CAP_RX, -1, ts[i])


@njit(cache=True, nogil=True)
def capture_processed(cfg, ctl, hdr, data, buf, meta, nalloc, txl, ntx, now) -> None:
    """After the graph: what it sends (txl[:ntx], in order) and what error-drop took."""
    mode = cfg[CP_MODE]
    want = cfg[CP_IF]
    if mode & CAP_TX:
        for j in range(ntx):
            i = txl[j]
            tx = meta[M_TX, i]
            if want < 0 or tx == want:
                _put(cfg, ctl, hdr, data, buf, meta, i, tx, CAP_TX, -1, now)
    if mode & CAP_DROP:
        for i in range(nalloc[0]):
            if meta[M_NEXT, i] != DONE_DROP or meta[M_ERR, i] < 0:
                continue  # a GSO packet that lives on as its segments has no reason
            rx = meta[M_RX, i]
            if want < 0 or rx == want:
                _put(cfg, ctl, hdr, data, buf, meta, i, rx, CAP_DROP, meta[M_ERR, i], now)
