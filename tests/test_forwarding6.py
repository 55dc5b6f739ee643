"""IPv6 forwarding, input validation, local delivery and neighbour solicitation (scapy oracle)."""

from __future__ import annotations

import struct
from ipaddress import IPv6Address

import pytest
from conftest import (
    DST6,
    DST6_INCOMPLETE,
    H0,
    H0_IP6,
    N1,
    N1_IP6,
    R0,
    R0_IP6,
    R1,
    R1_IP6,
    R3_IP6,
    Router,
    assert_checksums,
    eth,
    mac_bytes,
    solicited_node,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import TCP, UDP
from scapy.layers.inet6 import (
    ICMPv6EchoReply,
    ICMPv6EchoRequest,
    ICMPv6ND_NS,
    ICMPv6NDOptSrcLLAddr,
    ICMPv6TimeExceeded,
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
)
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from vecroute.fib.fib import Interface


def assert_forwarded6(sent: bytes, out: bytes, dst_mac: str = N1, src_mac: str = R1) -> None:
    ip_in = sent[14:]
    ip_in = ip_in[: 40 + struct.unpack("!H", ip_in[4:6])[0]]
    assert out[:6] == mac_bytes(dst_mac)
    assert out[6:12] == mac_bytes(src_mac)
    assert out[12:14] == b"\x86\xdd"
    ip_out = out[14:]
    assert len(ip_out) == len(ip_in)
    assert ip_out[7] == ip_in[7] - 1
    assert ip_out[:7] == ip_in[:7]
    assert ip_out[8:] == ip_in[8:], "addresses, extension headers and payload untouched"
    assert_checksums(Ether(out))


def test_forward_v6(router: Router) -> None:
    pkts = [
        eth()
        / IPv6(src=H0_IP6, dst=DST6, hlim=64, tc=0x2E, fl=0x12345)
        / UDP(sport=9, dport=53)
        / (b"u" * 40),
        eth() / IPv6(src=H0_IP6, dst="2001:db8:100:ffff::1", hlim=2) / TCP(sport=1, dport=2),
        eth() / IPv6(src=H0_IP6, dst=DST6, hlim=255) / ICMPv6EchoRequest(id=1, seq=2, data=b"e"),
        eth() / IPv6(src=H0_IP6, dst=DST6) / UDP() / Raw(bytes(range(256)) * 5),
    ]
    res = router.run(pkts)
    assert len(res.tx) == len(pkts)
    for p, t in zip(pkts, res.tx, strict=True):
        assert t.ifname == "eth1"
        assert_forwarded6(bytes(p), t.data)
        q = t.pkt
        assert q[IPv6].hlim == p[IPv6].hlim - 1
        assert q[IPv6].fl == p[IPv6].fl and q[IPv6].tc == p[IPv6].tc
    assert res.c("ip6-forwarded") == len(pkts)
    assert res.c("fib-lookups") == len(pkts)
    res.check_accounting()


def test_padding_trimmed_v6(router: Router) -> None:
    p = eth() / IPv6(src=H0_IP6, dst=DST6) / UDP() / b"xy"
    res = router.run([bytes(p) + b"\xcc" * 20])
    assert len(res.tx) == 1 and len(res.tx[0].data) == len(bytes(p))
    assert_forwarded6(bytes(p), res.tx[0].data)


def test_extension_headers_forwarded(router: Router) -> None:
    """Hop-by-hop + destination options + fragment (first and later pieces) + routing
    header with segments left 0 (not for us to process): forwarded untouched."""
    ip = IPv6(src=H0_IP6, dst=DST6)
    pkts = [
        eth()
        / ip
        / IPv6ExtHdrHopByHop()
        / IPv6ExtHdrDestOpt()
        / IPv6ExtHdrFragment(m=1, id=7)
        / UDP(sport=4, dport=5)
        / (b"f" * 32),
        eth()
        / ip
        / IPv6ExtHdrHopByHop()
        / IPv6ExtHdrDestOpt()
        / IPv6ExtHdrFragment(offset=5, m=0, id=7, nh=17)
        / (b"g" * 16),
        eth()
        / ip
        / IPv6ExtHdrDestOpt()
        / IPv6ExtHdrRouting(addresses=[], segleft=0)
        / UDP()
        / b"r",
    ]
    res = router.run(pkts)
    assert len(res.tx) == 3
    for p, t in zip(pkts, res.tx, strict=True):
        assert_forwarded6(bytes(p), t.data)


def _raw6(**kw) -> bytearray:
    return bytearray(bytes(IPv6(src=H0_IP6, dst=DST6, **kw) / UDP() / b"payload"))


def _bad_version() -> bytes:
    h = _raw6()
    h[0] = 0x40 | (h[0] & 15)
    return bytes(h)


def _plen_gt_frame() -> bytes:
    h = _raw6()
    h[4:6] = struct.pack("!H", len(h) - 40 + 1)
    return bytes(h)


def _trunc_ext() -> bytes:
    # hop-by-hop claims 16 bytes, only 8 present
    h = bytearray(bytes(IPv6(src=H0_IP6, dst=DST6) / IPv6ExtHdrHopByHop(len=1, options=[])))
    return bytes(h[:48])


def _trunc_ext2() -> bytes:
    # destination options header whose length runs past the payload
    p = IPv6(src=H0_IP6, dst=DST6) / IPv6ExtHdrDestOpt() / UDP()
    h = bytearray(bytes(p))
    h[41] = 10  # (10 + 1) * 8 bytes
    return bytes(h)


def _hbh_not_first() -> bytes:
    return bytes(IPv6(src=H0_IP6, dst=DST6) / IPv6ExtHdrDestOpt() / IPv6ExtHdrHopByHop() / UDP())


def _frag_trunc() -> bytes:
    p = IPv6(src=H0_IP6, dst=DST6, nh=44, plen=4) / b"\x11\x00\x00\x01"
    return bytes(p)


@pytest.mark.parametrize(
    "make,counter",
    [
        (_bad_version, "ip6-bad-version"),
        (_plen_gt_frame, "ip6-bad-length"),
        (_trunc_ext, "ip6-bad-ext-header"),
        (_trunc_ext2, "ip6-bad-ext-header"),
        (_hbh_not_first, "ip6-bad-ext-header"),
        (_frag_trunc, "ip6-bad-ext-header"),
        (lambda: bytes(IPv6(src=H0_IP6, dst=DST6))[:39], "ip6-too-short"),
        (lambda: bytes(IPv6(src="ff02::1", dst=DST6) / UDP()), "ip6-bad-source"),
        (lambda: bytes(IPv6(src="::1", dst=DST6) / UDP()), "ip6-bad-source"),
        (lambda: bytes(IPv6(src="::", dst=DST6) / UDP()), "ip6-bad-source"),
        (lambda: bytes(IPv6(src=H0_IP6, dst="fe80::99") / UDP()), "ip6-link-local"),
        (lambda: bytes(IPv6(src=H0_IP6, dst="ff05::1:3") / UDP()), "ip6-dst-multicast"),
        (lambda: bytes(IPv6(src=H0_IP6, dst="ff02::fb") / UDP()), "ip6-dst-multicast"),
    ],
    ids=[
        "version",
        "plen>frame",
        "trunc-hbh",
        "trunc-dstopt",
        "hbh-not-first",
        "frag-trunc",
        "short",
        "src-mcast",
        "src-loopback",
        "src-unspec",
        "dst-ll",
        "dst-mcast",
        "dst-mcast-ll",
    ],
)
def test_input_validation6(router: Router, make, counter: str) -> None:
    frame = bytes(Ether(dst=R0, src=H0, type=0x86DD)) + make()
    good = eth() / IPv6(src=H0_IP6, dst=DST6) / UDP() / b"ok"
    res = router.run([frame, good])
    assert res.c(counter) == 1
    assert res.drops == 1
    assert [t.orig for t in res.tx] == [1], "only the good packet leaves, no ICMPv6 error"
    assert_forwarded6(bytes(good), res.tx[0].data)
    res.check_accounting()


def test_link_local_not_forwarded_even_with_expired_hlim(router: Router) -> None:
    res = router.run(
        [
            eth() / IPv6(src="fe80::1", dst=DST6, hlim=1) / UDP(),
            eth() / IPv6(src=H0_IP6, dst="fe80::1234", hlim=1) / UDP(),
        ]
    )
    # the link-local source's hop limit is checked first (as Linux): time exceeded, on its
    # link; the link-local destination is dropped at input
    assert res.c("ip6-link-local") == 1 and res.c("ttl-expired") == 1
    assert [(t.orig, t.ifname) for t in res.tx] == [(0, "eth0")]
    assert ICMPv6TimeExceeded in res.tx[0].pkt


# --- local ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dst", [R0_IP6, R1_IP6, R3_IP6])
def test_ping6_router(router: Router, dst: str) -> None:
    data = bytes(range(100)) * 3
    p = eth() / IPv6(src=H0_IP6, dst=dst, hlim=17) / ICMPv6EchoRequest(id=0xBEEF, seq=9, data=data)
    res = router.run([p])
    assert res.c("echo-reply-sent") == 1
    assert res.c("fib-lookups") == 2  # the request (local) and the reply
    assert len(res.tx) == 1 and res.tx[0].ifname == "eth0"
    q = res.tx[0].pkt
    assert q[Ether].dst == H0 and q[Ether].src == R0 and q[Ether].type == 0x86DD
    assert q[IPv6].src == dst and q[IPv6].dst == H0_IP6
    assert q[IPv6].nh == 58 and q[IPv6].hlim > 1
    e = q[ICMPv6EchoReply]
    assert e.type == 129 and e.code == 0
    assert e.id == 0xBEEF and e.seq == 9 and e.data == data
    assert_checksums(q)


_ROUTER = Router()


@settings(max_examples=60, deadline=None)
@given(ident=st.integers(0, 0xFFFF), seq=st.integers(0, 0xFFFF), data=st.binary(max_size=300))
def test_echo6_reply_checksum_property(ident: int, seq: int, data: bytes) -> None:
    p = eth() / IPv6(src=H0_IP6, dst=R0_IP6) / ICMPv6EchoRequest(id=ident, seq=seq, data=data)
    res = _ROUTER.run([p])
    assert len(res.tx) == 1
    e = res.tx[0].pkt[ICMPv6EchoReply]
    assert (e.id, e.seq, e.data) == (ident, seq, data)
    assert_checksums(res.tx[0].pkt)


def test_ping6_link_local_and_all_nodes(router: Router) -> None:
    """Echo to our link-local address and to ff02::1: the reply to the first comes from our
    link-local address; to ff02::1 from a unicast address of the scope of the asker's (a
    global one here, RFC 6724, as Linux), never from a multicast one."""
    ll = str(Interface("eth0", mac_bytes(R0), 1500, 0).link_local)
    reqs = [
        eth() / IPv6(src=H0_IP6, dst=ll) / ICMPv6EchoRequest(id=1, seq=1, data=b"ll"),
        Ether(dst="33:33:00:00:00:01", src=H0)
        / IPv6(src=H0_IP6, dst="ff02::1")
        / ICMPv6EchoRequest(id=2, seq=2, data=b"all"),
    ]
    res = router.run(reqs)
    assert res.c("echo-reply-sent") == 2
    assert len(res.tx) == 2
    for t, req, src in zip(res.tx, reqs, [ll, R0_IP6], strict=True):
        q = t.pkt
        assert t.ifname == "eth0" and q[Ether].dst == H0
        assert q[IPv6].dst == H0_IP6
        assert q[IPv6].src == src
        assert q[ICMPv6EchoReply].id == req[ICMPv6EchoRequest].id
        assert q[ICMPv6EchoReply].data == req[ICMPv6EchoRequest].data
        assert_checksums(q)


@pytest.mark.parametrize(
    "l4,counter",
    [
        (UDP(dport=53, chksum=0) / b"q", "local-bad-checksum"),  # mandatory over IPv6
        (TCP(dport=179, flags="R"), "tcp-port-closed"),  # no RST answers a RST
        (ICMPv6EchoReply(), "local-unhandled"),
        (ICMPv6EchoRequest(cksum=0x1234), "local-bad-checksum"),
        (IPv6ExtHdrFragment(m=1) / ICMPv6EchoRequest(), "reass-queued"),
    ],
    ids=["udp-zero-ck", "tcp-rst", "echo-reply", "badck", "frag"],
)
def test_local_unhandled6(router: Router, l4, counter: str) -> None:
    res = router.run([eth() / IPv6(src=H0_IP6, dst=R0_IP6) / l4])
    assert res.c(counter) == 1
    assert res.tx == []
    res.check_accounting()


def test_nd_to_us_punted(router: Router) -> None:
    ns = (
        Ether(dst="33:33:ff:00:00:01", src=H0)
        / IPv6(src=H0_IP6, dst=solicited_node(R0_IP6), hlim=255)
        / ICMPv6ND_NS(tgt=R0_IP6)
        / ICMPv6NDOptSrcLLAddr(lladdr=H0)
    )
    res = router.run([ns])
    assert res.c("nd-punt") == 1 and res.c("punt") == 1
    assert res.fates == ["punt"]


# --- neighbour solicitation ------------------------------------------------------------------


def _check_ns(t, target: str, ifname: str = "eth1", mac: str = R1) -> None:
    assert t.ifname == ifname and t.generated
    q = t.pkt
    sn = solicited_node(target)
    assert q[Ether].src == mac
    assert q[Ether].dst == "33:33:" + ":".join(f"{b:02x}" for b in IPv6Address(sn).packed[12:])
    assert q[Ether].type == 0x86DD
    ll = str(Interface(ifname, mac_bytes(mac), 1500, 0).link_local)
    assert q[IPv6].src == ll
    assert q[IPv6].dst == sn
    assert q[IPv6].hlim == 255 and q[IPv6].nh == 58
    ns = q[ICMPv6ND_NS]
    assert ns.type == 135 and ns.code == 0 and ns.tgt == target
    assert q[ICMPv6NDOptSrcLLAddr].lladdr == mac
    assert_checksums(q)


def test_ns_for_incomplete_next_hop() -> None:
    r = Router()
    p = eth() / IPv6(src=H0_IP6, dst=DST6_INCOMPLETE) / UDP() / b"x"
    res = r.run([p, p], now_ns=3 * 10**9)
    assert res.c("neighbor-incomplete") == 2
    assert res.c("ns-sent") == 1
    assert res.c("neighbor-request-limited") == 1
    assert len(res.tx) == 1
    _check_ns(res.tx[0], "2001:db8:2::3")
    res.check_accounting()
    assert r.run([p], now_ns=3 * 10**9 + 999_999_999).c("ns-sent") == 0
    assert r.run([p], now_ns=4 * 10**9).c("ns-sent") == 1


def test_ns_glean_connected_host() -> None:
    r = Router()
    pkts = [
        eth() / IPv6(src=H0_IP6, dst=d) / UDP()
        for d in ("2001:db8:2::77", "2001:db8:2::78", "2001:db8:2::77")
    ]
    res = r.run(pkts, now_ns=10**9)
    assert res.c("ns-sent") == 2 and res.c("neighbor-incomplete") == 3
    targets = sorted(t.pkt[ICMPv6ND_NS].tgt for t in res.tx)
    assert targets == ["2001:db8:2::77", "2001:db8:2::78"]
    for t in res.tx:
        _check_ns(t, t.pkt[ICMPv6ND_NS].tgt)
    assert r.run(pkts, now_ns=10**9 + 10**8).c("ns-sent") == 0
    assert r.run(pkts, now_ns=2 * 10**9 + 10**8).c("ns-sent") == 2


def test_on_link_neighbor6(router: Router) -> None:
    p = eth() / IPv6(src=H0_IP6, dst=N1_IP6) / UDP() / b"direct"
    res = router.run([p])
    assert len(res.tx) == 1
    assert_forwarded6(bytes(p), res.tx[0].data)
