"""The fused common path (graph/fast_path.py) against the node graph it short-cuts.

The oracle is the graph itself with the fused path off (``OPT_NO_FUSED``): two routers
built from the same config get the same frames, and everything observable must agree —
the frames sent (bytes, port, origin, order among a packet's offspring), every counter,
the interface statistics, each packet's fate and the packets per node in ``show runtime``.
The corpus mixes plain traffic with every kind of exception and with random byte
mutations of plain packets, so packets of both kinds share batches. Forwarded frames are
also checked with scapy, and a direct call checks that what the fused path hands back is
exactly what arrived.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from conftest import (
    BCAST,
    DST4,
    DST4_INCOMPLETE,
    DST4_NOROUTE,
    DST4_SMALL,
    DST6,
    DST6_INCOMPLETE,
    DST6_NOROUTE,
    DST6_SMALL,
    H0,
    H0_IP4,
    H0_IP6,
    R0,
    R0_IP4,
    R0_IP6,
    R1,
    Router,
    assert_checksums,
    base_config,
    eth,
)
from scapy.layers.inet import ICMP, IP, TCP, UDP, IPOption_RR
from scapy.layers.inet6 import (
    ICMPv6DestUnreach,
    ICMPv6EchoRequest,
    IPv6,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
)
from scapy.layers.l2 import ARP, Ether

from vecroute.graph.dispatch import Graph
from vecroute.graph.fast_path import fused_forward
from vecroute.graph.state import (
    DP,
    FW_RUN_IN,
    FW_RUN_OUT,
    FW_TABLES,
    NS_CALLS,
    NS_PACKETS,
    OPT_FW,
    OPT_NO_FUSED,
)
from vecroute.packet.batch import M_NEXT, N_META, SLOT
from vecroute.packet.node_ids import ETHERNET_INPUT, NODE_NAMES

H0B = "02:00:00:00:aa:11"  # a second host on eth0: the redirect's better gateway
H0B_IP4 = "198.51.100.11"
BACK4 = "198.18.5.5"  # routed back out eth0 via H0B: a redirect is due for H0's packets
ECMP4 = "203.0.114.7"  # two next hops on eth1
ECMP6 = "2001:db8:400::7"


def _config() -> dict:
    cfg = base_config()
    cfg["routes"] += [
        {"prefix": "198.18.5.0/24", "via": H0B_IP4},
        {"prefix": "203.0.114.0/24", "via": ["192.0.2.2", "192.0.2.4"]},
        {"prefix": "2001:db8:400::/48", "via": ["2001:db8:2::2", "2001:db8:2::4"]},
    ]
    cfg["neighbors"] += [
        {"ip": H0B_IP4, "mac": H0B, "interface": "eth0"},
        {"ip": "192.0.2.4", "mac": "02:00:00:00:bb:04", "interface": "eth1"},
        {"ip": "2001:db8:2::4", "mac": "02:00:00:00:bb:04", "interface": "eth1"},
    ]
    return cfg


def _plain(rng: random.Random):
    """A plain packet of a random flow (what the fused path is for)."""
    sport, dport = rng.randrange(1024, 65536), rng.choice((53, 80, 443, 4789))
    pick = rng.randrange(8)
    if pick == 0:
        return eth() / IP(src=H0_IP4, dst=DST4, ttl=rng.randrange(2, 256)) / UDP(
            sport=sport, dport=dport) / (b"u" * rng.randrange(0, 80))
    if pick == 1:
        return eth() / IP(src=H0_IP4, dst=ECMP4) / TCP(sport=sport, dport=dport, flags="A")
    if pick == 2:
        return eth() / IP(src=H0_IP4, dst=DST4, flags="DF") / ICMP(id=sport, seq=1) / b"ping"
    if pick == 3:
        return eth() / IP(src=H0_IP4, dst=BACK4) / UDP(sport=sport, dport=dport)
    if pick == 4:
        return eth() / IPv6(src=H0_IP6, dst=DST6, hlim=rng.randrange(2, 256)) / UDP(
            sport=sport, dport=dport) / (b"v" * rng.randrange(0, 80))
    if pick == 5:
        return eth() / IPv6(src=H0_IP6, dst=ECMP6) / TCP(sport=sport, dport=dport)
    if pick == 6:
        return eth() / IPv6(src=H0_IP6, dst=DST6) / ICMPv6EchoRequest(id=sport)
    return eth() / IPv6(src=H0_IP6, dst=DST6) / ICMPv6DestUnreach() / IPv6(
        src=DST6, dst=H0_IP6) / UDP()


EXCEPTIONS = [
    # IPv4: TTL, MTU, neighbour, route, local, options, fragments, addresses, L2
    eth() / IP(src=H0_IP4, dst=DST4, ttl=1) / UDP(),
    eth() / IP(src=H0_IP4, dst=DST4_SMALL, flags="DF") / UDP() / (b"x" * 1000),
    eth() / IP(src=H0_IP4, dst=DST4_SMALL) / UDP() / (b"x" * 1000),
    eth() / IP(src=H0_IP4, dst=DST4_INCOMPLETE) / UDP(),
    eth() / IP(src=H0_IP4, dst=DST4_NOROUTE) / UDP(),
    eth() / IP(src=H0_IP4, dst=R0_IP4) / ICMP(),
    eth() / IP(src=H0_IP4, dst=DST4, options=[IPOption_RR()]) / UDP(),
    eth() / IP(src=H0_IP4, dst=DST4, flags="MF") / UDP(),
    eth() / IP(src=H0_IP4, dst=DST4, frag=3) / (b"f" * 16),
    eth() / IP(src="169.254.1.1", dst=DST4) / UDP(),
    eth() / IP(src=H0_IP4, dst="169.254.9.9") / UDP(),
    eth() / IP(src="127.0.0.1", dst=DST4) / UDP(),
    eth() / IP(src=H0_IP4, dst="224.0.0.5") / UDP(),
    eth() / IP(src=H0_IP4, dst="255.255.255.255") / UDP(),
    eth() / IP(src=H0_IP4, dst="0.1.2.3") / UDP(),
    eth(dst=BCAST) / IP(src=H0_IP4, dst=DST4) / UDP(),
    eth(dst="02:00:00:00:99:99") / IP(src=H0_IP4, dst=DST4) / UDP(),
    eth() / IP(src=H0_IP4, dst=DST4, chksum=0x1234) / UDP(),
    eth() / IP(src=H0_IP4, dst=DST4, len=200) / UDP(),
    eth() / IP(src=H0_IP4, dst=DST4, len=10) / UDP(),
    eth() / IP(src=H0_IP4, dst=DST4, version=5) / UDP(),
    eth() / ARP(op=1, hwsrc=H0, psrc=H0_IP4, pdst=R0_IP4),
    # IPv6: hop limit, MTU, neighbour, route, local, extension headers, scopes
    eth() / IPv6(src=H0_IP6, dst=DST6, hlim=1) / UDP(),
    eth() / IPv6(src=H0_IP6, dst=DST6_SMALL) / UDP() / (b"y" * 1300),
    eth() / IPv6(src=H0_IP6, dst=DST6_INCOMPLETE) / UDP(),
    eth() / IPv6(src=H0_IP6, dst=DST6_NOROUTE) / UDP(),
    eth() / IPv6(src=H0_IP6, dst=R0_IP6) / ICMPv6EchoRequest(),
    eth() / IPv6(src=H0_IP6, dst=DST6) / IPv6ExtHdrHopByHop() / UDP(),
    eth() / IPv6(src=H0_IP6, dst=DST6) / IPv6ExtHdrFragment(m=1) / UDP(),
    eth() / IPv6(src=H0_IP6, dst=DST6) / IPv6ExtHdrRouting(addresses=[DST6]) / UDP(),
    eth() / IPv6(src="fe80::1", dst=DST6) / UDP(),
    eth() / IPv6(src=H0_IP6, dst="fe80::9") / UDP(),
    eth() / IPv6(src=H0_IP6, dst="ff02::1") / ICMPv6EchoRequest(),
    eth() / IPv6(src="::", dst=DST6) / UDP(),
    eth() / IPv6(src=H0_IP6, dst="::1") / UDP(),
    eth() / IPv6(src=H0_IP6, dst=DST6, plen=500) / UDP(),
    Ether(dst=R0, src=H0, type=0x88B5) / (b"z" * 50),
    Ether(dst=R0, src=H0, type=0x0800) / b"\x45\x00",
]


def _corpus(seed: int, n: int) -> list[bytes]:
    """Plain packets, exceptions and random byte mutations of plain packets, shuffled."""
    rng = random.Random(seed)
    out = [bytes(p) for p in EXCEPTIONS]
    for _ in range(n):
        f = bytearray(bytes(_plain(rng)))
        if rng.random() < 0.35:  # a lying field somewhere in the L2/L3/L4 headers
            for _ in range(rng.randrange(1, 3)):
                f[rng.randrange(0, min(len(f), 70))] = rng.randrange(256)
        if rng.random() < 0.1:
            f += bytes(rng.randrange(1, 20))  # Ethernet padding
        out.append(bytes(f))
    rng.shuffle(out)
    return out


def router_pair(make) -> tuple[Router, Router]:
    """Two routers from ``make()``: the fused path on, and off (the node graph, the oracle)."""
    fused, nodes = make(), make()
    nodes.state.opts[OPT_NO_FUSED] = 1
    return fused, nodes


def same_as_nodes(fused: Router, nodes: Router, frames, now_ns: int = 10**9) -> dict:
    """The frames through both routers: every observable equal (_observed); the fused
    router's, for the caller's checks of what the corpus exercised."""
    a = _observed(fused, fused.run(frames, now_ns=now_ns))
    b = _observed(nodes, nodes.run(frames, now_ns=now_ns))
    for key in a:
        assert a[key] == b[key], key
    return a


def _pair() -> tuple[Router, Router]:
    return router_pair(lambda: Router(_config()))


def _observed(r: Router, res) -> dict:
    return {
        "tx": [(t.ifname, t.data, t.orig, t.seq) for t in res.tx],
        "counters": res.counters,
        "fates": res.fates,
        "if_stats": r.state.if_stats.tolist(),
        "node_packets": {NODE_NAMES[i]: int(v)
                         for i, v in enumerate(r.state.node_stats[:, NS_PACKETS]) if v},
    }


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fused_path_equals_the_node_graph(seed: int) -> None:
    frames = _corpus(seed, 700)
    a = same_as_nodes(*_pair(), frames)
    # the corpus did exercise both sides: plain packets forwarded, exceptions of each kind
    assert a["counters"]["ip4-forwarded"] > 200 and a["counters"]["ip6-forwarded"] > 200
    for c in ("ip4-bad-checksum", "ttl-expired", "no-route", "redirect-sent",
              "ip6-bad-ext" if "ip6-bad-ext" in a["counters"] else "ip6-bad-length"):
        assert a["counters"].get(c, 0) > 0, c


def test_destination_macs_on_every_port() -> None:
    """The fused pass takes a frame only when it is for the receiving port's own MAC (on
    every port, the last row of the MAC table included): not another port's MAC, not one
    that differs in a single byte of either half."""
    macs = [R0, "02:00:00:00:00:02", "02:00:00:00:00:03", "02:00:00:00:00:04"]
    items = []
    for k, mac in enumerate(macs):
        wrong = [macs[(k + 1) % 4], "06" + mac[2:], mac[:9] + "01" + mac[11:]]
        for dst in [mac, *wrong]:
            items.append((f"eth{k}", Ether(dst=dst, src=H0) / IP(src=H0_IP4, dst=DST4) / UDP()))
    fused, nodes = _pair()
    a = _observed(fused, fused.run(items, now_ns=10**9))
    b = _observed(nodes, nodes.run(items, now_ns=10**9))
    for key in a:
        assert a[key] == b[key], key
    right = {4 * k for k in range(4)}
    assert a["tx"], "the frames to the ports' own MACs go out"
    assert {t[2] for t in a["tx"]} <= right, "no frame to a wrong MAC is forwarded"


def test_fused_path_equals_the_node_graph_when_redirects_are_rate_limited() -> None:
    """With no token left, ip4-rewrite forwards without a redirect: so does the fused path."""
    rng = random.Random(9)
    frames = [bytes(eth() / IP(src=H0_IP4, dst=BACK4) / UDP(sport=rng.randrange(1, 65535)))
              for _ in range(300)]
    fused, nodes = _pair()
    for r in (fused, nodes):
        r.set_icmp_rate(1, 2)
    a = _observed(fused, fused.run(frames, now_ns=10**9))
    b = _observed(nodes, nodes.run(frames, now_ns=10**9))
    assert a == b
    assert a["counters"]["redirect-sent"] == 2 and a["counters"]["ip4-forwarded"] == 300


def test_forwarded_frames_read_back_with_scapy() -> None:
    """What the fused path emits, as scapy reads it: new MACs, TTL / hop limit - 1, the IPv4
    checksum right (scapy recomputes it), padding trimmed, everything else as sent."""
    rng = random.Random(4)
    sent = [_plain(rng) for _ in range(200)]
    sent = [Ether(bytes(p)) for p in sent if (IP in p and p[IP].dst != BACK4) or IPv6 in p]
    fused, _ = _pair()
    wires = [bytes(p) + bytes(7) for p in sent]  # 7 bytes of Ethernet padding each
    res = fused.run(wires)
    assert len(res.tx) == len(sent)
    node_calls = fused.state.node_stats[ETHERNET_INPUT]
    assert node_calls[0] == 1, "one batch, all plain: the fused pass alone (one call)"
    for t in res.tx:
        p, q = sent[t.orig], t.pkt
        assert q[Ether].src == R1 and t.ifname == "eth1"
        if IP in p:
            assert q[IP].ttl == p[IP].ttl - 1
            assert bytes(q[IP].payload) == bytes(p[IP].payload)
            assert len(bytes(q)) == 14 + p[IP].len
        else:
            assert q[IPv6].hlim == p[IPv6].hlim - 1
            assert bytes(q[IPv6].payload) == bytes(p[IPv6].payload)
            assert len(bytes(q)) == 14 + 40 + p[IPv6].plen
        assert_checksums(q)


def test_what_is_handed_back_is_untouched() -> None:
    """A direct call on a batch of exceptions and plain packets: the plain ones leave, the
    rest stay in ethernet-input's frame in arrival order, bytes and metadata as loaded."""
    r, _ = _pair()
    rng = random.Random(5)
    plain = [bytes(eth() / IP(src=H0_IP4, dst=DST4) / UDP(sport=rng.randrange(1, 9999)))
             for _ in range(20)]
    frames = [f for pair in zip(plain, [bytes(p) for p in EXCEPTIONS[:20]], strict=True)
              for f in pair]
    b = r.batch
    lens = np.array([len(f) for f in frames], np.int32)
    offs = np.concatenate([[0], np.cumsum(lens[:-1])]).astype(np.int64)
    data = np.frombuffer(b"".join(frames), np.uint8)
    n = b.load(data, offs, lens, np.zeros(len(frames), np.int64),
               np.zeros(len(frames), np.int32), 0, len(frames))
    g: Graph = r.graph
    g.frame_n[:] = 0
    g.frames[ETHERNET_INPUT, :n] = np.arange(n)
    g.frame_n[ETHERNET_INPUT] = n
    g.txn[0] = 0
    buf0, meta0 = b.buf.copy(), b.meta.copy()
    fused_forward(b.buf, b.meta, g.frames, g.frame_n, g.txl, g.txn, DP(*r.state.args()), None,
                  None, None, 0)
    left = list(g.frames[ETHERNET_INPUT, : g.frame_n[ETHERNET_INPUT]])
    sent = list(g.txl[: g.txn[0]])
    assert sent == list(range(0, n, 2)), "every plain packet, in order"
    assert left == list(range(1, n, 2)), "every exception, in order"
    for i in left:
        assert (b.buf[i * SLOT:(i + 1) * SLOT] == buf0[i * SLOT:(i + 1) * SLOT]).all()
        assert (b.meta[:, i] == meta0[:, i]).all()
        assert b.meta[M_NEXT, i] == ETHERNET_INPUT
    assert b.meta.shape[0] == N_META


