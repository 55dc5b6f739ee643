"""AF_PACKET RX latency on a veth pair: single frames, send -> recv_batch, TPACKET_V2 vs V3.

    python -m bench.af_packet_latency [--frames N] [--repeat R] [--timeout-ms T]
                                      [--modes same,cross,cross-wait] [--json]

Needs root.  Namespaces ``h1`` and ``rt`` are joined by a veth pair (IPv6 off on both
ends, so the only traffic is ours).  Each run opens one PacketSocket in rt (rx_version 2,
or 3 with ``block_timeout_ms`` T, default 1 as the router uses) and receives N 64-byte
frames sent one at a time from h1:

* ``same``: this thread sends a frame on a raw AF_PACKET socket in h1, then busy-polls
  ``recv_batch`` until it is in the batch.  On veth the kernel's receive path (veth ->
  backlog -> tpacket_rcv into the ring) runs in softirq on the sending CPU, mostly
  before ``send()`` returns, so this is send() + kernel delivery + our walk, plus
  whatever V3's block timer adds.  A random 0.2-1.2 ms pause between frames puts them
  at random phases of that timer.
* ``cross``: a child process pinned to another CPU sends the frames, each carrying its
  CLOCK_MONOTONIC send time, every 0.2-1.2 ms (random); this process, pinned to its own
  CPU, busy-polls ``recv_batch``; latency = when the frame came out of recv_batch -
  its send time.
* ``cross-wait``: the same, but this process sleeps in ``wait()`` (poll) between
  batches, as the router does: the latency includes the wake-up.

V2 and V3 runs are interleaved (2 3 2 3 ...) and repeated.  Reported per mode and
version: p50 / p99 / max over all frames of all runs (microseconds), the per-run p50 as
median [min .. max], and frames lost (not received within 1 s).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import struct
import subprocess
import sys
import time
from typing import Any

import numpy as np

from bench.common import eprint, fmt_summary, machine_info, machine_line, summary

ETH_TEST = 0x88B5
HEAD = bytes.fromhex("02000000000b02000000000a") + ETH_TEST.to_bytes(2, "big")
# payload: u32 run tag, u32 sequence, u64 CLOCK_MONOTONIC send time (ns), zero padding
PAYLOAD = struct.Struct("!IIQ")
FRAME_LEN = 64

SENDER = r"""
import os, random, socket, struct, sys, time
ifname, n, tag, cpu = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
try:
    os.sched_setaffinity(0, {cpu})
except OSError:
    pass
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
s.bind((ifname, 0))
head = bytes.fromhex(sys.argv[5])
pad = bytes(64 - len(head) - 16)
time.sleep(0.3)  # the receiver is polling by now
for i in range(n):
    s.send(head + struct.pack("!IIQ", tag, i, time.monotonic_ns()) + pad)
    end = time.perf_counter() + random.uniform(0.0002, 0.0012)
    while time.perf_counter() < end:
        pass
