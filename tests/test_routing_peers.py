"""The routing-daemon harness (tests/routing_peers.py), proved with the Linux kernel as
the router: BIRD 2 in one namespace, FRR in another, one veth between them.

    a: BIRD AS65001 198.51.100.1 2001:db8:1::1 --veth-- b: FRR AS65002 198.51.100.2 2001:db8:1::2

eBGP over IPv4 and over IPv6 and OSPFv2/OSPFv3 come up; what one daemon announces
lands in the other namespace's kernel table with the announcer as next hop; a
withdrawal removes it within a second.  Nothing here runs vecroute: these tests make
sure the peers themselves are trustworthy before they are put on vecroute's ports.
"""

from __future__ import annotations

import os
import time

import pytest
from routing_peers import (
    BgpNeighbor,
    Bird,
    Frr,
    OspfInterface,
    PeerError,
    RouterConfig,
    RoutingDaemon,
    kernel_route,
    link_local,
    nexthops,
    no_dad,
    wait_kernel_route,
)

from vecroute.io.netns import Lab

pytestmark = pytest.mark.netns

A4, B4 = "198.51.100.1", "198.51.100.2"
A6, B6 = "2001:db8:1::1", "2001:db8:1::2"
BIRD_V4, BIRD_V6 = "192.0.2.0/25", "2001:db8:a::/48"  # announced by BIRD
FRR_V4, FRR_V6 = "203.0.113.0/25", "2001:db8:b::/48"  # announced by FRR
WITHDRAW_WITHIN = 1.0  # seconds, from the withdraw command to the route gone in the peer
# BIRD recomputes OSPF routes once per `tick` (1 s, its minimum): a flushed LSA leaves
# BIRD's table up to a tick later, so OSPF withdrawals get one tick more
OSPF_WITHDRAW_WITHIN = 2.0


def _link(lab: Lab) -> tuple[Lab, str, str, str, str]:
    """Two namespaces joined by a veth, addressed: (lab, a, ifa, b, ifb)."""
    if os.geteuid() != 0:
        pytest.fail("live tests need root (network namespaces): run them as root, as CI does")
    a, b = lab.netns("a"), lab.netns("b")
    no_dad(a)
    no_dad(b)
    ifa, ifb = lab.veth(a, b)
    for ns, ifn, v4, v6 in ((a, ifa, A4, A6), (b, ifb, B4, B6)):
        lab.addr(ns, ifn, f"{v4}/24")
        lab.addr(ns, ifn, f"{v6}/64")
    return lab, a, ifa, b, ifb


@pytest.fixture
def link():
    """A fresh pair of namespaces per test (one daemon of a kind per namespace)."""
    with Lab("rp") as lab:
        yield _link(lab)


@pytest.fixture(scope="module")
def bgp_link():
    """The namespaces of the BGP tests, which share one pair of running daemons."""
    with Lab("rb") as lab:
        yield _link(lab)


def _gateways(route: dict) -> set[str | None]:
    return {g for g, _ in nexthops(route)}


@pytest.fixture(scope="module")
def bgp(bgp_link, tmp_path_factory):
    """BIRD and FRR with an IPv4 and an IPv6 eBGP session, each announcing a v4 and a v6
    prefix; both sessions Established on both sides before the tests run."""
    lab, a, ifa, b, ifb = bgp_link
    work = tmp_path_factory.mktemp("bgp")
    bird = Bird(
        lab,
        a,
        RouterConfig(
            "192.0.2.1",
            asn=65001,
            bgp=[BgpNeighbor(B4, 65002, local=A4), BgpNeighbor(B6, 65002, local=A6)],
            announce=[BIRD_V4, BIRD_V6],
        ),
        work / "bird",
    )
    frr = Frr(
        lab,
        b,
        RouterConfig(
            "192.0.2.2",
            asn=65002,
            bgp=[BgpNeighbor(A4, 65001, local=B4), BgpNeighbor(A6, 65001, local=B6)],
            announce=[FRR_V4, FRR_V6],
        ),
        work / "frr",
    )
    with bird, frr:
        t0 = time.monotonic()
        for peer in (A4, A6):
            frr.wait_bgp(peer)
        for peer in (B4, B6):
            bird.wait_bgp(peer)
        print(f"eBGP v4+v6 Established after {time.monotonic() - t0:.2f} s")
        yield bird, frr


