"""ip4-reass / ip6-reass: reassembly of fragments addressed to the router.

RFC 1812 4.3.3.6 makes a router reassemble what is sent to it (a fragmented echo request
must be answered); RFC 791 3.2 and RFC 8200 4.5 say how. ip4-local / ip6-local send every
fragment here; a completed datagram is rebuilt in the slot of the fragment that completed
it and goes back to local delivery like any packet. The other fragments' bytes were copied
into a context and their slots dropped as ``reass-queued``, so every input packet is still
counted exactly once.

Bounded everything: a fixed table of contexts (``state.REASS_CONTEXTS``) found by a seeded
hash with ``REASS_PROBES`` probes, each with a fixed buffer, at most ``REASS_MAX_FRAGS``
ranges and ``REASS_MAX_LEN`` bytes per datagram; a full table refuses new datagrams (old
ones still complete), like Linux above ipfrag_high_thresh. Contexts sit in one list per
family in creation order, so the timer (``reass_expire``, once per batch) only looks at
the oldest ones: 30 s for ip4, 60 s for ip6 (Linux ipfrag_time / ip6frag_time). An expired
datagram whose first fragment arrived is answered with Time Exceeded code 1, quoting the
first fragment kept in the context.

Safety: an overlap (RFC 5722; for ip4 too, as Linux has done since 2018) or a lying length
discards the whole datagram, and its context stays *dead* until the timeout so that its
later fragments die too, silently. Exact duplicates are ignored (RFC 5722 errata 3089).
"""

import numpy as np
from numba import njit

from vecroute.graph import counters as C
from vecroute.graph.flow_hash import mix64
from vecroute.graph.frames import drop, enqueue, icmp_error
from vecroute.graph.ip6_input import MAX_EXT_HEADERS, walk_ext_headers
from vecroute.graph.registry import NodeDecl
from vecroute.graph.state import (
    RC_FIRSTLEN,
    RC_FLAGS,
    RC_HDRLEN,
    RC_K0,
    RC_K1,
    RC_K2,
    RC_K3,
    RC_K4,
    RC_K5,
    RC_MAXEND,
    RC_NEXT,
    RC_NFRAG,
    RC_NHOFF,
    RC_PREV,
    RC_RECV,
    RC_RX,
    RC_STATE,
    RC_T0,
    RC_TOTAL,
    REASS_DATA,
    REASS_HDR,
    REASS_MAX_FRAGS,
    RG_HEAD4,
    RG_HEAD6,
    RG_SEED,
    RG_USED,
    RS_DEAD,
    RS_FREE,
    RS_LIVE,
)
from vecroute.packet.batch import (
    F_FRAG,
    F_FRAG_NONFIRST,
    HEADROOM,
    M_FIB,
    M_FLAGS,
    M_L3,
    M_L4,
    M_LEN,
    M_OFF,
    M_ORIG,
    M_PROTO,
    M_RX,
    M_TRACE,
    SLOT,
    alloc_slot,
)
from vecroute.packet.checksum import checksum
from vecroute.packet.headers import (
    ETH_HLEN,
    ICMP4_TIME_EXCEEDED,
    ICMP6_PARAM_PROBLEM,
    ICMP6_TIME_EXCEEDED,
    IP4_HLEN,
    IP6_HLEN,
    PROTO_DSTOPTS,
    PROTO_FRAGMENT,
    PROTO_HOPOPT,
    PROTO_ICMPV6,
    PROTO_NONE,
    PROTO_ROUTING,
    PROTO_TCP,
    PROTO_UDP,
    copy_bytes,
    rd16,
    rd32,
    rd64,
    wr16,
)
from vecroute.packet.intrinsics import memcpy
from vecroute.packet.node_ids import IP4_LOCAL, IP6_LOCAL