def test_off_while_a_trace_selects() -> None:
    """A trace that is selecting packets turns the fused pass off: every packet then walks
    the nodes (ethernet-input is called once per batch, not twice)."""
    from vecroute.control.trace import arm, disarm

    rng = random.Random(6)
    frames = [bytes(_plain(rng)) for _ in range(100)] + [bytes(p) for p in EXCEPTIONS]
    r, _ = _pair()
    arm(r.state, 1000, "ethernet-input", None)
    r.run(frames)
    assert r.state.node_stats[ETHERNET_INPUT, NS_CALLS] == 1
    disarm(r.state)
    r.run(frames)
    assert r.state.node_stats[ETHERNET_INPUT, NS_CALLS] == 3, "on again: fused + nodes"


FW_RULES = [
    "100 deny udp from any to any 4789",
    "200 reject tcp from any to 203.0.114.0/24 80",
    "300 reset tcp from any to 2001:db8:400::/48 443",
    "400 unreach port udp from any to 2001:db8:100::/48 53",
    "500 deny ip from any to table(bad) out",
    "600 deny icmp from any to any out xmit eth1 icmptypes 3",
    "700 allow ip from any to any",
]


# no rule tells the passes apart (no direction, interface, state, count or skipto): the
# fused pass counts fw-in's deciding rule again at fw-out instead of classifying there
FW_RULES_SAME_BOTH_WAYS = [
    "100 deny udp from any to any 4789",
    "200 reject tcp from any to 203.0.114.0/24 80",
    "300 deny ip from table(bad) to any",
    "350 deny ip from any to table(bad)",
    "400 unreach port udp from any to 2001:db8:100::/48 53",
    "500 allow udp from any to any",
    "600 allow ip6 from any to any",
    "700 allow ip from any to any",
]


