"""The compiled firewall classifier: bit vectors over per-field equivalence classes.

Kernel API (for the graph nodes fw-in / fw-out)
================================================

The data path sees one flat set of numpy arrays, the ``FW`` namedtuple (same pattern as the
graph's ``DP``: pass the arrays flat across the Python/numba boundary, build the tuple inside
compiled code)::

    args = firewall.args()                     # Python: the FW arrays, flat, in field order
    fw = FW(*args)                             # inside @njit code
    extract_keys(buf, meta, work, k, keys)     # @njit (vecroute.firewall.keys)
    fw_batch(fw, keys, k, direction, now, verdicts, rules, aux)      # @njit, a whole vector
    verdict, rule, aux = fw_classify(fw, keys, i, direction, now)   # @njit, one row

- ``keys``: ``int64[>= n, K_COLS]``, one row per packet, columns in
  :mod:`vecroute.firewall.keys` (``K_FAMILY, K_SRC_HI, K_SRC_LO, K_DST_HI, K_DST_LO,
  K_PROTO, K_SPORT, K_DPORT, K_TCPFLAGS, K_ICMPTYPE, K_TTL, K_FRAG, K_RX, K_TX, K_LEN``;
  ``K_COLS`` = 15). ``extract_keys`` fills them from a batch after ip4-input/ip6-input (or
  after the lookup, where ``M_TX`` is set, for the output direction).
- ``direction``: ``DIR_IN`` (0, after ip4/ip6-input) or ``DIR_OUT`` (1, after the lookup,
  ``K_TX`` = the transmit interface).
- ``now``: the batch clock in ns (``int64``); last-match times and state expiries use it.
- outputs, ``int32[>= n]`` each: ``verdicts[i]`` is ``V_PASS`` (0), ``V_DROP`` (1),
  ``V_REJECT`` (2) or ``V_RESET`` (3); ``rules[i]`` the index of the deciding rule
  (``Firewall.rule_at(index)``; the default rule 65535 has the last index);
  ``aux[i]``: for V_REJECT the ICMP error to send as ``type << 8 | code`` (ICMP type 3 for
  IPv4, ICMPv6 type 1 for IPv6 -- the encoding of the batch's ``M_AUX``); for V_DROP the
  reason, ``DROP_RULE`` (0: deny / unreach-less drop / reset of a non-TCP packet) or
  ``DROP_STATE_FULL`` (1: keep-state found ``max_states`` states); 0 otherwise. V_RESET:
  answer with a TCP RST; only returned for a TCP packet whose header is there (first
  fragment) and has no RST itself -- ``reset`` gives V_DROP otherwise.
- side effects: per-rule counters ``cnt[rule] = (packets, bytes, last match ns)`` for
  every ``count`` rule passed and the deciding rule (a state match counts for the rule
  that created the state); states created, refreshed and reclaimed (``st``, ``ctl``: see
  :mod:`vecroute.firewall.states`); each ``fw_batch`` first sweeps ``ctl[FC_SWEEP]``
  state rows. Between batches, call ``Firewall.maintain()`` (grows the state table) and
  re-read ``Firewall.args()`` when ``Firewall.generation`` changed.
- ``fw_batch`` is the fast path: it unpacks the tuple once and runs the per-packet code
  without reference counting (``_nrt=False``). ``fw_classify`` unpacks it per call. Note
  for callers: CPython compiles a call with more than 30 positional arguments as
  ``f(*args)``; numba accepts that for ordinary calls but not for ``inline="always"`` ones.

``FW`` fields (read-only for the data path except ``cnt``, ``st`` and ``ctl``):

================  ========================================================================
c4                int32 IPv4 class table: DIR-16 top levels (source, destination), then
                  the sorted class boundaries of the /16 blocks that have some
cl6_roots/groups  IPv6 class tries (an :class:`~vecroute.fib.lpm.Lpm`)
cmap              int32: header (IPv6 trie indices, constant rows, candidate list), then
                  the source/destination port maps (65537 entries, the last = "no port")
                  and the meta map (direction x family x protocol, 1028 entries)
bm, ag            uint64 bit vectors per class row; the rules are split in 4 groups, each
                  with its own words: ``bm[row, woff + w]`` bit b = the group's rule
                  ``64 w + b`` accepts the class, ``ag`` bit j = that word is not 0
grp, glist, gpos  the groups: word offsets and sizes, the rule index of each group member
                  (then the constant candidate list, if any), the members before a rule
rinfo             int64 per rule: number, action, argument, flags, residual program span
prog              int64 residual program rows (tables, interfaces, TCP flags, ICMP types,
                  TTL, frag)
probes            int32 sorted indices of check-state / keep-state rules, then a sentinel
cnt               int64[n_rules, 3] packets, bytes, last match (ns)
t4_*/t6_*/t_idx   lookup tables (:mod:`vecroute.firewall.tables`)
nt, if_tab        number tables (one hash) and iface tables
st, ctl           dynamic states and their control/counter row (per worker)
================  ========================================================================

Algorithm
=========

Five fields are indexed: source address, destination address, source port, destination
port, and "meta" (direction x address family x protocol). Each field's values are cut into
equivalence classes (RFC-style): for addresses, the class of an address is its longest
matching prefix among the prefixes the rules mention (a rule's prefix covers a contiguous
run of classes in pre-order); for ports, the elementary intervals between range endpoints
(plus "no port"); for meta, the 1028 raw values, deduplicated. Each class owns a bit vector
with one bit per rule, set when the rule's condition on that field accepts the class.
``not``, lists and ``me`` are exact in the index (``me`` expands to the router's addresses
at compile time); what the index cannot express (tables, interfaces, TCP flags, ICMP
types, TTL, frag) leaves the field "any" and becomes a short residual program that only
candidate rules run.

Per packet: the class rows (IPv4: a DIR-16 entry, then a few boundaries; IPv6: a trie
walk; ports and meta: one array read each; a field no rule distinguishes costs nothing);
then, per group, the AND of the five rows' aggregate words points at the 64-rule words
where all five agree, and the AND of those words gives candidate rules in rule order. The
4 groups (source condition dense or not x destination condition dense or not; a rule is
"dense" in a field when it accepts more than 10% of its classes) keep wildcard-heavy rules
from filling every aggregate word (EffiCuts-style separability: on fw1_10k it cuts the
words visited per packet from ~17 to ~2); the walk merges the groups' cursors in rule
order. The first candidate whose residual program passes decides -- or, for ``count`` and
``skipto``, the walk goes on after it or at the skipto target (always forward, so it
ends). ``check-state`` / ``keep-state`` rules are probe points: the first one the walk
reaches or passes looks the state table up, once. When no field distinguishes packets at
all (e.g. only table rules), the candidates are one precomputed list. Cost grows with the
number of candidates a packet has, not with the number of rules.

Memory: ``rows x words x 8`` bytes for ``bm`` (rows ~ distinct prefixes + port intervals +
a few meta classes; words ~ rules / 64 + 4): 6-12 MB for the ClassBench 10k sets. Long
address lists belong in tables (one rule, O(1) lookup), not in rules.

Updates: :func:`compile_rules` builds everything from scratch (vectorised; a 10K-rule set in
about a second). :func:`insert_rule` / :func:`delete_rule_at` update a copy incrementally:
they shift the bits after the rule's position in its group by one, create the classes the
new rule needs by splitting existing ones (a new prefix copies the row of its covering
class; a new port range or meta value copies the rows it splits), set the new rule's bits
and refresh the aggregates -- O(size of the bit vectors), no re-lowering of the other
rules (~50-100 ms on 10K rules vs ~1 s). Either way the data path keeps the old arrays
until the caller swaps in the new ``CompiledFirewall`` (build aside, swap a reference).
``Firewall`` compiles from scratch every 256 incremental updates, which also drops the
classes that deletions left unused.
"""

