"""ICMP / ICMPv6 errors (RFC 792, 1191, 1812, 4443), parsed back and checked with scapy.

A generated error costs one FIB lookup of its own (the route back to the source), on top
of the lookup of the packet that caused it: fib-lookups counts 2 for one offending packet.
"""

from __future__ import annotations

import pytest
from conftest import (
    BCAST,
    DST4,
    DST4_NOROUTE,
    DST4_SMALL,
    DST6,
    DST6_NOROUTE,
    DST6_SMALL,
    H0,
    H0_IP4,
    H0_IP6,
    N1,
    R0,
    R0_IP4,
    R0_IP6,
    R1,
    R1_IP4,
    R1_IP6,
    SMALL_MTU,
    Router,
    assert_checksums,
    base_config,
    eth,
)
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import (
    ICMPv6DestUnreach,
    ICMPv6EchoRequest,
    ICMPv6PacketTooBig,
    ICMPv6TimeExceeded,
    IPv6,
    IPv6ExtHdrFragment,
)
from scapy.layers.l2 import ARP, Ether

V4_MAX, V6_MAX = 576, 1280


def check_error4(
    tx,
    sent,
    typ: int,
    code: int,
    *,
    src: str = R0_IP4,
    ifname: str = "eth0",
    dst_mac: str = H0,
    src_mac: str = R0,
    param: bytes = b"\0\0\0\0",
) -> None:
    """The frame is a correct ICMPv4 error about ``sent`` (an Ether/IP scapy packet)."""
    assert tx.ifname == ifname
    q = tx.pkt
    assert q[Ether].dst == dst_mac and q[Ether].src == src_mac and q[Ether].type == 0x0800
    ip = q[IP]
    assert ip.version == 4 and ip.ihl == 5 and ip.proto == 1
    assert ip.src == src, "from our address on the interface the error leaves by"
    assert ip.dst == sent[IP].src
    assert ip.frag == 0 and not ip.flags.MF
    assert ip.ttl > 1
    orig = bytes(sent[IP])
    quote_len = min(len(orig), V4_MAX - 28)
    assert ip.len == 28 + quote_len <= V4_MAX
    assert len(tx.data) == 14 + ip.len
    icmp_raw = bytes(ip)[20:]
    assert icmp_raw[0] == typ and icmp_raw[1] == code
    assert icmp_raw[4:8] == param
    assert icmp_raw[8:] == orig[:quote_len], "the quote is the original, as received"
    assert_checksums(q)


def check_error6(
    tx,
    sent,
    typ: int,
    code: int,
    *,
    src: str = R0_IP6,
    ifname: str = "eth0",
    dst_mac: str = H0,
    src_mac: str = R0,
    param: bytes = b"\0\0\0\0",
) -> None:
    assert tx.ifname == ifname
    q = tx.pkt
    assert q[Ether].dst == dst_mac and q[Ether].src == src_mac and q[Ether].type == 0x86DD
    ip = q[IPv6]
    assert ip.version == 6 and ip.nh == 58 and ip.hlim > 1
    assert ip.src == src and ip.dst == sent[IPv6].src
    orig = bytes(sent[IPv6])
    quote_len = min(len(orig), V6_MAX - 48)
    assert ip.plen == 8 + quote_len and 40 + ip.plen <= V6_MAX
    assert len(tx.data) == 14 + 40 + ip.plen
    icmp_raw = bytes(ip)[40:]
    assert icmp_raw[0] == typ and icmp_raw[1] == code
    assert icmp_raw[4:8] == param
    assert icmp_raw[8:] == orig[:quote_len]
    assert_checksums(q)


# --- IPv4 --------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 100, 520, 548, 549, 1400])
def test_time_exceeded4(router: Router, size: int) -> None:
    p = (
        eth()
        / IP(src=H0_IP4, dst=DST4, ttl=1, id=99)
        / UDP(sport=33434, dport=33435)
        / (b"T" * size)
    )
    res = router.run([p])
    assert res.c("ttl-expired") == 1 and res.c("icmp-error-sent") == 1
    assert res.c("fib-lookups") == 2, "one lookup for the packet, one for the error"
    assert len(res.tx) == 1
    check_error4(res.tx[0], p, 11, 0)
    assert res.tx[0].pkt[ICMP].type == 11
    res.check_accounting()


