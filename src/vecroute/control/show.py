"""Operator views of a running (or replaying) router: interfaces, errors, runtime, routes.

Each view is a list of plain dicts (the ``--json`` form) and a rich table built from the
same dicts, so text and JSON never disagree.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from vecroute.fib.fib import Fib
from vecroute.graph.counters import COUNTERS
from vecroute.graph.cycles import cycles_per_second
from vecroute.graph.node_ids import NODE_NAMES
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
                "clocks_per_packet": round(clocks / pkts, 2) if pkts else 0.0,
                "ns_per_packet": round(clocks / pkts * 1e9 / hz, 2) if pkts else 0.0,
            }
        )
    return rows


def routes_view(fib: Fib, prefix: str | None = None) -> list[dict[str, Any]]:
    import ipaddress

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
