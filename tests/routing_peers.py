"""Real routing daemons as test peers: BIRD 2 and FRR in network namespaces.

Each daemon instance runs inside a namespace of a :class:`vecroute.io.netns.Lab`, as root,
in the foreground, with a generated config and its own control sockets, pid files and
logs, so several instances (and a packaged system service, if one runs) never meet::

    with Lab("rp") as lab:
        a, b = lab.netns("a"), lab.netns("b")
        ...veths and addresses...
        bird = Bird(lab, a, RouterConfig("192.0.2.1", asn=65001,
                    bgp=[BgpNeighbor("198.51.100.2", 65002, local="198.51.100.1")],
                    announce=["192.0.2.0/25"]))
        frr = Frr(lab, b, RouterConfig("192.0.2.2", asn=65002,
                  bgp=[BgpNeighbor("198.51.100.1", 65001, local="198.51.100.2")]))
        with bird, frr:                       # start() ... stop(), on failure too
            frr.wait_bgp("198.51.100.1")      # -> "Established"
            wait_kernel_route(b, "192.0.2.0/25")
            bird.withdraw("192.0.2.0/25")
            wait_kernel_route(b, "192.0.2.0/25", present=False, timeout=1)

What a :class:`RouterConfig` means, for both daemons:

- ``announce``: prefixes the router originates, as static blackhole routes; they are
  exported to every eBGP session of their family (next hop self) and redistributed into
  OSPF (as external routes).  :meth:`RoutingDaemon.announce` / :meth:`withdraw` change
  them at run time without restarting any session.
- ``bgp``: eBGP sessions (one address family each: an IPv4 session carries IPv4 routes,
  an IPv6 session IPv6 routes), import everything, export the statics and what other
  eBGP sessions taught (a router in the middle passes routes on), aggressive timers
  (hold 3 s, keepalive 1 s, connect retry 1 s).
- ``ospf``: OSPFv2 / OSPFv3 interfaces (hello 1 s, dead 4 s, point-to-point by default:
  no DR election wait).
- Learnt routes go into the namespace's kernel table (``ip -j route``), where the tests
  look for them; :func:`wait_kernel_route` polls it.

Every wait polls with a deadline and returns what it saw; on timeout it raises
:class:`PeerTimeout` (an AssertionError) with the last state and the daemon's log tail.
Only documentation prefixes belong in these configs.  Needs root and the Debian
packages ``bird2`` and ``frr`` (``make system-deps`` installs them).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from vecroute.io.netns import Lab, run_in

__all__ = [
    "BgpNeighbor",
    "Bird",
    "Frr",
    "OspfInterface",
    "PeerError",
    "PeerTimeout",
    "RouterConfig",
    "RoutingDaemon",
    "kernel_route",
    "kernel_routes",
    "link_local",
    "nexthops",
    "no_dad",
    "require_daemons",
    "wait_kernel_route",
    "wait_until",
]

FRR_DIR = Path("/usr/lib/frr")
BIRD_BIN = "bird"
BIRDC_BIN = "birdc"
VTYSH_BIN = "vtysh"
FRR_USER = "frr"  # Debian's frr package creates it (and the frrvty group)

T = TypeVar("T")
_RUNNING: dict[tuple[str, str], RoutingDaemon] = {}  # (kind, namespace) -> instance


class PeerError(RuntimeError):
    """A daemon could not be started, died, or refused a command."""


class PeerTimeout(AssertionError):
    """A wait ran out of time; the message holds the last state seen and log tails."""


def require_daemons() -> None:
    """Raise PeerError naming the package if BIRD 2 or FRR is not installed."""
    missing = [
        pkg
        for path, pkg in (
            (shutil.which(BIRD_BIN), "bird2"),
            (shutil.which(BIRDC_BIN), "bird2"),
            (shutil.which(VTYSH_BIN), "frr"),
            (str(FRR_DIR / "bgpd") if (FRR_DIR / "bgpd").exists() else None, "frr"),
        )
        if path is None
    ]
    if missing:
        raise PeerError(
            f"routing daemons missing: apt-get install {' '.join(sorted(set(missing)))} "
            "(make system-deps)"
        )


def wait_until(
    probe: Callable[[], T | None],
    timeout: float,
    what: str,
    interval: float = 0.05,
    detail: Callable[[], str] | None = None,
) -> T:
    """Call ``probe`` until it returns something other than None/False; return that.

    Raises PeerTimeout after ``timeout`` seconds, naming ``what`` and ``detail()``."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() >= deadline:
            extra = f"\n{detail()}" if detail else ""
            raise PeerTimeout(f"timed out after {timeout:g} s waiting for {what}{extra}")
        time.sleep(interval)


