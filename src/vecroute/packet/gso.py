"""GSO super-packets: the constants of the virtio-net header and software segmentation.

A Linux host on veth/tap hands over TCP (and UDP GSO) as super-packets up to 64 KiB with
a virtio_net_hdr saying how to cut them. Where they cannot travel whole, they are cut
here, as the kernel's tcp_gso_segment / __udp_gso_segment would: on receive (a port that
cannot pass them on) and in the graph's gso-segment node (a path that needs ordinary
packets: fragmentation, SRv6).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from vecroute.packet.batch import HEADROOM, MAX_FRAME, SLOT, reset_slot
from vecroute.packet.checksum import checksum, pseudo_header4, pseudo_header6
from vecroute.packet.headers import rd16, rd32, wr16, wr32

VNET_HDR_LEN = 10
VNET_F_NEEDS_CSUM = 1
VNET_GSO_NONE = 0
VNET_GSO_TCPV4 = 1
VNET_GSO_TCPV6 = 4
VNET_GSO_UDP_L4 = 5
VNET_GSO_ECN = 0x80
# segment()'s failures
GSO_MALFORMED = 0
GSO_WAIT = -1
GSO_TOO_BIG = -2


@njit(cache=True)
def copy_tagged(ring, f, tagged, tpid, tci, lo, hi, buf, dst) -> None:
    """Copy bytes [lo, hi) of the frame at ring[f:] to buf[dst:], as if the VLAN tag the
    kernel moved into the tpacket header (hardware-accelerated tag) were back in place
    after the MAC addresses; csum_start in the vnet header already counts it."""
    if not tagged:
        s = f + lo
        for k in range(hi - lo):
            buf[dst + k] = ring[s + k]
        return
    k = lo
    while k < hi and k < 12:
        buf[dst + k - lo] = ring[f + k]
        k += 1
    while k < hi and k < 16:
        j = k - 12
        if j == 0:
            v = tpid >> 8
        elif j == 1:
            v = tpid
        elif j == 2:
            v = tci >> 8
        else:
            v = tci
        buf[dst + k - lo] = np.uint8(v & 0xFF)
        k += 1
    if k < hi:
        s = f + k - 4
        d = dst + k - lo
        for m in range(hi - k):
            buf[d + m] = ring[s + m]


@njit(cache=True)
def finish_csum(buf, d, length, cs, co) -> bool:
    """Complete a CHECKSUM_PARTIAL checksum in place: the kernel seeded the field at
    cs+co with the pseudo-header sum; fold everything from cs to the end (what
    skb_checksum_help does).  False when the offsets do not fit the frame."""
    if cs < 14 or cs >= length or cs + co + 2 > length:
        return False
    c = checksum(buf, d + cs, length - cs, np.uint64(0))
    if c == 0:
        c = np.uint32(0xFFFF)  # CSUM_MANGLED_0: UDP must not send 0; TCP does not care
    wr16(buf, d + cs + co, c)
    return True


@njit(cache=True)
def segment(
    ring, f, tagged, tpid, tci, length, kind, mss, vflags, cs,
    buf, meta, ts, slot, avail, total, rx_if, tsv,
):  # fmt: skip
    """Cut a GSO super-packet (TCP over IPv4/IPv6, or UDP GSO) at ring[f:] (any byte
    array: an RX ring, a copy buffer, the batch buffer itself) into segments in slots
    slot..; returns (segments, bytes), or (GSO_MALFORMED | GSO_TOO_BIG | GSO_WAIT, 0):
    not TCP/UDP over IPv4/IPv6 or lying headers, a segment longer than a slot, more
    segments than ``avail`` slots now (``total``: ever).

    Like the kernel's tcp_gso_segment / __udp_gso_segment: every segment carries the
    headers; IPv4 total length, id (+1 per segment) and header checksum, IPv6 payload
    length are rewritten; TCP: sequence +mss per segment, FIN/PSH on the last segment
    only, CWR on the first only; UDP: length; the L4 checksum is computed in full.
    """
    d0 = slot * SLOT + HEADROOM
    n0 = min(length, MAX_FRAME)
    copy_tagged(ring, f, tagged, tpid, tci, 0, n0, buf, d0)
    if n0 < 14 + 40 or mss <= 0:
        return GSO_MALFORMED, 0
    et = rd16(buf, d0 + 12)
    l3 = 14
    if et == 0x8100 or et == 0x88A8:
        et = rd16(buf, d0 + 16)
        l3 = 18
    udp = kind == VNET_GSO_UDP_L4
    proto = 17 if udp else 6
    v4 = (kind == VNET_GSO_TCPV4 or udp) and et == 0x0800 and (buf[d0 + l3] >> 4) == 4
    v6 = (kind == VNET_GSO_TCPV6 or udp) and et == 0x86DD and (buf[d0 + l3] >> 4) == 6
    l4 = 0
    if v4:
        ihl = (buf[d0 + l3] & 15) * 4
        if ihl >= 20 and buf[d0 + l3 + 9] == proto:
            l4 = l3 + ihl
    elif v6:
        if (vflags & VNET_F_NEEDS_CSUM) and cs >= l3 + 40:
            l4 = cs  # the kernel knows where L4 starts, extension headers included
        elif buf[d0 + l3 + 6] == proto:
            l4 = l3 + 40
    if l4 == 0 or l4 + 20 > n0:
        return GSO_MALFORMED, 0
    thl = 8 if udp else (buf[d0 + l4 + 12] >> 4) * 4
    hlen = l4 + thl
    if thl < 8 or hlen >= length or hlen > n0:
        return GSO_MALFORMED, 0
    if hlen + mss > MAX_FRAME:
        return GSO_TOO_BIG, 0
    nseg = (length - hlen + mss - 1) // mss
    if nseg > total:
        return GSO_MALFORMED, 0
    if nseg > avail:
        return GSO_WAIT, 0
    seq0 = np.int64(rd32(buf, d0 + l4 + 4))
    fl0 = np.int64(buf[d0 + l4 + 13])
    id0 = np.int64(rd16(buf, d0 + l3 + 4))
    co = 6 if udp else 16
    nbytes = 0
    # segment 0 already sits in slot 0 as the frame's prefix; the others copy its
    # headers before they are rewritten, so segment 0 is fixed last
    for k in range(nseg - 1, -1, -1):
        s = slot + k
        d = s * SLOT + HEADROOM
        pstart = hlen + k * mss
        plen = min(mss, length - pstart)
        if k > 0:
            for m in range(hlen):
                buf[d + m] = buf[d0 + m]
            copy_tagged(ring, f, tagged, tpid, tci, pstart, pstart + plen, buf, d + hlen)
        l4len = thl + plen
        if v4:
            wr16(buf, d + l3 + 2, l4 - l3 + l4len)
            wr16(buf, d + l3 + 4, (id0 + k) & 0xFFFF)
            wr16(buf, d + l3 + 10, 0)
            wr16(buf, d + l3 + 10, checksum(buf, d + l3, l4 - l3, np.uint64(0)))
        else:
            wr16(buf, d + l3 + 4, l4 - l3 - 40 + l4len)
        if udp:
            wr16(buf, d + l4 + 4, l4len)
        else:
            wr32(buf, d + l4 + 4, (seq0 + k * mss) & 0xFFFFFFFF)
            fl = fl0
            if k != nseg - 1:
                fl &= ~0x09  # FIN, PSH
            if k != 0:
                fl &= ~0x80  # CWR
            buf[d + l4 + 13] = np.uint8(fl & 0xFF)
        wr16(buf, d + l4 + co, 0)
        if v4:
            acc = pseudo_header4(buf, d + l3, proto, l4len)
        else:
            acc = pseudo_header6(buf, d + l3, proto, l4len)
        c = checksum(buf, d + l4, l4len, acc)
        if c == 0 and udp:
            c = np.uint32(0xFFFF)
        wr16(buf, d + l4 + co, c)
        reset_slot(meta, s, rx_if, hlen + plen)
        ts[s] = tsv
        nbytes += hlen + plen
    return nseg, nbytes
