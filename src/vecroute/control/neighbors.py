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

Any host on a port can make the router create entries (an ARP request or an NS for one of
its addresses, from a new source), so everything here is bounded as Linux bounds it
(``[neighbor_table]``, NeighborSettings): gc_thresh1/2/3 per family, a per-interface share,
a per-neighbour and a total packet queue, a probe budget. A full table first collects what
nobody routes through (failed entries, then entries not confirmed for 5 s, oldest first);
when everything is fresh it refuses the new entry (counted) but still answers the host.
The next hop of a route always gets an entry: any unused one makes room. Timers sit in a
heap, so a tick costs what is due, not the size of the table; collection scans are
bounded. A removed entry frees its host route, load-balance and adjacency (Fib reference
counts), so nothing a host makes the router create outlives the entry.

Entries come from three places: the configuration (removed when a reload drops them), the
operator (``ctl neighbor add``, kept across reloads) and the wire; ``adopt`` carries the
table across a reload into the new FIB.
"""

from __future__ import annotations

import heapq
import ipaddress
import logging
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from itertools import islice

from vecroute.config_types import NeighborConfig, NeighborSettings, format_mac
from vecroute.control import neighbor_packets as P
from vecroute.control.punts import ADDRESS_UNREACHABLE, IcmpError, Pending
from vecroute.fib.fib import Fib, RouteError
from vecroute.packet.batch import F_REINJECTED

log = logging.getLogger("vecroute.neighbors")

INCOMPLETE, REACHABLE, STALE, PROBE, FAILED, PERMANENT = (
    "incomplete",
    "reachable",
    "stale",
    "probe",
    "failed",
    "permanent",
)
CONFIG, OPERATOR, LEARNT = "config", "ctl", "learnt"  # where an entry came from

NANO = 1_000_000_000
FRESH_NS = 5 * NANO  # Linux neigh_forced_gc: entries updated this recently are kept
FORCED_GC_EVERY_NS = 5 * NANO  # above gc_thresh2 (at gc_thresh3: every FULL_GC_EVERY_NS)
FULL_GC_EVERY_NS = NANO // 10  # a flood cannot make every refused entry pay for a scan
GC_SCAN = 256  # entries one collection looks at, at most
PERIODIC_SCAN = 64  # entries one tick's collection looks at, at most
TIMERS_PER_TICK = 4096  # due timers one tick handles (the rest: next tick)
DEFER_NS = NANO // 10  # a probe the budget refused is tried again this much later
NEVER = -(2**62)


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
    origin: str = LEARNT
    updated: int = 0  # last time the neighbour was heard from (collection order)
    due: int | None = None  # its timer in the heap (None: none)


@dataclass
class NeighborStats:
    requests_sent: int = 0
    replies_sent: int = 0
    learnt: int = 0
    mac_changes: int = 0
    queued: int = 0
    queue_drops: int = 0  # a queue full (unres_qlen, queue_total): the packet dropped unanswered
    resolution_failed: int = 0  # its queued packets are answered (counter neighbor-failed)
    arp_not_for_us: int = 0  # requests for other hosts: merged if the sender is known
    ignored: int = 0  # every message not acted on, the invalid ND below included
    table_full: int = 0  # an entry refused: gc_thresh3 or per_interface reached, all fresh
    collected: int = 0  # entries removed to make room or because unused (gc)
    not_on_link: int = 0  # a solicitation from a source outside the port's subnets: no entry
    probes_deferred: int = 0  # a request the probe budget held back (sent later)
    reinject_loops: int = 0  # a re-injected packet punted again: dropped, not queued again
    invalid_nd: dict[str, int] = field(default_factory=dict)  # RFC 4861 7.1 check -> count


# every counter of NeighborStats, in declaration order (the invalid-ND dict listed apart)
STAT_FIELDS = tuple(f.name for f in fields(NeighborStats) if f.name != "invalid_nd")


class NeighborTable:
    """ARP and NDP state for every interface of one router."""

    def __init__(
        self,
        fib: Fib,
        send: Callable[[int, bytes], None],
        reinject: Callable[[list[Pending], IcmpError | None], None],
        settings: NeighborSettings | None = None,
    ) -> None:
        self.fib = fib
        self.send = send  # (ifx, frame)
        # (packets, None): forward them; (packets, error): answer them (Forwarder.reinject)
        self.reinject = reinject
        self.t = settings or NeighborSettings()
        self.entries: dict[tuple[int, object], Neighbor] = {}
        # entries that may be collected (not permanent), least recently heard from first
        # per (family, interface): the entries that may be collected (not permanent),
        # least recently heard from first; their sizes are what the limits count
        self._lru: dict[tuple[int, int], OrderedDict] = {}
        self._heap: list[tuple[int, int, tuple]] = []
        self._seq = 0
        self._queued = 0  # packets in every queue together
        self._tokens = float(self.t.probe_burst)
        self._tokens_at = NEVER
        self._last_gc: dict[tuple[int, int], int] = {}  # (family, ifx or -1) -> last run
        self._warned = NEVER
        self.stats = NeighborStats()
        self.changed = False  # the FIB's adjacencies changed: the router swaps state
        for (ifx, ip), mac in fib.neighbors.items():
            self._add(Neighbor(ifx, ip, mac, PERMANENT, origin=CONFIG))

    # -- bookkeeping ---------------------------------------------------------------------------

    def count(self, family: int) -> int:
        """Entries of one family that count against gc_thresh1/2/3: all but permanent
        ones (as in Linux since 4.19, the operator's entries are not limited)."""
        return sum(len(lru) for (f, _), lru in self._lru.items() if f == family)

    def on_interface(self, family: int, ifx: int) -> int:
        """Entries of one family on one interface (the number ``per_interface`` limits)."""
        return len(self._lru.get((family, ifx), ()))

    def _add(self, n: Neighbor) -> Neighbor:
        key = (n.ifx, n.ip)
        self.entries[key] = n
        if n.state != PERMANENT:
            self._lru.setdefault((n.ip.version, n.ifx), OrderedDict())[key] = None
        return n

    def _unlimit(self, n: Neighbor) -> None:
        """Out of the collection order and the limits (removed, or made permanent)."""
        lru = self._lru.get((n.ip.version, n.ifx))
        if lru is not None:
            lru.pop((n.ifx, n.ip), None)

    def _remove(self, n: Neighbor) -> None:
        """Forget an entry everywhere: its queue (dropped, counted), its FIB state."""
        key = (n.ifx, n.ip)
        if self.entries.pop(key, None) is None:
            return
        self._unlimit(n)
        if n.pending:
            self.stats.queue_drops += len(n.pending)
            self._queued -= len(n.pending)
            n.pending.clear()
        n.due = None
        if n.mac is not None or (n.ifx, n.ip) in self.fib.neighbors:
            try:
                self.fib.del_neighbor(n.ip, self.fib.interfaces[n.ifx].name)
            except (RouteError, IndexError):
                pass
            self.changed = True

    def _heard(self, n: Neighbor, now: int) -> None:
        n.updated = now
        lru = self._lru.get((n.ip.version, n.ifx))
        if lru is not None and (n.ifx, n.ip) in lru:
            lru.move_to_end((n.ifx, n.ip))

    def _deadline(self, n: Neighbor) -> int | None:
        if n.state in (INCOMPLETE, PROBE):
            return n.next_probe if n.probes or n.next_probe else None
        if n.state == REACHABLE:
            return n.changed + self.t.reachable_ns
        if n.state == STALE:
            return n.changed + self.t.delay_first_probe_ns
        if n.state == FAILED:
            return n.changed + self.t.failed_hold_ns
        return None

    def _schedule(self, n: Neighbor) -> None:
        due = self._deadline(n)
        if due == n.due:
            return
        n.due = due
        if due is not None:
            self._seq += 1
            heapq.heappush(self._heap, (due, self._seq, (n.ifx, n.ip)))

    def _collectable(self, n: Neighbor) -> bool:
        return n.state != PERMANENT and not self.fib.neighbor_in_use(n.ip, n.ifx)

    def _collect(self, family: int, ifx: int, now: int, want: int, force: bool) -> int:
        """Linux neigh_forced_gc on one interface: from its least recently heard entries
        (a bounded scan), remove up to ``want`` unused ones that failed or were not heard
        from for FRESH_NS (``force``: any unused one); returns how many."""
        lru = self._lru.get((family, ifx))
        removed = 0
        for key in list(islice(lru or (), GC_SCAN)):
            if removed >= want:
                break
            n = self.entries[key]
            if not self._collectable(n):
                continue
            if force or n.state == FAILED or now - n.updated >= FRESH_NS:
                self._remove(n)
                removed += 1
        self.stats.collected += removed
        return removed

    def _collect_family(self, family: int, now: int, want: int, force: bool) -> int:
        """Collect ``want`` entries of a family, the interfaces holding the most first: a
        flood on one port pays with its own entries, not another port's neighbours."""
        removed = 0
        order = sorted((k for k in self._lru if k[0] == family),
                       key=lambda k: len(self._lru[k]), reverse=True)
        for _, ifx in order:
            if removed >= want:
                break
            removed += self._collect(family, ifx, now, want - removed, force)
        return removed

    def _room(self, ifx: int, family: int, now: int, needed: bool) -> bool:
        """Whether a new entry may be created on ``ifx``, collecting first if the table or
        the interface's share is full (at most every FULL_GC_EVERY_NS, above gc_thresh2
        every FORCED_GC_EVERY_NS); a route's next hop (``needed``) may take the place of
        any unused entry."""
        t = self.t
        mine, total = self.on_interface(family, ifx), self.count(family)
        if mine >= t.per_interface:
            if now - self._last_gc.get((family, ifx), NEVER) >= FULL_GC_EVERY_NS:
                # down to 3/4 of the share (room for more than the next one solicitor)
                self._last_gc[(family, ifx)] = now
                self._collect(family, ifx, now, mine - t.per_interface * 3 // 4, False)
        elif total >= t.gc_thresh2:
            every = FULL_GC_EVERY_NS if total >= t.gc_thresh3 else FORCED_GC_EVERY_NS
            if now - self._last_gc.get((family, -1), NEVER) >= every:
                self._last_gc[(family, -1)] = now
                self._collect_family(family, now, total - t.gc_thresh2, False)
        while True:
            mine, total = self.on_interface(family, ifx), self.count(family)
            if total < t.gc_thresh3 and mine < t.per_interface:
                return True
            if not needed:
                break
            if mine >= t.per_interface:
                freed = self._collect(family, ifx, now, mine - t.per_interface + 1, True)
            else:
                freed = self._collect_family(family, now, total - t.gc_thresh3 + 1, True)
            if not freed:
                break
        self.stats.table_full += 1
        if now - self._warned >= 10 * NANO:
            self._warned = now
            log.warning("neighbour table overflow (IPv%d, %s): %d entries; new ones refused",
                        family, self.fib.interfaces[ifx].name, self.count(family))
        return False

    def _create(self, ifx: int, ip, now: int, needed: bool = False) -> Neighbor | None:
        if not self._room(ifx, ip.version, now, needed):
            return None
        return self._add(Neighbor(ifx, ip, changed=now, updated=now))

    # -- addresses of our interfaces -------------------------------------------------------

    def _ours(self, ifx: int, ip) -> bool:
        itf = self.fib.interfaces[ifx]
        if ip.version == 6 and ip == itf.link_local:
            return True
        return any(a.ip == ip for a in itf.addresses)

    def _on_link(self, ifx: int, ip) -> bool:
        """Whether ``ip`` can be a neighbour on ``ifx`` (a connected subnet, IPv6
        link-local): an entry for anything else would route nothing."""
        if ip.version == 6 and ip.is_link_local:
            return True
        return any(
            ip in a.network and ip != a.ip
            for a in self.fib.interfaces[ifx].addresses
            if a.version == ip.version
        )

    def _source_for(self, ifx: int, target):
        itf = self.fib.interfaces[ifx]
        if target.version == 6:
            return itf.link_local
        same = [a.ip for a in itf.addresses if a.version == 4 and target in a.network]
        anyv4 = [a.ip for a in itf.addresses if a.version == 4]
        return (same or anyv4 or [ipaddress.IPv4Address(0)])[0]

    # -- learning ----------------------------------------------------------------------------

    def _release(self, n: Neighbor) -> None:
        if n.pending:
            pkts = list(n.pending)
            self._queued -= len(pkts)
            n.pending.clear()
            self.reinject(pkts, None)

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
        n.state, n.changed, n.probes, n.next_probe = state, now, 0, 0
        self._heard(n, now)
        self._schedule(n)
        self._release(n)

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
            if not self._on_link(ifx, ip):
                self.stats.not_on_link += 1
                return
            n = self._create(ifx, ip, now)
            if n is None:
                return
        if n.state == PERMANENT:
            return
        if n.mac is not None and n.mac != mac and not override:
            if n.state == REACHABLE:
                n.state, n.changed = STALE, now  # RFC 4861 7.2.5: keep the old address
                self._schedule(n)
            return
        state = (
            REACHABLE
            if confirmed
            else (STALE if n.mac != mac or n.state in (INCOMPLETE, FAILED) else n.state)
        )
        if not confirmed and state == n.state and n.mac == mac:  # nothing new: timers run on
            self._heard(n, now)
            return
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
                # RFC 4861 7.2.3: an NS with a source link-layer address creates (STALE)
                # or updates the solicitor's entry; the answer needs no entry
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

    def _budget(self, now: int) -> bool:
        """The probe budget (probe_rate per second, probe_burst at once): a flood of new
        next hops cannot make the router broadcast at its own packet rate."""
        if self._tokens_at == NEVER:
            self._tokens_at = now
        self._tokens = min(
            float(self.t.probe_burst),
            self._tokens + (now - self._tokens_at) * self.t.probe_rate / NANO,
        )
        self._tokens_at = now
        if self._tokens < 1.0:
            self.stats.probes_deferred += 1
            return False
        self._tokens -= 1.0
        return True

    def _probe(self, n: Neighbor, now: int, unicast: bool) -> None:
        """Send the next request (if the budget allows; else try again shortly)."""
        if not self._budget(now):
            n.next_probe = now + DEFER_NS
            self._schedule(n)
            return
        n.probes += 1
        n.next_probe = now + self.t.retrans_ns
        self._schedule(n)
        itf = self.fib.interfaces[n.ifx]
        src = self._source_for(n.ifx, n.ip)
        dst_mac = n.mac if unicast and n.mac else None
        if n.ip.version == 4:
            frame = P.build_arp(1, itf.mac, src, b"", n.ip, eth_dst=dst_mac)
        else:
            frame = P.build_ns(itf.mac, src, n.ip, dst_mac)
        self.send(n.ifx, frame)
        self.stats.requests_sent += 1

    def resolve(self, ifx: int, ip, packet: tuple | None, now: int) -> None:
        """A packet needs ``ip`` on ``ifx``: queue it and ask if not already asking."""
        if isinstance(packet, Pending) and packet.flags & F_REINJECTED:
            # it was sent back once already and came back again (the FIB and the table
            # disagree, or its next hop changed meanwhile): dropped, never a loop
            self.stats.reinject_loops += 1
            return
        n = self.entries.get((ifx, ip))
        if n is not None and n.state == FAILED:
            self._remove(n)
            n = None
        if n is None:
            n = self._create(ifx, ip, now, needed=self.fib.neighbor_in_use(ip, ifx))
            if n is None:
                if packet is not None:
                    self.stats.queue_drops += 1
                return
        if packet is not None:
            if n.mac is not None and n.state != INCOMPLETE:
                # resolved, yet the data path still asks: a swap is on its way, or the FIB
                # was replaced without the neighbour. (Re)install it, so that the packet,
                # sent back after the swap, cannot come back again
                self.fib.add_neighbor(n.ip, n.mac, self.fib.interfaces[n.ifx].name)
                self.changed = True
                self.reinject([packet], None)
                return
            if n.pending and len(n.pending) >= self.t.queue_len:
                n.pending.popleft()  # unres_qlen: the oldest goes
                self._queued -= 1
                self.stats.queue_drops += 1
            if self._queued >= self.t.queue_total or self.t.queue_len == 0:
                self.stats.queue_drops += 1  # this one is not queued
            else:
                n.pending.append(packet)
                self._queued += 1
                self.stats.queued += 1
        if n.state == INCOMPLETE and n.probes == 0 and n.next_probe == 0:
            self._probe(n, now, unicast=False)

    def tick(self, now: int) -> None:
        """Advance the timers that are due (a heap: the cost is what is due), then
        collect a bounded number of unused entries when above gc_thresh1."""
        heap = self._heap
        done = 0
        while heap and heap[0][0] <= now and done < TIMERS_PER_TICK:
            due, _, key = heapq.heappop(heap)
            n = self.entries.get(key)
            if n is None or n.due != due:
                continue  # removed, or rescheduled since
            n.due = None
            done += 1
            self._expire(n, now)
        if len(heap) > 4 * len(self.entries) + 1024:  # stale heap items: rebuild
            self._heap = [(n.due, i, k) for i, (k, n) in enumerate(self.entries.items())
                          if n.due is not None]
            heapq.heapify(self._heap)
        for family in (4, 6):
            if self.count(family) > self.t.gc_thresh1:
                self._periodic_collect(family, now)

    def _periodic_collect(self, family: int, now: int) -> None:
        """Linux neigh_periodic_work: unused entries not heard from for gc_stale_time
        go (least recently heard first, PERIODIC_SCAN per interface and tick)."""
        for (f, _), lru in list(self._lru.items()):
            if f != family:
                continue
            for key in list(islice(lru, PERIODIC_SCAN)):
                n = self.entries[key]
                if now - n.updated < self.t.gc_stale_ns:
                    break  # the rest were heard from later
                if self._collectable(n):
                    self._remove(n)
                    self.stats.collected += 1
                else:
                    lru.move_to_end(key)  # in use: not a candidate, out of the way

    def _expire(self, n: Neighbor, now: int) -> None:
        """A timer is due: retransmit (multicast while incomplete, unicast when probing
        a known MAC), fail after max_probes, age, forget a failed entry."""
        if n.state in (INCOMPLETE, PROBE):
            if n.probes >= self.t.max_probes:
                self._fail(n, now)
            else:
                self._probe(n, now, unicast=n.state == PROBE)
        elif n.state == REACHABLE:
            n.state, n.changed = STALE, now
            self._schedule(n)
        elif n.state == STALE:
            n.state, n.changed, n.probes = PROBE, now, 0
            self._probe(n, now, unicast=True)
        elif n.state == FAILED:
            self._remove(n)

    def _fail(self, n: Neighbor, now: int) -> None:
        """RFC 4861 7.2.2: every packet still queued is answered with address (IPv4: host)
        unreachable; the ICMP error node counts it once as ``neighbor-failed``."""
        self.stats.resolution_failed += 1
        if n.pending:
            pkts = list(n.pending)
            self._queued -= len(pkts)
            n.pending.clear()
            self.reinject(pkts, ADDRESS_UNREACHABLE)
        n.state, n.changed = FAILED, now
        self._schedule(n)
        if n.mac is not None:
            n.mac = None
            try:
                self.fib.del_neighbor(n.ip, self.fib.interfaces[n.ifx].name)
            except RouteError:
                pass
            self.changed = True

    # -- operator commands, reloads ------------------------------------------------------------

    def add_static(self, ifx: int, ip, mac: bytes, now: int, origin: str = OPERATOR) -> None:
        """A permanent entry: never aged, never collected, not counted in the limits."""
        n = self.entries.get((ifx, ip))
        if n is None:
            n = self._add(Neighbor(ifx, ip, state=PERMANENT, changed=now, updated=now))
        self._unlimit(n)
        n.state = INCOMPLETE  # allow the update below
        self._set_mac(n, mac, PERMANENT, now)
        n.state, n.origin, n.due = PERMANENT, origin, None

    def delete(self, ifx: int, ip) -> bool:
        n = self.entries.get((ifx, ip))
        if n is None:
            return False
        self._remove(n)
        return True

    def adopt(self, fib: Fib, configured: list[NeighborConfig], now: int,
              settings: NeighborSettings | None = None) -> None:
        """A reload built ``fib`` from a new configuration: the table now follows it.
        Entries of the old file that the new one lacks are gone everywhere; entries of the
        new file are permanent; what the operator added and what was learnt is installed
        into the new FIB (else an entry would say reachable while the new adjacency waits
        for a MAC nobody asks for again)."""
        if settings is not None:  # limits apply to new entries; collection trims the rest
            self.t = settings
        new = {(fib.interface_index(c.interface), c.ip): c.mac for c in configured}
        for key, n in list(self.entries.items()):
            if n.origin == CONFIG and key not in new:
                self._remove(n)  # (from the old FIB: harmless, it is being replaced)
        self.fib = fib
        for (ifx, ip), mac in new.items():
            self.add_static(ifx, ip, mac, now, origin=CONFIG)
        for n in list(self.entries.values()):
            if n.mac is None or (n.ifx, n.ip) in new:
                continue
            try:
                fib.add_neighbor(n.ip, n.mac, fib.interfaces[n.ifx].name)
            except (RouteError, IndexError) as e:
                log.warning("reload: neighbour %s not kept: %s", n.ip, e)
                self._remove(n)
        self.changed = True

    def stat_rows(self) -> list[dict]:
        """The table's counters for ``ctl show neighbors stats``; every invalid-ND reason is
        listed, zero or not, so an operator sees what is checked."""
        st = self.stats
        rows = [{"stat": f, "count": getattr(st, f)} for f in STAT_FIELDS]
        rows += [{"stat": f"entries ipv{f}", "count": self.count(f)} for f in (4, 6)]
        rows.append({"stat": "queued now", "count": self._queued})
        rows += [
            {"stat": f"nd-invalid {r}", "count": st.invalid_nd.get(r, 0)}
            for r in P.ND_INVALID_REASONS
        ]
        return rows

    @property
    def queued_now(self) -> int:
        """Packets waiting in every resolution queue together."""
        return self._queued

    def state_counts(self) -> dict[tuple[int, str], int]:
        """Entries by (family, state), permanent ones included (the metrics' gauge); one
        pass over entries that ``[neighbor_table]`` bounds, nothing sorted or formatted."""
        out: dict[tuple[int, str], int] = {}
        for n in self.entries.values():
            key = (n.ip.version, n.state)
            out[key] = out.get(key, 0) + 1
        return out

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
