"""The FIB's bulk route path (Fib.install_many / uninstall_many, the RouteTable's int-keyed
half) and KernelSync's fast path for plain route messages.

Oracles: a plain-Python longest-prefix match over the routes that should be there (a dict
scan by length), the same changes applied one route at a time, and KernelSync's full
message path (the one test_linux_nl checks against the kernel) for the fast one. No root
needed: the route messages are built here as bytes, as the kernel would send them.
"""

from __future__ import annotations

import ipaddress
import random
import struct

import numpy as np
import pytest

from vecroute.control.config import parse_config
from vecroute.control.linux_nl import KernelSync
from vecroute.control.neighbors import NeighborTable
from vecroute.fib.fib import Fib, RouteError
from vecroute.fib.route_table import bulk_key

MAC0, MAC1 = "02:00:00:00:53:01", "02:00:00:00:53:02"
CFG = {"interfaces": [
    {"name": "port0", "mac": MAC0, "addresses": ["192.0.2.1/26", "2001:db8:1::1/64"]},
    {"name": "port1", "mac": MAC1, "addresses": ["192.0.2.65/26", "2001:db8:2::1/64"]},
]}
M64 = (1 << 64) - 1


def _fib() -> Fib:
    return Fib.from_config(parse_config(CFG))


def _values(fib: Fib, f: int) -> list[tuple]:
    """A few (kind, paths, lb) values, made in the same order in every Fib."""
    out = []
    for ifx, gw in ((0, "192.0.2.2"), (1, "192.0.2.66"), (0, "2001:db8:1::2"),
                    (1, "2001:db8:2::2")):
        nh = ipaddress.ip_address(gw)
        if nh.version == 4 and f == 6:
            continue
        paths = [(ifx, nh)]
        out.append(("kernel", paths, fib.lbs.get(fib.path_adjacencies(f, paths))))
    both = [(0, ipaddress.ip_address("2001:db8:1::2")), (1, ipaddress.ip_address("2001:db8:2::2"))]
    out.append(("kernel", both, fib.lbs.get(fib.path_adjacencies(f, both), [1, 3])))
    out.append(("blackhole", [], fib.lbs.get([fib.special_adjacency("blackhole")])))
    for v in out:
        fib.lbs.ref(v[2])  # held, as KernelSync's path cache does: never freed under us
    return out


def _arrays(f: int, keys: list[tuple]):
    lens = np.array([k[4] for k in keys], np.int64)
    if f == 4:
        return np.array([k[3] for k in keys], np.uint32), lens
    return (np.array([k[2] for k in keys], np.uint64),
            np.array([k[3] for k in keys], np.uint64)), lens


def _random_key(rng: random.Random, f: int, table: int) -> tuple:
    bits = 32 if f == 4 else 128
    plen = rng.choice([0, 1, 8, 12, 16, 17, 20, 23, 24, 25, 31, 32] if f == 4
                      else [0, 3, 16, 29, 32, 40, 48, 56, 63, 64, 65, 72, 96, 127, 128])
    a = rng.getrandbits(bits) >> (bits - plen) << (bits - plen) if plen else 0
    if rng.random() < 0.3:  # near documentation space: overlaps with shorter prefixes
        base = 0xC0000200 if f == 4 else 0x20010DB8 << 96
        a = (base | (rng.getrandbits(bits) & ((1 << (bits - 16)) - 1)))
        a = a >> (bits - plen) << (bits - plen) if plen else 0
    return (f, table, a >> 64, a & M64, plen) if f == 6 else (4, table, 0, a, plen)


def _ref_lookup(ref: dict, f: int, table: int, addr: int):
    """Longest match by scanning lengths (the plain-Python oracle): the value's paths."""
    bits = 32 if f == 4 else 128
    for plen in range(bits, -1, -1):
        a = addr >> (bits - plen) << (bits - plen) if plen else 0
        key = (f, table, a >> 64, a & M64, plen) if f == 6 else (4, table, 0, a, plen)
        v = ref.get(key)
        if v is not None:
            return v
    return None


def _fib_lookup(fib: Fib, f: int, table: int, addr: int):
    lb = fib.lpm[f].lookup(table, addr)
    return None if lb < 0 else fib.lbs.paths[lb]


