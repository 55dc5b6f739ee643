"""A data-plane worker's forwarding loop: rings -> graph -> rings, compiled, without the GIL.

One call runs many batches: it empties the inject ring, walks every port's control ring
(the frames for the router itself, io/control_filter.py: they never queue behind transit
traffic; a quarter of the vector at most), then every port's RX ring into the batch, runs
the graph, writes each port's TX ring (or sendmmsg), hands punts to the control plane
through the punt ring and signals its eventfd. It returns to Python only when the control
plane asks (``W_REQ``: a new table to swap in, a firewall command), when its time slice
ends (``W_SLICE_NS``: off in the router, tests set one), when the firewall's state table
must grow, or to stop; packets arriving meanwhile wait in the kernel's rings. The loop
holds no Python object and releases the GIL (``nogil``), so the control plane runs beside
it in the same process.

Waiting (``W_POLICY``): *busy* never sleeps; *interrupt* sleeps in poll(2) as soon as a
pass finds nothing; *adaptive* keeps spinning for ``W_SPIN_NS`` after the last packet
(a packet in a flow finds the worker awake), then sleeps. The poll set is every RX
socket (data rings, the wake eventfd, then control rings) so the control plane can
interrupt a sleep.
"""

from __future__ import annotations

import numpy as np
from numba import carray, njit

from vecroute.firewall.states import states_need_growth
from vecroute.graph.dispatch import run_nodes
from vecroute.graph.fast_path import fused_scratch
from vecroute.graph.ip_reass import reass_due
from vecroute.io import af_packet_ring as R
from vecroute.io.capture import CP_MODE, capture_processed, capture_received
from vecroute.io.channel import punts_to_ring, ring_to_batch
from vecroute.io.syscalls import (
    CLOCK_MONOTONIC,
    CLOCK_REALTIME,
    POLLERR,
    POLLHUP,
    clear_socket_error,
    clock_ns,
    eventfd_drain,
    eventfd_signal,
    i64_at,
    poll_fds,
    u8_at,
    u16_at,
    u32_at,
)
from vecroute.packet.batch import M_TX

# worker control words (int64 [W_COLS]); the control plane writes the settings and W_REQ,
# the worker the rest
W_STOP = 0  # 1: return and stay out
W_REQ = 1  # bumped by the control plane: return to Python between two batches
W_SEEN = 2  # the last W_REQ the worker answered
W_POLICY = 3
W_SPIN_NS = 4  # adaptive: spin this long after the last packet before sleeping
W_POLL_MS = 5  # the longest sleep in poll(2)
W_SLICE_NS = 6  # idle: return to Python after this long in the loop (tests; off in the router)
W_VECTOR = 7  # packets per batch (the batch's spare slots take GSO segments)
W_FW_LIMIT = 8  # the firewall state table's largest capacity (0: no firewall)
W_BATCHES = 9  # batches run
W_PACKETS = 10  # packets received (RX + injected)
W_SLEEPS = 11  # poll(2) calls that slept
W_HEARTBEAT = 12  # CLOCK_MONOTONIC of the last pass: a supervisor sees a stuck worker
W_PUNTED = 13  # records published on the punt ring
W_ENTRIES = 14  # calls into the loop from Python
W_GENERATED = 15  # slots the graph filled itself (ARP/NS requests, fragments, copies to punt)
W_COLS = 16
POLICY_ADAPTIVE = 0
POLICY_INTERRUPT = 1
POLICY_BUSY = 2
POLICIES = {"adaptive": POLICY_ADAPTIVE, "interrupt": POLICY_INTERRUPT, "busy": POLICY_BUSY}
# why the loop returned
RET_REQUEST = 1
RET_SLICE = 2
RET_STOP = 3
RET_FW_GROW = 4


