"""Longest-prefix-match tables of the FIB: one multibit trie per address family.

A VPP-style "16-8-8 mtrie" in flat numpy arrays (IPv4 strides 16-8-8, IPv6 16 then 8 x 14),
updated in place like DPDK's rte_lpm.  Several FIB tables of one family share one pool of
256-entry groups; the data path indexes tables by a dense *table index*, the control plane by
arbitrary table ids (0, 10, 100, ...).  A /24 IPv4 lookup is two memory accesses.

Data path (numba, callable from other ``@njit`` code)::

    lpm4_lookup(roots, groups, table_index, addr_u32) -> int32        # value or -1
    lpm6_lookup(roots, groups, table_index, hi_u64, lo_u64) -> int32
    lpm4_lookup_batch(roots, groups, table_index, addrs_u32) -> int32[:]
    lpm6_lookup_batch(roots, groups, table_index, his_u64, los_u64) -> int32[:]

Control plane: :class:`Lpm` (add / delete / get / lookup / add_many / routes) and
:func:`load_prefix_file` for the BGP full-table data set.  ``roots`` and ``groups`` may be
reallocated by any update (pool growth, new table): re-read them after updates, and use
``generation`` to notice changes.
"""

from __future__ import annotations

import gzip
import ipaddress
import logging
import os
from collections.abc import Iterator
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network
from pathlib import Path

import numpy as np

from vecroute.fib.host6 import HOST_LIMIT, host6_build
from vecroute.fib.lpm_kernels import (
    GROUP_SIZE,
    MAX_VALUE,
    ROOT_SIZE,
    ST_FREE,
    ST_RULES,
    ST_USED,
    add_rule,
    add_rules,
    delete_rule,
    delete_rules,
    groups_available,
    lpm4_lookup,
    lpm4_lookup_batch,
    lpm6_lookup,
    lpm6_lookup_batch,
    missing_levels,
    parse_prefix_lines,
    rehash,
    rule_get,
)

__all__ = [
    "Lpm",
    "MAX_VALUE",
    "load_prefix_file",
    "lpm4_lookup",
    "lpm4_lookup_batch",
    "lpm6_lookup",
    "lpm6_lookup_batch",
]

log = logging.getLogger(__name__)
Prefix = str | IPv4Network | IPv6Network
Network = IPv4Network | IPv6Network
_M64 = (1 << 64) - 1
_MAX_TABLES = 1 << 24  # the table index shares a key word with the prefix length
_MAX_TABLE_ID = (1 << 32) - 1
_PRESIZE_MIN = 4096  # batches at least this big size the group pool up front
_NO_LOS = np.zeros(1, np.uint64)  # IPv4 batches have no low address half


