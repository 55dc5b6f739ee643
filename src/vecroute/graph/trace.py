"""Packet trace (VPP's ``trace add`` / ``show trace``): what each node saw and decided.

The control plane arms a trace in a worker's ``trace_ctl`` words: select the next N
packets that enter one node (ethernet-input by default) and, optionally, match a small
filter (family, protocol, addresses, ports). The dispatcher then calls :func:`trace_select`
before that node runs and :func:`trace_record` after every node: a selected packet gets an
id in its ``M_TRACE`` metadata row (packets generated from it inherit the id), and each
record keeps the packet's metadata after the node and the first ``TRACE_SNAP`` bytes of
its frame. The control plane decodes the records (control/trace.py).

When nothing is armed or traced the dispatcher pays two word loads per node call, none
per packet. Memory is fixed: ``TRACE_RECORDS`` records per worker (~3.1 MB); a record
that does not fit is counted in ``TR_LOST`` and the trace ends there.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from vecroute.firewall.layout import RI_NUM
from vecroute.packet.batch import M_L3, M_LEN, M_OFF, M_TRACE, N_META
from vecroute.packet.intrinsics import memcpy

TRACE_RECORDS = 8192  # records per worker (about 1000 packets of 5-8 nodes)
TRACE_SNAP = 256  # frame bytes kept per record (an SRv6 encapsulation with 6 SIDs fits)
MAX_TRACE_PACKETS = 1000  # per `trace add`

# trace_ctl int64 [TR_COLS]: written by the control plane (between batches) and the worker
TR_LEFT = 0  # packets still to select
TR_NODE = 1  # the node whose input is selected
TR_NEXT_ID = 2  # the id the next selected packet gets (ids start at 1)
TR_NREC = 3  # records written
TR_LOST = 4  # records that did not fit
TR_DIRTY = 5  # some M_TRACE of this batch may be set: zero the row before the next batch
TR_MATCH = 6  # 1: the filter below applies
TR_M_FAMILY = 7  # 0 any, 4, 6
TR_M_PROTO = 8  # -1 any
TR_M_SPORT = 9  # -1 any
TR_M_DPORT = 10  # -1 any
TR_M_PORT = 11  # either port, -1 any
TR_M_SRC = 12  # address as two words (ip4: the address in the low word), then its length
TR_M_DST = 15
TR_M_HOST = 18  # either address
TR_COLS = 24
M_ANY = -1  # an address length of -1: any address

# trace_rec int32 [TRACE_RECORDS, REC_COLS]
R_ID = 0  # the packet's trace id
R_KIND = 1  # K_SEEN (its state when selected, before the node) or K_AFTER (after a node)
R_NODE = 2
R_SLOT = 3
R_FW_VERDICT = 4  # fw-in / fw-out: the classifier's verdict, rule number and aux (else -1)
R_FW_RULE = 5  # the number, read when the packet passed (rows shift when rules change)
R_FW_AUX = 6
R_CAPLEN = 7  # bytes kept in trace_snap
R_META = 8  # the packet's metadata column (N_META words)
REC_COLS = R_META + N_META
K_SEEN = 0
K_AFTER = 1


@njit(cache=True, inline="always")
def _be(buf, o, n) -> np.int64:
    v = np.int64(0)
    for j in range(n):
        v = (v << 8) | np.int64(buf[o + j])
    return v


@njit(cache=True)
def _addr_in(tc, col, hi, lo, ip6) -> bool:
    """The address (hi, lo) lies in the filter's prefix at tc[col:col + 3]."""
    plen = tc[col + 2]
    if plen < 0:
        return True
    if not ip6:
        if plen > 32:
            return False
        return plen == 0 or (lo >> (32 - plen)) == (tc[col + 1] >> (32 - plen))
    if plen <= 64:
        return plen == 0 or (np.uint64(hi) >> np.uint64(64 - plen)) == (
            np.uint64(tc[col]) >> np.uint64(64 - plen))
    if hi != tc[col]:
        return False
    return plen == 64 or (np.uint64(lo) >> np.uint64(128 - plen)) == (
        np.uint64(tc[col + 1]) >> np.uint64(128 - plen))


