"""Neighbour resolution (RFC 826 ARP, RFC 4861 NDP) on the control plane.

The data path never looks a neighbour up: it follows adjacencies. This table decides what
the adjacencies say. Entries move INCOMPLETE -> REACHABLE -> STALE -> PROBE -> FAILED with
Linux-like timers; packets for an unresolved next hop wait in a bounded per-neighbour queue
(Linux unres_qlen) and are re-injected when the answer arrives, so the first ping through a
cold router is not lost; when resolution fails they are re-injected into the ICMP error
node instead, which answers each with address / host unreachable (RFC 4861 7.2.2). A
changed MAC rewrites every adjacency of the neighbour at once (Fib.add_neighbor), and the
router swaps the new state in. Invalid NS/NA (RFC 4861 7.1.1, 7.1.2) are ignored and
counted by reason.
"""

from __future__ import annotations

import ipaddress
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from vecroute.control import neighbor_packets as P
from vecroute.control.config import format_mac
from vecroute.control.punts import ADDRESS_UNREACHABLE, IcmpError, Pending
from vecroute.fib.fib import Fib

log = logging.getLogger("vecroute.neighbors")

INCOMPLETE, REACHABLE, STALE, PROBE, FAILED, PERMANENT = (
    "incomplete",
    "reachable",
    "stale",
    "probe",
    "failed",
    "permanent",
)

NANO = 1_000_000_000


@dataclass
class Timers:
    reachable_ns: int = 30 * NANO  # Linux base_reachable_time
    delay_first_probe_ns: int = 5 * NANO
    retrans_ns: int = 1 * NANO
    max_probes: int = 3  # ucast_solicit / mcast_solicit
    queue_len: int = 100  # packets held per unresolved neighbour (unres_qlen)
    failed_hold_ns: int = 20 * NANO  # how long a failed entry is remembered


@dataclass
class Neighbor:
    ifx: int
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address
    mac: bytes | None = None
    state: str = INCOMPLETE
    changed: int = 0  # time of the last state change (ns)
    probes: int = 0
    next_probe: int = 0
    router: bool = False
    pending: deque = field(default_factory=deque)


@dataclass
class NeighborStats:
    requests_sent: int = 0
    replies_sent: int = 0
    learnt: int = 0
    mac_changes: int = 0
    queued: int = 0
    queue_drops: int = 0  # queue overflow (unres_qlen): the oldest packet dropped unanswered
    resolution_failed: int = 0  # its queued packets are answered (counter neighbor-failed)
    arp_not_for_us: int = 0  # requests for other hosts: merged if the sender is known
    ignored: int = 0  # every message not acted on, the invalid ND below included
    invalid_nd: dict[str, int] = field(default_factory=dict)  # RFC 4861 7.1 check -> count