"""


def frame(tag: int, seq: int) -> bytes:
    f = HEAD + PAYLOAD.pack(tag, seq, time.monotonic_ns())
    return f + bytes(FRAME_LEN - len(f))


def _parse(batch: Any, n: int, tag: int) -> list[tuple[int, int]]:
    """(sequence, send time) of our frames among batch slots 0..n-1."""
    out = []
    for i in range(n):
        f = batch.frame(i)
        if len(f) >= 30 and f[12:14] == HEAD[12:14]:
            t, seq, sent = PAYLOAD.unpack_from(f, 14)
            if t == tag:
                out.append((seq, sent))
    return out


def run_same(ps: Any, tx: socket.socket, frames: int, tag: int) -> tuple[list[float], int]:
    from vecroute.packet.batch import PacketBatch

    batch = PacketBatch(256)
    lat: list[float] = []
    lost = 0
    for seq in range(frames):
        f = frame(tag, seq)
        t0 = time.monotonic_ns()
        tx.send(f)
        deadline = t0 + 1_000_000_000
        got = False
        while not got:
            n = ps.recv_batch(batch.buf, batch.meta, batch.ts, 0, 256, 0)
            now = time.monotonic_ns()
            if n and any(s == seq for s, _ in _parse(batch, n, tag)):
                lat.append((now - t0) / 1000)
                got = True
            elif now > deadline:
                lost += 1
                break
        end = time.perf_counter() + random.uniform(0.0002, 0.0012)
        while time.perf_counter() < end:
            pass
    return lat, lost


def run_cross(lab: Any, h1: str, a: str, ps: Any, frames: int, tag: int, cpu: int,
              sleep: bool) -> tuple[list[float], int]:  # fmt: skip
    from vecroute.packet.batch import PacketBatch

    batch = PacketBatch(256)
    child = lab.popen(
        h1,
        [sys.executable, "-c", SENDER, a, str(frames), str(tag), str(cpu), HEAD.hex()],
        stdout=subprocess.DEVNULL,
    )
    seen: dict[int, float] = {}
    try:
        deadline = time.monotonic() + 0.3 + frames * 0.0015 + 2
        while len(seen) < frames and time.monotonic() < deadline:
            if sleep and not ps.wait(100):
                continue
            n = ps.recv_batch(batch.buf, batch.meta, batch.ts, 0, 256, 0)
            if n:
                now = time.monotonic_ns()
                for seq, sent in _parse(batch, n, tag):
                    seen[seq] = (now - sent) / 1000
    finally:
        child.wait(timeout=10)
    return [seen[k] for k in sorted(seen)], frames - len(seen)


def one_run(mode: str, version: int, frames: int, timeout_ms: int, tag: int,
            cpus: list[int]) -> dict[str, Any]:  # fmt: skip
    from vecroute.io.af_packet import PacketSocket
    from vecroute.io.netns import Lab, entered

    with Lab("vl") as lab:
        h1, rt = lab.netns("h1"), lab.netns("rt")
        a, b = lab.veth(h1, rt, disable_ipv6=(True, True))
        with entered(rt):
            ps = PacketSocket(b, tx_frames=0, rx_version=version, block_timeout_ms=timeout_ms)
        with ps:
            if mode == "same":
                with entered(h1):
                    tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
                with tx:
                    tx.bind((a, 0))
                    run_same(ps, tx, 20, tag + 1)  # warm-up
                    lat, lost = run_same(ps, tx, frames, tag)
            else:
                lat, lost = run_cross(lab, h1, a, ps, frames, tag, cpus[-1], mode == "cross-wait")
    return {"lat_us": lat, "lost": lost}


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=500, help="frames per run (500)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per mode and version (5)")
    ap.add_argument("--timeout-ms", type=int, default=1, help="V3 block_timeout_ms (1)")
    ap.add_argument("--modes", default="same,cross,cross-wait")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("af_packet_latency: needs root (namespaces, AF_PACKET)")
    modes = [m for m in args.modes.split(",") if m]
    bad = set(modes) - {"same", "cross", "cross-wait"}
    if bad:
        raise SystemExit(f"af_packet_latency: unknown mode(s) {', '.join(sorted(bad))}")
    info = machine_info()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 and any(m != "same" for m in modes):
        raise SystemExit("af_packet_latency: cross modes need 2 CPUs")
    try:
        os.sched_setaffinity(0, {cpus[0]})
    except OSError:
        pass
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    tag = random.randrange(1 << 30)
    for rep in range(args.repeat):
        for mode in modes:
            for version in (2, 3):
                tag += 2
                eprint(f"run {rep + 1}/{args.repeat} {mode} V{version}")
                r = one_run(mode, version, args.frames, args.timeout_ms, tag, cpus)
                runs.setdefault((mode, version), []).append(r)
    out: dict[str, Any] = {}
    for (mode, version), rs in runs.items():
        allv = [x for r in rs for x in r["lat_us"]]
        out[f"{mode} V{version}"] = {
            "p50_us": pct(allv, 50),
            "p99_us": pct(allv, 99),
            "max_us": max(allv) if allv else float("nan"),
            "run_p50_us": summary([pct(r["lat_us"], 50) for r in rs]),
            "run_p99_us": summary([pct(r["lat_us"], 99) for r in rs]),
            "frames": len(allv),
            "lost": sum(r["lost"] for r in rs),
        }
    if args.json:
        print(json.dumps({"machine": info, "args": vars(args), "results": out}, indent=2))
        return
    print(machine_line(info))
    print(
        f"single 64-byte frames on veth, {args.frames} frames x {args.repeat} runs per row, "
        f"V3 block_timeout_ms={args.timeout_ms}; microseconds"
    )
    per_run = "per-run p50, median [min .. max]"
    print(f"{'':16s} {'p50':>8s} {'p99':>8s} {'max':>9s}  {per_run:34s} lost")
    for name, r in out.items():
        print(
            f"{name:16s} {r['p50_us']:8.1f} {r['p99_us']:8.1f} {r['max_us']:9.1f}  "
            f"{fmt_summary(r['run_p50_us'], '', 1):34s} {r['lost']}"
        )


if __name__ == "__main__":
    main()
