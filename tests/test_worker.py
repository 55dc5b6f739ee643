"""The data-plane worker: its compiled loop without the GIL, its calls, its rings.

The live router's end-to-end behaviour is in test_live_router.py / test_live_isolation.py;
here the pieces are checked one by one, without namespaces: the loop runs beside Python
(nogil), a call reaches a sleeping worker at once, the punt policer and the rings bound
what a worker hands the control plane, and injected records enter the graph where they
should.
"""

from __future__ import annotations

import ipaddress
import threading
import time

import numpy as np
import pytest
from conftest import DST4, H0_IP4, R0, Router, base_config
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from vecroute.control.punts import (
    IcmpError,
    Pending,
    decode_punts,
    inject_frame,
    inject_packets,
)
from vecroute.graph import counters as C
from vecroute.graph.dataplane import fib_state
from vecroute.graph.state import OPT_LIVE
from vecroute.io import worker_loop as L
from vecroute.io.channel import (
    IH_COLS,
    PH_COLS,
    R_DROPS,
    R_POLICED,
    Ring,
    punt_policer,
    punts_to_ring,
)
from vecroute.io.worker import DataPlaneWorker
from vecroute.packet.batch import M_ERR, M_LEN, M_NEXT, M_OFF, M_RX, reset_slot
from vecroute.packet.node_ids import DONE_PUNT


def _worker(policy: str = "interrupt") -> DataPlaneWorker:
    rt = Router(base_config())
    return DataPlaneWorker(0, [], rt.graph.state.with_runtime(None), 32, policy=policy)


def test_loop_runs_without_the_gil():
    # a busy worker with a 0.6 s time slice: if it held the GIL, this thread could not
    # run Python meanwhile
    w = _worker("busy")
    w.ctl[L.W_SLICE_NS] = 600_000_000
    args = w._loop_args()
    t = threading.Thread(target=L.forward_loop, args=args)
    t0 = time.monotonic()
    t.start()
    gaps, last, iters = [], time.monotonic(), 0
    while t.is_alive():
        now = time.monotonic()
        gaps.append(now - last)
        last = now
        iters += 1
    took = time.monotonic() - t0
    w.close()
    assert took >= 0.5, took  # the loop really ran its slice
    assert iters > 10_000 and max(gaps) < 0.1, (iters, max(gaps))
    assert w.ctl[L.W_HEARTBEAT] > 0


