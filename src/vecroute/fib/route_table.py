"""The FIB's route store: (table, prefix) -> Route, with room for a million mirrored routes.

Routes added one by one (addresses, neighbours, SRv6, operator) and a config's routes
(put in at once by put_routes: the config made their prefix objects already) are Route
objects.
Routes added in bulk (the kernel's table mirrored by netlink: a full Internet table) are
kept as an int key ``(family, table, hi, lo, length)`` -> a ``(kind, paths, lb)`` tuple
shared by every route with the same paths: one dict store per route, no Route object and
no IPv4Network/IPv6Network (whose hash is Python code) until someone reads them (``show
routes``, a trace). Both halves look like one dict to readers; a prefix is in one half only.
"""

from __future__ import annotations

import contextlib
import gc
import ipaddress
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from operator import itemgetter

import numpy as np

from vecroute.config_types import IPAddress, IPNetwork

_M64 = (1 << 64) - 1
_MISSING = object()
_LB = itemgetter(2)  # the load-balance of a (kind, paths, lb) value
_HI, _LO, _PLEN = itemgetter(2), itemgetter(3), itemgetter(4)  # of a bulk key


@dataclass
class Route:
    prefix: IPNetwork
    table: int
    kind: str  # "static", "connected", "local", "neighbor", "kernel", "unreachable", ...
    paths: list[tuple[int, IPAddress | None]]  # (interface index, next hop or None)
    weights: list[int] | None = None
    lb: int = -1


def bulk_key(table: int, prefix: IPNetwork) -> tuple[int, int, int, int, int]:
    """The int key of (table, prefix): (family, table, hi, lo, length); IPv4 in lo."""
    a = int(prefix.network_address)
    if prefix.version == 4:
        return (4, table, 0, a, prefix.prefixlen)
    return (6, table, a >> 64, a & _M64, prefix.prefixlen)


def bulk_arrays(family: int, keys: list[tuple]) -> tuple:
    """Bulk keys of one family in Lpm.add_many's array form: (addrs, lengths)."""
    n = len(keys)
    lens = np.fromiter(map(_PLEN, keys), np.int64, n)
    if family == 4:
        return np.fromiter(map(_LO, keys), np.uint32, n), lens
    return (np.fromiter(map(_HI, keys), np.uint64, n),
            np.fromiter(map(_LO, keys), np.uint64, n)), lens