NODES = (
    NodeDecl(
        "ip4-reass",
        # icmp6-error too: a new datagram may evict a timed-out ip6 context (its Time
        # Exceeded); ip6-reass likewise
        next=("ip4-local", "icmp4-error", "icmp6-error", "error-drop"),
        counters=(
            "reass-queued", "reass-ok", "reass-duplicate", "reass-overlap", "reass-inconsistent",
            "reass-bad-length", "reass-tiny-fragment", "reass-too-big", "reass-too-many-fragments",
            "reass-discarded", "reass-no-context", "reass-timeout",
        ),
    ),
    NodeDecl(
        "ip6-reass",
        next=("ip6-local", "icmp4-error", "icmp6-error", "error-drop"),
        counters=(
            "ip6-bad-ext-header", "reass-queued", "reass-ok", "reass-atomic", "reass-duplicate",
            "reass-overlap", "reass-inconsistent", "reass-bad-length", "reass-header-incomplete",
            "reass-too-big", "reass-too-many-fragments", "reass-discarded", "reass-no-context",
            "reass-timeout", "reass-nd-fragmented",
        ),
    ),
)

REASS_MAX_LEN = 2000  # L3 bytes of a reassembled datagram: a batch slot (2048-byte frame)
REASS_PROBES = 8  # hash probes per lookup: a datagram lives in one of 8 contexts
REASS_TIMEOUT4_NS = 30_000_000_000  # Linux net.ipv4.ipfrag_time
REASS_TIMEOUT6_NS = 60_000_000_000  # Linux net.ipv6.ip6frag_time, RFC 8200 4.5
REASS_EXPIRE_PER_BATCH = 8  # contexts the timer may free per family per batch
TCP_MIN_HLEN = 20

# _take outcomes that are not counter ids
HELD = -1
DONE = -2


@njit(cache=True, inline="always")
def _timeout(fam: np.int64) -> np.int64:
    return np.int64(REASS_TIMEOUT6_NS) if fam == 6 else np.int64(REASS_TIMEOUT4_NS)


@njit(cache=True, inline="always")
def _head(fam: np.int64) -> int:
    return RG_HEAD6 if fam == 6 else RG_HEAD4


@njit(cache=True)
def _lookup(ctl, glob, k0, k1, k2, k3, k4, k5, now):
    """(context holding the key or -1, a free probe or -1, an expired probe or -1)."""
    h = mix64(np.uint64(glob[RG_SEED]) ^ np.uint64(k0))
    h = mix64(h ^ np.uint64(k1))
    h = mix64(h ^ np.uint64(k2))
    h = mix64(h ^ np.uint64(k3))
    h = mix64(h ^ np.uint64(k4) ^ (np.uint64(k5) << np.uint64(48)))
    mask = np.uint64(ctl.shape[0] - 1)
    free = np.int64(-1)
    old = np.int64(-1)
    for p in range(REASS_PROBES):
        c = np.int64((h + np.uint64(p)) & mask)
        if ctl[c, RC_STATE] == RS_FREE:
            if free < 0:
                free = c
            continue
        if (ctl[c, RC_K0] == k0 and ctl[c, RC_K1] == k1 and ctl[c, RC_K2] == k2
                and ctl[c, RC_K3] == k3 and ctl[c, RC_K4] == k4 and ctl[c, RC_K5] == k5):
            return c, free, old
        if old < 0 and now - ctl[c, RC_T0] >= _timeout(ctl[c, RC_K4] >> 40):
            old = c
    return np.int64(-1), free, old


@njit(cache=True)
def _free(ctl, glob, c) -> None:
    """Unlink a context from its family's creation-order list and mark it free."""
    b = _head(ctl[c, RC_K4] >> 40)
    p = ctl[c, RC_PREV]
    nx = ctl[c, RC_NEXT]
    if p >= 0:
        ctl[p, RC_NEXT] = nx
    else:
        glob[b] = nx
    if nx >= 0:
        ctl[nx, RC_PREV] = p
    else:
        glob[b + 1] = p
    ctl[c, RC_STATE] = RS_FREE
    glob[RG_USED] -= 1