def test_call_wakes_a_sleeping_worker_and_stop_joins():
    w = _worker("interrupt")
    w.ctl[L.W_POLL_MS] = 5000  # without the wake eventfd a call would wait 5 s
    w.start()
    try:
        time.sleep(0.3)  # asleep in poll(2) by now
        assert w.ctl[L.W_SLEEPS] >= 1
        t0 = time.monotonic()
        assert w.call(lambda w: threading.current_thread().name).result(2) == w._thread.name
        assert time.monotonic() - t0 < 0.2
        fut = w.call(lambda w: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            fut.result(2)
        assert w.alive()  # a failing call is the caller's error, not the worker's
    finally:
        t0 = time.monotonic()
        w.close()
        assert not w.alive() and time.monotonic() - t0 < 1.0


def test_swap_installs_tables_and_keeps_runtime():
    w = _worker()
    w.start()
    try:
        w.state.counters[C.C_NO_ROUTE] = 7  # runtime of this worker
        rt = Router(base_config())
        tables = rt.graph.state
        w.swap(tables).result(2)
        st = w.state
        assert st.fib4_roots is tables.fib4_roots and st.adj is tables.adj  # shared tables
        assert st.adj_last_req is not tables.adj_last_req  # shadow: a private copy
        assert st.counters[C.C_NO_ROUTE] == 7 and st.counters is not tables.counters
        assert st.opts[OPT_LIVE] == 1
    finally:
        w.close()


def test_ring_is_bounded_and_fifo():
    r = Ring(4, PH_COLS)
    for k in range(4):
        assert r.push((C.C_ARP_PUNT, k, 3), bytes([k]) * 3)
    assert not r.push((C.C_ARP_PUNT, 9, 3), b"xyz")  # full: refused and counted
    assert r.ctl[R_DROPS] == 1
    got = r.pop(2)
    assert [int(h[1]) for h, _ in got] == [0, 1] and got[1][1] == b"\x01\x01\x01"
    for k in (4, 5):
        assert r.push((C.C_ARP_PUNT, k, 1), b"z")
    assert [int(h[1]) for h, _ in r.pop(10)] == [2, 3, 4, 5] and len(r) == 0
    assert not r.push((0, 0, 3000), b"x" * 3000)  # longer than a record


def _nd_punts(n: int, sources: int):
    """A batch of n ND packets punted by the graph, from ``sources`` IPv6 addresses."""
    rt = Router(base_config())
    b = rt.batch
    for i in range(n):
        frame = bytearray(80)
        frame[12:14] = b"\x86\xdd"
        frame[14 + 8 : 14 + 24] = (0x20010DB8 << 96 | (i % sources)).to_bytes(16, "big")
        reset_slot(b.meta, i, 0, len(frame))
        o = int(b.meta[M_OFF, i])
        b.buf[o : o + len(frame)] = np.frombuffer(bytes(frame), np.uint8)
        b.meta[M_NEXT, i] = DONE_PUNT
        b.meta[M_ERR, i] = C.C_ND_PUNT
    b.nalloc[0] = n
    return rt, b


def test_punts_are_policed_per_source_and_per_reason():
    pol = punt_policer({"nd": (1000, 300)}, key_rate=(10, 50))
    rt, b = _nd_punts(200, 1)  # one chatty source: its own bucket stops it
    ring = Ring(1024, PH_COLS)
    st = rt.graph.state
    n = punts_to_ring(b.buf, b.meta, b.nalloc, st.adj, st.counters, pol, ring.ctl, ring.hdr,
                      ring.data, 10**9)
    assert n == 50 and st.counters[C.C_PUNT_POLICED] == 150 and ring.ctl[R_POLICED] == 150
    # many sources (an NS flood from random addresses): the per-reason bucket holds;
    # the 250 left in it go through (collisions of the hashed keys only make it stricter)
    rt, b = _nd_punts(400, 400)
    st = rt.graph.state
    n = punts_to_ring(b.buf, b.meta, b.nalloc, st.adj, st.counters, pol, ring.ctl, ring.hdr,
                      ring.data, 10**9)
    assert 200 <= n <= 250 and n + st.counters[C.C_PUNT_POLICED] == 400
    recs = decode_punts(3, ring.pop(2000))
    assert len(recs) == 50 + n and all(r[0] == "nd" and r[1] == 0 for r in recs)
    assert len(recs[0][2]) == 80  # the whole frame


def test_full_punt_ring_counts_and_keeps_the_rest():
    pol = punt_policer()
    rt, b = _nd_punts(40, 40)
    ring = Ring(16, PH_COLS)
    st = rt.graph.state
    n = punts_to_ring(b.buf, b.meta, b.nalloc, st.adj, st.counters, pol, ring.ctl, ring.hdr,
                      ring.data, 10**9)
    assert n == 16 and st.counters[C.C_PUNT_QUEUE_FULL] == 24 and ring.ctl[R_DROPS] == 24


def test_injected_frame_and_packet_enter_the_graph():
    from vecroute.control.forwarder import Forwarder

    rt = Router(base_config())
    fwd = Forwarder(rt.fib, [], 32)
    frame = bytes(Ether(dst="02:00:00:00:00:99", src=R0) / IP(dst="192.0.2.50") / UDP())
    assert inject_frame(fwd.inject, 1, frame)
    # a packet released after resolution: looked up and forwarded like any other
    pkt = bytes(IP(src=H0_IP4, dst=DST4, ttl=9) / UDP(dport=7))
    assert inject_packets(fwd.inject, [Pending(0, 0, 4, pkt, 0, 0)], None) == 0
    sent: list[tuple[int, bytes]] = []
    n, _ = fwd.forward(0, lambda p, f: sent.append((p, f)))
    assert n == 2
    assert (1, frame) in sent  # as it was, on the port asked for
    fwd_ip = [IP(f[14:]) for _, f in sent if f != frame]
    assert len(fwd_ip) == 1 and fwd_ip[0].dst == DST4 and fwd_ip[0].ttl == 8


def test_packet_records_never_carry_the_linux_frame_flag():
    """F_INJ_L2 makes fw-out treat a packet as one of Linux's frames: a packet record
    (lookup again, ICMP error) that claims it loses it on the way into the batch."""
    from vecroute.io.channel import ring_to_batch
    from vecroute.packet.batch import F_INJ_L2, F_LOCAL_ORIGIN, M_FLAGS, PacketBatch

    ring = Ring(8, IH_COLS)
    pkt = bytes(IP(src=H0_IP4, dst=DST4, ttl=9) / UDP(dport=7))
    flags = F_INJ_L2 | F_LOCAL_ORIGIN
    assert inject_packets(ring, [Pending(0, 0, 4, pkt, 0, flags)], None) == 0
    assert inject_packets(ring, [Pending(0, 0, 4, pkt, 0, flags)],
                          IcmpError(11, (3, 1), (1, 3))) == 0
    b = PacketBatch(8)
    assert ring_to_batch(ring.ctl, ring.hdr, ring.data, b.buf, b.meta, b.ts, 0, 8, 1) == 2
    for i in range(2):
        got = int(b.meta[M_FLAGS, i])
        assert not got & F_INJ_L2 and got & F_LOCAL_ORIGIN  # the other flags stay


def test_oversized_inject_record_is_refused():
    from vecroute.control.forwarder import Forwarder

    rt = Router(base_config())
    fwd = Forwarder(rt.fib, [], 8)
    assert not inject_frame(fwd.inject, 0, b"\x00" * 5000)
    assert fwd.inject.ctl[R_DROPS] == 1
    assert fwd.forward(0, lambda p, f: None)[0] == 0
    m = fwd.batch.meta
    assert int(m[M_LEN, 0]) >= 0 and int(m[M_RX, 0]) >= -1  # nothing was loaded


def test_inject_reserve_keeps_room_for_the_control_planes_own_frames():
    # Linux's frames (linux-cp) stop while no more than a quarter of the records are free;
    # the control plane's own still get those, and only a truly full ring counts
    ring = Ring(8, IH_COLS)
    frame = b"\x02" * 60
    took = 0
    while inject_frame(ring, 1, frame, linux=True):
        took += 1
        assert took <= 8
    assert took == 6 and len(ring) == 6 and ring.ctl[R_DROPS] == 0
    assert inject_frame(ring, 1, frame) and inject_frame(ring, 1, frame)
    assert not inject_frame(ring, 1, frame) and ring.ctl[R_DROPS] == 1


def test_workers_get_frozen_copies_of_the_tables():
    # the control plane changes its arrays in place (a learnt MAC) and grows them; what a
    # worker reads must never change under it
    rt = Router(base_config())
    live = fib_state(rt.fib)
    frozen = live.frozen()
    for name in ("adj", "adj_rw", "lb", "lb_buckets", "fib4_roots", "fib4_groups", "sr_cache"):
        assert not np.shares_memory(getattr(frozen, name), getattr(live, name)), name
    before = frozen.adj_rw.copy()
    v = rt.fib.version
    rt.fib.add_neighbor("192.0.2.3", b"\x02\x00\x00\x00\x77\x77", "eth1")
    assert rt.fib.version > v  # the change is seen, so the router publishes a new copy
    assert np.array_equal(frozen.adj_rw, before)
    assert frozen.counters is live.counters  # runtime is not copied (with_runtime does it)


def test_a_replaced_fib_is_freed_even_with_a_frozen_heap():
    import gc
    import weakref

    rt = Router(base_config())
    ref = weakref.ref(rt.fib)
    gc.freeze()  # as the live router does: frozen cycles would never be collected
    try:
        rt.fib = None
        rt.graph = rt.state = rt.firewall = None
        assert ref() is None, gc.get_referrers(ref())
    finally:
        gc.unfreeze()


NH = ipaddress.ip_address("192.0.2.3")


def test_reload_keeps_what_the_neighbour_table_knows():
    from vecroute.control.neighbors import NeighborTable
    from vecroute.control.router import LiveRouter
    from vecroute.graph.dataplane import build_dataplane

    rt = Router(base_config())
    lr = LiveRouter.__new__(LiveRouter)  # the control plane alone: no ports, no workers
    lr.cfg, lr.fib, lr.workers, lr.loop, lr.config_path = rt.cfg, rt.fib, [], None, "x"
    lr._published, lr._commit_pending, lr._outbox = None, False, {}
    lr.neigh = NeighborTable(rt.fib, lambda ifx, f: None, lambda p, e=None: None)
    mac = b"\x02\x00\x00\x00\x55\x66"
    lr.neigh.learn(1, NH, mac, 0, create=True, confirmed=True)
    new = build_dataplane(rt.cfg).fib  # built from the file: knows nothing of it
    assert new.neighbors.get((1, NH)) is None
    lr._install(rt.cfg, new, [])
    assert lr.fib is new and lr.neigh.fib is new
    assert new.neighbors[(1, NH)] == mac
