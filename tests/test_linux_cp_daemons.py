"""linux-cp with real routing daemons: BIRD / FRR run on vecroute's mirrors and drive it.

    A (pa)  198.51.100.2  --veth-- p0 [cp0 198.51.100.1/24  2001:db8:1::1/64]
    B (pb)  203.0.113.2   --veth-- p1 [cp1 203.0.113.1/25   2001:db8:2::1/64]  vecroute (rt)
    C (pc)  203.0.113.130 --veth-- p2 [cp2 203.0.113.129/25 2001:db8:3::1/64]

vecroute runs in namespace rt with a ``[linux_cp]`` section: each port has a TAP mirror
(``host_if`` cp0..cp2) in rt, where a routing daemon (BIRD, or FRR) peers over the
mirrors with a daemon in each peer namespace.  The daemon in rt installs what it learns
into rt's kernel; vecroute copies it into its FIB over netlink and forwards between the
peers' networks:

    A: 192.0.2.0/26 (lo 192.0.2.1)     2001:db8:a::/48 (lo 2001:db8:a::1)
    B: 192.0.2.64/26 (lo 192.0.2.65)   2001:db8:b::/48 (lo 2001:db8:b::1)
    C: 192.0.2.65 on lo too; announces B's 192.0.2.64/26 when a test asks (ECMP over a
       second eBGP session)

The Linux kernel in rt does not forward (ip_forward is 0 in a fresh namespace), so what
crosses from A to B crossed vecroute; its port counters show it.

One vecroute and one set of namespaces serve the whole module; each class starts its own
daemons once (class fixtures) and its tests run in order on them:

- ``TestBgpBirdInRt``: BIRD in rt, FRR on A, B, C: eBGP v4+v6, routes and next hops,
  ping, iperf3, ECMP over B and C, withdrawals, a port going down;
- ``TestOspfFrrInRt``: FRR in rt, BIRD on A and B: OSPFv2 + OSPFv3 through the mirrors;
- ``TestCross``: FRR in rt with eBGP to BIRD (A) and FRR (B); BIRD in rt with OSPF to
  FRR (A) and BIRD (B): routes and ping.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from routing_peers import (
    BgpNeighbor,
    Bird,
    Frr,
    OspfInterface,
    RouterConfig,
    RoutingDaemon,
    link_local,
    no_dad,
    wait_kernel_route,
    wait_until,
)

from vecroute.io.netns import Lab, LabError, entered
from vecroute.lab import Topology, start_router

pytestmark = pytest.mark.netns

RT_AS, A_AS, B_AS, C_AS = 65000, 65001, 65002, 65003
MIRRORS = ("cp0", "cp1", "cp2")
WITHDRAW_WITHIN = 1.0  # s: a withdrawal, from the peer's command to vecroute's FIB
LINK_DOWN_WITHIN = 5.0  # s: a port down, to what used it gone from vecroute's FIB


@dataclass(frozen=True)
class Side:
    """One peer namespace: its link to vecroute's port and the network it originates."""

    role: str
    port_v4: str  # vecroute's (the mirror's) address on the link
    port_v6: str
    peer_v4: str  # the peer's address on the link
    peer_v6: str
    plen4: int
    net4: str  # originated prefixes, and the address on the peer's lo inside them
    net6: str
    lo4: str
    lo6: str
    asn: int
    router_id: str


A = Side("a", "198.51.100.1", "2001:db8:1::1", "198.51.100.2", "2001:db8:1::2", 24,
         "192.0.2.0/26", "2001:db8:a::/48", "192.0.2.1", "2001:db8:a::1", A_AS, "192.0.2.1")
B = Side("b", "203.0.113.1", "2001:db8:2::1", "203.0.113.2", "2001:db8:2::2", 25,
         "192.0.2.64/26", "2001:db8:b::/48", "192.0.2.65", "2001:db8:b::1", B_AS, "192.0.2.65")
C = Side("c", "203.0.113.129", "2001:db8:3::1", "203.0.113.130", "2001:db8:3::2", 25,
         "192.0.2.64/26", "2001:db8:b::/48", "192.0.2.65", "2001:db8:b::1", C_AS, "192.0.2.66")
