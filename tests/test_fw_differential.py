"""The compiled firewall against the plain-Python ordered scan (tests/fw_reference.py).

Hypothesis draws rule lists over a small address universe (so rules overlap and packets hit
them) with every feature the classifier compiles: lists, ``not``, ``me``/``me6``, tables with
values and ``tablearg``, ports, every option, ``count``, ``skipto``, ``check-state`` /
``keep-state``; and packets over the same universe. Verdict, deciding rule, aux and the
per-rule counters must agree exactly, for the full compile and for rule sets built by
incremental inserts and deletes.
"""

from __future__ import annotations

import ipaddress

import numpy as np
from fw_reference import Pkt, RefFirewall, RefTables, keys_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vecroute.firewall.classify import classify_keys, classify_keys_tables
from vecroute.firewall.compiler import compile_rules
from vecroute.firewall.config import parse_firewall_config
from vecroute.firewall.firewall import Firewall
from vecroute.firewall.layout import CM_LIST, FW
from vecroute.firewall.rules import parse_rule
from vecroute.firewall.states import new_ctl, new_table
from vecroute.firewall.tables import FwTables

IFACES = ["eth0", "eth1", "eth2"]
ME4 = ["192.0.2.1", "198.51.100.1"]
ME6 = ["2001:db8::1"]
NETS4 = ["192.0.2.0", "198.51.100.0", "203.0.113.0"]
HOSTS = [0, 1, 7, 64, 100, 127, 128, 200, 255]
NETS6 = ["2001:db8::", "2001:db8:1::"]
TABLES = {
    "t4": (
        "addr",
        [
            "192.0.2.0/25 1",
            "192.0.2.128/26 2",
            "198.51.100.7 3",
            "2001:db8::/120 4",
            "2001:db8::80/121 5",
            "203.0.113.0/24",
        ],
    ),
    "v4only": ("addr", ["198.51.100.0/24 3", "192.0.2.7"]),  # no IPv6 trie
    "none": ("addr", []),  # empty: no trie at all
    "ports": ("number", ["22 1", "80 2", "443 3"]),
    "ifs": ("iface", ["eth0 1", "eth2 7"]),
}
RAW = {
    "default": "deny",
    "tables": [{"name": n, "type": t, "entries": e} for n, (t, e) in TABLES.items()],
}


def ref_tables() -> RefTables:
    rt = RefTables()
    for name, (ty, entries) in TABLES.items():
        rt.create(name, ty)
        for e in entries:
            k, _, v = e.partition(" ")
            key = int(k) if ty == "number" else k
            rt.add(name, key, int(v) if v else 0)
    return rt


def fw_tables() -> FwTables:
    t = FwTables(IFACES)
    for name, (ty, entries) in TABLES.items():
        t.create(name, ty)
        t.add(name, entries)
    return t


# -- strategies ---------------------------------------------------------------------------------

addr4 = st.builds(
    lambda n, h: ipaddress.IPv4Address(n) + h, st.sampled_from(NETS4), st.sampled_from(HOSTS)
)
addr6 = st.builds(
    lambda n, h: ipaddress.IPv6Address(n) + h, st.sampled_from(NETS6), st.sampled_from(HOSTS)
)


@st.composite
def prefix(draw) -> str:
    if draw(st.booleans()):
        a = draw(addr4)
        n = draw(st.sampled_from([32, 32, 25, 24, 16, 8, 0]))
        return str(ipaddress.ip_network(f"{a}/{n}", strict=False))
    a = draw(addr6)
    n = draw(st.sampled_from([128, 121, 120, 64, 48, 0]))
    return str(ipaddress.ip_network(f"{a}/{n}", strict=False))


item = st.one_of(prefix(), st.sampled_from(["me", "me6"]))


@st.composite
def address(draw) -> str:
    kind = draw(st.integers(0, 9))
    if kind <= 2:
        body = "any"
    elif kind <= 5:
        body = draw(item)
    elif kind <= 7:
        body = "{ " + ", ".join(draw(st.lists(item, min_size=2, max_size=3))) + " }"
    else:
        body = draw(st.sampled_from(["table(t4)", "table(t4,2)", "table(t4,0)"]))
    if body != "any" and draw(st.integers(0, 3)) == 0:
        body = "not " + body
    return body


