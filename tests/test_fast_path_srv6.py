"""SRv6 on the fused common path (graph/fast_path.py) against the node graph.

The oracle is the node graph with the fused path off (``OPT_NO_FUSED``), as in
tests/test_fast_path.py: the same frames into two routers built from the SRv6 test
network of tests/test_srv6.py must give the same frames out (bytes, port, order), every
counter, the interface statistics, each packet's fate and the packets per node. The
corpus holds every head-end and endpoint behaviour the fused path takes (H.Encaps and
.Red with IPv4 and IPv6 inner packets, End, End.T, End.X, End.DX4/DX6/DT4/DT6/DT46, ECMP
after End and after a decapsulation, transit SRH packets), every case it must leave to the
nodes (SL 0, bad SRH, PSP's pop, hop limit, MTU, no route, bad inner packets, our own
SID as next segment, decapsulations leaving by the port they came in on), and random byte
mutations of all of them, mixed in the same batches. tests/test_srv6.py checks the same
behaviours byte by byte with scapy, with the fused path on.
"""

from __future__ import annotations

import ipaddress
import random

import numpy as np
import pytest
from conftest import H0_IP4, H0_IP6, N1, N1_IP6, R0_IP6, R1, Router, eth
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import ICMPv6EchoRequest, IPv6, IPv6ExtHdrHopByHop
from scapy.layers.l2 import Ether
from test_fast_path import _observed, router_pair, same_as_nodes
from test_srv6 import (
    BSID_W,
    BSIDS,
    NEXT6,
    POLICIES,
    SEG1,
    SEG3,
    SID_DT4,
    SID_DT6,
    SID_DT46,
    SID_DX4,
    SID_DX6,
    SID_END,
    SID_END_PSP,
    SID_IN_LOCATOR,
    SID_T,
    SID_X,
    SID_X_PSP,
    T5,
    W_A,
    W_B,
    W_V6,
    first_addr,
    srv6_config,
    srv6_pkt,
)

from vecroute.fib.layout import A_SR_LIST
from vecroute.fib.route_table import bulk_key
from vecroute.graph.dataplane import fib_state
from vecroute.graph.state import NS_CALLS, OPT_FIB_GEN
from vecroute.packet.node_ids import ETHERNET_INPUT
from vecroute.srv6.tables import LocalSid, Policy, policy_key

ECMP_SEG = "2001:db8:400::9"  # a next segment with two next hops on eth1
ECMP_T5_4 = "198.51.100.0/24"  # table 5: two next hops on eth4 (after End.DT4 / DT46)
ECMP_T5_6 = "2001:db8:440::/48"


def _config() -> dict:
    cfg = srv6_config()
    cfg["routes"] += [
        {"prefix": "2001:db8:400::/48", "via": ["2001:db8:2::2", "2001:db8:2::4"]},
        {"prefix": ECMP_T5_4, "via": ["192.0.2.194", "192.0.2.195"], "table": T5},
        {"prefix": ECMP_T5_6, "via": ["2001:db8:5::2", "2001:db8:5::3"], "table": T5},
    ]
    cfg["neighbors"] += [
        {"ip": "2001:db8:2::4", "mac": "02:00:00:00:bb:04", "interface": "eth1"},
        {"ip": "192.0.2.195", "mac": "02:00:00:00:ee:03", "interface": "eth4"},
        {"ip": "2001:db8:5::3", "mac": "02:00:00:00:ee:03", "interface": "eth4"},
    ]
    return cfg


def _inner4(rng: random.Random, dst: str, ttl: int | None = None):
    return IP(src=H0_IP4, dst=dst, ttl=ttl or rng.randrange(2, 64)) / UDP(
        sport=rng.randrange(1024, 65536), dport=53) / (b"4" * rng.randrange(0, 40))


def _inner6(rng: random.Random, dst: str, hlim: int | None = None):
    return IPv6(src=H0_IP6, dst=dst, hlim=hlim or rng.randrange(2, 64)) / TCP(
        sport=rng.randrange(1024, 65536), dport=443, flags="A")


