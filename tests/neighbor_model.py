"""Review helpers: an independent recount of Fib / NeighborTable bookkeeping (plain Python)."""

import ipaddress
from collections import Counter

from vecroute.control.config import parse_config
from vecroute.control.neighbors import FAILED, INCOMPLETE, PERMANENT, NeighborTable
from vecroute.fib.fib import Fib
from vecroute.fib.layout import A_IF, A_TYPE, ADJ_INCOMPLETE, ADJ_REWRITE, LB_N, LB_START
from vecroute.srv6.layout import SID_ADJ

RMAC = "02:00:00:00:00:01"


def cfg(neighbors=(), routes=None):
    return parse_config(
        {
            "interfaces": [
                {"name": "eth0", "mac": RMAC, "addresses": ["10.1.0.254/24", "2001:db8:1::1/64"]},
                {"name": "eth1", "mac": "02:00:00:00:01:01",
                 "addresses": ["10.2.0.254/24", "2001:db8:2::1/64"]},
            ],
            "routes": routes if routes is not None else [
                {"prefix": "203.0.113.0/24", "via": "10.1.0.1"}],
            "neighbors": list(neighbors),
        }
    )


def check_fib(fib: Fib) -> None:
    adjs, lbs = fib.adjs, fib.lbs
    lb_refs = Counter(r.lb for r in fib.routes.values())
    for (table, prefix), r in fib.routes.items():
        i = r.lb
        key = lbs.paths[i]
        assert key is not None, f"route {prefix} -> freed LB {i}"
        assert lbs.index.get(key) == i, f"route {prefix}: LB {i} not in index"
        start, n = int(lbs.lb[i, LB_START]), int(lbs.lb[i, LB_N])
        assert n == len(key), f"LB {i}: LB_N {n} != {len(key)}"
        assert list(lbs.lb_buckets[start:start + n]) == list(key), f"LB {i} buckets stale"
        for a in key:
            k = adjs.keys[a]
            assert k is not None, f"route {prefix} -> LB {i} -> freed adjacency {a}"
            assert adjs.index[k] == a
        assert fib.lpm[prefix.version].get(table, prefix) == i, f"lpm for {prefix} != {i}"
    for i, key in enumerate(lbs.paths):
        if key is None:
            continue
        assert lbs.refs[i] == lb_refs.get(i, 0), (
            f"LB {i} {key}: refs {lbs.refs[i]} != routes {lb_refs.get(i, 0)}")
    # adjacency refs: live LBs (refs > 0) each once, plus SRv6 pins
    want = Counter()
    for i, key in enumerate(lbs.paths):
        if key is not None and lbs.refs[i] > 0:
            for a in set(key):
                want[a] += 1
    srv6 = fib.srv6
    for ls in srv6.localsids.values():
        if ls.behavior in ("End.X", "End.DX4", "End.DX6"):
            a = int(srv6.sr_sid[ls.index, SID_ADJ])
            k = adjs.keys[a]
            assert k is not None, f"localsid {ls.sid} -> freed adjacency {a}"
            assert k.kind == ADJ_INCOMPLETE and k.nh == int(ls.nh), (
                f"localsid {ls.sid} -> adjacency {a} of {k}, not {ls.nh}")
            want[a] += 1
    for a, k in enumerate(adjs.keys):
        if k is None:
            assert a in adjs._free
            continue
        assert adjs.index[k] == a
        if k.kind == ADJ_INCOMPLETE:
            assert adjs.refs[a] == want.get(a, 0), (
                f"adjacency {a} {k}: refs {adjs.refs[a]} != recount {want.get(a, 0)}")
            assert adjs.refs[a] > 0, f"adjacency {a} {k}: unreferenced, never freed (leak)"
            ip = ipaddress.ip_address(k.nh) if k.family == 4 else ipaddress.IPv6Address(k.nh)
            mac = fib.neighbors.get((k.ifx, ip))
            t = int(adjs.adj[a, A_TYPE])
            assert int(adjs.adj[a, A_IF]) == k.ifx
            if mac is None:
                assert t == ADJ_INCOMPLETE, f"adjacency {a} {ip}: type {t} without a MAC"
            else:
                assert t == ADJ_REWRITE, f"adjacency {a} {ip}: type {t}, MAC known"
    assert len(set(adjs._free)) == len(adjs._free)


def check_table(tb: NeighborTable) -> None:
    fib = tb.fib
    ents = tb.entries
    for key, n in ents.items():
        assert key == (n.ifx, n.ip)
    for fam in (4, 6):
        lim = [k for k, n in ents.items() if n.ip.version == fam and n.state != PERMANENT]
        lru = {k for (f, _), o in tb._lru.items() if f == fam for k in o}
        assert lru == set(lim), f"lru{fam} != non-permanent entries"
        assert tb.count(fam) == len(lim)
    per_if = Counter((n.ip.version, n.ifx) for n in ents.values() if n.state != PERMANENT)
    for (fam, ifx), o in tb._lru.items():
        assert per_if.get((fam, ifx), 0) == len(o) == tb.on_interface(fam, ifx)
        assert all(k[0] == ifx for k in o), f"an entry of another interface in {fam, ifx}"
    assert tb._queued == sum(len(n.pending) for n in ents.values()), "_queued drift"
    macs = {k: n.mac for k, n in ents.items() if n.mac is not None}
    assert macs == fib.neighbors, f"table MACs {macs} != fib.neighbors {fib.neighbors}"
    heap_items = {(d, k) for d, _, k in tb._heap}
    for k, n in ents.items():
        if n.state == PERMANENT:
            assert n.due is None
            continue
        assert n.due is not None, f"{k} {n.state} probes={n.probes}: no timer (stuck)"
        assert (n.due, k) in heap_items, f"{k}: due {n.due} not in the heap"
        if n.state == INCOMPLETE or n.state == FAILED:
            assert n.mac is None
        else:
            assert n.mac is not None
    # host routes of kind neighbor only for known neighbours
    for (_table, prefix), r in fib.routes.items():
        if r.kind == "neighbor":
            ifx, ip = r.paths[0]
            assert (ifx, ip) in fib.neighbors, f"neighbor route {prefix} without a neighbour"
