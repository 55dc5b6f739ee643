"""Firewall lookup tables: addr (IPv4 + IPv6 prefixes, longest match), number, iface.

Rules name tables (``from table(bad)``, ``recv table(uplinks)``, ``lookup dst-port web``);
the compiled rules refer to a table by its *slot* (a small integer fixed when the table is
created), and the data path reads the slot's row of ``t_idx`` to find the backing store:

- ``t_idx int32[n_slots, T_COLS]``: type, backing id, LPM table index (IPv4), LPM table
  index (IPv6).
- addr tables live in two shared :class:`vecroute.fib.lpm.Lpm` tries (one per family): a
  lookup is 2-3 memory accesses whatever the table size (DIR-16-8-8), the value is the
  entry's value (0..2**22-1, default 0).
- number tables share one open-addressing hash ``nt int64[cap, 3]`` of (backing, key,
  value) rows, ``backing == -1`` marks a free row (linear probing, backward-shift deletion).
- iface tables are rows of ``if_tab int64[n, n_interfaces]``: value per interface index,
  -1 where the interface is not in the table.

Consistency for the data path: every change is either one in-place write that is atomic per
entry (LPM updates are ordered so that each single write leaves a valid trie; a hash insert
writes the value before the key) or a reference swap: ``swap`` exchanges two rows of
``t_idx``. The arrays may be *reallocated* by a change (pool growth, rehash), so the data path
must re-read them after any change: :attr:`FwTables.generation` counts changes.

Bulk loading is vectorised: a compiled parser reads "KEY [VALUE]" lines (``#`` comments,
blank lines) straight from the file bytes, then one ``Lpm.add_many`` per family; a
1M-line blocklist loads in about a second.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from numba import njit

from vecroute.fib.lpm import Lpm
from vecroute.fib.lpm_kernels import EXT, INDEX_MASK, VALID, VALUE_MASK
from vecroute.firewall.rules import MAX_TABLE_VALUE, TABLE_NAME_RE

TABLE_TYPES = ("addr", "number", "iface")
TT_ADDR = 0
TT_NUMBER = 1
TT_IFACE = 2

# t_idx columns
TI_TYPE = 0
TI_BACKING = 1
TI_LPM4 = 2
TI_LPM6 = 3
T_COLS = 4

# nt columns
NT_BACKING = 0
NT_KEY = 1
NT_VALUE = 2

MAX_NUMBER_KEY = (1 << 32) - 1
MAX_TABLES = 128  # tables of one firewall (an addr table holds two 256 KiB trie roots)
MAX_TABLE_FILE = 256 << 20  # bytes in one table file (a full BGP table is about 20 MB)
_M64 = (1 << 64) - 1


class TableError(ValueError):
    """A bad table operation or entry (one line: where, what)."""


# ---------------------------------------------------------------------------------------------
# data path
# ---------------------------------------------------------------------------------------------


@njit(cache=True, inline="always")
def lpm4_get(roots, groups, t, a):
    """``vecroute.fib.lpm.lpm4_lookup`` inlined into the caller (same trie layout, see
    ``lpm_kernels``): a call that passes the two arrays costs more than the lookup."""
    e = roots[t, a >> np.uint32(16)]
    if e & EXT:
        e = groups[e & INDEX_MASK, (a >> np.uint32(8)) & np.uint32(255)]
        if e & EXT:
            e = groups[e & INDEX_MASK, a & np.uint32(255)]
    return np.int64(e & VALUE_MASK) if e & VALID else np.int64(-1)


@njit(cache=True, inline="always")
def lpm6_get(roots, groups, t, hi, lo):
    """``vecroute.fib.lpm.lpm6_lookup`` inlined into the caller."""
    e = roots[t, hi >> np.uint64(48)]
    w = hi
    sh = np.int64(40)
    while e & EXT:
        if sh < 0:
            w = lo
            sh = np.int64(56)
        e = groups[e & INDEX_MASK, (w >> np.uint64(sh)) & np.uint64(255)]
        sh -= 8
    return np.int64(e & VALUE_MASK) if e & VALID else np.int64(-1)


@njit(cache=True, inline="always")
def table_addr_lookup(t4_roots, t4_groups, t6_roots, t6_groups, t_idx, slot, family, hi, lo):
    """Longest-match value of an address in addr table ``slot``; -1 when absent.
    IPv4: the address is ``lo`` (0..2**32-1); IPv6: ``hi``/``lo`` are the two 64-bit halves."""
    if family == 4:
        t = t_idx[slot, TI_LPM4]
        if t < 0:
            return np.int64(-1)
        return lpm4_get(t4_roots, t4_groups, t, np.uint32(lo & 0xFFFFFFFF))
    t = t_idx[slot, TI_LPM6]
    if t < 0:
        return np.int64(-1)
    return lpm6_get(t6_roots, t6_groups, t, np.uint64(hi), np.uint64(lo))


@njit(cache=True, inline="always")
def _nt_home(backing, key, mask):
    z = np.uint64(backing) * np.uint64(0x9E3779B97F4A7C15) ^ np.uint64(key)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return np.int64(z & np.uint64(mask))


@njit(cache=True, nogil=True)
def table_number_lookup(nt, t_idx, slot, key):
    """Value of ``key`` in number table ``slot``; -1 when absent."""
    if key < 0:
        return np.int64(-1)
    b = t_idx[slot, TI_BACKING]
    mask = nt.shape[0] - 1
    j = _nt_home(b, key, mask)
    while True:
        nb = nt[j, NT_BACKING]
        if nb < 0:
            return np.int64(-1)
        if nb == b and nt[j, NT_KEY] == key:
            return nt[j, NT_VALUE]
        j = (j + 1) & mask


@njit(cache=True, inline="always")
def table_iface_lookup(if_tab, t_idx, slot, ifindex):
    """Value of interface ``ifindex`` in iface table ``slot``; -1 when absent."""
    if ifindex < 0 or ifindex >= if_tab.shape[1]:
        return np.int64(-1)
    return if_tab[t_idx[slot, TI_BACKING], ifindex]


# ---------------------------------------------------------------------------------------------
# number-table hash updates (control plane, compiled)
# ---------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _nt_put(nt, b, keys, vals):
    """Insert or update; returns how many keys were new. Caller keeps the load <= 1/2."""
    mask = nt.shape[0] - 1
    new = 0
    for i in range(keys.shape[0]):
        k = keys[i]
        j = _nt_home(b, k, mask)
        while True:
            nb = nt[j, NT_BACKING]
            if nb < 0:
                nt[j, NT_VALUE] = vals[i]
                nt[j, NT_KEY] = k
                nt[j, NT_BACKING] = b  # written last: the entry appears whole
                new += 1
                break
            if nb == b and nt[j, NT_KEY] == k:
                nt[j, NT_VALUE] = vals[i]
                break
            j = (j + 1) & mask
    return new


@njit(cache=True, nogil=True)
def _nt_remove_at(nt, j):
    mask = nt.shape[0] - 1
    while True:
        nt[j, NT_BACKING] = -1
        k = j
        while True:
            k = (k + 1) & mask
            if nt[k, NT_BACKING] < 0:
                return
            h = _nt_home(nt[k, NT_BACKING], nt[k, NT_KEY], mask)
            if j <= k:
                if j < h <= k:
                    continue
            elif h > j or h <= k:
                continue
            nt[j, NT_KEY] = nt[k, NT_KEY]
            nt[j, NT_VALUE] = nt[k, NT_VALUE]
            nt[j, NT_BACKING] = nt[k, NT_BACKING]
            j = k
            break


@njit(cache=True, nogil=True)
def _nt_delete(nt, b, keys):
    mask = nt.shape[0] - 1
    gone = 0
    for i in range(keys.shape[0]):
        k = keys[i]
        j = _nt_home(b, k, mask)
        while True:
            nb = nt[j, NT_BACKING]
            if nb < 0:
                break
            if nb == b and nt[j, NT_KEY] == k:
                _nt_remove_at(nt, j)
                gone += 1
                break
            j = (j + 1) & mask
    return gone


@njit(cache=True, nogil=True)
def _nt_rehash(nt, cap):
    out = np.full((cap, 3), -1, np.int64)
    mask = cap - 1
    for i in range(nt.shape[0]):
        b = nt[i, NT_BACKING]
        if b < 0:
            continue
        j = _nt_home(b, nt[i, NT_KEY], mask)
        while out[j, NT_BACKING] >= 0:
            j = (j + 1) & mask
        out[j, 0] = b
        out[j, 1] = nt[i, 1]
        out[j, 2] = nt[i, 2]
    return out


# ---------------------------------------------------------------------------------------------
# vectorised "KEY [VALUE]" parsing
# ---------------------------------------------------------------------------------------------


@njit(cache=True, inline="always")
def _space(c):
    return c == 32 or c == 9 or c == 13


@njit(cache=True, nogil=True)
def _hexv(c):
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    if 65 <= c <= 70:
        return c - 55
    return -1


@njit(cache=True, nogil=True)
def _p4(buf, s, e):
    """Dotted quad in buf[s:e] -> address, or -1."""
    a = np.int64(0)
    parts = 0
    v = np.int64(-1)
    for i in range(s, e):
        c = buf[i]
        if c == 46:
            if v < 0 or parts == 3:
                return np.int64(-1)
            a = (a << 8) | v
            parts += 1
            v = -1
        elif 48 <= c <= 57:
            v = (0 if v < 0 else v * 10) + (c - 48)
            if v > 255:
                return np.int64(-1)
        else:
            return np.int64(-1)
    if v < 0 or parts != 3:
        return np.int64(-1)
    return (a << 8) | v


@njit(cache=True, nogil=True)
def _p6(buf, s, e, g):
    """IPv6 text in buf[s:e] -> the 8 groups in g; False on anything unusual."""
    n = 0
    gap = -1
    i = s
    if e - s >= 2 and buf[s] == 58 and buf[s + 1] == 58:
        gap = 0
        i = s + 2
        if i == e:
            for k in range(8):
                g[k] = 0
            return True
    while i < e:
        v = 0
        d = 0
        while i < e and d < 5:
            h = _hexv(buf[i])
            if h < 0:
                break
            v = v * 16 + h
            d += 1
            i += 1
        if d == 0 or d > 4 or n >= 8:
            return False
        g[n] = v
        n += 1
        if i == e:
            break
        if buf[i] != 58:
            return False
        i += 1
        if i < e and buf[i] == 58:
            if gap >= 0:
                return False
            gap = n
            i += 1
            if i == e:
                break
        elif i == e:
            return False
    if gap < 0:
        return n == 8
    if n >= 8:
        return False
    move = n - gap
    for k in range(move):
        g[7 - k] = g[n - 1 - k]
    for k in range(gap, 8 - move):
        g[k] = 0
    return True


@njit(cache=True, nogil=True)
def parse_addr_lines(buf):
    """Parse "PREFIX [VALUE]" lines. Returns (bad_line or 0, v4 addr u32, v4 len u8,
    v4 value i64, v6 hi u64, v6 lo u64, v6 len u8, v6 value i64). ``bad_line`` is the 1-based
    number of the first line the fast parser did not accept (the caller retries it slowly)."""
    n = buf.shape[0]
    cap = 1
    for i in range(n):
        if buf[i] == 10:
            cap += 1
    a4 = np.empty(cap, np.uint32)
    l4 = np.empty(cap, np.uint8)
    v4 = np.empty(cap, np.int64)
    h6 = np.empty(cap, np.uint64)
    o6 = np.empty(cap, np.uint64)
    l6 = np.empty(cap, np.uint8)
    v6 = np.empty(cap, np.int64)
    g = np.zeros(8, np.int64)
    n4 = 0
    n6 = 0
    line = 0
    i = 0
    while i < n:
        e = i
        while e < n and buf[e] != 10:
            e += 1
        line += 1
        t = i
        while t < e and buf[t] != 35:  # '#'
            t += 1
        s = i
        while s < t and _space(buf[s]):
            s += 1
        while t > s and _space(buf[t - 1]):
            t -= 1
        nxt = e + 1
        if s == t:
            i = nxt
            continue
        ke = s
        while ke < t and not _space(buf[ke]):
            ke += 1
        vs = ke
        while vs < t and _space(buf[vs]):
            vs += 1
        value = np.int64(0)
        if vs < t:
            if t - vs > 9:
                return line, a4[:0], l4[:0], v4[:0], h6[:0], o6[:0], l6[:0], v6[:0]
            for k in range(vs, t):
                c = buf[k]
                if c < 48 or c > 57:
                    return line, a4[:0], l4[:0], v4[:0], h6[:0], o6[:0], l6[:0], v6[:0]
                value = value * 10 + (c - 48)
            if value > MAX_TABLE_VALUE:
                return line, a4[:0], l4[:0], v4[:0], h6[:0], o6[:0], l6[:0], v6[:0]
        sl = s
        while sl < ke and buf[sl] != 47:  # '/'
            sl += 1
        is6 = False
        for k in range(s, sl):
            if buf[k] == 58:
                is6 = True
                break
        plen = -1
        if sl < ke:
            if ke - sl < 2 or ke - sl > 4:
                return line, a4[:0], l4[:0], v4[:0], h6[:0], o6[:0], l6[:0], v6[:0]
            plen = 0
            for k in range(sl + 1, ke):
                c = buf[k]
                if c < 48 or c > 57:
                    return line, a4[:0], l4[:0], v4[:0], h6[:0], o6[:0], l6[:0], v6[:0]
                plen = plen * 10 + (c - 48)
        if not is6:
            a = _p4(buf, s, sl)
            if a < 0 or plen > 32:
                return line, a4[:0], l4[:0], v4[:0], h6[:0], o6[:0], l6[:0], v6[:0]
            if plen < 0:
                plen = 32
            if plen < 32:
                a &= ~((np.int64(1) << (32 - plen)) - 1) & 0xFFFFFFFF
            a4[n4] = np.uint32(a)
            l4[n4] = plen
            v4[n4] = value
            n4 += 1
        else:
            if not _p6(buf, s, sl, g) or plen > 128:
                return line, a4[:0], l4[:0], v4[:0], h6[:0], o6[:0], l6[:0], v6[:0]
            if plen < 0:
                plen = 128
            hi = np.uint64(0)
            lo = np.uint64(0)
            for k in range(4):
                hi = (hi << np.uint64(16)) | np.uint64(g[k])
                lo = (lo << np.uint64(16)) | np.uint64(g[4 + k])
            if plen <= 64:
                lo = np.uint64(0)
                if plen == 0:
                    hi = np.uint64(0)
                elif plen < 64:
                    hi &= ~((np.uint64(1) << np.uint64(64 - plen)) - np.uint64(1))
            elif plen < 128:
                lo &= ~((np.uint64(1) << np.uint64(128 - plen)) - np.uint64(1))
            h6[n6] = hi
            o6[n6] = lo
            l6[n6] = plen
            v6[n6] = value
            n6 += 1
        i = nxt
    return 0, a4[:n4], l4[:n4], v4[:n4], h6[:n6], o6[:n6], l6[:n6], v6[:n6]


class AddrEntries:
    """Parsed addr-table entries, per family, in input order."""

    def __init__(self, a4, l4, v4, h6, o6, l6, v6) -> None:
        self.a4, self.l4, self.v4 = a4, l4, v4
        self.h6, self.o6, self.l6, self.v6 = h6, o6, l6, v6

    def __len__(self) -> int:
        return int(self.a4.shape[0] + self.h6.shape[0])


class _BadEntry(ValueError):
    """An entry that does not parse: the message quoting it, and ``plain`` without it (for
    files: an error never echoes what a file holds)."""

    def __init__(self, quoted: str, plain: str | None = None) -> None:
        super().__init__(quoted)
        self.plain = plain or quoted


def _split_key_value(line: str) -> tuple[str, str | None]:
    parts = line.split()
    if len(parts) == 1:
        return parts[0], None
    if len(parts) == 2:
        return parts[0], parts[1]
    raise _BadEntry("expected KEY [VALUE]")


def _uint(text: str, hi: int) -> int | None:
    """int(text) for ASCII digits 0..hi, else None (str.isdigit() accepts "²", which
    int() refuses; thousands of digits are refused before int() spends time on them)."""
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(hi)):
        return None
    v = int(text)
    return v if v <= hi else None


def _value(text: str | None) -> int:
    if text is None:
        return 0
    v = _uint(text, MAX_TABLE_VALUE)
    if v is None:
        raise _BadEntry(f"value {text!r} is not an integer 0..{MAX_TABLE_VALUE}",
                        f"value is not an integer 0..{MAX_TABLE_VALUE}")
    return v


def _strip(line: str) -> str:
    return line.split("#", 1)[0].strip()


def _entry_error(place: str, line: str, e: ValueError, quote: bool) -> TableError:
    if quote:
        return TableError(f"{place}: {line!r}: {e}")
    return TableError(f"{place}: {getattr(e, 'plain', None) or 'bad entry'}")


def parse_addr_entries(
    data: bytes | str, where: str, line_names: Sequence[str] | None = None, quote: bool = True
) -> AddrEntries:
    """Parse addr-table lines "PREFIX [VALUE]" (vectorised; exotic forms via ``ipaddress``).
    Errors name ``where`` and the line (or ``line_names[k]`` when given), and quote the
    line only with ``quote`` (not for files)."""
    if isinstance(data, str):
        data = data.encode("utf-8", errors="replace")
    bad, *arrays = parse_addr_lines(np.frombuffer(data, np.uint8))
    if bad == 0:
        return AddrEntries(*arrays)
    v4: list[tuple[int, int, int]] = []
    v6: list[tuple[int, int, int]] = []
    for k, raw in enumerate(data.decode("utf-8", errors="replace").split("\n")):
        line = _strip(raw)
        if not line:
            continue
        place = line_names[k] if line_names else f"{where}:{k + 1}"
        try:
            key, val = _split_key_value(line)
            try:
                net = ipaddress.ip_network(key, strict=False)
            except ValueError:
                raise _BadEntry("not an address/prefix") from None
            if "%" in key:  # a scope id (fe80::1%eth0) is no table key
                raise _BadEntry("not an address/prefix")
            value = _value(val)
        except ValueError as e:
            raise _entry_error(place, line, e, quote) from None
        (v4 if net.version == 4 else v6).append((int(net.network_address), net.prefixlen, value))
    return AddrEntries(
        np.array([a for a, _, _ in v4], np.uint32),
        np.array([n for _, n, _ in v4], np.uint8),
        np.array([v for _, _, v in v4], np.int64),
        np.array([a >> 64 for a, _, _ in v6], np.uint64),
        np.array([a & _M64 for a, _, _ in v6], np.uint64),
        np.array([n for _, n, _ in v6], np.uint8),
        np.array([v for _, _, v in v6], np.int64),
    )


def parse_number_entries(
    lines: Iterable[str], where: str, line_names: Sequence[str] | None = None,
    quote: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """ "NUMBER [VALUE]" lines -> (keys int64, values int64)."""
    keys, vals = [], []
    for k, raw in enumerate(lines):
        line = _strip(raw)
        if not line:
            continue
        place = line_names[k] if line_names else f"{where}:{k + 1}"
        try:
            key, val = _split_key_value(line)
            n = _uint(key, MAX_NUMBER_KEY)
            if n is None:
                raise _BadEntry(f"key {key!r} is not an integer 0..{MAX_NUMBER_KEY}",
                                f"key is not an integer 0..{MAX_NUMBER_KEY}")
            keys.append(n)
            vals.append(_value(val))
        except ValueError as e:
            raise _entry_error(place, line, e, quote) from None
    return np.array(keys, np.int64), np.array(vals, np.int64)


def parse_iface_entries(
    lines: Iterable[str], where: str, line_names: Sequence[str] | None = None,
    quote: bool = True,
) -> list[tuple[str, int]]:
    """ "IFNAME [VALUE]" lines -> [(name, value)]."""
    out = []
    for k, raw in enumerate(lines):
        line = _strip(raw)
        if not line:
            continue
        place = line_names[k] if line_names else f"{where}:{k + 1}"
        try:
            key, val = _split_key_value(line)
            if len(key) > 15 or "/" in key:
                raise _BadEntry(f"{key!r} is not an interface name", "not an interface name")
            out.append((key, _value(val)))
        except ValueError as e:
            raise _entry_error(place, line, e, quote) from None
    return out


# ---------------------------------------------------------------------------------------------
# the tables of one firewall
# ---------------------------------------------------------------------------------------------


def _v4_keys(a: np.ndarray, ln: np.ndarray) -> np.ndarray:
    return (a.astype(np.uint64) << np.uint64(8)) | ln.astype(np.uint64)


class _AddrStore:
    """The exact entries of one addr backing table (for list/flush/swap), kept sorted."""

    def __init__(self) -> None:
        self.k4 = np.zeros(0, np.uint64)  # addr << 8 | len
        self.v4 = np.zeros(0, np.int64)
        self.k6 = np.zeros((0, 3), np.uint64)  # hi, lo, len
        self.v6 = np.zeros(0, np.int64)

    def __len__(self) -> int:
        return int(self.k4.shape[0] + self.k6.shape[0])

    def add(self, e: AddrEntries) -> None:
        if e.a4.size:
            k = np.concatenate([self.k4, _v4_keys(e.a4, e.l4)])
            v = np.concatenate([self.v4, e.v4])
            # last value wins: unique over the reversed order keeps the last occurrence
            uk, idx = np.unique(k[::-1], return_index=True)
            self.k4, self.v4 = uk, v[::-1][idx]
        if e.h6.size:
            new = np.stack([e.h6, e.o6, e.l6.astype(np.uint64)], axis=1)
            k = np.concatenate([self.k6, new])
            v = np.concatenate([self.v6, e.v6])
            uk, idx = np.unique(k[::-1], axis=0, return_index=True)
            self.k6, self.v6 = uk, v[::-1][idx]

    def remove(self, e: AddrEntries) -> None:
        if e.a4.size and self.k4.size:
            keep = ~np.isin(self.k4, _v4_keys(e.a4, e.l4))
            self.k4, self.v4 = self.k4[keep], self.v4[keep]
        if e.h6.size and self.k6.size:
            gone = {(int(h), int(o), int(n)) for h, o, n in zip(e.h6, e.o6, e.l6, strict=True)}
            keep = np.array([(int(h), int(o), int(n)) not in gone for h, o, n in self.k6], bool)
            self.k6, self.v6 = self.k6[keep], self.v6[keep]

    def entries(self) -> AddrEntries:
        return AddrEntries(
            (self.k4 >> np.uint64(8)).astype(np.uint32),
            (self.k4 & np.uint64(255)).astype(np.uint8),
            self.v4,
            self.k6[:, 0].copy(),
            self.k6[:, 1].copy(),
            self.k6[:, 2].astype(np.uint8),
            self.v6,
        )

    def listing(self) -> list[tuple[str, int]]:
        out = []
        for k, v in zip(self.k4, self.v4, strict=True):
            a, n = int(k) >> 8, int(k) & 255
            out.append((str(ipaddress.IPv4Network((a, n))), int(v)))
        for (h, o, n), v in zip(self.k6, self.v6, strict=True):
            out.append((str(ipaddress.IPv6Network(((int(h) << 64) | int(o), int(n)))), int(v)))
        return out


class FwTables:
    """All tables of one firewall (one copy per worker, like DragonFly's per-CPU tables)."""

    def __init__(self, interfaces: Sequence[str] = ()) -> None:
        self.interfaces = list(interfaces)
        self.l4 = Lpm(4)
        self.l6 = Lpm(6)
        self.slots: dict[str, int] = {}
        self.types: list[str] = []
        self.t_idx = np.zeros((0, T_COLS), np.int32)
        self.nt = np.full((64, 3), -1, np.int64)
        self._nt_used = 0
        self.if_tab = np.full((0, max(1, len(self.interfaces))), -1, np.int64)
        self._addr: dict[int, _AddrStore] = {}  # backing id -> exact entries
        self._num: dict[int, dict[int, int]] = {}  # backing id -> {key: value}
        self._iface: dict[int, dict[str, int]] = {}  # backing id -> {ifname: value}
        self._next_backing = 0
        self._iface_rows = 0
        self.generation = 0

    # -- structure ------------------------------------------------------------------------------

    def names(self) -> list[str]:
        return sorted(self.slots)

    def type_of(self, name: str) -> str:
        return self.types[self._slot(name)]

    def slot(self, name: str) -> int:
        return self._slot(name)

    def _slot(self, name: str) -> int:
        s = self.slots.get(name)
        if s is None:
            raise TableError(f"no table named {name!r}")
        return s

    def _backing(self, name: str) -> int:
        return int(self.t_idx[self._slot(name), TI_BACKING])

    def create(self, name: str, type_: str) -> int:
        """Create an empty table; returns its slot."""
        if type_ not in TABLE_TYPES:
            raise TableError(f"table {name!r}: type {type_!r} is not addr, number or iface")
        if not isinstance(name, str) or not TABLE_NAME_RE.match(name):
            raise TableError(f"{name!r} is not a table name (1-63 letters, digits, _.-)")
        if name in self.slots:
            raise TableError(f"table {name!r} exists already")
        if len(self.types) >= MAX_TABLES:  # ipfw's net.inet.ip.fw.tables_max is 128 too
            raise TableError(f"table {name!r}: at most {MAX_TABLES} tables")
        slot = len(self.types)
        row = np.full((1, T_COLS), -1, np.int32)
        row[0, TI_TYPE] = TABLE_TYPES.index(type_)
        row[0, TI_BACKING] = self._new_backing(type_)
        b = int(row[0, TI_BACKING])
        if type_ == "addr":
            row[0, TI_LPM4] = self.l4.table_index(b, create=True)
            row[0, TI_LPM6] = self.l6.table_index(b, create=True)
        self.t_idx = np.concatenate([self.t_idx, row])
        self.slots[name] = slot
        self.types.append(type_)
        self.generation += 1
        return slot

    def _new_backing(self, type_: str) -> int:
        if type_ == "iface":
            b = self._iface_rows
            self._iface_rows += 1
            self.if_tab = np.concatenate(
                [self.if_tab, np.full((1, self.if_tab.shape[1]), -1, np.int64)]
            )
            self._iface[b] = {}
            return b
        b = self._next_backing
        self._next_backing += 1
        if type_ == "addr":
            self._addr[b] = _AddrStore()
        else:
            self._num[b] = {}
        return b

    def set_interfaces(self, interfaces: Sequence[str]) -> None:
        """The router's interfaces changed: rebuild the iface tables' index rows."""
        self.interfaces = list(interfaces)
        tab = np.full((self._iface_rows, max(1, len(self.interfaces))), -1, np.int64)
        for b, entries in self._iface.items():
            for name, v in entries.items():
                if name in self.interfaces:
                    tab[b, self.interfaces.index(name)] = v
        self.if_tab = tab
        self.generation += 1

    # -- entries --------------------------------------------------------------------------------

    def add_text(
        self, name: str, text: str | bytes, where: str = "<entries>", quote: bool = True
    ) -> int:
        """Add "KEY [VALUE]" lines (a file's content: ``quote=False``, its errors do not
        echo it); returns the number of lines parsed."""
        t = self.type_of(name)
        if t == "addr":
            e = parse_addr_entries(text, where, quote=quote)
            self._add_addr(name, e)
            return len(e)
        lines = (text.decode("utf-8", errors="replace") if isinstance(text, bytes)
                 else text).split("\n")
        if t == "number":
            keys, vals = parse_number_entries(lines, where, quote=quote)
            self._add_number(name, keys, vals)
            return int(keys.shape[0])
        return self.add_parsed(name, parse_iface_entries(lines, where, quote=quote))

    def add(
        self,
        name: str,
        entries: Sequence[str],
        where: str = "<entries>",
        line_names: Sequence[str] | None = None,
    ) -> int:
        """Add entries given as "KEY [VALUE]" strings; an existing key gets the new value."""
        t = self.type_of(name)
        if t == "addr":
            e = parse_addr_entries("\n".join(entries), where, line_names)
            self._add_addr(name, e)
            return len(e)
        if t == "number":
            keys, vals = parse_number_entries(entries, where, line_names)
            self._add_number(name, keys, vals)
            return int(keys.shape[0])
        items = parse_iface_entries(entries, where, line_names)
        b = self._backing(name)
        for ifname, v in items:
            self._iface[b][ifname] = v
            if ifname in self.interfaces:
                self.if_tab[b, self.interfaces.index(ifname)] = v
        self.generation += 1
        return len(items)

    def add_parsed(self, name: str, payload) -> int:
        """Add entries parsed already (``parse_*_entries`` output, as the config holds)."""
        if isinstance(payload, AddrEntries):
            self._add_addr(name, payload)
            return len(payload)
        if isinstance(payload, tuple):
            self._add_number(name, *payload)
            return int(payload[0].shape[0])
        b = self._backing(name)
        for ifname, v in payload:
            self._iface[b][ifname] = v
            if ifname in self.interfaces:
                self.if_tab[b, self.interfaces.index(ifname)] = v
        self.generation += 1
        return len(payload)

    def add_file(self, name: str, path: str | Path) -> int:
        """Add a table file's lines (a regular file of at most MAX_TABLE_FILE bytes)."""
        from vecroute.config_types import FileReadError, read_regular_file

        p = Path(path)
        try:
            data = read_regular_file(p, MAX_TABLE_FILE)
        except FileReadError as e:
            raise TableError(f"{p}: cannot read: {e}") from None
        return self.add_text(name, data, str(p), quote=False)

    def _add_addr(self, name: str, e: AddrEntries) -> None:
        b = self._backing(name)
        if e.a4.size:
            self.l4.add_many(b, e.a4, e.l4, e.v4)
        if e.h6.size:
            self.l6.add_many(b, (e.h6, e.o6), e.l6, e.v6)
        self._addr[b].add(e)
        self.generation += 1

    def _add_number(self, name: str, keys: np.ndarray, vals: np.ndarray) -> None:
        b = self._backing(name)
        need = self._nt_used + keys.shape[0]
        if need * 2 > self.nt.shape[0]:
            cap = self.nt.shape[0]
            while need * 2 > cap:
                cap *= 2
            self.nt = _nt_rehash(self.nt, cap)
        self._nt_used += int(_nt_put(self.nt, b, keys, vals))
        d = self._num[b]
        for k, v in zip(keys.tolist(), vals.tolist(), strict=True):
            d[k] = v
        self.generation += 1

    def delete(self, name: str, keys: Sequence[str], where: str = "<entries>") -> int:
        """Delete entries by key (values, if given, are ignored); returns how many existed."""
        t = self.type_of(name)
        b = self._backing(name)
        if t == "addr":
            e = parse_addr_entries("\n".join(keys), where)
            n = 0
            if e.a4.size:
                n += self.l4.delete_many(b, e.a4, e.l4)
            if e.h6.size:
                n += self.l6.delete_many(b, (e.h6, e.o6), e.l6)
            self._addr[b].remove(e)
        elif t == "number":
            ks, _ = parse_number_entries(keys, where)
            n = int(_nt_delete(self.nt, b, ks))
            self._nt_used -= n
            for k in ks.tolist():
                self._num[b].pop(k, None)
        else:
            n = 0
            for ifname, _ in parse_iface_entries(keys, where):
                if self._iface[b].pop(ifname, None) is not None:
                    n += 1
                if ifname in self.interfaces:
                    self.if_tab[b, self.interfaces.index(ifname)] = -1
        self.generation += 1
        return n

    def flush(self, name: str) -> int:
        """Delete every entry; returns how many there were."""
        t = self.type_of(name)
        b = self._backing(name)
        if t == "addr":
            store = self._addr[b]
            n = len(store)
            e = store.entries()
            if e.a4.size:
                self.l4.delete_many(b, e.a4, e.l4)
            if e.h6.size:
                self.l6.delete_many(b, (e.h6, e.o6), e.l6)
            self._addr[b] = _AddrStore()
        elif t == "number":
            d = self._num[b]
            n = len(d)
            ks = np.array(sorted(d), np.int64)
            self._nt_used -= int(_nt_delete(self.nt, b, ks))
            self._num[b] = {}
        else:
            n = len(self._iface[b])
            self._iface[b] = {}
            self.if_tab[b, :] = -1
        self.generation += 1
        return n

    def swap(self, a: str, b: str) -> None:
        """Exchange the contents of two tables of the same type (two row writes of t_idx:
        done between batches, a batch sees either both old or both new)."""
        sa, sb = self._slot(a), self._slot(b)
        if self.types[sa] != self.types[sb]:
            raise TableError(
                f"cannot swap {self.types[sa]} table {a!r} with {self.types[sb]} table {b!r}"
            )
        ra, rb = self.t_idx[sa].copy(), self.t_idx[sb].copy()
        self.t_idx[sa], self.t_idx[sb] = rb, ra
        self.generation += 1

    def lookup(self, name: str, key: str) -> int | None:
        """The value a lookup of ``key`` gives (slow path, for ctl and tests)."""
        t = self.type_of(name)
        s = self._slot(name)
        if t == "addr":
            ip = ipaddress.ip_address(key)
            v = int(ip)
            fam, hi, lo = (4, 0, v) if ip.version == 4 else (6, v >> 64, v & _M64)
            r = table_addr_lookup(
                self.l4.roots,
                self.l4.groups,
                self.l6.roots,
                self.l6.groups,
                self.t_idx,
                s,
                fam,
                np.int64(hi - (1 << 64) if hi >> 63 else hi),
                np.int64(lo - (1 << 64) if lo >> 63 else lo),
            )
        elif t == "number":
            r = table_number_lookup(self.nt, self.t_idx, s, int(key))
        else:
            if key not in self.interfaces:
                return None
            r = table_iface_lookup(self.if_tab, self.t_idx, s, self.interfaces.index(key))
        return None if r < 0 else int(r)

    def count(self, name: str) -> int:
        t = self.type_of(name)
        b = self._backing(name)
        if t == "addr":
            return len(self._addr[b])
        if t == "number":
            return len(self._num[b])
        return len(self._iface[b])

    def listing(self, name: str) -> list[tuple[str, int]]:
        """Entries as (key text, value), addresses sorted by family, address, length."""
        t = self.type_of(name)
        b = self._backing(name)
        if t == "addr":
            return self._addr[b].listing()
        if t == "number":
            return [(str(k), v) for k, v in sorted(self._num[b].items())]
        return sorted(self._iface[b].items())

    def arrays(self) -> tuple:
        """The tables' part of ``FW`` for the data path, in ``layout.TABLE_FIELDS`` order."""
        t_idx = self.t_idx if self.t_idx.shape[0] else np.full((1, T_COLS), -1, np.int32)
        return (
            self.l4.roots if self.l4.roots.shape[0] else _EMPTY_ROOTS,
            self.l4.groups,
            self.l6.roots if self.l6.roots.shape[0] else _EMPTY_ROOTS,
            self.l6.groups,
            t_idx,
            self.nt,
            self.if_tab if self.if_tab.shape[0] else _EMPTY_IFTAB,
        )


_EMPTY_ROOTS = np.zeros((1, 65536), np.uint32)
_EMPTY_IFTAB = np.full((1, 1), -1, np.int64)
