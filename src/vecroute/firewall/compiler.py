"""The firewall compiler: rules -> the classifier arrays of :mod:`.layout`, from scratch.

Five fields are indexed: source address, destination address, source port, destination
port, and "meta" (direction x address family x protocol). Each field's values are cut into
equivalence classes (RFC-style): for addresses, the class of an address is its longest
matching prefix among the prefixes the rules mention (a rule's prefix covers a contiguous
run of classes in pre-order); for ports, the elementary intervals between range endpoints
(plus "no port"); for meta, the 1028 raw values, deduplicated. Each class owns a bit vector
(a row of ``bm``) with one bit per rule, set when the rule's condition on that field
accepts the class (conditions come from :mod:`.lowering`).

The rules are split in 4 groups (source condition dense or not x destination condition
dense or not; a rule is "dense" in a field when it accepts more than ``DENSE`` of its
classes), each with its own words and aggregate words (``ag``: which words are not 0).
This keeps wildcard-heavy rules from filling every aggregate word (EffiCuts-style
separability: on fw1_10k it cuts the words visited per packet from ~17 to ~2). When no
field distinguishes packets at all (e.g. only table rules), the candidates are one
precomputed list (``set_constant_rows``). How a packet walks these arrays:
:mod:`.classify`.

Memory: ``rows x words x 8`` bytes for ``bm`` (rows ~ distinct prefixes + port intervals +
a few meta classes; words ~ rules / 64 + 4): 6-12 MB for the ClassBench 10k sets. Long
address lists belong in tables (one rule, O(1) lookup), not in rules.

:func:`compile_rules` is vectorised (a 10K-rule set in about a second); the group tables,
rule rows, aggregates, constant rows and IPv4 class table it derives at the end are public
because the incremental updates (:mod:`.incremental`) derive them the same way.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from vecroute.fib.lpm import Lpm
from vecroute.firewall.layout import (
    A_ALLOW,
    A_COUNT,
    A_DENY,
    A_REJECT,
    A_SKIPTO,
    C4_DST,
    C4_SRC,
    CLASSIFIER_FIELDS,
    CM_CONST,
    CM_DST6,
    CM_LIST,
    CM_LIST_N,
    CM_SRC6,
    CMAP_SIZE,
    DIR_IN,
    DIR_OUT,
    DPORT_OFF,
    F_DPORT,
    F_DST,
    F_META,
    F_SPORT,
    F_SRC,
    G_AOFF,
    G_COLS,
    G_N,
    G_NA,
    G_NW,
    G_ROFF,
    G_WOFF,
    META_DOMAIN,
    META_OFF,
    N_GROUPS,
    NO_PORT,
    OP_ADDR_TABLE,
    OP_IFACE,
    OP_IFACE_TABLE,
    P_COLS,
    P_OP,
    PORT_DOMAIN,
    RF_CHECK,
    RF_LOG,
    RF_PROBE,
    RI_ACT,
    RI_ARG,
    RI_COLS,
    RI_FLAGS,
    RI_NUM,
    RI_PLEN,
    RI_POFF,
    SPORT_OFF,
)
from vecroute.firewall.lowering import LowerContext, Lowered, lower_rule, rule_where
from vecroute.firewall.rules import DEFAULT_NUMBER, Rule, RuleError, default_rule
from vecroute.firewall.tables import FwTables

DENSE = 0.1  # a condition covering more than this share of a field's classes is "dense"
GROUP_MIN = 512  # smaller rule sets stay in one group (the split pays off for long lists)
_U1 = np.uint64(1)


@njit(cache=True, nogil=True)
def _set_bits(bm, bits, lo, hi):
    """Set bit ``bits[k]`` in rows lo[k]..hi[k]."""
    for k in range(bits.shape[0]):
        p = bits[k]
        w = p >> 6
        bit = _U1 << np.uint64(p & 63)
        for row in range(lo[k], hi[k] + 1):
            bm[row, w] |= bit


@njit(cache=True, nogil=True)
def aggregate(bm, ag, nrows, grp):
    """The aggregate words of rows [0, nrows): ``ag`` bit j = bm word j of the group is not 0."""
    for row in range(nrows):
        for k in range(grp.shape[0]):
            woff = grp[k, G_WOFF]
            nw = grp[k, G_NW]
            aoff = grp[k, G_AOFF]
            for a in range(grp[k, G_NA]):
                g = np.uint64(0)
                for j in range(64):
                    w = (a << 6) + j
                    if w >= nw:
                        break
                    if bm[row, woff + w] != 0:
                        g |= _U1 << np.uint64(j)
                ag[row, aoff + a] = g


class AddrClasses:
    """The classes of one address field and family: sorted prefixes, each with its row."""

    def __init__(self, family: int) -> None:
        self.family = family
        self.bits = 32 if family == 4 else 128
        self.keys: list[tuple[int, int]] = []  # (net, len), sorted: pre-order
        self.rows: list[int] = []
        self.index: dict[tuple[int, int], int] = {}  # (net, len) -> row

    def last(self, net: int, plen: int) -> int:
        return net | ((1 << (self.bits - plen)) - 1)

    def span(self, net: int, plen: int) -> tuple[int, int]:
        """[i, j): positions of the classes inside net/plen (net/plen itself included)."""
        i = bisect.bisect_left(self.keys, (net, plen))
        j = bisect.bisect_right(self.keys, (self.last(net, plen), self.bits + 1))
        return i, j

    def covering(self, net: int, plen: int) -> int:
        """Row of the longest existing prefix that contains net/plen."""
        for n in range(plen, -1, -1):
            mask = ((1 << self.bits) - 1) ^ ((1 << (self.bits - n)) - 1)
            r = self.index.get((net & mask, n))
            if r is not None:
                return r
        raise AssertionError("the /0 class is always present")


@dataclass
class CompiledFirewall:
    """One immutable compiled rule set (the data path holds a reference; updates build a
    new one). ``rules[i]`` is the rule of index i; the last one is the default rule."""

    rules: list[Rule]
    uids: np.ndarray
    c4: np.ndarray
    cl6: Lpm
    cmap: np.ndarray
    bm: np.ndarray
    ag: np.ndarray
    grp: np.ndarray
    glist: np.ndarray
    gpos: np.ndarray
    rinfo: np.ndarray
    prog: np.ndarray
    probes: np.ndarray
    cnt: np.ndarray
    nrows: int
    addr: dict[tuple[int, int], AddrClasses]
    lowered: list[Lowered]
    rgroup: np.ndarray  # group of each user rule
    widths: list[int]  # bm words per group
    updates: int = 0  # incremental updates since the last full compile
    stats: dict = field(default_factory=dict)

    @property
    def cl6_roots(self) -> np.ndarray:
        return self.cl6.roots

    @property
    def cl6_groups(self) -> np.ndarray:
        return self.cl6.groups

    def arrays(self) -> tuple:
        """The classifier part of ``FW``, in :data:`~.layout.CLASSIFIER_FIELDS` order."""
        return tuple(getattr(self, name) for name in CLASSIFIER_FIELDS)

    def trivial_directions(self) -> int:
        """Bit ``1 << DIR_IN`` / ``1 << DIR_OUT`` set when no rule but the default one can
        match in that direction (every rule says the other direction, and no rule looks
        states up: a walk that passes a keep-state rule probes the states even where the rule
        cannot match): the data path then applies and counts the default rule without
        classifying, with the same result."""
        cmap, bm = self.cmap, self.bm
        if self.probes[0] < len(self.rules) - 1:
            return 0  # a state lookup happens in both directions (ipfw's O_PROBE_STATE)
        mask = 0
        for d in (DIR_IN, DIR_OUT):
            if cmap[CM_LIST] >= 0:
                trivial = cmap[CM_LIST_N] == 0
            else:
                const = int(cmap[CM_CONST + F_META])
                base = META_OFF + d * 514
                rows = [const] if const >= 0 else np.unique(cmap[base : base + 514])
                trivial = not bm[np.asarray(rows, np.int64)].any()
            if trivial:
                mask |= 1 << d
        return mask

    def out_repeats_in(self) -> bool:
        """True when a packet's output pass must end as its input pass did, by the same
        rule: no rule tells the directions apart, reads an interface (recv / xmit / via, an
        interface table) or the states, and none counts, jumps or logs on the way (count,
        skipto, log: their side effects belong to each pass). The keys of the two passes
        differ only in the direction and the transmit interface, which such a rule set
        cannot see, so the fused path may count fw-in's deciding rule again instead of
        classifying at fw-out (only for packets that took fw-in in the same pass, and
        only while no state is left from an earlier rule set: fw-out's classification also
        sweeps the states)."""
        ri = self.rinfo[: len(self.rules)]
        if self.probes[0] < len(self.rules) - 1:
            return False  # a probe point: keep-state or check-state
        if np.isin(ri[:, RI_ACT], (A_COUNT, A_SKIPTO)).any() or (ri[:, RI_FLAGS] & RF_LOG).any():
            return False
        # every program row is a rule's (data rows have their own op): one pass over all,
        # since this runs after every rule or table change (a Python loop over 10K rules
        # took ~0.1 s, out of the worker's loop)
        if np.isin(self.prog[:, P_OP], (OP_IFACE, OP_IFACE_TABLE)).any():
            return False
        cmap = self.cmap
        if cmap[CM_LIST] >= 0 or cmap[CM_CONST + F_META] >= 0:
            return True  # the meta field (direction, family, protocol) has one class
        rows_in = cmap[META_OFF : META_OFF + 514].astype(np.int64)
        rows_out = cmap[META_OFF + 514 : META_OFF + 1028].astype(np.int64)
        return bool((self.bm[rows_in] == self.bm[rows_out]).all())

    def tables_only(self) -> bool:
        """True when every packet has the same candidate rules (no indexed field tells
        packets apart: ``cmap[CM_LIST]``) and each of them, the default rule included, is
        decided by address tables alone: a program of address-table tests only (``from
        table(bl)``, ``to not table(x, 3)``, ``lookup dst-ip``; none for ``any``), the action
        allow, deny or reject/unreach, no state, count, skipto or log. The data path then
        classifies from the addresses in the header, without the key rows
        (``classify.fw_batch_tables``); the answer is the full walk's
        (tests/test_fw_differential.py checks it against the reference,
        tests/test_fast_path.py the graph against the walk). A rule outside the list (one no
        packet can meet) is never visited, so it may still count or log: such a set is
        table-only without ``out_repeats_in``."""
        cmap = self.cmap
        if cmap[CM_LIST] < 0 or self.probes[0] < len(self.rules) - 1:
            return False  # candidates differ by packet, or a walk would look states up
        listed = self.glist[int(cmap[CM_LIST]) : int(cmap[CM_LIST] + cmap[CM_LIST_N])]
        ri = self.rinfo[np.append(listed.astype(np.int64), len(self.rules) - 1)]
        if not np.isin(ri[:, RI_ACT], (A_ALLOW, A_DENY, A_REJECT)).all():
            return False
        if (ri[:, RI_FLAGS] & ~RF_CHECK).any():
            return False  # keep-state, log
        # the program rows of those rules, in one vector pass (runs after every change)
        plen = ri[:, RI_PLEN]
        start = np.repeat(ri[:, RI_POFF] - (np.cumsum(plen) - plen), plen)
        rows = start + np.arange(int(plen.sum()))
        return bool((self.prog[rows, P_OP] == OP_ADDR_TABLE).all())

    @property
    def nbytes(self) -> int:
        return int(
            self.bm[: self.nrows].nbytes
            + self.ag[: self.nrows].nbytes
            + self.cmap.nbytes
            + self.rinfo.nbytes
            + self.prog.nbytes
            + self.gpos.nbytes
            + self.glist.nbytes
            + self.c4.nbytes
            + self.cl6.nbytes
        )

    def field_rows(self, fld: int) -> np.ndarray:
        """Rows used by one field (sorted)."""
        if fld in (F_SRC, F_DST):
            rows = self.addr[(fld, 4)].rows + self.addr[(fld, 6)].rows
            return np.array(sorted(rows), np.int64)
        if fld == F_SPORT:
            return np.unique(self.cmap[SPORT_OFF : SPORT_OFF + PORT_DOMAIN]).astype(np.int64)
        if fld == F_DPORT:
            return np.unique(self.cmap[DPORT_OFF : DPORT_OFF + PORT_DOMAIN]).astype(np.int64)
        return np.unique(self.cmap[META_OFF : META_OFF + META_DOMAIN]).astype(np.int64)

    def group_sizes(self) -> list[int]:
        return [int(x) for x in self.grp[:, G_N]]


def group_words(n: int) -> int:
    """bm words for a group of n rules."""
    return max(1, (n + 64 + 63) // 64)  # at least 64 spare bits for inserts


def group_tables(rgroup: np.ndarray, widths: Sequence[int] | None = None):
    """Group tables for the rule -> group assignment: (grp, glist, gpos, local, widths)."""
    n = rgroup.shape[0]
    counts = [int((rgroup == k).sum()) for k in range(N_GROUPS)]
    if widths is None:
        widths = [group_words(c) for c in counts]
    widths = [max(w, 1 if c == 0 else (c + 63) // 64) for w, c in zip(widths, counts, strict=True)]
    grp = np.zeros((N_GROUPS, G_COLS), np.int64)
    glist = np.zeros(max(1, n), np.int32)
    gpos = np.zeros((N_GROUPS, n + 2), np.int32)
    local = np.zeros(n, np.int64)
    woff = aoff = roff = 0
    for k in range(N_GROUPS):
        idx = np.nonzero(rgroup == k)[0]
        na = (widths[k] + 63) // 64
        grp[k] = (woff, widths[k], aoff, na, roff, idx.shape[0])
        glist[roff : roff + idx.shape[0]] = idx
        local[idx] = np.arange(idx.shape[0])
        gpos[k, 1 : n + 1] = np.cumsum(rgroup == k)
        gpos[k, n + 1] = gpos[k, n]
        woff += widths[k]
        aoff += na
        roff += idx.shape[0]
    return grp, glist, gpos, local, list(widths)


def group_of(src_cover: float, dst_cover: float) -> int:
    """The group of a rule accepting these shares of the address fields' classes."""
    return 2 * int(src_cover > DENSE) + int(dst_cover > DENSE)


