"""IPv4 forwarding, input validation, local delivery and ARP, checked with scapy.

Every frame the router emits is parsed back with scapy and compared field by field with
what the input implies; checksums are recomputed by scapy (field deleted, packet rebuilt).
"""

from __future__ import annotations

import random
import struct

import pytest
from conftest import (
    BCAST,
    DST4,
    DST4_INCOMPLETE,
    DST4_NOROUTE,
    DST4_SMALL,
    H0,
    H0_IP4,
    N1,
    N1_IP4,
    R0,
    R0_IP4,
    R1,
    R1_IP4,
    R2_IP4,
    Router,
    assert_checksums,
    base_config,
    eth,
    inet_checksum,
    ip4_header_ok,
    mac_bytes,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import ICMP, IP, TCP, UDP, IPOption_RR, IPOption_Security
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw


def assert_forwarded4(sent: bytes, out: bytes, dst_mac: str = N1, src_mac: str = R1) -> None:
    """out is sent forwarded: new L2 header, TTL - 1, checksum right, all else byte-exact."""
    ip_in = sent[14:]
    tot = struct.unpack("!H", ip_in[2:4])[0]
    ip_in = ip_in[:tot]  # Ethernet padding is not part of the packet
    assert out[:6] == mac_bytes(dst_mac)
    assert out[6:12] == mac_bytes(src_mac)
    assert out[12:14] == b"\x08\x00"
    ip_out = out[14:]
    assert len(ip_out) == tot, "padding must be trimmed, nothing else"
    assert ip_out[8] == ip_in[8] - 1
    assert ip_out[:8] == ip_in[:8]
    assert ip_out[9] == ip_in[9]
    assert ip_out[12:] == ip_in[12:], "addresses, options and payload untouched"
    ihl = (ip_in[0] & 15) * 4
    assert ip4_header_ok(ip_out[:ihl])
    p = Ether(out)
    assert_checksums(p)


def test_forward_udp_tcp_icmp(router: Router) -> None:
    pkts = [
        eth() / IP(src=H0_IP4, dst=DST4, ttl=64, id=77) / UDP(sport=1234, dport=53) / (b"q" * 30),
        eth() / IP(src=H0_IP4, dst="203.0.113.99", ttl=2) / TCP(sport=5, dport=80, flags="S"),
        eth() / IP(src=H0_IP4, dst=DST4, ttl=255, tos=0xB8) / ICMP(id=9, seq=1) / b"data",
        eth() / IP(src=H0_IP4, dst=DST4, flags="DF") / UDP() / Raw(bytes(range(256)) * 5),
    ]
    res = router.run(pkts)
    assert len(res.tx) == len(pkts)
    for p, t in zip(pkts, res.tx, strict=True):
        assert t.ifname == "eth1"
        assert_forwarded4(bytes(p), t.data)
        q = t.pkt
        assert q[IP].ttl == p[IP].ttl - 1
        assert q[IP].src == p[IP].src and q[IP].dst == p[IP].dst
        assert bytes(q[IP].payload) == bytes(p[IP].payload)
    assert res.c("ip4-forwarded") == len(pkts)
    # one FIB lookup per forwarded packet, nothing else (FreeBSD r285051's lesson)
    assert res.c("fib-lookups") == len(pkts)
    assert res.drops == 0
    res.check_accounting()


def test_fib_lookups_one_per_packet_large_batch(router: Router) -> None:
    rng = random.Random(3)
    pkts = [
        eth()
        / IP(src=H0_IP4, dst=f"203.0.113.{rng.randrange(0, 128)}", ttl=rng.randrange(2, 256))
        / UDP(sport=rng.randrange(65536))
        / Raw(rng.randbytes(rng.randrange(0, 200)))
        for _ in range(600)
    ]
    res = router.run(pkts)
    assert len(res.tx) == 600
    # Only-forwarded traffic: exactly one lookup per packet. Packets the router generates
    # from an input cost one extra lookup each for the generated packet: an ICMP error is
    # routed back to the source, an echo reply is routed like any packet (see
    # test_echo_reply_costs_one_extra_lookup and test_icmp_errors.py).
    assert res.c("fib-lookups") == 600
    for p, t in zip(pkts, res.tx, strict=True):
        assert_forwarded4(bytes(p), t.data)


def test_ethernet_padding_trimmed(router: Router) -> None:
    p = eth() / IP(src=H0_IP4, dst=DST4) / UDP(sport=1, dport=2) / b"ab"
    frame = bytes(p) + b"\x00" * (60 - len(p))  # minimum-size Ethernet frame
    frame2 = bytes(p) + b"\xee" * 30  # junk trailer after the IP packet
    res = router.run([frame, frame2])
    assert len(res.tx) == 2
    for t in res.tx:
        assert len(t.data) == len(bytes(p))
        assert_forwarded4(bytes(p), t.data)


def test_ip_options_forwarded() -> None:
    r = Router()
    opts = [
        IPOption_RR(routers=["0.0.0.0"] * 3),
        IPOption_Security(
            security=0, compartment=0, handling_restrictions=0, transmission_control_code=b"abc"
        ),
    ]
    p = eth() / IP(src=H0_IP4, dst=DST4, options=opts) / UDP(sport=7, dport=7) / b"opts"
    assert p[IP].ihl is None and len(bytes(p[IP])) - 8 - 4 > 20
    res = r.run([p])
    assert len(res.tx) == 1
    q = res.tx[0].pkt
    assert q[IP].ihl > 5 and q[IP].ihl == IP(bytes(p[IP])).ihl
    assert bytes(q[IP].options[0]) == bytes(IP(bytes(p[IP])).options[0])
    assert_forwarded4(bytes(p), res.tx[0].data)


@settings(max_examples=100, deadline=None)
@given(
    ttl=st.integers(2, 255),
    ident=st.integers(0, 0xFFFF),
    tos=st.integers(0, 255),
    flags=st.sampled_from([0, 2]),
    payload=st.binary(max_size=64),
    steer=st.sampled_from([None, 0x0000, 0x0001, 0xFFFE, 0xFEFF, 0xFF00, 0x00FF]),
)
def test_ttl_checksum_against_scapy(ttl, ident, tos, flags, payload, steer) -> None:
    """The incrementally updated header checksum == scapy's recomputation, including
    headers steered (via the id field) to checksums near 0x0000 and 0xFFFF."""
    r = _ROUTER
    ip = IP(src=H0_IP4, dst=DST4, ttl=ttl, id=ident, tos=tos, flags=flags) / UDP() / payload
    if steer is not None:
        ip.id = 0
        hdr = bytearray(bytes(ip)[:20])
        hdr[10:12] = b"\0\0"
        # make the checksum after the TTL decrement equal `steer`
        hdr[8] -= 1
        s = sum(struct.unpack("!10H", bytes(hdr)))
        while s >> 16:
            s = (s & 0xFFFF) + (s >> 16)
        ident = ((~steer) & 0xFFFF) + ((~s) & 0xFFFF)
        while ident >> 16:
            ident = (ident & 0xFFFF) + (ident >> 16)
        ip.id = ident
    p = eth() / ip
    res = r.run([p])
    assert len(res.tx) == 1
    q = res.tx[0].pkt
    assert q[IP].ttl == ttl - 1
    hdr = bytearray(bytes(q[IP])[:20])
    hdr[10:12] = b"\0\0"
    assert q[IP].chksum == inet_checksum(bytes(hdr))
    p2 = q[IP].copy()
    del p2.chksum
    assert IP(bytes(p2)).chksum == q[IP].chksum
    if steer is not None:
        assert q[IP].chksum == steer


_ROUTER = Router()


# --- input validation ----------------------------------------------------------------------


def _ip4_raw(**kw) -> bytearray:
    return bytearray(bytes(IP(src=H0_IP4, dst=DST4, **kw) / UDP() / b"payload!"))


def _fix_ck(h: bytearray, ihl: int = 20) -> bytearray:
    h[10:12] = b"\0\0"
    h[10:12] = struct.pack("!H", inet_checksum(bytes(h[:ihl])))
    return h


def _bad_version() -> bytes:
    h = _ip4_raw()
    h[0] = 0x55
    return bytes(_fix_ck(h))


def _ihl_small() -> bytes:
    h = _ip4_raw()
    h[0] = 0x44
    return bytes(_fix_ck(h))


def _ihl_beyond() -> bytes:
    h = _ip4_raw()
    h[0] = 0x4F  # 60-byte header in a 36-byte packet
    return bytes(h)


def _tot_gt_frame() -> bytes:
    h = _ip4_raw()
    h[2:4] = struct.pack("!H", len(h) + 1)
    return bytes(_fix_ck(h))


def _tot_lt_ihl() -> bytes:
    h = _ip4_raw()
    h[2:4] = struct.pack("!H", 19)
    return bytes(_fix_ck(h))


def _bad_ck() -> bytes:
    h = _ip4_raw()
    h[10] ^= 0x01
    return bytes(h)


@pytest.mark.parametrize(
    "make,counter",
    [
        (_bad_version, "ip4-bad-version"),
        (_ihl_small, "ip4-bad-ihl"),
        (_ihl_beyond, "ip4-bad-ihl"),
        (_tot_gt_frame, "ip4-bad-length"),
        (_tot_lt_ihl, "ip4-bad-length"),
        (_bad_ck, "ip4-bad-checksum"),
        (lambda: bytes(IP(src=H0_IP4, dst=DST4))[:19], "ip4-too-short"),
        (lambda: bytes(IP(src="0.0.0.0", dst=DST4) / UDP()), "martian-source"),
        (lambda: bytes(IP(src="0.1.2.3", dst=DST4) / UDP()), "martian-source"),
        (lambda: bytes(IP(src="127.0.0.1", dst=DST4) / UDP()), "martian-source"),
        (lambda: bytes(IP(src="127.255.0.9", dst=DST4) / UDP()), "martian-source"),
        (lambda: bytes(IP(src="224.0.0.5", dst=DST4) / UDP()), "martian-source"),
        (lambda: bytes(IP(src="239.1.2.3", dst=DST4) / UDP()), "martian-source"),
        (lambda: bytes(IP(src="255.255.255.255", dst=DST4) / UDP()), "martian-source"),
        (lambda: bytes(IP(src=H0_IP4, dst="224.0.0.9") / UDP()), "ip4-dst-multicast"),
    ],
    ids=[
        "version",
        "ihl<5",
        "ihl>len",
        "tot>frame",
        "tot<ihl",
        "checksum",
        "short",
        "src0",
        "src0/8",
        "src127",
        "src127/8",
        "src224",
        "src239",
        "src-bcast",
        "dst-mcast",
    ],
)
def test_input_validation(router: Router, make, counter: str) -> None:
    frame = bytes(Ether(dst=R0, src=H0, type=0x0800)) + make()
    good = eth() / IP(src=H0_IP4, dst=DST4) / UDP() / b"ok"
    res = router.run([frame, good])
    assert res.c(counter) == 1
    assert res.drops == 1
    assert [t.orig for t in res.tx] == [1], "only the good packet leaves, no ICMP error"
    assert_forwarded4(bytes(good), res.tx[0].data)
    res.check_accounting()


def test_not_for_us_and_unknown_ethertype(router: Router) -> None:
    ip = IP(src=H0_IP4, dst=DST4) / UDP()
    res = router.run(
        [
            Ether(dst="02:00:00:00:00:99", src=H0) / ip,  # another host's MAC
            Ether(dst=R1, src=H0) / ip,  # the router's MAC, but of another interface
            Ether(dst=R0, src=H0, type=0x88B5) / (b"x" * 46),
            Ether(dst=R0, src=H0, type=0x8100) / (b"\x00\x05\x08\x00" + bytes(ip)),  # VLAN
            bytes(Ether(dst=R0, src=H0))[:13],
        ]
    )
    assert res.c("not-for-us") == 2
    assert res.c("unknown-ethertype") == 2
    assert res.c("eth-too-short") == 1
    assert res.tx == []
    res.check_accounting()


def test_no_route_and_blackhole() -> None:
    cfg = base_config()
    cfg["routes"].append({"prefix": "198.18.0.0/15", "blackhole": True})
    r = Router(cfg)
    res = r.run(
        [
            eth() / IP(src=H0_IP4, dst="198.18.1.1") / UDP(),
            eth() / IP(src=H0_IP4, dst="192.0.0.1") / UDP(),
        ]
    )
    assert res.c("blackhole") == 1
    assert res.c("no-route") == 1
    assert [t.pkt[ICMP].type for t in res.tx] == [3]  # only the no-route answers


# --- local delivery -------------------------------------------------------------------------


@pytest.mark.parametrize("dst", [R0_IP4, R1_IP4, R2_IP4])
def test_ping_router(router: Router, dst: str) -> None:
    data = bytes(range(200))
    p = eth() / IP(src=H0_IP4, dst=dst, ttl=33, id=4242) / ICMP(id=0x1234, seq=77) / data
    res = router.run([p])
    assert res.c("echo-reply-sent") == 1
    assert len(res.tx) == 1
    t = res.tx[0]
    assert t.ifname == "eth0"
    q = t.pkt
    assert q[Ether].dst == H0 and q[Ether].src == R0 and q[Ether].type == 0x0800
    assert q[IP].src == dst and q[IP].dst == H0_IP4
    assert q[IP].proto == 1 and q[IP].ttl > 1
    assert q[ICMP].type == 0 and q[ICMP].code == 0
    assert q[ICMP].id == 0x1234 and q[ICMP].seq == 77
    assert bytes(q[ICMP].payload) == data
    assert len(t.data) == len(p)
    assert_checksums(q)


@settings(max_examples=60, deadline=None)
@given(ident=st.integers(0, 0xFFFF), seq=st.integers(0, 0xFFFF), data=st.binary(max_size=300))
def test_echo_reply_checksum_property(ident: int, seq: int, data: bytes) -> None:
    """The reply's ICMP checksum (incrementally updated for the type change) is what scapy
    computes, for any id/seq/data, including checksums near 0x0000 / 0xFFFF."""
    p = eth() / IP(src=H0_IP4, dst=R0_IP4) / ICMP(id=ident, seq=seq) / data
    res = _ROUTER.run([p])
    assert len(res.tx) == 1
    q = res.tx[0].pkt
    assert q[ICMP].type == 0 and q[ICMP].id == ident and q[ICMP].seq == seq
    assert bytes(q[ICMP].payload) == data
    assert_checksums(q)


def test_echo_reply_all_zero_message(router: Router) -> None:
    """id 0, seq 0, no data: the reply is all zeros, so its checksum must be 0xFFFF (an
    RFC 1624 incremental update from the request's 0xF7FF gives 0x0000, which receivers
    reject)."""
    res = router.run([eth() / IP(src=H0_IP4, dst=R0_IP4) / ICMP(id=0, seq=0)])
    assert res.tx[0].pkt[ICMP].chksum == 0xFFFF
    assert_checksums(res.tx[0].pkt)


def test_ping_router_with_ttl1(router: Router) -> None:
    """TTL is only checked when forwarding: a TTL-1 packet to us is delivered."""
    res = router.run([eth() / IP(src=H0_IP4, dst=R0_IP4, ttl=1) / ICMP(id=1, seq=1) / b"x"])
    assert res.c("echo-reply-sent") == 1 and res.c("ttl-expired") == 0
    assert res.tx[0].pkt[ICMP].type == 0


def test_echo_reply_costs_one_extra_lookup(router: Router) -> None:
    """The echo request is looked up once (it is for us), the reply once more."""
    res = router.run([eth() / IP(src=H0_IP4, dst=R0_IP4) / ICMP() / b"x"])
    assert res.c("fib-lookups") == 2
    assert len(res.tx) == 1


@pytest.mark.parametrize(
    "p,counter",
    [
        (IP(src=H0_IP4, dst=R0_IP4) / UDP(dport=53, chksum=0x1234) / b"q", "local-bad-checksum"),
        (IP(src=H0_IP4, dst=R0_IP4) / TCP(dport=22, flags="R"), "tcp-port-closed"),
        (IP(src=H0_IP4, dst=R0_IP4) / ICMP(type=13), "local-unhandled"),
        (IP(src=H0_IP4, dst=R0_IP4) / ICMP(type=0), "local-unhandled"),
        (IP(src=H0_IP4, dst="255.255.255.255") / ICMP(), "local-unhandled"),
        (IP(src=H0_IP4, dst="255.255.255.255") / UDP(dport=67), "local-unhandled"),
        (IP(src=H0_IP4, dst=R0_IP4, flags="MF") / ICMP() / b"fragment", "reass-queued"),
        (IP(src=H0_IP4, dst=R0_IP4) / ICMP(chksum=0x1111) / b"x", "local-bad-checksum"),
    ],
    ids=["udp-badck", "tcp-rst", "timestamp", "echo-reply", "bcast-ping", "bcast-udp", "frag",
         "badck"],
)
def test_local_unhandled(router: Router, p, counter: str) -> None:
    res = router.run([eth() / p])
    assert res.c(counter) == 1
    assert res.tx == []
    assert res.c("icmp-error-sent") == 0
    res.check_accounting()


def test_arp_request_answered(router: Router) -> None:
    req = Ether(dst=BCAST, src=H0) / ARP(
        op=1, hwsrc=H0, psrc=H0_IP4, hwdst="00:00:00:00:00:00", pdst=R0_IP4
    )
    res = router.run([req])
    assert res.c("arp-reply-sent") == 1
    assert len(res.tx) == 1 and res.tx[0].ifname == "eth0"
    q = res.tx[0].pkt
    assert q[Ether].dst == H0 and q[Ether].src == R0 and q[Ether].type == 0x0806
    a = q[ARP]
    assert (a.hwtype, a.ptype, a.hwlen, a.plen, a.op) == (1, 0x0800, 6, 4, 2)
    assert a.hwsrc == R0 and a.psrc == R0_IP4
    assert a.hwdst == H0 and a.pdst == H0_IP4


def test_arp_other(router: Router) -> None:
    res = router.run(
        [
            Ether(dst=BCAST, src=H0) / ARP(op=1, hwsrc=H0, psrc=H0_IP4, pdst="198.51.100.77"),
            Ether(dst=R0, src=H0) / ARP(op=2, hwsrc=H0, psrc=H0_IP4, hwdst=R0, pdst=R0_IP4),
            Ether(dst=BCAST, src=H0) / ARP(op=1, hwsrc=H0, psrc=H0_IP4, pdst=H0_IP4),  # gratuitous
            Ether(dst=BCAST, src=H0, type=0x0806) / b"\x00\x01\x08\x00\x06",
            Ether(dst=BCAST, src=H0) / ARP(op=1, ptype=0x86DD, hwsrc=H0, psrc=H0_IP4, pdst=R0_IP4),
        ]
    )
    assert res.c("arp-not-for-us") == 1
    assert res.c("arp-punt") == 2 and res.c("punt") == 2
    assert res.c("arp-malformed") == 2
    assert res.tx == []
    res.check_accounting()


# --- neighbours -------------------------------------------------------------------------------


def test_incomplete_neighbor_arp_request_rate() -> None:
    r = Router()
    p = eth() / IP(src=H0_IP4, dst=DST4_INCOMPLETE) / UDP() / b"x"
    res = r.run([p, p, p], now_ns=10**9)
    assert res.c("neighbor-incomplete") == 3
    assert res.c("arp-request-sent") == 1
    assert res.c("neighbor-request-limited") == 2
    assert len(res.tx) == 1
    t = res.tx[0]
    assert t.ifname == "eth1" and t.generated
    q = t.pkt
    assert q[Ether].dst == BCAST and q[Ether].src == R1 and q[Ether].type == 0x0806
    a = q[ARP]
    assert (a.hwtype, a.ptype, a.hwlen, a.plen, a.op) == (1, 0x0800, 6, 4, 1)
    assert a.hwsrc == R1 and a.psrc == R1_IP4
    assert a.hwdst == "00:00:00:00:00:00" and a.pdst == "192.0.2.3"
    res.check_accounting()
    # within the second: no new request; after it: one more
    assert r.run([p], now_ns=10**9 + 999_999_999).c("arp-request-sent") == 0
    assert r.run([p], now_ns=2 * 10**9).c("arp-request-sent") == 1
    assert r.run([p], now_ns=2 * 10**9 + 10**8).c("arp-request-sent") == 0


def test_glean_arp_request_per_destination() -> None:
    """A connected host without a neighbour entry: one ARP request per host per second."""
    r = Router()
    pkts = [eth() / IP(src=H0_IP4, dst=f"192.0.2.{h}") / UDP() for h in (10, 11, 10, 12, 11)]
    res = r.run(pkts, now_ns=5 * 10**9)
    assert res.c("neighbor-incomplete") == 5
    assert res.c("arp-request-sent") == 3
    targets = sorted(t.pkt[ARP].pdst for t in res.tx)
    assert targets == ["192.0.2.10", "192.0.2.11", "192.0.2.12"]
    for t in res.tx:
        assert t.ifname == "eth1" and t.pkt[ARP].psrc == R1_IP4
    assert r.run(pkts, now_ns=5 * 10**9 + 5 * 10**8).c("arp-request-sent") == 0
    assert r.run(pkts, now_ns=6 * 10**9 + 1).c("arp-request-sent") == 3


def test_on_link_neighbor_host_route(router: Router) -> None:
    """A configured neighbour on a connected subnet is reachable directly."""
    p = eth() / IP(src=H0_IP4, dst=N1_IP4) / UDP() / b"direct"
    res = router.run([p])
    assert len(res.tx) == 1
    assert_forwarded4(bytes(p), res.tx[0].data, N1, R1)


def test_small_mtu_route_fragments_not_here(router: Router) -> None:
    """Sanity: a packet that fits the small link is forwarded untouched (eth2)."""
    p = eth() / IP(src=H0_IP4, dst=DST4_SMALL) / UDP() / (b"z" * 400)
    res = router.run([p])
    assert len(res.tx) == 1 and res.tx[0].ifname == "eth2"
    assert_forwarded4(bytes(p), res.tx[0].data, "02:00:00:00:cc:02", "02:00:00:00:00:03")


def test_forwarded_to_host_on_eth0(router: Router) -> None:
    p = Ether(dst=R1, src=N1) / IP(src="203.0.113.9", dst=H0_IP4) / UDP() / b"back"
    res = router.run([("eth1", p)])
    assert len(res.tx) == 1 and res.tx[0].ifname == "eth0"
    assert_forwarded4(bytes(p), res.tx[0].data, H0, R0)


def test_no_route_generated_unreachable(router: Router) -> None:
    res = router.run([eth() / IP(src=H0_IP4, dst=DST4_NOROUTE) / UDP()])
    assert res.c("no-route") == 1
    assert len(res.tx) == 1


def test_arp_request_not_for_us_is_punted_in_live_mode() -> None:
    # RFC 826 merge: with a live control plane, a request for another host still reaches
    # the neighbour table (which updates a known sender); counted once, as arp-punt
    from vecroute.graph.counters import C_ARP_PUNT
    from vecroute.graph.state import OPT_LIVE
    from vecroute.packet.batch import M_ERR, M_NEXT
    from vecroute.packet.node_ids import DONE_PUNT

    r = Router()
    r.state.opts[OPT_LIVE] = 1
    req = Ether(dst=BCAST, src=H0) / ARP(op=1, hwsrc=H0, psrc=H0_IP4, pdst="198.51.100.77")
    res = r.run([req])
    assert res.fates == ["punt"] and res.tx == []
    assert res.c("arp-punt") == 1 and res.c("punt") == 1 and res.c("arp-not-for-us") == 0
    b = r.batch
    assert int(b.meta[M_NEXT, 0]) == DONE_PUNT and int(b.meta[M_ERR, 0]) == C_ARP_PUNT
    assert b.frame(0) == bytes(req)  # handed over untouched
    res.check_accounting()
    # without a control plane it stays a drop
    r.state.opts[OPT_LIVE] = 0
    res = r.run([req])
    assert res.fates == ["drop"] and res.c("arp-not-for-us") == 1 and res.c("punt") == 0
