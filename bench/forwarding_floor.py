"""The floor under plain forwarding: what the least a forwarder can do costs in numba here.

    python -m bench.forwarding_floor [--repeat R] [--packets N] [--cpu C]

bench.forwarding's frames (64-byte IPv4, 78-byte IPv6, random destinations inside random
prefixes of the full table) and FIB, one compiled call over every frame in vectors of 256
(the loop the workers and replay run), as a ladder in which each rung adds one piece to a
forwarder written as one parse loop, the vector lookup and one rewrite loop:

1. *load*: ``load_frames`` alone (the frame copied into its slot, its metadata reset),
2. *+ lookup*: each destination read from its slot, the vector lookup
   (``lpm4_lookup_vec_in`` / ``lpm6_lookup_vec_in``, the fused pass's kernels),
3. *+ rewrite*: the least a router must do with the answer: the load-balance's bucket, the
   adjacency, TTL - 1 with the RFC 1624 checksum update (hop limit - 1), the precomputed
   L2 header copied in front, the frame's offset / length / port and the transmit list.
   No validation, no counter: a forwarder nobody should run, the ceiling of the shape,
4. *+ checks*: the frame validated as the fused pass does (graph/fast_path.py ``for_us``,
   ``plain4``, ``plain6``: destination MAC, lengths, the IPv4 header checksum, martians,
   TTL; for an IPv6 packet the pass runs ``plain6``'s two halves, the header's checks and
   the extension-header walk, which for these frames is the same work), and the
   adjacency (a resolved rewrite within the port's MTU),
5. *+ counters*: the ports' receive and transmit packet and byte counters,
6. *+ metadata*: the metadata the graph keeps for a sent packet (L3 / L4 offsets,
   protocol, table, flags, adjacency, hash, disposition) as the fused pass leaves it,
7. *vecroute*: ``bench.forwarding.run_frames``, the fused path as it runs. Besides rung
   6's work it takes any mix of IPv4, IPv6 and SRv6 in one pass (scratch rows between
   its stages, branches on family and kind, the frame list's indirection), checks a
   packet leaving by its own port for a redirect, branches on ECMP before the bucket,
   hands back in arrival order what it does not finish, counts for ``show runtime``.

Before timing, every rung that sends must send every frame, and rungs 3 to 6, on four
vectors spread over the frames, the bytes vecroute sends on the same ports; rungs 5 and 6
the same port counters, rung 6 the same metadata of each sent packet (the ICMP bucket is
emptied first, so vecroute builds no redirect): the floor does the work it stands for.
Interleaved, repeated; ns per packet and Mpps per CPU-second, median [min .. max]. Rungs
3 to 6 are what a plain packet's work costs in this design (frames copied into slots,
the graph's metadata kept) written as one forwarder; 7 - 6 is the price of the pass's
generality (docs/BENCHMARKS.md). ``bench.srv6_floor`` runs the same rungs with H.Encaps
(``make_ladder(rung, True, True)``) on the SRv6 benchmark's frames.
"""

from __future__ import annotations

import argparse
import functools
import time
from pathlib import Path

import numpy as np
from numba import njit

