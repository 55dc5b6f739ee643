"""Latency and TCP throughput through the router: the Linux kernel vs vecroute, side by side.

    python -m bench.latency [--repeat N] [--variants kernel,vecroute] [--ping-count N]
                            [--load-pps PPS] [--iperf-seconds S] [--nice N]
                            [--json] [--save PATH]

Needs root, iproute2 (ip, tc with cls_bpf), ping (iputils), iperf3, taskset; trafgen
(Debian netsniff-ng) with ``--load-gen trafgen``.

Topology (vecroute.lab.build, fresh for every run, removed afterwards by Lab):

    h1 198.51.100.10 2001:db8:1::10 --veth-- [p0 router p1] --veth-- h2 203.0.113.10 2001:db8:2::10

Variants (the router parts of bench/live.py, reused from there):

* ``kernel``: Linux forwards in the router namespace (bench.live.setup_kernel_router with
  IPv6: the router addresses on p0/p1, IPv4 and IPv6 forwarding on); on veth its
  forwarding runs in softirq on the sending CPU.
* ``vecroute``: ``vecroute run`` with the vecroute.lab config (``workers = 1``), pinned to
  CPU 1 (bench.live.start_vecroute).

Every run, in this order:

1. idle RTT: ``ping -i 0.01 -c N`` h1 -> h2 (IPv4): p50 / p90 / p99 / max;
2. loaded RTT: the same ping while a generator on CPU 0 sends ``--load-pps`` 64-byte UDP
   frames h1 -> h2 through the router (bench.live's flow; h2 drops them at tc ingress with
   bench.live's sink, so its stack answers nothing): p50 / p99, and the load actually
   delivered. The generator is ``vecroute gen --rate`` (vectors of pps/1000 frames, i.e.
   20-frame bursts every millisecond at 20 kpps) or, with ``--load-gen trafgen``,
   bench.live.start_light_load (``trafgen -t GAP``, one sleep per frame, the gap
   calibrated in up to three 0.4 s tries: it can miss badly when the machine is busy, once
   here 5.5 and 14 kpps instead of 20k);
3. TCP throughput: ``iperf3 -t S`` h1 -> h2 over IPv4, then over IPv6, one stream, the
   hosts' offloads left at the veth defaults (TSO/GSO/checksum offload on: large GSO
   packets and partial checksums reach the router): the receiver's bit rate.

The generator's and the router's sessions get nice ``--nice`` (bench.live.start_boosted).
Variants run interleaved (kernel vecroute kernel vecroute ...), each ``--repeat`` times.
RTT percentiles are over all replies of all runs of a variant (nearest rank, lost replies
left out and counted); throughputs are reported as median [min .. max] over runs, compared
with ministat (vecroute.measure.stat) when there are at least 3 runs, with the ratio of
the medians vecroute / kernel.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import eprint, fmt_summary, machine_info, machine_line, summary
from bench.live import (
    DPORT,
    GEN_CPU,
    PRIORITY,
    SPORT_BASE,
    install_sink,
    link_stats,
    percentile,
    ping,
    setup_kernel_router,
    sink_counts,
    start_boosted,
    start_light_load,
    start_vecroute,
    stop,
    trafgen_config,
)

VARIANTS = ("kernel", "vecroute")
#: optional: vecroute with `[router] poll = "busy"` (the worker never sleeps: no wake-up on
#: an idle link's first packet, one core at 100 %)
EXTRA_VARIANTS = ("vecroute-busy",)
LOAD_GENERATORS = ("vecroute-gen", "trafgen")
TOOLS = ("tc", "ping", "iperf3", "taskset")


# -- background load ------------------------------------------------------------------------


def start_gen_load(lab: Any, t: Any, dst_mac: str, pps: int) -> subprocess.Popen:
    """``vecroute gen`` in h1 on the generator CPU: bench.live's flow (64-byte UDP
    198.51.100.10:1024-1279 -> 203.0.113.10:9, 256 flows), paced to ``pps`` (vectors of
    pps/1000 frames on a schedule kept from the start, so the mean rate holds even when
    a sleep overshoots; trafgen ``-t`` sleeps once per frame and its calibrated gap can
    miss on a busy machine). Returns once frames are leaving."""
    from vecroute.lab import H1_V4, H2_V4

    argv = ["taskset", "-c", str(GEN_CPU), sys.executable, "-m", "vecroute.cli", "gen",
            t.h1_if, "--src", H1_V4, "--dst", H2_V4, "--dst-mac", dst_mac, "--size", "64",
            "--sport", str(SPORT_BASE), "--flows", "256", "--dport", str(DPORT),
            "--rate", str(pps), "--duration", "86400"]  # fmt: skip
    g = start_boosted(lab, t.h1, argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300  # a first run compiles the generator's kernels
    tx0 = link_stats(lab, t.h1, t.h1_if)["tx"]
    while time.monotonic() < deadline:
        if g.poll() is not None:
            raise RuntimeError(f"vecroute gen exited: {g.stderr.read().decode()[-500:]}")
        if link_stats(lab, t.h1, t.h1_if)["tx"] - tx0 > pps // 10:
            time.sleep(0.2)
            return g
        time.sleep(0.1)
    stop(g)
    raise RuntimeError("vecroute gen sent nothing within 300 s")


# -- measurements ---------------------------------------------------------------------------


def rtt_stats(rtts: list[float], sent: int) -> dict[str, Any]:
    return {
        "n": len(rtts),
        "lost": sent - len(rtts),
        "p50_ms": percentile(rtts, 50),
        "p90_ms": percentile(rtts, 90),
        "p99_ms": percentile(rtts, 99),
        "max_ms": max(rtts) if rtts else None,
    }


def iperf3(lab: Any, t: Any, dst: str, seconds: float, port: int) -> dict[str, Any]:
    """One iperf3 TCP run h1 -> dst (h2): the receiver's bit rate and the retransmits."""
    srv = lab.popen(t.h2, ["iperf3", "-s", "-1", "-p", str(port)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        out, res = "", {}
        for _ in range(20):  # until the server listens
            time.sleep(0.2)
            out = lab.run(t.h1, ["iperf3", "-c", dst, "-p", str(port), "-t", f"{seconds:g}",
                                 "-J"], check=False, timeout=seconds + 30)  # fmt: skip
            with contextlib.suppress(ValueError):
                res = json.loads(out)
            if "end" in res and "sum_received" in res["end"]:
                break
            if "unable to connect" not in res.get("error", "unable to connect"):
                break
        if "end" not in res or "sum_received" not in res["end"]:
            return {"error": res.get("error") or out[-300:], "gbit_s": None}
        end = res["end"]
        return {
            "gbit_s": end["sum_received"]["bits_per_second"] / 1e9,
            "sender_gbit_s": end["sum_sent"]["bits_per_second"] / 1e9,
            "retransmits": end["sum_sent"].get("retransmits"),
            "bytes": end["sum_received"]["bytes"],
        }
    finally:
        with contextlib.suppress(subprocess.TimeoutExpired):
            srv.wait(timeout=5)
        if srv.poll() is None:
            srv.kill()


def run_one(variant: str, args: argparse.Namespace) -> dict[str, Any]:
    from vecroute.io.netns import Lab
    from vecroute.lab import H1_V4, H2_V4, H2_V6, build

    workdir = Path(tempfile.mkdtemp(prefix="vecroute-latency-"))
    res: dict[str, Any] = {"variant": variant}
    router = None
    gens: list[subprocess.Popen] = []
    with Lab("lt") as lab:
        try:
            t = build(lab, workdir)
            p0 = t.ports[0]
            p0_mac, h1_mac = lab.mac(t.rt, p0), lab.mac(t.h1, t.h1_if)
            if variant == "kernel":
                setup_kernel_router(lab, t, ipv6=True)
            elif variant in ("vecroute", "vecroute-busy"):
                if variant == "vecroute-busy":
                    text = t.config.read_text()
                    t.config.write_text(text.replace("[router]\n", '[router]\npoll = "busy"\n', 1))
                router = start_vecroute(lab, t)
            else:
                raise ValueError(variant)
            install_sink(lab, t.h2, t.h2_if, H1_V4, H2_V4)
            conf = workdir / "trafgen.cfg"
            conf.write_text(trafgen_config(p0_mac, h1_mac, H1_V4, H2_V4))
            for dst in (H2_V4, H2_V6):  # neighbours resolved before anything is timed
                lab.run(t.h1, ["ping", "-n", "-c", "2", "-i", "0.2", "-W", "2", dst], check=False)

            res["ping_idle"] = ping(lab, t.h1, H2_V4, args.ping_count)

            if args.load_gen == "trafgen":
                gen = start_light_load(lab, t.h1, t.h1_if, conf, args.load_pps, gens)
            else:
                gen = start_gen_load(lab, t, p0_mac, args.load_pps)
                gens.append(gen)
            l0, s0 = sink_counts(lab, t.h2, t.h2_if)["good"], link_stats(lab, t.h1, t.h1_if)["tx"]
            t0 = time.monotonic()
            res["ping_load"] = ping(lab, t.h1, H2_V4, args.ping_count)
            dt = time.monotonic() - t0
            res["load"] = {
                "generator": args.load_gen,
                "target_pps": args.load_pps,
                "sent_pps": (link_stats(lab, t.h1, t.h1_if)["tx"] - s0) / dt,
                "delivered_pps": (sink_counts(lab, t.h2, t.h2_if)["good"] - l0) / dt,
            }
            stop(gen)

            res["tcp4"] = iperf3(lab, t, H2_V4, args.iperf_seconds, 5201)
            res["tcp6"] = iperf3(lab, t, H2_V6, args.iperf_seconds, 5202)
            if router is not None:
                if router.poll() is not None:
                    res["router_exit"] = router.returncode
                else:
                    with contextlib.suppress(Exception):
                        res["vecroute_drops"] = {
                            r["counter"]: r["count"]
                            for r in t.ctl("show", "errors").get("data") or []
                            if r["kind"] == "drop"
                        }
        finally:
            for g in gens:
                stop(g)
            stop(router)
    shutil.rmtree(workdir, ignore_errors=True)
    return res


# -- report ---------------------------------------------------------------------------------


def _pooled(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    rtts = [x for r in runs for x in r[key]["rtt_ms"]]
    out = rtt_stats(rtts, sum(r[key]["sent"] for r in runs))
    out["per_run_p50_ms"] = [percentile(r[key]["rtt_ms"], 50) for r in runs]
    out["per_run_p99_ms"] = [percentile(r[key]["rtt_ms"], 99) for r in runs]
    return out


def report(results: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    from vecroute.measure import stat

    out: dict[str, Any] = {"variants": {}, "ratios": {}, "ministat": {}}
    for v, runs in results.items():
        out["variants"][v] = {
            "rtt_idle": _pooled(runs, "ping_idle"),
            "rtt_load": _pooled(runs, "ping_load"),
            "load_delivered_pps": summary([r["load"]["delivered_pps"] for r in runs]),
            "tcp4_gbit_s": summary([r["tcp4"]["gbit_s"] for r in runs if r["tcp4"]["gbit_s"]]),
            "tcp6_gbit_s": summary([r["tcp6"]["gbit_s"] for r in runs if r["tcp6"]["gbit_s"]]),
            "tcp4_retransmits": [r["tcp4"].get("retransmits") for r in runs],
            "tcp6_retransmits": [r["tcp6"].get("retransmits") for r in runs],
            "tcp_errors": [
                r[k]["error"] for r in runs for k in ("tcp4", "tcp6") if r[k].get("error")
            ],
        }
    var = out["variants"]
    if "kernel" in var and "vecroute" in var:
        k, vr = var["kernel"], var["vecroute"]
        for key in ("tcp4_gbit_s", "tcp6_gbit_s"):
            if k[key]["median"] and vr[key]["median"]:
                out["ratios"][f"{key} vecroute/kernel"] = vr[key]["median"] / k[key]["median"]
        for key in ("rtt_idle", "rtt_load"):
            for q in ("p50_ms", "p99_ms"):
                if k[key][q] and vr[key][q]:
                    out["ratios"][f"{key} {q} vecroute/kernel"] = vr[key][q] / k[key][q]
    for key in ("tcp4_gbit_s", "tcp6_gbit_s"):
        sets = [(v, var[v][key]["values"]) for v in var]
        if all(len(vals) >= 3 for _, vals in sets):
            out["ministat"][key] = stat.render(sets)
    return out


def print_report(out: dict[str, Any], args: argparse.Namespace) -> None:
    print(machine_line(out["machine"]))
    print(f"ping h1 -> h2 through the router (IPv4, -i 0.01 -c {args.ping_count}), idle and "
          f"under ~{args.load_pps} pps of 64-byte UDP ({args.load_gen}, CPU 0); iperf3 TCP "
          f"{args.iperf_seconds:g} s, 1 stream, host offloads on; {args.repeat} run(s) per "
          "variant, interleaved")  # fmt: skip
    f = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    print()
    print("RTT ms, all replies of all runs (nearest rank)")
    print(f"{'variant':9s} {'idle p50':>9s} {'p90':>7s} {'p99':>7s} {'max':>7s} {'lost':>5s} "
          f"{'load p50':>9s} {'p99':>7s} {'max':>7s} {'lost':>5s} {'load pps':>9s}")  # fmt: skip
    for v, s in out["variants"].items():
        i, lo = s["rtt_idle"], s["rtt_load"]
        print(f"{v:9s} {f(i['p50_ms']):>9s} {f(i['p90_ms']):>7s} {f(i['p99_ms']):>7s} "
              f"{f(i['max_ms']):>7s} {i['lost']:>5d} {f(lo['p50_ms']):>9s} {f(lo['p99_ms']):>7s} "
              f"{f(lo['max_ms']):>7s} {lo['lost']:>5d} "
              f"{s['load_delivered_pps']['median'] or 0:>9.0f}")  # fmt: skip
    print()
    print("TCP throughput h1 -> h2, Gbit/s at the receiver, median [min .. max]")
    print(f"{'variant':9s} {'IPv4':>28s} {'IPv6':>28s}  retransmits v4 / v6")
    for v, s in out["variants"].items():
        print(f"{v:9s} {fmt_summary(s['tcp4_gbit_s'], '', 2):>28s} "
              f"{fmt_summary(s['tcp6_gbit_s'], '', 2):>28s}  "
              f"{s['tcp4_retransmits']} / {s['tcp6_retransmits']}")  # fmt: skip
        for e in s["tcp_errors"]:
            print(f"  {v}: iperf3 error: {e}")
    for key, text in out["ministat"].items():
        print()
        print(f"{key}, ministat (vecroute.measure.stat):")
        print(text, end="")
    print()
    for k, r in out["ratios"].items():
        print(f"ratio {k} (medians / pooled percentiles): {r:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help=f"comma-separated, from {', '.join(VARIANTS)}")  # fmt: skip
    ap.add_argument("--ping-count", type=int, default=500)
    ap.add_argument("--load-pps", type=int, default=20_000, help="background load, frames/s")
    ap.add_argument("--load-gen", choices=LOAD_GENERATORS, default=LOAD_GENERATORS[0],
                    help="what sends the load (trafgen: bench.live's -t gap)")  # fmt: skip
    ap.add_argument("--iperf-seconds", type=float, default=5.0)
    ap.add_argument("--nice", type=int, default=-20,
                    help="nice of the generator's and the router's sessions (autogroups); "
                    "0: leave them alone")  # fmt: skip
    ap.add_argument("--json", action="store_true", help="print JSON instead of the tables")
    ap.add_argument("--save", metavar="PATH", help="also write the JSON (all runs) to PATH")
    args = ap.parse_args()
    PRIORITY[0] = args.nice
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for v in variants:
        if v not in VARIANTS + EXTRA_VARIANTS:
            ap.error(f"unknown variant {v!r}")
    if os.geteuid() != 0:
        raise SystemExit("bench.latency: needs root (namespaces, AF_PACKET)")
    for tool in (*TOOLS, *(("trafgen",) if args.load_gen == "trafgen" else ())):
        if shutil.which(tool) is None:
            raise SystemExit(f"bench.latency: {tool} not found (apt-get install -y netsniff-ng "
                             "iproute2 iputils-ping iperf3 util-linux)")  # fmt: skip
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("bench.latency: needs 2 CPUs (generator and router)")
    info = machine_info()
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    t_start = time.time()
    for rep in range(args.repeat):
        for v in variants:
            r = run_one(v, args)
            results[v].append(r)
            i, lo = (rtt_stats(r[k]["rtt_ms"], r[k]["sent"]) for k in ("ping_idle", "ping_load"))
            eprint(
                f"[{rep + 1}/{args.repeat}] {v:8s} idle p50 {i['p50_ms']} p99 {i['p99_ms']} "
                f"lost {i['lost']}; load {r['load']['delivered_pps']:.0f} pps p50 {lo['p50_ms']} "
                f"p99 {lo['p99_ms']} lost {lo['lost']}; tcp4 {r['tcp4']['gbit_s']} "
                f"tcp6 {r['tcp6']['gbit_s']} Gbit/s"
                + (f"; router exited {r['router_exit']}" if "router_exit" in r else "")
            )
    out = report(results)
    out["machine"] = info
    out["command"] = " ".join(["python", "-m", "bench.latency", *sys.argv[1:]])
    out["elapsed_s"] = round(time.time() - t_start, 1)
    out["runs"] = results
    if args.save:
        Path(args.save).write_text(json.dumps(out, indent=2, default=str))
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return
    print_report(out, args)


if __name__ == "__main__":
    main()
