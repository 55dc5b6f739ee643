"""Neighbour table state machine and ARP/NDP handling, with scapy as the packet oracle."""

import ipaddress

import pytest
from scapy.all import (
    ARP,
    Ether,
    ICMPv6ND_NA,
    ICMPv6ND_NS,
    ICMPv6NDOptDstLLAddr,
    ICMPv6NDOptSrcLLAddr,
    ICMPv6Unknown,
    IPv6,
)

from vecroute.config_types import NeighborSettings
from vecroute.control.config import parse_config
from vecroute.control.neighbors import (
    FAILED,
    INCOMPLETE,
    PERMANENT,
    PROBE,
    REACHABLE,
    STALE,
    NeighborTable,
)
from vecroute.fib.adjacency import AdjKey
from vecroute.fib.fib import Fib
from vecroute.fib.layout import A_TYPE, ADJ_INCOMPLETE, ADJ_REWRITE

S = 1_000_000_000
RMAC = "02:00:00:00:00:01"
HMAC = "02:00:00:00:aa:01"
HMAC2 = "02:00:00:00:aa:02"


def mac(s: str) -> bytes:
    return bytes(int(x, 16) for x in s.split(":"))


@pytest.fixture
def answered() -> list:
    """Packets the table handed back to be answered with an ICMP error (and the error)."""
    return []


@pytest.fixture
def env(answered):
    cfg = parse_config(
        {
            "interfaces": [
                {"name": "eth0", "mac": RMAC, "addresses": ["192.0.2.254/24", "2001:db8:1::1/64"]}
            ],
            "routes": [
                {"prefix": "203.0.113.0/24", "via": "192.0.2.1"},
                {"prefix": "2001:db8:100::/48", "via": "2001:db8:1::10"},
            ],
        }
    )
    fib = Fib.from_config(cfg)
    sent: list[tuple[int, bytes]] = []
    injected: list[tuple] = []

    def reinject(packets, error=None):
        if error is None:
            injected.extend(packets)
        else:
            answered.extend((p, error) for p in packets)

    table = NeighborTable(
        fib, lambda ifx, f: sent.append((ifx, f)), reinject, NeighborSettings(queue_len=3)
    )
    return fib, table, sent, injected


def adj_type(fib: Fib, ip: str) -> int:
    a = ipaddress.ip_address(ip)
    return int(fib.adjs.adj[fib.adjs.index[AdjKey(ADJ_INCOMPLETE, 0, a.version, int(a))], A_TYPE])


def test_arp_resolution_queue_and_flush(env):
    fib, table, sent, injected = env
    nh = ipaddress.ip_address("192.0.2.1")
    for k in range(5):
        table.resolve(0, nh, ("pkt", k), 0)
    # one request, not five; queue bounded to 3 (oldest dropped)
    assert len(sent) == 1
    req = Ether(sent[0][1])
    assert req[ARP].op == 1 and req[ARP].pdst == "192.0.2.1" and req[ARP].psrc == "192.0.2.254"
    assert req.dst == "ff:ff:ff:ff:ff:ff" and req[ARP].hwsrc == RMAC
    assert table.stats.queue_drops == 2
    assert table.entries[(0, nh)].state == INCOMPLETE
    assert adj_type(fib, "192.0.2.1") == ADJ_INCOMPLETE
    reply = Ether(src=HMAC, dst=RMAC) / ARP(
        op=2, hwsrc=HMAC, psrc="192.0.2.1", hwdst=RMAC, pdst="192.0.2.254"
    )
    table.handle_arp(0, bytes(reply), 10)
    assert table.entries[(0, nh)].state == REACHABLE
    assert [p[1] for p in injected] == [2, 3, 4]
    assert adj_type(fib, "192.0.2.1") == ADJ_REWRITE
    a = fib.adjs.index[AdjKey(ADJ_INCOMPLETE, 0, 4, int(nh))]
    assert bytes(fib.adjs.adj_rw[a, :6]) == mac(HMAC)


