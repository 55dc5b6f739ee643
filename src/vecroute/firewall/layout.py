"""The compiled firewall's array layout: the ``FW`` tuple, the codes in its arrays.

Shared by the compiler (:mod:`.compiler`, :mod:`.incremental`), which writes these arrays,
and the data path (:mod:`.classify`), which reads them. Nothing here runs.

The data path sees one flat set of numpy arrays, the ``FW`` namedtuple (the same pattern
as the graph's ``DP``: the arrays cross the Python/numba boundary flat, the tuple is built
inside compiled code). Its fields are defined once, by role: :data:`CLASSIFIER_FIELDS`
(:meth:`CompiledFirewall.arrays <vecroute.firewall.compiler.CompiledFirewall.arrays>`),
:data:`TABLE_FIELDS` (:meth:`FwTables.arrays <vecroute.firewall.tables.FwTables.arrays>`)
and :data:`STATE_FIELDS` (the worker's state table and its control row). Read-only for the
data path except ``cnt``, ``st`` and ``ctl``:

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
"""

from __future__ import annotations

from collections import namedtuple

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


# -- the FW tuple ---------------------------------------------------------------------------------
CLASSIFIER_FIELDS = (
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
)
TABLE_FIELDS = ("t4_roots", "t4_groups", "t6_roots", "t6_groups", "t_idx", "nt", "if_tab")
STATE_FIELDS = ("st", "ctl")
FW = namedtuple("FW", CLASSIFIER_FIELDS + TABLE_FIELDS + STATE_FIELDS)
