"""IPv4 fragmentation (RFC 791 3.2 / RFC 1812 5.2.6): fragments checked one by one with
scapy, then reassembled with scapy's ``defragment`` and compared with the original."""

from __future__ import annotations

import random

import pytest
from conftest import (
    DST4_SMALL,
    DST6_SMALL,
    H0_IP4,
    H0_IP6,
    N2,
    R2,
    SMALL_MTU,
    Router,
    assert_checksums,
    base_config,
    eth,
    inet_checksum,
    mac_bytes,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import (
    IP,
    UDP,
    IPOption,
    IPOption_LSRR,
    IPOption_NOP,
    IPOption_RR,
    IPOption_Security,
    defragment,
)
from scapy.layers.inet6 import IPv6
from scapy.packet import Raw

_ROUTERS: dict[int, Router] = {}


def router_for(mtu: int) -> Router:
    """A router whose eth2 (the 203.0.113.128/26 next hop) has this MTU."""
    if mtu not in _ROUTERS:
        cfg = base_config()
        cfg["interfaces"][2]["mtu"] = mtu
        _ROUTERS[mtu] = Router(cfg)
    return _ROUTERS[mtu]


def copied_options(opt_bytes: bytes) -> bytes:
    """Independent oracle: the options with the copy flag, padded with zeros to 4 bytes."""
    out, p = b"", 0
    while p < len(opt_bytes):
        t = opt_bytes[p]
        if t == 0:
            break
        if t == 1:
            p += 1
            continue
        ln = opt_bytes[p + 1]
        if t & 0x80:
            out += opt_bytes[p : p + ln]
        p += ln
    return out + b"\0" * (-len(out) % 4)


def check_fragments(sent, frags, mtu: int, base: int = 0, last_mf: bool = False) -> None:
    """frags (Tx, in order) are a correct fragmentation of ``sent`` (Ether/IP)."""
    orig = bytes(sent[IP])
    ihl = (orig[0] & 15) * 4
    opts = orig[20:ihl]
    data = orig[ihl:]
    assert len(frags) >= 2
    pos = 0
    for n, t in enumerate(frags):
        assert t.ifname == "eth2"
        assert t.data[:6] == mac_bytes(N2) and t.data[6:12] == mac_bytes(R2)
        assert t.data[12:14] == b"\x08\x00"
        q = t.pkt
        ip = q[IP]
        raw = bytes(ip)
        assert len(raw) == ip.len <= mtu, "every fragment fits the MTU"
        assert len(t.data) == 14 + ip.len
        fihl = ip.ihl * 4
        if n == 0:
            assert raw[20:fihl] == opts, "the first fragment keeps every option"
        else:
            assert raw[20:fihl] == copied_options(opts), "later ones only copied options"
        # fixed header fields (TTL one less), checksum independently verified and by scapy
        assert ip.version == 4 and ip.tos == sent[IP].tos and ip.id == sent[IP].id
        assert ip.proto == sent[IP].proto and ip.ttl == sent[IP].ttl - 1
        assert ip.src == sent[IP].src and ip.dst == sent[IP].dst
        assert not ip.flags.DF
        assert inet_checksum(raw[:fihl]) == 0
        assert_checksums(q)
        # offsets: contiguous, in 8-byte units; MF on all but the last (unless it had MF)
        assert ip.frag * 8 == base + pos
        piece = raw[fihl:]
        last = n == len(frags) - 1
        if not last:
            assert len(piece) % 8 == 0 and len(piece) > 0
        assert bool(ip.flags.MF) == (not last or last_mf)
        assert piece == data[pos : pos + len(piece)]
        pos += len(piece)
    assert pos == len(data), "all data carried, once"


def run_one(mtu: int, p):
    r = router_for(mtu)
    res = r.run([p])
    res.check_accounting()
    return res


@pytest.mark.parametrize("mtu", [68, 100, 576, 1006, 1280, 1499])
def test_fragment_and_reassemble(mtu: int) -> None:
    payload = bytes(random.Random(mtu).randbytes(1700))
    p = (
        eth()
        / IP(src=H0_IP4, dst=DST4_SMALL, id=0x4242, ttl=30, tos=0x10)
        / UDP(sport=1000, dport=2000)
        / Raw(payload)
    )
    res = run_one(mtu, p)
    n = -(-(len(bytes(p[IP])) - 20) // ((mtu - 20) // 8 * 8))
    assert len(res.tx) == n
    assert res.c("fragments-created") == n
    assert res.c("ip4-forwarded") == 1
    assert res.c("fib-lookups") == 1, "fragments reuse the packet's one lookup"
    check_fragments(p, res.tx, mtu)
    whole = defragment([t.pkt[IP] for t in res.tx])
    assert len(whole) == 1
    w = whole[0]
    want = IP(bytes(p[IP]))
    want.ttl -= 1
    del want.chksum
    assert bytes(w[IP].payload) == bytes(p[IP].payload)
    assert bytes(IP(bytes(want))) == bytes(IP(bytes(w)))[: len(bytes(want))]
    assert w[UDP].sport == 1000 and bytes(w[Raw]) == payload


@pytest.mark.parametrize("mtu", [68, 120, 576])
def test_fragment_options_copy_flag(mtu: int) -> None:
    opts = [
        IPOption_RR(routers=["0.0.0.0"] * 2),
        IPOption_Security(
            security=0, compartment=0, handling_restrictions=0, transmission_control_code=b"xyz"
        ),
        IPOption_NOP(),
        IPOption_LSRR(routers=["192.0.2.66"]),
        IPOption(b"\x44\x08\x05\x00\x00\x00\x00\x00"),
        IPOption_NOP(),
    ]  # timestamp
    p = eth() / IP(src=H0_IP4, dst=DST4_SMALL, options=opts) / UDP() / (b"o" * 700)
    hdr = bytes(p[IP])
    ihl = (hdr[0] & 15) * 4
    assert ihl > 20 and ihl <= 60
    assert mtu - ihl >= 8  # every parametrized MTU leaves room for 8 bytes of data
    res = run_one(mtu, p)
    check_fragments(p, res.tx, mtu)
    later = copied_options(hdr[20:ihl])
    assert later and later[0] == 130  # security (copied); RR and timestamp are not
    for t in res.tx[1:]:
        assert t.pkt[IP].ihl * 4 == 20 + len(later)
    whole = defragment([t.pkt[IP] for t in res.tx])
    assert len(whole) == 1 and bytes(whole[0][IP].payload) == bytes(p[IP].payload)


@pytest.mark.parametrize("last_mf", [False, True])
def test_refragment_keeps_offset_base_and_mf(last_mf: bool) -> None:
    """A fragment (offset 800, MF as given) split again: pieces start at 800, contiguous,
    the last piece keeps the original MF bit."""
    data = bytes(range(256)) * 4
    p = (
        eth()
        / IP(src=H0_IP4, dst=DST4_SMALL, id=7, frag=100, flags="MF" if last_mf else 0, proto=17)
        / Raw(data)
    )
    res = run_one(SMALL_MTU, p)
    check_fragments(p, res.tx, SMALL_MTU, base=800, last_mf=last_mf)


def test_refragment_first_fragment() -> None:
    """An offset-0 fragment with MF: its pieces all carry MF."""
    p = eth() / IP(src=H0_IP4, dst=DST4_SMALL, id=8, flags="MF") / UDP() / (b"a" * 1000)
    res = run_one(SMALL_MTU, p)
    check_fragments(p, res.tx, SMALL_MTU, base=0, last_mf=True)


def test_exact_mtu_not_fragmented() -> None:
    p = eth() / IP(src=H0_IP4, dst=DST4_SMALL) / UDP() / (b"e" * (SMALL_MTU - 28))
    res = run_one(SMALL_MTU, p)
    assert len(res.tx) == 1 and res.c("fragments-created") == 0
    q = res.tx[0].pkt
    assert q[IP].len == SMALL_MTU and q[IP].flags == 0 and q[IP].frag == 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    size=st.integers(0, 1900),
    mtu=st.sampled_from([68, 96, 200, 576, 1000, 1500]),
    nopts=st.integers(0, 3),
)
def test_fragment_property(size: int, mtu: int, nopts: int) -> None:
    opts = [
        IPOption_Security(
            security=1, compartment=0, handling_restrictions=0, transmission_control_code=b"abc"
        ),
        IPOption_RR(routers=["0.0.0.0"]),
        IPOption_NOP(),
    ][:nopts]
    p = eth() / IP(src=H0_IP4, dst=DST4_SMALL, options=opts, id=size) / Raw(b"\xab" * size)
    res = run_one(mtu, p)
    tot = len(bytes(p[IP]))
    if tot <= mtu:
        assert len(res.tx) == 1 and res.c("fragments-created") == 0
        return
    check_fragments(p, res.tx, mtu)
    whole = defragment([t.pkt[IP] for t in res.tx])
    assert len(whole) == 1 and bytes(whole[0][IP].payload) == bytes(p[IP].payload)


def test_many_fragments_batch_runs_out_of_slots() -> None:
    """A full vector of big packets into a 68-byte MTU needs more slots than the batch has:
    the packets that do not fit are dropped as frag-no-buffer, the others are complete."""
    r = router_for(68)
    pkts = [
        eth() / IP(src=H0_IP4, dst=DST4_SMALL, id=k) / Raw(bytes([k % 256]) * 1400)
        for k in range(256)
    ]
    res = r.run(pkts)
    res.check_accounting()
    done = sorted({t.orig for t in res.tx})
    assert res.c("frag-no-buffer") == 256 - len(done) > 0
    for k in done:
        frags = [t for t in res.tx if t.orig == k]
        check_fragments(pkts[k], frags, 68)


def test_ipv6_never_fragmented() -> None:
    r = Router()
    p = eth() / IPv6(src=H0_IP6, dst=DST6_SMALL) / UDP() / (b"6" * 1400)
    res = r.run([p])
    assert res.c("fragments-created") == 0 and res.c("mtu-exceeded") == 1
    assert len(res.tx) == 1 and res.tx[0].ifname == "eth0"
    assert res.tx[0].pkt[IPv6].nh == 58 and bytes(res.tx[0].pkt[IPv6])[40] == 2
