"""Netlink -> FIB (vecroute.control.linux_nl): the kernel of a namespace is the oracle.

A namespace "k" holds two veth ends that stand in for mirror interfaces (their ifindex ->
port 0 and 1 of a Fib built from a parsed config); their peers sit in namespace "p" so
the links have carrier. The tests drive the kernel with ``ip`` and compare, after each
step, the whole of the kernel's table (``ip -j route show table all``, filtered to what
can be mirrored) with the kernel routes of vecroute's Fib, next hops and weights included.
"""

from __future__ import annotations

import ipaddress
import json
import os
import time

import pytest

from vecroute.control.config import parse_config
from vecroute.control.linux_nl import KERNEL_KINDS, LINUX, KernelSync, fit_weights
from vecroute.control.neighbors import NeighborTable
from vecroute.fib.fib import Fib
from vecroute.graph.dataplane import fib_state
from vecroute.io.netns import Lab, ip

pytestmark = pytest.mark.netns

MAC0, MAC1 = "02:00:00:00:51:01", "02:00:00:00:51:02"
TYPES = {"unicast", "blackhole", "unreachable", "prohibit"}


class Target:
    """What the router gives KernelSync: the current Fib, the neighbour table, commit."""

    def __init__(self, fib: Fib) -> None:
        self.fib = fib
        self.neigh = NeighborTable(fib, lambda ifx, frame: None, lambda p, e: None)
        self.commits = 0

    def commit(self) -> None:
        self.commits += 1


