"""Full-table BGP convergence through linux-cp: BIRD announces the shared table to vecroute.

    sudo python -m bench.bgp_convergence [--v4 N] [--v6 N] [--rate PPS] [--seconds S]

Topology (network namespaces, run as root)::

    peer (BIRD, AS 65001, announces the table) --veth-- [eth0] vecroute [eth1] --veth-- sink
                                                  mirror cp0 in vecroute's namespace,
                                                  where BIRD (AS 65000) peers over it

BIRD in the peer announces N IPv4 (default: all 901,899) and N IPv6 (all 160,147) prefixes
of ../shared/data/bgp-full-table-prefixes.txt.gz over one eBGP session per family; BIRD in
vecroute's namespace imports them into the kernel (the main table), and vecroute's
netlink sync mirrors them into its FIB. Measured from the moment both sessions are
Established:

* **kernel**: when the kernel's main table holds every announced route (`ip route`
  counts, polled);
* **vecroute**: when vecroute's FIB holds them (`ctl show linux-cp`: routes mirrored);
* **forwarding during convergence**: `vecroute gen` sends 64-byte UDP frames at --rate
  from the sink to the peer's link address (a connected route: it forwards whatever BGP
  does); vecroute's rx/tx counters per second before, during and after convergence.

Results go to stdout as a table and, with --json, as JSON (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import REPO_ROOT, machine_info, machine_line

TABLE = REPO_ROOT.parent / "shared" / "data" / "bgp-full-table-prefixes.txt.gz"
PEER_V4, RT0_V4 = "192.0.2.2", "192.0.2.1"
PEER_V6, RT0_V6 = "2001:db8:ff::2", "2001:db8:ff::1"
SINK_V4, RT1_V4 = "198.18.0.2", "198.18.0.1"


def prefixes(n4: int, n6: int) -> tuple[list[str], list[str]]:
    v4, v6 = [], []
    with gzip.open(TABLE, "rt") as f:
        for line in f:
            p = line.split()[0] if line.strip() else ""
            if not p or p.startswith("#"):
                continue
            (v6 if ":" in p else v4).append(p)
    return v4[:n4], v6[:n6]


def count_kernel(ns: str, fam: int) -> int:
    out = subprocess.run(["ip", "-n", ns, f"-{fam}", "route", "show", "table", "main",
                          "proto", "bird"], capture_output=True, text=True, timeout=120).stdout
    return out.count("\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--v4", type=int, default=10**7, help="IPv4 prefixes (default: all)")
    ap.add_argument("--v6", type=int, default=10**7, help="IPv6 prefixes (default: all)")
    ap.add_argument("--rate", type=int, default=20000, help="forwarded frames per second")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    sys.path.insert(0, str(REPO_ROOT))
    from tests.routing_peers import BgpNeighbor, Bird, RouterConfig, no_dad
    from vecroute.control.server import request
    from vecroute.io.netns import Lab
    from vecroute.lab import Topology, start_router

    v4, v6 = prefixes(args.v4, args.v6)
    work = Path(tempfile.mkdtemp(prefix="vr-conv-"))
    result: dict = {"machine": machine_info(), "v4": len(v4), "v6": len(v6)}
    with Lab("vc") as lab:
        peer, rt, sink = lab.netns("peer"), lab.netns("rt"), lab.netns("sink")
        for ns in (peer, rt, sink):
            no_dad(ns)
        peer_if, p0 = lab.veth(peer, rt, disable_ipv6=(False, True))
        p1, sink_if = lab.veth(rt, sink, disable_ipv6=(True, False))
        lab.run(peer, ["ip", "addr", "add", f"{PEER_V4}/24", "dev", peer_if])
        lab.run(peer, ["ip", "addr", "add", f"{PEER_V6}/64", "dev", peer_if, "nodad"])
        lab.run(sink, ["ip", "addr", "add", f"{SINK_V4}/24", "dev", sink_if])
        lab.run(sink, ["ip", "route", "add", "default", "via", RT1_V4])
        sock = str(work / "vr.sock")
        conf = work / "vr.toml"
        conf.write_text(f"""[control]