from __future__ import annotations

import bisect
import copy
from collections import namedtuple
from collections.abc import Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv6Address

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from vecroute.fib.lpm import Lpm
from vecroute.firewall.keys import (
    FRAG_NONFIRST,
    K_DPORT,
    K_DST_HI,
    K_DST_LO,
    K_FAMILY,
    K_FRAG,
    K_ICMPTYPE,
    K_LEN,
    K_PROTO,
    K_RX,
    K_SPORT,
    K_SRC_HI,
    K_SRC_LO,
    K_TCPFLAGS,
    K_TTL,
    K_TX,
)
from vecroute.firewall.rules import (
    DEFAULT_NUMBER,
    IFACE_OPTIONS,
    AddrSpec,
    Rule,
    RuleError,
    default_rule,
)
from vecroute.firewall.states import (
    FC_COUNT,
    FC_HITS,
    FC_ROWS,
    FC_SWEEP,
    ST_RULE,
    state_find,
    state_insert,
    state_key,
    state_update,
    sweep_states,
)
from vecroute.firewall.tables import (
    TABLE_TYPES,
    FwTables,
    lpm6_get,
    table_addr_lookup,
    table_iface_lookup,
    table_number_lookup,
)

# -- verdicts ---------------------------------------------------------------------------------
V_PASS = 0
V_DROP = 1
V_REJECT = 2
V_RESET = 3
VERDICT_NAMES = ("pass", "drop", "reject", "reset")
DROP_RULE = 0
DROP_STATE_FULL = 1
DIR_IN = 0
DIR_OUT = 1

# -- rule actions (rinfo[:, RI_ACT]) ------------------------------------------------------------
A_ALLOW = 0
A_DENY = 1
A_REJECT = 2  # reject, unreach, unreach6: RI_ARG = code4 | code6 << 8
A_RESET = 3
A_COUNT = 4
A_SKIPTO = 5  # RI_ARG = target rule index, -1 = tablearg
A_CHECK = 6
ACTION_CODES = {
    "allow": A_ALLOW,
    "deny": A_DENY,
    "reject": A_REJECT,
    "unreach": A_REJECT,
    "unreach6": A_REJECT,
    "reset": A_RESET,
    "count": A_COUNT,
    "skipto": A_SKIPTO,
    "check-state": A_CHECK,
}

RI_NUM = 0
RI_ACT = 1
RI_ARG = 2
RI_FLAGS = 3
RI_POFF = 4
RI_PLEN = 5
RI_COLS = 6
RF_CHECK = 1  # has a residual program
RF_KEEP = 2  # keep-state
RF_PROBE = 4  # a probe point (check-state or keep-state)
RF_LOG = 8

# -- residual program (prog int64[m, P_COLS]) ----------------------------------------------------
OP_ADDR_TABLE = 1  # A: 0 src / 1 dst, B: table slot, C: value or -1
OP_PORT_TABLE = 2  # A: 0 sport / 1 dport, B: table slot, C: value or -1
OP_IFACE = 3  # A: 0 recv / 1 xmit / 2 via, B: interface index or -1 (any)
OP_IFACE_TABLE = 4  # A: as OP_IFACE, B: table slot, C: value or -1
OP_TCPFLAGS = 5  # A: flags that must be set, B: flags that must be clear
OP_SETUP = 6
OP_ESTABLISHED = 7
OP_ICMP4TYPES = 8  # A..D: 256-bit type set
OP_ICMP6TYPES = 9
OP_FRAG = 10
OP_TTL = 11  # A: n, then n OP_DATA rows (A lo, B hi)
OP_DATA = 12
P_OP = 0
P_NEG = 1
P_A = 2
P_B = 3
P_C = 4
P_D = 5
P_COLS = 6

# -- cmap layout ---------------------------------------------------------------------------------
C4_SRC = 0  # c4: the source top level (65536 entries), then the destination's
C4_DST = 65536
CM_SRC6 = 2
CM_DST6 = 3
CM_CONST = 4  # 4..8: the one row of a field whose classes all have the same bits, else -1
CM_LIST = 9  # all five fields constant: the candidates' offset in glist (else -1) ...
CM_LIST_N = 10  # ... and their number
CM_HDR = 11
PORT_DOMAIN = 65537  # ports 0..65535 and 65536 = "no port"
NO_PORT = 65536
META_DOMAIN = 1028  # direction (2) x family (2) x protocol (256 + unknown)
SPORT_OFF = CM_HDR
DPORT_OFF = CM_HDR + PORT_DOMAIN
META_OFF = CM_HDR + 2 * PORT_DOMAIN
CMAP_SIZE = META_OFF + META_DOMAIN

F_SRC = 0
F_DST = 1
F_SPORT = 2
F_DPORT = 3
F_META = 4
FIELD_NAMES = ("src", "dst", "sport", "dport", "meta")

# -- rule groups (grp int64[N_GROUPS, G_COLS]) ----------------------------------------------------
N_GROUPS = 4  # 2 * (source condition dense) + (destination condition dense)
G_WOFF = 0  # first bm word of the group
G_NW = 1  # bm words of the group
G_AOFF = 2  # first ag word
G_NA = 3  # ag words
G_ROFF = 4  # first glist entry
G_N = 5  # rules in the group
G_COLS = 6
DENSE = 0.1  # a condition covering more than this share of a field's classes is "dense"
GROUP_MIN = 512  # smaller rule sets stay in one group (the split pays off for long lists)