from bench import forwarding as F
from bench.common import DEFAULT_TABLE, pin_to_one_cpu
from vecroute.fib.layout import (
    A_IF,
    A_RWLEN,
    A_SR_LIST,
    A_TYPE,
    ADJ_REWRITE,
    ADJ_SRV6_ENCAP,
    I_FIB4,
    I_FIB6,
    I_MTU,
    LB_N,
    LB_START,
)
from vecroute.fib.lpm_kernels import lpm4_lookup_vec_in, lpm6_lookup_vec_in
from vecroute.graph.fast_path import for_us, icmp_error_flag, plain4, plain6
from vecroute.graph.flow_hash import flow_hash6_at
from vecroute.graph.srv6_encap import first_hop_miss, write_outer
from vecroute.graph.state import (
    IFS_RX_BYTES,
    IFS_RX_PKTS,
    IFS_TX_BYTES,
    IFS_TX_PKTS,
    OPT_FIB_GEN,
    TB_CREDIT,
    TB_LAST,
)
from vecroute.packet.batch import (
    F_FW_SKIP,
    F_HLIM_DONE,
    F_IP6,
    L2_ROOM,
    M_ADJ,
    M_FIB,
    M_FLAGS,
    M_HASH,
    M_L3,
    M_L4,
    M_LEN,
    M_NEXT,
    M_OFF,
    M_PROTO,
    M_RX,
    M_TX,
    MAX_FRAME,
    SLOT,
    load_frames,
)
from vecroute.packet.checksum import ttl_decrement
from vecroute.packet.headers import (
    ETH_HLEN,
    ETH_P_IP,
    ETH_P_IPV6,
    IP4_HLEN,
    IP6_HLEN,
    rd16,
    rd32,
    rd64,
)
from vecroute.packet.intrinsics import memcpy
from vecroute.packet.node_ids import DONE_TX
from vecroute.srv6.layout import CACHE_ADJ, CACHE_GEN, CACHE_LB, LIST_HDRLEN

VS = 256
RUNGS = {1: "load", 2: "+ lookup", 3: "+ rewrite", 4: "+ checks", 5: "+ counters",
         6: "+ metadata"}
POISON = 0xEE
META = (M_OFF, M_LEN, M_TX, M_L3, M_L4, M_PROTO, M_FIB, M_FLAGS, M_ADJ, M_HASH, M_NEXT)


@functools.cache
def make_ladder(rung: int, six: bool, encap: bool = False):
    """Rung ``rung`` (1-6) over every frame of one family, compiled for it alone (``rung``,
    ``six`` and ``encap`` are constants of the closure: the other rungs' branches are not
    in its code; one kernel taking them as arguments measured 41.4 instead of 37.7 ns at
    rung 3). With ``encap`` (rungs 3-6, IPv6 frames steered into an SR policy), every
    packet is sent H.Encaps'ed as the fused pass sends it (bench/srv6_floor.py)."""

    @njit(cache=False, _nrt=False)
    def ladder(data, off, length, ts_ns, rx_if, total, buf, meta, ts, roots, groups, lb, lbb,
               adj, rwf, rww, ifc, macs, mstride, if_stats, txl, sc, ents, active,
               srv6) -> int:
        return _ladder(rung, six, encap, data, off, length, ts_ns, rx_if, total, buf, meta,
                       ts, roots, groups, lb, lbb, adj, rwf, rww, ifc, macs, mstride,
                       if_stats, txl, sc, ents, active, srv6)

    return ladder


