"""Incremental rule updates: a new compiled rule set from an old one plus or minus one rule.

:func:`insert_rule` / :func:`delete_rule_at` update a copy: they shift the bits after the
rule's position in its group by one, create the classes the new rule needs by splitting
existing ones (a new prefix copies the row of its covering class; a new port range or meta
value copies the rows it splits), set the new rule's bits and refresh the derived tables
(:mod:`.compiler`'s group tables, rule rows, aggregates, constant rows) -- O(size of the
bit vectors), no re-lowering of the other rules (~50-100 ms on 10K rules vs ~1 s for
:func:`~vecroute.firewall.compiler.compile_rules`). Either way the data path keeps the old
arrays until the caller swaps in the new ``CompiledFirewall`` (build aside, swap a
reference). ``Firewall`` compiles from scratch every 256 incremental updates, which also
drops the classes that deletions left unused.
"""

from __future__ import annotations

import bisect
import copy
from collections.abc import Sequence
from ipaddress import IPv6Address

import numpy as np
from numba import njit

from vecroute.firewall.compiler import (
    CompiledFirewall,
    aggregate,
    build_c4,
    group_of,
    group_tables,
    group_words,
    probe_list,
    rule_rows,
    set_constant_rows,
)
from vecroute.firewall.layout import (
    DPORT_OFF,
    F_DST,
    F_SRC,
    G_AOFF,
    G_NA,
    G_NW,
    G_WOFF,
    META_DOMAIN,
    META_OFF,
    N_GROUPS,
    PORT_DOMAIN,
    SPORT_OFF,
)
from vecroute.firewall.lowering import LowerContext, lower_rule, rule_where
from vecroute.firewall.rules import DEFAULT_NUMBER, Rule, RuleError
from vecroute.firewall.tables import FwTables

_U1 = np.uint64(1)


@njit(cache=True, nogil=True)
def _shift_insert(bm, nrows, woff, nw, p):
    """Within words [woff, woff + nw): make room at bit p (bits >= p move up by one)."""
    w0 = p >> 6
    low = (_U1 << np.uint64(p & 63)) - _U1
    for row in range(nrows):
        carry = np.uint64(0)
        for w in range(w0, nw):
            x = bm[row, woff + w]
            out = x >> np.uint64(63)
            if w == w0:
                bm[row, woff + w] = (x & low) | ((x & ~low) << _U1)
            else:
                bm[row, woff + w] = (x << _U1) | carry
            carry = out


@njit(cache=True, nogil=True)
def _shift_delete(bm, nrows, woff, nw, p):
    """Within words [woff, woff + nw): remove bit p (bits > p move down by one)."""
    w0 = p >> 6
    low = (_U1 << np.uint64(p & 63)) - _U1
    for row in range(nrows):
        for w in range(w0, nw):
            x = bm[row, woff + w]
            nxt = bm[row, woff + w + 1] & _U1 if w + 1 < nw else np.uint64(0)
            if w == w0:
                bm[row, woff + w] = (x & low) | ((x >> _U1) & ~low) | (nxt << np.uint64(63))
            else:
                bm[row, woff + w] = (x >> _U1) | (nxt << np.uint64(63))


@njit(cache=True, nogil=True)
def _set_bit_rows(bm, rows, p):
    w = p >> 6
    bit = _U1 << np.uint64(p & 63)
    for k in range(rows.shape[0]):
        bm[rows[k], w] |= bit


def _port_mask(ranges) -> np.ndarray:
    m = np.zeros(PORT_DOMAIN, bool)
    if ranges is None:
        m[:] = True
    else:
        for lo, hi in ranges:
            m[lo : hi + 1] = True
    return m


def _meta_mask(intervals) -> np.ndarray:
    m = np.zeros(META_DOMAIN, bool)
    for lo, hi in intervals:
        m[lo : hi + 1] = True
    return m


