"""Numba kernels of the multibit-trie LPM (VPP "16-8-8 mtrie" layout, DPDK rte_lpm updates).

Layout, shared by both families (IPv4 uses levels 0..2, IPv6 levels 0..14):

- ``roots``: ``uint32[n_tables, 65536]``, level 0, indexed by the first 16 address bits.
- ``groups``: ``uint32[n_groups, 256]``, one pool per family; a group at level ``k >= 1``
  is indexed by address byte ``k + 1`` and covers the bits after depth ``16 + 8 * (k - 1)``.

Entry encoding (``uint32``): bit 31 ``EXT`` -> bits 0..30 are a group index; otherwise bit 30
``VALID``, bits 22..29 the prefix length that wrote the entry ("depth") and bits 0..21 the
value (a load-balance index).  Keeping the depth in the entry is what makes in-place add and
delete possible without a rebuild: an add of P/d overwrites the entries of its range whose depth
is <= d, a delete replaces the entries of its range whose depth is == d by the longest remaining
covering rule.  A group whose 256 entries become equal (and short enough to be written in its
parent entry) is folded back into its parent and put on a free list.

Addresses are handled as a 128-bit ``(hi, lo)`` pair of ``uint64`` in every update kernel; an
IPv4 address ``a`` is ``(a << 32, 0)`` so one implementation serves both families.

The rule store (exact prefix -> value, for deletes, exact gets and listings) is an
open-addressing hash table with linear probing and backward-shift deletion in two numpy
arrays: ``keys uint64[cap, kw]`` and ``vals int32[cap]`` (``-1`` = empty slot).  IPv4 keys are
one word ``addr << 32 | table << 8 | len``; IPv6 keys three words ``hi, lo, table << 8 | len``.
That is 12 (IPv4) or 28 (IPv6) bytes per slot, far leaner than a Python dict.

``state`` (``int64[4]``) holds ``[groups high-water mark, free-list length, rules, unused]``.
Update kernels never reallocate: callers ensure capacity first (``groups_available`` >= 14
free groups, rule-store load < 3/4); ``add_rules`` stops and returns when either runs short.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from vecroute.packet.intrinsics import prefetch

EXT = np.uint32(0x80000000)
VALID = np.uint32(0x40000000)
DEPTH_SHIFT = np.uint32(22)
DEPTH_MASK = np.uint32(0xFF)
VALUE_MASK = np.uint32(0x3FFFFF)
INDEX_MASK = np.uint32(0x7FFFFFFF)
ROOT_SIZE = 65536
GROUP_SIZE = 256
MAX_VALUE = 1 << 22
MAX_LEVELS = 15

ST_USED = 0
ST_FREE = 1
ST_RULES = 2

_U64_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_U64_0 = np.uint64(0)
_U64_8 = np.uint64(8)
_U64_32 = np.uint64(32)
_U64_48 = np.uint64(48)
_U64_255 = np.uint64(255)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


# ---------------------------------------------------------------------------------------------
# data path
# ---------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def lpm4_lookup(roots, groups, table_index, addr):
    """Longest-prefix match of one IPv4 address (uint32) -> value, or -1 on a miss.

    Branch-free: each level is a select.  A level that is not needed reads row 0 of the pool
    instead (1 KB, always in L1) and discards it, so a /24 costs two accesses that can miss
    (root, one group) and a /25../32 three.  Without branches numba also drops the per-call
    reference counting when this is called inside another kernel's loop: about 1.6x faster
    than the branchy form on random table addresses.
    """
    a = np.uint32(addr)
    e = roots[table_index, a >> np.uint32(16)]
    ext = (e & EXT) != 0
    e1 = groups[(e & INDEX_MASK) if ext else np.uint32(0), (a >> np.uint32(8)) & np.uint32(255)]
    e = e1 if ext else e
    ext = (e & EXT) != 0
    e2 = groups[(e & INDEX_MASK) if ext else np.uint32(0), a & np.uint32(255)]
    e = e2 if ext else e
    return np.int32(e & VALUE_MASK) if e & VALID else np.int32(-1)


@njit(cache=True, nogil=True, _nrt=False)
def lpm6_lookup(roots, groups, table_index, hi, lo):
    """Longest-prefix match of one IPv6 address given as two uint64 (big-endian halves).

    Returns the value or -1.  One access for the first 16 bits, then one per further byte
    of the matching entry: a /32 is 3 accesses, a /48 5.  (A branch-free form that always walks
    14 levels measured 2x slower: IPv6 entries sit at very different depths.)
    """
    h = np.uint64(hi)
    e = roots[table_index, h >> _U64_48]
    w = h
    sh = np.int64(40)
    while e & EXT:
        if sh < 0:
            w = np.uint64(lo)
            sh = np.int64(56)
        e = groups[e & INDEX_MASK, (w >> np.uint64(sh)) & _U64_255]
        sh -= 8
    v = np.int32(e & VALUE_MASK)
    return v if e & VALID else np.int32(-1)


@njit(cache=True, nogil=True)
def lpm4_lookup_vec(roots, groups, tables, addrs, n, out) -> None:
    """A vector of IPv4 lookups that overlaps their cache misses: every packet's root entry
    is read and its group line prefetched before any group is read (about 60 -> 36 ns per
    packet on a full table). ``tables[j] < 0`` gives -2 (no such table)."""
    lpm4_lookup_vec_in(roots, groups, tables, addrs, n, out, np.empty(n, np.uint32))


@njit(cache=True, nogil=True, _nrt=False)
def lpm4_lookup_vec_in(roots, groups, tables, addrs, n, out, ents) -> None:
    """lpm4_lookup_vec over the scratch it is given (``ents``: uint32[>= n]), for callers
    compiled without reference counting, which cannot allocate."""
    gflat = groups.reshape(-1)
    nt = roots.shape[0]
    for j in range(n):
        t = tables[j]
        if t < 0 or t >= nt:
            ents[j] = np.uint32(0)
            out[j] = -2
            continue
        a = np.uint32(addrs[j])
        e = roots[t, a >> np.uint32(16)]
        ents[j] = e
        out[j] = 0
        if e & EXT:
            prefetch(gflat, np.int64(e & INDEX_MASK) * GROUP_SIZE
                     + np.int64((a >> np.uint32(8)) & np.uint32(255)))
    for j in range(n):
        if out[j] == -2:
            continue
        a = np.uint32(addrs[j])
        e = ents[j]
        if e & EXT:
            e = groups[e & INDEX_MASK, (a >> np.uint32(8)) & np.uint32(255)]
            if e & EXT:
                e = groups[e & INDEX_MASK, a & np.uint32(255)]
        out[j] = np.int32(e & VALUE_MASK) if e & VALID else np.int32(-1)


@njit(cache=True, inline="always")
def _byte6(hi, lo, level):
    """Byte ``level + 1`` of the address (level 1 = bits 16..23)."""
    if level <= 6:
        return np.int64((hi >> np.uint64(48 - 8 * level)) & np.uint64(255))
    return np.int64((lo >> np.uint64(56 - 8 * (level - 7))) & np.uint64(255))


@njit(cache=True, nogil=True)
def lpm6_lookup_vec(roots, groups, tables, his, los, n, out) -> None:
    """A vector of IPv6 lookups walked level by level across the vector, prefetching each
    packet's next group: the misses of all packets overlap (about 120 -> 45 ns per packet
    on a full table). ``tables[j] < 0`` gives -2."""
    lpm6_lookup_vec_in(roots, groups, tables, his, los, n, out, np.empty(n, np.uint32),
                       np.empty(n, np.int64))


@njit(cache=True, nogil=True, _nrt=False)
def lpm6_lookup_vec_in(roots, groups, tables, his, los, n, out, ents, active) -> None:
    """lpm6_lookup_vec over the scratch it is given (``ents``: uint32[>= n], ``active``:
    int64[>= n]), for callers compiled without reference counting."""
    gflat = groups.reshape(-1)
    nt = roots.shape[0]
    na = 0
    for j in range(n):
        t = tables[j]
        if t < 0 or t >= nt:
            ents[j] = np.uint32(0)
            out[j] = -2
            continue
        h = np.uint64(his[j])
        e = roots[t, h >> _U64_48]
        ents[j] = e
        out[j] = 0
        if e & EXT:
            prefetch(gflat, np.int64(e & INDEX_MASK) * GROUP_SIZE + _byte6(h, np.uint64(los[j]), 1))
            active[na] = j
            na += 1
    level = 1
    while na > 0:
        nn = 0
        for q in range(na):
            j = active[q]
            h = np.uint64(his[j])
            lo = np.uint64(los[j])
            e = groups[ents[j] & INDEX_MASK, _byte6(h, lo, level)]
            ents[j] = e
            if e & EXT and level < 14:
                prefetch(gflat, np.int64(e & INDEX_MASK) * GROUP_SIZE + _byte6(h, lo, level + 1))
                active[nn] = j
                nn += 1
        na = nn
        level += 1
    for j in range(n):
        if out[j] != -2:
            e = ents[j]
            out[j] = np.int32(e & VALUE_MASK) if (e & VALID and not e & EXT) else np.int32(-1)


@njit(cache=True, nogil=True)
def lpm4_lookup_batch(roots, groups, table_index, addrs):
    """Vector of IPv4 lookups (uint32 addresses) -> int32 values (-1 = miss)."""
    n = addrs.shape[0]
    out = np.empty(n, np.int32)
    lpm4_lookup_vec(roots, groups, np.full(n, table_index, np.int64), addrs, n, out)
    return out


@njit(cache=True, nogil=True)
def lpm6_lookup_batch(roots, groups, table_index, his, los):
    """Vector of IPv6 lookups (uint64 high and low halves) -> int32 values (-1 = miss)."""
    n = his.shape[0]
    out = np.empty(n, np.int32)
    lpm6_lookup_vec(roots, groups, np.full(n, table_index, np.int64), his, los, n, out)
    return out


# ---------------------------------------------------------------------------------------------
# prefix helpers
# ---------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _mask(hi, lo, length):
    """Clear the host bits of the 128-bit (hi, lo) address beyond ``length``."""
    if length <= 0:
        return _U64_0, _U64_0
    if length < 64:
        return hi & (_U64_ALL << np.uint64(64 - length)), _U64_0
    if length == 64:
        return hi, _U64_0
    if length < 128:
        return hi, lo & (_U64_ALL << np.uint64(128 - length))
    return hi, lo


@njit(cache=True, nogil=True)
def _chunk(hi, lo, level):
    """Index into the level-``level`` table: 16 bits at level 0, then one byte per level."""
    if level == 0:
        return np.int64(hi >> _U64_48)
    b = level + 1
    if b < 8:
        return np.int64((hi >> np.uint64(56 - 8 * b)) & _U64_255)
    return np.int64((lo >> np.uint64(56 - 8 * (b - 8))) & _U64_255)


@njit(cache=True, nogil=True)
def make_entry(depth, value):
    """Encode a valid leaf entry."""
    return VALID | (np.uint32(depth) << DEPTH_SHIFT) | (np.uint32(value) & VALUE_MASK)


@njit(cache=True, nogil=True)
def _depth(e):
    return np.int64((e >> DEPTH_SHIFT) & DEPTH_MASK)


# ---------------------------------------------------------------------------------------------
# group pool
# ---------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _alloc_group(groups, free, state, fill):
    if state[ST_FREE] > 0:
        state[ST_FREE] -= 1
        g = free[state[ST_FREE]]
    else:
        g = state[ST_USED]
        state[ST_USED] += 1
    groups[g, :] = fill
    return g


@njit(cache=True, nogil=True)
def _free_group(free, state, g):
    free[state[ST_FREE]] = g
    state[ST_FREE] += 1


@njit(cache=True, nogil=True)
def _collapsible(groups, g, level):
    """True when group ``g`` (at ``level``) is 256 equal leaves the parent entry can hold."""
    e0 = groups[g, 0]
    if e0 & EXT:
        return False
    if _depth(e0) > 16 + 8 * (level - 1):
        return False
    for i in range(1, GROUP_SIZE):
        if groups[g, i] != e0:
            return False
    return True


@njit(cache=True, nogil=True)
def _hit(e, d, is_delete):
    """Does the update of a rule of length ``d`` rewrite leaf ``e``?"""
    if is_delete:
        return (e & VALID) != 0 and _depth(e) == d
    return _depth(e) <= d


@njit(cache=True, nogil=True)
def _subtree(groups, free, state, g, level, d, new_e, is_delete):
    """Apply an update to every leaf below group ``g``, folding groups that become uniform.

    ``g`` itself is not folded (its parent belongs to the caller).  Iterative DFS: depth <= 15.
    """
    stack_g = np.empty(MAX_LEVELS + 1, np.int64)
    stack_i = np.empty(MAX_LEVELS + 1, np.int64)
    sp = 0
    stack_g[0] = g
    stack_i[0] = 0
    while True:
        cg = stack_g[sp]
        i = stack_i[sp]
        if i == GROUP_SIZE:
            if sp == 0:
                break
            sp -= 1
            pg = stack_g[sp]
            pi = stack_i[sp]
            if _collapsible(groups, cg, level + sp + 1):
                groups[pg, pi] = groups[cg, 0]
                _free_group(free, state, cg)
            stack_i[sp] = pi + 1
            continue
        e = groups[cg, i]
        if e & EXT:
            sp += 1
            stack_g[sp] = np.int64(e & INDEX_MASK)
            stack_i[sp] = 0
            continue
        if _hit(e, d, is_delete):
            groups[cg, i] = new_e
        stack_i[sp] = i + 1


@njit(cache=True, nogil=True)
def _range(row, groups, free, state, start, count, child_level, d, new_e, is_delete):
    """Apply an update to ``row[start:start+count]`` (a root row or a group row)."""
    for i in range(start, start + count):
        e = row[i]
        if e & EXT:
            c = np.int64(e & INDEX_MASK)
            _subtree(groups, free, state, c, child_level, d, new_e, is_delete)
            if _collapsible(groups, c, child_level):
                row[i] = groups[c, 0]
                _free_group(free, state, c)
        elif _hit(e, d, is_delete):
            row[i] = new_e


@njit(cache=True, nogil=True)
def _update(roots, groups, free, state, t, hi, lo, d, new_e, is_delete):
    """Write (add) or remove (delete, ``new_e`` = replacement) the rule hi:lo/d in table ``t``.

    Adds may allocate up to 14 groups: the caller guarantees they are available.  Deletes never
    allocate; they fold the groups on the path that become uniform.
    """
    if d <= 16:
        start = _chunk(hi, lo, 0)
        _range(roots[t], groups, free, state, start, 1 << (16 - d), 1, d, new_e, is_delete)
        return
    gl = np.empty(MAX_LEVELS + 1, np.int64)  # group at level k
    ci = np.empty(MAX_LEVELS + 1, np.int64)  # index used at level k
    idx = _chunk(hi, lo, 0)
    ci[0] = idx
    e = roots[t, idx]
    if e & EXT:
        g = np.int64(e & INDEX_MASK)
    else:
        if is_delete:
            return
        g = _alloc_group(groups, free, state, e)
        roots[t, idx] = EXT | np.uint32(g)
    level = 1
    off = 16
    while True:
        gl[level] = g
        c = _chunk(hi, lo, level)
        ci[level] = c
        if d <= off + 8:
            _range(
                groups[g],
                groups,
                free,
                state,
                c,
                1 << (off + 8 - d),
                level + 1,
                d,
                new_e,
                is_delete,
            )
            break
        e = groups[g, c]
        if e & EXT:
            g = np.int64(e & INDEX_MASK)
        else:
            if is_delete:
                return
            g2 = _alloc_group(groups, free, state, e)
            groups[g, c] = EXT | np.uint32(g2)
            g = g2
        level += 1
        off += 8
    if not is_delete:
        return
    k = level
    while k >= 1:
        g = gl[k]
        if not _collapsible(groups, g, k):
            break
        e0 = groups[g, 0]
        if k == 1:
            roots[t, ci[0]] = e0
        else:
            groups[gl[k - 1], ci[k - 1]] = e0
        _free_group(free, state, g)
        k -= 1


# ---------------------------------------------------------------------------------------------
# rule store: open addressing hash, linear probing, backward-shift deletion
# ---------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _mix(z):
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


@njit(cache=True, nogil=True)
def _key(hi, lo, t, d, kw):
    meta = (np.uint64(t) << _U64_8) | np.uint64(d)
    if kw == 1:
        return hi | meta, _U64_0, _U64_0
    return hi, lo, meta


@njit(cache=True, nogil=True)
def _home(k0, k1, k2, kw, mask):
    h = _mix(k0)
    if kw != 1:
        h = _mix(h ^ k1)
        h = _mix(h ^ k2)
    return np.int64(h & mask)


@njit(cache=True, nogil=True)
def _slot_home(keys, j, kw, mask):
    if kw == 1:
        return _home(keys[j, 0], _U64_0, _U64_0, kw, mask)
    return _home(keys[j, 0], keys[j, 1], keys[j, 2], kw, mask)


@njit(cache=True, nogil=True)
def _h_find(keys, vals, k0, k1, k2, kw):
    """Slot holding the key, or ``-(free slot) - 1`` where it would go."""
    mask = np.uint64(vals.shape[0] - 1)
    i = _home(k0, k1, k2, kw, mask)
    m = np.int64(mask)
    while True:
        if vals[i] < 0:
            return -i - 1
        if keys[i, 0] == k0 and (kw == 1 or (keys[i, 1] == k1 and keys[i, 2] == k2)):
            return i
        i = (i + 1) & m


@njit(cache=True, nogil=True)
def _h_put(keys, vals, state, k0, k1, k2, kw, value):
    """Insert or replace; True if the key is new."""
    s = _h_find(keys, vals, k0, k1, k2, kw)
    if s >= 0:
        vals[s] = value
        return False
    s = -s - 1
    keys[s, 0] = k0
    if kw != 1:
        keys[s, 1] = k1
        keys[s, 2] = k2
    vals[s] = value
    state[ST_RULES] += 1
    return True


@njit(cache=True, nogil=True)
def _h_remove(keys, vals, state, s, kw):
    """Empty slot ``s`` and shift the following probe run back (no tombstones)."""
    m = np.int64(vals.shape[0] - 1)
    mask = np.uint64(m)
    i = s
    j = s
    while True:
        j = (j + 1) & m
        if vals[j] < 0:
            break
        h = _slot_home(keys, j, kw, mask)
        # the entry at j may move to i only if its home is not cyclically in (i, j]
        if i <= j:
            stays = i < h <= j
        else:
            stays = h > i or h <= j
        if stays:
            continue
        for w in range(keys.shape[1]):
            keys[i, w] = keys[j, w]
        vals[i] = vals[j]
        i = j
    vals[i] = -1
    state[ST_RULES] -= 1


@njit(cache=True, nogil=True)
def rehash(keys, vals, new_cap):
    """Copy the rule store into a table of ``new_cap`` (a power of two) slots."""
    kw = keys.shape[1]
    nkeys = np.zeros((new_cap, kw), np.uint64)
    nvals = np.full(new_cap, -1, np.int32)
    dummy = np.zeros(4, np.int64)
    for s in range(vals.shape[0]):
        if vals[s] >= 0:
            if kw == 1:
                _h_put(nkeys, nvals, dummy, keys[s, 0], _U64_0, _U64_0, kw, vals[s])
            else:
                _h_put(nkeys, nvals, dummy, keys[s, 0], keys[s, 1], keys[s, 2], kw, vals[s])
    return nkeys, nvals


@njit(cache=True, nogil=True)
def rule_get(keys, vals, t, hi, lo, d, kw):
    """Exact-match value of the rule hi:lo/d in table ``t`` (host bits masked), or -1."""
    mh, ml = _mask(np.uint64(hi), np.uint64(lo), d)
    k0, k1, k2 = _key(mh, ml, t, d, kw)
    s = _h_find(keys, vals, k0, k1, k2, kw)
    return vals[s] if s >= 0 else np.int32(-1)


@njit(cache=True, nogil=True)
def _covering_entry(keys, vals, t, hi, lo, d, kw):
    """Leaf entry of the longest rule strictly shorter than ``d`` covering hi:lo, or 0."""
    for ln in range(d - 1, -1, -1):
        mh, ml = _mask(hi, lo, ln)
        k0, k1, k2 = _key(mh, ml, t, ln, kw)
        s = _h_find(keys, vals, k0, k1, k2, kw)
        if s >= 0:
            return make_entry(ln, vals[s])
    return np.uint32(0)


# ---------------------------------------------------------------------------------------------
# rule add / delete (rule store + trie)
# ---------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def add_rule(roots, groups, free, state, keys, vals, t, hi, lo, d, value, kw):
    """Add or replace one rule; True if it is new.  Capacity must have been ensured."""
    mh, ml = _mask(np.uint64(hi), np.uint64(lo), d)
    k0, k1, k2 = _key(mh, ml, t, d, kw)
    new = _h_put(keys, vals, state, k0, k1, k2, kw, np.int32(value))
    _update(roots, groups, free, state, t, mh, ml, d, make_entry(d, value), False)
    return new


@njit(cache=True, nogil=True)
def delete_rule(roots, groups, free, state, keys, vals, t, hi, lo, d, kw):
    """Delete one rule; False if it was not present."""
    mh, ml = _mask(np.uint64(hi), np.uint64(lo), d)
    k0, k1, k2 = _key(mh, ml, t, d, kw)
    s = _h_find(keys, vals, k0, k1, k2, kw)
    if s < 0:
        return False
    _h_remove(keys, vals, state, s, kw)
    repl = _covering_entry(keys, vals, t, mh, ml, d, kw)
    _update(roots, groups, free, state, t, mh, ml, d, repl, True)
    return True


@njit(cache=True, nogil=True)
def groups_available(groups, state):
    """Groups that can be allocated without growing the pool."""
    return state[ST_FREE] + groups.shape[0] - state[ST_USED]


@njit(cache=True, nogil=True)
def _wide_at(a_hi, a_lo, j, kw):
    """(hi, lo) of prefix ``j``: IPv4 arrays hold uint32 addresses, IPv6 arrays two halves."""
    if kw == 1:
        return np.uint64(a_hi[j]) << _U64_32, _U64_0
    return np.uint64(a_hi[j]), np.uint64(a_lo[j])


@njit(cache=True, nogil=True)
def missing_levels(roots, groups, t, a_hi, a_lo, lens, kw):
    """Per prefix: the first trie level whose group on its path does not exist yet (99: none).

    Lets a bulk add size the group pool exactly instead of growing it step by step.
    """
    n = lens.shape[0]
    out = np.empty(n, np.int8)
    for j in range(n):
        d = np.int64(lens[j])
        hi, lo = _wide_at(a_hi, a_lo, j, kw)
        hi, lo = _mask(hi, lo, d)
        lvl = 99
        e = roots[t, _chunk(hi, lo, 0)]
        k = 1
        off = 16
        while d > off:
            if not e & EXT:
                lvl = k
                break
            if d <= off + 8:
                break
            e = groups[e & INDEX_MASK, _chunk(hi, lo, k)]
            k += 1
            off += 8
        out[j] = lvl
    return out


@njit(cache=True, nogil=True)
def add_rules(
    roots,
    groups,
    free,
    state,
    keys,
    vals,
    t,
    a_hi,
    a_lo,
    lens,
    values,
    order,
    start,
    kw,
    max_new_groups,
):
    """Add rules ``order[start:]`` until done or out of capacity.

    Returns ``(next position in order, number of new rules)``; the caller grows the pool or the
    rule store when the position is short of the end and calls again.
    """
    n = order.shape[0]
    new = 0
    cap = vals.shape[0]
    i = start
    while i < n:
        if groups_available(groups, state) < max_new_groups:
            break
        if (state[ST_RULES] + 1) * 4 > cap * 3:
            break
        j = order[i]
        hi, lo = _wide_at(a_hi, a_lo, j, kw)
        d = np.int64(lens[j])
        if add_rule(roots, groups, free, state, keys, vals, t, hi, lo, d, values[j], kw):
            new += 1
        i += 1
    return i, new


@njit(cache=True, nogil=True)
def delete_rules(roots, groups, free, state, keys, vals, t, a_hi, a_lo, lens, kw):
    """Delete many rules; returns how many were present."""
    n = 0
    for j in range(lens.shape[0]):
        hi, lo = _wide_at(a_hi, a_lo, j, kw)
        if delete_rule(roots, groups, free, state, keys, vals, t, hi, lo, np.int64(lens[j]), kw):
            n += 1
    return n


# ---------------------------------------------------------------------------------------------
# prefix-file parser (the common textual forms; anything else goes to the Python parser)
# ---------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _is_space(c):
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12


@njit(cache=True, nogil=True)
def _hexval(c):
    if 48 <= c <= 57:
        return np.int64(c) - 48
    if 97 <= c <= 102:
        return np.int64(c) - 87
    if 65 <= c <= 70:
        return np.int64(c) - 55
    return np.int64(-1)


@njit(cache=True, nogil=True)
def _parse_v4(buf, s, e):
    """Dotted quad in buf[s:e] -> (ok, addr)."""
    addr = np.uint64(0)
    i = s
    for part in range(4):
        v = 0
        nd = 0
        while i < e and 48 <= buf[i] <= 57:
            if nd == 1 and v == 0:
                return False, np.uint64(0)  # leading zero: let the strict parser decide
            v = v * 10 + (np.int64(buf[i]) - 48)
            nd += 1
            i += 1
            if nd > 3:
                return False, np.uint64(0)
        if nd == 0 or v > 255:
            return False, np.uint64(0)
        addr = (addr << _U64_8) | np.uint64(v)
        if part < 3:
            if i >= e or buf[i] != 46:
                return False, np.uint64(0)
            i += 1
    return i == e, addr


@njit(cache=True, nogil=True)
def _parse_v6(buf, s, e, words):
    """Hex-and-colons IPv6 address in buf[s:e] -> (ok, hi, lo); no embedded IPv4 form."""
    z = np.uint64(0)
    nw = 0
    gap = -1
    i = s
    if e - s >= 2 and buf[s] == 58 and buf[s + 1] == 58:
        gap = 0
        i = s + 2
    elif i < e and buf[i] == 58:
        return False, z, z
    while i < e:
        v = 0
        nd = 0
        while i < e and _hexval(buf[i]) >= 0:
            v = v * 16 + _hexval(buf[i])
            nd += 1
            i += 1
            if nd > 4:
                return False, z, z
        if nd == 0 or nw == 8:
            return False, z, z
        words[nw] = v
        nw += 1
        if i == e:
            break
        if buf[i] != 58:
            return False, z, z
        i += 1
        if i < e and buf[i] == 58:
            if gap >= 0:
                return False, z, z
            gap = nw
            i += 1
        elif i == e:
            return False, z, z
    if (gap < 0 and nw != 8) or (gap >= 0 and nw > 7):
        return False, z, z
    hi = z
    lo = z
    shift = 8 - nw
    for k in range(8):
        if gap < 0 or k < gap:
            w = words[k]
        elif k < gap + shift:
            w = 0
        else:
            w = words[k - shift]
        if k < 4:
            hi = (hi << np.uint64(16)) | np.uint64(w)
        else:
            lo = (lo << np.uint64(16)) | np.uint64(w)
    return True, hi, lo


@njit(cache=True, nogil=True)
def parse_prefix_lines(buf):
    """Parse ``addr/len`` lines of a byte buffer.

    Returns ``(bad_line, v4_addrs, v4_lens, v6_his, v6_los, v6_lens)``; ``bad_line`` is 0 when
    every line was understood, else the 1-based number of the first line to hand to the strict
    Python parser (bad, or a rare form such as an embedded IPv4 address).
    """
    n = buf.shape[0]
    nlines = 1
    for i in range(n):
        if buf[i] == 10:
            nlines += 1
    a4 = np.empty(nlines, np.uint32)
    l4 = np.empty(nlines, np.uint8)
    h6 = np.empty(nlines, np.uint64)
    o6 = np.empty(nlines, np.uint64)
    l6 = np.empty(nlines, np.uint8)
    words = np.zeros(8, np.int64)
    n4 = 0
    n6 = 0
    pos = 0
    lineno = 0
    while pos < n:
        lineno += 1
        end = pos
        while end < n and buf[end] != 10:
            end += 1
        s = pos
        e = end
        pos = end + 1
        while s < e and _is_space(buf[s]):
            s += 1
        while e > s and _is_space(buf[e - 1]):
            e -= 1
        if s == e or buf[s] == 35:
            continue
        slash = e
        v6 = False
        for i in range(s, e):
            if buf[i] == 58:
                v6 = True
            elif buf[i] == 47:
                slash = i
                break
        maxlen = 128 if v6 else 32
        length = maxlen
        if slash < e:
            if e - slash - 1 < 1 or e - slash - 1 > 3:
                return lineno, a4[:0], l4[:0], h6[:0], o6[:0], l6[:0]
            length = 0
            for i in range(slash + 1, e):
                c = buf[i]
                if not 48 <= c <= 57:
                    return lineno, a4[:0], l4[:0], h6[:0], o6[:0], l6[:0]
                length = length * 10 + (np.int64(c) - 48)
            if length > maxlen:
                return lineno, a4[:0], l4[:0], h6[:0], o6[:0], l6[:0]
        if v6:
            ok, hi, lo = _parse_v6(buf, s, slash, words)
            if not ok:
                return lineno, a4[:0], l4[:0], h6[:0], o6[:0], l6[:0]
            hi, lo = _mask(hi, lo, length)
            h6[n6] = hi
            o6[n6] = lo
            l6[n6] = length
            n6 += 1
        else:
            ok, a = _parse_v4(buf, s, slash)
            if not ok:
                return lineno, a4[:0], l4[:0], h6[:0], o6[:0], l6[:0]
            hi, lo = _mask(a << _U64_32, _U64_0, length)
            a4[n4] = np.uint32(hi >> _U64_32)
            l4[n4] = length
            n4 += 1
    return 0, a4[:n4].copy(), l4[:n4].copy(), h6[:n6].copy(), o6[:n6].copy(), l6[:n6].copy()