def test_retransmit_then_fail(env, answered):
    fib, table, sent, injected = env
    nh = ipaddress.ip_address("192.0.2.7")
    table.resolve(0, nh, ("p",), 0)
    for t in range(1, 6):
        table.tick(t * S)
    assert len(sent) == 3  # mcast_solicit = 3
    assert table.entries[(0, nh)].state == FAILED
    assert table.stats.resolution_failed == 1
    # the queued packet is not lost silently: it goes back to be answered (RFC 4861 7.2.2);
    # the data path counts it (neighbor-failed), not the queue's overflow count
    assert [p for p, _ in answered] == [("p",)] and injected == []
    assert table.stats.queue_drops == 0


def test_failed_resolution_answers_every_queued_packet_once(env, answered):
    from vecroute.control.punts import ADDRESS_UNREACHABLE
    from vecroute.graph.counters import C_NEIGHBOR_FAILED

    _, table, _, injected = env
    v4, v6 = ipaddress.ip_address("192.0.2.7"), ipaddress.ip_address("2001:db8:1::77")
    for k in range(5):  # queue_len 3: the two oldest are overflow drops, never answered
        table.resolve(0, v4, ("v4", k), 0)
    table.resolve(0, v6, ("v6", 0), 0)
    for t in range(1, 5):
        table.tick(t * S)
    assert sorted(p for p, _ in answered) == [("v4", 2), ("v4", 3), ("v4", 4), ("v6", 0)]
    assert {e for _, e in answered} == {ADDRESS_UNREACHABLE}
    assert ADDRESS_UNREACHABLE.reason == C_NEIGHBOR_FAILED
    assert table.stats.queue_drops == 2 and table.stats.resolution_failed == 2
    assert injected == [] and all(not n.pending for n in table.entries.values())
    for t in range(5, 30):  # nothing is answered twice
        table.tick(t * S)
    assert len(answered) == 4


def test_aging_probe_and_gratuitous_update(env):
    fib, table, sent, _ = env
    nh = ipaddress.ip_address("192.0.2.1")
    table.resolve(0, nh, None, 0)
    table.handle_arp(
        0,
        bytes(
            Ether(src=HMAC, dst=RMAC) / ARP(op=2, hwsrc=HMAC, psrc="192.0.2.1", pdst="192.0.2.254")
        ),
        0,
    )
    table.tick(31 * S)
    assert table.entries[(0, nh)].state == STALE
    table.tick(37 * S)
    assert table.entries[(0, nh)].state == PROBE
    probe = Ether(sent[-1][1])
    assert probe.dst == HMAC and probe[ARP].pdst == "192.0.2.1"  # unicast probe
    # gratuitous ARP with a new MAC: every adjacency is rewritten at once
    table.handle_arp(
        0,
        bytes(
            Ether(src=HMAC2, dst="ff:ff:ff:ff:ff:ff")
            / ARP(op=1, hwsrc=HMAC2, psrc="192.0.2.1", pdst="192.0.2.1")
        ),
        38 * S,
    )
    a = fib.adjs.index[AdjKey(ADJ_INCOMPLETE, 0, 4, int(nh))]
    assert bytes(fib.adjs.adj_rw[a, :6]) == mac(HMAC2)
    assert table.stats.mac_changes == 1


def test_gratuitous_arp_does_not_create(env):
    _, table, _, _ = env
    table.handle_arp(
        0,
        bytes(
            Ether(src=HMAC, dst="ff:ff:ff:ff:ff:ff")
            / ARP(op=1, hwsrc=HMAC, psrc="192.0.2.9", pdst="192.0.2.9")
        ),
        0,
    )
    assert (0, ipaddress.ip_address("192.0.2.9")) not in table.entries


def test_arp_request_for_us_creates_stale_entry(env):
    _, table, _, _ = env
    table.handle_arp(
        0,
        bytes(
            Ether(src=HMAC, dst="ff:ff:ff:ff:ff:ff")
            / ARP(op=1, hwsrc=HMAC, psrc="192.0.2.9", pdst="192.0.2.254")
        ),
        0,
    )
    assert table.entries[(0, ipaddress.ip_address("192.0.2.9"))].state == STALE


