"""Offline replay: pcap files in, the graph in batches, one pcap per transmitting interface.

Packets of all inputs are merged in timestamp order (stable: ties keep input order) and
processed in vectors; the router's clock is the packets' own timestamps, so rate limits
and neighbour request intervals behave as they would have live, and a replay is
deterministic. Output packets carry the timestamp of the packet that caused them and keep
the input order (fragments, ARP requests and ICMP errors sit where their original was).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vecroute.control.config import Config
from vecroute.graph.dataplane import build_dataplane
from vecroute.io.pcap import PcapWriter, read_capture
from vecroute.packet.batch import M_LEN, M_OFF, M_ORIG, M_SEQ, M_TX, PacketBatch

LINKTYPE_ETHERNET = 1


class ReplayError(ValueError):
    """A replay that cannot start (bad input list, wrong link type): one line."""


@dataclass
class ReplayResult:
    packets_in: int = 0
    packets_out: int = 0
    seconds: float = 0.0
    outputs: dict[str, str] = field(default_factory=dict)
    capture_errors: list[str] = field(default_factory=list)


def _merge(cfg: Config, inputs: list[tuple[str, str]]):
    """Read every input and merge them by timestamp into one packet array set."""
    datas, offs, lens, tss, rxs = [], [], [], [], []
    errors: list[str] = []
    base = 0
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
        datas.append(cap.data)
        offs.append(cap.offsets.astype(np.int64) + base)
        lens.append(cap.caplens.astype(np.int32))
        tss.append(cap.ts_ns.astype(np.int64))
        rxs.append(np.full(len(cap.offsets), ifx, dtype=np.int32))
        base += cap.data.size
    data = np.concatenate(datas) if len(datas) > 1 else np.asarray(datas[0])
    off = np.concatenate(offs)
    ln = np.concatenate(lens)
    ts = np.concatenate(tss)
    rx = np.concatenate(rxs)
    order = np.argsort(ts, kind="stable")
    if len(inputs) > 1:
        off, ln, ts, rx = off[order], ln[order], ts[order], rx[order]
    return data, off, ln, ts, rx, errors


class Replayer:
    """Runs captures through a router built from a config."""

    def __init__(self, cfg: Config, vector_size: int | None = None) -> None:
        self.cfg = cfg
        dp = build_dataplane(cfg)
        self.fib, self.firewall = dp.fib, dp.firewall
        self.batch = PacketBatch(vector_size or cfg.router.vector_size)
        self.graph = dp.graph(self.batch)

    def run(self, inputs: list[tuple[str, str]], out_dir: str | Path) -> ReplayResult:
        if not inputs:
            raise ReplayError("no input: give at least one --in IFNAME=FILE")
        out = Path(out_dir)
        in_paths = {Path(p).resolve() for _, p in inputs}
        for itf in self.cfg.interfaces:
            if (out / f"{itf.name}.pcap").resolve() in in_paths:
                raise ReplayError(f"output {out / (itf.name + '.pcap')} would overwrite an input")
        data, off, ln, ts, rx, errors = _merge(self.cfg, inputs)
        res = ReplayResult(capture_errors=errors)
        out.mkdir(parents=True, exist_ok=True)
        writers: dict[int, PcapWriter] = {}
        b = self.batch
        t0 = time.perf_counter()
        total = len(off)
        try:
            pos = 0
            while pos < total:
                n = b.load(data, off, ln, ts, rx, pos, total - pos)
                tx = self.graph.run(b, int(ts[pos + n - 1]))
                pos += n
                if tx.size:
                    self._write(tx, writers, out)
        finally:
            for w in writers.values():
                w.close()
        res.seconds = time.perf_counter() - t0
        res.packets_in = total
        res.packets_out = sum(w.packets for w in writers.values())
        res.outputs = {
            self.cfg.interfaces[i].name: str(out / f"{self.cfg.interfaces[i].name}.pcap")
            for i in sorted(writers)
        }
        return res

    def _write(self, tx: np.ndarray, writers: dict[int, PcapWriter], out: Path) -> None:
        b = self.batch
        meta = b.meta
        m = int(b.nalloc[0])
        if m == b.n:  # nothing generated: slot order is input order
            order = tx if (tx.size < 2 or bool((tx[1:] > tx[:-1]).all())) else np.sort(tx)
            ts = b.ts[:m]
        else:  # fragments, ARP/NS requests sit right after the packet they came from
            orig = meta[M_ORIG, :m]
            order = tx[np.lexsort((meta[M_SEQ, tx], orig[tx]))]
            ts = b.ts[orig]
        ports = meta[M_TX, order]
        offs = meta[M_OFF, :m]
        lens = meta[M_LEN, :m]
        first = int(ports[0])
        if (ports == first).all():
            self._writer(first, writers, out).write_batch(b.buf, offs, lens, ts, order)
            return
        for p in np.unique(ports):
            self._writer(int(p), writers, out).write_batch(b.buf, offs, lens, ts, order[ports == p])

    def _writer(self, p: int, writers: dict[int, PcapWriter], out: Path) -> PcapWriter:
        w = writers.get(p)
        if w is None:
            w = writers[p] = PcapWriter(out / f"{self.cfg.interfaces[p].name}.pcap")
        return w
