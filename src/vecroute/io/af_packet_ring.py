"""Compiled kernels over the mmap'ed AF_PACKET rings (the fast path of :mod:`af_packet`).

RX walks a TPACKET_V2 ring frame by frame (:func:`rx_ring2_to_batch`) or a TPACKET_V3
ring block by block (:func:`rx_ring_to_batch`) and copies each frame into a batch slot;
TX copies batch frames into TPACKET_V2 frames and marks them TP_STATUS_SEND_REQUEST.
Both run once per batch, so the only per-batch Python is one call here and, for TX,
one ``send()``.  The rings are numpy views of the mmap (u8 plus u16/u32 views for the
header fields, which the kernel keeps naturally aligned).

The two RX walkers differ only in how they find frames and read their headers
(:func:`rx_frame2`, :func:`rx_frame3`: every field bounded against the frame or block);
what happens to a frame after that is one function, :func:`rx_frame_data`.

A V2 frame has a fixed size, so a frame bigger than one (a GSO super-packet, up to
64 KiB and more) cannot sit in the ring.  With PACKET_COPY_THRESH the kernel then puts
the truncated frame in the ring marked TP_STATUS_COPY and queues the whole packet on the
socket, in ring order (both under the receive-queue lock): the walker takes it with one
``recv(MSG_DONTWAIT)`` (:func:`sock_recv`, compiled) into a copy buffer and handles it
from there.  Exactly one ``recv`` per COPY frame, whatever becomes of the frame, keeps
ring and queue in step; a copy that waits for the next batch stays in the buffer.

With PACKET_VNET_HDR each RX frame is preceded by a ``struct virtio_net_hdr``; frames a
Linux host sent over veth arrive with the TCP/UDP checksum only seeded
(CHECKSUM_PARTIAL) and TCP as GSO super-packets.  The checksum is finished here and
super-packets (TCP, and UDP GSO as QUIC stacks send it) are cut into MSS-sized
segments, one batch slot each, before the router sees them: forwarded as they are, a
receiving host would drop them.

Layouts (checked against <linux/if_packet.h>, <linux/virtio_net.h> with offsetof):

- tpacket_block_desc: block_status @8, num_pkts @12, offset_to_first_pkt @16
- tpacket3_hdr: tp_next_offset @0, tp_sec @4, tp_nsec @8, tp_snaplen @12, tp_len @16,
  tp_status @20, tp_mac (u16) @24, tp_vlan_tci @32, tp_vlan_tpid (u16) @36; the
  sockaddr_ll follows at TPACKET_ALIGN(48) = 48, so sll_pkttype is @58
- tpacket2_hdr (RX and TX; sizeof 32): tp_status @0, tp_len @4, tp_snaplen @8, tp_mac (u16)
  @12, tp_net (u16) @14, tp_sec @16, tp_nsec @20, tp_vlan_tci (u16) @24, tp_vlan_tpid
  (u16) @26; the sockaddr_ll follows at TPACKET_ALIGN(32) = 32, so sll_pkttype is @42.
  RX frame f of the ring starts at (f // frames_per_block) * block_size +
  (f % frames_per_block) * frame_size.  TX data at TPACKET2_HDRLEN - sizeof(sockaddr_ll)
  = 32
- virtio_net_hdr (10 bytes, host order): flags @0, gso_type @1, hdr_len @2, gso_size @4,
  csum_start @6, csum_offset @8; it sits right before the frame (tp_mac - 10)
"""

from __future__ import annotations

import numpy as np
from numba import njit

from vecroute.io.syscalls import MSG_DONTWAIT, addr, kick, libc_sendmmsg, sock_recv
from vecroute.packet.batch import (
    F_CSUM_PARTIAL,
    F_GSO,
    HEADROOM,
    JUMBO_SLOT,
    M_CSUM,
    M_FLAGS,
    M_GSO,
    M_L3,
    M_L4,
    M_LEN,
    M_OFF,
    MAX_FRAME,
    SLOT,
    reset_slot,
)
from vecroute.packet.gso import (
    GSO_TOO_BIG,
    GSO_WAIT,
    VNET_F_NEEDS_CSUM,
    VNET_GSO_ECN,
    VNET_GSO_NONE,
    VNET_GSO_UDP_L4,
    VNET_HDR_LEN,
    copy_tagged,
    finish_csum,
    segment,
)
from vecroute.packet.headers import rd16
from vecroute.packet.intrinsics import prefetch

