"""Packet trace: the records the graph leaves, checked against scapy and the FIB itself.

The oracle for the headers is scapy's decoding of the frame that was sent; for the lookup
the FIB's own answer (``Lpm.lookup`` and the routes dict), computed here independently of
the trace's reading of it; for fates the graph's own metadata (what the harness reports).
"""

from __future__ import annotations

import ipaddress

import numpy as np
import pytest
from conftest import (
    DST4,
    DST4_NOROUTE,
    DST4_SMALL,
    DST6,
    H0_IP4,
    H0_IP6,
    N1,
    R1,
    Router,
    base_config,
    eth,
)
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import IPv6

from vecroute.control.trace import (
    TraceError,
    TraceExplainer,
    arm,
    disarm,
    parse_match,
    render_text,
    snapshot,
)
from vecroute.graph import trace as T
from vecroute.graph.dataplane import fib_state
from vecroute.packet.batch import M_TRACE


def traced(r: Router, packets, count: int = 10, node: str = "ethernet-input",
           match: list[str] | None = None, rx: str = "eth0"):
    arm(r.state, count, node, parse_match(match) if match else None)
    res = r.run(packets, rx=rx)
    return res, TraceExplainer(r.fib).explain(snapshot(r.state))


def test_forwarded_ip4_packet_is_traced_node_by_node():
    r = Router()
    p = eth() / IP(src=H0_IP4, dst=DST4, ttl=9) / UDP(sport=1234, dport=53) / (b"x" * 20)
    res, pkts = traced(r, [p])
    assert res.fates == ["tx"]
    assert len(pkts) == 1
    t = pkts[0]
    ip = next(la for la in t["headers"] if la["layer"] == "ip4")
    sp = p[IP]
    assert (ip["src"], ip["dst"], ip["ttl"], ip["proto"]) == (sp.src, sp.dst, 9, 17)
    udp = next(la for la in t["headers"] if la["layer"] == "udp")
    assert (udp["sport"], udp["dport"]) == (1234, 53)
    nodes = [s["node"] for s in t["nodes"]]
    assert nodes == ["ethernet-input", "ip4-input", "ip4-lookup", "ip4-rewrite",
                     "interface-output"]
    lk = t["nodes"][2]["lookup"]
    # the FIB's own answer, independently: longest matching route of table 0
    want = max((n for (tb, n) in r.fib.routes if tb == 0 and n.version == 4
                and ipaddress.ip_address(DST4) in n), key=lambda n: n.prefixlen)
    assert lk["prefix"] == str(want) == "203.0.113.0/25"
    assert lk["load_balance"] == r.fib.lpm[4].lookup(0, DST4)
    assert lk["bucket"] == 0 and lk["buckets"] == 1
    rw = t["nodes"][3]["rewrite"]
    assert rw["tx"] == "eth1" and rw["ttl"] == 8
    assert rw["l2"] == f"{R1} -> {N1}"
    assert t["fate"] == ["tx eth1"]
    text = render_text(pkts)
    assert "ip4-lookup" in text and "203.0.113.0/25" in text and "tx eth1" in text


def test_drop_reason_and_generated_icmp_error_are_traced():
    r = Router()
    p = eth() / IP(src=H0_IP4, dst=DST4, ttl=1) / ICMP()
    res, pkts = traced(r, [p])
    t = pkts[0]
    # TTL 1: the packet becomes a Time Exceeded (its slot answers) sent back on eth0
    steps = {s["node"]: s for s in t["nodes"]}
    assert "icmp4-error" in steps
    assert steps["icmp4-error"]["icmp"] == {"type": 11, "code": 0}
    assert t["fate"] == ["tx eth0"]
    assert len(res.tx) == 1 and res.tx[0].ifname == "eth0"
    q = eth() / IP(src=H0_IP4, dst=DST4_NOROUTE) / ICMP()
    r2 = Router()
    arm(r2.state, 1)
    r2.set_icmp_rate(1, 0)  # no token: the unreachable is suppressed, the packet dropped
    r2.run([q])
    t2 = TraceExplainer(r2.fib).explain(snapshot(r2.state))[0]
    drops = [s for s in t2["nodes"] if s["next"] == "drop"]
    assert drops and drops[0].get("reason")
    assert t2["fate"][0].startswith("drop ")


