"""linux-cp punt + inject latency, idle and under full forwarding load.

    sudo python -m bench.punt_latency [--repeat 3] [--probes 200] [--json]

What a BGP keepalive or an OSPF hello goes through: h1 sends a UDP datagram to the
router's address (198.51.100.1, port 7777), vecroute punts it to its mirror (linux-cp),
a UDP echo server in Linux on the mirror answers, and the answer comes back through the
mirror, worker 0's inject ring and the port. Probes every 20 ms (a reply later than 1 s
counts as lost); per phase: p50 / p99 / max RTT and losses. The *loaded* phase runs
``vecroute gen`` on h1 at full rate (64-byte UDP, 256 flows, to h2 through vecroute)
beside the probes, and reports the rate vecroute forwarded meanwhile (port 1's
tx_packets), what h1 offered (its veth's tx_packets) and what vecroute received (port 0's
rx_packets: the rest the kernel dropped, its RX ring full), and the punt counters. Phases
alternate idle, loaded, idle, ... (``--repeat`` pairs). ``--rate`` loads with that many
frames/s instead of as many as the generator can send. ``--variants on,off`` runs each
repeat once with the control rings (``[router] control_ring``, the default) and once
without, restarting the router between them, and reports both side by side, with what the
kernel dropped on each ring (``show sockets``).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PORT = 7777
ECHO = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "s.bind((sys.argv[1], int(sys.argv[2])))\n"
    "print('ready', flush=True)\n"
    "while True:\n"
    "    d, a = s.recvfrom(2048)\n"
    "    s.sendto(d, a)\n"
)
PROBE = (
    "import json, socket, struct, sys, time\n"
    "dst, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])\n"
    "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "rtts = []\n"
    "for k in range(n):\n"
    "    t0 = time.perf_counter()\n"
    "    s.sendto(struct.pack('!I', k), (dst, port))\n"
    "    while True:\n"
    "        left = t0 + 1.0 - time.perf_counter()  # a stale reply does not extend it\n"
    "        try:\n"
    "            if left <= 0:\n"
    "                raise TimeoutError\n"
    "            s.settimeout(left)\n"
    "            d = s.recv(64)\n"
    "        except TimeoutError:\n"
    "            rtts.append(None)\n"
    "            break\n"
    "        if struct.unpack('!I', d[:4])[0] == k:\n"
    "            rtts.append((time.perf_counter() - t0) * 1e3)\n"
    "            break\n"
    "    time.sleep(max(0.0, 0.02 - (time.perf_counter() - t0)))\n"
    "print(json.dumps(rtts))\n"
)


def summary(rtts: list[float | None]) -> dict:
    got = sorted(x for x in rtts if x is not None)
    if not got:
        return {"n": len(rtts), "lost": len(rtts)}

    def pct(q: float) -> float:
        return got[min(len(got) - 1, max(0, -(-len(got) * q // 100) - 1))]

    return {"n": len(rtts), "lost": len(rtts) - len(got), "p50_ms": round(pct(50), 3),
            "p99_ms": round(pct(99), 3), "max_ms": round(got[-1], 3)}


def counts(t, lab) -> dict[str, int]:
    """h1's frames sent, vecroute's port-0 frames received, the router's counters (the
    punt path's: host-punt, punt-policed, punt-queue-full, ...) and its mirror's."""
    from vecroute.io.netns import run_in

    out = {"offered": int(run_in(t.h1, ["cat", f"/sys/class/net/{t.h1_if}/statistics/tx_packets"])),
           "received": t.ctl("show", "interfaces")["data"][0]["rx_packets"]}
    for row in t.ctl("show", "sockets")["data"]:
        if row["interface"] == t.ports[0]:
            out[f"{row['ring']}_ring_rx"] = row["rx_packets"]
            out[f"{row['ring']}_ring_kernel_drops"] = row["rx_kernel_drops"]
    errs = {x["counter"]: x["count"] for x in t.ctl("show", "errors")["data"]}
    lcp = t.ctl("show", "linux-cp")["data"]["pairs"][0]
    out.update(errs)
    out.update({f"mirror_{k}": lcp[k] for k in ("punted", "punt_drops", "injected",
                                                 "inject_drops", "inject_policed")})
    return out


def restart(t, lab, control_ring: bool, echo):
    """(Re)start the router with or without control rings, and the echo server on its
    mirror (a restart makes the mirrors anew)."""
    from vecroute.lab import RT0_V4, start_router

    if echo is not None:
        echo.kill()
        echo.wait()
    if t.router is not None:
        t.router.terminate()
        t.router.wait(timeout=60)
    text = re.sub(r"\ncontrol_ring = \w+", "", t.config.read_text())
    t.config.write_text(text.replace("[router]\n", f"[router]\ncontrol_ring = "
                                     f"{'true' if control_ring else 'false'}\n", 1))
    start_router(t)
    echo = lab.popen(t.rt, [sys.executable, "-c", ECHO, RT0_V4, str(PORT)],
                     stdout=subprocess.PIPE, text=True)
    assert echo.stdout.readline().strip() == "ready"
    subprocess.run(["ip", "netns", "exec", t.h1, "ping", "-c", "2", "-W", "2", RT0_V4],
                   capture_output=True, timeout=30)  # neighbours resolved
    return echo


def phase_run(t, lab, phase: str, args) -> dict:
    """One phase: probes, alone or beside the generator; the row of results."""
    from vecroute.lab import H1_V4, H2_V4, RT0_V4

    port_mac = t.ctl("show", "interfaces")["data"][0]["mac"]
    gen = None
    tx0 = t.ctl("show", "interfaces")["data"][1]["tx_packets"]
    t0 = time.monotonic()
    if phase == "loaded":  # ended below, once the probes are done
        gen = lab.popen(t.h1, [sys.executable, "-m", "vecroute.cli", "gen", t.h1_if, "--dst",
                               H2_V4, "--src", H1_V4, "--dst-mac", port_mac, "--rate",
                               str(args.rate), "--flows", "256", "--duration", "3600"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rx0 = t.ctl("show", "interfaces")["data"][0]["rx_packets"]
        deadline = time.monotonic() + 60
        while (t.ctl("show", "interfaces")["data"][0]["rx_packets"] - rx0 < 100_000
               and time.monotonic() < deadline):
            time.sleep(0.2)  # the generator started (numba cache, ring)
        tx0 = t.ctl("show", "interfaces")["data"][1]["tx_packets"]
        t0 = time.monotonic()
    before = counts(t, lab)
    out = lab.run(t.h1, [sys.executable, "-c", PROBE, RT0_V4, str(PORT), str(args.probes)],
                  timeout=args.probes * 2 + 60)
    tx1 = t.ctl("show", "interfaces")["data"][1]["tx_packets"]
    secs = time.monotonic() - t0
    after = counts(t, lab)
    delta = {k: after[k] - before.get(k, 0) for k in after}
    if gen is not None:
        gen.terminate()
        gen.wait(timeout=30)
    row = summary(json.loads(out.strip().splitlines()[-1]))
    row["forwarded_pps"] = round((tx1 - tx0) / secs)
    row["offered_pps"] = round(delta.pop("offered") / secs)
    row["received_pps"] = round(delta.pop("received") / secs)
    row["counters"] = {k: v for k, v in delta.items() if v}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--probes", type=int, default=200)
    ap.add_argument("--rate", type=float, default=0.0, help="generator frames/s (0: all)")
    ap.add_argument("--variants", default="on",
                    help="control rings on, off, or both in turn (on,off)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from vecroute.io.netns import Lab
    from vecroute.lab import build

    variants = [v.strip() for v in args.variants.split(",")]
    if not variants or any(v not in ("on", "off") for v in variants):
        ap.error("--variants: on, off or on,off")
    rows: dict[str, list[dict]] = {f"{p} ({v})": [] for v in variants
                                   for p in ("idle", "loaded")}
    with Lab("pl") as lab, tempfile.TemporaryDirectory() as d:
        t = build(lab, Path(d), host_ifs=("plm0", "plm1"), extra_config="[linux_cp]\n")
        echo = None
        try:
            for _ in range(args.repeat):
                for v in variants:
                    if len(variants) > 1 or echo is None:
                        echo = restart(t, lab, v == "on", echo)
                    for phase in ("idle", "loaded"):
                        row = phase_run(t, lab, phase, args)
                        rows[f"{phase} ({v})"].append(row)
                        print(f"{phase:6s} ({v}) {row}", file=sys.stderr, flush=True)
        finally:
            if echo is not None:
                echo.kill()
                echo.wait()
    result = {}
    for phase, rs in rows.items():
        got = [r for r in rs if "p50_ms" in r]
        result[phase] = {
            "runs": rs,
            "p50_ms_median": statistics.median(r["p50_ms"] for r in got) if got else None,
            "p99_ms_max": max(r["p99_ms"] for r in got) if got else None,
            "max_ms": max(r["max_ms"] for r in got) if got else None,
            "lost": sum(r["lost"] for r in rs),
            "probes": sum(r["n"] for r in rs),
            "forwarded_pps_median": statistics.median(r["forwarded_pps"] for r in rs),
        }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for phase, r in result.items():
            print(f"{phase:13s} punt+inject RTT p50 {r['p50_ms_median']} ms, p99 (worst run) "
                  f"{r['p99_ms_max']} ms, max {r['max_ms']} ms, lost {r['lost']}/{r['probes']};"
                  f" vecroute forwarded {r['forwarded_pps_median']:,} pps meanwhile")


if __name__ == "__main__":
    main()
