"""Replay's compiled loop: merged capture -> graph -> pcap records per port, many batches a call.

One call loads the next vector of input frames into the batch, runs the graph
(``run_nodes``, as the live worker loop does), puts the transmitted packets in output order
and appends each as a pcap record to its port's slice of one record buffer, and goes on to
the next vector. It returns to Python only when a port's slice is full (Python writes the
slices to the files and calls again: the batch's unwritten rest waits in ``order``), when
the firewall's state table must grow (Python grows it, between two batches as
``Graph.run`` does), or at the end of the input. Nothing per packet or per batch in Python.

Output order is what a capture of the wire would show: input order, and a packet the
router generated (fragments, ARP/NS requests, ICMP errors) right where the packet it came
from was (``M_ORIG``), in ``M_SEQ`` order among its siblings. The clock is the packets' own
timestamps; a record carries its original's timestamp, and one with no original in the
batch (a reassembly timeout's Time Exceeded) the batch's clock.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from vecroute.firewall.states import states_need_growth
from vecroute.graph.dispatch import run_nodes
from vecroute.graph.fast_path import fused_scratch
from vecroute.io.pcap_write import RECORD_HDR, put_record
from vecroute.packet.batch import M_LEN, M_OFF, M_ORIG, M_SEQ, M_TX, load_frames

# loop control words (int64 [RC_COLS]): Python sets the settings, the loop the rest
RC_POS = 0  # the next input frame to load
RC_PENDING = 1  # 1: the last batch's transmitted packets are not all written yet
RC_DONE = 2  # how many of them (in order[]) are written
RC_NTX = 3  # how many there are
RC_N = 4  # the last batch's received packets
RC_NOW = 5  # the last batch's clock
RC_BATCHES = 6  # batches run
RC_BAD = 7  # RET_BAD: the slot that failed the checks
RC_VECTOR = 8  # setting: packets per batch
RC_SNAPLEN = 9  # setting: the output files' snaplen
RC_SLICE = 10  # setting: bytes of the record buffer per port
RC_FW_HEADROOM = 11  # setting: the firewall's vector (its state table's growth headroom)
RC_FW_LIMIT = 12  # setting: the state table's largest capacity
RC_COLS = 13
# why the loop returned
RET_DONE = 0  # every input frame processed and written
RET_FULL = 1  # a port's slice of the record buffer is full: write the slices, call again
RET_FW_GROW = 2  # grow the firewall's state table, call again
RET_BAD = 3  # a transmitted slot has no port, lies outside the batch buffer or has no
# valid origin (a bug in a node)


@njit(cache=True)
def tx_order(txl: np.ndarray, nt: int, meta: np.ndarray, order: np.ndarray,
             cnt: np.ndarray) -> int:
    """``order[:nt]`` = ``txl[:nt]`` sorted stably by (M_ORIG, M_SEQ); returns -1, or a
    slot whose origin is out of range (nothing sorted).

    Usually already in order (one pass checks it); otherwise a counting sort by origin
    (``cnt`` has capacity + 1 entries) and an insertion sort by sequence within each
    origin's few packets: linear, not a per-batch lexsort."""
    ok = True
    po = -1
    ps = 0
    for j in range(nt):
        i = txl[j]
        o = meta[M_ORIG, i]
        s = meta[M_SEQ, i]
        if o < po or (o == po and s < ps):
            ok = False
            break
        po = o
        ps = s
    if ok:
        for j in range(nt):
            order[j] = txl[j]
        return -1
    cnt[:] = 0
    for j in range(nt):
        o = meta[M_ORIG, txl[j]]
        if o < 0 or o >= cnt.size - 1:
            return txl[j]
        cnt[o + 1] += 1
    for k in range(1, cnt.size):
        cnt[k] += cnt[k - 1]
    for j in range(nt):
        i = txl[j]
        o = meta[M_ORIG, i]
        order[cnt[o]] = i
        cnt[o] += 1
    for j in range(1, nt):
        i = order[j]
        o = meta[M_ORIG, i]
        s = meta[M_SEQ, i]
        k = j
        while k > 0 and meta[M_ORIG, order[k - 1]] == o and meta[M_SEQ, order[k - 1]] > s:
            order[k] = order[k - 1]
            k -= 1
        order[k] = i
    return -1


@njit(cache=True)
def _write_tx(ctl, buf, meta, ts, order, obuf, ofill, opackets) -> int:
    """Append the pending batch's records from order[RC_DONE] on; RET_FULL when a port's
    slice has no room for the next one (RC_DONE says where to go on)."""
    nt = ctl[RC_NTX]
    n = ctl[RC_N]
    now = ctl[RC_NOW]
    snap = ctl[RC_SNAPLEN]
    room = ctl[RC_SLICE]
    ports = ofill.size
    size = np.int64(buf.size)
    for k in range(ctl[RC_DONE], nt):
        i = order[k]
        p = np.int64(meta[M_TX, i])
        o = np.int64(meta[M_OFF, i])
        ln = np.int64(meta[M_LEN, i])
        if p < 0 or p >= ports or o < 0 or ln < 0 or ln > size - o:
            ctl[RC_BAD] = i
            return RET_BAD
        need = RECORD_HDR + (ln if ln < snap else snap)
        q = ofill[p]
        if need > room - q:
            if q == 0:  # would never fit
                ctl[RC_BAD] = i
                return RET_BAD
            ctl[RC_DONE] = k
            return RET_FULL
        g = meta[M_ORIG, i]
        t = ts[g] if g < n else now
        ofill[p] = put_record(obuf, p * room + q, buf, o, ln, t, snap) - p * room
        opackets[p] += 1
    ctl[RC_DONE] = nt
    ctl[RC_PENDING] = 0
    return RET_DONE


@njit(cache=True)
def replay_loop(
    ctl, data, offs, lens, tss, rxs, buf, meta, ts, nalloc,
    frames, frame_n, work, txl, txn, dp, fw, fwk, fwv,
    order, cnt, obuf, ofill, opackets,
) -> int:  # fmt: skip
    """Replay frames ctl[RC_POS].. of the merged capture until the input ends or Python
    must act; returns why (RET_*). See the module docstring."""
    total = offs.size
    vector = ctl[RC_VECTOR]
    sc, fl, acc = fused_scratch(vector)  # once a call, not once a batch: n <= vector
    while True:
        if ctl[RC_PENDING] != 0:
            r = _write_tx(ctl, buf, meta, ts, order, obuf, ofill, opackets)
            if r != RET_DONE:
                return r
        pos = ctl[RC_POS]
        if pos >= total:
            return RET_DONE
        if fw is not None and states_need_growth(fw.st, fw.ctl, ctl[RC_FW_HEADROOM],
                                                 ctl[RC_FW_LIMIT]):
            return RET_FW_GROW
        n = min(vector, total - pos)
        load_frames(buf, meta, ts, data, offs, lens, tss, rxs, pos, n)
        nalloc[0] = n
        now = tss[pos + n - 1]
        run_nodes(n, now, meta, buf, nalloc, frames, frame_n, work, txl, txn, dp, fw, fwk, fwv,
                  sc, fl, acc)
        ctl[RC_POS] = pos + n
        ctl[RC_BATCHES] += 1
        ctl[RC_N] = n
        ctl[RC_NOW] = now
        nt = txn[0]
        if nt:
            bad = tx_order(txl, nt, meta, order, cnt)
            if bad >= 0:
                ctl[RC_BAD] = bad
                return RET_BAD
            ctl[RC_NTX] = nt
            ctl[RC_DONE] = 0
            ctl[RC_PENDING] = 1
