"""Forwarding benchmark: the full Internet table, 2**20 IPv4 + 2**20 IPv6 frames, one core.

    python -m bench.forwarding [--json] [--packets N] [--repeat R] [--table PATH]

What it measures (each repeated R times, interleaved, median [min .. max]):

* FIB build: parsing the table file, the Fib set-up (4 interfaces, 64 IPv4 + 64 IPv6
  neighbours, their adjacencies and load-balances), the bulk load of each family with
  ``Lpm.add_many`` (values: 64 load-balance indices, one per neighbour adjacency), and the
  per-route control-plane install (``Fib.add_route``) on a sample; memory as trie array
  bytes and as process RSS growth.
* The whole forwarding path: ``PacketBatch.load`` from a pre-built frame array, then
  ``Graph.run`` (ethernet-input, ip4/ip6-input incl. checksum, lookup, rewrite with TTL and
  incremental checksum, interface-output), batches of 256; plus the per-node ns/packet of
  ``runtime_view`` and the batch-size effect (64, 256, 1024) for IPv4.
* The bare lookup: ``lpm4_lookup_batch`` / ``lpm6_lookup_batch`` on the same destinations.
* A straightforward per-packet Python forwarder (struct parsing, Python checksum, pytricia
  lookup, RFC 1624 TTL update, MAC rewrite from a dict) on a subset, and the ratio.
* Where the time goes: the cost of one ``Graph.run`` on an empty batch (call and dispatch
  overhead), the cost of ``PacketBatch.load`` alone, and the sum of the node clocks.

Frames: IPv4 64 bytes (Ethernet 14 + IPv4 20 + UDP 8 + 22 payload, no FCS), IPv6 78 bytes
(14 + 40 + 8 + 16); destinations are random addresses inside random table prefixes.
"""

from __future__ import annotations

import argparse
import gc
import ipaddress
import json
import os
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit

from bench.common import (
    DEFAULT_TABLE,
    REPO_ROOT,
    CpuShare,
    eprint,
    fmt_summary,
    machine_info,
    machine_line,
    pin_to_one_cpu,
    rss_bytes,
    steal_ticks,
    summary,
    verdict,
)
from vecroute.graph.dataplane import fib_state
from vecroute.graph.dispatch import run_nodes
from vecroute.graph.fast_path import fused_scratch
from vecroute.packet.batch import load_frames

N_IF = 4
N_NB = 64  # neighbours per family, N_NB // N_IF per interface
FRAME4 = 64
FRAME6 = 78
SEED = 20240601
NOW_NS = 1_700_000_000_000_000_000

TARGETS = {
    "ip4_mpps": 20.0,
    "ip6_mpps": 10.0,
    "ip4_build_s": 3.0,
    "tables_mb": 300.0,
    "speedup_vs_python": 50.0,
}


# ---------------------------------------------------------------------------------------------
# FIB
# ---------------------------------------------------------------------------------------------


def if_mac(i: int) -> bytes:
    return bytes([0x02, 0, 0, 0, 0, i + 1])