def test_time_exceeded4_ttl0_and_quote_has_original_ttl(router: Router) -> None:
    p = eth() / IP(src=H0_IP4, dst=DST4, ttl=0) / TCP(sport=1, dport=2)
    res = router.run([p])
    check_error4(res.tx[0], p, 11, 0)
    assert bytes(res.tx[0].pkt[IP])[28 + 8] == 0  # TTL as it arrived


def test_net_unreachable4(router: Router) -> None:
    p = eth() / IP(src=H0_IP4, dst=DST4_NOROUTE) / UDP() / b"where?"
    res = router.run([p])
    assert res.c("no-route") == 1 and res.c("icmp-error-sent") == 1
    assert res.c("fib-lookups") == 2
    check_error4(res.tx[0], p, 3, 0)


def test_frag_needed(router: Router) -> None:
    p = eth() / IP(src=H0_IP4, dst=DST4_SMALL, flags="DF", ttl=9) / UDP() / (b"D" * 1000)
    res = router.run([p])
    assert res.c("mtu-exceeded") == 1 and res.c("icmp-error-sent") == 1
    assert len(res.tx) == 1
    # RFC 1191: next-hop MTU in the low 16 bits of the second word
    check_error4(res.tx[0], p, 3, 4, param=b"\0\0" + SMALL_MTU.to_bytes(2, "big"))
    assert res.tx[0].pkt[ICMP].nexthopmtu == SMALL_MTU
    # the quote starts with the original header, TTL untouched
    assert bytes(res.tx[0].pkt[IP])[28 + 8] == 9


def test_error_source_is_egress_interface_address(router: Router) -> None:
    """Received on eth0 from a source routed via eth1: the error leaves by eth1 from
    eth1's address, even though the offending packet came in on eth0."""
    p = eth() / IP(src="203.0.113.9", dst="198.51.100.99", ttl=1) / UDP()
    res = router.run([p])
    check_error4(res.tx[0], p, 11, 0, src=R1_IP4, ifname="eth1", dst_mac=N1, src_mac=R1)
    p2 = Ether(dst=R1, src=N1) / IP(src="203.0.113.9", dst=DST4_NOROUTE) / UDP()
    res = router.run([("eth1", p2)])
    check_error4(res.tx[0], p2, 3, 0, src=R1_IP4, ifname="eth1", dst_mac=N1, src_mac=R1)


def test_echo_request_with_ttl1_gets_error(router: Router) -> None:
    p = eth() / IP(src=H0_IP4, dst=DST4, ttl=1) / ICMP(type=8, id=5, seq=6) / b"traceroute"
    res = router.run([p])
    check_error4(res.tx[0], p, 11, 0)


