"""The packet keys the firewall classifies: one int64 row per packet, ``K_COLS`` columns.

A graph node extracts the keys of its vector into an ``int64[n, K_COLS]`` matrix (with
:func:`extract_keys` from the batch metadata, or its own code), then calls ``fw_batch``.

=============  ==========================================================================
column         value
=============  ==========================================================================
K_FAMILY       4 or 6
K_SRC_HI       IPv6: first 64 bits of the source (as int64 bits); IPv4: 0
K_SRC_LO       IPv6: last 64 bits of the source; IPv4: the source address (0..2**32-1)
K_DST_HI       like K_SRC_HI for the destination
K_DST_LO       like K_SRC_LO for the destination
K_PROTO        upper-layer protocol (after IPv6 extension headers), -1 if unknown
K_SPORT        TCP/UDP/SCTP source port, -1 if the packet has none (other protocols,
               non-first fragments, truncated header)
K_DPORT        destination port, -1 likewise
K_TCPFLAGS     TCP flags byte (FIN 0x01 ... CWR 0x80), -1 if not TCP or not available
K_ICMPTYPE     ICMP type (IPv4, protocol 1) or ICMPv6 type (protocol 58), -1 otherwise
K_TTL          IPv4 TTL or IPv6 hop limit as received
K_FRAG         FRAG_ANY (1) for any fragment, | FRAG_NONFIRST (2) if the offset is not 0
K_RX           receive interface index (-1 for packets the router generated)
K_TX           transmit interface index, -1 at input (not known yet)
K_LEN          IP length in bytes (header included), for the byte counters
=============  ==========================================================================
"""

from __future__ import annotations

import ipaddress

import numpy as np
from numba import njit

from vecroute.packet.batch import (
    F_FRAG,
    F_FRAG_NONFIRST,
    M_FLAGS,
    M_L3,
    M_L4,
    M_LEN,
    M_OFF,
    M_PROTO,
    M_RX,
    M_TX,
)
from vecroute.packet.headers import rd16, rd32, rd64

K_FAMILY = 0
K_SRC_HI = 1
K_SRC_LO = 2
K_DST_HI = 3
K_DST_LO = 4
K_PROTO = 5
K_SPORT = 6
K_DPORT = 7
K_TCPFLAGS = 8
K_ICMPTYPE = 9
K_TTL = 10
K_FRAG = 11
K_RX = 12
K_TX = 13
K_LEN = 14
K_COLS = 15

# the table keys: what a rule set of address tables only reads (classify.fw_batch_tables),
# one row per column over the vector (``int64[TK_ROWS, >= n]``), values as in the key
# columns of the same names
TK_FAMILY = 0
TK_SRC_HI = 1
TK_SRC_LO = 2
TK_DST_HI = 3
TK_DST_LO = 4
TK_LEN = 5
TK_ROWS = 6

FRAG_ANY = 1
FRAG_NONFIRST = 2

KEY_NAMES = (
    "family",
    "src_hi",
    "src_lo",
    "dst_hi",
    "dst_lo",
    "proto",
    "sport",
    "dport",
    "tcpflags",
    "icmptype",
    "ttl",
    "frag",
    "rx",
    "tx",
    "len",
)

_M64 = (1 << 64) - 1


