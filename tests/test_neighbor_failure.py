"""Live-mode neighbour resolution end to end: data path (Forwarder + graph) and table.

The Forwarder runs with in-memory ports, the NeighborTable takes its punts as the router
does, and everything that leaves is parsed with scapy. RFC 4861 7.2.2: when resolution
fails, every queued packet is answered with an ICMPv6 address unreachable (ICMP host
unreachable for IPv4, as Linux does), built by the graph's icmp-error nodes.
"""

from __future__ import annotations

import ipaddress
import pickle

import numpy as np
from conftest import (
    DST4_INCOMPLETE,
    DST6_INCOMPLETE,
    H0,
    H0_IP4,
    H0_IP6,
    R0,
    R0_IP4,
    R0_IP6,
    R1,
    assert_checksums,
    base_config,
)
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.inet6 import ICMPv6DestUnreach, ICMPv6EchoRequest, ICMPv6ND_NS, IPv6
from scapy.layers.l2 import ARP, Ether

from vecroute.control.config import parse_config
from vecroute.control.forwarder import Forwarder
from vecroute.control.neighbors import FAILED, INCOMPLETE, REACHABLE, STALE, NeighborTable
from vecroute.fib.fib import Fib
from vecroute.graph.counters import COUNTERS
from vecroute.packet.batch import M_LEN, M_OFF, reset_slot

S = 1_000_000_000
NH4, NH6 = "192.0.2.3", "2001:db8:2::3"  # next hops of the *_INCOMPLETE routes, on eth1


class Port:
    """An in-memory stand-in for a PacketSocket: frames to receive, frames sent."""

    def __init__(self) -> None:
        self.rx: list[bytes] = []
        self.tx: list[bytes] = []

    def recv_batch(self, buf, meta, ts, start, max_packets, rx_if) -> int:
        n = 0
        while self.rx and n < max_packets:
            f = self.rx.pop(0)
            reset_slot(meta, start + n, rx_if, len(f))
            o = int(meta[M_OFF, start + n])
            buf[o : o + len(f)] = np.frombuffer(f, dtype=np.uint8)
            ts[start + n] = 0
            n += 1
        return n

    def send_batch(self, buf, meta, index, count) -> int:
        for i in index[:count]:
            o = int(meta[M_OFF, i])
            self.tx.append(buf[o : o + int(meta[M_LEN, i])].tobytes())
        return count


class Rig:
    """One worker's Forwarder and the control plane's table, wired as router.py does; with
    ``workers`` the table lives in a "parent" with a port-less Forwarder of its own."""

    def __init__(self, icmp: dict | None = None, workers: bool = False) -> None:
        cfg = parse_config(base_config(icmp=icmp or {"rate": 1000, "burst": 1000}))
        self.names = [i.name for i in cfg.interfaces]
        self.ports = [Port() for _ in cfg.interfaces]
        self.fib = Fib.from_config(cfg)
        self.worker = Forwarder(self.fib, self.ports, 64)
        self.workers = workers
        if workers:  # the parent holds the table and re-injects through its own forwarder
            self.parent_fib = Fib.from_config(cfg)
            self.fwd = Forwarder(self.parent_fib, [], 64)
        else:
            self.parent_fib, self.fwd = self.fib, self.worker
        self.direct: list[tuple[int, bytes]] = []  # the parent's sends (no rings)
        self.ctl_sent: list[tuple[int, bytes]] = []  # ARP / NS from the control plane
        self.table = NeighborTable(
            self.parent_fib, lambda ifx, f: self.ctl_sent.append((ifx, f)), self.fwd.reinject
        )

    def counters(self) -> dict[str, int]:
        c = self.worker.graph.state.counters.copy()
        if self.workers:
            c += self.fwd.graph.state.counters
        return {k.name: int(v) for k, v in zip(COUNTERS, c, strict=True)}

    def receive(self, ifname: str, *frames, now: int = 0) -> None:
        self.ports[self.names.index(ifname)].rx.extend(bytes(f) for f in frames)
        self.step(now)

    def step(self, now: int) -> None:
        """One pass of the router loop: worker batch, punts to the table, its re-injects."""
        n, punts = self.worker.forward(now)
        if self.workers:
            punts = pickle.loads(pickle.dumps(punts))  # they cross a socket
        self.table.handle_punts(punts, now)
        self._commit()
        while self.fwd.inject:
            _, punts = self.fwd.forward(now, lambda ifx, f: self.direct.append((ifx, f)))
            self.table.handle_punts(punts, now)
            self._commit()

    def _commit(self) -> None:
        if self.table.changed:
            self.fwd.refresh()
            self.table.changed = False

    def tick_until(self, t_end: int) -> None:
        for t in range(1, t_end + 1):
            self.table.tick(t * S)
            self._commit()
            self.step(t * S)

    def sent(self, ifname: str) -> list[Ether]:
        ifx = self.names.index(ifname)
        frames = self.ports[ifx].tx + [f for i, f in self.direct if i == ifx]
        return [Ether(f) for f in frames]