# -- kernel ABI ---------------------------------------------------------------------------

TP_STATUS_KERNEL = 0
TP_STATUS_USER = 1
TP_STATUS_COPY = 1 << 1
TP_STATUS_VLAN_VALID = 1 << 4
TP_STATUS_VLAN_TPID_VALID = 1 << 6
TP_STATUS_AVAILABLE = 0
TP_STATUS_SEND_REQUEST = 1

PACKET_OUTGOING = 4

BLK_STATUS = 8
BLK_NUM_PKTS = 12
BLK_FIRST = 16
H3_NEXT = 0
H3_SEC = 4
H3_NSEC = 8
H3_SNAPLEN = 12
H3_LEN = 16
H3_STATUS = 20
H3_MAC = 24
H3_VLAN_TCI = 32
H3_VLAN_TPID = 36
H3_PKTTYPE = 48 + 10
H3_HDRLEN = 48
H2_STATUS = 0
H2_LEN = 4
H2_SNAPLEN = 8
H2_MAC = 12
H2_SEC = 16
H2_NSEC = 20
H2_VLAN_TCI = 24
H2_VLAN_TPID = 26
H2_PKTTYPE = 32 + 10
H2_HDRLEN = 32
TX_DATA = 32
TX_BLOCK = 1 << 16  # TX ring block size



# -- counters -----------------------------------------------------------------------------

#: One registry of per-socket counters: (name, what it counts).  ``PacketSocket.stats``
#: is an int64 array indexed by these positions.
STATS: tuple[tuple[str, str], ...] = (
    ("rx_packets", "packets put into batch slots (GSO segments count one each)"),
    ("rx_bytes", "bytes put into batch slots"),
    ("rx_kernel_drops", "dropped by the kernel: ring full (PACKET_STATISTICS tp_drops)"),
    ("rx_csum_fixed", "TCP/UDP checksums finished in software (CHECKSUM_PARTIAL)"),
    ("rx_gso_segmented", "GSO super-packets cut into segments"),
    ("rx_too_long", "frames longer than a batch slot and not GSO, or MSS too big: dropped"),
    ("tx_packets", "frames queued on the TX ring"),
    ("tx_ring_full", "frames dropped because the TX ring had no free frame"),
    ("rx_gso_segments", "segments produced from GSO super-packets"),
    ("rx_gso_dropped", "GSO packets not TCP or UDP over IPv4/IPv6, or malformed: dropped"),
    ("rx_outgoing", "frames tagged PACKET_OUTGOING: skipped"),
    ("rx_truncated", "frames clamped by the kernel to the ring (V2: no copy) or overrunning it"),
    ("rx_bad_vnet", "virtio_net_hdr checksum offsets outside the frame: dropped"),
    ("tx_bytes", "bytes queued on the TX ring"),
    ("tx_too_long", "frames too long for a TX frame, shorter than Ethernet, or bad index"),
    ("tx_errors", "send() calls that failed (link down, no buffer)"),
    ("link_errors", "socket errors reported by poll (interface went down)"),
    ("rx_copied", "V2: packets bigger than a ring frame, taken whole from the socket queue"),
    ("rx_copy_lost", "V2 frames marked TP_STATUS_COPY whose copy recv() did not return"),
    ("rx_gso_kept", "GSO super-packets kept whole in a jumbo slot (they leave whole)"),
)
STAT_INDEX = {name: i for i, (name, _) in enumerate(STATS)}
S_RX_PACKETS = 0
S_RX_BYTES = 1
S_RX_KERNEL_DROPS = 2
S_CSUM_FIXED = 3
S_GSO_SEGMENTED = 4
S_TOO_LONG = 5
S_TX_PACKETS = 6
S_TX_RING_FULL = 7
S_GSO_SEGMENTS = 8
S_GSO_DROPPED = 9
S_RX_OUTGOING = 10
S_RX_TRUNCATED = 11
S_BAD_VNET = 12
S_TX_BYTES = 13
S_TX_TOO_LONG = 14
S_TX_ERRORS = 15
S_LINK_ERRORS = 16
S_RX_COPIED = 17
S_RX_COPY_LOST = 18
S_GSO_PASSED = 19
N_STATS = len(STATS)