SIDES = (A, B, C)
RT_ID = "198.51.100.1"


@dataclass
class Cp:
    """The running topology: vecroute (with its mirrors) and the three peer namespaces."""

    t: Topology
    ns: dict[str, str] = field(default_factory=dict)  # role -> namespace
    peer_if: dict[str, str] = field(default_factory=dict)  # role -> the peer's veth end
    port: dict[str, str] = field(default_factory=dict)  # role -> vecroute's port
    mirror: dict[str, str] = field(default_factory=dict)  # role -> the port's mirror

    @property
    def lab(self) -> Lab:
        return self.t.lab

    @property
    def rt(self) -> str:
        return self.t.rt

    def tx(self, role: str) -> int:
        """tx_packets of vecroute's port towards ``role``."""
        rows = self.t.ctl("show", "interfaces")["data"]
        return next(int(r["tx_packets"]) for r in rows if r["name"] == self.port[role])

    def fib_paths(self, prefix: str) -> list[tuple[str, str]] | None:
        """(gateway, port) paths of vecroute's route for exactly ``prefix`` (None: none)."""
        reply = self.t.ctl("show", "routes", prefix)
        for row in reply.get("data") or []:
            if row["prefix"] == prefix and row["table"] == 0:
                return re.findall(r"via (\S+) dev (\S+)", row["paths"])
        return None

    def diagnostics(self) -> str:
        """vecroute's side of a failure: show linux-cp, show errors, the log's tail."""
        parts = []
        for words in (("show", "linux-cp"), ("show", "errors")):
            try:
                reply = self.t.ctl(*words)
                parts.append(f"--- ctl {' '.join(words)}\n"
                             f"{reply.get('text') or json.dumps(reply.get('data'))}")
            except OSError as e:
                parts.append(f"--- ctl {' '.join(words)}: {e}")
        with contextlib.suppress(OSError):
            parts.append(f"--- router.log\n{self.t.log.read_text()[-3000:]}")
        return "\n".join(parts)

    def wait_fib(
        self,
        prefix: str,
        paths: set[tuple[str, str]] | None = None,
        present: bool = True,
        timeout: float = 10.0,
        daemons: tuple[RoutingDaemon, ...] | dict[str, RoutingDaemon] = (),
    ) -> list[tuple[str, str]]:
        """Poll ``ctl show routes`` until ``prefix`` is in vecroute's FIB (with exactly
        ``paths``, if given) or, with ``present=False``, gone."""
        last: list[object] = [None]
        ds = tuple(daemons.values()) if isinstance(daemons, dict) else daemons

        def probe() -> list[tuple[str, str]] | bool | None:
            got = last[0] = self.fib_paths(prefix)
            if not present:
                return got is None
            if got is None or (paths is not None and set(got) != paths):
                return None
            return got

        def detail() -> str:
            routes = self.t.ctl("show", "routes").get("text", "")
            return (f"last FIB paths {last[0]}\n{routes}\n{self.diagnostics()}\n"
                    + "\n".join(d.diagnostics() for d in ds))

        got = wait_until(probe, timeout, f"{prefix} {'in' if present else 'gone from'} "
                         "vecroute's FIB", interval=0.02, detail=detail)
        return got if isinstance(got, list) else []


def _config(cp: Cp) -> str:
    ifs = []
    for s, m in zip(SIDES, MIRRORS, strict=True):
        ifs.append(
            f'[[interfaces]]\nname = "{cp.port[s.role]}"\n'
            f'addresses = ["{s.port_v4}/{s.plen4}", "{s.port_v6}/64"]\nhost_if = "{m}"\n'
        )
    return (
        f'[router]\nworkers = 1\n\n[control]\nsocket = "{cp.t.socket}"\n\n[linux_cp]\n\n'
        + "\n".join(ifs)
    )


def _link_up(lab: Lab, ns: str, ifname: str) -> bool:
    try:
        return "UP" in lab.link(ns, ifname).get("flags", [])
    except LabError:  # not created yet
        return False


