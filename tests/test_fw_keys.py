"""``extract_keys``: key rows from a packet batch, checked field by field against scapy."""

from __future__ import annotations

import ipaddress

import numpy as np
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import ICMPv6EchoRequest, IPv6, IPv6ExtHdrFragment
from scapy.layers.l2 import Ether

from vecroute.firewall.keys import K_COLS, extract_keys, key_address, make_key
from vecroute.packet.batch import (
    F_FRAG,
    F_FRAG_NONFIRST,
    M_FLAGS,
    M_L3,
    M_L4,
    M_OFF,
    M_PROTO,
    M_RX,
    M_TX,
    PacketBatch,
)

PACKETS = [
    Ether()
    / IP(src="192.0.2.1", dst="198.51.100.2", ttl=7)
    / TCP(sport=1234, dport=80, flags="SA"),
    Ether() / IPv6(src="2001:db8::1", dst="2001:db8:1::2", hlim=9) / UDP(sport=53, dport=5353),
    Ether() / IP(src="192.0.2.1", dst="198.51.100.2") / ICMP(type=8),
    Ether() / IPv6(src="2001:db8::1", dst="2001:db8:1::2") / ICMPv6EchoRequest(),
    Ether() / IP(src="192.0.2.1", dst="198.51.100.2", frag=100, proto=6) / ("x" * 20),
    Ether() / IP(src="192.0.2.1", dst="198.51.100.2", flags="MF") / UDP(sport=1, dport=2),
    Ether()
    / IPv6(src="2001:db8::1", dst="2001:db8::2")
    / IPv6ExtHdrFragment(offset=8, nh=6)
    / ("y" * 16),
    Ether() / IP(src="192.0.2.1", dst="198.51.100.2", proto=6) / b"\x00\x01",  # truncated TCP
    Ether() / IP(src="192.0.2.1", dst="198.51.100.2", proto=47) / ("z" * 8),
]
PACKETS = [Ether(bytes(p)) for p in PACKETS]  # every length and checksum field filled in


def load(pkts):
    b = PacketBatch(16)
    raw = [bytes(p) for p in pkts]
    data = np.frombuffer(b"".join(raw), np.uint8)
    offs = np.cumsum([0] + [len(r) for r in raw[:-1]]).astype(np.int64)
    b.load(
        data,
        offs,
        np.array([len(r) for r in raw], np.int32),
        np.zeros(len(raw), np.int64),
        np.arange(len(raw), dtype=np.int32),
        0,
        len(raw),
    )
    for i, p in enumerate(pkts):
        o = b.meta[M_OFF, i]
        b.meta[M_L3, i] = o + 14
        ip = p.payload
        if isinstance(ip, IP):
            l4 = o + 14 + ip.ihl * 4
            proto = ip.proto
            flags = F_FRAG if (ip.flags.MF or ip.frag) else 0
            flags |= F_FRAG_NONFIRST if ip.frag else 0
        else:
            l4 = o + 14 + 40
            proto = ip.nh
            flags = 0
            if proto == 44:
                fh = ip.payload
                proto = fh.nh
                l4 += 8
                flags = F_FRAG | (F_FRAG_NONFIRST if fh.offset else 0)
        b.meta[M_L4, i] = l4
        b.meta[M_PROTO, i] = proto
        b.meta[M_FLAGS, i] = flags
        b.meta[M_TX, i] = 3 if i % 2 else -1
    return b


def test_keys_from_a_batch():
    b = load(PACKETS)
    n = len(PACKETS)
    keys = np.zeros((n, K_COLS), np.int64)
    work = np.arange(n, dtype=np.int32)
    extract_keys(b.buf, b.meta, work, n, keys)
    for i, p in enumerate(PACKETS):
        ip = p.payload
        k = keys[i]
        fam = 4 if isinstance(ip, IP) else 6
        assert k[0] == fam
        assert key_address(k, "src") == ipaddress.ip_address(ip.src)
        assert key_address(k, "dst") == ipaddress.ip_address(ip.dst)
        assert k[10] == (ip.ttl if fam == 4 else ip.hlim)
        assert k[14] == (ip.len if fam == 4 else 40 + ip.plen)
        assert k[12] == b.meta[M_RX, i] and k[13] == b.meta[M_TX, i]
    tcp, udp6, icmp, icmp6, frag, first, frag6, short, gre = keys
    assert (tcp[5], tcp[6], tcp[7], tcp[8], tcp[9]) == (6, 1234, 80, 0x12, -1)
    assert (udp6[5], udp6[6], udp6[7], udp6[8]) == (17, 53, 5353, -1)
    assert (icmp[5], icmp[6], icmp[9]) == (1, -1, 8)
    assert (icmp6[5], icmp6[9]) == (58, 128)
    assert (frag[11], frag[6], frag[7], frag[8]) == (3, -1, -1, -1)
    assert (first[11], first[6], first[7]) == (1, 1, 2)
    assert (frag6[5], frag6[11], frag6[6]) == (6, 3, -1)
    assert (short[5], short[6], short[8]) == (6, -1, -1)
    assert (gre[5], gre[6], gre[9]) == (47, -1, -1)
    assert np.array_equal(
        make_key("192.0.2.1", "198.51.100.2", 6, 1234, 80, 0x12, ttl=7, length=40), tcp
    )


def test_kernel_entry_points_agree():
    """fw_batch (FW tuple built inside compiled code, as a graph node does), fw_classify
    (one row) and the flat Python entry give the same answers and counters."""
    from numba import njit

    from vecroute.firewall.classify import fw_batch, fw_classify
    from vecroute.firewall.config import parse_firewall_config
    from vecroute.firewall.firewall import Firewall
    from vecroute.firewall.layout import FW

    @njit
    def node(args, keys, n, direction, now, v, r, a):
        fw = FW(*args)
        fw_batch(fw, keys, n, direction, now, v, r, a)

    @njit
    def one_by_one(args, keys, n, direction, now, v, r, a):
        fw = FW(*args)
        for i in range(n):
            v[i], r[i], a[i] = fw_classify(fw, keys, i, direction, now)

    raw = {
        "rules": [
            "100 count ip from any to any",
            "200 allow tcp from 192.0.2.0/24 to any",
            "300 reject udp from any to any 53",
            "400 allow ip6 from any to any",
        ]
    }
    keys = np.stack(
        [
            make_key("192.0.2.1", "198.51.100.2", 6, 1, 80, 0x02),
            make_key("203.0.113.1", "198.51.100.2", 17, 1, 53),
            make_key("2001:db8::1", "2001:db8::2", 17, 1, 53),
            make_key("203.0.113.1", "198.51.100.2", 47),
        ]
    )
    n = keys.shape[0]
    outs, counters = [], []
    for how in ("flat", "node", "one"):
        fw = Firewall(parse_firewall_config(raw, "k.toml"))
        if how == "flat":
            v, r, a = fw.classify(keys, 0, 7)
        else:
            v, r, a = (np.zeros(n, np.int32) for _ in range(3))
            (node if how == "node" else one_by_one)(fw.args(), keys, n, 0, 7, v, r, a)
        outs.append((v.tolist(), r.tolist(), a.tolist()))
        counters.append(fw.compiled.cnt.copy())
    assert outs[0] == outs[1] == outs[2]
    assert outs[0] == ([0, 2, 2, 1], [1, 2, 2, 4], [0, 0x301, 0x101, 0])
    assert all(np.array_equal(counters[0], c) for c in counters[1:])