@pytest.mark.parametrize(
    "p,counter",
    [
        # the original is itself an ICMP error
        (
            eth()
            / IP(src=H0_IP4, dst=DST4, ttl=1)
            / ICMP(type=3, code=1)
            / IP(src=DST4, dst=H0_IP4)
            / UDP(),
            "ttl-expired",
        ),
        (eth() / IP(src=H0_IP4, dst=DST4_NOROUTE) / ICMP(type=11) / IP() / UDP(), "no-route"),
        (
            eth() / IP(src=H0_IP4, dst=DST4_SMALL, flags="DF") / ICMP(type=12) / (b"z" * 900),
            "mtu-exceeded",
        ),
        # non-first fragments
        (eth() / IP(src=H0_IP4, dst=DST4, ttl=1, frag=10) / (b"f" * 16), "ttl-expired"),
        (eth() / IP(src=H0_IP4, dst=DST4_NOROUTE, frag=3, flags="MF") / (b"f" * 16), "no-route"),
        # link-layer broadcast / multicast destination: not even forwarded (RFC 1812 5.3.4)
        (Ether(dst=BCAST, src=H0) / IP(src=H0_IP4, dst=DST4, ttl=1) / UDP(),
         "l2-multicast-unicast"),
        (
            Ether(dst="01:00:5e:00:00:01", src=H0) / IP(src=H0_IP4, dst=DST4_NOROUTE) / UDP(),
            "no-route",
        ),
        # IP broadcast / multicast destination (never routed, so never answered)
        (eth() / IP(src=H0_IP4, dst="255.255.255.255", ttl=1) / UDP(), "local-unhandled"),
        (
            Ether(dst="01:00:5e:00:00:05", src=H0) / IP(src=H0_IP4, dst="224.0.0.5", ttl=1) / UDP(),
            "ip4-dst-multicast",
        ),
        # invalid sources are dropped before anything could answer them
        (eth() / IP(src="0.0.0.0", dst=DST4, ttl=1) / UDP(), "martian-source"),
        (eth() / IP(src="127.0.0.1", dst=DST4_NOROUTE) / UDP(), "martian-source"),
        (eth() / IP(src="224.1.1.1", dst=DST4, ttl=1) / UDP(), "martian-source"),
        (eth() / IP(src="255.255.255.255", dst=DST4, ttl=1) / UDP(), "martian-source"),
    ],
    ids=[
        "icmp-err-ttl",
        "icmp-err-noroute",
        "icmp-err-mtu",
        "nonfirst-ttl",
        "nonfirst-noroute",
        "l2-bcast",
        "l2-mcast",
        "l3-bcast",
        "l3-mcast",
        "src0",
        "src127",
        "src-mcast",
        "src-bcast",
    ],
)
def test_no_error4(router: Router, p, counter: str) -> None:
    res = router.run([p])
    assert res.c(counter) == 1
    assert res.tx == []
    assert res.c("icmp-error-sent") == 0
    res.check_accounting()


def test_first_fragment_gets_error(router: Router) -> None:
    p = eth() / IP(src=H0_IP4, dst=DST4, ttl=1, flags="MF", frag=0) / UDP() / (b"1" * 64)
    res = router.run([p])
    check_error4(res.tx[0], p, 11, 0)


def test_ttl_checked_before_mtu(router: Router) -> None:
    """RFC 1812 5.2.1 order: an expiring packet that is also too big gets time exceeded."""
    p = eth() / IP(src=H0_IP4, dst=DST4_SMALL, ttl=1, flags="DF") / UDP() / (b"x" * 900)
    res = router.run([p])
    assert res.c("ttl-expired") == 1 and res.c("mtu-exceeded") == 0
    check_error4(res.tx[0], p, 11, 0)
    p6 = eth() / IPv6(src=H0_IP6, dst=DST6_SMALL, hlim=1) / UDP() / (b"x" * 1300)
    res = router.run([p6])
    assert res.c("ttl-expired") == 1 and res.c("mtu-exceeded") == 0
    check_error6(res.tx[0], p6, 3, 0)


def test_no_route_back(router: Router) -> None:
    p = eth() / IP(src="198.18.7.7", dst=DST4, ttl=1) / UDP()
    res = router.run([p])
    assert res.c("ttl-expired") == 1 and res.c("icmp-error-no-route") == 1
    assert res.c("fib-lookups") == 2  # the failed lookup for the error counts too
    assert res.tx == []
    res.check_accounting()


def test_error_to_unresolved_source_asks_for_it(router: Router) -> None:
    """The source is on a connected subnet but unknown: the error waits for ARP (it is
    dropped as neighbor-incomplete and an ARP request goes out)."""
    p = eth(src="02:00:00:00:aa:77") / IP(src="198.51.100.77", dst=DST4, ttl=1) / UDP()
    res = router.run([p], now_ns=10**9)
    # the error died before it left: not "sent", but counted as an answer dropped
    assert res.c("icmp-error-sent") == 0 and res.c("neighbor-incomplete") == 1
    assert res.c("answer-dropped") == 1
    assert len(res.tx) == 1 and res.tx[0].pkt[ARP].pdst == "198.51.100.77"
    assert res.tx[0].pkt[ARP].psrc == R0_IP4
    res.check_accounting()