def _common(rng: random.Random):
    """A packet of a random flow the fused path should take itself."""
    pick = rng.randrange(13)
    sport = rng.randrange(1024, 65536)
    if pick <= 1:  # a head-end, IPv4 or IPv6 inner, any policy that has a route
        name = rng.choice(["e1", "e2", "e3", "r1", "r2", "r3"])
        _, _, v4, v6 = POLICIES[name]
        if pick == 0:
            return eth() / _inner4(rng, first_addr(v4, rng.randrange(1, 10)))
        return eth() / _inner6(rng, first_addr(v6, rng.randrange(1, 99)))
    if pick == 2:  # traffic to a binding SID is encapsulated too
        return eth() / IPv6(src=H0_IP6, dst=BSIDS["e2"]) / UDP(sport=sport, dport=9)
    if pick == 3:
        return srv6_pkt(SID_END, [rng.choice([NEXT6, ECMP_SEG]), SEG3])
    if pick == 4:
        return srv6_pkt(SID_IN_LOCATOR, [NEXT6])
    if pick == 5:
        return srv6_pkt(SID_T, [NEXT6, SEG3])
    if pick == 6:
        return srv6_pkt(rng.choice([SID_X, SID_X_PSP]), [NEXT6, SEG3])
    if pick == 7:
        return srv6_pkt(SID_DX4, [], inner=_inner4(rng, "203.0.113.9"), sl=0, nh=4)
    if pick == 8:
        return srv6_pkt(SID_DX6, [], inner=_inner6(rng, "2001:db8:100::9"), sl=0, nh=41)
    if pick == 9:
        return srv6_pkt(rng.choice([SID_DT4, SID_DT46]), [],
                        inner=_inner4(rng, rng.choice(["203.0.113.9", "198.51.100.7"])),
                        sl=0, nh=4)
    if pick == 10:
        return srv6_pkt(rng.choice([SID_DT6, SID_DT46]), [],
                        inner=_inner6(rng, rng.choice(["2001:db8:100::9", "2001:db8:440::7"])),
                        sl=0, nh=41)
    if pick == 11:  # a decapsulation with no SRH at all (H.Encaps.Red of one segment)
        return eth() / IPv6(src=H0_IP6, dst=SID_DT6, nh=41) / _inner6(rng, "2001:db8:100::9")
    # transit: an SRH whose active segment is not ours, forwarded as any packet
    return srv6_pkt("2001:db8:100::77", [SEG3])


def _exceptions(rng: random.Random) -> list:
    """What the fused path must leave to the nodes (their counters tell each apart)."""
    return [
        srv6_pkt(SID_END, [], sl=0),  # SL 0: upper layer
        srv6_pkt(SID_END, [NEXT6], inner=ICMPv6EchoRequest(), sl=0, nh=58),  # SL 0, ICMPv6
        srv6_pkt(SID_END, [NEXT6, SEG3], sl=5),  # SL past Last Entry
        srv6_pkt(SID_END, [NEXT6, SEG3], le=7),  # Last Entry past Hdr Ext Len
        srv6_pkt(SID_END_PSP, [NEXT6]),  # PSP pops the SRH
        srv6_pkt(SID_END, [NEXT6], hlim=1),
        srv6_pkt(SID_END, ["ff02::1"]),  # a next segment we do not route plainly
        srv6_pkt(SID_END, [SID_DT6], inner=_inner6(rng, "2001:db8:100::9"), nh=41),  # ours
        srv6_pkt(SID_END, ["2001:db8:dead::1"]),  # no route to the next segment
        srv6_pkt(SID_END, ["2001:db8:200::9"], inner=UDP() / (b"b" * 1300), nh=17),  # MTU
        srv6_pkt(SID_DX4, [NEXT6], inner=_inner4(rng, "203.0.113.9"), nh=4),  # SL not 0
        srv6_pkt(SID_DX4, [], inner=_inner6(rng, "2001:db8:100::9"), sl=0, nh=41),  # family
        srv6_pkt(SID_DT4, [], inner=_inner4(rng, "203.0.113.9", ttl=1), sl=0, nh=4),
        srv6_pkt(SID_DT6, [], inner=_inner6(rng, "2001:db8:100::9", hlim=1), sl=0, nh=41),
        srv6_pkt(SID_DT4, [], inner=IP(src=H0_IP4, dst="203.0.113.9", chksum=1) / UDP(),
                 sl=0, nh=4),
        srv6_pkt(SID_DT6, [], inner=IPv6(src=H0_IP6, dst="2001:db8:100::9")
                 / IPv6ExtHdrHopByHop() / UDP(), sl=0, nh=41),
        srv6_pkt(SID_DT6, [], inner=_inner6(rng, "2001:db8:dead::9"), sl=0, nh=41),
        srv6_pkt(SID_DT4, [], inner=_inner4(rng, "192.0.2.9"), sl=0, nh=4),  # no route
        # a decapsulation back out of the port it came in on (the nodes check a redirect)
        ("eth1", Ether(dst=R1, src=N1) / IPv6(src=H0_IP6, dst=SID_DX4, nh=4)
         / _inner4(rng, "203.0.113.9")),
        srv6_pkt(SID_DT6, [], inner=_inner6(rng, R0_IP6), sl=0, nh=41),  # for us
        eth() / IPv6(src=H0_IP6, dst=SID_END) / IPv6ExtHdrHopByHop() / UDP(),
        eth() / _inner4(rng, first_addr(POLICIES["small"][2]), ttl=9) / (b"m" * 1400),
        eth() / IP(src=H0_IP4, dst=first_addr(POLICIES["e1"][2]), ttl=1) / UDP(),
        eth() / IPv6(src=H0_IP6, dst=first_addr(POLICIES["noroute"][3])) / UDP(),
        eth() / IPv6(src=H0_IP6, dst=first_addr(POLICIES["e3"][3])) / UDP() / (b"j" * 1440),
    ]


