"""forwarding: in-memory full-table forwarding, vecroute vs a per-packet Python router.

The FreeBSD seeds: one route lookup per packet (r285051) and the ether_output profile
(route lookup, L2 resolution, header copy). Variants: a straightforward per-packet Python
forwarder with pytricia (baseline), vecroute IPv4 and IPv6 over the whole path (load into
the batch, parse, validate incl. checksum, lookup, TTL, rewrite), on the full Internet
table from ../shared/data. Unit: Mpps on one core. The notes give the per-node breakdown.
"""

from __future__ import annotations

import time

import numpy as np

from vecroute.measure.bench import BenchError, Experiment, Variant

PACKETS = 1 << 18
PY_PACKETS = 20_000
_state: dict = {}


def _setup() -> list[Variant]:
    from bench import forwarding as F

    path = F.DEFAULT_TABLE
    if not path.exists():
        raise BenchError("the full-table data file ../shared/data is missing")
    _, tab = F.load_table(path)
    fib, _lb4, _lb6, _m = F.build_fib(tab)
    rng = np.random.default_rng(7)
    fr4, fr6 = F.make_frames4(PACKETS, tab, rng), F.make_frames6(PACKETS, tab, rng)
    vp = F.VectorPath(fib, 256)
    vp.run(fr4)  # compile / warm the caches
    vp.run(fr6)
    py = F.PythonForwarder(tab)
    pk4 = fr4.as_python(PY_PACKETS)
    _state.update(vp=vp, fr4=fr4)

    def python4() -> float:
        t0 = time.perf_counter()
        py.forward4(pk4)
        return PY_PACKETS / (time.perf_counter() - t0) / 1e6

    return [
        Variant("python-pytricia-ipv4", python4),
        Variant("vecroute-ipv4", lambda: PACKETS / vp.run(fr4) / 1e6),
        Variant("vecroute-ipv6", lambda: PACKETS / vp.run(fr6) / 1e6),
    ]


def _notes(samples: dict[str, list[float]]) -> str:
    vp, fr4 = _state["vp"], _state["fr4"]
    prof = vp.batch_profile(fr4)
    rows = "\n".join(f"| {k} | {v:.1f} |" for k, v in prof.items())
    return ("Per-node cost for IPv4 (median over batches, ns/packet; compare the seed's "
            "ether_output profile: route lookup, L2 resolution, header copy):\n\n"
            "| node | ns/packet |\n|---|---|\n" + rows)


EXPERIMENT = Experiment(
    name="forwarding",
    title="In-memory full-table forwarding: vecroute vs a per-packet Python forwarder",
    unit="Mpps",
    seed="FreeBSD r285051 (one route lookup per packet: +19.7%) and the ether_output profile",
    setup=_setup,
    notes=_notes,
)
