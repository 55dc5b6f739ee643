"""The forwarding state seen by the data path: flat arrays only.

The control plane builds a ``DataPlaneState`` aside and swaps the reference between
batches, so a worker never sees a half-applied update. Inside compiled code the arrays
travel as the ``DP`` namedtuple; across the Python/numba boundary they travel as a flat
argument list (numba dispatches flat arrays much faster than a tuple of them).
"""

from __future__ import annotations

import os
from collections import namedtuple
from dataclasses import dataclass, field, fields

import numpy as np

from vecroute.graph.counters import N_COUNTERS
from vecroute.graph.trace import REC_COLS, TR_COLS, TRACE_RECORDS, TRACE_SNAP
from vecroute.packet.node_ids import N_NODES
from vecroute.srv6.layout import CACHE_COLS, LIST_COLS, POL_COLS, SID_COLS, SR_HDR_MAX

# interface statistics (if_stats int64 [n_if, IFS_COLS])
IFS_RX_PKTS = 0
IFS_RX_BYTES = 1
IFS_TX_PKTS = 2
IFS_TX_BYTES = 3
IFS_DROPS = 4
IFS_PUNTS = 5
IFS_COLS = 6

# node statistics (node_stats int64 [N_NODES, NS_COLS])
NS_CALLS = 0
NS_PACKETS = 1
NS_CLOCKS = 2
NS_COLS = 3

# a token bucket (int64 [TB_COLS]; the punt policer has rows of them)
TB_CREDIT = 0  # in nano-tokens (1 token = 1e9)
TB_LAST = 1  # last refill time (ns)
TB_RATE = 2  # tokens per second
TB_BURST = 3  # bucket size in tokens
TB_IP_ID = 4  # running ip4 id for generated packets (icmp_tb only)
TB_COLS = 5
# icmp_tb int64 [ICMP_TB_LEN]: the buckets of the answers the router generates: ICMP
# errors and redirects at 0.., the TCP RSTs of tcp-reset at TB_RST + TB_CREDIT..TB_BURST
TB_RST = TB_COLS
ICMP_TB_LEN = TB_RST + TB_BURST + 1

GLEAN_SLOTS = 4096

# data-path options (opts int64 [OPT_COLS])
OPT_LIVE = 0  # 1: a live control plane runs: punt unresolved-neighbour packets to its queue
              # and punt a copy of ARP requests it answers (so it learns the requester)
OPT_FIB_GEN = 1  # generation of the FIB: SR policies' cached first-hop adjacencies compare it
OPT_FW = 2  # FW_RUN_IN | FW_RUN_OUT: a firewall is attached (the graph runs fw-in / fw-out)
OPT_NO_FUSED = 3  # 1: every packet walks the nodes (graph/fast_path.py off: A/B, tests)
OPT_COLS = 4
FW_RUN_IN = 1
FW_RUN_OUT = 2
FW_TRIVIAL_IN = 4  # no rule but the default can match at input: apply it, skip classifying
FW_TRIVIAL_OUT = 8  # the same at output
FW_OUT_REPEATS = 16  # the output pass must end as the input pass did (out_repeats_in)
FW_TABLES = 32  # every candidate rule tests only address tables (tables_only): no keys needed


# reassembly of fragments addressed to the router (graph/ip_reass.py): a fixed number of
# contexts, each with a fixed data buffer, so the memory is bounded like Linux's
# ipfrag_high_thresh (4 MiB): 1024 x (2048 + 256) bytes of buffers + 64 ranges = ~2.6 MiB
REASS_CONTEXTS = 1024  # a power of two (the hash masks with it)
REASS_DATA = 2048  # data bytes per context (a datagram is at most REASS_MAX_LEN in all)
REASS_HDR = 256  # the first fragment's header bytes (ip6: unfragmentable part + frag header)
REASS_MAX_FRAGS = 64  # distinct fragments held per datagram
# reass_ctl int64 [REASS_CONTEXTS, RC_COLS]
RC_STATE = 0  # RS_FREE / RS_LIVE / RS_DEAD
RC_K0 = 1  # key: source (ip4: the address; ip6: high 64 bits)
RC_K1 = 2  # ip6 source low 64 bits
RC_K2 = 3  # destination (ip4 address / ip6 high 64 bits)
RC_K3 = 4  # ip6 destination low 64 bits
RC_K4 = 5  # identification | protocol << 32 (ip4) | family << 40
RC_K5 = 6  # FIB table index
RC_T0 = 7  # creation time (ns): the timeout runs from the first fragment seen
RC_TOTAL = 8  # data length from the last fragment (-1 until it arrives)
RC_RECV = 9  # data bytes held (held ranges never overlap)
RC_NFRAG = 10  # ranges held in reass_frag
RC_MAXEND = 11  # highest data end held
RC_HDRLEN = 12  # header bytes kept from the first fragment (0: not arrived)
RC_FIRSTLEN = 13  # data bytes of the first fragment (with the header: the ICMP quote)
RC_NHOFF = 14  # ip6: offset from the IPv6 header of the next-header field to patch
RC_RX = 15  # rx interface of the first fragment (its Time Exceeded names it)
RC_FLAGS = 16  # metadata flags of the first fragment
RC_PREV = 17  # creation-order list of the family (oldest first): the timer reads its head
RC_NEXT = 18
RC_COLS = 19
RS_FREE = 0
RS_LIVE = 1
RS_DEAD = 2  # discarded (overlap, lying length, too big): later fragments die until timeout
# reass_glob int64 [RG_COLS]
RG_SEED = 0  # random hash seed (a flood cannot aim at one probe window)
RG_HEAD4 = 1  # oldest ip4 context (-1: none); RG_HEAD4 + 1: newest
RG_HEAD6 = 3  # oldest ip6 context; RG_HEAD6 + 1: newest
RG_USED = 5  # contexts in use
RG_COLS = 6

