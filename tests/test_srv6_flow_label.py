"""H.Encaps' outer flow label: the flow hash (default), the inner packet's, or zero.

``[srv6] flow_label`` and a policy's own ``flow_label`` choose what Linux's
``net.ipv6.seg6_flowlabel`` does (1 / 0 / -1). scapy parses what leaves; the node graph
with the fused path off is the oracle for the fused pass. With a label that is not the
hash, the hash is still what picks a weighted list, the first hop's path and, for a
policy whose first segment is another policy, that policy's list: flows still spread.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from conftest import H0_IP6, N1, Router, eth
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from test_fast_path import _observed, router_pair, same_as_nodes
from test_srv6 import (
    BSID_W,
    BSIDS,
    POLICIES,
    SEG1,
    SEG2,
    W_A,
    W_B,
    check_encap,
    first_addr,
    one,
    srv6_config,
    swap,
    udp4,
    udp6,
)

from vecroute.control.commands import CommandError, execute
from vecroute.control.config import parse_config
from vecroute.fib.fib import Fib, RouteError
from vecroute.graph.state import NS_CALLS, OPT_NO_FUSED
from vecroute.packet.node_ids import ETHERNET_INPUT

ECMP_SEG = "2001:db8:400::9"  # two next hops on eth1
ECMP_MACS = {N1, "02:00:00:00:bb:04"}
# name -> (policy fields, steered IPv4 prefix or None, steered IPv6 prefix)
LABELLED = {
    "fi": ({"segments": [SEG1, SEG2], "flow_label": "inner"}, "203.0.113.128/28",
           "2001:db8:460::/48"),
    "fz": ({"segments": [SEG1, SEG2], "flow_label": "zero"}, "203.0.113.144/28",
           "2001:db8:461::/48"),
    "fw": ({"segment_lists": [{"segments": [W_A], "weight": 1},
                              {"segments": [W_B], "weight": 3}], "flow_label": "inner"},
           None, "2001:db8:462::/48"),
    "fe": ({"segments": [ECMP_SEG], "flow_label": "inner"}, None, "2001:db8:463::/48"),
    "fn": ({"segments": [BSID_W], "flow_label": "inner"}, None, "2001:db8:464::/48"),
    "fh": ({"segments": [SEG1, SEG2], "flow_label": "hash"}, None, "2001:db8:465::/48"),
}
LBSID = {name: f"2001:db8:ff:c::{n + 1:x}" for n, name in enumerate(LABELLED)}


def labelled_config(default: str | None = None) -> dict:
    cfg = srv6_config()
    cfg["routes"].append({"prefix": "2001:db8:400::/48", "via": ["2001:db8:2::2",
                                                                 "2001:db8:2::4"]})
    cfg["neighbors"].append({"ip": "2001:db8:2::4", "mac": "02:00:00:00:bb:04",
                             "interface": "eth1"})
    sr = cfg["srv6"]
    if default is not None:
        sr["flow_label"] = default
    for name, (fields, v4, v6) in LABELLED.items():
        sr["policies"].append({"bsid": LBSID[name], **fields})
        sr["steering"] += [{"prefix": p, "bsid": LBSID[name]} for p in (v4, v6) if p]
    return cfg


@pytest.fixture(scope="module")
def lr() -> Router:
    return Router(labelled_config())


def test_inner_copies_the_ipv6_label_and_ipv4_gets_zero(lr):
    fields, v4, v6 = LABELLED["fi"]
    for fl in (0x12345, 0xFFFFF, 1, 0):
        sent = udp6(first_addr(v6), hlim=17, tc=0xB8, fl=fl)
        _, t, p = one(lr, sent)
        _, got = check_encap(t, "encap", fields["segments"], sent)
        assert got == fl and p[IPv6].fl == fl
        assert p[IPv6].tc == 0xB8 and p[IPv6].hlim == 16  # the rest as before
    _, t, p = one(lr, udp4(first_addr(v4), tos=0x28))
    assert p[IPv6].fl == 0 and p[IPv6].tc == 0x28 and p[IP].ttl == 8


def test_zero_writes_zero(lr):
    fields, v4, v6 = LABELLED["fz"]
    sent = udp6(first_addr(v6), fl=0xABCDE)
    _, t, _ = one(lr, sent)
    assert check_encap(t, "encap", fields["segments"], sent)[1] == 0
    assert one(lr, udp4(first_addr(v4)))[2][IPv6].fl == 0


def test_hash_is_the_default_and_a_policy_overrides_the_section():
    r = Router(labelled_config(default="zero"))
    # e2 has no flow_label of its own: the section's zero; fh asks for the hash, fi copies
    e2 = {one(r, udp6(first_addr(POLICIES["e2"][3]), sport=s, fl=7))[2][IPv6].fl
          for s in range(1000, 1016)}
    assert e2 == {0}
    fh = {one(r, udp6(first_addr(LABELLED["fh"][2]), sport=s, fl=7))[2][IPv6].fl
          for s in range(1000, 1016)}
    assert len(fh) == 16 and 7 not in fh
    assert one(r, udp6(first_addr(LABELLED["fi"][2]), fl=7))[2][IPv6].fl == 7
    # and with no [srv6] flow_label at all, e2 hashes: one label per flow, not the host's
    # (test_srv6.py checks the hash itself)
    d = Router(labelled_config())
    e2 = {one(d, udp6(first_addr(POLICIES["e2"][3]), sport=s, fl=7))[2][IPv6].fl
          for s in range(1000, 1016)}
    assert len(e2) == 16 and 7 not in e2


def test_the_hash_still_spreads_flows_where_it_chooses(lr):
    """Weighted lists, the first hop's paths, a policy inside a policy: per flow, sticky."""
    lists: Counter[str] = Counter()
    macs: Counter[str] = Counter()
    nested: Counter[str] = Counter()
    first: dict = {}
    for s in range(400):
        sport = 20000 + s
        p = one(lr, udp6(first_addr(LABELLED["fw"][2]), sport=sport, fl=5))[2]
        lists[p[IPv6].dst] += 1
        assert p[IPv6].fl == 5
        first[sport] = p[IPv6].dst
        p = one(lr, udp6(first_addr(LABELLED["fe"][2]), sport=sport))[2]
        macs[p.dst] += 1
        p = one(lr, udp6(first_addr(LABELLED["fn"][2]), sport=sport, fl=9))[2]
        nested[p[IPv6].dst] += 1  # the outermost header: BSID_W's choice (its label hashed)
        inner_outer = p[IPv6].payload
        while not (isinstance(inner_outer, IPv6) and inner_outer.dst == BSID_W):
            inner_outer = inner_outer.payload
        assert inner_outer.fl == 9  # the first encapsulation copied the host's label
    assert set(lists) == {W_A, W_B} and 0.65 <= lists[W_B] / 400 <= 0.85, lists
    assert set(macs) == ECMP_MACS and min(macs.values()) > 100, macs
    assert set(nested) == {W_A, W_B} and min(nested.values()) > 40, nested
    for sport in range(20000, 20400, 37):  # a flow keeps its list
        p = one(lr, udp6(first_addr(LABELLED["fw"][2]), sport=sport, fl=5, n=77))[2]
        assert p[IPv6].dst == first[sport]


