"""LPM tables (vecroute.fib.lpm) against an independent plain-Python longest-match reference.

The reference keeps the current rules per table as ``ipaddress`` networks and answers a lookup
by scanning all of them for the longest one that contains the address.
"""

from __future__ import annotations

import gzip
import ipaddress
from ipaddress import IPv4Network, IPv6Network

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba import njit

from vecroute.fib.lpm import (
    MAX_VALUE,
    Lpm,
    load_prefix_file,
    lpm4_lookup,
    lpm4_lookup_batch,
    lpm6_lookup,
    lpm6_lookup_batch,
)

TABLES = [0, 10, 100]
BITS = {4: 32, 6: 128}
M64 = (1 << 64) - 1


class RefFib:
    """Independent oracle: rules per table, longest match by scanning every rule."""

    def __init__(self, family: int) -> None:
        self.family = family
        self.bits = BITS[family]
        self.tables: dict[int, dict[IPv4Network | IPv6Network, int]] = {}

    def add(self, table: int, net, value: int) -> None:
        self.tables.setdefault(table, {})[net] = value

    def delete(self, table: int, net) -> bool:
        return self.tables.get(table, {}).pop(net, None) is not None

    def lookup(self, table: int, addr: int) -> int:
        best_len, best = -1, -1
        for net, value in self.tables.get(table, {}).items():
            plen = net.prefixlen
            shift = self.bits - plen
            if plen > best_len and (addr >> shift) == (int(net.network_address) >> shift):
                best_len, best = plen, value
        return best

    def expected_groups(self) -> int:
        """Groups the mtrie must hold: one per (table, level, parent) with a longer rule below."""
        offs = [16, 24] if self.family == 4 else list(range(16, 128, 8))
        seen = set()
        for t, rules in self.tables.items():
            for net in rules:
                a = int(net.network_address)
                for off in offs:
                    if net.prefixlen > off:
                        seen.add((t, off, a >> (self.bits - off)))
        return len(seen)


def to_pair(addr: int) -> tuple[int, int]:
    return addr >> 64, addr & M64


def lookup_batch(lpm: Lpm, table: int, addrs: list[int]) -> np.ndarray:
    """Call the exported batch kernel directly (the data-path entry point)."""
    t = lpm.table_index(table)
    if lpm.family == 4:
        return lpm4_lookup_batch(lpm.roots, lpm.groups, t, np.array(addrs, np.uint32))
    his = np.array([a >> 64 for a in addrs], np.uint64)
    los = np.array([a & M64 for a in addrs], np.uint64)
    return lpm6_lookup_batch(lpm.roots, lpm.groups, t, his, los)