# only address tables decide (CompiledFirewall.tables_only): the passes classify from the
# headers, without key rows, and stage only the packets that leave the fused pass
FW_RULES_TABLES = [
    "100 deny ip from table(bad) to any",
    "200 reject ip from any to table(bad)",  # the ECMP destinations: ICMP errors back
    "300 allow ip from any to table(ok, 1)",  # DST4 here; DST6's value is 2
    "400 deny ip from any to not table(ok)",  # BACK4: denied
]
FW_TABLES_CFG = [
    {"name": "bad", "type": "addr", "entries": ["203.0.114.0/25", "2001:db8:400::/64"]},
    {"name": "ok", "type": "addr", "entries": ["203.0.113.0/24 1", "2001:db8:100::/48 2",
                                               "203.0.114.0/24 1", "2001:db8:400::/48 1"]},
]


@pytest.mark.parametrize("directions", [FW_RUN_IN | FW_RUN_OUT, FW_RUN_OUT])
def test_fused_path_with_table_only_rules_equals_the_walk(directions: int) -> None:
    """A rule set of address tables only is classified from the headers (fw-in, fw-out
    when it runs alone, or fw-in's rule counted again): with the fused pass and without,
    the results must be those of the full walk (key rows, class rows) on the same path,
    the rule counters included; only the denied and rejected packets leave the pass. With
    both directions the fused pass must also equal the node graph. (With fw-out alone it
    stops packets before the nodes have seen the rest of the batch, so the ICMP errors'
    IP IDs come in another order: the graph's ordering, with or without tables.)"""
    cfg = _config()
    cfg["firewall"] = {"default": "allow", "rules": FW_RULES_TABLES, "tables": FW_TABLES_CFG}
    routers = {name: Router(cfg) for name in ("fused", "fused walk", "nodes", "nodes walk")}
    assert routers["fused"].firewall.compiled.tables_only()
    for name, r in routers.items():
        if name.endswith("walk"):  # these routers walk the classes
            r.firewall.compiled.tables_only = lambda: False
        if name.startswith("nodes"):
            r.state.opts[OPT_NO_FUSED] = 1
        r.graph.attach_firewall(r.firewall, directions)
    frames = _corpus(11, 700)
    seen = {name: _observed(r, r.run(frames, now_ns=10**9)) for name, r in routers.items()}
    shown = {name: r.firewall.show() for name, r in routers.items()}
    for name, r in routers.items():
        assert bool(r.state.opts[OPT_FW] & FW_TABLES) != name.endswith("walk"), name
    pairs = [("fused", "fused walk"), ("nodes", "nodes walk")]
    if directions & FW_RUN_IN:
        pairs.append(("fused", "nodes"))
    for x, y in pairs:
        for key in seen[x]:
            assert seen[x][key] == seen[y][key], (x, y, key)
        assert shown[x] == shown[y], (x, y, "rule counters")
    counts = {ln.split()[0]: int(ln.split()[1]) for ln in shown["fused"].splitlines()}
    for rule in ("00200", "00300", "00400", "65535"):
        assert counts[rule] > 0, rule
    for cnt in ("fw-deny", "fw-reject", "ip4-forwarded", "ip6-forwarded"):
        assert seen["fused"]["counters"].get(cnt, 0) > 0, cnt
    calls = {n: r.state.node_stats[ETHERNET_INPUT, NS_CALLS] for n, r in routers.items()}
    assert calls["fused"] > calls["nodes"], "the plain packets took the fused pass"
    if not directions & FW_RUN_IN:
        return
    # a rule change that spoils the table-only form turns the flag off at the next batch,
    # and deleting it turns it on again; the fused pass still equals the node graph
    fused, nodes = routers["fused"], routers["nodes"]
    for step, change in enumerate((lambda r: r.firewall.add("250 count ip from any to any"),
                                   lambda r: r.firewall.delete(250))):
        for r in (fused, nodes):
            change(r)
        now = (step + 2) * 10**9
        a, b = (_observed(r, r.run(frames, now_ns=now)) for r in (fused, nodes))
        for key in a:
            assert a[key] == b[key], (step, key)
        assert fused.firewall.show() == nodes.firewall.show(), (step, "rule counters")
        assert bool(fused.state.opts[OPT_FW] & FW_TABLES) == (step == 1), step