ports = st.sampled_from(["", "", "", "22", "80", "1000-2000", "22,80,443-445", "0-1023"])
options = st.sampled_from(
    [
        "in",
        "out",
        "via eth0",
        "recv eth1",
        "xmit eth2",
        "recv table(ifs)",
        "xmit table(ifs,7)",
        "xmit any",
        "not recv eth0",
        "tcpflags syn,!ack",
        "tcpflags ack",
        "setup",
        "established",
        "icmptypes 0,8",
        "icmp6types 128,129",
        "frag",
        "not frag",
        "ipversion 4",
        "ipversion 6",
        "ipttl 1-64",
        "not ipttl 64",
        "lookup dst-port ports",
        "lookup src-port ports,2",
        "lookup src-ip t4",
        "lookup dst-ip t4,1",
    ]
)
protos = st.sampled_from(["ip", "ip", "ip4", "ip6", "tcp", "tcp", "udp", "icmp", "ipv6-icmp", "47"])


@st.composite
def rule_text(draw, numbers: list[int], stateful: bool) -> str:
    num = draw(st.sampled_from(numbers))
    acts = [
        "allow",
        "deny",
        "reject",
        "unreach port",
        "unreach6 admin-prohib",
        "reset",
        "count",
        "count",
        "skipto tablearg",
    ]
    acts.append(f"skipto {draw(st.sampled_from(numbers + [65535, 1]))}")
    if stateful:
        acts.append("check-state")
    act = draw(st.sampled_from(acts))
    if act == "check-state":
        return f"{num} check-state"
    words = [str(num), act, draw(protos), "from", draw(address())]
    p = draw(ports)
    if p:
        words.append(p)
    words += ["to", draw(address())]
    p = draw(ports)
    if p:
        words.append(p)
    words += draw(st.lists(options, max_size=3))
    if (
        stateful
        and act.split()[0] in ("allow", "deny", "reject", "skipto")
        and act != "skipto tablearg"
        and draw(st.booleans())
    ):
        words.append("keep-state")
    return " ".join(words)


@st.composite
def rule_set(draw, stateful: bool = False, max_rules: int = 10) -> list[str]:
    numbers = sorted(draw(st.lists(st.integers(1, 30), min_size=1, max_size=8)))
    numbers = [n * 100 for n in numbers]
    return draw(st.lists(rule_text(numbers, stateful), min_size=0, max_size=max_rules))


unindexed_options = st.sampled_from(
    [
        "via eth0",
        "recv table(ifs)",
        "xmit any",
        "tcpflags syn,!ack",
        "setup",
        "established",
        "icmptypes 0,8",
        "icmp6types 128",
        "frag",
        "not frag",
        "ipttl 1-64",
        "lookup dst-port ports",
        "lookup src-ip t4,1",
    ]
)


@st.composite
def unindexed_rule_set(draw, stateful: bool = False) -> list[str]:
    """Rules the index cannot tell apart (no addresses, ports, protocols, directions): the
    kernel's candidate-list mode."""
    out = []
    for k in range(draw(st.integers(0, 8))):
        if stateful and draw(st.integers(0, 4)) == 0:
            out.append(f"{(k + 1) * 100} check-state")
            continue
        act = draw(
            st.sampled_from(
                [
                    "allow",
                    "deny",
                    "count",
                    "skipto tablearg",
                    f"skipto {draw(st.integers(1, 9)) * 100}",
                    "reset",
                ]
            )
        )
        src = draw(st.sampled_from(["any", "table(t4)", "not table(t4,2)"]))
        dst = draw(st.sampled_from(["any", "table(t4)"]))
        opts = " ".join(draw(st.lists(unindexed_options, max_size=2)))
        if stateful and act in ("allow", "deny", "reset") and draw(st.booleans()):
            opts += " keep-state"
        out.append(f"{(k + 1) * 100} {act} ip from {src} to {dst} {opts}")
    return out