@njit(cache=True, _nrt=False, inline="always")
def _ladder(rung, six, encap, data, off, length, ts_ns, rx_if, total, buf, meta, ts, roots,
            groups, lb, lbb, adj, rwf, rww, ifc, macs, mstride, if_stats, txl, sc, ents,
            active, srv6) -> int:
    """The rungs' one body; returns the packets sent (rungs 3-6), or a sum of what was
    loaded or looked up, so nothing is optimised away. H.Encaps (``encap``) takes what
    the fused pass needs for a policy with one segment list whose first hop has one
    adjacency (bench.srv6's): the list from the adjacency, the flow hash (the outer flow
    label), the list's first-hop cache checked against the FIB's generation, the
    headroom, the encapsulated size against the first hop's MTU, then the inner hop limit
    and ``write_outer``. It keeps no ``show runtime`` or SRv6 counts: no rung does (7 - 6
    includes them). ``srv6`` is (sr_list, sr_hdr, sr_cache, the state's options):
    a call of 30 arguments or more is one Python cannot make without ``*args``, which
    numba does not inline."""
    sr_list, sr_hdr, sr_cache, opts = srv6
    gen = opts[OPT_FIB_GEN]  # read once a call (the pass reads it once a batch)
    slot, l3s, iplen, tab = sc[0], sc[1], sc[2], sc[3]
    dst4, hi6, lo6, out = (sc[4].view(np.uint32), sc[5].view(np.uint64),
                           sc[6].view(np.uint64), sc[7].view(np.int32))
    et_want = ETH_P_IPV6 if six else ETH_P_IP
    col = I_FIB6 if six else I_FIB4
    pos = 0
    res = 0
    while pos < total:
        c = min(VS, total - pos)
        load_frames(buf, meta, ts, data, off, length, ts_ns, rx_if, pos, c)
        pos += c
        if rung < 2:
            res += c
            continue
        nc = 0
        for i in range(c):
            o = np.int64(meta[M_OFF, i])
            l3 = o + ETH_HLEN
            t = 0
            n = np.int64(meta[M_LEN, i]) - ETH_HLEN
            if rung >= 4:  # as the fused pass's parse
                ln = np.int64(meta[M_LEN, i])
                rx = meta[M_RX, i]
                if meta[M_FLAGS, i] != 0 or ln > MAX_FRAME or ln < ETH_HLEN + IP4_HLEN:
                    continue
                if not for_us(buf, o, macs, mstride, rx) or rd16(buf, o + 12) != et_want:
                    continue
                if six:
                    if not plain6(buf, l3, ln - ETH_HLEN):
                        continue
                    n = IP6_HLEN + np.int64(rd16(buf, l3 + 4))
                else:
                    if not plain4(buf, l3, ln - ETH_HLEN):
                        continue
                    n = np.int64(rd16(buf, l3 + 2))
                t = ifc[rx, col]
            slot[nc] = i
            l3s[nc] = l3
            iplen[nc] = n
            tab[nc] = t
            if six:
                hi6[nc] = rd64(buf, l3 + 24)
                lo6[nc] = rd64(buf, l3 + 32)
            else:
                dst4[nc] = rd32(buf, l3 + 16)
            nc += 1
        if six:
            lpm6_lookup_vec_in(roots, groups, tab, hi6, lo6, nc, out, ents, active)
        else:
            lpm4_lookup_vec_in(roots, groups, tab, dst4, nc, out, ents)
        if rung < 3:
            for q in range(nc):
                res += out[q]
            continue
        tx = 0
        for q in range(nc):
            v = out[q]
            if v < 0 or lb[v, LB_N] != 1:  # every route here has one next hop
                continue
            i = slot[q]
            l3 = l3s[q]
            a = np.int64(lbb[lb[v, LB_START]])
            ln = iplen[q]
            h = np.uint32(0)
            proto = np.int64(buf[l3 + (6 if six else 9)])
            l4 = l3 + (IP6_HLEN if six else IP4_HLEN)
            if encap:
                lst = np.int64(adj[a, A_SR_LIST])
                if rung >= 4 and (adj[a, A_TYPE] != ADJ_SRV6_ENCAP or lst < 0):
                    continue
                h = flow_hash6_at(buf, l3, l4, l3 + ln, proto, 0)
                if sr_cache[lst, CACHE_GEN] != gen:
                    first_hop_miss(roots, groups, lb, lbb, sr_list, sr_hdr, sr_cache, lst,
                                   gen)
                hl = np.int64(sr_list[lst, LIST_HDRLEN])
                a = sr_cache[lst, CACHE_ADJ]
                # (not the pass's bound check of a: that one compare costs 2.6 ns here, and
                # nothing in the pass; a plain packet's adjacency is not bound-checked either)
                if rung >= 4 and (sr_cache[lst, CACHE_LB] < 0 or a < 0
                                  or l3 - hl - L2_ROOM < i * SLOT):
                    continue
                ln += hl
            ifx = adj[a, A_IF]
            if rung >= 4 and (adj[a, A_TYPE] != ADJ_REWRITE or ln > ifc[ifx, I_MTU]):
                continue
            ttl_decrement(buf, l3, six)
            if encap:
                l3, proto = write_outer(buf, l3, six, iplen[q], h, sr_hdr, sr_list, lst)
                l4 = l3 + IP6_HLEN
            rw = np.int64(adj[a, A_RWLEN])
            if rw == ETH_HLEN:  # as the fused pass: a constant size is an inlined copy
                memcpy(buf, l3 - rw, rwf, a * rww, ETH_HLEN)
            else:
                memcpy(buf, l3 - rw, rwf, a * rww, rw)
            if rung >= 5:
                rx = meta[M_RX, i]
                if_stats[rx, IFS_RX_PKTS] += 1
                if_stats[rx, IFS_RX_BYTES] += meta[M_LEN, i]
                if_stats[ifx, IFS_TX_PKTS] += 1
                if_stats[ifx, IFS_TX_BYTES] += rw + ln
            if rung >= 6:
                meta[M_L3, i] = l3
                meta[M_L4, i] = l4
                meta[M_PROTO, i] = proto
                meta[M_FIB, i] = tab[q]
                if encap:
                    meta[M_FLAGS, i] = F_IP6 | F_HLIM_DONE | F_FW_SKIP
                else:
                    meta[M_FLAGS, i] = (F_IP6 if six else 0) | icmp_error_flag(
                        buf, l4, l3 + ln, proto, six)
                meta[M_ADJ, i] = a
                meta[M_HASH, i] = np.int32(h)
                meta[M_NEXT, i] = DONE_TX
            meta[M_OFF, i] = l3 - rw
            meta[M_LEN, i] = rw + ln
            meta[M_TX, i] = ifx
            txl[tx] = i
            tx += 1
        res += tx
    return res