@pytest.fixture(scope="module")
def cp(tmp_path_factory) -> Iterator[Cp]:
    if os.geteuid() != 0:
        pytest.fail("live tests need root (network namespaces): run them as root, as CI does")
    workdir = tmp_path_factory.mktemp("lcp")
    with Lab("lc") as lab:
        t = Topology(lab, workdir)
        c = Cp(t)
        t.rt = lab.netns("rt")
        no_dad(t.rt)
        for s, m in zip(SIDES, MIRRORS, strict=True):
            ns = c.ns[s.role] = lab.netns(s.role)
            no_dad(ns)  # link-local addresses usable at once (FRR's IPv6 sessions, OSPFv3)
            c.peer_if[s.role], c.port[s.role] = lab.veth(ns, t.rt, disable_ipv6=(False, True))
            c.mirror[s.role] = m
            lab.addr(ns, c.peer_if[s.role], f"{s.peer_v4}/{s.plen4}")
            lab.addr(ns, c.peer_if[s.role], f"{s.peer_v6}/64")
            lab.addr(ns, "lo", f"{s.lo4}/32")
            lab.addr(ns, "lo", f"{s.lo6}/128")
        # A also has a default route via vecroute: once a withdrawal removes A's own
        # route, its packets still reach vecroute, which must then refuse them
        lab.route(c.ns["a"], "default", "via", A.port_v4, "metric", "1000")
        lab.route(c.ns["a"], "default", "via", A.port_v6, "metric", "1000")
        t.socket = str(workdir / "vecroute.sock")
        t.config = workdir / "router.toml"
        t.config.write_text(_config(c))
        start_router(t)
        for m in MIRRORS:
            wait_until(lambda m=m: _link_up(lab, t.rt, m), 10, f"mirror {m} up in {t.rt}")
        try:
            yield c
        finally:
            if t.router is not None and t.router.poll() is not None:
                print(f"vecroute exited {t.router.returncode}\n{c.diagnostics()}")


# --- the daemons -----------------------------------------------------------------------------


def _daemon(kind: str, lab: Lab, ns: str, cfg: RouterConfig, workdir: Path) -> RoutingDaemon:
    return (Bird if kind == "bird" else Frr)(lab, ns, cfg, workdir / f"{kind}-{ns}")


def _peer_config(s: Side, proto: str, ifname: str, announce: bool = True) -> RouterConfig:
    return RouterConfig(
        s.router_id,
        asn=s.asn,
        bgp=[BgpNeighbor(s.port_v4, RT_AS, local=s.peer_v4),
             BgpNeighbor(s.port_v6, RT_AS, local=s.peer_v6)] if proto == "bgp" else [],
        ospf=[OspfInterface(ifname, 2), OspfInterface(ifname, 3)] if proto == "ospf" else [],
        announce=[s.net4, s.net6] if announce else [],
    )


def _rt_config(cp: Cp, proto: str, sides: tuple[Side, ...]) -> RouterConfig:
    if proto == "bgp":
        return RouterConfig(RT_ID, asn=RT_AS, bgp=[
            n for s in sides for n in (BgpNeighbor(s.peer_v4, s.asn, local=s.port_v4),
                                       BgpNeighbor(s.peer_v6, s.asn, local=s.port_v6))])
    return RouterConfig(RT_ID, ospf=[OspfInterface(cp.mirror[s.role], v)
                                     for s in sides for v in (2, 3)])


