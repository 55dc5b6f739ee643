"""GSO super-packets kept whole: through the graph once, out with their virtio-net header.

A super-packet (what a Linux host hands a veth: TCP up to 64 KiB, its checksum only seeded)
is placed in a jumbo slot as the RX walker does, then run through the graph. Checked with
scapy: it leaves whole (TTL and IP checksum updated, payload intact, the virtio-net header
the kernel needs); where its segments do not fit the egress MTU it gets the ICMP error an
ordinary packet of that size would; with DF clear it is cut into segments (valid TCP
checksums, contiguous sequence numbers, the same payload) and those are fragmented.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import (
    DST4,
    DST4_SMALL,
    DST6,
    DST6_SMALL,
    H0,
    H0_IP4,
    H0_IP6,
    R0,
    R0_IP4,
    SMALL_MTU,
    Router,
    base_config,
)
from scapy.layers.inet import ICMP, IP, TCP, UDP, IPerror
from scapy.layers.inet6 import ICMPv6PacketTooBig, IPv6
from scapy.layers.l2 import Ether

from vecroute.graph import counters as C
from vecroute.graph.dataplane import fib_state
from vecroute.graph.dispatch import Graph
from vecroute.io.af_packet_ring import vnet_header
from vecroute.packet.batch import (
    F_CSUM_PARTIAL,
    F_GSO,
    HEADROOM,
    JUMBO_SLOT,
    M_CSUM,
    M_FLAGS,
    M_GSO,
    M_OFF,
    M_TX,
    SLOT,
    PacketBatch,
    reset_slot,
)
from vecroute.packet.gso import VNET_F_NEEDS_CSUM, VNET_GSO_TCPV4, VNET_GSO_TCPV6, VNET_GSO_UDP_L4

PAYLOAD = bytes(range(256)) * 80  # 20480 bytes


def _super(dst: str, *, df: bool = True, v6: bool = False, udp: bool = False) -> bytes:
    l4 = UDP(sport=5000, dport=6000) if udp else TCP(sport=5000, dport=6000, seq=1000,
                                                      flags="PA")
    ip = (IPv6(src=H0_IP6, dst=dst, hlim=64) if v6
          else IP(src=H0_IP4, dst=dst, ttl=64, id=77, flags="DF" if df else 0))
    f = bytearray(bytes(Ether(dst=R0, src=H0) / ip / l4 / PAYLOAD))
    # CHECKSUM_PARTIAL as the kernel hands it over: the L4 checksum field holds a seed,
    # not the sum; here a recognisable garbage value (a whole pass must not touch it)
    co = 6 if udp else 16
    l4off = 14 + (40 if v6 else 20)
    f[l4off + co : l4off + co + 2] = b"\x12\x34"
    return bytes(f)


def _run(rt: Router, frame: bytes, mss: int, *, v6=False, udp=False):
    """One super-packet in a jumbo slot, through the graph; returns (batch, tx indices)."""
    b = PacketBatch(32, jumbo=2)
    g = Graph(fib_state(rt.fib), b)
    d = b.capacity * SLOT + HEADROOM
    b.buf[d : d + len(frame)] = np.frombuffer(frame, np.uint8)
    reset_slot(b.meta, 0, 0, len(frame))
    b.meta[M_OFF, 0] = d
    b.meta[M_FLAGS, 0] = F_GSO | F_CSUM_PARTIAL
    kind = VNET_GSO_UDP_L4 if udp else (VNET_GSO_TCPV6 if v6 else VNET_GSO_TCPV4)
    b.meta[M_GSO, 0] = kind | (mss << 8)
    b.meta[M_CSUM, 0] = (40 if v6 else 20) | ((6 if udp else 16) << 16)
    b.n = 1
    b.nalloc[0] = 1
    tx = g.run(b, 0).copy()
    return b, g, tx


def _counters(g: Graph) -> dict[str, int]:
    return {c.name: int(v) for c, v in zip(C.COUNTERS, g.state.counters, strict=True) if v}


@pytest.mark.parametrize("v6", [False, True])
def test_super_packet_leaves_whole_with_its_vnet_header(v6):
    rt = Router(base_config())
    frame = _super(DST6 if v6 else DST4, v6=v6)
    mss = 1440 if v6 else 1448  # segments of exactly the 1500-byte MTU
    b, g, tx = _run(rt, frame, mss, v6=v6)
    assert list(tx) == [0], _counters(g)
    out = b.frame(0)
    assert len(out) == len(frame) and rt.names[int(b.meta[M_TX, 0])] == "eth1"
    p = Ether(out)
    if v6:
        assert p[IPv6].hlim == 63 and p[IPv6].plen == 20 + len(PAYLOAD)
    else:
        assert p[IP].ttl == 63 and p[IP].len == 20 + 20 + len(PAYLOAD)
        fresh = p[IP].copy()
        del fresh.chksum
        assert IP(bytes(fresh)).chksum == p[IP].chksum  # the incremental update is right
    assert bytes(p[TCP].payload) == PAYLOAD and p[TCP].chksum == 0x1234  # untouched
    assert b.meta[M_FLAGS, 0] & F_GSO
    vh = np.zeros((1, 16), np.uint8)
    vnet_header(vh, 0, b.buf, b.meta, 0)
    l3len = 40 if v6 else 20
    want = [VNET_F_NEEDS_CSUM, VNET_GSO_TCPV6 if v6 else VNET_GSO_TCPV4]
    assert list(vh[0, :2]) == want
    u16 = vh[0, :10].view(np.uint16)
    assert list(u16[1:5]) == [14 + l3len + 20, mss, 14 + l3len, 16]
    assert _counters(g).get("ip6-forwarded" if v6 else "ip4-forwarded") == 1


def test_segments_one_byte_over_the_mtu_get_packet_too_big():
    rt = Router(base_config())
    b, g, tx = _run(rt, _super(DST6, v6=True), 1441, v6=True)
    assert len(tx) == 1 and Ether(b.frame(int(tx[0])))[ICMPv6PacketTooBig].mtu == 1500


def test_super_packet_whose_segments_fit_a_small_mtu_still_leaves_whole():
    rt = Router(base_config())
    b, g, tx = _run(rt, _super(DST4_SMALL), SMALL_MTU - 40)
    assert list(tx) == [0] and len(b.frame(0)) == len(_super(DST4_SMALL))


def test_df_super_packet_too_big_for_the_egress_gets_frag_needed():
    rt = Router(base_config())
    b, g, tx = _run(rt, _super(DST4_SMALL), 1448)
    assert len(tx) == 1, _counters(g)
    p = Ether(b.frame(int(tx[0])))
    assert p[IP].src == R0_IP4 and p[IP].dst == H0_IP4 and p[ICMP].type == 3
    assert p[ICMP].code == 4 and p[ICMP].nexthopmtu == SMALL_MTU
    assert p[IPerror].dst == DST4_SMALL and len(p[IP]) <= 576
    assert not b.meta[M_FLAGS, int(tx[0])] & F_GSO  # an ordinary packet: no vnet GSO
    c = _counters(g)
    assert c["mtu-exceeded"] == 1 and c["icmp-error-sent"] == 1


def test_ipv6_super_packet_too_big_gets_packet_too_big():
    rt = Router(base_config())
    b, g, tx = _run(rt, _super(DST6_SMALL, v6=True), 1440, v6=True)
    assert len(tx) == 1
    p = Ether(b.frame(int(tx[0])))
    assert p[IPv6].dst == H0_IP6 and p[ICMPv6PacketTooBig].mtu == 1280
    assert len(p[IPv6]) <= 1280


def test_df_clear_super_packet_is_cut_and_its_segments_fragmented():
    rt = Router(base_config())
    frame = _super(DST4_SMALL, df=False)
    b, g, tx = _run(rt, frame, 1448)
    c = _counters(g)
    nseg = -(-len(PAYLOAD) // 1448)
    assert c["gso-segmented"] == 1 and c["fragments-created"] >= 2 * nseg, c
    frags = [Ether(b.frame(int(i))) for i in tx]
    assert all(len(f[IP]) <= SMALL_MTU and f[IP].dst == DST4_SMALL for f in frags)
    datagrams: dict[int, list] = {}
    for f in frags:
        datagrams.setdefault(f[IP].id, []).append(f[IP])
    assert len(datagrams) == nseg  # one IP id per segment, as the kernel numbers them
    segs = []
    for parts in datagrams.values():
        parts.sort(key=lambda ip: ip.frag)
        data = b"".join(bytes(ip.payload) for ip in parts)
        assert all(ip.ttl == 63 for ip in parts)
        hdr = parts[0].copy()
        hdr.remove_payload()
        hdr.flags, hdr.frag, hdr.len, hdr.chksum = 0, 0, None, None
        whole = IP(bytes(hdr / data))
        t = whole[TCP]
        t2 = TCP(bytes(t))
        del t2.chksum
        assert IP(bytes(IP(src=whole.src, dst=whole.dst) / t2))[TCP].chksum == t.chksum
        segs.append(t)
    segs.sort(key=lambda t: t.seq)
    assert [t.seq for t in segs] == [1000 + k * 1448 for k in range(nseg)]
    assert b"".join(bytes(t.payload) for t in segs) == PAYLOAD
    assert [("P" in str(t.flags)) for t in segs] == [False] * (nseg - 1) + [True]


def test_udp_super_packet_whole_and_cut():
    rt = Router(base_config())
    b, g, tx = _run(rt, _super(DST4, udp=True), 1400, udp=True)
    assert list(tx) == [0] and bytes(Ether(b.frame(0))[UDP].payload) == PAYLOAD
    b, g, tx = _run(rt, _super(DST4_SMALL, df=False, udp=True), 1400, udp=True)
    assert _counters(g)["gso-segmented"] == 1 and len(tx) > 15


def test_super_packet_with_a_lying_l4_header_is_dropped_when_cut():
    rt = Router(base_config())
    frame = bytearray(_super(DST4_SMALL, df=False))
    frame[14 + 20 + 12] = 0x10  # TCP data offset 4 bytes: below the minimum
    b, g, tx = _run(rt, bytes(frame), 1448)
    assert len(tx) == 0 and _counters(g).get("gso-bad") == 1


def test_jumbo_slot_room_is_its_own():
    # make_room on a packet in a jumbo slot uses that slot's bounds, not slot i's
    from vecroute.packet.batch import make_room, slot_region

    b = PacketBatch(4, jumbo=2)
    base = b.capacity * SLOT
    reset_slot(b.meta, 3, 0, 1000)
    b.meta[M_OFF, 3] = base + JUMBO_SLOT + HEADROOM
    assert slot_region(b.meta, 3) == (base + JUMBO_SLOT, base + 2 * JUMBO_SLOT)
    b.meta[6, 3] = base + JUMBO_SLOT + 14  # M_L3 with almost no room in front
    l3 = make_room(b.buf, b.meta, 3, 300, 500)
    assert base + JUMBO_SLOT + 300 <= l3 < base + 2 * JUMBO_SLOT
