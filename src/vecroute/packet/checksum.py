"""Internet checksum kernels (RFC 1071 full sums, RFC 1624 incremental updates).

TTL / hop-limit changes are hot and use the incremental form; full sums (ICMP errors,
generated packets, verification) add 16-bit words into a 64-bit accumulator four at a
time and fold the carries once at the end (deferred carries, RFC 1071 section 2).
"""

import numpy as np
from numba import njit

from vecroute.packet.headers import rd16, wr16


@njit(cache=True, inline="always")
def fold(s: np.uint64) -> np.uint32:
    """Fold a wide one's-complement accumulator to 16 bits (not inverted)."""
    s = (s & np.uint64(0xFFFFFFFF)) + (s >> np.uint64(32))
    s = (s & np.uint64(0xFFFF)) + (s >> np.uint64(16))
    s = (s & np.uint64(0xFFFF)) + (s >> np.uint64(16))
    s = (s & np.uint64(0xFFFF)) + (s >> np.uint64(16))
    return np.uint32(s)


@njit(cache=True, inline="always")
def sum_bytes(buf: np.ndarray, off: int, n: int, acc: np.uint64) -> np.uint64:
    """Add the bytes buf[off:off+n] as big-endian 16-bit words to acc (odd tail padded)."""
    s0 = np.uint64(0)
    s1 = np.uint64(0)
    s2 = np.uint64(0)
    s3 = np.uint64(0)
    i = off
    end8 = off + (n & ~7)
    while i < end8:
        s0 += (np.uint64(buf[i]) << np.uint64(8)) | np.uint64(buf[i + 1])
        s1 += (np.uint64(buf[i + 2]) << np.uint64(8)) | np.uint64(buf[i + 3])
        s2 += (np.uint64(buf[i + 4]) << np.uint64(8)) | np.uint64(buf[i + 5])
        s3 += (np.uint64(buf[i + 6]) << np.uint64(8)) | np.uint64(buf[i + 7])
        i += 8
    end = off + n
    while i + 1 < end:
        s0 += (np.uint64(buf[i]) << np.uint64(8)) | np.uint64(buf[i + 1])
        i += 2
    if i < end:
        s0 += np.uint64(buf[i]) << np.uint64(8)
    return acc + s0 + s1 + s2 + s3


@njit(cache=True, inline="always")
def checksum(buf: np.ndarray, off: int, n: int, acc: np.uint64) -> np.uint32:
    """The Internet checksum (inverted, 16 bits) of acc plus the given bytes."""
    return np.uint32(~fold(sum_bytes(buf, off, n, acc)) & np.uint32(0xFFFF))


@njit(cache=True, inline="always")
def incremental_update(hc: np.uint32, old: np.uint32, new: np.uint32) -> np.uint32:
    """RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'), never producing the -0 of eqn. 2."""
    s = (
        np.uint32(~hc & np.uint32(0xFFFF))
        + np.uint32(~old & np.uint32(0xFFFF))
        + np.uint32(new & np.uint32(0xFFFF))
    )
    s = (s & np.uint32(0xFFFF)) + (s >> np.uint32(16))
    s = (s & np.uint32(0xFFFF)) + (s >> np.uint32(16))
    return np.uint32(~s & np.uint32(0xFFFF))


@njit(cache=True)
def pseudo_header4(buf: np.ndarray, l3: int, proto: int, l4len: int) -> np.uint64:
    """IPv4 pseudo-header sum (addresses, protocol, upper-layer length)."""
    s = sum_bytes(buf, l3 + 12, 8, np.uint64(0))
    return s + np.uint64(proto) + np.uint64(l4len)


@njit(cache=True)
def pseudo_header6(buf: np.ndarray, l3: int, proto: int, l4len: int) -> np.uint64:
    """IPv6 pseudo-header sum (RFC 8200 section 8.1)."""
    s = sum_bytes(buf, l3 + 8, 32, np.uint64(0))
    return s + np.uint64(proto) + np.uint64(l4len)


@njit(cache=True, inline="always")
def ttl_decrement(buf: np.ndarray, l3: int, ip6: bool) -> None:
    """Hop limit - 1, or TTL - 1 with the RFC 1624 update of the IPv4 header checksum (the
    caller has checked it is above 1)."""
    if ip6:
        buf[l3 + 7] -= 1
    else:
        old = rd16(buf, l3 + 8)
        new = np.uint32(old - np.uint32(0x100))
        wr16(buf, l3 + 8, new)
        wr16(buf, l3 + 10, incremental_update(rd16(buf, l3 + 10), old, new))
