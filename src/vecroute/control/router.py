"""The live router (`vecroute run`): the control plane and its workers.

With ``workers = 1`` one process polls everything: packet sockets, the control socket, a
signal pipe (no busy spinning: poll() sleeps when nothing happens). With N workers, N
forked processes share each interface through PACKET_FANOUT (hash mode: a flow stays on
one worker); each has its own copy of the forwarding state and its own counters in shared
memory (summed by ``ctl show``). The parent keeps the control plane: neighbour resolution,
ctl commands, timers, SIGHUP. It records every FIB change in a journal and ships it to the
workers, which replay it between two batches: no lock on the data path, and a batch never
sees a half-applied update.

The router owns its ports: at start it sets net.ipv4.conf.PORT.arp_ignore=8 (the kernel
never answers ARP there), net.ipv4.conf.PORT.forwarding=0 (the kernel never routes what
arrives there; it drops it silently), net.ipv6.conf.PORT.disable_ipv6=1 (no kernel
NS/RS/DAD), installs a tc ingress drop (clsact + a one-instruction BPF "drop") so the
kernel's IP stack never even looks at what arrives there (packet sockets see frames before
tc ingress, so vecroute still receives everything), and brings the links up. The drop is
removed on exit. Kernel IPv4 addresses on a port are reported.
"""

from __future__ import annotations

import ipaddress
import logging
import mmap
import os
import pickle
import select
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from vecroute.control.config import Config, ConfigError, load_config
from vecroute.control.forwarder import Forwarder
from vecroute.control.neighbors import PERMANENT, NeighborTable
from vecroute.control.server import ControlServer
from vecroute.fib.fib import Fib, RouteError
from vecroute.firewall.firewall import Firewall, command_changes, firewall_from_config
from vecroute.graph.counters import N_COUNTERS
from vecroute.graph.node_ids import N_NODES
from vecroute.graph.state import IFS_COLS, NS_COLS, DataPlaneState

log = logging.getLogger("vecroute.router")
TICK_NS = 100_000_000  # neighbour timers run every 100 ms
MAX_BATCHES_PER_WAKEUP = 64  # then look at the control socket again
MSG_MAX = 1 << 20


class StartupError(RuntimeError):
    """The router cannot start (not root, missing interface, bad config): one line, exit 2."""


def read_mac(ifname: str) -> bytes:
    try:
        text = Path(f"/sys/class/net/{ifname}/address").read_text().strip()
    except OSError:
        raise StartupError(f"interface {ifname!r} does not exist") from None
    return bytes(int(b, 16) for b in text.split(":"))


def _sysctl(path: str, value: str) -> None:
    try:
        Path("/proc/sys", path.replace(".", "/")).write_text(value)
    except OSError as e:
        log.warning("cannot set %s=%s: %s", path, value, e.strerror)


def tx_mode(ifname: str, configured: str) -> str:
    """``auto``: sendmmsg on virtual devices (veth, tap: the kernel copies TX-ring frames
    into new pages there anyway), the zero-copy TX ring on devices with hardware."""
    if configured != "auto":
        return configured
    return "ring" if Path(f"/sys/class/net/{ifname}/device").exists() else "sendmmsg"


def prepare_port(ifname: str) -> None:
    """Make the kernel keep its hands off a router port (see the module docstring)."""
    _sysctl(f"net.ipv4.conf.{ifname}.arp_ignore", "8")
    _sysctl(f"net.ipv4.conf.{ifname}.forwarding", "0")
    _sysctl(f"net.ipv6.conf.{ifname}.disable_ipv6", "1")
    subprocess.run(["ip", "link", "set", "dev", ifname, "up"], check=False, capture_output=True)
    # An ingress drop: packet sockets see frames before tc ingress, so vecroute still gets
    # everything, while the kernel's own IP stack no longer spends a route lookup on each
    # frame (measured: that work ran on the sender's core and capped the veth rate).
    subprocess.run(
        ["tc", "qdisc", "del", "dev", ifname, "clsact"], capture_output=True, check=False
    )
    ok = (
        subprocess.run(
            ["tc", "qdisc", "add", "dev", ifname, "clsact"], capture_output=True, check=False
        ).returncode
        == 0
        and subprocess.run(
            [
                "tc",
                "filter",
                "add",
                "dev",
                ifname,
                "ingress",
                "pref",
                "1",
                "bpf",
                "da",
                "bytecode",
                "1,6 0 0 2,",
            ],
            capture_output=True,
            check=False,
        ).returncode
        == 0
    )
    if not ok:
        log.warning(
            "%s: no tc ingress drop (tc or cls_bpf missing); the kernel will also "
            "look at every frame received there",
            ifname,
        )
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "dev", ifname],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    if out.strip():
        log.warning(
            "%s has kernel IPv4 addresses; the kernel will also answer for them: %s",
            ifname,
            " ".join(line.split()[3] for line in out.splitlines()),
        )


