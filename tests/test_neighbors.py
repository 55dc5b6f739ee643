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
    IPv6,
)

from vecroute.control.config import parse_config
from vecroute.control.neighbors import (
    FAILED,
    INCOMPLETE,
    PERMANENT,
    PROBE,
    REACHABLE,
    STALE,
    NeighborTable,
    Timers,
)
from vecroute.fib.adjacency import AdjKey
from vecroute.fib.fib import Fib
from vecroute.graph.state import A_TYPE, ADJ_INCOMPLETE, ADJ_REWRITE

S = 1_000_000_000
RMAC = "02:00:00:00:00:01"
HMAC = "02:00:00:00:aa:01"
HMAC2 = "02:00:00:00:aa:02"


def mac(s: str) -> bytes:
    return bytes(int(x, 16) for x in s.split(":"))


@pytest.fixture
def env():
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
    table = NeighborTable(
        fib, lambda ifx, f: sent.append((ifx, f)), injected.extend, Timers(queue_len=3)
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


def test_retransmit_then_fail(env):
    fib, table, sent, _ = env
    nh = ipaddress.ip_address("192.0.2.7")
    table.resolve(0, nh, ("p",), 0)
    for t in range(1, 6):
        table.tick(t * S)
    assert len(sent) == 3  # mcast_solicit = 3
    assert table.entries[(0, nh)].state == FAILED
    assert table.stats.resolution_failed == 1 and table.stats.queue_drops == 1


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
