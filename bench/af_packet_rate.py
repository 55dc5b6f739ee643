"""AF_PACKET ring rates on a veth pair: how many 64-byte frames/s the RX and TX paths move.

    python -m bench.af_packet_rate [--seconds S] [--repeat R] [--rx-versions 2,3]
                                   [--parts burst,rx,tx] [--burst N] [--json]

Needs root.  A namespace ``h1`` and a namespace ``rt`` are joined by a veth pair (IPv6
off on both ends, so the only traffic is ours).

* RX: trafgen (Debian netsniff-ng; its own TX ring, qdisc bypass) sends 64-byte IPv4/UDP
  frames from h1 as fast as it can; a PacketSocket in rt waits/receives batches of 256
  into a PacketBatch.  Reported: frames/s put into the batch, the sender's rate, the
  frames the kernel dropped because our ring was full (tp_drops), and our CPU use.
  Both RX ring versions: TPACKET_V2 (frame by frame, the default) and TPACKET_V3
  (blocks, block_timeout_ms 1), each with the same 16 MiB of ring.
  On veth the kernel half of the receive path (veth -> backlog -> tpacket_rcv copy into
  the ring) runs on the sender's CPU, so the two are pinned to different CPUs: we run on
  CPU 0, trafgen's sending worker on CPU 1.  (``taskset -c 1 trafgen -P 1`` does not do
  that: trafgen binds its worker i to CPU i itself, so its one worker ran on CPU 0 next
  to us and the kernel's receive work was billed to our process.  Here trafgen forks
  workers for CPUs 0 and 1 and only CPU 1 has packets: ``cpu(1): {...}``.)
  Also reported: our CPU time per frame and frames per batch -- at a rate the receiver
  keeps up with, V2 wakes it for every frame or two, V3 once per block.
* burst: the walker alone, as under overload: trafgen -n N puts N frames into the ring
  before recv_batch (batches of 256) drains them against the clock; ns per frame.
* TX: the PacketSocket in rt sends batches of 256 64-byte frames (one send() each);
  reported: frames/s queued, frames/s the peer interface counted as received, ring-full
  drops.  The send() also pays for the peer's receive (softirq in our context).

Variants (vnet_hdr on/off, RX ring version) are interleaved and repeated: median
[min .. max].
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import struct
import subprocess
import time
from typing import Any

import numpy as np

from bench.common import eprint, fmt_summary, machine_info, machine_line, summary


def _frame() -> bytes:
    """64 bytes: Ethernet, IPv4 192.0.2.1 -> 198.51.100.1, UDP 1024 -> 9, 22 zero bytes."""
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 50, 0, 0x4000, 64, 17, 0,
                               bytes([192, 0, 2, 1]), bytes([198, 51, 100, 1])))  # fmt: skip
    s = sum(struct.unpack("!10H", ip))
    s = (s & 0xFFFF) + (s >> 16)
    struct.pack_into("!H", ip, 10, ~((s & 0xFFFF) + (s >> 16)) & 0xFFFF)
    eth = bytes.fromhex("02000000000b02000000000a0800")
    return eth + bytes(ip) + struct.pack("!HHHH", 1024, 9, 30, 0) + bytes(22)


FRAME = _frame()
UNITS = {
    "cpu": ("", 2),
    "cpu_ns_per_frame": ("ns", 0),
    "frames_per_batch": ("", 1),
    "ns_per_frame": ("ns", 1),
    "mpps": ("Mpps", 2),
    "kernel_drops": ("", 0),
}


def trafgen_conf(frame: bytes, cpu: int | None = None) -> str:
    where = "" if cpu is None else f"cpu({cpu}): "
    return where + "{ " + ", ".join(f"0x{b:02x}" for b in frame) + " }\n"


SENDER_CPU = 1


def start_trafgen(lab: Any, ns: str, ifname: str, conf: str,
                  count: int = 0) -> subprocess.Popen[bytes]:  # fmt: skip
    """trafgen sending FRAME from CPU SENDER_CPU only (see the module docstring), forever
    or ``count`` frames, in a process group of its own so that stop_trafgen reaches its
    workers."""
    with open(conf, "w") as f:
        f.write(trafgen_conf(FRAME, SENDER_CPU))
    num = ["-n", str(count)] if count else []
    return lab.popen(
        ns,
        ["trafgen", "-o", ifname, "-i", conf, "-P", str(SENDER_CPU + 1), "-C", "-Q", *num],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def stop_trafgen(gen: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGINT, signal.SIGKILL):
        try:
            os.killpg(gen.pid, sig)
        except ProcessLookupError:
            return
        try:
            gen.wait(timeout=3)
            return
        except subprocess.TimeoutExpired:
            continue


def if_counter(lab: Any, ns: str, ifname: str, key: str) -> int:
    out = lab.run(ns, ["ip", "-s", "-j", "link", "show", "dev", ifname])
    stats = json.loads(out)[0]["stats64"]
    return int(stats[key.split(".")[0]][key.split(".")[1]])


def rx_run(vnet: bool, seconds: float, rx_version: int = 2) -> dict[str, float]:
    from vecroute.io.af_packet import PacketSocket
    from vecroute.io.netns import Lab, entered
    from vecroute.packet.batch import PacketBatch

    with Lab("vb") as lab:
        h1, rt = lab.netns("h1"), lab.netns("rt")
        a, b = lab.veth(h1, rt, disable_ipv6=(True, True))
        with entered(rt):
            ps = PacketSocket(b, vnet_hdr=vnet, rx_version=rx_version)
        conf = f"/tmp/vecroute-trafgen-{os.getpid()}.cfg"
        gen = start_trafgen(lab, h1, a, conf)
        batch = PacketBatch(256)
        with ps:
            end = time.monotonic() + 0.3  # warm up: numba, trafgen start
            while time.monotonic() < end:
                if ps.wait(10):
                    ps.recv_batch(batch.buf, batch.meta, batch.ts, 0, 256, 0)
            drops0 = int(ps.stats[2])
            sent0 = if_counter(lab, h1, a, "tx.packets")
            got = 0
            batches = 0
            c0, t0 = time.process_time(), time.monotonic()
            end = t0 + seconds
            while time.monotonic() < end:
                if ps.wait(10):
                    got += ps.recv_batch(batch.buf, batch.meta, batch.ts, 0, 256, 0)
                    batches += 1
            wall = time.monotonic() - t0
            cpu = time.process_time() - c0
            sent = if_counter(lab, h1, a, "tx.packets") - sent0
            drops = int(ps.stats[2]) - drops0
        stop_trafgen(gen)
        os.unlink(conf)
    return {
        "rx_pps": got / wall,
        "sender_pps": sent / wall,
        "kernel_drops_pps": drops / wall,
        "cpu": cpu / wall,
        "cpu_ns_per_frame": cpu / max(got, 1) * 1e9,
        "frames_per_batch": got / max(batches, 1),
    }


def burst_run(vnet: bool, rx_version: int, frames: int, bursts: int) -> dict[str, float]:
    """The walker alone: ``frames`` frames are put into the ring first (trafgen -n on CPU
    1: the frames come from another CPU's cache, as in a router under load), then
    recv_batch (batches of 256) drains them against the clock.  Median of ``bursts``
    bursts."""
    from vecroute.io.af_packet import PacketSocket
    from vecroute.io.netns import Lab, entered
    from vecroute.packet.batch import PacketBatch

    per_frame: list[float] = []
    with Lab("vb") as lab:
        h1, rt = lab.netns("h1"), lab.netns("rt")
        a, b = lab.veth(h1, rt, disable_ipv6=(True, True))
        with entered(rt):
            ps = PacketSocket(b, vnet_hdr=vnet, rx_version=rx_version, tx_frames=0)
        conf = f"/tmp/vecroute-trafgen-{os.getpid()}.cfg"
        batch = PacketBatch(256)
        with ps:
            for k in range(bursts + 1):  # the first one warms up
                gen = start_trafgen(lab, h1, a, conf, frames)
                try:
                    gen.wait(timeout=10)
                finally:
                    stop_trafgen(gen)
                time.sleep(0.02)  # V3: the last block is retired by its timer
                got = 0
                t0 = time.perf_counter_ns()
                while got < frames:
                    n = ps.recv_batch(batch.buf, batch.meta, batch.ts, 0, 256, 0)
                    if n == 0:
                        break
                    got += n
                dt = time.perf_counter_ns() - t0
                if got != frames:
                    raise RuntimeError(f"burst: {got} of {frames} frames in the ring")
                if k:
                    per_frame.append(dt / frames)
            drops = int(ps.stats[2])
        os.unlink(conf)
    ns = statistics.median(per_frame)
    return {"ns_per_frame": ns, "mpps": 1e3 / ns, "kernel_drops": drops}


def tx_run(vnet: bool, seconds: float) -> dict[str, float]:
    from vecroute.io.af_packet import PacketSocket
    from vecroute.io.netns import Lab, entered
    from vecroute.packet.batch import PacketBatch

    with Lab("vb") as lab:
        h1, rt = lab.netns("h1"), lab.netns("rt")
        a, b = lab.veth(h1, rt, disable_ipv6=(True, True))
        with entered(rt):
            ps = PacketSocket(b, vnet_hdr=vnet)
        batch = PacketBatch(256)
        n = 256
        data = np.frombuffer(FRAME * n, np.uint8)
        offs = np.arange(n, dtype=np.int64) * len(FRAME)
        lens = np.full(n, len(FRAME), np.int32)
        batch.load(data, offs, lens, np.zeros(n, np.int64), np.zeros(n, np.int32), 0, n)
        idx = np.arange(n, dtype=np.int64)
        with ps:
            end = time.monotonic() + 0.3
            while time.monotonic() < end:
                ps.send_batch(batch.buf, batch.meta, idx, n)
            full0 = int(ps.stats[7])
            rx0 = if_counter(lab, h1, a, "rx.packets")
            queued = 0
            c0, t0 = time.process_time(), time.monotonic()
            end = t0 + seconds
            while time.monotonic() < end:
                queued += ps.send_batch(batch.buf, batch.meta, idx, n)
            wall = time.monotonic() - t0
            cpu = time.process_time() - c0
            time.sleep(0.05)
            delivered = if_counter(lab, h1, a, "rx.packets") - rx0
            full = int(ps.stats[7]) - full0
    return {
        "tx_pps": queued / wall,
        "peer_rx_pps": delivered / wall,
        "ring_full_pps": full / wall,
        "cpu": cpu / wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rx-versions", default="2,3", help="RX ring versions to measure (2,3)")
    ap.add_argument("--parts", default="burst,rx,tx", help="what to measure (burst,rx,tx)")
    ap.add_argument("--burst", type=int, default=5000,
                    help="frames per burst for the drain measurement, 0: none (5000)")  # fmt: skip
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    versions = [int(v) for v in args.rx_versions.split(",") if v]
    parts = set(args.parts.split(","))
    if not parts <= {"burst", "rx", "tx"}:
        raise SystemExit("af_packet_rate: --parts takes burst, rx and/or tx")
    if not set(versions) <= {2, 3}:
        raise SystemExit("af_packet_rate: --rx-versions takes 2 and/or 3")
    if os.geteuid() != 0:
        raise SystemExit("af_packet_rate: needs root (namespaces, AF_PACKET)")
    have_trafgen = shutil.which("trafgen") is not None
    if not have_trafgen:
        eprint("trafgen not found (apt-get install netsniff-ng): RX is skipped")
    info = machine_info()  # before pinning, so it shows the CPUs the machine allows
    if have_trafgen and len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("af_packet_rate: RX needs 2 CPUs (receiver on 0, trafgen on 1)")
    try:
        os.sched_setaffinity(0, {0})
    except OSError:
        pass
    results: dict[str, list[dict[str, float]]] = {}
    for _ in range(args.repeat):
        for vnet in (True, False):
            if "burst" in parts and args.burst and have_trafgen:
                for v in versions:
                    r = burst_run(vnet, v, args.burst, 10)
                    results.setdefault(f"burst V{v} vnet={vnet}", []).append(r)
            if "rx" in parts and have_trafgen:
                for v in versions:
                    r = rx_run(vnet, args.seconds, v)
                    results.setdefault(f"rx V{v} vnet={vnet}", []).append(r)
            if "tx" in parts:
                results.setdefault(f"tx vnet={vnet}", []).append(tx_run(vnet, args.seconds))
    out = {
        name: {k: summary([r[k] for r in runs]) for k in runs[0]} for name, runs in results.items()
    }
    if args.json:
        print(json.dumps({"machine": info, "results": out}, indent=2))
        return
    print(machine_line(info))
    print(f"64-byte frames on veth, {args.seconds:g} s x {args.repeat}, median [min .. max]")
    for name, fields in out.items():
        print(name)
        for k, s in fields.items():
            unit, digits = UNITS.get(k, ("pps", 0))
            print(f"  {k:18s} {fmt_summary(s, unit, digits)}")


if __name__ == "__main__":
    main()