@njit(cache=True)
def trace_matches(buf, meta, i, tc) -> bool:
    """Packet i matches the armed filter (always, when there is none). The IP header is
    found from M_L3, or past the Ethernet header (and one VLAN tag) before ip4/ip6-input
    set it; ports are those of a TCP/UDP header right after the IPv4 header or IPv6's
    fixed header."""
    if tc[TR_MATCH] == 0:
        return True
    off = np.int64(meta[M_OFF, i])
    end = off + meta[M_LEN, i]
    l3 = np.int64(meta[M_L3, i])
    if l3 <= 0:
        if end - off < 14:
            return False
        et = _be(buf, off + 12, 2)
        l3 = off + 14
        if et == 0x8100 and end - off >= 18:
            et = _be(buf, off + 16, 2)
            l3 = off + 18
        if et != 0x0800 and et != 0x86DD:
            return False
    if l3 >= end:
        return False
    ver = buf[l3] >> 4
    if ver == 4 and end - l3 >= 20:
        ip6 = False
        proto = np.int64(buf[l3 + 9])
        src_hi, src_lo = np.int64(0), _be(buf, l3 + 12, 4)
        dst_hi, dst_lo = np.int64(0), _be(buf, l3 + 16, 4)
        l4 = l3 + (buf[l3] & 15) * 4
        first = (_be(buf, l3 + 6, 2) & 0x1FFF) == 0
    elif ver == 6 and end - l3 >= 40:
        ip6 = True
        proto = np.int64(buf[l3 + 6])
        src_hi, src_lo = _be(buf, l3 + 8, 8), _be(buf, l3 + 16, 8)
        dst_hi, dst_lo = _be(buf, l3 + 24, 8), _be(buf, l3 + 32, 8)
        l4 = l3 + 40
        first = True
    else:
        return False
    fam = tc[TR_M_FAMILY]
    if fam != 0 and fam != (6 if ip6 else 4):
        return False
    if tc[TR_M_PROTO] >= 0 and tc[TR_M_PROTO] != proto:
        return False
    if not (_addr_in(tc, TR_M_SRC, src_hi, src_lo, ip6)
            and _addr_in(tc, TR_M_DST, dst_hi, dst_lo, ip6)):
        return False
    if tc[TR_M_HOST + 2] >= 0 and not (_addr_in(tc, TR_M_HOST, src_hi, src_lo, ip6)
                                       or _addr_in(tc, TR_M_HOST, dst_hi, dst_lo, ip6)):
        return False
    if tc[TR_M_SPORT] < 0 and tc[TR_M_DPORT] < 0 and tc[TR_M_PORT] < 0:
        return True
    if not first or (proto != 6 and proto != 17) or end - l4 < 4:
        return False
    sport = _be(buf, l4, 2)
    dport = _be(buf, l4 + 2, 2)
    if tc[TR_M_SPORT] >= 0 and sport != tc[TR_M_SPORT]:
        return False
    if tc[TR_M_DPORT] >= 0 and dport != tc[TR_M_DPORT]:
        return False
    p = tc[TR_M_PORT]
    return p < 0 or sport == p or dport == p


@njit(cache=True)
def _record(buf, meta, i, dp, kind, node, now, v0, v1, v2) -> bool:
    """Append one record of packet i; False (and the trace disarmed) when full."""
    tc = dp.trace_ctl
    r = tc[TR_NREC]
    rec = dp.trace_rec
    if r >= rec.shape[0]:
        tc[TR_LOST] += 1
        tc[TR_LEFT] = 0
        return False
    row = rec[r]
    row[R_ID] = meta[M_TRACE, i]
    row[R_KIND] = kind
    row[R_NODE] = node
    row[R_SLOT] = i
    row[R_FW_VERDICT] = v0
    row[R_FW_RULE] = v1
    row[R_FW_AUX] = v2
    for m in range(N_META):
        row[R_META + m] = meta[m, i]
    off = np.int64(meta[M_OFF, i])
    snap = dp.trace_snap[r]
    n = min(np.int64(meta[M_LEN, i]), np.int64(snap.shape[0]))
    lim = np.int64(buf.shape[0]) - off
    n = max(min(n, lim), 0)
    memcpy(snap, 0, buf, off, n)
    row[R_CAPLEN] = n
    dp.trace_time[r] = now
    tc[TR_NREC] = r + 1
    return True


@njit(cache=True, _nrt=True)
def trace_begin(meta, dp) -> None:
    """Before a batch: forget the ids of the last one (only if it traced anything)."""
    tc = dp.trace_ctl
    if tc[TR_DIRTY] != 0:
        meta[M_TRACE, :] = 0
        tc[TR_DIRTY] = 0


@njit(cache=True, _nrt=True)
def trace_select(work, k, buf, meta, dp, node, now) -> None:
    """Before ``node`` runs: give the next matching packets of its input a trace id and
    record what they look like."""
    tc = dp.trace_ctl
    for j in range(k):
        if tc[TR_LEFT] <= 0:
            return
        i = work[j]
        if meta[M_TRACE, i] != 0 or not trace_matches(buf, meta, i, tc):
            continue
        meta[M_TRACE, i] = tc[TR_NEXT_ID]
        tc[TR_DIRTY] = 1
        if not _record(buf, meta, i, dp, K_SEEN, node, now, -1, -1, -1):
            meta[M_TRACE, i] = 0
            return
        tc[TR_NEXT_ID] += 1
        tc[TR_LEFT] -= 1


@njit(cache=True, _nrt=True)
def trace_record(work, k, buf, meta, dp, node, now) -> None:
    """After ``node`` ran: record each traced packet of its input."""
    for j in range(k):
        i = work[j]
        if meta[M_TRACE, i] != 0:
            _record(buf, meta, i, dp, K_AFTER, node, now, -1, -1, -1)


@njit(cache=True, _nrt=True)
def trace_record_fw(work, k, buf, meta, dp, node, now, fw, fwv) -> None:
    """After fw-in / fw-out: also the verdict, the deciding rule's number and aux of each
    traced packet (the verdict rows are indexed like the node's input)."""
    if fw is None:
        return
    rinfo = fw.rinfo
    for j in range(k):
        i = work[j]
        if meta[M_TRACE, i] == 0:
            continue
        r = fwv[1, j]
        num = rinfo[r, RI_NUM] if 0 <= r < rinfo.shape[0] else -1
        _record(buf, meta, i, dp, K_AFTER, node, now, fwv[0, j], num, fwv[2, j])