def _corpus(seed: int, n: int) -> list[tuple[str, bytes]]:
    rng = random.Random(seed)
    out = [p if isinstance(p, tuple) else ("eth0", p) for p in _exceptions(rng)]
    out = [(rx, bytes(p)) for rx, p in out]
    for _ in range(n):
        f = bytearray(bytes(_common(rng)))
        if rng.random() < 0.35:  # a lying field in the headers, the SRH or the inner packet
            for _ in range(rng.randrange(1, 3)):
                f[rng.randrange(0, min(len(f), 150))] = rng.randrange(256)
        if rng.random() < 0.1:
            f += bytes(rng.randrange(1, 20))  # Ethernet padding
        out.append(("eth0", bytes(f)))
    rng.shuffle(out)
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_fused_srv6_equals_the_node_graph(seed: int) -> None:
    frames = _corpus(seed, 900)
    a = same_as_nodes(*router_pair(lambda: Router(_config())), frames)
    c = a["counters"]
    assert c["srv6-encapsulated"] > 100 and c["srv6-end"] > 200 and c[
        "srv6-decapsulated"] > 200
    for name in ("srv6-bad-srh", "srv6-sl-not-zero", "srv6-upper-layer", "ttl-expired",
                 "mtu-exceeded", "no-route", "srv6-no-route", "ip4-bad-checksum"):
        assert c.get(name, 0) > 0, name


def test_common_srv6_packets_take_the_fused_path_alone() -> None:
    """A batch of nothing but common SRv6 packets: all of them leave in the fused pass
    (ethernet-input called once: no packet walked the nodes), and the same as the nodes."""
    rng = random.Random(3)
    frames = [bytes(_common(rng)) for _ in range(200)]
    fused, nodes = router_pair(lambda: Router(_config()))
    res = fused.run(frames, now_ns=10**9)
    assert len(res.tx) == len(frames)
    assert fused.state.node_stats[ETHERNET_INPUT, NS_CALLS] == 1
    assert _observed(fused, res) == _observed(nodes, nodes.run(frames, now_ns=10**9))


def test_fused_srv6_with_a_firewall_equals_the_node_graph() -> None:
    """With a firewall the fused path classifies the candidates (SRH packets among them) and
    hands SRv6 adjacencies to the lookup node: still the node graph's result."""
    cfg = _config()
    cfg["firewall"] = {"default": "allow", "rules": [
        "100 deny tcp from any to any 443 in",  # the head-ends' IPv6 inner packets
        "200 deny udp from any to any 8 out xmit eth3",  # End.X's packets, at output
        "300 allow ip from any to any",
    ]}
    frames = _corpus(5, 600)
    fused, nodes = router_pair(lambda: Router(cfg))
    a = same_as_nodes(fused, nodes, frames)
    assert fused.firewall.show() == nodes.firewall.show(), "rule counters"
    c = a["counters"]
    assert c["fw-deny"] > 50 and c["srv6-end"] > 50 and c["srv6-decapsulated"] > 50
    assert a["node_packets"].get("fw-in", 0) > 400