class Env:
    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.ns = lab.netns("k")
        self.peer = lab.netns("p")
        self.m0, self.p0 = lab.veth(self.ns, self.peer)
        self.m1, self.p1 = lab.veth(self.ns, self.peer)
        ip("link", "set", self.m0, "address", MAC0, ns=self.ns)
        ip("link", "set", self.m1, "address", MAC1, ns=self.ns)
        self.ipx = {self.m0: lab.link(self.ns, self.m0)["ifindex"],
                    self.m1: lab.link(self.ns, self.m1)["ifindex"]}
        cfg = parse_config({"interfaces": [
            {"name": "port0", "mac": MAC0, "addresses": []},
            {"name": "port1", "mac": MAC1, "addresses": []},
        ]})
        self.target = Target(Fib.from_config(cfg))
        self.sync = KernelSync(self.target, self.ns,
                               {self.ipx[self.m0]: 0, self.ipx[self.m1]: 1})
        self.sync.open()
        self.names = {self.m0: 0, self.m1: 1}
        self.ip("addr", "add", "192.0.2.1/26", "dev", self.m0)
        self.ip("addr", "add", "192.0.2.65/26", "dev", self.m1)
        self.ip("addr", "add", "2001:db8:1::1/64", "dev", self.m0, "nodad")
        self.ip("addr", "add", "2001:db8:2::1/64", "dev", self.m1, "nodad")
        self.sync.resync()
        self.settle()

    def ip(self, *args: str) -> str:
        return ip(*args, ns=self.ns)

    def batch(self, lines: list[str]) -> None:
        path = f"/tmp/nl-batch-{os.getpid()}"
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        try:
            ip("-batch", path, ns=self.ns)
        finally:
            os.unlink(path)

    def settle(self, rounds: int = 200) -> None:
        """Read until the socket is quiet and any dump is over."""
        quiet = 0
        for _ in range(rounds * 10):
            got = self.sync.poll()
            if self.sync._resync_wanted and not self.sync._inflight:
                self.sync.resync()
                quiet = 0
                continue
            if got == 0 and self.sync.state != "dumping":
                quiet += 1
                if quiet >= 3:
                    return
            else:
                quiet = 0
            time.sleep(0.005)
        raise AssertionError(f"netlink sync did not settle: {self.sync.stats()}")

    # -- the two sides --------------------------------------------------------------------

    def kernel(self) -> dict:
        """The kernel's routes as vecroute should hold them: {(table, prefix): paths}."""
        nhs = {n["id"]: n for n in json.loads(self.ip("-j", "nexthop", "show") or "[]")}
        out = {}
        for fam in ("-4", "-6"):
            for r in json.loads(ip("-j", fam, "route", "show", "table", "all", ns=self.ns)):
                typ = r.get("type", "unicast")
                if typ not in TYPES:
                    continue
                table = r.get("table", "main")
                table = 0 if table in ("main", "local") else int(table)
                dst = r["dst"]
                if dst == "default":
                    dst = "0.0.0.0/0" if fam == "-4" else "::/0"
                net = ipaddress.ip_network(dst)
                if net.version == 6 and net.subnet_of(ipaddress.ip_network("fe80::/10")):
                    continue
                if r.get("protocol") == "kernel" and _gw(r) is None:
                    continue  # the subnet of an address: vecroute's connected route
                if typ != "unicast":
                    out[(table, net)] = typ
                    continue
                if "nhid" in r:
                    hops = self._nh_hops(nhs, r["nhid"])
                elif "nexthops" in r:
                    hops = [(_gw(h), h["dev"], h.get("weight", 1), h.get("flags", []))
                            for h in r["nexthops"]]
                else:
                    hops = [(_gw(r), r["dev"], 1, r.get("flags", []))]
                paths = sorted((self.names[d], g, w) for g, d, w, fl in hops
                               if d in self.names and "dead" not in fl)
                if paths:
                    out[(table, net)] = _norm(paths)
        return out

    def _nh_hops(self, nhs: dict, nid: int) -> list:
        n = nhs[nid]
        if "group" in n:
            return [(h[0], h[1], w * g.get("weight", 1), h[3])
                    for g in n["group"] for h in self._nh_hops(nhs, g["id"])
                    for w in [1]]
        if n.get("blackhole"):
            return []
        return [(n.get("gateway"), n.get("dev"), 1, n.get("flags", []))]

    def vecroute(self) -> dict:
        fib = self.target.fib
        out = {}
        for (table, net), r in fib.routes.items():
            if r.kind not in KERNEL_KINDS:
                continue
            if r.kind != "kernel":
                out[(table, net)] = r.kind
                continue
            buckets = fib.lbs.paths[r.lb]
            counts: dict = {}
            for a in buckets:
                k = fib.adjs.keys[a]
                gw = None if k.family == 0 or k.nh == 0 else str(ipaddress.ip_address(k.nh)
                                                                   if k.family == 4 else
                                                                   ipaddress.IPv6Address(k.nh))
                counts[(k.ifx, gw)] = counts.get((k.ifx, gw), 0) + 1
            out[(table, net)] = _norm(sorted((ifx, gw, w) for (ifx, gw), w in counts.items()))
        return out

    def check(self) -> None:
        self.settle()
        k, v = self.kernel(), self.vecroute()
        assert v == k, _diff(k, v)


def _gw(r: dict) -> str | None:
    """The next hop of an ``ip -j route`` entry: gateway, or via (RFC 5549 "via inet6")."""
    return r.get("gateway") or (r.get("via") or {}).get("host")


def _norm(paths: list) -> tuple:
    """Paths with their weights reduced as vecroute stores them (gcd, <= 64 buckets)."""
    ws = fit_weights([w for _, _, w in paths])
    return tuple((ifx, gw, w) for (ifx, gw, _), w in zip(paths, ws, strict=True))


def _diff(k: dict, v: dict) -> str:
    lines = []
    for key in sorted(set(k) | set(v), key=str):
        if k.get(key) != v.get(key):
            lines.append(f"{key}: kernel {k.get(key)} vecroute {v.get(key)}")
    return "\n".join(lines[:20])


@pytest.fixture
def env():
    if os.geteuid() != 0:  # as every live test: a failure, never a silent skip
        pytest.fail("netlink tests need root (network namespaces): run them as root, as CI does")
    with Lab("nl") as lab:
        e = Env(lab)
        try:
            yield e
        finally:
            e.sync.close()


