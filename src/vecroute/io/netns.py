"""Network namespaces and veth pairs for tests and the lab, with guaranteed cleanup.

Live tests use Linux hosts as peers: each host is a network namespace joined to the
router by a veth pair.  :class:`Lab` creates them and deletes every namespace, veth and
process it made when its ``with`` block ends, on failure too (and at interpreter exit
as a backstop).  Names carry a prefix and the process id, so parallel test workers
never collide; a leftover with our own name can only come from a dead process that had
the same pid, and is removed before reuse.

Only documentation prefixes belong inside (192.0.2.0/24, 198.51.100.0/24,
203.0.113.0/24, 2001:db8::/32).  Needs root and iproute2.

:func:`entered` moves the calling thread into a namespace for a moment: a socket keeps
the namespace it was created in, so a test can open a PacketSocket on a router port,
or a TCP socket on a host, inside a namespace and use it from the root namespace.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import itertools
import json
import os
import subprocess
from collections.abc import Iterator, Sequence
from types import TracebackType

__all__ = ["Lab", "LabError", "entered", "ip", "run_in"]

CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"
IFNAMSIZ = 15

_libc = ctypes.CDLL(None, use_errno=True)
_LABS = itertools.count()
_NAMES = itertools.count(1)  # interface names, unique across the labs of a process


class LabError(RuntimeError):
    """A lab command failed; the message holds the command and its stderr."""


def _run(argv: Sequence[str], check: bool = True, timeout: float = 30) -> str:
    try:
        p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise LabError(f"{argv[0]}: not installed (apt-get install iproute2)") from None
    if check and p.returncode != 0:
        raise LabError(f"{' '.join(argv)}: {p.stderr.strip() or f'exit {p.returncode}'}")
    return p.stdout


def ip(*args: str, ns: str | None = None, check: bool = True) -> str:
    """Run ``ip [-n ns] args...``; returns stdout, raises LabError on failure."""
    return _run(["ip", *(("-n", ns) if ns else ()), *args], check=check)


def run_in(ns: str, argv: Sequence[str], check: bool = True, timeout: float = 30) -> str:
    """Run a command inside a namespace (``ip netns exec``); returns stdout."""
    return _run(["ip", "netns", "exec", ns, *argv], check=check, timeout=timeout)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"setns: {os.strerror(e)}")


@contextlib.contextmanager
def entered(ns: str) -> Iterator[None]:
    """Run the body with this thread in namespace ``ns`` (sockets created here stay
    there), then come back."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(os.path.join(NETNS_DIR, ns), os.O_RDONLY)
    except FileNotFoundError:
        os.close(own)
        raise LabError(f"{ns}: no such network namespace") from None
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(target)
        os.close(own)


