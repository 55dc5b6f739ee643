"""linux-cp: Linux as the control plane, vecroute as its forwarding plane (VPP's linux-cp).

Each port with ``host_if`` gets a TAP "mirror" in Linux (in ``[linux_cp] netns`` or
vecroute's own namespace): the port's MAC and MTU, up, the port's configured addresses.
Routing daemons (BIRD, FRR) run on the mirrors as if they were the ports:

* **punt** — what the data path does not answer itself (TCP/UDP to the router such as
  BGP, other protocols and ICMP types, fragments to the router, 224.0.0.0/24 and link-scope
  IPv6 multicast such as OSPF) arrives here as the port received it (``host-punt``,
  policed per port) and is written to the mirror; copies of the ARP and ND the control
  plane gets anyway are written too, so Linux learns its neighbours;
* **inject** — every frame Linux sends on a mirror leaves by the paired port as Linux
  built it (an ``INJ_FRAME`` record on worker 0's inject ring, no FIB lookup; through
  fw-out when a firewall runs);
* **carrier** — the mirror's carrier follows the port's (TUNSETCARRIER, checked on the
  control plane's 100 ms tick), so a daemon sees a dead port at once (BIRD's ``check
  link``, FRR's fast external failover) instead of after its hold timer.

Bounded both ways: a TAP that cannot take a frame (its queue full) drops it, counted;
reading a mirror takes at most ``READ_BUDGET`` frames per event-loop turn; a full inject
ring drops, counted.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import logging
import os
import struct
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from vecroute.config_types import Config
from vecroute.io.channel import INJECT_MAX

log = logging.getLogger("vecroute.linux_cp")

TUNSETIFF = 0x400454CA
TUNSETCARRIER = 0x400454E2  # _IOW('T', 226, int): Linux >= 4.16
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
IFA_F_NODAD = 0x02
READ_BUDGET = 256  # frames read from one mirror per event-loop turn
FRAME_MAX = 65536


class LinuxCpError(RuntimeError):
    """A mirror that cannot be made (one line: which, why)."""


@dataclass
class Mirror:
    """One port's TAP in Linux and what went through it."""

    port: int
    port_name: str
    name: str
    netns: str | None
    fd: int = -1
    ifindex: int = 0  # in its namespace
    punted: int = 0  # frames written to Linux
    punt_drops: int = 0  # frames Linux's TAP queue did not take
    injected: int = 0  # frames Linux sent, handed to the port
    inject_drops: int = 0  # frames refused: the inject ring was full, or too long
    inject_policed: int = 0  # frames over the mirror's inject rate
    dead: str = ""  # why the mirror is gone (deleted under us): nothing more is read
    carrier: bool | None = None  # what the mirror's carrier was last set to
    carrier_changes: int = 0
    carrier_error: str = ""  # TUNSETCARRIER failed on this mirror: it keeps its carrier
    bucket: list = field(default_factory=lambda: [0.0, 0.0])  # inject tokens, last refill

    def row(self) -> dict:
        return {"port": self.port_name, "mirror": self.name, "netns": self.netns or "",
                "ifindex": self.ifindex, "punted": self.punted, "punt_drops": self.punt_drops,
                "injected": self.injected, "inject_drops": self.inject_drops,
                "inject_policed": self.inject_policed, "state": self.dead or "up",
                "carrier": {None: "?", True: "up", False: "down"}[self.carrier],
                "carrier_changes": self.carrier_changes}


def _iproute(netns: str | None):
    from pyroute2 import IPRoute

    return IPRoute(netns=netns) if netns else IPRoute()


def _sysctl(netns: str | None, key: str, value: str) -> None:
    """Write a sysctl in ``netns`` (or our own namespace)."""
    if netns is None:
        with open(f"/proc/sys/{key}", "w") as f:
            f.write(value)
        return
    subprocess.run(["ip", "netns", "exec", netns, "sysctl", "-qw",
                    f"{key.replace('/', '.')}={value}"], check=True, capture_output=True,
                   timeout=10)


