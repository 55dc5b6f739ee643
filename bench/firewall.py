"""Firewall benchmark: the forwarding rate with the firewall in the graph, and the compiled
classifier's rate on the ClassBench sets.

    python -m bench.firewall [--json] [--repeat R] [--frames N] [--cpu C] [--no-classbench]

The issue's benchmark (DragonFly's ipfw lesson: long lists belong in tables, not in rules):
in-memory forwarding rate on one core, 64-byte IPv4/UDP frames, the same prebuilt frames
and FIB in every case (``bench.forwarding``'s full Internet table, 4 interfaces, 64
neighbours), side by side in one run, interleaved (every case once per repetition, round
robin), ``PacketBatch.load`` + ``Graph.run`` in vectors of 256:

* no firewall (the graph compiled without the fw nodes);
* an empty rule set (only the default rule), 100 / 1K / 10K rules that the traffic does not
  match (source hosts, destination prefixes with ports, source/destination pairs, port
  ranges, in 10.0.0.0/8 and 172.16.0.0/12), one rule ``deny ip from table(bl) to any`` with
  100 / 1K / 10K / 1M entries the traffic does not match (the 1M table loaded from a file);
  all with ``default = "allow"``: every packet passes fw-in and fw-out and is forwarded;
* extra row: the 1M table rule written with ``in`` (``... to any in``, the ipfw idiom):
  the rule is no candidate at fw-out, so the output pass has only the default rule.

Each timed run is checked: every frame transmitted (interface tx counters), and with a
firewall, every frame through fw-in and fw-out (node counters) -- a broken firewall cannot
look fast. Rates are per CPU-second of the process (preemption removed) with wall-clock
alongside; "% of no-firewall" is computed per repetition against that repetition's
no-firewall run. An untimed pass per case gives the node clocks of fw-in / fw-out.

ClassBench (acl1, fw1, ipc1 10k, converted to rules, 100,000 keys each: half inside random
rules, half random): the classifier kernel as the nodes call it (vectors of 256 prebuilt
key rows, from compiled code), M classifications per CPU-second -- the target is about
classifications per core; and the same keys as 64-byte frames through the graph (a small
FIB with two /1 routes, ``default = "allow"``, the rules in both passes), against the same
frames without a firewall.

The same forwarding cases again in one compiled call each (the "one compiled call" table,
``rows_loop`` in the JSON): every frame
loaded and run through the graph in vectors of 256 inside one numba function, the loop the
live workers and ``vecroute replay`` run, so the per-batch Python of ``Graph.run`` (and
its unboxing of the firewall's ~22 arrays, ~2 us a call) is not in the cost. No rule here
keeps state, so ``Firewall.maintain()`` between batches has nothing to do (checked).

Also: compile time of the rule sets, incremental add/delete on the 10K no-match set, the
1M-line table file load.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import shutil
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
    verdict,
)
from bench.forwarding import (
    N_IF,
    N_NB,
    NOW_NS,
    Frames,
    Table,
    VectorPath,
    _be,
    _eth,
    _fold,
    _frames,
    _sum16,
    build_fib,
    load_table,
    make_frames4,
    run_frames,
    setup_fib,
)
from vecroute.firewall.classbench import gen_keys, load_classbench, to_rules
from vecroute.firewall.classify import fw_batch
from vecroute.firewall.config import parse_firewall_config
from vecroute.firewall.firewall import Firewall
from vecroute.firewall.keys import (
    K_DPORT,
    K_DST_LO,
    K_ICMPTYPE,
    K_PROTO,
    K_SPORT,
    K_SRC_LO,
    K_TCPFLAGS,
)

REPO = Path(__file__).resolve().parent.parent
CLASSBENCH = REPO.parent / "shared" / "data" / "classbench"
SEED = 20240611
VECTOR = 256
FRAME = 64
IFNAMES = [f"eth{i}" for i in range(N_IF)]
ME4 = [f"192.0.2.{64 * i + 62}" for i in range(N_IF)]  # bench.forwarding.setup_fib
ME6 = [f"2001:db8:{i + 1}::1" for i in range(N_IF)]
TARGETS = {"table_1m_pct": 90.0, "rules_10k_pct": 50.0, "classbench_mcls": 5.0}
TABLE_1M = "table of 1M no-match entries"
RULES_10K = "10K no-match rules"
TABLE_1M_IN = "table of 1M, rule with `in` (extra)"


@njit(_nrt=False)
def _drive(fw, keys, total, v, r, a):
    """Classify ``total`` keys in vectors of 256, cycling over the key pool (as the graph
    calls fw_batch once per vector, from compiled code)."""
    n = keys.shape[0]
    done = 0
    pos = 0
    while done < total:
        if pos + VECTOR > n:
            pos = 0
        fw_batch(fw, keys[pos : pos + VECTOR], VECTOR, 0, NOW_NS, v, r, a)
        pos += VECTOR
        done += VECTOR


# -- rule sets and traffic ----------------------------------------------------------------------


def nomatch_rules(n: int, rng: np.random.Generator) -> list[str]:
    """n rules over 10.0.0.0/8 and 172.16.0.0/12 (the traffic comes from 192.0.2.0/24 to
    the table's prefixes, none in 10/8 or 172.16/12): four shapes in turn."""
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


def forwarding_path(n: int, rng: np.random.Generator, table: Path | None):
    """The forwarding set-up of bench.forwarding (the full Internet table, 4 interfaces, 64
    neighbours; ``table=None``: a small FIB of 512 /24s in 198.18.0.0/15 instead) and its
    64-byte IPv4/UDP frames."""
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
    return VectorPath(fib, VECTOR), frames


def classbench_path() -> VectorPath:
    """A small FIB where every unicast destination is routed: 0.0.0.0/1 and 128.0.0.0/1."""
    fib, lb4, _ = setup_fib()
    fib.lpm[4].add_many(
        0,
        np.array([0, 1 << 31], np.uint32),
        np.array([1, 1], np.uint8),
        lb4[np.array([1, 2])],
    )
    return VectorPath(fib, VECTOR)


def frames_from_keys(keys: np.ndarray, rng: np.random.Generator) -> Frames:
    """64-byte IPv4 frames carrying the keys' addresses, protocol, ports, TCP flags and
    ICMP type (valid IPv4 header checksum; the L4 checksum is not set)."""
    n = keys.shape[0]
    rx = rng.integers(0, N_IF, n).astype(np.int32)
    f = _eth(n, FRAME, rx, 0x0800)
    proto = keys[:, K_PROTO]
    f[:, 14] = 0x45
    f[:, 16:18] = _be(np.full(n, FRAME - 14), ">u2", 2)
    f[:, 18:20] = _be(rng.integers(0, 1 << 16, n), ">u2", 2)
    f[:, 22] = 64
    f[:, 23] = proto
    f[:, 26:30] = _be(keys[:, K_SRC_LO] & 0xFFFFFFFF, ">u4", 4)
    f[:, 30:34] = _be(keys[:, K_DST_LO] & 0xFFFFFFFF, ">u4", 4)
    f[:, 24:26] = _be(~_fold(_sum16(f[:, 14:34])) & 0xFFFF, ">u2", 2)
    ports = (proto == 6) | (proto == 17)
    f[ports, 34:36] = _be(keys[ports, K_SPORT] & 0xFFFF, ">u2", 2)
    f[ports, 36:38] = _be(keys[ports, K_DPORT] & 0xFFFF, ">u2", 2)
    udp = proto == 17
    f[udp, 38:40] = _be(np.full(int(udp.sum()), FRAME - 34), ">u2", 2)
    tcp = proto == 6
    f[tcp, 46] = 0x50  # data offset 5
    f[tcp, 47] = keys[tcp, K_TCPFLAGS] & 0xFF
    icmp = proto == 1
    f[icmp, 34] = keys[icmp, K_ICMPTYPE] & 0xFF
    return _frames(f, rx)


def firewall(rules: list[str], default: str = "allow", tables: list | None = None) -> Firewall:
    raw: dict[str, Any] = {"default": default, "rules": rules}
    if tables:
        raw["tables"] = tables
    return Firewall(parse_firewall_config(raw, "bench"), IFNAMES, ME4, ME6, vector_size=VECTOR)


def table_rule(entries: int, rng: np.random.Generator) -> Firewall:
    """The issue's case: ``deny ip from table(bl) to any`` with ``entries`` no-match entries
    in the table (loaded from a file, as an operator would)."""
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "bl.txt"
        p.write_text(table_text(entries, rng))
        fw = firewall(
            ["100 deny ip from table(bl) to any"], tables=[{"name": "bl", "type": "addr"}]
        )
        fw.tables.add_file("bl", p)
    return fw


# -- the integrated path ------------------------------------------------------------------------


class FwdCase:
    """One forwarding case: a firewall (or None) attached to the shared graph. ``loop``:
    the same case's runs in one compiled call (a FwdCase of its own, for ``_rate_row``)."""

    def __init__(self, name: str, fw: Firewall | None, build_s: float | None,
                 loop: bool = True) -> None:
        self.name = name
        self.fw = fw
        self.build_s = build_s
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.profile: dict[str, float] = {}
        self.loop = FwdCase(name, fw, None, loop=False) if loop else None


def _counts(path: VectorPath) -> tuple[int, int, int]:
    """(frames transmitted, packets through fw-in, through fw-out) so far."""
    from vecroute.graph.state import IFS_TX_PKTS, NS_PACKETS
    from vecroute.packet.node_ids import NODE_NAMES

    st = path.state
    ns = st.node_stats
    return (
        int(st.if_stats[:, IFS_TX_PKTS].sum()),
        int(ns[NODE_NAMES.index("fw-in"), NS_PACKETS]),
        int(ns[NODE_NAMES.index("fw-out"), NS_PACKETS]),
    )


def run_case(path: VectorPath, c: FwdCase, fr: Frames, passes: int = 1) -> tuple[int, int, int]:
    """Forward every frame ``passes`` times with the case's firewall attached (timed);
    returns (frames transmitted, packets through fw-in, through fw-out) of the run."""
    g = path.graph
    g.attach_firewall(c.fw)
    tx0, in0, out0 = _counts(path)
    b = path.batch
    load, run = b.load, g.run
    data, off, ln, ts, rx = fr.data, fr.off, fr.length, fr.ts, fr.rx
    total = fr.n
    w0, c0 = time.perf_counter(), time.process_time()
    for _ in range(passes):
        pos = 0
        while pos < total:
            pos += load(data, off, ln, ts, rx, pos, total - pos)
            run(b, NOW_NS)
    c.wall.append(time.perf_counter() - w0)
    c.cpu.append(time.process_time() - c0)
    tx1, in1, out1 = _counts(path)
    return tx1 - tx0, in1 - in0, out1 - out0


def run_case_loop(path: VectorPath, c: FwdCase, fr: Frames) -> tuple[int, int, int]:
    """run_case in one compiled call (timed into ``c.loop``); the same return."""
    from vecroute.firewall.states import FC_COUNT

    g, b = path.graph, path.batch
    g.attach_firewall(c.fw)
    g.sync_firewall()
    tx0, in0, out0 = _counts(path)
    loop = g.loop_args()
    w0, c0 = time.perf_counter(), time.process_time()
    run_frames(fr.data, fr.off, fr.length, fr.ts, fr.rx, fr.n, b.vector_size, b.buf, b.meta,
               b.ts, b.nalloc, NOW_NS, *loop)
    c.loop.wall.append(time.perf_counter() - w0)
    c.loop.cpu.append(time.process_time() - c0)
    if c.fw is not None and c.fw.ctl[FC_COUNT] != 0:
        raise RuntimeError(f"{c.name}: states were created; the loop skips maintain()")
    tx1, in1, out1 = _counts(path)
    return tx1 - tx0, in1 - in0, out1 - out0


def check_forwarded(c: FwdCase, got: tuple[int, int, int], total: int) -> None:
    """Every frame transmitted; with a firewall every frame through fw-in and fw-out, and
    without one, none (a broken firewall cannot look fast)."""
    sent, fin, fout = got
    want = (total, total, total) if c.fw is not None else (total, 0, 0)
    if got != want:
        raise RuntimeError(
            f"{c.name}: {sent} of {total} frames transmitted, fw-in saw {fin}, fw-out {fout}"
            f" (expected {want})"
        )


def node_profile(path: VectorPath, c: FwdCase, fr: Frames, n: int) -> dict[str, float]:
    """ns per input packet of fw-in, fw-out and all nodes together: the median over the
    batches of one untimed pass over the first n frames (robust to preemption)."""
    from vecroute.graph.cycles import cycles_per_second
    from vecroute.graph.state import NS_CLOCKS
    from vecroute.packet.node_ids import NODE_NAMES

    g, b = path.graph, path.batch
    g.attach_firewall(c.fw)
    ns = path.state.node_stats
    per = []
    pos, total = 0, min(n, fr.n)
    while pos < total:
        c0 = ns[:, NS_CLOCKS].copy()
        k = b.load(fr.data, fr.off, fr.length, fr.ts, fr.rx, pos, total - pos)
        g.run(b, NOW_NS)
        pos += k
        per.append((ns[:, NS_CLOCKS] - c0) / k)
    med = np.median(np.array(per), axis=0) * 1e9 / cycles_per_second()
    tot = np.median(np.array(per).sum(axis=1)) * 1e9 / cycles_per_second()
    return {
        "fw-in": float(med[NODE_NAMES.index("fw-in")]),
        "fw-out": float(med[NODE_NAMES.index("fw-out")]),
        "nodes": float(tot),
    }


def build_fwd_cases(rng: np.random.Generator, tmp: Path) -> tuple[list[FwdCase], dict]:
    cases = [FwdCase("no firewall", None, None)]
    loads: dict[str, float] = {}

    def timed_fw(name, make):
        t0 = time.perf_counter()
        fw = make()
        cases.append(FwdCase(name, fw, time.perf_counter() - t0))
        eprint(f"  {name}: built in {cases[-1].build_s:.2f} s")

    timed_fw("empty rule set", lambda: firewall([]))
    for n, label in ((100, "100"), (1000, "1K"), (10000, "10K")):
        rules = nomatch_rules(n, rng)
        timed_fw(f"{label} no-match rules", lambda r=rules: firewall(r))
    tables = [{"name": "bl", "type": "addr"}]
    for n, label in ((100, "100"), (1000, "1K"), (10000, "10K"), (1000000, "1M")):
        p = tmp / f"bl{n}.txt"
        p.write_text(table_text(n, rng))

        def make(p=p, n=n, rule="100 deny ip from table(bl) to any"):
            fw = firewall([rule], tables=tables)
            t0 = time.perf_counter()
            fw.tables.add_file("bl", p)
            loads.setdefault(str(n), time.perf_counter() - t0)  # first load of each size
            return fw

        timed_fw(f"table of {label} no-match entries", make)
    timed_fw(
        TABLE_1M_IN,
        lambda: make(tmp / "bl1000000.txt", 1000000, "100 deny ip from table(bl) to any in"),
    )
    return cases, loads


# -- ClassBench ---------------------------------------------------------------------------------


class KernelCase:
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
        fw = self.fw.dataplane()
        w0, c0 = time.perf_counter(), time.process_time()
        _drive(fw, self.keys, total, v, r, a)
        self.wall.append(time.perf_counter() - w0)
        self.cpu.append(time.process_time() - c0)


class CbGraph:
    """One ClassBench set's keys as frames through the graph, with and without its rules."""

    def __init__(self, name: str, frames: Frames, fw: Firewall) -> None:
        self.name = name
        self.frames = frames
        self.base = FwdCase(f"{name} traffic, no firewall", None, None)
        self.with_fw = FwdCase(f"{name} traffic + rules", fw, None)
        self.tx: int | None = None


def build_classbench(rng: np.random.Generator) -> tuple[list[KernelCase], list[CbGraph]]:
    kernel, graph = [], []
    if not CLASSBENCH.is_dir():
        eprint(f"  no ClassBench sets under {CLASSBENCH}")
        return kernel, graph
    for name in ("acl1_10k", "fw1_10k", "ipc1_10k"):
        cb = load_classbench(CLASSBENCH / name)
        keys = gen_keys(cb, 100_000, seed=SEED)
        rules = to_rules(cb)
        t0 = time.perf_counter()
        fw = firewall(rules, "deny")
        kernel.append(KernelCase(f"ClassBench {name}", fw, keys, time.perf_counter() - t0))
        eprint(f"  ClassBench {name}: built in {kernel[-1].build_s:.2f} s")
        graph.append(CbGraph(name, frames_from_keys(keys, rng), firewall(rules, "allow")))
    return kernel, graph


# -- incremental updates ------------------------------------------------------------------------


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


def _pct(case: FwdCase, base: FwdCase) -> list[float]:
    """% of the no-firewall rate, per repetition (per CPU-second rates)."""
    return [100.0 * b / c for c, b in zip(case.cpu, base.cpu, strict=True)]


def _rate_row(c: FwdCase, base: FwdCase, n: int, target: float | None) -> dict[str, Any]:
    pct = summary(_pct(c, base))
    return {
        "case": c.name,
        "mpps_cpu": summary([n / x / 1e6 for x in c.cpu]),
        "mpps_wall": summary([n / x / 1e6 for x in c.wall]),
        "pct_of_no_fw": pct,
        "target_pct": target,
        "met": None if target is None else pct["median"] >= target,
        "node_ns": c.profile,
        "build_s": c.build_s,
        "stats": None if c.fw is None else c.fw.compiled.stats,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--frames", type=int, default=1 << 20, help="frames per forwarding run")
    ap.add_argument("--packets", type=int, default=1 << 20, help="keys per ClassBench kernel run")
    ap.add_argument("--cpu", type=int, default=None)
    ap.add_argument("--no-classbench", action="store_true")
    ap.add_argument(
        "--table",
        type=Path,
        default=DEFAULT_TABLE,
        help="the FIB of the forwarding cases (bench.forwarding's full table)",
    )
    ap.add_argument(
        "--small-fib",
        action="store_true",
        help="forward over 512 /24s instead of the full table (a faster baseline)",
    )
    args = ap.parse_args(argv)
    from vecroute.warmup import clear_stale_cache

    clear_stale_cache((Path(__file__).parent,))  # run_frames embeds the graph's kernels
    cpu = pin_to_one_cpu(args.cpu)
    rng = np.random.default_rng(SEED)
    eprint(f"pinned to CPU {cpu}; {machine_line()}")
    eprint("forwarding set-up")
    table = None if args.small_fib or not args.table.exists() else args.table
    path, frames = forwarding_path(args.frames, rng, table)
    nf = frames.n
    eprint("rule sets")
    tmp = Path(tempfile.mkdtemp(prefix="fwbench"))
    cases, loads = build_fwd_cases(rng, tmp)
    shutil.rmtree(tmp, ignore_errors=True)  # the tables are loaded
    kernel: list[KernelCase] = []
    cbg: list[CbGraph] = []
    if not args.no_classbench:
        kernel, cbg = build_classbench(rng)
    cbpath = classbench_path() if cbg else None

    eprint("warm-up and checks")
    # an unchecked first pass: frames that leave by the interface they came in on also
    # trigger a few ICMP redirects (rate-limited, and the clock stands still: only then)
    run_case(path, cases[0], frames)
    for c in cases:  # compile / warm, and check every frame is forwarded
        check_forwarded(c, run_case(path, c, frames), nf)
        check_forwarded(c, run_case_loop(path, c, frames), nf)
    for k in kernel:
        k.run(VECTOR * 4)
    cb_passes = {}
    for g in cbg:
        n = g.frames.n
        cb_passes[g.name] = max(1, nf // n)
        g.tx = run_case(cbpath, g.base, g.frames)[0]
        got = run_case(cbpath, g.with_fw, g.frames)
        if g.tx < n // 2 or got[0] != g.tx or got[2] != g.tx or got[1] < g.tx:
            raise RuntimeError(f"{g.name}: {got} (sent, fw-in, fw-out), {g.tx} without rules")
    for c in [*cases, *(c.loop for c in cases), *kernel,
              *(x for g in cbg for x in (g.base, g.with_fw))]:
        c.wall.clear()
        c.cpu.clear()

    share = CpuShare()
    eprint("timing")
    for rep in range(args.repeat):
        for c in cases:
            with share:
                got = run_case(path, c, frames)
            check_forwarded(c, got, nf)
            with share:
                got = run_case_loop(path, c, frames)
            check_forwarded(c, got, nf)
        for k in kernel:
            with share:
                k.run(args.packets)
        for g in cbg:
            p = cb_passes[g.name]
            for c in (g.base, g.with_fw):
                with share:
                    got = run_case(cbpath, c, g.frames, p)
                if got[0] != g.tx * p:
                    raise RuntimeError(f"{c.name}: {got[0]} sent, expected {g.tx * p}")
        eprint(f"  repetition {rep + 1}/{args.repeat}")
    eprint("node profiles (untimed)")
    for c in cases:
        c.profile = node_profile(path, c, frames, 1 << 16)
    for g in cbg:
        for c in (g.base, g.with_fw):
            c.profile = node_profile(cbpath, c, g.frames, 1 << 16)
    path.graph.attach_firewall(None)

    big = next(c for c in cases if c.name == RULES_10K)
    assert big.fw is not None
    inc = incremental(big.fw, rng)
    t0 = time.perf_counter()
    big.fw.rebuild()
    rebuild_s = time.perf_counter() - t0

    base = cases[0]
    targets = {RULES_10K: TARGETS["rules_10k_pct"], TABLE_1M: TARGETS["table_1m_pct"]}
    rows = [_rate_row(c, base, nf, targets.get(c.name)) for c in cases]
    for c in cases:
        c.loop.profile = c.profile
    rows_loop = [_rate_row(c.loop, base.loop, nf, targets.get(c.name)) for c in cases]
    kernel_rows = []
    for k in kernel:
        mc = summary([args.packets / x / 1e6 for x in k.cpu])
        kernel_rows.append(
            {
                "case": k.name,
                "mcls_cpu": mc,
                "mcls_wall": summary([args.packets / x / 1e6 for x in k.wall]),
                "target_mcls": TARGETS["classbench_mcls"],
                "met": mc["median"] >= TARGETS["classbench_mcls"],
                "build_s": k.build_s,
                "stats": k.fw.compiled.stats,
            }
        )
    cb_rows = []
    for g in cbg:
        n = g.frames.n * cb_passes[g.name]
        r0 = _rate_row(g.base, g.base, n, None)
        r1 = _rate_row(g.with_fw, g.base, n, None)
        r0["forwarded"] = r1["forwarded"] = g.tx / g.frames.n
        cb_rows += [r0, r1]
    result = {
        "machine": machine_info(),
        "cpu": cpu,
        "cpu_share": summary(share.shares),
        "frames": nf,
        "packets": args.packets,
        "repeat": args.repeat,
        "fib": str(table) if table is not None else "small (512 /24s)",
        "rows": rows,
        "rows_loop": rows_loop,
        "classbench_kernel": kernel_rows,
        "classbench_graph": cb_rows,
        "table_file_load_s": loads,
        "incremental_10k": inc,
        "rebuild_10k_s": rebuild_s,
        "targets": TARGETS,
    }
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
        return 0
    print_text(result)
    return 0


def _s(x: dict[str, Any], d: int = 2) -> str:
    return f"{x['median']:.{d}f} [{x['min']:.{d}f}..{x['max']:.{d}f}]"


def _print_rows(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        t = r["target_pct"]
        ts = "" if t is None else f">= {t:.0f} %"
        vs = "" if r["met"] is None else verdict(r["met"])
        if r["case"] == TABLE_1M_IN:
            ok = r["pct_of_no_fw"]["median"] >= TARGETS["table_1m_pct"]
            ts, vs = f"(>= {TARGETS['table_1m_pct']:.0f} %)", f"({verdict(ok)})"
        nd = r["node_ns"]
        print(
            f"{r['case']:38} {_s(r['mpps_cpu']):>20} {r['mpps_wall']['median']:>8.2f} "
            f"{_s(r['pct_of_no_fw'], 1):>19} {nd.get('fw-in', 0):>8.1f} "
            f"{nd.get('fw-out', 0):>9.1f} {ts:>8}  {vs}"
        )


def print_text(R: dict[str, Any]) -> None:
    print(machine_line(R["machine"]))
    sh = R["cpu_share"]
    print(
        f"CPU share of the timed runs: median {sh['median']:.2f}, min {sh['min']:.2f}; "
        f"{R['repeat']} repetitions, interleaved; median [min .. max]"
    )
    print(
        f"forwarding: {R['frames']} 64-byte IPv4/UDP frames per run, FIB {R['fib']}, "
        "PacketBatch.load + Graph.run, vector 256, default allow, all frames forwarded"
    )
    print()
    hdr = (
        f"{'case':38} {'Mpps / CPU-s':>20} {'Mpps wall':>8} {'% of no-fw':>19} "
        f"{'fw-in ns':>8} {'fw-out ns':>9} {'target':>8}  verdict"
    )
    for title, key in (("Graph.run per vector", "rows"), ("one compiled call", "rows_loop")):
        print(title)
        print(hdr)
        _print_rows(R[key])
        print()
    if R["classbench_kernel"]:
        print()
        print(
            f"{'ClassBench 10k, classifier kernel':38} {'M classif. / CPU-s':>20} "
            f"{'wall':>8} {'target':>19}  verdict"
        )
        for r in R["classbench_kernel"]:
            print(
                f"{r['case']:38} {_s(r['mcls_cpu'], 1):>20} {r['mcls_wall']['median']:>8.1f} "
                f"{'>= ' + str(r['target_mcls']) + ' M/s':>19}  {verdict(r['met'])}"
            )
    if R["classbench_graph"]:
        print()
        print(
            "ClassBench keys as 64-byte frames through the graph (FIB 0/1 + 128/1, rules in "
            "both passes, default allow)"
        )
        for r in R["classbench_graph"]:
            nd = r["node_ns"]
            print(
                f"{r['case']:38} {_s(r['mpps_cpu']):>20} {r['mpps_wall']['median']:>8.2f} "
                f"{_s(r['pct_of_no_fw'], 1):>19} {nd.get('fw-in', 0):>8.1f} "
                f"{nd.get('fw-out', 0):>9.1f}  fwd {100 * r['forwarded']:.1f} %"
            )
    print()
    print("node clocks (untimed pass, median over batches), ns per packet, all nodes:")
    print("  " + ", ".join(f"{r['case']} {r['node_ns']['nodes']:.0f}" for r in R["rows"]))
    print()
    for r in R["rows"][1:] + R["classbench_kernel"]:
        if r["build_s"] is not None:
            print(f"build {r['case']}: {r['build_s']:.2f} s  {r.get('stats') or ''}")
    for n, s in R["table_file_load_s"].items():
        print(f"table file of {int(n):,} lines: loaded in {s:.2f} s")
    inc = R["incremental_10k"]
    print(
        f"10K no-match rules: add one rule {inc['add_s']['median'] * 1e3:.1f} ms, delete one "
        f"{inc['delete_s']['median'] * 1e3:.1f} ms (median of 10), full rebuild "
        f"{R['rebuild_10k_s']:.2f} s"
    )


if __name__ == "__main__":
    raise SystemExit(main())