DP = namedtuple(
    "DP",
    [
        "ifc", "if_mac", "if_ip6",
        "fib4_roots", "fib4_groups", "fib6_roots", "fib6_groups",
        "fib6_host_keys", "fib6_host_vals",
        "lb", "lb_buckets", "adj", "adj_rw", "adj_last_req", "glean",
        "icmp_tb", "counters", "if_stats", "node_stats", "opts",
        "sr_sid", "sr_pol", "sr_bucket", "sr_list", "sr_hdr", "sr_cache",
        "reass_ctl", "reass_frag", "reass_hdr", "reass_data", "reass_glob",
        "trace_ctl", "trace_rec", "trace_snap", "trace_time",
    ],
)


# Every field of the state has one role, declared with it below; swapping, per-worker
# copies and summing counters follow from the roles instead of hand-kept lists:
TABLES = "tables"  # built by the control plane, read-only for workers, shared by all of them
SHADOW = "shadow"  # written by a worker but shaped by the tables: each worker its own copy,
                   # made afresh with every new table
RUNTIME = "runtime"  # owned by one worker and carried across table swaps
COUNTER_FIELDS = ("counters", "if_stats", "node_stats")  # RUNTIME, summed over workers


def _tables():
    return field(metadata={"role": TABLES})


def _runtime(factory):
    return field(default_factory=factory, metadata={"role": RUNTIME})


def _tables_default(factory):
    return field(default_factory=factory, metadata={"role": TABLES})


def _shadow_default(factory):
    return field(default_factory=factory, metadata={"role": SHADOW})


