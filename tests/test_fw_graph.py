"""The firewall in the graph: fw-in / fw-out verdicts on real packets, checked with scapy.

Every packet goes through the compiled graph with a [firewall] section in the config; what
leaves (forwarded packets, ICMP errors for ``reject``/``unreach``, TCP RSTs for ``reset``)
is parsed back by scapy and compared with what RFC 792/4443/9293 and ipfw imply.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import (
    DST4,
    DST4_SMALL,
    DST6,
    H0,
    H0_IP4,
    H0_IP6,
    N1,
    N1_IP4,
    R0,
    R0_IP4,
    R0_IP6,
    R1,
    Router,
    assert_checksums,
    base_config,
    eth,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import ICMP, IP, TCP, UDP, IPerror, UDPerror
from scapy.layers.inet6 import ICMPv6DestUnreach, ICMPv6EchoRequest, IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from vecroute.packet.node_ids import NODE_NAMES

SEC = 1_000_000_000


def fw_router(*rules: str, default: str = "deny", **fw) -> Router:
    return Router(base_config(firewall={"default": default, "rules": list(rules), **fw}))


def from_n1(pkt) -> tuple[str, Ether]:
    """A packet arriving on eth1 from the next hop N1 (the 'outside')."""
    return ("eth1", Ether(dst=R1, src=N1) / pkt)


def node_packets(r: Router, name: str) -> int:
    from vecroute.graph.state import NS_PACKETS

    return int(r.state.node_stats[NODE_NAMES.index(name), NS_PACKETS])


# -- no firewall ------------------------------------------------------------------------------


def test_without_a_firewall_section_the_fw_nodes_never_run() -> None:
    r = Router()
    assert r.firewall is None
    res = r.run([eth() / IP(src=H0_IP4, dst=DST4) / UDP(dport=9)])
    assert res.fates == ["tx"]
    assert node_packets(r, "fw-in") == 0 and node_packets(r, "fw-out") == 0


# -- allow / deny -----------------------------------------------------------------------------


def test_allowed_packet_is_forwarded_unchanged_and_denied_one_counted() -> None:
    r = fw_router("100 allow udp from any to any 53")
    ok = eth() / IP(src=H0_IP4, dst=DST4, ttl=9) / UDP(sport=1000, dport=53) / Raw(b"q" * 20)
    bad = eth() / IP(src=H0_IP4, dst=DST4) / UDP(sport=1000, dport=54)
    res = r.run([ok, bad])
    assert res.fates == ["tx", "drop"]
    out = res.tx[0].pkt
    assert res.tx[0].ifname == "eth1" and out[Ether].dst == N1
    assert out[IP].ttl == 8 and bytes(out[UDP]) == bytes(ok[UDP])
    assert_checksums(out)
    assert res.c("fw-deny") == 1
    res.check_accounting()
    assert node_packets(r, "fw-in") == 2 and node_packets(r, "fw-out") == 1


def test_default_allow_and_explicit_deny_ip6() -> None:
    r = fw_router("100 deny ip6 from any to 2001:db8:100::/64", default="allow")
    res = r.run(
        [
            eth() / IPv6(src=H0_IP6, dst="2001:db8:100::5") / UDP(dport=7),
            eth() / IPv6(src=H0_IP6, dst="2001:db8:100:1::5") / UDP(dport=7),
        ]
    )
    assert res.fates == ["drop", "tx"]
    assert res.c("fw-deny") == 1
    assert res.tx[0].pkt[IPv6].hlim == 63


def test_per_rule_counters_count_in_and_out() -> None:
    r = fw_router("100 count ip from any to any", "200 allow udp from any to any")
    p = eth() / IP(src=H0_IP4, dst=DST4) / UDP(dport=9) / Raw(b"x" * 10)
    r.run([p, p, p], now_ns=5 * SEC)
    lines = {ln.split()[0]: ln.split() for ln in r.firewall.show().splitlines()}
    size = len(p[IP])
    # each forwarded packet passes fw-in and fw-out: counted twice by each rule it reaches
    assert lines["00100"][1:3] == ["6", str(6 * size)]
    assert lines["00200"][1:3] == ["6", str(6 * size)]
    assert lines["65535"][1:3] == ["0", "0"]


@pytest.mark.parametrize("default", ["allow", "deny"])
def test_direction_without_rules_counts_like_classifying(default) -> None:
    # every rule says `in`: at output only the default rule can match, and the data path
    # skips classifying there -- the counters must not tell the difference
    r = fw_router("100 count ip from any to any in", "200 allow udp from any to any in",
                  "300 allow ip6 from any to any", default=default)
    assert r.firewall.compiled.trivial_directions() == 0
    r.firewall.delete(300)
    assert r.firewall.compiled.trivial_directions() == 2  # 1 << DIR_OUT
    p4 = eth() / IP(src=H0_IP4, dst=DST4) / UDP(dport=9) / Raw(b"x" * 10)
    p6 = eth() / IPv6(src=H0_IP6, dst=DST6) / UDP(dport=9)
    res = r.run([p4, p6], now_ns=3 * SEC)
    lines = {ln.split()[0]: ln.split() for ln in r.firewall.show().splitlines()}
    n4, n6 = len(p4[IP]), len(p6[IPv6])
    assert lines["00100"][1:3] == ["2", str(n4 + n6)]
    # in: rule 200 passes both (UDP); out: only the default rule can match
    assert res.fates == (["tx", "tx"] if default == "allow" else ["drop", "drop"])
    assert lines["65535"][1:3] == ["2", str(n4 + n6)]
    assert r.firewall.compiled.cnt[-1, 2] == 3 * SEC
    assert node_packets(r, "fw-out") == 2


def test_keep_state_rule_with_in_still_probes_states_at_output() -> None:
    # ipfw probes the states when the walk reaches a keep-state rule, before its `in`
    # condition: the output pass of both directions must find the state
    r = fw_router("100 allow udp from 198.51.100.0/24 to any keep-state in")
    assert r.firewall.compiled.trivial_directions() == 0
    out = eth() / IP(src=H0_IP4, dst=DST4) / UDP(sport=5000, dport=53)
    back = from_n1(IP(src=DST4, dst=H0_IP4) / UDP(sport=53, dport=5000))
    assert r.run([out, back], now_ns=SEC).fates == ["tx", "tx"]


# -- in / out / recv / xmit ---------------------------------------------------------------------


def test_xmit_rule_sees_the_transmit_interface_only_at_output() -> None:
    r = fw_router("100 deny ip from any to any out xmit eth2", default="allow")
    res = r.run(
        [
            eth() / IP(src=H0_IP4, dst=DST4_SMALL) / UDP(dport=9),  # leaves by eth2
            eth() / IP(src=H0_IP4, dst=DST4) / UDP(dport=9),  # leaves by eth1
        ]
    )
    assert res.fates == ["drop", "tx"]
    assert res.tx[0].ifname == "eth1"


def test_recv_and_in_rules() -> None:
    r = fw_router("100 deny ip from any to any in recv eth1", default="allow")
    res = r.run(
        [
            from_n1(IP(src=N1_IP4, dst=H0_IP4) / UDP(dport=9)),
            eth() / IP(src=H0_IP4, dst=DST4) / UDP(dport=9),
        ]
    )
    assert res.fates == ["drop", "tx"]


def test_router_own_echo_reply_goes_through_fw_out() -> None:
    # ipfw: packets the router originates pass the output firewall (with no recv interface)
    r = fw_router("100 deny icmp from me to any out", default="allow")
    res = r.run(
        [
            eth() / IP(src=H0_IP4, dst=R0_IP4) / ICMP(type=8, id=1, seq=1),  # to the router
            eth() / IP(src=H0_IP4, dst=DST4) / ICMP(type=8, id=1, seq=1),  # through it
        ]
    )
    assert res.c("echo-reply-sent") == 1
    assert res.fates[0] == "drop" and res.fates[1] == "tx"
    assert [t.pkt[IP].dst for t in res.tx] == [DST4]


# -- reject / unreach -------------------------------------------------------------------------


def test_reject_ip4_answers_host_unreachable_from_the_router() -> None:
    r = fw_router("100 reject udp from any to any 53", "200 deny icmp from any to any")
    p = eth() / IP(src=H0_IP4, dst=DST4, id=77) / UDP(sport=4000, dport=53) / Raw(b"z" * 30)
    res = r.run([p])
    assert res.c("fw-reject") == 1 and res.c("icmp-error-sent") == 1
    (t,) = res.tx
    e = t.pkt
    assert t.ifname == "eth0" and e[Ether].dst == H0
    assert e[IP].src == R0_IP4 and e[IP].dst == H0_IP4
    # the firewall's own answer is not filtered again by rule 200 at fw-out
    assert e[ICMP].type == 3 and e[ICMP].code == 1
    assert e[IPerror].id == 77 and e[UDPerror].dport == 53
    assert_checksums(e)
    res.check_accounting()


def test_unreach_code_and_ip6_admin_prohibited() -> None:
    r = fw_router(
        "100 unreach port udp from any to any 53",
        "200 reject ip6 from any to any",
    )
    res = r.run(
        [
            eth() / IP(src=H0_IP4, dst=DST4) / UDP(dport=53),
            eth() / IPv6(src=H0_IP6, dst=DST6) / UDP(dport=54),  # rule 100 would say port (4)
        ]
    )
    a, b = res.tx
    assert a.pkt[ICMP].type == 3 and a.pkt[ICMP].code == 3
    u = b.pkt[ICMPv6DestUnreach]
    assert u.type == 1 and u.code == 1  # RFC 4443: administratively prohibited
    assert b.pkt[IPv6].src == R0_IP6 and b.pkt[IPv6].dst == H0_IP6
    assert_checksums(b.pkt)


# -- reset ------------------------------------------------------------------------------------


def test_reset_of_a_syn_is_rst_ack_with_ack_seq_plus_one() -> None:
    r = fw_router("100 reset tcp from any to any 22")
    p = eth() / IP(src=H0_IP4, dst=DST4) / TCP(sport=40000, dport=22, flags="S", seq=1000)
    res = r.run([p])
    assert res.c("fw-reset") == 1 and res.c("tcp-reset-sent") == 1
    (t,) = res.tx
    q = t.pkt
    assert t.ifname == "eth0" and q[Ether].dst == H0 and q[Ether].src == R0
    assert q[IP].src == DST4 and q[IP].dst == H0_IP4 and q[IP].ttl == 64
    assert q[TCP].sport == 22 and q[TCP].dport == 40000
    assert q[TCP].flags == "RA" and q[TCP].seq == 0 and q[TCP].ack == 1001
    assert len(q[TCP].payload) == 0
    assert_checksums(q)
    res.check_accounting()


def test_reset_of_data_with_ack_takes_seq_from_ack() -> None:
    r = fw_router("100 reset tcp from any to any 80")
    p = (
        eth()
        / IP(src=H0_IP4, dst=DST4, options=b"\x01\x01\x01\x00")
        / TCP(sport=5, dport=80, flags="PA", seq=10, ack=0xFFFFFFF0, options=[("NOP", None)] * 4)
        / Raw(b"GET / HTTP/1.0\r\n\r\n")
    )
    (t,) = r.run([p]).tx
    q = t.pkt
    assert q[IP].ihl == 5 and q[IP].len == 40
    assert q[TCP].flags == "R" and q[TCP].seq == 0xFFFFFFF0 and q[TCP].ack == 0
    assert_checksums(q)


def test_reset_ip6_fin_counts_in_the_ack() -> None:
    r = fw_router("100 reset tcp from any to any")
    p = eth() / IPv6(src=H0_IP6, dst=DST6) / TCP(sport=7, dport=8, flags="F", seq=2**32 - 1)
    (t,) = r.run([p]).tx
    q = t.pkt
    assert q[IPv6].src == DST6 and q[IPv6].dst == H0_IP6 and q[IPv6].hlim == 64
    assert q[IPv6].plen == 20 and q[IPv6].nh == 6
    assert q[TCP].flags == "RA" and q[TCP].ack == 0  # (2**32 - 1) + 1 wraps
    assert_checksums(q)


def test_reset_never_answers_a_rst_or_a_non_tcp_packet() -> None:
    r = fw_router("100 reset ip from any to any")
    res = r.run(
        [
            eth() / IP(src=H0_IP4, dst=DST4) / TCP(dport=22, flags="R"),
            eth() / IP(src=H0_IP4, dst=DST4) / UDP(dport=22),
        ]
    )
    assert res.tx == [] and res.c("fw-deny") == 2 and res.c("tcp-reset-sent") == 0


def test_reset_rst_rate_is_limited_and_configurable() -> None:
    """A SYN flood at a `reset` rule gets at most the RST bucket's burst at once (default
    50, refilled at 1000/s), the rest only dropped; [icmp] tcp_reset_rate/_burst set it."""
    cfg = base_config(firewall={"default": "deny", "rules": ["100 reset tcp from any to any 22"]})
    cfg["icmp"] = {"rate": 1000, "burst": 1000}  # the RST bucket keeps its defaults
    r = Router(cfg)
    syns = [eth() / IP(src=H0_IP4, dst=DST4) / TCP(sport=1024 + k, dport=22, flags="S")
            for k in range(80)]
    res = r.run(syns, now_ns=SEC)
    assert len(res.tx) == 50 and res.c("tcp-reset-sent") == 50
    assert res.c("tcp-reset-rate-limited") == 30 and res.c("fw-reset") == 80
    assert res.c("icmp-rate-limited") == 0
    res.check_accounting()
    later = r.run(syns[:20], now_ns=SEC + 10_000_000)  # 10 ms: 10 tokens back
    assert len(later.tx) == 10 and later.c("tcp-reset-rate-limited") == 10
    # configured, and shared with the RSTs for closed ports at the router's addresses
    cfg["icmp"] = {"tcp_reset_rate": 1, "tcp_reset_burst": 2}
    cfg["firewall"]["rules"].append("200 allow ip from any to me")
    r = Router(cfg)
    closed = eth() / IP(src=H0_IP4, dst=R0_IP4) / TCP(sport=5, dport=9, flags="S")
    res = r.run([syns[0], closed, syns[1], closed], now_ns=SEC)
    assert len(res.tx) == 2 and res.c("tcp-reset-rate-limited") == 2
    assert r.run([closed], now_ns=2 * SEC).c("tcp-reset-sent") == 1
    # the ICMP errors' bucket is another one: a reject still answers
    r = Router(base_config(firewall={"rules": ["100 reset tcp from any to any 22",
                                               "200 reject udp from any to any"]},
                           icmp={"tcp_reset_rate": 0, "tcp_reset_burst": 0}))
    res = r.run([syns[0], eth() / IP(src=H0_IP4, dst=DST4) / UDP(dport=7)], now_ns=SEC)
    assert res.c("tcp-reset-rate-limited") == 1 and res.c("icmp-error-sent") == 1


# -- keep-state ------------------------------------------------------------------------------


def test_keep_state_lets_replies_in_but_not_new_flows_from_outside() -> None:
    r = fw_router(
        "100 check-state",
        "200 allow tcp from 198.51.100.0/24 to any setup keep-state",
        "300 allow udp from 198.51.100.0/24 to any keep-state",
    )
    out_syn = eth() / IP(src=H0_IP4, dst=DST4) / TCP(sport=3333, dport=443, flags="S")
    back = from_n1(IP(src=DST4, dst=H0_IP4) / TCP(sport=443, dport=3333, flags="SA"))
    stranger = from_n1(IP(src=DST4, dst=H0_IP4) / TCP(sport=443, dport=3334, flags="S"))
    udp_out = eth() / IP(src=H0_IP4, dst=DST4) / UDP(sport=5353, dport=53)
    udp_back = from_n1(IP(src=DST4, dst=H0_IP4) / UDP(sport=53, dport=5353))
    udp_new = from_n1(IP(src=DST4, dst=H0_IP4) / UDP(sport=53, dport=5354))
    res = r.run([out_syn, back, stranger, udp_out, udp_back, udp_new], now_ns=SEC)
    assert res.fates == ["tx", "tx", "drop", "tx", "tx", "drop"]
    assert res.c("fw-deny") == 2
    states = r.firewall.states(SEC)
    assert len(states) == 2
    # the UDP state expires after its lifetime (10 s): the reply is then denied
    late = r.run([udp_back], now_ns=12 * SEC)
    assert late.fates == ["drop"]


def test_state_table_full_drops_new_flows_only() -> None:
    """Full of answered flows: a new one is refused (an unanswered state would have been
    evicted for it, tests/test_fw_flood.py)."""
    r = fw_router("100 allow udp from any to any keep-state", max_states=2)
    flows = [eth() / IP(src=H0_IP4, dst=DST4) / UDP(sport=1000 + k, dport=53) for k in range(3)]
    back = [from_n1(IP(src=DST4, dst=H0_IP4) / UDP(sport=53, dport=1000 + k)) for k in range(2)]
    res = r.run([flows[0], flows[1], *back, flows[2]], now_ns=SEC)
    assert res.fates == ["tx", "tx", "tx", "tx", "drop"]
    assert res.c("fw-state-full") == 1
    again = r.run(flows[:2], now_ns=2 * SEC)  # existing flows keep working
    assert again.fates == ["tx", "tx"]


# -- run-time changes -----------------------------------------------------------------------


def test_table_and_rule_changes_take_effect_on_the_next_batch() -> None:
    r = fw_router("100 deny ip from any to table(bad)", default="allow",
                  tables=[{"name": "bad", "type": "addr", "entries": []}])
    p = eth() / IP(src=H0_IP4, dst=DST4) / UDP(dport=9)
    assert r.run([p]).fates == ["tx"]
    r.firewall.command(["table", "bad", "add", DST4])
    assert r.run([p]).fates == ["drop"]
    r.firewall.command(["table", "bad", "delete", DST4])
    assert r.run([p]).fates == ["tx"]
    r.firewall.command(["add", "50", "deny", "udp", "from", "any", "to", "any", "9"])
    assert r.run([p]).fates == ["drop"]
    with pytest.raises(ValueError, match="nosuch"):
        r.firewall.command(["add", "60", "nosuch", "ip", "from", "any", "to", "any"])
    r.firewall.command(["delete", "50"])
    assert r.run([p]).fates == ["tx"]


# -- garbage --------------------------------------------------------------------------------

_GARBAGE_FW = None


def _garbage_router() -> Router:
    global _GARBAGE_FW
    if _GARBAGE_FW is None:
        _GARBAGE_FW = fw_router(
            "100 check-state",
            "200 reset tcp from any to any 22",
            "300 reject udp from any to any 53",
            "400 allow ip from any to any keep-state",
        )
    return _GARBAGE_FW


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(min_size=0, max_size=120), min_size=1, max_size=20), st.integers(0, 3))
def test_garbage_through_the_firewall_is_counted_never_crashes(payloads, kind) -> None:
    r = _garbage_router()
    pkts = []
    for k, b in enumerate(payloads):
        if kind == 0:
            pkts.append(eth() / IP(src=H0_IP4, dst=DST4) / TCP(dport=22, flags=k & 0xFF) / b)
        elif kind == 1:
            pkts.append(eth() / IP(src=H0_IP4, dst=DST4, proto=6) / b)
        elif kind == 2:
            pkts.append(eth() / IPv6(src=H0_IP6, dst=DST6, nh=6) / b)
        else:
            pkts.append(bytes(eth() / IP(src=H0_IP4, dst=DST4) / UDP(dport=53))[:34] + b)
    res = r.run(pkts, now_ns=SEC)
    res.check_accounting()
    for t in res.tx:
        if t.ifname != "eth0":  # forwarded garbage leaves as it came (TTL aside)
            continue
        q = t.pkt  # the router's own answers (RST, ICMP error) are well-formed
        assert_checksums(q)
        if TCP in q:
            assert q[TCP].flags.R and q[TCP].sport == 22 and len(bytes(q[TCP])) == 20


def test_echo_through_with_allow_icmp() -> None:
    r = fw_router("100 allow icmp from any to any", "200 allow ipv6-icmp from any to any")
    res = r.run(
        [
            eth() / IP(src=H0_IP4, dst=R0_IP4) / ICMP(type=8),
            eth() / IPv6(src=H0_IP6, dst=R0_IP6) / ICMPv6EchoRequest(),
            eth() / IP(src=H0_IP4, dst=DST4) / TCP(dport=80),
        ]
    )
    assert res.c("echo-reply-sent") == 2
    assert res.fates[2] == "drop"
    assert res.tx[0].pkt[IP].dst == H0_IP4 and res.tx[0].pkt[ICMP].type == 0


# -- configuration, check, replay, ctl -------------------------------------------------------

FW_TOML = (Path(__file__).resolve().parent.parent / "examples" / "firewall.toml").read_text()


def test_check_reports_the_firewall_and_errors_name_the_rule(tmp_path) -> None:
    from click.testing import CliRunner

    from vecroute.cli import main

    f = tmp_path / "fw.toml"
    f.write_text(FW_TOML)
    res = CliRunner().invoke(main, ["check", str(f)])
    assert res.exit_code == 0, res.output
    assert "firewall: 7 rules (default deny), 1 tables" in res.output
    f.write_text(FW_TOML.replace("table(blocklist)", "table(nosuch)"))
    res = CliRunner().invoke(main, ["check", str(f)])
    assert res.exit_code == 2 and "nosuch" in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1
    f.write_text(FW_TOML.replace("500 allow icmp", "500 allow icmpp"))
    res = CliRunner().invoke(main, ["check", str(f)])
    assert res.exit_code == 2 and "firewall.rules[4]" in res.output and "icmpp" in res.output


def test_replay_applies_the_firewall(tmp_path) -> None:
    from scapy.utils import rdpcap, wrpcap

    from vecroute.control.config import load_config
    from vecroute.io.replay import Replayer

    f = tmp_path / "fw.toml"
    f.write_text(FW_TOML)
    mac_in = "02:00:00:00:00:01"
    pkts = [
        Ether(dst=mac_in, src=H0) / IP(src="198.51.100.7", dst="198.18.0.9") / UDP(dport=9),
        Ether(dst=mac_in, src=H0) / IP(src="203.0.113.9", dst="198.18.0.9") / UDP(dport=9),
        Ether(dst=mac_in, src=H0) / IP(src="198.51.100.7", dst="198.18.0.9") / TCP(flags="A"),
    ]
    for k, p in enumerate(pkts):
        p.time = 1_700_000_000 + k
    wrpcap(str(tmp_path / "in.pcap"), pkts)
    res = Replayer(load_config(f)).run([("inside", str(tmp_path / "in.pcap"))], tmp_path / "o")
    out = rdpcap(res.outputs["outside"])
    # the blocklisted source is dropped, and a TCP segment without SYN is not `setup`
    assert [(p[IP].dst, p[IP].proto) for p in out] == [("198.18.0.9", 17)]


class _CtlRouter:
    """Just enough of a router for `execute` (the ctl grammar), with or without a firewall."""

    def __init__(self, firewall) -> None:
        self.firewall = firewall

    def fw_command(self, argv):
        if self.firewall is None:
            raise ValueError("no firewall: the configuration has no [firewall] section")
        return self.firewall.command(argv)


def test_ctl_fw_grammar() -> None:
    from vecroute.control.commands import CommandError, execute

    r = fw_router("100 allow icmp from any to any")
    c = _CtlRouter(r.firewall)
    assert "00100" in execute(c, ["fw", "show"]).text
    execute(c, ["fw", "add", "200", "deny", "ip", "from", "any", "to", "any"])
    assert "00200" in execute(c, ["fw", "show"]).text
    with pytest.raises(CommandError, match="'tp'"):
        execute(c, ["fw", "add", "300", "deny", "ip", "from", "any", "tp", "any"])
    with pytest.raises(CommandError, match="no rule 00999"):
        execute(c, ["fw", "delete", "999"])
    with pytest.raises(CommandError, match="expected a rule number 1..65535, got 'abc'"):
        execute(c, ["fw", "zero", "abc"])
    with pytest.raises(CommandError, match="default rule cannot be deleted"):
        execute(c, ["fw", "delete", "65535"])
    with pytest.raises(CommandError, match="nosuch"):
        execute(c, ["fw", "table", "nosuch", "add", "192.0.2.1"])
    with pytest.raises(CommandError, match="no firewall"):
        execute(_CtlRouter(None), ["fw", "show"])


# -- frames the control plane injects (linux-cp) pass fw-out ------------------------------


def test_injected_frames_pass_fw_out_and_lying_headers_are_dropped():
    """Linux's frames on a mirror (INJ_FRAME records) go through fw-out as the router's own
    packets on the port they leave by: a denied port is dropped and counted, an allowed one
    leaves byte for byte; ARP, multicast and link-local are not filtered (as on input);
    headers whose lengths lie are dropped with their own counter, never read past."""
    from scapy.layers.inet6 import ICMPv6ND_NA
    from scapy.layers.l2 import ARP

    from vecroute.control.forwarder import Forwarder
    from vecroute.control.punts import inject_frame
    from vecroute.graph import counters as C

    rt = fw_router("100 deny tcp from any to any 179 out xmit eth1",
                   "200 deny udp from any to any 7102 out recv any",
                   "300 deny ipv6-icmp from any to any out",
                   "400 deny ip from any to 240.0.0.0/4 out", default="allow")
    fwd = Forwarder(rt.fib, [], 64, firewall=rt.firewall)
    l2 = Ether(dst=N1, src=R1)
    v4 = IP(src="192.0.2.65", dst=N1_IP4)
    v6 = IPv6(src="2001:db8:1::1", dst="2001:db8:1::99")
    passed = [
        l2 / v4 / TCP(dport=180, flags="S"),  # another port
        Ether(dst=N1, src=R0) / v4 / UDP(dport=7102),  # rule 200 wants a recv interface
        l2 / v6 / TCP(dport=180),
        Ether(dst="ff:ff:ff:ff:ff:ff", src=R1) / ARP(psrc="192.0.2.65", pdst=N1_IP4),
        l2 / IP(src="192.0.2.65", dst="224.0.0.5", proto=89) / Raw(b"\x02\x01" + b"\0" * 40),
        l2 / IPv6(src="fe80::1", dst="fe80::99") / TCP(dport=179),  # link-local: exempt
        l2 / IPv6(src="fe80::1", dst="ff02::5", nh=89) / Raw(b"\x03\x01" + b"\0" * 30),
    ]
    denied = [l2 / v4 / TCP(dport=179, flags="S"), l2 / v6 / TCP(dport=179, flags="S"),
              l2 / IP(src="192.0.2.65", dst="240.0.0.1") / UDP(),  # not multicast: judged
              l2 / v6 / ICMPv6EchoRequest()]
    good = bytes(l2 / v4 / TCP(dport=179))
    short_ihl = bytearray(good)
    short_ihl[14] = 0x4F  # IHL 60 in a 40-byte packet
    long_tot = bytearray(good)
    long_tot[16:18] = (1500).to_bytes(2, "big")  # total length past the frame
    v6good = bytes(l2 / v6 / TCP(dport=179))
    long_plen = bytearray(v6good)
    long_plen[18:20] = (4000).to_bytes(2, "big")
    bad_ext = bytes(l2 / IPv6(src="2001:db8:1::1", dst="2001:db8:1::99", nh=0)
                    / Raw(b"\x06\xff"))  # a hop-by-hop header claiming 2048 bytes
    truncated = good[:14 + 12]  # not even an IPv4 header
    ihl4 = bytearray(good)
    ihl4[14] = 0x44  # IHL 16 bytes: less than a header
    tot_short = bytearray(good)
    tot_short[16:18] = (12).to_bytes(2, "big")  # total length below the header
    v6_short = v6good[:14 + 30]
    vlan = bytes(l2)[:12] + b"\x81\x00\x00\x05" + good[12:]  # a tag: no VLANs here
    malformed = [bytes(short_ihl), bytes(long_tot), bytes(long_plen), bad_ext, truncated,
                 bytes(ihl4), bytes(tot_short), v6_short, vlan]
    frames = [bytes(f) for f in passed + denied] + malformed
    for f in frames:
        assert inject_frame(fwd.inject, 1, f, linux=True)
    # the control plane's own answers (a solicited NA to a global address) are not Linux's:
    # they leave unfiltered, whatever fw-out says of ICMPv6 (rule 300)
    na = bytes(l2 / IPv6(src="2001:db8:1::1", dst="2001:db8:1::99", hlim=255)
               / ICMPv6ND_NA(tgt="2001:db8:1::1", S=1))
    assert inject_frame(fwd.inject, 1, na)
    sent: list[tuple[int, bytes]] = []
    n, _ = fwd.forward(0, lambda p, f: sent.append((p, f)))
    assert n == len(frames) + 1
    # as they were, nothing else (the exempt ones leave before the filtered ones)
    assert sorted(sent) == sorted((1, bytes(f)) for f in [*passed, na])
    c = fwd.graph.state.counters
    assert c[C.C_FW_DENY] == len(denied)
    assert c[C.C_FW_INJECT_MALFORMED] == len(malformed)
    # the same frames without a firewall: all leave as they are (no fw-out, no parsing)
    plain = Forwarder(Router(base_config()).fib, [], 64)
    for f in frames:
        assert inject_frame(plain.inject, 1, f, linux=True)
    out: list[tuple[int, bytes]] = []
    plain.forward(0, lambda p, f: out.append((p, f)))
    assert sorted(out) == sorted((1, f) for f in frames)


@pytest.mark.parametrize(("rules", "repeats"), [
    ((), True),
    (("100 deny udp from any to any 53", "200 allow ip from 192.0.2.0/24 to any"), True),
    (("100 deny ip from table(t) to any", "200 reject tcp from any to any 25"), True),
    (("100 deny tcp from any to any setup", "200 allow ip from any to any frag"), True),
    (("100 count ip from any to any",), False),
    (("100 skipto 300 ip from any to any", "300 allow ip from any to any"), False),
    (("100 allow ip from any to any keep-state",), False),
    (("100 check-state", "200 allow ip from any to any"), False),
    (("100 deny udp from any to any in",), False),
    (("100 deny udp from any to any out",), False),
    (("100 deny ip from any to any recv eth0",), False),
    (("100 deny ip from any to any xmit eth1",), False),
    (("100 deny ip from any to any via eth1",), False),
    (("100 deny log ip from any to any",), False),
    (("100 deny ip from any to any recv table(ifs)",), False),
    (("100 deny ip from any to any not recv eth0",), False),
    (("100 deny ip from any to any via any",), False),
    (("100 skipto tablearg ip from table(t) to any", "200 allow ip from any to any"), False),
    (("100 deny ip from any to any ipttl 1-3", "200 deny icmp from any to any icmptypes 8",
      "300 deny ip from me to any", "400 deny tcp from any to any established"), True),
])
def test_out_repeats_in_only_where_no_rule_tells_the_passes_apart(rules, repeats) -> None:
    # the fused pass then counts fw-in's deciding rule again instead of classifying at
    # fw-out; a rule set that can see the direction, an interface or the states, or that
    # counts, jumps or logs on the way, must be classified in both passes
    r = fw_router(*rules, tables=[{"name": "t", "type": "addr", "entries": ["10.0.0.0/8"]},
                                  {"name": "ifs", "type": "iface", "entries": ["eth0"]}])
    assert r.firewall.compiled.out_repeats_in() == repeats
    from vecroute.graph.state import FW_OUT_REPEATS, OPT_FW

    r.run([eth() / IP(src=H0_IP4, dst=DST4) / UDP(dport=9)], now_ns=SEC)
    assert bool(r.state.opts[OPT_FW] & FW_OUT_REPEATS) == repeats
