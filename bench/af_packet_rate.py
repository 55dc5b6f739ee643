"""AF_PACKET ring rates on a veth pair: how many 64-byte frames/s the RX and TX paths move.

    python -m bench.af_packet_rate [--seconds S] [--repeat R] [--json]

Needs root.  A namespace ``h1`` and a namespace ``rt`` are joined by a veth pair (IPv6
off on both ends, so the only traffic is ours).

* RX: trafgen (Debian netsniff-ng; its own TX ring, qdisc bypass) sends 64-byte IPv4/UDP
  frames from h1 as fast as it can; a PacketSocket in rt waits/receives batches of 256
  into a PacketBatch.  Reported: frames/s put into the batch, the sender's rate, the
  frames the kernel dropped because our ring was full (tp_drops), and our CPU use.
  On veth the kernel half of the receive path (veth -> backlog -> tpacket_rcv copy into
  the ring) runs on the sender's CPU, so the two are pinned to different CPUs.
* TX: the PacketSocket in rt sends batches of 256 64-byte frames (one send() each);
  reported: frames/s queued, frames/s the peer interface counted as received, ring-full
  drops.  The send() also pays for the peer's receive (softirq in our context).

Variants (vnet_hdr on/off) are interleaved and repeated: median [min .. max].
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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


def trafgen_conf(frame: bytes) -> str:
    return "{ " + ", ".join(f"0x{b:02x}" for b in frame) + " }\n"


def if_counter(lab: Any, ns: str, ifname: str, key: str) -> int:
    out = lab.run(ns, ["ip", "-s", "-j", "link", "show", "dev", ifname])
    stats = json.loads(out)[0]["stats64"]
    return int(stats[key.split(".")[0]][key.split(".")[1]])


def rx_run(vnet: bool, seconds: float) -> dict[str, float]:
    from vecroute.io.af_packet import PacketSocket
    from vecroute.io.netns import Lab, entered
    from vecroute.packet.batch import PacketBatch

    with Lab("vb") as lab:
        h1, rt = lab.netns("h1"), lab.netns("rt")
        a, b = lab.veth(h1, rt, disable_ipv6=(True, True))
        with entered(rt):
            ps = PacketSocket(b, vnet_hdr=vnet)
        conf = f"/tmp/vecroute-trafgen-{os.getpid()}.cfg"
        with open(conf, "w") as f:
            f.write(trafgen_conf(FRAME))
        gen = lab.popen(
            h1,
            ["taskset", "-c", "1", "trafgen", "-o", a, "-i", conf, "-P", "1", "-C", "-Q"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        batch = PacketBatch(256)
        with ps:
            end = time.monotonic() + 0.3  # warm up: numba, trafgen start
            while time.monotonic() < end:
                if ps.wait(10):
                    ps.recv_batch(batch.buf, batch.meta, batch.ts, 0, 256, 0)
            drops0 = int(ps.stats[2])
            sent0 = if_counter(lab, h1, a, "tx.packets")
            got = 0
            c0, t0 = time.process_time(), time.monotonic()
            end = t0 + seconds
            while time.monotonic() < end:
                if ps.wait(10):
                    got += ps.recv_batch(batch.buf, batch.meta, batch.ts, 0, 256, 0)
            wall = time.monotonic() - t0
            cpu = time.process_time() - c0
            sent = if_counter(lab, h1, a, "tx.packets") - sent0
            drops = int(ps.stats[2]) - drops0
        gen.kill()
        os.unlink(conf)
    return {
        "rx_pps": got / wall,
        "sender_pps": sent / wall,
        "kernel_drops_pps": drops / wall,
        "cpu": cpu / wall,
    }


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
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("af_packet_rate: needs root (namespaces, AF_PACKET)")
    have_trafgen = shutil.which("trafgen") is not None
    if not have_trafgen:
        eprint("trafgen not found (apt-get install netsniff-ng): RX is skipped")
    info = machine_info()  # before pinning, so it shows the CPUs the machine allows
    try:
        os.sched_setaffinity(0, {0})
    except OSError:
        pass
    results: dict[str, list[dict[str, float]]] = {}
    for _ in range(args.repeat):
        for vnet in (True, False):
            if have_trafgen:
                results.setdefault(f"rx vnet={vnet}", []).append(rx_run(vnet, args.seconds))
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
            unit = "" if k == "cpu" else " pps"
            digits = 2 if k == "cpu" else 0
            print(f"  {k:18s} {fmt_summary(s, unit, digits)}")


if __name__ == "__main__":
    main()
