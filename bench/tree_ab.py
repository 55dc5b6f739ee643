"""A/B of two source trees on the compiled loop: IPv4 and IPv6 over the full table, and
IPv4 with the firewall's one-rule + 1M-entry table case, one compiled call each.

    python -m bench.tree_ab --base /tmp/base [--reps 5] [--pairs 2]

``--base``: a worktree of the commit to compare with (``git worktree add /tmp/base C``;
its kernels compile on its first run, under its own ``__pycache__``). The runs alternate
base / this tree, ``--pairs`` times, each a fresh process that runs this file and imports
its tree's ``vecroute`` and ``bench`` (the base needs ``bench.forwarding.VectorPath
.run_compiled`` and ``bench.firewall.run_case_loop``); every run forwards 2^20 frames
``--reps`` times per case (after one untimed run) and checks that every frame was sent.
Rates are per CPU-second, pinned to one CPU, Mpps.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def child(tree: Path, table: Path, reps: int, cpu: int) -> dict[str, list[float]]:
    """One tree's runs, in this process (sys.path set up by the caller)."""
    import numpy as np

    from vecroute.warmup import clear_stale_cache

    clear_stale_cache((tree / "bench",))  # run_frames embeds the graph's kernels
    import vecroute
    from bench.firewall import FwdCase, firewall, run_case_loop, table_text
    from bench.forwarding import VectorPath, build_fib, load_table, make_frames4, make_frames6

    if not Path(vecroute.__file__).resolve().is_relative_to(tree):
        raise RuntimeError(f"imported {vecroute.__file__}, not {tree}'s vecroute")
    os.sched_setaffinity(0, {cpu})
    rng = np.random.default_rng(7)
    _, tab = load_table(table)
    fib, _, _, _ = build_fib(tab)
    n = 1 << 20
    fr4, fr6 = make_frames4(n, tab, rng), make_frames6(n, tab, rng)
    path = VectorPath(fib, 256)
    # bench.firewall.table_rule, spelt out: the base tree may predate it
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "bl.txt"
        p.write_text(table_text(1_000_000, rng))
        fw = firewall(
            ["100 deny ip from table(bl) to any"], tables=[{"name": "bl", "type": "addr"}]
        )
        fw.tables.add_file("bl", p)
    case = FwdCase("table of 1M no-match entries", fw, None)

    def rate(fn) -> float:
        c0 = time.process_time()
        fn()
        return n / (time.process_time() - c0) / 1e6

    def fwd(fr) -> None:
        path.graph.attach_firewall(None)
        path.run_compiled(fr)
        if path.last_sent < n * 0.99:
            raise RuntimeError(f"{path.last_sent} of {n} frames sent")

    def table_case() -> None:
        sent = run_case_loop(path, case, fr4)
        if min(sent) < n * 0.99:
            raise RuntimeError(f"firewall case: {sent} (sent, fw-in, fw-out) of {n}")

    out: dict[str, list[float]] = {"ip4": [], "ip6": [], "ip4_table_1m": []}
    for r in range(reps + 1):
        got = (rate(lambda: fwd(fr4)), rate(lambda: fwd(fr6)), rate(table_case))
        if r:  # the first run is untimed: compilation, first touch
            for k, x in zip(out, got, strict=True):
                out[k].append(x)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", type=Path, required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)))
    ap.add_argument("--table", type=Path, default=None)
    ap.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.table, args.reps, args.cpu)))
        return
    from bench.common import DEFAULT_TABLE

    table = args.table or DEFAULT_TABLE
    trees = {"base": args.base.resolve(), "new": HERE}
    res: dict[str, list[dict]] = {"base": [], "new": []}
    for _ in range(args.pairs):
        for name, tree in trees.items():
            env = dict(os.environ, PYTHONPATH=f"{tree}:{tree / 'src'}")
            p = subprocess.run(
                # this file run by path: the base tree need not have it
                [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--base",
                    str(args.base),
                    "--child",
                    str(tree),
                    "--table",
                    str(table),
                    "--reps",
                    str(args.reps),
                    "--cpu",
                    str(args.cpu),
                ],
                cwd=tree,
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            r = json.loads(p.stdout.strip().splitlines()[-1])
            res[name].append(r)
            print(name, {k: [round(x, 2) for x in v] for k, v in r.items()}, flush=True)


if __name__ == "__main__":
    main()