FW = namedtuple(
    "FW",
    [
        "c4",
        "cl6_roots",
        "cl6_groups",
        "cmap",
        "bm",
        "ag",
        "grp",
        "glist",
        "gpos",
        "rinfo",
        "prog",
        "probes",
        "cnt",
        "t4_roots",
        "t4_groups",
        "t6_roots",
        "t6_groups",
        "t_idx",
        "nt",
        "if_tab",
        "st",
        "ctl",
    ],
)

_U1 = np.uint64(1)
_TH_SYN = 0x02
_TH_RST = 0x04
_TH_ACK = 0x10


# =============================================================================================
# data path
# =============================================================================================


@intrinsic
def cttz(typingctx, x):
    """Count trailing zeros of a non-zero uint64 (llvm.cttz: tzcnt/bsf)."""
    sig = types.uint64(types.uint64)

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(64), [ir.IntType(64), ir.IntType(1)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.cttz.i64")
        return builder.call(fn, [args[0], ir.Constant(ir.IntType(1), 1)])

    return sig, codegen


# The per-packet code takes the arrays one by one and runs without reference counting
# (_nrt=False): getting a member out of the FW tuple, or passing an array to an inlined
# helper, otherwise costs an atomic increment and decrement each, and with ~20 arrays per
# packet that was most of the time. The tuple is unpacked once per batch (fw_batch).


@njit(cache=True, inline="always")
def _c4_lookup(c4, top, a):
    """IPv4 class row of address a: DIR-16 top level, then the block's sorted boundaries."""
    e = c4[top + (a >> 16)]
    if e >= 0:
        return e
    off = -e - 1
    n = c4[off]
    cls = c4[off + 1]
    lo = a & 0xFFFF
    if n <= 8:
        for j in range(n):
            if c4[off + 2 + 2 * j] <= lo:
                cls = c4[off + 3 + 2 * j]
            else:
                break
    else:
        i = 0
        k = n
        while i < k:
            mid = (i + k) >> 1
            if c4[off + 2 + 2 * mid] <= lo:
                i = mid + 1
            else:
                k = mid
        if i > 0:
            cls = c4[off + 1 + 2 * i]
    return cls


@njit(cache=True, inline="always")
def _class_rows(c4, cl6_roots, cl6_groups, cmap, keys, i, direction):
    """The five class rows of packet i. A field no rule distinguishes (all its classes have
    the same bits) costs no lookup: its row is in the cmap header."""
    fam = keys[i, K_FAMILY]
    rs = np.int64(cmap[CM_CONST + F_SRC])
    rd = np.int64(cmap[CM_CONST + F_DST])
    if fam == 6:
        if rs < 0:
            rs = lpm6_get(
                cl6_roots,
                cl6_groups,
                cmap[CM_SRC6],
                np.uint64(keys[i, K_SRC_HI]),
                np.uint64(keys[i, K_SRC_LO]),
            )
        if rd < 0:
            rd = lpm6_get(
                cl6_roots,
                cl6_groups,
                cmap[CM_DST6],
                np.uint64(keys[i, K_DST_HI]),
                np.uint64(keys[i, K_DST_LO]),
            )
        fi = 257
    else:
        if rs < 0:
            rs = np.int64(_c4_lookup(c4, C4_SRC, keys[i, K_SRC_LO] & 0xFFFFFFFF))
        if rd < 0:
            rd = np.int64(_c4_lookup(c4, C4_DST, keys[i, K_DST_LO] & 0xFFFFFFFF))
        fi = 0
    rsp = np.int64(cmap[CM_CONST + F_SPORT])
    rdp = np.int64(cmap[CM_CONST + F_DPORT])
    if rsp < 0 or rdp < 0:
        nonfirst = (keys[i, K_FRAG] & FRAG_NONFIRST) != 0
        if rsp < 0:
            sp = keys[i, K_SPORT]
            if nonfirst or sp < 0 or sp > 65535:
                sp = NO_PORT
            rsp = np.int64(cmap[SPORT_OFF + sp])
        if rdp < 0:
            dp = keys[i, K_DPORT]
            if nonfirst or dp < 0 or dp > 65535:
                dp = NO_PORT
            rdp = np.int64(cmap[DPORT_OFF + dp])
    rm = np.int64(cmap[CM_CONST + F_META])
    if rm < 0:
        pr = keys[i, K_PROTO]
        if pr < 0 or pr > 255:
            pr = 256
        rm = np.int64(cmap[META_OFF + direction * 514 + fi + pr])
    return rs, rd, rsp, rdp, rm


@njit(cache=True, inline="always")
def _group_next(bm, ag, rs, rd, rsp, rdp, rm, woff, aoff, na, lpos, ng):
    """Within one group: the first local rule index >= lpos whose bit is set in all five
    class rows, else ``ng``."""
    if lpos >= ng:
        return ng
    w0 = lpos >> 6
    a = w0 >> 6
    amask = ~((_U1 << np.uint64(w0 & 63)) - _U1)
    while a < na:
        g = (
            ag[rs, aoff + a]
            & ag[rd, aoff + a]
            & ag[rsp, aoff + a]
            & ag[rdp, aoff + a]
            & ag[rm, aoff + a]
            & amask
        )
        while g:
            w = (a << 6) + np.int64(cttz(g))
            c = woff + w
            x = bm[rs, c] & bm[rd, c] & bm[rsp, c] & bm[rdp, c] & bm[rm, c]
            if w == w0:
                x &= ~((_U1 << np.uint64(lpos & 63)) - _U1)
            if x:
                return (w << 6) + np.int64(cttz(x))
            g &= g - _U1
        a += 1
        amask = ~np.uint64(0)
    return ng


@njit(cache=True, inline="always")
def _advance(bm, ag, grp, glist, k, rs, rd, rsp, rdp, rm, lpos, dflt):
    """Group k's first candidate with local index >= lpos: (local index, rule index), the
    rule index being ``dflt`` when there is none."""
    n = grp[k, G_N]
    if lpos >= n:
        return n, dflt
    lo = _group_next(
        bm, ag, rs, rd, rsp, rdp, rm, grp[k, G_WOFF], grp[k, G_AOFF], grp[k, G_NA], lpos, n
    )
    return lo, (glist[grp[k, G_ROFF] + lo] if lo < n else dflt)


@njit(cache=True, inline="always")
def _verify(
    rinfo, prog, t4_roots, t4_groups, t6_roots, t6_groups, t_idx, nt, if_tab, r, keys, i, direction
):
    """Run rule r's residual program. Returns (matched, tablearg)."""
    j = rinfo[r, RI_POFF]
    end = j + rinfo[r, RI_PLEN]
    targ = np.int64(0)
    fam = keys[i, K_FAMILY]
    proto = keys[i, K_PROTO]
    nonfirst = (keys[i, K_FRAG] & FRAG_NONFIRST) != 0
    matched = True
    while j < end:
        op = prog[j, P_OP]
        neg = prog[j, P_NEG] != 0
        a = prog[j, P_A]
        b = prog[j, P_B]
        m = False
        nxt = j + 1
        if op == OP_ADDR_TABLE:
            if a == 0:
                v = table_addr_lookup(
                    t4_roots,
                    t4_groups,
                    t6_roots,
                    t6_groups,
                    t_idx,
                    b,
                    fam,
                    keys[i, K_SRC_HI],
                    keys[i, K_SRC_LO],
                )
            else:
                v = table_addr_lookup(
                    t4_roots,
                    t4_groups,
                    t6_roots,
                    t6_groups,
                    t_idx,
                    b,
                    fam,
                    keys[i, K_DST_HI],
                    keys[i, K_DST_LO],
                )
            m = v >= 0 and (prog[j, P_C] < 0 or v == prog[j, P_C])
            if m:
                targ = v
        elif op == OP_PORT_TABLE:
            k = keys[i, K_SPORT] if a == 0 else keys[i, K_DPORT]
            if nonfirst:
                k = -1
            v = table_number_lookup(nt, t_idx, b, k)
            m = v >= 0 and (prog[j, P_C] < 0 or v == prog[j, P_C])
            if m:
                targ = v
        elif op == OP_IFACE or op == OP_IFACE_TABLE:
            if a == 0 or (a == 2 and direction == 0):
                ifx = keys[i, K_RX]
            else:
                ifx = keys[i, K_TX]
            if op == OP_IFACE:
                m = ifx >= 0 and (b < 0 or ifx == b)
            else:
                v = table_iface_lookup(if_tab, t_idx, b, ifx)
                m = v >= 0 and (prog[j, P_C] < 0 or v == prog[j, P_C])
                if m:
                    targ = v
        elif op == OP_TCPFLAGS or op == OP_SETUP or op == OP_ESTABLISHED:
            f = keys[i, K_TCPFLAGS]
            if proto == 6 and not nonfirst and f >= 0:
                if op == OP_TCPFLAGS:
                    m = (f & a) == a and (f & b) == 0
                elif op == OP_SETUP:
                    m = (f & _TH_SYN) != 0 and (f & _TH_ACK) == 0
                else:
                    m = (f & (_TH_RST | _TH_ACK)) != 0
        elif op == OP_ICMP4TYPES or op == OP_ICMP6TYPES:
            t = keys[i, K_ICMPTYPE]
            if op == OP_ICMP4TYPES:
                ok = fam == 4 and proto == 1
            else:
                ok = fam == 6 and proto == 58
            if ok and not nonfirst and 0 <= t < 256:
                word = np.uint64(prog[j, P_A + (t >> 6)])
                m = ((word >> np.uint64(t & 63)) & _U1) != 0
        elif op == OP_FRAG:
            m = nonfirst
        elif op == OP_TTL:
            ttl = keys[i, K_TTL]
            for q in range(j + 1, j + 1 + a):
                if prog[q, P_A] <= ttl <= prog[q, P_B]:
                    m = True
            nxt = j + 1 + a
        if neg:
            m = not m
        if not m:
            matched = False
            break
        j = nxt
    return matched, targ


@njit(cache=True, inline="always")
def _count(cnt, r, length, now):
    cnt[r, 0] += 1
    cnt[r, 1] += length
    cnt[r, 2] = now


@njit(cache=True, inline="always")
def _find_number(rinfo, number):
    """Index of the first rule whose number is >= number (the default rule at worst)."""
    lo = 0
    hi = rinfo.shape[0] - 1
    while lo < hi:
        mid = (lo + hi) >> 1
        if rinfo[mid, RI_NUM] < number:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, inline="always")