@st.composite
def packet(draw) -> Pkt:
    fam = draw(st.sampled_from([4, 4, 6]))
    a = addr4 if fam == 4 else addr6
    if fam == 4:
        proto = draw(st.sampled_from([6, 6, 17, 1, 47, -1]))
    else:
        proto = draw(st.sampled_from([6, 6, 17, 58, 47]))
    has_ports = proto in (6, 17)
    portv = st.sampled_from([22, 80, 443, 444, 1500, 2000, 5000])
    frag = draw(st.sampled_from([0, 0, 0, 1, 3]))
    p = Pkt(
        fam,
        int(draw(a)),
        int(draw(a)),
        proto,
        draw(portv) if has_ports else -1,
        draw(portv) if has_ports else -1,
        draw(st.integers(0, 255)) if proto == 6 else -1,
        draw(st.sampled_from([0, 3, 8, 128, 129])) if proto in (1, 58) else -1,
        draw(st.sampled_from([1, 64, 200])),
        frag,
        draw(st.sampled_from([0, 1, 2, -1])),
        draw(st.sampled_from([-1, 0, 1, 2])),
        draw(st.integers(40, 1500)),
    )
    if frag & 2:  # what the graph hands over for a non-first fragment
        p.sport = p.dport = p.tcpflags = p.icmptype = -1
    if me := draw(st.sampled_from([None, None, "src", "dst"])):  # hit me / me6 sometimes
        addr = int(ipaddress.ip_address(ME4[0] if fam == 4 else ME6[0]))
        setattr(p, me, addr)
    return p


# -- helpers --------------------------------------------------------------------------------------


def compiled(texts: list[str], tables: FwTables, default_allow: bool = False):
    rules = [parse_rule(t) for t in texts]
    cf = compile_rules(rules, default_allow, tables, IFACES, ME4, ME6)
    return cf, (*cf.arrays(), *tables.arrays(), new_table(), new_ctl(1 << 20))


def reference(texts: list[str], default_allow: bool = False) -> RefFirewall:
    rules = [parse_rule(t) for t in texts]
    return RefFirewall(rules, default_allow, ref_tables(), IFACES, ME4, ME6)


def check_same(texts, pkts, dirs, default_allow=False, tables=None):
    tables = tables or fw_tables()
    cf, args = compiled(texts, tables, default_allow)
    ref = reference(texts, default_allow)
    keys = keys_of(pkts)
    for d in (0, 1):
        sel = [k for k, x in enumerate(dirs) if x == d]
        if not sel:
            continue
        v, r, a = classify_keys(args, keys[sel], d, 1000)
        for j, k in enumerate(sel):
            want = ref.classify(pkts[k], d, 1000)
            got = (int(v[j]), int(r[j]), int(a[j]))
            assert got == want, (
                "\nrules:\n  "
                + "\n  ".join(str(x) for x in ref.rules)
                + f"\npacket {pkts[k]} dir {d}\nkernel {got} rule {ref.rules[got[1]]}\n"
                f"reference {want} rule {ref.rules[want[1]]}"
            )
    assert np.array_equal(cf.cnt, np.array(ref.counters, np.int64))


# -- tests ----------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rule_set(),
    st.lists(packet(), min_size=1, max_size=40),
    st.lists(st.sampled_from([0, 1]), min_size=40, max_size=40),
    st.booleans(),
)
def test_stateless_rules_match_reference(texts, pkts, dirs, default_allow):
    check_same(texts, pkts, dirs[: len(pkts)], default_allow)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rule_set(stateful=True),
    st.lists(st.tuples(packet(), st.booleans(), st.integers(0, 40)), min_size=1, max_size=40),
)
def test_stateful_sequences_match_reference(texts, steps):
    """Packets in time order (some answered by their reverse), states and expiries included."""
    run_sequence(texts, steps)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    unindexed_rule_set(stateful=True),
    st.lists(st.tuples(packet(), st.booleans(), st.integers(0, 40)), min_size=1, max_size=30),
)
def test_stateful_candidate_list_mode(texts, steps):
    cf, _ = compiled(texts, fw_tables())
    assert cf.cmap[CM_LIST] >= 0
    run_sequence(texts, steps)