def _own(fib: Fib) -> dict:
    """The routes the config's addresses installed (local, connected, ...), by int key."""
    return {bulk_key(t, net): r for (t, net), r in fib.routes.items() if r.kind != "kernel"
            and r.kind != "blackhole"}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_batched_equals_one_by_one_and_reference(seed: int) -> None:
    rng = random.Random(seed)
    one, bat = _fib(), _fib()
    vals = {f: (_values(one, f), _values(bat, f)) for f in (4, 6)}
    own = _own(one)
    base = [list(one.lbs.refs), list(bat.lbs.refs)]  # (the drop one: broadcast routes)
    ref: dict[tuple, tuple] = {}  # key -> value index's adjacency paths
    live: list[tuple] = []
    for _ in range(6):
        for f in (4, 6):
            for table in (0, 10):
                # a batch of adds: new prefixes, replacements, a prefix twice (last wins)
                keys = [_random_key(rng, f, table) for _ in range(300)]
                keys += rng.sample(live, min(len(live), 60)) if live else []
                keys = [k for k in keys if k[0] == f and k[1] == table and k not in own]
                keys += keys[:5]
                pick = [rng.randrange(len(vals[f][0])) for _ in keys]
                for k, i in zip(keys, pick, strict=True):
                    v = vals[f][0][i]
                    one.install_many(f, table, [k], [v], *_arrays(f, [k]), [v[2]])
                vb = [vals[f][1][i] for i in pick]
                bat.install_many(f, table, keys, vb, *_arrays(f, keys), [v[2] for v in vb])
                for k, i in zip(keys, pick, strict=True):
                    ref[k] = bat.lbs.paths[vals[f][1][i][2]]
                live = list(ref)
                # a batch of deletes: present ones and absent ones
                gone = rng.sample([k for k in live if k[0] == f and k[1] == table],
                                  min(40, sum(1 for k in live if k[:2] == (f, table))))
                gone += [_random_key(rng, f, table) for _ in range(10)]
                gone = [k for k in gone if k not in own]
                n_one = sum(one.uninstall_many(f, table, [k], *_arrays(f, [k])) for k in gone)
                n_bat = bat.uninstall_many(f, table, gone, *_arrays(f, gone))
                expect = len({k for k in gone if k in ref})
                assert n_one == n_bat == expect
                for k in gone:
                    ref.pop(k, None)
                live = list(ref)
        # the same routes, the same references, the same lookups as the reference
        got_one = {bulk_key(t, n): (r.kind, r.lb) for (t, n), r in one.routes.items()}
        got_bat = {bulk_key(t, n): (r.kind, r.lb) for (t, n), r in bat.routes.items()}
        assert got_one == got_bat
        assert len(one.routes) == len(bat.routes) == len(ref) + len(own)
        assert one.lbs.refs == bat.lbs.refs
        for f in (4, 6):
            bits = 32 if f == 4 else 128
            for table in (0, 10):
                addrs = [rng.getrandbits(bits) for _ in range(300)]
                addrs += [(k[2] << 64 | k[3]) | rng.getrandbits(bits - k[4]) if k[4] < bits
                          else (k[2] << 64 | k[3]) for k in rng.sample(live, 300)
                          if k[:2] == (f, table)]
                for a in addrs:
                    want = _ref_lookup(ref, f, table, a)
                    if want is None and table == 0:
                        continue  # the config's own routes answer there (not modelled)
                    if want is None:
                        assert _fib_lookup(bat, f, table, a) is None
                        continue
                    assert _fib_lookup(bat, f, table, a) == want, (f, table, hex(a))
                    assert _fib_lookup(one, f, table, a) == want
    # everything removed: every load-balance the routes took is let go again
    for side, fib in enumerate((one, bat)):
        for f in (4, 6):
            for table in (0, 10):
                ks = [k for k in ref if k[:2] == (f, table)]
                fib.uninstall_many(f, table, ks, *_arrays(f, ks))
        for f in (4, 6):
            assert all(fib.lbs.refs[v[2]] == base[side][v[2]] for v in vals[f][side])
        assert {bulk_key(t, n) for t, n in fib.routes} == set(own)


