"""Classic BPF socket filters that split a port's traffic into two receive rings.

Under overload a port's RX ring is full and the kernel drops what arrives, whatever it is:
BGP keepalives, OSPF hellos, ARP and ND, pings to the router wait ~10 ms behind 7,680
transit frames or are lost with them. A router keeps the traffic that is *for it* out of
that queue. Each port therefore gets a second, small RX ring (the *control ring*) that the
worker reads before the data ring, and two complementary filters decide which ring a frame
reaches:

- the control ring takes frames with a group destination MAC (broadcast: ARP requests;
  multicast: ND, OSPF's 224.0.0.5/6, ff02::/16, MLD), ARP, IPv6 to a link-local
  destination (fe80::/10: ND, BGP unnumbered) and IPv4/IPv6 to one of the router's own
  addresses (:func:`control_addresses`);
- the data ring takes everything else.

Both programs are built from one predicate with the two verdicts swapped, so each frame
reaches exactly one ring: none is lost between them and none is seen twice. A frame too
short for a field is decided before the field is read (a classic BPF load beyond the
packet returns 0, which would drop it from both rings silently); such a frame goes to the
data ring, where the graph counts it. The graph does the same to a frame whichever ring it
came from, so only the queueing changes.

The programs see the frame from its Ethernet header (a SOCK_RAW packet socket); a VLAN tag
the device took out of the frame is not in it, so a tagged frame is classified by its
inner header, like an untagged one.
"""

from __future__ import annotations

import ctypes
import ipaddress
import socket
import struct
from collections.abc import Iterable

from vecroute.fib.fib import address_routes

__all__ = ["MAX_INSNS", "attach", "control_addresses", "describe", "program", "split_programs"]

SO_ATTACH_FILTER = 26
SO_DETACH_FILTER = 27
#: the kernel's BPF_MAXINSNS
MAX_INSNS = 4096
ACCEPT = 0xFFFFFFFF  # keep the whole frame
REJECT = 0

# opcodes (linux/bpf_common.h)
_LD_W_ABS = 0x20
_LD_H_ABS = 0x28
_LD_B_ABS = 0x30
_LD_W_LEN = 0x80
_ALU_AND_K = 0x54
_JA = 0x05
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06

ETH_ARP = 0x0806
ETH_IP4 = 0x0800
ETH_IP6 = 0x86DD
IP4_DST = 14 + 16
IP6_DST = 14 + 24


def control_addresses(interfaces: Iterable) -> tuple[list[int], list[bytes]]:
    """The router's own destination addresses over all its interfaces (a packet to any
    of them arriving on any port is for the router): each interface address, its IPv4
    directed broadcasts and its IPv6 subnet-router anycast (the same set the FIB installs
    as local, broadcast and anycast routes). Sorted, without repeats: equal sets give
    equal programs."""
    v4: set[int] = set()
    v6: set[bytes] = set()
    for itf in interfaces:
        for a in itf.addresses:
            for kind, net in address_routes(a):
                if kind == "connected":
                    continue
                if net.version == 4:
                    v4.add(int(net.network_address))
                else:
                    v6.add(net.network_address.packed)
    return sorted(v4), sorted(v6)


def program(v4: list[int], v6: list[bytes], control: bool) -> list[tuple[int, int, int, int]]:
    """The filter of the control ring (``control=True``) or of the data ring: a list of
    sock_filter (code, jt, jf, k). Raises ValueError past the kernel's MAX_INSNS."""
    ctl, data = (ACCEPT, REJECT) if control else (REJECT, ACCEPT)
    out: list[list] = []  # [code, jt, jf, k], jt/jf/k may be labels until resolved
    labels: dict[str, int] = {}

    def emit(code: int, jt: int | str = 0, jf: int | str = 0, k: int | str = 0) -> None:
        out.append([code, jt, jf, k])

    def label(name: str) -> None:
        labels[name] = len(out)

    emit(_LD_W_LEN)
    emit(_JGE_K, 0, "data", 14)
    emit(_LD_B_ABS, k=0)
    emit(_JSET_K, "ctl", 0, 1)  # group bit of the destination MAC
    emit(_LD_H_ABS, k=12)
    emit(_JEQ_K, "ctl", 0, ETH_ARP)
    emit(_JEQ_K, 0, 1, ETH_IP4)
    emit(_JA, k="v4")
    emit(_JEQ_K, 0, "data", ETH_IP6)
    emit(_JA, k="v6")
    label("ctl")
    emit(_RET_K, k=ctl)
    label("data")
    emit(_RET_K, k=data)
    label("v4")
    emit(_LD_W_LEN)
    emit(_JGE_K, 1, 0, IP4_DST + 4)
    emit(_RET_K, k=data)
    emit(_LD_W_ABS, k=IP4_DST)
    for a in v4:
        emit(_JEQ_K, 0, 1, a)
        emit(_RET_K, k=ctl)
    emit(_RET_K, k=data)
    label("v6")
    emit(_LD_W_LEN)
    emit(_JGE_K, 1, 0, IP6_DST + 16)
    emit(_RET_K, k=data)
    emit(_LD_W_ABS, k=IP6_DST)
    emit(_ALU_AND_K, k=0xFFC00000)
    emit(_JEQ_K, 0, 1, 0xFE800000)  # fe80::/10
    emit(_RET_K, k=ctl)
    for a in v6:
        words = struct.unpack("!4I", a)
        for i, w in enumerate(words):  # a miss skips to the next address's block
            emit(_LD_W_ABS, k=IP6_DST + 4 * i)
            emit(_JEQ_K, 0, 2 * (3 - i) + 1, w)
        emit(_RET_K, k=ctl)
    emit(_RET_K, k=data)
    if len(out) > MAX_INSNS:
        raise ValueError(f"{len(v4)} IPv4 + {len(v6)} IPv6 router addresses need {len(out)} "
                         f"BPF instructions, more than the kernel's {MAX_INSNS}")
    prog = []
    for pc, (code, jt, jf, k) in enumerate(out):
        if isinstance(jt, str):
            jt = labels[jt] - pc - 1
        if isinstance(jf, str):
            jf = labels[jf] - pc - 1
        if isinstance(k, str):
            k = labels[k] - pc - 1
        assert 0 <= jt <= 255 and 0 <= jf <= 255, (pc, jt, jf)
        prog.append((code, jt, jf, k))
    return prog


def split_programs(v4: list[int], v6: list[bytes]) -> tuple[list, list]:
    """(control ring's filter, data ring's filter) for these router addresses."""
    return program(v4, v6, True), program(v4, v6, False)


def attach(sock: socket.socket, prog: list[tuple[int, int, int, int]] | None) -> None:
    """Install ``prog`` on ``sock`` (SO_ATTACH_FILTER replaces the old one atomically:
    no frame sees neither), or remove the filter (None)."""
    if prog is None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_DETACH_FILTER, 0)
        except OSError:
            pass  # none attached
        return
    insns = (ctypes.c_uint8 * (8 * len(prog)))()
    for i, (code, jt, jf, k) in enumerate(prog):
        struct.pack_into("=HBBI", insns, 8 * i, code, jt, jf, k)
    # struct sock_fprog { unsigned short len; struct sock_filter *filter; } (64-bit: 16 B)
    fprog = struct.pack("=HxxxxxxQ", len(prog), ctypes.addressof(insns))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)  # the kernel copies it


def describe(v4: list[int], v6: list[bytes]) -> list[str]:
    """The addresses a filter steers to the control ring, as text (``show sockets``)."""
    return ([str(ipaddress.IPv4Address(a)) for a in v4]
            + [str(ipaddress.IPv6Address(a)) for a in v6])