def rule_rows(rules: list[Rule], lowered: list[Lowered]) -> tuple[np.ndarray, np.ndarray]:
    """rinfo (with skipto targets resolved) and the residual program."""
    n = len(rules)
    rinfo = np.zeros((n, RI_COLS), np.int64)
    prog_rows: list[list[int]] = []
    for i, (r, lw) in enumerate(zip(rules, lowered, strict=True)):
        rinfo[i, RI_NUM] = r.number
        rinfo[i, RI_ACT] = lw.act
        rinfo[i, RI_FLAGS] = lw.flags
        rinfo[i, RI_POFF] = len(prog_rows)
        rinfo[i, RI_PLEN] = len(lw.prog)
        prog_rows.extend(lw.prog)
        if lw.act == A_REJECT:
            rinfo[i, RI_ARG] = lw.codes
    prog = np.array(prog_rows, np.int64).reshape(-1, P_COLS)
    if prog.shape[0] == 0:
        prog = np.zeros((1, P_COLS), np.int64)
    _resolve_skipto(rules, rinfo)
    return rinfo, prog


def _resolve_skipto(rules: list[Rule], rinfo: np.ndarray) -> None:
    nums = rinfo[:, RI_NUM]
    for i, r in enumerate(rules):
        if r.action == "skipto":
            if r.arg == -1:
                rinfo[i, RI_ARG] = -1
            else:
                rinfo[i, RI_ARG] = int(np.searchsorted(nums, max(r.arg, r.number + 1), "left"))