def test_routes_add_replace_delete_tables(env: Env) -> None:
    env.ip("route", "add", "203.0.113.0/24", "via", "192.0.2.2")
    env.ip("route", "add", "198.51.100.0/24", "via", "192.0.2.66", "table", "100")
    env.ip("-6", "route", "add", "2001:db8:100::/48", "via", "2001:db8:1::2")
    env.ip("route", "add", "default", "via", "192.0.2.2")
    env.check()
    assert env.target.fib.lpm[4].lookup(100, "198.51.100.7") >= 0
    env.ip("route", "replace", "203.0.113.0/24", "via", "192.0.2.66")
    env.ip("route", "del", "default")
    env.check()
    env.ip("route", "del", "203.0.113.0/24")
    env.ip("route", "flush", "table", "100")
    env.check()
    assert env.target.fib.lpm[4].lookup(0, "203.0.113.1") < 0
    # two metrics: the lower one is used; deleting it uncovers the other
    env.ip("route", "add", "203.0.113.0/25", "via", "192.0.2.2", "metric", "10")
    env.ip("route", "add", "203.0.113.0/25", "via", "192.0.2.66", "metric", "20")
    env.settle()
    r = env.target.fib.routes[(0, ipaddress.ip_network("203.0.113.0/25"))]
    assert r.paths == [(0, ipaddress.ip_address("192.0.2.2"))]
    env.ip("route", "del", "203.0.113.0/25", "metric", "10")
    env.settle()
    r = env.target.fib.routes[(0, ipaddress.ip_network("203.0.113.0/25"))]
    assert r.paths == [(1, ipaddress.ip_address("192.0.2.66"))]


def test_multipath_weights(env: Env) -> None:
    env.ip("route", "add", "203.0.113.0/24", "nexthop", "via", "192.0.2.2", "weight", "1",
           "nexthop", "via", "192.0.2.66", "weight", "3")
    env.ip("-6", "route", "add", "2001:db8:100::/48", "nexthop", "via", "2001:db8:1::2",
           "nexthop", "via", "2001:db8:2::2", "weight", "2")
    env.check()
    lb = env.target.fib.routes[(0, ipaddress.ip_network("203.0.113.0/24"))].lb
    assert len(env.target.fib.lbs.paths[lb]) == 4


def test_ipv6_multipath_loses_one_hop(env: Env) -> None:
    """IPv6 keeps each hop as a sibling route: deleting one hop leaves the others."""
    env.ip("-6", "route", "add", "2001:db8:99::/64", "nexthop", "via", "2001:db8:1::2", "dev",
           env.m0, "nexthop", "via", "2001:db8:2::2", "dev", env.m1)
    env.check()
    env.ip("-6", "route", "del", "2001:db8:99::/64", "via", "2001:db8:1::2", "dev", env.m0)
    env.check()
    assert (0, ipaddress.ip_network("2001:db8:99::/64")) in env.target.fib.routes
    env.ip("-6", "route", "append", "2001:db8:99::/64", "via", "2001:db8:1::3", "dev", env.m0)
    env.check()


def test_nexthop_with_encap_is_not_forwarded_plain(env: Env) -> None:
    """Any encapsulation (NHA_ENCAP): an ip6 tunnel one, which every kernel with
    CONFIG_NET_IP_TUNNEL has (seg6 needs CONFIG_IPV6_SEG6_LWTUNNEL, not on every kernel)."""
    env.ip("nexthop", "add", "id", "51", "via", "2001:db8:1::2", "dev", env.m0)
    env.ip("-6", "route", "add", "2001:db8:79::/64", "nhid", "51")
    env.check()
    env.ip("nexthop", "replace", "id", "51", "encap", "ip6", "id", "1", "dst", "2001:db8:f::1",
           "via", "2001:db8:1::2", "dev", env.m0)
    env.settle()
    assert (0, ipaddress.ip_network("2001:db8:79::/64")) not in env.target.fib.routes