def test_route_table_one_by_one_and_bulk_at_one_prefix() -> None:
    fib = _fib()
    net = ipaddress.ip_network("198.51.100.0/24")
    key = bulk_key(0, net)
    static = fib.add_route(net, [ipaddress.ip_address("192.0.2.2")])
    assert fib.routes[(0, net)] is static and fib.lbs.refs[static.lb] == 1
    n = len(fib.routes)
    v = _values(fib, 4)[1]  # via 192.0.2.66 (held once by _values)
    fib.install_many(4, 0, [key], [v], *_arrays(4, [key]), [v[2]])  # replaces the static
    r = fib.routes[(0, net)]
    assert (r.kind, r.lb, r.prefix, r.table) == ("kernel", v[2], net, 0)
    assert len(fib.routes) == n and fib.lbs.refs[v[2]] == 2
    assert fib.lbs.refs[static.lb] == 1  # only _values' hold on the same path is left
    assert sum(1 for k in fib.routes if k == (0, net)) == 1
    assert fib.lpm[4].get(0, net) == v[2]
    again = fib.add_route(net, [ipaddress.ip_address("192.0.2.3")])  # replaces the bulk one
    assert fib.routes.get((0, net)) is again and fib.lbs.refs[v[2]] == 1
    assert len(fib.routes) == n and fib.routes.get_bulk(key)[0] == "static"
    fib.install_many(4, 0, [key], [v], *_arrays(4, [key]), [v[2]])
    assert fib.lbs.refs[again.lb] == 0 and fib.lbs.refs[v[2]] == 2
    fib.del_route(net)  # an operator's delete of a mirrored route
    assert (0, net) not in fib.routes and fib.lpm[4].get(0, net) is None
    assert fib.lbs.refs[v[2]] == 1 and len(fib.routes) == n - 1
    assert fib.uninstall_many(4, 0, [key], *_arrays(4, [key])) == 0


def test_put_routes_replaces_either_half() -> None:
    """RouteTable.put_routes (a config's routes gathered): what it replaces is let go,
    whichever half held it, and the prefix is then in the one-by-one half only."""
    from vecroute.fib.route_table import Route, RouteTable

    t = RouteTable()
    a, b = ipaddress.ip_network("198.51.100.0/24"), ipaddress.ip_network("2001:db8:9::/48")
    ka, kb = bulk_key(0, a), bulk_key(7, b)
    t.put_many([ka], [("kernel", [], 5)])
    t[(7, b)] = Route(b, 7, "static", [], None, 6)
    gone = t.put_routes([(ka, Route(a, 0, "static", [], None, 8)),
                         (kb, Route(b, 7, "static", [], None, 9))])
    assert gone == {5: 1, 6: 1}
    assert t.get((0, a)).lb == 8 and t.get((7, b)).lb == 9 and len(t) == 2
    assert t.get_bulk(ka) == ("static", [], 8) and t.pop_many([ka]) == {8: 1}
    assert len(t) == 1 and (0, a) not in t


# -- KernelSync's fast path against its full path, from message bytes -----------------------


def _rta(t: int, payload: bytes) -> bytes:
    ln = 4 + len(payload)
    return struct.pack("=HH", ln, t) + payload + b"\0" * ((-ln) % 4)


def _addr(f: int, a: int) -> bytes:
    return a.to_bytes(4 if f == 4 else 16, "big")


def _msg(t: int, body: bytes, seq: int = 0) -> bytes:
    return struct.pack("=IHHII", 16 + len(body), t, 0, seq, 0) + body


def _route(t: int, f: int, a: int, plen: int, *, table: int = 254, rtype: int = 1,
           metric: int = 0, oif: int = 0, gw: int | None = None, nhid: int = 0,
           multipath: list | None = None, tos: int = 0, flags: int = 0) -> bytes:
    fam = 2 if f == 4 else 10
    body = struct.pack("=BBBBBBBBI", fam, plen, 0, tos, min(table, 255), 4, 0, rtype, flags)
    body += _rta(15, struct.pack("=I", table)) + _rta(1, _addr(f, a))
    if metric:
        body += _rta(6, struct.pack("=I", metric))
    if nhid:
        body += _rta(30, struct.pack("=I", nhid))
    if oif:
        body += _rta(4, struct.pack("=I", oif))
    if gw is not None:
        body += _rta(5, _addr(f, gw))
    if multipath:
        mp = b""
        for hop_oif, hop_gw, w in multipath:
            at = _rta(5, _addr(f, hop_gw))
            mp += struct.pack("=HBBI", 8 + len(at), 0, w - 1, hop_oif) + at
        body += _rta(9, mp)
    return _msg(t, body)