def run_sequence(texts, steps):
    tables = fw_tables()
    _, args = compiled(texts, tables)
    ref = reference(texts)
    now = 10**9
    for p, reverse, dt in steps:
        now += dt * 10**9 // 4  # quarter seconds: crosses the 1 s fin/rst lifetimes
        seq = [p]
        if reverse:
            q = Pkt(
                p.family,
                p.dst,
                p.src,
                p.proto,
                p.dport,
                p.sport,
                p.tcpflags,
                p.icmptype,
                p.ttl,
                p.frag,
                p.rx,
                p.tx,
                p.length,
            )
            seq.append(q)
        for x in seq:
            v, r, a = classify_keys(args, keys_of([x]), 0, now)
            want = ref.classify(x, 0, now)
            assert (int(v[0]), int(r[0]), int(a[0])) == want, (
                "\n".join(str(y) for y in ref.rules) + f"\n{x} at {now}"
            )
    assert np.array_equal(args[FW._fields.index("cnt")], np.array(ref.counters, np.int64))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rule_set(max_rules=8), rule_set(max_rules=6), st.data())
def test_incremental_updates_match_reference(first, more, data):
    """Rules added one by one (and some deleted again) classify like a fresh compile."""
    fw = Firewall(parse_firewall_config(RAW, "t.toml"), IFACES, ME4, ME6)
    for t in first:
        fw.add(t)
    for t in more:
        fw.add(t)
    numbers = sorted({r.number for r in fw.rules[:-1]})
    gone = data.draw(st.lists(st.sampled_from(numbers), max_size=3, unique=True)) if numbers else []
    for n in gone:
        fw.delete(n)
    pkts = data.draw(st.lists(packet(), min_size=1, max_size=30))
    final = [str(r) for r in fw.rules[:-1]]
    ref = RefFirewall([parse_rule(t) for t in final], False, ref_tables(), IFACES, ME4, ME6)
    fw.zero()
    v, r, a = fw.classify(keys_of(pkts), 0, 5)
    for j, p in enumerate(pkts):
        assert (int(v[j]), int(r[j]), int(a[j])) == ref.classify(p, 0, 5), (
            "\n".join(final) + f"\n{p}"
        )
    assert np.array_equal(fw.compiled.cnt, np.array(ref.counters, np.int64))
    # and the incremental result classifies like a compile from scratch
    fresh = Firewall(parse_firewall_config({**RAW, "rules": final}, "t.toml"), IFACES, ME4, ME6)
    v2, r2, a2 = fresh.classify(keys_of(pkts), 0, 5)
    assert np.array_equal(v, v2) and np.array_equal(r, r2) and np.array_equal(a, a2)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    unindexed_rule_set(),
    st.lists(packet(), min_size=1, max_size=40),
    st.lists(st.sampled_from([0, 1]), min_size=40, max_size=40),
)
def test_candidate_list_mode_matches_reference(texts, pkts, dirs):
    cf, _ = compiled(texts, fw_tables())
    assert cf.cmap[CM_LIST] >= 0
    check_same(texts, pkts, dirs[: len(pkts)])


def test_skipto_count_tablearg_examples():
    texts = [
        "100 count ip from any to any",
        "200 skipto tablearg ip from table(t4) to any",
        "300 deny ip from any to any",
        "400 allow ip from any to any",  # tablearg 3 -> first rule >= 201 ... checked below
    ]
    pkts = [
        Pkt(4, int(ipaddress.IPv4Address("198.51.100.7")), 1, 17, 1, 2),
        Pkt(4, int(ipaddress.IPv4Address("203.0.113.9")), 1, 17, 1, 2),
        Pkt(4, int(ipaddress.IPv4Address("10.0.0.1")), 1, 17, 1, 2),
    ]
    check_same(texts, pkts, [0, 0, 0])


