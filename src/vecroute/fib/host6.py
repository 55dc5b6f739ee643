"""An exact-match table of the IPv6 host routes (/128), beside the trie.

A /128 is the deepest entry the IPv6 trie holds: its lookup walks all 15 levels, one
dependent load each (~62 ns on the bench FIB, against ~22 ns for a /48). The local SIDs
an SRv6 endpoint serves are such /128s, and every End or decapsulation looks one up
first. An address that has a /128 rule in a table has it as its longest match there,
so one probe of a hash of the /128 rules gives the trie's answer for it; a miss says
nothing and the trie is walked as before. The fused path probes it for packets that
carry an SRH or an IP-in-IPv6 packet (graph/fast_path.py); plain packets never pay it.

The table is built aside from the rule store (``Lpm.host_table``) after a change of a
/128 and published with the tables, never changed in place: ``keys uint64[cap + 1, 3]``
(address high half, low half, table index; the last row holds the hash seed), ``vals
int32[cap]`` (``-1`` empty), ``cap`` a power of two at least twice the entries, so a probe
always ends. The seed is random per build: hosts on a link choose their addresses, and
so the /128s learnt from them, but cannot aim them at one probe run (as the reassembly
contexts' seed, graph/state.py). More than ``limit`` host routes give an empty table:
lookups then take the trie alone, as before it existed.
"""

from __future__ import annotations

import numpy as np
from numba import njit

HOST_LIMIT = 1 << 16  # host routes the table takes; beyond, every lookup walks the trie
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_LEN_MASK = np.uint64(255)
_U64_8 = np.uint64(8)


@njit(cache=True, inline="always")
def _home(hi, lo, t, seed, mask) -> np.int64:
    z = ((hi ^ seed) * _M2) ^ (lo * _M1) ^ (np.uint64(t) * _M2)
    z = (z ^ (z >> np.uint64(31))) * _M1
    return np.int64((z ^ (z >> np.uint64(29))) & mask)


@njit(cache=True, nogil=True, _nrt=False)
def host6_lookup(keys, vals, t, hi, lo) -> np.int32:
    """The value of the /128 rule hi:lo in table index ``t``, or -1 (then: walk the trie)."""
    m = np.int64(vals.shape[0] - 1)
    i = _home(np.uint64(hi), np.uint64(lo), t, keys[m + 1, 0], np.uint64(m))
    while True:
        v = vals[i]
        if v < 0:
            return np.int32(-1)
        if keys[i, 0] == hi and keys[i, 1] == lo and keys[i, 2] == np.uint64(t):
            return v
        i = (i + 1) & m


@njit(cache=True, nogil=True)
def host6_build(rule_keys, rule_vals, limit, seed):
    """The /128 rules of an IPv6 rule store (lpm_kernels: keys ``hi, lo, table << 8 | len``)
    as a host table hashed with ``seed``; an empty one (one free slot) if there are more
    than ``limit``."""
    n = 0
    for s in range(rule_vals.shape[0]):
        if rule_vals[s] >= 0 and rule_keys[s, 2] & _LEN_MASK == 128:
            n += 1
    if n == 0 or n > limit:
        return np.zeros((2, 3), np.uint64), np.full(1, -1, np.int32)
    cap = 16
    while cap < 2 * n:
        cap <<= 1
    keys = np.zeros((cap + 1, 3), np.uint64)
    keys[cap, 0] = seed
    vals = np.full(cap, -1, np.int32)
    m = np.int64(cap - 1)
    for s in range(rule_vals.shape[0]):
        if rule_vals[s] < 0 or rule_keys[s, 2] & _LEN_MASK != 128:
            continue
        hi, lo = rule_keys[s, 0], rule_keys[s, 1]
        t = np.int64(rule_keys[s, 2] >> _U64_8)
        i = _home(hi, lo, t, seed, np.uint64(m))
        while vals[i] >= 0:  # the rule store holds each key once: no duplicate to find
            i = (i + 1) & m
        keys[i, 0], keys[i, 1], keys[i, 2] = hi, lo, np.uint64(t)
        vals[i] = rule_vals[s]
    return keys, vals