def _verdict(rinfo, r, keys, i):
    act = rinfo[r, RI_ACT]
    v = V_DROP
    x = np.int64(DROP_RULE)
    if act == A_ALLOW:
        v = V_PASS
        x = 0
    elif act == A_REJECT:
        v = V_REJECT
        codes = rinfo[r, RI_ARG]
        if keys[i, K_FAMILY] == 6:
            x = (1 << 8) | ((codes >> 8) & 255)
        else:
            x = (3 << 8) | (codes & 255)
    elif act == A_RESET:
        f = keys[i, K_TCPFLAGS]
        if (
            keys[i, K_PROTO] == 6
            and f >= 0
            and (keys[i, K_FRAG] & FRAG_NONFIRST) == 0
            and (f & _TH_RST) == 0
        ):
            v = V_RESET
            x = 0
    return v, x


@njit(cache=True, inline="always")
def _packet_state_key(keys, i):
    """The state key of packet i (see ``state_key``); a non-first fragment has no ports."""
    nf = (keys[i, K_FRAG] & FRAG_NONFIRST) != 0
    return state_key(
        keys[i, K_FAMILY],
        keys[i, K_SRC_HI],
        keys[i, K_SRC_LO],
        -1 if nf else keys[i, K_SPORT],
        keys[i, K_DST_HI],
        keys[i, K_DST_LO],
        -1 if nf else keys[i, K_DPORT],
        keys[i, K_PROTO],
    )


# _visit's outcome (its first return value)
GO_ON = 0  # the walk goes on: after r, or at the skipto target
DECIDED = 1  # the rule decides
STATE_FULL = 2  # keep-state found max_states states: drop, DROP_STATE_FULL