# --- the kernel's routing table in a namespace ----------------------------------------------


def _family(prefix: str) -> int:
    return ipaddress.ip_network(prefix, strict=False).version


def kernel_routes(ns: str, family: int = 4, table: str = "main") -> list[dict]:
    """``ip -j -4|-6 route show table T`` in namespace ``ns``."""
    out = run_in(ns, ["ip", "-j", f"-{family}", "route", "show", "table", table])
    return json.loads(out) if out.strip() else []


def kernel_route(ns: str, prefix: str, table: str = "main") -> dict | None:
    """The kernel route for exactly ``prefix`` (``ip -j route show PREFIX``), or None."""
    net = str(ipaddress.ip_network(prefix, strict=False))
    out = run_in(
        ns, ["ip", "-j", f"-{_family(net)}", "route", "show", "table", table, "exact", net]
    )
    routes = json.loads(out) if out.strip() else []
    # a host route prints as a bare address (dst "192.0.2.1" for 192.0.2.1/32)
    for r in routes:
        dst = r.get("dst", "")
        if dst == "default":
            dst = "0.0.0.0/0" if _family(net) == 4 else "::/0"
        if str(ipaddress.ip_network(dst, strict=False)) == net and r.get("type") != "local":
            return r
    return None


def no_dad(ns: str) -> None:
    """Turn IPv6 duplicate address detection off for interfaces created in ``ns`` from now
    on (call it before ``Lab.veth``): link-local addresses are usable at once, so FRR's
    bgpd does not wait ~2 s for one before an IPv6 session, nor OSPFv3 for its hellos."""
    run_in(ns, ["sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0",
                "net.ipv6.conf.default.accept_dad=0"])


def link_local(ns: str, ifname: str) -> str:
    """The IPv6 link-local address of ``ifname`` in ``ns``."""
    out = json.loads(run_in(ns, ["ip", "-j", "-6", "addr", "show", "dev", ifname, "scope", "link"]))
    for a in out[0].get("addr_info", []) if out else []:
        if a.get("scope") == "link" and "local" in a:  # filtered entries print as {}
            return str(a["local"])
    raise PeerError(f"{ifname} in {ns} has no link-local address")


def nexthops(route: dict) -> list[tuple[str | None, str | None]]:
    """``(gateway, dev)`` pairs of a kernel route from ``ip -j route`` (multipath too)."""
    if route.get("nexthops"):
        return [(n.get("gateway"), n.get("dev")) for n in route["nexthops"]]
    return [(route.get("gateway"), route.get("dev"))]


def wait_kernel_route(
    ns: str,
    prefix: str,
    *,
    present: bool = True,
    timeout: float = 10.0,
    gateways: Iterable[str] | None = None,
    daemons: Iterable[RoutingDaemon] = (),
) -> dict | None:
    """Poll ``ns``'s kernel table until ``prefix`` is there (with exactly the given set of
    gateways, if any) or, with ``present=False``, gone.  Returns the route (None when
    waiting for absence); on timeout the error shows the route and the daemons' logs."""
    want = set(gateways) if gateways is not None else None
    last: list[dict | None] = [None]

    def probe() -> dict | bool | None:
        r = last[0] = kernel_route(ns, prefix)
        if not present:
            return r is None
        if r is None:
            return None
        if want is not None and {g for g, _ in nexthops(r)} != want:
            return None
        return r

    def detail() -> str:
        tails = "\n".join(d.diagnostics() for d in daemons)
        return f"last kernel route in {ns}: {last[0]}\n{tails}"

    state = "present" if present else "absent"
    got = wait_until(probe, timeout, f"{prefix} {state} in {ns}'s kernel table", detail=detail)
    return got if isinstance(got, dict) else None


# --- what a router should do ----------------------------------------------------------------