def test_ns_for_our_address_answered_with_router_flag(env):
    fib, table, sent, _ = env
    ns = (
        Ether(src=HMAC, dst="33:33:ff:00:00:01")
        / IPv6(src="2001:db8:1::10", dst="ff02::1:ff00:1", hlim=255)
        / ICMPv6ND_NS(tgt="2001:db8:1::1")
        / ICMPv6NDOptSrcLLAddr(lladdr=HMAC)
    )
    table.handle_nd(0, bytes(ns), 0)
    na = Ether(sent[-1][1])
    assert na.dst == HMAC and na[IPv6].dst == "2001:db8:1::10" and na[IPv6].hlim == 255
    assert na[ICMPv6ND_NA].R == 1 and na[ICMPv6ND_NA].S == 1 and na[ICMPv6ND_NA].O == 1
    assert na[ICMPv6ND_NA].tgt == "2001:db8:1::1"
    assert na[ICMPv6NDOptDstLLAddr].lladdr == RMAC
    raw = bytes(na)
    chk = na[ICMPv6ND_NA].cksum
    del na[ICMPv6ND_NA].cksum
    assert Ether(bytes(na))[ICMPv6ND_NA].cksum == chk and len(raw) == len(bytes(na))
    # the solicitor was learnt (stale)
    assert table.entries[(0, ipaddress.ip_address("2001:db8:1::10"))].state == STALE


def test_ns_with_bad_hop_limit_ignored(env):
    _, table, sent, _ = env
    ns = (
        Ether(src=HMAC, dst="33:33:ff:00:00:01")
        / IPv6(src="2001:db8:1::10", dst="ff02::1:ff00:1", hlim=64)
        / ICMPv6ND_NS(tgt="2001:db8:1::1")
        / ICMPv6NDOptSrcLLAddr(lladdr=HMAC)
    )
    table.handle_nd(0, bytes(ns), 0)
    assert sent == [] and table.stats.ignored == 1


def test_ndp_resolution_and_unsolicited_na(env):
    fib, table, sent, injected = env
    nh = ipaddress.ip_address("2001:db8:1::10")
    table.resolve(0, nh, ("v6",), 0)
    ns = Ether(sent[-1][1])
    assert ns.dst == "33:33:ff:00:00:10" and ns[IPv6].dst == "ff02::1:ff00:10"
    assert ns[ICMPv6ND_NS].tgt == str(nh) and ns[ICMPv6NDOptSrcLLAddr].lladdr == RMAC
    assert ns[IPv6].src == str(fib.interfaces[0].link_local)
    na = (
        Ether(src=HMAC, dst=RMAC)
        / IPv6(src=str(nh), dst="2001:db8:1::1", hlim=255)
        / ICMPv6ND_NA(tgt=str(nh), S=1, O=1)
        / ICMPv6NDOptDstLLAddr(lladdr=HMAC)
    )
    table.handle_nd(0, bytes(na), 1)
    assert table.entries[(0, nh)].state == REACHABLE and injected == [("v6",)]
    una = (
        Ether(src=HMAC2, dst="33:33:00:00:00:01")
        / IPv6(src=str(nh), dst="ff02::1", hlim=255)
        / ICMPv6ND_NA(tgt=str(nh), S=0, O=1)
        / ICMPv6NDOptDstLLAddr(lladdr=HMAC2)
    )
    table.handle_nd(0, bytes(una), 2)
    a = fib.adjs.index[AdjKey(ADJ_INCOMPLETE, 0, 6, int(nh))]
    assert bytes(fib.adjs.adj_rw[a, :6]) == mac(HMAC2)


def test_static_neighbors_are_permanent(env):
    fib, table, _, _ = env
    table.add_static(0, ipaddress.ip_address("192.0.2.1"), mac(HMAC), 0)
    table.tick(100 * S)
    assert table.entries[(0, ipaddress.ip_address("192.0.2.1"))].state == PERMANENT
    table.handle_arp(
        0,
        bytes(
            Ether(src=HMAC2, dst=RMAC)
            / ARP(op=2, hwsrc=HMAC2, psrc="192.0.2.1", pdst="192.0.2.254")
        ),
        0,
    )
    a = fib.adjs.index[AdjKey(ADJ_INCOMPLETE, 0, 4, int(ipaddress.ip_address("192.0.2.1")))]
    assert bytes(fib.adjs.adj_rw[a, :6]) == mac(HMAC)