@contextlib.contextmanager
def daemons(
    cp: Cp, proto: str, kinds: dict[str, str], workdir: Path
) -> Iterator[dict[str, RoutingDaemon]]:
    """Start the daemons (``kinds``: role -> "bird" | "frr", "rt" included) speaking
    ``proto`` ("bgp": eBGP v4 + v6; "ospf": OSPFv2 + OSPFv3) between rt and each peer;
    wait until every session / adjacency is up on both sides; stop them after.  C, when
    present, starts without announcing anything."""
    sides = tuple(s for s in SIDES if s.role in kinds)
    ds = {"rt": _daemon(kinds["rt"], cp.lab, cp.rt, _rt_config(cp, proto, sides), workdir)}
    for s in sides:
        cfg = _peer_config(s, proto, cp.peer_if[s.role], announce=s is not C)
        ds[s.role] = _daemon(kinds[s.role], cp.lab, cp.ns[s.role], cfg, workdir)
    with contextlib.ExitStack() as stack:
        for d in ds.values():
            stack.enter_context(d)
        t0 = time.monotonic()
        try:
            for s in sides:
                if proto == "bgp":
                    for rt_end, peer_end in ((s.peer_v4, s.port_v4), (s.peer_v6, s.port_v6)):
                        ds["rt"].wait_bgp(rt_end)
                        ds[s.role].wait_bgp(peer_end)
                else:
                    for v in (2, 3):
                        ds["rt"].wait_ospf_full(v, neighbor=s.router_id)
                        ds[s.role].wait_ospf_full(v, neighbor=RT_ID)
        except BaseException:
            print(cp.diagnostics())
            raise
        print(f"{proto} {kinds}: sessions through vecroute up after "
              f"{time.monotonic() - t0:.2f} s")
        yield ds


def _ping(cp: Cp, role: str, src: str, dst: str, count: int = 2) -> subprocess.CompletedProcess:
    fam = ["-6"] if ":" in dst else []
    return subprocess.run(
        ["ip", "netns", "exec", cp.ns[role], "ping", *fam, "-c", str(count), "-i", "0.2",
         "-W", "2", "-I", src, dst],
        capture_output=True, text=True, timeout=30,
    )


def _v6_gateways(cp: Cp, s: Side) -> set[str]:
    """What the daemon in rt may use as IPv6 next hop towards ``s``: the peer's global
    address (BIRD) or its link-local one (FRR)."""
    return {s.peer_v6, link_local(cp.ns[s.role], cp.peer_if[s.role])}


def _check_routes(cp: Cp, ds: dict[str, RoutingDaemon], proto: str, timeout: float) -> None:
    """A's and B's networks in vecroute's FIB via the right peer and port; each peer
    learnt the other's networks with vecroute's port as the next hop."""
    for s in (A, B):
        port = cp.port[s.role]
        assert cp.wait_fib(s.net4, {(s.peer_v4, port)}, timeout=timeout,
                           daemons=ds) == [(s.peer_v4, port)]
        got6 = cp.wait_fib(s.net6, timeout=timeout, daemons=ds)
        assert len(got6) == 1 and got6[0][1] == port, got6
        if proto == "ospf":  # OSPFv3 next hops are link-local, always
            assert got6[0][0] == link_local(cp.ns[s.role], cp.peer_if[s.role]), got6
        else:
            assert got6[0][0] in _v6_gateways(cp, s), got6
    for here, there in ((A, B), (B, A)):
        wait_kernel_route(cp.ns[here.role], there.net4, gateways=[here.port_v4],
                          timeout=timeout, daemons=ds.values())
        wait_kernel_route(cp.ns[here.role], there.net6, timeout=timeout, daemons=ds.values())


def _check_pings(cp: Cp) -> None:
    # rt's kernel does not forward (nor do the daemons turn it on): what crosses, crossed
    # vecroute (Linux routes cp0 -> cp1 would still leave by vecroute's port b)
    fwd = cp.lab.run(cp.rt, ["sysctl", "-n", "net.ipv4.ip_forward",
                             "net.ipv6.conf.all.forwarding"]).split()
    assert fwd == ["0", "0"], fwd
    before = cp.tx("b")
    for src, dst in ((A.lo4, B.lo4), (A.lo6, B.lo6), (B.lo4, A.lo4), (B.lo6, A.lo6)):
        r = _ping(cp, "a" if src in (A.lo4, A.lo6) else "b", src, dst)
        assert r.returncode == 0, r.stdout + r.stderr + cp.diagnostics()
    assert cp.tx("b") - before >= 4  # A's echo requests (and B's replies) left by port b


