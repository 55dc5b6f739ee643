"""Firewall tables: the vectorised entry parser against ``ipaddress``, longest match with
values against a scan, number and iface tables, add/delete/flush/list/swap, bulk loads."""

from __future__ import annotations

import ipaddress

import numpy as np
import pytest
from fw_reference import RefTables
from hypothesis import given, settings
from hypothesis import strategies as st

from vecroute.firewall.tables import FwTables, TableError, parse_addr_entries

M64 = (1 << 64) - 1


def v6_text(a: int, style: int) -> str:
    ip = ipaddress.IPv6Address(a)
    if style == 0:
        return ip.compressed
    if style == 1:
        return ip.exploded
    return ip.compressed.upper()


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.booleans(),
            st.integers(0, (1 << 128) - 1),
            st.integers(0, 128),
            st.one_of(st.none(), st.integers(0, 4194303)),
            st.integers(0, 2),
            st.booleans(),
        ),
        max_size=40,
    )
)
def test_fast_parser_agrees_with_ipaddress(entries):
    lines, want4, want6 = [], [], []
    for is4, a, plen, value, style, bare in entries:
        if is4:
            a &= (1 << 32) - 1
            plen = min(plen, 32)
            key = str(ipaddress.IPv4Address(a)) + ("" if bare and plen == 32 else f"/{plen}")
            net = ipaddress.ip_network(key, strict=False)
            want4.append((int(net.network_address), net.prefixlen, value or 0))
        else:
            key = v6_text(a, style) + ("" if bare and plen == 128 else f"/{plen}")
            net = ipaddress.ip_network(key, strict=False)
            want6.append((int(net.network_address), net.prefixlen, value or 0))
        sep = " " if style else "\t"
        lines.append(key + ("" if value is None else f"{sep}{value}") + ("  # c" if bare else ""))
    e = parse_addr_entries("\n".join(["# head", ""] + lines + [""]), "x")
    assert list(zip(e.a4.tolist(), e.l4.tolist(), e.v4.tolist(), strict=True)) == want4
    got6 = [
        ((h << 64) | o, n, v)
        for h, o, n, v in zip(
            e.h6.tolist(), e.o6.tolist(), e.l6.tolist(), e.v6.tolist(), strict=True
        )
    ]
    assert got6 == want6


def test_exotic_forms_and_errors():
    e = parse_addr_entries("::ffff:192.0.2.1\n10.0.0.0/255.0.0.0 4\n", "x")
    assert e.h6.size == 1 and int(e.o6[0]) == 0xFFFFC0000201
    assert e.a4.tolist() == [10 << 24] and e.l4.tolist() == [8] and e.v4.tolist() == [4]
    for text, msg in [
        ("192.0.2.0/24\n1.2.3\n", "x:2: '1.2.3': not an address"),
        ("10.0.0.0/8 99999999\n", "x:1: '10.0.0.0/8 99999999': value"),
        ("10.0.0.0/8 1 2\n", "expected KEY [VALUE]"),
        ("2001:db8::/129\n", "x:1: '2001:db8::/129'"),
    ]:
        with pytest.raises(TableError, match=msg.replace("[", r"\[").replace("]", r"\]")):
            parse_addr_entries(text, "x")


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 255), st.integers(0, 32), st.integers(0, 9)), max_size=30),
    st.lists(st.tuples(st.integers(0, 255), st.integers(0, 128), st.integers(0, 9)), max_size=20),
    st.lists(st.integers(0, (1 << 32) - 1), min_size=1, max_size=30),
)
def test_addr_longest_match_with_values(e4, e6, probes):
    t = FwTables()
    t.create("a", "addr")
    ref = RefTables()
    ref.create("a", "addr")
    lines = []
    for hi, plen, v in e4:
        net = ipaddress.ip_network(((hi << 24) | (hi << 8), plen), strict=False)
        lines.append(f"{net} {v}")
        ref.add("a", str(net), v)
    for b, plen, v in e6:
        net = ipaddress.ip_network(((0x20010DB8 << 96) | (b << 80), plen), strict=False)
        lines.append(f"{net} {v}")
        ref.add("a", str(net), v)
    t.add("a", lines)
    for p in probes:
        for ip in (ipaddress.IPv4Address(p), ipaddress.IPv6Address((0x20010DB8 << 96) | p << 64)):
            assert t.lookup("a", str(ip)) == ref.lookup("a", ip)
    assert t.count("a") == len(ref.t["a"][1])


