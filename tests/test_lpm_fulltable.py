"""The full Internet table (901,899 IPv4 + 160,147 IPv6 prefixes) in the LPM tables.

Checked against an independent plain-Python reference: one dict per prefix length, probed
from the longest length to the shortest.  Then 10% of the rules are deleted, checked again,
re-added, checked again.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from vecroute.fib.lpm import Lpm, load_prefix_file

pytestmark = pytest.mark.slow

# the shared data directory sits next to the checkout: <root>/shared/data, <root>/main/tests
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "bgp-full-table-prefixes.txt.gz"
M64 = (1 << 64) - 1


class RefByLength:
    """Longest match by probing a dict per prefix length, longest length first."""

    def __init__(self, bits: int) -> None:
        self.bits = bits
        self.by_len: dict[int, dict[int, int]] = {}

    def add(self, addr: int, length: int, value: int) -> None:
        self.by_len.setdefault(length, {})[addr >> (self.bits - length)] = value

    def delete(self, addr: int, length: int) -> None:
        del self.by_len[length][addr >> (self.bits - length)]

    def lookup_all(self, addrs: list[int]) -> list[int]:
        lengths = sorted((ln for ln, d in self.by_len.items() if d), reverse=True)
        probes = [(self.bits - ln, self.by_len[ln]) for ln in lengths]
        out = []
        for a in addrs:
            v = -1
            for shift, table in probes:
                got = table.get(a >> shift)
                if got is not None:
                    v = got
                    break
            out.append(v)
        return out

    def __len__(self) -> int:
        return sum(len(d) for d in self.by_len.values())


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 1e6


@pytest.fixture(scope="module")
def table():
    if not DATA.exists():
        pytest.fail(f"missing {DATA}: the shared data directory must sit beside the checkout")
    t0 = time.perf_counter()
    arrays = load_prefix_file(DATA)
    print(f"\nload_prefix_file: {time.perf_counter() - t0:.2f} s")
    return arrays


def random_inside(rng, his, los, lens, bits, n):
    """Addresses drawn inside random prefixes of the table (host bits random)."""
    idx = rng.integers(0, lens.shape[0], n)
    out = []
    for i in idx.tolist():
        base = (int(his[i]) << 64) | int(los[i]) if bits == 128 else int(his[i])
        host = bits - int(lens[i])
        out.append(base | (int.from_bytes(rng.bytes(16), "big") & ((1 << host) - 1)))
    return out


def check(lpm: Lpm, ref: RefByLength, queries: list[int], label: str) -> None:
    t0 = time.perf_counter()
    if lpm.family == 4:
        got = lpm.lookup_many(0, np.array(queries, np.uint32)).tolist()
    else:
        his = np.array([q >> 64 for q in queries], np.uint64)
        los = np.array([q & M64 for q in queries], np.uint64)
        got = lpm.lookup_many(0, (his, los)).tolist()
    t1 = time.perf_counter()
    want = ref.lookup_all(queries)
    t2 = time.perf_counter()
    bad = [i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w]
    hits = sum(w >= 0 for w in want)
    print(f"{label}: {len(queries)} lookups ({hits} hits) lpm {t1 - t0:.3f} s, ref {t2 - t1:.2f} s")
    assert not bad, f"{label}: {len(bad)} mismatches, first at {queries[bad[0]]:#x}"
    assert lpm.count(0) == len(ref)


def run_family(family, addrs_hi, addrs_lo, lens, n_queries, seed):
    bits = 32 if family == 4 else 128
    rng = np.random.default_rng(seed)
    n = lens.shape[0]
    values = np.arange(n, dtype=np.int64) % (1 << 22)
    addrs = addrs_hi if family == 4 else (addrs_hi, addrs_lo)

    lpm = Lpm(family)
    r0 = rss_mb()
    t0 = time.perf_counter()
    lpm.add_many(0, addrs, lens, values)
    build = time.perf_counter() - t0
    stats = lpm.stats()
    print(f"IPv{family} build: {n} prefixes in {build:.2f} s, RSS +{rss_mb() - r0:.0f} MB, {stats}")
    assert build < 30

    ref = RefByLength(bits)
    wide = (
        [int(a) for a in addrs_hi]
        if family == 4
        else [(int(h) << 64) | int(lo) for h, lo in zip(addrs_hi, addrs_lo, strict=True)]
    )
    for a, ln, v in zip(wide, lens.tolist(), values.tolist(), strict=True):
        ref.add(a, ln, v)

    half = n_queries // 2
    queries = random_inside(rng, addrs_hi, addrs_lo, lens, bits, half)
    if family == 4:
        queries += rng.integers(0, 1 << 32, n_queries - half, dtype=np.uint64).tolist()
    else:  # random global-unicast space (2000::/3) and fully random addresses
        for i in range(n_queries - half):
            q = int.from_bytes(rng.bytes(16), "big")
            queries.append(q if i % 4 == 0 else (0x2 << 124) | (q >> 4))
    check(lpm, ref, queries, f"IPv{family} full")

    # delete a random 10% (some chosen twice: the second delete must report absence)
    pick = rng.choice(n, n // 10, replace=False)
    pick_hi = addrs_hi[pick]
    pick_lo = addrs_lo[pick] if family == 6 else None
    pick_addrs = pick_hi if family == 4 else (pick_hi, pick_lo)
    unique = {(wide[i], int(lens[i])) for i in pick.tolist()}
    t0 = time.perf_counter()
    deleted = lpm.delete_many(0, pick_addrs, lens[pick])
    print(f"IPv{family} delete {len(pick)}: {time.perf_counter() - t0:.2f} s")
    assert deleted == len(unique)
    for a, ln in unique:
        ref.delete(a, ln)
    assert lpm.delete_many(0, pick_addrs, lens[pick]) == 0
    check(lpm, ref, queries, f"IPv{family} after delete")

    # re-add: same table as the first build, free-listed groups reused
    cap = lpm.stats()["groups_capacity"]
    t0 = time.perf_counter()
    lpm.add_many(0, pick_addrs, lens[pick], values[pick])
    print(f"IPv{family} re-add {len(pick)}: {time.perf_counter() - t0:.2f} s")
    for i in pick.tolist():
        ref.add(wide[i], int(lens[i]), int(values[i]))
    check(lpm, ref, queries, f"IPv{family} after re-add")
    assert lpm.stats()["groups_in_use"] == stats["groups_in_use"]
    assert lpm.stats()["groups_capacity"] == cap
    print(f"IPv{family} nbytes {lpm.nbytes / 1e6:.1f} MB")
    return lpm


def test_full_table_ipv4(table):
    a4, l4, _, _, _ = table
    assert a4.shape[0] == 901_899
    run_family(4, a4, None, l4, 200_000, seed=4)


def test_full_table_ipv6(table):
    _, _, h6, o6, l6 = table
    assert h6.shape[0] == 160_147
    run_family(6, h6, o6, l6, 50_000, seed=6)