@njit(cache=True)
def _expire(c, buf, meta, nalloc, frames, frame_n, dp) -> None:
    """Free a timed-out context; a live one whose first fragment arrived is answered with
    Time Exceeded code 1 (RFC 792, RFC 4443 3.3), the first fragment copied to a spare slot
    as the quote. Dead (discarded) datagrams go silently."""
    ctl = dp.reass_ctl
    fam = ctl[c, RC_K4] >> 40
    if ctl[c, RC_STATE] == RS_LIVE:
        hl = ctl[c, RC_HDRLEN]
        i = -1
        if hl > 0:
            i = alloc_slot(meta, nalloc, 0, ctl[c, RC_RX])
        if i >= 0:
            n = hl + ctl[c, RC_FIRSTLEN]
            l3 = np.int64(i) * SLOT + HEADROOM + ETH_HLEN
            memcpy(buf, l3, dp.reass_hdr, c * REASS_HDR, hl)
            memcpy(buf, l3 + hl, dp.reass_data, c * REASS_DATA, ctl[c, RC_FIRSTLEN])
            meta[M_ORIG, i] = i  # answers no packet of this batch
            meta[M_TRACE, i] = 0  # nor inherits slot 0's trace
            # no Ethernet header: the sender's MAC was not kept, so an error to a link-local
            # source (which must go back to that MAC) is suppressed, never sent to garbage
            meta[M_OFF, i] = l3
            meta[M_L3, i] = l3
            meta[M_LEN, i] = n
            meta[M_FIB, i] = ctl[c, RC_K5]
            meta[M_FLAGS, i] = ctl[c, RC_FLAGS]  # its ICMP-error / multicast suppression
            if fam == 6:
                meta[M_L4, i] = l3 + hl
                meta[M_PROTO, i] = buf[l3 + hl - 8]
                icmp_error(frames, frame_n, meta, i, True, C.C_REASS_TIMEOUT,
                           ICMP6_TIME_EXCEEDED, 1, 0)
            else:
                meta[M_L4, i] = l3 + hl
                meta[M_PROTO, i] = buf[l3 + 9]
                icmp_error(frames, frame_n, meta, i, False, C.C_REASS_TIMEOUT,
                           ICMP4_TIME_EXCEEDED, 1, 0)
        else:
            dp.counters[C.C_REASS_TIMEOUT] += 1  # the error node counts it when tried
    _free(ctl, dp.reass_glob, c)


@njit(cache=True, _nrt=True)
def reass_expire(buf, meta, nalloc, frames, frame_n, dp, now) -> None:
    """The reassembly timer, run once per batch: the oldest contexts of each family, at
    most REASS_EXPIRE_PER_BATCH each (creation order = expiry order: one timeout per
    family)."""
    glob = dp.reass_glob
    if glob[RG_USED] == 0:
        return
    ctl = dp.reass_ctl
    for f in range(2):
        fam = np.int64(4 + 2 * f)
        b = _head(fam)
        tmo = _timeout(fam)
        for _ in range(REASS_EXPIRE_PER_BATCH):
            c = glob[b]
            if c < 0 or now - ctl[c, RC_T0] < tmo:
                break
            _expire(c, buf, meta, nalloc, frames, frame_n, dp)


@njit(cache=True)
def reass_due(ctl, glob, now) -> bool:
    """The oldest context of a family has timed out (an idle router's tick asks this)."""
    for f in range(2):
        fam = np.int64(4 + 2 * f)
        c = glob[_head(fam)]
        if c >= 0 and now - ctl[c, RC_T0] >= _timeout(fam):
            return True
    return False