def test_ebgp_sessions_established_both_sides(bgp):
    bird, frr = bgp
    assert bird.bgp_state(B4) == bird.bgp_state(B6) == "Established"
    assert frr.bgp_state(A4) == frr.bgp_state(A6) == "Established"


def test_ebgp_routes_reach_the_other_kernel(bgp_link, bgp):
    lab, a, ifa, b, ifb = bgp_link
    bird, frr = bgp
    ds = (bird, frr)
    # FRR installs what BIRD announced, via BIRD (v6: BIRD's link-local, as FRR prefers it)
    r4 = wait_kernel_route(b, BIRD_V4, gateways=[A4], daemons=ds)
    assert r4 and r4["protocol"] == "bgp" and nexthops(r4) == [(A4, ifb)], r4
    r6 = wait_kernel_route(b, BIRD_V6, daemons=ds)
    assert r6 and r6["protocol"] == "bgp", r6
    assert _gateways(r6) <= {A6, link_local(a, ifa)} and nexthops(r6)[0][1] == ifb, r6
    # and BIRD installs what FRR announced, via FRR
    r4 = wait_kernel_route(a, FRR_V4, gateways=[B4], daemons=ds)
    assert r4 and r4["protocol"] == "bird" and nexthops(r4) == [(B4, ifa)], r4
    r6 = wait_kernel_route(a, FRR_V6, daemons=ds)
    assert r6 and r6["protocol"] == "bird", r6
    assert _gateways(r6) <= {B6, link_local(b, ifb)} and nexthops(r6)[0][1] == ifa, r6
    # the daemons' own tables agree with the kernels
    assert bird.wait_route(FRR_V4) == [B4]
    assert frr.wait_route(BIRD_V4) == [A4]
    assert bird.wait_route(FRR_V6) and frr.wait_route(BIRD_V6)


@pytest.mark.parametrize("who", ["bird", "frr"])
def test_ebgp_withdrawal_removes_the_route_within_a_second(bgp_link, bgp, who):
    lab, a, ifa, b, ifb = bgp_link
    bird, frr = bgp
    speaker, ns = (bird, b) if who == "bird" else (frr, a)
    v4, v6 = (BIRD_V4, BIRD_V6) if who == "bird" else (FRR_V4, FRR_V6)
    for prefix in (v4, v6):
        wait_kernel_route(ns, prefix, daemons=bgp)
        t0 = time.monotonic()
        speaker.withdraw(prefix)
        wait_kernel_route(ns, prefix, present=False, timeout=WITHDRAW_WITHIN, daemons=bgp)
        gone = time.monotonic() - t0
        print(f"{who} withdrew {prefix}: gone from the peer's kernel after {gone * 1000:.0f} ms")
        # announcing again brings it back, over the same session (no restart)
        speaker.announce(prefix)
        wait_kernel_route(ns, prefix, timeout=5, daemons=bgp)
    assert bird.bgp_state(B4) == frr.bgp_state(A6) == "Established"


