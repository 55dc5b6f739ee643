"""Compile (or load from cache) every data-path kernel once: ``python -m vecroute.warmup``.

The test suite runs this before starting its parallel workers, so each worker loads the
numba cache instead of compiling the same kernels again.
"""

from __future__ import annotations

import time

import numpy as np


def warm() -> float:
    """Run one tiny batch through the whole graph; returns the seconds it took."""
    from vecroute.control.config import parse_config
    from vecroute.fib.fib import Fib
    from vecroute.graph.dispatch import Graph
    from vecroute.packet.batch import PacketBatch

    t0 = time.perf_counter()
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
    fib = Fib.from_config(cfg)
    batch = PacketBatch(4)
    graph = Graph(fib.state(), batch)
    frame = np.zeros(64, dtype=np.uint8)
    batch.load(
        frame,
        np.zeros(1, np.int64),
        np.full(1, 64, np.int32),
        np.zeros(1, np.int64),
        np.zeros(1, np.int32),
        0,
        1,
    )
    graph.run(batch, 0)
    return time.perf_counter() - t0


if __name__ == "__main__":
    print(f"vecroute: kernels ready in {warm():.1f} s")