class NeighborTable:
    """ARP and NDP state for every interface of one router."""

    def __init__(
        self,
        fib: Fib,
        send: Callable[[int, bytes], None],
        reinject: Callable[[list[Pending], IcmpError | None], None],
        timers: Timers | None = None,
    ) -> None:
        self.fib = fib
        self.send = send  # (ifx, frame)
        # (packets, None): forward them; (packets, error): answer them (Forwarder.reinject)
        self.reinject = reinject
        self.t = timers or Timers()
        self.entries: dict[tuple[int, object], Neighbor] = {}
        self.stats = NeighborStats()
        self.changed = False  # the FIB's adjacencies changed: the router swaps state
        for (ifx, ip), mac in fib.neighbors.items():
            self.entries[(ifx, ip)] = Neighbor(ifx, ip, mac, PERMANENT)

    # -- addresses of our interfaces -------------------------------------------------------

    def _ours(self, ifx: int, ip) -> bool:
        itf = self.fib.interfaces[ifx]
        if ip.version == 6 and ip == itf.link_local:
            return True
        return any(a.ip == ip for a in itf.addresses)

    def _source_for(self, ifx: int, target):
        itf = self.fib.interfaces[ifx]
        if target.version == 6:
            return itf.link_local
        same = [a.ip for a in itf.addresses if a.version == 4 and target in a.network]
        anyv4 = [a.ip for a in itf.addresses if a.version == 4]
        return (same or anyv4 or [ipaddress.IPv4Address(0)])[0]

    # -- learning ----------------------------------------------------------------------------

    def _set_mac(self, n: Neighbor, mac: bytes, state: str, now: int) -> None:
        if n.state == PERMANENT:
            return
        if n.mac != mac:
            if n.mac is not None:
                self.stats.mac_changes += 1
                log.info(
                    "neighbor %s on %s changed to %s",
                    n.ip,
                    self.fib.interfaces[n.ifx].name,
                    format_mac(mac),
                )
            else:
                self.stats.learnt += 1
            n.mac = mac
            self.fib.add_neighbor(n.ip, mac, self.fib.interfaces[n.ifx].name)
            self.changed = True
        n.state, n.changed, n.probes = state, now, 0
        if n.pending:
            pkts = list(n.pending)
            n.pending.clear()
            self.reinject(pkts, None)

    def learn(
        self,
        ifx: int,
        ip,
        mac: bytes,
        now: int,
        *,
        create: bool,
        confirmed: bool,
        override: bool = True,
    ) -> None:
        n = self.entries.get((ifx, ip))
        if n is None:
            if not create:
                return
            n = self.entries[(ifx, ip)] = Neighbor(ifx, ip)
        if n.state == PERMANENT:
            return
        if n.mac is not None and n.mac != mac and not override:
            if n.state == REACHABLE:
                n.state, n.changed = STALE, now  # RFC 4861 7.2.5: keep the old address
            return
        state = (
            REACHABLE
            if confirmed
            else (STALE if n.mac != mac or n.state in (INCOMPLETE, FAILED) else n.state)
        )
        self._set_mac(n, mac, state, now)

    def handle_arp(self, ifx: int, frame: bytes, now: int) -> None:
        a = P.parse_arp(frame)
        if a is None:
            self.stats.ignored += 1
            return
        if int(a.spa) == 0 or a.sha[0] & 1:
            self.stats.ignored += 1  # ARP probe (RFC 5227) or a bogus sender
            return
        for_us = self._ours(ifx, a.tpa)
        if not for_us and a.op == 1 and not a.gratuitous:
            self.stats.arp_not_for_us += 1
        # RFC 826 merge: every ARP packet updates an existing entry of its sender; a request
        # for us creates one. A reply creates nothing: we asked, so its entry exists (an
        # unsolicited reply is ignored, as Linux does with arp_accept=0)
        self.learn(
            ifx,
            a.spa,
            a.sha,
            now,
            create=for_us and a.op == 1 and not a.gratuitous,
            confirmed=a.op == 2 and for_us,
        )

    def handle_punts(self, punts: list[tuple], now: int) -> None:
        """What a Forwarder punted (``Forwarder.forward``): ARP, ND, packets to queue."""
        for p in punts:
            if p[0] == "arp":
                self.handle_arp(p[1], p[2], now)
            elif p[0] == "nd":
                self.handle_nd(p[1], p[2], now)
            elif p[0] == "pending":
                self.resolve(p[1], ipaddress.ip_address(p[2]), p[3], now)

    def handle_nd(self, ifx: int, frame: bytes, now: int) -> None:
        try:
            nd = P.parse_nd(frame)
        except P.InvalidNd as e:  # RFC 4861 7.1: silently discarded, counted by reason
            self.stats.ignored += 1
            self.stats.invalid_nd[e.reason] = self.stats.invalid_nd.get(e.reason, 0) + 1
            return
        itf = self.fib.interfaces[ifx]
        if nd.type == P.ND_NS and nd.target is not None:
            if not self._ours(ifx, nd.target):
                self.stats.ignored += 1
                return
            if nd.src.is_unspecified:  # DAD: answer to all-nodes, not solicited
                dst, dmac, flags = (
                    ipaddress.IPv6Address("ff02::1"),
                    P.multicast_mac(ipaddress.IPv6Address("ff02::1")),
                    P.NA_ROUTER | P.NA_OVERRIDE,
                )
            else:
                if nd.lladdr:
                    self.learn(ifx, nd.src, nd.lladdr, now, create=True, confirmed=False)
                dst, dmac = nd.src, nd.lladdr or nd.eth_src
                flags = P.NA_ROUTER | P.NA_SOLICITED | P.NA_OVERRIDE
            self.send(ifx, P.build_na(itf.mac, nd.target, dst, dmac, flags))
            self.stats.replies_sent += 1
        elif nd.type == P.ND_NA and nd.target is not None:
            mac = nd.lladdr or nd.eth_src
            self.learn(
                ifx,
                nd.target,
                mac,
                now,
                create=False,
                confirmed=bool(nd.flags & P.NA_SOLICITED),
                override=bool(nd.flags & P.NA_OVERRIDE),
            )
        else:
            self.stats.ignored += 1  # RS/RA/redirect: we advertise nothing yet

    # -- resolution ------------------------------------------------------------------------

    def _request(self, n: Neighbor, unicast: bool) -> None:
        itf = self.fib.interfaces[n.ifx]
        src = self._source_for(n.ifx, n.ip)
        if n.ip.version == 4:
            frame = P.build_arp(
                1, itf.mac, src, b"", n.ip, eth_dst=n.mac if unicast and n.mac else None
            )
        else:
            frame = P.build_ns(itf.mac, src, n.ip, n.mac if unicast and n.mac else None)
        self.send(n.ifx, frame)
        self.stats.requests_sent += 1

    def resolve(self, ifx: int, ip, packet: tuple | None, now: int) -> None:
        """A packet needs ``ip`` on ``ifx``: queue it and ask if not already asking."""
        n = self.entries.get((ifx, ip))
        if n is None or n.state == FAILED:
            n = self.entries[(ifx, ip)] = Neighbor(ifx, ip, changed=now)
        if packet is not None:
            if n.mac is not None and n.state != INCOMPLETE:
                # resolved, yet the data path still asks: a swap is on its way, or the FIB
                # was replaced without the neighbour. (Re)install it, so that the packet,
                # sent back after the swap, cannot come back again
                self.fib.add_neighbor(n.ip, n.mac, self.fib.interfaces[n.ifx].name)
                self.changed = True
                self.reinject([packet])
                return
            if len(n.pending) >= self.t.queue_len:
                n.pending.popleft()
                self.stats.queue_drops += 1
            n.pending.append(packet)
            self.stats.queued += 1
        if n.state == INCOMPLETE and n.probes == 0:
            n.probes, n.next_probe = 1, now + self.t.retrans_ns
            self._request(n, unicast=False)

    def tick(self, now: int) -> None:
        """Advance timers: retransmit, age, probe, fail."""
        for key, n in list(self.entries.items()):
            if n.state == INCOMPLETE and n.probes and now >= n.next_probe:
                if n.probes >= self.t.max_probes:
                    self._fail(n, now)
                else:
                    n.probes += 1
                    n.next_probe = now + self.t.retrans_ns
                    self._request(n, unicast=False)
            elif n.state == REACHABLE and now - n.changed >= self.t.reachable_ns:
                n.state, n.changed = STALE, now
            elif n.state == STALE and now - n.changed >= self.t.delay_first_probe_ns:
                n.state, n.changed, n.probes = PROBE, now, 1
                n.next_probe = now + self.t.retrans_ns
                self._request(n, unicast=True)
            elif n.state == PROBE and now >= n.next_probe:
                if n.probes >= self.t.max_probes:
                    self._fail(n, now)
                else:
                    n.probes += 1
                    n.next_probe = now + self.t.retrans_ns
                    self._request(n, unicast=True)
            elif n.state == FAILED and now - n.changed >= self.t.failed_hold_ns:
                del self.entries[key]

    def _fail(self, n: Neighbor, now: int) -> None:
        """RFC 4861 7.2.2: every packet still queued is answered with address (IPv4: host)
        unreachable; the ICMP error node counts it once as ``neighbor-failed``."""
        self.stats.resolution_failed += 1
        if n.pending:
            pkts = list(n.pending)
            n.pending.clear()
            self.reinject(pkts, ADDRESS_UNREACHABLE)
        n.state, n.changed = FAILED, now
        if n.mac is not None:
            n.mac = None
            try:
                self.fib.del_neighbor(n.ip, self.fib.interfaces[n.ifx].name)
            except ValueError:
                pass
            self.changed = True

    # -- operator commands -----------------------------------------------------------------

    def add_static(self, ifx: int, ip, mac: bytes, now: int) -> None:
        n = self.entries.get((ifx, ip)) or Neighbor(ifx, ip)
        self.entries[(ifx, ip)] = n
        n.state = INCOMPLETE  # allow the update below
        self._set_mac(n, mac, PERMANENT, now)
        n.state = PERMANENT

    def delete(self, ifx: int, ip) -> bool:
        n = self.entries.pop((ifx, ip), None)
        if n is None:
            return False
        if n.mac is not None:
            self.fib.del_neighbor(ip, self.fib.interfaces[ifx].name)
            self.changed = True
        return True

    def stat_rows(self) -> list[dict]:
        """The table's counters for ``ctl show neighbors stats``; every invalid-ND reason is
        listed, zero or not, so an operator sees what is checked."""
        st = self.stats
        rows = [
            {"stat": f, "count": getattr(st, f)}
            for f in (
                "requests_sent",
                "replies_sent",
                "learnt",
                "mac_changes",
                "queued",
                "queue_drops",
                "resolution_failed",
                "arp_not_for_us",
                "ignored",
            )
        ]
        rows += [
            {"stat": f"nd-invalid {r}", "count": st.invalid_nd.get(r, 0)}
            for r in P.ND_INVALID_REASONS
        ]
        return rows

    def rows(self) -> list[dict]:
        return [
            {
                "interface": self.fib.interfaces[n.ifx].name,
                "ip": str(n.ip),
                "mac": format_mac(n.mac) if n.mac else "",
                "state": n.state,
                "queued": len(n.pending),
            }
            for n in sorted(self.entries.values(), key=lambda n: (n.ifx, n.ip.version, int(n.ip)))
        ]
