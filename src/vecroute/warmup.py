"""Compile (or load from cache) every data-path kernel once: ``python -m vecroute.warmup``.

The test suite runs this before starting its parallel workers, so each worker loads the
numba cache instead of compiling the same kernels again.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np


def clear_stale_cache(extra: tuple[Path, ...] = ()) -> int:
    """Delete numba cache indexes older than the newest vecroute source; returns how many.
    ``extra``: more directories to clean (a benchmark's own kernels that call the graph).

    numba keys a cached function on its own source file only, but ``run_graph`` inlines
    the node kernels of other files: after a node changes, the stale cached dispatcher
    would silently run the old code. Any source change therefore invalidates every
    index (a recompile costs about a minute; running old code costs correctness)."""
    import vecroute

    root = Path(list(vecroute.__path__)[0])
    # the control plane, the command line, the configuration's types, the package's
    # __init__ (where the cache goes), the worker thread and the socket set-up
    # (af_packet.py, control_filter.py: Python that hands the kernels arguments) hold no
    # kernel and no constant a kernel reads (dependencies point down), so changing them
    # keeps the compiled code
    slow_path = {root / "control", root / "cli.py", root / "lab.py", root / "warmup.py",
                 root / "config_types.py",
                 root / "__init__.py", root / "io" / "worker.py", root / "io" / "af_packet.py",
                 root / "io" / "control_filter.py"}
    newest = max(
        p.stat().st_mtime
        for p in root.rglob("*.py")
        if not any(p == s or s in p.parents for s in slow_path)
    )
    places = [root, *extra]
    if os.environ.get("NUMBA_CACHE_DIR"):
        places.append(Path(os.environ["NUMBA_CACHE_DIR"]))
    removed = 0
    for place in places:
        for nbi in place.rglob("*.nbi"):
            try:
                if nbi.stat().st_mtime < newest:
                    nbi.unlink()
                    removed += 1
            except OSError:
                pass
    return removed


def warm(firewall: bool = True) -> float:
    """Run one tiny batch through the whole graph (and, with ``firewall``, through the
    graph with a firewall and the standalone classifier); returns the seconds it took."""
    t0 = time.perf_counter()
    graph, batch = _tiny_graph()
    _load_one(batch)
    graph.run(batch, 0)
    _warm_io(batch)
    _warm_worker(graph)
    _warm_replay(None)
    if firewall:
        _warm_firewall(graph, batch)
    return time.perf_counter() - t0


def warm_firewall() -> None:
    """Only the graph with a firewall and the loops that embed it (a second process
    compiles them while the first compiles the rest, the standalone classifier included)."""
    _warm_firewall(*_tiny_graph(), classifier=False)


def _warm_replay(fw_rules: list[str] | None) -> None:
    """Replay's compiled loop (with a firewall when given its rules) over one frame."""
    import tempfile

    from vecroute.control.config import parse_config
    from vecroute.io.pcap import PcapWriter
    from vecroute.io.replay import Replayer

    conf: dict = {"interfaces": [{"name": "a", "mac": "02:00:00:00:00:01",
                                  "addresses": ["192.0.2.1/24"]}]}
    if fw_rules is not None:
        conf["firewall"] = {"rules": fw_rules}
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "in.pcap"
        with PcapWriter(path) as w:
            z = np.zeros(1, np.int64)
            w.write_batch(np.zeros(64, np.uint8), z, np.full(1, 64, np.int64), z)
        Replayer(parse_config(conf), 4).run([("a", str(path))], Path(d) / "out")


def _tiny_graph():
    from vecroute.control.config import parse_config
    from vecroute.graph.dataplane import build_dataplane
    from vecroute.packet.batch import PacketBatch

    cfg = parse_config(
        {
            "interfaces": [
                {
                    "name": "a",
                    "mac": "02:00:00:00:00:01",
                    "addresses": ["192.0.2.1/24", "2001:db8::1/64"],
                },
            ],
        }
    )
    dp = build_dataplane(cfg)
    fib = dp.fib
    fib.add_route("203.0.113.0/24", dev="a")  # the update kernels, not only the lookups
    fib.add_route("2001:db8:100::/48", dev="a")
    fib.del_route("203.0.113.0/24")
    fib.del_route("2001:db8:100::/48")
    batch = PacketBatch(4)
    return dp.graph(batch), batch


def _firewall_config():
    from vecroute.firewall.config import parse_firewall_config

    return parse_firewall_config({
        "rules": ["100 allow tcp from any to table(t) 22 keep-state",
                  "200 count ip from 192.0.2.0/24 to any",
                  "300 deny ip6 from 2001:db8::/32 to any"],
        "tables": [{"name": "t", "type": "addr", "entries": ["198.51.100.0/24"]}],
    })


def _warm_firewall(graph, batch, classifier: bool = True) -> None:
    """The firewall compiler, the graph with fw-in/fw-out and (``classifier``) the
    standalone classifier (a few rules, one table, IPv4 and IPv6 keys)."""
    from vecroute.firewall.firewall import Firewall

    cfg = _firewall_config()
    fw = Firewall(cfg, interfaces=["a"])
    graph.attach_firewall(fw)
    _load_one(batch)
    graph.run(batch, 0)
    graph.attach_firewall(None)
    _warm_worker(graph, Firewall(cfg, interfaces=["a"]))
    _warm_replay(["100 allow ip from any to any keep-state"])
    if classifier:
        _warm_classifier()


def _warm_classifier() -> None:
    """The standalone classifier (``Firewall.classify``: tools and tests)."""
    from vecroute.firewall.firewall import Firewall
    from vecroute.firewall.keys import make_key

    fw = Firewall(_firewall_config(), interfaces=["a"])
    fw.classify(np.stack([make_key("192.0.2.1", "198.51.100.1", proto=6, sport=1, dport=22,
                                   tcpflags=2),
                          make_key("2001:db8::1", "2001:db8::2", proto=17, sport=1, dport=2)]))


def _warm_worker(graph, firewall=None) -> None:
    """The compiled forwarding loop of `vecroute run` (a worker without ports)."""
    from vecroute.io.worker import warm as warm_loop

    warm_loop(graph.state.with_runtime(None), firewall)


def _load_one(batch) -> None:
    """One all-zero frame (ethernet-input drops it; compiling is what counts)."""
    z = np.zeros(1, np.int64)
    batch.load(np.zeros(64, np.uint8), z, np.full(1, 64, np.int32), z, np.zeros(1, np.int32), 0, 1)


def _warm_io(batch) -> None:
    """The ring kernels and the pcap reader/writer, on synthetic data."""
    import tempfile

    from vecroute.io import af_packet_ring
    from vecroute.io.pcap import PcapWriter, read_capture

    af_packet_ring.warm()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "w.pcap"
        with PcapWriter(path) as w:
            w.write_batch(batch.buf, batch.meta[0].astype(np.int64),
                          batch.meta[1].astype(np.int64), batch.ts, np.zeros(1, np.int32))
        read_capture(path)


def warm_parallel() -> float:
    """``warm()`` in two processes (the graph is compiled twice, with and without the
    firewall: on two cores that takes the time of one); returns the seconds it took."""
    import subprocess
    import sys

    t0 = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-c", "from vecroute.warmup import warm_firewall; warm_firewall()"]
    )
    warm(firewall=False)
    _warm_classifier()  # the child's longest tail, compiled here meanwhile
    if child.wait() != 0:
        raise SystemExit("vecroute.warmup: compiling the firewall kernels failed")
    warm(firewall=True)  # loads what the child compiled
    return time.perf_counter() - t0


if __name__ == "__main__":
    stale = clear_stale_cache()
    took = warm_parallel()
    print(f"vecroute: {stale} stale cache entries removed; kernels ready in {took:.1f} s")