def test_operations():
    t = FwTables(["eth0", "eth1"])
    t.create("a", "addr")
    t.create("b", "addr")
    t.create("n", "number")
    t.create("i", "iface")
    with pytest.raises(TableError, match="exists already"):
        t.create("a", "addr")
    with pytest.raises(TableError, match="no table named 'zz'"):
        t.add("zz", ["1.2.3.4"])
    t.add("a", ["192.0.2.0/24 1", "192.0.2.128/25 2", "2001:db8::/32 3"])
    assert t.lookup("a", "192.0.2.200") == 2 and t.lookup("a", "192.0.2.1") == 1
    assert t.lookup("a", "2001:db8::1") == 3 and t.lookup("a", "10.0.0.1") is None
    assert t.listing("a") == [("192.0.2.0/24", 1), ("192.0.2.128/25", 2), ("2001:db8::/32", 3)]
    t.add("a", ["192.0.2.0/24 7"])  # replace the value
    assert t.lookup("a", "192.0.2.1") == 7 and t.count("a") == 3
    assert t.delete("a", ["192.0.2.128/25", "203.0.113.0/24"]) == 1
    assert t.lookup("a", "192.0.2.200") == 7
    t.swap("a", "b")
    assert t.lookup("a", "192.0.2.1") is None and t.lookup("b", "192.0.2.1") == 7
    assert t.count("a") == 0 and t.count("b") == 2
    with pytest.raises(TableError, match="cannot swap"):
        t.swap("a", "n")
    assert t.flush("b") == 2 and t.lookup("b", "2001:db8::5") is None
    # number table
    t.add("n", ["22 1", "80", "443 3"])
    assert (t.lookup("n", "22"), t.lookup("n", "80"), t.lookup("n", "25")) == (1, 0, None)
    assert t.delete("n", ["80"]) == 1 and t.lookup("n", "80") is None
    t.add("n", [str(k) for k in range(1000, 11000)])  # rehash while growing
    assert t.lookup("n", "10999") == 0 and t.lookup("n", "443") == 3 and t.count("n") == 10002
    assert t.flush("n") == 10002 and t.lookup("n", "443") is None
    # iface table, by interface index; follows interface changes
    t.add("i", ["eth1 5", "eth7 9"])
    assert t.lookup("i", "eth1") == 5 and t.lookup("i", "eth0") is None
    t.set_interfaces(["eth7", "eth1"])
    assert t.if_tab[0].tolist() == [9, 5]
    assert t.listing("i") == [("eth1", 5), ("eth7", 9)]
    with pytest.raises(TableError, match="key 'x'"):
        t.add("n", ["x"])


def test_bulk_load_file(tmp_path):
    rng = np.random.default_rng(1)
    n = 200_000
    a = rng.integers(0, 1 << 32, n)
    lens = rng.integers(8, 33, n)
    lines = [f"{ipaddress.IPv4Address(int(x))}/{int(p)}" for x, p in zip(a, lens, strict=True)]
    lines += [f"2001:db8:{k:x}::/48 {k}" for k in range(1000)]
    path = tmp_path / "bl.txt"
    path.write_text("# blocklist\n" + "\n".join(lines) + "\n")
    t = FwTables()
    t.create("bl", "addr")
    assert t.add_file("bl", path) == n + 1000
    sample = rng.integers(0, n, 50)
    for k in sample:
        ip = ipaddress.IPv4Address(int(a[k]))
        assert t.lookup("bl", str(ip)) == 0
    assert t.lookup("bl", "2001:db8:3e7::1") == 999
    uniq = len({ipaddress.ip_network(x, strict=False) for x in lines[:n]})
    assert t.count("bl") == uniq + 1000