# --- BIRD in vecroute's namespace, FRR peers: eBGP -----------------------------------------


@pytest.fixture(scope="class")
def bgp(cp, tmp_path_factory) -> Iterator[dict[str, RoutingDaemon]]:
    kinds = {"rt": "bird", "a": "frr", "b": "frr", "c": "frr"}
    with daemons(cp, "bgp", kinds, tmp_path_factory.mktemp("bgp")) as ds:
        yield ds


class TestBgpBirdInRt:
    """eBGP v4 + v6, BIRD in rt, FRR on A, B and C; the tests run in order."""

    def test_learnt_routes_in_vecroute_fib_with_the_right_next_hops(self, cp, bgp):
        _check_routes(cp, bgp, "bgp", timeout=10)  # B's network: B's path only (C is quiet)
        sync = cp.t.ctl("show", "linux-cp")["data"]["sync"]
        assert sync["state"] == "synced" and sync["routes_mirrored"] >= 4, sync

    def test_ping_and_iperf3_between_peer_networks_through_vecroute(self, cp, bgp):
        _check_pings(cp)
        before = cp.tx("b")
        srv = cp.lab.popen(cp.ns["b"], ["iperf3", "-s", "-1", "-B", B.lo4],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda: ":5201" in cp.lab.run(cp.ns["b"], ["ss", "-ltnH"]), 5,
                       "iperf3 listening in B")
            out = cp.lab.run(cp.ns["a"], ["iperf3", "-c", B.lo4, "-B", A.lo4, "-t", "1",
                                          "-f", "m"], timeout=30)
        finally:
            with contextlib.suppress(subprocess.TimeoutExpired):
                srv.wait(timeout=5)
            if srv.poll() is None:
                srv.kill()
        m = re.search(r"([\d.]+) Mbits/sec\s+receiver", out)
        assert m and float(m.group(1)) > 1.0, out
        print(f"iperf3 A -> B through vecroute: {m.group(1)} Mbit/s")
        assert cp.tx("b") - before > 1000, out  # the data crossed vecroute's port to B

    def test_ecmp_over_two_ebgp_sessions_spreads_flows(self, cp, bgp):
        bgp["c"].announce(B.net4)  # C announces B's network too: two equal eBGP paths
        both = {(B.peer_v4, cp.port["b"]), (C.peer_v4, cp.port["c"])}
        cp.wait_fib(B.net4, both, daemons=bgp)
        wait_kernel_route(cp.ns["a"], B.net4, gateways=[A.port_v4], daemons=bgp.values())
        before = {r: cp.tx(r) for r in ("b", "c")}
        flows, per_flow = 64, 4
        with entered(cp.ns["a"]):
            socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(flows)]
        try:
            for s in socks:
                s.bind((A.lo4, 0))  # a fresh source port per flow
            for _ in range(per_flow):
                for s in socks:
                    s.sendto(b"x" * 32, (B.lo4, 9))
        finally:
            for s in socks:
                s.close()
        total = flows * per_flow

        def spread() -> dict[str, int] | None:
            d = {r: cp.tx(r) - before[r] for r in ("b", "c")}
            return d if sum(d.values()) >= total else None

        d = wait_until(spread, 5, f"{total} packets out of ports b and c")
        print(f"ECMP: {flows} flows x {per_flow} packets out of b / c: {d}")
        # 64 flows hashed over 2 paths: each gets far more than a tenth (p < 1e-9)
        assert min(d.values()) >= total // 10, d

    def test_withdrawn_route_stops_forwarding_within_a_second(self, cp, bgp):
        # the ECMP test announced B's network from C too; under xdist this test may run
        # without it (another worker), so it makes sure of its own start (idempotent)
        bgp["c"].announce(B.net4)
        both = {(B.peer_v4, cp.port["b"]), (C.peer_v4, cp.port["c"])}
        cp.wait_fib(B.net4, both, daemons=bgp)
        # B withdraws: its path leaves, C's stays
        t0 = time.monotonic()
        bgp["b"].withdraw(B.net4)
        cp.wait_fib(B.net4, {(C.peer_v4, cp.port["c"])}, timeout=WITHDRAW_WITHIN, daemons=bgp)
        t1 = time.monotonic()
        assert _ping(cp, "a", A.lo4, B.lo4).returncode == 0  # C answers for 192.0.2.65
        # C withdraws: the route is gone from vecroute's FIB
        t2 = time.monotonic()
        bgp["c"].withdraw(B.net4)
        cp.wait_fib(B.net4, present=False, timeout=WITHDRAW_WITHIN, daemons=bgp)
        print(f"withdrawals reached vecroute's FIB in {(t1 - t0) * 1000:.0f} ms (one of two "
              f"paths) and {(time.monotonic() - t2) * 1000:.0f} ms (the last)")
        # A's packets still reach vecroute (its default route), which has no route now
        r = _ping(cp, "a", A.lo4, B.lo4, count=1)
        assert r.returncode != 0, r.stdout
        assert f"From {A.port_v4}" in r.stdout and "Unreachable" in r.stdout, r.stdout
        # announced again, it forwards again
        bgp["b"].announce(B.net4)
        cp.wait_fib(B.net4, {(B.peer_v4, cp.port["b"])}, timeout=5, daemons=bgp)
        wait_kernel_route(cp.ns["a"], B.net4, gateways=[A.port_v4], daemons=bgp.values())
        assert _ping(cp, "a", A.lo4, B.lo4).returncode == 0

    def test_port_down_withdraws_what_used_it(self, cp, bgp):
        """Port b goes down: its mirror loses its carrier within a second (the daemon sees
        the link go), B's routes leave vecroute's FIB, A's stay; up again, the carrier
        comes back, the sessions too, and vecroute forwards to B again."""
        cp.wait_fib(B.net4, {(B.peer_v4, cp.port["b"])}, daemons=bgp)
        cp.wait_fib(B.net6, daemons=bgp)
        mirror = cp.mirror["b"]

        def carrier(up: bool) -> bool:
            flags = cp.lab.link(cp.rt, mirror).get("flags", [])
            pair = [r for r in cp.t.ctl("show", "linux-cp")["data"]["pairs"]
                    if r["mirror"] == mirror][0]
            return ("NO-CARRIER" not in flags) == up and pair["carrier"] == ("up" if up else
                                                                            "down")

        assert carrier(True)
        try:
            t0 = time.monotonic()
            cp.lab.link_set(cp.rt, cp.port["b"], "down")
            wait_until(lambda: carrier(False), 3.0, f"mirror {mirror} without carrier")
            t_carrier = time.monotonic() - t0
            for net in (B.net4, B.net6):
                cp.wait_fib(net, present=False, timeout=LINK_DOWN_WITHIN, daemons=bgp)
            print(f"port down: mirror carrier off after {t_carrier:.2f} s, B's routes "
                  f"withdrawn after {time.monotonic() - t0:.2f} s")
            wait_kernel_route(cp.ns["a"], B.net4, present=False, timeout=5,
                              daemons=bgp.values())
            assert cp.fib_paths(A.net4) == [(A.peer_v4, cp.port["a"])]  # A's are untouched
        finally:
            cp.lab.link_set(cp.rt, cp.port["b"], "up")
        t0 = time.monotonic()
        wait_until(lambda: carrier(True), 5.0, f"mirror {mirror} with its carrier back")
        bgp["rt"].wait_bgp(B.peer_v4, timeout=20)
        cp.wait_fib(B.net4, {(B.peer_v4, cp.port["b"])}, daemons=bgp)
        wait_kernel_route(cp.ns["a"], B.net4, gateways=[A.port_v4], daemons=bgp.values())
        assert _ping(cp, "a", A.lo4, B.lo4).returncode == 0
        print(f"port up: B's route back and forwarded after {time.monotonic() - t0:.2f} s")


