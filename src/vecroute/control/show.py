"""Operator views of a running (or replaying) router: interfaces, errors, runtime, routes.

Each view is a list of plain dicts (the ``--json`` form) and a rich table built from the
same dicts, so text and JSON never disagree.

Big route tables are listed by :func:`routes_stream` instead: plain fixed-width text,
produced in chunks so that the control socket can send them while the event loop keeps
running (a rich table costs ~180 µs a row; the plain lines a few µs).
"""

from __future__ import annotations

import heapq
import ipaddress
import socket
from collections.abc import Iterator
from io import StringIO
from typing import Any

from rich.console import Console
from rich.table import Table

from vecroute.fib.fib import Fib
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
    DataPlaneState,
)
from vecroute.packet.node_ids import NODE_NAMES


def interfaces_view(fib: Fib, st: DataPlaneState) -> list[dict[str, Any]]:
    rows = []
    for i, itf in enumerate(fib.interfaces):
        s = st.if_stats[i]
        rows.append(
            {
                "name": itf.name,
                "mac": ":".join(f"{b:02x}" for b in itf.mac),
                "mtu": itf.mtu,
                "table": itf.table,
                "addresses": [str(a) for a in itf.addresses],
                "rx_packets": int(s[IFS_RX_PKTS]),
                "rx_bytes": int(s[IFS_RX_BYTES]),
                "tx_packets": int(s[IFS_TX_PKTS]),
                "tx_bytes": int(s[IFS_TX_BYTES]),
                "drops": int(s[IFS_DROPS]),
                "punts": int(s[IFS_PUNTS]),
            }
        )
    return rows


def errors_view(st: DataPlaneState, all_counters: bool = False) -> list[dict[str, Any]]:
    return [
        {
            "counter": c.name,
            "node": c.node,
            "kind": c.kind,
            "count": int(st.counters[i]),
            "description": c.description,
        }
        for i, c in enumerate(COUNTERS)
        if all_counters or st.counters[i]
    ]


# the text table's columns; the JSON also carries the raw "clocks" total, so that a
# client (`vecroute top`) can compute clocks per packet over an interval from two samples
RUNTIME_COLUMNS = ["node", "calls", "vectors", "vectors_per_call", "clocks_per_packet",
                   "ns_per_packet"]


def runtime_view(st: DataPlaneState) -> list[dict[str, Any]]:
    hz = cycles_per_second()
    rows = []
    for n, name in enumerate(NODE_NAMES):
        calls, pkts, clocks = (int(st.node_stats[n, c]) for c in (NS_CALLS, NS_PACKETS, NS_CLOCKS))
        if not calls:
            continue
        rows.append(
            {
                "node": name,
                "calls": calls,
                "vectors": pkts,
                "vectors_per_call": round(pkts / calls, 2),
                "clocks": clocks,
                "clocks_per_packet": round(clocks / pkts, 2) if pkts else 0.0,
                "ns_per_packet": round(clocks / pkts * 1e9 / hz, 2) if pkts else 0.0,
            }
        )
    return rows


