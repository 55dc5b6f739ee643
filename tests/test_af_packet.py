"""AF_PACKET rings: compiled ring kernels on synthetic rings, then live on veth pairs.

The synthetic tests lay out TPACKET_V3 blocks and TPACKET_V2 frames the way the kernel
does and run the ring kernels directly (no root needed): VLAN re-insertion, checksum
completion, GSO segmentation into spare slots, half-read blocks, frames given back one
by one, V2 copies of packets bigger than a frame, lying header fields, drops.  The live
tests (marked netns, root) use Linux namespaces as peers and scapy as the independent
oracle; most run with both ring versions.
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import threading
import time

import numpy as np
import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw, raw

from vecroute.io import af_packet_ring as R
from vecroute.packet import gso as G
from vecroute.packet.batch import HEADROOM, M_LEN, M_NEXT, M_OFF, M_ORIG, M_RX, SLOT, PacketBatch
from vecroute.packet.node_ids import ETHERNET_INPUT

MAC_A = "02:00:00:00:00:0a"
MAC_B = "02:00:00:00:00:0b"
ETH_TEST = 0x88B5  # IEEE local experimental ethertype: never confused with host chatter


# -- oracles ------------------------------------------------------------------------------


def checksums_ok(frame: bytes) -> bool:
    """scapy recomputes the IPv4 header and TCP/UDP checksums; True when all match."""
    p = Ether(frame)
    fields = []
    if IP in p:
        fields.append((IP, p[IP].chksum))
    for layer in (TCP, UDP):
        if layer in p:
            fields.append((layer, p[layer].chksum))
    for layer, _ in fields:
        del p[layer].chksum
    q = Ether(raw(p))
    return all(q[layer].chksum == value for layer, value in fields)


def make_frames(n: int) -> list[bytes]:
    """n distinct frames, 60..1514 bytes, with the test ethertype."""
    out = []
    for i in range(n):
        size = 60 + (i * 97) % (1514 - 60 + 1)
        head = bytes.fromhex(MAC_B.replace(":", "") + MAC_A.replace(":", ""))
        head += ETH_TEST.to_bytes(2, "big") + i.to_bytes(4, "big")
        out.append(head + bytes((i + k) & 0xFF for k in range(size - len(head))))
    return out


# -- synthetic rings ----------------------------------------------------------------------

BLOCK = 1 << 16
MACOFF = 92  # where the kernel puts the frame for a 68-byte header + 10-byte vnet header
FRAME2 = 2176  # af_packet.RX_FRAME_SIZE
FPB2 = BLOCK // FRAME2  # 30 frames per 64 KiB block, 256 bytes left at its end
MACOFF2 = 76  # TPACKET_ALIGN(52 + 16) + 10 - 14: where the kernel puts a V2 frame
VLAN_BITS = R.TP_STATUS_VLAN_VALID | R.TP_STATUS_VLAN_TPID_VALID


def make_ring(blocks: list[list[dict]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A TPACKET_V3 ring of user-owned blocks; each packet: frame (tag removed, as the
    kernel does), optional vnet=(flags, gso_type, gso_size, csum_start, csum_offset),
    vlan=tci, tpid, pkttype, wire_len (default len(frame)), mac= / snaplen= to lie."""
    ring = np.zeros(BLOCK * len(blocks), dtype=np.uint8)
    for b, pkts in enumerate(blocks):
        base = b * BLOCK
        struct.pack_into("<III", ring, base + 8, R.TP_STATUS_USER, len(pkts), 48)
        h = base + 48
        for j, p in enumerate(pkts):
            frame = p["frame"]
            status = R.TP_STATUS_USER
            if "vlan" in p:
                status |= R.TP_STATUS_VLAN_VALID
                if "tpid" in p:
                    status |= R.TP_STATUS_VLAN_TPID_VALID
            nxt = 0 if j == len(pkts) - 1 else (MACOFF + len(frame) + 15) & ~15
            wire = p.get("wire_len", len(frame))
            snap = p.get("snaplen", len(frame))
            mac = p.get("mac", MACOFF)
            struct.pack_into("<IIIIIIHH", ring, h, nxt, 7, 5, snap, wire, status, mac, 0)
            struct.pack_into("<I", ring, h + R.H3_VLAN_TCI, p.get("vlan", 0))
            struct.pack_into("<H", ring, h + R.H3_VLAN_TPID, p.get("tpid", 0))
            ring[h + R.H3_PKTTYPE] = p.get("pkttype", 0)
            flags, gso, size, cs, co = p.get("vnet", (0, 0, 0, 0, 0))
            struct.pack_into("<BBHHHH", ring, h + MACOFF - 10, flags, gso, 0, size, cs, co)
            ring[h + MACOFF : h + MACOFF + len(frame)] = np.frombuffer(frame, np.uint8)
            h += nxt
    return ring, ring.view(np.uint16), ring.view(np.uint32)