# A socket as a compiled loop sees it (int64 [PD_COLS], PacketSocket.loop_descriptor):
# addresses of its ring mappings and of its own cursor / counter arrays, so one compiled
# function serves any number of ports without a type per port count.
PD_RX_FD = 0
PD_RX_VERSION = 1  # 2 or 3 (TPACKET_V2 / TPACKET_V3)
PD_RX_ADDR = 2
PD_RX_BYTES = 3
PD_RX_N = 4  # V3: blocks; V2: frames
PD_RX_SIZE = 5  # V3: block size; V2: frame size
PD_RX_FPB = 6  # V2: frames per block
PD_RX_BLOCK = 7  # V2: block size
PD_VNET = 8
PD_RX_STATE = 9  # address of the int64 RX cursor
PD_STATS = 10  # address of the int64 counters (STATS)
PD_TX_FD = 11
PD_TX_MODE = 12  # 0: none, 1: TX ring, 2: sendmmsg
PD_TX_ADDR = 13
PD_TX_BYTES = 14
PD_TX_N = 15  # frames
PD_TX_SIZE = 16  # frame size
PD_TX_FPB = 17
PD_TX_STATE = 18  # address of the int64 TX cursor
PD_RX_COPY = 19  # V2: address of the copy buffer (packets bigger than a ring frame)
PD_RX_COPY_BYTES = 20
PD_TX_VNET = 21  # sendmmsg: the socket takes a virtio_net_hdr before each frame
PD_COLS = 22
TXM_NONE = 0
TXM_RING = 1
TXM_MMSG = 2

# RX cursor (int64 array).  V3: block being read, packets of it consumed, offset of the
# next one.  V2: frame to read next, bytes of its TP_STATUS_COPY copy already received into
# the copy buffer (0: none yet)
R_BLOCK = 0
R_DONE = 1
R_NEXT = 2
R_FRAME = 0
R_COPIED = 1
N_RX_STATE = 3


# -- RX -----------------------------------------------------------------------------------


@njit(cache=True)
def segment_gso(
    ring, f, tagged, tpid, tci, length, kind, mss, vflags, cs,
    buf, meta, ts, slot, avail, total, rx_if, tsv, stats,
) -> int:  # fmt: skip
    """Cut a super-packet into segments in slots slot.. (packet/gso.py); returns the
    slots used, 0 when it was dropped (counted), -1 when it needs more than ``avail``
    slots now."""
    n, nbytes = segment(ring, f, tagged, tpid, tci, length, kind, mss, vflags, cs,
                        buf, meta, ts, slot, avail, total, rx_if, tsv)
    if n == GSO_WAIT:
        return -1
    if n == GSO_TOO_BIG:
        stats[S_TOO_LONG] += 1
        return 0
    if n <= 0:
        stats[S_GSO_DROPPED] += 1
        return 0
    stats[S_GSO_SEGMENTED] += 1
    stats[S_GSO_SEGMENTS] += n
    stats[S_RX_PACKETS] += n
    stats[S_RX_BYTES] += nbytes
    return n


# jumbo slots of a batch (int64 [J_COLS]): GSO super-packets kept whole (see batch.py)
J_USED = 0  # taken in this batch
J_SLOTS = 1  # there are (0: cut every super-packet into segments on receive)
J_BASE = 2  # offset of the first one in the batch buffer
J_COLS = 3


@njit(cache=True)
def _jumbo_words(jumbo):
    if jumbo is None:
        return np.zeros(J_COLS, np.int64)  # no jumbo slots
    return jumbo


