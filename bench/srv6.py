"""SRv6 benchmark: head-end and endpoint behaviours next to plain forwarding, one core.

    python -m bench.srv6 [--json] [--packets N] [--repeat R] [--cpu C] [--profile]

The variants and their frames are those of the `vecroute bench srv6` experiment
(bench/experiments/srv6.py): plain IPv6 and IPv4 forwarding, H.Encaps with 1, 2 and 3
segments (IPv6 and IPv4 inner; with 2 segments also "encaps2in", the outer flow label
copied from the inner packet as Linux does by default, the seed's setting, instead of
vecroute's default flow hash), H.Encaps.Red with 2 segments, End and End.DX6, at 78-byte
and 1000-byte frames, measured in memory (PacketBatch.load + Graph.run, batches of 256),
interleaved and repeated. Printed: a table (median [min .. max] per CPU-second and wall
clock, the ratio to plain IPv6 forwarding of the same size, the targets), the seed's
pktgen form of every variant (pps, Mb/sec), and where the time goes per node (ns/packet
from runtime_view, VPP's `show runtime`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from bench.common import CpuShare, eprint, fmt_summary, machine_info, machine_line, pin_to_one_cpu
from bench.common import summary as summarize
from bench.experiments import srv6 as X


def pktgen_lines(name: str, pps: float, n: int, size: int) -> str:
    """pktgen's result, as Documentation/networking/pktgen.rst shows it."""
    usec = int(round(n / pps * 1e6))
    bps = int(round(pps)) * 8 * size
    return (
        f"Result: OK: {usec}(c{usec}+d0) usec, {n} ({size}byte,0frags)\n"
        f"  {int(round(pps))}pps {bps // 1_000_000}Mb/sec ({bps}bps) errors: 0"
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    cpu = pin_to_one_cpu(args.cpu)
    info = machine_info()
    eprint(f"srv6 bench: {machine_line(info)}; pinned to CPU {cpu}")
    t0 = time.perf_counter()
    variants = X.setup(args.packets)
    eprint(f"set-up and warm-up (compilation included): {time.perf_counter() - t0:.1f} s")
    share = CpuShare()
    for r in range(args.repeat):
        eprint(f"round {r + 1}/{args.repeat}")
        for v in variants:
            with share:
                v.sample()
    cpu_s, wall_s = X._state["cpu"], X._state["wall"]
    rows = []
    for kind, size, _med, ratio in X.ratios(cpu_s):
        name = f"{kind}-{size}"
        t = X.TARGETS.get(kind)
        rows.append(
            {
                "variant": kind,
                "frame": size,
                "in_bytes": X._state["frames"][name].size,
                "out_bytes": X._state["out_len"][name],
                "mpps_cpu": summarize(cpu_s[name]),
                "mpps_wall": summarize(wall_s[name]),
                "ratio": ratio,
                "target": t,
                "met": None if t is None else ratio >= t,
            }
        )
    profile = {}
    if args.profile:
        path = X._state["path"]
        for name, fr in X._state["frames"].items():
            profile[name] = path.profile(fr)
    return {
        "machine": info,
        "cpu": cpu,
        "packets": args.packets,
        "repeat": args.repeat,
        "cpu_share": summarize(share.shares),
        "rows": rows,
        "profile": profile,
    }


def render(res: dict[str, Any]) -> str:
    out = [
        f"machine: {machine_line(res['machine'])}",
        f"{res['packets']} frames per sample, {res['repeat']} interleaved repetitions, "
        f"CPU share of the timed runs {fmt_summary(res['cpu_share'])}",
        "",
    ]
    hdr = (
        f"{'variant':<12} {'frame':>5} {'in→out':>10}  {'Mpps/CPU-s median [min .. max]':<32}"
        f" {'Mpps wall':<24} {'vs ip6':>7}  target"
    )
    out += [hdr, "-" * len(hdr)]
    for r in res["rows"]:
        t = (
            ""
            if r["target"] is None
            else (f">= {r['target']:.0%} {'MET' if r['met'] else 'MISSED'}")
        )
        out.append(
            f"{r['variant']:<12} {r['frame']:>5} {r['in_bytes']:>4}→{r['out_bytes']:<5}"
            f"  {fmt_summary(r['mpps_cpu'], digits=3):<32} "
            f"{fmt_summary(r['mpps_wall'], digits=3):<24} {r['ratio']:>6.1%}  {t}"
        )
    out += [
        "",
        "Linux seed (pktgen, 1000-byte): plain IPv6 1178093 pps; H.Encaps 680427 pps "
        "(58%) before, 1047220 pps (89%) after its patches.",
        "",
        "pktgen form (rate = median packets per CPU-second of this process):",
    ]
    for r in res["rows"]:
        pps = r["mpps_cpu"]["median"] * 1e6
        out += [
            f"[{r['variant']} {r['frame']}B, {r['in_bytes']}-byte input frames]",
            pktgen_lines(r["variant"], pps, res["packets"], r["in_bytes"]),
        ]
    if res["profile"]:
        nodes: list[str] = []
        for p in res["profile"].values():
            nodes += [k for k in p if k not in nodes]
        out += [
            "",
            "Where the time goes: ns per input packet and node (runtime_view clocks, median over "
            "the batches of an untimed pass; a node visited twice counts twice); 'other' is "
            "1/rate minus the nodes: batch load, dispatch, Python call",
        ]
        head = (
            f"{'variant':<18}"
            + "".join(f"{n[:13]:>14}" for n in nodes)
            + f"{'nodes':>8}{'other':>8}{'1/rate':>8}"
        )
        out += [head, "-" * len(head)]
        rate = {f"{r['variant']}-{r['frame']}": r["mpps_cpu"]["median"] for r in res["rows"]}
        for name, p in res["profile"].items():
            total = 1e3 / rate[name]
            out.append(
                f"{name:<18}"
                + "".join(f"{p.get(n, 0.0):>14.1f}" for n in nodes)
                + f"{sum(p.values()):>8.1f}{total - sum(p.values()):>8.1f}{total:>8.1f}"
            )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--packets", type=int, default=X.PACKETS, help="frames per sample (2**17)")
    ap.add_argument("--repeat", type=int, default=7, help="repetitions, interleaved (7)")
    ap.add_argument("--cpu", type=int, default=None, help="CPU to pin to (default: last allowed)")
    ap.add_argument("--profile", action="store_true", help="per-node ns/packet of each variant")
    args = ap.parse_args(argv)
    res = run(args)
    print(json.dumps(res, indent=2) if args.json else render(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