@dataclass(frozen=True)
class BgpNeighbor:
    """One eBGP session.  Its address family is the neighbour address's: an IPv4 session
    carries IPv4 unicast, an IPv6 session IPv6 unicast.  ``local`` is our address on the
    link (BIRD binds to it; FRR uses it as update-source).  ``ifname`` is needed for an
    IPv6 link-local neighbour (BIRD only)."""

    peer: str
    peer_as: int
    local: str | None = None
    ifname: str | None = None
    hold: int = 3
    keepalive: int = 1
    connect_retry: int = 1

    @property
    def family(self) -> int:
        return ipaddress.ip_address(self.peer).version


@dataclass(frozen=True)
class OspfInterface:
    """OSPF on one interface: ``version`` 2 (IPv4) or 3 (IPv6), in ``area``."""

    ifname: str
    version: int = 2
    area: str = "0.0.0.0"
    hello: int = 1
    dead: int = 4
    ptp: bool = True  # point-to-point: Full without a DR election wait
    cost: int = 10


@dataclass
class RouterConfig:
    """Everything a routing daemon under test does (see the module docstring)."""

    router_id: str
    asn: int = 0  # required when ``bgp`` is not empty
    bgp: list[BgpNeighbor] = field(default_factory=list)
    ospf: list[OspfInterface] = field(default_factory=list)
    announce: list[str] = field(default_factory=list)
    multipath: bool = True  # ECMP over equal eBGP paths into the kernel
    # graceful restart (RFC 4724) and its long-lived form off on both sides: a session
    # that dies (hold timer expired) takes its routes at once, instead of leaving them
    # in place as stale for the peer's restart time (FRR offers 120 s, BIRD keeps them)
    graceful_restart: bool = False

    def announced(self, family: int) -> list[str]:
        return [str(ipaddress.ip_network(p)) for p in self.announce if _family(p) == family]

    def ospf_versions(self) -> set[int]:
        return {o.version for o in self.ospf}


# --- the daemons ----------------------------------------------------------------------------


