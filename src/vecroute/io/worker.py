"""A data-plane worker: a thread that runs the compiled forwarding loop over its ports.

The worker owns its packet sockets (a PACKET_FANOUT share of every port when there are
several workers), its batch, its graph scratch and its *runtime* (counters, statistics,
token buckets, partial datagrams, firewall states), and two rings to the control plane:
punts out, injections in. It shares the *tables* the control plane builds.

The control plane never touches the worker's state while it forwards. It asks: ``call(fn)``
queues ``fn(worker)``, bumps the loop's request word and wakes it; the loop returns
between two batches, the thread runs the queued calls (swap the tables in, apply a
firewall command, read firewall states) and re-enters the loop. A call's answer comes back
as a concurrent.futures.Future. The thread holds the GIL only for those moments.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

import numpy as np

from vecroute.firewall.states import state_capacity_limit
from vecroute.graph.dispatch import Graph
from vecroute.graph.state import OPT_LIVE, DataPlaneState
from vecroute.io import worker_loop as L
from vecroute.io.af_packet_ring import (
    J_BASE,
    J_COLS,
    J_SLOTS,
    PD_COLS,
    PD_TX_MODE,
    PD_TX_VNET,
    TXM_MMSG,
)
from vecroute.io.capture import CAPTURE_RING, CR_COLS, capture_config
from vecroute.io.channel import IH_COLS, PH_COLS, Ring, punt_policer
from vecroute.io.syscalls import POLLIN
from vecroute.packet.batch import SLOT, PacketBatch

log = logging.getLogger("vecroute.worker")

PUNT_RING = 1024  # records
INJECT_RING = 1024
POLL_MS = 100  # the longest sleep: a stop or a time slice is noticed within it
# The loop returns to Python only when asked (W_REQ), to grow the firewall's states or to
# stop: an idle time slice would make it wait for the GIL behind whatever the control
# plane holds it for at that moment (a full-table reload's C calls held it 0.47 s), so the
# slice is off (tests set a short one to get the loop back)
SLICE_NS = 2**62
SLOW_OUTSIDE_NS = 10_000_000  # a return to Python longer than this is counted
SPIN_NS = 200_000  # adaptive: awake this long after the last packet
JUMBO_SLOTS = 32  # GSO super-packets kept whole per batch (the rest are cut on receive)


class DataPlaneWorker:
    """See the module docstring. ``sockets``: one PacketSocket per port, in port order."""

    def __init__(
        self,
        index: int,
        sockets: list,
        state: DataPlaneState,
        vector_size: int,
        firewall=None,
        *,
        policy: str = "adaptive",
        spin_ns: int = SPIN_NS,
        punt_capacity: int = PUNT_RING,
        inject_capacity: int = INJECT_RING,
        capture_capacity: int = CAPTURE_RING,
        punt_rates: dict | None = None,
    ) -> None:
        if policy not in L.POLICIES:
            raise ValueError(f"poll policy must be one of {', '.join(L.POLICIES)}, not {policy!r}")
        self.index = index
        self.socks = sockets
        self.ports = (np.stack([s.loop_descriptor() for s in sockets]) if sockets
                      else np.zeros((0, PD_COLS), np.int64))
        # control rings (PacketSocket.open_control), read before the data rings
        ctl_socks = [(p, s.control) for p, s in enumerate(sockets) if s.control is not None]
        self.cports = (np.stack([c.loop_descriptor() for _, c in ctl_socks]) if ctl_socks
                       else np.zeros((0, PD_COLS), np.int64))
        self.cport_if = np.array([p for p, _ in ctl_socks], np.int64)
        # GSO super-packets stay whole when every port can send them with their
        # virtio-net header (sendmmsg with PACKET_VNET_HDR); else they are cut on receive
        whole = bool(sockets) and all(
            d[PD_TX_MODE] == TXM_MMSG and d[PD_TX_VNET] for d in self.ports)
        self.batch = PacketBatch(vector_size, jumbo=JUMBO_SLOTS if whole else 0)
        self.jumbo = np.zeros(J_COLS, np.int64)
        self.jumbo[J_SLOTS] = self.batch.jumbo
        self.jumbo[J_BASE] = self.batch.capacity * SLOT
        state.opts[OPT_LIVE] = 1
        self.graph = Graph(state, self.batch, firewall)
        self.punt = Ring(punt_capacity, PH_COLS)
        self.inject = Ring(inject_capacity, IH_COLS)
        self.capture = Ring(capture_capacity, CR_COLS)  # io/capture.py: frames copied out
        self.capture_cfg = capture_config()  # its settings: the control plane writes them
        self.policer = punt_policer(punt_rates)
        # eventfds: the loop signals punt_fd after publishing punts; the control plane
        # writes wake_fd to interrupt the loop's sleep
        self.punt_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.ctl = np.zeros(L.W_COLS, np.int64)
        self.ctl[L.W_POLICY] = L.POLICIES[policy]
        self.ctl[L.W_SPIN_NS] = spin_ns
        self.ctl[L.W_POLL_MS] = POLL_MS
        self.ctl[L.W_SLICE_NS] = SLICE_NS
        self.ctl[L.W_VECTOR] = vector_size
        # data rings, the wake eventfd, control rings (the loop's layout)
        self.pollfd = np.zeros((len(sockets) + 1 + len(ctl_socks), 2), np.int32)
        for p, s in enumerate(sockets):
            self.pollfd[p] = (s.fileno(), POLLIN)
        self.pollfd[len(sockets)] = (self.wake_fd, POLLIN)
        for c, (_, cs) in enumerate(ctl_socks):
            self.pollfd[len(sockets) + 1 + c] = (cs.fileno(), POLLIN)
        cap = self.batch.capacity
        self._txidx = np.zeros(cap, np.int32)
        self._mm = np.zeros((cap, 8), np.uint64)
        self._iov = np.zeros((2 * cap, 2), np.uint64)
        self._vh = np.zeros((cap, 16), np.uint8)
        self._scratch = (np.zeros(2, np.int64), np.zeros(1, np.uint64), np.ones(1, np.uint64))
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.on_exit: Callable[[DataPlaneWorker], None] | None = None
        # time out of the compiled loop (waiting for the GIL, serving calls): the largest
        # gap and how many exceeded SLOW_OUTSIDE_NS, so a stall has a number
        self.outside_max_ns = 0
        self.outside_slow = 0

    # -- the control plane's side -----------------------------------------------------------

    @property
    def state(self) -> DataPlaneState:
        """The worker's current state (its runtime arrays are live: read, never write)."""
        return self.graph.state

    def row(self) -> dict:
        """The loop's own counters (``ctl show workers``): read without stopping it."""
        c = self.ctl
        beat = int(c[L.W_HEARTBEAT])
        return {
            "worker": self.index,
            "alive": self.alive(),
            "batches": int(c[L.W_BATCHES]),
            "packets": int(c[L.W_PACKETS]),
            "generated": int(c[L.W_GENERATED]),
            "sleeps": int(c[L.W_SLEEPS]),
            "punted": int(c[L.W_PUNTED]),
            "entries": int(c[L.W_ENTRIES]),
            "heartbeat_age_ms": (time.clock_gettime_ns(time.CLOCK_MONOTONIC) - beat) // 1_000_000
            if beat else -1,
            "outside_max_ms": round(self.outside_max_ns / 1e6, 3),
            "outside_slow": self.outside_slow,
            "punt_queue": len(self.punt),
            "inject_queue": len(self.inject),
            "error": "" if self.error is None else f"{type(self.error).__name__}: {self.error}",
        }

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name=f"vecroute-worker-{self.index}",
                                        daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def call(self, fn: Callable[[DataPlaneWorker], object]) -> Future:
        """Run ``fn(self)`` in the worker thread between two batches; its result or
        exception arrives in the returned Future."""
        fut: Future = Future()
        self._calls.put((fn, fut))
        self.ctl[L.W_REQ] += 1  # only the control plane writes it
        self.wake()
        return fut

    def swap(self, state: DataPlaneState) -> Future:
        """Install new tables (a fresh fib_state(fib)) between two batches."""
        return self.call(lambda w: w.graph.swap_state(state))

    def request_stop(self) -> None:
        """Leave the loop at the next pass (stop() also waits for the thread)."""
        self.ctl[L.W_STOP] = 1
        self.wake()

    def stop(self, timeout: float = 5.0) -> None:
        self.request_stop()
        if self._thread is not None:
            self._thread.join(timeout)

    def close(self) -> None:
        self.stop()
        if self.alive():  # its loop may still walk the rings: unmapping them would crash it
            log.error("worker %d did not stop; its rings are left mapped", self.index)
            return
        for s in self.socks:
            s.close()
        for fd in (self.punt_fd, self.wake_fd):
            try:
                os.close(fd)
            except OSError:
                pass

    def drain_punt_signal(self) -> None:
        """Reset the punt eventfd (the control plane then empties the punt ring)."""
        try:
            os.eventfd_read(self.punt_fd)
        except BlockingIOError:
            pass

    def wake(self) -> None:
        """Interrupt the loop's sleep (a call, a stop, injections are waiting)."""
        try:
            os.eventfd_write(self.wake_fd, 1)
        except OSError:
            pass

    # -- the worker thread ------------------------------------------------------------------

    def _serve_calls(self) -> None:
        self.ctl[L.W_SEEN] = self.ctl[L.W_REQ]
        while True:
            try:
                fn, fut = self._calls.get_nowait()
            except queue.Empty:
                return
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(self))
            except BaseException as e:  # noqa: BLE001 - the caller gets it
                fut.set_exception(e)

    def _loop_args(self) -> tuple:
        g = self.graph
        g.sync_firewall()
        fw = g.firewall
        self.ctl[L.W_FW_LIMIT] = state_capacity_limit(fw.st, fw.ctl) if fw is not None else 0
        b = self.batch
        frames, frame_n, work, txl, txn, dp, fwt, fwk, fwv = g.loop_args()
        tsbuf, efd_scratch, one = self._scratch
        return (
            self.ctl, self.ports, self.cports, self.cport_if, self.pollfd, tsbuf, efd_scratch,
            self.wake_fd,
            b.buf, b.buf.ctypes.data, b.meta, b.ts, b.nalloc, frames, frame_n, work, txl, txn,
            self._txidx, self._mm, self._iov, self._mm.ctypes.data, self._iov.ctypes.data,
            self._vh, self._vh.ctypes.data, self.jumbo,
            dp, fwt, fwk, fwv,
            self.punt.ctl, self.punt.hdr, self.punt.data, self.policer, self.punt_fd, one,
            self.inject.ctl, self.inject.hdr, self.inject.data,
            self.capture_cfg, self.capture.ctl, self.capture.hdr, self.capture.data,
        )  # fmt: skip

    def run_once(self) -> int:
        """Enter the compiled loop once (the thread's body; tests call it directly)."""
        back = time.clock_gettime_ns(time.CLOCK_MONOTONIC)  # the GIL is ours again
        self._serve_calls()
        if self.ctl[L.W_STOP]:
            return L.RET_STOP
        args = self._loop_args()
        left = int(self.ctl[L.W_HEARTBEAT])  # the loop's last pass before it returned
        if left:
            now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            gap = now - left
            self.outside_max_ns = max(self.outside_max_ns, gap)
            if gap > SLOW_OUTSIDE_NS:
                self.outside_slow += 1
                log.info("worker %d was out of its loop %.1f ms (%.1f ms waiting for the GIL, "
                         "%.1f ms serving calls)", self.index, gap / 1e6, (back - left) / 1e6,
                         (now - back) / 1e6)
        return int(L.forward_loop(*args))

    def _main(self) -> None:
        try:
            while self.run_once() != L.RET_STOP:
                pass
        except BaseException as e:  # noqa: BLE001 - reported to the control plane
            self.error = e
            log.exception("worker %d stopped", self.index)
        finally:
            self._serve_calls()  # nobody waits forever on a call to a dead worker
            if self.on_exit is not None:
                self.on_exit(self)


def warm(state: DataPlaneState, firewall=None) -> None:
    """Compile (or load) the forwarding loop for these argument types without sockets: a
    worker with no ports and W_STOP set enters and returns at once."""
    w = DataPlaneWorker(0, [], state, 8, firewall)
    try:
        w.ctl[L.W_STOP] = 1
        L.forward_loop(*w._loop_args())
        w.ctl[L.W_STOP] = 0
        w.ctl[L.W_SLICE_NS] = 0
        w.ctl[L.W_POLICY] = L.POLICY_BUSY
        t0 = time.monotonic()
        L.forward_loop(*w._loop_args())  # one empty pass, then the slice is over
        log.debug("forwarding loop ready in %.3f s", time.monotonic() - t0)
    finally:
        w.close()
