"""Kernel install time vs vecroute sync time for the full Internet table (netlink mirror).

In a fresh network namespace: two next hops on a veth (nexthop objects 1 and 2), then the
shared BGP table (901,899 IPv4 + 160,147 IPv6 prefixes, alternating between the two
nexthop objects) installed with ``ip -batch``. While the kernel installs, a KernelSync
follows the events into a real Fib; the script reports, side by side and repeated:

  kernel   time from the start of ``ip -batch`` to its exit (routes/s)
  events   time from the same start until vecroute's FIB holds every route (routes/s)
  dump     a resync into a fresh Fib (the dump of the full table: start-up, reload)
  pyroute2 pyroute2's parser over the same dump bytes (routes/s), for the choice of the
           compiled parser
  memory   this process's RSS growth from an empty FIB to the mirrored full table (the
           kernel view, the FIB, its tries: what `vecroute run` holds for it)
  show     the whole `ctl show routes` text of the mirrored table (routes_stream)

Usage (root): python bench/netlink_sync.py [--runs 3] [--limit N]
"""

from __future__ import annotations

import argparse
import gzip
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "bgp-full-table-prefixes.txt.gz"
if not DATA.exists():
    DATA = Path("/work/shared/data/bgp-full-table-prefixes.txt.gz")



def kernel_side(lab) -> tuple[str, str]:
    """The kernel's namespace of a netlink benchmark: one veth end with an IPv4 and an IPv6
    address and nexthop objects 1, 2 (IPv4) and 3, 4 (IPv6) on it. Returns (ns, device)."""
    from vecroute.io.netns import ip

    ns, peer = lab.netns("k"), lab.netns("p")
    m0, _ = lab.veth(ns, peer)
    ip("link", "set", m0, "address", "02:00:00:00:52:01", ns=ns)
    ip("addr", "add", "192.0.2.1/24", "dev", m0, ns=ns)
    ip("addr", "add", "2001:db8:1::1/64", "dev", m0, "nodad", ns=ns)
    for nid, a4 in ((1, "192.0.2.2"), (2, "192.0.2.3")):
        ip("nexthop", "add", "id", str(nid), "via", a4, "dev", m0, ns=ns)
    for nid, a6 in ((3, "2001:db8:1::2"), (4, "2001:db8:1::3")):
        ip("nexthop", "add", "id", str(nid), "via", a6, "dev", m0, ns=ns)
    return ns, m0

