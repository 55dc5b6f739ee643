"""AF_PACKET rings: compiled ring kernels on synthetic rings, then live on veth pairs.

The synthetic tests lay out TPACKET_V3 blocks the way the kernel does and run the ring
kernels directly (no root needed): VLAN re-insertion, checksum completion, GSO
segmentation into spare slots, half-read blocks, drops.  The live tests (marked netns,
root) use Linux namespaces as peers and scapy as the independent oracle.
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

from vecroute.graph.node_ids import ETHERNET_INPUT
from vecroute.io import af_packet_ring as R
from vecroute.packet.batch import HEADROOM, M_LEN, M_NEXT, M_OFF, M_ORIG, M_RX, SLOT, PacketBatch

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


# -- synthetic TPACKET_V3 blocks ----------------------------------------------------------

BLOCK = 1 << 16
MACOFF = 92  # where the kernel puts the frame for a 68-byte header + 10-byte vnet header


def make_ring(blocks: list[list[dict]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A ring of user-owned blocks; each packet: frame (tag removed, as the kernel does),
    optional vnet=(flags, gso_type, gso_size, csum_start, csum_offset), vlan=tci,
    pkttype, wire_len (default len(frame))."""
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
            nxt = 0 if j == len(pkts) - 1 else (MACOFF + len(frame) + 15) & ~15
            wire = p.get("wire_len", len(frame))
            struct.pack_into("<IIIIIIHH", ring, h, nxt, 7, 5, len(frame), wire, status, MACOFF, 0)
            struct.pack_into("<I", ring, h + R.H3_VLAN_TCI, p.get("vlan", 0))
            ring[h + R.H3_PKTTYPE] = p.get("pkttype", 0)
            flags, gso, size, cs, co = p.get("vnet", (0, 0, 0, 0, 0))
            struct.pack_into("<BBHHHH", ring, h + MACOFF - 10, flags, gso, 0, size, cs, co)
            ring[h + MACOFF : h + MACOFF + len(frame)] = np.frombuffer(frame, np.uint8)
            h += nxt
    return ring, ring.view(np.uint16), ring.view(np.uint32)


def ring_recv(ring, batch: PacketBatch, state, start: int, max_packets: int) -> int:
    stats = np.zeros(R.N_STATS, np.int64)
    n = R.rx_ring_to_batch(
        ring[0], ring[1], ring[2], state, ring[0].size // BLOCK, BLOCK, True,
        batch.buf, batch.meta, batch.ts, start, max_packets, 3, stats,
    )  # fmt: skip
    ring_recv.stats = stats  # type: ignore[attr-defined]
    return n


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


