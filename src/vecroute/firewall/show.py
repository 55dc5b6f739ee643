"""Text views: ``ctl fw show`` (the ``ipfw show`` layout) and ``ctl fw states``.

``ipfw show`` prints one line per rule: the rule number on 5 digits, the packet and byte
counters right-aligned to the widest value of each column, then the rule text::

    00100 12 1032 allow tcp from any to me 22 setup keep-state
    00200  0    0 deny ip from table(bad) to any
    65535  3  180 deny ip from any to any

With ``-t`` the last-match time comes after the counters (blank for rules never matched).
Dynamic states follow ipfw's ``-d`` form::

    ## Dynamic rules (1):
    00100 4 288 (297s) STATE tcp 192.0.2.10 40000 <-> 198.51.100.1 22
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from ipaddress import IPv4Address, IPv6Address

import numpy as np

from vecroute.firewall.rules import PROTO_NAMES, Rule
from vecroute.firewall.states import (
    FLAG_CREATOR_AB,
    ST_AHI,
    ST_ALO,
    ST_BHI,
    ST_BLO,
    ST_BYTES,
    ST_EXPIRE,
    ST_FLAGS,
    ST_META,
    ST_PKTS,
    ST_PORTS,
    ST_RULE,
)

_M64 = (1 << 64) - 1
_TIME_WIDTH = 24  # "Mon Jan  1 00:00:00 2024"


def _ctime(ns: int) -> str:
    return time.strftime("%a %b %e %H:%M:%S %Y", time.localtime(ns / 1e9))


def render_show(rules: Sequence[Rule], cnt: np.ndarray, with_time: bool = False) -> str:
    """The ``ipfw show`` text of a rule list and its counters (``cnt[i] = packets, bytes,
    last match ns``); one line per rule, default rule included, trailing newline."""
    if not rules:
        return ""
    pw = max(len(str(int(p))) for p in cnt[: len(rules), 0])
    bw = max(len(str(int(b))) for b in cnt[: len(rules), 1])
    lines = []
    for i, r in enumerate(rules):
        p, b, t = (int(x) for x in cnt[i])
        head = f"{r.number:05d} {p:>{pw}} {b:>{bw}} "
        if with_time:
            head += (_ctime(t) if p else " " * _TIME_WIDTH) + " "
        lines.append(head + r.body_text())
    return "\n".join(lines) + "\n"


def _addr(fam: int, hi: int, lo: int) -> str:
    if fam == 4:
        return str(IPv4Address(lo & 0xFFFFFFFF))
    return str(IPv6Address(((hi & _M64) << 64) | (lo & _M64)))


def list_states(st: np.ndarray, rules: Sequence[Rule], now: int) -> list[dict]:
    """Live states as dicts (creator's direction first), ordered by rule then address."""
    live = np.nonzero((st[:, ST_META] != 0) & (st[:, ST_EXPIRE] > now))[0]
    out = []
    for j in live.tolist():
        row = [int(x) for x in st[j]]
        meta = row[ST_META]
        fam, proto = (meta >> 16) & 0xFF, meta & 0xFFFF
        a = _addr(fam, row[ST_AHI], row[ST_ALO])
        b = _addr(fam, row[ST_BHI], row[ST_BLO])
        pa, pb = row[ST_PORTS] >> 16, row[ST_PORTS] & 0xFFFF
        if not row[ST_FLAGS] & FLAG_CREATOR_AB:
            a, b, pa, pb = b, a, pb, pa
        r = row[ST_RULE]
        out.append(
            {
                "rule": rules[r].number if 0 <= r < len(rules) else -1,
                "rule_index": r,
                "family": fam,
                "proto": proto if proto != 0xFFFF else -1,
                "src": a,
                "sport": pa,
                "dst": b,
                "dport": pb,
                "expires_in_s": (row[ST_EXPIRE] - now) / 1e9,
                "tcp_flags_fwd": row[ST_FLAGS] & 0xFF,
                "tcp_flags_rev": (row[ST_FLAGS] >> 8) & 0xFF,
                "packets": row[ST_PKTS],
                "bytes": row[ST_BYTES],
            }
        )
    out.sort(key=lambda d: (d["rule"], d["family"], d["src"], d["sport"], d["dst"]))
    return out


def render_states(states: list[dict]) -> str:
    """``ipfw -d show``-style lines for :func:`list_states` output."""
    lines = [f"## Dynamic rules ({len(states)}):"]
    if states:
        pw = max(len(str(s["packets"])) for s in states)
        bw = max(len(str(s["bytes"])) for s in states)
        for s in states:
            proto = PROTO_NAMES.get(s["proto"], str(s["proto"]))
            lines.append(
                f"{s['rule']:05d} {s['packets']:>{pw}} {s['bytes']:>{bw}} "
                f"({max(0, int(s['expires_in_s']))}s) STATE {proto} {s['src']} {s['sport']} "
                f"<-> {s['dst']} {s['dport']}"
            )
    return "\n".join(lines) + "\n"