@njit(cache=True, nogil=True, _nrt=False)
def extract_keys(buf, meta, work, k, keys):
    """Fill ``keys[j]`` for packet ``work[j]``, j < k, from a batch that went through
    ip4-input/ip6-input (M_L3, M_L4, M_PROTO and the fragment flags set)."""
    for j in range(k):
        i = work[j]
        l3 = meta[M_L3, i]
        end = meta[M_OFF, i] + meta[M_LEN, i]
        fl = meta[M_FLAGS, i]
        v6 = (buf[l3] >> 4) == 6
        if v6:
            keys[j, 0] = 6
            keys[j, 1] = np.int64(rd64(buf, l3 + 8))
            keys[j, 2] = np.int64(rd64(buf, l3 + 16))
            keys[j, 3] = np.int64(rd64(buf, l3 + 24))
            keys[j, 4] = np.int64(rd64(buf, l3 + 32))
            keys[j, 10] = buf[l3 + 7]
            keys[j, 14] = 40 + np.int64(rd16(buf, l3 + 4))
        else:
            keys[j, 0] = 4
            keys[j, 1] = 0
            keys[j, 2] = np.int64(rd32(buf, l3 + 12))
            keys[j, 3] = 0
            keys[j, 4] = np.int64(rd32(buf, l3 + 16))
            keys[j, 10] = buf[l3 + 8]
            keys[j, 14] = np.int64(rd16(buf, l3 + 2))
        proto = np.int64(meta[M_PROTO, i])
        l4 = meta[M_L4, i]
        frag = 0
        if fl & F_FRAG:
            frag |= FRAG_ANY
        if fl & F_FRAG_NONFIRST:
            frag |= FRAG_NONFIRST
        keys[j, 5] = proto
        keys[j, 11] = frag
        keys[j, 12] = meta[M_RX, i]
        keys[j, 13] = meta[M_TX, i]
        sp = np.int64(-1)
        dp = np.int64(-1)
        tf = np.int64(-1)
        it = np.int64(-1)
        if l4 > 0 and frag & FRAG_NONFIRST == 0:
            if (proto == 6 or proto == 17 or proto == 132) and l4 + 4 <= end:
                sp = np.int64(rd16(buf, l4))
                dp = np.int64(rd16(buf, l4 + 2))
                if proto == 6 and l4 + 14 <= end:
                    tf = np.int64(buf[l4 + 13])
            elif ((proto == 1 and not v6) or (proto == 58 and v6)) and l4 < end:
                it = np.int64(buf[l4])
        keys[j, 6] = sp
        keys[j, 7] = dp
        keys[j, 8] = tf
        keys[j, 9] = it


def table_key_rows(keys: np.ndarray) -> np.ndarray:
    """The table keys (``TK_*`` rows) of a key matrix, for tests and tools."""
    cols = (K_FAMILY, K_SRC_HI, K_SRC_LO, K_DST_HI, K_DST_LO, K_LEN)
    return np.ascontiguousarray(np.asarray(keys, np.int64)[:, cols].T)


def _s64(v: int) -> int:
    return v - (1 << 64) if v >> 63 else v


def make_key(
    src: str | int,
    dst: str | int,
    proto: int = -1,
    sport: int = -1,
    dport: int = -1,
    tcpflags: int = -1,
    icmptype: int = -1,
    ttl: int = 64,
    frag: int = 0,
    rx: int = 0,
    tx: int = -1,
    length: int = 64,
    family: int | None = None,
) -> np.ndarray:
    """One key row from plain values (tests, tools). Addresses: text or integers (an integer
    needs ``family``)."""
    row = np.zeros(K_COLS, np.int64)
    a = ipaddress.ip_address(src) if isinstance(src, str) else None
    b = ipaddress.ip_address(dst) if isinstance(dst, str) else None
    fam = family or (a.version if a else b.version if b else 4)
    sa = int(a) if a else int(src)
    da = int(b) if b else int(dst)
    row[K_FAMILY] = fam
    if fam == 4:
        row[K_SRC_LO], row[K_DST_LO] = sa, da
    else:
        row[K_SRC_HI], row[K_SRC_LO] = _s64(sa >> 64), _s64(sa & _M64)
        row[K_DST_HI], row[K_DST_LO] = _s64(da >> 64), _s64(da & _M64)
    row[K_PROTO] = proto
    row[K_SPORT], row[K_DPORT] = sport, dport
    row[K_TCPFLAGS], row[K_ICMPTYPE] = tcpflags, icmptype
    row[K_TTL], row[K_FRAG] = ttl, frag
    row[K_RX], row[K_TX], row[K_LEN] = rx, tx, length
    return row


def key_address(row: np.ndarray, which: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The source (``which="src"``) or destination address of a key row."""
    hi_c, lo_c = (K_SRC_HI, K_SRC_LO) if which == "src" else (K_DST_HI, K_DST_LO)
    if row[K_FAMILY] == 4:
        return ipaddress.IPv4Address(int(row[lo_c]) & 0xFFFFFFFF)
    return ipaddress.IPv6Address(((int(row[hi_c]) & _M64) << 64) | (int(row[lo_c]) & _M64))
