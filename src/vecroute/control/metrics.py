"""Prometheus metrics of the live router (``[metrics] listen``; docs/metrics.md).

:class:`RouterCollector` builds every family at scrape time from what ``ctl show`` reads,
and prometheus-client turns them into the exposition format. It runs on the control
plane's event loop (the HTTP server in ``metrics_http`` calls it there), the thread that
owns the FIB and the neighbour table, so those are never read while they change. What the
workers write (counters, interface and node statistics, their loop's control words,
firewall state counters) are numpy arrays read without stopping them, as ``ctl show``
does: a value is at most one batch old.

A scrape costs O(interfaces + counters + nodes + workers + FIB tables + neighbour
entries): route counts come from the tries' per-table counts (``Lpm.count``), never from
a walk of the routes (a full table is a million of them), and neighbour entries are
bounded by ``[neighbor_table]``.

Naming: ``vecroute_`` families without a ``worker`` label describe the whole router
(every worker summed, as ``ctl show``); ``vecroute_worker_*`` families have one series per
worker. Never add the two together.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import numpy as np
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from vecroute.control.neighbor_packets import ND_INVALID_REASONS
from vecroute.control.neighbors import STAT_FIELDS, NeighborTable
from vecroute.fib.fib import Fib
from vecroute.graph import counters as C
from vecroute.graph.counters import COUNTERS
from vecroute.graph.cycles import cycles_per_second
from vecroute.graph.state import (
    IFS_DROPS,
    IFS_PUNTS,
    IFS_RX_BYTES,
    IFS_RX_PKTS,
    IFS_TX_BYTES,
    IFS_TX_PKTS,
    NS_CALLS,
    NS_CLOCKS,
    NS_PACKETS,
)
from vecroute.io.af_packet_ring import S_RX_KERNEL_DROPS, S_RX_PACKETS
from vecroute.io.channel import R_DROPS
from vecroute.packet.node_ids import NODE_NAMES

P = "vecroute_"


def _version() -> str:
    try:
        return importlib.metadata.version("vecroute")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


VERSION = _version()

# if_stats column -> (name, help): packets and bytes counted where they pass
INTERFACE_STATS = (
    (IFS_RX_PKTS, "interface_rx_packets", "Frames received on the interface."),
    (IFS_RX_BYTES, "interface_rx_bytes", "Bytes of the frames received on the interface."),
    (IFS_TX_PKTS, "interface_tx_packets", "Frames sent on the interface."),
    (IFS_TX_BYTES, "interface_tx_bytes", "Bytes of the frames sent on the interface."),
    (IFS_DROPS, "interface_drops",
     "Packets received on the interface that were dropped (any reason)."),
    (IFS_PUNTS, "interface_punts",
     "Packets received on the interface that were punted to the control plane."),
)

# NeighborStats field -> help (every field must be here: test_metrics checks)
NEIGHBOR_HELP = {
    "requests_sent": "ARP requests and Neighbour Solicitations sent.",
    "replies_sent": "ARP replies and Neighbour Advertisements sent by the control plane.",
    "learnt": "Neighbour entries learnt from the network.",
    "mac_changes": "Neighbour entries whose MAC address changed.",
    "queued": "Packets queued while their next hop was being resolved.",
    "queue_drops": "Queued packets dropped unanswered because a queue was full.",
    "resolution_failed": "Neighbour resolutions that failed (queued packets answered "
                         "with unreachable).",
    "arp_not_for_us": "ARP requests for other hosts (merged if the sender is known).",
    "ignored": "ARP/ND messages not acted on (the invalid ND messages included).",
    "table_full": "Neighbour entries refused because the table or the interface's share "
                  "was full.",
    "collected": "Neighbour entries removed by garbage collection.",
    "not_on_link": "Solicitations from sources outside the port's subnets (no entry made).",
    "probes_deferred": "ARP requests / NS held back by the probe budget (sent later).",
    "reinject_loops": "Re-injected packets punted again and dropped.",
}
NEIGHBOR_STATES = ("incomplete", "reachable", "stale", "probe", "failed", "permanent")

# firewall ctl word (FC_NAMES) -> (family, help)
FIREWALL_COUNTERS = {
    "created": ("firewall_states_created", "Dynamic firewall states created."),
    "expired": ("firewall_states_expired", "Expired dynamic firewall states reclaimed."),
    "evicted": ("firewall_states_evicted",
                "Embryonic firewall states evicted to make room (table full)."),
    "early-expired": ("firewall_states_early_expired",
                      "Expired firewall states whose last lifetime was adaptively shortened."),
    "full-drops": ("firewall_state_full_drops",
                   "New flows dropped because max_states live states existed."),
    "capacity-drops": ("firewall_state_capacity_drops",
                       "New flows dropped while the state table waited to grow."),
    "lookups": ("firewall_state_lookups", "Dynamic state lookups."),
    "hits": ("firewall_state_hits", "Packets that matched a dynamic state."),
}

# worker row key -> (family, help, counter?)
WORKER_ROW = (
    ("batches", "worker_batches", "Batches the worker's loop ran.", True),
    ("packets", "worker_packets", "Packets that entered the worker's graph (received + "
     "injected).", True),
    ("generated", "worker_generated_packets", "Packets the graph built itself (ARP/NS "
     "requests, fragments, copies to punt).", True),
    ("sleeps", "worker_sleeps", "poll(2) calls in which the idle worker slept.", True),
    ("punted", "worker_punts", "Records the worker published on its punt ring.", True),
    ("entries", "worker_loop_entries", "Calls from Python into the compiled loop (swaps, "
     "commands, firewall state growth).", True),
    ("outside_slow", "worker_slow_returns", "Returns to Python that kept the worker out of "
     "its loop for more than 10 ms (waiting for the GIL, serving calls).", True),
    ("punt_queue", "worker_punt_queue_records", "Records waiting in the punt ring now.",
     False),
    ("inject_queue", "worker_inject_queue_records", "Records waiting in the inject ring now.",
     False),
)


class MetricsSource(Protocol):
    """What the collector reads (a LiveRouter; the tests build one without ports)."""

    fib: Fib
    neigh: NeighborTable
    workers: Sequence[Any]  # DataPlaneWorker: index, state, row(), graph.firewall, inject
    started_at: float  # time.time() when the router started
    reloads: dict[str, int]  # "ok" / "failed" -> count
    last_reload_ok: float  # time.time() of the last successful (re)load


def worker_counters(w: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Copies of one worker's counters, interface and node statistics; the inject ring
    overflows the control plane counts are added to its counters (as ``Router.stats``)."""
    st = w.state
    counters = st.counters.copy()
    counters[C.C_INJECT_QUEUE_FULL] += int(w.inject.ctl[R_DROPS])
    return counters, st.if_stats.copy(), st.node_stats.copy()


