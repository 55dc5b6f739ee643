"""ARP and NDP packets for the control plane: parse what was punted, build what we send.

Slow path, plain Python: these packets are rare (a few per neighbour per minute), so
clarity wins over speed. Checksums use the same RFC 1071 arithmetic as the data path.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

ETH_P_ARP = 0x0806
ETH_P_IPV6 = 0x86DD
BROADCAST = b"\xff" * 6
ND_NS, ND_NA, ND_RS, ND_RA, ND_REDIRECT = 135, 136, 133, 134, 137
NA_ROUTER, NA_SOLICITED, NA_OVERRIDE = 0x80, 0x40, 0x20
OPT_SRC_LLADDR, OPT_TGT_LLADDR = 1, 2


def csum(data: bytes, acc: int = 0) -> int:
    """RFC 1071 Internet checksum (inverted)."""
    if len(data) % 2:
        data += b"\0"
    s = acc + sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


@dataclass
class Arp:
    op: int
    sha: bytes
    spa: ipaddress.IPv4Address
    tha: bytes
    tpa: ipaddress.IPv4Address

    @property
    def gratuitous(self) -> bool:
        return self.spa == self.tpa


def parse_arp(frame: bytes) -> Arp | None:
    """An Ethernet/IPv4 ARP packet, or None if it is not one."""
    if len(frame) < 42 or struct.unpack_from("!H", frame, 12)[0] != ETH_P_ARP:
        return None
    htype, ptype, hlen, plen, op = struct.unpack_from("!HHBBH", frame, 14)
    if (htype, ptype, hlen, plen) != (1, 0x0800, 6, 4):
        return None
    sha, spa, tha, tpa = frame[22:28], frame[28:32], frame[32:38], frame[38:42]
    return Arp(op, sha, ipaddress.IPv4Address(spa), tha, ipaddress.IPv4Address(tpa))


def build_arp(
    op: int, src_mac: bytes, spa, dst_mac: bytes, tpa, eth_dst: bytes | None = None
) -> bytes:
    """An ARP request (op 1, tha zero, broadcast unless eth_dst) or reply (op 2)."""
    eth = (eth_dst or (BROADCAST if op == 1 else dst_mac)) + src_mac + struct.pack("!H", ETH_P_ARP)
    tha = b"\0" * 6 if op == 1 else dst_mac
    body = struct.pack("!HHBBH", 1, 0x0800, 6, 4, op) + src_mac + ipaddress.IPv4Address(spa).packed
    return eth + body + tha + ipaddress.IPv4Address(tpa).packed


@dataclass
class Nd:
    type: int
    src: ipaddress.IPv6Address
    dst: ipaddress.IPv6Address
    hop_limit: int
    target: ipaddress.IPv6Address | None
    flags: int
    lladdr: bytes | None  # source (NS/RS) or target (NA) link-layer address option
    eth_src: bytes


def solicited_node(ip: ipaddress.IPv6Address) -> ipaddress.IPv6Address:
    return ipaddress.IPv6Address(b"\xff\x02" + b"\0" * 9 + b"\x01\xff" + ip.packed[13:])


def multicast_mac(ip: ipaddress.IPv6Address) -> bytes:
    return b"\x33\x33" + ip.packed[12:]


# Why a neighbour discovery message is invalid (RFC 4861 7.1.1 for NS, 7.1.2 for NA); the
# hop limit, checksum and option checks apply to every ND message (RFC 4861 6.1, 8.1 alike)
ND_INVALID_REASONS = (
    "malformed",  # not a complete ICMPv6 packet directly after the IPv6 header
    "bad-hop-limit",  # not 255: it was routed, so it does not come from the link
    "bad-checksum",
    "bad-code",  # ICMP code not 0
    "too-short",  # NS/NA ICMP length < 24 octets
    "target-multicast",
    "bad-options",  # an option of length 0, or one running past the message
    "solicited-to-multicast",  # NA to a multicast destination with the Solicited flag
    "dad-not-solicited-node",  # NS from :: not sent to a solicited-node group
    "dad-source-lladdr",  # NS from :: with a source link-layer address option
)
SOLICITED_NODE_PREFIX = ipaddress.IPv6Network("ff02::1:ff00:0/104")


class InvalidNd(ValueError):
    """An ND message that RFC 4861 says to discard silently; ``reason`` is one of
    ND_INVALID_REASONS."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse_nd(frame: bytes) -> Nd:
    """A neighbour discovery message (RFC 4861) that passes every validity check of 7.1;
    raises InvalidNd otherwise. The data path punts ND before verifying anything, so every
    check is made here."""
    if len(frame) < 14 + 40 + 8 or struct.unpack_from("!H", frame, 12)[0] != ETH_P_IPV6:
        raise InvalidNd("malformed")
    ip6 = frame[14:54]
    plen = struct.unpack_from("!H", ip6, 4)[0]
    if ip6[6] != 58 or 54 + plen > len(frame) or plen < 8:
        raise InvalidNd("malformed")
    if ip6[7] != 255:
        raise InvalidNd("bad-hop-limit")
    src = ipaddress.IPv6Address(ip6[8:24])
    dst = ipaddress.IPv6Address(ip6[24:40])
    icmp = frame[54 : 54 + plen]
    pseudo = ip6[8:40] + struct.pack("!IxxxB", plen, 58)
    if csum(pseudo + icmp) != 0:
        raise InvalidNd("bad-checksum")
    t = icmp[0]
    if icmp[1] != 0:
        raise InvalidNd("bad-code")
    target = None
    flags = 0
    opts = b""
    if t in (ND_NS, ND_NA):
        if len(icmp) < 24:
            raise InvalidNd("too-short")
        flags = icmp[4]
        target = ipaddress.IPv6Address(icmp[8:24])
        if target.is_multicast:
            raise InvalidNd("target-multicast")
        opts = icmp[24:]
    elif t == ND_RS:
        opts = icmp[8:]
    lladdr = None
    want = OPT_TGT_LLADDR if t == ND_NA else OPT_SRC_LLADDR
    has_src_lladdr = False
    while opts:  # RFC 4861 4.6: an option of length 0 invalidates the message (Linux: any
        # option that does not fit, too)
        if len(opts) < 2 or opts[1] == 0 or opts[1] * 8 > len(opts):
            raise InvalidNd("bad-options")
        ot, ol = opts[0], opts[1] * 8
        has_src_lladdr |= ot == OPT_SRC_LLADDR
        if ot == want:
            lladdr = bytes(opts[2:8])
        opts = opts[ol:]
    if t == ND_NA and dst.is_multicast and flags & NA_SOLICITED:
        raise InvalidNd("solicited-to-multicast")
    if t == ND_NS and src.is_unspecified:
        if dst not in SOLICITED_NODE_PREFIX:
            raise InvalidNd("dad-not-solicited-node")
        if has_src_lladdr:
            raise InvalidNd("dad-source-lladdr")
    return Nd(t, src, dst, ip6[7], target, flags, lladdr, bytes(frame[6:12]))