def probe_list(rinfo: np.ndarray) -> np.ndarray:
    """The ``probes`` array: indices of the probe-point rules, then a sentinel."""
    idx = np.nonzero(rinfo[:-1, RI_FLAGS] & RF_PROBE)[0].astype(np.int32)
    return np.concatenate([idx, np.array([rinfo.shape[0]], np.int32)])


def _v4_intervals(keys: list[tuple[int, int]], rows: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Elementary intervals of a pre-order prefix list (containing 0.0.0.0/0): their starts
    and the row of the longest prefix covering each."""
    starts: list[int] = []
    cls: list[int] = []
    stack: list[tuple[int, int]] = []  # (last address, row) of the open prefixes
    for (net, plen), row in zip(keys, rows, strict=True):
        last = net | ((1 << (32 - plen)) - 1)
        while stack and stack[-1][0] < net:
            end, _ = stack.pop()
            if stack and end + 1 < net:
                starts.append(end + 1)
                cls.append(stack[-1][1])
        starts.append(net)
        cls.append(row)
        stack.append((last, row))
    while stack:
        end, _ = stack.pop()
        if stack and end + 1 <= stack[-1][0]:
            starts.append(end + 1)
            cls.append(stack[-1][1])
    st = np.array(starts, np.int64)
    cl = np.array(cls, np.int64)
    order = np.argsort(st, kind="stable")
    st, cl = st[order], cl[order]
    last_of = np.ones(st.shape[0], bool)  # equal starts: the later (deeper) one wins
    last_of[:-1] = st[1:] != st[:-1]
    st, cl = st[last_of], cl[last_of]
    keep = np.ones(st.shape[0], bool)  # merge neighbours of the same class
    keep[1:] = cl[1:] != cl[:-1]
    return st[keep], cl[keep]


@njit(cache=True, nogil=True)
def _fill_c4(c4, top, starts, cls, blocks, counts, offs):
    for b in range(blocks.shape[0]):
        h = blocks[b]
        off = offs[b]
        c4[top + h] = -off - 1
        c4[off] = counts[b]
    # the boundaries of each block, in order
    fill = np.zeros(blocks.shape[0], np.int64)
    bi = 0
    for k in range(starts.shape[0]):
        s = starts[k]
        if s & 0xFFFF == 0:
            continue
        h = s >> 16
        while blocks[bi] != h:
            bi += 1
        j = offs[bi] + 2 + 2 * fill[bi]
        c4[j] = s & 0xFFFF
        c4[j + 1] = cls[k]
        fill[bi] += 1


def build_c4(addr: dict) -> np.ndarray:
    """The IPv4 class table of the source and destination fields (see ``_c4_lookup``)."""
    parts = []
    tops = []
    for fld in (F_SRC, F_DST):
        ac = addr[(fld, 4)]
        st, cl = _v4_intervals(ac.keys, ac.rows)
        h = np.arange(65536, dtype=np.int64) << 16
        at_start = cl[np.searchsorted(st, h, side="right") - 1]
        inner = (st & 0xFFFF) != 0
        blocks, counts = np.unique(st[inner] >> 16, return_counts=True)
        parts.append((st, cl, blocks, counts, at_start))
        tops.append(at_start)
    size = 2 * 65536 + sum(int((2 + 2 * p[3]).sum()) for p in parts)
    c4 = np.zeros(size, np.int32)
    off = 2 * 65536
    for top, (st, cl, blocks, counts, at_start) in zip((C4_SRC, C4_DST), parts, strict=True):
        c4[top : top + 65536] = at_start
        offs = off + np.concatenate([[0], np.cumsum(2 + 2 * counts)[:-1]]).astype(np.int64)
        if blocks.shape[0]:
            c4[offs + 1] = at_start[blocks]
            _fill_c4(c4, top, st, cl, blocks.astype(np.int64), counts.astype(np.int64), offs)
        off += int((2 + 2 * counts).sum())
    return c4


def compile_rules(
    rules: Sequence[Rule],
    default_allow: bool = False,
    tables: FwTables | None = None,
    interfaces: Sequence[str] = (),
    me4: Sequence = (),
    me6: Sequence = (),
    uids: Sequence[int] | None = None,
    previous: CompiledFirewall | None = None,
) -> CompiledFirewall:
    """Compile user rules (any order; sorted stably by number) plus the default rule.

    ``uids`` name the rules across compiles (default: their positions); counters of rules
    whose uid was in ``previous`` carry over. Raises RuleError for a rule that cannot be
    compiled (unknown table or interface, wrong table type)."""
    order = sorted(range(len(rules)), key=lambda k: rules[k].number)
    user = [rules[k] for k in order]
    uid_list = [(uids[k] if uids is not None else k) for k in order]
    for r in user:
        if not 1 <= r.number <= DEFAULT_NUMBER - 1:
            raise RuleError(rule_where(r), None, None, "rule number must be 1..65534")
    ctx = LowerContext(tables, interfaces, me4, me6)
    lowered = [lower_rule(r, ctx) for r in user]
    all_rules = user + [default_rule(default_allow)]
    lowered_all = lowered + [lower_rule(all_rules[-1], ctx)]
    n = len(user)

    iv_r: list[np.ndarray] = []  # rule, first row, last row
    iv_lo: list[np.ndarray] = []
    iv_hi: list[np.ndarray] = []

    def add_iv(r_ids, lo, hi) -> None:
        iv_r.append(np.asarray(r_ids, np.int64))
        iv_lo.append(np.asarray(lo, np.int64))
        iv_hi.append(np.asarray(hi, np.int64))

    # -- address fields: classes = distinct prefixes (+ /0), rows in pre-order
    addr: dict[tuple[int, int], AddrClasses] = {}
    cover = np.zeros((2, n))  # share of the field's rows each rule accepts
    base = 0
    for fld, attr in ((F_SRC, "src"), (F_DST, "dst")):
        fbase = base
        for fam in (4, 6):
            ac = AddrClasses(fam)
            keys = {(0, 0)}
            for lw in lowered:
                c = getattr(lw, attr)
                if c[0] == "set":
                    keys.update(c[2] if fam == 4 else c[3])
            ac.keys = sorted(keys)
            ac.rows = list(range(base, base + len(ac.keys)))
            ac.index = dict(zip(ac.keys, ac.rows, strict=True))
            addr[(fld, fam)] = ac
            base += len(ac.keys)
        fend = base
        all_r = []
        for ri, lw in enumerate(lowered):
            c = getattr(lw, attr)
            if c[0] == "all":
                all_r.append(ri)
                continue
            if c[0] == "none":
                continue
            ivs = []
            for fam, nets in ((4, c[2]), (6, c[3])):
                ac = addr[(fld, fam)]
                for net, plen in nets:
                    i, j = ac.span(net, plen)
                    ivs.append((ac.rows[i], ac.rows[j - 1]))
            if c[1]:  # not: the complement within the field's rows
                ivs.sort()
                comp, cur = [], fbase
                for lo, hi in ivs:
                    if lo > cur:
                        comp.append((cur, lo - 1))
                    cur = max(cur, hi + 1)
                if cur < fend:
                    comp.append((cur, fend - 1))
                ivs = comp
            if ivs:
                add_iv([ri] * len(ivs), [a for a, _ in ivs], [b for _, b in ivs])
                cover[fld, ri] = sum(b - a + 1 for a, b in ivs) / (fend - fbase)
        if all_r:
            add_iv(all_r, [fbase] * len(all_r), [fend - 1] * len(all_r))
            cover[fld, all_r] = 1.0

    # -- port fields: elementary intervals between range endpoints (+ "no port")
    port_rows = {}
    for fld, attr in ((F_SPORT, "sport"), (F_DPORT, "dport")):
        bounds = {0, NO_PORT, NO_PORT + 1}
        for lw in lowered:
            pr = getattr(lw, attr)
            if pr is not None:
                for lo, hi in pr:
                    bounds.add(lo)
                    bounds.add(hi + 1)
        b = np.array(sorted(bounds), np.int64)  # elementary interval k = [b[k], b[k+1])
        nint = b.shape[0] - 1
        rids, los, his = [], [], []
        for ri, lw in enumerate(lowered):
            if lw.src[0] == "none":
                continue
            pr = getattr(lw, attr)
            if pr is None:
                rids.append(ri)
                los.append(0)
                his.append(nint - 1)
            else:
                for lo, hi in pr:
                    rids.append(ri)
                    los.append(int(np.searchsorted(b, lo)))
                    his.append(int(np.searchsorted(b, hi + 1)) - 1)
        add_iv(rids, np.array(los, np.int64) + base, np.array(his, np.int64) + base)
        port_rows[fld] = np.searchsorted(b, np.arange(PORT_DOMAIN), side="right") - 1 + base
        base += nint

    # -- meta
    meta_base = base
    rids, los, his = [], [], []
    for ri, lw in enumerate(lowered):
        for lo, hi in lw.meta:
            rids.append(ri)
            los.append(lo + base)
            his.append(hi + base)
    add_iv(rids, los, his)
    base += META_DOMAIN
    nrows = base

    # -- groups and bit positions
    if n >= GROUP_MIN:
        rgroup = np.array([group_of(cover[0, k], cover[1, k]) for k in range(n)], np.int64)
    else:
        rgroup = np.zeros(n, np.int64)
    grp, glist, gpos, local, widths = group_tables(rgroup)
    bitpos = grp[rgroup, G_WOFF] * 64 + local if n else np.zeros(0, np.int64)
    total_w = int(grp[-1, G_WOFF] + grp[-1, G_NW])
    total_a = int(grp[-1, G_AOFF] + grp[-1, G_NA])
    bm = np.zeros((nrows, total_w), np.uint64)
    if iv_r:
        r_all = np.concatenate(iv_r)
        _set_bits(bm, bitpos[r_all] if n else r_all, np.concatenate(iv_lo), np.concatenate(iv_hi))

    # -- deduplicate the port and meta rows (address rows stay one per prefix)
    cmap = np.zeros(CMAP_SIZE, np.int32)
    keep = [bm[: port_rows[F_SPORT].min()]]
    nxt = keep[0].shape[0]
    for fld, off in ((F_SPORT, SPORT_OFF), (F_DPORT, DPORT_OFF)):
        vals = port_rows[fld]
        lo = int(vals.min())
        hi = int(vals.max()) + 1
        uniq, inv = np.unique(bm[lo:hi], axis=0, return_inverse=True)
        keep.append(uniq)
        cmap[off : off + PORT_DOMAIN] = inv.reshape(-1)[vals - lo] + nxt
        nxt += uniq.shape[0]
    uniq, inv = np.unique(bm[meta_base:nrows], axis=0, return_inverse=True)
    keep.append(uniq)
    cmap[META_OFF : META_OFF + META_DOMAIN] = inv.reshape(-1) + nxt
    nxt += uniq.shape[0]
    bm = np.ascontiguousarray(np.concatenate(keep))
    nrows = nxt
    ag = np.zeros((nrows, total_a), np.uint64)
    aggregate(bm, ag, nrows, grp)

    # -- address class lookup: IPv4 compact table, IPv6 class tries
    c4 = build_c4(addr)
    cl6 = Lpm(6)
    for fld, c6 in ((F_SRC, CM_SRC6), (F_DST, CM_DST6)):
        a6 = addr[(fld, 6)]
        his = np.array([k[0] >> 64 for k in a6.keys], np.uint64)
        los = np.array([k[0] & ((1 << 64) - 1) for k in a6.keys], np.uint64)
        cl6.add_many(
            fld,
            (his, los),
            np.array([k[1] for k in a6.keys], np.uint8),
            np.array(a6.rows, np.int64),
        )
        cmap[c6] = cl6.table_index(fld)

    rinfo, prog = rule_rows(all_rules, lowered_all)
    uids_arr = np.array(uid_list + [-1], np.int64)
    cnt = np.zeros((len(all_rules), 3), np.int64)
    if previous is not None:
        _carry_counters(previous, uids_arr, cnt)
    cf = CompiledFirewall(
        all_rules,
        uids_arr,
        c4,
        cl6,
        cmap,
        bm,
        ag,
        grp,
        glist,
        gpos,
        rinfo,
        prog,
        probe_list(rinfo),
        cnt,
        nrows,
        addr,
        lowered_all,
        rgroup,
        widths,
    )
    set_constant_rows(cf)
    cf.stats = {"rows": nrows, "words": total_w, "groups": cf.group_sizes()}
    return cf


def set_constant_rows(cf: CompiledFirewall) -> None:
    """cmap[CM_CONST + field] = the row of a field whose rows are all equal, else -1; when
    all five are, the candidate list (the same for every packet) goes after the groups'
    lists in glist."""
    const = []
    for fld in (F_SRC, F_DST, F_SPORT, F_DPORT, F_META):
        rows = cf.field_rows(fld)
        first = cf.bm[rows[0]]
        same = bool((cf.bm[rows] == first).all())
        cf.cmap[CM_CONST + fld] = rows[0] if same else -1
        const.append(int(rows[0]) if same else -1)
    n_user = cf.rgroup.shape[0]
    base = cf.glist[:n_user] if n_user else np.zeros(0, np.int32)
    if min(const) < 0:
        cf.cmap[CM_LIST] = -1
        cf.cmap[CM_LIST_N] = 0
        cf.glist = base if n_user else np.zeros(1, np.int32)
        return
    word = cf.bm[const[0]].copy()
    for row in const[1:]:
        word &= cf.bm[row]
    bits = np.unpackbits(word.view(np.uint8), bitorder="little").astype(bool)
    cands = []
    for k in range(N_GROUPS):
        woff, n = int(cf.grp[k, G_WOFF]), int(cf.grp[k, G_N])
        local = np.nonzero(bits[woff * 64 : woff * 64 + n])[0]
        cands.append(cf.glist[int(cf.grp[k, G_ROFF]) + local])
    lst = np.sort(np.concatenate(cands)).astype(np.int32)
    cf.glist = np.concatenate([base, lst, np.zeros(1, np.int32)])
    cf.cmap[CM_LIST] = n_user
    cf.cmap[CM_LIST_N] = lst.shape[0]


def _carry_counters(previous: CompiledFirewall, uids: np.ndarray, cnt: np.ndarray) -> None:
    old = {int(u): i for i, u in enumerate(previous.uids)}
    for i, u in enumerate(uids):
        j = old.get(int(u))
        if j is not None:
            cnt[i] = previous.cnt[j]
    cnt[-1] = previous.cnt[-1]  # the default rule


def index_mapping(old: CompiledFirewall, new: CompiledFirewall) -> np.ndarray:
    """old rule index -> new rule index (by uid; -1 for rules that are gone)."""
    pos = {int(u): i for i, u in enumerate(new.uids)}
    m = np.array([pos.get(int(u), -1) for u in old.uids], np.int64)
    m[-1] = new.uids.shape[0] - 1
    return m