def _corpus(seed: int, n: int) -> list[tuple[str, bytes]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        name = rng.choice(list(LABELLED))
        _, v4, v6 = LABELLED[name]
        if v4 and rng.random() < 0.3:
            pkt = udp4(first_addr(v4, rng.randrange(1, 14)), sport=rng.randrange(1024, 65536),
                       ttl=rng.choice([1, 2, 64]))
        else:
            pkt = (eth() / IPv6(src=H0_IP6, dst=first_addr(v6, rng.randrange(1, 99)),
                                fl=rng.randrange(1 << 20), hlim=rng.choice([1, 2, 64]))
                   / UDP(sport=rng.randrange(1024, 65536), dport=53)
                   / (b"q" * rng.choice([8, 600, 1400])))
        f = bytearray(bytes(pkt))
        if rng.random() < 0.25:  # a lying byte in the headers
            f[rng.randrange(0, min(len(f), 80))] = rng.randrange(256)
        out.append(("eth0", bytes(f)))
    return out


def test_common_packets_take_the_fused_path_alone() -> None:
    """Unmutated packets of every label and choice that leave by a rewrite: all of them
    finish in the fused pass (ethernet-input called once), as the nodes would."""
    rng = random.Random(7)
    frames = []
    for k in range(200):
        name = ("fi", "fz", "fw", "fe", "fh")[k % 5]
        pkt = (eth() / IPv6(src=H0_IP6, dst=first_addr(LABELLED[name][2], rng.randrange(1, 99)),
                            fl=rng.randrange(1 << 20))
               / UDP(sport=rng.randrange(1024, 65536), dport=53) / (b"c" * 30))
        frames.append(bytes(pkt))
    fused, nodes = router_pair(lambda: Router(labelled_config()))
    res = fused.run(frames, now_ns=10**9)
    assert len(res.tx) == len(frames)
    assert fused.state.node_stats[ETHERNET_INPUT, NS_CALLS] == 1
    assert _observed(fused, res) == _observed(nodes, nodes.run(frames, now_ns=10**9))


@pytest.mark.parametrize("seed", [1, 2])
def test_fused_pass_equals_the_node_graph(seed: int) -> None:
    frames = _corpus(seed, 600)
    a = same_as_nodes(*router_pair(lambda: Router(labelled_config())), frames)
    c = a["counters"]
    assert c["srv6-encapsulated"] > 300 and c.get("ttl-expired", 0) > 0
    assert c.get("mtu-exceeded", 0) > 0


@pytest.mark.parametrize("where,value,words", [
    ("section", "copy", "srv6.flow_label: 'copy': expected one of hash inner zero"),
    ("section", 1, "srv6.flow_label: expected str"),
    ("policy", "Hash", "flow_label: 'Hash': expected one of hash inner zero"),
    ("policy", ["inner"], "flow_label: expected str"),
])
def test_config_errors_are_one_line(where, value, words):
    cfg = srv6_config()
    if where == "section":
        cfg["srv6"]["flow_label"] = value
    else:
        cfg["srv6"]["policies"].append({"bsid": "2001:db8:ff:c::99", "segments": [SEG1],
                                        "flow_label": value})
    with pytest.raises(RouteError) as e:  # the FIB's error, the config's one line
        Fib.from_config(parse_config(cfg))
    msg = str(e.value)
    assert words in msg and "\n" not in msg, msg
    assert msg.count("<config>") == 1 and "segments" not in msg, msg  # named once, its key
    if where == "policy":
        assert f"srv6.policies[{len(cfg['srv6']['policies']) - 1}].flow_label:" in msg, msg


class _Ctl:
    """What ``execute`` needs of the router: its FIB, and a commit that swaps the tables."""

    def __init__(self, router: Router) -> None:
        self.router, self.fib = router, router.fib

    def commit(self) -> None:
        swap(self.router)


def test_ctl_policy_add_with_a_flow_label():
    r = Router(labelled_config())
    ctl = _Ctl(r)
    ok = execute(ctl, f"sr policy add bsid {BSIDS['e2']} segments {SEG1},{SEG2} "
                 "flow-label inner".split())
    assert ok.text.endswith("ok\n")
    rows = {x["bsid"]: x for x in execute(ctl, "sr policy show".split()).data}
    assert rows[BSIDS["e2"]]["flow_label"] == "inner"
    assert rows[BSIDS["e1"]]["flow_label"] == "hash"
    assert one(r, udp6(first_addr(POLICIES["e2"][3]), fl=0x4242))[2][IPv6].fl == 0x4242
    # replaced again: zero, then the hash (the section's default), each from the next batch
    # on, in the fused pass and the nodes alike (the adjacency's A_SR_FLOW and the list's
    # LIST_FLOW move together); one list of weight 4 copies too
    for cmd, want in ((" flow-label zero", {0}), ("", None), (" weight 4 flow-label inner",
                                                                {0x4242})):
        execute(ctl, f"sr policy add bsid {BSIDS['e2']} segments {SEG1},{SEG2}{cmd}".split())
        for opt in (0, 1):
            r.state.opts[OPT_NO_FUSED] = opt
            got = {one(r, udp6(first_addr(POLICIES["e2"][3]), sport=s, fl=0x4242))[2][IPv6].fl
                   for s in range(3000, 3008)}
            assert got == want if want is not None else (len(got) == 8 and 0x4242 not in got)
    r.state.opts[OPT_NO_FUSED] = 0
    before = execute(ctl, "sr policy show".split()).data
    with pytest.raises(CommandError, match="flow-label 'copy': expected hash or inner or zero"):
        execute(ctl, f"sr policy add bsid {BSIDS['e1']} segments {SEG1} flow-label copy"
                .split())
    assert execute(ctl, "sr policy show".split()).data == before  # an error changes nothing