@dataclass
class DataPlaneState:
    """Everything the compiled graph reads (tables) or writes (counters, rate limiters)."""

    ifc: np.ndarray = _tables()
    if_mac: np.ndarray = _tables()
    if_ip6: np.ndarray = _tables()
    fib4_roots: np.ndarray = _tables()
    fib4_groups: np.ndarray = _tables()
    fib6_roots: np.ndarray = _tables()
    fib6_groups: np.ndarray = _tables()
    lb: np.ndarray = _tables()
    lb_buckets: np.ndarray = _tables()
    adj: np.ndarray = _tables()
    adj_rw: np.ndarray = _tables()
    adj_last_req: np.ndarray = field(metadata={"role": SHADOW})  # per adjacency: last request
    glean: np.ndarray = _runtime(lambda: np.zeros((GLEAN_SLOTS, 4), dtype=np.int64))
    icmp_tb: np.ndarray = _runtime(lambda: icmp_bucket(1000, 50))
    counters: np.ndarray = _runtime(lambda: np.zeros(N_COUNTERS, dtype=np.int64))
    if_stats: np.ndarray | None = field(default=None, metadata={"role": RUNTIME})
    node_stats: np.ndarray = _runtime(lambda: np.zeros((N_NODES, NS_COLS), dtype=np.int64))
    opts: np.ndarray = _runtime(lambda: np.zeros(OPT_COLS, dtype=np.int64))
    sr_sid: np.ndarray = _tables_default(lambda: np.zeros((1, SID_COLS), dtype=np.int32))
    sr_pol: np.ndarray = _tables_default(lambda: np.zeros((1, POL_COLS), dtype=np.int32))
    sr_bucket: np.ndarray = _tables_default(lambda: np.zeros(1, dtype=np.int32))
    sr_list: np.ndarray = _tables_default(lambda: np.zeros((1, LIST_COLS), dtype=np.int32))
    sr_hdr: np.ndarray = _tables_default(lambda: np.zeros((1, SR_HDR_MAX), dtype=np.uint8))
    # the /128 rules of fib6 in an exact-match table (fib/host6.py; empty: one free slot)
    fib6_host_keys: np.ndarray = _tables_default(lambda: np.zeros((2, 3), dtype=np.uint64))
    fib6_host_vals: np.ndarray = _tables_default(lambda: np.full(1, -1, dtype=np.int32))
    # per segment list: the cached first-hop adjacency and the FIB generation it is for
    sr_cache: np.ndarray = _shadow_default(
        lambda: np.full((1, CACHE_COLS), -1, dtype=np.int64))
    # reassembly contexts (zeros: all free; np.zeros maps pages lazily, so a state built
    # only to be swapped in, whose contexts are then carried over, costs no memory)
    reass_ctl: np.ndarray = _runtime(
        lambda: np.zeros((REASS_CONTEXTS, RC_COLS), dtype=np.int64))
    reass_frag: np.ndarray = _runtime(
        lambda: np.zeros((REASS_CONTEXTS, REASS_MAX_FRAGS), dtype=np.int32))
    reass_hdr: np.ndarray = _runtime(
        lambda: np.zeros(REASS_CONTEXTS * REASS_HDR, dtype=np.uint8))
    reass_data: np.ndarray = _runtime(
        lambda: np.zeros(REASS_CONTEXTS * REASS_DATA, dtype=np.uint8))
    reass_glob: np.ndarray = _runtime(lambda: reass_globals())
    # packet trace (graph/trace.py): armed by the control plane, filled by the dispatcher
    trace_ctl: np.ndarray = _runtime(lambda: np.zeros(TR_COLS, np.int64))
    trace_rec: np.ndarray = _runtime(lambda: np.zeros((TRACE_RECORDS, REC_COLS), np.int32))
    trace_snap: np.ndarray = _runtime(lambda: np.zeros((TRACE_RECORDS, TRACE_SNAP), np.uint8))
    trace_time: np.ndarray = _runtime(lambda: np.zeros(TRACE_RECORDS, np.int64))

    def __post_init__(self) -> None:
        if self.if_stats is None:
            self.if_stats = np.zeros((self.ifc.shape[0], IFS_COLS), dtype=np.int64)

    def args(self) -> tuple:
        """The arrays in ``DP`` field order, for the flat call into the dispatcher."""
        return tuple(getattr(self, f) for f in DP._fields)

    def clear_counters(self) -> None:
        for f in COUNTER_FIELDS:
            getattr(self, f)[...] = 0

    def with_runtime(self, runtime: DataPlaneState | None) -> DataPlaneState:
        """These tables for one worker: the tables shared, the shadows copied, the runtime
        carried over from ``runtime`` (the worker's state so far) or, when None, copied
        from this state. The FIB generation (an option) always comes from the tables."""
        kw = {}
        for name, role in ROLES.items():
            mine = getattr(self, name)
            if role == TABLES:
                kw[name] = mine
            elif role == SHADOW or runtime is None:
                kw[name] = mine.copy()
            else:
                theirs = getattr(runtime, name)
                kw[name] = theirs if theirs.shape == mine.shape else mine.copy()
        new = DataPlaneState(**kw)
        new.opts[OPT_FIB_GEN] = self.opts[OPT_FIB_GEN]
        return new

    def frozen(self) -> DataPlaneState:
        """A copy of the tables that nobody will ever change: what workers get. The
        control plane keeps changing its own arrays in place (a learnt neighbour's MAC, a
        trie entry) and growing them; a worker reading those while they change could
        follow an index into a row its older, smaller arrays lack."""
        kw = {name: getattr(self, name) for name in ROLES}
        for name, role in ROLES.items():
            if role != RUNTIME:
                kw[name] = kw[name].copy()
        return DataPlaneState(**kw)

    @staticmethod
    def summed(states: list[DataPlaneState]) -> DataPlaneState:
        """The first state's tables with every state's counters added up (``ctl show``
        over several workers)."""
        first = states[0]
        # the others are only read: share them (a copy of the runtime would copy the
        # reassembly buffers and the trace records, megabytes, for every `show`)
        kw = {name: getattr(first, name) for name in ROLES}
        kw.update({f: getattr(first, f).copy() for f in COUNTER_FIELDS})
        total = DataPlaneState(**kw)
        for f in COUNTER_FIELDS:
            acc = getattr(total, f)
            for st in states[1:]:
                other = getattr(st, f)
                if other.shape == acc.shape:
                    acc += other
        return total


ROLES = {f.name: f.metadata["role"] for f in fields(DataPlaneState)}


def reass_globals() -> np.ndarray:
    """Empty creation-order lists and a random hash seed for the reassembly contexts."""
    g = np.full(RG_COLS, -1, dtype=np.int64)
    g[RG_SEED] = np.frombuffer(os.urandom(8), dtype=np.int64)[0]
    g[RG_USED] = 0
    return g


def icmp_bucket(
    rate_per_s: int, burst: int, rst_rate_per_s: int = 1000, rst_burst: int = 50
) -> np.ndarray:
    """Full token buckets for ICMP errors and for TCP RSTs (Linux defaults:
    icmp_msgs_per_sec=1000, icmp_msgs_burst=50)."""
    tb = np.zeros(ICMP_TB_LEN, dtype=np.int64)
    for base, rate, size in ((0, rate_per_s, burst), (TB_RST, rst_rate_per_s, rst_burst)):
        tb[base + TB_RATE] = rate
        tb[base + TB_BURST] = size
        tb[base + TB_CREDIT] = size * 1_000_000_000
        tb[base + TB_LAST] = -1
    return tb