@njit(cache=True)
def _context(buf, meta, nalloc, frames, frame_n, dp, k0, k1, k2, k3, k4, k5, now) -> int:
    """The datagram's context, created when new (reclaiming an expired probe when no probe
    is free); -1 when the table has no room for it."""
    ctl = dp.reass_ctl
    glob = dp.reass_glob
    c, free, old = _lookup(ctl, glob, k0, k1, k2, k3, k4, k5, now)
    if c >= 0:
        if now - ctl[c, RC_T0] < _timeout(k4 >> 40):
            return c
        # timed out before the timer reached it (more expired than its budget): expired
        # now, and this fragment begins a new datagram
        _expire(c, buf, meta, nalloc, frames, frame_n, dp)
        free = c
    elif free < 0:
        if old < 0:
            return -1
        _expire(old, buf, meta, nalloc, frames, frame_n, dp)
        free = old
    c = free
    ctl[c, RC_STATE] = RS_LIVE
    ctl[c, RC_K0] = k0
    ctl[c, RC_K1] = k1
    ctl[c, RC_K2] = k2
    ctl[c, RC_K3] = k3
    ctl[c, RC_K4] = k4
    ctl[c, RC_K5] = k5
    ctl[c, RC_T0] = now
    ctl[c, RC_TOTAL] = -1
    ctl[c, RC_RECV] = 0
    ctl[c, RC_NFRAG] = 0
    ctl[c, RC_MAXEND] = 0
    ctl[c, RC_HDRLEN] = 0
    ctl[c, RC_FIRSTLEN] = 0
    ctl[c, RC_NHOFF] = 0
    b = _head(k4 >> 40)
    tail = glob[b + 1]
    ctl[c, RC_PREV] = tail
    ctl[c, RC_NEXT] = -1
    if tail >= 0:
        ctl[tail, RC_NEXT] = c
    else:
        glob[b] = c
    glob[b + 1] = c
    glob[RG_USED] += 1
    return c


@njit(cache=True)
def _take(dp, c, buf, meta, i, at, off, dlen, last, hdr_at, hdr_n, rebuilt_hdr,
          min_hdr, nhoff) -> int:
    """Add one fragment's data [off, off+dlen) (at ``at`` in buf) to context c.

    Returns HELD, DONE (the datagram is complete) or the counter id of why the fragment
    dies; overlaps, lying lengths, too big or too many fragments also kill the datagram.
    The first fragment (off 0) also leaves its ``hdr_n`` header bytes from ``hdr_at``."""
    ctl = dp.reass_ctl
    if ctl[c, RC_STATE] == RS_DEAD:
        return C.C_REASS_DISCARDED
    end = off + dlen
    hl = ctl[c, RC_HDRLEN]
    # the rebuilt datagram's header: this fragment's, the kept one, or at least the minimum
    if off == 0:
        hdr = rebuilt_hdr
    elif hl > 0:
        hdr = hl - (hdr_n - rebuilt_hdr)  # ip6: the kept one minus its fragment header
    else:
        hdr = min_hdr
    why = HELD
    tot = ctl[c, RC_TOTAL]
    if hdr + max(end, ctl[c, RC_MAXEND]) > REASS_MAX_LEN or (off == 0 and hdr_n > REASS_HDR):
        why = C.C_REASS_TOO_BIG
    elif last and ((tot >= 0 and end != tot) or end < ctl[c, RC_MAXEND]):
        why = C.C_REASS_INCONSISTENT
    elif not last and tot >= 0 and end > tot:
        why = C.C_REASS_INCONSISTENT
    nf = ctl[c, RC_NFRAG]
    if why == HELD:
        fr = dp.reass_frag
        for q in range(nf):
            v = fr[c, q]
            s = v & 0xFFFF
            e = v >> 16
            if s == off and e == end:
                return C.C_REASS_DUPLICATE  # an exact duplicate: ignored, the datagram kept
            if off < e and s < end:
                why = C.C_REASS_OVERLAP
                break
    if why == HELD and nf >= REASS_MAX_FRAGS:
        why = C.C_REASS_TOO_MANY_FRAGMENTS
    if why != HELD:
        ctl[c, RC_STATE] = RS_DEAD  # silently, with its later fragments, until the timeout
        ctl[c, RC_HDRLEN] = 0
        return why
    dp.reass_frag[c, nf] = np.int32(off | (end << 16))
    ctl[c, RC_NFRAG] = nf + 1
    if last:
        ctl[c, RC_TOTAL] = end
    if end > ctl[c, RC_MAXEND]:
        ctl[c, RC_MAXEND] = end
    memcpy(dp.reass_data, c * REASS_DATA + off, buf, at, dlen)
    if off == 0:
        memcpy(dp.reass_hdr, c * REASS_HDR, buf, hdr_at, hdr_n)
        ctl[c, RC_HDRLEN] = hdr_n
        ctl[c, RC_FIRSTLEN] = dlen
        ctl[c, RC_NHOFF] = nhoff
        ctl[c, RC_RX] = meta[M_RX, i]
        ctl[c, RC_FLAGS] = meta[M_FLAGS, i]
    recv = ctl[c, RC_RECV] + dlen
    ctl[c, RC_RECV] = recv
    if recv == ctl[c, RC_TOTAL]:  # held ranges never overlap and lie in [0, total)
        return DONE
    return HELD


