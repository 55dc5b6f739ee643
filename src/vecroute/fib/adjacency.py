"""Adjacencies and load-balances: what a FIB lookup result points at.

An adjacency is (interface, next hop) with a precomputed L2 rewrite (dst MAC, src MAC,
ethertype) once the neighbour is known; a load-balance is a list of ECMP buckets of
adjacencies. Both are shared between routes (VPP style) and live in flat arrays that the
data path indexes directly; the control plane grows them by reallocation.

Both are reference counted, so that what a host can make the router create (a neighbour's
host route, its adjacency) is freed again and its row reused: a route holds its
load-balance, a load-balance holds each of its adjacencies once. Only next-hop adjacencies
are ever freed (the local, drop, glean, reply and SRv6 ones live as long as the table);
``pin`` holds one for a user outside the load-balances (an SRv6 End.X next hop).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import numpy as np

from vecroute.fib.layout import (
    A_FAMILY,
    A_IF,
    A_NEXT4,
    A_NEXT6,
    A_NH4,
    A_NH6,
    A_RWLEN,
    A_TYPE,
    ADJ_COLS,
    ADJ_DROP,
    ADJ_GLEAN,
    ADJ_INCOMPLETE,
    ADJ_LOCAL,
    ADJ_NAMES,
    ADJ_PROHIBIT,
    ADJ_REPLY,
    ADJ_REWRITE,
    ADJ_SRV6_ENCAP,
    ADJ_SRV6_LOCALSID,
    ADJ_UNREACH,
    LB_N,
    LB_START,
    LOCAL_ANYCAST,
    RW_MAX,
)
from vecroute.packet.headers import ETH_P_IP, ETH_P_IPV6
from vecroute.packet.node_ids import (
    ERROR_DROP,
    ICMP4_ERROR,
    ICMP6_ERROR,
    IP4_LOCAL,
    IP4_REWRITE,
    IP6_LOCAL,
    IP6_REWRITE,
    SRV6_ENCAP,
    SRV6_LOCALSID,
)

MAX_BUCKETS = 64
NEVER = -(10**18)

# Where a packet goes after the lookup, by adjacency kind: (an ip4 packet, an ip6 packet),
# stored in A_NEXT4 / A_NEXT6 whenever a row's kind is set (``_set_kind``), so that the
# lookup loads its next node instead of branching on kinds. Incomplete and glean
# adjacencies go to rewrite like resolved ones (rewrite hands them to neighbor-request); the
# End behaviours of a local SID take IPv6 only (an IPv4 packet there is a blackhole).
ADJ_NEXT: dict[int, tuple[int, int]] = {
    ADJ_REWRITE: (IP4_REWRITE, IP6_REWRITE),
    ADJ_INCOMPLETE: (IP4_REWRITE, IP6_REWRITE),
    ADJ_GLEAN: (IP4_REWRITE, IP6_REWRITE),
    ADJ_REPLY: (IP4_REWRITE, IP6_REWRITE),
    ADJ_LOCAL: (IP4_LOCAL, IP6_LOCAL),
    ADJ_DROP: (ERROR_DROP, ERROR_DROP),
    ADJ_UNREACH: (ICMP4_ERROR, ICMP6_ERROR),
    ADJ_PROHIBIT: (ICMP4_ERROR, ICMP6_ERROR),
    ADJ_SRV6_ENCAP: (SRV6_ENCAP, SRV6_ENCAP),
    ADJ_SRV6_LOCALSID: (ERROR_DROP, SRV6_LOCALSID),
}


@dataclass(frozen=True)
class AdjKey:
    kind: int
    ifx: int = -1
    family: int = 0
    nh: int = 0  # next hop address as int (0 for glean/local/drop)
    # the packets' family when it is not the next hop's: 4 for IPv4 routes via an IPv6
    # next hop (RFC 5549): resolved with ND, rewritten with ethertype 0x0800
    payload: int = 0


class AdjacencyTable:
    """Deduplicated adjacencies in growable arrays (adj, adj_rw, adj_last_req)."""

    def __init__(self) -> None:
        self.adj = np.zeros((16, ADJ_COLS), dtype=np.int32)
        self.adj_rw = np.zeros((16, RW_MAX), dtype=np.uint8)
        self.adj_last_req = np.full(16, NEVER, dtype=np.int64)
        self.keys: list[AdjKey | None] = []  # None: a free row
        self.index: dict[AdjKey, int] = {}
        self.refs: list[int] = []
        self._free: list[int] = []
        # moves whenever a row is created or freed, or a private load-balance gets new
        # buckets (SRv6 caches see it)
        self.generation = 0
        self.local = self.get(AdjKey(ADJ_LOCAL))
        self.drop = self.get(AdjKey(ADJ_DROP))
        # for us too, but answers come from a unicast address of the interface
        self.local_anycast = self.get(AdjKey(ADJ_LOCAL, nh=LOCAL_ANYCAST))
        self.adj[self.local_anycast, A_NH4] = LOCAL_ANYCAST

    def __len__(self) -> int:
        """Adjacencies in use (rows, free ones excluded)."""
        return len(self.index)

    def get(self, key: AdjKey) -> int:
        """The index of the adjacency for key, created (incomplete) if new."""
        a = self.index.get(key)
        if a is not None:
            return a
        if self._free:
            a = self._free.pop()
            self.keys[a] = key
        else:
            a = len(self.keys)
            if a >= self.adj.shape[0]:
                self._grow()
            self.keys.append(key)
            self.refs.append(0)
        self.refs[a] = 0
        self.index[key] = a
        self.generation += 1
        row = self.adj[a]
        row[:] = 0
        self._set_kind(a, key.kind)
        row[A_IF] = key.ifx
        row[A_FAMILY] = key.family
        if key.family == 4:
            row[A_NH4] = np.int32(np.uint32(key.nh).view(np.int32))
        elif key.family == 6:
            for w in range(4):
                row[A_NH6 + w] = np.uint32((key.nh >> (96 - 32 * w)) & 0xFFFFFFFF).view(np.int32)
        self.adj_last_req[a] = NEVER
        return a

    def ref(self, a: int) -> None:
        self.refs[a] += 1

    def unref(self, a: int) -> None:
        """Drop one reference; a next-hop adjacency nobody holds is freed (its row reused)."""
        self.refs[a] -= 1
        key = self.keys[a]
        if self.refs[a] > 0 or key is None or key.kind != ADJ_INCOMPLETE:
            return
        del self.index[key]
        self.keys[a] = None
        self.adj[a] = 0
        self._set_kind(a, ADJ_DROP)  # never read: no load-balance points here
        self.adj[a, A_IF] = -1
        self._free.append(a)
        self.generation += 1

    pin = ref

    def _set_kind(self, a: int, kind: int) -> None:
        """The one writer of A_TYPE: the kind and the next nodes it implies change together."""
        self.adj[a, A_TYPE] = kind
        self.adj[a, A_NEXT4], self.adj[a, A_NEXT6] = ADJ_NEXT[kind]

    def _grow(self) -> None:
        n = self.adj.shape[0] * 2
        self.adj = np.concatenate([self.adj, np.zeros_like(self.adj)])[:n]
        self.adj_rw = np.concatenate([self.adj_rw, np.zeros_like(self.adj_rw)])[:n]
        self.adj_last_req = np.concatenate(
            [self.adj_last_req, np.full_like(self.adj_last_req, NEVER)]
        )[:n]

    def set_rewrite(self, a: int, dst_mac: bytes | None, src_mac: bytes) -> None:
        """Resolve (or unresolve, dst_mac=None) a next-hop adjacency in place."""
        key = self.keys[a]
        assert key is not None
        if dst_mac is None:
            self._set_kind(a, ADJ_INCOMPLETE)
            self.adj[a, A_RWLEN] = 0
            return
        et = ETH_P_IP if (key.payload or key.family) == 4 else ETH_P_IPV6
        rw = dst_mac + src_mac + et.to_bytes(2, "big")
        self.adj_rw[a, : len(rw)] = np.frombuffer(rw, dtype=np.uint8)
        self.adj[a, A_RWLEN] = len(rw)
        self._set_kind(a, ADJ_REWRITE)

    def describe(self, a: int) -> str:
        key = self.keys[a]
        kind = ADJ_NAMES[int(self.adj[a, A_TYPE])]
        if key.family:
            nh = ipaddress.ip_address(key.nh) if key.family == 4 else ipaddress.IPv6Address(key.nh)
            return f"{kind} {nh}" + (" (IPv4 packets)" if key.payload == 4 else "")
        return kind


class LoadBalanceTable:
    """ECMP bucket lists, deduplicated: routes with the same paths share one entry."""

    def __init__(self, adjs: AdjacencyTable) -> None:
        self.adjs = adjs
        self.lb = np.zeros((16, 2), dtype=np.int32)
        self.lb_buckets = np.zeros(64, dtype=np.int32)
        self.index: dict[tuple[int, ...], int] = {}
        self.paths: list[tuple[int, ...] | None] = []  # None: a free entry
        self.refs: list[int] = []
        # freed entries by bucket count: a new load-balance of that size takes the entry
        # and its bucket range (neighbour host routes are all one-bucket ones)
        self._free: dict[int, list[int]] = {}
        self._nb = 0
        self._private: set[int] = set()  # get_private entries (outside the index)
        self._free_ranges: dict[int, list[int]] = {}  # bucket ranges a resize left

    def __len__(self) -> int:
        return len(self.index)

    def ref(self, i: int, n: int = 1) -> None:
        """``n`` routes now point at load-balance i (the first holds its adjacencies)."""
        if self.refs[i] == 0:
            for a in set(self.paths[i] or ()):
                self.adjs.ref(a)
        self.refs[i] += n

    def unref(self, i: int, n: int = 1) -> None:
        """``n`` routes left load-balance i; the last one frees it and lets its
        adjacencies go."""
        self.refs[i] -= n
        if self.refs[i] > 0:
            return
        key = self.paths[i]
        assert key is not None
        self.paths[i] = None
        if i in self._private:
            self._private.discard(i)
        else:
            del self.index[key]
        self._free.setdefault(len(key), []).append(i)  # row and bucket range reused
        for a in set(key):
            self.adjs.unref(a)

    def get_private(self, adjs: list[int], weights: list[int] | None = None) -> int:
        """A load-balance of its own, never shared: one per kernel nexthop object, so
        that a change of the object rewrites its buckets once (set_private) and every
        route through it follows, without touching the routes. The caller holds one
        reference for the object's life (ref), and lets it go (unref) to free it."""
        buckets = self._buckets(adjs, weights)
        free = self._free.get(len(buckets))
        if free:
            i = free.pop()
            start = int(self.lb[i, LB_START])
            self.lb_buckets[start : start + len(buckets)] = buckets
            self.paths[i] = tuple(buckets)
        else:
            i = len(self.paths)
            if i >= self.lb.shape[0]:
                self.lb = np.concatenate([self.lb, np.zeros_like(self.lb)])
            self.paths.append(None)
            self.refs.append(0)
            self._place(i, buckets)
        self.refs[i] = 0
        self._private.add(i)
        return i

    def set_private(self, i: int, adjs: list[int], weights: list[int] | None = None) -> None:
        """New buckets for a private load-balance (its adjacencies re-referenced)."""
        buckets = self._buckets(adjs, weights)
        # the routes keep their load-balance, but a cached first hop (an SR policy's, in
        # the data path) is one of its buckets: moving the generation (first, so that it
        # moves even if a step below fails half-way) makes it look again
        self.adjs.generation += 1
        old = self.paths[i] or ()
        if self.refs[i] > 0:
            for a in set(buckets):
                self.adjs.ref(a)
        if len(old) == len(buckets):
            start = int(self.lb[i, LB_START])
            self.lb_buckets[start : start + len(buckets)] = buckets
            self.paths[i] = tuple(buckets)
        else:
            self._free_ranges.setdefault(len(old), []).append(int(self.lb[i, LB_START]))
            self._place(i, buckets)
        if self.refs[i] > 0:
            for a in set(old):
                self.adjs.unref(a)

    def _place(self, i: int, buckets: list[int]) -> None:
        """Give entry i a bucket range of the right size (private entries only)."""
        spare = self._free_ranges.get(len(buckets))
        if spare:
            start = spare.pop()
            self.lb_buckets[start : start + len(buckets)] = buckets
            self.lb[i, LB_START] = start
            self.lb[i, LB_N] = len(buckets)
            self.paths[i] = tuple(buckets)
            return
        while self._nb + len(buckets) > self.lb_buckets.shape[0]:
            self.lb_buckets = np.concatenate([self.lb_buckets, np.zeros_like(self.lb_buckets)])
        self.lb_buckets[self._nb : self._nb + len(buckets)] = buckets
        self.lb[i, LB_START] = self._nb
        self.lb[i, LB_N] = len(buckets)
        self._nb += len(buckets)
        self.paths[i] = tuple(buckets)

    def _buckets(self, adjs: list[int], weights: list[int] | None) -> list[int]:
        """The bucket list, checked before anything is built: a weight of 0 everywhere
        would leave no bucket (the data path divides by their number), a huge one would
        allocate it first."""
        if not adjs:
            raise ValueError("a load-balance needs at least one path")
        weights = weights or [1] * len(adjs)
        if len(weights) != len(adjs) or not all(
            isinstance(w, int) and 1 <= w <= MAX_BUCKETS for w in weights
        ):
            raise ValueError(f"ECMP weights must be integers 1..{MAX_BUCKETS}, one per path")
        if sum(weights) > MAX_BUCKETS:
            raise ValueError(f"ECMP weights add up to {sum(weights)} buckets, at most "
                             f"{MAX_BUCKETS}")
        buckets: list[int] = []
        for a, w in zip(adjs, weights, strict=True):
            buckets.extend([a] * w)
        return buckets

    def get(self, adjs: list[int], weights: list[int] | None = None) -> int:
        """The load-balance index for these adjacencies (weights replicate buckets)."""
        buckets = self._buckets(adjs, weights)
        key = tuple(buckets)
        i = self.index.get(key)
        if i is not None:
            return i
        free = self._free.get(len(buckets))
        if free:
            i = free.pop()
            start = int(self.lb[i, LB_START])
            self.lb_buckets[start : start + len(buckets)] = buckets
            self.paths[i] = key
            self.index[key] = i
            return i
        i = len(self.paths)
        if i >= self.lb.shape[0]:
            self.lb = np.concatenate([self.lb, np.zeros_like(self.lb)])
        while self._nb + len(buckets) > self.lb_buckets.shape[0]:
            self.lb_buckets = np.concatenate([self.lb_buckets, np.zeros_like(self.lb_buckets)])
        self.lb_buckets[self._nb : self._nb + len(buckets)] = buckets
        self.lb[i, LB_START] = self._nb
        self.lb[i, LB_N] = len(buckets)
        self._nb += len(buckets)
        self.paths.append(key)
        self.refs.append(0)
        self.index[key] = i
        return i


__all__ = [
    "AdjKey",
    "AdjacencyTable",
    "LoadBalanceTable",
    "ADJ_GLEAN",
    "ADJ_INCOMPLETE",
    "ADJ_LOCAL",
    "ADJ_DROP",
    "ADJ_REWRITE",
]