class RoutingDaemon:
    """One routing daemon instance (BIRD, or FRR's set of daemons) in a namespace.

    Use as a context manager, or call start() and stop() (stop never raises; the Lab
    kills whatever is left when it closes).  ``workdir`` keeps the configs and logs
    (default: a fresh temporary directory, removed by stop()); control sockets always
    live in a short temporary directory (AF_UNIX paths are limited to 107 bytes)."""

    kind = "daemon"

    def __init__(
        self, lab: Lab, ns: str, config: RouterConfig, workdir: Path | str | None = None
    ) -> None:
        require_daemons()
        self.lab, self.ns, self.config = lab, ns, config
        self.rundir = Path(tempfile.mkdtemp(prefix=f"rp-{self.kind}-", dir="/tmp"))
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else self.rundir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._outs: list = []

    # lifecycle

    def start(self, timeout: float = 10.0) -> RoutingDaemon:
        raise NotImplementedError

    def _claim(self) -> None:
        """One instance of a kind per namespace: a second BIRD would delete the first
        one's kernel routes (it takes them for its own stale ones), a second zebra
        fights the first over the routes and nexthop objects."""
        other = _RUNNING.get((self.kind, self.ns))
        if other is not None and other is not self and other.procs:
            raise PeerError(f"{self.kind} already runs in {self.ns}: stop it first")
        _RUNNING[(self.kind, self.ns)] = self

    def stop(self, timeout: float = 3.0) -> None:
        """SIGTERM every process (clients before FRR's zebra), SIGKILL after ``timeout``."""
        for name, p in reversed(list(self.procs.items())):
            if p.poll() is None:
                with contextlib.suppress(OSError):
                    p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=timeout)
            del self.procs[name]
        if _RUNNING.get((self.kind, self.ns)) is self:
            del _RUNNING[(self.kind, self.ns)]
        for f in self._outs:
            with contextlib.suppress(OSError):
                f.close()
        self._outs.clear()
        shutil.rmtree(self.rundir, ignore_errors=True)

    def __enter__(self) -> RoutingDaemon:
        if not self.procs:
            try:
                self.start()
            except BaseException:
                self.stop()  # __exit__ does not run when __enter__ raises
                raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None:
            with contextlib.suppress(Exception):
                print(self.diagnostics())
        self.stop()

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        out = open(self.workdir / f"{name}.out", "ab")  # noqa: SIM115 - closed by stop()
        self._outs.append(out)
        p = self.lab.popen(self.ns, argv, stdout=out, stderr=subprocess.STDOUT)
        self.procs[name] = p
        return p

    def check_alive(self) -> None:
        """Raise PeerError if a process of this instance has exited."""
        for name, p in self.procs.items():
            if p.poll() is not None:
                raise PeerError(
                    f"{self.kind} {name} in {self.ns} exited {p.returncode}\n{self.diagnostics()}"
                )

    def log_tail(self, chars: int = 3000) -> str:
        """The end of every log and output file of this instance."""
        parts = []
        for f in sorted(self.workdir.glob("*.log")) + sorted(self.workdir.glob("*.out")):
            with contextlib.suppress(OSError):
                text = f.read_text(errors="replace")
                if text.strip():
                    parts.append(f"--- {f.name}\n{text[-chars:]}")
        return "\n".join(parts)

    def diagnostics(self) -> str:
        """What to print when a test fails: protocol states and log tails."""
        try:
            state = self.status_text()
        except Exception as e:  # noqa: BLE001 - diagnostics must not hide the failure
            state = f"(status unavailable: {e})"
        return f"=== {self.kind} in {self.ns}\n{state}\n{self.log_tail()}"

    # the protocol view, implemented per daemon

    def status_text(self) -> str:
        raise NotImplementedError

    def bgp_state(self, peer: str) -> str:
        """The BGP FSM state of the session to ``peer`` ("Idle" ... "Established")."""
        raise NotImplementedError

    def ospf_neighbors(self, version: int = 2) -> dict[str, str]:
        """OSPF neighbours (router id -> state, "Full", "2-Way", "Init" ...)."""
        raise NotImplementedError

    def routes(self, family: int = 4) -> dict[str, list[str]]:
        """The daemon's selected routes: prefix -> its next-hop gateways (maybe [])."""
        raise NotImplementedError

    def _set_static(self, prefix: str, present: bool) -> None:
        raise NotImplementedError

    # waits and changes, common

    def wait_bgp(self, peer: str, state: str = "Established", timeout: float = 20.0) -> str:
        """Poll until the session to ``peer`` is in ``state``; returns it."""
        last = [""]

        def probe() -> str | None:
            self.check_alive()
            last[0] = self.bgp_state(peer)
            return last[0] if last[0] == state else None

        return wait_until(
            probe,
            timeout,
            f"{self.kind} BGP session to {peer} {state}",
            interval=0.1,
            detail=lambda: f"last state {last[0]!r}\n{self.diagnostics()}",
        )

    def wait_ospf_full(
        self, version: int = 2, neighbor: str | None = None, timeout: float = 20.0
    ) -> str:
        """Poll until an OSPFv``version`` neighbour (``neighbor`` = its router id, or any)
        is Full; returns the state."""
        last: list[dict[str, str]] = [{}]

        def probe() -> str | None:
            self.check_alive()
            nbrs = last[0] = self.ospf_neighbors(version)
            for rid, st in nbrs.items():
                if (neighbor is None or rid == neighbor) and st == "Full":
                    return st
            return None

        return wait_until(
            probe,
            timeout,
            f"{self.kind} OSPFv{version} neighbour {neighbor or '(any)'} Full",
            interval=0.1,
            detail=lambda: f"neighbours {last[0]}\n{self.diagnostics()}",
        )

    def wait_route(self, prefix: str, present: bool = True, timeout: float = 10.0) -> list[str]:
        """Poll the daemon's own table until ``prefix`` is selected (or gone); returns
        its gateways ([] when waiting for absence)."""
        net = str(ipaddress.ip_network(prefix))

        def probe() -> list[str] | bool | None:
            self.check_alive()
            gw = self.routes(_family(net)).get(net)
            if present:
                return gw if gw is not None else None
            return gw is None

        got = wait_until(
            probe,
            timeout,
            f"{net} {'in' if present else 'gone from'} {self.kind}'s table in {self.ns}",
            interval=0.1,
            detail=self.diagnostics,
        )
        return got if isinstance(got, list) else []

    def announce(self, prefix: str) -> None:
        """Originate ``prefix`` (a static blackhole exported to BGP and OSPF)."""
        net = str(ipaddress.ip_network(prefix))
        if net not in self.config.announce:
            self.config.announce.append(net)
        self._set_static(net, True)

    def withdraw(self, prefix: str) -> None:
        """Stop originating ``prefix``; BGP withdraws it, OSPF flushes its LSA."""
        net = str(ipaddress.ip_network(prefix))
        self.config.announce = [p for p in self.config.announce if p != net]
        self._set_static(net, False)