class Ladder:
    """The rungs' calls over one graph's state and batch (its FIB, ports, slots)."""

    def __init__(self, graph, batch) -> None:
        self.batch = batch
        _, _, _, self.txl, _, self.dp, *_ = graph.loop_args()
        self.sc = np.empty((8, VS), np.int64)
        self.ents = np.empty(VS, np.int64)
        self.active = np.empty(VS, np.int64)

    def call(self, rung: int, six: bool, fr, encap: bool = False):
        """A function running rung ``rung`` over every frame of fr (data, off, length, ts,
        rx, n) once: the packets sent (rungs 3-6)."""
        kernel = make_ladder(rung, six, encap)
        dp, b = self.dp, self.batch
        roots, groups = ((dp.fib6_roots, dp.fib6_groups) if six
                         else (dp.fib4_roots, dp.fib4_groups))
        args = (b.buf, b.meta, b.ts, roots, groups, dp.lb, dp.lb_buckets, dp.adj,
                dp.adj_rw.reshape(-1), np.int64(dp.adj_rw.shape[1]), dp.ifc,
                dp.if_mac.reshape(-1), np.int64(dp.if_mac.shape[1]), dp.if_stats, self.txl,
                self.sc, self.ents.view(np.uint32), self.active,
                (dp.sr_list, dp.sr_hdr, dp.sr_cache, dp.opts))

        def go() -> int:
            return kernel(fr.data, fr.off, fr.length, fr.ts, fr.rx, fr.n, *args)
        return go