def test_only_the_next_n_packets_and_only_matching_ones():
    r = Router()
    pk = [eth() / IP(src=H0_IP4, dst=DST4) / UDP(dport=1000 + i) for i in range(6)]
    pk += [eth() / IPv6(src=H0_IP6, dst=DST6) / TCP(dport=80)]
    res, pkts = traced(r, pk, count=3)
    assert [t["packet"] for t in pkts] == [1, 2, 3]
    ports = [next(la for la in t["headers"] if la["layer"] == "udp")["dport"] for t in pkts]
    assert ports == [1000, 1001, 1002]
    _, pkts = traced(r, pk, count=5, match=["ip6", "and", "tcp", "dst", "port", "80"])
    assert len(pkts) == 1
    ip6 = next(la for la in pkts[0]["headers"] if la["layer"] == "ip6")
    assert ip6["dst"] == str(ipaddress.IPv6Address(DST6))
    assert [s["node"] for s in pkts[0]["nodes"]][:3] == ["ethernet-input", "ip6-input",
                                                         "ip6-lookup"]
    _, pkts = traced(r, pk, count=5, match=["udp", "dst", "port", "1004"])
    assert len(pkts) == 1
    _, pkts = traced(r, pk, count=5, match=["src", "net", "10.99.0.0/16"])
    assert pkts == []


def test_trace_from_a_named_node_and_clear():
    r = Router()
    p = eth() / IP(src=H0_IP4, dst=DST4) / UDP()
    _, pkts = traced(r, [p], node="ip4-lookup")
    assert pkts[0]["selected_at"] == "ip4-lookup"
    assert [s["node"] for s in pkts[0]["nodes"]][0] == "ip4-lookup"
    disarm(r.state)
    assert snapshot(r.state)["rec"].shape[0] == 0
    r.run([p])
    assert snapshot(r.state)["rec"].shape[0] == 0


def test_trace_ids_never_leak_into_later_batches():
    """A traced batch's ids are zeroed before the next: an untraced batch records
    nothing, and its generated packets inherit nothing."""
    r = Router(vector_size=4)
    pk = [eth() / IP(src=H0_IP4, dst=DST4, ttl=1) / ICMP() for _ in range(8)]
    traced(r, pk, count=2)
    n = int(r.state.trace_ctl[T.TR_NREC])
    ids = {int(x) for x in snapshot(r.state)["rec"][:, T.R_ID]}
    assert ids == {1, 2}
    r.run(pk)
    assert int(r.state.trace_ctl[T.TR_NREC]) == n
    assert not r.batch.meta[M_TRACE].any()


def test_records_are_bounded():
    r = Router(vector_size=256)
    # fragmented in 3: 10 records each, 1000 packets would need more than TRACE_RECORDS
    pk = [eth() / IP(src=H0_IP4, dst=DST4_SMALL) / UDP() / (b"x" * 1400) for _ in range(250)]
    arm(r.state, T.MAX_TRACE_PACKETS)
    for _ in range(4):
        res = r.run(pk)
        assert len(res.tx) == 750  # forwarding unaffected, full or not
    tc = r.state.trace_ctl
    assert tc[T.TR_NREC] == T.TRACE_RECORDS
    assert tc[T.TR_LOST] >= 1 and tc[T.TR_LEFT] == 0
    pkts = TraceExplainer(r.fib).explain(snapshot(r.state))
    assert len(pkts) == T.MAX_TRACE_PACKETS  # selected in the first batches...
    done = [t for t in pkts if not t.get("incomplete")]
    assert 700 <= len(done) < T.MAX_TRACE_PACKETS  # ...but not every trail fitted
    assert all(t["fate"] == ["tx eth2"] * 3 for t in done)
    assert "incomplete" in render_text(pkts)


def test_bad_requests_are_one_line_errors():
    r = Router()
    for words in (["port", "x"], ["host", "1.2.3.0/24"], ["bogus"], ["src"],
                  ["ip6", "host", "1.2.3.4"], ["port", "99999"]):
        with pytest.raises(TraceError):
            parse_match(words)
    with pytest.raises(TraceError):
        arm(r.state, 0)
    with pytest.raises(TraceError):
        arm(r.state, T.MAX_TRACE_PACKETS + 1)
    with pytest.raises(TraceError):
        arm(r.state, 1, "no-such-node")


def test_firewall_rule_and_verdict_are_traced():
    cfg = base_config(firewall={"rules": ["100 deny udp from any to any 9",
                                          "200 allow ip from any to any"]})
    r = Router(cfg)
    pk = [eth() / IP(src=H0_IP4, dst=DST4) / UDP(dport=9),
          eth() / IP(src=H0_IP4, dst=DST4) / UDP(dport=10)]
    res, pkts = traced(r, pk)
    assert res.fates == ["drop", "tx"]
    fw = [[s["firewall"] for s in t["nodes"] if s["node"] == "fw-in"][0] for t in pkts]
    assert fw[0] == {"verdict": "drop", "rule": 100}
    assert fw[1] == {"verdict": "pass", "rule": 200}
    assert pkts[0]["fate"] == ["drop fw-deny"]