def frame2_offset(i: int) -> int:
    return (i // FPB2) * BLOCK + (i % FPB2) * FRAME2


def write_frame2(ring: np.ndarray, i: int, p: dict, queue: socket.socket) -> None:
    """Frame i of a TPACKET_V2 ring, handed to user space, laid out as the kernel does;
    ``p`` as in make_ring, plus copy=True for a packet bigger than a frame: the ring
    keeps what fits, marked TP_STATUS_COPY, and the whole packet (vnet header first)
    goes to ``queue``, as the kernel queues it on the socket (copy="lost": it does not).
    """
    h = frame2_offset(i)
    frame = p["frame"]
    mac = p.get("mac", MACOFF2)
    status = R.TP_STATUS_USER
    if "vlan" in p:
        status |= VLAN_BITS  # the kernel always sets both for V2
    flags, gso, size, cs, co = p.get("vnet", (0, 0, 0, 0, 0))
    vh = struct.pack("<BBHHHH", flags, gso, 0, size, cs, co)
    data = frame
    if p.get("copy"):
        status |= R.TP_STATUS_COPY
        data = frame[: FRAME2 - mac]
        if p["copy"] != "lost":
            queue.send(vh + frame)
    ring[h : h + FRAME2] = 0
    struct.pack_into(
        "<IIIHHIIHH", ring, h, status, p.get("wire_len", len(frame)),
        p.get("snaplen", len(data)), mac, (mac + 14) & 0xFFFF, 7, 5, p.get("vlan", 0),
        p.get("tpid", 0x8100),
    )  # fmt: skip
    ring[h + R.H2_PKTTYPE] = p.get("pkttype", 0)
    if R.H2_HDRLEN + 10 <= mac <= FRAME2 - len(data):  # honest enough to lay out
        ring[h + mac - 10 : h + mac] = np.frombuffer(vh, np.uint8)
        ring[h + mac : h + mac + len(data)] = np.frombuffer(data, np.uint8)


class Synth:
    """A synthetic RX ring of either version and the compiled walker run over it (no
    root needed).  ``blocks``: lists of packets (V2: frames in order, blocks flattened);
    V2 frames past the packets belong to the kernel."""

    def __init__(self, version: int, blocks: list[list[dict]], nframes: int = 0,
                 copy_size: int = 1 << 18) -> None:  # fmt: skip
        self.version = version
        self.state = np.zeros(R.N_RX_STATE, np.int64)
        self.stats = np.zeros(R.N_STATS, np.int64)
        self.copy = np.zeros(copy_size, np.uint8)
        self.queue, self.sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.queue.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        if version == 3:
            self.ring = make_ring(blocks)
            return
        pkts = [p for b in blocks for p in b]
        self.nframes = nframes or len(pkts)
        ring = np.zeros(-(-self.nframes // FPB2) * BLOCK, np.uint8)
        for i, p in enumerate(pkts):
            write_frame2(ring, i, p, self.queue)
        self.ring = ring, ring.view(np.uint16), ring.view(np.uint32)

    def recv(self, batch: PacketBatch, start: int, max_packets: int) -> int:
        r8, r16, r32 = self.ring
        if self.version == 3:
            return R.rx_ring_to_batch(
                r8, r16, r32, self.state, r8.size // BLOCK, BLOCK, True,
                batch.buf, batch.meta, batch.ts, start, max_packets, 3, self.stats,
            )  # fmt: skip
        return R.rx_ring2_to_batch(
            r8, r16, r32, self.state, self.nframes, FRAME2, FPB2, BLOCK, True,
            self.sock.fileno(), self.copy, batch.buf, batch.meta, batch.ts, start,
            max_packets, 3, self.stats,
        )  # fmt: skip

    def owned(self, i: int) -> bool:
        """Block (V3) or frame (V2) i still handed to user space."""
        off = i * BLOCK + 8 if self.version == 3 else frame2_offset(i)
        return bool(self.ring[2][off // 4] & R.TP_STATUS_USER)

    def queued(self) -> int:
        """Copies left on the socket queue."""
        n = 0
        self.sock.setblocking(False)
        try:
            while True:
                self.sock.recv(1 << 18)
                n += 1
        except BlockingIOError:
            return n

    def __enter__(self) -> Synth:
        return self

    def __exit__(self, *exc: object) -> None:
        self.queue.close()
        self.sock.close()


def stat(s: Synth, name: str) -> int:
    return int(s.stats[R.STAT_INDEX[name]])


def pseudo_seeded(pkt, l4layer) -> bytes:
    """Frame bytes with the L4 checksum replaced by the folded pseudo-header sum."""
    frame = bytearray(raw(pkt))
    l3 = pkt[IP] if IP in pkt else pkt[IPv6]
    ip_raw = raw(l3)
    l4len = len(raw(pkt[l4layer]))
    proto = 6 if l4layer is TCP else 17
    if IP in pkt:
        ph = ip_raw[12:20] + bytes([0, proto]) + l4len.to_bytes(2, "big")
    else:
        ph = ip_raw[8:40] + l4len.to_bytes(4, "big") + bytes([0, 0, 0, proto])
    s = sum(int.from_bytes(ph[i : i + 2], "big") for i in range(0, len(ph), 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    off = len(frame) - l4len + (16 if l4layer is TCP else 6)
    frame[off : off + 2] = s.to_bytes(2, "big")
    return bytes(frame)


VERSIONS = pytest.mark.parametrize("version", [2, 3], ids=["V2", "V3"])


@VERSIONS
@pytest.mark.parametrize("tpid", [None, 0x88A8])
def test_vlan_tag_put_back_and_checksum_finished(version: int, tpid: int | None) -> None:
    pkt = (
        Ether(src=MAC_A, dst=MAC_B)
        / Dot1Q(vlan=42, prio=5)
        / IP(src="192.0.2.1", dst="198.51.100.1")
        / UDP(sport=1234, dport=53)
        / Raw(b"x" * 33)
    )
    good = raw(pkt)
    if tpid:
        good = good[:12] + tpid.to_bytes(2, "big") + good[14:]
    seeded = pseudo_seeded(pkt, UDP)
    untagged = seeded[:12] + seeded[16:]  # the kernel keeps the tag in the tpacket header
    cs = 18 + 20
    p = {"frame": untagged, "vlan": (5 << 13) | 42, "vnet": (1, 0, 0, cs, 6)}
    if tpid:
        p["tpid"] = tpid
    batch = PacketBatch(8)
    with Synth(version, [[p]]) as s:
        assert s.recv(batch, 0, 8) == 1
        assert batch.frame(0) == good
        assert stat(s, "rx_csum_fixed") == 1
        assert not s.owned(0)  # handed back


@VERSIONS
@pytest.mark.parametrize("v6", [False, True])
def test_gso_segments_overflow_into_spare_slots(version: int, v6: bool) -> None:
    payload = bytes(range(256)) * 40  # 10240 bytes, mss 1000 -> 11 segments
    l3 = (
        IPv6(src="2001:db8::1", dst="2001:db8::2")
        if v6
        else IP(src="192.0.2.1", dst="198.51.100.1", id=0xFFFE, flags="DF")
    )
    pkt = (
        Ether(src=MAC_A, dst=MAC_B)
        / l3
        / TCP(sport=40000, dport=5201, seq=0xFFFFF000, flags="PAFC", window=500)
        / Raw(payload)
    )
    frame = pseudo_seeded(pkt, TCP)
    cs = 14 + (40 if v6 else 20)
    gso = G.VNET_GSO_TCPV6 if v6 else G.VNET_GSO_TCPV4
    small = (
        Ether(src=MAC_A, dst=MAC_B)
        / IP(src="192.0.2.1", dst="198.51.100.1")
        / UDP(sport=1, dport=2)
        / Raw(b"y" * 20)
    )
    # V2: the super-packet is bigger than a frame, so it comes whole from the socket
    big = {"frame": frame, "vnet": (1, gso, 1000, cs, 16), "copy": True}
    batch = PacketBatch(4, spare_factor=4)  # 16 slots
    with Synth(version, [[{"frame": raw(small)}, big]]) as s:
        # 3 slots asked for, starting at slot 2: the small frame takes one, the
        # super-packet starts inside the window and runs on into the spare slots
        n = s.recv(batch, 2, 3)
        assert n == 12
        assert stat(s, "rx_copied") == (1 if version == 2 else 0)
        assert s.queued() == 0
        st = s.stats
    assert batch.frame(2) == raw(small)
    segs = [Ether(batch.frame(i)) for i in range(3, 3 + 11)]
    assert st[R.S_GSO_SEGMENTED] == 1 and st[R.S_GSO_SEGMENTS] == 11
    data = b""
    for k, seg in enumerate(segs):
        f = raw(seg)
        assert checksums_ok(f)
        t = seg[TCP]
        assert t.seq == (0xFFFFF000 + 1000 * k) & 0xFFFFFFFF
        last = k == 10
        assert bool(t.flags & 0x01) == last and bool(t.flags & 0x08) == last  # FIN, PSH
        assert bool(t.flags & 0x80) == (k == 0)  # CWR
        assert t.flags & 0x10  # ACK everywhere
        if v6:
            assert seg[IPv6].plen == len(f) - 14 - 40
        else:
            assert seg[IP].len == len(f) - 14 and seg[IP].id == (0xFFFE + k) & 0xFFFF
        data += bytes(t.payload)
        i = 3 + k
        assert batch.meta[M_OFF, i] == i * SLOT + HEADROOM and batch.meta[M_RX, i] == 3
        assert batch.meta[M_NEXT, i] == ETHERNET_INPUT and batch.meta[M_ORIG, i] == i
        assert batch.meta[M_LEN, i] == len(f)
    assert data == payload
    assert len(raw(segs[0])) == 14 + (40 if v6 else 20) + 20 + 1000


def _mixed_frames() -> tuple[list[dict], list[bytes]]:
    frames = make_frames(5)
    pkts = [{"frame": f} for f in frames]
    pkts.insert(1, {"frame": frames[0], "pkttype": 4})  # PACKET_OUTGOING: skipped
    pkts.insert(3, {"frame": frames[0][:60], "wire_len": 900})  # clamped by the kernel
    pkts.append({"frame": bytes(2100)})  # longer than a slot and not GSO
    return pkts, frames


def test_half_read_block_resumes_and_bad_frames_are_counted() -> None:
    pkts, frames = _mixed_frames()
    batch = PacketBatch(8)
    got = []
    with Synth(3, [pkts, [{"frame": frames[4]}]]) as s:
        for _ in range(4):
            n = s.recv(batch, 0, 2)
            got += [batch.frame(i) for i in range(n)]
            if len(got) < 5:
                assert s.owned(0)  # still ours: half read
        assert got == frames + [frames[4]]
        assert not s.owned(0) and not s.owned(1)
        assert stat(s, "rx_outgoing") == 1 and stat(s, "rx_truncated") == 1
        assert stat(s, "rx_too_long") == 1 and stat(s, "rx_packets") == 6
        assert s.recv(batch, 0, 8) == 0  # kernel owns everything now


def test_v2_frames_go_back_one_by_one_and_bad_frames_are_counted() -> None:
    pkts, frames = _mixed_frames()
    pkts.append({"frame": frames[4]})
    batch = PacketBatch(8)
    got = []
    with Synth(2, [pkts]) as s:
        consumed = [3, 6, 9, 9]  # frames given back after each call of 2 slots
        for k in range(4):
            n = s.recv(batch, 0, 2)
            got += [batch.frame(i) for i in range(n)]
            assert [s.owned(i) for i in range(len(pkts))] == [
                i >= consumed[k] for i in range(len(pkts))
            ], k
            assert s.state[R.R_FRAME] == consumed[k] % len(pkts)
        assert got == frames + [frames[4]]
        assert stat(s, "rx_outgoing") == 1 and stat(s, "rx_truncated") == 1
        assert stat(s, "rx_too_long") == 1 and stat(s, "rx_packets") == 6
        assert s.recv(batch, 0, 8) == 0  # kernel owns everything now


def test_v2_ring_wraps_around() -> None:
    """A 4-frame ring fed like the kernel does (only into frames given back, in ring
    order) carries 40 frames in order; a frame still owned stops the producer."""
    frames = make_frames(40)
    batch = PacketBatch(8)
    got: list[bytes] = []
    with Synth(2, [[]], nframes=4) as s:
        head = 0  # the kernel's next frame
        sent = 0
        while len(got) < 40:
            while sent < 40 and not s.owned(head % 4):
                write_frame2(s.ring[0], head % 4, {"frame": frames[sent]}, s.queue)
                head += 1
                sent += 1
            n = s.recv(batch, 0, 3)
            assert n == min(3, sent - len(got))
            got += [batch.frame(i) for i in range(n)]
        assert got == frames and s.state[R.R_FRAME] == 0


@VERSIONS
def test_lying_header_fields_are_bounded(version: int) -> None:
    """tp_mac / tp_snaplen that point outside the frame (V2) or block (V3), or into the
    header itself, are counted as truncated; honest frames around them pass intact."""
    frames = make_frames(4)
    end = FRAME2 if version == 2 else BLOCK
    bad = [
        {"frame": frames[0], "mac": 0xFFFF},
        {"frame": frames[0], "snaplen": 0xFFFFFFFF, "wire_len": 0},
        {"frame": frames[0], "snaplen": end, "wire_len": 0},
        {"frame": frames[0], "mac": (R.H2_HDRLEN if version == 2 else R.H3_HDRLEN) + 9},
    ]
    pkts = [{"frame": frames[0]}, *bad[:2], {"frame": frames[1]}, *bad[2:], {"frame": frames[2]}]
    batch = PacketBatch(8)
    with Synth(version, [pkts]) as s:
        assert s.recv(batch, 0, 8) == 3
        assert [batch.frame(i) for i in range(3)] == frames[:3]
        assert stat(s, "rx_truncated") == 4 and stat(s, "rx_packets") == 3


def test_v2_frame_filling_its_slot_exactly_passes_one_byte_more_does_not() -> None:
    fits = bytes(14) + bytes(range(256)) * 8  # 2062 bytes: too long for a batch slot
    mac = FRAME2 - len(fits)
    pkts = [
        {"frame": fits, "mac": mac},  # ends exactly at the end of the frame
        {"frame": fits, "mac": mac, "snaplen": len(fits) + 1, "wire_len": 0},
    ]
    batch = PacketBatch(8)
    with Synth(2, [pkts]) as s:
        assert s.recv(batch, 0, 8) == 0
        assert stat(s, "rx_too_long") == 1  # read in full, then judged by its length
        assert stat(s, "rx_truncated") == 1


def udp_gso(payload: bytes, mss: int) -> dict:
    """A UDP GSO super-packet as a Linux host hands it to veth (checksum only seeded)."""
    pkt = Ether(src=MAC_A, dst=MAC_B) / IP(src="192.0.2.1", dst="198.51.100.1") / UDP(
        sport=5, dport=6) / Raw(payload)  # fmt: skip
    return {"frame": pseudo_seeded(pkt, UDP), "vnet": (1, G.VNET_GSO_UDP_L4, mss, 34, 6)}


def test_v2_copies_come_whole_from_the_socket_in_ring_order() -> None:
    frames = make_frames(3)
    big = bytes.fromhex("02000000000b02000000000a88b5") + bytes(range(256)) * 12  # 3086
    pkts = [
        {"frame": frames[0]},
        {"frame": big, "copy": True},  # too long for a slot: dropped once received
        {"frame": big[:2500], "copy": True, "pkttype": 4},  # outgoing: skipped, copy taken
        {**udp_gso(b"a" * 1000 + b"b" * 1000 + b"c" * 500, 1000), "copy": True},
        {"frame": frames[2]},
        {"frame": big, "copy": "lost"},  # nothing queued: counted, not waited for
    ]
    batch = PacketBatch(8)
    with Synth(2, [pkts]) as s:
        assert s.recv(batch, 0, 8) == 5
        got = [batch.frame(i) for i in range(5)]
        assert got[0] == frames[0] and got[4] == frames[2]
        assert [bytes(Ether(f)[UDP].payload) for f in got[1:4]] == [
            b"a" * 1000, b"b" * 1000, b"c" * 500]  # fmt: skip
        assert all(checksums_ok(f) for f in got[1:4])
        assert stat(s, "rx_copied") == 3 and stat(s, "rx_copy_lost") == 1
        assert stat(s, "rx_too_long") == 1 and stat(s, "rx_outgoing") == 1
        assert s.queued() == 0 and not any(s.owned(i) for i in range(len(pkts)))


def test_v2_copy_waiting_for_room_is_received_once() -> None:
    payload = bytes(range(200)) * 50  # 10000 bytes in 10 segments of 1000
    gso = {**udp_gso(payload, 1000), "copy": True}
    first, after = make_frames(2)
    pkts = [{"frame": first}, {"frame": first}, gso, {"frame": after}]
    small, large = PacketBatch(4, spare_factor=2), PacketBatch(16)
    with Synth(2, [pkts]) as s:
        # from slot capacity-11 on: two frames, then 9 slots left for 10 segments, so the
        # super-packet waits (in the copy buffer) for the next batch
        assert s.recv(small, small.capacity - 11, 11) == 2
        assert s.owned(2) and s.state[R.R_COPIED] == len(gso["frame"]) + 10
        assert stat(s, "rx_copied") == 1 and s.queued() == 0
        assert s.recv(large, 0, 16) == 11
        assert stat(s, "rx_copied") == 1 and stat(s, "rx_copy_lost") == 0
        assert stat(s, "rx_gso_segments") == 10 and s.state[R.R_COPIED] == 0
    assert b"".join(bytes(Ether(large.frame(i))[UDP].payload) for i in range(10)) == payload
    assert large.frame(10) == after


def test_v2_copy_cut_short_by_the_buffer_is_truncated() -> None:
    frames = make_frames(2)
    big = frames[0] + bytes(3000)
    with Synth(2, [[{"frame": big, "copy": True}, {"frame": frames[1]}]], copy_size=2048) as s:
        batch = PacketBatch(8)
        assert s.recv(batch, 0, 8) == 1 and batch.frame(0) == frames[1]
        assert stat(s, "rx_truncated") == 1 and stat(s, "rx_copied") == 1


def test_v2_walker_refuses_a_ring_smaller_than_its_arguments() -> None:
    with Synth(2, [[{"frame": f} for f in make_frames(3)]]) as s:
        r8, r16, r32 = s.ring
        batch = PacketBatch(8)
        for nframes, fsize, fpb, bsize in (
            (FPB2 + 1, FRAME2, FPB2, BLOCK),  # a second block that is not there
            (3, FRAME2, FPB2 + 1, BLOCK),  # frames overrunning their block
            (3, 100, FPB2, BLOCK),  # frames too small for their header
        ):
            n = R.rx_ring2_to_batch(r8, r16, r32, s.state, nframes, fsize, fpb, bsize, True,
                                    s.sock.fileno(), s.copy, batch.buf, batch.meta, batch.ts,
                                    0, 8, 0, s.stats)  # fmt: skip
            assert n == 0
        assert s.owned(0) and s.recv(batch, 0, 8) == 3


def test_tx_ring_full_drops_and_counts() -> None:
    fsize, fpb, nframes = 2048, 2, 4  # 2 blocks of 4096 bytes
    ring = np.zeros(2 * 4096, np.uint8)
    r32 = ring.view(np.uint32)
    r32[(2 * 2048) // 4] = R.TP_STATUS_SEND_REQUEST  # frame 2 still owned by the kernel
    batch = PacketBatch(8)
    frames = make_frames(4)
    frames[1] = frames[1][:2006]  # the largest frame that fits with the vnet header
    data = np.frombuffer(b"".join(frames) + bytes(5000), np.uint8)
    offs = np.cumsum([0] + [len(f) for f in frames[:-1]] + [len(frames[-1])])
    lens = np.array([len(f) for f in frames] + [2007], np.int32)
    batch.load(
        data, offs.astype(np.int64), lens, np.zeros(5, np.int64), np.zeros(5, np.int32), 0, 5
    )
    stats = np.zeros(R.N_STATS, np.int64)
    state = np.zeros(1, np.int64)
    idx = np.array([4, 0, 1, 2, 3], np.int64)  # slot 4 holds a frame one byte too long
    n = R.batch_to_tx_ring(ring, r32, state, nframes, fsize, fpb, 4096, True, batch.buf,
                           batch.meta, idx, 5, stats)  # fmt: skip
    assert n == 2 and state[0] == 2
    assert stats[R.S_TX_TOO_LONG] == 1 and stats[R.S_TX_RING_FULL] == 2
    for k in range(2):
        f = frames[k]
        assert r32[k * 2048 // 4] == R.TP_STATUS_SEND_REQUEST
        assert r32[k * 2048 // 4 + 1] == len(f) + 10
        assert not ring[k * 2048 + 32 : k * 2048 + 42].any()
        assert ring[k * 2048 + 42 : k * 2048 + 42 + len(f)].tobytes() == f


# -- live: namespaces joined by veth ------------------------------------------------------


def _require_root_and_ip() -> None:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.fail("live tests need root and iproute2 (CI runs as root; `make test` installs ip)")


needs_root = pytest.mark.usefixtures("_root_and_ip")


@pytest.fixture
def _root_and_ip() -> None:
    _require_root_and_ip()


@pytest.fixture
def lab():
    from vecroute.io.netns import Lab

    with Lab("vt") as lab:
        yield lab


def packet_socket(ns: str, ifname: str, **kw):
    from vecroute.io.af_packet import PacketSocket
    from vecroute.io.netns import entered

    with entered(ns):
        return PacketSocket(ifname, **kw)


def raw_socket(ns: str, ifname: str, proto: int = 0) -> socket.socket:
    from vecroute.io.netns import entered

    with entered(ns):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(proto))
    s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE: a whole test burst
    s.bind((ifname, proto))
    return s


def drain(ps, want: int, keep, timeout: float = 3.0, max_packets: int = 256) -> list[bytes]:
    """Receive batches until ``want`` frames passing ``keep`` arrived (or timeout)."""
    batch = PacketBatch(256)
    out: list[bytes] = []
    end = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < end:
        if ps.wait(50):
            n = ps.recv_batch(batch.buf, batch.meta, batch.ts, 0, max_packets, 7)
            assert (batch.meta[M_RX, :n] == 7).all() and (batch.ts[:n] > 0).all()
            out += [f for f in (batch.frame(i) for i in range(n)) if keep(f)]
    return out


def is_test_frame(f: bytes) -> bool:
    return f[12:14] == ETH_TEST.to_bytes(2, "big")


@pytest.mark.netns
@needs_root
@VERSIONS
def test_rx_receives_kernel_sent_frames_intact(lab, version: int) -> None:
    h1, rt = lab.netns("h1"), lab.netns("rt")
    a, b = lab.veth(h1, rt, disable_ipv6=(True, True))
    # a small ring (4 blocks of 16 KB: V2 28 frames) goes round many times: blocks or
    # frames must be given back
    ps = packet_socket(rt, b, rx_blocks=4, block_size=1 << 14, rx_version=version)
    assert ps.rx_version == version
    frames = make_frames(600)
    got: list[bytes] = []
    with ps, raw_socket(h1, a) as tx:
        for k in range(0, len(frames), 15):
            for f in frames[k : k + 15]:
                tx.send(f)
            # small batches: blocks are read in several passes
            got += drain(ps, 15, is_test_frame, max_packets=7)
        st = ps.stats_dict()
    assert got == frames
    assert st["rx_packets"] >= 600 and st["rx_kernel_drops"] == 0
    assert st["rx_csum_fixed"] == 0  # raw frames carry no offload state


@pytest.mark.netns
@needs_root
@VERSIONS
def test_tx_batch_reaches_the_peer_intact(lab, version: int) -> None:
    h1, rt = lab.netns("h1"), lab.netns("rt")
    a, b = lab.veth(h1, rt, disable_ipv6=(True, True))
    ps = packet_socket(rt, b, rx_version=version)
    frames = make_frames(300)
    data = np.frombuffer(b"".join(frames), np.uint8)
    lens = np.array([len(f) for f in frames], np.int32)
    offs = np.concatenate([[0], np.cumsum(lens[:-1])]).astype(np.int64)
    batch = PacketBatch(256)
    with ps, raw_socket(h1, a, 0x0003) as rx:
        rx.settimeout(0.5)
        sent: list[bytes] = []
        for start in (0, 256):
            n = batch.load(data, offs, lens, np.zeros(300, np.int64), np.zeros(300, np.int32),
                           start, 300 - start)  # fmt: skip
            idx = np.arange(n, dtype=np.int64)[::-1].copy()  # any order, as given
            assert ps.send_batch(batch.buf, batch.meta, idx, n) == n
            sent += [frames[start + i] for i in idx]
        got: list[bytes] = []
        try:
            while len(got) < len(sent):
                f = rx.recv(4096)
                if is_test_frame(f):
                    got.append(f)
        except TimeoutError:
            pass
        assert got == sent
        st = ps.stats_dict()
        assert st["tx_packets"] == 300 and st["tx_ring_full"] == 0 and st["tx_errors"] == 0
        # our own transmissions never come back on the RX ring
        assert drain(ps, 1, is_test_frame, timeout=0.2) == []


def host_pair(lab):
    """Two Linux hosts on one veth, offloads at their defaults (checksum + TSO on); the
    PacketSocket listens on h2's end, so h2's kernel answers and TCP runs for real."""
    h1, h2 = lab.netns("h1"), lab.netns("h2")
    a, b = lab.veth(h1, h2)
    for ns, dev, k in ((h1, a, 1), (h2, b, 2)):
        lab.addr(ns, dev, f"198.51.100.{k}/24")
        lab.addr(ns, dev, f"2001:db8::{k}/64")
    return h1, h2, a, b


@pytest.mark.netns
@needs_root
@VERSIONS
def test_udp_from_a_linux_host_gets_a_valid_checksum(lab, version: int) -> None:
    from vecroute.io.netns import entered

    h1, h2, a, b = host_pair(lab)
    fixed = packet_socket(h2, b, tx_frames=0, rx_version=version)
    plain = packet_socket(h2, b, tx_frames=0, vnet_hdr=False, rx_version=version)
    with fixed, plain:
        with entered(h1):
            u4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            u6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        with u4, u6:
            u4.sendto(b"hello v4 " * 11, ("198.51.100.2", 9))
            u6.sendto(b"hello v6 " * 13, ("2001:db8::2", 9))

            def is_udp9(f: bytes) -> bool:
                p = Ether(f)
                return UDP in p and p[UDP].dport == 9

            good = drain(fixed, 2, is_udp9)
            bad = drain(plain, 2, is_udp9)
    assert len(good) == 2 and all(checksums_ok(f) for f in good)
    assert {bytes(Ether(f)[UDP].payload)[:8] for f in good} == {b"hello v4", b"hello v6"}
    # the pitfall the vnet header fixes: without it the checksum is only the seed
    assert len(bad) == 2 and not any(checksums_ok(f) for f in bad)
    assert fixed.stats_dict()["rx_csum_fixed"] >= 2


@pytest.mark.netns
@needs_root
@VERSIONS
@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
def test_tcp_gso_super_packets_are_segmented(lab, family: int, version: int) -> None:
    from vecroute.io.netns import entered

    h1, h2, a, b = host_pair(lab)
    addr = "198.51.100.2" if family == socket.AF_INET else "2001:db8::2"
    data = os.urandom(1 << 16)
    ps = packet_socket(h2, b, tx_frames=0, rx_version=version)
    with entered(h2):
        srv = socket.socket(family)
    with entered(h1):
        cli = socket.socket(family)
    received = bytearray()
    with ps, srv, cli:
        srv.bind((addr, 5201))
        srv.listen()

        def serve() -> None:
            conn, _ = srv.accept()
            with conn:
                while len(received) < len(data) and (chunk := conn.recv(1 << 16)):
                    received.extend(chunk)

        th = threading.Thread(target=serve)
        th.start()
        cli.connect((addr, 5201))
        cli.sendall(data)  # one 64 KB write: TSO hands veth super-packets
        th.join(10)
        assert bytes(received) == data

        def is_data(f: bytes) -> bool:
            p = Ether(f)
            return TCP in p and p[TCP].dport == 5201 and len(p[TCP].payload) > 0

        segs = drain(ps, 10**9, is_data, timeout=0.3)
        st = ps.stats_dict()
    assert st["rx_gso_segmented"] >= 1 and st["rx_too_long"] == 0
    assert st["rx_gso_segments"] > st["rx_gso_segmented"]
    assert st["rx_truncated"] == 0 and st["rx_copy_lost"] == 0
    # V2: every super-packet was bigger than a ring frame and came through the socket
    assert st["rx_copied"] == (st["rx_gso_segmented"] if version == 2 else 0)
    by_seq: dict[int, bytes] = {}
    for f in segs:
        assert len(f) <= 1514 and checksums_ok(f)
        p = Ether(f)
        if IP in p:
            assert p[IP].len == len(f) - 14
        else:
            assert p[IPv6].plen == len(f) - 54
        by_seq[p[TCP].seq] = bytes(p[TCP].payload)
    seqs = sorted(by_seq)
    stream = b""
    for s in seqs:  # contiguous sequence numbers carrying exactly what was written
        assert s == seqs[0] + len(stream)
        stream += by_seq[s]
    assert stream == data


@pytest.mark.netns
@needs_root
def test_v2_copy_memory_bounds_the_queued_super_packets(lab) -> None:
    """With rx_copy_memory at its minimum the kernel queues one whole super-packet at a
    time: the others arrive truncated (counted), and ring and queue stay in step."""
    from vecroute.io.netns import entered

    h1, h2, a, b = host_pair(lab)
    ps = packet_socket(h2, b, tx_frames=0, rx_version=2, rx_copy_memory=1)
    with entered(h2):
        srv = socket.socket()
    with entered(h1):
        cli = socket.socket()
    data = os.urandom(1 << 19)
    with ps, srv, cli:
        srv.bind(("198.51.100.2", 5201))
        srv.listen()
        received = bytearray()

        def serve() -> None:
            conn, _ = srv.accept()
            with conn:
                while len(received) < len(data) and (chunk := conn.recv(1 << 16)):
                    received.extend(chunk)

        th = threading.Thread(target=serve)
        th.start()
        cli.connect(("198.51.100.2", 5201))
        cli.sendall(data)  # nobody reads the PacketSocket meanwhile
        th.join(10)
        assert bytes(received) == data  # the socket only watches

        def is_data(f: bytes) -> bool:
            p = Ether(f)
            return TCP in p and p[TCP].dport == 5201 and len(p[TCP].payload) > 0

        segs = drain(ps, 10**9, is_data, timeout=0.3)
        st = ps.stats_dict()
    assert st["rx_copied"] >= 1 and st["rx_truncated"] >= 1 and st["rx_copy_lost"] == 0
    assert st["rx_copied"] == st["rx_gso_segmented"]
    assert all(checksums_ok(f) for f in segs)

@pytest.mark.netns
@needs_root
@VERSIONS
def test_udp_gso_is_segmented(lab, version: int) -> None:
    from vecroute.io.netns import entered

    h1, h2, a, b = host_pair(lab)
    ps = packet_socket(h2, b, tx_frames=0, rx_version=version)
    payload = bytes(range(250)) * 32  # 8000 bytes in 1000-byte datagrams
    with ps:
        with entered(h1):
            u4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            u6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        with u4, u6:
            for u, dst in ((u4, "198.51.100.2"), (u6, "2001:db8::2")):
                u.setsockopt(socket.IPPROTO_UDP, 103, 1000)  # UDP_SEGMENT: one GSO send
                u.sendto(payload, (dst, 4000))

            def is_4000(f: bytes) -> bool:
                p = Ether(f)
                return UDP in p and p[UDP].dport == 4000

            got = drain(ps, 16, is_4000)
        st = ps.stats_dict()
    assert len(got) == 16 and st["rx_gso_segmented"] == 2
    for fam in (IP, IPv6):
        dgrams = [Ether(f) for f in got if fam in Ether(f)]
        assert all(checksums_ok(raw(p)) for p in dgrams)
        assert all(p[UDP].len == 8 + 1000 for p in dgrams)
        assert b"".join(bytes(p[UDP].payload) for p in dgrams) == payload


@pytest.mark.netns
@needs_root
@VERSIONS
def test_fanout_splits_flows_between_sockets(lab, version: int) -> None:
    h1, rt = lab.netns("h1"), lab.netns("rt")
    a, b = lab.veth(h1, rt, disable_ipv6=(True, True))
    group = os.getpid() & 0xFFFF
    w1 = packet_socket(rt, b, fanout_group=group, tx_frames=0, rx_version=version)
    w2 = packet_socket(rt, b, fanout_group=group, tx_frames=0, rx_version=version)
    flows = 64
    frames = [
        raw(
            Ether(src=MAC_A, dst=MAC_B)
            / IP(src="192.0.2.1", dst="198.51.100.9")
            / UDP(sport=10000 + k % flows, dport=7)
            / Raw(k.to_bytes(4, "big"))
        )
        for k in range(4 * flows)
    ]
    with w1, w2, raw_socket(h1, a) as tx:
        for f in frames:
            tx.send(f)

        def is_ours(f: bytes) -> bool:
            return f[23] == 17 and f[36:38] == b"\x00\x07"

        g1 = drain(w1, len(frames), is_ours, timeout=0.5)
        g2 = drain(w2, len(frames), is_ours, timeout=0.5)
    assert sorted(g1 + g2) == sorted(frames)  # each frame exactly once
    assert g1 and g2
    ports1 = {Ether(f)[UDP].sport for f in g1}
    ports2 = {Ether(f)[UDP].sport for f in g2}
    assert not ports1 & ports2  # a flow stays on one worker


@pytest.mark.netns
@needs_root
@VERSIONS
def test_idle_wait_sleeps(lab, version: int) -> None:
    h1, rt = lab.netns("h1"), lab.netns("rt")
    a, b = lab.veth(h1, rt, disable_ipv6=(True, True))
    with packet_socket(rt, b, rx_version=version) as ps:
        assert ps.wait(0) is False
        cpu0, wall0 = time.process_time(), time.monotonic()
        assert ps.wait(1000) is False
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    assert wall >= 0.95
    assert cpu < 0.02  # < 2% of one core


@pytest.mark.netns
@needs_root
@VERSIONS
def test_vlan_tagged_frames_arrive_with_their_tag(lab, version: int) -> None:
    """The receiving veth moves the tag into the skb (the tpacket header): it must be put
    back, 802.1Q and 802.1ad alike."""
    h1, rt = lab.netns("h1"), lab.netns("rt")
    a, b = lab.veth(h1, rt, disable_ipv6=(True, True))
    frames = []
    for k, tpid in enumerate((0x8100, 0x88A8, 0x8100)):
        f = raw(Ether(src=MAC_A, dst=MAC_B) / Dot1Q(vlan=100 + k, prio=k, type=ETH_TEST)
                / Raw(bytes(range(k, k + 60))))  # fmt: skip
        frames.append(f[:12] + tpid.to_bytes(2, "big") + f[14:])
    ps = packet_socket(rt, b, tx_frames=0, rx_version=version)
    with ps, raw_socket(h1, a) as tx:
        for f in frames:
            tx.send(f)

        def tagged_test(f: bytes) -> bool:
            return f[16:18] == ETH_TEST.to_bytes(2, "big")

        got = drain(ps, 3, tagged_test)
    assert got == frames


@pytest.mark.netns
@needs_root
@VERSIONS
def test_rx_ring_args_drive_the_walker(lab, version: int) -> None:
    """A compiled caller walking the ring itself with rx_ring_args() shares the cursor
    and the counters with recv_batch."""
    from vecroute.io.af_packet import PacketSocket

    with pytest.raises(ValueError, match="rx_version must be 2 or 3"):
        PacketSocket("lo", rx_version=1)
    h1, rt = lab.netns("h1"), lab.netns("rt")
    a, b = lab.veth(h1, rt, disable_ipv6=(True, True))
    frames = make_frames(20)
    walker = R.rx_ring2_to_batch if version == 2 else R.rx_ring_to_batch
    ps = packet_socket(rt, b, tx_frames=0, rx_version=version)
    batch = PacketBatch(256)
    got: list[bytes] = []
    with ps, raw_socket(h1, a) as tx:
        args = ps.rx_ring_args()
        assert len(args) == (11 if version == 2 else 7)
        for f in frames:
            tx.send(f)
        end = time.monotonic() + 3
        while len(got) < 10 and time.monotonic() < end:
            ps.wait(50)
            n = walker(*args, batch.buf, batch.meta, batch.ts, 0, 10 - len(got), 5,
                       ps.stats_array)  # fmt: skip
            got += [batch.frame(i) for i in range(n)]
        got += drain(ps, 10, is_test_frame)  # recv_batch goes on where the walker stopped
        del args
        assert ps.stats_dict()["rx_packets"] == 20
    assert got == frames


@pytest.mark.netns
@needs_root
def test_v2_hands_a_lone_frame_over_at_once_v3_waits_for_its_timer(lab) -> None:
    """One frame at a time: a V2 ring shows it to wait(0) within milliseconds, a V3 ring
    only when the block-retire timer fires (500 ms here, so it is plain to see)."""
    h1, rt = lab.netns("h1"), lab.netns("rt")
    a, b = lab.veth(h1, rt, disable_ipv6=(True, True))
    v2 = packet_socket(rt, b, tx_frames=0, rx_version=2, block_timeout_ms=500)
    v3 = packet_socket(rt, b, tx_frames=0, rx_version=3, block_timeout_ms=500)
    batch = PacketBatch(8)
    frames = make_frames(5)
    d2: list[float] = []
    d3: list[float] = []
    with v2, v3, raw_socket(h1, a) as tx:
        for f in frames:
            t0 = time.monotonic()
            tx.send(f)
            while not v2.wait(0) and time.monotonic() - t0 < 1:
                pass
            d2.append(time.monotonic() - t0)
            assert v2.recv_batch(batch.buf, batch.meta, batch.ts, 0, 8, 0) == 1
            assert batch.frame(0) == f
            assert v3.wait(2000)
            d3.append(time.monotonic() - t0)
            assert v3.recv_batch(batch.buf, batch.meta, batch.ts, 0, 8, 0) == 1
            assert batch.frame(0) == f
    assert max(d2) < 0.05, d2
    # the timer's phase is random: each V3 wait is somewhere in 0..500 ms, and all five
    # under 100 ms has a probability of 0.2**5
    assert max(d3) > 0.1 and max(d3) < 0.5 + 0.3, d3


@pytest.mark.netns
@needs_root
def test_errors_are_one_line(lab) -> None:
    from vecroute.io.af_packet import InterfaceError, PacketSocket

    with pytest.raises(InterfaceError, match=r"^nonexistent0: no such interface$"):
        PacketSocket("nonexistent0")
    ns = lab.netns("e")
    tun = lab.name("t")
    lab.run(ns, ["ip", "tuntap", "add", "mode", "tun", "name", tun])
    with pytest.raises(InterfaceError, match=rf"^{tun}: not an Ethernet interface"):
        packet_socket(ns, tun)
    pid = os.fork()
    if pid == 0:  # child: give up root, then try
        code = 1
        try:
            os.setuid(65534)
            PacketSocket("lo")
        except PermissionError as e:
            code = 0 if "root" in str(e) and "\n" not in str(e) else 2
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.netns
@needs_root
def test_lab_cleans_up_even_on_failure() -> None:
    from vecroute.io.netns import Lab

    made: list[str] = []
    with pytest.raises(RuntimeError, match="boom"), Lab("vc") as lab:
        ns = lab.netns("x")
        a, b = lab.veth(ns, None)  # one end left in the root namespace
        made += [ns, a, b]
        assert os.path.exists(f"/sys/class/net/{b}")
        raise RuntimeError("boom")
    out = os.popen("ip netns list").read()
    assert made[0] not in out
    assert not os.path.exists(f"/sys/class/net/{made[2]}")


@pytest.mark.netns
def test_sendmmsg_tx_mode_delivers_a_batch_intact():
    """tx_mode="sendmmsg" (the router's default on veth): one sendmmsg per batch, frames in
    index order, byte-exact at the peer."""
    if os.geteuid() != 0:
        pytest.fail("needs root (network namespaces), as in CI")
    from scapy.all import IP, UDP, Ether

    from vecroute.io.af_packet import PacketSocket
    from vecroute.io.netns import Lab, entered
    from vecroute.packet.batch import PacketBatch

    frames = [
        bytes(
            Ether(dst="02:00:00:00:00:01")
            / IP(src="192.0.2.1", dst="198.51.100.1")
            / UDP(sport=1000 + i)
            / (b"x" * (i % 50))
        )
        for i in range(300)
    ]
    with Lab("vmm") as lab:
        a_ns, b_ns = lab.netns("a"), lab.netns("b")
        a, b = lab.veth(a_ns, b_ns, disable_ipv6=(True, True))
        with entered(a_ns):
            tx = PacketSocket(a, tx_mode="sendmmsg")
        with entered(b_ns):
            rx = PacketSocket(b, tx_frames=0)
        with tx, rx:
            data = np.frombuffer(b"".join(frames), np.uint8)
            lens = np.array([len(f) for f in frames], np.int32)
            offs = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
            bt = PacketBatch(512)
            bt.load(data, offs, lens, np.zeros(300, np.int64), np.zeros(300, np.int32), 0, 300)
            order = np.arange(300, dtype=np.int32)[::-1].copy()
            assert tx.send_batch(bt.buf, bt.meta, order, 300) == 300
            got: list[bytes] = []
            rb = PacketBatch(512)
            deadline = time.monotonic() + 3
            while len(got) < 300 and time.monotonic() < deadline:
                rx.wait(50)
                k = rx.recv_batch(rb.buf, rb.meta, rb.ts, 0, 512, 0)
                got += [rb.frame(i) for i in range(k)]
            assert got == frames[::-1]
            assert tx.stats_dict()["tx_packets"] == 300