def routes_view(fib: Fib, prefix: str | None = None) -> list[dict[str, Any]]:
    """Every route (or those inside PREFIX / matching ADDRESS) in display order, as dicts."""
    want = None
    if prefix:
        want = (
            ipaddress.ip_network(prefix, strict=False)
            if "/" in prefix
            else ipaddress.ip_address(prefix)
        )
    rows = []
    for (table, net), r in _sorted_routes(fib.routes):
        if want is not None:
            if isinstance(want, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
                if want.version != net.version or not net.subnet_of(want):
                    continue
            elif want.version != net.version or want not in net:
                continue
        rows.append(
            {
                "table": table,
                "prefix": str(net),
                "kind": r.kind,
                "paths": fib.describe_paths(r),
                "load_balance": r.lb,
            }
        )
    return rows


def _sorted_routes(routes: dict) -> list:
    return sorted(
        routes.items(),
        key=lambda kv: (
            kv[0][0],
            kv[0][1].version,
            int(kv[0][1].network_address),
            kv[0][1].prefixlen,
        ),
    )


HEADERS = {
    "vectors_per_call": "vec/call",
    "clocks_per_packet": "clocks/pkt",
    "ns_per_packet": "ns/pkt",
    "rx_packets": "rx pkts",
    "rx_bytes": "rx bytes",
    "tx_packets": "tx pkts",
    "tx_bytes": "tx bytes",
}


def table_of(title: str, rows: list[dict[str, Any]], columns: list[str] | None = None) -> Table:
    """A rich table from view rows (numbers right-aligned)."""
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    cols = columns or (list(rows[0].keys()) if rows else [])
    for c in cols:
        numeric = bool(rows) and isinstance(rows[0].get(c), (int, float))
        t.add_column(
            HEADERS.get(c, c), justify="right" if numeric else "left", no_wrap=c != "description"
        )
    for r in rows:
        t.add_row(*[", ".join(r[c]) if isinstance(r[c], list) else str(r[c]) for c in cols])
    return t


def render_table(title: str, rows: list[dict[str, Any]], columns: list[str] | None = None) -> str:
    """The rich table of view rows as plain text (120 columns, no colour)."""
    buf = StringIO()
    Console(file=buf, width=120, color_system=None).print(table_of(title, rows, columns))
    return buf.getvalue()


# -- show routes over big tables ---------------------------------------------------------------

ROUTE_COLUMNS = ["table", "prefix", "kind", "paths"]
RICH_MAX_ROWS = 200  # listings up to this many rows are rich tables (200 rows: ~35 ms)
JSON_MAX_ROWS = 10_000  # listings with more rows carry no data: --json is refused
CHUNK_ROWS = 1000  # rows per streamed text chunk (a few ms of work)
PREP_STEP = 8192  # routes examined, then sorted as one run, per preparation step
KIND_WIDTH = 13  # the longest kind, "srv6-localsid"
PREFIX_WIDTH = {4: 18, 6: 43}  # "255.255.255.255/32", a full IPv6 address + "/128"
_M128 = (1 << 128) - 1


def routes_stream(
    fib: Fib, prefix: str | None = None, table: int | None = None, out: Any = None
) -> Iterator[str]:
    """`show routes` as text chunks, for tables too big to render in one piece.

    Takes a snapshot of the routes when first advanced, then does bounded work per chunk:
    the filter and sort keys in steps of ``PREP_STEP`` routes (each step sorted as one run,
    the runs merged lazily), then ``CHUNK_ROWS`` rows per chunk; empty chunks mark
    preparation steps.  Rows and order are those of :func:`routes_view` (filtered by
    ``table`` too).  A listing of at most ``RICH_MAX_ROWS`` rows is the same rich table as
    the unstreamed command gives; a longer one is plain fixed-width text: a ``Routes: N``
    line, then per table and family a header and one line per route
    (``table prefix kind paths``, whitespace-separated, paths last).

    ``out`` (if given) gets ``data`` and ``data_error`` once the chunks are exhausted: the
    rows as :func:`routes_view` dicts when there are at most ``JSON_MAX_ROWS`` of them,
    otherwise ``data = None`` and a one-line ``data_error``.
    """
    routes = list(fib.routes.values())  # the snapshot; Route objects are replaced, not edited
    n = len(routes)
    shift = max(1, n.bit_length())  # sort key = route key << shift | snapshot index
    index_mask = (1 << shift) - 1
    net_filter = addr_filter = None
    if prefix:
        if "/" in prefix:
            w = ipaddress.ip_network(prefix, strict=False)
            net_filter = (w.version, int(w.network_address), w.prefixlen, w.max_prefixlen)
        else:
            w = ipaddress.ip_address(prefix)
            addr_filter = (w.version, int(w), w.max_prefixlen)
    runs = []
    for start in range(0, n, PREP_STEP):
        run = []
        for i in range(start, min(n, start + PREP_STEP)):
            r = routes[i]
            if table is not None and r.table != table:
                continue
            net = r.prefix
            v = net.version
            a = int(net.network_address)
            plen = net.prefixlen
            if net_filter is not None:
                wv, wa, wl, bits = net_filter
                if v != wv or plen < wl or (a ^ wa) >> (bits - wl):
                    continue
            elif addr_filter is not None:
                wv, wa, bits = addr_filter
                if v != wv or (a ^ wa) >> (bits - plen):
                    continue
            run.append(((((r.table << 1 | (v == 6)) << 136) | a << 8 | plen) << shift) | i)
        run.sort()
        runs.append(run)
        yield ""
    total = sum(len(x) for x in runs)
    keys = heapq.merge(*runs)
    rows: list[dict[str, Any]] | None = [] if total <= JSON_MAX_ROWS else None
    paths_of = _paths_cache(fib)
    if total <= RICH_MAX_ROWS:
        for k in keys:
            r = routes[k & index_mask]
            rows.append(_route_row(r, str(r.prefix), paths_of(r)))
        yield render_table("Routes", rows, ROUTE_COLUMNS)
    else:
        yield f"Routes: {total}\n"
        buf: list[str] = []
        section = None
        for k in keys:
            r = routes[k & index_mask]
            key = k >> shift
            plen = key & 0xFF
            a = (key >> 8) & _M128
            tv = key >> 136
            v6 = tv & 1
            if v6:
                if (a >> 48) in (0, 0xFFFF):  # ::/80, IPv4-mapped: inet_ntop writes dotted quads
                    text = str(r.prefix)
                else:
                    text = f"{socket.inet_ntop(socket.AF_INET6, a.to_bytes(16, 'big'))}/{plen}"
            else:
                text = f"{a >> 24}.{a >> 16 & 255}.{a >> 8 & 255}.{a & 255}/{plen}"
            if tv != section:
                section = tv
                width = PREFIX_WIDTH[6 if v6 else 4]
                buf.append(f"{'table':>5}  {'prefix':<{width}}  {'kind':<{KIND_WIDTH}}  paths\n")
            paths = paths_of(r)
            buf.append(f"{tv >> 1:>5}  {text:<{width}}  {r.kind:<{KIND_WIDTH}}  {paths}\n")
            if rows is not None:
                rows.append(_route_row(r, text, paths))
            if len(buf) >= CHUNK_ROWS:
                yield "".join(buf)
                buf.clear()
        if buf:
            yield "".join(buf)
    if out is not None:
        out.data = rows
        if rows is None:
            out.data_error = (
                f"show routes: {total} routes are too many for --json (at most "
                f"{JSON_MAX_ROWS}); narrow it with a prefix (show routes 203.0.113.0/24) "
                f"or a table (table N)"
            )


def _route_row(r, prefix: str, paths: str) -> dict[str, Any]:
    return {"table": r.table, "prefix": prefix, "kind": r.kind, "paths": paths,
            "load_balance": r.lb}


def _paths_cache(fib: Fib):
    """describe_paths, memoised by kind and paths for the length of one listing."""
    cache: dict[tuple, str] = {}

    def paths_of(r) -> str:
        key = (r.kind, *r.paths)
        s = cache.get(key)
        if s is None:
            s = cache[key] = fib.describe_paths(r)
        return s

    return paths_of