@njit(cache=True, nogil=True)
def _rx(port, buf, meta, ts, start, max_packets, rx_if, jumbo) -> int:
    """One port's RX ring into slots start.. (the ring rebuilt from its descriptor)."""
    stats = carray(i64_at(port[R.PD_STATS]), R.N_STATS)
    state = carray(i64_at(port[R.PD_RX_STATE]), R.N_RX_STATE)
    a = port[R.PD_RX_ADDR]
    nb = port[R.PD_RX_BYTES]
    ring8 = carray(u8_at(a), nb)
    ring16 = carray(u16_at(a), nb // 2)
    ring32 = carray(u32_at(a), nb // 4)
    vnet = port[R.PD_VNET] != 0
    if port[R.PD_RX_VERSION] == 2:
        copy = carray(u8_at(port[R.PD_RX_COPY]), port[R.PD_RX_COPY_BYTES])
        return R.rx_ring2_to_batch(ring8, ring16, ring32, state, port[R.PD_RX_N],
                                   port[R.PD_RX_SIZE], port[R.PD_RX_FPB], port[R.PD_RX_BLOCK],
                                   vnet, port[R.PD_RX_FD], copy, buf, meta, ts, start,
                                   max_packets, rx_if, stats, jumbo)
    return R.rx_ring_to_batch(ring8, ring16, ring32, state, port[R.PD_RX_N], port[R.PD_RX_SIZE],
                              vnet, buf, meta, ts, start, max_packets, rx_if, stats, jumbo)


@njit(cache=True, nogil=True)
def _tx(port, buf, buf_addr, meta, idx, count, mm, iov, mm_addr, iov_addr, vh, vh_addr) -> None:
    stats = carray(i64_at(port[R.PD_STATS]), R.N_STATS)
    mode = port[R.PD_TX_MODE]
    if mode == R.TXM_MMSG:
        R.send_mmsg(port[R.PD_TX_FD], mm, iov, mm_addr, iov_addr, buf, buf_addr, meta, idx,
                    count, stats, vh, vh_addr, port[R.PD_TX_VNET] != 0)
    elif mode == R.TXM_RING:
        a = port[R.PD_TX_ADDR]
        nb = port[R.PD_TX_BYTES]
        state = carray(i64_at(port[R.PD_TX_STATE]), 1)
        R.send_ring(port[R.PD_TX_FD], carray(u8_at(a), nb), carray(u32_at(a), nb // 4), state,
                    port[R.PD_TX_N], port[R.PD_TX_SIZE], port[R.PD_TX_FPB], R.TX_BLOCK,
                    port[R.PD_VNET] != 0, buf, meta, idx, count, stats)


@njit(cache=True, nogil=True)
def forward_loop(
    ctl, ports, cports, cport_if, pollfd, tsbuf, efd_scratch, wake_fd,
    buf, buf_addr, meta, ts, nalloc, frames, frame_n, work, txl, txn, txidx,
    mm, iov, mm_addr, iov_addr, vh, vh_addr, jumbo,
    dp, fw, fwk, fwv,
    punt_ctl, punt_hdr, punt_data, policer, punt_fd, punt_one,
    inj_ctl, inj_hdr, inj_data,
    cap_cfg, cap_ctl, cap_hdr, cap_data,
) -> int:  # fmt: skip
    """Forward until asked to return; returns why (RET_*). See the module docstring."""
    n_ports = ports.shape[0]
    n_ctl = cports.shape[0]
    errbuf = np.zeros(2, np.int32)
    vector = ctl[W_VECTOR]
    sc, fl, acc = fused_scratch(vector)  # once a call, not once a batch: n <= vector
    t_enter = clock_ns(tsbuf, CLOCK_MONOTONIC)
    last_busy = t_enter
    ctl[W_ENTRIES] += 1
    while True:
        # stamped before the checks: a return's stamp is its moment, not the start of a
        # sleep before it (the worker measures its time out of the loop from it)
        now = clock_ns(tsbuf, CLOCK_MONOTONIC)
        ctl[W_HEARTBEAT] = now
        if ctl[W_STOP] != 0:
            return RET_STOP
        if ctl[W_REQ] != ctl[W_SEEN]:
            return RET_REQUEST
        n = ring_to_batch(inj_ctl, inj_hdr, inj_data, buf, meta, ts, 0, vector,
                          clock_ns(tsbuf, CLOCK_REALTIME))
        jumbo[R.J_USED] = 0  # the last batch has left: its jumbo slots are free
        injected = n
        # first, what is for the router (it never waits behind transit), but a quarter of
        # the vector at most: a flood to the router's addresses cannot stop forwarding
        cmax = min(vector, n + max(1, vector >> 2))
        for c in range(n_ctl):
            if n >= cmax:
                break
            n += _rx(cports[c], buf, meta, ts, n, cmax - n, cport_if[c], jumbo)
        for p in range(n_ports):
            if n >= vector:
                break
            n += _rx(ports[p], buf, meta, ts, n, vector - n, p, jumbo)
        if n == 0 and not reass_due(dp.reass_ctl, dp.reass_glob, now):
            if now - t_enter >= ctl[W_SLICE_NS]:
                return RET_SLICE
            policy = ctl[W_POLICY]
            if policy == POLICY_BUSY:
                continue
            if policy == POLICY_ADAPTIVE and now - last_busy < ctl[W_SPIN_NS]:
                continue
            ctl[W_SLEEPS] += 1
            # a frame that arrived between the RX walk and poll() makes poll return at
            # once (level-triggered), so nothing waits for the timeout
            poll_fds(pollfd, pollfd.shape[0], np.int32(ctl[W_POLL_MS]))
            for p in range(n_ports):
                if (pollfd[p, 1] >> 16) & (POLLERR | POLLHUP):  # link down: read the error
                    clear_socket_error(pollfd[p, 0], errbuf)
                    carray(i64_at(ports[p, R.PD_STATS]), R.N_STATS)[R.S_LINK_ERRORS] += 1
            for c in range(n_ctl):
                if (pollfd[n_ports + 1 + c, 1] >> 16) & (POLLERR | POLLHUP):
                    clear_socket_error(pollfd[n_ports + 1 + c, 0], errbuf)
                    carray(i64_at(cports[c, R.PD_STATS]), R.N_STATS)[R.S_LINK_ERRORS] += 1
            if pollfd[n_ports, 1] >> 16:
                eventfd_drain(wake_fd, efd_scratch)
            continue
        last_busy = now
        nalloc[0] = n
        capturing = cap_cfg[CP_MODE] != 0
        if capturing:
            capture_received(cap_cfg, cap_ctl, cap_hdr, cap_data, buf, meta, ts, injected, n)
        run_nodes(n, now, meta, buf, nalloc, frames, frame_n, work, txl, txn, dp, fw, fwk, fwv,
                  sc, fl, acc)
        if capturing:
            capture_processed(cap_cfg, cap_ctl, cap_hdr, cap_data, buf, meta, nalloc, txl,
                              txn[0], clock_ns(tsbuf, CLOCK_REALTIME))
        ctl[W_BATCHES] += 1
        ctl[W_PACKETS] += n
        ctl[W_GENERATED] += nalloc[0] - n
        nt = txn[0]
        if nt:
            for p in range(n_ports):
                c = 0
                for j in range(nt):
                    i = txl[j]
                    if meta[M_TX, i] == p:
                        txidx[c] = i
                        c += 1
                if c:
                    _tx(ports[p], buf, buf_addr, meta, txidx, c, mm, iov, mm_addr, iov_addr, vh,
                        vh_addr)
        if punts_to_ring(buf, meta, nalloc, dp.adj, dp.counters, policer, punt_ctl, punt_hdr,
                         punt_data, now):
            ctl[W_PUNTED] += 1
            eventfd_signal(punt_fd, punt_one)
        if fw is not None and states_need_growth(fw.st, fw.ctl, vector, ctl[W_FW_LIMIT]):
            return RET_FW_GROW