# --- FRR in vecroute's namespace, BIRD peers: OSPFv2 + OSPFv3 ------------------------------


@pytest.fixture(scope="class")
def ospf(cp, tmp_path_factory) -> Iterator[dict[str, RoutingDaemon]]:
    kinds = {"rt": "frr", "a": "bird", "b": "bird"}
    with daemons(cp, "ospf", kinds, tmp_path_factory.mktemp("ospf")) as ds:
        yield ds


class TestOspfFrrInRt:
    """OSPFv2 + OSPFv3 on the mirrors: FRR in rt, BIRD on A and B (externals: the peers'
    announced networks)."""

    def test_learnt_routes_in_vecroute_fib_with_the_right_next_hops(self, cp, ospf):
        # BIRD computes and installs OSPF routes on its 1 s tick: a few seconds
        _check_routes(cp, ospf, "ospf", timeout=15)
        sync = cp.t.ctl("show", "linux-cp")["data"]["sync"]
        # FRR installs its routes with nexthop objects
        assert sync["nexthops"] > 0 and sync["routes_mirrored"] >= 4, sync

    def test_ping_between_peer_networks_through_vecroute(self, cp, ospf):
        _check_pings(cp)


# --- the crossed variants: FRR in rt with eBGP, BIRD in rt with OSPF -----------------------