def test_messages_not_from_the_kernel_are_dropped(env: Env) -> None:
    """Any root process in the namespace can send to our netlink socket: a forged
    neighbour must not reach the table."""
    import socket
    import struct

    from vecroute.io.netns import entered

    port = env.sync.sock.getsockname()[0]
    msg = struct.pack("=BBHiHBB", 2, 0, 0, env.ipx[env.m0], 0x80, 0, 0)
    mac = b"\x02fffff"
    attrs = struct.pack("=HH", 8, 1) + bytes([192, 0, 2, 77]) + struct.pack("=HH", 10, 2) + \
        mac + b"\0\0"
    body = msg + attrs
    hdr = struct.pack("=IHHII", 16 + len(body), 28, 0, 1, 0)  # RTM_NEWNEIGH

    def send() -> None:
        s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        s.sendto(hdr + body, (port, 0))
        s.close()

    with entered(env.ns):
        send()
    env.settle()
    assert env.sync.counts.get("forged", 0) >= 1
    assert not any(ip == ipaddress.ip_address("192.0.2.77")
                   for (_, ip) in env.target.fib.neighbors)


def test_nexthop_objects_and_groups(env: Env) -> None:
    env.ip("nexthop", "add", "id", "1", "via", "192.0.2.2", "dev", env.m0)
    env.ip("nexthop", "add", "id", "2", "via", "192.0.2.66", "dev", env.m1)
    env.ip("nexthop", "add", "id", "10", "group", "1,2/2,3")
    env.ip("route", "add", "203.0.113.0/25", "nhid", "1")
    env.ip("route", "add", "203.0.113.128/25", "nhid", "10")
    env.ip("route", "add", "198.51.100.0/24", "nhid", "2")
    env.check()
    # a changed nexthop: its routes follow (one load-balance rewritten)
    env.ip("nexthop", "replace", "id", "1", "via", "192.0.2.3", "dev", env.m0)
    env.check()
    # a deleted nexthop takes its routes with it (no RTM_DELROUTE), a group loses it
    env.ip("nexthop", "del", "id", "2")
    env.check()
    assert (0, ipaddress.ip_network("198.51.100.0/24")) not in env.target.fib.routes
    env.ip("nexthop", "del", "id", "1")
    env.check()
    assert not env.vecroute()


def test_blackhole_unreachable_prohibit(env: Env) -> None:
    env.ip("route", "add", "blackhole", "203.0.113.0/26")
    env.ip("route", "add", "unreachable", "203.0.113.64/26")
    env.ip("route", "add", "prohibit", "203.0.113.128/26")
    env.ip("-6", "route", "add", "unreachable", "2001:db8:dead::/48")
    env.check()
    fib = env.target.fib
    assert fib.routes[(0, ipaddress.ip_network("203.0.113.64/26"))].kind == "unreachable"


def test_rfc5549_ipv4_via_ipv6(env: Env) -> None:
    env.ip("route", "add", "203.0.113.0/24", "via", "inet6", "fe80::2", "dev", env.m0)
    env.ip("nexthop", "add", "id", "5", "via", "fe80::3", "dev", env.m1)
    env.ip("route", "add", "198.51.100.0/24", "nhid", "5")
    env.check()
    fib = env.target.fib
    lb = fib.routes[(0, ipaddress.ip_network("203.0.113.0/24"))].lb
    key = fib.adjs.keys[fib.lbs.paths[lb][0]]
    assert (key.family, key.payload, key.ifx) == (6, 4, 0)


