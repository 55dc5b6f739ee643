"""Operator tools: what a packet trace and a capture cost when they are on.

    python -m bench.operator_tools [--packets N] [--repeat R] [--json]

In memory, one core, a small router (two ports, two resolved next hops), N (default
2**18) 64-byte IPv4/UDP frames, batches of 256. Interleaved per repetition:

* ``graph``: ``PacketBatch.load`` + ``Graph.run`` over the frames, no trace armed;
* ``graph, trace armed``: the same with ``trace add 1000`` armed before every pass: the
  first 1000 packets are selected and recorded node by node (about 6000 records), the
  rest of the pass runs with the trace full;
* ``explain``: ``TraceExplainer.explain`` + ``render_text`` of a trace of 1000 packets
  (6000 records, every destination different), what ``ctl show trace`` costs the
  control plane per worker;
* ``pcapng``: ``CaptureSession.add`` of 4096 ring records of 64 bytes (one worker's ring),
  what a capture's drain costs the control plane, as records per second.

The cost with everything off is measured by ``bench.forwarding`` against the commit
before the tools (docs/BENCHMARKS.md, "Operator tools").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

from bench.common import eprint, fmt_summary, machine_info, machine_line, pin_to_one_cpu, summary

SRC_MAC = bytes.fromhex("020000000a10")
R0_MAC = bytes.fromhex("020000000001")


def _config() -> dict:
    return {
        "interfaces": [
            {"name": "eth0", "mac": "02:00:00:00:00:01", "addresses": ["198.51.100.1/24"]},
            {"name": "eth1", "mac": "02:00:00:00:00:02", "addresses": ["192.0.2.1/24"]},
        ],
        "routes": [{"prefix": "203.0.113.0/24", "via": ["192.0.2.2", "192.0.2.3"]}],
        "neighbors": [
            {"ip": "192.0.2.2", "mac": "02:00:00:00:bb:02", "interface": "eth1"},
            {"ip": "192.0.2.3", "mac": "02:00:00:00:bb:03", "interface": "eth1"},
            {"ip": "198.51.100.10", "mac": "02:00:00:00:0a:10", "interface": "eth0"},
        ],
    }


def _frames(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    import struct

    def ip4_header_checksum(h: bytes) -> int:
        s = sum(struct.unpack("!10H", h))
        s = (s & 0xFFFF) + (s >> 16)
        s = (s & 0xFFFF) + (s >> 16)
        return ~s & 0xFFFF

    out = bytearray()
    rng = np.random.default_rng(1)
    for i in range(n):
        dst = bytes([203, 0, 113, int(rng.integers(1, 255))])
        ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 50, i & 0xFFFF, 0, 64, 17, 0,
                                   bytes([198, 51, 100, 10]), dst))
        struct.pack_into("!H", ip, 10, ip4_header_checksum(bytes(ip)))
        udp = struct.pack("!HHHH", 1024 + (i & 1023), 80, 30, 0) + b"\0" * 22
        out += R0_MAC + SRC_MAC + b"\x08\x00" + ip + udp
    data = np.frombuffer(bytes(out), np.uint8)
    lens = np.full(n, 64, np.int32)
    offs = np.arange(n, dtype=np.int64) * 64
    return data, offs, lens


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--packets", type=int, default=1 << 18)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    cpu = pin_to_one_cpu()

    from vecroute.control.capture import CaptureSession, open_capture_file
    from vecroute.control.config import parse_config
    from vecroute.control.trace import TraceExplainer, arm, render_text, snapshot
    from vecroute.graph import trace as T
    from vecroute.graph.dataplane import build_dataplane
    from vecroute.io.capture import CAP_RX, CR_CAPLEN, CR_COLS, CR_DIR, CR_LEN
    from vecroute.packet.batch import PacketBatch

    dp = build_dataplane(parse_config(_config()))
    batch = PacketBatch(256)
    graph = dp.graph(batch)
    n = args.packets
    data, offs, lens = _frames(n)
    ts = np.zeros(n, np.int64)
    rx = np.zeros(n, np.int32)

    def run_all() -> float:
        t0 = time.process_time()
        pos = 0
        while pos < n:
            k = batch.load(data, offs, lens, ts, rx, pos, n - pos)
            graph.run(batch, 0)
            pos += k
        return time.process_time() - t0

    run_all()  # compile / warm
    arm(graph.state, T.MAX_TRACE_PACKETS)
    run_all()
    res: dict[str, list[float]] = {"off_mpps": [], "armed_mpps": [], "explain_ms": [],
                                   "pcapng_krps": []}
    tmp = tempfile.mkdtemp(prefix="vr-bench-")
    os.chmod(tmp, 0o700)
    rec = np.zeros(CR_COLS, np.int64)
    rec[CR_DIR], rec[CR_CAPLEN], rec[CR_LEN] = CAP_RX, 64, 64
    ring = [(rec, bytes(data[:64]))] * 4096
    for r in range(args.repeat):
        graph.state.trace_ctl[T.TR_LEFT] = 0
        res["off_mpps"].append(n / run_all() / 1e6)
        arm(graph.state, T.MAX_TRACE_PACKETS)
        res["armed_mpps"].append(n / run_all() / 1e6)
        snap = snapshot(graph.state)  # the 1000 packets just traced
        t0 = time.perf_counter()
        render_text(TraceExplainer(dp.fib).explain(snap))
        res["explain_ms"].append((time.perf_counter() - t0) * 1000)
        fd = open_capture_file(tmp, f"b{r}.pcapng")
        sess = CaptureSession(f"{tmp}/b{r}.pcapng", fd, "any", -1, "rx", 10**6, 2048,
                              1 << 40, ["eth0", "eth1"])
        t0 = time.perf_counter()
        sess.add(ring)
        res["pcapng_krps"].append(4096 / (time.perf_counter() - t0) / 1000)
        sess.close()
        os.unlink(f"{tmp}/b{r}.pcapng")
        eprint(f"rep {r + 1}/{args.repeat}: off {res['off_mpps'][-1]:.2f} Mpps, armed "
               f"{res['armed_mpps'][-1]:.2f} Mpps, explain {res['explain_ms'][-1]:.0f} ms "
               f"({snap['rec'].shape[0]} records), pcapng {res['pcapng_krps'][-1]:.0f} K/s")
    os.rmdir(tmp)
    out = {"machine": machine_info(), "pinned_cpu": cpu, "packets": n,
           **{k: summary(v) for k, v in res.items()}}
    if args.json:
        json.dump(out, sys.stdout, indent=2)
        print()
        return 0
    print(machine_line(out["machine"]))
    print(f"graph, nothing armed       {fmt_summary(out['off_mpps'], 'Mpps per CPU-s')}")
    print(f"graph, trace 1000 armed    {fmt_summary(out['armed_mpps'], 'Mpps per CPU-s')}")
    print(f"show trace, 1000 packets   {fmt_summary(out['explain_ms'], 'ms')}")
    print(f"pcapng writing             {fmt_summary(out['pcapng_krps'], 'K records/s')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