socket = "{sock}"
[linux_cp]
[[interfaces]]
name = "{p0}"
addresses = ["{RT0_V4}/24", "{RT0_V6}/64"]
host_if = "cp0"
[[interfaces]]
name = "{p1}"
addresses = ["{RT1_V4}/24"]
""")

        t = Topology(lab, work, rt=rt, config=conf, socket=sock)
        start_router(t)
        ours = RouterConfig("192.0.2.1", 65000, [
            BgpNeighbor(PEER_V4, 65001, local=RT0_V4, hold=30, keepalive=10),
            BgpNeighbor(PEER_V6, 65001, local=RT0_V6, hold=30, keepalive=10)])
        theirs = RouterConfig("192.0.2.2", 65001, [
            BgpNeighbor(RT0_V4, 65000, local=PEER_V4, hold=30, keepalive=10),
            BgpNeighbor(RT0_V6, 65000, local=PEER_V6, hold=30, keepalive=10)],
            announce=v4 + v6)
        gen = None
        mac = lab.run(rt, ["cat", f"/sys/class/net/{p1}/address"]).strip()
        rtb = Bird(lab, rt, ours, work / "rt")
        bp = Bird(lab, peer, theirs, work / "peer")
        try:
            rtb.start()
            gen = lab.popen(sink, [sys.executable, "-m", "vecroute.cli", "gen", sink_if,
                                   "--src", SINK_V4, "--dst", PEER_V4, "--dst-mac", mac,
                                   "--rate", str(args.rate), "--duration", str(args.timeout)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(3)  # the generator at its rate before anything converges
            bp.start(timeout=600)  # a million static routes take BIRD a while to load
            rtb.wait_bgp(PEER_V4, timeout=120)
            rtb.wait_bgp(PEER_V6, timeout=120)
            t0 = time.monotonic()  # both sessions up: the clock starts
            t_kernel = t_vr = None
            samples: list[dict] = []
            last = None
            while time.monotonic() - t0 < args.timeout:
                now = time.monotonic()
                st = request(sock, ["show", "linux-cp"])["data"]["sync"] or {}
                tx = request(sock, ["show", "interfaces"])["data"][0]["tx_packets"]  # to the peer
                mirrored = int(st.get("routes_mirrored", 0))
                if last is not None:
                    samples.append({"t": round(now - t0, 2), "mirrored": mirrored,
                                    "tx_pps": round((tx - last[1]) / (now - last[0]))})
                last = (now, tx)
                if t_vr is None and mirrored >= len(v4) + len(v6):
                    t_vr = now - t0
                if t_kernel is None and (count_kernel(rt, 4) >= len(v4)
                                         and count_kernel(rt, 6) >= len(v6)):
                    t_kernel = time.monotonic() - t0
                if t_kernel is not None and t_vr is not None:
                    break
                time.sleep(0.5)
            during = [x["tx_pps"] for x in samples
                      if t_vr is None or x["t"] <= t_vr]
            result.update({"kernel_s": t_kernel, "vecroute_s": t_vr, "samples": samples,
                           "offered_pps": args.rate,
                           "forwarding_pps_during": sorted(during)[len(during) // 2]
                           if during else None,
                           "forwarding_pps_min": min(during) if during else None})
        finally:
            bp.stop()
            rtb.stop()
        if gen is not None:
            gen.kill()
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
    else:
        print(machine_line(result["machine"]))
        print(f"{len(v4)} IPv4 + {len(v6)} IPv6 prefixes; from both sessions Established: "
              f"the kernel holds all after {result['kernel_s']} s, vecroute after "
              f"{result['vecroute_s']} s")
        print(f"forwarding during convergence: median {result['forwarding_pps_during']} pps,"
              f" lowest {result['forwarding_pps_min']} pps (offered {args.rate})")
        for s in result["samples"][:: max(1, len(result["samples"]) // 20)]:
            print(f"  t={s['t']:7.2f}s mirrored {s['mirrored']:8d} forwarding {s['tx_pps']} pps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