@contextlib.contextmanager
def no_collection():
    """The cyclic collector paused while many objects are made (each pass would walk the
    whole heap: a full table's worth)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _network(key: tuple) -> IPNetwork:
    f, _, hi, lo, plen = key
    if f == 4:
        return ipaddress.IPv4Network((lo, plen))
    return ipaddress.IPv6Network(((hi << 64) | lo, plen))


class RouteTable:
    """A dict of (table, prefix) -> Route whose bulk half holds int keys (see module doc).

    Reading a bulk route makes a new Route each time: change routes through the Fib,
    never by editing a Route read from here."""

    def __init__(self) -> None:
        self._one: dict[tuple[int, IPNetwork], Route] = {}
        self._bulk: dict[tuple, tuple] = {}  # bulk key -> (kind, paths, lb)
        self._one_keys: dict[tuple, tuple[int, IPNetwork]] = {}  # _one's keys as bulk keys

    # -- the dict interface ---------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._one) + len(self._bulk)

    def __contains__(self, key: tuple[int, IPNetwork]) -> bool:
        return key in self._one or (bool(self._bulk) and bulk_key(*key) in self._bulk)

    def get(self, key: tuple[int, IPNetwork], default=None):
        r = self._one.get(key)
        if r is not None:
            return r
        if self._bulk:
            v = self._bulk.get(bulk_key(*key))
            if v is not None:
                return Route(key[1], key[0], v[0], v[1], None, v[2])
        return default

    def __getitem__(self, key: tuple[int, IPNetwork]) -> Route:
        r = self.get(key)
        if r is None:
            raise KeyError(key)
        return r

    def __setitem__(self, key: tuple[int, IPNetwork], route: Route) -> None:
        bk = bulk_key(*key)
        self._bulk.pop(bk, None)
        self._one[key] = route
        self._one_keys[bk] = key

    def pop(self, key: tuple[int, IPNetwork], default=_MISSING):
        r = self._one.pop(key, None)
        if r is not None:
            del self._one_keys[bulk_key(*key)]
            return r
        if self._bulk:
            v = self._bulk.pop(bulk_key(*key), None)
            if v is not None:
                return Route(key[1], key[0], v[0], v[1], None, v[2])
        if default is _MISSING:
            raise KeyError(key)
        return default

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RouteTable):
            other = dict(other.items())
        return isinstance(other, dict) and dict(self.items()) == other

    __hash__ = None  # type: ignore[assignment]  # (mutable, like a dict)

    def __iter__(self) -> Iterator[tuple[int, IPNetwork]]:
        yield from list(self._one)
        for bk in list(self._bulk):
            yield (bk[1], _network(bk))

    def keys(self) -> list[tuple[int, IPNetwork]]:
        return list(self)

    def items(self) -> list[tuple[tuple[int, IPNetwork], Route]]:
        """A snapshot (a list), bulk routes made into Route objects."""
        out = list(self._one.items())
        if self._bulk:
            with no_collection():
                for bk, (kind, paths, lb) in list(self._bulk.items()):
                    net = _network(bk)
                    out.append(((bk[1], net), Route(net, bk[1], kind, paths, None, lb)))
        return out

    def values(self) -> list[Route]:
        """A snapshot (a list) of every route, bulk ones made into Route objects (a
        mirrored full table: a million objects made now, with no collection pass)."""
        out = list(self._one.values())
        if self._bulk:
            with no_collection():
                out += [Route(_network(bk), bk[1], kind, paths, None, lb)
                        for bk, (kind, paths, lb) in list(self._bulk.items())]
        return out

    def put_routes(self, items: list[tuple[tuple, Route]]) -> Counter:
        """Store ``(bulk key, Route)`` pairs (the key of the route's table and prefix),
        replacing what is at each prefix in either half; returns the load-balances let
        go, counted. One hash of each prefix object (Python code): a config's full table
        comes through here."""
        gone: Counter = Counter()
        one, one_keys, bulk = self._one, self._one_keys, self._bulk
        for bk, r in items:
            key = (r.table, r.prefix)
            old = one.setdefault(key, r)
            if old is not r:
                gone[old.lb] += 1
                one[key] = r
            elif bulk:
                v = bulk.pop(bk, None)
                if v is not None:
                    gone[v[2]] += 1
            one_keys[bk] = key
        return gone

    # -- bulk -----------------------------------------------------------------------------

    def put_many(self, keys: list[tuple], values: list[tuple], distinct: bool = False
                 ) -> tuple[Counter | None, Counter]:
        """Store bulk routes ``keys[i] -> values[i]`` (``(kind, paths, lb)``), replacing
        what was at those prefixes (a key given twice keeps its last value). Returns the
        load-balances now used (None when the caller says the keys are ``distinct``: then
        they are the values' own) and those let go, counted (take the first, then the
        second: a load-balance in both must not be freed in between)."""
        new = zip(keys, values, strict=True) if distinct else dict(
            zip(keys, values, strict=True))
        ks = keys if distinct else new
        bulk = self._bulk
        gone = Counter(map(_LB, filter(None, map(bulk.get, ks))))
        if self._one_keys:
            for bk in ks:
                k = self._one_keys.pop(bk, None)
                if k is not None:
                    gone[self._one.pop(k).lb] += 1
        bulk.update(new)
        return (None if distinct else Counter(map(_LB, new.values()))), gone

    def pop_many(self, keys: list[tuple]) -> Counter:
        """Remove the routes at these bulk keys (either half); returns their
        load-balances, counted."""
        pop = self._bulk.pop
        gone = Counter(map(_LB, filter(None, (pop(k, None) for k in keys))))
        if self._one_keys:
            for bk in keys:
                k = self._one_keys.pop(bk, None)
                if k is not None:
                    gone[self._one.pop(k).lb] += 1
        return gone

    def get_bulk(self, key: tuple):
        """The (kind, paths, lb) of a bulk key, or (kind, paths, lb) of a Route given one
        by one at that prefix, or None."""
        v = self._bulk.get(key)
        if v is not None:
            return v
        k = self._one_keys.get(key)
        if k is not None:
            r = self._one[k]
            return (r.kind, r.paths, r.lb)
        return None
