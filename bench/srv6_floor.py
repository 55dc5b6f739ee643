"""The floors under SRv6 End and End.DX6: what their FIB lookups cost alone.

    python -m bench.srv6_floor [--repeat R] [--rounds N]

On the SRv6 benchmark's own FIB (bench/experiments/srv6.py), the bare vector lookup
(``lpm6_lookup_vec``, a vector of 256, the kernel the fused path and ip6-lookup use) of:
the plain-forwarding destination (a /48), the End SID and the End.DX6 SID (/128s: the
IPv6 trie walks 14 levels for them, 4 for a /48) and End's next segment (its second
lookup); and the probe of the /128 host table (``host6_lookup``, fib/host6.py) that the
fused path makes first for a destination behind which an SRH or an inner packet follows.
And H.Encaps' own work, alone over the same vector of the benchmark's 78-byte IPv6 frames:
the flow hash of the inner packet (the outer flow label, RFC 6437; ``flow_hash6_at``) and
the outer header's write (``write_outer``: one copy of the precomputed IPv6 header + SRH of
the two-segment list, then length, hop limit, traffic class, flow label).
Interleaved, repeated; ns per lookup (or packet), median [min .. max]. End needs the SID's lookup
and the next segment's; End.DX6 the SID's; plain forwarding one /48: the difference is a
floor no fusion removes (docs/BENCHMARKS.md, "SRv6 on the fused path").
"""

from __future__ import annotations

import argparse
import ipaddress
import time
from pathlib import Path

import numpy as np
from numba import njit

from bench.common import pin_to_one_cpu
from bench.experiments import srv6 as X
from vecroute.fib.host6 import host6_lookup
from vecroute.fib.lpm_kernels import lpm6_lookup_vec
from vecroute.graph.flow_hash import flow_hash6_at
from vecroute.graph.srv6_encap import write_outer
from vecroute.graph.state import LIST_HDRLEN, LIST_SRH

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


@njit(cache=True)
def _hash_vec(buf, stride, l3, end, n, out) -> None:
    """The flow hash of n IPv6/UDP packets, one every ``stride`` bytes."""
    for j in range(n):
        b = j * stride + l3
        out[j] = flow_hash6_at(buf, b, b + 40, j * stride + end, 17, 0)


@njit(cache=True)
def _outer_vec(buf, stride, l3, iplen, n, sr_hdr, sr_list, lst, hs) -> None:
    """write_outer for n packets, each given its hash (the inner packets stay as they are:
    only the headroom in front of them is written)."""
    for j in range(n):
        write_outer(buf, j * stride + l3, True, iplen, hs[j], sr_hdr, sr_list, lst)


def _encap_runs(st, n: int) -> dict:
    """(function, args) of H.Encaps' two floors over n of the benchmark's 78-byte frames."""
    frame, _ = X.template("encaps2-v6", 78)
    room = 128  # headroom for the outer header, as a batch slot has
    stride = room + len(frame)
    buf = np.zeros(stride * n, np.uint8)
    for j in range(n):
        buf[j * stride + room : (j + 1) * stride] = np.frombuffer(frame, np.uint8)
    l3 = room + 14
    two = [i for i in range(st.sr_list.shape[0])
           if st.sr_list[i, LIST_SRH] and st.sr_list[i, LIST_HDRLEN] == 40 + 8 + 2 * 16]
    if not two:
        raise RuntimeError("no two-segment list in the benchmark's state")
    hs = np.empty(n, np.uint32)
    return {
        "H.Encaps flow hash": (_hash_vec, (buf, stride, l3, stride, n, hs)),
        "H.Encaps outer header write": (
            _outer_vec, (buf, stride, l3, len(frame) - 14, n, st.sr_hdr, st.sr_list, two[0], hs)),
    }


def _halves(a: str) -> tuple[int, int]:
    b = ipaddress.IPv6Address(a).packed
    return int.from_bytes(b[:8], "big"), int.from_bytes(b[8:], "big")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=20000, help="vector lookups per sample")
    args = ap.parse_args()
    from vecroute.warmup import clear_stale_cache

    clear_stale_cache((Path(__file__).parent,))  # these kernels embed the lookups
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
    calls = {name: (f, (a, b, tabs, his, los, n, out))
             for name, (f, a, b, his, los) in runs.items()}
    for name, (f, fargs) in calls.items():  # compile; every address has a route
        f(*fargs)
        assert (out >= 0).all(), name
    calls.update(_encap_runs(st, n))
    for f, fargs in calls.values():
        f(*fargs)
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(args.repeat):
        for name, (f, fargs) in calls.items():
            t = time.perf_counter()
            for _ in range(args.rounds):
                f(*fargs)
            samples[name].append((time.perf_counter() - t) / args.rounds / n * 1e9)
    print(f"bare lookups, vector {n}, pinned to CPU {cpu}, {args.repeat} rounds")
    for name, v in samples.items():
        a = np.array(v)
        print(f"{name:28s} {np.median(a):6.1f} ns [{a.min():.1f} .. {a.max():.1f}]")


if __name__ == "__main__":
    main()
