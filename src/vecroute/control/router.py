"""The live router (`vecroute run`): AF_PACKET rings in, the graph, rings out.

One process runs the data path and the control plane in one poll loop: packet sockets,
the control socket and a signal pipe are polled together (no busy spinning: poll() sleeps
when there is nothing to do). Between batches the loop handles what the data path punted
(ARP, neighbour discovery, packets waiting for a neighbour), neighbour timers, ctl
commands, and SIGHUP reloads; every change is swapped in as a whole new state reference,
so a batch never sees a half-applied update.

The router owns its ports: the kernel must neither answer ARP nor forward there. At
start vecroute sets, for each port, net.ipv4.conf.PORT.arp_ignore=8 (never answer ARP),
net.ipv4.conf.PORT.forwarding=0 (never route what arrives there; the kernel then drops
such packets silently), net.ipv6.conf.PORT.disable_ipv6=1 (no kernel NS/RS/DAD), and
brings the link up. Kernel IPv4 addresses on a port are reported as a warning.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import select
import signal
import socket
import subprocess
import time
from pathlib import Path

import numpy as np

from vecroute.control.config import Config, ConfigError, load_config
from vecroute.control.neighbors import NeighborTable
from vecroute.control.server import ControlServer
from vecroute.fib.adjacency import ADJ_GLEAN
from vecroute.fib.fib import Fib, RouteError
from vecroute.graph import counters as C
from vecroute.graph.dispatch import Graph
from vecroute.graph.node_ids import DONE_PUNT, IP4_LOOKUP, IP6_LOOKUP
from vecroute.graph.state import OPT_LIVE, DataPlaneState
from vecroute.packet.batch import (
    F_IP6,
    HEADROOM,
    M_ADJ,
    M_ERR,
    M_FIB,
    M_FLAGS,
    M_L3,
    M_L4,
    M_LEN,
    M_NEXT,
    M_OFF,
    M_PROTO,
    M_RX,
    M_TX,
    SLOT,
    PacketBatch,
    reset_slot,
)

log = logging.getLogger("vecroute.router")
NANO = 1_000_000_000
TICK_NS = 100_000_000  # neighbour timers run every 100 ms
MAX_BATCHES_PER_WAKEUP = 64  # then look at the control socket again


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


def prepare_port(ifname: str) -> None:
    """Make the kernel keep its hands off a router port (see the module docstring)."""
    _sysctl(f"net.ipv4.conf.{ifname}.arp_ignore", "8")
    _sysctl(f"net.ipv4.conf.{ifname}.forwarding", "0")
    _sysctl(f"net.ipv6.conf.{ifname}.disable_ipv6", "1")
    subprocess.run(["ip", "link", "set", "dev", ifname, "up"], check=False, capture_output=True)
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


class LiveRouter:
    """A router on real interfaces; also the object ctl commands act on."""

    def __init__(self, cfg: Config, *, socket_factory=None, prepare_ports: bool = True) -> None:
        if os.geteuid() != 0:
            raise StartupError("must run as root (AF_PACKET sockets need CAP_NET_RAW)")
        from vecroute.io.af_packet import PacketSocket

        self.cfg = cfg
        self.macs = {itf.name: read_mac(itf.name) for itf in cfg.interfaces}
        if prepare_ports:
            for itf in cfg.interfaces:
                prepare_port(itf.name)
        try:
            self.fib = Fib.from_config(cfg, self.macs)
        except RouteError as e:
            raise StartupError(str(e)) from None
        self.batch = PacketBatch(cfg.router.vector_size)
        st = self.fib.state()
        st.opts[OPT_LIVE] = 1
        self.graph = Graph(st, self.batch)
        self.neigh = NeighborTable(self.fib, self._send_frame, self._queue_inject)
        factory = socket_factory or PacketSocket
        self.socks = [factory(itf.name) for itf in cfg.interfaces]
        self.ctl_tx = []
        for itf in cfg.interfaces:
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
            s.bind((itf.name, 0))
            self.ctl_tx.append(s)
        self.inject: list[tuple] = []
        self.server = ControlServer(cfg.control.socket, self)
        self.stop = False
        self.reload_requested = False
        self.config_path = cfg.path
        self._dirty = False
        log.info(
            "vecroute running on %s (control socket %s)",
            ", ".join(i.name for i in cfg.interfaces),
            cfg.control.socket,
        )

    # -- RouterControl (ctl commands) -------------------------------------------------------

    def stats(self) -> DataPlaneState:
        return self.graph.state

    def neighbor_rows(self) -> list[dict]:
        return self.neigh.rows()

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
        """Swap the FIB's current arrays in as the data path's state (atomic per batch)."""
        st = self.fib.state()
        self.graph.swap_state(st)
        self.neigh.changed = False

    def clear_counters(self) -> None:
        self.graph.state.clear_counters()

    # -- slow-path packet I/O ---------------------------------------------------------------

    def _send_frame(self, ifx: int, frame: bytes) -> None:
        try:
            self.ctl_tx[ifx].send(frame)
        except OSError as e:
            log.debug("control-plane send on %s failed: %s", self.cfg.interfaces[ifx].name, e)

    def _queue_inject(self, packets: list[tuple]) -> None:
        self.inject.extend(packets)

    def _load_injected(self) -> int:
        """Put packets that waited for a neighbour back in the batch, entering at a lookup
        (their route may have changed meanwhile; this costs them a second lookup)."""
        b = self.batch
        n = 0
        while self.inject and n < b.vector_size:
            rx, family, l3b, fib, flags = self.inject.pop(0)
            reset_slot(b.meta, n, rx, len(l3b))
            o = n * SLOT + HEADROOM + 16
            b.buf[o : o + len(l3b)] = np.frombuffer(l3b, dtype=np.uint8)
            m = b.meta
            m[M_OFF, n] = o
            m[M_L3, n] = o
            m[M_FIB, n] = fib
            m[M_FLAGS, n] = flags
            if family == 4:
                m[M_NEXT, n] = IP4_LOOKUP
                m[M_PROTO, n] = l3b[9]
                m[M_L4, n] = o + (l3b[0] & 15) * 4
            else:
                m[M_NEXT, n] = IP6_LOOKUP
                m[M_PROTO, n] = l3b[6]
                m[M_L4, n] = o + 40
            b.ts[n] = time.time_ns()
            n += 1
        return n

    # -- the loop ---------------------------------------------------------------------------

    def _forward(self) -> bool:
        """Fill one batch from the injected packets and the RX rings; run it; send."""
        b = self.batch
        n = self._load_injected()
        for ifx, s in enumerate(self.socks):
            if n >= b.vector_size:
                break
            n += s.recv_batch(b.buf, b.meta, b.ts, n, b.vector_size - n, ifx)
        if n == 0:
            return False
        b.n = n
        b.nalloc[0] = n
        now = time.monotonic_ns()
        tx = self.graph.run(b, now)
        if tx.size:
            ports = b.meta[M_TX, tx]
            for p in np.unique(ports):
                idx = tx[ports == p]
                self.socks[int(p)].send_batch(b.buf, b.meta, idx, idx.size)
        self._punts(now)
        return True

    def _punts(self, now: int) -> None:
        b = self.batch
        m = b.meta
        total = int(b.nalloc[0])
        for i in np.nonzero(m[M_NEXT, :total] == DONE_PUNT)[0]:
            reason = int(m[M_ERR, i])
            rx = int(m[M_RX, i])
            if reason == C.C_NEIGHBOR_QUEUED:
                self._punt_pending(int(i), now)
                continue
            frame = b.buf[m[M_OFF, i] : m[M_OFF, i] + m[M_LEN, i]].tobytes()
            if reason == C.C_ARP_PUNT:
                self.neigh.handle_arp(rx, frame, now)
            elif reason == C.C_ND_PUNT:
                self.neigh.handle_nd(rx, frame, now)
        if self.neigh.changed:
            self.commit()

    def _punt_pending(self, i: int, now: int) -> None:
        b = self.batch
        m = b.meta
        key = self.fib.adjs.keys[int(m[M_ADJ, i])]
        l3 = int(m[M_L3, i])
        end = int(m[M_OFF, i] + m[M_LEN, i])
        l3b = b.buf[l3:end].tobytes()
        ip6 = bool(m[M_FLAGS, i] & F_IP6)
        if key.kind == ADJ_GLEAN:
            nh = ipaddress.IPv6Address(l3b[24:40]) if ip6 else ipaddress.IPv4Address(l3b[16:20])
        else:
            nh = ipaddress.ip_address(key.nh) if key.family == 4 else ipaddress.IPv6Address(key.nh)
        pkt = (int(m[M_RX, i]), 6 if ip6 else 4, l3b, int(m[M_FIB, i]), int(m[M_FLAGS, i]))
        self.neigh.resolve(key.ifx, nh, pkt, now)

    def _reload(self) -> None:
        try:
            cfg = load_config(self.config_path)
            if [i.name for i in cfg.interfaces] != [i.name for i in self.cfg.interfaces]:
                raise ConfigError(f"{self.config_path}: interfaces changed; restart to apply")
            fib = Fib.from_config(cfg, self.macs)
            for n in self.neigh.entries.values():  # keep what was learnt
                if n.mac is not None and n.state != "permanent":
                    fib.add_neighbor(n.ip, n.mac, cfg.interfaces[n.ifx].name)
        except (ConfigError, RouteError) as e:
            log.error("reload failed, keeping the running configuration: %s", e)
            return
        self.cfg, self.fib = cfg, fib
        self.neigh.fib = fib
        self.commit()
        log.info("reloaded %s: %d routes", self.config_path, len(fib.routes))

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
        for s in self.socks:
            poller.register(s.fileno(), select.POLLIN)
        poller.register(self.server.fileno(), select.POLLIN)
        poller.register(rfd, select.POLLIN)
        next_tick = time.monotonic_ns() + TICK_NS
        try:
            while not self.stop:
                timeout = (
                    0 if self.inject else max(0, (next_tick - time.monotonic_ns()) // 1_000_000)
                )
                events = poller.poll(timeout)
                fds = {fd for fd, _ in events}
                if rfd in fds:
                    try:
                        os.read(rfd, 512)
                    except BlockingIOError:
                        pass
                for _ in range(MAX_BATCHES_PER_WAKEUP):
                    if not self._forward():
                        break
                if self.server.fileno() in fds:
                    self.server.handle()
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

    def close(self) -> None:
        for s in self.socks:
            s.close()
        for s in self.ctl_tx:
            s.close()
        self.server.close()
        log.info("vecroute stopped")
