"""ClassBench rule sets (acl1, fw1, ipc1; 1k and 10k rules) through the converter, the parser,
the compiler and the kernel, against a brute force straight from the ClassBench numbers.

100,000 packets per set (half drawn inside random rules, half random): every 1k set in full;
the 10k sets on a 20,000-packet subset here and in full in the ``slow`` test.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fw_reference import Pkt, RefFirewall, classbench_first_match

from vecroute.firewall.classbench import gen_keys, load_classbench, to_rules
from vecroute.firewall.classify import classify_keys
from vecroute.firewall.compiler import compile_rules
from vecroute.firewall.rules import parse_rules
from vecroute.firewall.states import new_ctl, new_table
from vecroute.firewall.tables import FwTables

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "classbench"
N_PACKETS = 100_000
SUBSET = 20_000


@pytest.fixture(autouse=True)
def _data_present():
    if not DATA.is_dir():
        pytest.fail(f"missing {DATA}: the shared data directory must sit beside the checkout")


_cache: dict[str, tuple] = {}


def prepared(name: str):
    """(ClassBench rows, kernel args, 100K keys) per set, built once per test process."""
    if name not in _cache:
        cb = load_classbench(DATA / name)
        rules = parse_rules(to_rules(cb))
        tabs = FwTables()
        cf = compile_rules(rules, False, tabs)
        args = (*cf.arrays(), *tabs.arrays(), new_table(), new_ctl(16))
        keys = gen_keys(cb, N_PACKETS, seed=sum(map(ord, name)))
        _cache[name] = (cb, args, keys)
    return _cache[name]


def mismatches(name: str, n: int) -> list[str]:
    cb, args, keys = prepared(name)
    keys = keys[:n]
    want = classbench_first_match(cb, keys)
    _, got, _ = classify_keys(args, keys)
    # no ClassBench match -> the default rule, whose index is len(cb)
    bad = np.nonzero(got != want)[0]
    return [f"packet {k}: kernel rule {got[k]}, brute force {want[k]}" for k in bad[:5]]


@pytest.mark.parametrize("name", ["acl1_1k", "fw1_1k", "ipc1_1k"])
def test_classbench_1k_all_packets(name):
    assert mismatches(name, N_PACKETS) == []


@pytest.mark.parametrize("name", ["acl1_10k", "fw1_10k", "ipc1_10k"])
def test_classbench_10k_subset(name):
    assert mismatches(name, SUBSET) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", ["acl1_10k", "fw1_10k", "ipc1_10k"])
def test_classbench_10k_all_packets(name):
    assert mismatches(name, N_PACKETS) == []


def test_converter_matches_the_ipfw_reference():
    """The brute force reads ClassBench semantics; the plain ordered scan reads the converted
    ipfw rules: both agree on a sample, so the converter keeps the meaning."""
    cb, _, keys = prepared("fw1_1k")
    rules = parse_rules(to_rules(cb))
    ref = RefFirewall(rules)
    want = classbench_first_match(cb, keys[:400])
    for k in range(400):
        row = keys[k]
        p = Pkt(4, int(row[2]), int(row[4]), *(int(x) for x in row[5:]))
        assert ref.classify(p)[1] == want[k]


def test_converter_text():
    cb = np.array(
        [
            [0xC0000200, 24, 0x0A000001, 32, 0, 65535, 80, 80, 6, 0xFF, 0x0200, 0x1200],
            [0, 0, 0, 0, 1024, 2047, 0, 65535, 17, 0xFF, 0, 0],
            [0, 0, 0, 0, 0, 65535, 0, 65535, 1, 0xFF, 0x0800, 0xFF00],
            [0, 0, 0, 0, 0, 65535, 0, 65535, 0, 0, 0, 0],
            [0, 8, 0, 0, 0, 65535, 0, 65535, 47, 0xFF, 0, 0],
        ]
    )
    assert to_rules(cb) == [
        "1 allow tcp from 192.0.2.0/24 to 10.0.0.1 80 tcpflags syn,!ack",
        "2 allow udp from 0.0.0.0/0 1024-2047 to 0.0.0.0/0",
        "3 allow icmp from 0.0.0.0/0 to 0.0.0.0/0 icmptypes 8",
        "4 allow ip from 0.0.0.0/0 to 0.0.0.0/0",
        "5 allow gre from 0.0.0.0/8 to 0.0.0.0/0",
    ]
    with pytest.raises(ValueError, match="flags"):
        to_rules(np.array([[0, 0, 0, 0, 0, 65535, 0, 65535, 1, 0xFF, 0x0800, 0xFFFF]]))
