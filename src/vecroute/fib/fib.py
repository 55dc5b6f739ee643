"""The routing table manager: interfaces, routes, neighbours -> the data-path arrays.

Routes resolve to load-balances of adjacencies here, once, on the control plane; the data
path only follows indices. Connected subnets point to a glean adjacency (the destination is
the next hop), interface addresses to the local adjacency, configured or learnt neighbours
turn adjacencies into precomputed L2 rewrites (every adjacency using a neighbour is updated
when its MAC changes) and add a host route for on-link hosts.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from vecroute.config_types import Config, ConfigError, IPAddress, IPNetwork, format_mac
from vecroute.fib.adjacency import MAX_BUCKETS, AdjacencyTable, AdjKey, LoadBalanceTable
from vecroute.fib.layout import (
    ADJ_GLEAN,
    ADJ_INCOMPLETE,
    ADJ_PROHIBIT,
    ADJ_REPLY,
    ADJ_UNREACH,
    I_FIB4,
    I_FIB6,
    I_HOST,
    I_IP4,
    I_IP4_MASK,
    I_MTU,
    I_REDIRECTS,
    I_REPLY_ADJ,
    I_UP,
    IF6_GLOBAL,
    IF6_LL,
    IF6_OTHER,
    IF_COLS,
)
from vecroute.fib.lpm import Lpm
from vecroute.fib.route_table import Route, RouteTable, bulk_arrays, bulk_key, no_collection

MAX_TABLES = 256  # FIB tables per address family (each costs a 256 KiB trie root)


def address_routes(a) -> list[tuple[str, IPNetwork]]:
    """(kind, prefix) of the routes one interface address installs: its local route, the
    subnet-router anycast (IPv6, RFC 4291 2.6.1), the connected subnet and the
    directed-broadcast drops (IPv4, RFC 1812 5.3.5.2)."""
    out = [("local", ipaddress.ip_network(f"{a.ip}/{a.max_prefixlen}"))]
    net = a.network
    if a.version == 6 and net.prefixlen < 127 and net.network_address != a.ip:
        out.append(("anycast", ipaddress.ip_network(f"{net.network_address}/128")))
    if net.prefixlen < a.max_prefixlen:
        out.append(("connected", net))
    if a.version == 4 and net.prefixlen <= 30:
        out += [("broadcast", ipaddress.ip_network(f"{e}/32"))
                for e in (net.network_address, net.broadcast_address)]
    return out


def _nh_keys(ifx: int, ip: IPAddress) -> tuple[AdjKey, ...]:
    """The adjacencies a neighbour resolves: its own, and for an IPv6 neighbour the one
    of IPv4 routes via it (RFC 5549)."""
    own = AdjKey(ADJ_INCOMPLETE, ifx, ip.version, int(ip))
    if ip.version == 4:
        return (own,)
    return own, AdjKey(ADJ_INCOMPLETE, ifx, 6, int(ip), 4)


REJECT_KINDS = ("unreachable", "prohibit")


class RouteError(ValueError):
    """A route or neighbour change that cannot be applied (one-line message)."""


def _changes(method):
    """A method that changes the tables: bump ``version`` (even when it fails half-way),
    so that whoever publishes copies of the arrays knows they are out of date."""

    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        finally:
            self.version += 1

    wrapper.__name__ = method.__name__
    wrapper.__doc__ = method.__doc__
    return wrapper


@dataclass
class Interface:
    name: str
    mac: bytes
    mtu: int
    table: int
    addresses: list = field(default_factory=list)  # IPv4Interface / IPv6Interface
    redirects: bool = True  # send ICMP / ND redirects (Linux send_redirects = 1)
    host: bool = False  # a Linux mirror takes what the router does not answer (linux-cp)

    @property
    def link_local(self) -> ipaddress.IPv6Address:
        """fe80::/64 with the modified EUI-64 interface id (RFC 4291 appendix A)."""
        m = bytearray(self.mac)
        eui = bytes([m[0] ^ 0x02, m[1], m[2], 0xFF, 0xFE, m[3], m[4], m[5]])
        return ipaddress.IPv6Address(b"\xfe\x80" + b"\x00" * 6 + eui)


class Fib:
    """All FIB tables, adjacencies and neighbours of one router."""

    def __init__(self) -> None:
        self.lpm = {4: Lpm(4, MAX_TABLES), 6: Lpm(6, MAX_TABLES)}
        self.adjs = AdjacencyTable()
        self.lbs = LoadBalanceTable(self.adjs)
        self.interfaces: list[Interface] = []
        self.routes = RouteTable()  # (table, prefix) -> Route
        self.neighbors: dict[tuple[int, IPAddress], bytes] = {}
        self.icmp_rate = (1000, 50, 1000, 50)  # ICMP rate, burst; RST rate, burst
        self.version = 0  # bumped by every change of the tables (see _changes)
        from vecroute.srv6.tables import Srv6Tables

        self.srv6 = Srv6Tables(self)

    # -- building -------------------------------------------------------------------------

    @classmethod
    def from_config(cls, cfg: Config, macs: dict[str, bytes] | None = None) -> Fib:
        """Build from a validated config; ``macs`` supplies device MACs in live mode."""
        fib = cls()
        fib.icmp_rate = (
            cfg.icmp.rate, cfg.icmp.burst, cfg.icmp.tcp_reset_rate, cfg.icmp.tcp_reset_burst
        )
        for n, itf in enumerate(cfg.interfaces):
            mac = itf.mac or (macs or {}).get(itf.name)
            if mac is None:
                raise RouteError(
                    f"{cfg.path}: interfaces[{n}].mac: missing, required for {itf.name} here "
                    f"(replay has no device to read it from)"
                )
            fib.add_interface(Interface(itf.name, mac, itf.mtu, itf.table, list(itf.addresses),
                                        itf.redirects, itf.host_if is not None))
        for n, nb in enumerate(cfg.neighbors):
            try:
                fib.add_neighbor(nb.ip, nb.mac, nb.interface)
            except RouteError as e:
                raise RouteError(f"{cfg.path}: neighbors[{n}]: {e}") from None
        fib._add_config_routes(cfg)
        if "srv6" in cfg.raw:
            from vecroute.srv6.config import apply_srv6_config

            try:
                apply_srv6_config(fib, cfg.raw["srv6"], cfg.path)
            except ConfigError as e:
                raise RouteError(str(e)) from None
        return fib

    def _add_config_routes(self, cfg: Config) -> None:
        """The config's routes, in order. Those with one next hop and nothing else (all of
        a full table's) are gathered per family and table and installed at the end, one
        Lpm.add_many each (one by one they took 37 us a route: 33 s for a full table);
        any other route is added as it comes, after taking its prefix out of the gathered
        ones, so the file's last route at a prefix is the one installed."""
        batches: dict[tuple[int, int], dict[tuple, tuple]] = {}  # bulk key -> (prefix, ...)
        values: dict[tuple, tuple] = {}  # (next hop, table, family) -> (path, lb), held
        with no_collection():  # (a full table's objects: 7.7 s with collections, 4.3 without)
            try:
                for n, rt in enumerate(cfg.routes):
                    batch = batches.get((rt.prefix.version, rt.table))
                    bk = bulk_key(rt.table, rt.prefix)
                    try:
                        if len(rt.via) == 1 and rt.dev is None and rt.weights is None \
                                and not rt.blackhole:
                            k = (rt.via[0], rt.table, rt.prefix.version)
                            v = values.get(k)
                            if v is None:
                                v = values[k] = self._static_path(*k)
                            if batch is None:
                                batch = batches[k[2], k[1]] = {}
                            batch[bk] = (rt.prefix, *v)
                            continue
                        if batch is not None:
                            batch.pop(bk, None)  # this one replaces a gathered route
                        self.add_route(rt.prefix, rt.via, dev=rt.dev, table=rt.table,
                                       weights=rt.weights, blackhole=rt.blackhole)
                    except RouteError as e:  # with next hops, they are what can be wrong here
                        key = f"routes[{n}].via" if rt.via else f"routes[{n}]"
                        raise RouteError(f"{cfg.path}: {key}: {e}") from None
                for (family, table), batch in batches.items():
                    self._install_static(family, table, batch)
            finally:
                for _, lb in values.values():
                    self.lbs.unref(lb)  # _static_path's hold: an unused one goes now

    def _static_path(self, nh: IPAddress, table: int, family: int) -> tuple:
        """(path, load-balance) of a static route through next hop ``nh``, checked as
        add_route checks it; the load-balance is held (a route replaced meanwhile must not
        free it under the routes gathered for it): the caller lets it go."""
        if nh.version != family and not (family == 4 and nh.version == 6):
            raise RouteError(f"next hop {nh} is not IPv{family}")
        ifx = self.connected_interface(nh, table)  # (whose interface made the table)
        lb = self.lbs.get([self.nh_adjacency(ifx, nh, family)])
        self.lbs.ref(lb)
        return (ifx, nh), lb

    @_changes
    def _install_static(self, family: int, table: int, routes: dict[tuple, tuple]) -> None:
        """Static routes ``bulk key -> (prefix, path, lb)`` of one family and table, as
        add_route would install them one by one (Route objects, replacing what is at each
        prefix), with one Lpm.add_many."""
        keys, vals = list(routes), list(routes.values())
        lbs = np.fromiter((v[2] for v in vals), np.int64, len(vals))
        self.lpm[family].add_many(table, *bulk_arrays(family, keys), lbs)
        gone = self.routes.put_routes([(bk, Route(net, table, "static", [path], None, lb))
                                       for bk, (net, path, lb) in zip(keys, vals, strict=True)])
        for lb, k in Counter(lbs.tolist()).items():  # taken first, then let go
            self.lbs.ref(lb, k)
        for lb, k in gone.items():
            self.lbs.unref(lb, k)

    def add_interface(self, itf: Interface) -> int:
        ifx = len(self.interfaces)
        self.interfaces.append(itf)
        self.adjs.get(AdjKey(ADJ_REPLY, ifx))
        for fam in (4, 6):
            try:
                self.lpm[fam].table_index(itf.table, create=True)
            except ValueError as e:  # one table too many
                raise RouteError(f"interface {itf.name}: {e}") from None
        for a in itf.addresses:
            self._install_address(ifx, a)
        return ifx

    def _install_address(self, ifx: int, a) -> None:
        """Install what one interface address implies (address_routes); an anycast
        route never replaces another route at that prefix."""
        itf = self.interfaces[ifx]
        for kind, net in address_routes(a):
            if kind == "local":
                lb, paths = self.lbs.get([self.adjs.local]), []
            elif kind == "anycast":
                if (itf.table, net) in self.routes:
                    continue
                lb, paths = self.lbs.get([self.adjs.local_anycast]), []
            elif kind == "connected":
                glean = self.adjs.get(AdjKey(ADJ_GLEAN, ifx, a.version))
                lb, paths = self.lbs.get([glean]), [(ifx, None)]
            else:  # broadcast: not forwarded by default
                lb, paths = self.lbs.get([self.adjs.drop]), []
            self._install(Route(net, itf.table, kind, paths), lb)

    @_changes
    def add_address(self, ifx: int, addr) -> bool:
        """Add an address to an interface at run time (learnt from Linux: RTM_NEWADDR),
        installing what add_interface installs per address; False if already there."""
        a = ipaddress.ip_interface(addr)
        itf = self.interfaces[ifx]
        if any(x == a for x in itf.addresses):
            return False
        itf.addresses.append(a)
        self._install_address(ifx, a)
        return True

    @_changes
    def del_address(self, ifx: int, addr) -> bool:
        """Remove an interface address and the routes it installed, except those another
        address of the same table still implies; False if it was not there."""
        a = ipaddress.ip_interface(addr)
        itf = self.interfaces[ifx]
        if a not in itf.addresses:
            return False
        itf.addresses.remove(a)
        implied: set = set()
        for other in self.interfaces:
            if other.table != itf.table:
                continue
            for b in other.addresses:
                implied |= {(k, net) for k, net in address_routes(b)}
        for kind, net in address_routes(a):
            r = self.routes.get((itf.table, net))
            if r is not None and r.kind == kind and (kind, net) not in implied:
                self._uninstall(itf.table, net)
        return True

    def interface_index(self, name: str) -> int:
        for i, itf in enumerate(self.interfaces):
            if itf.name == name:
                return i
        raise RouteError(f"no interface named {name!r}")

    # -- routes -----------------------------------------------------------------------------

    def _install(self, route: Route, lb: int) -> None:
        route.lb = lb
        key = (route.table, route.prefix)
        self.lbs.ref(lb)
        old = self.routes.get(key)
        self.routes[key] = route
        self.lpm[route.prefix.version].add(route.table, route.prefix, lb)
        if old is not None:
            self.lbs.unref(old.lb)

    def _uninstall(self, table: int, prefix: IPNetwork) -> Route | None:
        """Remove a route, letting go of its load-balance (and so maybe its adjacencies)."""
        r = self.routes.pop((table, prefix), None)
        if r is not None:
            self.lpm[prefix.version].delete(table, prefix)
            self.lbs.unref(r.lb)
        return r

    def connected_interface(self, nh: IPAddress, table: int) -> int:
        """The interface of ``table`` whose subnet holds ``nh`` (RouteError if none)."""
        for ifx, itf in enumerate(self.interfaces):
            if itf.table != table:
                continue
            for a in itf.addresses:
                if a.version == nh.version and nh in a.network and nh != a.ip:
                    return ifx
        raise RouteError(f"next hop {nh} is not on a connected subnet of table {table}")

    def nh_adjacency(self, ifx: int, nh: IPAddress, family: int = 0) -> int:
        """The adjacency to next hop ``nh`` on ``ifx`` for packets of ``family`` (an IPv4
        route via an IPv6 next hop, RFC 5549, has an adjacency of its own: resolved
        with ND like the IPv6 one, its rewrite carries ethertype 0x0800)."""
        payload = 4 if family == 4 and nh.version == 6 else 0
        a = self.adjs.get(AdjKey(ADJ_INCOMPLETE, ifx, nh.version, int(nh), payload))
        mac = self.neighbors.get((ifx, nh))
        if mac is not None:
            self.adjs.set_rewrite(a, mac, self.interfaces[ifx].mac)
        return a

    @_changes
    def add_route(
        self,
        prefix: IPNetwork | str,
        via: list[IPAddress] | None = None,
        *,
        dev: str | None = None,
        table: int = 0,
        weights: list[int] | None = None,
        blackhole: bool = False,
        reject: str | None = None,
    ) -> Route:
        """Add or replace a static route (ECMP when via has several next hops); ``reject``
        "unreachable" or "prohibit" makes a Linux reject route (answered with ICMP). An
        IPv4 prefix may have IPv6 next hops (RFC 5549; with ``dev`` or on a connected
        IPv6 subnet)."""
        if reject is not None:
            if reject not in REJECT_KINDS:
                raise RouteError(f"reject must be one of {', '.join(REJECT_KINDS)}")
            blackhole = True
        if not isinstance(prefix, ipaddress.IPv4Network | ipaddress.IPv6Network):
            # (a network object is already one: parsing its text again cost 13 us a
            # route, a third of a full table's build from the config)
            try:
                prefix = ipaddress.ip_network(prefix, strict=False)
            except ValueError:
                raise RouteError(f"{prefix!r} is not a prefix") from None
        via = list(via or [])
        # everything is checked before anything changes (a table, an adjacency)
        paths: list[tuple[int, IPAddress | None]] = []
        if blackhole:
            pass
        elif via:
            for nh in via:
                if nh.version != prefix.version and not (prefix.version == 4 and nh.version == 6):
                    raise RouteError(f"next hop {nh} is not IPv{prefix.version}")
                ifx = self.interface_index(dev) if dev else self.connected_interface(nh, table)
                paths.append((ifx, nh))
            w = weights or [1] * len(via)
            if len(w) != len(via) or not all(
                isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= MAX_BUCKETS
                for x in w
            ):
                raise RouteError(f"ECMP weights must be integers 1..{MAX_BUCKETS}, one per path")
            if sum(w) > MAX_BUCKETS:
                raise RouteError(f"ECMP weights add up to {sum(w)} buckets, at most "
                                 f"{MAX_BUCKETS}")
        elif dev:
            paths.append((self.interface_index(dev), None))
        else:
            raise RouteError("a route needs a next hop, a device or blackhole")
        if self.lpm[prefix.version].table_index(table) < 0:
            try:
                self.lpm[prefix.version].table_index(table, create=True)
            except ValueError as e:  # a bad table id, or one table too many
                raise RouteError(str(e)) from None
        if blackhole:
            lb = self.lbs.get([self.special_adjacency(reject or "blackhole")])
        elif via:
            adjs = [self.nh_adjacency(ifx, nh, prefix.version) for ifx, nh in paths]
            try:
                lb = self.lbs.get(adjs, weights)
            except ValueError as e:  # too many ECMP buckets
                raise RouteError(str(e)) from None
        else:
            ifx = paths[0][0]
            lb = self.lbs.get([self.adjs.get(AdjKey(ADJ_GLEAN, ifx, prefix.version))])
        route = Route(prefix, table, reject or "static", paths, weights)
        self._install(route, lb)
        return route

    def special_adjacency(self, kind: str) -> int:
        """The shared adjacency of a route without next hops: blackhole (drop),
        unreachable or prohibit (an ICMP error, as Linux answers them)."""
        if kind == "blackhole":
            return self.adjs.drop
        return self.adjs.get(AdjKey(ADJ_UNREACH if kind == "unreachable" else ADJ_PROHIBIT))

    def path_adjacencies(self, family: int, paths: list[tuple[int, IPAddress | None]]
                         ) -> list[int]:
        """Adjacencies of (interface index, next hop or None: glean) paths for packets of
        ``family`` (no checks: the caller, e.g. the netlink mirror, validated them)."""
        return [self.adjs.get(AdjKey(ADJ_GLEAN, ifx, family)) if nh is None
                else self.nh_adjacency(ifx, nh, family) for ifx, nh in paths]

    # -- bulk (the kernel's table mirrored by netlink: one Lpm.add_many per batch) --------

    @_changes
    def install_many(self, family: int, table: int, keys: list[tuple], values: list[tuple],
                     addrs, lengths, lbs, distinct: bool = False) -> None:
        """Install many routes of one family and table at once, replacing any at the same
        prefixes. ``keys[i]`` is route i's int key (route_table.bulk_key form), ``values[i]``
        its ``(kind, paths, lb)`` (share one tuple between routes with the same paths);
        ``addrs``/``lengths``/``lbs`` the same prefixes and load-balances in
        Lpm.add_many's array form; ``distinct``: the caller knows no key comes twice
        (cheaper). Checked before anything changes: it raises RouteError (one table too
        many) or ValueError (bad arrays) with the tables untouched."""
        lpm = self.lpm[family]
        if lpm.table_index(table) < 0:
            try:
                lpm.table_index(table, create=True)
            except ValueError as e:
                raise RouteError(str(e)) from None
        if len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys but {len(values)} values")
        lbs = np.asarray(lbs, np.int64)
        lpm.add_many(table, addrs, lengths, lbs)  # validates its arrays first
        taken, gone = self.routes.put_many(keys, values, distinct)
        if taken is None:
            counts = np.bincount(lbs)
            taken = dict(zip(np.flatnonzero(counts).tolist(),
                             counts[counts > 0].tolist(), strict=True))
        for lb, n in taken.items():
            self.lbs.ref(lb, n)
        for lb, n in gone.items():
            self.lbs.unref(lb, n)

    @_changes
    def uninstall_many(self, family: int, table: int, keys: list[tuple], addrs,
                       lengths) -> int:
        """Remove many routes of one family and table by int key (those present, whatever
        their kind); returns how many were there."""
        gone = self.routes.pop_many(keys)
        if gone:
            self.lpm[family].delete_many(table, addrs, lengths)
        for lb, n in gone.items():
            self.lbs.unref(lb, n)
        return sum(gone.values())

    @_changes
    def set_load_balance(self, lb: int, adjs: list[int], weights: list[int] | None) -> None:
        """New buckets for a private load-balance (a kernel nexthop object changed): every
        route through it follows at once."""
        self.lbs.set_private(lb, adjs, weights)

    @_changes
    def remove_route(self, table: int, prefix: IPNetwork) -> Route | None:
        """Remove a route whatever its kind (the netlink mirror's own ones)."""
        return self._uninstall(table, prefix)

    @_changes
    def del_route(self, prefix: IPNetwork | str, table: int = 0) -> None:
        try:
            prefix = ipaddress.ip_network(prefix, strict=False)
        except ValueError:
            raise RouteError(f"{prefix!r} is not a prefix") from None
        r = self.routes.get((table, prefix))
        if r is None:
            raise RouteError(f"no route {prefix} in table {table}")
        if r.kind in ("local", "anycast", "connected", "broadcast"):
            raise RouteError(
                f"{prefix} is a {r.kind} route: change the interface addresses instead"
            )
        self._uninstall(table, prefix)

    def install_special(self, prefix, table: int, kind: str, adj: int) -> None:
        """A route to a non-forwarding adjacency (SRv6 local SID, policy, steering)."""
        self.lpm[prefix.version].table_index(table, create=True)
        self._install(Route(prefix, table, kind, []), self.lbs.get([adj]))

    def remove_special(self, prefix, table: int) -> None:
        """Remove a route that install_special put in."""
        self._uninstall(table, prefix)

    @_changes
    def sr(self, op: str, *args, **kwargs):
        """An SRv6 change (Srv6Tables method ``op``)."""
        from vecroute.srv6.tables import Srv6Error

        try:
            return getattr(self.srv6, op)(*args, **kwargs)
        except (Srv6Error, ValueError) as e:  # ValueError: a bad table id, too many tables
            raise RouteError(str(e)) from None

    # -- neighbours -------------------------------------------------------------------------

    @_changes
    def add_neighbor(self, ip: IPAddress | str, mac: bytes, ifname: str) -> None:
        """Set a neighbour's MAC: every adjacency to it becomes (or is rewritten as) a
        precomputed rewrite at once; an on-link host also gets a host route."""
        ip = ipaddress.ip_address(ip)
        ifx = self.interface_index(ifname)
        itf = self.interfaces[ifx]
        self.neighbors[(ifx, ip)] = mac
        for key in _nh_keys(ifx, ip):
            if key in self.adjs.index:  # next hop of routes: rewritten in place
                self.adjs.set_rewrite(self.adjs.index[key], mac, itf.mac)
        host = ipaddress.ip_network(f"{ip}/{ip.max_prefixlen}")
        existing = self.routes.get((itf.table, host))
        on_link = any(ip in x.network for x in itf.addresses if x.version == ip.version)
        if (on_link or self._gleaned_on(ifx, ip)) and (existing is None
                                                       or existing.kind == "neighbor"):
            if existing is None:  # (else it is installed already, on the same adjacency)
                lb = self.lbs.get([self.nh_adjacency(ifx, ip)])
                self._install(Route(host, itf.table, "neighbor", [(ifx, ip)]), lb)

    @_changes
    def del_neighbor(self, ip: IPAddress | str, ifname: str) -> None:
        ip = ipaddress.ip_address(ip)
        ifx = self.interface_index(ifname)
        if self.neighbors.pop((ifx, ip), None) is None:
            raise RouteError(f"no neighbor {ip} on {ifname}")
        for key in _nh_keys(ifx, ip):
            if key in self.adjs.index:
                self.adjs.set_rewrite(self.adjs.index[key], None, self.interfaces[ifx].mac)
        host = ipaddress.ip_network(f"{ip}/{ip.max_prefixlen}")
        table = self.interfaces[ifx].table
        r = self.routes.get((table, host))
        if r is not None and r.kind == "neighbor":
            self._uninstall(table, host)

    def _gleaned_on(self, ifx: int, ip: IPAddress) -> bool:
        """Whether the FIB reaches ``ip`` by resolving it on ``ifx`` (a ``dev`` route
        outside the interface's subnets): its neighbour then needs a host route too, or
        every packet would ask for it again."""
        lb = self.lpm[ip.version].lookup(self.interfaces[ifx].table, ip)
        if lb < 0 or self.lbs.paths[lb] is None:
            return False
        return any(
            (k := self.adjs.keys[a]) is not None and k.kind == ADJ_GLEAN and k.ifx == ifx
            for a in self.lbs.paths[lb]
        )

    def neighbor_in_use(self, ip: IPAddress, ifx: int) -> bool:
        """Whether anything but the neighbour's own host route goes through it (a route's
        next hop, an SRv6 End.X): such an entry is worth keeping under pressure."""
        a = self.adjs.index.get(AdjKey(ADJ_INCOMPLETE, ifx, ip.version, int(ip)))
        if a is None:
            return False
        host = ipaddress.ip_network(f"{ip}/{ip.max_prefixlen}")
        r = self.routes.get((self.interfaces[ifx].table, host))
        own = r is not None and r.kind == "neighbor"
        if not own:
            return self.adjs.refs[a] > 0
        # the host route's load-balance [a] may be shared with single-path routes via it
        return self.adjs.refs[a] > 1 or self.lbs.refs[r.lb] > 1

    # -- the data-path view -----------------------------------------------------------------

    def interface_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ifc, if_mac, if_ip6): the interfaces as the data path reads them
        (fib/layout.py's I_* and IF6_* columns)."""
        n = len(self.interfaces)
        ifc = np.zeros((n, IF_COLS), dtype=np.int32)
        if_mac = np.zeros((n, 6), dtype=np.uint8)
        n6 = max([sum(a.version == 6 for a in itf.addresses) for itf in self.interfaces] + [0])
        if_ip6 = np.zeros((n, IF6_OTHER + n6, 16), dtype=np.uint8)
        for i, itf in enumerate(self.interfaces):
            ifc[i, I_MTU] = itf.mtu
            ifc[i, I_FIB4] = self.lpm[4].table_index(itf.table)
            ifc[i, I_FIB6] = self.lpm[6].table_index(itf.table)
            ifc[i, I_UP] = 1
            ifc[i, I_REPLY_ADJ] = self.adjs.index[AdjKey(ADJ_REPLY, i)]
            ifc[i, I_REDIRECTS] = int(itf.redirects)
            ifc[i, I_HOST] = int(itf.host)
            v4 = [a for a in itf.addresses if a.version == 4]
            v6 = [a for a in itf.addresses if a.version == 6 and not a.ip.is_link_local]
            if v4:
                ifc[i, I_IP4] = np.uint32(int(v4[0].ip)).view(np.int32)
                ifc[i, I_IP4_MASK] = np.uint32(int(v4[0].network.netmask)).view(np.int32)
            if_mac[i] = np.frombuffer(itf.mac, dtype=np.uint8)
            if_ip6[i, IF6_LL] = np.frombuffer(itf.link_local.packed, dtype=np.uint8)
            if v6:
                if_ip6[i, IF6_GLOBAL] = np.frombuffer(v6[0].ip.packed, dtype=np.uint8)
            for k, a in enumerate(a for a in itf.addresses if a.version == 6):
                if_ip6[i, IF6_OTHER + k] = np.frombuffer(a.ip.packed, dtype=np.uint8)
        return ifc, if_mac, if_ip6

    @property
    def generation(self) -> int:
        """Grows with every change of the tables: SR policies' first-hop caches compare it
        (the data path's OPT_FIB_GEN)."""
        return (self.lpm[4].generation + self.lpm[6].generation + self.srv6.generation
                + self.adjs.generation)

    def describe_paths(self, route: Route) -> str:
        if route.kind == "local":
            return "local"
        if route.kind == "anycast":
            return "local (subnet-router anycast)"
        if route.kind.startswith("srv6") or route.kind in ("broadcast",) + REJECT_KINDS:
            return route.kind
        if not route.paths:
            return "blackhole"
        out = []
        for ifx, nh in route.paths:
            name = self.interfaces[ifx].name
            if nh is None:
                out.append(f"dev {name}")
            else:
                mac = self.neighbors.get((ifx, nh))
                out.append(
                    f"via {nh} dev {name}"
                    + (f" lladdr {format_mac(mac)}" if mac else " (incomplete)")
                )
        return ", ".join(out)