@njit(cache=True)
def keep_whole(
    src, f, tagged, tpid, tci, length, gso, mss, cs, co, buf, meta, ts, slot, rx_if, tsv,
    stats, jumbo,
) -> int:  # fmt: skip
    """A GSO super-packet into a jumbo slot, whole, its checksum left partial: the graph
    sees one packet (F_GSO, M_GSO, M_CSUM) and it leaves with its virtio-net header.
    Offsets that do not fit the frame: dropped (counted)."""
    if length > JUMBO_SLOT - HEADROOM or length < 14 + 40 or mss <= 0:
        stats[S_GSO_DROPPED] += 1
        return 0
    d = jumbo[J_BASE] + jumbo[J_USED] * JUMBO_SLOT + HEADROOM
    copy_tagged(src, f, tagged, tpid, tci, 0, length, buf, d)
    et = rd16(buf, d + 12)
    l3 = 18 if et == 0x8100 or et == 0x88A8 else 14
    if cs < l3 + 20 or cs + co + 2 > length:
        stats[S_BAD_VNET] += 1
        return 0
    jumbo[J_USED] += 1
    reset_slot(meta, slot, rx_if, length)
    meta[M_OFF, slot] = d
    meta[M_FLAGS, slot] = F_GSO | F_CSUM_PARTIAL
    meta[M_GSO, slot] = gso | (mss << 8)
    meta[M_CSUM, slot] = (cs - l3) | (co << 16)
    ts[slot] = tsv
    stats[S_GSO_PASSED] += 1
    stats[S_RX_PACKETS] += 1
    stats[S_RX_BYTES] += length
    return 1


@njit(cache=True)
def rx_frame_data(
    src, f, snaplen, wire, tagged, tci, tpid, pkttype, tsv, vnet,
    buf, meta, ts, slot, avail, total, rx_if, stats, jumbo,
):  # fmt: skip
    """Move one received frame into slot.. ; returns the slots used (0: skipped or
    dropped, counted), or -1 when it must wait for the next batch.  Shared by both ring
    versions: the caller read the tpacket header and checked that the frame,
    src[f : f + snaplen], and with ``vnet`` its virtio_net_hdr right before it, lie
    inside the ring frame/block (or the copy buffer).  ``wire`` is the length on the
    wire (tp_len), the VLAN tag the kernel took out is ``tagged``/``tpid``/``tci``,
    ``tsv`` the timestamp in ns."""
    if pkttype == PACKET_OUTGOING:
        stats[S_RX_OUTGOING] += 1
        return 0
    if snaplen < wire:
        stats[S_RX_TRUNCATED] += 1
        return 0
    length = snaplen + (4 if tagged else 0)
    vflags = 0
    gso = 0
    mss = 0
    cs = 0
    co = 0
    if vnet:
        v = f - VNET_HDR_LEN
        vflags = np.int64(src[v])
        gso = np.int64(src[v + 1]) & ~VNET_GSO_ECN
        mss = np.int64(src[v + 4]) | (np.int64(src[v + 5]) << 8)
        cs = np.int64(src[v + 6]) | (np.int64(src[v + 7]) << 8)
        co = np.int64(src[v + 8]) | (np.int64(src[v + 9]) << 8)
    if gso != VNET_GSO_NONE:
        if jumbo[J_USED] < jumbo[J_SLOTS] and vflags & VNET_F_NEEDS_CSUM:
            return keep_whole(src, f, tagged, tpid, tci, length, gso, mss, cs, co, buf, meta,
                              ts, slot, rx_if, tsv, stats, jumbo)
        return segment_gso(
            src, f, tagged, tpid, tci, length, gso, mss, vflags, cs,
            buf, meta, ts, slot, avail, total, rx_if, tsv, stats,
        )  # fmt: skip
    if length > MAX_FRAME:
        stats[S_TOO_LONG] += 1
        return 0
    d = slot * SLOT + HEADROOM
    copy_tagged(src, f, tagged, tpid, tci, 0, length, buf, d)
    if vflags & VNET_F_NEEDS_CSUM:
        if not finish_csum(buf, d, length, cs, co):
            stats[S_BAD_VNET] += 1
            return 0
        stats[S_CSUM_FIXED] += 1
    reset_slot(meta, slot, rx_if, length)
    ts[slot] = tsv
    stats[S_RX_PACKETS] += 1
    stats[S_RX_BYTES] += length
    return 1


