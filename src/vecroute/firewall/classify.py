"""The firewall's data path: classify a vector of packets against the compiled rules.

Kernel API (for the graph nodes fw-in / fw-out)
================================================

::

    args = firewall.args()                     # Python: the FW arrays, flat, in field order
    fw = FW(*args)                             # inside @njit code (vecroute.firewall.layout)
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

Per packet
==========

The class rows of the five indexed fields (IPv4 address: a DIR-16 entry, then a few
boundaries; IPv6: a trie walk; ports and meta: one array read each; a field no rule
distinguishes costs nothing: its one row is in the cmap header); then, per rule group,
the AND of the five rows' aggregate words points at the 64-rule words where all five
agree, and the AND of those words gives candidate rules in rule order. The walk merges the
groups' cursors in rule order. The first candidate whose residual program passes decides
-- or, for ``count`` and ``skipto``, the walk goes on after it or at the skipto target
(always forward, so it ends). ``check-state`` / ``keep-state`` rules are probe points: the
first one the walk reaches or passes looks the state table up, once. When no field
distinguishes packets at all (e.g. only table rules), the candidates are one precomputed
list. Cost grows with the number of candidates a packet has, not with the number of rules.
How the classes and groups are built: :mod:`.compiler`.

Reference counting: the kernels pass the ``FW`` tuple itself, and the entry points
(``fw_batch``, ``fw_classify``) are compiled without reference counting (``_nrt=False``):
with it, every member read of the tuple (or array passed to an inlined helper) would cost
an atomic increment and decrement, ~20 arrays per packet (650 ns per packet when measured).
All helpers are ``inline="always"``, so they compile into the entry points without it.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

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
    TK_DST_HI,
    TK_DST_LO,
    TK_FAMILY,
    TK_LEN,
    TK_SRC_HI,
    TK_SRC_LO,
    table_key_rows,
)
from vecroute.firewall.layout import (
    A_ALLOW,
    A_CHECK,
    A_COUNT,
    A_REJECT,
    A_RESET,
    A_SKIPTO,
    C4_DST,
    C4_SRC,
    CM_CONST,
    CM_DST6,
    CM_LIST,
    CM_LIST_N,
    CM_SRC6,
    DIR_IN,
    DPORT_OFF,
    DROP_RULE,
    DROP_STATE_FULL,
    F_DPORT,
    F_DST,
    F_META,
    F_SPORT,
    F_SRC,
    FW,
    G_AOFF,
    G_N,
    G_NA,
    G_ROFF,
    G_WOFF,
    META_OFF,
    NO_PORT,
    OP_ADDR_TABLE,
    OP_ESTABLISHED,
    OP_FRAG,
    OP_ICMP4TYPES,
    OP_ICMP6TYPES,
    OP_IFACE,
    OP_IFACE_TABLE,
    OP_PORT_TABLE,
    OP_SETUP,
    OP_TCPFLAGS,
    OP_TTL,
    P_A,
    P_B,
    P_C,
    P_NEG,
    P_OP,
    RF_CHECK,
    RF_KEEP,
    RI_ACT,
    RI_ARG,
    RI_FLAGS,
    RI_NUM,
    RI_PLEN,
    RI_POFF,
    SPORT_OFF,
    V_DROP,
    V_PASS,
    V_REJECT,
    V_RESET,
)
from vecroute.firewall.states import (
    FC_COUNT,
    FC_HITS,
    FC_SWEEP,
    ST_RULE,
    state_find,
    state_insert,
    state_key,
    state_update,
    sweep_states,
)
from vecroute.firewall.tables import (
    TI_LPM4,
    TI_LPM6,
    lpm4_get,
    lpm6_get,
    table_addr_lookup,
    table_iface_lookup,
    table_number_lookup,
)

_U1 = np.uint64(1)
_TH_SYN = 0x02
_TH_RST = 0x04
_TH_ACK = 0x10

# _visit's outcome (its first return value)
GO_ON = 0  # the walk goes on: after r, or at the skipto target
DECIDED = 1  # the rule decides
STATE_FULL = 2  # keep-state found max_states states: drop, DROP_STATE_FULL


@intrinsic
def cttz(typingctx, x):
    """Count trailing zeros of a non-zero uint64 (llvm.cttz: tzcnt/bsf)."""
    sig = types.uint64(types.uint64)

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(64), [ir.IntType(64), ir.IntType(1)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.cttz.i64")
        return builder.call(fn, [args[0], ir.Constant(ir.IntType(1), 1)])

    return sig, codegen


# -- class rows -------------------------------------------------------------------------------


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
def _class_rows(fw, keys, i, direction):
    """The five class rows of packet i (src, dst, sport, dport, meta). A field no rule
    distinguishes (all its classes have the same bits) costs no lookup: its row is in the
    cmap header."""
    cmap = fw.cmap
    fam = keys[i, K_FAMILY]
    rs = np.int64(cmap[CM_CONST + F_SRC])
    rd = np.int64(cmap[CM_CONST + F_DST])
    if fam == 6:
        if rs < 0:
            rs = lpm6_get(
                fw.cl6_roots,
                fw.cl6_groups,
                cmap[CM_SRC6],
                np.uint64(keys[i, K_SRC_HI]),
                np.uint64(keys[i, K_SRC_LO]),
            )
        if rd < 0:
            rd = lpm6_get(
                fw.cl6_roots,
                fw.cl6_groups,
                cmap[CM_DST6],
                np.uint64(keys[i, K_DST_HI]),
                np.uint64(keys[i, K_DST_LO]),
            )
        fi = 257
    else:
        if rs < 0:
            rs = np.int64(_c4_lookup(fw.c4, C4_SRC, keys[i, K_SRC_LO] & 0xFFFFFFFF))
        if rd < 0:
            rd = np.int64(_c4_lookup(fw.c4, C4_DST, keys[i, K_DST_LO] & 0xFFFFFFFF))
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


# -- candidates -------------------------------------------------------------------------------


@njit(cache=True, inline="always")
def _group_next(bm, ag, rows, woff, aoff, na, lpos, ng):
    """Within one group: the first local rule index >= lpos whose bit is set in all five
    class rows, else ``ng``."""
    if lpos >= ng:
        return ng
    rs, rd, rsp, rdp, rm = rows
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
def _advance(fw, k, rows, lpos, dflt):
    """Group k's first candidate with local index >= lpos: (local index, rule index), the
    rule index being ``dflt`` when there is none."""
    grp = fw.grp
    n = grp[k, G_N]
    if lpos >= n:
        return n, dflt
    lo = _group_next(fw.bm, fw.ag, rows, grp[k, G_WOFF], grp[k, G_AOFF], grp[k, G_NA], lpos, n)
    return lo, (fw.glist[grp[k, G_ROFF] + lo] if lo < n else dflt)


# -- one candidate ----------------------------------------------------------------------------


@njit(cache=True, inline="always")
def _verify(fw, r, keys, i, direction):
    """Run rule r's residual program. Returns (matched, tablearg)."""
    rinfo = fw.rinfo
    prog = fw.prog
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
                    fw.t4_roots,
                    fw.t4_groups,
                    fw.t6_roots,
                    fw.t6_groups,
                    fw.t_idx,
                    b,
                    fam,
                    keys[i, K_SRC_HI],
                    keys[i, K_SRC_LO],
                )
            else:
                v = table_addr_lookup(
                    fw.t4_roots,
                    fw.t4_groups,
                    fw.t6_roots,
                    fw.t6_groups,
                    fw.t_idx,
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
            v = table_number_lookup(fw.nt, fw.t_idx, b, k)
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
                v = table_iface_lookup(fw.if_tab, fw.t_idx, b, ifx)
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
def _reject_aux(codes, family):
    """A reject rule's ICMP error as ``type << 8 | code``: destination unreachable (type 3
    for IPv4, ICMPv6 type 1) with the rule's code for the packet's family."""
    if family == 6:
        return np.int64((1 << 8) | ((codes >> 8) & 255))
    return np.int64((3 << 8) | (codes & 255))


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
        x = _reject_aux(rinfo[r, RI_ARG], keys[i, K_FAMILY])
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


@njit(cache=True, inline="always")
def _visit(fw, keys, i, direction, now, r, pos, pc, probed, srow, dflt, length):
    """One step of the walk, the part common to both candidate sources: the state probe
    (once, at the first probe point the walk reaches or passes, ``pos`` being where the walk
    went on last), then candidate r (``dflt``: the default rule): its residual program,
    keep-state, counters and action. Returns (outcome, value, pc, probed, srow): GO_ON with
    the skipto target (-1: on after r), DECIDED or STATE_FULL with the rule. ``dflt`` and
    ``length`` (``keys[i, K_LEN]``) come from the caller, read once per packet: reading
    them here, once per candidate, cost ~4% on the no-match rule sets."""
    rinfo = fw.rinfo
    cnt = fw.cnt
    st = fw.st
    ctl = fw.ctl
    nxt = -1  # a skipto target; -1: go on after r
    if not probed:
        probes = fw.probes
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
            ok, targ = _verify(fw, r, keys, i, direction)
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


# -- the walks --------------------------------------------------------------------------------


@njit(cache=True, inline="always")
def _classify(fw, rows, keys, i, direction, now):
    """The bit-vector walk of packet i, whose five class rows are ``rows``."""
    gpos = fw.gpos
    dflt = fw.rinfo.shape[0] - 1
    length = keys[i, K_LEN]
    # one cursor per rule group (local index, rule index); the next candidate is the smallest
    l0, g0 = _advance(fw, 0, rows, 0, dflt)
    l1, g1 = _advance(fw, 1, rows, 0, dflt)
    l2, g2 = _advance(fw, 2, rows, 0, dflt)
    l3, g3 = _advance(fw, 3, rows, 0, dflt)
    pc = 0
    probed = fw.probes[0] > dflt  # no probe points: never look states up
    srow = -1
    pos = 0
    while True:
        r = min(min(g0, g1), min(g2, g3))
        outcome, nxt, pc, probed, srow = _visit(
            fw, keys, i, direction, now, r, pos, pc, probed, srow, dflt, length
        )
        if outcome != GO_ON:
            return _result(fw.rinfo, keys, i, outcome, nxt)
        if nxt < 0:  # on after r: only r's group moves
            pos = r + 1
            if g0 == r:
                l0, g0 = _advance(fw, 0, rows, l0 + 1, dflt)
            elif g1 == r:
                l1, g1 = _advance(fw, 1, rows, l1 + 1, dflt)
            elif g2 == r:
                l2, g2 = _advance(fw, 2, rows, l2 + 1, dflt)
            else:
                l3, g3 = _advance(fw, 3, rows, l3 + 1, dflt)
        else:  # skipto: every group behind the target moves
            pos = nxt
            if g0 < pos:
                l0, g0 = _advance(fw, 0, rows, gpos[0, pos], dflt)
            if g1 < pos:
                l1, g1 = _advance(fw, 1, rows, gpos[1, pos], dflt)
            if g2 < pos:
                l2, g2 = _advance(fw, 2, rows, gpos[2, pos], dflt)
            if g3 < pos:
                l3, g3 = _advance(fw, 3, rows, gpos[3, pos], dflt)


@njit(cache=True, inline="always")
def _classify_list(fw, keys, i, direction, now):
    """The walk of packet i when no field distinguishes packets: the candidates are the
    same precomputed list for every packet."""
    glist = fw.glist
    dflt = fw.rinfo.shape[0] - 1
    length = keys[i, K_LEN]
    lst = fw.cmap[CM_LIST]
    nl = fw.cmap[CM_LIST_N]
    l0 = 0
    r = np.int64(glist[lst]) if nl > 0 else dflt
    pc = 0
    probed = fw.probes[0] > dflt  # no probe points: never look states up
    srow = -1
    pos = 0
    while True:
        outcome, nxt, pc, probed, srow = _visit(
            fw, keys, i, direction, now, r, pos, pc, probed, srow, dflt, length
        )
        if outcome != GO_ON:
            return _result(fw.rinfo, keys, i, outcome, nxt)
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


# -- rule sets of address tables only ---------------------------------------------------------


@njit(cache=True, inline="always")
def _tables_match(fw, r, tk, i):
    """Rule r's program when it holds only address-table tests: all of them pass."""
    prog = fw.prog
    j = fw.rinfo[r, RI_POFF]
    end = j + fw.rinfo[r, RI_PLEN]
    fam = tk[TK_FAMILY, i]
    while j < end:
        src = prog[j, P_A] == 0
        v = table_addr_lookup(fw.t4_roots, fw.t4_groups, fw.t6_roots, fw.t6_groups, fw.t_idx,
                              prog[j, P_B], fam, tk[TK_SRC_HI if src else TK_DST_HI, i],
                              tk[TK_SRC_LO if src else TK_DST_LO, i])
        m = v >= 0 and (prog[j, P_C] < 0 or v == prog[j, P_C])
        if m == (prog[j, P_NEG] != 0):
            return False
        j += 1
    return True


@njit(cache=True, inline="always")
def _table_test_vector(fw, j, r, tk, n, rules):
    """Rule r, whose program is the one table test of row j, over the packets no earlier
    rule decided (``rules[i] < 0``): the row read and the table's tries chosen once, so a
    packet costs its walk. Returns how many it decided."""
    prog = fw.prog
    fams = tk[TK_FAMILY]
    his = tk[TK_SRC_HI] if prog[j, P_A] == 0 else tk[TK_DST_HI]
    los = tk[TK_SRC_LO] if prog[j, P_A] == 0 else tk[TK_DST_LO]
    want = prog[j, P_C]
    neg = prog[j, P_NEG] != 0
    t4 = fw.t_idx[prog[j, P_B], TI_LPM4]
    t6 = fw.t_idx[prog[j, P_B], TI_LPM6]
    r4, g4, r6, g6 = fw.t4_roots, fw.t4_groups, fw.t6_roots, fw.t6_groups
    hits = 0
    for i in range(n):
        if rules[i] >= 0:
            continue
        v = np.int64(-1)
        if fams[i] == 4:
            if t4 >= 0:
                v = lpm4_get(r4, g4, t4, np.uint32(los[i] & 0xFFFFFFFF))
        elif t6 >= 0:
            v = lpm6_get(r6, g6, t6, np.uint64(his[i]), np.uint64(los[i]))
        m = v >= 0 and (want < 0 or v == want)
        if m != neg:
            rules[i] = r
            hits += 1
    return hits


@njit(cache=True, inline="always")
def fw_table_verdict(fw, r, fam):
    """(verdict, aux) of rule r of a table-only rule set (allow, deny or reject) for a
    packet of family ``fam``, as ``fw_batch`` gives them."""
    act = fw.rinfo[r, RI_ACT]
    if act == A_ALLOW:
        return V_PASS, np.int64(0)
    if act == A_REJECT:
        return V_REJECT, _reject_aux(fw.rinfo[r, RI_ARG], fam)
    return V_DROP, np.int64(DROP_RULE)


@njit(cache=True, nogil=True, _nrt=False)
def fw_batch_tables(fw, tk, n, now, verdicts, rules, aux):
    """``fw_batch`` for a rule set that ``CompiledFirewall.tables_only()`` accepts, with no
    state left to sweep: the same verdicts, rules, aux and counts, from the table keys
    ``tk`` (:mod:`.keys` ``TK_*`` rows: family, addresses, length; the graph fills just
    those, compact, so they stay in the cache beside the packets). Rule by rule over the
    vector rather than packet by packet: each rule's test is read once, and a blocklist's
    packet costs its table walk. The default rule is counted once for all the packets it
    decided. Returns how many packets did not pass."""
    dflt = np.int64(fw.rinfo.shape[0] - 1)
    for i in range(n):
        rules[i] = -1
    lst = fw.cmap[CM_LIST]
    left = n
    for q in range(fw.cmap[CM_LIST_N]):
        if left == 0:
            break
        r = np.int64(fw.glist[lst + q])
        plen = fw.rinfo[r, RI_PLEN]
        if plen == 1:
            left -= _table_test_vector(fw, fw.rinfo[r, RI_POFF], r, tk, n, rules)
            continue
        for i in range(n):  # no test (any to any) or several (all must pass)
            if rules[i] < 0 and (plen == 0 or _tables_match(fw, r, tk, i)):
                rules[i] = r
                left -= 1
    dv4, dx4 = fw_table_verdict(fw, dflt, 4)
    dv6, dx6 = fw_table_verdict(fw, dflt, 6)
    nd = np.int64(0)
    nbytes = np.int64(0)
    stopped = 0
    fams = tk[TK_FAMILY]
    lens = tk[TK_LEN]
    if left == n and dv4 == dv6 and dx4 == dx6:  # the default rule decided them all
        for i in range(n):  # (a branch-free loop: 0.5 against 2.3 ns a packet)
            rules[i] = dflt
            verdicts[i] = dv4
            aux[i] = dx4
            nbytes += lens[i]
        if n > 0:
            fw_count_many(fw, dflt, n, nbytes, now)
        return n if dv4 != V_PASS else 0
    for i in range(n):
        r = np.int64(rules[i])
        six = fams[i] == 6
        if r < 0:
            rules[i] = dflt
            v, x = (dv6, dx6) if six else (dv4, dx4)
            nd += 1
            nbytes += lens[i]
        else:
            v, x = fw_table_verdict(fw, r, 6 if six else 4)
            _count(fw.cnt, r, lens[i], now)
        verdicts[i] = v
        aux[i] = x
        if v != V_PASS:
            stopped += 1
    if nd > 0:
        fw_count_many(fw, dflt, nd, nbytes, now)
    return stopped


# -- entry points -----------------------------------------------------------------------------


@njit(cache=True, nogil=True, _nrt=False)
def fw_batch(fw, keys, n, direction, now, verdicts, rules, aux):
    """Classify ``keys[:n]``; see the module doc for the outputs."""
    if fw.ctl[FC_COUNT] > 0:
        sweep_states(fw.st, fw.ctl, now, fw.ctl[FC_SWEEP])
    if fw.cmap[CM_LIST] >= 0:  # no field distinguishes packets: one candidate list
        for i in range(n):
            v, r, a = _classify_list(fw, keys, i, direction, now)
            verdicts[i] = v
            rules[i] = r
            aux[i] = a
        return
    for i in range(n):
        rows = _class_rows(fw, keys, i, direction)
        v, r, a = _classify(fw, rows, keys, i, direction, now)
        verdicts[i] = v
        rules[i] = r
        aux[i] = a


@njit(cache=True, nogil=True, _nrt=False)
def fw_classify(fw, keys, i, direction, now):
    """Classify one packet ``keys[i]``: (verdict, rule index, aux). ``fw_batch`` is the
    fast path (the checks and the state sweep once per vector)."""
    rows = _class_rows(fw, keys, i, direction)
    return _classify(fw, rows, keys, i, direction, now)


@njit(cache=True, inline="always")
def fw_count(fw, rule, length, now) -> None:
    """Count one packet of ``length`` bytes for rule index ``rule`` (as a classification
    deciding by it does): for a pass whose outcome is known without classifying."""
    _count(fw.cnt, rule, length, now)


@njit(cache=True, inline="always")
def fw_count_many(fw, rule, packets, nbytes, now) -> None:
    """Count ``packets`` packets of ``nbytes`` bytes in all for rule index ``rule`` at once
    (a vector's packets that one rule decided, e.g. the default rule)."""
    cnt = fw.cnt
    cnt[rule, 0] += packets
    cnt[rule, 1] += nbytes
    cnt[rule, 2] = now


def classify_keys(
    args: tuple, keys: np.ndarray, direction: int = DIR_IN, now: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Classify a key matrix through ``fw_batch`` (tests, tools): (verdicts, rules, aux).
    ``args``: the FW arrays, flat (``Firewall.args()``)."""
    n = keys.shape[0]
    v = np.zeros(n, np.int32)
    r = np.zeros(n, np.int32)
    a = np.zeros(n, np.int32)
    fw_batch(FW(*args), np.ascontiguousarray(keys, np.int64), n, direction, np.int64(now), v, r, a)
    return v, r, a


def classify_keys_tables(
    args: tuple, keys: np.ndarray, now: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``classify_keys`` through ``fw_batch_tables`` (tests: the table-only classification
    against the walk and the reference); the rule set must be ``tables_only()``."""
    n = keys.shape[0]
    v = np.zeros(n, np.int32)
    r = np.zeros(n, np.int32)
    a = np.zeros(n, np.int32)
    fw_batch_tables(FW(*args), table_key_rows(keys), n, np.int64(now), v, r, a)
    return v, r, a