# --- BIRD 2 ---------------------------------------------------------------------------------


def bird_protocol_name(n: BgpNeighbor) -> str:
    """BIRD's protocol name for a session: ``bgp_`` + the neighbour address, sanitised."""
    return "bgp_" + "".join(c if c.isalnum() else "_" for c in n.peer)


def bird_config(c: RouterConfig, log: Path) -> str:
    """A BIRD 2 config for ``c``: device/kernel/static protocols, eBGP and OSPF."""
    lines = [
        "# generated by tests/routing_peers.py",
        f'log "{log}" all;',
        f"router id {c.router_id};",
        "timeformat protocol iso long;",
        "protocol device { scan time 1; }",
    ]
    for fam in (4, 6):
        merge = " merge paths on;" if c.multipath else ""
        lines.append(
            f"protocol kernel kernel{fam} {{ ipv{fam} {{ import none; "
            f"export where source != RTS_DEVICE; }};{merge} }}"
        )
        statics = "".join(f" route {p} blackhole;" for p in c.announced(fam))
        lines.append(f"protocol static static{fam} {{ ipv{fam};{statics} }}")
    for n in c.bgp:
        where = f"{n.peer}%{n.ifname}" if n.ifname and ":" in n.peer else n.peer
        local = f"local {n.local} as {c.asn};" if n.local else f"local as {c.asn};"
        iface = f'interface "{n.ifname}"; ' if n.ifname else ""
        lines.append(
            f"protocol bgp {bird_protocol_name(n)} {{ {local} neighbor {where} as {n.peer_as}; "
            f"{iface}hold time {n.hold}; keepalive time {n.keepalive}; "
            f"connect retry time {n.connect_retry}; connect delay time 1; "
            "error wait time 1, 5; "
            + ("" if c.graceful_restart
               else "graceful restart off; long lived graceful restart off; ")
            + f"ipv{n.family} {{ import all; export where source ~ [RTS_STATIC, RTS_BGP]; "
            "next hop self; }; }"
        )
    for version in sorted(c.ospf_versions()):
        fam = 4 if version == 2 else 6
        areas: dict[str, list[OspfInterface]] = {}
        for o in c.ospf:
            if o.version == version:
                areas.setdefault(o.area, []).append(o)
        body = []
        for area, ifs in areas.items():
            items = " ".join(
                f'interface "{o.ifname}" {{ type {"ptp" if o.ptp else "broadcast"}; '
                f"hello {o.hello}; dead {o.dead}; wait {o.dead}; retransmit 2; "
                f"cost {o.cost}; }};"
                for o in ifs
            )
            body.append(f"area {area} {{ {items} }};")
        lines.append(
            f"protocol ospf v{version} ospf{fam} {{ ipv{fam} {{ import all; "
            f"export where source = RTS_STATIC; }}; {' '.join(body)} }}"
        )
    return "\n".join(lines) + "\n"