def _udp4(k: int) -> Ether:
    return (
        Ether(src=H0, dst=R0)
        / IP(src=H0_IP4, dst=DST4_INCOMPLETE, ttl=64, id=100 + k)
        / UDP(sport=4000 + k, dport=9)
        / (bytes([k]) * 40)
    )


def _echo6(k: int) -> Ether:
    return (
        Ether(src=H0, dst=R0)
        / IPv6(src=H0_IP6, dst=DST6_INCOMPLETE, hlim=64)
        / ICMPv6EchoRequest(id=7, seq=k, data=bytes([k]) * 32)
    )


def _run_to_failure(rig: Rig, pkts4, pkts6) -> None:
    rig.receive("eth0", *pkts4, *pkts6)
    keys = [(1, ipaddress.ip_address(nh)) for nh, p in ((NH4, pkts4), (NH6, pkts6)) if p]
    assert all(rig.table.entries[k].state == INCOMPLETE for k in keys)
    assert rig.sent("eth0") == []  # waiting, not answered yet
    rig.tick_until(4)
    assert all(rig.table.entries[k].state == FAILED for k in keys)


def _check_unreachables(rig: Rig, pkts4, pkts6) -> None:
    out = rig.sent("eth0")
    assert len(out) == len(pkts4) + len(pkts6)
    errs4 = [p for p in out if IP in p]
    errs6 = [p for p in out if IPv6 in p]
    for e in errs4:
        assert e.dst == H0 and e.src == R0
        assert e[IP].src == R0_IP4 and e[IP].dst == H0_IP4 and e[IP].proto == 1
        assert e[ICMP].type == 3 and e[ICMP].code == 1  # host unreachable
        assert_checksums(e)
    for e in errs6:
        assert e.dst == H0 and e.src == R0
        assert e[IPv6].src == R0_IP6 and e[IPv6].dst == H0_IP6 and e[IPv6].nh == 58
        assert e[ICMPv6DestUnreach].type == 1 and e[ICMPv6DestUnreach].code == 3
        assert_checksums(e)
    # each error quotes one queued packet as it was received (nothing changed, TTL too)
    assert sorted(bytes(e)[14 + 28 :] for e in errs4) == sorted(bytes(p[IP]) for p in pkts4)
    assert sorted(bytes(e)[14 + 48 :] for e in errs6) == sorted(bytes(p[IPv6]) for p in pkts6)


def test_failed_resolution_answers_queued_packets_with_unreachable():
    rig = Rig()
    pkts4 = [_udp4(k) for k in range(3)]
    pkts6 = [_echo6(k) for k in range(2)]
    _run_to_failure(rig, pkts4, pkts6)
    # three ARP requests and three NS for the next hops, from the control plane
    asked = [Ether(f) for i, f in rig.ctl_sent if i == 1]
    assert sum(ARP in p and p[ARP].pdst == NH4 for p in asked) == 3
    assert sum(ICMPv6ND_NS in p and p[ICMPv6ND_NS].tgt == NH6 for p in asked) == 3
    _check_unreachables(rig, pkts4, pkts6)
    c = rig.counters()
    assert c["neighbor-queued"] == 5 and c["neighbor-failed"] == 5
    assert c["icmp-error-sent"] == 5 and c["ip4-forwarded"] == 0
    assert rig.table.stats.queue_drops == 0  # answered, counted once as neighbor-failed
    # nothing is queued again or looping: the table holds nothing, nothing more leaves
    assert all(not n.pending for n in rig.table.entries.values()) and len(rig.fwd.inject) == 0
    rig.tick_until(8)
    assert len(rig.sent("eth0")) == 5 and rig.counters()["neighbor-failed"] == 5