def prefixes(limit: int | None) -> tuple[list[str], list[str]]:
    v4, v6 = [], []
    with gzip.open(DATA, "rt") as f:
        for line in f:
            p = line.strip()
            if p:
                (v6 if ":" in p else v4).append(p)
    if limit:
        v4, v6 = v4[: limit * 85 // 100], v6[: limit * 15 // 100]
    return v4, v6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--limit", type=int, default=0, help="use only N prefixes")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("must run as root")
    from vecroute.control.config import parse_config
    from vecroute.control.linux_nl import KernelSync
    from vecroute.control.neighbors import NeighborTable
    from vecroute.fib.fib import Fib
    from vecroute.io.netns import Lab

    v4, v6 = prefixes(args.limit or None)
    total = len(v4) + len(v6)
    print(f"{len(v4)} IPv4 + {len(v6)} IPv6 prefixes = {total} routes")

    class Target:
        def __init__(self) -> None:
            cfg = parse_config({"interfaces": [{"name": "port0", "mac": "02:00:00:00:52:01"}]})
            self.fib = Fib.from_config(cfg)
            self.neigh = NeighborTable(self.fib, lambda *a: None, lambda *a: None)

        def commit(self) -> None:
            pass

    rows = []
    from vecroute.control.show import routes_stream

    for run in range(args.runs):
        with Lab("nb") as lab:
            ns, m0 = kernel_side(lab)
            batch = Path(f"/tmp/nb-{os.getpid()}.batch")
            with open(batch, "w") as f:
                for i, p in enumerate(v4):
                    f.write(f"route add {p} nhid {1 + (i & 1)}\n")
                for i, p in enumerate(v6):
                    f.write(f"route add {p} nhid {3 + (i & 1)}\n")
            ifindex = lab.link(ns, m0)["ifindex"]
            target = Target()
            sync = KernelSync(target, ns, {ifindex: 0})
            sync.open()
            sync.resync()
            while sync.state == "dumping":
                sync.poll()
            base = len(sync._inst)
            rss0 = rss_mb()
            stop = threading.Event()
            done_at: list[float] = []

            def follow(sync=sync, stop=stop, base=base, done_at=done_at) -> None:
                while not stop.is_set():
                    if sync.poll() == 0:
                        if sync._resync_wanted and not sync._inflight:
                            sync.resync()
                        if len(sync._inst) - base >= total and sync.state != "dumping":
                            done_at.append(time.perf_counter())
                            return
                        time.sleep(0.0005)

            th = threading.Thread(target=follow)
            t0 = time.perf_counter()
            th.start()
            subprocess.run(["ip", "-n", ns, "-batch", str(batch)], check=True)
            t_kernel = time.perf_counter() - t0
            th.join(timeout=600)
            stop.set()
            t_events = (done_at[0] - t0) if done_at else float("nan")
            resyncs_events = sync.resyncs - 1
            mem = rss_mb() - rss0
            t2 = time.perf_counter()
            text = sum(len(c) for c in routes_stream(target.fib))
            t_show = time.perf_counter() - t2
            # the dump: a fresh Fib, as after a reload
            target.fib = Fib.from_config(parse_config(
                {"interfaces": [{"name": "port0", "mac": "02:00:00:00:52:01"}]}))
            sync._rt.clear()
            sync._nh_users.clear()
            t1 = time.perf_counter()
            sync.resync()
            while sync.state == "dumping" or sync._resync_wanted:
                if sync.poll() == 0 and sync._resync_wanted and not sync._inflight:
                    sync.resync()
            t_dump = time.perf_counter() - t1
            assert len(sync._inst) >= total, (len(sync._inst), total)
            t_py = pyroute2_rate(ns, min(total, 200_000))
            sync.close()
            batch.unlink()
        rows.append((t_kernel, t_events, t_dump, t_py, resyncs_events))
        print(f"run {run + 1}: memory +{mem:,.0f} MB RSS for the mirrored table "
              f"({mem * 2**20 / total:,.0f} B/route); show routes {t_show:.1f} s "
              f"({text / 2**20:,.0f} MB of text)", flush=True)
        print(f"run {run + 1}: kernel {t_kernel:.2f} s ({total / t_kernel:,.0f}/s)  "
              f"events->FIB {t_events:.2f} s ({total / t_events:,.0f}/s, "
              f"{resyncs_events} resyncs)  dump->FIB {t_dump:.2f} s ({total / t_dump:,.0f}/s)  "
              f"pyroute2 parse {t_py:,.0f} routes/s", flush=True)
    if len(rows) > 1:
        for k, name in enumerate(("kernel", "events", "dump")):
            rates = [total / r[k] for r in rows]
            print(f"{name:7s} median {statistics.median(rates):,.0f} routes/s "
                  f"(min {min(rates):,.0f}, max {max(rates):,.0f})")


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def pyroute2_rate(ns: str, n: int) -> float:
    """Routes/s that pyroute2's parser manages on dump bytes (the first n routes)."""
    import socket
    import struct

    from pyroute2.netlink.rtnl.marshal import MarshalRtnl

    from vecroute.io.netns import entered

    with entered(ns):
        s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
    s.bind((0, 0))
    s.send(struct.pack("=IHHII", 28, 26, 0x301, 1, 0) + bytes(12))
    chunks, count = [], 0
    while count < n:
        d = s.recv(1 << 17)
        if struct.unpack_from("=H", d, 4)[0] == 3:
            break
        chunks.append(d)
        count += d.count(b"\x1c\x00\x00\x00")  # rough; the timing below counts exactly
    s.close()
    m = MarshalRtnl()
    t = time.perf_counter()
    routes = 0
    for d in chunks:
        routes += sum(1 for _ in m.parse(d))
    return routes / (time.perf_counter() - t)


if __name__ == "__main__":
    main()