def _ip6_frame(eth_dst: bytes, eth_src: bytes, src, dst, icmp: bytes) -> bytes:
    src_b, dst_b = ipaddress.IPv6Address(src).packed, ipaddress.IPv6Address(dst).packed
    pseudo = src_b + dst_b + struct.pack("!IxxxB", len(icmp), 58)
    icmp = icmp[:2] + struct.pack("!H", csum(pseudo + icmp)) + icmp[4:]
    hdr = struct.pack("!IHBB", 0x60000000, len(icmp), 58, 255) + src_b + dst_b
    return eth_dst + eth_src + struct.pack("!H", ETH_P_IPV6) + hdr + icmp


def build_ns(src_mac: bytes, src_ip, target, unicast_mac: bytes | None = None) -> bytes:
    """A Neighbour Solicitation: multicast to the solicited-node group, or unicast (probe)."""
    target = ipaddress.IPv6Address(target)
    dst = target if unicast_mac else solicited_node(target)
    eth_dst = unicast_mac or multicast_mac(dst)
    icmp = struct.pack("!BBHI", ND_NS, 0, 0, 0) + target.packed
    icmp += struct.pack("!BB", OPT_SRC_LLADDR, 1) + src_mac
    return _ip6_frame(eth_dst, src_mac, src_ip, dst, icmp)


def build_na(src_mac: bytes, target, dst_ip, dst_mac: bytes, flags: int) -> bytes:
    """A Neighbour Advertisement for ``target`` (our address) with the router flag."""
    target = ipaddress.IPv6Address(target)
    icmp = struct.pack("!BBHB3x", ND_NA, 0, 0, flags) + target.packed
    icmp += struct.pack("!BB", OPT_TGT_LLADDR, 1) + src_mac
    return _ip6_frame(dst_mac, src_mac, target, dst_ip, icmp)