@njit(cache=True, inline="always")
def _visit(
    rinfo,
    prog,
    probes,
    cnt,
    t4_roots,
    t4_groups,
    t6_roots,
    t6_groups,
    t_idx,
    nt,
    if_tab,
    st,
    ctl,
    keys,
    i,
    direction,
    now,
    r,
    pos,
    pc,
    probed,
    srow,
    dflt,
    length,
):
    """One step of the walk, the part common to both candidate sources: the state probe
    (once, at the first probe point the walk reaches or passes, ``pos`` being where the walk
    went on last), then candidate r (``dflt``: the default rule): its residual program,
    keep-state, counters and action. Returns (outcome, value, pc, probed, srow): GO_ON with
    the skipto target (-1: on after r), DECIDED or STATE_FULL with the rule. ``dflt`` and
    ``length`` (``keys[i, K_LEN]``) come from the caller, read once per packet: reading
    them here, once per candidate, cost ~4% on the no-match rule sets."""
    nxt = -1  # a skipto target; -1: go on after r
    if not probed:
        while probes[pc] < pos:
            pc += 1
        if probes[pc] <= r:  # the walk reaches or passes a probe point: look up once
            probed = True
            sk0, sk1, sk2, sk3, sk4, sk5, sab = _packet_state_key(keys, i)
            srow = state_find(st, ctl, sk0, sk1, sk2, sk3, sk4, sk5, now)
            if srow >= 0:
                q = st[srow, ST_RULE]
                state_update(st, ctl, srow, sab, keys[i, K_PROTO], keys[i, K_TCPFLAGS], length, now)
                ctl[FC_HITS] += 1
                _count(cnt, q, length, now)
                if rinfo[q, RI_ACT] != A_SKIPTO:
                    return DECIDED, q, pc, probed, srow
                nxt = rinfo[q, RI_ARG]
    if nxt < 0:
        if r >= dflt:
            _count(cnt, dflt, length, now)
            return DECIDED, dflt, pc, probed, srow
        flags = rinfo[r, RI_FLAGS]
        targ = np.int64(0)
        ok = True
        if flags & RF_CHECK:
            ok, targ = _verify(
                rinfo,
                prog,
                t4_roots,
                t4_groups,
                t6_roots,
                t6_groups,
                t_idx,
                nt,
                if_tab,
                r,
                keys,
                i,
                direction,
            )
        if ok:
            if (flags & RF_KEEP) and srow < 0:
                # a keep-state rule is a probe point: the lookup ran and found nothing
                sk0, sk1, sk2, sk3, sk4, sk5, sab = _packet_state_key(keys, i)
                srow = state_insert(st, ctl, sk0, sk1, sk2, sk3, sk4, sk5, sab, r, now)
                if srow < 0:
                    _count(cnt, r, length, now)
                    return STATE_FULL, r, pc, probed, srow
                state_update(st, ctl, srow, sab, keys[i, K_PROTO], keys[i, K_TCPFLAGS], length, now)
            _count(cnt, r, length, now)
            act = rinfo[r, RI_ACT]
            if act == A_SKIPTO:
                nxt = rinfo[r, RI_ARG]
                if nxt < 0:  # tablearg
                    nxt = _find_number(rinfo, max(targ, rinfo[r, RI_NUM] + 1))
            elif act != A_COUNT and act != A_CHECK:
                return DECIDED, r, pc, probed, srow
    return GO_ON, nxt, pc, probed, srow


@njit(cache=True, inline="always")
def _result(rinfo, keys, i, outcome, decided):
    """(verdict, rule, aux) once _visit stopped the walk."""
    if outcome == STATE_FULL:
        return V_DROP, decided, np.int64(DROP_STATE_FULL)
    verdict, x = _verdict(rinfo, decided, keys, i)
    return verdict, decided, x


@njit(cache=True, inline="always")
def _classify(
    c4,
    cl6_roots,
    cl6_groups,
    cmap,
    bm,
    ag,
    grp,
    glist,
    gpos,
    rinfo,
    prog,
    probes,
    cnt,
    t4_roots,
    t4_groups,
    t6_roots,
    t6_groups,
    t_idx,
    nt,
    if_tab,
    st,
    ctl,
    keys,
    i,
    direction,
    now,
):
    # the class rows come in ctl[FC_ROWS:] (a call may have at most 30 arguments: CPython
    # compiles longer calls as f(*args), which numba's inliner refuses)
    rs = ctl[FC_ROWS]
    rd = ctl[FC_ROWS + 1]
    rsp = ctl[FC_ROWS + 2]
    rdp = ctl[FC_ROWS + 3]
    rm = ctl[FC_ROWS + 4]
    dflt = rinfo.shape[0] - 1
    length = keys[i, K_LEN]
    # one cursor per rule group (local index, rule index); the next candidate is the smallest
    l0, g0 = _advance(bm, ag, grp, glist, 0, rs, rd, rsp, rdp, rm, 0, dflt)
    l1, g1 = _advance(bm, ag, grp, glist, 1, rs, rd, rsp, rdp, rm, 0, dflt)
    l2, g2 = _advance(bm, ag, grp, glist, 2, rs, rd, rsp, rdp, rm, 0, dflt)
    l3, g3 = _advance(bm, ag, grp, glist, 3, rs, rd, rsp, rdp, rm, 0, dflt)
    pc = 0
    probed = probes[0] > dflt  # no probe points: never look states up
    srow = -1
    pos = 0
    while True:
        r = min(min(g0, g1), min(g2, g3))
        outcome, nxt, pc, probed, srow = _visit(
            rinfo,
            prog,
            probes,
            cnt,
            t4_roots,
            t4_groups,
            t6_roots,
            t6_groups,
            t_idx,
            nt,
            if_tab,
            st,
            ctl,
            keys,
            i,
            direction,
            now,
            r,
            pos,
            pc,
            probed,
            srow,
            dflt,
            length,
        )
        if outcome != GO_ON:
            return _result(rinfo, keys, i, outcome, nxt)
        if nxt < 0:  # on after r: only r's group moves
            pos = r + 1
            if g0 == r:
                l0, g0 = _advance(bm, ag, grp, glist, 0, rs, rd, rsp, rdp, rm, l0 + 1, dflt)
            elif g1 == r:
                l1, g1 = _advance(bm, ag, grp, glist, 1, rs, rd, rsp, rdp, rm, l1 + 1, dflt)
            elif g2 == r:
                l2, g2 = _advance(bm, ag, grp, glist, 2, rs, rd, rsp, rdp, rm, l2 + 1, dflt)
            else:
                l3, g3 = _advance(bm, ag, grp, glist, 3, rs, rd, rsp, rdp, rm, l3 + 1, dflt)
        else:  # skipto: every group behind the target moves
            pos = nxt
            if g0 < pos:
                l0, g0 = _advance(bm, ag, grp, glist, 0, rs, rd, rsp, rdp, rm, gpos[0, pos], dflt)
            if g1 < pos:
                l1, g1 = _advance(bm, ag, grp, glist, 1, rs, rd, rsp, rdp, rm, gpos[1, pos], dflt)
            if g2 < pos:
                l2, g2 = _advance(bm, ag, grp, glist, 2, rs, rd, rsp, rdp, rm, gpos[2, pos], dflt)
            if g3 < pos:
                l3, g3 = _advance(bm, ag, grp, glist, 3, rs, rd, rsp, rdp, rm, gpos[3, pos], dflt)


