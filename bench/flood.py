"""Neighbour-solicitation floods as a hostile host on a lab port sends them.

NS (with a source link-layer address) for the router's IPv6 address and ARP requests for
its IPv4 one, each from a new source and MAC on h1's link (vecroute.lab addresses), never
h1's or the router's own: the frames of issue 12's finding 2, for tests/test_live_isolation
.py, bench/soak.py and bench/neighbor_flood.py. Built fast (one scapy template per kind,
addresses patched in, checksums recomputed) and checked against scapy on a sample.
"""

from __future__ import annotations

import random
import struct

from vecroute.lab import H1_V4, RT0_V4, RT0_V6

FLOOD_NS = FLOOD_ARP = 15_000


def random_mac(rng: random.Random) -> bytes:
    b = bytearray(rng.randbytes(6))
    b[0] = (b[0] & 0xFC) | 0x02  # unicast, locally administered
    return bytes(b)


def icmp6_checksum(src: bytes, dst: bytes, body: bytes) -> int:
    """RFC 4443 2.3 / RFC 8200 8.1: the ones' complement sum over the pseudo-header and
    the ICMPv6 message (checksum field zero); body has an even length."""
    data = src + dst + struct.pack("!I3xB", len(body), 58) + body
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def neighbor_flood_frames(n_ns: int = FLOOD_NS, n_arp: int = FLOOD_ARP,
                          seed: int = 4861) -> list[bytes]:  # fmt: skip
    """NS for the router's 2001:db8:1::1 (SLLA option) from random 2001:db8:1::/64 sources
    and ARP requests for 198.51.100.1 from random 198.51.100.0/24 senders (never h1's or the
    router's address), each with a random MAC; interleaved. scapy builds one template per
    kind; the copies get their addresses patched in (and the ICMPv6 checksum recomputed),
    and a sample is checked byte for byte against frames scapy builds itself."""
    import ipaddress

    from scapy.layers.inet6 import ICMPv6ND_NS, ICMPv6NDOptSrcLLAddr, IPv6
    from scapy.layers.l2 import ARP, Ether

    def ns_scapy(mac: str, src: str) -> bytes:
        return bytes(Ether(dst="33:33:ff:00:00:01", src=mac)
                     / IPv6(src=src, dst="ff02::1:ff00:1", hlim=255)
                     / ICMPv6ND_NS(tgt=RT0_V6) / ICMPv6NDOptSrcLLAddr(lladdr=mac))  # fmt: skip

    def arp_scapy(mac: str, src: str) -> bytes:
        return bytes(Ether(dst="ff:ff:ff:ff:ff:ff", src=mac)
                     / ARP(op=1, hwsrc=mac, psrc=src, pdst=RT0_V4))  # fmt: skip

    def fmt(m: bytes) -> str:
        return ":".join(f"{b:02x}" for b in m)

    rng = random.Random(seed)
    net6 = int(ipaddress.IPv6Address("2001:db8:1::"))
    seen6: set[int] = set()
    ns_tpl = bytearray(ns_scapy("02:00:00:00:00:00", "2001:db8:1::2"))
    dst6 = bytes(ns_tpl[38:54])
    ns, ns_args = [], []
    while len(ns) < n_ns:
        iid = rng.getrandbits(64)
        if iid in seen6 or iid in (0, 1, 0x10):  # the router, h1
            continue
        seen6.add(iid)
        mac, src = random_mac(rng), (net6 | iid).to_bytes(16, "big")
        f = bytearray(ns_tpl)
        f[6:12], f[22:38], f[80:86] = mac, src, mac
        f[56:58] = b"\0\0"
        f[56:58] = icmp6_checksum(src, dst6, bytes(f[54:])).to_bytes(2, "big")
        ns.append(bytes(f))
        ns_args.append((fmt(mac), str(ipaddress.IPv6Address(src))))
    arp_tpl = bytearray(arp_scapy("02:00:00:00:00:00", "198.51.100.2"))
    hosts = [h for h in range(2, 255) if f"198.51.100.{h}" not in (H1_V4, RT0_V4)]
    arp, arp_args = [], []
    for _ in range(n_arp):
        mac, h = random_mac(rng), rng.choice(hosts)
        f = bytearray(arp_tpl)
        f[6:12], f[22:28], f[28:32] = mac, mac, bytes([198, 51, 100, h])
        arp.append(bytes(f))
        arp_args.append((fmt(mac), f"198.51.100.{h}"))
    for k in [0, 1, *rng.sample(range(n_ns), 30)]:
        assert ns[k] == ns_scapy(*ns_args[k]), k
    for k in [0, 1, *rng.sample(range(n_arp), 30)]:
        assert arp[k] == arp_scapy(*arp_args[k]), k
    return [f for pair in zip(ns, arp, strict=True) for f in pair]
