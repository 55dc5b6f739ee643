"""Firewall benchmark: classification rate of the compiled firewall, and what it leaves of
the forwarding rate.

    python -m bench.firewall [--json] [--repeat R] [--packets N] [--cpu C] [--no-classbench]

Cases (DragonFly's ipfw lesson: long lists belong in tables, not in rules):

* no firewall: the whole forwarding path alone (``PacketBatch.load`` + ``Graph.run``, 64-byte
  IPv4/UDP, vector 256, a small FIB);
* an empty rule set (only the default rule), 100 / 1K / 10K rules that the traffic does not
  match (a mix of source hosts, destination prefixes with ports, source/destination pairs,
  port ranges), one rule ``deny ip from table(bl) to any`` with 100 / 1K / 10K / 1M entries
  the traffic does not match; all with ``default = "allow"``, on the forwarding traffic;
* the ClassBench 10k sets (acl1, fw1, ipc1) with their own traffic, 100,000 packets, half
  drawn inside random rules, half random.

For each case the batch kernel (``fw_batch`` semantics: vectors of 256 prebuilt key rows,
called from compiled code as the graph node does) is timed over ``--packets`` keys. Rates
are per CPU-second of the process (preemption removed) with the wall-clock rate alongside.
"% of no-firewall" combines, per repetition, the measured forwarding time per packet with
the measured firewall time per packet -- one firewall pass per packet (fw-in) -- as long as
the graph has no firewall node; once it has one (``src/vecroute/graph/firewall*.py``) the
integrated path should be timed directly instead. Also reported: compile time of the 10K
rule sets, incremental add/delete on the 10K no-match set, the 1M-line table file load.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit

from bench.common import (
    DEFAULT_TABLE,
    CpuShare,
    eprint,
    machine_info,
    machine_line,
    pin_to_one_cpu,
    summary,
)
from bench.forwarding import (
    N_NB,
    NOW_NS,
    Table,
    VectorPath,
    build_fib,
    load_table,
    make_frames4,
    setup_fib,
)
from vecroute.firewall.classbench import gen_keys, load_classbench, to_rules
from vecroute.firewall.classifier import _batch
from vecroute.firewall.config import parse_firewall_config
from vecroute.firewall.firewall import Firewall
from vecroute.firewall.keys import K_COLS, K_TX, extract_keys

REPO = Path(__file__).resolve().parent.parent
CLASSBENCH = REPO.parent / "shared" / "data" / "classbench"
SEED = 20240611
VECTOR = 256


@njit(_nrt=False)
def _drive(
    c4,
    cl6_roots,
    cl6_groups,
    cmap,
    bm,
    ag,
    grp,
    glist,
    gpos,
    rinfo,
    prog,
    probes,
    cnt,
    t4_roots,
    t4_groups,
    t6_roots,
    t6_groups,
    t_idx,
    nt,
    if_tab,
    st,
    ctl,
    keys,
    total,
    v,
    r,
    a,
):
    """Classify ``total`` keys in vectors of 256, cycling over the key pool (as the graph
    would call fw_batch once per vector, from compiled code)."""
    n = keys.shape[0]
    done = 0
    pos = 0
    while done < total:
        if pos + VECTOR > n:
            pos = 0
        _batch(
            c4,
            cl6_roots,
            cl6_groups,
            cmap,
            bm,
            ag,
            grp,
            glist,
            gpos,
            rinfo,
            prog,
            probes,
            cnt,
            t4_roots,
            t4_groups,
            t6_roots,
            t6_groups,
            t_idx,
            nt,
            if_tab,
            st,
            ctl,
            keys[pos : pos + VECTOR],
            VECTOR,
            0,
            NOW_NS,
            v,
            r,
            a,
        )
        pos += VECTOR
        done += VECTOR


# -- rule sets and traffic ----------------------------------------------------------------------


def nomatch_rules(n: int, rng: np.random.Generator) -> list[str]:
    """n rules over 10.0.0.0/8 and 172.16.0.0/12 (the traffic comes from 192.0.2.0/24 to
    198.18.0.0/15): four shapes in turn."""
    out = []
    for k in range(n):
        a = f"10.{rng.integers(256)}.{rng.integers(256)}.{rng.integers(256)}"
        b = f"172.{16 + rng.integers(16)}.{rng.integers(256)}.0/{rng.integers(16, 25)}"
        shape = k % 4
        if shape == 0:
            out.append(f"{k + 1} deny ip from {a} to any")
        elif shape == 1:
            out.append(f"{k + 1} deny tcp from any to {b} {rng.integers(1, 65536)}")
        elif shape == 2:
            out.append(f"{k + 1} deny udp from {a}/{rng.integers(20, 33)} to {b}")
        else:
            out.append(f"{k + 1} deny tcp from any {rng.integers(1, 1024)} to {a} 1-1023")
    return out


def table_text(n: int, rng: np.random.Generator) -> str:
    """n entries in 10.0.0.0/8 (host routes and /24s), one a line."""
    a = (10 << 24) | rng.integers(0, 1 << 24, n)
    lens = np.where(rng.integers(0, 2, n) == 1, 32, 24)
    return (
        "\n".join(f"{ipaddress.IPv4Address(int(x))}/{int(p)}" for x, p in zip(a, lens, strict=True))
        + "\n"
    )


def forwarding(n: int, rng: np.random.Generator, table: Path | None):
    """The forwarding set-up of bench.forwarding (the full Internet table, 4 interfaces, 64
    neighbours; ``table=None``: a small FIB of 512 /24s in 198.18.0.0/15 instead), its
    64-byte IPv4/UDP frames, and the key rows fw-in would see for them."""
    if table is not None:
        _, tab = load_table(table)
        fib, _, _, _ = build_fib(tab)
    else:
        fib, lb4, _ = setup_fib()
        a4 = np.array([(198 << 24) | (18 << 16) | (k << 8) for k in range(512)], np.uint32)
        tab = Table(
            a4,
            np.full(512, 24, np.uint8),
            np.zeros(0, np.uint64),
            np.zeros(0, np.uint64),
            np.zeros(0, np.uint8),
            rng.integers(0, N_NB, 512),
            np.zeros(0, np.int64),
        )
        fib.lpm[4].add_many(0, tab.a4, tab.l4, lb4[tab.nb4])
    frames = make_frames4(n, tab, rng)
    path = VectorPath(fib, VECTOR)
    keys = np.zeros((n, K_COLS), np.int64)
    b = path.batch
    pos = 0
    work = np.arange(VECTOR, dtype=np.int32)
    while pos < n:
        k = b.load(frames.data, frames.off, frames.length, frames.ts, frames.rx, pos, n - pos)
        path.graph.run(b, NOW_NS)
        extract_keys(b.buf, b.meta, work, k, keys[pos : pos + k])
        pos += k
    keys[:, K_TX] = -1  # as at input
    return path, frames, keys


class Case:
    def __init__(self, name: str, fw: Firewall, keys: np.ndarray, build_s: float) -> None:
        self.name = name
        self.fw = fw
        self.keys = np.ascontiguousarray(keys)
        self.build_s = build_s
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def run(self, total: int) -> None:
        v = np.zeros(VECTOR, np.int32)
        r, a = v.copy(), v.copy()
        args = self.fw.args()
        w0, c0 = time.perf_counter(), time.process_time()
        _drive(*args, self.keys, total, v, r, a)
        self.wall.append(time.perf_counter() - w0)
        self.cpu.append(time.process_time() - c0)


def firewall(rules: list[str], default: str = "allow", tables: list | None = None) -> Firewall:
    raw: dict[str, Any] = {"default": default, "rules": rules}
    if tables:
        raw["tables"] = tables
    return Firewall(parse_firewall_config(raw, "bench"))


def build_cases(args, rng, fwd_keys) -> list[Case]:
    cases = []

    def timed_fw(name, keys, make):
        t0 = time.perf_counter()
        fw = make()
        cases.append(Case(name, fw, keys, time.perf_counter() - t0))
        eprint(f"  {name}: built in {cases[-1].build_s:.2f} s")

    timed_fw("empty rule set", fwd_keys, lambda: firewall([]))
    for n in (100, 1000, 10000):
        rules = nomatch_rules(n, rng)
        timed_fw(f"{n} no-match rules", fwd_keys, lambda r=rules: firewall(r))
    tmp = Path(tempfile.mkdtemp(prefix="fwbench"))
    for n in (100, 1000, 10000, 1000000):
        path = tmp / f"bl{n}.txt"
        path.write_text(table_text(n, rng))

        def make(p=path):
            fw = firewall(
                ["100 deny ip from table(bl) to any"], tables=[{"name": "bl", "type": "addr"}]
            )
            fw.tables.add_file("bl", p)
            return fw

        timed_fw(f"table of {n} no-match entries", fwd_keys, make)
    if not args.no_classbench and CLASSBENCH.is_dir():
        for name in ("acl1_10k", "fw1_10k", "ipc1_10k"):
            cb = load_classbench(CLASSBENCH / name)
            keys = gen_keys(cb, 100_000, seed=SEED)
            rules = to_rules(cb)
            timed_fw(f"ClassBench {name}", keys, lambda r=rules: firewall(r, "deny"))
    return cases


def incremental(fw: Firewall, rng: np.random.Generator, reps: int = 10) -> dict[str, Any]:
    """Seconds per rule add (new prefix, middle of the set) and per delete, 10K-rule set."""
    add, dele = [], []
    for k in range(reps):
        text = f"{5000 + k} deny tcp from 10.{200 + k}.{rng.integers(256)}.0/24 to any 22"
        t0 = time.perf_counter()
        fw.add(text)
        add.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        fw.delete(5000 + k)
        dele.append(time.perf_counter() - t0)
    return {"add_s": summary(add), "delete_s": summary(dele)}


# -- main ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--packets", type=int, default=1 << 20, help="keys per case and repetition")
    ap.add_argument("--frames", type=int, default=1 << 18, help="forwarding frames")
    ap.add_argument(
        "--pool",
        type=int,
        default=4096,
        help="key rows cycled through for the forwarding-traffic cases (the keys "
        "of one vector are in cache right after the graph extracted them)",
    )
    ap.add_argument("--cpu", type=int, default=None)
    ap.add_argument("--no-classbench", action="store_true")
    ap.add_argument(
        "--table",
        type=Path,
        default=DEFAULT_TABLE,
        help="the FIB of the forwarding baseline (bench.forwarding's full table)",
    )
    ap.add_argument(
        "--small-fib",
        action="store_true",
        help="forward over 512 /24s instead of the full table (a faster baseline)",
    )
    args = ap.parse_args(argv)
    cpu = pin_to_one_cpu(args.cpu)
    rng = np.random.default_rng(SEED)
    eprint(f"pinned to CPU {cpu}; {machine_line()}")
    eprint("forwarding set-up")
    table = None if args.small_fib or not args.table.exists() else args.table
    path, frames, fwd_keys = forwarding(args.frames, rng, table)
    eprint("rule sets")
    cases = build_cases(args, rng, fwd_keys[: args.pool])
    for c in cases:  # compile / warm
        c.run(VECTOR * 4)
        c.wall.clear()
        c.cpu.clear()
    path.run(frames)
    fwd_wall, fwd_cpu = [], []
    share = CpuShare()
    eprint("timing")
    for rep in range(args.repeat):
        with share:
            w0, c0 = time.perf_counter(), time.process_time()
            path.run(frames)
            fwd_wall.append(time.perf_counter() - w0)
            fwd_cpu.append(time.process_time() - c0)
        for c in cases:
            with share:
                c.run(args.packets)
        eprint(f"  repetition {rep + 1}/{args.repeat}")
    big = next(c for c in cases if c.name == "10000 no-match rules")
    inc = incremental(big.fw, rng)
    t0 = time.perf_counter()
    big.fw.rebuild()
    rebuild_s = time.perf_counter() - t0

    nf = args.frames
    fwd_mpps_cpu = [nf / c / 1e6 for c in fwd_cpu]
    rows = [
        {
            "case": "no firewall",
            "kernel_mcls_cpu": None,
            "kernel_mcls_wall": None,
            "fwd_mpps_cpu": summary(fwd_mpps_cpu),
            "fwd_mpps_wall": summary([nf / w / 1e6 for w in fwd_wall]),
            "pct_of_no_fw": summary([100.0] * len(fwd_cpu)),
            "pct_of_no_fw_in_out": summary([100.0] * len(fwd_cpu)),
            "build_s": None,
        }
    ]
    for c in cases:
        k_cpu = [args.packets / x / 1e6 for x in c.cpu]
        k_wall = [args.packets / x / 1e6 for x in c.wall]
        # per repetition: forwarding ns/packet + firewall ns/packet
        combo = [1e3 / (1e3 / f + 1e3 / k) for f, k in zip(fwd_mpps_cpu, k_cpu, strict=True)]
        combo2 = [1e3 / (1e3 / f + 2e3 / k) for f, k in zip(fwd_mpps_cpu, k_cpu, strict=True)]
        pct = [100.0 * x / f for x, f in zip(combo, fwd_mpps_cpu, strict=True)]
        pct2 = [100.0 * x / f for x, f in zip(combo2, fwd_mpps_cpu, strict=True)]
        rows.append(
            {
                "case": c.name,
                "kernel_mcls_cpu": summary(k_cpu),
                "kernel_mcls_wall": summary(k_wall),
                "fwd_mpps_cpu": summary(combo),
                "fwd_mpps_wall": None,
                "pct_of_no_fw": summary(pct),
                "pct_of_no_fw_in_out": summary(pct2),
                "build_s": c.build_s,
                "stats": c.fw.compiled.stats,
            }
        )
    integrated = sorted(p.name for p in (REPO / "src" / "vecroute" / "graph").glob("firewall*.py"))
    result = {
        "machine": machine_info(),
        "cpu": cpu,
        "cpu_share": summary(share.shares),
        "packets": args.packets,
        "frames": nf,
        "repeat": args.repeat,
        "rows": rows,
        "incremental_10k": inc,
        "rebuild_10k_s": rebuild_s,
        "graph_integration": integrated or None,
        "fib": str(table) if table is not None else "small (512 /24s)",
    }
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
        return 0
    print(machine_line(result["machine"]))
    sh = result["cpu_share"]
    print(
        f"CPU share of the timed runs: median {sh['median']:.2f}, min {sh['min']:.2f}; "
        f"{args.repeat} repetitions; median [min .. max]"
    )
    print()
    print(f"FIB of the forwarding baseline: {result['fib']}")
    print(
        f"{'case':34} {'firewall kernel':>20} {'forwarding + fw-in':>20} "
        f"{'% of no-firewall':>17} {'% in + out':>11}"
    )
    print(
        f"{'':34} {'M classif./CPU-s':>20} {'Mpps per CPU-s':>20} {'(fw-in)':>17} "
        f"{'(2 passes)':>11}"
    )
    for r in rows:
        k = r["kernel_mcls_cpu"]
        f = r["fwd_mpps_cpu"]
        p = r["pct_of_no_fw"]
        p2 = r["pct_of_no_fw_in_out"]
        ks = "-" if k is None else f"{k['median']:.1f} [{k['min']:.1f}..{k['max']:.1f}]"
        fs = f"{f['median']:.2f} [{f['min']:.2f}..{f['max']:.2f}]"
        ps = f"{p['median']:.1f} [{p['min']:.1f}..{p['max']:.1f}]"
        print(f"{r['case']:34} {ks:>20} {fs:>20} {ps:>17} {p2['median']:>11.1f}")
    print()
    for r in rows[1:]:
        if r["build_s"] is not None:
            print(f"build {r['case']}: {r['build_s']:.2f} s  {r.get('stats', '')}")
    print(
        f"10K no-match rules: add one rule {inc['add_s']['median'] * 1e3:.1f} ms, delete one "
        f"{inc['delete_s']['median'] * 1e3:.1f} ms (median of 10), full rebuild "
        f"{rebuild_s:.2f} s"
    )
    print(
        "graph integration:",
        ", ".join(integrated)
        if integrated
        else "none yet (forwarding + firewall is the sum of the two measured costs)",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
