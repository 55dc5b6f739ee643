"""The classic BPF program that splits a port's traffic between its receive rings.

Under overload a port's RX ring is full and the kernel drops what arrives, whatever it is:
BGP keepalives, OSPF hellos, ARP and ND, pings to the router wait ~10 ms behind 7,680
transit frames or are lost with them. A router keeps the traffic that is *for it* out of
that queue. Each port therefore gets a second, small RX ring (the *control ring*) that the
worker reads before its data ring. All the port's sockets (every worker's data ring, then
worker 0's control ring) are one PACKET_FANOUT group in PACKET_FANOUT_CBPF mode, and this
program, run once per frame by the kernel, returns the index of the socket that gets it:

- the control ring (index ``n_data``): ARP; IPv4 to one of the router's addresses
  (:func:`control_addresses`), to 224.0.0.0/24 (OSPF, VRRP) or to 255.255.255.255; IPv6
  to one of the router's addresses, to fe80::/10 (ND, BGP unnumbered) or to ff02::/16 (ND,
  MLD, OSPFv3); other protocols sent to a broadcast or multicast MAC (LLDP, STP, IS-IS).
  Transit multicast (239.0.0.0/8, ff0e::/16, ...) is not the router's business: it stays
  on the data ring, so an IPTV stream cannot fill the control ring;
- a data ring otherwise: with one worker index 0; with several, a symmetric hash of the
  addresses (and of the TCP/UDP/SCTP ports when the packet is not a fragment), so both
  directions of a flow meet the same worker, as PACKET_FANOUT_HASH does without control
  rings, and the fragments of a datagram stay together.

One program decides, so a frame reaches exactly one ring, and a new program replaces the
old one atomically (PACKET_FANOUT_DATA). The kernel runs a fanout program with the packet
starting at its network header (the Ethernet header is already pulled): the program reads
the frame type from ``skb->pkt_type`` and the EtherType from ``skb->protocol`` (ancillary
loads), so a VLAN tag the device took out of the frame is not seen and a tagged frame is
classified by its inner header, like an untagged one. A load past the end of the packet
ends the program with 0: a frame too short for the field read goes to data ring 0, where
the graph counts it. The graph does the same to a frame whichever ring it came from, so
only the queueing changes; the worker reads at most a quarter of a vector from the
control rings per pass, so a flood to the router's addresses cannot stop forwarding.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Iterable

from vecroute.fib.fib import address_routes

__all__ = ["MAX_INSNS", "control_addresses", "fit", "fprog", "program"]

#: the kernel's BPF_MAXINSNS
MAX_INSNS = 4096

# opcodes (linux/bpf_common.h, linux/filter.h)
_LD_W_ABS = 0x20
_LD_H_ABS = 0x28
_LD_B_ABS = 0x30
_LD_H_IND = 0x48
_LDX_B_MSH = 0xB1
_LD_MEM = 0x60
_LDX_MEM = 0x61
_ST = 0x02
_TAX = 0x07
_TXA = 0x87
_ALU_AND_K = 0x54
_ALU_RSH_K = 0x74
_ALU_XOR_X = 0xAC
_ALU_MOD_K = 0x94
_JA = 0x05
_JEQ_K = 0x15
_JSET_K = 0x45
_RET_K = 0x06
_RET_A = 0x16
# ancillary loads: k = SKF_AD_OFF + SKF_AD_*
_SKF_AD_OFF = 0xFFFFF000  # -0x1000
_AD_PROTOCOL = _SKF_AD_OFF + 0  # skb->protocol, host order
_AD_PKTTYPE = _SKF_AD_OFF + 4  # skb->pkt_type: PACKET_HOST 0, BROADCAST 1, MULTICAST 2

ETH_ARP = 0x0806
ETH_IP4 = 0x0800
ETH_IP6 = 0x86DD
L4_PORTS = (6, 17, 132)  # TCP, UDP, SCTP: ports at the start of their header


def control_addresses(interfaces: Iterable) -> tuple[list[int], list[bytes]]:
    """The router's own destination addresses over all its interfaces (a packet to any
    of them arriving on any port is for the router): each interface address, its IPv4
    directed broadcasts and its IPv6 subnet-router anycast (the same set the FIB installs
    as local, broadcast and anycast routes), less the link-local ones the program takes
    as a prefix. Sorted, without repeats: equal sets give equal programs."""
    v4: set[int] = set()
    v6: set[bytes] = set()
    for itf in interfaces:
        for a in itf.addresses:
            for kind, net in address_routes(a):
                if kind == "connected":
                    continue
                if net.version == 4:
                    v4.add(int(net.network_address))
                elif not net.network_address.is_link_local:
                    v6.add(net.network_address.packed)
    return sorted(v4), sorted(v6)


class _Asm:
    """A few lines of classic BPF with labels: jt/jf/k may name one, resolved at the end."""

    def __init__(self) -> None:
        self.out: list[list] = []
        self.labels: dict[str, int] = {}

    def __call__(self, code: int, jt: int | str = 0, jf: int | str = 0, k: int | str = 0) -> None:
        self.out.append([code, jt, jf, k])

    def label(self, name: str) -> None:
        self.labels[name] = len(self.out)

    def resolve(self) -> list[tuple[int, int, int, int]]:
        prog = []
        for pc, (code, jt, jf, k) in enumerate(self.out):
            jt, jf, k = (self.labels[x] - pc - 1 if isinstance(x, str) else x
                         for x in (jt, jf, k))
            if not (0 <= jt <= 255 and 0 <= jf <= 255 and k >= 0):  # forward only
                raise AssertionError(f"jump out of range at {pc}")
            prog.append((code, jt, jf, k))
        return prog


def program(v4: list[int], v6: list[bytes], n_data: int) -> list[tuple[int, int, int, int]]:
    """The fanout program of a port with ``n_data`` data rings (one per worker) and a
    control ring after them: a list of sock_filter (code, jt, jf, k). Raises ValueError
    past the kernel's MAX_INSNS (:func:`fit` keeps the addresses that fit)."""
    if n_data < 1:
        raise ValueError(f"n_data must be >= 1, not {n_data}")
    ctl = n_data
    a = _Asm()
    a(_LD_W_ABS, k=_AD_PROTOCOL)
    a(_JEQ_K, "ctl", 0, ETH_ARP)
    a(_JEQ_K, 0, 1, ETH_IP4)
    a(_JA, k="v4")
    a(_JEQ_K, 0, 1, ETH_IP6)
    a(_JA, k="v6")
    a(_LD_W_ABS, k=_AD_PKTTYPE)  # another protocol: a link-layer group (LLDP, STP, ...)
    a(_JEQ_K, "ctl", 0, 1)  # broadcast
    a(_JEQ_K, "ctl", 0, 2)  # multicast
    a(_RET_K, k=0)
    a.label("ctl")
    a(_RET_K, k=ctl)
    a.label("v4")
    a(_LD_W_ABS, k=16)  # destination address
    a(_JEQ_K, 0, 1, 0xFFFFFFFF)  # the limited broadcast (DHCP, ...)
    a(_RET_K, k=ctl)
    for addr in v4:
        a(_JEQ_K, 0, 1, addr)
        a(_RET_K, k=ctl)
    a(_ALU_AND_K, k=0xFFFFFF00)
    a(_JEQ_K, 0, 1, 0xE0000000)  # 224.0.0.0/24: link-local multicast (OSPF, VRRP, ...)
    a(_RET_K, k=ctl)
    if n_data == 1:
        a(_RET_K, k=0)
    else:
        a(_JA, k="hash4")
    a.label("v6")
    a(_LD_W_ABS, k=24)
    a(_TAX)
    a(_ALU_AND_K, k=0xFFC00000)
    a(_JEQ_K, 0, 1, 0xFE800000)  # fe80::/10: ND, BGP unnumbered, OSPFv3
    a(_RET_K, k=ctl)
    a(_TXA)
    a(_ALU_AND_K, k=0xFFFF0000)
    a(_JEQ_K, 0, 1, 0xFF020000)  # ff02::/16: link-local multicast (ND, MLD, OSPFv3)
    a(_RET_K, k=ctl)
    for addr in v6:
        for i, w in enumerate(struct.unpack("!4I", addr)):  # a miss skips this address
            a(_LD_W_ABS, k=24 + 4 * i)
            a(_JEQ_K, 0, 2 * (3 - i) + 1, w)
        a(_RET_K, k=ctl)
    if n_data == 1:
        a(_RET_K, k=0)
    else:
        a(_JA, k="hash6")
        _hash(a, n_data)
    prog = a.resolve()
    if len(prog) > MAX_INSNS:
        raise ValueError(f"{len(v4)} IPv4 + {len(v6)} IPv6 router addresses need {len(prog)} "
                         f"BPF instructions, more than the kernel's {MAX_INSNS}")
    return prog