class Bird(RoutingDaemon):
    """BIRD 2 in a namespace: ``bird -f -c CONF -s SOCK -P PID``; ``birdc -s SOCK``."""

    kind = "bird"

    def __init__(
        self, lab: Lab, ns: str, config: RouterConfig, workdir: Path | str | None = None
    ) -> None:
        super().__init__(lab, ns, config, workdir)
        self.socket = self.rundir / "bird.ctl"
        self.conf = self.workdir / "bird.conf"
        self.log = self.workdir / "bird.log"

    def start(self, timeout: float = 10.0) -> Bird:
        """Write the config, check it (``bird -p``), start BIRD and wait until birdc
        answers."""
        self._claim()
        self.conf.write_text(bird_config(self.config, self.log))
        chk = subprocess.run(
            [BIRD_BIN, "-p", "-c", str(self.conf)], capture_output=True, text=True
        )
        if chk.returncode != 0:
            raise PeerError(f"bird config rejected: {chk.stderr.strip()}\n{self.conf.read_text()}")
        self._spawn(
            "bird",
            [
                BIRD_BIN, "-f", "-c", str(self.conf), "-s", str(self.socket),
                "-P", str(self.rundir / "bird.pid"),
            ],
        )

        def up() -> bool:
            self.check_alive()
            return self.socket.exists() and "up and running" in self.birdc("show status")

        wait_until(up, timeout, f"bird in {self.ns} to answer", detail=self.log_tail)
        return self

    def birdc(self, *words: str, check: bool = True) -> str:
        """One birdc command (``birdc -s SOCK words...``); returns the reply without the
        banner.  Raises PeerError if birdc fails or BIRD answers with an error."""
        p = subprocess.run(
            [BIRDC_BIN, "-s", str(self.socket), *words],
            capture_output=True, text=True, timeout=10,
        )
        lines = [ln for ln in p.stdout.splitlines() if not ln.startswith("BIRD ")]
        text = "\n".join(lines)
        if check and (p.returncode != 0 or text.lstrip().startswith("syntax error")):
            raise PeerError(f"birdc {' '.join(words)}: {p.stderr.strip() or text}")
        return text

    def status_text(self) -> str:
        out = self.birdc("show", "protocols", check=False)
        for v in sorted(self.config.ospf_versions()):
            out += "\n" + self.birdc("show", "ospf", "neighbors", f"ospf{4 if v == 2 else 6}",
                                     check=False)
        return out

    def bgp_state(self, peer: str) -> str:
        names = [bird_protocol_name(n) for n in self.config.bgp if n.peer == peer]
        if not names:
            raise PeerError(f"no BGP session to {peer} in this config")
        out = self.birdc("show", "protocols", "all", names[0], check=False)
        for ln in out.splitlines():
            s = ln.strip()
            if s.startswith("BGP state:"):
                return s.split(":", 1)[1].strip()
        return ""

    def ospf_neighbors(self, version: int = 2) -> dict[str, str]:
        out = self.birdc("show", "ospf", "neighbors", f"ospf{4 if version == 2 else 6}",
                         check=False)
        nbrs: dict[str, str] = {}
        for ln in out.splitlines():
            f = ln.split()
            # Router ID  Pri  State  DTime  Interface  Router IP
            if len(f) >= 3 and f[0][0].isdigit() and "/" in f[2]:
                nbrs[f[0]] = f[2].split("/")[0]
        return nbrs

    def routes(self, family: int = 4) -> dict[str, list[str]]:
        """Best routes of BIRD's master table (``show route table masterN``)."""
        out = self.birdc("show", "route", "table", f"master{family}", check=False)
        routes: dict[str, list[str]] = {}
        current: str | None = None
        best = False
        for ln in out.splitlines():
            if not ln.strip() or ln.startswith("Table "):
                continue
            f = ln.split()
            if not ln[0].isspace():  # "PREFIX  unicast [proto time] * (100) ..."
                current, best = f[0], "*" in f
                if best:
                    routes[current] = []
            elif f[0] == "via" and best and current is not None:
                routes[current].append(f[1])
            elif f[0] in ("unicast", "blackhole", "unreachable", "prohibit"):
                best = "*" in f  # another route to the same prefix
                if best and current is not None:
                    routes[current] = []
        return routes

    def _set_static(self, prefix: str, present: bool) -> None:
        """Regenerate the config and ``birdc configure``: only the static protocol
        changes, so no session restarts."""
        self.conf.write_text(bird_config(self.config, self.log))
        out = self.birdc("configure", f'"{self.conf}"')
        if "Reconfigured" not in out and "Reconfiguration in progress" not in out:
            raise PeerError(f"bird reconfigure failed: {out}")


# --- FRR ------------------------------------------------------------------------------------