def test_ospf_v2_v3_full_and_routes_learnt(link, tmp_path):
    lab, a, ifa, b, ifb = link
    bird = Bird(
        lab,
        a,
        RouterConfig(
            "192.0.2.1",
            ospf=[OspfInterface(ifa, 2), OspfInterface(ifa, 3)],
            announce=["192.0.2.128/26", "2001:db8:c::/48"],
        ),
        tmp_path / "bird",
    )
    frr = Frr(
        lab,
        b,
        RouterConfig(
            "192.0.2.2",
            ospf=[OspfInterface(ifb, 2), OspfInterface(ifb, 3)],
            announce=["203.0.113.128/26", "2001:db8:d::/48"],
        ),
        tmp_path / "frr",
    )
    with bird, frr:
        t0 = time.monotonic()
        assert bird.wait_ospf_full(2, neighbor="192.0.2.2") == "Full"
        assert bird.wait_ospf_full(3, neighbor="192.0.2.2") == "Full"
        assert frr.wait_ospf_full(2, neighbor="192.0.2.1") == "Full"
        assert frr.wait_ospf_full(3, neighbor="192.0.2.1") == "Full"
        print(f"OSPFv2+v3 Full after {time.monotonic() - t0:.2f} s")
        ds = (bird, frr)
        r = wait_kernel_route(b, "192.0.2.128/26", gateways=[A4], daemons=ds)
        assert r and r["protocol"] == "ospf", r
        r = wait_kernel_route(b, "2001:db8:c::/48", gateways=[link_local(a, ifa)], daemons=ds)
        assert r and r["protocol"] == "ospf", r  # zebra marks OSPFv3 routes "ospf" too
        r = wait_kernel_route(a, "203.0.113.128/26", gateways=[B4], daemons=ds)
        assert r and r["protocol"] == "bird", r
        r = wait_kernel_route(a, "2001:db8:d::/48", gateways=[link_local(b, ifb)], daemons=ds)
        assert r and r["protocol"] == "bird", r
        # ~5 s: BIRD re-originates its router-LSA (now with the link to FRR) no sooner
        # than MinLSInterval (5 s, hard-coded) after the one it sent when it started
        print(f"OSPF routes in both kernels after {time.monotonic() - t0:.2f} s")
        # a withdrawn external is flushed from the other side
        for speaker, ns, prefix in (
            (bird, b, "192.0.2.128/26"),
            (frr, a, "203.0.113.128/26"),
            (bird, b, "2001:db8:c::/48"),
            (frr, a, "2001:db8:d::/48"),
        ):
            t1 = time.monotonic()
            speaker.withdraw(prefix)
            wait_kernel_route(ns, prefix, present=False, timeout=OSPF_WITHDRAW_WITHIN, daemons=ds)
            print(f"OSPF {speaker.kind} withdrew {prefix}: gone after "
                  f"{(time.monotonic() - t1) * 1000:.0f} ms")
        assert bird.ospf_neighbors(2) == {"192.0.2.2": "Full"}
        assert frr.ospf_neighbors(3) == {"192.0.2.1": "Full"}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_daemons_are_stopped_when_the_body_fails(link, tmp_path):
    """stop() runs on the way out of a failing with-block: no process, no socket left."""
    lab, a, ifa, b, ifb = link
    bird = Bird(lab, a, RouterConfig("192.0.2.1"), tmp_path / "bird")
    frr = Frr(lab, b, RouterConfig("192.0.2.2", ospf=[OspfInterface(ifb, 2)]), tmp_path / "frr")
    pids: list[int] = []
    with pytest.raises(RuntimeError, match="boom"), bird, frr:
        pids = [p.pid for d in (bird, frr) for p in d.procs.values()]
        assert len(pids) == 1 + len(frr.daemons()) == 1 + 3  # bird; zebra, staticd, ospfd
        raise RuntimeError("boom")
    assert not any(_alive(p) for p in pids), pids
    assert not bird.rundir.exists() and not frr.rundir.exists()
    assert kernel_route(b, "192.0.2.0/24") is None


def test_bad_config_is_a_clear_error(link, tmp_path):
    lab, a, ifa, b, ifb = link
    bird = Bird(lab, a, RouterConfig("not-an-id"), tmp_path)
    with pytest.raises(PeerError, match="bird config rejected"), bird:
        pass
    assert not bird.procs and not bird.rundir.exists()


def test_one_instance_of_a_kind_per_namespace(link, tmp_path):
    lab, a, ifa, b, ifb = link
    with Frr(lab, b, RouterConfig("192.0.2.2"), tmp_path / "one"):
        second = Frr(lab, b, RouterConfig("192.0.2.3"), tmp_path / "two")
        with pytest.raises(PeerError, match="already runs"), second:
            pass
        assert not second.procs



# the transit topology: (role, R's address, the peer's, their prefix length, R's v6, the peer's)
TRANSIT = (
    ("a", "198.51.100.1", "198.51.100.2", 24, "2001:db8:1::1", "2001:db8:1::2"),
    ("b", "203.0.113.1", "203.0.113.2", 24, "2001:db8:2::1", "2001:db8:2::2"),
    ("c", "192.0.2.129", "192.0.2.130", 25, "2001:db8:3::1", "2001:db8:3::2"),
)
TRANSIT_AS = {"r": 65000, "a": 65001, "b": 65002, "c": 65003}