def test_fused_srv6_follows_changes_of_the_host_routes() -> None:
    """The fused path probes SRv6 destinations in a table of the /128s of its own
    (fib/host6.py), published with the tables. A SID deleted, a SID given another
    behaviour and a plain /128 route inside End's locator, all swapped in between two
    runs: the fused path still gives the node graph's result, before and after."""
    rng = random.Random(11)
    host = "2001:db8:fe::99"  # in LOCATOR (End): a /128 route of its own overrides it
    frames = [bytes(f) for _ in range(40) for f in (
        srv6_pkt(SID_END, [NEXT6, SEG3]),
        srv6_pkt(SID_DX6, [], inner=_inner6(rng, "2001:db8:100::9"), sl=0, nh=41),
        srv6_pkt(host, [NEXT6]),
        srv6_pkt(SID_IN_LOCATOR, [NEXT6]),
    )]
    fused, nodes = router_pair(lambda: Router(_config()))
    before = _observed(fused, fused.run(frames, now_ns=10**9))
    assert before == _observed(nodes, nodes.run(frames, now_ns=10**9))
    assert fused.state.node_stats[ETHERNET_INPUT, NS_CALLS] == 1, "all of them fused"
    for r in (fused, nodes):
        sids = r.fib.srv6
        sids.del_localsid(ipaddress.ip_network(f"{SID_END}/128"))
        sids.del_localsid(ipaddress.ip_network(f"{SID_DX6}/128"))
        sids.add_localsid(LocalSid(ipaddress.ip_network(f"{SID_DX6}/128"), "End"))
        r.fib.add_route(f"{host}/128", [ipaddress.ip_address(N1_IP6)])
        r.graph.swap_state(fib_state(r.fib))
        r.state = r.graph.state
    fused.state.clear_counters()
    nodes.state.clear_counters()
    after = _observed(fused, fused.run(frames, now_ns=2 * 10**9))
    assert after == _observed(nodes, nodes.run(frames, now_ns=2 * 10**9))
    c0, c1 = before["counters"], after["counters"]
    # End: SID_END, the locator's SID and the address that is not yet a /128 of its own
    assert c0["srv6-end"] == 120 and c0["srv6-decapsulated"] == 40
    # SID_END gone (no route), DX6's SID now End (SL 0 with an inner packet: RFC 8986
    # 4.1.1), the /128 a plain route, the locator's SID End as before
    assert (c1["no-route"], c1["srv6-upper-layer"], c1["srv6-end"], c1["ip6-forwarded"]) == (
        40, 40, 40, 80)


def test_fused_encap_follows_a_load_balance_changed_in_place() -> None:
    """The fused pass caches each segment list's first hop, down to the adjacency when the
    first segment's route has one bucket. The route to the policies' first segment moved
    onto a private load-balance (a kernel nexthop object's, as linux-cp mirrors them, via
    Fib.install_many), whose buckets are then rewritten in place to another next hop on
    the same port, then to both (Fib.set_load_balance: the nexthop changed, no route
    did): the encapsulated frames follow to the new next hop's MAC, then spread over both
    by flow, as the node graph's do."""
    rng = random.Random(9)
    frames = [bytes(eth() / IPv6(src=H0_IP6, dst=first_addr(POLICIES["e2"][3], 1 + k))
                    / UDP(sport=rng.randrange(1024, 65535), dport=53) / b"q") for k in range(40)]
    first = ipaddress.ip_network("2001:db8:100::/48")  # SEG1's route, table 0
    old_nh, new_nh = ipaddress.ip_address(N1_IP6), ipaddress.ip_address("2001:db8:2::4")
    fused, nodes = router_pair(lambda: Router(_config()))
    lbs = {}
    for r in (fused, nodes):
        fib = r.fib
        ifx = fib.interface_index("eth1")
        lb = fib.lbs.get_private(fib.path_adjacencies(6, [(ifx, old_nh)]))
        fib.lbs.ref(lb)
        a = int(first.network_address)
        fib.install_many(6, 0, [bulk_key(0, first)], [("static", [(ifx, old_nh)], lb)],
                         (np.array([a >> 64], np.uint64), np.array([a & (2**64 - 1)], np.uint64)),
                         np.array([48], np.int64), np.array([lb], np.int64), distinct=True)
        r.graph.swap_state(fib_state(fib))
        r.state = r.graph.state
        lbs[r] = (lb, ifx)
    macs = []
    for step in range(3):  # one next hop, another one, both (two buckets: not cached)
        if step > 0:
            hops = [new_nh] if step == 1 else [old_nh, new_nh]
            for r, (lb, ifx) in lbs.items():
                gen = fib_state(r.fib).opts[OPT_FIB_GEN]
                paths = [(ifx, nh) for nh in hops]
                r.fib.set_load_balance(lb, r.fib.path_adjacencies(6, paths), None)
                # a published state starts its caches afresh; one changed in place (the
                # tables shared) sees the generation move
                assert fib_state(r.fib).opts[OPT_FIB_GEN] != gen
                r.graph.swap_state(fib_state(r.fib))
                r.state = r.graph.state
        res = fused.run(frames, now_ns=(step + 1) * 10**9)
        assert _observed(fused, res) == _observed(nodes, nodes.run(frames, now_ns=(step + 1)
                                                                  * 10**9))
        assert len(res.tx) == len(frames)
        macs.append({Ether(t.data).dst for t in res.tx})
    assert macs == [{N1}, {"02:00:00:00:bb:04"}, {N1, "02:00:00:00:bb:04"}], macs