class SharedCounters:
    """One worker's counter arrays in anonymous shared memory (written by the worker,
    read and cleared by the parent)."""

    def __init__(self, n_if: int) -> None:
        shapes = [(N_COUNTERS,), (n_if, IFS_COLS), (N_NODES, NS_COLS)]
        sizes = [int(np.prod(s)) * 8 for s in shapes]
        self.mem = mmap.mmap(-1, sum(sizes), flags=mmap.MAP_SHARED)
        self.arrays = []
        off = 0
        for shape, size in zip(shapes, sizes, strict=True):
            self.arrays.append(
                np.frombuffer(self.mem, np.int64, int(np.prod(shape)), off).reshape(shape)
            )
            off += size

    def attach(self, st: DataPlaneState) -> DataPlaneState:
        st.counters, st.if_stats, st.node_stats = self.arrays
        return st


def _send_msg(sock: socket.socket, obj) -> None:
    try:
        sock.send(pickle.dumps(obj))
    except OSError as e:
        log.debug("worker message lost: %s", e)


class Worker:
    """A forked data-path process (parent side handle)."""

    def __init__(self, pid: int, sock: socket.socket, shm: SharedCounters) -> None:
        self.pid, self.sock, self.shm = pid, sock, shm


class LiveRouter:
    """A router on real interfaces; also the object ctl commands act on."""

    def __init__(self, cfg: Config, *, prepare_ports: bool = True) -> None:
        if os.geteuid() != 0:
            raise StartupError("must run as root (AF_PACKET sockets need CAP_NET_RAW)")
        self.cfg = cfg
        self.config_path = cfg.path
        from vecroute.warmup import warm

        # no JIT pause on a first packet or ctl
        log.info("kernels ready in %.1f s", warm(firewall=cfg.firewall is not None))
        self.macs = {itf.name: read_mac(itf.name) for itf in cfg.interfaces}
        if prepare_ports:
            for itf in cfg.interfaces:
                prepare_port(itf.name)
        try:
            self.fib = Fib.from_config(cfg, self.macs)
        except RouteError as e:
            raise StartupError(str(e)) from None
        try:
            self.firewall = firewall_from_config(cfg)
        except ConfigError as e:  # a rule naming a table that does not exist, say
            raise StartupError(str(e)) from None
        self.neigh = NeighborTable(self.fib, self._send_frame, self._reinject)
        self.ctl_tx = []
        for itf in cfg.interfaces:
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
            s.bind((itf.name, 0))
            self.ctl_tx.append(s)
        self.n_workers = cfg.router.workers
        self.workers: list[Worker] = []
        # the parent's forwarder: the only one with one worker; with several it has no
        # rings and only forwards packets that waited for a neighbour
        socks = self._open_sockets(None) if self.n_workers == 1 else []
        self.fwd = Forwarder(self.fib, socks, cfg.router.vector_size, firewall=self.firewall)
        self.fwd.warm()
        if self.n_workers > 1:
            self.fib.journal = []
            self._spawn_workers()
        self.server = ControlServer(cfg.control.socket, self)
        self.stop = False
        self.reload_requested = False
        log.info(
            "vecroute running on %s with %d worker(s), control socket %s",
            ", ".join(i.name for i in cfg.interfaces),
            self.n_workers,
            cfg.control.socket,
        )

    def _open_sockets(self, fanout: int | None) -> list:
        from vecroute.io.af_packet import PacketSocket

        return [
            PacketSocket(
                itf.name, fanout_group=fanout, tx_mode=tx_mode(itf.name, self.cfg.router.tx)
            )
            for itf in self.cfg.interfaces
        ]

    # -- workers ------------------------------------------------------------------------------

    def _spawn_workers(self) -> None:
        group = (os.getpid() * 16) & 0xFFFF
        for _ in range(self.n_workers):
            shm = SharedCounters(len(self.cfg.interfaces))
            parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            pid = os.fork()
            if pid == 0:  # the worker
                parent_end.close()
                code = 0
                try:
                    _worker_main(self.fib, self.firewall, self.cfg, child_end, shm, group)
                except BaseException:  # noqa: BLE001 - a worker must never unwind into the parent's code
                    log.exception("worker crashed")
                    code = 1
                os._exit(code)
            child_end.close()
            self.workers.append(Worker(pid, parent_end, shm))
            # one at a time: every fanout group then lists the workers in the same order, so
            # the symmetric fanout hash sends both directions of a flow to the same worker
            # (whose firewall holds the flow's state)
            if not select.select([parent_end], [], [], 120)[0]:
                raise StartupError("a worker did not start within 120 s")
            parent_end.recv(MSG_MAX)

    def _flush_journal(self) -> None:
        if self.fib.journal:
            ops, self.fib.journal = self.fib.journal, []
            for w in self.workers:
                _send_msg(w.sock, ("ops", ops))

    # -- RouterControl (ctl commands) -------------------------------------------------------

    def stats(self) -> DataPlaneState:
        st = self.fwd.graph.state
        if not self.workers:
            return st
        total = DataPlaneState(
            **{
                f: getattr(st, f)
                for f in (
                    "ifc",
                    "if_mac",
                    "if_ip6",
                    "fib4_roots",
                    "fib4_groups",
                    "fib6_roots",
                    "fib6_groups",
                    "lb",
                    "lb_buckets",
                    "adj",
                    "adj_rw",
                    "adj_last_req",
                )
            }
        )
        total.counters = st.counters.copy()
        total.if_stats = st.if_stats.copy()
        total.node_stats = st.node_stats.copy()
        for w in self.workers:
            c, i, n = w.shm.arrays
            total.counters += c
            total.if_stats += i
            total.node_stats += n
        return total

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

    def commit(self) -> None:
        """Swap the FIB's current arrays in as the data path's state (between batches)."""
        self.fwd.refresh()
        self._flush_journal()
        self.neigh.changed = False

    def fw_command(self, argv: list[str]) -> str:
        """A ``ctl fw`` command: applied here first (a bad one raises ValueError and changes
        nothing), then sent to every worker, which applies it between two batches."""
        fw = self.firewall
        if fw is None:
            raise ValueError("no firewall: the configuration has no [firewall] section")
        now = time.monotonic_ns()
        if self.workers and argv and argv[0] in ("show", "states", "counters"):
            return self._fw_gather(argv, now)
        text = fw.command(argv, now)
        if self.workers and command_changes(argv):
            for w in self.workers:
                _send_msg(w.sock, ("fw", list(argv)))
        return text

    def _fw_gather(self, argv: list[str], now: int) -> str:
        """show / states / counters over all workers (each has its own counters/states)."""
        from vecroute.firewall.show import render_show, render_states

        parts = [fw_report(self.firewall, argv, now)]
        for w in self.workers:
            _send_msg(w.sock, ("fw-query", list(argv)))
        for w in self.workers:
            parts.append(self._await_reply(w))
        fw = self.firewall
        if argv[0] == "show":
            cnt = fw.compiled.cnt.copy()
            index = {int(u): k for k, u in enumerate(fw.compiled.uids)}
            for part in parts[1:]:
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

    def _await_reply(self, w: Worker, timeout: float = 5.0):
        """The worker's answer to a query (punts arriving meanwhile are handled)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r, _, _ = select.select([w.sock], [], [], max(0.0, deadline - time.monotonic()))
            if not r:
                break
            data = w.sock.recv(MSG_MAX)
            if not data:
                break
            msg = pickle.loads(data)
            if isinstance(msg, tuple) and msg[0] == "fw-reply":
                path = Path(msg[1])
                try:
                    return pickle.loads(path.read_bytes())
                finally:
                    path.unlink(missing_ok=True)
            self._handle_punts(msg, time.monotonic_ns())
        raise ValueError(f"worker {w.pid} did not answer the firewall query")

    def clear_counters(self) -> None:
        self.fwd.graph.state.clear_counters()
        for w in self.workers:
            for a in w.shm.arrays:
                a[...] = 0

    # -- slow path ----------------------------------------------------------------------------

    def _send_frame(self, ifx: int, frame: bytes) -> None:
        try:
            self.ctl_tx[ifx].send(frame)
        except OSError as e:
            log.debug("control-plane send on %s failed: %s", self.cfg.interfaces[ifx].name, e)

    def _reinject(self, packets: list, error=None) -> None:
        """Waiting packets go through the parent's forwarder (with workers too: it holds
        the neighbour table), to be forwarded or answered with ``error``."""
        self.fwd.reinject(packets, error)

    def _handle_punts(self, punts: list[tuple], now: int) -> None:
        self.neigh.handle_punts(punts, now)
        if self.neigh.changed:
            self.commit()

    def _reload(self) -> None:
        try:
            cfg = load_config(self.config_path)
            if [i.name for i in cfg.interfaces] != [i.name for i in self.cfg.interfaces]:
                raise ConfigError(f"{self.config_path}: interfaces changed; restart to apply")
            fib = Fib.from_config(cfg, self.macs)
            for n in self.neigh.entries.values():  # keep what was learnt
                if n.mac is not None and n.state != PERMANENT:
                    fib.add_neighbor(n.ip, n.mac, cfg.interfaces[n.ifx].name)
            firewall = firewall_from_config(cfg)
        except (ConfigError, RouteError) as e:
            log.error("reload failed, keeping the running configuration: %s", e)
            return
        self.cfg, self.fib = cfg, fib
        self.firewall = firewall  # rebuilt from the file: ctl changes and states are gone
        self.fwd.graph.attach_firewall(firewall)
        self.neigh.fib = fib
        self.fwd.fib = fib
        if self.workers:
            learnt = [
                (str(n.ip), n.mac, cfg.interfaces[n.ifx].name)
                for n in self.neigh.entries.values()
                if n.mac is not None and n.state != PERMANENT
            ]
            for w in self.workers:
                _send_msg(w.sock, ("reload", self.config_path, learnt))
            fib.journal = []
        self.commit()
        log.info("reloaded %s: %d routes", self.config_path, len(fib.routes))

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        rfd, wfd = os.pipe()
        os.set_blocking(wfd, False)
        os.set_blocking(rfd, False)
        old_wakeup = signal.set_wakeup_fd(wfd)
        handlers = {
            signal.SIGINT: lambda *_: setattr(self, "stop", True),
            signal.SIGTERM: lambda *_: setattr(self, "stop", True),
            signal.SIGHUP: lambda *_: setattr(self, "reload_requested", True),
        }
        old = {s: signal.signal(s, h) for s, h in handlers.items()}
        poller = select.poll()
        for s in self.fwd.socks:
            poller.register(s.fileno(), select.POLLIN)
        wfds = {w.sock.fileno(): w for w in self.workers}
        for fd in wfds:
            poller.register(fd, select.POLLIN)
        poller.register(self.server.fileno(), select.POLLIN)
        poller.register(rfd, select.POLLIN)
        next_tick = time.monotonic_ns() + TICK_NS
        try:
            while not self.stop:
                wait = 0 if self.fwd.inject else (next_tick - time.monotonic_ns()) // 1_000_000
                fds = {fd for fd, _ in poller.poll(max(0, wait))}
                if rfd in fds:
                    try:
                        os.read(rfd, 512)
                    except BlockingIOError:
                        pass
                for _ in range(MAX_BATCHES_PER_WAKEUP):
                    now = time.monotonic_ns()
                    n, punts = self.fwd.forward(now, self._send_frame)
                    if punts:
                        self._handle_punts(punts, now)
                    if n == 0:
                        break
                for fd in fds & wfds.keys():
                    self._from_worker(wfds[fd])
                if self.server.fileno() in fds:
                    self.server.handle()
                    self._flush_journal()
                if self.reload_requested:
                    self.reload_requested = False
                    self._reload()
                now = time.monotonic_ns()
                if now >= next_tick:
                    self.neigh.tick(now)
                    if self.neigh.changed:
                        self.commit()
                    next_tick = now + TICK_NS
        finally:
            signal.set_wakeup_fd(old_wakeup)
            for s, h in old.items():
                signal.signal(s, h)
            os.close(rfd)
            os.close(wfd)
            self.close()

    def _from_worker(self, w: Worker) -> None:
        while True:
            try:
                data = w.sock.recv(MSG_MAX, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            if not data:  # the worker died: stop rather than forward with a hole
                log.error("worker %d exited; stopping", w.pid)
                self.stop = True
                return
            self._handle_punts(pickle.loads(data), time.monotonic_ns())

    def close(self) -> None:
        for itf in self.cfg.interfaces:
            subprocess.run(
                ["tc", "qdisc", "del", "dev", itf.name, "clsact"], capture_output=True, check=False
            )
        for w in self.workers:
            try:
                os.kill(w.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for w in self.workers:
            try:
                os.waitpid(w.pid, 0)
            except ChildProcessError:
                pass
            w.sock.close()
        for s in self.fwd.socks:
            s.close()
        for s in self.ctl_tx:
            s.close()
        self.server.close()
        log.info("vecroute stopped")


def fw_report(fw: Firewall, argv: list[str], now: int):
    """One process's part of ``fw show|states|counters`` (summed by the parent)."""
    if argv[0] == "show":
        return fw.compiled.uids.copy(), fw.compiled.cnt.copy()
    if argv[0] == "states":
        return fw.states(now)
    return fw.counters()