@njit(cache=True)
def rx_frame3(
    ring8, ring16, ring32, h, limit, vnet, buf, meta, ts, slot, avail, total, rx_if, stats,
    jumbo,
):  # fmt: skip
    """The frame whose tpacket3_hdr is at ring offset h (see :func:`rx_frame_data` for
    the result).  ``limit`` is the end of the block: nothing past it is read, whatever
    the header says (the walker checked that the header itself fits)."""
    snaplen = np.int64(ring32[(h + H3_SNAPLEN) >> 2])
    wire = np.int64(ring32[(h + H3_LEN) >> 2])
    status = ring32[(h + H3_STATUS) >> 2]
    f = h + np.int64(ring16[(h + H3_MAC) >> 1])
    if f + snaplen > limit or f - VNET_HDR_LEN < h + H3_HDRLEN:
        stats[S_RX_TRUNCATED] += 1
        return 0
    tagged = (status & TP_STATUS_VLAN_VALID) != 0
    tci = np.int64(ring32[(h + H3_VLAN_TCI) >> 2]) & 0xFFFF
    tpid = 0x8100
    if tagged and (status & TP_STATUS_VLAN_TPID_VALID):
        tpid = np.int64(ring16[(h + H3_VLAN_TPID) >> 1])
    tsv = np.int64(ring32[(h + H3_SEC) >> 2]) * 1_000_000_000 + np.int64(ring32[(h + H3_NSEC) >> 2])
    return rx_frame_data(
        ring8, f, snaplen, wire, tagged, tci, tpid, np.int64(ring8[h + H3_PKTTYPE]), tsv,
        vnet, buf, meta, ts, slot, avail, total, rx_if, stats, jumbo,
    )  # fmt: skip


@njit(cache=True)
def rx_frame2(
    ring8, ring16, ring32, h, frame_size, vnet, fd, copy, state,
    buf, meta, ts, slot, avail, total, rx_if, stats, jumbo,
):  # fmt: skip
    """The frame whose tpacket2_hdr is at ring offset h, a frame of ``frame_size``
    bytes (see :func:`rx_frame_data` for the result).  A TP_STATUS_COPY frame is read
    from its copy on the socket ``fd`` instead, received into ``copy`` once (the
    received length is kept in state[R_COPIED] while the frame waits for a batch)."""
    status = ring32[(h + H2_STATUS) >> 2]
    wire = np.int64(ring32[(h + H2_LEN) >> 2])
    snaplen = np.int64(ring32[(h + H2_SNAPLEN) >> 2])
    f = h + np.int64(ring16[(h + H2_MAC) >> 1])
    tagged = (status & TP_STATUS_VLAN_VALID) != 0
    tci = np.int64(ring16[(h + H2_VLAN_TCI) >> 1])
    tpid = 0x8100
    if tagged and (status & TP_STATUS_VLAN_TPID_VALID):
        tpid = np.int64(ring16[(h + H2_VLAN_TPID) >> 1])
    tsv = np.int64(ring32[(h + H2_SEC) >> 2]) * 1_000_000_000 + np.int64(ring32[(h + H2_NSEC) >> 2])
    pkttype = np.int64(ring8[h + H2_PKTTYPE])
    if status & TP_STATUS_COPY:
        # checked before anything else: every COPY frame takes its copy off the queue
        n = state[R_COPIED]
        if n == 0:
            n = sock_recv(fd, copy, copy.shape[0], MSG_DONTWAIT)
            if n <= 0:
                stats[S_RX_COPY_LOST] += 1
                return 0
            state[R_COPIED] = n
            stats[S_RX_COPIED] += 1
        vhl = VNET_HDR_LEN if vnet else 0
        if n < vhl:
            stats[S_RX_TRUNCATED] += 1
            return 0
        # a copy cut short by the buffer is shorter than tp_len: counted as truncated
        return rx_frame_data(
            copy, vhl, n - vhl, wire, tagged, tci, tpid, pkttype, tsv, vnet,
            buf, meta, ts, slot, avail, total, rx_if, stats, jumbo,
        )  # fmt: skip
    if f + snaplen > h + frame_size or f - VNET_HDR_LEN < h + H2_HDRLEN:
        stats[S_RX_TRUNCATED] += 1
        return 0
    return rx_frame_data(
        ring8, f, snaplen, wire, tagged, tci, tpid, pkttype, tsv, vnet,
        buf, meta, ts, slot, avail, total, rx_if, stats, jumbo,
    )  # fmt: skip


