"""Offline replay: pcap files in, the graph in batches, one pcap per transmitting interface.

Packets of all inputs are merged in timestamp order (stable: ties keep input order) and
processed in vectors; the router's clock is the packets' own timestamps, so rate limits
and neighbour request intervals behave as they would have live, and a replay is
deterministic. Output packets carry the timestamp of the packet that caused them and keep
the input order (fragments, ARP requests and ICMP errors sit where their original was).

The per-batch work (load, graph, output order, pcap records) runs in one compiled loop
(:mod:`vecroute.io.replay_loop`) over many batches per call; Python only writes the filled
record buffers to the files between calls.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from vecroute.config_types import Config
from vecroute.firewall.states import state_capacity_limit
from vecroute.graph.dataplane import build_dataplane
from vecroute.io import replay_loop as L
from vecroute.io.pcap import PcapWriter, read_capture
from vecroute.io.pcap_write import DEFAULT_SNAPLEN
from vecroute.packet.batch import SLOT, PacketBatch

LINKTYPE_ETHERNET = 1
# the record buffer: this much in all, split between the ports, within these bounds a port
RECORD_BUFFER = 16 << 20
PORT_SLICE_MIN = 256 << 10
PORT_SLICE_MAX = 4 << 20


class ReplayError(ValueError):
    """A replay that cannot start (bad input list, wrong link type): one line."""


@dataclass
class ReplayResult:
    packets_in: int = 0
    packets_out: int = 0
    seconds: float = 0.0  # processing and writing (the inputs read and merged before)
    read_seconds: float = 0.0  # reading and merging the inputs
    write_seconds: float = 0.0  # of ``seconds``, handing the output records to the OS
    outputs: dict[str, str] = field(default_factory=dict)
    capture_errors: list[str] = field(default_factory=list)


@dataclass
class MergedInput:
    """Every input's frames in processing order: frame i is ``data[off[i] : off[i] +
    length[i]]``, received at ``ts[i]`` on interface ``rx[i]``."""

    data: np.ndarray
    off: np.ndarray
    length: np.ndarray
    ts: np.ndarray
    rx: np.ndarray
    errors: list[str]


def merge_inputs(cfg: Config, inputs: list[tuple[str, str]]) -> MergedInput:
    """Read every input and merge them by timestamp (stable). One input is used as read:
    no copy of its bytes or arrays."""
    caps = []
    errors: list[str] = []
    for name, path in inputs:
        try:
            ifx = cfg.interface_index(name)
        except KeyError:
            raise ReplayError(
                f"--in {name}={path}: no interface named {name!r} in {cfg.path}"
            ) from None
        cap = read_capture(path)
        if len(cap.offsets) and cap.linktype != LINKTYPE_ETHERNET:
            raise ReplayError(f"{path}: link type {cap.linktype} is not Ethernet (1)")
        if cap.error:
            errors.append(f"{path}: {cap.error}")
        caps.append((cap, ifx))
    if len(caps) == 1:
        cap, ifx = caps[0]
        data, off, ln, ts = cap.data, cap.offsets, cap.caplens, cap.ts_ns
        rx = np.full(len(off), ifx, dtype=np.int32)
    else:
        bases = np.cumsum([0] + [c.data.size for c, _ in caps[:-1]])
        data = np.concatenate([c.data for c, _ in caps])
        off = np.concatenate(
            [c.offsets + b for (c, _), b in zip(caps, bases, strict=True)]
        )
        ln = np.concatenate([c.caplens for c, _ in caps])
        ts = np.concatenate([c.ts_ns for c, _ in caps])
        rx = np.concatenate([np.full(len(c.offsets), i, dtype=np.int32) for c, i in caps])
        order = np.argsort(ts, kind="stable")
        off, ln, ts, rx = off[order], ln[order], ts[order], rx[order]
    data.flags.writeable = False  # one compiled type, mapped or not
    return MergedInput(data, np.ascontiguousarray(off, np.int64),
                       np.ascontiguousarray(ln, np.int32), np.ascontiguousarray(ts, np.int64),
                       rx, errors)


class Replayer:
    """Runs captures through a router built from a config."""

    def __init__(self, cfg: Config, vector_size: int | None = None) -> None:
        vs = vector_size or cfg.router.vector_size
        if vs != cfg.router.vector_size:  # the firewall keeps room for a batch of states:
            # this batch's (a 4096-packet vector over a table sized for 256 dropped states)
            cfg = replace(cfg, router=replace(cfg.router, vector_size=vs))
        self.cfg = cfg
        dp = build_dataplane(cfg)
        self.fib, self.firewall = dp.fib, dp.firewall
        self.batch = PacketBatch(vs)
        self.graph = dp.graph(self.batch)
        ports = len(cfg.interfaces)
        self.slice = min(max(RECORD_BUFFER // max(ports, 1), PORT_SLICE_MIN), PORT_SLICE_MAX)
        assert self.slice >= 16 + SLOT  # any record fits an empty slice
        self._records = np.empty(ports * self.slice, dtype=np.uint8)  # pages touched on use
        cap = self.batch.capacity
        self._order = np.zeros(cap, dtype=np.int32)
        self._cnt = np.zeros(cap + 1, dtype=np.int64)

    def run(self, inputs: list[tuple[str, str]], out_dir: str | Path) -> ReplayResult:
        if not inputs:
            raise ReplayError("no input: give at least one --in IFNAME=FILE")
        out = Path(out_dir)
        in_paths = {Path(p).resolve() for _, p in inputs}
        for itf in self.cfg.interfaces:
            if (out / f"{itf.name}.pcap").resolve() in in_paths:
                raise ReplayError(f"output {out / (itf.name + '.pcap')} would overwrite an input")
        t0 = time.perf_counter()
        src = merge_inputs(self.cfg, inputs)
        res = ReplayResult(capture_errors=src.errors, read_seconds=time.perf_counter() - t0)
        out.mkdir(parents=True, exist_ok=True)
        writers: dict[int, PcapWriter] = {}
        t0 = time.perf_counter()
        try:
            res.write_seconds = self._process(src, writers, out)
        finally:
            for w in writers.values():
                w.close()
        res.seconds = time.perf_counter() - t0
        res.packets_in = len(src.off)
        res.packets_out = sum(w.packets for w in writers.values())
        res.outputs = {
            self.cfg.interfaces[i].name: str(out / f"{self.cfg.interfaces[i].name}.pcap")
            for i in sorted(writers)
        }
        return res

    def _process(self, src: MergedInput, writers: dict[int, PcapWriter], out: Path) -> float:
        """The compiled loop until the input ends, writing the record buffer between calls;
        returns the seconds spent writing."""
        b, g = self.batch, self.graph
        ports = len(self.cfg.interfaces)
        ctl = np.zeros(L.RC_COLS, dtype=np.int64)
        ctl[L.RC_VECTOR] = b.vector_size
        ctl[L.RC_SNAPLEN] = DEFAULT_SNAPLEN
        ctl[L.RC_SLICE] = self.slice
        fill = np.zeros(ports, dtype=np.int64)
        packets = np.zeros(ports, dtype=np.int64)
        written = np.zeros(ports, dtype=np.int64)
        write_s = 0.0
        while True:
            g.sync_firewall()  # grows the state table, re-reads changed firewall arrays
            frames, frame_n, work, txl, txn, dp, fw, fwk, fwv = g.loop_args()
            if fw is not None:
                ctl[L.RC_FW_HEADROOM] = g.firewall.vector_size
                ctl[L.RC_FW_LIMIT] = state_capacity_limit(fw.st, fw.ctl)
            why = L.replay_loop(
                ctl, src.data, src.off, src.length, src.ts, src.rx, b.buf, b.meta, b.ts,
                b.nalloc, frames, frame_n, work, txl, txn, dp, fw, fwk, fwv,
                self._order, self._cnt, self._records, fill, packets,
            )
            b.n = int(ctl[L.RC_N])
            t0 = time.perf_counter()
            for p in np.flatnonzero(fill):
                w = writers.get(int(p))
                if w is None:
                    name = self.cfg.interfaces[p].name
                    w = writers[int(p)] = PcapWriter(out / f"{name}.pcap", buffer_size=0)
                base = int(p) * self.slice
                w.write_records(self._records[base : base + int(fill[p])],
                                int(packets[p] - written[p]))
                written[p] = packets[p]
                fill[p] = 0
            write_s += time.perf_counter() - t0
            if why == L.RET_DONE:
                return write_s
            if why == L.RET_BAD:
                raise RuntimeError(f"replay: transmitted slot {int(ctl[L.RC_BAD])} has no "
                                   f"port, no valid origin or lies outside the batch buffer")