# -- RFC 4861 7.1.2: invalid Neighbour Advertisements are ignored ------------------------------

NH6 = "2001:db8:1::10"
ME6 = "2001:db8:1::1"


def _na(**kw):
    """A valid solicited NA from NH6 for itself, with fields changed by ``kw``."""
    ip = {k: kw.pop(k) for k in ("dst", "hlim") if k in kw}
    opt = kw.pop("opt", ICMPv6NDOptDstLLAddr(lladdr=HMAC))
    na = ICMPv6ND_NA(tgt=kw.pop("tgt", NH6), S=kw.pop("S", 1), O=1, **kw)
    return (
        Ether(src=HMAC, dst=RMAC)
        / IPv6(src=NH6, dst=ip.get("dst", ME6), hlim=ip.get("hlim", 255))
        / na
        / opt
    )


def _bad_checksum(p) -> bytes:
    raw = bytearray(bytes(p))
    raw[14 + 40 + 2] ^= 0x5A  # the ICMPv6 checksum field
    return bytes(raw)


INVALID_NA = [
    ("bad-hop-limit", _na(hlim=254)),
    ("bad-checksum", _bad_checksum(_na())),
    ("bad-code", _na(code=1)),
    (
        "too-short",  # 20 octets of ICMP (a valid checksum): the target does not fit
        Ether(src=HMAC, dst=RMAC)
        / IPv6(src=NH6, dst=ME6, hlim=255)
        / ICMPv6Unknown(type=136, msgbody=b"\x60\0\0\0" + bytes.fromhex("20010db80001" + "00" * 6)),
    ),
    ("target-multicast", _na(tgt="ff02::1:ff00:10")),
    ("solicited-to-multicast", _na(dst="ff02::1", S=1)),
    ("bad-options", _na(opt=ICMPv6NDOptDstLLAddr(len=0, lladdr=HMAC))),
    ("bad-options", _na(opt=ICMPv6NDOptDstLLAddr(len=2, lladdr=HMAC))),  # runs past the end
]


@pytest.mark.parametrize(
    "reason,frame",
    INVALID_NA,
    ids=[r for r, _ in INVALID_NA[:-1]] + ["option-truncated"],
)
def test_invalid_na_is_ignored_and_counted(env, reason, frame):
    fib, table, _, injected = env
    nh = ipaddress.ip_address(NH6)
    table.resolve(0, nh, ("v6",), 0)
    table.handle_nd(0, bytes(frame), 1)
    n = table.entries[(0, nh)]
    assert n.state == INCOMPLETE and n.mac is None and injected == []
    assert adj_type(fib, NH6) == ADJ_INCOMPLETE
    assert table.stats.invalid_nd == {reason: 1} and table.stats.ignored == 1
    # the same NA made valid is accepted: the test changes one thing only
    table.handle_nd(0, bytes(_na()), 2)
    assert table.entries[(0, nh)].state == REACHABLE and injected == [("v6",)]


def test_unsolicited_na_to_all_nodes_is_valid(env):
    _, table, _, _ = env
    nh = ipaddress.ip_address(NH6)
    table.resolve(0, nh, None, 0)
    table.handle_nd(0, bytes(_na(dst="ff02::1", S=0)), 1)
    assert table.entries[(0, nh)].state == STALE and table.stats.invalid_nd == {}


# -- RFC 4861 7.1.1: invalid Neighbour Solicitations are ignored -------------------------------

SOL_ME = "ff02::1:ff00:1"  # solicited-node group of 2001:db8:1::1


def _ns(src=NH6, dst=SOL_ME, hlim=255, opt=True, **kw):
    p = (
        Ether(src=HMAC, dst="33:33:ff:00:00:01")
        / IPv6(src=src, dst=dst, hlim=hlim)
        / ICMPv6ND_NS(tgt=kw.pop("tgt", ME6), **kw)
    )
    return p / (opt if opt is not True else ICMPv6NDOptSrcLLAddr(lladdr=HMAC)) if opt else p