def test_dense_and_sparse_groups_merge_in_rule_order():
    """Rules of all four index groups interleaved: the walk must merge them in order."""
    texts = []
    for k in range(200):
        a = f"10.{k}.0.0/16"
        b = f"172.16.{k}.0/24"
        shape = k % 4
        src = "any" if shape & 2 else a
        dst = "any" if shape & 1 else b
        act = "count" if k % 7 == 0 else ("allow" if k % 3 else "deny")
        texts.append(f"{k + 1} {act} ip from {src} to {dst}")
    rng = np.random.default_rng(3)
    pkts = [
        Pkt(
            4,
            (10 << 24) | (int(rng.integers(0, 256)) << 16) | 5,
            (172 << 24) | (16 << 16) | (int(rng.integers(0, 256)) << 8) | 9,
            6,
            1,
            2,
            0,
        )
        for _ in range(300)
    ]
    check_same(texts, pkts, [0] * len(pkts))


# a rule set of address tables only: what ``tables_only()`` accepts, and what spoils it
TABLE_ADDRS = ["any", "any", "table(t4)", "table(t4,2)", "table(t4,0)", "not table(t4)",
               "not table(t4,5)", "table(v4only)", "not table(v4only,3)", "table(none)",
               "not table(none)"]
TABLE_ACTS = ["allow", "deny", "reject", "unreach port", "unreach6 admin-prohib"]
SPOILERS = ["frag", "in", "log", "keep-state", "count", "skipto 100", "reset", "tcp", "80",
            "lookup dst-port ports", "xmit eth1", "203.0.113.0/24", "check-state", "me",
            "ip6"]


@st.composite
def table_rule_set(draw) -> tuple[list[str], bool]:
    """(rules, spoilt): table-only rules, and sometimes one that is not (a port, an option,
    a protocol, a state, a count...)."""
    out = []
    spoilt = False
    for k in range(draw(st.integers(0, 6))):
        act = draw(st.sampled_from(TABLE_ACTS))
        src, dst = draw(st.sampled_from(TABLE_ADDRS)), draw(st.sampled_from(TABLE_ADDRS))
        extra = draw(st.sampled_from(["", "", "", "lookup src-ip t4", "lookup dst-ip t4,1"]))
        words = [str((k + 1) * 100), act, "ip", "from", src, "to", dst, extra]
        if draw(st.integers(0, 5)) == 0:
            spoilt = True
            sp = draw(st.sampled_from(SPOILERS))
            if sp in ("count", "skipto 100", "reset"):
                words[1] = sp
            elif sp in ("tcp", "ip6"):
                words[2] = sp
            elif sp == "80":
                words.insert(7, sp)
            elif sp in ("203.0.113.0/24", "me"):
                words[4] = sp
            elif sp == "check-state":
                words = [words[0], sp]
            elif sp == "log":
                words.insert(2, sp)
            else:
                words.append(sp)
        out.append(" ".join(w for w in words if w))
    return out, spoilt


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    table_rule_set(),
    st.lists(packet(), min_size=1, max_size=40),
    st.lists(st.sampled_from([0, 1]), min_size=40, max_size=40),
    st.booleans(),
)
def test_table_only_rule_sets_match_reference(rs, pkts, dirs, default_allow):
    """``tables_only()`` holds exactly for rule sets of address-table tests with allow, deny
    or reject (a rule that counts, jumps, logs, keeps state or looks at anything else
    spoils it), and where it holds, ``fw_batch_tables`` (what the graph's table pass runs)
    gives the reference's verdicts, rules, aux and counters."""
    texts, spoilt = rs
    tables = fw_tables()
    cf, args = compiled(texts, tables, default_allow)
    # "skipto 100" can name its own rule or an earlier one: still not table-only
    assert cf.tables_only() == (not spoilt), texts
    if spoilt:
        return
    ref = reference(texts, default_allow)
    keys = keys_of(pkts)
    v, r, a = classify_keys_tables(args, keys, 1000)
    for j, p in enumerate(pkts):
        want = ref.classify(p, dirs[j], 1000)
        assert (int(v[j]), int(r[j]), int(a[j])) == want, (texts, p)
    assert np.array_equal(cf.cnt, np.array(ref.counters, np.int64))
    # and the walk agrees (the same rules: counters doubled)
    v2, r2, a2 = classify_keys(args, keys, 0, 1000)
    assert np.array_equal(v, v2) and np.array_equal(r, r2) and np.array_equal(a, a2)