def test_ecmp_bucket_is_explained():
    cfg = base_config()
    cfg["routes"].append({"prefix": "198.19.0.0/16", "via": ["192.0.2.2", "192.0.2.66"]})
    r = Router(cfg)
    pk = [eth() / IP(src=H0_IP4, dst="198.19.0.1") / UDP(sport=s, dport=80) for s in range(40)]
    res, pkts = traced(r, pk, count=40)
    seen = set()
    for t, tx in zip(pkts, sorted(res.tx, key=lambda x: x.orig), strict=True):
        lk = next(s["lookup"] for s in t["nodes"] if "lookup" in s)
        assert lk["buckets"] == 2
        h = int(lk["flow_hash"], 16)
        assert lk["bucket"] == h % 2
        lbi = r.fib.lpm[4].lookup(0, "198.19.0.1")
        start = int(r.fib.lbs.lb[lbi, 0])
        assert lk["adjacency"]["index"] == int(r.fib.lbs.lb_buckets[start + h % 2])
        assert lk["adjacency"]["interface"] == tx.ifname
        seen.add(tx.ifname)
    assert seen == {"eth1", "eth2"}
    assert np.all(r.state.trace_ctl[T.TR_LEFT] == 0)


# -- replay --trace ----------------------------------------------------------------------------


def test_replay_trace_prints_the_first_matching_packets(tmp_path):
    import json
    from decimal import Decimal

    from click.testing import CliRunner
    from scapy.utils import rdpcap
    from test_replay_cli import replay, write_pcap

    pk = [eth() / IP(src=H0_IP4, dst=DST4) / UDP(dport=53 if i % 3 == 0 else 80)
          for i in range(30)]
    write_pcap(tmp_path / "in.pcap", pk, [Decimal(1700000000 + i) for i in range(30)])
    res = replay(tmp_path, base_config(), {"eth0": tmp_path / "in.pcap"},
                 ["--trace", "4", "--trace-match", "udp and dst port 53",
                  "--trace-json", str(tmp_path / "t.json")])
    assert res.exit_code == 0, res.output
    got = json.loads((tmp_path / "t.json").read_text())
    assert len(got) == 4
    sent = [p for p in rdpcap(str(tmp_path / "in.pcap")) if p[UDP].dport == 53][:4]
    for t, p in zip(got, sent, strict=True):
        udp = next(la for la in t["headers"] if la["layer"] == "udp")
        ip = next(la for la in t["headers"] if la["layer"] == "ip4")
        assert (udp["dport"], ip["src"], ip["dst"], ip["id"]) == (53, p[IP].src, p[IP].dst,
                                                                   p[IP].id)
        assert t["fate"] == ["tx eth1"]
    assert res.output.count("Packet ") == 4 and "ip4-rewrite" in res.output
    bad = CliRunner().invoke(main_cli(), ["replay", str(tmp_path / "router.toml"), "--in",
                                          f"eth0={tmp_path / 'in.pcap'}", "--out-dir",
                                          str(tmp_path / "o2"), "--trace-match", "port x"])
    assert bad.exit_code != 0 and "port" in bad.output and "Traceback" not in bad.output


def main_cli():
    from vecroute.cli import main

    return main


# -- the review's findings ----------------------------------------------------------------------


def test_default_only_direction_traces_the_default_rule():
    """Rules only for `out`: fw-in applies the default alone (no classification) and the
    trace must say so, not show stale verdict rows."""
    r = Router(base_config(firewall={"default": "deny",
                                     "rules": ["100 allow ip from any to any out"]}))
    _, pkts = traced(r, [eth() / IP(src=H0_IP4, dst=DST4) / UDP()])
    fw = [s["firewall"] for s in pkts[0]["nodes"] if s["node"] == "fw-in"]
    assert fw == [{"verdict": "drop", "rule": 65535}]
    r = Router(base_config(firewall={"default": "deny",
                                     "rules": ["100 allow ip from any to any in"]}))
    _, pkts = traced(r, [eth() / IP(src=H0_IP4, dst=DST4) / UDP()])
    steps = {s["node"]: s for s in pkts[0]["nodes"]}
    assert steps["fw-in"]["firewall"] == {"verdict": "pass", "rule": 100}
    assert steps["fw-out"]["firewall"] == {"verdict": "drop", "rule": 65535}