INVALID_NS = [
    ("bad-hop-limit", _ns(hlim=64)),
    ("bad-checksum", _bad_checksum(_ns())),
    ("bad-code", _ns(code=3)),
    (
        "too-short",
        Ether(src=HMAC, dst="33:33:ff:00:00:01")
        / IPv6(src=NH6, dst=SOL_ME, hlim=255)
        / ICMPv6Unknown(type=135, msgbody=bytes(4) + bytes.fromhex("20010db80001" + "00" * 6)),
    ),
    ("target-multicast", _ns(tgt="ff02::1")),
    ("bad-options", _ns(opt=ICMPv6NDOptSrcLLAddr(len=0, lladdr=HMAC))),
    ("dad-not-solicited-node", _ns(src="::", dst=ME6, opt=False)),
    ("dad-source-lladdr", _ns(src="::")),
]


@pytest.mark.parametrize("reason,frame", INVALID_NS, ids=[r for r, _ in INVALID_NS])
def test_invalid_ns_is_ignored_and_counted(env, reason, frame):
    _, table, sent, _ = env
    table.handle_nd(0, bytes(frame), 0)
    assert sent == []  # not answered
    assert (0, ipaddress.ip_address(NH6)) not in table.entries  # nothing learnt
    assert table.stats.invalid_nd == {reason: 1} and table.stats.ignored == 1


def test_dad_ns_is_answered_to_all_nodes(env):
    _, table, sent, _ = env
    table.handle_nd(0, bytes(_ns(src="::", opt=False)), 0)
    na = Ether(sent[-1][1])
    assert na[IPv6].dst == "ff02::1" and na[ICMPv6ND_NA].S == 0 and na[ICMPv6ND_NA].O == 1
    assert table.stats.invalid_nd == {} and table.entries == {}


# -- RFC 826 merge: every ARP packet from a known sender updates its entry ----------------------


def _arp(op, hwsrc, psrc, pdst, dst="ff:ff:ff:ff:ff:ff") -> bytes:
    return bytes(Ether(src=hwsrc, dst=dst) / ARP(op=op, hwsrc=hwsrc, psrc=psrc, pdst=pdst))


def test_arp_request_not_for_us_merges_a_known_sender(env):
    fib, table, _, injected = env
    nh = ipaddress.ip_address("192.0.2.1")
    table.resolve(0, nh, None, 0)
    table.handle_arp(0, _arp(2, HMAC, "192.0.2.1", "192.0.2.254", dst=RMAC), 0)
    assert table.entries[(0, nh)].state == REACHABLE
    # the neighbour moves to another MAC and asks another host for its address
    table.handle_arp(0, _arp(1, HMAC2, "192.0.2.1", "192.0.2.77"), 5 * S)
    n = table.entries[(0, nh)]
    assert n.mac == mac(HMAC2) and n.state == STALE
    a = fib.adjs.index[AdjKey(ADJ_INCOMPLETE, 0, 4, int(nh))]
    assert bytes(fib.adjs.adj_rw[a, :6]) == mac(HMAC2)
    assert table.stats.mac_changes == 1 and table.stats.arp_not_for_us == 1


def test_arp_request_not_for_us_resolves_an_incomplete_entry(env):
    _, table, _, injected = env
    nh = ipaddress.ip_address("192.0.2.1")
    table.resolve(0, nh, ("waiting",), 0)
    table.handle_arp(0, _arp(1, HMAC, "192.0.2.1", "192.0.2.77"), 1)
    assert table.entries[(0, nh)].state == STALE and injected == [("waiting",)]


def test_arp_request_not_for_us_creates_nothing(env):
    _, table, _, _ = env
    table.handle_arp(0, _arp(1, HMAC, "192.0.2.9", "192.0.2.77"), 0)
    assert table.entries == {} and table.stats.arp_not_for_us == 1


def test_unsolicited_arp_reply_creates_nothing(env):
    _, table, _, _ = env
    table.handle_arp(0, _arp(2, HMAC, "192.0.2.9", "192.0.2.254", dst=RMAC), 0)
    assert (0, ipaddress.ip_address("192.0.2.9")) not in table.entries