@njit(cache=True, inline="always")
def _rebuild_at(buf, meta, i) -> int:
    """Where a rebuilt datagram starts: the canonical L3 offset of slot i (the slot holds
    REASS_MAX_LEN after it); the L2 header moves along for whoever reads it."""
    l3 = np.int64(i) * SLOT + HEADROOM + ETH_HLEN
    copy_bytes(buf, l3 - ETH_HLEN, buf, np.int64(meta[M_L3, i]) - ETH_HLEN, ETH_HLEN)
    meta[M_OFF, i] = l3 - ETH_HLEN
    meta[M_L3, i] = l3
    return l3


@njit(cache=True, _nrt=True)
def ip4_reass(work, k, buf, meta, frames, frame_n, dp, nalloc, now) -> None:
    """ip4 fragments to the router: keyed (source, destination, id, protocol, FIB table),
    checked (RFC 791 lengths, RFC 1858 / 3128 tiny TCP fragments), held or rebuilt."""
    ctl = dp.reass_ctl
    for j in range(k):
        i = work[j]
        l3 = np.int64(meta[M_L3, i])
        l4 = np.int64(meta[M_L4, i])
        end = np.int64(meta[M_OFF, i]) + meta[M_LEN, i]
        ihl = l4 - l3
        fo = rd16(buf, l3 + 6)
        off = np.int64(fo & 0x1FFF) * 8
        last = (fo & 0x2000) == 0
        dlen = end - l4
        proto = np.int64(buf[l3 + 9])
        if dlen <= 0 or ihl + off + dlen > 65535 or (not last and dlen & 7):
            drop(frames, frame_n, meta, i, C.C_REASS_BAD_LENGTH)
            continue
        if proto == PROTO_TCP and ((off == 0 and dlen < TCP_MIN_HLEN) or off == 8):
            drop(frames, frame_n, meta, i, C.C_REASS_TINY_FRAGMENT)
            continue
        k4 = np.int64(rd16(buf, l3 + 4)) | (proto << 32) | (np.int64(4) << 40)
        c = _context(buf, meta, nalloc, frames, frame_n, dp, np.int64(rd32(buf, l3 + 12)), 0,
                     np.int64(rd32(buf, l3 + 16)), 0, k4, np.int64(meta[M_FIB, i]), now)
        if c < 0:
            drop(frames, frame_n, meta, i, C.C_REASS_NO_CONTEXT)
            continue
        why = _take(dp, c, buf, meta, i, l4, off, dlen, last, l3, ihl, ihl, IP4_HLEN, 0)
        if why == HELD:
            drop(frames, frame_n, meta, i, C.C_REASS_QUEUED)
            continue
        if why != DONE:
            drop(frames, frame_n, meta, i, why)
            continue
        # complete: the first fragment's header (options and all) + the data, in this slot
        hl = ctl[c, RC_HDRLEN]
        tot = ctl[c, RC_TOTAL]
        n3 = _rebuild_at(buf, meta, i)
        memcpy(buf, n3, dp.reass_hdr, c * REASS_HDR, hl)
        memcpy(buf, n3 + hl, dp.reass_data, c * REASS_DATA, tot)
        wr16(buf, n3 + 2, hl + tot)
        wr16(buf, n3 + 6, 0)  # MF and offset cleared (DF too: it was a fragment)
        wr16(buf, n3 + 10, 0)
        wr16(buf, n3 + 10, checksum(buf, n3, hl, np.uint64(0)))
        meta[M_L4, i] = n3 + hl
        meta[M_LEN, i] = ETH_HLEN + hl + tot
        meta[M_PROTO, i] = buf[n3 + 9]
        meta[M_FLAGS, i] = ctl[c, RC_FLAGS] & ~(F_FRAG | F_FRAG_NONFIRST)
        _free(ctl, dp.reass_glob, c)
        dp.counters[C.C_REASS_OK] += 1
        enqueue(frames, frame_n, meta, IP4_LOCAL, i)