CROSS = [  # (protocol, daemon in rt, on A, on B)
    ("bgp", "frr", "bird", "frr"),
    ("ospf", "bird", "frr", "bird"),
]


@pytest.fixture(scope="class", params=CROSS, ids=[f"{p}-{r}-in-rt" for p, r, _, _ in CROSS])
def cross(cp, request, tmp_path_factory) -> Iterator[tuple[str, dict[str, RoutingDaemon]]]:
    proto, rt, a, b = request.param
    with daemons(cp, proto, {"rt": rt, "a": a, "b": b},
                 tmp_path_factory.mktemp(f"{proto}-{rt}")) as ds:
        yield proto, ds


class TestCross:
    def test_routes_and_ping_through_vecroute(self, cp, cross):
        proto, ds = cross
        _check_routes(cp, ds, proto, timeout=15)
        _check_pings(cp)


# --- vecroute lab --bgp ------------------------------------------------------------------------


def test_lab_bgp_shows_sessions_routes_pings_and_a_withdrawal():
    """``vecroute lab --bgp --seconds 1``: BIRD on both hosts and in the router namespace,
    everything it prints checked, and nothing of it left behind."""
    if os.geteuid() != 0:
        pytest.fail("live tests need root (network namespaces): run them as root, as CI does")
    before = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "vecroute.cli", "lab", "--bgp", "--seconds", "1"],
                       capture_output=True, text=True, timeout=240)
    out = r.stdout
    print(f"vecroute lab --bgp ran {time.monotonic() - t0:.1f} s\n{out[-4000:]}")
    assert r.returncode == 0, out + r.stderr
    assert "BGP sessions through vecroute's ports: Established" in out
    assert len(re.findall(r"bgp_\S+\s+BGP.*Established", out)) == 4, out
    for prefix, gw in (("192.0.2.0/26", "198.51.100.10"), ("192.0.2.64/26", "203.0.113.10"),
                       ("2001:db8:a::/48", None), ("2001:db8:b::/48", None)):
        line = next((ln for ln in out.splitlines() if prefix in ln and "kernel" in ln), "")
        assert line and (gw is None or f"via {gw}" in line), (prefix, out)
    assert out.count(" 0% packet loss") >= 3, out  # v4, v6, and again after re-announcing
    assert re.search(r"[\d.]+ Mbits/sec\s+receiver", out), out
    m = re.search(r"192.0.2.64/26 left vecroute's FIB (\d+) ms after the withdrawal", out)
    assert m and int(m.group(1)) < 1000 * WITHDRAW_WITHIN, out
    assert "From 198.51.100.1" in out and "Unreachable" in out, out
    assert "netlink sync: state synced" in out, out
    after = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    assert not {n for n in after - before if n.startswith("vb")}, after - before


if __name__ == "__main__":  # pragma: no cover - run one file by hand
    sys.exit(pytest.main([__file__, "-v", "-s"]))
