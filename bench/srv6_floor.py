"""The floors under SRv6 End and End.DX6: what their FIB lookups cost alone.

    python -m bench.srv6_floor [--repeat R] [--rounds N] [--packets P]

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

Then H.Encaps as a whole over the bare forwarder of ``bench.forwarding_floor`` (its rungs
3, the forwarder that checks nothing, and 6, the checks, counters and metadata vecroute
keeps), on the benchmark's plain IPv6 and two-segment H.Encaps frames in the batch's own
slots (the outer header lands in the lines before the packet, as it does in vecroute),
next to vecroute's ``Graph.run`` on the same frames. Rung 6's H.Encaps sends the bytes,
port counts and metadata vecroute does (checked on four vectors). The least H.Encaps adds to
a plain packet, rung 6's difference, bounds the ratio vecroute can reach against its own
plain IPv6: plain / (plain + that difference).
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
from vecroute.graph.state import IFS_TX_PKTS
from vecroute.srv6.layout import LIST_HDRLEN, LIST_SRH

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
    ap.add_argument("--packets", type=int, default=X.PACKETS,
                    help="frames per sample of the H.Encaps floor")
    args = ap.parse_args()
    if args.packets < 4 * X.VECTOR:
        ap.error(f"--packets: at least {4 * X.VECTOR} (the check takes four vectors)")
    from vecroute.warmup import clear_stale_cache

    clear_stale_cache((Path(__file__).parent,))  # these kernels embed the lookups
    cpu = pin_to_one_cpu(None)
    path = X.Path()
    st = path.state
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
    _encap_floor(path, args.packets, args.repeat)


ENCAP_KINDS = {"plain IPv6": "ip6-fwd", "H.Encaps 2 SIDs": "encaps2-v6"}


def _encap_floor(path: X.Path, packets: int, repeat: int) -> None:
    """H.Encaps against plain IPv6 over the bare forwarder and in vecroute (module doc)."""
    from bench.forwarding import Frames
    from bench.forwarding_floor import Ladder, check_against_vecroute

    rungs = Ladder(path.graph, path.batch)
    calls = {}
    for label, kind in ENCAP_KINDS.items():
        fr = X.Frames.of(kind, 78, packets)
        encap = kind != "ip6-fwd"
        check_against_vecroute(label, Frames(fr.data, fr.off, fr.length, fr.ts, fr.rx), path,
                               lambda rung, one, encap=encap: rungs.call(rung, True, one,
                                                                         encap))
        for rung in (3, 6):
            calls[(label, f"rung {rung}")] = rungs.call(rung, True, fr, encap)
        calls[(label, "vecroute")] = lambda fr=fr: path.run(fr)
    tx = path.state.if_stats[:, IFS_TX_PKTS]
    for key, go in calls.items():  # compile, and every frame sent (vecroute's: counted)
        t0 = int(tx.sum())
        sent = go()
        if key[1] == "vecroute":
            sent = int(tx.sum()) - t0
        if sent != packets:
            raise SystemExit(f"{key}: sent {sent} of {packets}")
    samples: dict[tuple[str, str], list[float]] = {key: [] for key in calls}
    for _ in range(repeat):
        for key, go in calls.items():
            t = time.process_time()
            go()
            samples[key].append((time.process_time() - t) / packets * 1e9)
    med = {key: float(np.median(v)) for key, v in samples.items()}
    print(f"\nH.Encaps over the bare forwarder, 78-byte frames, {packets} a sample, "
          "ns a packet per CPU-second, median [min .. max]")
    print(f"{'':22s}" + "".join(f"{c:>24s}" for c in ("rung 3", "rung 6", "vecroute")))
    for label in ENCAP_KINDS:
        print(f"{label:22s}" + "".join(
            f"{med[(label, c)]:8.1f} [{min(samples[(label, c)]):.1f} .. "
            f"{max(samples[(label, c)]):.1f}]".rjust(24) for c in ("rung 3", "rung 6", "vecroute")))
    plain, enc = ENCAP_KINDS
    extra = {c: med[(enc, c)] - med[(plain, c)] for c in ("rung 3", "rung 6", "vecroute")}
    print(f"{'H.Encaps - plain':22s}" + "".join(f"{extra[c]:24.1f}" for c in extra))
    base = med[(plain, "vecroute")]
    print(f"vecroute's H.Encaps: {base / med[(enc, 'vecroute')]:.1%} of its plain IPv6; "
          f"the most it can be with rung 6's difference: {base / (base + extra['rung 6']):.1%}"
          f" (rung 3's: {base / (base + extra['rung 3']):.1%})")


if __name__ == "__main__":
    main()