def test_rate_limit4() -> None:
    r = Router(base_config(icmp={"rate": 10, "burst": 5}))
    p = eth() / IP(src=H0_IP4, dst=DST4, ttl=1) / UDP()
    t0 = 50 * 10**9
    res = r.run([p] * 20, now_ns=t0)
    assert res.c("ttl-expired") == 20
    assert res.c("icmp-error-sent") == 5 == len(res.tx)
    assert res.c("icmp-rate-limited") == 15
    res.check_accounting()
    # 10 tokens/s: after 0.25 s two tokens are back, after 0.1 s more one more
    assert r.run([p] * 20, now_ns=t0 + 250_000_000).c("icmp-error-sent") == 2
    assert r.run([p] * 20, now_ns=t0 + 350_000_000).c("icmp-error-sent") == 1
    assert r.run([p] * 20, now_ns=t0 + 360_000_000).c("icmp-error-sent") == 0
    # a long pause refills to the burst, never beyond
    assert r.run([p] * 20, now_ns=t0 + 100 * 10**9).c("icmp-error-sent") == 5


def test_rate_limit_clock_is_packet_timestamps() -> None:
    """One packet per vector: each runs at its own timestamp; 10 tokens/s, burst 1, one
    offending packet every 50 ms -> an error every other packet."""
    r = Router(base_config(icmp={"rate": 10, "burst": 1}), vector_size=1)
    p = eth() / IP(src=H0_IP4, dst=DST4, ttl=1) / UDP()
    ts = [3 * 10**9 + k * 50_000_000 for k in range(10)]
    res = r.run([p] * 10, ts_ns=ts)
    assert res.c("icmp-error-sent") == 5 and res.c("icmp-rate-limited") == 5
    assert [t.orig for t in res.tx] == [0, 2, 4, 6, 8]


def test_rate_limit_shared_v4_v6() -> None:
    r = Router(base_config(icmp={"rate": 1, "burst": 3}))
    p4 = eth() / IP(src=H0_IP4, dst=DST4, ttl=1) / UDP()
    p6 = eth() / IPv6(src=H0_IP6, dst=DST6, hlim=1) / UDP()
    res = r.run([p4, p6, p4, p6, p6], now_ns=10**9)
    assert res.c("icmp-error-sent") == 3 and res.c("icmp-rate-limited") == 2


# --- IPv6 --------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1000, 1184, 1185, 1400])
def test_time_exceeded6(router: Router, size: int) -> None:
    p = eth() / IPv6(src=H0_IP6, dst=DST6, hlim=1) / UDP(sport=1, dport=33434) / (b"6" * size)
    res = router.run([p])
    assert res.c("ttl-expired") == 1 and res.c("icmp-error-sent") == 1
    assert res.c("fib-lookups") == 2
    check_error6(res.tx[0], p, 3, 0)
    assert ICMPv6TimeExceeded in res.tx[0].pkt
    assert bytes(res.tx[0].pkt[IPv6])[48 + 7] == 1  # hop limit as it arrived


def test_no_route6(router: Router) -> None:
    p = eth() / IPv6(src=H0_IP6, dst=DST6_NOROUTE) / UDP() / b"?"
    res = router.run([p])
    check_error6(res.tx[0], p, 1, 0)
    assert ICMPv6DestUnreach in res.tx[0].pkt


def test_packet_too_big(router: Router) -> None:
    p = eth() / IPv6(src=H0_IP6, dst=DST6_SMALL) / UDP() / (b"B" * 1300)
    res = router.run([p])
    assert res.c("mtu-exceeded") == 1 and res.c("icmp-error-sent") == 1
    check_error6(res.tx[0], p, 2, 0, param=(1280).to_bytes(4, "big"))
    assert res.tx[0].pkt[ICMPv6PacketTooBig].mtu == 1280
    # a packet that fits exactly is forwarded, never fragmented
    ok = eth() / IPv6(src=H0_IP6, dst=DST6_SMALL) / UDP() / (b"B" * (1280 - 48))
    res = router.run([ok])
    assert len(res.tx) == 1 and res.tx[0].ifname == "eth3" and len(res.tx[0].data) == 14 + 1280