def _outer_dsts(res) -> set[str]:
    """The destinations of the encapsulated frames sent (an SRH behind the IPv6 header)."""
    out = set()
    for t in res.tx:
        e = Ether(t.data)
        if e.type == 0x86DD and e[IPv6].nh == 43:
            out.add(e[IPv6].dst)
    return out


def test_fused_encap_follows_policies_given_other_lists() -> None:
    """A policy whose buckets all hold one segment list carries that list in its adjacency
    (A_SR_LIST: the fused pass reads no policy and no bucket); one with several lists
    carries -1 and the flow's hash picks the list. Policies replaced in place (one list ->
    two, two -> one) and deleted, swapped in between runs: the adjacency says which (-1
    once deleted), every frame takes the fused pass, and it gives the node graph's frames
    and counters each time."""
    rng = random.Random(21)
    e1_v6 = POLICIES["e1"][3]
    frames = [bytes(eth() / IPv6(src=H0_IP6, dst=first_addr(pfx, 1 + k % 50))
                    / UDP(sport=rng.randrange(1024, 65535), dport=53) / b"w")
              for k in range(120) for pfx in (W_V6, e1_v6)]
    fused, nodes = router_pair(lambda: Router(_config()))

    def lists_of(r, bsid):  # the list the adjacency carries, the policy's lists
        p = r.fib.srv6.policies[ipaddress.ip_address(bsid)]
        a = r.fib.adjs.index[policy_key(p.index)]
        return int(r.state.adj[a, A_SR_LIST]), p.lists

    def run(step):
        now = (step + 1) * 10**9
        for r in (fused, nodes):
            r.graph.swap_state(fib_state(r.fib))
            r.state = r.graph.state
            r.state.clear_counters()
        res = fused.run(frames, now_ns=now)
        assert _observed(fused, res) == _observed(nodes, nodes.run(frames, now_ns=now))
        return res, int(fused.state.node_stats[ETHERNET_INPUT, NS_CALLS])

    res, calls = run(0)
    assert calls == 1, "every frame in the fused pass"
    assert lists_of(fused, BSID_W)[0] == -1  # weights 1 and 3: two lists
    one, lists = lists_of(fused, BSIDS["e1"])
    assert lists == [one]
    assert len(res.tx) == len(frames)
    assert {W_A, W_B, SEG1} <= _outer_dsts(res)
    seg = [ipaddress.ip_address(SEG1)]
    two = [([ipaddress.ip_address(W_B)], 2)]
    for r in (fused, nodes):  # W: one list (weight 2); e1: two lists
        t = r.fib.srv6
        t.add_policy(Policy(ipaddress.ip_address(BSID_W), two))
        t.add_policy(Policy(ipaddress.ip_address(BSIDS["e1"]),
                            [(seg, 1), ([ipaddress.ip_address(W_A)], 1)]))
    res, calls = run(1)
    assert calls == 1
    one, lists = lists_of(fused, BSID_W)
    assert lists == [one] and lists_of(fused, BSIDS["e1"])[0] == -1
    assert len(res.tx) == len(frames)
    dsts = _outer_dsts(res)
    assert W_B in dsts and SEG1 in dsts and W_A in dsts  # W_A now only through e1
    assert res.counters["srv6-encapsulated"] == len(frames)
    w_index = fused.fib.srv6.policies[ipaddress.ip_address(BSID_W)].index
    for r in (fused, nodes):
        r.fib.srv6.del_policy(ipaddress.ip_address(BSID_W))
    # no route leads to W's adjacency any more; a state not yet swapped (its arrays
    # shared) would still, and must find the buckets gone, not the old list
    assert fused.fib.adjs.adj[fused.fib.adjs.index[policy_key(w_index)], A_SR_LIST] == -1
    res, _ = run(2)
    assert res.counters["srv6-encapsulated"] == len(frames) // 2  # e1's alone
    assert _outer_dsts(res) == {SEG1, W_A}