class Lpm:
    """All FIB tables of one address family: a shared mtrie pool plus an exact rule store.

    Values are load-balance indices, ``0 <= value < 2**22``.  Updates are in place and keep
    every lookup consistent at each single-entry write (groups are filled before they are
    linked, folded into their parent before they are freed).
    """

    def __init__(self, family: int, max_tables: int = _MAX_TABLES) -> None:
        """Create an empty set of tables for IPv4 (``family=4``) or IPv6 (``family=6``);
        at most ``max_tables`` of them (each costs a 256 KiB root)."""
        if family not in (4, 6):
            raise ValueError(f"address family must be 4 or 6, not {family!r}")
        self.family = family
        self.max_tables = min(max_tables, _MAX_TABLES)
        self._bits = 32 if family == 4 else 128
        self._kw = 1 if family == 4 else 3  # uint64 words per rule-store key
        self._max_new = 2 if family == 4 else 14  # groups one add may allocate
        self._roots = np.zeros((0, ROOT_SIZE), np.uint32)
        self._groups = np.empty((64, GROUP_SIZE), np.uint32)
        self._free = np.empty(64, np.int64)
        self._state = np.zeros(4, np.int64)
        self._keys = np.zeros((64, self._kw), np.uint64)
        self._vals = np.full(64, -1, np.int32)
        self._index: dict[int, int] = {}
        self._ids: list[int] = []
        self._counts: list[int] = []
        self.generation = 0
        self._host_version = 0  # bumped by every change of a /128 (IPv6: the host table)
        self._host: tuple[int, np.ndarray, np.ndarray] | None = None
        self._host_full = False  # more /128s than the host table takes (logged once)

    # -- arrays for the data path -------------------------------------------------------------

    @property
    def roots(self) -> np.ndarray:
        """Level-0 arrays, ``uint32[n_tables, 65536]`` (row = table index)."""
        return self._roots

    @property
    def groups(self) -> np.ndarray:
        """The shared group pool, ``uint32[capacity, 256]`` (unused rows are garbage)."""
        return self._groups

    def host_table(self) -> tuple[np.ndarray, np.ndarray]:
        """IPv6: the exact-match table of the /128 rules (fib/host6.py), built again only
        after one of them changed; a new pair of arrays each time, never changed after."""
        if self.family != 6:
            raise ValueError("the host table is IPv6's")
        if self._host is None or self._host[0] != self._host_version:
            seed = np.frombuffer(os.urandom(8), dtype=np.uint64)[0]
            keys, vals = host6_build(self._keys, self._vals, HOST_LIMIT, seed)
            full = vals.shape[0] == 1 and self._any_host()  # empty, yet /128s
            if full and not self._host_full:
                log.warning("more than %d IPv6 /128 routes: local SIDs are looked up in "
                            "the trie alone (no exact-match table)", HOST_LIMIT)
            self._host_full = full
            self._host = (self._host_version, keys, vals)
        return self._host[1], self._host[2]

    def _any_host(self) -> bool:
        live = self._vals >= 0
        return bool(((self._keys[live, 2] & np.uint64(0xFF)) == np.uint64(128)).any())

    @property
    def nbytes(self) -> int:
        """Bytes held by the trie arrays and the rule store (allocated capacity)."""
        return int(
            self._roots.nbytes
            + self._groups.nbytes
            + self._free.nbytes
            + self._keys.nbytes
            + self._vals.nbytes
        )

    def stats(self) -> dict[str, int]:
        """Sizes for introspection (``ctl show fib``-style output and benchmarks)."""
        used = int(self._state[ST_USED])
        nfree = int(self._state[ST_FREE])
        return {
            "tables": len(self._ids),
            "rules": int(self._state[ST_RULES]),
            "groups_in_use": used - nfree,
            "groups_free_list": nfree,
            "groups_capacity": int(self._groups.shape[0]),
            "groups_bytes_in_use": (used - nfree) * GROUP_SIZE * 4,
            "roots_bytes": int(self._roots.nbytes),
            "rule_store_bytes": int(self._keys.nbytes + self._vals.nbytes),
            "rule_store_slots": int(self._vals.shape[0]),
            "nbytes": self.nbytes,
        }

    # -- tables ---------------------------------------------------------------------------------

    @property
    def table_ids(self) -> list[int]:
        """Table ids in table-index order."""
        return list(self._ids)

    def table_index(self, table_id: int, create: bool = False) -> int:
        """Dense index of ``table_id`` for the data path; -1 if missing and not ``create``."""
        idx = self._index.get(table_id)
        if idx is not None:
            return idx
        _check_table_id(table_id)
        if not create:
            return -1
        if len(self._ids) >= self.max_tables:
            raise ValueError(f"too many tables: cannot create table {table_id} "
                             f"(at most {self.max_tables})")
        idx = len(self._ids)
        self._roots = np.concatenate([self._roots, np.zeros((1, ROOT_SIZE), np.uint32)])
        self._index[table_id] = idx
        self._ids.append(table_id)
        self._counts.append(0)
        self.generation += 1
        return idx

    def count(self, table_id: int) -> int:
        """Number of rules in one table (0 if it does not exist)."""
        idx = self.table_index(table_id)
        return 0 if idx < 0 else self._counts[idx]

    def __len__(self) -> int:
        """Number of rules over all tables."""
        return int(self._state[ST_RULES])

    # -- single-rule API ------------------------------------------------------------------------

    def add(self, table_id: int, prefix: Prefix, value: int) -> None:
        """Add ``prefix -> value`` (host bits are masked); replaces the value if present."""
        hi, lo, length = self._parse_prefix(prefix)
        value = _check_value(value)
        t = self.table_index(table_id, create=True)
        self._reserve(1)
        if self._groups_available() < self._max_new:
            self._grow_groups(self._max_new)
        new = add_rule(
            self._roots,
            self._groups,
            self._free,
            self._state,
            self._keys,
            self._vals,
            t,
            np.uint64(hi),
            np.uint64(lo),
            length,
            value,
            self._kw,
        )
        if new:
            self._counts[t] += 1
        self.generation += 1
        self._host_version += length == 128

    def delete(self, table_id: int, prefix: Prefix) -> bool:
        """Delete the exact rule ``prefix``; False if it was not present."""
        hi, lo, length = self._parse_prefix(prefix)
        t = self.table_index(table_id)
        if t < 0:
            return False
        found = delete_rule(
            self._roots,
            self._groups,
            self._free,
            self._state,
            self._keys,
            self._vals,
            t,
            np.uint64(hi),
            np.uint64(lo),
            length,
            self._kw,
        )
        if found:
            self._counts[t] -= 1
            self.generation += 1
            self._host_version += length == 128
        return bool(found)

    def get(self, table_id: int, prefix: Prefix) -> int | None:
        """Value of the exact rule ``prefix``, or None."""
        hi, lo, length = self._parse_prefix(prefix)
        t = self.table_index(table_id)
        if t < 0:
            return None
        v = int(rule_get(self._keys, self._vals, t, np.uint64(hi), np.uint64(lo), length, self._kw))
        return None if v < 0 else v

    def lookup(self, table_id: int, addr: str | int | IPv4Address | IPv6Address) -> int:
        """Longest-prefix match of one address (slow-path helper); -1 on a miss."""
        a = self._parse_addr(addr)
        t = self.table_index(table_id)
        if t < 0:
            return -1
        if self.family == 4:
            return int(lpm4_lookup(self._roots, self._groups, t, np.uint32(a)))
        return int(
            lpm6_lookup(self._roots, self._groups, t, np.uint64(a >> 64), np.uint64(a & _M64))
        )

    # -- bulk API -------------------------------------------------------------------------------

    def add_many(self, table_id: int, addrs, lengths, values) -> None:
        """Add many rules at once (the full IPv4 table: about 0.5 s).

        ``addrs``: IPv4 ``uint32`` array, or for IPv6 a ``(his, los)`` pair of ``uint64`` arrays
        (the first and last 64 address bits).  ``lengths``, ``values``: integer arrays of the
        same size.  Host bits are masked; a prefix given twice keeps the last value.
        """
        a_hi, a_lo = self._addr_arrays(addrs)
        lens = self._check_lengths(lengths, a_hi.shape[0])
        vals = np.asarray(values)
        if vals.shape != lens.shape:
            raise ValueError(f"values has shape {vals.shape}, expected {lens.shape}")
        if vals.size and not np.issubdtype(vals.dtype, np.integer):
            raise ValueError(f"values must be integers, not {vals.dtype}")
        vals = vals.astype(np.int64, copy=False)
        if vals.size and (int(vals.min()) < 0 or int(vals.max()) >= MAX_VALUE):
            bad = vals[(vals < 0) | (vals >= MAX_VALUE)][0]
            raise ValueError(f"value {int(bad)} out of range 0..{MAX_VALUE - 1}")
        t = self.table_index(table_id, create=True)
        order = np.argsort(lens, kind="stable")  # short prefixes first: no subtree rewrites
        self._reserve(lens.shape[0])
        if lens.shape[0] >= _PRESIZE_MIN:
            need = self._groups_bound(t, a_hi, a_lo, lens)
            if self._groups_available() < need:
                self._grow_groups(need)  # one copy instead of a series of doublings
        start, n = 0, lens.shape[0]
        try:
            while start < n:
                start, new = add_rules(
                    self._roots,
                    self._groups,
                    self._free,
                    self._state,
                    self._keys,
                    self._vals,
                    t,
                    a_hi,
                    a_lo,
                    lens,
                    vals,
                    order,
                    start,
                    self._kw,
                    self._max_new,
                )
                self._counts[t] += int(new)
                if start < n:
                    self._reserve(n - start)
                    if self._groups_available() < self._max_new:
                        self._grow_groups(self._max_new)
        finally:  # even when a pass failed half-way: what it did is in the rule store
            self.generation += 1
            self._host_version += bool((lens == 128).any())

    def delete_many(self, table_id: int, addrs, lengths) -> int:
        """Delete many rules (same array forms as :meth:`add_many`); returns how many existed."""
        a_hi, a_lo = self._addr_arrays(addrs)
        lens = self._check_lengths(lengths, a_hi.shape[0])
        t = self.table_index(table_id)
        if t < 0:
            return 0
        n = int(
            delete_rules(
                self._roots,
                self._groups,
                self._free,
                self._state,
                self._keys,
                self._vals,
                t,
                a_hi,
                a_lo,
                lens,
                self._kw,
            )
        )
        self._counts[t] -= n
        if n:
            self.generation += 1
            self._host_version += bool((lens == 128).any())
        return n

    def lookup_many(self, table_id: int, addrs) -> np.ndarray:
        """Batch lookup (``uint32`` array, or ``(his, los)`` for IPv6) -> ``int32`` values."""
        a_hi, a_lo = self._addr_arrays(addrs)
        t = self.table_index(table_id)
        if t < 0:
            return np.full(a_hi.shape[0], -1, np.int32)
        if self.family == 4:
            return lpm4_lookup_batch(self._roots, self._groups, t, a_hi)
        return lpm6_lookup_batch(self._roots, self._groups, t, a_hi, a_lo)

    def routes(self, table_id: int) -> Iterator[tuple[Network, int]]:
        """The rules of one table as ``(network, value)``, ordered by address then length."""
        t = self.table_index(table_id)
        if t < 0:
            return
        live = self._vals >= 0
        keys = self._keys[live]
        vals = self._vals[live]
        if self.family == 4:
            meta = keys[:, 0] & np.uint64(0xFFFFFFFF)
            sel = (meta >> np.uint64(8)) == np.uint64(t)
            addrs = keys[sel, 0] >> np.uint64(32)
            lens = meta[sel] & np.uint64(0xFF)
            vals = vals[sel]
            for i in np.lexsort((lens, addrs)):
                yield IPv4Network((int(addrs[i]), int(lens[i]))), int(vals[i])
            return
        sel = (keys[:, 2] >> np.uint64(8)) == np.uint64(t)
        his, los = keys[sel, 0], keys[sel, 1]
        lens = keys[sel, 2] & np.uint64(0xFF)
        vals = vals[sel]
        for i in np.lexsort((lens, los, his)):
            a = (int(his[i]) << 64) | int(los[i])
            yield IPv6Network((a, int(lens[i]))), int(vals[i])

    # -- internals ------------------------------------------------------------------------------

    def _parse_prefix(self, prefix: Prefix) -> tuple[int, int, int]:
        """-> (hi, lo, length) with the address as a 128-bit pair (IPv4 in the top 32 bits)."""
        if isinstance(prefix, str):
            try:
                net = ipaddress.ip_network(prefix.strip(), strict=False)
            except ValueError:
                raise ValueError(f"bad IPv{self.family} prefix {prefix!r}") from None
        elif isinstance(prefix, IPv4Network | IPv6Network):
            net = prefix
        else:
            raise ValueError(f"bad IPv{self.family} prefix {prefix!r}: not a string or network")
        if net.version != self.family:
            raise ValueError(f"{prefix!r} is not an IPv{self.family} prefix")
        a = int(net.network_address)
        if self.family == 4:
            return a << 32, 0, net.prefixlen
        return a >> 64, a & _M64, net.prefixlen

    def _parse_addr(self, addr: str | int | IPv4Address | IPv6Address) -> int:
        if isinstance(addr, int | np.integer) and not isinstance(addr, bool):
            a = int(addr)
            if not 0 <= a < (1 << self._bits):
                raise ValueError(f"IPv{self.family} address {addr!r} out of range")
            return a
        if isinstance(addr, str):
            try:
                ip = ipaddress.ip_address(addr.strip())
            except ValueError:
                raise ValueError(f"bad IPv{self.family} address {addr!r}") from None
        elif isinstance(addr, IPv4Address | IPv6Address):
            ip = addr
        else:
            raise ValueError(f"bad IPv{self.family} address {addr!r}")
        if ip.version != self.family:
            raise ValueError(f"{addr!r} is not an IPv{self.family} address")
        return int(ip)

    def _addr_arrays(self, addrs) -> tuple[np.ndarray, np.ndarray]:
        """Array form -> contiguous ``(uint32 addrs, unused)`` or ``(uint64 his, uint64 los)``."""
        if self.family == 4:
            a = np.asarray(addrs)
            if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
                raise ValueError(f"IPv4 addresses must be a 1-D integer array, not {a.dtype}")
            if a.dtype != np.uint32 and a.size and (int(a.min()) < 0 or int(a.max()) >> 32):
                raise ValueError("IPv4 address array has values outside 0..2**32-1")
            return np.ascontiguousarray(a, dtype=np.uint32), _NO_LOS
        if not (isinstance(addrs, tuple | list) and len(addrs) == 2):
            raise ValueError("IPv6 addresses must be a (his, los) pair of uint64 arrays")
        his = np.ascontiguousarray(addrs[0], dtype=np.uint64)
        los = np.ascontiguousarray(addrs[1], dtype=np.uint64)
        if his.ndim != 1 or his.shape != los.shape:
            raise ValueError(f"IPv6 his/los shapes differ: {his.shape} vs {los.shape}")
        return his, los

    def _check_lengths(self, lengths, n: int) -> np.ndarray:
        lens = np.asarray(lengths)
        if lens.shape != (n,):
            raise ValueError(f"lengths has shape {lens.shape}, expected ({n},)")
        if n and not np.issubdtype(lens.dtype, np.integer):
            raise ValueError(f"lengths must be integers, not {lens.dtype}")
        if n and (int(lens.min()) < 0 or int(lens.max()) > self._bits):
            bad = lens[(lens < 0) | (lens > self._bits)][0]
            raise ValueError(f"prefix length {int(bad)} out of range 0..{self._bits}")
        return np.ascontiguousarray(lens, dtype=np.uint8)

    def _groups_bound(self, t: int, a_hi: np.ndarray, a_lo: np.ndarray, lens: np.ndarray) -> int:
        """Groups a batch may create: distinct missing parents per trie level (exact bound)."""
        missing = missing_levels(self._roots, self._groups, t, a_hi, a_lo, lens, self._kw)
        total = 0
        for k in range(1, 3 if self.family == 4 else 15):
            off = 16 + 8 * (k - 1)  # depth where a level-k group starts
            sel = (lens > off) & (missing <= k)
            if not sel.any():
                continue
            if self.family == 4:
                total += np.unique(a_hi[sel] >> np.uint32(32 - off)).size
            elif off <= 64:
                total += np.unique(a_hi[sel] >> np.uint64(64 - off)).size
            else:
                pairs = np.stack([a_hi[sel], a_lo[sel] >> np.uint64(128 - off)], axis=1)
                total += np.unique(pairs, axis=0).shape[0]
        return total

    def _groups_available(self) -> int:
        return int(groups_available(self._groups, self._state))

    def _grow_groups(self, need: int) -> None:
        used = int(self._state[ST_USED])
        nfree = int(self._state[ST_FREE])
        cap = max(2 * self._groups.shape[0], used + need + 64)
        groups = np.empty((cap, GROUP_SIZE), np.uint32)  # untouched rows cost no RSS
        groups[:used] = self._groups[:used]
        free = np.empty(cap, np.int64)
        free[:nfree] = self._free[:nfree]
        self._groups, self._free = groups, free

    def _reserve(self, n_new: int) -> None:
        """Grow the rule store so that ``n_new`` more rules keep the load under 3/4."""
        want = int(self._state[ST_RULES]) + n_new
        cap = self._vals.shape[0]
        if want * 4 <= cap * 3:
            return
        while want * 4 > cap * 3:
            cap *= 2
        self._keys, self._vals = rehash(self._keys, self._vals, cap)