def test_rule_number_is_the_one_that_decided_even_after_rules_change():
    r = Router(base_config(firewall={"rules": ["100 deny udp from any to any 9",
                                               "200 allow ip from any to any"]}))
    _, _ = traced(r, [eth() / IP(src=H0_IP4, dst=DST4) / UDP(dport=9)])
    r.firewall.command(["add", "50", "count", "ip", "from", "any", "to", "any"], 0)
    pkts = TraceExplainer(r.fib).explain(snapshot(r.state))
    fw = [s["firewall"] for s in pkts[0]["nodes"] if s["node"] == "fw-in"]
    assert fw == [{"verdict": "drop", "rule": 100}]


def test_end_dx4_is_traced_without_a_lookup():
    from scapy.layers.inet6 import IPv6ExtHdrSegmentRouting
    from test_srv6 import SID_DX4, srv6_config

    r = Router(srv6_config())
    inner = IP(src=H0_IP4, dst="198.18.7.7") / UDP()
    p = eth() / IPv6(src=H0_IP6, dst=SID_DX4) / IPv6ExtHdrSegmentRouting(
        addresses=[SID_DX4], segleft=0) / inner
    res, pkts = traced(r, [p])
    assert len(res.tx) == 1 and res.tx[0].pkt.dst == N1
    lk = [s["lookup"] for s in pkts[0]["nodes"] if "lookup" in s]
    assert lk[-1]["skipped"] and "note" not in lk[-1] and "prefix" not in lk[-1]
    assert any(s.get("srv6", {}).get("behavior") == "End.DX4" for s in pkts[0]["nodes"])


def test_srv6_encap_names_its_policy_after_another_was_deleted():
    """The srv6-encap step names the policy by its index (the adjacency's), not by its
    place among the policies: with the first policy deleted and a new one added, a packet
    steered into the second is traced with the second's binding SID and segments."""
    from test_srv6 import BSIDS, POLICIES, SEG1, first_addr, srv6_config

    from vecroute.srv6.tables import Policy

    r = Router(srv6_config())
    sr = r.fib.srv6
    sr.del_policy(ipaddress.ip_address(BSIDS["e1"]))
    sr.add_policy(Policy(ipaddress.ip_address("2001:db8:ff:b::77"),
                         [([ipaddress.ip_address(SEG1)], 1)]))
    r.graph.swap_state(fib_state(r.fib))
    r.state = r.graph.state
    p = eth() / IPv6(src=H0_IP6, dst=first_addr(POLICIES["e2"][3])) / UDP(dport=9)
    res, pkts = traced(r, [p])
    assert len(res.tx) == 1
    step = [s["srv6"] for s in pkts[0]["nodes"] if s["node"] == "srv6-encap"]
    assert len(step) == 1 and step[0]["bsid"] == BSIDS["e2"]
    assert step[0]["segment_lists"][0]["segments"] == POLICIES["e2"][1]


@pytest.mark.parametrize("words", [
    ["port", "0000000099999"], ["proto", "00000000300"], ["port", "0" * 8 + "9" * 4000],
    [], ["and"], ["src", "ip"], ["host", "fe80::1%eth0"], ["dst", "tcp"]])
def test_filter_numbers_and_words_are_checked(words):
    with pytest.raises(TraceError):
        parse_match(words)


def test_filter_numbers_with_leading_zeros():
    assert parse_match(["port", "0080"]) == {"port": 80}


def test_a_capture_that_cannot_write_ends_with_the_reason(tmp_path):
    import os

    from vecroute.control.capture import CaptureError, CaptureSession
    from vecroute.io.capture import CAP_RX, CR_CAPLEN, CR_COLS, CR_DIR, CR_LEN

    full = os.open("/dev/full", os.O_WRONLY)
    with pytest.raises(CaptureError, match="write error"):
        CaptureSession(str(tmp_path / "x.pcapng"), full, "any", -1, "rx", 10, 2048, 1 << 20,
                       ["eth0"])
    f = os.open(tmp_path / "y.pcapng", os.O_WRONLY | os.O_CREAT, 0o600)
    s = CaptureSession(str(tmp_path / "y.pcapng"), f, "any", -1, "rx", 10, 2048, 1 << 20,
                       ["eth0"])
    rec = np.zeros(CR_COLS, np.int64)
    rec[CR_DIR], rec[CR_CAPLEN], rec[CR_LEN] = CAP_RX, 4, 4
    assert s.add([(rec, b"abcd")])
    os.dup2(os.open("/dev/full", os.O_WRONLY), s.fd)  # the disk is full from now on
    assert not s.add([(rec, b"abcd")])
    assert s.stopped_because.startswith("write error") and s.fd < 0
    assert s.written == 1
    assert not s.add([(rec, b"abcd")])  # and stays ended