@njit(cache=True, inline="always")
def _classify_list(
    c4,
    cl6_roots,
    cl6_groups,
    cmap,
    bm,
    ag,
    grp,
    glist,
    gpos,
    rinfo,
    prog,
    probes,
    cnt,
    t4_roots,
    t4_groups,
    t6_roots,
    t6_groups,
    t_idx,
    nt,
    if_tab,
    st,
    ctl,
    keys,
    i,
    direction,
    now,
):
    dflt = rinfo.shape[0] - 1
    length = keys[i, K_LEN]
    # no field distinguishes packets: the candidates are the same list for every packet
    lst = cmap[CM_LIST]
    nl = cmap[CM_LIST_N]
    l0 = 0
    r = np.int64(glist[lst]) if nl > 0 else dflt
    pc = 0
    probed = probes[0] > dflt  # no probe points: never look states up
    srow = -1
    pos = 0
    while True:
        outcome, nxt, pc, probed, srow = _visit(
            rinfo,
            prog,
            probes,
            cnt,
            t4_roots,
            t4_groups,
            t6_roots,
            t6_groups,
            t_idx,
            nt,
            if_tab,
            st,
            ctl,
            keys,
            i,
            direction,
            now,
            r,
            pos,
            pc,
            probed,
            srow,
            dflt,
            length,
        )
        if outcome != GO_ON:
            return _result(rinfo, keys, i, outcome, nxt)
        if nxt < 0:
            pos = r + 1
            l0 += 1
        else:  # skipto: the first candidate >= the target
            pos = nxt
            lo = l0
            hi = nl
            while lo < hi:
                mid = (lo + hi) >> 1
                if glist[lst + mid] < pos:
                    lo = mid + 1
                else:
                    hi = mid
            l0 = lo
        r = np.int64(glist[lst + l0]) if l0 < nl else dflt


@njit(cache=True, inline="always")
def _rows_to_ctl(c4, cl6_roots, cl6_groups, cmap, ctl, keys, i, direction):
    rs, rd, rsp, rdp, rm = _class_rows(c4, cl6_roots, cl6_groups, cmap, keys, i, direction)
    ctl[FC_ROWS] = rs
    ctl[FC_ROWS + 1] = rd
    ctl[FC_ROWS + 2] = rsp
    ctl[FC_ROWS + 3] = rdp
    ctl[FC_ROWS + 4] = rm


@njit(cache=True, nogil=True, _nrt=False)
def _batch(
    c4,
    cl6_roots,
    cl6_groups,
    cmap,
    bm,
    ag,
    grp,
    glist,
    gpos,
    rinfo,
    prog,
    probes,
    cnt,
    t4_roots,
    t4_groups,
    t6_roots,
    t6_groups,
    t_idx,
    nt,
    if_tab,
    st,
    ctl,
    keys,
    n,
    direction,
    now,
    verdicts,
    rules,
    aux,
):
    if ctl[FC_COUNT] > 0:
        sweep_states(st, ctl, now, ctl[FC_SWEEP])
    if cmap[CM_LIST] >= 0:  # no field distinguishes packets: one candidate list
        for i in range(n):
            v, r, a = _classify_list(
                c4,
                cl6_roots,
                cl6_groups,
                cmap,
                bm,
                ag,
                grp,
                glist,
                gpos,
                rinfo,
                prog,
                probes,
                cnt,
                t4_roots,
                t4_groups,
                t6_roots,
                t6_groups,
                t_idx,
                nt,
                if_tab,
                st,
                ctl,
                keys,
                i,
                direction,
                now,
            )
            verdicts[i] = v
            rules[i] = r
            aux[i] = a
        return
    for i in range(n):
        _rows_to_ctl(c4, cl6_roots, cl6_groups, cmap, ctl, keys, i, direction)
        v, r, a = _classify(
            c4,
            cl6_roots,
            cl6_groups,
            cmap,
            bm,
            ag,
            grp,
            glist,
            gpos,
            rinfo,
            prog,
            probes,
            cnt,
            t4_roots,
            t4_groups,
            t6_roots,
            t6_groups,
            t_idx,
            nt,
            if_tab,
            st,
            ctl,
            keys,
            i,
            direction,
            now,
        )
        verdicts[i] = v
        rules[i] = r
        aux[i] = a


@njit(cache=True, nogil=True)
def fw_batch(fw, keys, n, direction, now, verdicts, rules, aux):
    """Classify ``keys[:n]``; see the module doc for the outputs."""
    _batch(
        fw.c4,
        fw.cl6_roots,
        fw.cl6_groups,
        fw.cmap,
        fw.bm,
        fw.ag,
        fw.grp,
        fw.glist,
        fw.gpos,
        fw.rinfo,
        fw.prog,
        fw.probes,
        fw.cnt,
        fw.t4_roots,
        fw.t4_groups,
        fw.t6_roots,
        fw.t6_groups,
        fw.t_idx,
        fw.nt,
        fw.if_tab,
        fw.st,
        fw.ctl,
        keys,
        n,
        direction,
        now,
        verdicts,
        rules,
        aux,
    )


@njit(cache=True, nogil=True, _nrt=False)
def _one(
    c4,
    cl6_roots,
    cl6_groups,
    cmap,
    bm,
    ag,
    grp,
    glist,
    gpos,
    rinfo,
    prog,
    probes,
    cnt,
    t4_roots,
    t4_groups,
    t6_roots,
    t6_groups,
    t_idx,
    nt,
    if_tab,
    st,
    ctl,
    keys,
    i,
    direction,
    now,
):
    _rows_to_ctl(c4, cl6_roots, cl6_groups, cmap, ctl, keys, i, direction)
    return _classify(
        c4,
        cl6_roots,
        cl6_groups,
        cmap,
        bm,
        ag,
        grp,
        glist,
        gpos,
        rinfo,
        prog,
        probes,
        cnt,
        t4_roots,
        t4_groups,
        t6_roots,
        t6_groups,
        t_idx,
        nt,
        if_tab,
        st,
        ctl,
        keys,
        i,
        direction,
        now,
    )


@njit(cache=True, nogil=True)
def fw_classify(fw, keys, i, direction, now):
    """Classify one packet ``keys[i]``: (verdict, rule index, aux). ``fw_batch`` is the
    fast path (it unpacks the FW tuple once per vector, this once per packet)."""
    return _one(
        fw.c4,
        fw.cl6_roots,
        fw.cl6_groups,
        fw.cmap,
        fw.bm,
        fw.ag,
        fw.grp,
        fw.glist,
        fw.gpos,
        fw.rinfo,
        fw.prog,
        fw.probes,
        fw.cnt,
        fw.t4_roots,
        fw.t4_groups,
        fw.t6_roots,
        fw.t6_groups,
        fw.t_idx,
        fw.nt,
        fw.if_tab,
        fw.st,
        fw.ctl,
        keys,
        i,
        direction,
        now,
    )