def _counter(name: str, doc: str, labels: Sequence[str] = ()) -> CounterMetricFamily:
    return CounterMetricFamily(P + name, doc, labels=labels)


def _gauge(name: str, doc: str, labels: Sequence[str] = (), unit: str = "") -> GaugeMetricFamily:
    return GaugeMetricFamily(P + name, doc, labels=labels, unit=unit)


class RouterCollector(Collector):
    """Every vecroute family, built from the router at each scrape (see the module doc)."""

    def __init__(self, router: MetricsSource) -> None:
        self.router = router

    def describe(self) -> list:
        return []  # families depend on the router (a firewall or not): no describe-time call

    def collect(self) -> Iterator:
        r = self.router
        workers = list(r.workers)
        per = [worker_counters(w) for w in workers]
        counters = np.sum([p[0] for p in per], axis=0)
        if_stats = np.sum([p[1] for p in per], axis=0)
        node_stats = np.sum([p[2] for p in per], axis=0)
        names = [itf.name for itf in r.fib.interfaces][: if_stats.shape[0]]
        yield from self._info(r)
        yield from self._interfaces(r, names, if_stats)
        yield from self._counters(counters)
        yield from self._nodes(node_stats)
        yield from self._routes(r.fib)
        yield from self._neighbors(r.neigh)
        yield from self._firewall(workers)
        yield from self._workers(workers, per, names)
        yield from self._sockets(workers)

    def _sockets(self, workers: list) -> Iterator:
        """The kernel's side of the ports: what each ring took and what the kernel dropped
        because it was full (a data ring dropping while its control ring does not is an
        overload the router's own traffic survives)."""
        rx = _counter("socket_rx_packets", "Batch slots a packet socket's RX ring filled, "
                      "per worker, interface and ring (data; control: frames for the router).",
                      ["worker", "interface", "ring"])
        drops = _counter("socket_rx_kernel_drops", "Frames the kernel dropped because the "
                         "RX ring was full (PACKET_STATISTICS tp_drops).",
                         ["worker", "interface", "ring"])
        for w in workers:
            for sock in getattr(w, "socks", ()):
                for ring, one in sock.rings():
                    st = one.stats
                    labels = [str(w.index), sock.ifname, ring]
                    rx.add_metric(labels, int(st[S_RX_PACKETS]))
                    drops.add_metric(labels, int(st[S_RX_KERNEL_DROPS]))
        yield rx
        yield drops

    def _info(self, r: MetricsSource) -> Iterator:
        info = InfoMetricFamily(P + "build", "vecroute's version.")
        info.add_metric([], {"version": VERSION})
        yield info
        g = _gauge("start_time_seconds", "When the router started (Unix time); a restart "
                   "shows as a change.")
        g.add_metric([], r.started_at)
        yield g
        c = _counter("config_reloads", "Configuration reloads (SIGHUP) by result.", ["result"])
        for result in ("ok", "failed"):
            c.add_metric([result], r.reloads.get(result, 0))
        yield c
        g = _gauge("config_last_reload_success_timestamp_seconds",
                   "When the running configuration was loaded (Unix time).")
        g.add_metric([], r.last_reload_ok)
        yield g
        g = _gauge("cycle_counter_hertz", "Rate of the CPU cycle counter behind the node "
                   "clocks (divide clocks by it for seconds).")
        g.add_metric([], cycles_per_second())
        yield g

    def _interfaces(self, r: MetricsSource, names: list[str], if_stats: np.ndarray) -> Iterator:
        info = InfoMetricFamily(P + "interface", "The interface's MAC address and FIB table.",
                                labels=["interface"])
        mtu = _gauge("interface_mtu_bytes", "The interface's L3 MTU.", ["interface"])
        for itf in r.fib.interfaces[: len(names)]:
            info.add_metric([itf.name], {"mac": ":".join(f"{b:02x}" for b in itf.mac),
                                         "table": str(itf.table)})
            mtu.add_metric([itf.name], itf.mtu)
        yield info
        yield mtu
        for col, name, doc in INTERFACE_STATS:
            c = _counter(name, doc, ["interface"])
            for i, n in enumerate(names):
                c.add_metric([n], int(if_stats[i, col]))
            yield c

    def _counters(self, counters: np.ndarray) -> Iterator:
        drops = _counter("drops", "Packets dropped, by reason (docs/counters.md) and the "
                         "node that dropped them.", ["reason", "node"])
        events = _counter("events", "Data-path events, by counter (docs/counters.md) and "
                          "the node that counted them.", ["event", "node"])
        for i, c in enumerate(COUNTERS):
            (drops if c.kind == "drop" else events).add_metric([c.name, c.node],
                                                               int(counters[i]))
        yield drops
        yield events

    def _nodes(self, node_stats: np.ndarray) -> Iterator:
        calls = _counter("node_calls", "Calls of the graph node (one per frame it ran on).",
                         ["node"])
        pkts = _counter("node_packets", "Packets the graph node processed (VPP's vectors).",
                        ["node"])
        clocks = _counter("node_clocks", "CPU cycles spent in the graph node.", ["node"])
        for n, name in enumerate(NODE_NAMES):
            calls.add_metric([name], int(node_stats[n, NS_CALLS]))
            pkts.add_metric([name], int(node_stats[n, NS_PACKETS]))
            clocks.add_metric([name], int(node_stats[n, NS_CLOCKS]))
        yield calls
        yield pkts
        yield clocks

    def _routes(self, fib: Fib) -> Iterator:
        g = _gauge("routes", "Routes in the FIB by table and family (connected, local, "
                   "neighbour and SRv6 entries included, as ctl show routes).",
                   ["table", "family"])
        for fam in (4, 6):
            lpm = fib.lpm[fam]
            for tid in lpm.table_ids:  # per-table counts: O(tables), no walk
                g.add_metric([str(tid), f"ipv{fam}"], lpm.count(tid))
        yield g

    def _neighbors(self, neigh: NeighborTable) -> Iterator:
        g = _gauge("neighbors", "Neighbour (ARP/NDP) entries by family and state.",
                   ["family", "state"])
        counts = neigh.state_counts()
        for fam in (4, 6):
            for state in sorted(set(NEIGHBOR_STATES) | {s for f, s in counts if f == fam}):
                g.add_metric([f"ipv{fam}", state], counts.get((fam, state), 0))
        yield g
        g = _gauge("neighbor_queued_packets",
                   "Packets waiting for their next hop to be resolved now.")
        g.add_metric([], neigh.queued_now)
        yield g
        st = neigh.stats
        for f in STAT_FIELDS:
            c = _counter(f"neighbor_{f}", NEIGHBOR_HELP.get(f, f.replace("_", " ") + "."))
            c.add_metric([], getattr(st, f))
            yield c
        c = _counter("neighbor_nd_invalid", "Invalid Neighbour Solicitations/Advertisements "
                     "ignored, by the RFC 4861 7.1 check they failed.", ["reason"])
        for reason in ND_INVALID_REASONS:
            c.add_metric([reason], st.invalid_nd.get(reason, 0))
        yield c

    def _firewall(self, workers: list) -> Iterator:
        fws = [(w.index, w.graph.firewall) for w in workers]
        fws = [(k, fw) for k, fw in fws if fw is not None]
        if not fws:
            return  # no [firewall] section: no firewall families
        rules = _gauge("firewall_rules", "Firewall rules, the default rule included.")
        rules.add_metric([], len(fws[0][1].compiled.rules))
        yield rules
        counters = [(k, fw.counters()) for k, fw in fws]
        states = _gauge("firewall_states", "Dynamic firewall states (live and expired not "
                        "yet reclaimed), all workers.")
        states.add_metric([], sum(c["states"] for _, c in counters))
        yield states
        g = _gauge("firewall_max_states", "The firewall's max_states (each worker's own "
                   "state table has this limit).")
        g.add_metric([], counters[0][1]["max-states"])
        yield g
        for word, (name, doc) in FIREWALL_COUNTERS.items():
            c = _counter(name, doc)
            c.add_metric([], sum(x.get(word, 0) for _, x in counters))
            yield c
        per = _gauge("worker_firewall_states", "Dynamic firewall states of the worker.",
                     ["worker"])
        for k, x in counters:
            per.add_metric([str(k)], x["states"])
        yield per

    def _workers(self, workers: list, per: list, names: list[str]) -> Iterator:
        g = _gauge("workers", "Data-plane worker threads.")
        g.add_metric([], len(workers))
        yield g
        rows = [w.row() for w in workers]
        up = _gauge("worker_up", "1 while the worker's thread runs (a dead worker stops the "
                    "router: exit status 1).", ["worker"])
        age = _gauge("worker_heartbeat_age_seconds", "Time since the worker's loop last "
                     "passed its heartbeat (a stuck worker grows it).", ["worker"])
        for row in rows:
            up.add_metric([str(row["worker"])], 1 if row["alive"] else 0)
            if row["heartbeat_age_ms"] >= 0:
                age.add_metric([str(row["worker"])], row["heartbeat_age_ms"] / 1000)
        yield up
        yield age
        for key, name, doc, is_counter in WORKER_ROW:
            m = (_counter if is_counter else _gauge)(name, doc, ["worker"])
            for row in rows:
                m.add_metric([str(row["worker"])], row[key])
            yield m
        for col, name, doc in ((IFS_RX_PKTS, "worker_interface_rx_packets",
                                "Frames the worker received on the interface (its fanout "
                                "share; worker 0 also takes the port's control ring)."),
                               (IFS_TX_PKTS, "worker_interface_tx_packets",
                                "Frames the worker sent on the interface.")):
            c = _counter(name, doc, ["worker", "interface"])
            for w, (_, ifs, _) in zip(workers, per, strict=True):
                for i, n in enumerate(names):
                    c.add_metric([str(w.index), n], int(ifs[i, col]))
            yield c
        drop_ids = [i for i, c in enumerate(COUNTERS) if c.kind == "drop"]
        c = _counter("worker_drops", "Packets the worker dropped (all reasons).", ["worker"])
        for w, (cnt, _, _) in zip(workers, per, strict=True):
            c.add_metric([str(w.index)], int(cnt[drop_ids].sum()))
        yield c


def router_registry(router: MetricsSource, *extra: Collector) -> CollectorRegistry:
    """A registry of the router's families, the process's (start time, CPU, memory, file
    descriptors), the interpreter's and its garbage collector's, and ``extra``."""
    from prometheus_client import GCCollector, PlatformCollector, ProcessCollector

    reg = CollectorRegistry(auto_describe=False)
    reg.register(RouterCollector(router))
    for make in (ProcessCollector, PlatformCollector, GCCollector):
        make(registry=reg)  # each registers itself
    for c in extra:
        reg.register(c)
    return reg