def _relayout(cf: CompiledFirewall, widths: list[int], extra_rows: int) -> None:
    """New bm/ag with these group widths and room for extra rows; blocks copied over."""
    old_grp = cf.grp
    grp, glist, gpos, _, widths = group_tables(cf.rgroup, widths)
    rows = max(cf.nrows + extra_rows, cf.bm.shape[0])
    if rows > cf.bm.shape[0]:
        rows = max(rows, cf.bm.shape[0] + cf.bm.shape[0] // 4 + 16)
    bm = np.zeros((rows, int(grp[-1, G_WOFF] + grp[-1, G_NW])), np.uint64)
    for k in range(N_GROUPS):
        o, w = int(old_grp[k, G_WOFF]), int(old_grp[k, G_NW])
        bm[: cf.nrows, grp[k, G_WOFF] : grp[k, G_WOFF] + w] = cf.bm[: cf.nrows, o : o + w]
    cf.bm = bm
    cf.ag = np.zeros((rows, int(grp[-1, G_AOFF] + grp[-1, G_NA])), np.uint64)
    cf.grp, cf.glist, cf.gpos, cf.widths = grp, glist, gpos, widths


def _new_row(cf: CompiledFirewall, like: int) -> int:
    r = cf.nrows
    cf.bm[r] = cf.bm[like]
    cf.nrows += 1
    return r


def _split_map(cf: CompiledFirewall, off: int, size: int, mask: np.ndarray) -> np.ndarray:
    """Split the classes of a map so that ``mask`` is a union of classes; returns the rows
    inside the mask."""
    m = cf.cmap[off : off + size]
    inside = np.unique(m[mask])
    outside = set(np.unique(m[~mask]).tolist())
    for row in inside.tolist():
        if row in outside:
            new = _new_row(cf, row)
            m[mask & (m == row)] = new
    return np.unique(m[mask]).astype(np.int64)


def _addr_rows(cf: CompiledFirewall, fld: int, cond: tuple) -> np.ndarray:
    """Create the classes a condition needs and return the rows that accept it."""
    if cond[0] == "none":
        return np.zeros(0, np.int64)
    if cond[0] == "all":
        return cf.field_rows(fld)
    rows: set[int] = set()
    for fam, nets in ((4, cond[2]), (6, cond[3])):
        ac = cf.addr[(fld, fam)]
        for net, plen in nets:
            if (net, plen) not in ac.index:
                row = _new_row(cf, ac.covering(net, plen))
                k = bisect.bisect_left(ac.keys, (net, plen))
                ac.keys.insert(k, (net, plen))
                ac.rows.insert(k, row)
                ac.index[(net, plen)] = row
                if fam == 4:
                    cf.c4 = None  # rebuilt once all classes exist
                else:
                    cf.cl6.add(fld, f"{IPv6Address(net)}/{plen}", row)
            i, j = ac.span(net, plen)
            rows.update(ac.rows[i:j])
    if cond[1]:
        rows = set(cf.field_rows(fld).tolist()) - rows
    return np.array(sorted(rows), np.int64)


def _clone(cf: CompiledFirewall) -> CompiledFirewall:
    new = copy.copy(cf)
    new.rules = list(cf.rules)
    new.lowered = list(cf.lowered)
    new.cl6 = copy.deepcopy(cf.cl6)
    new.cmap = cf.cmap.copy()
    new.bm = cf.bm.copy()
    new.ag = cf.ag.copy()
    new.addr = copy.deepcopy(cf.addr)
    new.widths = list(cf.widths)
    new.stats = dict(cf.stats)
    return new


def _refresh(cf: CompiledFirewall) -> None:
    if cf.c4 is None:
        cf.c4 = build_c4(cf.addr)
    cf.grp, cf.glist, cf.gpos, _, cf.widths = group_tables(cf.rgroup, cf.widths)
    cf.rinfo, cf.prog = rule_rows(cf.rules, cf.lowered)
    cf.probes = probe_list(cf.rinfo)
    aggregate(cf.bm, cf.ag, cf.nrows, cf.grp)
    set_constant_rows(cf)
    cf.updates += 1
    cf.stats = {
        "rows": cf.nrows,
        "words": int(cf.grp[-1, G_WOFF] + cf.grp[-1, G_NW]),
        "groups": cf.group_sizes(),
    }


def insert_rule(
    cf: CompiledFirewall,
    rule: Rule,
    uid: int,
    tables: FwTables | None = None,
    interfaces: Sequence[str] = (),
    me4: Sequence = (),
    me6: Sequence = (),
) -> tuple[CompiledFirewall, int]:
    """A new CompiledFirewall with ``rule`` added after the rules with a number <= its own;
    returns it and the new rule's index. ``cf`` is not modified."""
    if not 1 <= rule.number <= DEFAULT_NUMBER - 1:
        raise RuleError(rule_where(rule), None, None, "rule number must be 1..65534")
    lw = lower_rule(rule, LowerContext(tables, interfaces, me4, me6))
    nums = [r.number for r in cf.rules[:-1]]
    p = bisect.bisect_right(nums, rule.number)
    new = _clone(cf)
    extra = 8 + 2 * len(lw.meta)
    for cond in (lw.src, lw.dst):
        if cond[0] == "set":
            extra += len(cond[2]) + len(cond[3])
    for ranges in (lw.sport, lw.dport):
        extra += 2 * (len(ranges) + 1) if ranges else 2
    if new.nrows + extra > new.bm.shape[0]:
        _relayout(new, new.widths, extra)
    # classes first (new rows copy existing ones), then the rule's group and bit
    rows = []
    if lw.src[0] != "none":
        for fld, cond in ((F_SRC, lw.src), (F_DST, lw.dst)):
            rows.append(_addr_rows(new, fld, cond))
        for off, ranges in ((SPORT_OFF, lw.sport), (DPORT_OFF, lw.dport)):
            rows.append(_split_map(new, off, PORT_DOMAIN, _port_mask(ranges)))
        rows.append(_split_map(new, META_OFF, META_DOMAIN, _meta_mask(lw.meta)))
        k = group_of(
            rows[0].shape[0] / max(1, new.field_rows(F_SRC).shape[0]),
            rows[1].shape[0] / max(1, new.field_rows(F_DST).shape[0]),
        )
    else:
        k = 0
    lpos = int((cf.rgroup[:p] == k).sum())
    n_k = int((cf.rgroup == k).sum())
    if n_k + 1 > new.widths[k] * 64:
        widths = list(new.widths)
        widths[k] = group_words(n_k + 1)
        _relayout(new, widths, 0)
    woff = int(new.grp[k, G_WOFF])
    _shift_insert(new.bm, new.nrows, woff, new.widths[k], lpos)
    for rr in rows:
        _set_bit_rows(new.bm, rr, woff * 64 + lpos)
    new.rgroup = np.insert(cf.rgroup, p, k)
    new.rules.insert(p, rule)
    new.lowered.insert(p, lw)
    new.uids = np.insert(cf.uids, p, uid)
    new.cnt = np.insert(cf.cnt, p, 0, axis=0)
    _refresh(new)
    return new, p


def delete_rule_at(cf: CompiledFirewall, p: int) -> CompiledFirewall:
    """A new CompiledFirewall without the user rule at index ``p``."""
    if not 0 <= p < len(cf.rules) - 1:
        raise IndexError(p)
    new = _clone(cf)
    k = int(cf.rgroup[p])
    lpos = int((cf.rgroup[:p] == k).sum())
    _shift_delete(new.bm, new.nrows, int(cf.grp[k, G_WOFF]), int(cf.grp[k, G_NW]), lpos)
    new.rgroup = np.delete(cf.rgroup, p)
    del new.rules[p]
    del new.lowered[p]
    new.uids = np.delete(cf.uids, p)
    new.cnt = np.delete(cf.cnt, p, axis=0)
    _refresh(new)
    return new