@njit(cache=True, nogil=True, _nrt=False)
def fw_batch_flat(
    c4,
    cl6_roots,
    cl6_groups,
    cmap,
    bm,
    ag,
    grp,
    glist,
    gpos,
    rinfo,
    prog,
    probes,
    cnt,
    t4_roots,
    t4_groups,
    t6_roots,
    t6_groups,
    t_idx,
    nt,
    if_tab,
    st,
    ctl,
    keys,
    n,
    direction,
    now,
    verdicts,
    rules,
    aux,
):
    """``fw_batch`` with the FW arrays passed flat (the entry point from Python)."""
    _batch(
        c4,
        cl6_roots,
        cl6_groups,
        cmap,
        bm,
        ag,
        grp,
        glist,
        gpos,
        rinfo,
        prog,
        probes,
        cnt,
        t4_roots,
        t4_groups,
        t6_roots,
        t6_groups,
        t_idx,
        nt,
        if_tab,
        st,
        ctl,
        keys,
        n,
        direction,
        now,
        verdicts,
        rules,
        aux,
    )


# =============================================================================================
# compiler
# =============================================================================================


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
def _aggregate(bm, ag, nrows, grp):
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


class _Ctx:
    """What lowering needs besides the rule: tables, interfaces, the router's addresses."""

    def __init__(
        self, tables: FwTables | None, interfaces: Sequence[str], me4: Sequence, me6: Sequence
    ) -> None:
        self.tables = tables
        self.interfaces = list(interfaces)
        self.me4 = sorted({int(IPv4Address(str(a))) for a in me4})
        self.me6 = sorted({int(IPv6Address(str(a))) for a in me6})


@dataclass
class _Lowered:
    src: tuple  # ("all",) | ("set", negate, [(net, len)] v4, [(net, len)] v6)
    dst: tuple
    sport: tuple | None
    dport: tuple | None
    meta: list[tuple[int, int]]  # meta-domain intervals
    prog: list[list[int]]
    flags: int
    act: int
    codes: int = 0


def _where(rule: Rule) -> str:
    return f"rule {rule.number:05d} ({rule.body_text()})"


def _table_slot(ctx: _Ctx, rule: Rule, name: str, want: str, word: int, shown: str) -> int:
    tabs = ctx.tables
    if tabs is None or name not in tabs.slots:
        raise RuleError(_where(rule), word or None, shown, f"no table named {name!r}")
    t = tabs.type_of(name)
    if t != want:
        raise RuleError(
            _where(rule),
            word or None,
            shown,
            f"table {name!r} is a {t} table, expected a {want} table",
        )
    return tabs.slot(name)


def _lower_addr(rule: Rule, spec: AddrSpec, fld: int, prog: list, ctx: _Ctx) -> tuple:
    if spec.is_any:
        return ("all",)
    items = spec.items
    if len(items) == 1 and items[0].kind == "table":
        it = items[0]
        slot = _table_slot(ctx, rule, it.table, "addr", it.word, str(it))
        prog.append(
            [OP_ADDR_TABLE, int(spec.negate), fld, slot, -1 if it.value is None else it.value, 0]
        )
        return ("all",)
    n4: set[tuple[int, int]] = set()
    n6: set[tuple[int, int]] = set()
    for it in items:
        if it.kind == "net":
            (n4 if it.net.version == 4 else n6).add((int(it.net.network_address), it.net.prefixlen))
        elif it.kind == "me":
            n4.update((a, 32) for a in ctx.me4)
            n6.update((a, 128) for a in ctx.me6)
        elif it.kind == "me6":
            n6.update((a, 128) for a in ctx.me6)
        else:  # pragma: no cover - the parser never builds these
            raise RuleError(_where(rule), it.word or None, str(it), "not allowed in a list")
    return ("set", spec.negate, sorted(n4), sorted(n6))


def _icmp_words(types_: Sequence[int]) -> list[int]:
    words = [0, 0, 0, 0]
    for t in types_:
        words[t >> 6] |= 1 << (t & 63)
    return [w - (1 << 64) if w >> 63 else w for w in words]


def lower_rule(rule: Rule, ctx: _Ctx) -> _Lowered:
    """Rule -> index conditions per field + residual program (raises RuleError)."""
    act = ACTION_CODES[rule.action]
    flags = RF_LOG if rule.log else 0
    c4, c6 = rule.icmp_codes()
    codes = c4 | (c6 << 8)
    if rule.action == "check-state":
        return _Lowered(("none",), ("none",), None, None, [], [], flags | RF_PROBE, act)
    prog: list[list[int]] = []
    src = _lower_addr(rule, rule.src, 0, prog, ctx)
    dst = _lower_addr(rule, rule.dst, 1, prog, ctx)
    dirs = {0, 1}
    fams = {4, 6} if rule.family is None else {rule.family}
    for o in rule.options:
        neg = int(o.negate)
        if o.name in ("in", "out"):
            d = 0 if o.name == "in" else 1
            dirs &= {1 - d} if o.negate else {d}
        elif o.name == "ipversion":
            v = o.args[0]
            fams &= ({4, 6} - {v}) if o.negate else {v}
        elif o.name in IFACE_OPTIONS:
            which = IFACE_OPTIONS.index(o.name)
            which = {0: 2, 1: 0, 2: 1}[which]  # via -> 2, recv -> 0, xmit -> 1
            if o.args[0] == "table":
                slot = _table_slot(ctx, rule, o.args[1], "iface", o.word, str(o))
                prog.append(
                    [OP_IFACE_TABLE, neg, which, slot, -1 if o.args[2] is None else o.args[2], 0]
                )
            elif o.args[0] == "any":
                prog.append([OP_IFACE, neg, which, -1, 0, 0])
            else:
                name = o.args[0]
                if name not in ctx.interfaces:
                    raise RuleError(
                        _where(rule), o.word or None, name, f"no interface named {name!r}"
                    )
                prog.append([OP_IFACE, neg, which, ctx.interfaces.index(name), 0, 0])
        elif o.name == "tcpflags":
            prog.append([OP_TCPFLAGS, neg, o.args[0], o.args[1], 0, 0])
        elif o.name == "setup":
            prog.append([OP_SETUP, neg, 0, 0, 0, 0])
        elif o.name == "established":
            prog.append([OP_ESTABLISHED, neg, 0, 0, 0, 0])
        elif o.name in ("icmptypes", "icmp6types"):
            op = OP_ICMP4TYPES if o.name == "icmptypes" else OP_ICMP6TYPES
            prog.append([op, neg, *_icmp_words(o.args)])
        elif o.name == "frag":
            prog.append([OP_FRAG, neg, 0, 0, 0, 0])
        elif o.name == "ipttl":
            prog.append([OP_TTL, neg, len(o.args), 0, 0, 0])
            prog.extend([OP_DATA, 0, lo, hi, 0, 0] for lo, hi in o.args)
        elif o.name == "lookup":
            fld, name, value = o.args
            v = -1 if value is None else value
            if fld in ("src-ip", "dst-ip"):
                slot = _table_slot(ctx, rule, name, "addr", o.word, str(o))
                prog.append([OP_ADDR_TABLE, neg, 0 if fld == "src-ip" else 1, slot, v, 0])
            else:
                slot = _table_slot(ctx, rule, name, "number", o.word, str(o))
                prog.append([OP_PORT_TABLE, neg, 0 if fld == "src-port" else 1, slot, v, 0])
        else:  # pragma: no cover
            raise RuleError(_where(rule), o.word or None, o.name, "unsupported option")
    meta = []
    for d in sorted(dirs):
        for f in sorted(fams):
            base = d * 514 + (257 if f == 6 else 0)
            if rule.proto is None:
                meta.append((base, base + 256))
            else:
                meta.append((base + rule.proto, base + rule.proto))
    if prog:
        flags |= RF_CHECK
    if rule.keep_state:
        flags |= RF_KEEP | RF_PROBE
    return _Lowered(src, dst, rule.sport, rule.dport, meta, prog, flags, act, codes)