def frr_configs(c: RouterConfig, hostname: str) -> dict[str, str]:
    """Per-daemon FRR configs for ``c``: {"zebra": ..., "staticd": ..., "bgpd": ...,
    "ospfd": ..., "ospf6d": ...} (only the daemons the config needs).  Logging is not
    configured here: the daemons log to stdout (``--log stdout``)."""

    def head(d: str) -> list[str]:
        return [f"hostname {hostname}-{d}", "!"]

    confs = {"zebra": "\n".join(head("zebra")) + "\n"}
    static = head("staticd") + [
        f"{'ip' if _family(p) == 4 else 'ipv6'} route {p} blackhole" for p in c.announce
    ]
    confs["staticd"] = "\n".join(static) + "\n"
    if c.bgp:
        b = head("bgpd") + [
            f"router bgp {c.asn}",
            f" bgp router-id {c.router_id}",
            " no bgp ebgp-requires-policy",
            " no bgp default ipv4-unicast",
            " bgp bestpath as-path multipath-relax",
            " coalesce-time 100",
        ]
        if not c.graceful_restart:
            b.append(" bgp graceful-restart-disable")
        for n in c.bgp:
            b += [
                f" neighbor {n.peer} remote-as {n.peer_as}",
                f" neighbor {n.peer} timers {n.keepalive} {n.hold}",
                f" neighbor {n.peer} timers connect {n.connect_retry}",
                f" neighbor {n.peer} advertisement-interval 0",
            ]
            if n.local:
                b.append(f" neighbor {n.peer} update-source {n.local}")
        for fam in (4, 6):
            peers = [n for n in c.bgp if n.family == fam]
            if not peers:
                continue
            b.append(f" address-family ipv{fam} unicast")
            b.append("  redistribute static")
            if c.multipath:
                b.append("  maximum-paths 8")
            for n in peers:
                b += [f"  neighbor {n.peer} activate", f"  neighbor {n.peer} next-hop-self"]
            b.append(" exit-address-family")
        confs["bgpd"] = "\n".join(b) + "\n"
    for version, daemon in ((2, "ospfd"), (3, "ospf6d")):
        ifs = [o for o in c.ospf if o.version == version]
        if not ifs:
            continue
        kw = "ip ospf" if version == 2 else "ipv6 ospf6"
        o_lines = head(daemon)
        for o in ifs:
            o_lines += [
                f"interface {o.ifname}",
                f" {kw} area {o.area}",
                f" {kw} hello-interval {o.hello}",
                f" {kw} dead-interval {o.dead}",
                f" {kw} retransmit-interval 2",
                f" {kw} cost {o.cost}",
            ]
            if o.ptp:
                o_lines.append(f" {kw} network point-to-point")
            o_lines.append("exit")
        rtr = "ospf" if version == 2 else "ospf6"
        o_lines += [
            f"router {rtr}",
            f" {rtr} router-id {c.router_id}",
            " redistribute static",
            " timers throttle spf 0 50 500",
            "exit",
        ]
        confs[daemon] = "\n".join(o_lines) + "\n"
    return confs


