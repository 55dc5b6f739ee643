"""Dynamic states (``keep-state`` / ``check-state``): an open-addressing hash table in numpy.

One table per worker (DragonFly's per-CPU states: no locks on the data path). A state is a
bidirectional 5-tuple: the key is canonical (the smaller (address, port) endpoint first, as
128-bit addresses, IPv4 in the low word) so both directions of a flow find the same row.

``st int64[cap, ST_COLS]`` (``cap`` a power of two, linear probing, backward-shift
deletion, ``ST_META == 0`` marks a free row)::

    ST_AHI ST_ALO ST_BHI ST_BLO  endpoint A and B addresses (IPv4: hi = 0, lo = address)
    ST_PORTS                     port A << 16 | port B (0 for protocols without ports)
    ST_META                      USED | family << 16 | protocol
    ST_EXPIRE                    expiry time (ns, the batch clock)
    ST_RULE                      index of the rule that created the state (its action applies)
    ST_FLAGS                     TCP FIN/SYN/RST seen forward (bits 0-7) and reverse (8-15);
                                 bit 16: the creating packet went A -> B; 17: a packet went
                                 the other way; 18: TCP handshake completed; 19: the last
                                 lifetime was shortened (adaptive)
    ST_PKTS ST_BYTES             traffic that matched the state

``ctl int64[FC_COLS]`` holds the counts, the sweep cursor, the lifetimes (ns) and counters.

TCP lifetimes: SYN seen both ways, then a segment with ACK and no SYN from the side that
created the state (the handshake completed, pf's ESTABLISHED) -> ``established`` (300 s);
FIN seen both ways -> ``fin`` (1 s); any RST -> ``rst`` (1 s); otherwise (a SYN not yet
answered, or answered but not acknowledged, or no SYN at all) -> ``syn`` (20 s). ipfw
calls SYN-both-ways established already, which lets a flood that a live server answers
with SYN-ACKs hold states for 300 s. UDP -> ``udp`` (10 s), anything else -> ``other``
(30 s). Every packet that matches a state moves its expiry to now + lifetime.

A state is *embryonic* until it is answered: TCP until the handshake completed, other
protocols until a packet went the other way (Linux conntrack's "not assured"). A flood
from spoofed sources makes only embryonic states, and two things keep it from crowding
out real flows: above ``FC_ADAPT_START`` states an embryonic state's lifetime is scaled
by (end - states) / (end - start) (pf's adaptive timeouts, defaults 60% and 120% of
``max_states``; established states are not scaled), and a new state that finds
``max_states`` states looks at the next ``EVICT_SCAN`` states from the sweep cursor and
takes the row of the first expired one, else evicts the embryonic one that expires first
(Linux conntrack's early_drop). Only when those hold neither is the new flow refused
(``FC_FULL_DROPS``): answered flows are never evicted.

Reclaiming never pauses forwarding: a lookup that meets its own key expired deletes it on
the spot (lazy expiry), and every batch sweeps a bounded number of rows (``FC_SWEEP``,
default 64) from a rotating cursor. A new flow may also reuse an expired row on its probe
path. The table grows by doubling (between batches, :func:`grow_states`) so that its load
stays under 1/2; it never exceeds twice the next power of two above ``max_states``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

ST_AHI = 0
ST_ALO = 1
ST_BHI = 2
ST_BLO = 3
ST_PORTS = 4
ST_META = 5
ST_EXPIRE = 6
ST_RULE = 7
ST_FLAGS = 8
ST_PKTS = 9
ST_BYTES = 10
ST_COLS = 11

META_USED = 1 << 24
FLAG_CREATOR_AB = 1 << 16
FLAG_REPLY = 1 << 17  # a packet went against the creating packet's direction
FLAG_ACKED = 1 << 18  # TCP: SYN both ways, then the creator side's ACK without SYN
FLAG_SCALED = 1 << 19  # the last refresh gave an adaptively shortened lifetime

# ctl columns
FC_COUNT = 0  # occupied rows (live + expired not yet reclaimed)
FC_MAX = 1  # max_states
FC_CURSOR = 2  # sweep position
FC_LIFE_SYN = 3
FC_LIFE_EST = 4
FC_LIFE_FIN = 5
FC_LIFE_RST = 6
FC_LIFE_UDP = 7
FC_LIFE_OTHER = 8
FC_CREATED = 9  # states created
FC_EXPIRED = 10  # expired states reclaimed
FC_FULL_DROPS = 11  # new flows dropped: max_states live states
FC_HITS = 12  # packets that matched a state
FC_SWEEP = 13  # rows swept per batch
FC_LOOKUPS = 14  # state lookups
FC_CAP_DROPS = 15  # new flows dropped because the table waits for growth (never expected)
FC_ADAPT_START = 16  # above this many states embryonic lifetimes shrink ...
FC_ADAPT_END = 17  # ... linearly, to 0 at this many (always > max_states)
FC_EVICTED = 18  # embryonic states removed to make room for a new one (table full)
FC_EARLY_EXPIRED = 19  # expired states whose last lifetime was adaptively shortened
FC_SCRATCH = 20  # 20..31: scratch (unused)
FC_COLS = 32

FC_NAMES = {
    FC_COUNT: "states",
    FC_CREATED: "created",
    FC_EXPIRED: "expired",
    FC_FULL_DROPS: "full-drops",
    FC_EVICTED: "evicted",
    FC_EARLY_EXPIRED: "early-expired",
    FC_HITS: "hits",
    FC_LOOKUPS: "lookups",
    FC_CAP_DROPS: "capacity-drops",
}

LIFETIMES = ("syn", "established", "fin", "rst", "udp", "other")
DEFAULT_LIFETIMES = {"syn": 20, "established": 300, "fin": 1, "rst": 1, "udp": 10, "other": 30}
_LIFE_COL = {
    "syn": FC_LIFE_SYN,
    "established": FC_LIFE_EST,
    "fin": FC_LIFE_FIN,
    "rst": FC_LIFE_RST,
    "udp": FC_LIFE_UDP,
    "other": FC_LIFE_OTHER,
}

TH_FIN = 0x01
TH_SYN = 0x02
TH_RST = 0x04
TH_ACK = 0x10
_TRACK = TH_FIN | TH_SYN | TH_RST
_BOTH_SYN = TH_SYN | (TH_SYN << 8)
_BOTH_FIN = TH_FIN | (TH_FIN << 8)
_ANY_RST = TH_RST | (TH_RST << 8)

MIN_CAPACITY = 1024
SWEEP_DEFAULT = 64
EVICT_SCAN = 64  # states a new state that finds the table full looks at to make room ...
EVICT_ROWS = 1024  # ... in at most this many rows (a sparse table: a small max_states)


def adaptive_bounds(max_states: int, start: int | None = None, end: int | None = None):
    """(start, end) of the adaptive scaling: by default 60% and 120% of ``max_states``
    (pf's adaptive.start / adaptive.end); ``end`` is kept above ``max_states`` so that a
    lifetime never scales down to 0, ``start`` in 0 .. ``end`` - 1."""
    e = max(end if end is not None else max_states * 6 // 5, max_states + 1)
    s = start if start is not None else max_states * 3 // 5
    return max(0, min(s, e - 1)), e


def new_ctl(
    max_states: int,
    lifetimes: dict[str, float] | None = None,
    sweep: int = SWEEP_DEFAULT,
    adaptive_start: int | None = None,
    adaptive_end: int | None = None,
) -> np.ndarray:
    ctl = np.zeros(FC_COLS, np.int64)
    ctl[FC_MAX] = max_states
    ctl[FC_SWEEP] = sweep
    ctl[FC_ADAPT_START], ctl[FC_ADAPT_END] = adaptive_bounds(
        max_states, adaptive_start, adaptive_end
    )
    life = dict(DEFAULT_LIFETIMES)
    life.update(lifetimes or {})
    for k, col in _LIFE_COL.items():
        ctl[col] = int(round(float(life[k]) * 1e9))
    return ctl


def new_table(capacity: int = MIN_CAPACITY) -> np.ndarray:
    cap = MIN_CAPACITY
    while cap < capacity:
        cap *= 2
    return np.zeros((cap, ST_COLS), np.int64)


def capacity_for(max_states: int) -> int:
    """The largest table a ``max_states`` limit needs (load <= 1/2)."""
    cap = MIN_CAPACITY
    while cap < 2 * max_states:
        cap *= 2
    return cap


@njit(cache=True, inline="always")
def _mix(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True, inline="always")
def _home(ahi, alo, bhi, blo, ports, meta, mask):
    h = _mix(np.uint64(ahi) ^ np.uint64(0x9E3779B97F4A7C15))
    h = _mix(h ^ np.uint64(alo))
    h = _mix(h ^ np.uint64(bhi))
    h = _mix(h ^ np.uint64(blo))
    h = _mix(h ^ np.uint64(ports) ^ (np.uint64(meta) << np.uint64(32)))
    return np.int64(h & np.uint64(mask))


@njit(cache=True, inline="always")
def _row_home(st, j, mask):
    return _home(
        st[j, ST_AHI],
        st[j, ST_ALO],
        st[j, ST_BHI],
        st[j, ST_BLO],
        st[j, ST_PORTS],
        st[j, ST_META],
        mask,
    )


@njit(cache=True, inline="always")
def _lt(ahi, alo, ap, bhi, blo, bp):
    """(a, port a) < (b, port b), addresses compared as unsigned 128-bit numbers."""
    uah = np.uint64(ahi)
    ubh = np.uint64(bhi)
    if uah != ubh:
        return uah < ubh
    ual = np.uint64(alo)
    ubl = np.uint64(blo)
    if ual != ubl:
        return ual < ubl
    return ap < bp


@njit(cache=True, nogil=True)
def state_key(family, shi, slo, sport, dhi, dlo, dport, proto):
    """Canonical key of a packet: (ahi, alo, bhi, blo, ports, meta, packet goes A -> B)."""
    sp = sport if sport >= 0 else 0
    dp = dport if dport >= 0 else 0
    meta = META_USED | (family << 16) | (proto & 0xFFFF)
    if _lt(dhi, dlo, dp, shi, slo, sp):
        return dhi, dlo, shi, slo, (dp << 16) | sp, meta, False
    return shi, slo, dhi, dlo, (sp << 16) | dp, meta, True


@njit(cache=True, inline="always")
def _embryonic(proto, f):
    """Not answered yet: TCP without a completed handshake, others without a reply."""
    if proto == 6:
        return (f & FLAG_ACKED) == 0
    return (f & FLAG_REPLY) == 0


@njit(cache=True, inline="always")
def _count_expired(st, ctl, j):
    """Row j is reclaimed because it expired (call before the row is overwritten)."""
    ctl[FC_EXPIRED] += 1
    if st[j, ST_FLAGS] & FLAG_SCALED:
        ctl[FC_EARLY_EXPIRED] += 1


@njit(cache=True, nogil=True)
def _remove_at(st, ctl, j):
    """Backward-shift deletion of row j."""
    mask = st.shape[0] - 1
    while True:
        st[j, ST_META] = 0
        k = j
        while True:
            k = (k + 1) & mask
            if st[k, ST_META] == 0:
                ctl[FC_COUNT] -= 1
                return
            h = _row_home(st, k, mask)
            if j <= k:
                if j < h <= k:
                    continue
            elif h > j or h <= k:
                continue
            for c in range(ST_COLS):
                st[j, c] = st[k, c]
            j = k
            break


@njit(cache=True, nogil=True)
def state_find(st, ctl, ahi, alo, bhi, blo, ports, meta, now):
    """Row of a live state with this key, or -1 (an expired one is reclaimed on the spot)."""
    mask = st.shape[0] - 1
    j = _home(ahi, alo, bhi, blo, ports, meta, mask)
    ctl[FC_LOOKUPS] += 1
    while True:
        m = st[j, ST_META]
        if m == 0:
            return -1
        if (
            m == meta
            and st[j, ST_PORTS] == ports
            and st[j, ST_ALO] == alo
            and st[j, ST_BLO] == blo
            and st[j, ST_AHI] == ahi
            and st[j, ST_BHI] == bhi
        ):
            if st[j, ST_EXPIRE] <= now:
                _count_expired(st, ctl, j)
                _remove_at(st, ctl, j)
                return -1
            return j
        j = (j + 1) & mask


@njit(cache=True, nogil=True)
def state_insert(st, ctl, ahi, alo, bhi, blo, ports, meta, ab, rule, now):
    """Create a state for a key known to be absent; returns its row, or -1 when full.

    An expired row met on the probe path is reused. Without one, a table holding
    ``max_states`` rows makes room (:func:`make_room`: an expired state, else an
    embryonic one) and refuses only when it finds none."""
    mask = st.shape[0] - 1
    j = _home(ahi, alo, bhi, blo, ports, meta, mask)
    while st[j, ST_META] != 0 and st[j, ST_EXPIRE] > now:
        j = (j + 1) & mask
    if st[j, ST_META] != 0:  # an expired row: replace it
        _count_expired(st, ctl, j)
        ctl[FC_COUNT] -= 1
    else:
        if ctl[FC_COUNT] >= ctl[FC_MAX]:
            if not make_room(st, ctl, now, EVICT_SCAN, EVICT_ROWS):
                ctl[FC_FULL_DROPS] += 1
                return -1
            # removing a row may have moved others: find the free row again
            j = _home(ahi, alo, bhi, blo, ports, meta, mask)
            while st[j, ST_META] != 0 and st[j, ST_EXPIRE] > now:
                j = (j + 1) & mask
            if st[j, ST_META] != 0:
                _count_expired(st, ctl, j)
                ctl[FC_COUNT] -= 1
        if st[j, ST_META] == 0 and (ctl[FC_COUNT] + 1) * 4 > st.shape[0] * 3:
            ctl[FC_CAP_DROPS] += 1
            return -1
    st[j, ST_META] = 0
    st[j, ST_AHI] = ahi
    st[j, ST_ALO] = alo
    st[j, ST_BHI] = bhi
    st[j, ST_BLO] = blo
    st[j, ST_PORTS] = ports
    st[j, ST_EXPIRE] = now
    st[j, ST_RULE] = rule
    st[j, ST_FLAGS] = FLAG_CREATOR_AB if ab else 0
    st[j, ST_PKTS] = 0
    st[j, ST_BYTES] = 0
    st[j, ST_META] = meta
    ctl[FC_COUNT] += 1
    ctl[FC_CREATED] += 1
    return j


@njit(cache=True, nogil=True)
def state_update(st, ctl, j, ab, proto, tcpflags, length, now):
    """A packet matched state row j (``ab``: it goes A -> B): track TCP flags and
    replies, refresh (an embryonic state above FC_ADAPT_START for a scaled lifetime)."""
    f = st[j, ST_FLAGS]
    forward = ((f & FLAG_CREATOR_AB) != 0) == ab
    if not forward:
        f |= FLAG_REPLY
    if proto == 6:
        if tcpflags > 0:
            if (forward and (tcpflags & (TH_SYN | TH_ACK)) == TH_ACK
                    and (f & _BOTH_SYN) == _BOTH_SYN):
                f |= FLAG_ACKED  # the handshake's third segment (or any later one)
            fl = tcpflags & _TRACK
            f |= fl if forward else (fl << 8)
        if f & _ANY_RST:
            life = ctl[FC_LIFE_RST]
        elif (f & _BOTH_FIN) == _BOTH_FIN:
            life = ctl[FC_LIFE_FIN]
        elif f & FLAG_ACKED:
            life = ctl[FC_LIFE_EST]
        else:
            life = ctl[FC_LIFE_SYN]
    elif proto == 17:
        life = ctl[FC_LIFE_UDP]
    else:
        life = ctl[FC_LIFE_OTHER]
    f &= ~FLAG_SCALED
    if _embryonic(proto, f):
        c = ctl[FC_COUNT]
        a0 = ctl[FC_ADAPT_START]
        if c > a0:
            a1 = ctl[FC_ADAPT_END]
            life = np.int64(life * (float(a1 - c) / float(a1 - a0))) if c < a1 else np.int64(0)
            f |= FLAG_SCALED
    st[j, ST_FLAGS] = f
    st[j, ST_EXPIRE] = now + life
    st[j, ST_PKTS] += 1
    st[j, ST_BYTES] += length


@njit(cache=True, nogil=True)
def sweep_states(st, ctl, now, budget):
    """Examine ``budget`` rows from the cursor on; reclaim the expired ones."""
    mask = st.shape[0] - 1
    c = ctl[FC_CURSOR] & mask
    n = 0
    while n < budget:
        n += 1
        if st[c, ST_META] != 0 and st[c, ST_EXPIRE] <= now:
            _count_expired(st, ctl, c)
            _remove_at(st, ctl, c)  # a later row may move into c: look at c again
        else:
            c = (c + 1) & mask
    ctl[FC_CURSOR] = c


@njit(cache=True, nogil=True)
def make_room(st, ctl, now, states, rows):
    """A full table, one row to free: look at the next ``states`` states from the sweep
    cursor on (at most ``rows`` rows, the cursor moving past them, as the sweep would);
    reclaim the first expired one, else evict the embryonic one that expires first. False
    when they hold neither (answered states are never evicted)."""
    mask = st.shape[0] - 1
    c = ctl[FC_CURSOR] & mask
    best = -1
    best_exp = np.int64(0)
    seen = 0
    for _ in range(min(rows, st.shape[0])):
        m = st[c, ST_META]
        if m != 0:
            e = st[c, ST_EXPIRE]
            if e <= now:
                _count_expired(st, ctl, c)
                _remove_at(st, ctl, c)  # rows move into c and after it, never into best
                ctl[FC_CURSOR] = c
                return True
            seen += 1
            if seen > states:
                break
            if _embryonic(m & 0xFFFF, st[c, ST_FLAGS]) and (best < 0 or e < best_exp):
                best = c
                best_exp = e
        c = (c + 1) & mask
    ctl[FC_CURSOR] = c
    if best < 0:
        return False
    _remove_at(st, ctl, best)
    ctl[FC_EVICTED] += 1
    return True


@njit(cache=True, nogil=True)
def rehash_states(st, cap):
    out = np.zeros((cap, ST_COLS), np.int64)
    mask = cap - 1
    for i in range(st.shape[0]):
        if st[i, ST_META] == 0:
            continue
        j = _row_home(st, i, mask)
        while out[j, ST_META] != 0:
            j = (j + 1) & mask
        for c in range(ST_COLS):
            out[j, c] = st[i, c]
    return out


@njit(cache=True, nogil=True)
def remap_state_rules(st, mapping):
    """After a rule-set change: ST_RULE -> mapping[ST_RULE]; states whose rule is gone
    (mapping -1) expire at once (reclaimed lazily)."""
    for i in range(st.shape[0]):
        if st[i, ST_META] == 0:
            continue
        r = st[i, ST_RULE]
        nr = mapping[r] if 0 <= r < mapping.shape[0] else -1
        if nr < 0:
            st[i, ST_EXPIRE] = 0
            st[i, ST_RULE] = 0
        else:
            st[i, ST_RULE] = nr


@njit(cache=True, nogil=True)
def states_need_growth(st: np.ndarray, ctl: np.ndarray, headroom: int, limit: int) -> bool:
    """What :func:`grow_states` would grow (a compiled loop asks between its batches;
    ``limit`` is the capacity ``max_states`` allows)."""
    cap = st.shape[0]
    count = ctl[FC_COUNT]
    return cap < limit and not (count * 2 <= cap and (count + headroom) * 4 <= cap * 3)


def state_capacity_limit(st: np.ndarray, ctl: np.ndarray) -> int:
    """The largest table :func:`grow_states` would build for this ``max_states``."""
    return max(st.shape[0], capacity_for(int(ctl[FC_MAX])))


def grow_states(st: np.ndarray, ctl: np.ndarray, headroom: int = 256) -> np.ndarray:
    """Between batches: a bigger table (else ``st`` itself) when the load passed 1/2 or the
    next ``headroom`` inserts (a vector) could pass 3/4; never beyond the size
    ``max_states`` needs."""
    cap = st.shape[0]
    limit = state_capacity_limit(st, ctl)
    count = int(ctl[FC_COUNT])

    def ok(c: int) -> bool:
        return count * 2 <= c and (count + headroom) * 4 <= c * 3

    if ok(cap) or cap >= limit:
        return st
    new_cap = cap
    while not ok(new_cap) and new_cap < limit:
        new_cap *= 2
    ctl[FC_CURSOR] = 0
    return rehash_states(st, new_cap)
