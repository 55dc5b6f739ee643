"""Header layouts and big-endian field access for the compiled nodes.

Packets live in one uint8 batch buffer; these helpers read and write network-order fields
at absolute byte offsets so that kernels never build Python objects per packet.
"""

import numpy as np
from numba import njit, types
from numba.extending import overload

from vecroute.packet.intrinsics import (
    load_be16,
    load_be32,
    load_be64,
    memcpy,
)

ETH_HLEN = 14
ETH_P_IP = 0x0800
ETH_P_ARP = 0x0806
ETH_P_IPV6 = 0x86DD
ETH_P_VLAN = 0x8100

IP4_HLEN = 20
IP6_HLEN = 40
ICMP_HLEN = 8
ARP_LEN = 28

PROTO_HOPOPT = 0
PROTO_ICMP = 1
PROTO_IPIP = 4
PROTO_TCP = 6
PROTO_UDP = 17
PROTO_IPV6 = 41
PROTO_ROUTING = 43
PROTO_FRAGMENT = 44
PROTO_AH = 51
PROTO_ICMPV6 = 58
PROTO_NONE = 59
PROTO_DSTOPTS = 60

# ICMPv4 types/codes (RFC 792)
ICMP4_ECHO_REPLY = 0
ICMP4_DEST_UNREACH = 3
ICMP4_ECHO_REQUEST = 8
ICMP4_TIME_EXCEEDED = 11
ICMP4_PARAM_PROBLEM = 12
ICMP4_NET_UNREACH = 0
ICMP4_HOST_UNREACH = 1
ICMP4_PROTO_UNREACH = 2
ICMP4_PORT_UNREACH = 3
ICMP4_FRAG_NEEDED = 4
ICMP4_REDIRECT = 5

# ICMPv6 types/codes (RFC 4443, RFC 4861)
ICMP6_DEST_UNREACH = 1
ICMP6_PACKET_TOO_BIG = 2
ICMP6_TIME_EXCEEDED = 3
ICMP6_PARAM_PROBLEM = 4
ICMP6_ECHO_REQUEST = 128
ICMP6_ECHO_REPLY = 129
ICMP6_ROUTER_SOLICIT = 133
ICMP6_ROUTER_ADVERT = 134
ICMP6_NEIGHBOR_SOLICIT = 135
ICMP6_NEIGHBOR_ADVERT = 136
ICMP6_NO_ROUTE = 0
ICMP6_BEYOND_SCOPE = 2
ICMP6_ADDR_UNREACH = 3
ICMP6_PORT_UNREACH = 4
ICMP6_REDIRECT = 137

IP4_MIN_MTU = 68
IP6_MIN_MTU = 1280


def _be(bits: int, contiguous, bytewise):  # type: ignore[no-untyped-def]
    """A reader that takes the intrinsic load on a C-contiguous uint8 buffer (every packet
    buffer) and reads byte by byte anything else (a strided view)."""

    def read(buf, o):  # type: ignore[no-untyped-def]
        raise NotImplementedError  # compiled code only

    @overload(read, inline="always")
    def _read(buf, o):  # type: ignore[no-untyped-def]
        if isinstance(buf, types.Array) and buf.dtype == types.uint8 and buf.layout == "C":
            return contiguous
        return bytewise

    read.__name__ = f"be{bits}"
    return read


def _bytes16(buf, o):  # type: ignore[no-untyped-def]
    return (np.uint32(buf[o]) << np.uint32(8)) | np.uint32(buf[o + 1])


def _bytes32(buf, o):  # type: ignore[no-untyped-def]
    return ((np.uint32(buf[o]) << np.uint32(24)) | (np.uint32(buf[o + 1]) << np.uint32(16))
            | (np.uint32(buf[o + 2]) << np.uint32(8)) | np.uint32(buf[o + 3]))


def _bytes64(buf, o):  # type: ignore[no-untyped-def]
    v = np.uint64(0)
    for k in range(8):
        v = (v << np.uint64(8)) | np.uint64(buf[o + k])
    return v


_be16 = _be(16, lambda buf, o: np.uint32(load_be16(buf, o)), _bytes16)
_be32 = _be(32, lambda buf, o: load_be32(buf, o), _bytes32)
_be64 = _be(64, lambda buf, o: load_be64(buf, o), _bytes64)


@njit(cache=True, inline="always")
def rd16(buf: np.ndarray, o: int) -> np.uint32:
    """The 16-bit network-order field at buf[o] (zero-extended to 32 bits)."""
    return _be16(buf, o)


@njit(cache=True, inline="always")
def rd32(buf: np.ndarray, o: int) -> np.uint32:
    """The 32-bit network-order field at buf[o]."""
    return _be32(buf, o)


@njit(cache=True, inline="always")
def rd64(buf: np.ndarray, o: int) -> np.uint64:
    """The 64-bit network-order field at buf[o]."""
    return _be64(buf, o)


@njit(cache=True, inline="always")
def ip_length(buf: np.ndarray, l3: int, six: bool) -> np.int64:
    """The IP length of the packet at l3, header included, from its length field (IPv4
    total length; IPv6 40 + payload length)."""
    if six:
        return IP6_HLEN + np.int64(rd16(buf, l3 + 4))
    return np.int64(rd16(buf, l3 + 2))


@njit(cache=True, inline="always")
def wr16(buf: np.ndarray, o: int, v) -> None:
    buf[o] = np.uint8((v >> 8) & 0xFF)
    buf[o + 1] = np.uint8(v & 0xFF)


@njit(cache=True, inline="always")
def wr32(buf: np.ndarray, o: int, v) -> None:
    buf[o] = np.uint8((v >> 24) & 0xFF)
    buf[o + 1] = np.uint8((v >> 16) & 0xFF)
    buf[o + 2] = np.uint8((v >> 8) & 0xFF)
    buf[o + 3] = np.uint8(v & 0xFF)


@njit(cache=True, inline="always")
def copy_moves(dst: np.ndarray, do: int, src: np.ndarray, so: int, n: int) -> None:
    """Copy n >= 32 bytes between buffers that do not overlap (C-contiguous uint8) in
    32-byte moves, the last one ending at n (overlapping the one before): a small copy of a
    size known only at run time (SRv6's outer header, 40 + 8 + 16 a segment) as a libc
    memcpy call cost ~6 ns more a packet."""
    q = np.int64(0)
    while q + 32 < n:
        memcpy(dst, do + q, src, so + q, 32)
        q += 32
    memcpy(dst, do + n - 32, src, so + n - 32, 32)


@njit(cache=True, inline="always")
def copy_bytes(dst: np.ndarray, do: int, src: np.ndarray, so: int, n: int) -> None:
    """memmove semantics: safe when the regions overlap in the same buffer."""
    if do <= so:
        for k in range(n):
            dst[do + k] = src[so + k]
    else:
        for k in range(n - 1, -1, -1):
            dst[do + k] = src[so + k]
