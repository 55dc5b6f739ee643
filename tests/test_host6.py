"""The exact-match table of IPv6 host routes (fib/host6.py) against plain Python.

The reference is a dict of the /128 rules added and not deleted, per table; the table
must give each of them its value, and -1 for every other address (a shorter prefix's
address included: the probe answers only what a /128 decides). Lpm.lookup (the trie)
must agree on every hit, since a /128 is its address's longest match."""

from __future__ import annotations

import ipaddress
import logging
import random

import numpy as np

from vecroute.fib.host6 import host6_lookup
from vecroute.fib.lpm import Lpm

M64 = (1 << 64) - 1


def _probe(lpm: Lpm, keys, vals, table_id: int, a: int) -> int:
    return int(host6_lookup(keys, vals, lpm.table_index(table_id), np.uint64(a >> 64),
                            np.uint64(a & M64)))


def test_host_table_is_the_128s_of_the_rule_store() -> None:
    rng = random.Random(7)
    lpm = Lpm(6)
    ref: dict[tuple[int, int], int] = {}
    base = int(ipaddress.ip_address("2001:db8::"))
    addrs = [base + rng.randrange(1 << 20) for _ in range(300)]
    for step in range(1500):
        t = rng.choice([0, 10, 254])
        a = rng.choice(addrs)
        if rng.random() < 0.3:  # shorter prefixes around them do not enter the table
            ln = rng.choice([48, 64, 100, 127])
            lpm.add(t, ipaddress.IPv6Network((a, ln), strict=False), rng.randrange(1000))
        elif rng.random() < 0.7:
            v = rng.randrange(1 << 22)
            lpm.add(t, ipaddress.IPv6Network((a, 128)), v)
            ref[(t, a)] = v
        else:
            lpm.delete(t, ipaddress.IPv6Network((a, 128)))
            ref.pop((t, a), None)
        if step % 100 == 99:
            keys, vals = lpm.host_table()
            assert vals.shape[0] >= 2 * len(ref) and vals.shape[0] & (vals.shape[0] - 1) == 0
            for t in (0, 10, 254):
                for a in addrs + [a ^ 1 for a in addrs]:
                    got = _probe(lpm, keys, vals, t, a)
                    assert got == ref.get((t, a), -1), (t, hex(a))
                    if got >= 0:
                        assert lpm.lookup(t, a) == got


def test_host_table_is_rebuilt_only_when_a_128_changes() -> None:
    lpm = Lpm(6)
    lpm.add(0, "2001:db8::1/128", 3)
    first = lpm.host_table()
    lpm.add(0, "2001:db8:1::/48", 4)
    lpm.add_many(0, (np.array([1 << 62], np.uint64), np.array([0], np.uint64)), [32], [5])
    assert lpm.host_table()[1] is first[1], "a /48 and a /32 left the host table alone"
    lpm.add_many(0, (np.array([1 << 62], np.uint64), np.array([9], np.uint64)), [128], [6])
    second = lpm.host_table()
    assert second[1] is not first[1] and int((second[1] >= 0).sum()) == 2
    assert first[1][first[1] >= 0].tolist() == [3], "a published table is never changed"
    assert lpm.delete_many(0, (np.array([1 << 62], np.uint64), np.array([9], np.uint64)),
                           [128]) == 1
    assert int((lpm.host_table()[1] >= 0).sum()) == 1


def test_more_host_routes_than_the_limit_give_an_empty_table(monkeypatch, caplog) -> None:
    import vecroute.fib.lpm as lpm_module

    lpm = Lpm(6)
    for k in range(20):
        lpm.add(0, ipaddress.IPv6Network((1 << 125 | k, 128)), k)
    monkeypatch.setattr(lpm_module, "HOST_LIMIT", 19)
    with caplog.at_level(logging.WARNING, logger="vecroute.fib.lpm"):
        keys, vals = lpm.host_table()
    assert vals.tolist() == [-1], "over the limit: every probe misses, the trie answers"
    assert "more than 19 IPv6 /128 routes" in caplog.text
    assert _probe(lpm, keys, vals, 0, 1 << 125 | 3) == -1
    monkeypatch.setattr(lpm_module, "HOST_LIMIT", 20)
    lpm.delete(0, ipaddress.IPv6Network((1 << 125 | 19, 128)))
    keys, vals = lpm.host_table()
    assert sorted(vals[vals >= 0].tolist()) == list(range(19))


def test_each_build_has_its_own_seed() -> None:
    """Hosts choose the addresses learnt as /128s: a random seed per build keeps them from
    aiming at one probe run; the answers are the same under any seed."""
    lpm = Lpm(6)
    for k in range(50):
        lpm.add(0, ipaddress.IPv6Network((1 << 125 | k, 128)), k)
    k1, v1 = lpm.host_table()
    lpm.add(0, "2001:db8::1/128", 99)
    k2, v2 = lpm.host_table()
    assert k1[-1, 0] != k2[-1, 0], "a new build, a new seed"
    for k in range(50):
        assert _probe(lpm, k1, v1, 0, 1 << 125 | k) == _probe(lpm, k2, v2, 0, 1 << 125 | k) == k


def test_ipv4_has_no_host_table() -> None:
    try:
        Lpm(4).host_table()
    except ValueError as e:
        assert "IPv6" in str(e)
    else:
        raise AssertionError("an IPv4 Lpm gave a host table")
