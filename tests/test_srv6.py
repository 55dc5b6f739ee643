"""SRv6 (RFC 8754, RFC 8986) through the compiled graph, scapy as the oracle.

Head-ends (H.Encaps, H.Encaps.Red for IPv6 and IPv4 inner packets, weighted segment
lists, steering by a route in any table and by the binding SID itself), the endpoint
behaviours (End, End.X, End.T with and without PSP, End.DX4/DX6/DT4/DT6/DT46), every SRH
error of RFC 8754 4.3.1.1 / RFC 8986 4.1, packet-too-big reduced by the encapsulation
overhead, the control plane (config keys, ctl) and garbage SRHs mixed into valid batches.
Every emitted packet is parsed back with scapy and its checksums recomputed.
"""

from __future__ import annotations

import copy
import ipaddress
import struct
from collections import Counter

import pytest
from conftest import (
    H0,
    H0_IP4,
    H0_IP6,
    N1,
    N1_IP4,
    N1_IP6,
    N3,
    N3_IP6,
    R0,
    R0_IP4,
    R0_IP6,
    R1,
    R1_IP4,
    R1_IP6,
    R2_IP4,
    R3,
    R3_IP4,
    R3_IP6,
    Router,
    assert_checksums,
    assert_sums,
    base_config,
    eth,
    ip4_header_ok,
    mac_bytes,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.inet6 import (
    ICMPv6DestUnreach,
    ICMPv6EchoReply,
    ICMPv6EchoRequest,
    ICMPv6PacketTooBig,
    ICMPv6ParamProblem,
    ICMPv6TimeExceeded,
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrSegmentRouting,
    IPv6ExtHdrSegmentRoutingTLVHMAC,
    IPv6ExtHdrSegmentRoutingTLVPadN,
)
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from vecroute.control.commands import CommandError, execute
from vecroute.control.config import parse_config
from vecroute.fib.fib import Fib, RouteError
from vecroute.graph.dataplane import fib_state
from vecroute.graph.dispatch import Graph
from vecroute.packet.batch import PacketBatch
from vecroute.srv6.tables import Policy

SRH = IPv6ExtHdrSegmentRouting

# --- the SRv6 test network ---------------------------------------------------------------------
# eth0..eth3 as in conftest; eth4 lives in table 5, which routes the same prefixes as table 0
# but out of eth4, so a lookup in the wrong table shows.
R4 = "02:00:00:00:00:05"
N4 = "02:00:00:00:ee:02"
R4_IP4, R4_IP6 = "192.0.2.193", "2001:db8:5::1"
N4_IP4, N4_IP6 = "192.0.2.194", "2001:db8:5::2"
T5 = 5

SRC = "2001:db8:ffff::1"  # [srv6] encap_source
SEG1 = "2001:db8:100::1"  # first segments: routed via N1 on eth1 (MTU 1500)
SEG2, SEG3 = "2001:db8:aa::2", "2001:db8:bb::3"
SEG_SMALL = "2001:db8:200::1"  # via N3 on eth3 (MTU 1280)
SEG_NOROUTE = "2001:db8:dead::1"
NEXT6 = "2001:db8:100::9"  # where End sends packets next (via N1)

SID_END, SID_END_PSP = "2001:db8:ff::1", "2001:db8:ff::2"
SID_X, SID_X_PSP = "2001:db8:ff::3", "2001:db8:ff::4"
SID_T = "2001:db8:ff::5"
SID_DX4, SID_DX6 = "2001:db8:ff::d4", "2001:db8:ff::d6"
SID_DT4, SID_DT6, SID_DT46 = "2001:db8:ff::f4", "2001:db8:ff::f6", "2001:db8:ff::46"
LOCATOR = "2001:db8:fe::/48"  # a locator prefix bound to End
SID_IN_LOCATOR = "2001:db8:fe::77"

# head-end policies: name -> (mode, segments, IPv4 prefix steered, IPv6 prefix steered)
POLICIES = {
    "e1": ("encap", [SEG1], "203.0.113.16/28", "2001:db8:401::/48"),
    "e2": ("encap", [SEG1, SEG2], "203.0.113.32/28", "2001:db8:402::/48"),
    "e3": ("encap", [SEG1, SEG2, SEG3], "203.0.113.48/28", "2001:db8:403::/48"),
    "r1": ("encap.red", [SEG1], "203.0.113.64/28", "2001:db8:411::/48"),
    "r2": ("encap.red", [SEG1, SEG2], "203.0.113.80/28", "2001:db8:412::/48"),
    "r3": ("encap.red", [SEG1, SEG2, SEG3], "203.0.113.96/28", "2001:db8:413::/48"),
    "small": ("encap", [SEG_SMALL, SEG2], "203.0.113.112/29", "2001:db8:420::/48"),
    "noroute": ("encap", [SEG_NOROUTE], "203.0.113.120/29", "2001:db8:421::/48"),
}
BSIDS = {name: f"2001:db8:ff:b::{n + 1:x}" for n, name in enumerate(POLICIES)}
BSID_W = "2001:db8:ff:b::100"  # weighted: two lists, weights 1 and 3
W_A, W_B = "2001:db8:100::a", "2001:db8:100::b"
W_V6 = "2001:db8:430::/48"
BSID_T5 = "2001:db8:ff:b::105"  # steered from table 5
T5_V6 = "2001:db8:450::/48"


def first_addr(prefix: str, k: int = 5) -> str:
    return str(ipaddress.ip_network(prefix)[k])


def srv6_config(**extra) -> dict:
    cfg = base_config()
    cfg["interfaces"].append(
        {"name": "eth4", "mac": R4, "addresses": [f"{R4_IP4}/26", f"{R4_IP6}/64"], "table": T5}
    )
    cfg["routes"] += [
        {"prefix": "203.0.113.0/24", "via": N4_IP4, "table": T5},
        {"prefix": "2001:db8:100::/48", "via": N4_IP6, "table": T5},
    ]
    cfg["neighbors"] += [
        {"ip": N4_IP4, "mac": N4, "interface": "eth4"},
        {"ip": N4_IP6, "mac": N4, "interface": "eth4"},
    ]
    policies = [
        {"bsid": BSIDS[n], "mode": mode, "segments": segs}
        for n, (mode, segs, _, _) in POLICIES.items()
    ]
    policies.append(
        {
            "bsid": BSID_W,
            "segment_lists": [{"segments": [W_A], "weight": 1}, {"segments": [W_B], "weight": 3}],
        }
    )
    policies.append({"bsid": BSID_T5, "segments": [SEG1], "source": "2001:db8:ffff::5"})
    steering = []
    for n, (_, _, v4, v6) in POLICIES.items():
        steering += [{"prefix": v4, "bsid": BSIDS[n]}, {"prefix": v6, "bsid": BSIDS[n]}]
    steering += [
        {"prefix": W_V6, "bsid": BSID_W},
        {"prefix": T5_V6, "bsid": BSID_T5, "table": T5},
    ]
    cfg["srv6"] = {
        "encap_source": SRC,
        "localsids": [
            {"sid": SID_END, "behavior": "End"},
            {"sid": SID_END_PSP, "behavior": "End", "flavor": "PSP"},
            {"sid": SID_X, "behavior": "End.X", "nh": N3_IP6},
            {"sid": SID_X_PSP, "behavior": "End.X", "nh": N3_IP6, "flavor": "PSP"},
            {"sid": SID_T, "behavior": "End.T", "table": T5},
            {"sid": SID_DX4, "behavior": "End.DX4", "nh": N1_IP4},
            {"sid": SID_DX6, "behavior": "End.DX6", "nh": N3_IP6},
            {"sid": SID_DT4, "behavior": "End.DT4", "table": T5},
            {"sid": SID_DT6, "behavior": "End.DT6", "table": T5},
            {"sid": SID_DT46, "behavior": "End.DT46", "table": T5},
            {"sid": LOCATOR, "behavior": "End"},
        ],
        "policies": policies,
        "steering": steering,
    }
    cfg.update(extra)
    return cfg


@pytest.fixture(scope="module")
def shared() -> Router:
    return Router(srv6_config())


@pytest.fixture
def r() -> Router:
    return Router(srv6_config())


def swap(r: Router) -> None:
    """Push the control plane's changes to the data path (what ctl's commit does)."""
    r.graph.swap_state(fib_state(r.fib))
    r.state = r.graph.state


def one(r: Router, pkt, rx: str = "eth0", **kw):
    """Run one packet; returns (result, the single frame sent, parsed)."""
    res = r.run([pkt], rx=rx, **kw)
    res.check_accounting()
    assert len(res.tx) == 1, (res.counters, [t.pkt.summary() for t in res.tx])
    t = res.tx[0]
    p = t.pkt
    assert_checksums(p)
    return res, t, p


def udp6(
    dst: str, hlim: int = 9, tc: int = 0, fl: int = 0, sport: int = 1234, n: int = 40, mac: str = R0
):
    return (
        eth(dst=mac)
        / IPv6(src=H0_IP6, dst=dst, hlim=hlim, tc=tc, fl=fl)
        / UDP(sport=sport, dport=5678)
        / (b"6" * n)
    )


def udp4(dst: str, ttl: int = 9, tos: int = 0, df: bool = False, sport: int = 1234, n: int = 40):
    return (
        eth()
        / IP(src=H0_IP4, dst=dst, ttl=ttl, tos=tos, flags="DF" if df else 0, id=77)
        / UDP(sport=sport, dport=5678)
        / (b"4" * n)
    )


def l3(frame) -> bytes:
    """The IP packet of a frame (no Ethernet header, no padding)."""
    data = bytes(frame)[14:]
    if data[0] >> 4 == 6:
        return data[: 40 + struct.unpack("!H", data[4:6])[0]]
    return data[: struct.unpack("!H", data[2:4])[0]]


def decremented(ip: bytes) -> bytes:
    """The IP packet with its TTL / hop limit one less (IPv4 checksum recomputed by scapy)."""
    if ip[0] >> 4 == 6:
        return ip[:7] + bytes([ip[7] - 1]) + ip[8:]
    p = IP(ip)
    p.ttl -= 1
    del p.chksum
    return bytes(p)


def expected_outer(mode: str, segs: list[str], inner: bytes, src: str = SRC) -> IPv6:
    """The outer header RFC 8986 5.1/5.2 and Linux seg6 build, independently, with scapy
    (flow label left 0: it is a hash, checked separately)."""
    v6 = inner[0] >> 4 == 6
    if v6:
        tc = ((inner[0] & 0xF) << 4) | (inner[1] >> 4)
        hlim = inner[7]
    else:
        tc, hlim = inner[1], inner[8]
    nh = 41 if v6 else 4
    srh_segs = segs if mode == "encap" else segs[1:]
    outer = IPv6(src=src, dst=segs[0], tc=tc, hlim=hlim)
    if srh_segs:
        outer.nh = 43
        outer /= SRH(
            nh=nh,
            addresses=list(reversed(srh_segs)),
            segleft=len(segs) - 1,
            lastentry=len(srh_segs) - 1,
        )
    else:
        outer.nh = nh
    return outer / Raw(inner)


def check_encap(
    t, mode: str, segs: list[str], sent, src: str = SRC, dst_mac: str = N1, src_mac: str = R1
) -> tuple[bytes, int]:
    """The frame is `sent` encapsulated by (mode, segs): checks every byte but the flow label,
    returns (inner packet as sent on the wire, flow label)."""
    out = bytes(t.data)
    assert out[:6] == mac_bytes(dst_mac) and out[6:12] == mac_bytes(src_mac)
    assert out[12:14] == b"\x86\xdd"
    inner_sent = decremented(l3(sent))
    want = bytes(expected_outer(mode, segs, inner_sent, src))
    got = l3(out)
    fl = struct.unpack("!I", got[:4])[0] & 0xFFFFF
    got_no_fl = got[:1] + bytes([got[1] & 0xF0]) + b"\0\0" + got[4:]
    assert got_no_fl == want, (IPv6(got_no_fl).show(dump=True), IPv6(want).show(dump=True))
    p = Ether(out)
    assert_checksums(p)
    assert p[IPv6].plen == len(want) - 40
    return inner_sent, fl


# --- head-end: H.Encaps / H.Encaps.Red ------------------------------------------------------


@pytest.mark.parametrize("name", ["e1", "e2", "e3", "r1", "r2", "r3"])
def test_encaps_ipv6_inner(shared, name):
    mode, segs, _, v6 = POLICIES[name]
    sent = udp6(first_addr(v6), hlim=17, tc=0xB8, fl=0x12345)
    res, t, p = one(shared, sent)
    assert t.ifname == "eth1"
    check_encap(t, mode, segs, sent)
    assert res.c("srv6-encapsulated") == 1
    # hop limit and traffic class come from the (decremented) inner header
    assert p[IPv6].hlim == 16 and p[IPv6].tc == 0xB8
    if mode == "encap.red" and len(segs) == 1:
        assert SRH not in p and p[IPv6].nh == 41


@pytest.mark.parametrize("name", ["e1", "e2", "e3", "r1", "r2", "r3"])
def test_encaps_ipv4_inner(shared, name):
    mode, segs, v4, _ = POLICIES[name]
    sent = udp4(first_addr(v4), ttl=33, tos=0x28, df=True)
    res, t, p = one(shared, sent)
    assert t.ifname == "eth1"
    inner, _ = check_encap(t, mode, segs, sent)
    inner_p = IP(inner)
    assert inner_p.ttl == 32 and p[IPv6].hlim == 32 and p[IPv6].tc == 0x28
    assert p[IP].ttl == 32  # scapy parses the inner IPv4 header (checksum checked above)
    if mode == "encap.red" and len(segs) == 1:
        assert SRH not in p and p[IPv6].nh == 4
    else:
        assert p[SRH].nh == 4


def test_encaps_linux_layout_two_segments(shared):
    # the bytes Linux seg6 (mode encap) puts on the wire for segs SEG1,SEG2: 40-byte IPv6
    # header, nh 43, an SRH of 8 + 2*16 bytes (hdr ext len 4, type 4, SL 1, LE 1, flags 0,
    # tag 0) whose list is [SEG2, SEG1], nh 41
    sent = udp6(first_addr(POLICIES["e2"][3]), hlim=64)
    _, t, _ = one(shared, sent)
    o = l3(t.data)
    assert o[6] == 43 and struct.unpack("!H", o[4:6])[0] == 40 + len(l3(sent))
    assert o[40:48] == bytes([41, 4, 4, 1, 1, 0, 0, 0])
    assert o[48:64] == ipaddress.IPv6Address(SEG2).packed
    assert o[64:80] == ipaddress.IPv6Address(SEG1).packed
    assert o[24:40] == ipaddress.IPv6Address(SEG1).packed
    assert o[8:24] == ipaddress.IPv6Address(SRC).packed


def test_flow_label_is_a_hash_of_the_inner_flow(shared):
    v6 = POLICIES["e2"][3]
    labels = {}
    for sport in range(1000, 1064):
        for rep in range(2):
            _, t, p = one(shared, udp6(first_addr(v6), sport=sport, n=10 + rep))
            labels.setdefault(sport, set()).add(p[IPv6].fl)
    assert all(len(v) == 1 for v in labels.values()), "one flow, one label"
    distinct = {next(iter(v)) for v in labels.values()}
    assert len(distinct) >= 60, "different flows get different labels"
    assert 0 not in distinct
    # IPv4 inner too
    v4 = POLICIES["e2"][2]
    fl4 = {one(shared, udp4(first_addr(v4), sport=s))[2][IPv6].fl for s in range(2000, 2032)}
    assert len(fl4) >= 30


def test_encaps_from_a_route_in_another_table_with_policy_source(shared):
    sent = udp6(first_addr(T5_V6), mac=R4)
    _, t, _ = one(shared, sent, rx="eth4")
    # the steering route is in table 5; the policy's first segment is looked up in table 0
    check_encap(t, "encap", [SEG1], sent, src="2001:db8:ffff::5")
    assert t.ifname == "eth1"
    # the same destination received in table 0 has no route
    res = shared.run([udp6(first_addr(T5_V6))], rx="eth0")
    assert res.c("no-route") == 1


def test_traffic_to_the_binding_sid_is_encapsulated(shared):
    sent = udp6(BSIDS["e3"])
    _, t, _ = one(shared, sent)
    check_encap(t, "encap", POLICIES["e3"][1], sent)


def test_weighted_segment_lists_spread_by_weight_and_flows_stick(shared):
    seen: Counter[str] = Counter()
    first_choice = {}
    for sport in range(4000):
        pkt = udp6(first_addr(W_V6), sport=10000 + sport)
        res = shared.run([pkt])
        (t,) = res.tx
        dst = t.pkt[IPv6].dst
        seen[dst] += 1
        first_choice[sport] = dst
    assert set(seen) == {W_A, W_B}
    share_b = seen[W_B] / 4000
    assert 0.70 <= share_b <= 0.80, seen  # weight 3 of 4
    # a flow sticks to its list: the same flows again, in one batch, other payloads
    again = [udp6(first_addr(W_V6), sport=10000 + s, n=99) for s in range(0, 4000, 17)]
    res = shared.run(again)
    for pkt, t in zip(again, res.tx, strict=True):
        assert t.pkt[IPv6].dst == first_choice[pkt[UDP].sport - 10000]


def test_inner_hop_limit_and_ttl_expire_before_encapsulation(shared):
    res = shared.run([udp6(first_addr(POLICIES["e2"][3]), hlim=1)])
    res.check_accounting()
    (t,) = res.tx
    p = t.pkt
    assert ICMPv6TimeExceeded in p and p[IPv6].src == R0_IP6 and p[IPv6].dst == H0_IP6
    assert_checksums(p)
    res = shared.run([udp4(first_addr(POLICIES["e2"][2]), ttl=1)])
    (t,) = res.tx
    p = t.pkt
    assert p[ICMP].type == 11 and p[IP].src == R0_IP4 and p[IP].dst == H0_IP4
    assert_checksums(p)
    assert res.c("ttl-expired") == 1 and res.c("srv6-encapsulated") == 0


def test_no_route_to_first_segment_is_dropped_and_counted(shared):
    res = shared.run(
        [udp6(first_addr(POLICIES["noroute"][3])), udp4(first_addr(POLICIES["noroute"][2]))]
    )
    res.check_accounting()
    assert res.c("srv6-no-route") == 2 and not res.tx


# --- encapsulated packet larger than the egress MTU -----------------------------------------


OVERHEAD2 = 40 + 8 + 2 * 16  # IPv6 + SRH with two segments


def test_too_big_ipv6_gets_packet_too_big_with_reduced_mtu(shared):
    v6 = POLICIES["small"][3]
    fits = udp6(first_addr(v6), n=1280 - OVERHEAD2 - 48)  # inner 1280 - overhead: fits
    res, t, p = one(shared, fits)
    assert len(l3(t.data)) == 1280 and t.ifname == "eth3"
    big = udp6(first_addr(v6), n=1280 - OVERHEAD2 - 48 + 1)
    res = shared.run([big])
    res.check_accounting()
    (t,) = res.tx
    p = t.pkt
    assert_checksums(p)
    assert p[ICMPv6PacketTooBig].mtu == 1280 - OVERHEAD2
    assert p[IPv6].dst == H0_IP6 and t.ifname == "eth0"
    # the quote is the packet as received (hop limit not yet decremented)
    assert bytes(p[ICMPv6PacketTooBig].payload)[:48] == l3(big)[:48]
    assert res.c("mtu-exceeded") == 1


def test_too_big_ipv4_df_gets_frag_needed_with_reduced_mtu(shared):
    v4 = POLICIES["small"][2]
    big = udp4(first_addr(v4), df=True, n=1280 - OVERHEAD2 - 28 + 1)
    res = shared.run([big])
    res.check_accounting()
    (t,) = res.tx
    p = t.pkt
    assert_checksums(p)
    assert p[ICMP].type == 3 and p[ICMP].code == 4
    assert struct.unpack("!H", bytes(p[ICMP])[6:8])[0] == 1280 - OVERHEAD2
    assert p[IP].dst == H0_IP4


def test_too_big_ipv4_without_df_is_dropped(shared):
    v4 = POLICIES["small"][2]
    res = shared.run([udp4(first_addr(v4), df=False, n=1280 - OVERHEAD2 - 28 + 1)])
    res.check_accounting()
    assert not res.tx and res.c("srv6-encap-too-big") == 1


def test_large_header_moves_the_packet_once_and_no_headroom_drops():
    cfg = srv6_config()
    for itf in cfg["interfaces"]:
        if itf["name"] == "eth1":
            itf["mtu"] = 9000
    segs = [SEG1] + [f"2001:db8:cc::{k:x}" for k in range(1, 16)]  # 16 segments: 304 bytes
    cfg["srv6"]["policies"].append({"bsid": "2001:db8:ff:b::200", "segments": segs})
    cfg["srv6"]["steering"].append({"prefix": "2001:db8:440::/48", "bsid": "2001:db8:ff:b::200"})
    r = Router(cfg)
    sent = udp6("2001:db8:440::5", n=1000)  # 296 + 14 > the 256-byte headroom
    _, t, _ = one(r, sent)
    check_encap(t, "encap", segs, sent)
    # a frame that fills the slot cannot take 296 more bytes: dropped, counted
    huge = udp6("2001:db8:440::5", n=2048 - 14 - 48)
    res = r.run([huge, sent])
    res.check_accounting()
    assert res.c("srv6-no-headroom") == 1 and len(res.tx) == 1


# --- control plane: changes reach the data path; the first-hop cache follows the FIB ---------


def test_first_hop_cache_follows_route_and_neighbour_changes(r):
    sent = udp6(first_addr(POLICIES["e2"][3]))
    _, t, _ = one(r, sent)
    assert t.ifname == "eth1"
    r.fib.add_route("2001:db8:100::/64", [ipaddress.ip_address(N3_IP6)])  # more specific
    swap(r)
    _, t, _ = one(r, sent)
    assert t.ifname == "eth3" and t.data[:6] == mac_bytes(N3)
    r.fib.add_neighbor(N3_IP6, mac_bytes("02:00:00:00:dd:99"), "eth3")  # new MAC
    swap(r)
    _, t, _ = one(r, sent)
    assert t.data[:6] == mac_bytes("02:00:00:00:dd:99") and t.data[6:12] == mac_bytes(R3)
    r.fib.del_route("2001:db8:100::/64")
    swap(r)
    _, t, _ = one(r, sent)
    assert t.ifname == "eth1"


def test_policy_replace_delete_and_steer_changes(r):
    v6 = POLICIES["e1"][3]
    sent = udp6(first_addr(v6))
    r.fib.sr(
        "add_policy",
        Policy(
            ipaddress.ip_address(BSIDS["e1"]),
            [([ipaddress.ip_address(x) for x in (SEG1, SEG3)], 1)],
        ),
    )
    swap(r)
    _, t, _ = one(r, sent)
    check_encap(t, "encap", [SEG1, SEG3], sent)
    r.fib.sr("unsteer", v6)
    swap(r)
    res = r.run([sent])
    assert res.c("no-route") == 1
    r.fib.sr("steer", v6, ipaddress.ip_address(BSIDS["e1"]))
    swap(r)
    one(r, sent)
    r.fib.sr("del_policy", ipaddress.ip_address(BSIDS["e1"]))  # unsteers too
    swap(r)
    res = r.run([sent, udp6(BSIDS["e1"])])
    res.check_accounting()
    assert res.c("srv6-encapsulated") == 0 and not [x for x in res.tx if SRH in x.pkt]
    assert r.fib.srv6.steering_rows() == [
        x for x in r.fib.srv6.steering_rows() if x["bsid"] != BSIDS["e1"]
    ]


# --- endpoint behaviours -------------------------------------------------------------------


def srv6_pkt(
    sid: str,
    segments_after: list[str],
    inner=None,
    hlim: int = 9,
    sl: int | None = None,
    src: str = H0_IP6,
    tlvs=None,
    le: int | None = None,
    nh: int | None = None,
):
    """A packet at `sid` whose SRH still has `segments_after` to visit (in visiting order)."""
    order = [sid, *segments_after]
    addresses = list(reversed(order))
    srh = SRH(
        addresses=addresses,
        segleft=len(order) - 1 if sl is None else sl,
        lastentry=len(order) - 1 if le is None else le,
        tlv_objects=tlvs or [],
    )
    if inner is None:
        inner = UDP(sport=7, dport=8) / (b"s" * 30)
        srh.nh = 17
    elif nh is not None:
        srh.nh = nh
    return eth() / IPv6(src=src, dst=sid, hlim=hlim) / srh / inner


def check_end(out: bytes, sent, new_dst: str, sl: int) -> None:
    """End semantics: hop limit - 1, SL - 1, DA = the new segment, nothing else changed."""
    a, b = l3(sent), l3(out)
    assert len(a) == len(b)
    assert b[7] == a[7] - 1 and b[24:40] == ipaddress.IPv6Address(new_dst).packed
    assert b[43] == sl
    assert b[:7] == a[:7] and b[8:24] == a[8:24] and b[40:43] == a[40:43] and b[44:] == a[44:]


def test_end_updates_sl_and_destination(shared):
    sent = srv6_pkt(SID_END, [NEXT6, SEG3])  # SL 2 -> 1, DA NEXT6
    res, t, p = one(shared, sent)
    assert t.ifname == "eth1" and t.data[:6] == mac_bytes(N1)
    check_end(t.data, sent, NEXT6, 1)
    assert res.c("srv6-end") == 1
    assert p[SRH].segleft == 1 and p[IPv6].dst == NEXT6


def test_end_on_a_locator_prefix(shared):
    sent = srv6_pkt(SID_IN_LOCATOR, [NEXT6])
    _, t, _ = one(shared, sent)
    check_end(t.data, sent, NEXT6, 0)


def test_end_skips_tlvs_and_does_not_verify_hmac(shared):
    hmac = IPv6ExtHdrSegmentRoutingTLVHMAC(hmackeyid=7, hmac=b"\x5a" * 32)
    sent = srv6_pkt(
        SID_END, [NEXT6], tlvs=[IPv6ExtHdrSegmentRoutingTLVPadN(padding=b"\0" * 6), hmac]
    )
    assert SRH(bytes(sent[SRH]))[SRH].len > 4  # TLVs after the list, covered by Hdr Ext Len
    _, t, p = one(shared, sent)
    check_end(t.data, sent, NEXT6, 0)
    assert p[UDP].sport == 7  # the upper layer was found past the TLVs


def test_end_with_srh_after_hop_by_hop(shared):
    base = srv6_pkt(SID_END_PSP, [NEXT6])
    sent = eth() / IPv6(src=H0_IP6, dst=SID_END_PSP, hlim=9) / IPv6ExtHdrHopByHop() / base[SRH]
    _, t, p = one(shared, sent)
    b = l3(t.data)
    assert b[7] == 8 and p[IPv6].dst == NEXT6 and p[SRH].segleft == 0
    assert IPv6ExtHdrHopByHop in p  # PSP pops only an SRH right after the IPv6 header


def test_end_psp_pops_srh_at_the_penultimate_sid(shared):
    sent = srv6_pkt(SID_END_PSP, [NEXT6])  # SL 1 -> 0: pop
    res, t, p = one(shared, sent)
    a, b = l3(sent), l3(t.data)
    srh_len = len(bytes(sent[SRH])) - len(bytes(sent[SRH].payload))
    assert len(b) == len(a) - srh_len
    assert SRH not in p and p[IPv6].nh == 17 and p[IPv6].dst == NEXT6 and p[IPv6].hlim == 8
    assert p[IPv6].plen == len(b) - 40 and b[40:] == a[40 + srh_len :]
    assert t.data[:6] == mac_bytes(N1) and t.data[6:12] == mac_bytes(R1)
    # SL 2 -> 1 at a PSP SID: not the penultimate one, the SRH stays
    sent = srv6_pkt(SID_END_PSP, [NEXT6, SEG3])
    _, t, p = one(shared, sent)
    check_end(t.data, sent, NEXT6, 1)


def test_end_x_uses_its_adjacency_not_the_fib(shared):
    sent = srv6_pkt(SID_X, [NEXT6, SEG3])  # NEXT6 is routed via eth1; End.X says eth3
    _, t, _ = one(shared, sent)
    assert t.ifname == "eth3" and t.data[:6] == mac_bytes(N3)
    check_end(t.data, sent, NEXT6, 1)
    sent = srv6_pkt(SID_X_PSP, [NEXT6])
    _, t, p = one(shared, sent)
    assert t.ifname == "eth3" and SRH not in p and p[IPv6].dst == NEXT6


def test_end_t_looks_up_in_its_table(shared):
    sent = srv6_pkt(SID_T, [NEXT6])
    _, t, _ = one(shared, sent)
    assert t.ifname == "eth4" and t.data[:6] == mac_bytes(N4)  # table 5's route
    check_end(t.data, sent, NEXT6, 0)


def test_end_hop_limit_expired(shared):
    sent = srv6_pkt(SID_END, [NEXT6], hlim=1)
    res = shared.run([sent])
    res.check_accounting()
    (t,) = res.tx
    p = t.pkt
    assert_checksums(p)
    assert p[ICMPv6TimeExceeded].code == 0 and p[IPv6].dst == H0_IP6
    assert res.c("ttl-expired") == 1


def inner6(dst: str = "2001:db8:100::77", hlim: int = 20):
    return IPv6(src="2001:db8:9::1", dst=dst, hlim=hlim) / UDP(sport=3, dport=4) / (b"i" * 24)


def inner4(dst: str = "203.0.113.9", ttl: int = 20):
    return IP(src="198.51.100.77", dst=dst, ttl=ttl, id=5) / UDP(sport=3, dport=4) / (b"j" * 24)


DECAP_CASES = [
    # sid, inner, expected tx interface, expected dst MAC
    (SID_DX4, inner4, "eth1", N1),  # nh N1_IP4, whatever the inner destination
    (SID_DX6, inner6, "eth3", N3),  # nh N3_IP6
    (SID_DT4, inner4, "eth4", N4),  # table 5
    (SID_DT6, inner6, "eth4", N4),
    (SID_DT46, inner4, "eth4", N4),
    (SID_DT46, inner6, "eth4", N4),
]


@pytest.mark.parametrize("with_srh", [True, False], ids=["srh-sl0", "no-srh"])
@pytest.mark.parametrize(
    "sid,mk,ifname,mac", DECAP_CASES, ids=["DX4", "DX6", "DT4", "DT6", "DT46-v4", "DT46-v6"]
)
def test_decapsulating_behaviours(shared, sid, mk, ifname, mac, with_srh):
    inner = mk()
    nh = 41 if IPv6 in inner else 4
    if with_srh:
        sent = (
            eth()
            / IPv6(src=H0_IP6, dst=sid, hlim=3)
            / SRH(addresses=[sid], segleft=0, lastentry=0, nh=nh)
            / inner
        )
    else:  # H.Encaps.Red with one segment: no SRH at all
        sent = eth() / IPv6(src=H0_IP6, dst=sid, hlim=3, nh=nh) / inner
    res, t, p = one(shared, sent)
    assert t.ifname == ifname and t.data[:6] == mac_bytes(mac)
    assert t.data[12:14] == (b"\x86\xdd" if nh == 41 else b"\x08\x00")
    assert l3(t.data) == decremented(bytes(inner))  # the inner packet, TTL - 1
    assert res.c("srv6-decapsulated") == 1


def test_decap_inner_goes_through_input_validation(shared):
    bad = IP(bytes(inner4()))
    bad.chksum = 0x1234
    sent = eth() / IPv6(src=H0_IP6, dst=SID_DT4, nh=4) / bad
    res = shared.run([sent])
    res.check_accounting()
    assert not res.tx and res.c("srv6-decapsulated") == 1 and res.drops == 1
    # inner TTL 1 after decapsulation: time exceeded to the inner source, via table 5
    sent = eth() / IPv6(src=H0_IP6, dst=SID_DT6, nh=41) / inner6(hlim=1)
    res = shared.run([sent])
    res.check_accounting()
    assert res.c("ttl-expired") == 1


def test_decap_with_segments_left_is_parameter_problem(shared):
    for sid in (SID_DX4, SID_DX6, SID_DT4, SID_DT6, SID_DT46):
        sent = srv6_pkt(sid, [SEG3], inner=inner6(), nh=41)  # SL 1 at a decap SID
        res = shared.run([sent])
        res.check_accounting()
        (t,) = res.tx
        p = t.pkt
        assert_checksums(p)
        assert p[ICMPv6ParamProblem].code == 0 and p[ICMPv6ParamProblem].ptr == 43
        assert res.c("srv6-sl-not-zero") == 1


def test_decap_of_the_wrong_family_or_upper_layer(shared):
    # End.DX4 with an IPv6 inner packet, End.DT6 with IPv4: upper layer not allowed (code 4,
    # pointer at the upper-layer header); a UDP payload at End likewise
    cases = [
        (eth() / IPv6(src=H0_IP6, dst=SID_DX4, nh=41) / inner6(), 40),
        (eth() / IPv6(src=H0_IP6, dst=SID_DT6, nh=4) / inner4(), 40),
        (
            eth()
            / IPv6(src=H0_IP6, dst=SID_DX6)
            / SRH(addresses=[SID_DX6], segleft=0, nh=4)
            / inner4(),
            64,
        ),
        (srv6_pkt(SID_END, [NEXT6], sl=0), 80),
        (eth() / IPv6(src=H0_IP6, dst=SID_END) / UDP() / b"no srh", 40),
    ]
    for sent, ptr in cases:
        res = shared.run([sent])
        res.check_accounting()
        (t,) = res.tx
        p = t.pkt
        assert_checksums(p)
        assert p[ICMPv6ParamProblem].code == 4 and p[ICMPv6ParamProblem].ptr == ptr, ptr
        assert res.c("srv6-upper-layer") == 1


def test_upper_layer_is_found_past_a_destination_options_header(shared):
    # RFC 8200: the upper-layer header comes after every extension header; a destination
    # options header between the SRH and the inner packet does not hide it
    for sid, inner in ((SID_DT6, inner6()), (SID_DT46, inner4()), (SID_DX6, inner6())):
        sent = (
            eth()
            / IPv6(src=H0_IP6, dst=sid, hlim=3)
            / SRH(addresses=[sid], segleft=0, lastentry=0)
            / IPv6ExtHdrDestOpt()
            / inner
        )
        _, t, _ = one(shared, sent)
        assert l3(t.data) == decremented(bytes(inner))
    sent = (
        eth()
        / IPv6(src=H0_IP6, dst=SID_END)
        / SRH(addresses=[SID_END], segleft=0)
        / IPv6ExtHdrDestOpt()
        / UDP()
        / b"x"
    )
    res = shared.run([sent])
    (t,) = res.tx
    assert t.pkt[ICMPv6ParamProblem].code == 4 and t.pkt[ICMPv6ParamProblem].ptr == 72
    # PSP pops the SRH and keeps the destination options header behind it
    sent = srv6_pkt(SID_END_PSP, [NEXT6], inner=IPv6ExtHdrDestOpt() / UDP() / b"d", nh=60)
    _, t, p = one(shared, sent)
    assert SRH not in p and p[IPv6].nh == 60 and IPv6ExtHdrDestOpt in p and p[UDP].load == b"d"


def test_two_sids_of_this_router_in_one_segment_list(shared):
    # End, then (DA now our End.DT6 SID) decapsulation in the same pass through the graph
    sent = srv6_pkt(SID_END, [SID_DT6], inner=inner6(), nh=41)
    res, t, _ = one(shared, sent)
    assert t.ifname == "eth4" and l3(t.data) == decremented(bytes(inner6()))
    assert res.c("srv6-end") == 1 and res.c("srv6-decapsulated") == 1


def test_policy_whose_first_segment_is_a_local_sid():
    # the first segment resolves to our own End SID (adjacency without an interface): the
    # encapsulated packet is processed by the SID and leaves towards the second segment; the
    # MTU checked is the real egress one, not that of some other interface (eth4: 1280 here)
    cfg = srv6_config()
    cfg["interfaces"][4]["mtu"] = 1280
    cfg["srv6"]["policies"].append({"bsid": "2001:db8:ff:b::300", "segments": [SID_END, NEXT6]})
    cfg["srv6"]["steering"].append({"prefix": "2001:db8:460::/48", "bsid": "2001:db8:ff:b::300"})
    r = Router(cfg)
    sent = udp6("2001:db8:460::1", n=1300)
    _, t, p = one(r, sent)
    assert t.ifname == "eth1" and p[IPv6].dst == NEXT6 and p[SRH].segleft == 0
    assert p[IPv6].src == SRC and p[IPv6].hlim == 7  # inner 9 - 1, then End - 1


def test_icmpv6_to_a_sid_is_answered(shared):
    # RFC 8986 4.1.1: ICMPv6 at a SID (SL 0 / no SRH) is processed locally: ping a SID
    for sid in (SID_END, SID_DT46, SID_IN_LOCATOR):
        sent = eth() / IPv6(src=H0_IP6, dst=sid) / ICMPv6EchoRequest(id=9, seq=1, data=b"sid")
        _, t, p = one(shared, sent)
        assert ICMPv6EchoReply in p and p[IPv6].src == sid and p[IPv6].dst == H0_IP6


# --- malformed SRHs: RFC 8754 4.3.1.1 ------------------------------------------------------


def raw_srh(nh: int, hel: int, sl: int, le: int, body: bytes, rtype: int = 4) -> bytes:
    return bytes([nh, hel, rtype, sl, le, 0, 0, 0]) + body


def raw6(
    dst: str, ext: bytes, payload: bytes = b"", nh: int = 43, hlim: int = 9, plen: int | None = None
) -> bytes:
    body = ext + payload
    hdr = struct.pack("!IHBB", 0x60000000, len(body) if plen is None else plen, nh, hlim)
    hdr += ipaddress.IPv6Address(H0_IP6).packed + ipaddress.IPv6Address(dst).packed
    return bytes(Ether(dst=R0, src=H0, type=0x86DD)) + hdr + body


SEGS2 = ipaddress.IPv6Address(NEXT6).packed + ipaddress.IPv6Address(SID_END).packed
UDP_PAYLOAD = bytes(UDP(sport=1, dport=2) / b"payload")


@pytest.mark.parametrize(
    "what,frame",
    [
        ("last entry beyond the header", raw6(SID_END, raw_srh(17, 4, 1, 2, SEGS2), UDP_PAYLOAD)),
        ("segments left > last entry + 1", raw6(SID_END, raw_srh(17, 4, 3, 1, SEGS2), UDP_PAYLOAD)),
        (
            "truncated segment list (hdr ext len 2, two entries)",
            raw6(SID_END, raw_srh(17, 2, 1, 1, SEGS2[:16]), UDP_PAYLOAD),
        ),
        ("hdr ext len 0", raw6(SID_END, raw_srh(17, 0, 1, 0, b""), UDP_PAYLOAD)),
    ],
)
def test_bad_srh_gets_parameter_problem_at_segments_left(shared, what, frame):
    res = shared.run([frame])
    res.check_accounting()
    (t,) = res.tx
    p = t.pkt
    assert_checksums(p)
    assert p[ICMPv6ParamProblem].code == 0 and p[ICMPv6ParamProblem].ptr == 43, what
    assert p[IPv6].dst == H0_IP6 and res.c("srv6-bad-srh") == 1
    assert bytes(p[ICMPv6ParamProblem].payload)[:40] == frame[14:54]


@pytest.mark.parametrize(
    "what,frame",
    [
        ("hdr ext len beyond the packet", raw6(SID_END, raw_srh(17, 8, 1, 1, SEGS2))),
        ("payload length cuts the SRH", raw6(SID_END, raw_srh(17, 4, 1, 1, SEGS2), plen=20)),
        ("payload length beyond the frame", raw6(SID_END, raw_srh(17, 4, 1, 1, SEGS2), plen=200)),
        ("SRH header cut after 4 bytes", raw6(SID_END, raw_srh(17, 4, 1, 1, b"")[:4])),
    ],
)
def test_srh_beyond_the_packet_is_dropped(shared, what, frame):
    res = shared.run([frame])
    res.check_accounting()
    assert not res.tx and res.drops == 1, (what, res.counters)


def test_srh_error_cases_in_one_batch_never_touch_valid_packets(shared):
    valid = [
        srv6_pkt(SID_END, [NEXT6, SEG3]),
        udp6(first_addr(POLICIES["e2"][3])),
        eth() / IPv6(src=H0_IP6, dst=SID_DT6, nh=41) / inner6(),
    ]
    alone = [bytes(shared.run([v]).tx[0].data) for v in valid]
    bad = [
        raw6(SID_END, raw_srh(17, 4, 1, 2, SEGS2), UDP_PAYLOAD),
        raw6(SID_END, raw_srh(17, 8, 1, 1, SEGS2)),
        raw6(SID_DT6, raw_srh(41, 2, 1, 0, SEGS2[:16]), bytes(inner6())),
        raw6(SID_DX4, raw_srh(4, 2, 0, 0, SEGS2[:16]), b"\x45" + b"\0" * 10),
    ]
    batch = [x for pair in zip(bad, valid + [valid[0]], strict=True) for x in pair]
    res = shared.run(batch)
    res.check_accounting()
    outs = {
        t.orig: bytes(t.data)
        for t in res.tx
        if t.pkt.haslayer(UDP) and ICMPv6ParamProblem not in t.pkt
    }
    for k, want in enumerate(alone):
        assert outs[2 * k + 1] == want


# hypothesis: garbage SRHs, at every kind of SID, mixed into valid batches ------------------

GARBAGE_SIDS = [
    SID_END,
    SID_END_PSP,
    SID_X,
    SID_X_PSP,
    SID_T,
    SID_DX4,
    SID_DX6,
    SID_DT4,
    SID_DT6,
    SID_DT46,
    SID_IN_LOCATOR,
]


@st.composite
def garbage_srh_frames(draw) -> bytes:
    """An SRH at one of our SIDs: a consistent one with one or two fields broken, or one
    made of garbage; sometimes cut short or with a lying payload length."""
    sid = draw(st.sampled_from(GARBAGE_SIDS))
    nseg = draw(st.integers(0, 5))
    f = {
        "nh": draw(st.sampled_from([4, 17, 41, 58])),
        "hel": 2 * nseg,
        "sl": draw(st.integers(0, nseg)),
        "le": max(nseg - 1, 0),
        "rtype": 4,
    }
    garbage = {
        "nh": st.sampled_from([0, 43, 59, 60, 255, 4, 41]),
        "hel": st.integers(0, 255),
        "sl": st.integers(0, 255),
        "le": st.integers(0, 255),
        "rtype": st.sampled_from([0, 2, 3, 5, 255]),
    }
    for k in draw(st.lists(st.sampled_from(sorted(garbage)), max_size=3)):
        f[k] = draw(st.one_of(garbage[k], st.integers(-2, 2).map(lambda d, k=k: f[k] + d)))
        f[k] = min(max(f[k], 0), 255)
    body = b"".join(
        draw(
            st.sampled_from(
                [
                    ipaddress.IPv6Address(x).packed
                    for x in (
                        NEXT6,
                        SID_END,
                        SID_DX4,
                        SID_DT46,
                        SEG3,
                        "::",
                        "ff02::1",
                        "fe80::1",
                        H0_IP6,
                    )
                ]
            )
        )
        for _ in range(nseg)
    )
    if draw(st.booleans()):
        body += draw(st.binary(max_size=24))  # TLVs or trailing junk
    payload = draw(
        st.sampled_from(
            [
                UDP_PAYLOAD,
                bytes(inner4()),
                bytes(inner6()),
                b"",
                bytes(ICMPv6EchoRequest()),
                bytes(inner4(ttl=1)),
                bytes(inner6(hlim=0)),
            ]
        )
    )
    frame = raw6(
        sid,
        raw_srh(f["nh"], f["hel"], f["sl"], f["le"], body, f["rtype"]),
        payload,
        hlim=draw(st.sampled_from([0, 1, 2, 64, 255])),
    )
    if draw(st.integers(0, 3)) == 0:  # cut short
        frame = frame[: max(14, len(frame) - draw(st.integers(1, 60)))]
    if draw(st.integers(0, 3)) == 0:  # the payload length lies
        frame = frame[:18] + struct.pack("!H", draw(st.integers(0, 600))) + frame[20:]
    return frame


VALID_SR = [
    srv6_pkt(SID_END, [NEXT6, SEG3]),
    srv6_pkt(SID_END_PSP, [NEXT6]),
    udp6(first_addr(POLICIES["e3"][3])),
    udp4(first_addr(POLICIES["r2"][2])),
    eth() / IPv6(src=H0_IP6, dst=SID_DT46, nh=4) / inner4(),
    eth() / IPv6(src=H0_IP6, dst=SID_DX6) / SRH(addresses=[SID_DX6], segleft=0, nh=41) / inner6(),
    srv6_pkt(SID_X_PSP, [NEXT6]),
    srv6_pkt(SID_T, [NEXT6, SEG3]),
]


ROUTER_IPS = {
    ipaddress.ip_address(a)
    for a in (R0_IP4, R0_IP6, R1_IP4, R1_IP6, R2_IP4, R3_IP4, R3_IP6, R4_IP4, R4_IP6)
}


def check_emitted(frame: bytes) -> None:
    """What vecroute emits from garbage: scapy parses it; every IPv4 header sum verifies
    (ip4-input checked it, rewrite updated it); the packets it built itself (ICMP errors,
    echo replies: from a router address) verify completely, on the raw bytes."""
    Ether(frame)
    if frame[12:14] == b"\x08\x00":
        ihl = (frame[14] & 15) * 4
        assert ip4_header_ok(frame[14 : 14 + ihl])
        if ipaddress.ip_address(frame[26:30]) in ROUTER_IPS:
            assert_sums(frame)
    elif frame[12:14] == b"\x86\xdd" and ipaddress.ip_address(frame[22:38]) in ROUTER_IPS:
        assert_sums(frame)


@pytest.fixture(scope="module")
def valid_alone(shared):
    return [bytes(shared.run([v]).tx[0].data) for v in VALID_SR]


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(garbage=st.lists(garbage_srh_frames(), min_size=1, max_size=12), data=st.data())
def test_garbage_srhs_mixed_into_valid_batches(shared, valid_alone, garbage, data):
    frames: list = []
    where = {}
    for g in garbage:
        if data.draw(st.booleans()):
            k = data.draw(st.integers(0, len(VALID_SR) - 1))
            where[len(frames)] = k
            frames.append(VALID_SR[k])
        frames.append(g)
    res = shared.run(frames)
    res.check_accounting()
    for t in res.tx:
        check_emitted(t.data)
        if t.orig in where and t.seq == 0:
            assert bytes(t.data) == valid_alone[where[t.orig]]
    for i in where:
        assert res.fates[i] == "tx"


# --- configuration and ctl ----------------------------------------------------------------


def test_srv6_tables_views(shared):
    rows = {x["sid"]: x for x in shared.fib.srv6.localsid_rows()}
    assert rows[f"{SID_END_PSP}/128"]["behavior"] == "End (PSP)"
    assert rows[LOCATOR]["behavior"] == "End"
    assert rows[f"{SID_DT46}/128"]["table"] == T5
    pols = {x["bsid"]: x for x in shared.fib.srv6.policy_rows()}
    assert pols[BSID_W]["segment_lists"] == [
        {"segments": [W_A], "weight": 1},
        {"segments": [W_B], "weight": 3},
    ]
    assert pols[BSID_T5]["source"] == "2001:db8:ffff::5"
    steer = {(x["prefix"], x["table"]): x["bsid"] for x in shared.fib.srv6.steering_rows()}
    assert steer[(T5_V6, T5)] == BSID_T5


def _bad(mut) -> str:
    cfg = srv6_config()
    mut(cfg["srv6"])
    with pytest.raises(RouteError) as e:
        Fib.from_config(parse_config(cfg))
    return str(e.value)


@pytest.mark.parametrize(
    "mut,words",
    [
        (lambda s: s.update(bogus=1), "bogus"),
        (
            lambda s: s["localsids"].append({"sid": "2001:db8:ff::99", "behavior": "End.B6"}),
            "srv6.localsids[11].behavior",
        ),
        (
            lambda s: s["localsids"].append({"sid": "2001:db8:ff::99", "behavior": "End.DX6"}),
            "needs nh",
        ),
        (
            lambda s: s["localsids"].append(
                {"sid": "2001:db8:ff::99", "behavior": "End.DX4", "nh": N1_IP6}
            ),
            "IPv4 next hop",
        ),
        (
            lambda s: s["localsids"].append(
                {"sid": "2001:db8:ff::99", "behavior": "End.DT6", "flavor": "PSP"}
            ),
            "PSP",
        ),
        (
            lambda s: s["localsids"].append({"sid": "198.51.100.1", "behavior": "End"}),
            "not an IPv6 SID",
        ),
        (
            lambda s: s["policies"].append({"bsid": "2001:db8:ff:b::999", "segments": [SEG1] * 17}),
            "at most 16",
        ),
        (
            lambda s: s["policies"].append({"bsid": "2001:db8:ff:b::999", "segments": []}),
            "non-empty",
        ),
        (
            lambda s: s["policies"].append({"bsid": "2001:db8:ff:b::999", "segments": ["x"]}),
            "not an IPv6 address",
        ),
        (
            lambda s: s["policies"].append(
                {"bsid": "2001:db8:ff:b::999", "segments": [SEG1], "mode": "insert"}
            ),
            "mode",
        ),
        (
            lambda s: s["policies"].append(
                {"bsid": "2001:db8:ff:b::999", "segment_lists": [{"segments": [SEG1], "weight": 0}]}
            ),
            "weight",
        ),
        (lambda s: s["policies"].append({"bsid": "2001:db8:ff:b::999"}), "either segments"),
        (
            lambda s: s["steering"].append({"prefix": "203.0.113.0/24", "bsid": "2001:db8::99"}),
            "no policy",
        ),
        (lambda s: s["steering"].append({"prefix": "bogus", "bsid": BSID_W}), "not a prefix"),
        (  # an SRH holds IPv6 segments only (issue 12, finding 10)
            lambda s: s["policies"].append({"bsid": "2001:db8:ff:b::999",
                                            "segments": [SEG1, "192.0.2.7"]}),
            "segments: '192.0.2.7' is not an IPv6 address",
        ),
        (lambda s: s.update(localsids=5), "srv6.localsids: expected an array"),
        (lambda s: s.update(steering={"a": 1}), "srv6.steering: expected an array"),
    ],
)
def test_config_errors_are_one_line(mut, words):
    msg = _bad(mut)
    assert words in msg and "\n" not in msg, msg


@pytest.mark.parametrize(
    "mut,words",
    [
        (
            lambda s: s["policies"].append({"bsid": "2001:db8:ff:b::999", "segments": [1, 2]}),
            "segments: 1 is not an IPv6 address",
        ),
        (
            lambda s: s["policies"].append(
                {"bsid": "2001:db8:ff:b::999", "segments": [SEG1], "source": 7}
            ),
            "source",
        ),
        (lambda s: s.update(encap_source=7), "encap_source"),
        (
            lambda s: s["localsids"].append(
                {"sid": "2001:db8:ff::99", "behavior": "End.DX4", "nh": 3221225986}
            ),
            "nh",
        ),
        (
            lambda s: s["policies"].append({"bsid": SID_END, "segments": [SEG1]}),
            "bsid: 2001:db8:ff::1/128 in table 0 is already a local SID",
        ),
        (
            lambda s: s["localsids"].append({"sid": BSID_W, "behavior": "End"}),
            "policies[8].bsid: 2001:db8:ff:b::100/128 in table 0 is already a local SID",
        ),
        (
            lambda s: s["localsids"].append({"sid": f"{R0_IP6}/128", "behavior": "End"}),
            "already a local route",
        ),
        (
            lambda s: s["steering"].append({"prefix": f"{SID_DT4}/128", "bsid": BSID_W}),
            "prefix: 2001:db8:ff::f4/128 in table 0 is already a local SID",
        ),
        (
            lambda s: s["steering"].append({"prefix": f"{BSID_W}/128", "bsid": BSID_W}),
            "already a binding SID",
        ),
        (
            lambda s: s["localsids"].append(
                {"sid": "2001:db8:ff::99", "behavior": "End", "flavor": "USD"}
            ),
            "flavor",
        ),
    ],
)
def test_config_rejects_quiet_conversions_and_clobbering(mut, words):
    msg = _bad(mut)
    assert words in msg and "\n" not in msg, msg


def test_config_needs_an_encap_source():
    def mut(s):
        del s["encap_source"]
        for p in s["policies"]:
            p.pop("source", None)

    assert "encapsulation source" in _bad(mut)


class CtlRouter:
    """What ctl needs, over a FIB and a graph (no sockets)."""

    def __init__(self) -> None:
        cfg = base_config()
        self.fib = Fib.from_config(parse_config(cfg))
        self.batch = PacketBatch(8)
        self.graph = Graph(fib_state(self.fib), self.batch)
        self.commits = 0

    def stats(self):
        return self.graph.state

    def commit(self):
        self.commits += 1
        self.graph.swap_state(fib_state(self.fib))


def test_ctl_sr_localsid_policy_steer(tmp_path):
    r = CtlRouter()
    with pytest.raises(CommandError, match="encapsulation source"):
        execute(r, f"sr policy add bsid {BSIDS['e2']} segments {SEG1},{SEG2}".split())
    for cmd in [
        f"sr localsid add {SID_END} behavior End",
        f"sr localsid add address {SID_END_PSP} behavior End flavor PSP",
        f"sr localsid add {SID_DX6} behavior End.DX6 nh {N3_IP6}",
        f"sr localsid add {SID_DT46} behavior End.DT46 table 0",
        f"sr localsid add {LOCATOR} behavior End",
        f"sr policy add bsid {BSIDS['e2']} segments {SEG1},{SEG2} source {SRC}",
        f"sr policy add {BSIDS['r3']} segments {SEG1} segments {SEG2} segments {SEG3} "
        f"mode encap.red source {SRC}",
        f"sr steer add 2001:db8:402::/48 via bsid {BSIDS['e2']}",
        f"sr steer add 203.0.113.96/28 bsid {BSIDS['r3']}",
    ]:
        assert execute(r, cmd.split()).text.endswith("ok\n"), cmd
    assert r.commits == 9
    ls = execute(r, "sr localsid show".split())
    assert {x["behavior"] for x in ls.data} == {"End", "End (PSP)", "End.DX6", "End.DT46"}
    assert "End.DX6" in ls.text
    pol = execute(r, "sr policy show".split())
    assert {x["mode"] for x in pol.data} == {"encap", "encap.red"}
    assert SEG3 in pol.text
    steer = execute(r, "sr steer show".split())
    assert {x["prefix"] for x in steer.data} == {"2001:db8:402::/48", "203.0.113.96/28"}
    # the data path sees it: run a packet through the committed state
    rt = Router.__new__(Router)
    rt.cfg, rt.fib, rt.state, rt.batch = None, r.fib, r.graph.state, PacketBatch(8)
    rt.graph = Graph(rt.state, rt.batch)
    rt.names = [i.name for i in r.fib.interfaces]
    sent = udp4("203.0.113.99")
    _, t, _ = one(rt, sent)
    check_encap(t, "encap.red", [SEG1, SEG2, SEG3], sent)
    sent = srv6_pkt(SID_END_PSP, [NEXT6])
    _, t, p = one(rt, sent)
    assert SRH not in p and p[IPv6].dst == NEXT6
    for cmd in [
        "sr steer del 203.0.113.96/28",
        f"sr policy del {BSIDS['e2']}",
        f"sr localsid del {SID_END}",
        f"sr localsid del {LOCATOR}",
    ]:
        execute(r, cmd.split())
    assert execute(r, "sr steer show".split()).data == []
    assert len(execute(r, "sr localsid show".split()).data) == 3


@pytest.mark.parametrize(
    "cmd,words",
    [
        ("sr localsid add 2001:db8:ff::1 behavior End.Bogus", "behavior"),
        ("sr localsid add 203.0.113.1 behavior End", "not an IPv6 SID"),
        ("sr localsid add 2001:db8:ff::1 behavior End.DX4 nh 2001:db8:2::2", "IPv4 next hop"),
        ("sr localsid add 2001:db8:ff::1 behavior End.X nh 2001:db8:77::1", "connected"),
        ("sr localsid add 2001:db8:ff::1 behavior End colour blue", "colour"),
        ("sr localsid del 2001:db8:ff::1", "no local SID"),
        ("sr policy add bsid 2001:db8:ff::b segments", "needs a value"),
        (f"sr policy add bsid 2001:db8:ff::b segments {SEG1} mode insert source {SRC}", "mode"),
        (f"sr policy add bsid 2001:db8:ff::b segments {SEG1} weight 0 source {SRC}", "weight"),
        ("sr policy del 2001:db8:ff::b", "no policy"),
        ("sr steer add 203.0.113.0/24 via bsid 2001:db8:ff::b", "no policy"),
        ("sr steer del 203.0.113.0/24", "not steered"),
        (f"sr localsid add {R0_IP6} behavior End", "already a local route"),
        ("sr tunnel show", "expected localsid"),
        ("sr policy frob", "expected add"),
        # SRv6 addresses are IPv6 (issue 12, finding 10)
        (f"sr policy add bsid 2001:db8:ff::b segments {SEG1},192.0.2.7 source {SRC}",
         "segment 192.0.2.7 is not an IPv6 address"),
        (f"sr policy add bsid 192.0.2.9 segments {SEG1} source {SRC}", "bsid 192.0.2.9 is not"),
        (f"sr policy add bsid 2001:db8:ff::b segments {SEG1} source 192.0.2.1",
         "source 192.0.2.1 is not"),
        ("sr steer add 203.0.113.0/24 via bsid 192.0.2.9", "bsid 192.0.2.9 is not"),
        (f"sr policy add bsid 2001:db8:ff::b segments {','.join([SEG1] * 17)} source {SRC}",
         "at most 16"),
        (f"sr policy add bsid 2001:db8:ff::b segments {SEG1} weight 65 source {SRC}", "weight"),
        ("sr localsid add 2001:db8:ff::1 behavior End table 4294967296", "table"),
        ("sr localsid add 2001:db8:ff::1 behavior End fib-table \u00b2", "fib-table"),
        ("sr localsid add 2001:db8:ff::1 behavior End flavor USD", "flavor"),
        ("sr localsid add fe80::1%eth0 behavior End", "not a prefix"),
    ],
)
def test_ctl_sr_errors_change_nothing(cmd, words):
    r = CtlRouter()
    before = (copy.deepcopy(r.fib.srv6.localsid_rows()), copy.deepcopy(r.fib.srv6.policy_rows()),
              set(r.fib.routes), len(r.fib.lpm[4]._ids), len(r.fib.lpm[6]._ids))
    with pytest.raises(CommandError) as e:
        execute(r, cmd.split())
    assert words in str(e.value), str(e.value)
    assert (r.fib.srv6.localsid_rows(), r.fib.srv6.policy_rows(), set(r.fib.routes),
            len(r.fib.lpm[4]._ids), len(r.fib.lpm[6]._ids)) == before
    assert r.commits == 0


def test_policy_with_ipv4_segments_is_refused_by_the_tables_too():
    from vecroute.srv6.tables import Policy, Srv6Error

    r = CtlRouter()
    n_lists = r.fib.srv6._n_list
    with pytest.raises(Srv6Error, match="not an IPv6 address"):
        r.fib.srv6.add_policy(Policy(ipaddress.ip_address("2001:db8:ff::b"),
                                     [([ipaddress.ip_address(SEG1)], 1),
                                      ([ipaddress.ip_address("192.0.2.7")], 1)],
                                     "encap", ipaddress.ip_address(SRC)))
    assert r.fib.srv6._n_list == n_lists  # nothing allocated for the first list either


# --- ICMP errors whose source is reached through an SR policy ---------------------------


@pytest.mark.parametrize("fam", [4, 6])
def test_icmp_error_back_to_a_source_behind_a_policy_is_encapsulated(r, fam):
    # (was: an ARP/NS for 0.0.0.<policy index> / :: on the last interface; fixed in
    # icmp_error.py by handing the error to to_adjacency)
    if fam == 4:
        src = first_addr(POLICIES["e2"][2], 9)
        sent = eth() / IP(src=src, dst="198.18.0.1", ttl=5) / UDP() / b"x"
    else:
        src = first_addr(POLICIES["e2"][3], 9)
        sent = eth() / IPv6(src=src, dst="2001:db8:dead::5", hlim=5) / UDP() / b"x"
    res = r.run([sent])
    res.check_accounting()
    assert len(res.tx) == 1, [(t.ifname, t.pkt.summary()) for t in res.tx]
    p = res.tx[0].pkt
    assert_checksums(p)
    assert SRH in p and p[IPv6].dst == SEG1 and res.tx[0].ifname == "eth1"
    inner = p[SRH].payload
    if fam == 4:
        assert inner[ICMP].type == 3 and inner[IP].src == R0_IP4 and inner[IP].dst == src
    else:
        assert ICMPv6DestUnreach in inner and inner[IPv6].src == R0_IP6
        assert inner[IPv6].dst == src


def test_firewall_output_pass_sees_the_destination_end_wrote():
    # fw-out reuses the key row fw-in extracted, unless the header changed: End rewrites
    # the destination, so a rule on the new destination must match at output
    from conftest import Router

    cfg = srv6_config()
    cfg["firewall"] = {
        "default": "allow",
        "rules": [
            f"100 deny ip6 from any to {NEXT6} out",
            f"200 count ip6 from any to {SID_END} in",
        ],
    }
    r = Router(cfg)
    res = r.run([srv6_pkt(SID_END, [NEXT6, SEG3])])
    assert res.fates == ["drop"] and res.c("fw-deny") == 1 and res.c("srv6-end") == 1
    show = r.firewall.show()
    assert show.splitlines()[0].split()[:2] == ["00100", "1"]
    assert show.splitlines()[1].split()[:2] == ["00200", "1"]


def test_a_local_sid_that_would_need_one_table_too_many_changes_nothing():
    from vecroute.fib.fib import MAX_TABLES

    r = CtlRouter()
    k = 1
    while len(r.fib.lpm[6]._ids) < MAX_TABLES:
        execute(r, f"route add 2001:db8:77::/48 blackhole table {k}".split())
        k += 1
    before = copy.deepcopy(r.fib.srv6.localsid_rows()), r.fib.srv6._n_sid
    with pytest.raises(CommandError, match="too many tables"):
        execute(r, f"sr localsid add 2001:db8:ff::99 behavior End fib-table {k + 1}".split())
    assert (r.fib.srv6.localsid_rows(), r.fib.srv6._n_sid) == before