def nb_mac(k: int) -> bytes:
    return bytes([0x02, 0, 0, 0x01, k // 256, k % 256])


def nb_ip4(k: int) -> ipaddress.IPv4Address:
    """Neighbour k sits on interface k % N_IF, in 192.0.2.(64 * ifx)/26."""
    ifx = k % N_IF
    return ipaddress.IPv4Address(f"192.0.2.{64 * ifx + 1 + k // N_IF}")


def nb_ip6(k: int) -> ipaddress.IPv6Address:
    ifx = k % N_IF
    return ipaddress.IPv6Address(f"2001:db8:{ifx + 1}::{0x100 + k // N_IF:x}")


def host_ip4(ifx: int) -> str:
    """The traffic source on interface ifx (on-link, not a neighbour)."""
    return f"192.0.2.{64 * ifx + 50}"


def host_ip6(ifx: int) -> str:
    return f"2001:db8:{ifx + 1}::50"


@dataclass
class Table:
    a4: np.ndarray
    l4: np.ndarray
    h6: np.ndarray
    o6: np.ndarray
    l6: np.ndarray
    nb4: np.ndarray  # neighbour index per IPv4 prefix (0..N_NB-1)
    nb6: np.ndarray


def load_table(path: Path) -> tuple[float, Table]:
    from vecroute.fib.lpm import load_prefix_file

    t0 = time.perf_counter()
    a4, l4, h6, o6, l6 = load_prefix_file(path)
    dt = time.perf_counter() - t0
    rng = np.random.default_rng(SEED)
    nb4 = rng.integers(0, N_NB, a4.shape[0]).astype(np.int64)
    nb6 = rng.integers(0, N_NB, h6.shape[0]).astype(np.int64)
    return dt, Table(a4, l4, h6, o6, l6, nb4, nb6)


def setup_fib():
    """Fib with N_IF interfaces (IPv4 + IPv6) and N_NB neighbours per family.

    Returns (fib, lb4, lb6): lbX[k] is the load-balance index of neighbour k's adjacency.
    """
    from vecroute.fib.adjacency import AdjKey
    from vecroute.fib.fib import Fib, Interface
    from vecroute.fib.layout import ADJ_INCOMPLETE

    fib = Fib()
    for i in range(N_IF):
        addrs = [
            ipaddress.ip_interface(f"192.0.2.{64 * i + 62}/26"),
            ipaddress.ip_interface(f"2001:db8:{i + 1}::1/64"),
        ]
        fib.add_interface(Interface(f"eth{i}", if_mac(i), 1500, 0, addrs))
    lb4 = np.empty(N_NB, np.int64)
    lb6 = np.empty(N_NB, np.int64)
    for k in range(N_NB):
        ifx = k % N_IF
        for fam, ip, lbs in ((4, nb_ip4(k), lb4), (6, nb_ip6(k), lb6)):
            fib.add_neighbor(ip, nb_mac(k), f"eth{ifx}")
            adj = fib.adjs.index[AdjKey(ADJ_INCOMPLETE, ifx, fam, int(ip))]
            lbs[k] = fib.lbs.get([adj])
    return fib, lb4, lb6


def build_fib(tab: Table) -> tuple[Any, np.ndarray, np.ndarray, dict[str, Any]]:
    """Build the whole FIB once, timing each stage; returns (fib, lb4, lb6, measures).

    RSS deltas are only meaningful in a fresh process (see ``build_probe``): in a process
    that already freed big arrays, glibc hands the same resident pages out again.
    """
    gc.collect()
    m: dict[str, Any] = {}
    rss0 = rss_bytes()
    t0 = time.perf_counter()
    fib, lb4, lb6 = setup_fib()
    m["setup_s"] = time.perf_counter() - t0
    r1 = rss_bytes()
    t0 = time.perf_counter()
    fib.lpm[4].add_many(0, tab.a4, tab.l4, lb4[tab.nb4])
    m["ip4_load_s"] = time.perf_counter() - t0
    r2 = rss_bytes()
    t0 = time.perf_counter()
    fib.lpm[6].add_many(0, (tab.h6, tab.o6), tab.l6, lb6[tab.nb6])
    m["ip6_load_s"] = time.perf_counter() - t0
    r3 = rss_bytes()
    m["ip4_rss_mb"] = (r2 - r1) / 1e6
    m["ip6_rss_mb"] = (r3 - r2) / 1e6
    m["total_rss_mb"] = (r3 - rss0) / 1e6
    m["ip4_nbytes_mb"] = fib.lpm[4].nbytes / 1e6
    m["ip6_nbytes_mb"] = fib.lpm[6].nbytes / 1e6
    return fib, lb4, lb6, m


def build_probe(table: Path) -> dict[str, Any]:
    """One FIB build in this (fresh) process, after warming the compiled kernels on a
    small table so that no JIT time is counted: parse time, stage times, RSS growth."""
    t0 = time.perf_counter()
    _, tab = load_table(table)  # may compile the parser
    small = 8192
    warm = Table(
        tab.a4[:small],
        tab.l4[:small],
        tab.h6[:small],
        tab.o6[:small],
        tab.l6[:small],
        tab.nb4[:small],
        tab.nb6[:small],
    )
    build_fib(warm)  # compiles (or loads from cache) add_many and friends
    m: dict[str, Any] = {"warm_s": time.perf_counter() - t0}
    m["parse_s"], tab = load_table(table)
    gc.collect()
    m["rss_before_mb"] = rss_bytes() / 1e6
    fib, _, _, b = build_fib(tab)
    m.update(b)
    m["rss_after_mb"] = rss_bytes() / 1e6
    del fib
    return m


def build_in_subprocess(table: Path, cpu: int | None) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.forwarding", "--build-probe", "--table", str(table)]
    if cpu is not None:
        cmd += ["--cpu", str(cpu)]
    out = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"build probe failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout)


def time_add_route(tab: Table, n: int, rng: np.random.Generator) -> float:
    """Seconds per route of the control-plane install (Fib.add_route) on an IPv4 sample."""
    fib, _, _ = setup_fib()
    idx = rng.choice(tab.a4.shape[0], size=min(n, tab.a4.shape[0]), replace=False)
    prefixes = [ipaddress.IPv4Network((int(tab.a4[i]), int(tab.l4[i]))) for i in idx]
    vias = [[nb_ip4(int(tab.nb4[i]))] for i in idx]
    t0 = time.perf_counter()
    for p, v in zip(prefixes, vias, strict=True):
        fib.add_route(p, v)
    return (time.perf_counter() - t0) / len(prefixes)


# ---------------------------------------------------------------------------------------------
# traffic
# ---------------------------------------------------------------------------------------------


def _fold(s: np.ndarray) -> np.ndarray:
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return s


def _sum16(block: np.ndarray) -> np.ndarray:
    """Per-row sum of big-endian 16-bit words of a (n, even) uint8 array, as uint64."""
    return np.ascontiguousarray(block).view(">u2").astype(np.uint64).sum(axis=1)


def _be(x: np.ndarray, dtype: str, width: int) -> np.ndarray:
    return np.ascontiguousarray(x.astype(dtype)).view(np.uint8).reshape(-1, width)


@dataclass
class Frames:
    data: np.ndarray  # uint8, all frames back to back
    off: np.ndarray  # int64
    length: np.ndarray  # int32
    ts: np.ndarray  # int64
    rx: np.ndarray  # int32
    dst4: np.ndarray | None = None  # uint32 destinations (bare lookup input)
    dst6: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def n(self) -> int:
        return int(self.off.shape[0])

    def as_python(self, count: int) -> list[tuple[int, bytes]]:
        """(rx interface, frame bytes) pairs, what a socket-based forwarder receives."""
        out = []
        for i in range(min(count, self.n)):
            o = int(self.off[i])
            out.append((int(self.rx[i]), self.data[o : o + int(self.length[i])].tobytes()))
        return out


def _eth(n: int, width: int, rx: np.ndarray, ethertype: int) -> np.ndarray:
    macs = np.array([list(if_mac(i)) for i in range(N_IF)], np.uint8)
    f = np.zeros((n, width), np.uint8)
    f[:, 0:6] = macs[rx]
    f[:, 6:12] = np.array([0x02, 0, 0, 0x02, 0, 0], np.uint8)
    f[:, 11] = rx
    f[:, 12] = ethertype >> 8
    f[:, 13] = ethertype & 0xFF
    return f


def _frames(f: np.ndarray, rx: np.ndarray) -> Frames:
    n, width = f.shape
    return Frames(
        data=f.reshape(-1),
        off=np.arange(n, dtype=np.int64) * width,
        length=np.full(n, width, np.int32),
        ts=NOW_NS - 10**9 + np.arange(n, dtype=np.int64) * 100,
        rx=rx.astype(np.int32),
    )


def make_frames4(n: int, tab: Table, rng: np.random.Generator) -> Frames:
    """64-byte IPv4/UDP frames to random addresses inside random table prefixes."""
    idx = rng.integers(0, tab.a4.shape[0], n)
    plen = tab.l4[idx].astype(np.uint64)
    host = rng.integers(0, 1 << 32, n, dtype=np.uint64)
    mask = (np.uint64(1) << (np.uint64(32) - plen)) - np.uint64(1)
    dst = (tab.a4[idx].astype(np.uint64) | (host & mask)).astype(np.uint32)
    rx = rng.integers(0, N_IF, n).astype(np.int32)
    src = np.array([int(ipaddress.IPv4Address(host_ip4(i))) for i in range(N_IF)], np.uint32)[rx]
    f = _eth(n, FRAME4, rx, 0x0800)
    ip = slice(14, 34)
    f[:, 14] = 0x45
    f[:, 16:18] = _be(np.full(n, FRAME4 - 14), ">u2", 2)
    f[:, 18:20] = _be(rng.integers(0, 1 << 16, n), ">u2", 2)  # id
    f[:, 22] = 64  # ttl
    f[:, 23] = 17  # udp
    f[:, 26:30] = _be(src, ">u4", 4)
    f[:, 30:34] = _be(dst, ">u4", 4)
    f[:, 24:26] = _be(~_fold(_sum16(f[:, ip])) & 0xFFFF, ">u2", 2)
    # UDP with a real checksum
    ulen = FRAME4 - 34
    f[:, 34:36] = _be(rng.integers(1024, 1 << 16, n), ">u2", 2)
    f[:, 36:38] = _be(np.full(n, 53), ">u2", 2)
    f[:, 38:40] = _be(np.full(n, ulen), ">u2", 2)
    f[:, 42:] = rng.integers(0, 256, (n, FRAME4 - 42), dtype=np.uint8)
    s = _sum16(f[:, 26:34]) + np.uint64(17 + ulen) + _sum16(f[:, 34:])
    c = ~_fold(s) & 0xFFFF
    c[c == 0] = 0xFFFF
    f[:, 40:42] = _be(c, ">u2", 2)
    fr = _frames(f, rx)
    fr.dst4 = dst
    return fr


def make_frames6(n: int, tab: Table, rng: np.random.Generator) -> Frames:
    """78-byte IPv6/UDP frames to random addresses inside random table prefixes."""
    ones = np.uint64(0xFFFFFFFFFFFFFFFF)
    idx = rng.integers(0, tab.h6.shape[0], n)
    plen = tab.l6[idx].astype(np.int64)
    rh = rng.integers(0, 1 << 64, n, dtype=np.uint64)
    rl = rng.integers(0, 1 << 64, n, dtype=np.uint64)
    sh_hi = np.clip(64 - plen, 0, 63).astype(np.uint64)
    m_hi = np.where(
        plen == 0, ones, np.where(plen >= 64, np.uint64(0), (np.uint64(1) << sh_hi) - np.uint64(1))
    )
    sh_lo = np.clip(128 - plen, 0, 63).astype(np.uint64)
    m_lo = np.where(
        plen <= 64,
        ones,
        np.where(plen >= 128, np.uint64(0), (np.uint64(1) << sh_lo) - np.uint64(1)),
    )
    hi = tab.h6[idx] | (rh & m_hi.astype(np.uint64))
    lo = tab.o6[idx] | (rl & m_lo.astype(np.uint64))
    rx = rng.integers(0, N_IF, n).astype(np.int32)
    srcs = np.array(
        [list(ipaddress.IPv6Address(host_ip6(i)).packed) for i in range(N_IF)], np.uint8
    )
    f = _eth(n, FRAME6, rx, 0x86DD)
    plen_udp = FRAME6 - 54
    f[:, 14] = 0x60
    f[:, 18:20] = _be(np.full(n, plen_udp), ">u2", 2)
    f[:, 20] = 17
    f[:, 21] = 64
    f[:, 22:38] = srcs[rx]
    f[:, 38:46] = _be(hi, ">u8", 8)
    f[:, 46:54] = _be(lo, ">u8", 8)
    f[:, 54:56] = _be(rng.integers(1024, 1 << 16, n), ">u2", 2)
    f[:, 56:58] = _be(np.full(n, 53), ">u2", 2)
    f[:, 58:60] = _be(np.full(n, plen_udp), ">u2", 2)
    f[:, 62:] = rng.integers(0, 256, (n, FRAME6 - 62), dtype=np.uint8)
    s = _sum16(f[:, 22:54]) + np.uint64(17 + plen_udp) + _sum16(f[:, 54:])
    c = ~_fold(s) & 0xFFFF
    c[c == 0] = 0xFFFF
    f[:, 60:62] = _be(c, ">u2", 2)
    fr = _frames(f, rx)
    fr.dst6 = (hi, lo)
    return fr


# ---------------------------------------------------------------------------------------------
# vecroute: the whole path, the bare lookup, the overheads
# ---------------------------------------------------------------------------------------------


@njit(cache=True)
def run_frames(data, off, length, ts_ns, rx_if, total, vs, buf, meta, ts, nalloc, now,
               frames, frame_n, work, txl, txn, dp, fw, fwk, fwv) -> int:
    """Every frame through the graph in vectors of ``vs``, in one compiled call: the loop
    the live workers (io/worker_loop.forward_loop) and replay run, without their I/O.
    ``fw, fwk, fwv``: the firewall as ``Graph.loop_args`` gives it, or three Nones.
    Returns the packets transmitted."""
    pos = 0
    sent = 0
    sc, fl, acc = fused_scratch(vs)  # c <= vs
    while pos < total:
        c = min(vs, total - pos)
        load_frames(buf, meta, ts, data, off, length, ts_ns, rx_if, pos, c)
        nalloc[0] = c
        run_nodes(c, now, meta, buf, nalloc, frames, frame_n, work, txl, txn, dp, fw, fwk, fwv,
                  sc, fl, acc)
        sent += txn[0]
        pos += c
    return sent


class VectorPath:
    """One PacketBatch + Graph of a given vector size over a forwarding state; ``fused``
    False walks every packet through the nodes (graph/fast_path.py off)."""

    def __init__(self, fib, vector_size: int, fused: bool = True) -> None:
        from vecroute.graph.dispatch import Graph
        from vecroute.graph.state import OPT_NO_FUSED
        from vecroute.packet.batch import PacketBatch

        self.state = fib_state(fib)
        self.state.opts[OPT_NO_FUSED] = 0 if fused else 1
        self.batch = PacketBatch(vector_size)
        self.graph = Graph(self.state, self.batch)

    def run_compiled(self, fr: Frames) -> float:
        """Forward every frame in one compiled call (run_frames); returns seconds."""
        b = self.batch
        t0 = time.perf_counter()
        sent = run_frames(fr.data, fr.off, fr.length, fr.ts, fr.rx, fr.n, b.vector_size,
                          b.buf, b.meta, b.ts, b.nalloc, NOW_NS, *self.graph.loop_args())
        dt = time.perf_counter() - t0
        self.last_sent = sent
        return dt

    def run(self, fr: Frames) -> float:
        """Forward every frame; returns seconds."""
        b, g = self.batch, self.graph
        load, run = b.load, g.run
        data, off, ln, ts, rx = fr.data, fr.off, fr.length, fr.ts, fr.rx
        total = fr.n
        pos = 0
        t0 = time.perf_counter()
        while pos < total:
            pos += load(data, off, ln, ts, rx, pos, total - pos)
            run(b, NOW_NS)
        return time.perf_counter() - t0

    def batch_profile(self, fr: Frames) -> dict[str, float]:
        """Per-node ns/packet as the median over batches (robust to preemption, which the
        aggregate clocks of runtime_view absorb); a separate, untimed pass."""
        from vecroute.graph.cycles import cycles_per_second
        from vecroute.graph.state import NS_CLOCKS
        from vecroute.packet.node_ids import NODE_NAMES

        b, g = self.batch, self.graph
        ns = self.state.node_stats
        per = []
        pos, total = 0, fr.n
        while pos < total:
            c0 = ns[:, NS_CLOCKS].copy()
            n = b.load(fr.data, fr.off, fr.length, fr.ts, fr.rx, pos, total - pos)
            g.run(b, NOW_NS)
            pos += n
            per.append((ns[:, NS_CLOCKS] - c0) / n)
        med = np.median(np.array(per), axis=0) * 1e9 / cycles_per_second()
        return {NODE_NAMES[i]: float(med[i]) for i in range(len(NODE_NAMES)) if med[i] > 0}

    def load_only(self, fr: Frames) -> float:
        b = self.batch
        load = b.load
        data, off, ln, ts, rx = fr.data, fr.off, fr.length, fr.ts, fr.rx
        total = fr.n
        pos = 0
        t0 = time.perf_counter()
        while pos < total:
            pos += load(data, off, ln, ts, rx, pos, total - pos)
        return time.perf_counter() - t0

    def empty_runs(self, calls: int) -> float:
        """Seconds per Graph.run of an empty batch (Python + numba call overhead)."""
        b, run = self.batch, self.graph.run
        b.n = 0
        b.nalloc[0] = 0
        t0 = time.perf_counter()
        for _ in range(calls):
            run(b, NOW_NS)
        return (time.perf_counter() - t0) / calls

    def direct_empty_calls(self, calls: int) -> float:
        """Seconds per run_graph call through numba's dispatcher, no Python around it
        (the batch's and the graph's arrays built once into their GraphCall)."""
        from vecroute.graph.dispatch import run_graph

        b = self.batch
        b.n = 0
        b.nalloc[0] = 0
        call = self.graph.graph_call(b)
        t0 = time.perf_counter()
        for _ in range(calls):
            run_graph(0, NOW_NS, call)
        return (time.perf_counter() - t0) / calls

    def clear(self) -> None:
        self.state.clear_counters()

    def counters(self) -> dict[str, int]:
        from vecroute.graph.counters import COUNTERS

        return {
            c.name: int(self.state.counters[i])
            for i, c in enumerate(COUNTERS)
            if self.state.counters[i]
        }

    def nodes(self) -> list[dict[str, Any]]:
        from vecroute.control.show import runtime_view

        return runtime_view(self.state)

    def first_batch_output(self, fr: Frames) -> list[tuple[int, bytes]]:
        """(tx interface, bytes) of the forwarded packets of the first batch, in order;
        what the router built itself (ICMP redirects to senders whose next hop is on their
        own link: the Python forwarder sends none) is left out."""
        from vecroute.packet.batch import F_REDIRECT, M_FLAGS, M_TX

        b = self.batch
        b.load(fr.data, fr.off, fr.length, fr.ts, fr.rx, 0, fr.n)
        tx = self.graph.run(b, NOW_NS)
        return [(int(b.meta[M_TX, i]), b.frame(int(i))) for i in tx
                if not b.meta[M_FLAGS, i] & F_REDIRECT]


def same_forwarding(ours: list[tuple[int, bytes]], ref: list[tuple[int, bytes]]) -> bool:
    """The same frames on the same ports as the reference forwarder, and each flow's (its
    addresses and ports) in the same order: the fused pass sends
    plain packets before the others of a batch, which reorders across flows only. Frames
    that are not IP (ARP requests for next hops still unresolved) are the router's own."""
    ip = [x for x in ours if x[1][12:14] in (b"\x08\x00", b"\x86\xdd")]
    if sorted(ip) != sorted(ref):
        return False

    def flows(frames: list[tuple[int, bytes]]) -> dict:
        out: dict = {}
        for tx, f in frames:
            key = f[26:38] if f[12:14] == b"\x08\x00" else f[22:58]  # addresses, ports
            out.setdefault((tx, key), []).append(f)
        return out

    return flows(ip) == flows(ref)


def bare_lookup(fib, fr4: Frames, fr6: Frames) -> tuple[float, float, np.ndarray, np.ndarray]:
    from vecroute.fib.lpm import lpm4_lookup_batch, lpm6_lookup_batch

    l4, l6 = fib.lpm[4], fib.lpm[6]
    t4 = l4.table_index(0)
    t6 = l6.table_index(0)
    t0 = time.perf_counter()
    v4 = lpm4_lookup_batch(l4.roots, l4.groups, t4, fr4.dst4)
    t1 = time.perf_counter()
    v6 = lpm6_lookup_batch(l6.roots, l6.groups, t6, fr6.dst6[0], fr6.dst6[1])
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, v4, v6


def trivial_call_s(calls: int) -> float:
    """Seconds per call of a no-argument @njit function (the floor of any numba call)."""
    from numba import njit

    @njit
    def nothing() -> int:
        return 0

    nothing()
    t0 = time.perf_counter()
    for _ in range(calls):
        nothing()
    return (time.perf_counter() - t0) / calls


# ---------------------------------------------------------------------------------------------
# the per-packet Python forwarder (baseline)
# ---------------------------------------------------------------------------------------------

_IP4 = struct.Struct("!BBHHHBBH4s4s")
_IP6 = struct.Struct("!IHBB16s16s")
_HDR_WORDS = {ihl: struct.Struct(f"!{ihl // 2}H") for ihl in range(20, 64, 4)}
_LOOPBACK6 = bytes(15) + b"\x01"
_UNSPEC6 = bytes(16)


class PythonForwarder:
    """What one would write first: bytes in, pytricia lookup, bytes out, one packet at a time.

    Same checks as the vecroute path: destination MAC, ethertype, version, header and total
    length, IPv4 header checksum, martian/multicast addresses, TTL/hop limit, MTU; RFC 1624
    incremental checksum; the L2 header from a per-next-hop dict.
    """

    def __init__(self, tab: Table) -> None:
        import pytricia

        t0 = time.perf_counter()
        self.pyt4 = pytricia.PyTricia(32)
        self.pyt6 = pytricia.PyTricia(128)
        ins4 = self.pyt4.insert
        for a, ln, k in zip(_be(tab.a4, ">u4", 4), tab.l4.tolist(), tab.nb4.tolist(), strict=True):
            ins4(a.tobytes(), ln, k)
        ins6 = self.pyt6.insert
        a6 = np.concatenate([_be(tab.h6, ">u8", 8), _be(tab.o6, ">u8", 8)], axis=1)
        for a, ln, k in zip(a6, tab.l6.tolist(), tab.nb6.tolist(), strict=True):
            ins6(a.tobytes(), ln, k)
        self.build_s = time.perf_counter() - t0
        self.if_macs = [if_mac(i) for i in range(N_IF)]
        self.mtu = [1500] * N_IF
        # next hop k -> (14-byte L2 header, tx interface)
        self.adj4 = {k: (nb_mac(k) + if_mac(k % N_IF) + b"\x08\x00", k % N_IF) for k in range(N_NB)}
        self.adj6 = {k: (nb_mac(k) + if_mac(k % N_IF) + b"\x86\xdd", k % N_IF) for k in range(N_NB)}

    def forward4(self, pkts: list[tuple[int, bytes]]) -> tuple[list[tuple[int, bytes]], int]:
        out = []
        append = out.append
        unpack = _IP4.unpack_from
        get = self.pyt4.get
        if_macs, adj, mtu, words = self.if_macs, self.adj4, self.mtu, _HDR_WORDS
        drops = 0
        for rx, f in pkts:
            n = len(f)
            if n < 34 or f[0:6] != if_macs[rx] or f[12:14] != b"\x08\x00":
                drops += 1
                continue
            vihl, _tos, tot, _id, _frag, ttl, proto, csum, src, dst = unpack(f, 14)
            ihl = (vihl & 15) * 4
            if vihl >> 4 != 4 or ihl < 20 or ihl > n - 14 or tot < ihl or tot > n - 14:
                drops += 1
                continue
            s = sum(words[ihl].unpack_from(f, 14))
            s = (s & 0xFFFF) + (s >> 16)
            s = (s & 0xFFFF) + (s >> 16)
            if s != 0xFFFF:
                drops += 1
                continue
            if src[0] == 0 or src[0] == 127 or src[0] >= 224 or dst[0] >= 224:
                drops += 1
                continue
            nh = get(dst)
            if nh is None or ttl <= 1:
                drops += 1
                continue
            rw, tx = adj[nh]
            if tot > mtu[tx]:
                drops += 1
                continue
            old = (ttl << 8) | proto
            c = (~csum & 0xFFFF) + (~old & 0xFFFF) + (old - 0x100)
            c = (c & 0xFFFF) + (c >> 16)
            c = (c & 0xFFFF) + (c >> 16)
            append(
                (
                    tx,
                    b"".join(
                        (
                            rw,
                            f[14:22],
                            bytes((ttl - 1, proto)),
                            (~c & 0xFFFF).to_bytes(2, "big"),
                            f[26 : 14 + tot],
                        )
                    ),
                )
            )
        return out, drops

    def forward6(self, pkts: list[tuple[int, bytes]]) -> tuple[list[tuple[int, bytes]], int]:
        out = []
        append = out.append
        unpack = _IP6.unpack_from
        get = self.pyt6.get
        if_macs, adj, mtu = self.if_macs, self.adj6, self.mtu
        drops = 0
        for rx, f in pkts:
            n = len(f)
            if n < 54 or f[0:6] != if_macs[rx] or f[12:14] != b"\x86\xdd":
                drops += 1
                continue
            vtcfl, plen, _nh, hlim, src, dst = unpack(f, 14)
            if vtcfl >> 28 != 6 or 40 + plen > n - 14:
                drops += 1
                continue
            if (
                src[0] == 0xFF
                or src == _LOOPBACK6
                or src == _UNSPEC6
                or (src[0] == 0xFE and src[1] & 0xC0 == 0x80)
            ):
                drops += 1
                continue
            if dst[0] == 0xFF or (dst[0] == 0xFE and dst[1] & 0xC0 == 0x80):
                drops += 1
                continue
            nh = get(dst)
            if nh is None or hlim <= 1:
                drops += 1
                continue
            rw, tx = adj[nh]
            if 40 + plen > mtu[tx]:
                drops += 1
                continue
            append((tx, b"".join((rw, f[14:21], bytes((hlim - 1,)), f[22 : 54 + plen]))))
        return out, drops


def timed_py(fn, pkts) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    out, drops = fn(pkts)
    return time.perf_counter() - t0, len(out), drops


# ---------------------------------------------------------------------------------------------
# the benchmark
# ---------------------------------------------------------------------------------------------


def node_table(
    reps: list[list[dict[str, Any]]], bmed: list[dict[str, float]]
) -> list[dict[str, Any]]:
    """Median ns/packet per node over repetitions (nodes in graph order), with the
    median-of-batches figure next to it."""
    names: list[str] = []
    vals: dict[str, list[float]] = {}
    vpc: dict[str, float] = {}
    for rows in reps:
        for r in rows:
            if r["node"] not in vals:
                names.append(r["node"])
                vals[r["node"]] = []
            vals[r["node"]].append(r["ns_per_packet"])
            vpc[r["node"]] = r["vectors_per_call"]
    out = []
    for name in names:
        s = summary(vals[name])
        bm = summary([m[name] for m in bmed if name in m])
        out.append(
            {
                "node": name,
                "ns_per_packet": s["median"],
                "min": s["min"],
                "max": s["max"],
                "vectors_per_call": vpc[name],
                "batch_median_ns": bm["median"],
            }
        )
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from vecroute.warmup import clear_stale_cache

    clear_stale_cache((Path(__file__).parent,))  # run_frames embeds the graph's kernels
    cpu = pin_to_one_cpu(args.cpu)
    info = machine_info()
    info["pinned_cpu"] = cpu
    eprint(f"machine: {machine_line(info)}; pinned to CPU {cpu}")
    npk, R = args.packets, args.repeat
    rng = np.random.default_rng(SEED)

    # -- table, traffic, JIT warm-up ----------------------------------------------------------
    load_before = os.getloadavg()
    dt, tab = load_table(args.table)  # first call: may compile the parser
    eprint(
        f"table: {tab.a4.shape[0]} IPv4 + {tab.h6.shape[0]} IPv6 prefixes ({dt:.2f} s, "
        f"first parse incl. any JIT)"
    )
    fr4 = make_frames4(npk, tab, rng)
    fr6 = make_frames6(npk, tab, rng)
    eprint(f"traffic: {fr4.n} IPv4 x {FRAME4} B, {fr6.n} IPv6 x {FRAME6} B")
    eprint("warm-up (JIT) ...")
    t0 = time.perf_counter()
    fib, lb4, lb6, _ = build_fib(tab)
    warm = {vs: VectorPath(fib, vs) for vs in (64, 256, 1024)}
    for p in warm.values():
        p.run(Frames(fr4.data, fr4.off[:4096], fr4.length[:4096], fr4.ts[:4096], fr4.rx[:4096]))
        p.run(Frames(fr6.data, fr6.off[:4096], fr6.length[:4096], fr6.ts[:4096], fr6.rx[:4096]))
    warm[256].run_compiled(
        Frames(fr4.data, fr4.off[:4096], fr4.length[:4096], fr4.ts[:4096], fr4.rx[:4096]))
    bare_lookup(fib, fr4, fr6)
    warm_s = time.perf_counter() - t0
    del warm, fib
    eprint(f"warm-up done in {warm_s:.1f} s")

    # -- FIB build, R times, each in a fresh process (honest RSS, no allocator reuse) ---------
    builds: list[dict[str, Any]] = []
    for r in range(R):
        m = build_in_subprocess(args.table, cpu)
        builds.append(m)
        eprint(
            f"build {r + 1}/{R}: parse {m['parse_s']:.2f} s, setup {m['setup_s'] * 1e3:.1f} ms,"
            f" IPv4 {m['ip4_load_s']:.2f} s, IPv6 {m['ip6_load_s']:.2f} s, "
            f"RSS +{m['total_rss_mb']:.0f} MB"
        )
    fib, lb4, lb6, _ = build_fib(tab)  # the FIB the forwarding runs use
    add_route_s = time_add_route(tab, args.add_route_sample, rng)
    stats4, stats6 = fib.lpm[4].stats(), fib.lpm[6].stats()

    # -- forwarding, interleaved --------------------------------------------------------------
    paths = {vs: VectorPath(fib, vs) for vs in (64, 256, 1024)}
    p256 = paths[256]
    n256 = VectorPath(fib, 256, fused=False)  # the same graph, every packet through the nodes
    pyf = PythonForwarder(tab)
    eprint(f"pytricia built in {pyf.build_s:.1f} s")
    py4 = fr4.as_python(args.python_packets)
    py6 = fr6.as_python(args.python_packets)

    # correctness cross-check: the Python forwarder and vecroute emit the same bytes
    agree4 = same_forwarding(p256.first_batch_output(fr4), pyf.forward4(py4[:256])[0])
    agree6 = same_forwarding(p256.first_batch_output(fr6), pyf.forward6(py6[:256])[0])

    res: dict[str, list[float]] = {
        k: []
        for k in (
            "ip4_mpps",
            "ip6_mpps",
            "py4_kpps",
            "py6_kpps",
            "lookup4_mlps",
            "lookup6_mlps",
            "ip4_vs64_mpps",
            "ip4_vs1024_mpps",
            "load4_ns",
            "load6_ns",
            "empty_run_us",
            "direct_call_us",
            "ip4_nodes_sum_ns",
            "ip6_nodes_sum_ns",
            "ip4_unfused_mpps",
            "ip6_unfused_mpps",
            "ip4_loop_mpps",
            "ip6_loop_mpps",
            "ip4_loop_unfused_mpps",
            "ip6_loop_unfused_mpps",
        )
    }
    loop_shares = {k: CpuShare() for k in ("ip4", "ip6", "ip4_unfused", "ip6_unfused")}
    loop_sent: dict[str, int] = {}
    nodes4: list[list[dict[str, Any]]] = []
    nodes6: list[list[dict[str, Any]]] = []
    bmed4: list[dict[str, float]] = []
    bmed6: list[dict[str, float]] = []
    fwd_check: dict[str, Any] = {}
    share, share4, share6 = CpuShare(), CpuShare(), CpuShare()
    sharep4, sharep6 = CpuShare(), CpuShare()
    steal0 = steal_ticks()
    for r in range(R):
        p256.clear()
        with share, share4:
            s = p256.run(fr4)
        res["ip4_mpps"].append(fr4.n / s / 1e6)
        nodes4.append(p256.nodes())
        c4 = p256.counters()
        with sharep4:
            s, nout, _ = timed_py(pyf.forward4, py4)
        res["py4_kpps"].append(len(py4) / s / 1e3)
        p256.clear()
        with share, share6:
            s = p256.run(fr6)
        res["ip6_mpps"].append(fr6.n / s / 1e6)
        nodes6.append(p256.nodes())
        c6 = p256.counters()
        with sharep6:
            s, nout6, _ = timed_py(pyf.forward6, py6)
        res["py6_kpps"].append(len(py6) / s / 1e3)
        # the fused path against the nodes alone, and both in one compiled call per run
        # (no Python per batch), interleaved
        for fam, fr in (("ip4", fr4), ("ip6", fr6)):
            res[f"{fam}_unfused_mpps"].append(fr.n / n256.run(fr) / 1e6)
            for tag, path in ((fam, p256), (f"{fam}_unfused", n256)):
                with loop_shares[tag]:
                    s = path.run_compiled(fr)
                res[f"{fam}_loop{tag[3:]}_mpps"].append(fr.n / s / 1e6)
                loop_sent[tag] = path.last_sent
        t4, t6, v4, v6 = bare_lookup(fib, fr4, fr6)
        res["lookup4_mlps"].append(fr4.n / t4 / 1e6)
        res["lookup6_mlps"].append(fr6.n / t6 / 1e6)
        for vs in (64, 1024):
            s = paths[vs].run(fr4)
            res[f"ip4_vs{vs}_mpps"].append(fr4.n / s / 1e6)
        bmed4.append(p256.batch_profile(fr4))
        bmed6.append(p256.batch_profile(fr6))
        res["load4_ns"].append(p256.load_only(fr4) / fr4.n * 1e9)
        res["load6_ns"].append(p256.load_only(fr6) / fr6.n * 1e9)
        res["empty_run_us"].append(p256.empty_runs(20000) * 1e6)
        res["direct_call_us"].append(p256.direct_empty_calls(20000) * 1e6)
        res["ip4_nodes_sum_ns"].append(
            sum(x["ns_per_packet"] * x["vectors"] for x in nodes4[-1]) / fr4.n
        )
        res["ip6_nodes_sum_ns"].append(
            sum(x["ns_per_packet"] * x["vectors"] for x in nodes6[-1]) / fr6.n
        )
        fwd_check = {
            "ip4_counters": c4,
            "ip6_counters": c6,
            "py4_forwarded": nout,
            "py6_forwarded": nout6,
            "lookup4_misses": int((v4 < 0).sum()),
            "lookup6_misses": int((v6 < 0).sum()),
        }
        eprint(
            f"rep {r + 1}/{R}: IPv4 {res['ip4_mpps'][-1]:.2f} Mpps, IPv6 "
            f"{res['ip6_mpps'][-1]:.2f} Mpps (unfused {res['ip4_unfused_mpps'][-1]:.2f} / "
            f"{res['ip6_unfused_mpps'][-1]:.2f}; compiled loop {res['ip4_loop_mpps'][-1]:.2f} / "
            f"{res['ip6_loop_mpps'][-1]:.2f}, unfused {res['ip4_loop_unfused_mpps'][-1]:.2f} / "
            f"{res['ip6_loop_unfused_mpps'][-1]:.2f}), python {res['py4_kpps'][-1]:.0f}/"
            f"{res['py6_kpps'][-1]:.0f} kpps, lookup {res['lookup4_mlps'][-1]:.0f}/"
            f"{res['lookup6_mlps'][-1]:.0f} M/s"
        )
    steal_s = (steal_ticks() - steal0) / os.sysconf("SC_CLK_TCK")
    trivial_us = trivial_call_s(200000) * 1e6

    # -- results -------------------------------------------------------------------------------
    res["ip4_cpu_mpps"] = [m / c for m, c in zip(res["ip4_mpps"], share4.shares, strict=True)]
    res["ip6_cpu_mpps"] = [m / c for m, c in zip(res["ip6_mpps"], share6.shares, strict=True)]
    for tag, sh in loop_shares.items():
        key = f"{tag[:3]}_loop{tag[3:]}"
        res[f"{key}_cpu_mpps"] = [m / c for m, c in
                                  zip(res[f"{key}_mpps"], sh.shares, strict=True)]
    res["py4_cpu_kpps"] = [k / c for k, c in zip(res["py4_kpps"], sharep4.shares, strict=True)]
    res["py6_cpu_kpps"] = [k / c for k, c in zip(res["py6_kpps"], sharep6.shares, strict=True)]
    S = {k: summary(v) for k, v in res.items()}
    ratio4 = summary([a * 1e3 / b for a, b in zip(res["ip4_mpps"], res["py4_kpps"], strict=True)])
    ratio6 = summary([a * 1e3 / b for a, b in zip(res["ip6_mpps"], res["py6_kpps"], strict=True)])
    ratio4_loop = summary(
        [a * 1e3 / b for a, b in zip(res["ip4_loop_mpps"], res["py4_kpps"], strict=True)])
    ratio6_loop = summary(
        [a * 1e3 / b for a, b in zip(res["ip6_loop_mpps"], res["py6_kpps"], strict=True)])
    ratio4_cpu = summary(
        [a * 1e3 / b for a, b in zip(res["ip4_cpu_mpps"], res["py4_cpu_kpps"], strict=True)]
    )
    ratio6_cpu = summary(
        [a * 1e3 / b for a, b in zip(res["ip6_cpu_mpps"], res["py6_cpu_kpps"], strict=True)]
    )
    B = {k: summary([m[k] for m in builds]) for k in builds[0]}
    tables_mb = B["ip4_nbytes_mb"]["median"] + B["ip6_nbytes_mb"]["median"]
    rss_mb = B["total_rss_mb"]["median"]
    targets = {
        "ip4_mpps": {
            "target": f">= {TARGETS['ip4_mpps']}",
            "value": S["ip4_loop_mpps"]["median"],
            "met": S["ip4_loop_mpps"]["median"] >= TARGETS["ip4_mpps"],
        },
        "ip6_mpps": {
            "target": f">= {TARGETS['ip6_mpps']}",
            "value": S["ip6_loop_mpps"]["median"],
            "met": S["ip6_loop_mpps"]["median"] >= TARGETS["ip6_mpps"],
        },
        "ip4_build_s": {
            "target": f"<= {TARGETS['ip4_build_s']}",
            "value": B["ip4_load_s"]["median"],
            "met": B["ip4_load_s"]["median"] <= TARGETS["ip4_build_s"],
        },
        "tables_mb": {
            "target": f"<= {TARGETS['tables_mb']}",
            "value": max(tables_mb, rss_mb),
            "met": max(tables_mb, rss_mb) <= TARGETS["tables_mb"],
        },
        "speedup_vs_python_ip4": {
            "target": f">= {TARGETS['speedup_vs_python']}",
            "value": ratio4_loop["median"],
            "met": ratio4_loop["median"] >= TARGETS["speedup_vs_python"],
        },
        "speedup_vs_python_ip6": {
            "target": f">= {TARGETS['speedup_vs_python']}",
            "value": ratio6_loop["median"],
            "met": ratio6_loop["median"] >= TARGETS["speedup_vs_python"],
        },
    }
    return {
        "machine": info,
        "config": {
            "packets": npk,
            "repeat": R,
            "python_packets": len(py4),
            "table": str(args.table),
            "frame4_bytes": FRAME4,
            "frame6_bytes": FRAME6,
            "interfaces": N_IF,
            "neighbours_per_family": N_NB,
            "prefixes4": int(tab.a4.shape[0]),
            "prefixes6": int(tab.h6.shape[0]),
        },
        "warmup_s": warm_s,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "build": B,
        "add_route_us": add_route_s * 1e6,
        "lpm4_stats": stats4,
        "lpm6_stats": stats6,
        "forwarding": S,
        "ratio_ip4": ratio4,
        "ratio_ip6": ratio6,
        "ratio_ip4_loop": ratio4_loop,
        "ratio_ip6_loop": ratio6_loop,
        "ratio_ip4_cpu": ratio4_cpu,
        "ratio_ip6_cpu": ratio6_cpu,
        "nodes_ip4": node_table(nodes4, bmed4),
        "nodes_ip6": node_table(nodes6, bmed6),
        "trivial_njit_call_us": trivial_us,
        "python_agrees": {"ip4": agree4, "ip6": agree6},
        "cpu_share": summary(share.shares),
        "steal_s": steal_s,
        "check": {**fwd_check, "compiled_loop_sent": loop_sent},
        "targets": targets,
    }


def print_text(R: dict[str, Any]) -> None:
    S, B, c = R["forwarding"], R["build"], R["config"]
    print(f"machine: {machine_line(R['machine'])}; pinned CPU {R['machine']['pinned_cpu']}")
    lb, la = R["loadavg_before"], R["loadavg_after"]
    print(
        f"load average (1/5/15 min) before {lb[0]:.2f}/{lb[1]:.2f}/{lb[2]:.2f}, after "
        f"{la[0]:.2f}/{la[1]:.2f}/{la[2]:.2f} (other jobs share this machine)"
    )
    cs = R["cpu_share"]
    print(
        f"CPU share of the vecroute forwarding runs (process CPU / wall): median "
        f"{cs['median']:.2f}, min {cs['min']:.2f}; hypervisor steal during the runs "
        f"{R['steal_s']:.1f} s"
    )
    print(
        f"table: {c['prefixes4']} IPv4 + {c['prefixes6']} IPv6 prefixes; {c['interfaces']} "
        f"interfaces, {c['neighbours_per_family']} neighbours per family; "
        f"median [min .. max] of {c['repeat']} interleaved runs"
    )
    print()
    print("FIB build (each repetition in a fresh process, kernels warmed on a small table first)")
    print(f"  parse table file      {fmt_summary(B['parse_s'], 's', 3)}")
    print(f"  Fib setup (if+nbrs)   {fmt_summary(B['setup_s'], 's', 4)}")
    print(f"  IPv4 bulk load        {fmt_summary(B['ip4_load_s'], 's', 3)}")
    print(f"  IPv6 bulk load        {fmt_summary(B['ip6_load_s'], 's', 3)}")
    print(f"  Fib.add_route         {R['add_route_us']:.1f} us/route (IPv4 sample, one by one)")
    print(
        f"  IPv4 arrays           {B['ip4_nbytes_mb']['median']:.1f} MB allocated, RSS "
        f"+{fmt_summary(B['ip4_rss_mb'], 'MB', 1)}"
    )
    print(
        f"  IPv6 arrays           {B['ip6_nbytes_mb']['median']:.1f} MB allocated, RSS "
        f"+{fmt_summary(B['ip6_rss_mb'], 'MB', 1)}"
    )
    print(f"  whole build RSS       +{fmt_summary(B['total_rss_mb'], 'MB', 1)}")
    for fam in (4, 6):
        st = R[f"lpm{fam}_stats"]
        print(
            f"  lpm{fam}: rules {st['rules']}, groups in use {st['groups_in_use']} of "
            f"{st['groups_capacity']} ({st['groups_bytes_in_use'] / 1e6:.1f} MB), roots "
            f"{st['roots_bytes'] / 1e6:.1f} MB, rule store {st['rule_store_bytes'] / 1e6:.1f} MB"
        )
    print()
    print(f"Forwarding ({c['packets']} frames per family, vector 256, Graph.run incl. load)")
    print(f"  IPv4 {c['frame4_bytes']} B   {fmt_summary(S['ip4_mpps'], 'Mpps')}")
    print(f"  IPv6 {c['frame6_bytes']} B   {fmt_summary(S['ip6_mpps'], 'Mpps')}")
    print(
        f"  IPv4 per CPU-second  {fmt_summary(S['ip4_cpu_mpps'], 'Mpps')} (packets / process "
        f"CPU time: the rate with the core to itself, cache sharing aside)"
    )
    print(f"  IPv6 per CPU-second  {fmt_summary(S['ip6_cpu_mpps'], 'Mpps')}")
    print(f"  IPv4 fused path off  {fmt_summary(S['ip4_unfused_mpps'], 'Mpps')}")
    print(f"  IPv6 fused path off  {fmt_summary(S['ip6_unfused_mpps'], 'Mpps')}")
    print("  one compiled call for all frames (load + graph per vector, as the workers run):")
    for fam in ("ip4", "ip6"):
        print(f"    {fam} fused        {fmt_summary(S[f'{fam}_loop_mpps'], 'Mpps')}, per "
              f"CPU-second {fmt_summary(S[f'{fam}_loop_cpu_mpps'], 'Mpps')}")
        print(f"    {fam} nodes only   {fmt_summary(S[f'{fam}_loop_unfused_mpps'], 'Mpps')}, per "
              f"CPU-second {fmt_summary(S[f'{fam}_loop_unfused_cpu_mpps'], 'Mpps')}")
    print(f"  IPv4 vector   64   {fmt_summary(S['ip4_vs64_mpps'], 'Mpps')}")
    print(f"  IPv4 vector  256   {fmt_summary(S['ip4_mpps'], 'Mpps')}")
    print(f"  IPv4 vector 1024   {fmt_summary(S['ip4_vs1024_mpps'], 'Mpps')}")
    print(f"  bare lookup IPv4   {fmt_summary(S['lookup4_mlps'], 'M lookups/s')}")
    print(f"  bare lookup IPv6   {fmt_summary(S['lookup6_mlps'], 'M lookups/s')}")
    print(
        f"  Python+pytricia IPv4  {fmt_summary(S['py4_kpps'], 'kpps', 0)} "
        f"({c['python_packets']} packets)"
    )
    print(f"  Python+pytricia IPv6  {fmt_summary(S['py6_kpps'], 'kpps', 0)}")
    print(f"  ratio IPv4            {fmt_summary(R['ratio_ip4'], 'x', 0)}")
    print(f"  ratio IPv6            {fmt_summary(R['ratio_ip6'], 'x', 0)}")
    print(
        f"  ratio per CPU-second  IPv4 {fmt_summary(R['ratio_ip4_cpu'], 'x', 0)}, IPv6 "
        f"{fmt_summary(R['ratio_ip6_cpu'], 'x', 0)}"
    )
    print(f"  same output bytes as the Python forwarder (first batch): {R['python_agrees']}")
    print()
    print("Where the time goes (vector 256)")
    for fam in (4, 6):
        total = 1e3 / S[f"ip{fam}_mpps"]["median"]
        print(
            f"  IPv{fam}: {total:.1f} ns/packet in all; PacketBatch.load "
            f"{S[f'load{fam}_ns']['median']:.1f} ns; node clocks "
            f"{S[f'ip{fam}_nodes_sum_ns']['median']:.1f} ns"
        )
        for row in R[f"nodes_ip{fam}"]:
            print(
                f"    {row['node']:<18} {row['ns_per_packet']:7.2f} ns/packet "
                f"[{row['min']:.2f} .. {row['max']:.2f}]  {row['vectors_per_call']:.0f}/call;"
                f" median of batches {row['batch_median_ns']:.2f}"
            )
    print(
        f"  Graph.run on an empty batch  {fmt_summary(S['empty_run_us'], 'us/call')} "
        f"(= {S['empty_run_us']['median'] * 1e3 / 256:.1f} ns/packet at 256)"
    )
    print(f"  run_graph direct, empty      {fmt_summary(S['direct_call_us'], 'us/call')}")
    print(f"  no-argument @njit call       {R['trivial_njit_call_us']:.3f} us/call")
    print()
    print("Targets")
    for k, t in R["targets"].items():
        print(f"  {k:<24} {t['value']:10.2f}  target {t['target']:<8} {verdict(t['met'])}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.forwarding",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--packets", type=int, default=1 << 20, help="frames per family (2**20)")
    ap.add_argument("--repeat", type=int, default=5, help="repetitions, interleaved (5)")
    ap.add_argument(
        "--python-packets",
        type=int,
        default=50_000,
        help="frames per family for the Python forwarder (50000)",
    )
    ap.add_argument(
        "--add-route-sample",
        type=int,
        default=20_000,
        help="IPv4 routes installed one by one with Fib.add_route (20000)",
    )
    ap.add_argument(
        "--table", type=Path, default=DEFAULT_TABLE, help=f"prefix file (default {DEFAULT_TABLE})"
    )
    ap.add_argument("--cpu", type=int, default=None, help="CPU to pin to (default: last allowed)")
    ap.add_argument("--build-probe", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.build_probe:
        pin_to_one_cpu(args.cpu)
        json.dump(build_probe(args.table), sys.stdout)
        return 0
    if args.packets < 4096 or args.repeat < 1:
        ap.error("--packets must be >= 4096 and --repeat >= 1")
    if not args.table.exists():
        ap.error(f"table file {args.table} not found (give --table)")
    result = run(args)
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
    else:
        print_text(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