def check_against_vecroute(label: str, fr, path, rung_call) -> None:
    """Rungs 3-6 (``rung_call(rung, frames)``) on four vectors spread over the frames
    against vecroute's ``Graph.run`` on the same (``path``: its graph, batch and state):
    the same bytes on the same ports (3-6), the same port counters (5, 6), the same
    metadata of every sent packet (6). The ICMP bucket is emptied first, so that vecroute
    builds no redirect and every packet maps to its slot one to one. Every run starts
    from slots filled with 0xEE, headroom included: what a run leaves unwritten in front
    of a packet cannot pass for what the run before it wrote. Exits with a message on the
    first difference."""
    b, st = path.batch, path.state
    cols = [IFS_RX_PKTS, IFS_RX_BYTES, IFS_TX_PKTS, IFS_TX_BYTES]
    for start in (0, fr.n // 4 // VS * VS, fr.n // 2 // VS * VS, 3 * fr.n // 4 // VS * VS):
        end = start + VS
        one = F.Frames(fr.data, fr.off[start:end], fr.length[start:end], fr.ts[start:end],
                       fr.rx[start:end])
        st.icmp_tb[TB_CREDIT] = 0
        st.icmp_tb[TB_LAST] = F.NOW_NS
        s0 = st.if_stats[:, cols].copy()
        b.buf[: VS * SLOT] = POISON
        b.load(one.data, one.off, one.length, one.ts, one.rx, 0, VS)
        sent = path.graph.run(b, F.NOW_NS)
        counted = st.if_stats[:, cols] - s0
        ours = {int(i): (int(b.meta[M_TX, i]), b.frame(int(i)), b.meta[list(META), i].copy())
                for i in sent}
        if sorted(ours) != list(range(VS)):
            raise SystemExit(f"{label}: vecroute did not send each packet of the vector once")
        for rung in (3, 4, 5, 6):
            s0 = st.if_stats[:, cols].copy()
            b.buf[: VS * SLOT] = POISON
            rung_call(rung, one)()
            for i in range(VS):
                tx, frame, meta = ours[i]
                if (int(b.meta[M_TX, i]), b.frame(i)) != (tx, frame):
                    raise SystemExit(f"{label} rung {rung}: slot {i} is not the frame "
                                     "vecroute sends")
                if rung >= 6 and not np.array_equal(b.meta[list(META), i], meta):
                    raise SystemExit(f"{label} rung {rung}: slot {i}'s metadata differs")
            if rung >= 5 and not np.array_equal(st.if_stats[:, cols] - s0, counted):
                raise SystemExit(f"{label} rung {rung}: port counters differ from vecroute's")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--packets", type=int, default=1 << 20, help="frames per family")
    ap.add_argument("--cpu", type=int, default=None)
    args = ap.parse_args(argv)
    from vecroute.warmup import clear_stale_cache

    clear_stale_cache((Path(__file__).parent,))  # these kernels embed the lookups
    cpu = pin_to_one_cpu(args.cpu)
    _, tab = F.load_table(DEFAULT_TABLE)
    rng = np.random.default_rng(F.SEED)
    frs = {4: F.make_frames4(args.packets, tab, rng), 6: F.make_frames6(args.packets, tab, rng)}
    fib, _, _, _ = F.build_fib(tab)
    path = F.VectorPath(fib, VS)
    b = path.batch
    rungs = Ladder(path.graph, b)

    def rung_call(rung: int, fam: int, fr: F.Frames):
        return rungs.call(rung, fam == 6, fr)

    def vecroute_call(fam: int):
        fr = frs[fam]

        def go() -> int:
            path.run_compiled(fr)
            return path.last_sent
        return go

    calls = {}
    for fam in (4, 6):
        for rung, nm in RUNGS.items():
            calls[f"IPv{fam} {nm}"] = rung_call(rung, fam, frs[fam])
        calls[f"IPv{fam} vecroute (fused path)"] = vecroute_call(fam)
    sent = {nm: go() for nm, go in calls.items()}  # compiles
    for nm, n in sent.items():  # every rung that sends sends every frame, as vecroute does
        fam = int(nm[3])  # (vecroute also sends a few redirects: their bucket's burst)
        if "load" not in nm and "lookup" not in nm and not (
                frs[fam].n <= n <= frs[fam].n + 64 if "vecroute" in nm else n == frs[fam].n):
            raise SystemExit(f"{nm}: sent {n} of {frs[fam].n}: the frames do not all forward")
    for fam in (4, 6):
        check_against_vecroute(f"IPv{fam}", frs[fam], path,
                               lambda rung, one, fam=fam: rung_call(rung, fam, one))
    samples: dict[str, list[float]] = {nm: [] for nm in calls}
    for _ in range(args.repeat):
        for nm, go in calls.items():
            t = time.process_time()
            go()
            samples[nm].append((time.process_time() - t) / frs[int(nm[3])].n * 1e9)
    print(f"forwarding floor, vector {VS}, {args.packets} frames per family, pinned to CPU "
          f"{cpu}, {args.repeat} rounds, per CPU-second")
    for nm, v in samples.items():
        a = np.array(v)
        med = float(np.median(a))
        print(f"{nm:32s} {med:6.1f} ns [{a.min():.1f} .. {a.max():.1f}]  "
              f"{1e3 / med:6.2f} Mpps")


if __name__ == "__main__":
    main()