def test_l2_multicast_unicast_is_not_forwarded_so_gets_no_packet_too_big(router: Router) -> None:
    """RFC 4443 2.4(e) lets packet-too-big answer multicast, but a unicast packet in a
    link-layer multicast frame is never forwarded (Linux: pkt_type != PACKET_HOST), so the
    MTU is never checked: dropped, counted."""
    p = Ether(dst="33:33:00:00:00:01", src=H0) / IPv6(src=H0_IP6, dst=DST6_SMALL) / (b"M" * 1300)
    res = router.run([p])
    assert res.tx == [] and res.c("l2-multicast-unicast") == 1
    res.check_accounting()


def test_error6_source_is_egress_interface_address(router: Router) -> None:
    p = eth() / IPv6(src="2001:db8:100::9", dst="2001:db8:1::99", hlim=1) / UDP()
    res = router.run([p])
    check_error6(res.tx[0], p, 3, 0, src=R1_IP6, ifname="eth1", dst_mac=N1, src_mac=R1)


@pytest.mark.parametrize(
    "p,counter",
    [
        (
            eth() / IPv6(src=H0_IP6, dst=DST6, hlim=1) / ICMPv6DestUnreach() / IPv6() / UDP(),
            "ttl-expired",
        ),
        (eth() / IPv6(src=H0_IP6, dst=DST6_NOROUTE) / ICMPv6TimeExceeded() / IPv6(), "no-route"),
        (
            eth() / IPv6(src=H0_IP6, dst=DST6_SMALL) / ICMPv6DestUnreach() / (b"z" * 1300),
            "mtu-exceeded",
        ),
        (
            Ether(dst="33:33:00:00:00:01", src=H0) / IPv6(src=H0_IP6, dst=DST6, hlim=1) / UDP(),
            "l2-multicast-unicast",
        ),
        (Ether(dst=BCAST, src=H0) / IPv6(src=H0_IP6, dst=DST6_NOROUTE) / UDP(), "no-route"),
        (eth() / IPv6(src="::1", dst=DST6, hlim=1) / UDP(), "ip6-bad-source"),
        (eth() / IPv6(src="ff0e::1", dst=DST6, hlim=1) / UDP(), "ip6-bad-source"),
        (eth() / IPv6(src=H0_IP6, dst="ff0e::1", hlim=1) / UDP(), "ip6-dst-multicast"),
    ],
    ids=[
        "icmp-err-hlim",
        "icmp-err-noroute",
        "icmp-err-ptb",
        "l2-mcast",
        "l2-bcast",
        "src-loopback",
        "src-mcast",
        "dst-mcast",
    ],
)
def test_no_error6(router: Router, p, counter: str) -> None:
    res = router.run([p])
    assert res.c(counter) == 1
    assert res.tx == []
    assert res.c("icmp-error-sent") == 0
    res.check_accounting()


def test_echo6_hlim1_and_fragment_get_errors(router: Router) -> None:
    pkts = [
        eth() / IPv6(src=H0_IP6, dst=DST6, hlim=1) / ICMPv6EchoRequest(data=b"tr"),
        eth()
        / IPv6(src=H0_IP6, dst=DST6, hlim=1)
        / IPv6ExtHdrFragment(offset=8, nh=17)
        / (b"n" * 24),
    ]
    res = router.run(pkts)
    assert len(res.tx) == 2
    for p, t in zip(pkts, res.tx, strict=True):
        check_error6(t, p, 3, 0)


def test_rate_limit6() -> None:
    r = Router(base_config(icmp={"rate": 100, "burst": 4}))
    p = eth() / IPv6(src=H0_IP6, dst=DST6_NOROUTE) / UDP()
    res = r.run([p] * 10, now_ns=7 * 10**9)
    assert res.c("icmp-error-sent") == 4 and res.c("icmp-rate-limited") == 6
    assert r.run([p] * 10, now_ns=7 * 10**9 + 20_000_000).c("icmp-error-sent") == 2