def probe_addresses(ref: RefFib, extra: list, rng: np.random.Generator) -> list[int]:
    """Addresses at every prefix boundary (first, last, just outside) plus random ones."""
    top = (1 << ref.bits) - 1
    out = {0, top}
    nets = list(extra)
    for rules in ref.tables.values():
        nets.extend(rules)
    for net in nets:
        lo = int(net.network_address)
        hi = int(net.broadcast_address)
        out.update(a for a in (lo - 1, lo, lo + 1, hi - 1, hi, hi + 1) if 0 <= a <= top)
        out.add(lo + int(rng.integers(0, 1 << min(62, ref.bits - net.prefixlen))))
    for _ in range(30):
        out.add(int.from_bytes(rng.bytes(ref.bits // 8), "big"))
    return sorted(out)


def check_equal(lpm: Lpm, ref: RefFib, extra: list, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    probes = probe_addresses(ref, extra, rng)
    for table in TABLES:
        want = [ref.lookup(table, a) for a in probes]
        got = [lpm.lookup(table, a) for a in probes]
        assert got == want, f"table {table}: scalar lookup differs from the reference"
        if lpm.table_index(table) >= 0:
            assert lookup_batch(lpm, table, probes).tolist() == want
        assert lpm.count(table) == len(ref.tables.get(table, {}))
        got_routes = dict(lpm.routes(table))
        assert got_routes == ref.tables.get(table, {})
        for net, value in got_routes.items():
            assert lpm.get(table, net) == value
    for net in extra:
        for table in TABLES:
            assert lpm.get(table, net) == ref.tables.get(table, {}).get(net)
    assert len(lpm) == sum(len(r) for r in ref.tables.values())
    assert lpm.stats()["groups_in_use"] == ref.expected_groups()


# -- strategies ---------------------------------------------------------------------------------

BASES = {
    4: [0x0A000000, 0xC0000200, 0xC6336400, 0xCB007100, 0x0A0A0000, 0xFFFFFF00],
    6: [
        0x20010DB8 << 96,
        (0x20010DB8 << 96) | (0xABCD << 80),
        (0x20010DB8_00010002 << 64) | 0x00030004_00050000,
        (0xFE80 << 112),
        (1 << 128) - (1 << 16),
    ],
}
HOT_LENGTHS = {
    4: [0, 1, 8, 15, 16, 17, 23, 24, 25, 31, 32],
    6: [0, 1, 15, 16, 17, 24, 32, 47, 48, 56, 63, 64, 65, 72, 120, 127, 128],
}


def prefix_st(family: int):
    bits = BITS[family]

    cls = IPv4Network if family == 4 else IPv6Network

    def build(base: int, noise: int, keep: int, length: int):
        addr = base ^ (noise & ((1 << (bits - keep)) - 1))
        return cls((addr, length), strict=False)

    return st.builds(
        build,
        st.sampled_from(BASES[family]),
        st.integers(0, (1 << bits) - 1),
        st.integers(8, bits),
        st.one_of(st.sampled_from(HOT_LENGTHS[family]), st.integers(0, bits)),
    )


def ops_st(family: int):
    add = st.tuples(
        st.just("add"),
        st.sampled_from(TABLES),
        prefix_st(family),
        st.integers(0, MAX_VALUE - 1),
        st.just(0),
    )
    delete = st.tuples(
        st.just("del"), st.sampled_from(TABLES), prefix_st(family), st.just(0), st.integers(0, 99)
    )
    return st.lists(st.one_of(add, add, delete), min_size=1, max_size=80)


def run_ops(family: int, ops, seed: int) -> None:
    lpm = Lpm(family)
    ref = RefFib(family)
    added: list[tuple[int, object]] = []
    touched = []
    gen = lpm.generation
    for i, (kind, table, net, value, pick) in enumerate(ops):
        if kind == "add":
            lpm.add(table, net if i % 2 else str(net), value)
            ref.add(table, net, value)
            added.append((table, net))
            assert lpm.generation > gen
        else:
            if added and pick % 3:  # mostly delete something present (maybe deleted already)
                table, net = added[pick % len(added)]
            assert lpm.delete(table, net) == ref.delete(table, net)
        touched.append(net)
        gen = lpm.generation
        if i == len(ops) // 2:
            check_equal(lpm, ref, touched, seed)
    check_equal(lpm, ref, touched, seed + 1)

    # delete everything: every group must fold back, roots become empty
    cap = lpm.stats()["groups_capacity"]
    in_use = lpm.stats()["groups_in_use"]
    snapshot = {t: dict(r) for t, r in ref.tables.items()}
    for table, rules in snapshot.items():
        for net in rules:
            assert lpm.delete(table, net)
            ref.delete(table, net)
    assert len(lpm) == 0
    assert lpm.stats()["groups_in_use"] == 0
    assert lpm.stats()["groups_free_list"] >= in_use
    assert not lpm.roots.any()
    check_equal(lpm, ref, touched, seed + 2)

    # re-add in bulk: the free list is reused, the pool does not grow
    for table, rules in snapshot.items():
        nets = list(rules)
        vals = np.array([rules[n] for n in nets], np.int64)
        lens = np.array([n.prefixlen for n in nets], np.uint8)
        addrs = [int(n.network_address) for n in nets]
        if family == 4:
            lpm.add_many(table, np.array(addrs, np.uint32), lens, vals)
        else:
            his = np.array([a >> 64 for a in addrs], np.uint64)
            los = np.array([a & M64 for a in addrs], np.uint64)
            lpm.add_many(table, (his, los), lens, vals)
        for n in nets:
            ref.add(table, n, rules[n])
    # same structure again; the pool may grow by the per-add safety margin (add_rules stops
    # while fewer than max_new groups are free, even when fewer would do)
    assert lpm.stats()["groups_in_use"] == in_use
    # one growth step at most: Lpm._grow_groups takes max(2 * capacity, used + need + 64)
    assert lpm.stats()["groups_capacity"] <= 2 * cap + 64
    check_equal(lpm, ref, touched, seed + 3)


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(ops=ops_st(4), seed=st.integers(0, 2**32 - 1))
def test_random_ops_ipv4(ops, seed):
    run_ops(4, ops, seed)


@SETTINGS
@given(ops=ops_st(6), seed=st.integers(0, 2**32 - 1))
def test_random_ops_ipv6(ops, seed):
    run_ops(6, ops, seed)


# -- targeted cases -------------------------------------------------------------------------


def test_ipv4_basics():
    lpm = Lpm(4)
    lpm.add(0, "0.0.0.0/0", 1)
    lpm.add(0, "192.0.2.0/24", 2)
    lpm.add(0, "192.0.2.128/25", 3)
    lpm.add(0, "192.0.2.255/32", 4)
    lpm.add(0, "198.51.100.0/22", 5)
    assert lpm.lookup(0, "192.0.2.1") == 2
    assert lpm.lookup(0, "192.0.2.130") == 3
    assert lpm.lookup(0, "192.0.2.255") == 4
    assert lpm.lookup(0, "198.51.103.255") == 5
    assert lpm.lookup(0, "198.51.104.0") == 1
    assert lpm.lookup(0, 0xC0000201) == 2
    lpm.add(0, "192.0.2.0/24", 7)  # replace
    assert lpm.lookup(0, "192.0.2.1") == 7 and lpm.count(0) == 5
    assert lpm.delete(0, "0.0.0.0/0")
    assert lpm.lookup(0, "203.0.113.1") == -1
    assert not lpm.delete(0, "0.0.0.0/0")
    assert lpm.get(0, "192.0.2.128/25") == 3 and lpm.get(0, "192.0.2.0/25") is None
    assert lpm.lookup(5, "192.0.2.1") == -1 and lpm.table_index(5) == -1


def test_ipv6_basics():
    lpm = Lpm(6)
    lpm.add(10, "2001:db8::/32", 1)
    lpm.add(10, "2001:db8:0:1::/64", 2)
    lpm.add(10, "2001:db8:0:1::1/128", 3)
    lpm.add(10, "::/0", 4)
    assert lpm.lookup(10, "2001:db8::1") == 1
    assert lpm.lookup(10, "2001:db8:0:1::2") == 2
    assert lpm.lookup(10, "2001:db8:0:1::1") == 3
    assert lpm.lookup(10, "2001:db9::") == 4
    assert lpm.delete(10, "2001:db8:0:1::1/128")
    assert lpm.lookup(10, "2001:db8:0:1::1") == 2
    assert lpm.table_ids == [10]
    assert lpm.table_index(10) == 0


def test_tables_are_independent_and_indexed_densely():
    lpm = Lpm(4)
    assert lpm.table_index(100) == -1
    assert lpm.table_index(100, create=True) == 0
    lpm.add(10, "192.0.2.0/24", 1)
    lpm.add(0, "192.0.2.0/24", 2)
    assert [lpm.table_index(t) for t in (100, 10, 0)] == [0, 1, 2]
    assert lpm.roots.shape == (3, 65536)
    assert lpm.lookup(100, "192.0.2.1") == -1
    assert lpm.lookup(10, "192.0.2.1") == 1
    assert lpm.lookup(0, "192.0.2.1") == 2


def test_group_collapse_and_free_list_reuse():
    lpm = Lpm(4)
    lpm.add(0, "10.0.0.0/8", 1)
    for i in range(256):
        lpm.add(0, f"10.1.{i}.0/24", 2)
        lpm.add(0, f"10.1.{i}.128/25", 3)
    s = lpm.stats()
    assert s["groups_in_use"] == 257  # one level-1 group, 256 level-2 groups
    for i in range(256):
        assert lpm.delete(0, f"10.1.{i}.128/25")
    assert lpm.stats()["groups_in_use"] == 1
    for i in range(256):
        assert lpm.delete(0, f"10.1.{i}.0/24")
    s = lpm.stats()
    assert s["groups_in_use"] == 0 and s["groups_free_list"] == 257
    assert lpm.roots[0, 0x0A01] == lpm.roots[0, 0x0A02]  # folded back into the /8 entry
    assert lpm.lookup(0, "10.1.5.200") == 1
    cap = s["groups_capacity"]
    lpm.add(0, "10.9.9.9/32", 4)
    s = lpm.stats()
    assert s["groups_in_use"] == 2 and s["groups_free_list"] == 255
    assert s["groups_capacity"] == cap
    assert lpm.lookup(0, "10.9.9.9") == 4 and lpm.lookup(0, "10.9.9.8") == 1


def test_short_prefix_overwrites_and_folds_subtrees():
    lpm = Lpm(4)
    lpm.add(0, "10.1.2.0/24", 5)
    lpm.add(0, "10.1.2.3/32", 6)
    lpm.add(0, "10.0.0.0/8", 1)
    assert lpm.lookup(0, "10.1.2.3") == 6 and lpm.lookup(0, "10.1.2.4") == 5
    assert lpm.lookup(0, "10.200.0.1") == 1
    # a /8 added over a covering /8 with same value keeps the longer rules
    assert lpm.delete(0, "10.1.2.3/32")
    assert lpm.stats()["groups_in_use"] == 1
    assert lpm.delete(0, "10.1.2.0/24")
    assert lpm.stats()["groups_in_use"] == 0
    assert lpm.lookup(0, "10.1.2.3") == 1


def test_uniform_group_of_longer_rules_is_not_folded():
    # two sibling /17s with one value fill a whole level-1 group, but the root entry could not
    # say "depth 17" for the whole /16: the group must stay so each /17 can still be deleted
    lpm = Lpm(4)
    lpm.add(0, "10.0.0.0/17", 1)
    lpm.add(0, "10.0.128.0/17", 1)
    lpm.add(0, "10.0.0.0/16", 2)  # rewrites nothing below, checks the group for folding
    assert lpm.stats()["groups_in_use"] == 1
    assert lpm.delete(0, "10.0.0.0/17")
    assert lpm.lookup(0, "10.0.0.1") == 2 and lpm.lookup(0, "10.0.128.1") == 1
    assert lpm.delete(0, "10.0.128.0/17")
    assert lpm.lookup(0, "10.0.128.1") == 2 and lpm.stats()["groups_in_use"] == 0
    assert lpm.lookup(0, ipaddress.IPv4Address("10.0.1.1")) == 2


def test_add_many_matches_single_adds_and_last_duplicate_wins():
    rng = np.random.default_rng(7)
    n = 5000
    addrs = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    lens = rng.integers(0, 33, n).astype(np.uint8)
    lens[:50] = 32
    addrs[50:60] = addrs[0]
    lens[50:60] = 32  # duplicates of rule 0: the last one wins
    vals = np.arange(n) % MAX_VALUE
    bulk = Lpm(4)
    bulk.add_many(3, addrs, lens, vals)
    one = Lpm(4)
    for a, ln, v in zip(addrs.tolist(), lens.tolist(), vals.tolist(), strict=True):
        one.add(3, IPv4Network((a, ln), strict=False), v)
    assert bulk.get(3, IPv4Network((int(addrs[0]), 32))) == 59
    assert dict(bulk.routes(3)) == dict(one.routes(3))
    q = rng.integers(0, 1 << 32, 20000, dtype=np.uint64).astype(np.uint32)
    q[: n // 2] = addrs[: n // 2]
    assert np.array_equal(bulk.lookup_many(3, q), one.lookup_many(3, q))
    assert bulk.stats()["groups_in_use"] == one.stats()["groups_in_use"]
    assert bulk.delete_many(3, addrs, lens) == one.count(3)  # host bits masked here too
    assert len(bulk) == 0 and bulk.stats()["groups_in_use"] == 0


def test_batch_kernels_equal_scalar_kernels():
    rng = np.random.default_rng(3)
    v4 = Lpm(4)
    v6 = Lpm(6)
    for _ in range(300):
        a = int(rng.integers(0, 1 << 32))
        v4.add(0, IPv4Network((a, int(rng.integers(0, 33))), strict=False), int(rng.integers(99)))
        h = (0x20010DB8 << 32) | int(rng.integers(0, 1 << 32))
        net = IPv6Network(
            ((h << 64) | int(rng.integers(0, 1 << 62)), int(rng.integers(0, 129))), strict=False
        )
        v6.add(0, net, int(rng.integers(99)))
    q4 = rng.integers(0, 1 << 32, 3000, dtype=np.uint64).astype(np.uint32)
    b4 = lpm4_lookup_batch(v4.roots, v4.groups, 0, q4)
    assert b4.tolist() == [lpm4_lookup(v4.roots, v4.groups, 0, a) for a in q4]
    his = (np.uint64(0x20010DB8) << np.uint64(32)) | rng.integers(0, 1 << 32, 3000, np.uint64)
    los = rng.integers(0, 1 << 63, 3000, dtype=np.uint64)
    b6 = lpm6_lookup_batch(v6.roots, v6.groups, 0, his, los)
    assert b6.tolist() == [
        lpm6_lookup(v6.roots, v6.groups, 0, h, lo) for h, lo in zip(his, los, strict=True)
    ]


@njit(cache=False)
def _caller4(roots, groups, t, addrs):
    total = 0
    for a in addrs:
        total += lpm4_lookup(roots, groups, t, a)
    return total


def test_lookup_kernels_callable_from_njit():
    lpm = Lpm(4)
    lpm.add(0, "192.0.2.0/24", 5)
    q = np.array([0xC0000201, 0xC0000301], np.uint32)
    assert _caller4(lpm.roots, lpm.groups, 0, q) == 5 - 1


def test_generation_and_nbytes():
    lpm = Lpm(6)
    g0 = lpm.generation
    lpm.add(1, "2001:db8::/48", 1)
    g1 = lpm.generation
    assert g1 > g0
    assert not lpm.delete(1, "2001:db8::/64")
    assert lpm.generation == g1
    assert lpm.delete(1, "2001:db8::/48")
    assert lpm.generation > g1
    assert lpm.nbytes >= lpm.roots.nbytes + lpm.groups.nbytes


@pytest.mark.parametrize(
    "call",
    [
        lambda l4, l6: l4.add(0, "10.0.0.0/33", 1),
        lambda l4, l6: l4.add(0, "10.0.0.256/8", 1),
        lambda l4, l6: l4.add(0, "not a prefix", 1),
        lambda l4, l6: l4.add(0, "2001:db8::/32", 1),
        lambda l4, l6: l4.add(0, 12345, 1),
        lambda l4, l6: l4.add(0, "10.0.0.0/8", -1),
        lambda l4, l6: l4.add(0, "10.0.0.0/8", MAX_VALUE),
        lambda l4, l6: l4.add(0, "10.0.0.0/8", 1.5),
        lambda l4, l6: l4.add(-1, "10.0.0.0/8", 1),
        lambda l4, l6: l4.add("x", "10.0.0.0/8", 1),
        lambda l4, l6: l4.lookup(0, "10.0.0.300"),
        lambda l4, l6: l4.lookup(0, 1 << 32),
        lambda l4, l6: l4.get(0, "10/8/8"),
        lambda l4, l6: l4.delete(0, "10.0.0.0/-1"),
        lambda l4, l6: l6.add(0, "2001:db8::/129", 1),
        lambda l4, l6: l6.add(0, "2001:db8:::/32", 1),
        lambda l4, l6: l6.add(0, "10.0.0.0/8", 1),
        lambda l4, l6: l6.lookup(0, "192.0.2.1"),
        lambda l4, l6: l4.add_many(0, np.zeros(2, np.uint32), np.array([8, 33]), np.ones(2)),
        lambda l4, l6: l4.add_many(
            0, np.zeros(2, np.uint32), np.array([8, 8]), np.array([1, MAX_VALUE])
        ),
        lambda l4, l6: l4.add_many(0, np.zeros(2, np.uint32), np.array([8]), np.array([1])),
        lambda l4, l6: l4.add_many(0, np.array([-1, 0]), np.array([8, 8]), np.array([1, 1])),
        lambda l4, l6: l6.add_many(0, np.zeros(2, np.uint64), np.array([8, 8]), np.ones(2)),
        lambda l4, l6: Lpm(5),
    ],
)
def test_bad_input_raises_value_error(call):
    l4, l6 = Lpm(4), Lpm(6)
    with pytest.raises(ValueError) as exc:
        call(l4, l6)
    assert "\n" not in str(exc.value)
    assert len(l4) == 0 and len(l6) == 0


def test_host_bits_are_masked():
    lpm = Lpm(4)
    lpm.add(0, "192.0.2.77/24", 9)
    assert lpm.get(0, "192.0.2.0/24") == 9
    assert list(lpm.routes(0)) == [(IPv4Network("192.0.2.0/24"), 9)]
    lpm.add_many(0, np.array([0xC6336401], np.uint32), np.array([24]), np.array([4]))
    assert lpm.get(0, "198.51.100.0/24") == 4


# -- prefix file parser -----------------------------------------------------------------------


def _expected_arrays(nets):
    v4 = [n for n in nets if n.version == 4]
    v6 = [n for n in nets if n.version == 6]
    return (
        [int(n.network_address) for n in v4],
        [n.prefixlen for n in v4],
        [int(n.network_address) >> 64 for n in v6],
        [int(n.network_address) & M64 for n in v6],
        [n.prefixlen for n in v6],
    )


def _as_lists(arrays):
    return tuple(a.tolist() for a in arrays)


def _format(addr: int, length: int, version: int, style: int) -> str:
    ip = ipaddress.ip_address(addr) if version == 4 else ipaddress.IPv6Address(addr)
    if version == 6 and style == 1:
        text = ip.exploded
    elif version == 6 and style == 2:
        text = str(ip).upper()
    else:
        text = str(ip)
    return f"{text}/{length}"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([4, 6]),
            st.integers(0, (1 << 128) - 1),
            st.integers(0, 128),
            st.integers(0, 2),
        ),
        max_size=40,
    )
)
def test_load_prefix_file_matches_ipaddress(tmp_path_factory, items):
    lines, nets = [], []
    for version, addr, length, style in items:
        bits = BITS[version]
        addr >>= 128 - bits
        length = length % (bits + 1)
        lines.append(_format(addr, length, version, style))  # host bits may be set
        cls = IPv4Network if version == 4 else IPv6Network
        nets.append(cls((addr, length), strict=False))
    path = tmp_path_factory.mktemp("pfx") / "p.txt"
    path.write_text("\n".join(lines) + "\n")
    assert _as_lists(load_prefix_file(path)) == _expected_arrays(nets)


def test_load_prefix_file_forms(tmp_path):
    text = (
        "# comment\n"
        "\n"
        "  192.0.2.1/24  \r\n"
        "198.51.100.7\n"
        "::ffff:192.0.2.0/120\n"  # embedded IPv4: handled by the strict fallback
        "2001:db8::1/32\n"
        "::/0\n"
    )
    path = tmp_path / "p.txt.gz"
    path.write_bytes(gzip.compress(text.encode()))
    nets = [
        IPv4Network("192.0.2.0/24"),
        IPv4Network("198.51.100.7/32"),
        IPv6Network("::ffff:192.0.2.0/120"),
        IPv6Network("2001:db8::/32"),
        IPv6Network("::/0"),
    ]
    got = load_prefix_file(path)
    assert _as_lists(got) == _expected_arrays(nets)
    assert [a.dtype for a in got] == [np.uint32, np.uint8, np.uint64, np.uint64, np.uint8]


@pytest.mark.parametrize(
    "bad",
    [
        "192.0.2.0/33",
        "192.0.2/24",
        "300.0.0.0/8",
        "2001:db8::/129",
        "2001:db8:::1/64",
        "1:2:3:4:5:6:7:8:9/64",
        "10.0.0.0/x",
        "hello",
    ],
)
def test_load_prefix_file_bad_line(tmp_path, bad):
    path = tmp_path / "p.txt"
    path.write_text(f"192.0.2.0/24\n{bad}\n")
    with pytest.raises(ValueError, match=r"p\.txt:2: bad prefix"):
        load_prefix_file(path)