def _nexthop(nid: int, f: int, oif: int, gw: int) -> bytes:
    body = struct.pack("=BBBBI", 2 if f == 4 else 10, 0, 4, 0, 0)
    body += _rta(1, struct.pack("=I", nid)) + _rta(5, struct.pack("=I", oif))
    body += _rta(6, _addr(f, gw))
    return _msg(104, body)


class _Target:
    def __init__(self) -> None:
        self.fib = _fib()
        self.neigh = NeighborTable(self.fib, lambda ifx, frame: None, lambda p, e: None)

    def commit(self) -> None:
        pass


GW4 = {11: [int(ipaddress.ip_address("192.0.2.2")), int(ipaddress.ip_address("192.0.2.3"))],
       12: [int(ipaddress.ip_address("192.0.2.66"))]}
GW6 = {11: [int(ipaddress.ip_address("2001:db8:1::2"))],
       12: [int(ipaddress.ip_address("2001:db8:2::2")), int(ipaddress.ip_address("2001:db8:2::3"))]}


def _stream(rng: random.Random, n: int) -> list[bytes]:
    """Nexthop objects, then a random mix of route messages: plain ones (fast path) and
    every other kind (multipath, blackhole, local table, metrics, deletes, cloned, tos,
    through a non-mirror device), with repeats of the same prefixes."""
    out = [_nexthop(1, 4, 11, GW4[11][0]), _nexthop(2, 4, 12, GW4[12][0]),
           _nexthop(3, 6, 11, GW6[11][0]), _nexthop(4, 6, 12, GW6[12][1])]
    keys = [_random_key(rng, rng.choice((4, 6)), rng.choice((0, 100))) for _ in range(n // 3)]
    for _ in range(n):
        f, table, hi, lo, plen = rng.choice(keys)
        a = (hi << 64) | lo
        ktab = 254 if table == 0 else table
        gws = GW4 if f == 4 else GW6
        oif = rng.choice((11, 12))
        gw = rng.choice(gws[oif])
        x = rng.random()
        kw: dict = {"table": ktab, "metric": rng.choice((0, 0, 0, 100))}
        if x < 0.35:
            m = _route(24, f, a, plen, oif=oif, gw=gw, **kw)
        elif x < 0.6:
            m = _route(24, f, a, plen, nhid=rng.choice((1, 2) if f == 4 else (3, 4)), **kw)
        elif x < 0.65:
            m = _route(24, f, a, plen, multipath=[(11, gws[11][0], 2), (12, gws[12][0], 3)],
                       **kw)
        elif x < 0.7:
            m = _route(24, f, a, plen, rtype=rng.choice((6, 7, 8)), **kw)
        elif x < 0.73:
            m = _route(24, f, a, plen, oif=oif, gw=gw, table=255, metric=0)
        elif x < 0.75:
            m = _route(24, f, a, plen, oif=99, gw=gw, **kw)  # not a mirror
        elif x < 0.77:
            m = _route(24, f, a, plen, oif=oif, gw=gw, tos=4 if f == 4 else 0,
                       flags=0x200 if f == 6 else 0, **kw)
        else:
            m = _route(25, f, a, plen, oif=oif, gw=gw, **kw)
        out.append(m)
    return out


def _feed(sync: KernelSync, msgs: list[bytes], chunk: int) -> None:
    for i in range(0, len(msgs), chunk):
        data = b"".join(msgs[i : i + chunk])
        buf = np.frombuffer(data, np.uint8).copy()
        sync._handle(buf, len(data))
        sync._flush()


def _view(sync: KernelSync) -> tuple:
    fib = sync.target.fib
    routes = {bulk_key(t, n): (r.kind, fib.lbs.paths[r.lb],
                               tuple((ifx, str(nh)) for ifx, nh in r.paths))
              for (t, n), r in fib.routes.items()}
    return routes, dict(sync._inst), {k: (e[0], dict(e[1])) for k, e in sync._rt.items()}, \
        dict(sync.ignored), {k: set(v) for k, v in sync._nh_users.items() if v}


@pytest.mark.parametrize("seed", [7, 8])
def test_fast_path_equals_full_path(seed: int) -> None:
    msgs = _stream(random.Random(seed), 3000)
    views = []
    for fast in (True, False):
        sync = KernelSync(_Target(), None, {11: 0, 12: 1})
        if not fast:
            sync._routes_fast = sync._routes_full  # every message the full way
        _feed(sync, msgs, 97)
        views.append(_view(sync))
    assert views[0] == views[1]
    routes, inst = views[0][0], views[0][1]
    assert sum(1 for v in routes.values() if v[0] == "kernel") > 100  # the test bites
    assert set(inst) <= set(routes)


def test_apply_failure_keeps_installed_set_in_step() -> None:
    msgs = _stream(random.Random(9), 2000)
    sync = KernelSync(_Target(), None, {11: 0, 12: 1})
    fib = sync.target.fib
    real = fib.install_many
    calls = []

    def flaky(*args, **kwargs):
        calls.append(args[:2])
        if len(calls) == 2:
            raise RuntimeError("injected")
        return real(*args, **kwargs)

    fib.install_many = flaky
    data = b"".join(msgs)
    buf = np.frombuffer(data, np.uint8).copy()
    sync._handle(buf, len(data))
    with pytest.raises(RuntimeError):
        sync._flush()
    # what _inst claims is what the FIB holds, and the keys not applied wait for a flush
    for key in sync._inst:
        assert fib.routes.get_bulk(key) is not None, key
    assert sync._touched
    sync._flush()
    ref = KernelSync(_Target(), None, {11: 0, 12: 1})
    ref._handle(np.frombuffer(data, np.uint8).copy(), len(data))
    ref._flush()
    assert sync._inst == ref._inst
    a = {bulk_key(t, n): (r.kind, fib.lbs.paths[r.lb]) for (t, n), r in fib.routes.items()}
    rf = ref.target.fib
    b = {bulk_key(t, n): (r.kind, rf.lbs.paths[r.lb]) for (t, n), r in rf.routes.items()}
    assert a == b


def _config_routes(rng: random.Random, n: int) -> list[dict]:
    """Random [[routes]]: mostly one next hop (the bulk path), with ECMP, dev and
    blackhole routes among them, prefixes given twice, and routes that replace a
    route of the other kind at the same prefix, both ways round."""
    hops4 = {0: ["192.0.2.2", "192.0.2.66"], 10: ["198.51.100.2"]}
    hops6 = {0: ["2001:db8:1::2", "2001:db8:2::2"], 10: []}
    out: list[dict] = []
    for _ in range(n):
        table = rng.choice([0, 0, 0, 10])
        f = 6 if rng.random() < 0.3 and hops6[table] else 4
        k = _random_key(rng, f, table)
        a = k[2] << 64 | k[3]
        net = (ipaddress.IPv6Network((a, k[4])) if f == 6
               else ipaddress.IPv4Network((k[3], k[4])))
        if table == 0 and (net.overlaps(ipaddress.ip_network("192.0.2.0/24"))
                           or net.overlaps(ipaddress.ip_network("2001:db8::/32"))):
            continue  # not over the connected subnets (a config may, but not the point)
        r: dict = {"prefix": str(net)}
        if table:
            r["table"] = table
        hops = hops6[table] if f == 6 else hops4[table]
        kind = rng.random()
        if kind < 0.75:
            r["via"] = rng.choice(hops)
        elif kind < 0.82 and len(hops) > 1:
            r["via"] = hops
            if rng.random() < 0.5:
                r["weights"] = [rng.randint(1, 4) for _ in hops]
        elif kind < 0.9:
            r["dev"] = "port0" if table == 0 else "port2"
        else:
            r["blackhole"] = True
        out.append(r)
        if rng.random() < 0.1 and out:  # an earlier prefix again, maybe another kind
            again = dict(rng.choice(out[-3:] if rng.random() < 0.5 else out))  # (recent:
            # in the same bulk batch, where the last one must win too)
            again.pop("weights", None)
            again.pop("blackhole", None)
            again.pop("dev", None)
            again["via"] = rng.choice(hops6[again.get("table", 0)] if ":" in again["prefix"]
                                      else hops4[again.get("table", 0)])
            if rng.random() < 0.3:
                del again["via"]
                again["blackhole"] = True
            out.append(again)
    return out


def _resolved(fib: Fib) -> dict:
    """Every route by int key: kind, paths, weights and its buckets' adjacency keys
    (indices differ with the order things were made; keys do not)."""
    return {bulk_key(t, net): (r.kind, r.paths, r.weights,
                               tuple(fib.adjs.keys[a] for a in fib.lbs.paths[r.lb]))
            for (t, net), r in fib.routes.items()}


CFG3 = dict(CFG, interfaces=[*CFG["interfaces"], {
    "name": "port2", "mac": "02:00:00:00:53:03", "addresses": ["198.51.100.1/24"],
    "table": 10}])


def _both_ways(cfg: dict) -> tuple[Fib, Fib]:
    """``cfg`` built by Fib.from_config, and without its routes, then each route added by
    add_route in the file's order (what from_config did before it gathered them)."""
    bulk = Fib.from_config(parse_config(cfg))
    one = Fib.from_config(parse_config({k: v for k, v in cfg.items() if k != "routes"}))
    for r in parse_config(cfg).routes:
        one.add_route(r.prefix, r.via, dev=r.dev, table=r.table, weights=r.weights,
                      blackhole=r.blackhole)
    assert len(bulk.routes) == len(one.routes)
    assert _resolved(bulk) == _resolved(one)
    live = [{tuple(f.adjs.keys[a] for a in f.lbs.paths[lb]): f.lbs.refs[lb]
             for lb in range(len(f.lbs.paths)) if f.lbs.paths[lb] is not None}
            for f in (bulk, one)]  # none left unreferenced: made for a replaced route
    assert live[0] == live[1]
    adjs = [{k: f.adjs.refs[i] for i, k in enumerate(f.adjs.keys) if k is not None}
            for f in (bulk, one)]
    assert adjs[0] == adjs[1]
    return bulk, one


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_config_routes_in_bulk_equal_one_by_one(seed: int) -> None:
    """Fib.from_config installs single-next-hop routes in bulk batches: the routes, their
    load-balances' references and every lookup must be what add_route, route after route
    in the file's order, makes."""
    rng = random.Random(seed)
    bulk, one = _both_ways(dict(CFG3, routes=_config_routes(rng, 1500)))
    for f in (4, 6):
        bits = 32 if f == 4 else 128
        for table in (0, 10):
            for _ in range(2000):
                a = rng.getrandbits(bits)
                got = [_fib_lookup(x, f, table, a) for x in (bulk, one)]
                assert [None if g is None else tuple(x.adjs.keys[i] for i in g)
                        for g, x in zip(got, (bulk, one), strict=True)][0] == \
                    [None if g is None else tuple(x.adjs.keys[i] for i in g)
                     for g, x in zip(got, (bulk, one), strict=True)][1], (f, table, hex(a))


def test_config_route_errors_name_their_route() -> None:
    """A bulk route whose next hop is not on a connected subnet fails the build with its
    own index, as one added by itself does."""
    routes = [{"prefix": f"203.0.{i}.0/24", "via": "192.0.2.2"} for i in range(5)]
    routes.append({"prefix": "203.0.9.0/24", "via": "198.18.0.1"})
    with pytest.raises(RouteError, match=r"routes\[5\]\.via: next hop 198\.18\.0\.1 is not on"):
        Fib.from_config(parse_config(dict(CFG, routes=routes)))


def test_config_route_replaced_in_its_batch_leaves_nothing_behind() -> None:
    """The only route through a next hop, replaced by the next line: that next hop's
    load-balance and adjacency go, as when the routes are added one by one."""
    routes = [{"prefix": "203.0.113.0/24", "via": "192.0.2.2"},
              {"prefix": "203.0.113.0/24", "via": "192.0.2.66"}]
    for f in _both_ways(dict(CFG, routes=routes)):
        assert not [lb for lb in range(len(f.lbs.paths))
                    if f.lbs.paths[lb] is not None and f.lbs.refs[lb] == 0]


P4 = ["10.0.0.0/8", "10.1.0.0/16", "0.0.0.0/0", "192.0.2.0/26", "192.0.2.1/32",
      "192.0.2.2/32", "192.0.2.63/32", "192.0.2.0/24", "198.51.100.0/24", "198.51.100.1/32"]
P6 = ["::/0", "2001:db8:1::/64", "2001:db8:1::1/128", "2001:db8:1::/128", "2001:db8:1::2/128",
      "2001:db8::/32", "3fff::/20"]
NEIGHBORS = [("192.0.2.2", "port0"), ("192.0.2.66", "port1"), ("2001:db8:1::2", "port0"),
             ("198.51.100.2", "port2"), ("192.0.2.3", "port0")]


@pytest.mark.parametrize("seed", range(40))
def test_config_routes_over_own_prefixes_and_neighbours(seed: int) -> None:
    """Few prefixes, given again and again: the interfaces' own (connected, local,
    broadcast), neighbours' host routes, defaults; every kind of route; some neighbours
    configured. (A hold on a next hop's load-balance is what keeps it alive when the
    routes through it are replaced: without one this built a freed load-balance in.)"""
    rng = random.Random(seed)
    hops = {(4, 0): ["192.0.2.2", "192.0.2.66", "192.0.2.3"],
            (4, 10): ["198.51.100.2", "198.51.100.3"],
            (6, 0): ["2001:db8:1::2", "2001:db8:2::2"], (6, 10): []}
    routes = []
    for _ in range(rng.randint(2, 25)):
        f, table = rng.choice([4, 4, 6]), rng.choice([0, 0, 10])
        h = hops[f, table]
        r: dict = {"prefix": rng.choice(P4 if f == 4 else P6), "table": table}
        k = rng.random()
        if k < 0.7 and h:
            r["via"] = rng.choice(h)
        elif k < 0.8 and len(h) > 1:
            r["via"] = rng.sample(h, 2)
        elif k < 0.9:
            r["dev"] = "port2" if table else rng.choice(["port0", "port1"])
        else:
            r["blackhole"] = True
        routes.append(r)
    nbs = [{"ip": ip, "mac": f"02:00:00:00:{i:02x}:01", "interface": itf}
           for i, (ip, itf) in enumerate(NEIGHBORS) if rng.random() < 0.4]
    bulk, one = _both_ways(dict(CFG3, routes=routes, neighbors=nbs))
    for f, addrs in ((4, ["192.0.2.2", "192.0.2.1", "10.1.2.3", "192.0.2.63", "198.51.100.9"]),
                     (6, ["2001:db8:1::1", "2001:db8:1::2", "2001:db8:1::", "3fff::1"])):
        for table in (0, 10):
            for a in addrs:
                got = [_fib_lookup(x, f, table, int(ipaddress.ip_address(a)))
                       for x in (bulk, one)]
                keys = [None if g is None else tuple(x.adjs.keys[i] for i in g)
                        for g, x in zip(got, (bulk, one), strict=True)]
                assert keys[0] == keys[1], (f, table, a)


def test_a_next_hop_replaced_everywhere_with_an_ecmp_route_between() -> None:
    """The review's case: the load-balance of 192.0.2.2 is shared with an earlier route,
    which a later line replaces; it must stay alive for the gathered routes through it."""
    routes = [{"prefix": "10.0.0.0/8", "via": "192.0.2.2"},
              {"prefix": "11.0.0.0/8", "via": ["192.0.2.2", "192.0.2.66"]},
              {"prefix": "12.0.0.0/8", "via": "192.0.2.2"},
              {"prefix": "12.0.0.0/8", "via": "192.0.2.66"},
              {"prefix": "10.0.0.0/8", "via": "192.0.2.66"}]
    _both_ways(dict(CFG, routes=routes))