def test_unreachable_respects_the_icmp_rate_limit():
    rig = Rig(icmp={"rate": 1, "burst": 2})
    pkts4 = [_udp4(k) for k in range(5)]
    _run_to_failure(rig, pkts4, [])
    out = rig.sent("eth0")
    assert len(out) == 2 and all(p[ICMP].type == 3 and p[ICMP].code == 1 for p in out)
    c = rig.counters()
    assert c["neighbor-failed"] == 5  # every queued packet died once, for that reason
    assert c["icmp-error-sent"] == 2 and c["icmp-rate-limited"] == 3


def test_unreachable_is_not_sent_for_an_icmp_error():
    # RFC 1812 4.3.2.7 / RFC 4443 2.4(e): an ICMP error waiting for a neighbour that
    # fails is dropped, never answered with another error
    rig = Rig()
    err = (
        Ether(src=H0, dst=R0)
        / IP(src=H0_IP4, dst=DST4_INCOMPLETE)
        / ICMP(type=3, code=3)
        / IP(src=DST4_INCOMPLETE, dst=H0_IP4)
        / UDP(sport=9, dport=4000)
    )
    _run_to_failure(rig, [err], [])
    assert rig.sent("eth0") == []
    c = rig.counters()
    assert c["neighbor-failed"] == 1 and c["icmp-error-suppressed"] == 1
    assert c["icmp-error-sent"] == 0


def test_workers_parent_answers_through_its_own_forwarder():
    rig = Rig(workers=True)
    pkts4, pkts6 = [_udp4(0)], [_echo6(0)]
    _run_to_failure(rig, pkts4, pkts6)
    assert rig.ports[0].tx == []  # the worker's rings sent nothing: the parent did
    _check_unreachables(rig, pkts4, pkts6)
    assert rig.counters()["neighbor-failed"] == 2


def test_resolved_neighbor_flushes_the_queue():
    rig = Rig()
    pkts4 = [_udp4(k) for k in range(2)]
    rig.receive("eth0", *pkts4)
    reply = Ether(src="02:00:00:00:bb:03", dst=R1) / ARP(
        op=2, hwsrc="02:00:00:00:bb:03", psrc=NH4, hwdst=R1, pdst="192.0.2.1"
    )
    rig.receive("eth1", reply, now=S // 2)
    assert rig.table.entries[(1, ipaddress.ip_address(NH4))].state == REACHABLE
    out = rig.sent("eth1")
    assert [p[IP].id for p in out] == [100, 101] and all(p.dst == "02:00:00:00:bb:03" for p in out)
    assert rig.counters()["neighbor-failed"] == 0


def test_arp_request_not_for_us_reaches_the_table_and_merges():
    # RFC 826: a known sender's new MAC is merged even from a request for another host
    rig = Rig()
    rig.receive("eth0", _udp4(0))
    first = Ether(src="02:00:00:00:bb:03", dst=R1) / ARP(
        op=2, hwsrc="02:00:00:00:bb:03", psrc=NH4, hwdst=R1, pdst="192.0.2.1"
    )
    rig.receive("eth1", first)
    req = Ether(src="02:00:00:00:bb:04", dst="ff:ff:ff:ff:ff:ff") / ARP(
        op=1, hwsrc="02:00:00:00:bb:04", psrc=NH4, pdst="192.0.2.50"
    )
    rig.receive("eth1", req, now=S)
    n = rig.table.entries[(1, ipaddress.ip_address(NH4))]
    assert n.mac == bytes.fromhex("02000000bb04") and n.state == STALE
    rig.receive("eth0", _udp4(1), now=S)
    assert rig.sent("eth1")[-1].dst == "02:00:00:00:bb:04"  # the adjacency follows
    c = rig.counters()
    assert c["arp-not-for-us"] == 0 and c["arp-punt"] == 2
