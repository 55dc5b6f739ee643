"""The headroom invariant: no node ever writes outside the packet's own slot.

Every test runs guarded batches (conftest ``Router.run(guard=True)``): a canary slot
before and after every packet, whose bytes must come out unchanged. Each prepend path is
driven at its maximum: the longest SRH (16 segments), nested SR policies, ICMP errors
quoting full-size packets, RSTs, fragments, with the packet in slot 0 and slot 1 too.
Before the fix, an ICMPv6 error about an SRv6-encapsulated packet was built up to 48
bytes in front of its slot (the previous slot's frame was overwritten; slot 0: SIGSEGV).
"""

from __future__ import annotations

import copy

import pytest
from conftest import H0_IP4, H0_IP6, N1_IP6, R1_IP6, Router, assert_checksums, eth
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import (
    ICMPv6PacketTooBig,
    ICMPv6TimeExceeded,
    IPerror6,
    IPv6,
    IPv6ExtHdrSegmentRouting,
)
from test_srv6 import SID_END, SRC, srv6_config

from vecroute.packet.batch import MAX_FRAME

LONG = [f"2001:db8:cc::{k:x}" for k in range(1, 16)]  # 15 more segments: 16 in all
BIG = 9000


def _config() -> dict:
    cfg = srv6_config()
    for itf in cfg["interfaces"]:
        if itf["name"] == "eth1":
            itf["mtu"] = BIG
    pol = cfg["srv6"]["policies"]
    steer = cfg["srv6"]["steering"]
    # 16 segments whose first is our own End SID: the outer packet meets End right away
    pol.append({"bsid": "2001:db8:ff:b::500", "segments": [SID_END, *LONG]})
    steer.append({"prefix": "2001:db8:500::/48", "bsid": "2001:db8:ff:b::500"})
    steer.append({"prefix": "203.0.113.240/29", "bsid": "2001:db8:ff:b::500"})
    # nested: the outer policy's first segment is the inner policy's BSID; the inner one
    # goes out eth3 (MTU 1280): packet too big in the second encapsulation
    pol.append({"bsid": "2001:db8:ff:b::601", "segments": ["2001:db8:200::1", *LONG[:10]]})
    pol.append({"bsid": "2001:db8:ff:b::600", "segments": ["2001:db8:ff:b::601", *LONG]})
    steer.append({"prefix": "2001:db8:600::/48", "bsid": "2001:db8:ff:b::600"})
    # the encapsulation source is reachable, so errors about outer packets are sent
    cfg["routes"].append({"prefix": "2001:db8:ffff::/48", "via": N1_IP6})
    return cfg


@pytest.fixture(scope="module")
def r() -> Router:
    return Router(_config())


def _udp6(dst: str, n: int, hlim: int = 64):
    return eth() / IPv6(src=H0_IP6, dst=dst, hlim=hlim) / UDP(sport=7, dport=9) / (b"h" * n)


def test_error_about_a_16_segment_encapsulation_stays_in_its_slot(r: Router) -> None:
    # inner hop limit 2: encapsulation copies 1, End at the first segment finds it expired
    p = _udp6("2001:db8:500::1", 200, hlim=2)
    for pos in range(3):  # slot 1, 3, 5 (0, 2, 4, 6 are canaries): and alone at slot 0
        res = r.run([_udp6("2001:db8:100::9", 64)] * pos + [p], guard=True)
        res.check_accounting()
        err = res.of(pos)
        assert len(err) == 1 and err[0].ifname == "eth1"
        e = err[0].pkt
        assert ICMPv6TimeExceeded in e and e[IPv6].dst == SRC and e[IPv6].src == R1_IP6
        quoted = e[IPerror6]
        assert quoted.src == SRC and quoted.dst == SID_END and quoted.hlim == 1
        # the quote: the whole outer packet (IPv6 + 16-segment SRH + inner IPv6/UDP/200)
        assert len(bytes(e[ICMPv6TimeExceeded])) - 8 == 40 + 8 + 16 * 16 + 40 + 8 + 200
        assert_checksums(e)
    res = Router(_config()).run([p])  # slot 0 without a guard: must not crash either
    assert res.c("icmp-error-sent") == 1