def test_addresses_and_neighbors(env: Env) -> None:
    fib = env.target.fib
    assert ipaddress.ip_interface("192.0.2.1/26") in fib.interfaces[0].addresses
    assert fib.routes[(0, ipaddress.ip_network("192.0.2.1/32"))].kind == "local"
    assert fib.routes[(0, ipaddress.ip_network("192.0.2.0/26"))].kind == "connected"
    env.ip("addr", "add", "198.51.100.1/24", "dev", env.m1)
    env.ip("neigh", "add", "192.0.2.2", "lladdr", "02:00:00:00:aa:02", "dev", env.m0,
           "nud", "reachable")
    env.ip("-6", "neigh", "add", "2001:db8:2::2", "lladdr", "02:00:00:00:aa:03", "dev",
           env.m1, "nud", "permanent")
    env.settle()
    assert fib.routes[(0, ipaddress.ip_network("198.51.100.0/24"))].kind == "connected"
    n = env.target.neigh.entries[(0, ipaddress.ip_address("192.0.2.2"))]
    assert n.origin == LINUX and n.mac == bytes.fromhex("02000000aa02")
    assert (1, ipaddress.ip_address("2001:db8:2::2")) in fib.neighbors
    env.ip("addr", "del", "198.51.100.1/24", "dev", env.m1)
    env.ip("neigh", "del", "192.0.2.2", "dev", env.m0)
    env.settle()
    assert (0, ipaddress.ip_network("198.51.100.0/24")) not in fib.routes
    assert (0, ipaddress.ip_address("192.0.2.2")) not in env.target.neigh.entries
    assert (0, ipaddress.ip_address("192.0.2.2")) not in fib.neighbors


def test_link_down_removes_ipv4_routes(env: Env) -> None:
    env.ip("route", "add", "203.0.113.0/24", "via", "192.0.2.66")
    env.ip("route", "add", "198.51.100.0/24", "via", "192.0.2.2")
    env.check()
    env.ip("link", "set", env.m1, "down")
    env.check()  # the kernel deleted 203.0.113.0/24 without a message
    assert (0, ipaddress.ip_network("203.0.113.0/24")) not in env.target.fib.routes
    assert env.sync.resyncs >= 2


def test_non_mirror_routes_ignored(env: Env) -> None:
    env.ip("route", "add", "203.0.113.0/24", "dev", "lo")
    env.ip("route", "add", "198.51.100.0/24", "via", "192.0.2.2")
    env.settle()
    assert (0, ipaddress.ip_network("203.0.113.0/24")) not in env.target.fib.routes
    assert env.sync.stats()["routes_ignored"].get("not-mirror", 0) >= 1
    assert env.sync.stats()["routes_ignored"].get("local", 0) >= 1  # the local table


def test_overflow_resync(env: Env) -> None:
    """A tiny receive buffer and a burst of routes: ENOBUFS, a resync, the right FIB."""
    import socket

    from vecroute.control.linux_nl import SO_RCVBUFFORCE

    env.sync.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 4096)
    lines = [f"route add 10.{i >> 8}.{i & 255}.0/24 via 192.0.2.2" for i in range(5000)]
    env.batch(lines)
    env.sync.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 128 << 20)
    env.check()
    st = env.sync.stats()
    assert st["messages"].get("enobufs", 0) >= 1 and st["resyncs"] >= 2
    assert len(env.vecroute()) == 5000


def test_reload_replaces_fib(env: Env) -> None:
    env.ip("route", "add", "203.0.113.0/24", "via", "192.0.2.2")
    env.check()
    cfg = parse_config({"interfaces": [
        {"name": "port0", "mac": MAC0, "addresses": []},
        {"name": "port1", "mac": MAC1, "addresses": []},
    ]})
    env.target.fib = Fib.from_config(cfg)
    env.sync.resync()
    env.check()
    assert ipaddress.ip_interface("192.0.2.1/26") in env.target.fib.interfaces[0].addresses