def test_vlan_tag_put_back_and_checksum_finished() -> None:
    pkt = (
        Ether(src=MAC_A, dst=MAC_B)
        / Dot1Q(vlan=42, prio=5)
        / IP(src="192.0.2.1", dst="198.51.100.1")
        / UDP(sport=1234, dport=53)
        / Raw(b"x" * 33)
    )
    good = raw(pkt)
    seeded = pseudo_seeded(pkt, UDP)
    untagged = seeded[:12] + seeded[16:]  # the kernel keeps the tag in the tpacket header
    cs = 18 + 20
    ring = make_ring([[{"frame": untagged, "vlan": (5 << 13) | 42, "vnet": (1, 0, 0, cs, 6)}]])
    batch = PacketBatch(8)
    state = np.zeros(R.N_RX_STATE, np.int64)
    assert ring_recv(ring, batch, state, 0, 8) == 1
    assert batch.frame(0) == good
    assert ring_recv.stats[R.S_CSUM_FIXED] == 1
    assert ring[2][8 // 4] == R.TP_STATUS_KERNEL  # block handed back


@pytest.mark.parametrize("v6", [False, True])
def test_gso_segments_overflow_into_spare_slots(v6: bool) -> None:
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
    gso = R.VNET_GSO_TCPV6 if v6 else R.VNET_GSO_TCPV4
    small = (
        Ether(src=MAC_A, dst=MAC_B)
        / IP(src="192.0.2.1", dst="198.51.100.1")
        / UDP(sport=1, dport=2)
        / Raw(b"y" * 20)
    )
    ring = make_ring([[{"frame": raw(small)}, {"frame": frame, "vnet": (1, gso, 1000, cs, 16)}]])
    batch = PacketBatch(4, spare_factor=4)  # 16 slots
    state = np.zeros(R.N_RX_STATE, np.int64)
    # 3 slots asked for, starting at slot 2: the small frame takes one, the super-packet
    # starts inside the window and runs on into the spare slots
    n = ring_recv(ring, batch, state, 2, 3)
    assert n == 12
    assert batch.frame(2) == raw(small)
    segs = [Ether(batch.frame(i)) for i in range(3, 3 + 11)]
    st = ring_recv.stats
    assert st[R.S_GSO_SEGMENTED] == 1 and st[R.S_GSO_SEGMENTS] == 11
    data = b""
    for k, s in enumerate(segs):
        f = raw(s)
        assert checksums_ok(f)
        t = s[TCP]
        assert t.seq == (0xFFFFF000 + 1000 * k) & 0xFFFFFFFF
        last = k == 10
        assert bool(t.flags & 0x01) == last and bool(t.flags & 0x08) == last  # FIN, PSH
        assert bool(t.flags & 0x80) == (k == 0)  # CWR
        assert t.flags & 0x10  # ACK everywhere
        if v6:
            assert s[IPv6].plen == len(f) - 14 - 40
        else:
            assert s[IP].len == len(f) - 14 and s[IP].id == (0xFFFE + k) & 0xFFFF
        data += bytes(t.payload)
        i = 3 + k
        assert batch.meta[M_OFF, i] == i * SLOT + HEADROOM and batch.meta[M_RX, i] == 3
        assert batch.meta[M_NEXT, i] == ETHERNET_INPUT and batch.meta[M_ORIG, i] == i
        assert batch.meta[M_LEN, i] == len(f)
    assert data == payload
    assert len(raw(segs[0])) == 14 + (40 if v6 else 20) + 20 + 1000


def test_half_read_block_resumes_and_bad_frames_are_counted() -> None:
    frames = make_frames(5)
    pkts = [{"frame": f} for f in frames]
    pkts.insert(1, {"frame": frames[0], "pkttype": 4})  # PACKET_OUTGOING: skipped
    pkts.insert(3, {"frame": frames[0][:60], "wire_len": 900})  # clamped by the kernel
    pkts.append({"frame": bytes(2100)})  # longer than a slot and not GSO
    ring = make_ring([pkts, [{"frame": frames[4]}]])
    batch = PacketBatch(8)
    state = np.zeros(R.N_RX_STATE, np.int64)
    got = []
    stats = np.zeros(R.N_STATS, np.int64)
    for _ in range(4):
        n = ring_recv(ring, batch, state, 0, 2)
        stats += ring_recv.stats
        got += [batch.frame(i) for i in range(n)]
        if len(got) < 5:
            assert ring[2][8 // 4] == R.TP_STATUS_USER  # still ours: half read
    assert got == frames + [frames[4]]
    assert ring[2][8 // 4] == R.TP_STATUS_KERNEL and ring[2][(BLOCK + 8) // 4] == 0
    assert stats[R.S_RX_OUTGOING] == 1 and stats[R.S_RX_TRUNCATED] == 1
    assert stats[R.S_TOO_LONG] == 1 and stats[R.S_RX_PACKETS] == 6
    assert ring_recv(ring, batch, state, 0, 8) == 0  # kernel owns everything now


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
def test_rx_receives_kernel_sent_frames_intact(lab) -> None:
    h1, rt = lab.netns("h1"), lab.netns("rt")
    a, b = lab.veth(h1, rt, disable_ipv6=(True, True))
    # a small ring (4 blocks of 16 KB) goes round many times: blocks must be given back
    ps = packet_socket(rt, b, rx_blocks=4, block_size=1 << 14)
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
def test_tx_batch_reaches_the_peer_intact(lab) -> None:
    h1, rt = lab.netns("h1"), lab.netns("rt")
    a, b = lab.veth(h1, rt, disable_ipv6=(True, True))
    ps = packet_socket(rt, b)
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
def test_udp_from_a_linux_host_gets_a_valid_checksum(lab) -> None:
    from vecroute.io.netns import entered

    h1, h2, a, b = host_pair(lab)
    fixed = packet_socket(h2, b, tx_frames=0)
    plain = packet_socket(h2, b, tx_frames=0, vnet_hdr=False)
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
@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
def test_tcp_gso_super_packets_are_segmented(lab, family: int) -> None:
    from vecroute.io.netns import entered

    h1, h2, a, b = host_pair(lab)
    addr = "198.51.100.2" if family == socket.AF_INET else "2001:db8::2"
    data = os.urandom(1 << 16)
    ps = packet_socket(h2, b, tx_frames=0)
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
def test_udp_gso_is_segmented(lab) -> None:
    from vecroute.io.netns import entered

    h1, h2, a, b = host_pair(lab)
    ps = packet_socket(h2, b, tx_frames=0)
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
def test_fanout_splits_flows_between_sockets(lab) -> None:
    h1, rt = lab.netns("h1"), lab.netns("rt")
    a, b = lab.veth(h1, rt, disable_ipv6=(True, True))
    group = os.getpid() & 0xFFFF
    w1 = packet_socket(rt, b, fanout_group=group, tx_frames=0)
    w2 = packet_socket(rt, b, fanout_group=group, tx_frames=0)
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
def test_idle_wait_sleeps(lab) -> None:
    h1, rt = lab.netns("h1"), lab.netns("rt")
    a, b = lab.veth(h1, rt, disable_ipv6=(True, True))
    with packet_socket(rt, b) as ps:
        assert ps.wait(0) is False
        cpu0, wall0 = time.process_time(), time.monotonic()
        assert ps.wait(1000) is False
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    assert wall >= 0.95
    assert cpu < 0.02  # < 2% of one core


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