class Frr(RoutingDaemon):
    """FRR 8.x in a namespace: zebra, staticd and bgpd/ospfd/ospf6d as the config needs,
    each run directly in the foreground with ``-f CONF -i PID -z ZSERV --vty_socket DIR
    -P 0 --log stdout`` (no watchfrr, nothing in /etc/frr or /run/frr); ``vtysh
    --vty_socket DIR`` talks to them.

    The daemons drop to Debian's ``frr`` user (with the capabilities they keep): FRR is
    built with ``--enable-vty-group=frrvty`` and refuses ``-u root`` unless root is in
    that group.  So the run directory (configs, pid files, sockets) belongs to ``frr``,
    and the logs go to stdout, into files root opened in ``workdir``."""

    kind = "frr"

    def __init__(
        self, lab: Lab, ns: str, config: RouterConfig, workdir: Path | str | None = None
    ) -> None:
        super().__init__(lab, ns, config, workdir)
        self.zserv = self.rundir / "zserv.api"
        pw = pwd.getpwnam(FRR_USER)
        os.chown(self.rundir, pw.pw_uid, pw.pw_gid)

    def daemons(self) -> list[str]:
        """The daemons this config needs, zebra first."""
        confs = frr_configs(self.config, self.ns)
        return [d for d in ("zebra", "staticd", "bgpd", "ospfd", "ospf6d") if d in confs]

    def start(self, timeout: float = 10.0) -> Frr:
        """Write the configs, start zebra, wait for its zserv socket, start the rest and
        wait until each answers on its vty socket."""
        self._claim()
        confs = frr_configs(self.config, self.ns)
        for d in self.daemons():
            (self.workdir / f"{d}.conf").write_text(confs[d])  # the copy to read
            conf = self.rundir / f"{d}.conf"  # the one frr reads, as frr
            conf.write_text(confs[d])
            os.chmod(conf, 0o644)
            argv = [
                str(FRR_DIR / d), "-u", FRR_USER, "-g", FRR_USER, "-f", str(conf),
                "-i", str(self.rundir / f"{d}.pid"), "-z", str(self.zserv),
                "--vty_socket", str(self.rundir), "-P", "0", "--log", "stdout",
                "--log-level", "info",
            ]
            if d == "bgpd":
                argv += ["-p", "179"]
            self._spawn(d, argv)
            vty = self.rundir / f"{d}.vty"

            def up(vty: Path = vty, d: str = d) -> bool:
                self.check_alive()
                return vty.exists() and (d != "zebra" or self.zserv.exists())

            wait_until(up, timeout, f"frr {d} in {self.ns} to start", detail=self.log_tail)
        return self

    def vtysh(self, *commands: str, daemon: str | None = None, check: bool = True) -> str:
        """Run vtysh commands (each one ``-c``) against this instance; returns stdout."""
        argv = [VTYSH_BIN, "--vty_socket", str(self.rundir)]
        if daemon:
            argv += ["-d", daemon]
        for c in commands:
            argv += ["-c", c]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        if check and (p.returncode != 0 or "% " in p.stdout[:200]):
            raise PeerError(f"vtysh {' / '.join(commands)}: {(p.stdout + p.stderr).strip()}")
        return p.stdout

    def vtysh_json(self, command: str, daemon: str | None = None) -> dict:
        """A ``... json`` show command, parsed ({} if the daemon answers nothing)."""
        out = self.vtysh(command, daemon=daemon, check=False)
        try:
            return json.loads(out) if out.strip() else {}
        except json.JSONDecodeError:
            return {}

    def status_text(self) -> str:
        cmds = []
        if self.config.bgp:
            cmds.append("show bgp summary")
        if 2 in self.config.ospf_versions():
            cmds.append("show ip ospf neighbor")
        if 3 in self.config.ospf_versions():
            cmds.append("show ipv6 ospf6 neighbor")
        return "\n".join(self.vtysh(c, check=False) for c in cmds)

    def bgp_state(self, peer: str) -> str:
        data = self.vtysh_json(f"show bgp neighbors {peer} json", daemon="bgpd")
        return str(data.get(peer, {}).get("bgpState", ""))

    def ospf_neighbors(self, version: int = 2) -> dict[str, str]:
        nbrs: dict[str, str] = {}
        if version == 2:
            data = self.vtysh_json("show ip ospf neighbor json", daemon="ospfd")
            for rid, entries in (data.get("neighbors") or {}).items():
                for e in entries:
                    st = e.get("nbrState") or e.get("state") or ""
                    nbrs[rid] = st.split("/")[0]
        else:
            data = self.vtysh_json("show ipv6 ospf6 neighbor json", daemon="ospf6d")
            for e in data.get("neighbors") or []:
                nbrs[e.get("neighborId", "")] = str(e.get("state", "")).split("/")[0]
        return nbrs

    def routes(self, family: int = 4) -> dict[str, list[str]]:
        """Selected routes of zebra's RIB (``show ip[v6] route json``)."""
        data = self.vtysh_json(f"show {'ip' if family == 4 else 'ipv6'} route json", "zebra")
        routes: dict[str, list[str]] = {}
        for prefix, entries in data.items():
            for e in entries:
                if e.get("selected"):
                    routes[prefix] = [h["ip"] for h in e.get("nexthops", []) if h.get("ip")]
        return routes

    def _set_static(self, prefix: str, present: bool) -> None:
        """``ip[v6] route P blackhole`` (or its ``no``) in staticd: redistributed into
        BGP and OSPF, so adding or removing it announces or withdraws."""
        kw = "ip" if _family(prefix) == 4 else "ipv6"
        no = "" if present else "no "
        self.vtysh("configure terminal", f"{no}{kw} route {prefix} blackhole", daemon="staticd")


def _cleanup_stale_rundirs(max_age: float = 86400.0) -> None:
    """Remove run directories of instances that died without stop() (a day old)."""
    now = time.time()
    for d in Path("/tmp").glob("rp-*-*"):
        with contextlib.suppress(OSError):
            if d.is_dir() and now - d.stat().st_mtime > max_age:
                shutil.rmtree(d, ignore_errors=True)


_cleanup_stale_rundirs()