class Lab:
    """Namespaces, veth pairs and processes that are all removed on exit.

    >>> with Lab() as lab:
    ...     h1, rt = lab.netns("h1"), lab.netns("rt")
    ...     a, b = lab.veth(h1, rt)
    """

    def __init__(self, prefix: str = "vr") -> None:
        self.tag = f"{prefix}{os.getpid():x}"
        self.id = next(_LABS)  # several labs may live at once in one process
        self._netns: list[str] = []
        self._links: list[str] = []  # veths made in the root namespace
        self._procs: list[subprocess.Popen[bytes]] = []
        self._closed = False
        atexit.register(self.close)

    def name(self, role: str = "") -> str:
        """A fresh interface name: prefix + pid + sequence (+ role), <= 15 characters."""
        n = f"{self.tag}{next(_NAMES)}{role}"
        return n if len(n) <= IFNAMSIZ else n[-IFNAMSIZ:]

    def netns(self, role: str) -> str:
        """Create a namespace ``<prefix><pid>-<lab>-<role>``, loopback up; returns its name."""
        ns = f"{self.tag}-{self.id}-{role}"
        if os.path.exists(os.path.join(NETNS_DIR, ns)):
            ip("netns", "del", ns, check=False)  # left by a dead process with our pid
        ip("netns", "add", ns)
        self._netns.append(ns)
        ip("link", "set", "lo", "up", ns=ns)
        return ns

    def veth(
        self,
        ns_a: str | None,
        ns_b: str | None,
        *,
        mtu: int | None = None,
        up: bool = True,
        disable_ipv6: tuple[bool, bool] = (False, False),
    ) -> tuple[str, str]:
        """A veth pair with end a in ``ns_a`` and end b in ``ns_b`` (None: root
        namespace); IPv6 disabled first where asked (router ports: no DAD/RS/NS of the
        kernel's own), then MTU and up.  Returns the two interface names."""
        a, b = self.name("a"), self.name("b")
        argv = ["link", "add", a]
        if ns_a:
            argv += ["netns", ns_a]
        argv += ["type", "veth", "peer", "name", b]
        if ns_b:
            argv += ["netns", ns_b]
        if ns_a is None or ns_b is None:
            self._links.append(a if ns_a is None else b)
        ip(*argv)
        for end, ns, no6 in ((a, ns_a, disable_ipv6[0]), (b, ns_b, disable_ipv6[1])):
            if no6:
                self.disable_ipv6(ns, end)
            if mtu is not None:
                ip("link", "set", end, "mtu", str(mtu), ns=ns)
            if up:
                ip("link", "set", end, "up", ns=ns)
        return a, b

    def link_set(self, ns: str | None, ifname: str, *args: str) -> None:
        """``ip link set dev ifname args...`` (``"up"``, ``"down"``, ``"mtu", "9000"``)."""
        ip("link", "set", "dev", ifname, *args, ns=ns)

    def addr(self, ns: str | None, ifname: str, cidr: str) -> None:
        """Add an address (``198.51.100.1/24``, ``2001:db8::1/64``; nodad for IPv6)."""
        extra = ("nodad",) if ":" in cidr else ()
        ip("addr", "add", cidr, "dev", ifname, *extra, ns=ns)

    def route(self, ns: str | None, *args: str) -> None:
        """``ip route add args...`` in a namespace."""
        ip("-6" if any(":" in a for a in args) else "-4", "route", "add", *args, ns=ns)

    def neigh(self, ns: str | None, ifname: str, addr: str, lladdr: str) -> None:
        """A permanent neighbour entry: a host can send to a router that answers no ARP."""
        ip("neigh", "replace", addr, "lladdr", lladdr, "dev", ifname, "nud", "permanent", ns=ns)

    def disable_ipv6(self, ns: str | None, ifname: str) -> None:
        """``net.ipv6.conf.<ifname>.disable_ipv6=1``: the port belongs to the router."""
        key = f"net.ipv6.conf.{ifname}.disable_ipv6=1"
        if ns is None:
            _run(["sysctl", "-qw", key])
        else:
            run_in(ns, ["sysctl", "-qw", key])

    def link(self, ns: str | None, ifname: str) -> dict:
        """``ip -j link show`` of one interface (keys: ifindex, address, mtu, ...)."""
        return json.loads(ip("-j", "link", "show", "dev", ifname, ns=ns))[0]

    def mac(self, ns: str | None, ifname: str) -> str:
        """The interface's MAC address."""
        return str(self.link(ns, ifname)["address"])

    def run(self, ns: str, argv: Sequence[str], check: bool = True, timeout: float = 30) -> str:
        """Run a command in a namespace and wait for it; returns stdout."""
        return run_in(ns, argv, check=check, timeout=timeout)

    def popen(self, ns: str, argv: Sequence[str], **kw: object) -> subprocess.Popen[bytes]:
        """Start a background command in a namespace; killed on close."""
        p = subprocess.Popen(["ip", "netns", "exec", ns, *argv], **kw)  # type: ignore[call-overload]
        self._procs.append(p)
        return p

    def keep(self) -> None:
        """Leave everything in place (``vecroute lab --keep``): close() deletes nothing."""
        self._closed = True
        atexit.unregister(self.close)

    def close(self) -> None:
        """Kill our processes, delete our namespaces (their veths go with them) and the
        veth ends we left in the root namespace.  Never raises; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for p in self._procs:
            if p.poll() is None:
                p.kill()
            with contextlib.suppress(Exception):
                p.wait(timeout=5)
        for link in self._links:
            if os.path.exists(f"/sys/class/net/{link}"):
                ip("link", "del", link, check=False)
        for ns in reversed(self._netns):
            ip("netns", "del", ns, check=False)
        atexit.unregister(self.close)

    def __enter__(self) -> Lab:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