@njit(cache=True)
def _frag_header(buf, l3, end):
    """(offset of the fragment header, offset of the next-header field naming it), or
    (-1, -1): the headers before it were validated by ip6-input."""
    nh = np.int64(buf[l3 + 6])
    prev = l3 + 6
    p = l3 + IP6_HLEN
    for _ in range(MAX_EXT_HEADERS):
        if nh == PROTO_FRAGMENT:
            if p + 8 <= end:
                return p, prev
            return np.int64(-1), np.int64(-1)
        if nh != PROTO_HOPOPT and nh != PROTO_ROUTING and nh != PROTO_DSTOPTS:
            break
        if p + 2 > end:
            break
        prev = p
        nh = np.int64(buf[p])
        p += (np.int64(buf[p + 1]) + 1) * 8
    return np.int64(-1), np.int64(-1)


@njit(cache=True, inline="always")
def _upper_layer_in(proto, l4, end) -> bool:
    """RFC 8200 4.5 / RFC 7112: the first fragment holds the whole header chain and the
    upper-layer header (the sizes Linux checks: TCP 20, UDP 8, ICMPv6 8, other 1)."""
    if (proto == PROTO_HOPOPT or proto == PROTO_ROUTING or proto == PROTO_DSTOPTS
            or proto == PROTO_FRAGMENT):
        return False
    need = 1
    if proto == PROTO_TCP:
        need = TCP_MIN_HLEN
    elif proto == PROTO_UDP or proto == PROTO_ICMPV6:
        need = 8
    elif proto == PROTO_NONE:
        need = 0
    return l4 + need <= end


@njit(cache=True, inline="always")
def _to_local6(frames, frame_n, meta, buf, dp, i, l3, end, flags) -> None:
    """A whole ip6 packet again: walk its headers and deliver it (RFC 6980: never as ND)."""
    proto, l4, fflags, ok = walk_ext_headers(buf, l3, end)
    if not ok:
        drop(frames, frame_n, meta, i, C.C_IP6_BAD_EXT)
        return
    meta[M_PROTO, i] = proto
    meta[M_L4, i] = l4
    meta[M_FLAGS, i] = (flags & ~(F_FRAG | F_FRAG_NONFIRST)) | fflags
    if proto == PROTO_ICMPV6 and l4 < end and buf[l4] >= 133 and buf[l4] <= 137:
        drop(frames, frame_n, meta, i, C.C_REASS_ND_FRAGMENTED)
        return
    enqueue(frames, frame_n, meta, IP6_LOCAL, i)


