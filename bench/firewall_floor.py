"""The floors under the firewall's table rule: what its classification costs alone.

    python -m bench.firewall_floor [--repeat R] [--rounds N]

The traffic of bench.firewall's forwarding cases as classifier keys (64-byte IPv4/UDP
from the four hosts of bench.forwarding to random destinations; the keys the fused pass
extracts), vectors of 256, interleaved and repeated; ns per packet, median [min .. max]:

* ``fw_batch`` (the classifier entry the fused pass calls) with the issue's rule, ``deny
  ip from table(bl) to any``, over a table of 1M no-match entries: candidate rows, the rule
  program, one longest-prefix walk in the table's trie;
* ``fw_batch_tables``, what the graph runs for this rule since it is a table-only rule set
  (``CompiledFirewall.tables_only``), over the same packets' table keys (TK rows, one
  block per vector, as the fused pass writes them while parsing);
* the table walk alone (``table_addr_lookup`` of every packet's source, the rule's only
  lookup);
* ``fw_count`` alone: counting a deciding rule (packets, bytes, last match), what fw-out
  costs when it repeats fw-in.

bench.firewall's node profile gives the same work inside the forwarding path (fw-in,
fw-out); the difference between these floors and the target's budget is what no tuning of
the pass removes (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import ipaddress
import time
from pathlib import Path

import numpy as np
from numba import njit

from bench.common import pin_to_one_cpu
from bench.firewall import NOW_NS, SEED, VECTOR, table_rule
from bench.forwarding import N_IF, host_ip4
from vecroute.firewall.classify import fw_batch, fw_batch_tables, fw_count
from vecroute.firewall.keys import (
    K_COLS,
    K_DPORT,
    K_DST_LO,
    K_FAMILY,
    K_ICMPTYPE,
    K_LEN,
    K_PROTO,
    K_RX,
    K_SPORT,
    K_SRC_LO,
    K_TCPFLAGS,
    K_TTL,
    K_TX,
    TK_ROWS,
    table_key_rows,
)
from vecroute.firewall.tables import table_addr_lookup


def bench_keys(n: int, rng: np.random.Generator) -> np.ndarray:
    """The keys of bench.firewall's frames (bench.forwarding.make_frames4's fields)."""
    keys = np.zeros((n, K_COLS), np.int64)
    rx = rng.integers(0, N_IF, n)
    src = np.array([int(ipaddress.IPv4Address(host_ip4(i))) for i in range(N_IF)], np.int64)
    keys[:, K_FAMILY] = 4
    keys[:, K_SRC_LO] = src[rx]
    keys[:, K_DST_LO] = rng.integers(1 << 24, 224 << 24, n)
    keys[:, K_PROTO] = 17
    keys[:, K_SPORT] = rng.integers(1024, 1 << 16, n)
    keys[:, K_DPORT] = 53
    keys[:, K_TCPFLAGS] = -1
    keys[:, K_ICMPTYPE] = -1
    keys[:, K_TTL] = 64
    keys[:, K_RX] = rx
    keys[:, K_TX] = -1
    keys[:, K_LEN] = 50
    return keys


@njit(cache=True, _nrt=False)  # as the fused pass: no reference counts
def _classify(fw, keys, tk, rounds, v, r, a, tables) -> int:
    """``fw_batch`` over the key rows, or (``tables``) ``fw_batch_tables`` over the same
    packets' table keys (``tk``: one TK-rows block per vector, as the fused pass has them)."""
    n = keys.shape[0]
    pos = 0
    for _ in range(rounds):
        if pos + VECTOR > n:
            pos = 0
        if tables:
            fw_batch_tables(fw, tk[pos // VECTOR], VECTOR, NOW_NS, v, r, a)
        else:
            fw_batch(fw, keys[pos : pos + VECTOR], VECTOR, 0, NOW_NS, v, r, a)
        pos += VECTOR
    return np.int64(v[0])


@njit(cache=True, _nrt=False)  # as the fused pass: no reference counts
def _walk(fw, keys, rounds, slot) -> int:
    n = keys.shape[0]
    pos = 0
    hits = 0
    for _ in range(rounds):
        if pos + VECTOR > n:
            pos = 0
        for j in range(pos, pos + VECTOR):
            hits += (
                table_addr_lookup(
                    fw.t4_roots,
                    fw.t4_groups,
                    fw.t6_roots,
                    fw.t6_groups,
                    fw.t_idx,
                    slot,
                    4,
                    0,
                    keys[j, K_SRC_LO],
                )
                >= 0
            )
        pos += VECTOR
    return hits


@njit(cache=True, _nrt=False)  # as the fused pass: no reference counts
def _count(fw, keys, rounds, rule) -> None:
    n = keys.shape[0]
    pos = 0
    for _ in range(rounds):
        if pos + VECTOR > n:
            pos = 0
        for j in range(pos, pos + VECTOR):
            fw_count(fw, rule, keys[j, K_LEN], NOW_NS)
        pos += VECTOR


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=4000, help="vectors per sample")
    args = ap.parse_args()
    from vecroute.warmup import clear_stale_cache

    clear_stale_cache((Path(__file__).parent,))  # these kernels embed the classifier's
    cpu = pin_to_one_cpu(None)
    rng = np.random.default_rng(SEED)
    keys = bench_keys(1 << 16, rng)
    fw = table_rule(1_000_000, rng)
    d = fw.dataplane()
    v, r, a = (np.zeros(VECTOR, np.int32) for _ in range(3))
    slot = fw.tables.slot("bl")
    # the table keys in one block of TK rows per vector (the fused pass's layout)
    nvec = keys.shape[0] // VECTOR
    tk = np.ascontiguousarray(
        table_key_rows(keys[: nvec * VECTOR]).reshape(TK_ROWS, nvec, VECTOR).transpose(1, 0, 2))
    if not fw.compiled.tables_only():
        raise RuntimeError("the table rule must be a table-only rule set")
    for tables in (False, True):  # compile, and check: nothing matches, all pass
        _classify(d, keys, tk, nvec, v, r, a, tables)
        if (v != 0).any():
            raise RuntimeError(f"verdicts {np.unique(v)}: the traffic must not match the table")
    rule = int(r[0])  # the deciding rule: the default one
    runs = {
        "fw_batch, table rule (1M entries)": lambda: _classify(d, keys, tk, args.rounds, v, r,
                                                               a, False),
        "fw_batch_tables (table-only sets)": lambda: _classify(d, keys, tk, args.rounds, v, r,
                                                               a, True),
        "table walk alone (source)": lambda: _walk(d, keys, args.rounds, slot),
        "fw_count alone": lambda: _count(d, keys, args.rounds, rule),
    }
    if _walk(d, keys, 1, slot) != 0:
        raise RuntimeError("a source is in the table")
    _count(d, keys, 1, rule)
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.repeat):
        for name, f in runs.items():
            t = time.process_time()
            f()
            samples[name].append((time.process_time() - t) / args.rounds / VECTOR * 1e9)
    print(
        f"firewall floors, vector {VECTOR}, pinned to CPU {cpu}, {args.repeat} rounds, "
        "ns per packet (CPU time)"
    )
    for name, s in samples.items():
        x = np.array(s)
        print(f"{name:36s} {np.median(x):6.2f} ns [{x.min():.2f} .. {x.max():.2f}]")


if __name__ == "__main__":
    main()