def test_many_routes(env: Env) -> None:
    """50K routes via two nexthop objects, then half deleted: the FIB equals the kernel."""
    env.ip("nexthop", "add", "id", "1", "via", "192.0.2.2", "dev", env.m0)
    env.ip("nexthop", "add", "id", "2", "via", "192.0.2.66", "dev", env.m1)
    lines = [f"route add 10.{i >> 8}.{i & 255}.0/24 nhid {1 + (i & 1)}" for i in range(50000)]
    env.batch(lines)
    env.check()
    env.batch([f"route del 10.{i >> 8}.{i & 255}.0/24" for i in range(0, 50000, 2)])
    env.check()
    assert len(env.vecroute()) == 25000


# -- what the graph does with them (the Router harness, scapy as the oracle) ---------------


def _router_with(*routes: tuple) -> object:
    from tests.conftest import Router

    r = Router()
    for prefix, kw in routes:
        r.fib.add_route(prefix, **kw)
    r.graph.swap_state(fib_state(r.fib))
    r.state = r.graph.state
    return r


@pytest.mark.parametrize("kind,code4,code6,counter", [
    ("unreachable", 1, 0, "route-unreachable"),
    ("prohibit", 13, 1, "route-prohibit"),
])
def test_reject_routes_answer_icmp(kind: str, code4: int, code6: int, counter: str) -> None:
    from scapy.layers.inet import ICMP, IP, UDP
    from scapy.layers.inet6 import ICMPv6DestUnreach, IPv6
    from scapy.layers.l2 import Ether

    from tests.conftest import H0, H0_IP4, H0_IP6, R0

    r = _router_with(("198.18.0.0/16", {"reject": kind}),
                     ("2001:db8:dead::/48", {"reject": kind}))
    p4 = Ether(src=H0, dst=R0) / IP(src=H0_IP4, dst="198.18.0.9", ttl=9) / UDP(dport=9)
    p6 = Ether(src=H0, dst=R0) / IPv6(src=H0_IP6, dst="2001:db8:dead::9") / UDP(dport=9)
    res = r.run([p4, p6])
    assert res.c(counter) == 2
    got = [Ether(t.data) for t in res.on("eth0")]
    icmp4 = [g for g in got if ICMP in g]
    icmp6 = [g for g in got if ICMPv6DestUnreach in g]
    assert len(icmp4) == 1 and (icmp4[0][ICMP].type, icmp4[0][ICMP].code) == (3, code4)
    assert icmp4[0][IP].dst == H0_IP4
    assert len(icmp6) == 1 and icmp6[0][ICMPv6DestUnreach].code == code6
    assert icmp6[0][IPv6].dst == H0_IP6


def test_rfc5549_rewrite_and_resolution() -> None:
    """An IPv4 route via an IPv6 next hop: ethertype 0x0800 towards the IPv6 neighbour's
    MAC; unresolved, the next hop is asked for with an NS (not ARP)."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import ICMPv6ND_NS
    from scapy.layers.l2 import ARP, Ether

    from tests.conftest import H0, H0_IP4, N1, R0, R1

    v6 = ipaddress.ip_address("fe80::2")
    r = _router_with(("198.18.10.0/24", {"via": [v6], "dev": "eth1"}))
    p = Ether(src=H0, dst=R0) / IP(src=H0_IP4, dst="198.18.10.1", ttl=9) / UDP(dport=9)
    res = r.run([p])
    ns = [Ether(t.data) for t in res.on("eth1")]
    assert ns and ICMPv6ND_NS in ns[0] and ns[0][ICMPv6ND_NS].tgt == "fe80::2"
    assert not any(ARP in x for x in ns)
    r.fib.add_neighbor(v6, bytes.fromhex(N1.replace(":", "")), "eth1")
    r.graph.swap_state(fib_state(r.fib))
    r.state = r.graph.state
    out = [Ether(t.data) for t in r.run([p]).on("eth1")]
    assert len(out) == 1
    e = out[0]
    assert (e.type, e.dst, e.src) == (0x0800, N1, R1)
    assert e[IP].dst == "198.18.10.1" and e[IP].ttl == 8