def port_carrier(name: str) -> bool:
    """The port's carrier as the kernel reports it: an interface that is down has none,
    and neither has one that is gone. sysfs shows the namespace it was mounted in (``ip
    netns exec`` mounts the right one; ports.py reads the ports' flags there too):
    :meth:`LinuxCp.start` checks the ports are there before following them."""
    try:
        with open(f"/sys/class/net/{name}/carrier") as f:
            return f.read().strip() == "1"
    except OSError:  # EINVAL: administratively down; ENOENT: no such interface
        return False


def open_tap(name: str) -> int:
    """A new TAP device ``name`` (no packet-info header), non-blocking; it exists as long
    as the descriptor is open."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH22x", name.encode(), IFF_TAP | IFF_NO_PI))
    except OSError:
        os.close(fd)
        raise
    return fd


class LinuxCp:
    """The mirrors of a router's ports and the frames between them and the ports."""

    def __init__(self, cfg: Config, macs: dict[str, bytes]) -> None:
        lcp = cfg.linux_cp
        assert lcp is not None
        self.netns = lcp.netns
        # what Linux may send per mirror (a compromised daemon must not take worker 0's
        # inject ring from the ARP/ND answers, nor its batches from the ports)
        self.inject_rate, self.inject_burst = lcp.punt_rate, lcp.punt_burst
        self._loop = None
        self._carrier_ok = True  # TUNSETCARRIER works here (Linux >= 4.16)
        self.mirrors: dict[int, Mirror] = {}
        try:
            for ifx, itf in enumerate(cfg.interfaces):
                if itf.host_if:
                    mac = itf.mac or macs[itf.name]
                    self.mirrors[ifx] = self._make(ifx, itf, mac)
        except BaseException:
            self.close()
            raise

    def _make(self, ifx: int, itf, mac: bytes) -> Mirror:
        m = Mirror(ifx, itf.name, itf.host_if, self.netns)
        try:
            m.fd = open_tap(itf.host_if)
        except OSError as e:
            raise LinuxCpError(f"mirror {itf.host_if} of {itf.name}: {e.strerror or e}"
                               " (an interface of that name exists?)") from None
        try:
            with _iproute(None) as ipr:
                idx = ipr.link_lookup(ifname=itf.host_if)[0]
                ipr.link("set", index=idx, address=":".join(f"{b:02x}" for b in mac),
                         mtu=itf.mtu)
                if self.netns:
                    ipr.link("set", index=idx, net_ns_fd=self.netns)
            # no duplicate address detection on the mirror: its addresses are the port's,
            # which vecroute answers for (and a tentative address cannot be bound to)
            _sysctl(self.netns, f"net/ipv6/conf/{itf.host_if}/accept_dad", "0")
            with _iproute(self.netns) as ipr:
                idx = ipr.link_lookup(ifname=itf.host_if)[0]
                ipr.link("set", index=idx, state="up")
                for a in itf.addresses:
                    ipr.addr("add", index=idx, address=str(a.ip), prefixlen=a.network.prefixlen,
                             **({"flags": IFA_F_NODAD} if a.version == 6 else {}))
                m.ifindex = idx
        except Exception as e:  # noqa: BLE001 - pyroute2's errors: netns missing, EEXIST…
            os.close(m.fd)
            m.fd = -1
            raise LinuxCpError(f"mirror {itf.host_if} of {itf.name}"
                               f"{' in netns ' + self.netns if self.netns else ''}: {e}") from None
        log.info("mirror %s of %s%s: ifindex %d", m.name, itf.name,
                 f" in netns {self.netns}" if self.netns else "", m.ifindex)
        return m

    # -- punt: frames for Linux -------------------------------------------------------------

    def to_linux(self, punts: list[tuple]) -> None:
        """Write what the data path punted for Linux (host punts) and copies of ARP / ND
        (the control plane handles those too) to the receiving port's mirror."""
        for p in punts:
            if p[0] in ("host", "arp", "nd"):
                m = self.mirrors.get(p[1])
                if m is not None and not m.dead:
                    self._write(m, p[2])

    def _write(self, m: Mirror, frame: bytes) -> None:
        try:
            os.write(m.fd, frame)
            m.punted += 1
        except OSError:  # EAGAIN: its queue (txqueuelen) is full; EIO: it is down
            m.punt_drops += 1

    # -- inject: frames from Linux ----------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop, send: Callable[[int, bytes], bool]) -> None:
        """Read the mirrors on ``loop``; ``send(port, frame)`` queues a frame for a port
        (False when the ring refused it)."""
        self._loop = loop
        missing = [m.port_name for m in self.mirrors.values()
                   if not os.path.exists(f"/sys/class/net/{m.port_name}")]
        if missing:  # a sysfs of another namespace: following it would hold mirrors down
            self._carrier_ok = False
            log.warning("ports %s not in /sys/class/net (sysfs of another network "
                        "namespace?): mirrors keep their carrier up whatever the ports' "
                        "links do", ", ".join(missing))
        self.follow_carrier()
        for m in self.mirrors.values():
            m.bucket[:] = [float(self.inject_burst), time.monotonic()]
            loop.add_reader(m.fd, self._read, m, send)

    # -- carrier: the port's link, shown on the mirror --------------------------------------

    def follow_carrier(self) -> None:
        """Give each mirror its port's carrier (called on every tick: a sysfs read per port;
        an ioctl only on a change)."""
        if not self._carrier_ok:
            return
        for m in self.mirrors.values():
            up = port_carrier(m.port_name)
            if up == m.carrier or m.dead or m.fd < 0 or m.carrier_error:
                continue
            try:
                fcntl.ioctl(m.fd, TUNSETCARRIER, struct.pack("i", int(up)))
            except OSError as e:
                if e.errno in (errno.ENOTTY, errno.EINVAL):  # a kernel without it (< 4.16)
                    self._carrier_ok = False
                    log.warning("mirror %s: cannot set its carrier (%s): mirrors keep theirs "
                                "up whatever their ports' links do", m.name, e.strerror or e)
                    return
                if e.errno in (errno.EBADFD, errno.ENODEV):  # deleted under us
                    m.dead = f"gone: {e.strerror or e}"
                    log.error("mirror %s of %s: %s; no longer used (restart to recreate it)",
                              m.name, m.port_name, m.dead)
                    if self._loop is not None:
                        self._loop.remove_reader(m.fd)
                else:  # this mirror keeps its carrier; it still carries frames
                    m.carrier_error = e.strerror or str(e)
                    log.warning("mirror %s: cannot set its carrier (%s); it stays as it is",
                                m.name, m.carrier_error)
                continue
            if m.carrier is not None:
                m.carrier_changes += 1
                log.info("mirror %s: carrier %s (port %s)", m.name, "up" if up else "down",
                         m.port_name)
            m.carrier = up

    def _read(self, m: Mirror, send: Callable[[int, bytes], bool]) -> None:
        b = m.bucket
        now = time.monotonic()
        b[0] = min(float(self.inject_burst), b[0] + (now - b[1]) * self.inject_rate)
        b[1] = now
        for _ in range(READ_BUDGET):
            try:
                frame = os.read(m.fd, FRAME_MAX)
            except BlockingIOError:
                return
            except OSError as e:  # the mirror was deleted (EBADFD) or its netns: give up
                m.dead = f"gone: {e.strerror or e}"
                log.error("mirror %s of %s: %s; no longer read (restart to recreate it)",
                          m.name, m.port_name, m.dead)
                if self._loop is not None:
                    self._loop.remove_reader(m.fd)
                return
            if b[0] < 1.0:
                m.inject_policed += 1
                continue
            b[0] -= 1.0
            if len(frame) < 14 or len(frame) > INJECT_MAX or not send(m.port, frame):
                m.inject_drops += 1
            else:
                m.injected += 1

    def close(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        for m in self.mirrors.values():
            if m.fd >= 0:
                if loop is not None and not loop.is_closed():
                    loop.remove_reader(m.fd)
                os.close(m.fd)  # the TAP goes with it
                m.fd = -1

    def kernel_ifindexes(self) -> dict[int, int]:
        """{mirror ifindex in its namespace: port index} (what the netlink sync maps)."""
        return {m.ifindex: m.port for m in self.mirrors.values()}

    def rows(self) -> list[dict]:
        return [m.row() for m in self.mirrors.values()]
