"""The live router (`vecroute run`): data-plane workers and the control plane beside them.

Each worker is a thread running the compiled forwarding loop (vecroute.io.worker): it
polls its rings, runs the graph and fills the TX rings for many batches per entry,
without the GIL. With N workers each has its own PACKET_FANOUT share of every port (hash
mode: both directions of a flow reach the same worker), its own runtime (counters, token
buckets, firewall states) and its own punt and inject rings. The tables (FIB, adjacencies,
SRv6) are built by the control plane and shared: a change builds new arrays aside and
every worker swaps them in between two batches.

The control plane runs in the main thread under an asyncio event loop: the control socket,
neighbour resolution (punts in, ARP/ND answers and released packets out, through the
rings), timers, SIGHUP reloads (parsed and built in a helper thread, then swapped). None of
it can stall forwarding: a worker never waits for it, and what a worker hands it is
bounded by the punt policer and the rings.

The router owns its ports while it runs (vecroute.control.ports: what it changes there and
how it gives it back on every way out; one router per port). SIGINT/SIGTERM stop it
cleanly at any moment, during start-up too; once it is stopping, more of them are logged
and ignored, so the ports are always restored (StopSignals).
"""
from __future__ import annotations

import asyncio
import gc
import ipaddress
import logging
import os
import signal
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from vecroute.config_types import Config, ConfigError
from vecroute.control.capture import (
    DIRECTIONS,
    CaptureSession,
    open_capture_file,
    start_capture,
)
from vecroute.control.config import load_config
from vecroute.control.linux_cp import LinuxCp, LinuxCpError
from vecroute.control.metrics_http import MetricsServer, bind_listener
from vecroute.control.neighbors import NeighborTable
from vecroute.control.ports import PortError, Ports
from vecroute.control.punts import IcmpError, Pending, decode_punts, inject_frame, inject_packets
from vecroute.control.server import ControlServer, claim_socket_path
from vecroute.control.trace import TraceExplainer, arm, disarm, snapshot
from vecroute.fib.fib import Fib, RouteError
from vecroute.firewall.firewall import Firewall, command_changes
from vecroute.graph import counters as C
from vecroute.graph.dataplane import build_dataplane, fib_state
from vecroute.graph.state import TB_RST, DataPlaneState
from vecroute.io.af_packet import FANOUT_NEW
from vecroute.io.capture import CP_LEFT, CP_LOST, CP_MODE
from vecroute.io.channel import R_DROPS
from vecroute.io.control_filter import control_addresses
from vecroute.io.control_filter import fit as fit_addresses
from vecroute.io.control_filter import program as fanout_program
from vecroute.io.worker import DataPlaneWorker

log = logging.getLogger("vecroute.router")
TICK_S = 0.1  # neighbour timers run every 100 ms
CAPTURE_DRAIN_S = 0.02  # a running capture empties the workers' rings this often
CAPTURE_PER_DRAIN = 1024  # records per ring per pop
PUNTS_PER_CALLBACK = 256  # then let the event loop serve others before reading more
WORKER_CALL_TIMEOUT = 5.0  # a worker answers a call between two batches: normally < 1 ms
FREEZE_ROUTES = 100_000  # a reloaded table this big is frozen out of collection passes
WORKER_CALL_LONGEST = 60.0  # a call it has started (a 10K-rule compile: ~1 s) finishes
WORKER_STOP_TIMEOUT = 5.0  # all workers together; one leaves its loop within ~100 ms
CLIENTS_CLOSE_TIMEOUT = 2.0  # control connections being torn down at exit
#: what ``show sockets`` reports of each ring (io/af_packet_ring.py STATS)
SOCKET_COLUMNS = ("rx_packets", "rx_kernel_drops", "rx_copied", "rx_truncated", "tx_packets",
                  "tx_ring_full", "tx_errors", "link_errors")


class StartupError(RuntimeError):
    """The router cannot start (not root, missing interface, bad config): one line, exit 2."""


class Interrupted(BaseException):
    """SIGINT/SIGTERM before the router runs: unwinds the start-up, whose cleanup restores
    the ports. A BaseException, like KeyboardInterrupt, so no ``except Exception`` eats it."""


