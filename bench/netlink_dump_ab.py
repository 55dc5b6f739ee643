"""Full-table netlink dump -> FIB, two source trees side by side (A/B, interleaved).

One namespace holds the shared BGP table (901,899 IPv4 + 160,147 IPv6 prefixes through
four nexthop objects, as bench/netlink_sync.py installs it, or with ``--inline`` through
inline next hops, as BIRD installs routes). Then, for each run, every tree in turn starts
a child process with that tree's ``src`` on the path which dumps the table into a fresh
Fib ``--dumps`` times (after one untimed warm-up dump: numba's cache, the allocator); the
child reports wall and CPU time per dump. Reported per tree: routes/s (wall) and routes
per CPU-second, median [min .. max] over every timed dump.

Usage (root): python bench/netlink_dump_ab.py --tree new=. --tree old=../wt-base [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fmt_summary, machine_line, summary  # noqa: E402
from netlink_sync import kernel_side, prefixes  # noqa: E402

CHILD = r"""
import json, sys, time
from vecroute.control.config import parse_config
from vecroute.control.linux_nl import KernelSync
from vecroute.control.neighbors import NeighborTable
from vecroute.fib.fib import Fib
ns, ifindex, dumps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
CFG = {"interfaces": [{"name": "port0", "mac": "02:00:00:00:52:01"}]}
class Target:
    def __init__(self):
        self.fib = Fib.from_config(parse_config(CFG))
        self.neigh = NeighborTable(self.fib, lambda *a: None, lambda *a: None)
    def commit(self):
        pass
target = Target()
sync = KernelSync(target, ns, {ifindex: 0})
sync.open()
for k in range(dumps + 1):
    target.fib = Fib.from_config(parse_config(CFG))
    sync._rt.clear()
    sync._nh_users.clear()
    w, c = time.perf_counter(), time.process_time()
    sync.resync()
    while sync.state == "dumping" or sync._resync_wanted:
        if sync.poll() == 0 and sync._resync_wanted and not sync._inflight:
            sync.resync()
    w, c = time.perf_counter() - w, time.process_time() - c
    if k:
        print(json.dumps({"wall": w, "cpu": c, "routes": len(sync._inst)}), flush=True)
sync.close()
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", required=True, metavar="NAME=PATH",
                    help="a source tree to measure (repeat; at least one)")
    ap.add_argument("--runs", type=int, default=3, help="rounds over the trees")
    ap.add_argument("--dumps", type=int, default=2, help="timed dumps per child")
    ap.add_argument("--limit", type=int, default=0, help="use only N prefixes")
    ap.add_argument("--inline", action="store_true",
                    help="routes with inline next hops instead of nexthop objects")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("must run as root")
    trees = []
    for t in args.tree:
        name, _, path = t.partition("=")
        trees.append((name, Path(path).resolve()))
    from vecroute.io.netns import Lab

    v4, v6 = prefixes(args.limit or None)
    total = len(v4) + len(v6)
    print(machine_line())
    print(f"{len(v4)} IPv4 + {len(v6)} IPv6 prefixes = {total} routes, "
          f"{'inline next hops' if args.inline else 'nexthop objects'}", flush=True)
    res: dict[str, dict[str, list[float]]] = {n: {"wall": [], "cpu": []} for n, _ in trees}
    with Lab("nd") as lab:
        ns, m0 = kernel_side(lab)
        via4 = ("192.0.2.2", "192.0.2.3")
        via6 = ("2001:db8:1::2", "2001:db8:1::3")
        batch = Path(f"/tmp/nd-{os.getpid()}.batch")
        with open(batch, "w") as f:
            for i, p in enumerate(v4):
                f.write(f"route add {p} via {via4[i & 1]} dev {m0}\n" if args.inline
                        else f"route add {p} nhid {1 + (i & 1)}\n")
            for i, p in enumerate(v6):
                f.write(f"route add {p} via {via6[i & 1]} dev {m0}\n" if args.inline
                        else f"route add {p} nhid {3 + (i & 1)}\n")
        t0 = time.perf_counter()
        subprocess.run(["ip", "-n", ns, "-batch", str(batch)], check=True)
        batch.unlink()
        print(f"kernel install {time.perf_counter() - t0:.1f} s", flush=True)
        ifindex = lab.link(ns, m0)["ifindex"]
        for run in range(args.runs):
            for name, path in trees:
                env = dict(os.environ, PYTHONPATH=str(path / "src"))
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, ns, str(ifindex), str(args.dumps)],
                    env=env, check=True, capture_output=True, text=True).stdout
                for line in out.splitlines():
                    d = json.loads(line)
                    if d["routes"] < total:
                        sys.exit(f"{name}: only {d['routes']} of {total} routes mirrored")
                    res[name]["wall"].append(total / d["wall"])
                    res[name]["cpu"].append(total / d["cpu"])
                    print(f"run {run + 1} {name}: {d['wall']:.2f} s wall "
                          f"({total / d['wall']:,.0f} routes/s), {d['cpu']:.2f} s CPU "
                          f"({total / d['cpu']:,.0f} routes/CPU-s)", flush=True)
    for name, _ in trees:
        w, c = summary(res[name]["wall"]), summary(res[name]["cpu"])
        print(f"{name}: {fmt_summary(w, 'routes/s', 0)}; {fmt_summary(c, 'routes/CPU-s', 0)}")


if __name__ == "__main__":
    main()