def _worker_main(
    fib: Fib,
    firewall: Firewall | None,
    cfg: Config,
    ctl: socket.socket,
    shm: SharedCounters,
    group: int,
) -> None:
    """A worker: its own rings (fanout group), its own FIB copy, punts to the parent."""
    from vecroute.io.af_packet import PacketSocket

    stop = False

    def _stop(*_):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    fib.journal = None
    # a fanout group belongs to one device: one group id per interface
    socks = [
        PacketSocket(
            itf.name, fanout_group=(group + ifx) & 0xFFFF, tx_mode=tx_mode(itf.name, cfg.router.tx)
        )
        for ifx, itf in enumerate(cfg.interfaces)
    ]
    fwd = Forwarder(fib, socks, cfg.router.vector_size, shm.attach(fib.state()), firewall)
    _send_msg(ctl, ("ready",))  # the parent starts the next worker
    poller = select.poll()
    for s in socks:
        poller.register(s.fileno(), select.POLLIN)
    poller.register(ctl.fileno(), select.POLLIN)
    try:
        while not stop:
            fds = {fd for fd, _ in poller.poll(200)}
            if ctl.fileno() in fds:
                fib = _worker_control(fwd, fib, ctl)
                if fib is None:
                    break
            for _ in range(MAX_BATCHES_PER_WAKEUP):
                n, punts = fwd.forward(time.monotonic_ns())
                if punts:
                    _send_msg(ctl, punts)
                if n == 0:
                    break
    finally:
        for s in socks:
            s.close()