# -- address classes -------------------------------------------------------------------------


class _AddrClasses:
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
    addr: dict[tuple[int, int], _AddrClasses]
    lowered: list[_Lowered]
    rgroup: np.ndarray  # group of each user rule
    widths: list[int]  # bm words per group
    updates: int = 0  # incremental updates since the last full compile
    stats: dict = field(default_factory=dict)

    def arrays(self) -> tuple:
        """The classifier part of ``FW`` (c4 ... cnt)."""
        return (
            self.c4,
            self.cl6.roots,
            self.cl6.groups,
            self.cmap,
            self.bm,
            self.ag,
            self.grp,
            self.glist,
            self.gpos,
            self.rinfo,
            self.prog,
            self.probes,
            self.cnt,
        )

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


def _words_for(n: int) -> int:
    return max(1, (n + 64 + 63) // 64)  # at least 64 spare bits for inserts


def _layout(rgroup: np.ndarray, widths: Sequence[int] | None = None):
    """Group tables for the rule -> group assignment: (grp, glist, gpos, local, widths)."""
    n = rgroup.shape[0]
    counts = [int((rgroup == k).sum()) for k in range(N_GROUPS)]
    if widths is None:
        widths = [_words_for(c) for c in counts]
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


def _group_of(src_cover: float, dst_cover: float) -> int:
    return 2 * int(src_cover > DENSE) + int(dst_cover > DENSE)


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


def _rinfo_rows(rules: list[Rule], lowered: list[_Lowered]) -> tuple[np.ndarray, np.ndarray]:
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


def _probes(rinfo: np.ndarray) -> np.ndarray:
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


def _build_c4(addr: dict) -> np.ndarray:
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
            raise RuleError(_where(r), None, None, "rule number must be 1..65534")
    ctx = _Ctx(tables, interfaces, me4, me6)
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
    addr: dict[tuple[int, int], _AddrClasses] = {}
    cover = np.zeros((2, n))  # share of the field's rows each rule accepts
    base = 0
    for fld, attr in ((F_SRC, "src"), (F_DST, "dst")):
        fbase = base
        for fam in (4, 6):
            ac = _AddrClasses(fam)
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
        rgroup = np.array([_group_of(cover[0, k], cover[1, k]) for k in range(n)], np.int64)
    else:
        rgroup = np.zeros(n, np.int64)
    grp, glist, gpos, local, widths = _layout(rgroup)
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
    _aggregate(bm, ag, nrows, grp)

    # -- address class lookup: IPv4 compact table, IPv6 class tries
    c4 = _build_c4(addr)
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

    rinfo, prog = _rinfo_rows(all_rules, lowered_all)
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
        _probes(rinfo),
        cnt,
        nrows,
        addr,
        lowered_all,
        rgroup,
        widths,
    )
    _set_constant_rows(cf)
    cf.stats = {"rows": nrows, "words": total_w, "groups": cf.group_sizes()}
    return cf


def _set_constant_rows(cf: CompiledFirewall) -> None:
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


# -- incremental updates ----------------------------------------------------------------------


def _relayout(cf: CompiledFirewall, widths: list[int], extra_rows: int) -> None:
    """New bm/ag with these group widths and room for extra rows; blocks copied over."""
    old_grp = cf.grp
    grp, glist, gpos, _, widths = _layout(cf.rgroup, widths)
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
        cf.c4 = _build_c4(cf.addr)
    cf.grp, cf.glist, cf.gpos, _, cf.widths = _layout(cf.rgroup, cf.widths)
    cf.rinfo, cf.prog = _rinfo_rows(cf.rules, cf.lowered)
    cf.probes = _probes(cf.rinfo)
    _aggregate(cf.bm, cf.ag, cf.nrows, cf.grp)
    _set_constant_rows(cf)
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
        raise RuleError(_where(rule), None, None, "rule number must be 1..65534")
    lw = lower_rule(rule, _Ctx(tables, interfaces, me4, me6))
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
        k = _group_of(
            rows[0].shape[0] / max(1, new.field_rows(F_SRC).shape[0]),
            rows[1].shape[0] / max(1, new.field_rows(F_DST).shape[0]),
        )
    else:
        k = 0
    lpos = int((cf.rgroup[:p] == k).sum())
    n_k = int((cf.rgroup == k).sum())
    if n_k + 1 > new.widths[k] * 64:
        widths = list(new.widths)
        widths[k] = _words_for(n_k + 1)
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


# -- slow-path helpers ----------------------------------------------------------------------------


def classify_keys(
    args: tuple, keys: np.ndarray, direction: int = DIR_IN, now: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Classify a key matrix through ``fw_batch`` (tests, tools): (verdicts, rules, aux)."""
    n = keys.shape[0]
    v = np.zeros(n, np.int32)
    r = np.zeros(n, np.int32)
    a = np.zeros(n, np.int32)
    fw_batch_flat(*args, np.ascontiguousarray(keys, np.int64), n, direction, np.int64(now), v, r, a)
    return v, r, a


__all__ = [
    "FW",
    "V_PASS",
    "V_DROP",
    "V_REJECT",
    "V_RESET",
    "DROP_RULE",
    "DROP_STATE_FULL",
    "DIR_IN",
    "DIR_OUT",
    "CompiledFirewall",
    "compile_rules",
    "insert_rule",
    "delete_rule_at",
    "fw_batch",
    "fw_batch_flat",
    "fw_classify",
    "classify_keys",
    "index_mapping",
    "TABLE_TYPES",
]
