"""The floors under SRv6 End and End.DX6: what their FIB lookups cost alone.

    python -m bench.srv6_floor [--repeat R] [--rounds N]

On the SRv6 benchmark's own FIB (bench/experiments/srv6.py), the bare vector lookup
(``lpm6_lookup_vec``, a vector of 256, the kernel the fused path and ip6-lookup use) of:
the plain-forwarding destination (a /48), the End SID and the End.DX6 SID (/128s: the
IPv6 trie walks 14 levels for them, 4 for a /48) and End's next segment (its second
lookup); and the probe of the /128 host table (``host6_lookup``, fib/host6.py) that the
fused path makes first for a destination behind which an SRH or an inner packet follows.
Interleaved, repeated; ns per lookup, median [min .. max]. End needs the SID's lookup
and the next segment's; End.DX6 the SID's; plain forwarding one /48: the difference is a
floor no fusion removes (docs/BENCHMARKS.md, "SRv6 on the fused path").
"""

from __future__ import annotations

import argparse
import ipaddress
import time

import numpy as np
from numba import njit

from bench.common import pin_to_one_cpu
from bench.experiments import srv6 as X
from vecroute.fib.host6 import host6_lookup
from vecroute.fib.lpm_kernels import lpm6_lookup_vec

ADDRS = {
    "plain destination (/48)": X.DST6,
    "End SID (/128)": X.SID_END,
    "End.DX6 SID (/128)": X.SID_DX6,
    "End's next segment (/48)": X.SEGS[0],
}


@njit(cache=True)
def _probe_vec(keys, vals, tabs, his, los, n, out) -> None:
    """The fused path's probe loop, alone."""
    for j in range(n):
        out[j] = host6_lookup(keys, vals, tabs[j], his[j], los[j])


def _halves(a: str) -> tuple[int, int]:
    b = ipaddress.IPv6Address(a).packed
    return int.from_bytes(b[:8], "big"), int.from_bytes(b[8:], "big")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=20000, help="vector lookups per sample")
    args = ap.parse_args()
    cpu = pin_to_one_cpu(None)
    st = X.Path().state
    n = X.VECTOR
    tabs = np.zeros(n, np.int64)
    out = np.empty(n, np.int32)
    vecs = {name: (np.full(n, _halves(a)[0], np.uint64), np.full(n, _halves(a)[1], np.uint64))
            for name, a in ADDRS.items()}
    hk, hv = st.fib6_host_keys, st.fib6_host_vals
    runs = {name: (lpm6_lookup_vec, st.fib6_roots, st.fib6_groups, his, los)
            for name, (his, los) in vecs.items()}
    for name in ("End SID (/128)", "End.DX6 SID (/128)"):
        runs[name.replace("(/128)", "host probe")] = (_probe_vec, hk, hv, *vecs[name])
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for name, (f, a, b, his, los) in runs.items():  # compile; every address has a route
        f(a, b, tabs, his, los, n, out)
        assert (out >= 0).all(), name
    for _ in range(args.repeat):
        for name, (f, a, b, his, los) in runs.items():
            t = time.perf_counter()
            for _ in range(args.rounds):
                f(a, b, tabs, his, los, n, out)
            samples[name].append((time.perf_counter() - t) / args.rounds / n * 1e9)
    print(f"bare lookups, vector {n}, pinned to CPU {cpu}, {args.repeat} rounds")
    for name, v in samples.items():
        a = np.array(v)
        print(f"{name:28s} {np.median(a):6.1f} ns [{a.min():.1f} .. {a.max():.1f}]")


if __name__ == "__main__":
    main()