@njit(cache=True, _nrt=True)
def ip6_reass(work, k, buf, meta, frames, frame_n, dp, nalloc, now) -> None:
    """ip6 fragments to the router: keyed (source, destination, id, FIB table), checked as
    RFC 8200 4.5 / RFC 7112 say (parameter problems), held or rebuilt; atomic fragments
    (RFC 6946) are delivered alone."""
    ctl = dp.reass_ctl
    for j in range(k):
        i = work[j]
        l3 = np.int64(meta[M_L3, i])
        o = np.int64(meta[M_OFF, i])
        end = o + meta[M_LEN, i]
        fh, prev = _frag_header(buf, l3, end)
        if fh < 0:
            drop(frames, frame_n, meta, i, C.C_IP6_BAD_EXT)
            continue
        fo = rd16(buf, fh + 2)
        off = np.int64(fo & 0xFFF8)
        last = (fo & 1) == 0
        at = fh + 8
        dlen = end - at
        if off == 0 and last:
            # atomic fragment (RFC 6946): delivered alone, its header left in place (ip6-local
            # steps over it) so that an error quotes the packet as it came and points right
            dp.counters[C.C_REASS_ATOMIC] += 1
            meta[M_FLAGS, i] &= ~(F_FRAG | F_FRAG_NONFIRST)
            pr = meta[M_PROTO, i]
            l4 = meta[M_L4, i]
            if pr == PROTO_ICMPV6 and l4 < end and buf[l4] >= 133 and buf[l4] <= 137:
                drop(frames, frame_n, meta, i, C.C_REASS_ND_FRAGMENTED)  # RFC 6980
            else:
                enqueue(frames, frame_n, meta, IP6_LOCAL, i)
            continue
        u = fh - l3  # the unfragmentable part
        if u - IP6_HLEN + off + dlen > 65535:
            icmp_error(frames, frame_n, meta, i, True, C.C_REASS_BAD_LENGTH,
                       ICMP6_PARAM_PROBLEM, 0, u + 2)  # points at the fragment offset
            continue
        if not last and dlen & 7:
            icmp_error(frames, frame_n, meta, i, True, C.C_REASS_BAD_LENGTH,
                       ICMP6_PARAM_PROBLEM, 0, 4)  # points at the payload length
            continue
        if off == 0 and not _upper_layer_in(meta[M_PROTO, i], meta[M_L4, i], end):
            icmp_error(frames, frame_n, meta, i, True, C.C_REASS_HEADER_INCOMPLETE,
                       ICMP6_PARAM_PROBLEM, 3, 0)
            continue
        if dlen <= 0:
            drop(frames, frame_n, meta, i, C.C_REASS_BAD_LENGTH)
            continue
        k4 = np.int64(rd32(buf, fh + 4)) | (np.int64(6) << 40)
        c = _context(buf, meta, nalloc, frames, frame_n, dp,
                     np.int64(rd64(buf, l3 + 8)), np.int64(rd64(buf, l3 + 16)),
                     np.int64(rd64(buf, l3 + 24)), np.int64(rd64(buf, l3 + 32)), k4,
                     np.int64(meta[M_FIB, i]), now)
        if c < 0:
            drop(frames, frame_n, meta, i, C.C_REASS_NO_CONTEXT)
            continue
        why = _take(dp, c, buf, meta, i, at, off, dlen, last, l3, u + 8, u, IP6_HLEN,
                    prev - l3)
        if why == HELD:
            drop(frames, frame_n, meta, i, C.C_REASS_QUEUED)
            continue
        if why != DONE:
            drop(frames, frame_n, meta, i, why)
            continue
        # complete: the first fragment's unfragmentable part + the data, no fragment header
        ul = ctl[c, RC_HDRLEN] - 8
        tot = ctl[c, RC_TOTAL]
        n3 = _rebuild_at(buf, meta, i)
        memcpy(buf, n3, dp.reass_hdr, c * REASS_HDR, ul)
        memcpy(buf, n3 + ul, dp.reass_data, c * REASS_DATA, tot)
        buf[n3 + ctl[c, RC_NHOFF]] = dp.reass_hdr[c * REASS_HDR + ul]  # the frag's next header
        wr16(buf, n3 + 4, ul - IP6_HLEN + tot)
        meta[M_LEN, i] = ETH_HLEN + ul + tot
        flags = ctl[c, RC_FLAGS]
        _free(ctl, dp.reass_glob, c)
        dp.counters[C.C_REASS_OK] += 1
        _to_local6(frames, frame_n, meta, buf, dp, i, n3, n3 + ul + tot, flags)
