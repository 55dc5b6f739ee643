"""Bad input is normal input: garbage mixed into batches of valid packets.

Random byte strings, truncated packets, bit flips and lying length fields go through the
graph together with valid packets. Nothing may crash, every valid packet must leave
exactly as it does in a batch without the garbage, and every input packet must end in
exactly one counted disposition (drop reason, punt or transmit).
"""

from __future__ import annotations

import struct

from conftest import (
    BCAST,
    DST4,
    DST4_INCOMPLETE,
    DST4_NOROUTE,
    DST4_SMALL,
    DST6,
    DST6_SMALL,
    H0,
    H0_IP4,
    H0_IP6,
    N1,
    R0_IP4,
    R0_IP6,
    R1,
    R1_IP4,
    R1_IP6,
    R2_IP4,
    R3_IP4,
    R3_IP6,
    Router,
    assert_checksums,
    eth,
    inet_checksum,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import ICMP, IP, TCP, UDP, IPOption_RR, IPOption_Security
from scapy.layers.inet6 import (
    ICMPv6DestUnreach,
    ICMPv6EchoRequest,
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
)
from scapy.layers.l2 import ARP, Ether

VALID = [
    bytes(eth() / IP(src=H0_IP4, dst=DST4, ttl=9) / UDP(sport=1, dport=2) / (b"v" * 40)),
    bytes(
        eth()
        / IP(src=H0_IP4, dst="203.0.113.77", options=[IPOption_RR(routers=["0.0.0.0"])])
        / TCP(sport=3, dport=4)
        / b"opt"
    ),
    bytes(eth() / IPv6(src=H0_IP6, dst=DST6) / UDP(sport=5, dport=6) / (b"w" * 33)),
    bytes(
        eth()
        / IPv6(src=H0_IP6, dst=DST6)
        / IPv6ExtHdrHopByHop()
        / IPv6ExtHdrFragment(m=1)
        / UDP()
        / (b"x" * 16)
    ),
    bytes(eth() / IP(src=H0_IP4, dst=DST4_SMALL) / UDP() / (b"F" * 1000)),  # fragmented
    bytes(Ether(dst=R1, src=N1) / IP(src="203.0.113.3", dst=H0_IP4) / ICMP() / b"back"),
]
VALID_RX = ["eth0"] * 5 + ["eth1"]

# seeds for the mutations: every path of the graph
SEEDS = VALID + [
    bytes(eth() / IP(src=H0_IP4, dst=R0_IP4) / ICMP(id=1, seq=2) / b"ping"),
    bytes(eth() / IPv6(src=H0_IP6, dst=R0_IP6) / ICMPv6EchoRequest(data=b"ping6")),
    bytes(Ether(dst=BCAST, src=H0) / ARP(op=1, hwsrc=H0, psrc=H0_IP4, pdst=R0_IP4)),
    bytes(eth() / IP(src=H0_IP4, dst=DST4, ttl=1) / UDP() / (b"t" * 30)),
    bytes(eth() / IPv6(src=H0_IP6, dst=DST6, hlim=1) / UDP() / (b"t" * 30)),
    bytes(eth() / IP(src=H0_IP4, dst=DST4_NOROUTE) / UDP()),
    bytes(eth() / IP(src=H0_IP4, dst=DST4_SMALL, flags="DF") / UDP() / (b"D" * 900)),
    bytes(eth() / IPv6(src=H0_IP6, dst=DST6_SMALL) / UDP() / (b"B" * 1300)),
    bytes(eth() / IP(src=H0_IP4, dst=DST4_INCOMPLETE) / UDP()),
    bytes(
        eth()
        / IP(
            src=H0_IP4,
            dst=DST4_SMALL,
            options=[
                IPOption_Security(
                    security=0,
                    compartment=0,
                    handling_restrictions=0,
                    transmission_control_code=b"abc",
                )
            ],
        )
        / UDP()
        / (b"o" * 1200)
    ),
    bytes(
        eth()
        / IPv6(src=H0_IP6, dst=DST6)
        / IPv6ExtHdrHopByHop()
        / IPv6ExtHdrDestOpt()
        / IPv6ExtHdrRouting()
        / IPv6ExtHdrFragment(offset=3)
        / (b"r" * 24)
    ),
    bytes(eth() / IPv6(src=H0_IP6, dst=DST6, hlim=1) / ICMPv6DestUnreach() / IPv6() / UDP()),
    bytes(eth() / IP(src=H0_IP4, dst=DST4, ttl=1) / ICMP(type=3) / IP() / UDP()),
]

RNG_SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _fix_ip4_checksum(f: bytearray) -> None:
    """Recompute a (possibly lying) IPv4 header's checksum so validation goes deeper."""
    if len(f) < 34 or f[12:14] != b"\x08\x00":
        return
    ihl = (f[14] & 15) * 4
    if ihl < 20 or 14 + ihl > len(f):
        return
    f[24:26] = b"\0\0"
    f[24:26] = struct.pack("!H", inet_checksum(bytes(f[14 : 14 + ihl])))


@st.composite
def garbage(draw) -> bytes:
    kind = draw(st.sampled_from(["random", "random-l3", "truncate", "flip", "lie", "lie", "huge"]))
    if kind == "random":
        return draw(st.binary(min_size=0, max_size=120))
    if kind == "random-l3":
        et = draw(st.sampled_from([b"\x08\x00", b"\x86\xdd", b"\x08\x06"]))
        body = draw(st.binary(min_size=0, max_size=200))
        if et == b"\x08\x00" and body and draw(st.booleans()):
            body = bytes([0x45]) + body[1:]
        f = bytearray(bytes(eth())[:12] + et + body)
        if draw(st.booleans()):
            _fix_ip4_checksum(f)
        return bytes(f)
    seed = bytearray(draw(st.sampled_from(SEEDS)))
    if kind == "truncate":
        return bytes(seed[: draw(st.integers(0, len(seed) - 1))])
    if kind == "flip":
        for _ in range(draw(st.integers(1, 8))):
            k = draw(st.integers(0, len(seed) * 8 - 1))
            seed[k // 8] ^= 1 << (k % 8)
        if draw(st.booleans()):
            _fix_ip4_checksum(seed)
        return bytes(seed)
    if kind == "huge":
        return bytes(seed) + b"\0" * draw(st.integers(1, 3000))
    # lying length fields: IPv4 total length / IHL, IPv6 payload length, ext header
    # lengths, UDP length, ARP lengths; checksum fixed so the packet gets past it
    fld = draw(st.sampled_from(["tot", "ihl", "plen", "ext", "l4", "arp"]))
    if fld == "tot" and seed[12:14] == b"\x08\x00":
        seed[16:18] = struct.pack("!H", draw(st.integers(0, 0xFFFF)))
    elif fld == "ihl" and seed[12:14] == b"\x08\x00":
        seed[14] = 0x40 | draw(st.integers(0, 15))
    elif fld == "plen" and seed[12:14] == b"\x86\xdd":
        seed[18:20] = struct.pack("!H", draw(st.integers(0, 0xFFFF)))
    elif fld == "ext" and seed[12:14] == b"\x86\xdd" and len(seed) > 56:
        seed[55] = draw(st.integers(0, 255))
        seed[54] = draw(st.sampled_from([0, 6, 17, 43, 44, 58, 59, 60, 255]))
    elif fld == "l4" and len(seed) > 40:
        k = draw(st.integers(34, min(len(seed), 80) - 2))
        seed[k : k + 2] = struct.pack("!H", draw(st.integers(0, 0xFFFF)))
    elif fld == "arp" and seed[12:14] == b"\x08\x06":
        seed[18 + draw(st.integers(0, 1))] = draw(st.integers(0, 255))
    else:
        seed = seed[: draw(st.integers(0, len(seed)))]
    _fix_ip4_checksum(seed)
    return bytes(seed)


OURS = {R0_IP4, R1_IP4, R2_IP4, R3_IP4, R0_IP6, R1_IP6, R3_IP6}
_BASE_ROUTER = Router()
BASELINE = _BASE_ROUTER.run(list(zip(VALID_RX, VALID, strict=True)), now_ns=10**9)


def _outputs(res, idx: int) -> list[tuple[str, bytes]]:
    return [(t.ifname, t.data) for t in res.tx if t.orig == idx]


def test_baseline_is_sane() -> None:
    """The valid packets alone are all forwarded (the fragmented one in pieces)."""
    for k in range(len(VALID)):
        outs = BASELINE.of(k)
        assert outs, k
        for t in outs:
            assert_checksums(t.pkt)
    assert BASELINE.drops == 0
    BASELINE.check_accounting()


_ROUTER = Router()


@RNG_SETTINGS
@given(
    junk=st.lists(
        st.tuples(garbage(), st.sampled_from(["eth0", "eth1", "eth2", "eth3"])),
        min_size=1,
        max_size=40,
    ),
    slots=st.data(),
)
def test_garbage_mixed_with_valid(junk, slots) -> None:
    n = len(VALID) + len(junk)
    pos = sorted(
        slots.draw(
            st.lists(st.integers(0, n - 1), min_size=len(VALID), max_size=len(VALID), unique=True)
        )
    )
    items: list = [None] * n
    for k, p in enumerate(pos):
        items[p] = (VALID_RX[k], VALID[k])
    it = iter(junk)
    for j in range(n):
        if items[j] is None:
            g, rx = next(it)
            items[j] = (rx, g)
    res = _ROUTER.run(items, now_ns=10**9)
    res.check_accounting()
    for k, p in enumerate(pos):
        assert _outputs(res, p) == _outputs(BASELINE, k), f"valid packet {k} damaged"


@RNG_SETTINGS
@given(frames=st.lists(garbage(), min_size=1, max_size=60))
def test_garbage_only_every_output_parses(frames) -> None:
    """Whatever garbage produces (ICMP errors, fragments, replies) is well formed."""
    res = _ROUTER.run(frames, now_ns=2 * 10**9)
    res.check_accounting()
    for t in res.tx:
        q = t.pkt
        ip = q.payload
        # transit packets keep whatever upper-layer checksum they came with; what the
        # router wrote itself (errors, echo replies: from one of its addresses) must be right
        if type(ip) is IP:  # the outer header (an IPv6 packet may carry IPv4 inside)
            assert inet_checksum(bytes(ip)[: ip.ihl * 4]) == 0
            assert len(t.data) == 14 + ip.len
            if ip.src in OURS and not (ip.flags.MF or ip.frag):
                assert_checksums(q)
        elif type(ip) is IPv6:
            assert len(t.data) == 14 + 40 + ip.plen
            if ip.src in OURS or ip.src.startswith("fe80:"):
                assert_checksums(q)


def test_full_vector_of_garbage_and_valid() -> None:
    """A full 256-packet vector, many of them generating fragments and errors."""
    import random

    rng = random.Random(99)
    items = []
    for k in range(256):
        s = bytearray(rng.choice(SEEDS))
        if k % 3:
            for _ in range(rng.randrange(1, 4)):
                s[rng.randrange(len(s))] ^= 1 << rng.randrange(8)
        items.append(("eth0", bytes(s)))
    res = Router().run(items, now_ns=10**9)
    res.check_accounting()