def _check_table_id(table_id: int) -> None:
    if (
        not isinstance(table_id, int | np.integer)
        or isinstance(table_id, bool)
        or not 0 <= table_id <= _MAX_TABLE_ID
    ):
        raise ValueError(f"bad table id {table_id!r}: expected an integer 0..{_MAX_TABLE_ID}")


def _check_value(value: int) -> int:
    if (
        not isinstance(value, int | np.integer)
        or isinstance(value, bool)
        or not 0 <= value < MAX_VALUE
    ):
        raise ValueError(f"value {value!r} out of range 0..{MAX_VALUE - 1}")
    return int(value)


def load_prefix_file(
    path: str | Path,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Read a prefix list (one ``addr/len`` a line, optionally gzipped) such as the BGP table.

    Returns ``(v4_addrs uint32, v4_lens uint8, v6_his uint64, v6_los uint64, v6_lens uint8)``
    in file order, host bits masked.  Blank lines and ``#`` comments are skipped; a line
    without ``/len`` is a host route; a bad line raises ValueError naming the file and line.
    A compiled parser reads the full table in a fraction of a second; files with rarer
    forms (embedded IPv4 in IPv6, netmasks) go through ``ipaddress`` line by line.
    """
    path = Path(path)
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    bad, a4, l4, h6, o6, l6 = parse_prefix_lines(np.frombuffer(data, np.uint8))
    if bad == 0:
        return a4, l4, h6, o6, l6
    return _parse_prefix_lines_py(data, path)


def _parse_prefix_lines_py(
    data: bytes, path: Path
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Strict, slow twin of ``parse_prefix_lines`` (every form ``ipaddress`` accepts)."""
    v4: list[tuple[int, int]] = []
    v6: list[tuple[int, int]] = []
    for lineno, raw in enumerate(data.split(b"\n"), 1):
        line = raw.strip()
        if not line or line.startswith(b"#"):
            continue
        try:
            net = ipaddress.ip_network(line.decode("ascii"), strict=False)
        except (ValueError, UnicodeDecodeError):
            shown = raw.decode("ascii", errors="replace").strip()
            raise ValueError(f"{path}:{lineno}: bad prefix {shown!r}") from None
        (v4 if net.version == 4 else v6).append((int(net.network_address), net.prefixlen))
    a6 = [a for a, _ in v6]
    return (
        np.array([a for a, _ in v4], np.uint32),
        np.array([n for _, n in v4], np.uint8),
        np.array([a >> 64 for a in a6], np.uint64),
        np.array([a & _M64 for a in a6], np.uint64),
        np.array([n for _, n in v6], np.uint8),
    )