@pytest.mark.parametrize("rules", ["default only", "both ways", "per direction"])
def test_fused_path_with_a_firewall_equals_the_node_graph(rules: str) -> None:
    """With a firewall, the candidates are classified in the fused pass (fw-in, fw-out);
    the verdicts, rule counters, answers (reject, unreach, reset) and everything else must
    be the node graph's (which classifies both passes in full), also where the fused pass
    only counts fw-in's rule again at fw-out."""
    default_only = rules == "default only"
    tables = [{"name": "bad", "type": "addr", "entries": ["203.0.113.0/26",
                                                          "2001:db8:100::/64"]}]
    cfg = _config()
    cfg["firewall"] = (
        {"default": "allow", "rules": []} if default_only else
        {"default": "deny", "rules": FW_RULES_SAME_BOTH_WAYS, "tables": tables}
        if rules == "both ways" else
        {"default": "deny", "rules": FW_RULES, "tables": tables})
    fused, nodes = router_pair(lambda: Router(cfg))
    assert fused.firewall.compiled.out_repeats_in() == (rules != "per direction")
    frames = _corpus(7, 700)
    a = same_as_nodes(fused, nodes, frames)
    assert fused.firewall.show() == nodes.firewall.show(), "rule counters"
    assert a["node_packets"].get("fw-in", 0) > 500
    if not default_only:
        want = ("fw-deny", "fw-reject", "ip4-forwarded", "ip6-forwarded") + (
            ("fw-reset",) if rules == "per direction" else ())
        for c in want:
            assert a["counters"].get(c, 0) > 0, c
    # the plain packets were classified in the fused pass: ethernet-input ran twice a batch
    assert fused.state.node_stats[ETHERNET_INPUT, NS_CALLS] > nodes.state.node_stats[
        ETHERNET_INPUT, NS_CALLS]
    if rules == "both ways":  # a rule that sees the direction: classified at fw-out again
        for r in (fused, nodes):
            r.firewall.add("450 deny udp from any to any out")
        assert not fused.firewall.compiled.out_repeats_in()
        a = _observed(fused, fused.run(frames, now_ns=2 * 10**9))
        b = _observed(nodes, nodes.run(frames, now_ns=2 * 10**9))
        for key in a:
            assert a[key] == b[key], key
        assert fused.firewall.show() == nodes.firewall.show(), "rule counters, again"
        denied = {ln.split()[0]: ln.split() for ln in fused.firewall.show().splitlines()}
        assert int(denied["00450"][1]) > 0, "the new output rule denied at fw-out"