@njit(cache=True)
def rx_ring2_to_batch(
    ring8, ring16, ring32, state, nframes, frame_size, frames_per_block, block_size, vnet,
    fd, copy, buf, meta, ts, start, max_packets, rx_if, stats, jumbo=None,
) -> int:  # fmt: skip
    """TPACKET_V2: copy up to max_packets frames from the RX ring into slots start..;
    returns the slots filled.  Same contract as :func:`rx_ring_to_batch` (GSO segments
    may run on into the spare slots; a frame that does not fit waits for the next
    call), but each frame is handed over by the kernel as soon as it is written and
    goes back (TP_STATUS_KERNEL) as soon as it is consumed.  ``fd`` is the RX socket and
    ``copy`` the buffer for TP_STATUS_COPY frames (see the module docstring); ``jumbo``
    (J_* words) lets GSO super-packets stay whole in the batch's jumbo slots."""
    jw = _jumbo_words(jumbo)
    last = nframes - 1
    if (
        nframes <= 0 or frames_per_block <= 0 or frame_size < H2_HDRLEN + 32
        or frame_size % 16 != 0 or frames_per_block * frame_size > block_size
        or (last // frames_per_block) * block_size + (last % frames_per_block + 1) * frame_size
        > ring8.shape[0]
    ):  # fmt: skip
        return 0  # arguments that do not describe this ring: never read outside it
    cur = state[R_FRAME]
    if cur < 0 or cur >= nframes:
        return 0
    cap = meta.shape[1]
    end = min(start + max_packets, cap)
    total = cap - start
    slot = start
    k = cur % frames_per_block  # frame cur is frame k of the block at ring offset base
    base = (cur // frames_per_block) * block_size
    while slot < end:
        h = base + k * frame_size
        if (ring32[h >> 2] & TP_STATUS_USER) == 0:
            break
        ncur, nk, nbase = cur + 1, k + 1, base
        if ncur == nframes:
            ncur, nk, nbase = 0, 0, 0
        elif nk == frames_per_block:
            nk, nbase = 0, base + block_size
        # the next frame's header and first bytes: another CPU wrote them, and frames
        # 2 KiB apart defeat the hardware prefetcher (measured: -3% per frame drained)
        hn = nbase + nk * frame_size
        prefetch(ring8, hn)
        prefetch(ring8, hn + 64)
        prefetch(ring8, hn + 128)
        used = rx_frame2(
            ring8, ring16, ring32, h, frame_size, vnet, fd, copy, state,
            buf, meta, ts, slot, cap - slot, total, rx_if, stats, jw,
        )  # fmt: skip
        if used < 0:
            break
        ring32[h >> 2] = TP_STATUS_KERNEL
        cur, k, base = ncur, nk, nbase
        state[R_FRAME] = cur
        state[R_COPIED] = 0
        slot += used
    return slot - start


@njit(cache=True)
def rx_ring_to_batch(
    ring8, ring16, ring32, state, nblocks, block_size, vnet,
    buf, meta, ts, start, max_packets, rx_if, stats, jumbo=None,
) -> int:  # fmt: skip
    """TPACKET_V3: copy up to max_packets frames from the RX ring into slots start..;
    returns the slots filled.  The segments of a GSO super-packet that starts within max_packets
    may run on into the batch's spare slots (up to its capacity), so a small
    max_packets never starves a big super-packet.  A block goes back to the kernel
    (TP_STATUS_KERNEL) once every frame in it is consumed; a block left half-read
    resumes at the cursor in ``state``.  ``jumbo``: see rx_ring2_to_batch."""
    jw = _jumbo_words(jumbo)
    cap = meta.shape[1]
    end = min(start + max_packets, cap)
    total = cap - start
    slot = start
    while slot < end:
        blk = state[R_BLOCK]
        base = blk * block_size
        if (ring32[(base + BLK_STATUS) >> 2] & TP_STATUS_USER) == 0:
            break
        num = np.int64(ring32[(base + BLK_NUM_PKTS) >> 2])
        if state[R_DONE] == 0:
            state[R_NEXT] = base + np.int64(ring32[(base + BLK_FIRST) >> 2])
        full = False
        while state[R_DONE] < num:
            h = state[R_NEXT]
            if h < base or h + 64 > base + block_size:
                state[R_DONE] = num  # a walk outside the block: give the block back
                break
            used = rx_frame3(
                ring8, ring16, ring32, h, base + block_size, vnet, buf, meta, ts, slot,
                cap - slot, total, rx_if, stats, jw,
            )  # fmt: skip
            if used < 0:
                full = True
                break
            slot += used
            state[R_DONE] += 1
            state[R_NEXT] = h + np.int64(ring32[(h + H3_NEXT) >> 2])
            if slot >= end:
                full = state[R_DONE] < num
                break
        if full:
            break
        ring32[(base + BLK_STATUS) >> 2] = TP_STATUS_KERNEL
        state[R_BLOCK] = (blk + 1) % nblocks
        state[R_DONE] = 0
    return slot - start


# -- TX -----------------------------------------------------------------------------------


@njit(cache=True)
def batch_to_tx_ring(
    ring8, ring32, state, nframes, frame_size, frames_per_block, block_size, vnet,
    buf, meta, index, count, stats,
) -> int:  # fmt: skip
    """Copy frames buf[meta[M_OFF,i] : +meta[M_LEN,i]] for i in index[:count] into free
    TX frames (zeroed virtio_net_hdr first when vnet) and mark them SEND_REQUEST; returns
    the frames queued.  A full ring drops the rest of the batch (counted), never waits."""
    vhl = VNET_HDR_LEN if vnet else 0
    maxlen = frame_size - TX_DATA - vhl
    queued = 0
    for j in range(count):
        i = index[j]
        if i < 0 or i >= meta.shape[1]:
            stats[S_TX_TOO_LONG] += 1
            continue
        off = np.int64(meta[M_OFF, i])
        ln = np.int64(meta[M_LEN, i])
        if ln < 14 or ln > maxlen or off < 0 or off + ln > buf.shape[0]:
            stats[S_TX_TOO_LONG] += 1
            continue
        cur = state[0]
        fo = (cur // frames_per_block) * block_size + (cur % frames_per_block) * frame_size
        if ring32[fo >> 2] != TP_STATUS_AVAILABLE:
            stats[S_TX_RING_FULL] += count - j
            break
        p = fo + TX_DATA
        for k in range(vhl):
            ring8[p + k] = 0
        p += vhl
        for k in range(ln):
            ring8[p + k] = buf[off + k]
        ring32[(fo + H2_LEN) >> 2] = ln + vhl
        ring32[fo >> 2] = TP_STATUS_SEND_REQUEST
        state[0] = (cur + 1) % nframes
        queued += 1
        stats[S_TX_BYTES] += ln
    stats[S_TX_PACKETS] += queued
    return queued


@njit(cache=True)
def vnet_header(vh, n, buf, meta, i) -> None:
    """Row n of ``vh`` (uint8 [., 16]): the virtio_net_hdr packet i leaves with. A GSO
    super-packet kept whole says how to cut it and where its checksum goes (the kernel,
    or the receiver, finishes them); anything else: zeros (complete, not GSO)."""
    for w in range(VNET_HDR_LEN):
        vh[n, w] = 0
    f = meta[M_FLAGS, i]
    if not f & F_GSO:
        return
    off = np.int64(meta[M_OFF, i])
    gso = np.int64(meta[M_GSO, i])
    kind = gso & 0xFF
    l4 = np.int64(meta[M_L4, i])
    thl = 8 if kind == VNET_GSO_UDP_L4 else (np.int64(buf[l4 + 12]) >> 4) * 4
    hdr_len = l4 - off + thl
    cs = np.int64(meta[M_L3, i]) - off + (np.int64(meta[M_CSUM, i]) & 0xFFFF)
    co = np.int64(meta[M_CSUM, i]) >> 16
    mss = gso >> 8
    vh[n, 0] = VNET_F_NEEDS_CSUM if f & F_CSUM_PARTIAL else 0
    vh[n, 1] = kind
    vh[n, 2], vh[n, 3] = hdr_len & 0xFF, hdr_len >> 8
    vh[n, 4], vh[n, 5] = mss & 0xFF, (mss >> 8) & 0xFF
    vh[n, 6], vh[n, 7] = cs & 0xFF, cs >> 8
    vh[n, 8], vh[n, 9] = co & 0xFF, co >> 8


@njit(cache=True)
def batch_to_mmsg(
    mm, iov, mm_addr, iov_addr, buf, buf_addr, meta, index, start, count, stats,
    vh, vh_addr, vnet,
) -> int:  # fmt: skip
    """Fill struct mmsghdr / iovec arrays (one message per frame: its virtio_net_hdr
    from ``vh`` when ``vnet``, then the frame in the batch buffer) for frames
    index[start:count]; returns (messages filled, next start). ``iov`` has two rows per
    message."""
    n = 0
    cap = min(mm.shape[0], iov.shape[0] // 2, vh.shape[0])
    j = start
    while j < count and n < cap:
        i = index[j]
        off = np.int64(meta[M_OFF, i])
        ln = np.int64(meta[M_LEN, i])
        j += 1
        if ln < 14 or off < 0 or off + ln > buf.shape[0]:
            stats[S_TX_TOO_LONG] += 1
            continue
        v = 2 * n
        for w in range(8):
            mm[n, w] = np.uint64(0)
        mm[n, 2] = np.uint64(iov_addr) + np.uint64(16 * v)  # msg_iov
        if vnet:
            vnet_header(vh, n, buf, meta, i)
            iov[v, 0] = np.uint64(vh_addr) + np.uint64(16 * n)
            iov[v, 1] = np.uint64(VNET_HDR_LEN)
            v += 1
        iov[v, 0] = np.uint64(buf_addr) + np.uint64(off)
        iov[v, 1] = np.uint64(ln)
        mm[n, 3] = np.uint64(v - 2 * n + 1)  # msg_iovlen
        stats[S_TX_BYTES] += ln
        n += 1
    return n, j


@njit(cache=True, nogil=True)
def send_ring(
    fd, ring8, ring32, state, nframes, frame_size, frames_per_block, block_size, vnet,
    buf, meta, index, count, stats,
) -> int:  # fmt: skip
    """TX ring mode: queue the frames, then one send(MSG_DONTWAIT) to make the kernel
    transmit them (a failed kick leaves them queued for the next one: counted)."""
    n = batch_to_tx_ring(ring8, ring32, state, nframes, frame_size, frames_per_block,
                         block_size, vnet, buf, meta, index, count, stats)
    if n and kick(fd) < 0:
        stats[S_TX_ERRORS] += 1
    return n


@njit(cache=True, nogil=True)
def send_mmsg(
    fd, mm, iov, mm_addr, iov_addr, buf, buf_addr, meta, index, count, stats, vh, vh_addr, vnet,
) -> int:  # fmt: skip
    """sendmmsg mode: one sendmmsg(MSG_DONTWAIT) per ``mm`` rows of frames; what the
    socket buffer refuses is dropped (counted), never waited for. ``vnet``: the socket
    has PACKET_VNET_HDR (GSO super-packets leave whole)."""
    sent = 0
    pos = 0
    while pos < count:
        n, pos_next = batch_to_mmsg(mm, iov, mm_addr, iov_addr, buf, buf_addr, meta, index,
                                    pos, count, stats, vh, vh_addr, vnet)
        if n == 0:
            break
        r = np.int64(libc_sendmmsg(np.int32(fd), addr(mm), np.uint32(n), np.int32(MSG_DONTWAIT)))
        if r < 0:
            r = 0
        stats[S_TX_PACKETS] += r
        sent += r
        if r < n:
            stats[S_TX_RING_FULL] += n - r + (count - pos_next)
            break
        pos = pos_next
    return sent


def warm() -> None:
    """Compile (or load from the numba cache) the ring kernels with the argument types
    PacketSocket passes, on a synthetic ring: call it from the warm-up step so that
    parallel workers do not all compile them."""
    from vecroute.packet.batch import N_META

    ring8 = np.zeros(1 << 12, np.uint8)
    state = np.zeros(N_RX_STATE, np.int64)
    stats = np.zeros(N_STATS, np.int64)
    buf = np.zeros(SLOT * 2, np.uint8)
    meta = np.zeros((N_META, 2), np.int32)
    ts = np.zeros(2, np.int64)
    r16, r32 = ring8.view(np.uint16), ring8.view(np.uint32)
    rx_ring_to_batch(ring8, r16, r32, state, 1, 1 << 12, True, buf, meta, ts, 0, 2, 0, stats)
    copy = np.zeros(16, np.uint8)
    rx_ring2_to_batch(ring8, r16, r32, state, 2, 2048, 2, 1 << 12, True, -1, copy, buf, meta,
                      ts, 0, 2, 0, stats)  # fmt: skip
    for dtype in (np.int64, np.int32, np.intp):
        idx = np.zeros(1, dtype)
        batch_to_tx_ring(ring8, r32, state[:1].copy(), 2, 2048, 2, 1 << 12, True, buf, meta,
                         idx, 0, stats)  # fmt: skip