class StopSignals:
    """SIGINT, SIGTERM and SIGHUP over the router's whole life, so that no signal can end
    the process with its ports still changed.

    Starting: the first SIGINT/SIGTERM raises Interrupted in the main thread (the start-up
    unwinds and cleans up); a SIGHUP is kept for when the router runs. Running: the first
    one asks the event loop to stop; SIGHUP reloads. From the first stop request on (or
    once the router stops by itself), more SIGINT/SIGTERM/SIGHUP are logged and ignored:
    a second Ctrl-C must not abort the cleanup (SIGKILL still ends everything; the next
    start restores the ports then)."""

    _installed: StopSignals | None = None

    @classmethod
    def install(cls) -> StopSignals:
        """The process's handlers (installed once, from the main thread)."""
        if cls._installed is None:
            cls._installed = cls()
        return cls._installed

    def __init__(self) -> None:
        self.phase = "starting"  # -> running -> stopping
        self._stop: Callable[[], None] | None = None
        self._reload: Callable[[], None] | None = None
        self.reload_pending = False
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._handle)

    def running(self, stop: Callable[[], None], reload: Callable[[], None]) -> None:
        """From now on a stop signal calls ``stop`` and SIGHUP ``reload`` (both must only
        schedule work: they run inside a signal handler)."""
        self._stop, self._reload = stop, reload
        if self.phase == "starting":
            self.phase = "running"
        if self.reload_pending:
            self.reload_pending = False
            reload()

    def stopping(self) -> None:
        """The process is on its way out: every further signal is ignored."""
        self.phase = "stopping"

    def _handle(self, signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if signum == signal.SIGHUP:
            if self.phase == "running" and self._reload is not None:
                self._reload()
            elif self.phase == "starting":
                self.reload_pending = True
            else:
                log.info("%s ignored: stopping", name)
            return
        if self.phase == "stopping":
            log.warning("%s: already stopping (the ports are restored first)", name)
            return
        was, self.phase = self.phase, "stopping"
        if was == "running" and self._stop is not None:
            log.info("%s: stopping", name)
            self._stop()
            return
        log.info("%s during start-up: stopping", name)
        raise Interrupted(name)


def read_mac(ifname: str) -> bytes:
    try:
        text = Path(f"/sys/class/net/{ifname}/address").read_text().strip()
    except OSError:
        raise StartupError(f"interface {ifname!r} does not exist") from None
    return bytes(int(b, 16) for b in text.split(":"))


def tx_mode(ifname: str, configured: str) -> str:
    """``auto``: sendmmsg on virtual devices (veth, tap: the kernel copies TX-ring frames
    into new pages there anyway), the zero-copy TX ring on devices with hardware."""
    if configured != "auto":
        return configured
    return "ring" if Path(f"/sys/class/net/{ifname}/device").exists() else "sendmmsg"


class LiveRouter:
    """A router on real interfaces; also the object ctl commands act on."""

    _steering: list | None = None  # one socket of each port's fanout group (control rings)
    _steered: tuple | None = None  # the router addresses its programs steer
    steer_note = ""  # why the programs steer fewer addresses than the router has

    def __init__(self, cfg: Config, *, prepare_ports: bool = True) -> None:
        if os.geteuid() != 0:
            raise StartupError("must run as root (AF_PACKET sockets need CAP_NET_RAW)")
        self.cfg = cfg
        self.config_path = cfg.path
        self.workers: list[DataPlaneWorker] = []
        self.server: ControlServer | None = None
        self.metrics: MetricsServer | None = None
        self._metrics_sock = None
        self.started_at = time.time()
        self.last_reload_ok = self.started_at  # when the running configuration was loaded
        self.reloads = {"ok": 0, "failed": 0}
        self.ports = Ports([i.name for i in cfg.interfaces]) if prepare_ports else None
        self._closed = False
        try:
            self._start(cfg)
        except BaseException as e:
            # whatever stopped the start (an error, SIGTERM), the ports are given back
            if StopSignals._installed is not None:
                StopSignals._installed.stopping()
            self.close(quiet=True)
            if isinstance(e, PortError):
                raise StartupError(str(e)) from None
            raise

    def _start(self, cfg: Config) -> None:
        self.macs = {itf.name: read_mac(itf.name) for itf in cfg.interfaces}
        if self.ports is not None:
            self.ports.claim()  # a second router on a port stops here, before any change
        try:  # before anything changes: a live router or a non-socket there stops us here
            Path(cfg.control.socket).parent.mkdir(parents=True, exist_ok=True)
            claim_socket_path(cfg.control.socket)
        except OSError as e:  # claim_socket_path's own message names the path
            msg = f"{cfg.control.socket}: {e.strerror}" if e.strerror else str(e)
            raise StartupError(f"control socket {msg}") from None
        if cfg.metrics is not None:  # a port in use stops us here too, before any change
            try:
                self._metrics_sock = bind_listener(cfg.metrics.host, cfg.metrics.port)
            except OSError as e:
                raise StartupError(f"[metrics] listen {cfg.metrics.listen}: "
                                   f"{e.strerror or e}") from None
        if self.ports is not None:
            self.ports.log_sweep()
        from vecroute.warmup import warm

        # no JIT pause on a first packet or ctl
        # the firewall variants too: a reload may add a [firewall] section
        log.info("kernels ready in %.1f s", warm(firewall=True))
        try:
            dp = build_dataplane(cfg, self.macs)
            self.fib = dp.fib
            firewalls = [dp.firewall] + [dp.new_firewall() for _ in range(cfg.router.workers - 1)]
        except RouteError as e:
            raise StartupError(str(e)) from None
        except ConfigError as e:  # a rule naming a table that does not exist, say
            raise StartupError(str(e)) from None
        if self.ports is not None:
            self.ports.prepare()  # the tables are built: from here on, the ports are ours
        self.lcp: LinuxCp | None = None
        self.sync = None  # the kernel's tables, followed over netlink (linux-cp)
        if cfg.linux_cp is not None:
            try:
                self.lcp = LinuxCp(cfg, self.macs)
            except LinuxCpError as e:
                raise StartupError(str(e)) from None
        punt_rates = ({"host": (cfg.linux_cp.punt_rate, cfg.linux_cp.punt_burst)}
                      if cfg.linux_cp is not None else None)
        self.neigh = NeighborTable(self.fib, self._send_frame, self._reinject,
                                   cfg.neighbor_table)
        self.n_workers = cfg.router.workers
        self.loop: asyncio.AbstractEventLoop | None = None
        self._published: tuple | None = None
        tables = self._tables()
        # sockets are opened worker after worker: every port's fanout group then lists
        # the workers in the same order, so the symmetric fanout hash sends both directions
        # of a flow to the same worker (its firewall has the state). Worker 0's sockets
        # start the groups (ids the kernel picks: no other process's); control rings join
        # each group last (their index is the number of workers)
        ring = cfg.router.control_ring
        fanout = ring or self.n_workers > 1
        per_worker: list[list] = []
        try:
            for k in range(self.n_workers):
                groups = ([FANOUT_NEW] * len(cfg.interfaces) if k == 0
                          else [s.fanout_id for s in per_worker[0]])
                per_worker.append(self._open_sockets(groups if fanout else None, ring))
            if ring:
                for s in per_worker[0]:
                    s.open_control()
                self._steering = per_worker[0]
                self._steer()
            for k, socks in enumerate(per_worker):
                self.workers.append(DataPlaneWorker(
                    k, socks, tables.with_runtime(None), cfg.router.vector_size, firewalls[k],
                    policy=cfg.router.poll, spin_ns=cfg.router.spin_us * 1000,
                    punt_rates=punt_rates,
                ))
        except BaseException:
            for s in (s for socks in per_worker[len(self.workers):] for s in socks):
                s.close()
            raise
        self.capture: CaptureSession | None = None
        self._wake_pending = False
        self._capture_timer: asyncio.TimerHandle | None = None
        self.server = ControlServer(cfg.control.socket, self)
        if self._metrics_sock is not None:
            self.metrics = MetricsServer(self._metrics_sock, self)
        self._stopped: asyncio.Future | None = None
        self._outbox: dict[int, list] = defaultdict(list)  # injections until the next flush
        self._commit_pending = False
        self.failed = False  # a worker died (the exit status says so)
        self._reloading = False
        self._reload_again = False
        self.stop = False
        log.info(
            "vecroute running on %s with %d worker(s), poll %s, control socket %s%s",
            ", ".join(i.name for i in cfg.interfaces),
            self.n_workers,
            cfg.router.poll,
            cfg.control.socket,
            f", metrics http://{cfg.metrics.listen}/metrics" if cfg.metrics else "",
        )

    def _open_sockets(self, groups: list[int] | None, cbpf: bool = False) -> list:
        """One socket per port; ``groups``: each port's fanout group (FANOUT_NEW: start
        one), None: no fanout."""
        from vecroute.io.af_packet import PacketSocket

        socks: list = []
        try:
            for ifx, itf in enumerate(self.cfg.interfaces):
                socks.append(PacketSocket(
                    itf.name,
                    fanout_group=None if groups is None else groups[ifx],
                    fanout_mode="cbpf" if cbpf else "hash",
                    tx_mode=tx_mode(itf.name, self.cfg.router.tx),
                ))
        except BaseException:
            for s in socks:
                s.close()
            raise
        return socks

    def _steer(self) -> None:
        """Give every port's fanout group the program that sends the frames for the router
        to its control ring (io/control_filter.py), again whenever the router's addresses
        change (reloads, addresses learnt from Linux): one program per group, replaced
        atomically, so a frame always reaches exactly one ring. A failure is logged and
        tried again at the next change of the tables."""
        if self._steering is None:
            return
        addrs = control_addresses(self.fib.interfaces)
        if addrs == self._steered:
            return
        v4, v6 = fit_addresses(*addrs, self.n_workers)
        note = ""
        if (len(v4), len(v6)) != (len(addrs[0]), len(addrs[1])):
            note = (f"{len(addrs[0])} IPv4 + {len(addrs[1])} IPv6 router addresses are more "
                    f"than one program holds: {len(v4)} + {len(v6)} steered")
            if note != self.steer_note:
                log.warning("control rings: %s; traffic to the others shares the data "
                            "rings", note)
        self.steer_note = note
        prog = fanout_program(v4, v6, self.n_workers)
        try:
            for s in self._steering:
                s.set_fanout_program(prog)
        except (OSError, ValueError) as e:
            log.error("control rings: the new program was not installed (%s); the old one "
                      "stays until the next change", _one_line(e))
            return
        self._steered = addrs
        log.info("control rings steer %d router addresses", len(v4) + len(v6))

    def socket_rows(self) -> list[dict]:
        """Each worker's packet sockets, data and control rings (``ctl show sockets``)."""
        rows = []
        for w in self.workers:
            for s in w.socks:
                for ring, sock in s.rings():
                    st = sock.stats_dict()
                    rows.append({"worker": w.index, "interface": s.ifname, "ring": ring,
                                 **{k: st[k] for k in SOCKET_COLUMNS}})
        return rows

    @property
    def firewall(self) -> Firewall | None:
        """Worker 0's firewall (every worker has its own copy: its own states, counters)."""
        return self.workers[0].graph.firewall

    # -- RouterControl (ctl commands) -------------------------------------------------------

    def stats(self) -> DataPlaneState:
        """The tables with every worker's counters summed (and the control plane's own)."""
        total = DataPlaneState.summed([w.state for w in self.workers])
        total.counters[C.C_INJECT_QUEUE_FULL] += sum(
            int(w.inject.ctl[R_DROPS]) for w in self.workers
        )
        return total

    def worker_rows(self) -> list[dict]:
        return [w.row() for w in self.workers]

    def neighbor_rows(self) -> list[dict]:
        return self.neigh.rows()

    def neighbor_stats(self) -> list[dict]:
        return self.neigh.stat_rows()

    def add_neighbor(self, ip, mac: bytes, ifname: str) -> None:
        self.neigh.add_static(
            self.fib.interface_index(ifname), ipaddress.ip_address(ip), mac, time.monotonic_ns()
        )
        self.commit()

    def del_neighbor(self, ip, ifname: str) -> bool:
        ok = self.neigh.delete(self.fib.interface_index(ifname), ipaddress.ip_address(ip))
        self.commit()
        return ok

    def _tables(self) -> DataPlaneState:
        """Frozen copies of the FIB's arrays, made again only after they changed: the
        control plane goes on changing its own in place, the workers read these."""
        p = self._published
        if p is None or p[0] is not self.fib or p[1] != self.fib.version:
            p = self._published = (self.fib, self.fib.version, fib_state(self.fib).frozen())
        return p[2]

    def commit(self) -> None:
        """Publish the FIB's changes to every worker (swapped in between two batches), then
        what waited to be injected (so it meets the new tables). Changes made within one
        turn of the event loop are published together: one copy, one swap."""
        self.neigh.changed = False
        if self.loop is None or not self.loop.is_running():
            self._publish()
        elif not self._commit_pending:
            self._commit_pending = True
            self.loop.call_soon(self._publish)

    def _publish(self) -> None:
        self._commit_pending = False
        tables = self._tables()
        for w in self.workers:
            w.swap(tables).add_done_callback(_log_failure)
        self._flush()
        self._steer()

    def _on_worker(self, w: DataPlaneWorker, fn):
        """``fn(worker)`` in the worker's thread; its answer (a ctl command waits for it)."""
        if not w.alive():
            raise ValueError(f"worker {w.index} is not running")
        fut = w.call(fn)
        try:
            return fut.result(WORKER_CALL_TIMEOUT)
        except TimeoutError:
            if fut.cancel():  # not started: it never will, so nothing changed
                raise ValueError(f"worker {w.index} did not answer within "
                                 f"{WORKER_CALL_TIMEOUT:.0f} s; nothing changed") from None
        # it is running (a long rule compile): its answer is on its way, and a change must
        # reach every worker, or their firewalls would differ
        try:
            return fut.result(WORKER_CALL_LONGEST)
        except TimeoutError:
            log.error("worker %d is stuck in a call for %.0f s", w.index, WORKER_CALL_LONGEST)
            raise ValueError(f"worker {w.index} is stuck; see the log") from None

    def fw_command(self, argv: list[str]) -> str:
        """A ``ctl fw`` command, applied by each worker to its own firewall between two
        batches: worker 0 first (a bad command raises ValueError there and changes
        nothing), then the others."""
        if self.firewall is None:
            raise ValueError("no firewall: the configuration has no [firewall] section")
        now = time.monotonic_ns()
        if argv and argv[0] in ("show", "states", "counters"):
            return self._fw_gather(argv, now)
        text = self._on_worker(self.workers[0], lambda w: w.graph.firewall.command(argv, now))
        if command_changes(argv):
            for w in self.workers[1:]:
                self._on_worker(w, lambda w: w.graph.firewall.command(argv, now))
        return text

    def _fw_gather(self, argv: list[str], now: int) -> str:
        """show / states / counters over all workers (each has its own counters/states)."""
        from vecroute.firewall.show import render_show, render_states

        parts = [self._on_worker(w, lambda w: fw_report(w.graph.firewall, argv, now))
                 for w in self.workers]
        fw = self.firewall
        if argv[0] == "show":
            cnt = fw.compiled.cnt.copy()
            cnt[:] = 0
            index = {int(u): k for k, u in enumerate(fw.compiled.uids)}
            for part in parts:
                for u, row in zip(*part, strict=True):
                    k = index.get(int(u))
                    if k is not None:
                        cnt[k, :2] += row[:2]
                        cnt[k, 2] = max(cnt[k, 2], row[2])
            return render_show(fw.compiled.rules, cnt, with_time="-t" in argv)
        if argv[0] == "states":
            return render_states([s for part in parts for s in part])
        total: dict[str, int] = {}
        for part in parts:
            for k, v in part.items():
                total[k] = v if k == "max-states" else total.get(k, 0) + v
        return "".join(f"{k}: {v}\n" for k, v in total.items())

    # -- packet trace and capture (operator tools) ------------------------------------------

    def trace_add(self, count: int, node: str, match: dict) -> None:
        """Trace the next ``count`` packets entering ``node`` on every worker (VPP: per
        thread), forgetting the previous trace."""
        for w in self.workers:
            self._on_worker(w, lambda w: arm(w.state, count, node, match))

    def trace_clear(self) -> None:
        for w in self.workers:
            self._on_worker(w, lambda w: disarm(w.state))

    def trace_snapshots(self) -> list[tuple[int, dict]]:
        """Each worker's trace records (copied between two of its batches)."""
        return [(w.index, self._on_worker(w, lambda w: snapshot(w.state)))
                for w in self.workers]

    def trace_explainer(self) -> TraceExplainer:
        return TraceExplainer(self.fib)

    def pcap_start(self, iface: str, direction: str, name: str, count: int,
                   snaplen: int) -> dict:
        """Capture into a new pcapng file in ``[capture] directory`` until ``count``
        frames, the size limit or ``pcap stop``."""
        if self.capture is not None and self.capture.fd >= 0:
            raise ValueError(f"a capture is running into {self.capture.path}: pcap stop first")
        names = [itf.name for itf in self.fib.interfaces]
        if iface != "any" and iface not in names:
            raise ValueError(f"no interface {iface[:40]!r} (one of: any, {', '.join(names)})")
        ifx = -1 if iface == "any" else names.index(iface)
        d = self.cfg.capture.directory
        fd = open_capture_file(d, name)  # the session owns it (closed when it fails)
        sess = CaptureSession(str(Path(d) / name), fd, iface, ifx, direction, count,
                              snaplen, self.cfg.capture.max_bytes, names)
        self.capture = sess
        mode = DIRECTIONS[direction]
        try:
            for w in self.workers:
                self._on_worker(w, lambda w: start_capture(w.capture_cfg, w.capture, mode,
                                                           ifx, snaplen, count))
        except BaseException:
            self._capture_stop()  # those armed stop; the file keeps what it got
            sess.stopped_because = "failed to start"
            raise
        self._schedule_drain()
        return sess.row()

    def _schedule_drain(self) -> None:
        if self._capture_timer is not None:
            self._capture_timer.cancel()
        self._capture_timer = None
        if self.loop is not None:
            self._capture_timer = self.loop.call_later(CAPTURE_DRAIN_S, self._capture_drain)

    def _capture_drain(self, final: bool = False) -> None:
        """Move what the workers copied into the file: at most one ring's worth per worker
        per call (a flood cannot hold the loop), every CAPTURE_DRAIN_S."""
        self._capture_timer = None
        sess = self.capture
        if sess is None or sess.fd < 0:
            return
        going = True
        for w in self.workers:
            budget = w.capture.capacity
            while going and budget > 0:
                recs = w.capture.pop(min(CAPTURE_PER_DRAIN, budget))
                if not recs:
                    break
                budget -= len(recs)
                going = sess.add(recs)
        sess.lost = sum(int(w.capture_cfg[CP_LOST]) for w in self.workers)
        if not going or final:
            self._capture_stop()
        else:
            self._schedule_drain()

    def _capture_stop(self) -> None:
        """End the capture; never raises (a stop on exit must not skip the rest of it)."""
        if self._capture_timer is not None:
            self._capture_timer.cancel()
            self._capture_timer = None
        for w in self.workers:
            # the worker checks both before each copy; one it is making now may still
            # land in the ring, and the next start discards it
            w.capture_cfg[CP_LEFT] = 0
            w.capture_cfg[CP_MODE] = 0
        sess = self.capture
        if sess is None or sess.fd < 0:
            return
        try:
            for w in self.workers:  # what was copied before the mode went off
                recs = w.capture.pop(w.capture.capacity)
                if recs and not sess.stopped_because:
                    sess.add(recs)
            if not sess.stopped_because:
                sess.stopped_because = "stopped"
        except Exception as e:  # noqa: BLE001 - logged; the file is closed below
            sess.stopped_because = f"error: {e}"
            log.exception("capture %s", sess.path)
        finally:
            sess.close()
        log.info("capture %s: %d frames, %d bytes, %d lost (%s)", sess.path, sess.written,
                 sess.bytes, sess.lost, sess.stopped_because)

    def pcap_stop(self) -> dict:
        if self.capture is None or self.capture.fd < 0:
            raise ValueError("no capture is running")
        self._capture_drain(final=True)
        return self.capture.row()

    def pcap_status(self) -> dict | None:
        return None if self.capture is None else self.capture.row()

    def clear_counters(self) -> None:
        for w in self.workers:
            self._on_worker(w, lambda w: w.state.clear_counters())
            w.inject.ctl[R_DROPS] = 0

    # -- punts in, injections out ----------------------------------------------------------

    def _send_frame(self, ifx: int, frame: bytes) -> None:
        """An ARP/ND frame the control plane built: worker 0 sends it (next flush)."""
        self._outbox[0].append((ifx, frame))

    def _reinject(self, packets: list[Pending], error: IcmpError | None = None) -> None:
        """Packets that waited for a neighbour go back to the worker that punted them."""
        for p in packets:
            self._outbox[p.worker if p.worker < len(self.workers) else 0].append((p, error))

    def _flush(self) -> None:
        """Push the injections gathered since the last flush and wake their workers (after
        the swap a pending commit will ask for: the packets must meet the new tables)."""
        if self._commit_pending:
            return  # _publish flushes
        outbox, self._outbox = self._outbox, defaultdict(list)
        for k, items in outbox.items():
            w = self.workers[k]
            for item in items:
                if isinstance(item[0], Pending):
                    inject_packets(w.inject, [item[0]], item[1])
                else:
                    inject_frame(w.inject, item[0], item[1])
            w.wake()

    def _drain(self, w: DataPlaneWorker) -> None:
        """The worker signalled punts: take a bounded number, come back for the rest."""
        w.drain_punt_signal()
        recs = w.punt.pop(PUNTS_PER_CALLBACK)
        if recs:
            self._handle_punts(decode_punts(w.index, recs), time.monotonic_ns())
        if len(w.punt) and self.loop is not None:
            self.loop.call_soon(self._drain, w)

    def _handle_punts(self, punts: list[tuple], now: int) -> None:
        if self.lcp is not None:
            self.lcp.to_linux(punts)  # host punts, and copies of ARP / ND
        self.neigh.handle_punts(punts, now)
        if self.neigh.changed:
            self.commit()
        else:
            self._flush()

    def _tick(self) -> None:
        self.neigh.tick(time.monotonic_ns())
        if self.lcp is not None:
            self.lcp.follow_carrier()
        if self.neigh.changed:
            self.commit()
        else:
            self._flush()
        if self.loop is not None and not self.stop:
            self.loop.call_later(TICK_S, self._tick)

    # -- reload -----------------------------------------------------------------------------

    def _build(self, path: str) -> tuple:
        """A new configuration's tables, built aside (in a helper thread); the neighbours
        known by then are added when it is installed."""
        cfg = load_config(path)
        if [i.name for i in cfg.interfaces] != [i.name for i in self.cfg.interfaces]:
            raise ConfigError(f"{path}: interfaces changed; restart to apply")
        if [i.host_if for i in cfg.interfaces] != [i.host_if for i in self.cfg.interfaces]:
            raise ConfigError(f"{path}: host_if (linux-cp mirrors) changed; restart to apply")
        # the workers, the sockets and the mirrors are made once
        for section in ("router", "control", "metrics", "linux_cp"):
            if getattr(cfg, section) != getattr(self.cfg, section):
                log.warning("reload: [%s] changed in %s; it takes effect at restart",
                            section, path)
            setattr(cfg, section, getattr(self.cfg, section))
        dp = build_dataplane(cfg, self.macs)
        return cfg, dp.fib, [dp.firewall] + [dp.new_firewall() for _ in self.workers[1:]]

    async def _reload(self) -> None:
        if self._reloading:
            self._reload_again = True
            return
        self._reloading = True
        try:
            while True:
                self._reload_again = False
                # a full table is millions of objects: no collection pass while they are
                # made (it would hold the GIL for a second, and a worker returning to
                # Python would wait for it), then they are frozen out of later passes.
                # Freezing has a price: whatever is alive then and becomes cyclic garbage
                # later (the asyncio objects of control connections open at that moment)
                # is never collected (measured in the soak: ~1 MB per reload with hostile
                # clients about). So only a big table is frozen, after the garbage of the
                # moment was collected (a pass over what is not frozen: milliseconds)
                gc.collect()
                gc.disable()
                big = False
                try:
                    cfg, fib, firewalls = await _in_daemon_thread(self._build, self.config_path)
                    big = len(fib.routes) >= FREEZE_ROUTES
                    self._install(cfg, fib, firewalls)
                    if self.sync is not None:  # the kernel's routes into the new FIB
                        self.sync.resync()
                    self.reloads["ok"] += 1
                    self.last_reload_ok = time.time()
                except (ConfigError, RouteError, OSError) as e:
                    self.reloads["failed"] += 1
                    log.error("reload failed, keeping the running configuration: %s",
                              _one_line(e))
                except Exception as e:  # noqa: BLE001 - a reload must never stop the router
                    self.reloads["failed"] += 1
                    log.error("reload failed, keeping the running configuration: %s: %s "
                              "(a bug: please report it)", type(e).__name__, _one_line(e))
                finally:
                    if big:
                        gc.freeze()
                    gc.enable()
                if not self._reload_again:
                    return
        finally:
            self._reloading = False

    def _install(self, cfg: Config, fib: Fib, firewalls: list) -> None:
        # the neighbour table follows the new file (its static entries), keeps what the
        # operator added and what was learnt meanwhile, and installs it into the new FIB
        self.neigh.adopt(fib, cfg.neighbors, time.monotonic_ns(), cfg.neighbor_table)
        self.cfg, self.fib = cfg, fib
        self._commit_pending = False
        tables = self._tables()
        limits = ((0, cfg.icmp.rate, cfg.icmp.burst),
                  (TB_RST, cfg.icmp.tcp_reset_rate, cfg.icmp.tcp_reset_burst))

        def apply(w: DataPlaneWorker, fw: Firewall | None) -> None:
            # the firewall is rebuilt from the file: ctl changes and states are gone
            w.graph.attach_firewall(fw)
            w.graph.swap_state(tables)
            # the ICMP and RST buckets are the worker's own (they carry over swaps):
            # [icmp] is applied to them here, their tokens kept up to the new burst
            for base, rate, burst in limits:
                set_icmp_limit(w.graph.state.icmp_tb, rate, burst, base)

        for w, fw in zip(self.workers, firewalls, strict=True):
            w.call(lambda w, fw=fw: apply(w, fw)).add_done_callback(_log_failure)
        self.neigh.changed = False
        self._flush()
        self._steer()
        log.info("reloaded %s: %d routes", self.config_path, len(fib.routes))

    # -- the control plane's loop -----------------------------------------------------------

    def run(self) -> None:
        signals = StopSignals.install()
        loop = self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        # a worker returning to Python (a table swap) waits at most this long for the GIL
        old_switch = sys.getswitchinterval()
        sys.setswitchinterval(0.0005)
        self._stopped = loop.create_future()
        # the tables built so far (a full table: millions of objects) stay out of the
        # garbage collector's passes, which hold the GIL while they run
        gc.freeze()
        try:
            for w in self.workers:
                w.on_exit = lambda w: loop.call_soon_threadsafe(self._worker_exited, w)
                loop.add_reader(w.punt_fd, self._drain, w)
            if self.lcp is not None:
                self.lcp.start(loop, self._from_linux)
                if self.cfg.linux_cp.sync:
                    from vecroute.control.linux_nl import KernelSync

                    self.sync = KernelSync(self, self.cfg.linux_cp.netns,
                                           self.lcp.kernel_ifindexes())
                    self.sync.start(loop)
            for w in self.workers:
                w.start()
            loop.run_until_complete(self.server.start())
            if self.metrics is not None:
                loop.run_until_complete(self.metrics.start())
            # handlers run in the main thread; the loop wakes for them within one tick
            signals.running(lambda: loop.call_soon_threadsafe(self._request_stop),
                            lambda: loop.call_soon_threadsafe(
                                lambda: loop.create_task(self._reload())))
            loop.call_later(TICK_S, self._tick)
            loop.run_until_complete(self._stopped)
        finally:
            signals.stopping()
            sys.setswitchinterval(old_switch)
            self.close()
            try:
                for task in asyncio.all_tasks(loop):
                    task.cancel()  # a reload being built, say
                closing = [self.server.wait_closed()]
                if self.metrics is not None:
                    closing.append(self.metrics.wait_closed())
                loop.run_until_complete(asyncio.wait_for(
                    asyncio.gather(*closing, *asyncio.all_tasks(loop),
                                   return_exceptions=True), CLIENTS_CLOSE_TIMEOUT))
            except (TimeoutError, RuntimeError) as e:
                log.warning("control connections not closed in time: %s", e)
            finally:
                loop.close()

    def _request_stop(self) -> None:
        self.stop = True
        if self._stopped is not None and not self._stopped.done():
            self._stopped.set_result(None)

    def _from_linux(self, port: int, frame: bytes) -> bool:
        """A frame Linux sent on a mirror: out by the paired port, as it is (worker 0;
        woken once per event-loop turn)."""
        w = self.workers[0]
        if not inject_frame(w.inject, port, frame, linux=True):  # a quarter kept for ours
            return False
        if not self._wake_pending:
            self._wake_pending = True
            self.loop.call_soon(self._wake_worker0)
        return True

    def _wake_worker0(self) -> None:
        self._wake_pending = False
        self.workers[0].wake()

    def linux_cp_view(self) -> dict:
        """``show linux-cp``: the mirrors and their counters, the netlink sync's state."""
        if self.lcp is None:
            raise ValueError("linux-cp is off: the configuration has no [linux_cp] section")
        return {"netns": self.cfg.linux_cp.netns or "", "pairs": self.lcp.rows(),
                "sync": self.sync.stats() if self.sync is not None else None}

    def _worker_exited(self, w: DataPlaneWorker) -> None:
        if self.stop:
            return
        # stop rather than forward with a hole in the fanout
        log.error("worker %d exited (%s); stopping", w.index, w.error)
        self.failed = True
        self._request_stop()

    def close(self, quiet: bool = False) -> None:
        """Stop the workers (WORKER_STOP_TIMEOUT for all of them), close the control
        socket, give the ports back. Once only; bounded in time."""
        if self._closed:
            return
        self._closed = True
        loop = getattr(self, "loop", None)
        if loop is not None and not loop.is_closed():
            for w in self.workers:
                loop.remove_reader(w.punt_fd)
        for w in self.workers:
            w.request_stop()  # all of them at once, then wait for each
        deadline = time.monotonic() + WORKER_STOP_TIMEOUT
        for w in self.workers:
            w.stop(max(0.0, deadline - time.monotonic()))
        for w in self.workers:
            if w.alive():  # its rings stay mapped: unmapping them under its loop would crash
                log.error("worker %d did not stop within %.0f s", w.index, WORKER_STOP_TIMEOUT)
            else:
                w.close()
        if getattr(self, "capture", None) is not None:
            self._capture_stop()
        if getattr(self, "sync", None) is not None:
            self.sync.close()
        if getattr(self, "lcp", None) is not None:
            self.lcp.close(loop)
        if self.server is not None:
            self.server.close()
        if self.metrics is not None:
            self.metrics.close()
        elif self._metrics_sock is not None:  # the start failed before the server was made
            self._metrics_sock.close()
        if self.ports is not None:
            self.ports.restore()
        if not quiet:
            log.info("vecroute stopped")


async def _in_daemon_thread(fn: Callable, *args: object) -> object:
    """``fn(*args)`` in a daemon thread: unlike the default executor's threads, which the
    interpreter joins at exit, a big reload being built never delays a stop."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future = loop.create_future()

    def settle(ok: bool, value: object) -> None:
        if not fut.done():
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)  # type: ignore[arg-type]

    def body() -> None:
        try:
            out = (True, fn(*args))
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting task
            out = (False, e)
        try:
            loop.call_soon_threadsafe(settle, *out)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    threading.Thread(target=body, name="vecroute-reload", daemon=True).start()
    return await fut


def set_icmp_limit(tb, rate: int, burst: int, base: int = 0) -> None:
    """Give a running token bucket of ``icmp_tb`` (ICMP at 0, RSTs at TB_RST) a new rate
    (tokens/s) and burst (tokens)."""
    from vecroute.graph.state import TB_BURST, TB_CREDIT, TB_RATE

    tb[base + TB_RATE] = rate
    tb[base + TB_BURST] = burst
    tb[base + TB_CREDIT] = min(int(tb[base + TB_CREDIT]), burst * 1_000_000_000)


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def _log_failure(fut) -> None:
    """A call a worker could not carry out (a swap, a reload's firewall): say so."""
    if not fut.cancelled() and fut.exception() is not None:
        log.error("a worker failed to apply a change: %s", fut.exception())


def fw_report(fw: Firewall, argv: list[str], now: int):
    """One worker's part of ``fw show|states|counters`` (summed by the control plane)."""
    if argv[0] == "show":
        return fw.compiled.uids.copy(), fw.compiled.cnt.copy()
    if argv[0] == "states":
        return fw.states(now)
    return fw.counters()