def _worker_control(fwd: Forwarder, fib: Fib, ctl: socket.socket) -> Fib | None:
    """Apply the parent's journal (or a reload) between two batches."""
    while True:
        try:
            data = ctl.recv(MSG_MAX, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return fib
        if not data:
            return None  # the parent is gone
        msg = pickle.loads(data)
        if msg[0] == "ops":
            for name, args, kwargs in msg[1]:
                try:
                    getattr(fib, name)(*args, **kwargs)
                except RouteError as e:
                    log.warning("worker could not apply %s: %s", name, e)
        elif msg[0] == "fw":
            try:
                fwd.graph.firewall.command(msg[1], time.monotonic_ns())
            except ValueError as e:
                log.warning("worker could not apply fw %s: %s", " ".join(msg[1]), e)
        elif msg[0] == "fw-query":
            fd, path = tempfile.mkstemp(prefix="vecroute-fw-", dir=_reply_dir())
            with os.fdopen(fd, "wb") as f:
                pickle.dump(fw_report(fwd.graph.firewall, msg[1], time.monotonic_ns()), f)
            _send_msg(ctl, ("fw-reply", path))
            continue
        elif msg[0] == "reload":
            cfg = load_config(msg[1])
            macs = {i.name: read_mac(i.name) for i in cfg.interfaces}
            fib = Fib.from_config(cfg, macs)
            for ip, mac, ifname in msg[2]:
                fib.add_neighbor(ip, mac, ifname)
            fwd.fib = fib
            fwd.graph.attach_firewall(firewall_from_config(cfg))
        fwd.refresh()


def _reply_dir() -> str | None:
    """Where workers leave query answers too big for a socket message (tmpfs if any)."""
    return "/dev/shm" if os.path.isdir("/dev/shm") else None