def test_packet_too_big_in_the_second_of_nested_encapsulations(r: Router) -> None:
    p = _udp6("2001:db8:600::1", 1100)  # fits eth1 once encapsulated, not eth3 twice
    res = r.run([p, p], guard=True)
    res.check_accounting()
    assert res.c("mtu-exceeded") == 2 and res.c("icmp-error-sent") == 2
    for t in res.tx:
        e = t.pkt
        assert ICMPv6PacketTooBig in e and e[IPv6].dst == SRC
        assert e[ICMPv6PacketTooBig].mtu < 1280
        assert_checksums(e)


@pytest.mark.parametrize("size", [MAX_FRAME - 14 - 20 - 8, 1400, 60])
def test_ipv4_errors_and_resets_at_full_size(size: int) -> None:
    cfg = _config()
    cfg["firewall"] = {
        "default": "allow",
        "rules": ["100 reset tcp from any to any 23", "65000 allow ip from any to any"],
    }
    r = Router(cfg)
    pkts = [
        eth() / IP(src=H0_IP4, dst="203.0.113.5", ttl=1) / UDP() / (b"t" * size),
        eth() / IP(src=H0_IP4, dst="203.0.113.130", flags="DF") / UDP() / (b"d" * size),
        eth() / IP(src=H0_IP4, dst="198.18.0.1") / UDP() / (b"n" * size),
        eth() / IP(src=H0_IP4, dst="203.0.113.5") / TCP(dport=23, flags="S") / (b"s" * (size - 12)),
        eth() / IP(src=H0_IP4, dst="198.51.100.254") / TCP(dport=80, flags="S"),
        eth() / IP(src=H0_IP4, dst="198.51.100.254") / UDP(dport=9) / (b"u" * size),
        eth() / IP(src=H0_IP4, dst="203.0.113.130") / UDP() / (b"f" * size),  # fragmented
        eth() / IP(src=H0_IP4, dst="203.0.113.245", ttl=1) / UDP() / (b"e" * size),
    ]
    res = r.run(pkts, guard=True)
    res.check_accounting()
    assert res.c("icmp-error-sent") >= 4 and res.c("tcp-reset-sent") == 2
    for t in res.tx:
        assert_checksums(t.pkt)
        if ICMP in t.pkt and t.pkt[ICMP].type != 0:
            assert len(t.pkt[IP]) <= 576


def test_ipv4_inner_with_16_segments_and_full_size_frames(r: Router) -> None:
    p = eth() / IP(src=H0_IP4, dst="203.0.113.241", ttl=2) / UDP() / (b"4" * 1500)
    huge = _udp6("2001:db8:500::1", MAX_FRAME - 14 - 48)
    res = r.run([p, huge, p], guard=True)
    res.check_accounting()
    assert res.c("srv6-no-headroom") == 1


_CASES = st.sampled_from(
    [
        ("2001:db8:500::1", 2),
        ("2001:db8:500::1", 64),
        ("2001:db8:600::1", 64),
        ("2001:db8:401::1", 1),
        ("2001:db8:100::1", 1),
        ("2001:db8:dead::1", 64),
    ]
)


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.tuples(_CASES, st.integers(0, MAX_FRAME - 14 - 48)), min_size=1,
                max_size=12))
def test_every_prepend_path_stays_in_its_slot(r: Router, cases) -> None:
    pkts = [_udp6(dst, n, hlim) for (dst, hlim), n in cases]
    res = r.run(pkts, guard=True)  # the guard asserts every canary slot is intact
    res.check_accounting()
    for t in res.tx:
        p = t.pkt
        if IPv6ExtHdrSegmentRouting not in p:
            assert_checksums(p)


def test_guard_catches_a_write_outside_the_slot() -> None:
    """The oracle itself can fail: a frame written one byte past its slot is caught."""
    r = Router(copy.deepcopy(_config()))
    b = r.batch
    orig = r.graph.run

    def clobber(batch, now):
        out = orig(batch, now)
        batch.buf[3 * 2304 - 1] ^= 0xFF  # the last byte of slot 2: a canary
        return out

    r.graph.run = clobber
    with pytest.raises(AssertionError, match="canary slot"):
        r.run([_udp6("2001:db8:100::9", 64)] * 2, guard=True)
    assert b.vector_size >= 3
