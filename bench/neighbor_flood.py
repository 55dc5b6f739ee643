"""Issue 12 finding 2, live: a neighbour-solicitation flood while a ping crosses the router.

`python -m bench.neighbor_flood [--frames 15000] [--repeat 3]` (root). h1 sends FRAMES
NS (with a source link-layer address, each from a new source) and as many ARP requests for
the router's addresses as fast as a packet socket takes them, while it pings h2 through
the router every 10 ms; reported: the ping's loss and worst RTT during the flood, the
neighbour table afterwards, and how long `ctl show neighbors` takes then. Before the
neighbour table was bounded, 15,000 NS stalled forwarding for 4.6 s and `show neighbors`
took 9.7 s.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.soak import _ctl, _flood
from vecroute.io.netns import Lab
from vecroute.lab import H2_V4, build, start_router


def once(frames: int, seed: int) -> dict:
    with Lab("vn") as lab, tempfile.TemporaryDirectory() as d:
        t = build(lab, Path(d), workers=1)
        start_router(t)
        lab.run(t.h1, ["ping", "-c", "3", "-i", "0.2", H2_V4])  # neighbours resolved
        ping = lab.popen(t.h1, ["ping", "-i", "0.01", "-W", "1", "-c", "400", H2_V4],
                         stdout=subprocess.PIPE, text=True)
        time.sleep(0.5)
        t0 = time.monotonic()
        sent = _flood(t, frames // 2, random.Random(seed))
        flood_s = time.monotonic() - t0
        out, _ = ping.communicate(timeout=60)
        rtts = [float(x) for x in re.findall(r"time=([\d.]+) ms", out)]
        loss = re.search(r"([\d.]+)% packet loss", out)
        t1 = time.monotonic()
        rows = _ctl(t, "show", "neighbors")["data"]
        show_s = time.monotonic() - t1
        st = {r["stat"]: r["count"] for r in _ctl(t, "show", "neighbors", "stats")["data"]}
        alive = t.router.poll() is None
    return {
        "frames": sent, "flood_and_build_s": round(flood_s, 3),
        "ping_loss_pct": float(loss.group(1)) if loss else None,
        "ping_max_ms": max(rtts) if rtts else None,
        "ping_p50_ms": sorted(rtts)[len(rtts) // 2] if rtts else None,
        "neighbors": len(rows), "show_neighbors_s": round(show_s, 3),
        "table_full": st.get("table_full"), "collected": st.get("collected"),
        "router_alive": alive,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=15000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    runs = [once(args.frames, k) for k in range(args.repeat)]
    print(json.dumps(runs, indent=1))
    return 0 if all(r["router_alive"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
