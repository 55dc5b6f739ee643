"""Flow hashes over the 5-tuple: ECMP bucket choice (and later fanout, SRv6 flow labels).

A flow must always hash the same, so only header fields that are constant along a flow
are used; ports are left out of non-first fragments (they carry none).
"""

import numpy as np
from numba import njit

from vecroute.packet.batch import F_FRAG, M_FLAGS, M_L3, M_L4, M_LEN, M_OFF, M_PROTO
from vecroute.packet.headers import PROTO_TCP, PROTO_UDP, rd32, rd64

_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_K1 = np.uint64(0x9E3779B97F4A7C15)
_K2 = np.uint64(0xC2B2AE3D27D4EB4F)
_K3 = np.uint64(0x165667B19E3779F9)
_K4 = np.uint64(0x27D4EB2F165667C5)


@njit(cache=True, inline="always")
def mix64(x: np.uint64) -> np.uint64:
    """murmur3's fmix64 finalizer: every input bit affects every output bit."""
    x ^= x >> np.uint64(33)
    x *= _M1
    x ^= x >> np.uint64(33)
    x *= _M2
    x ^= x >> np.uint64(33)
    return x


@njit(cache=True, inline="always")
def _ports_at(buf, l4, end, proto, frag) -> np.uint64:
    if (proto == PROTO_TCP or proto == PROTO_UDP) and l4 > 0 and l4 + 4 <= end:
        if not frag:  # all fragments of a datagram hash alike
            return np.uint64(rd32(buf, l4))
    return np.uint64(0)


@njit(cache=True, inline="always")
def _nonzero32(h: np.uint64) -> np.uint32:
    """The high 32 bits, never 0 (0 means "not computed"). Not ``| 1``: forcing the low bit
    makes every hash odd, and ``h % n`` then never picks an even bucket for even n."""
    v = np.uint32(h >> np.uint64(32))
    return v if v != np.uint32(0) else np.uint32(1)


@njit(cache=True, inline="always")
def flow_hash4_at(buf, l3, l4, end, proto, frag) -> np.uint32:
    """The IPv4 flow hash from the header offsets themselves (the fused path has them in
    registers, not yet in the metadata); ``end`` is where the IP packet ends."""
    a = (np.uint64(rd32(buf, l3 + 12)) << np.uint64(32)) | np.uint64(rd32(buf, l3 + 16))
    b = (_ports_at(buf, l4, end, proto, frag) << np.uint64(8)) | np.uint64(proto & 0xFF)
    return _nonzero32(mix64(a ^ mix64(b)))


@njit(cache=True, inline="always")
def flow_hash6_dst(buf, l3, dst_hi, dst_lo, l4, end, proto, frag) -> np.uint32:
    """The IPv6 flow hash of the packet at l3 as it will be once its destination is
    (dst_hi, dst_lo): SRv6 End's second lookup, planned before the packet is changed."""
    # the four address words, each multiplied by its own odd constant so that swapping or
    # repeating words does not cancel out, then two mixing rounds (was nine: 40 ns/packet)
    a = rd64(buf, l3 + 8) * _K1 + rd64(buf, l3 + 16) * _K2 + dst_hi * _K3 + dst_lo * _K4
    b = (_ports_at(buf, l4, end, proto, frag) << np.uint64(8)) | np.uint64(proto & 0xFF)
    return _nonzero32(mix64(a ^ mix64(b)))


@njit(cache=True, inline="always")
def flow_hash6_at(buf, l3, l4, end, proto, frag) -> np.uint32:
    """The IPv6 flow hash from the header offsets (see flow_hash4_at)."""
    return flow_hash6_dst(buf, l3, rd64(buf, l3 + 24), rd64(buf, l3 + 32), l4, end, proto,
                          frag)


@njit(cache=True)
def flow_hash4(buf, meta, i) -> np.uint32:
    return flow_hash4_at(buf, meta[M_L3, i], meta[M_L4, i], meta[M_OFF, i] + meta[M_LEN, i],
                         meta[M_PROTO, i], meta[M_FLAGS, i] & F_FRAG)


@njit(cache=True)
def flow_hash6(buf, meta, i) -> np.uint32:
    return flow_hash6_at(buf, meta[M_L3, i], meta[M_L4, i], meta[M_OFF, i] + meta[M_LEN, i],
                         meta[M_PROTO, i], meta[M_FLAGS, i] & F_FRAG)