def _hash(a: _Asm, n_data: int) -> None:
    """Data ring = a symmetric hash mod n_data: XOR of the address words, XORed with the
    XOR of the two ports unless the packet is a fragment (M[0]: the hash so far)."""
    a.label("hash4")
    a(_LD_W_ABS, k=12)
    a(_TAX)
    a(_LD_W_ABS, k=16)
    a(_ALU_XOR_X)
    a(_ST, k=0)
    a(_LD_H_ABS, k=6)
    a(_JSET_K, "fold", 0, 0x3FFF)  # MF or an offset: a fragment, addresses only
    a(_LD_B_ABS, k=9)
    for p in L4_PORTS:
        a(_JEQ_K, "ports4", 0, p)
    a(_JA, k="fold")
    a.label("ports4")
    a(_LDX_B_MSH, k=0)  # X = 4 * IHL
    a(_LD_H_IND, k=0)
    a(_ST, k=1)
    a(_LD_H_IND, k=2)
    a(_JA, k="ports")
    a.label("hash6")
    a(_LD_W_ABS, k=8)
    for off in range(12, 40, 4):
        a(_TAX)
        a(_LD_W_ABS, k=off)
        a(_ALU_XOR_X)
    a(_ST, k=0)
    a(_LD_B_ABS, k=6)  # next header: no extension header walk (a fragment: addresses)
    for p in L4_PORTS:
        a(_JEQ_K, "ports6", 0, p)
    a(_JA, k="fold")
    a.label("ports6")
    a(_LD_H_ABS, k=40)
    a(_ST, k=1)
    a(_LD_H_ABS, k=42)
    a.label("ports")  # A = one port, M[1] the other
    a(_LDX_MEM, k=1)
    a(_ALU_XOR_X)
    a(_TAX)
    a(_LD_MEM, k=0)
    a(_ALU_XOR_X)
    a(_ST, k=0)
    a.label("fold")
    a(_LD_MEM, k=0)
    for shift in (16, 8):
        a(_TAX)
        a(_ALU_RSH_K, k=shift)
        a(_ALU_XOR_X)
    a(_ALU_MOD_K, k=n_data)
    a(_RET_A)


def fit(v4: list[int], v6: list[bytes], n_data: int) -> tuple[list[int], list[bytes]]:
    """The router addresses one program can steer (all of them unless there are some
    hundreds): the IPv4 ones first (two instructions each), then IPv6 (nine)."""
    room = MAX_INSNS - len(program([], [], n_data))
    n4 = min(len(v4), room // 2)
    return v4[:n4], v6[: min(len(v6), (room - 2 * n4) // 9)]


def fprog(prog: list[tuple[int, int, int, int]]) -> tuple[bytes, object]:
    """``struct sock_fprog`` for setsockopt, and the instruction buffer it points to (keep
    it alive until the call returns; the kernel copies it)."""
    insns = (ctypes.c_uint8 * (8 * len(prog)))()
    for i, (code, jt, jf, k) in enumerate(prog):
        struct.pack_into("=HBBI", insns, 8 * i, code, jt, jf, k)
    # struct sock_fprog { unsigned short len; struct sock_filter *filter; } (64-bit: 16 B)
    return struct.pack("=HxxxxxxQ", len(prog), ctypes.addressof(insns)), insns