@pytest.mark.parametrize("middle", ["bird", "frr"])
def test_transit_router_passes_routes_on_and_spreads_over_two_sessions(middle, tmp_path):
    """The shape of the linux-cp tests, with the kernel forwarding in the middle:

        A (BIRD) --- R (``middle``) ---+--- B (FRR)    B and C announce the same
                                       +--- C (FRR)    prefix: R holds it twice (ECMP)

    R passes B's route on to A with itself as next hop; A pings B's network through R;
    when C withdraws, R keeps the path through B."""
    if os.geteuid() != 0:
        pytest.fail("live tests need root (network namespaces): run them as root, as CI does")
    with Lab("rt") as lab:
        ns = {x: lab.netns(x) for x in ("r", "a", "b", "c")}
        for n in ns.values():
            no_dad(n)
        lab.run(ns["r"], ["sysctl", "-qw", "net.ipv4.ip_forward=1",
                          "net.ipv6.conf.all.forwarding=1"])
        for role, r4, p4, plen, r6, p6 in TRANSIT:
            pif, rif = lab.veth(ns[role], ns["r"])
            lab.addr(ns["r"], rif, f"{r4}/{plen}")
            lab.addr(ns["r"], rif, f"{r6}/64")
            lab.addr(ns[role], pif, f"{p4}/{plen}")
            lab.addr(ns[role], pif, f"{p6}/64")
        lab.addr(ns["a"], "lo", "192.0.2.1/32")
        for role in ("b", "c"):
            lab.addr(ns[role], "lo", "192.0.2.65/32")  # anycast: the same network behind both
        mid = (Bird if middle == "bird" else Frr)(
            lab, ns["r"],
            RouterConfig("198.51.100.1", asn=TRANSIT_AS["r"], bgp=[
                n for role, r4, p4, _, r6, p6 in TRANSIT
                for n in (BgpNeighbor(p4, TRANSIT_AS[role], local=r4),
                          BgpNeighbor(p6, TRANSIT_AS[role], local=r6))]),
            tmp_path / "r",
        )
        edge: dict[str, RoutingDaemon] = {}
        for (role, r4, p4, _, r6, p6), kind, net in zip(
            TRANSIT, (Bird, Frr, Frr), ("192.0.2.0/26", "192.0.2.64/26", "192.0.2.64/26"),
            strict=True,
        ):
            edge[role] = kind(lab, ns[role], RouterConfig(
                p4, asn=TRANSIT_AS[role], announce=[net],
                bgp=[BgpNeighbor(r4, 65000, local=p4), BgpNeighbor(r6, 65000, local=p6)],
            ), tmp_path / role)
        ds = (mid, *edge.values())
        with mid, edge["a"], edge["b"], edge["c"]:
            for _, _, p4, _, _, p6 in TRANSIT:
                mid.wait_bgp(p4)
                mid.wait_bgp(p6)
            route = wait_kernel_route(ns["r"], "192.0.2.64/26",
                                      gateways=["203.0.113.2", "192.0.2.130"], daemons=ds)
            assert route and len(nexthops(route)) == 2, route
            wait_kernel_route(ns["a"], "192.0.2.64/26", gateways=["198.51.100.1"], daemons=ds)
            wait_kernel_route(ns["b"], "192.0.2.0/26", gateways=["203.0.113.1"], daemons=ds)
            wait_kernel_route(ns["c"], "192.0.2.0/26", gateways=["192.0.2.129"], daemons=ds)
            ping = lab.run(ns["a"], ["ping", "-c", "1", "-W", "2", "-I", "192.0.2.1",
                                     "192.0.2.65"], check=False)
            assert " 0% packet loss" in ping, ping
            edge["c"].withdraw("192.0.2.64/26")
            wait_kernel_route(ns["r"], "192.0.2.64/26", gateways=["203.0.113.2"],
                              timeout=WITHDRAW_WITHIN, daemons=ds)
