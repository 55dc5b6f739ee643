"""`show routes` over the full Internet table: render rate of the streamed plain renderer.

Loads the shared BGP table into a Fib (route objects as ``Fib.add_route`` makes them, the
LPM filled in bulk), then times, side by side:

- ``stream``: :func:`vecroute.control.show.routes_stream` exhausted in process (rows/s, and
  the longest single step: how long the event loop is held at most);
- ``socket``: the same listing through a ControlServer on an asyncio loop in a thread,
  read by the ``request()`` client (includes JSON escaping, the socket and json.loads);
- ``rich``: the rich-table renderer (the unstreamed path) on a sample of rows.

    PYTHONPATH=src python -m bench.ctl_render [--limit N] [--repeat R]
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from bench.common import DEFAULT_TABLE


def build_fib(path: Path, limit: int | None):
    from vecroute.fib.fib import Fib, Interface, Route
    from vecroute.fib.lpm import load_prefix_file

    a4, l4, h6, o6, l6 = load_prefix_file(path)
    if limit is not None:
        n6 = min(len(l6), max(0, limit * len(l6) // (len(l4) + len(l6))))
        a4, l4 = a4[: limit - n6], l4[: limit - n6]
        h6, o6, l6 = h6[:n6], o6[:n6], l6[:n6]
    fib = Fib()
    addrs = [ipaddress.ip_interface("192.0.2.1/24"), ipaddress.ip_interface("2001:db8::1/64")]
    fib.add_interface(Interface("eth0", b"\x02\x00\x00\x00\x00\x01", 1500, 0, addrs))
    nhs = {4: [], 6: []}
    for k in range(8):
        for fam, ip in ((4, f"192.0.2.{10 + k}"), (6, f"2001:db8::{10 + k:x}")):
            nh = ipaddress.ip_address(ip)
            if k % 2 == 0:  # half resolved, half incomplete
                fib.add_neighbor(nh, bytes([2, 0, 0, 0, 0xAA, k]), "eth0")
            nhs[fam].append((nh, fib.lbs.get([fib.nh_adjacency(0, nh)])))
    for fam, nets, lens in (
        (4, (ipaddress.IPv4Network((int(a), int(n))) for a, n in zip(a4, l4, strict=True)), l4),
        (
            6,
            (
                ipaddress.IPv6Network(((int(h) << 64) | int(o), int(n)))
                for h, o, n in zip(h6, o6, l6, strict=True)
            ),
            l6,
        ),
    ):
        lbs = np.empty(len(lens), np.int64)
        for i, net in enumerate(nets):
            nh, lb = nhs[fam][i % 8]
            r = Route(net, 0, "static", [(0, nh)], None, lb)
            fib.routes[(0, net)] = r
            lbs[i] = lb
        if fam == 4:
            fib.lpm[4].add_many(0, a4, l4, lbs)
        else:
            fib.lpm[6].add_many(0, (h6, o6), l6, lbs)
    return fib


def time_stream(fib) -> tuple[float, float, int]:
    """(seconds, longest step in seconds, characters) for one full streamed listing."""
    from vecroute.control.show import routes_stream

    longest = 0.0
    chars = 0
    t0 = last = time.perf_counter()
    for piece in routes_stream(fib):
        chars += len(piece)
        now = time.perf_counter()
        longest = max(longest, now - last)
        last = now
    return time.perf_counter() - t0, longest, chars


class Router:
    def __init__(self, fib) -> None:
        self.fib = fib


def time_socket(fib, repeat: int) -> list[float]:
    from vecroute.control.server import ControlServer, request

    loop = asyncio.new_event_loop()
    path = str(Path(tempfile.mkdtemp()) / "ctl.sock")
    server = ControlServer(path, Router(fib))
    loop.run_until_complete(server.start())
    th = threading.Thread(target=loop.run_forever, daemon=True)
    th.start()
    out = []
    try:
        for _ in range(repeat):
            t0 = time.perf_counter()
            rep = request(path, ["show", "routes"], timeout=120)
            out.append(time.perf_counter() - t0)
            assert rep["ok"], rep
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        th.join()
    return out


def time_rich(fib, sample: int) -> float:
    from vecroute.control.show import ROUTE_COLUMNS, render_table, routes_view

    sub = type(fib)()
    sub.interfaces, sub.neighbors = fib.interfaces, fib.neighbors
    for k in list(fib.routes)[:sample]:
        sub.routes[k] = fib.routes[k]
    t0 = time.perf_counter()
    rows = routes_view(sub)
    render_table("Routes", rows, ROUTE_COLUMNS)
    return (time.perf_counter() - t0) / len(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", type=Path, default=DEFAULT_TABLE)
    ap.add_argument("--limit", type=int, default=None, help="routes to load (default: all)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rich-sample", type=int, default=1000)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    fib = build_fib(args.table, args.limit)
    n = len(fib.routes)
    print(f"{n} routes loaded in {time.perf_counter() - t0:.1f} s", flush=True)
    rates, steps = [], []
    for _ in range(args.repeat):
        dt, longest, chars = time_stream(fib)
        rates.append(n / dt)
        steps.append(longest)
    print(
        f"stream: {statistics.median(rates) / 1e3:.0f}K rows/s median of {args.repeat} "
        f"(min {min(rates) / 1e3:.0f}K, max {max(rates) / 1e3:.0f}K), "
        f"{chars / n:.0f} chars/row, longest step {max(steps) * 1e3:.1f} ms"
    )
    sock = time_socket(fib, args.repeat)
    print(
        f"socket: {n / statistics.median(sock) / 1e3:.0f}K rows/s median of {args.repeat} "
        f"({statistics.median(sock):.2f} s for the listing, client json.loads included)"
    )
    per_row = time_rich(fib, args.rich_sample)
    print(f"rich:   {per_row * 1e6:.0f} us/row ({args.rich_sample} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
