"""ctl trace and ctl pcap on a live router (two workers), the kernel hosts as the traffic.

The oracles: what the hosts sent (ping's own packets, a scapy frame sent from h1), scapy's
reading of the pcapng files vecroute writes, the FIB's answer through ``ctl show routes``.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import time

import pytest
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import rdpcap

from vecroute.control.capture import CaptureError, open_capture_file
from vecroute.io.netns import Lab
from vecroute.lab import H1_V4, H2_V4, build, start_router

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def topo(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.fail("live tests need root (network namespaces): run them as root, as CI does")
    work = tmp_path_factory.mktemp("tools")
    cap = work / "captures"
    with Lab("vo") as lab:
        t = build(lab, work, workers=2,
                  extra_config=f'[capture]\ndirectory = "{cap}"\nmax_bytes = 200000\n')
        start_router(t)
        t.capdir = cap
        ping(t, H2_V4, "-c", "1", "-W", "3")  # neighbours resolved
        yield t
        if t.router and t.router.poll() is not None:
            print(t.log.read_text()[-3000:])


def ping(t, dst: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", t.h1, "ping", *args, dst],
                          capture_output=True, text=True, timeout=60)


def ok(t, *words: str) -> dict:
    r = t.ctl(*words)
    assert r["ok"], r
    return r


def wait_for(pred, timeout: float = 10.0):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() > end:
            return v
        time.sleep(0.05)


def test_trace_shows_each_node_and_the_fibs_answer(topo):
    ok(topo, "trace", "add", "3", "match", "icmp", "and", "dst", "host", H2_V4)
    r = ping(topo, H2_V4, "-c", "3", "-i", "0.05", "-W", "2")
    assert r.returncode == 0, r.stdout
    got = wait_for(lambda: len(ok(topo, "show", "trace")["data"]["packets"]) >= 3 and
                   ok(topo, "show", "trace")["data"])
    assert got, ok(topo, "show", "trace")["text"]
    pkts = got["packets"]
    assert len(pkts) == 3 and got["waiting_for"] >= 3  # every worker waits for its own 3
    route = ok(topo, "show", "routes", H2_V4)["data"]
    want_prefix = max((x for x in route if ipaddress.ip_address(H2_V4) in
                       ipaddress.ip_network(x["prefix"])),
                      key=lambda x: ipaddress.ip_network(x["prefix"]).prefixlen)["prefix"]
    for t in pkts:
        ip = next(la for la in t["headers"] if la["layer"] == "ip4")
        icmp = next(la for la in t["headers"] if la["layer"] == "icmp")
        assert (ip["src"], ip["dst"], icmp["type"]) == (H1_V4, H2_V4, 8)
        assert t["rx"] == topo.ports[0]
        nodes = [s["node"] for s in t["nodes"]]
        assert nodes[:4] == ["ethernet-input", "ip4-input", "ip4-lookup", "ip4-rewrite"]
        lk = t["nodes"][2]["lookup"]
        assert lk["prefix"] == want_prefix
        rw = t["nodes"][3]["rewrite"]
        assert rw["tx"] == topo.ports[1] and rw["ttl"] == ip["ttl"] - 1
        assert t["fate"] == [f"tx {topo.ports[1]}"]
    text = ok(topo, "show", "trace")["text"]
    assert "ip4-lookup" in text and want_prefix in text
    ok(topo, "trace", "clear")
    assert ok(topo, "show", "trace")["data"]["packets"] == []
    for bad in (["trace", "add", "0"], ["trace", "add", "5", "from", "nope"],
                ["trace", "add", "5", "match", "port", "x"], ["trace", "add", "99999"],
                ["trace", "bogus"]):
        r = topo.ctl(*bad)
        assert not r["ok"] and "\n" not in r["error"], r


def test_pcap_rx_and_tx_are_what_the_hosts_sent_and_got(topo):
    ok(topo, "pcap", "start", topo.ports[0], "rx", "rx.pcapng", "count", "100")
    assert ping(topo, H2_V4, "-c", "6", "-i", "0.05", "-W", "2").returncode == 0
    row = ok(topo, "pcap", "stop")["data"]
    f = topo.capdir / "rx.pcapng"
    assert f.stat().st_mode & 0o777 == 0o600
    pk = rdpcap(str(f))
    assert len(pk) == row["written"] and row["stopped"] == "stopped"
    echo = [p for p in pk if IP in p and ICMP in p and p[ICMP].type == 8]
    assert len(echo) == 6  # what h1 sent, as it arrived (h1's MLD reports may be there too)
    assert all(p[IP].src == H1_V4 and p[IP].dst == H2_V4 and p[IP].ttl == 64 for p in echo)
    assert all(p.sniffed_on == topo.ports[0] and p.direction == 1 for p in pk)
    # tx: rewritten, TTL - 1, cut at snaplen with the wire length kept; count ends it
    ok(topo, "pcap", "start", topo.ports[1], "tx", "tx.pcapng", "count", "3", "snaplen", "60")
    assert ping(topo, H2_V4, "-c", "5", "-i", "0.05", "-s", "200", "-W", "2").returncode == 0
    row = wait_for(lambda: (r := ok(topo, "show", "pcap")["data"]) and not r["running"] and r)
    assert row and row["written"] == 3 and row["stopped"] == "count", row
    pk = rdpcap(str(topo.capdir / "tx.pcapng"))
    assert len(pk) == 3 and all(p.direction == 2 for p in pk)
    mac = topo.lab.run(topo.rt, ["cat", f"/sys/class/net/{topo.ports[1]}/address"]).strip()
    fwd = [p for p in pk if IP in p and p[IP].dst == H2_V4]
    assert fwd
    for p in fwd:
        assert p[IP].ttl == 63 and p[Ether].src == mac
        assert len(bytes(p)) == 60 and p.wirelen == 14 + 20 + 8 + 200


def test_pcap_drop_records_the_reason(topo):
    ok(topo, "pcap", "start", topo.ports[0], "drop", "drop.pcapng", "count", "50")
    mac = topo.lab.run(topo.rt, ["cat", f"/sys/class/net/{topo.ports[0]}/address"]).strip()
    frame = Ether(dst=mac) / IP(src=H1_V4, dst=H2_V4, chksum=0x1234) / UDP(dport=9)
    code = ("from scapy.all import sendp, Ether; import sys; "
            f"sendp(Ether(bytes.fromhex('{bytes(frame).hex()}')), iface='{topo.h1_if}', "
            "count=2, verbose=False)")
    topo.lab.run(topo.h1, [sys.executable, "-c", code])
    # what else h1 sends and vecroute drops (its MLD reports, say) is captured too
    ours = lambda: [p for p in rdpcap(str(topo.capdir / "drop.pcapng"))  # noqa: E731
                    if bytes(p) == bytes(frame)]
    assert wait_for(lambda: len(ours()) == 2), ok(topo, "show", "pcap")
    row = ok(topo, "pcap", "stop")["data"]
    pk = rdpcap(str(topo.capdir / "drop.pcapng"))
    assert len(pk) == row["written"] and all(p.sniffed_on == topo.ports[0] for p in pk)
    assert [p.comment for p in ours()] == [b"drop: ip4-bad-checksum: bad ip4 header checksum"] * 2
    # tcpdump reads it too (a second, independent pcapng reader)
    out = subprocess.run(["tcpdump", "-nn", "-r", str(topo.capdir / "drop.pcapng")],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("203.0.113.10.9:") == 2
    assert all(p.direction == 1 for p in pk)  # inbound


def test_pcap_requests_are_checked(topo):
    # a file of its own that exists (under pytest -n, this module's tests share a worker's
    # router only: another test's capture may not have been written here)
    topo.capdir.mkdir(parents=True, exist_ok=True)
    kept = topo.capdir / "kept.pcapng"
    kept.write_bytes(b"not replaced")
    for bad in (["pcap", "start", "nope0", "rx", "x.pcapng"],
                ["pcap", "start", "any", "rx", "../escape"],
                ["pcap", "start", "any", "rx", "a/b"],
                ["pcap", "start", "any", "rx", "kept.pcapng"],  # exists: never replaced
                ["pcap", "start", "any", "rx", "y.pcapng", "count", "0"],
                ["pcap", "start", "any", "rx", "y.pcapng", "snaplen", "99999"],
                ["pcap", "stop"]):
        r = topo.ctl(*bad)
        assert not r["ok"] and "\n" not in r["error"], (bad, r)
    assert not (topo.capdir.parent / "escape").exists()
    assert kept.read_bytes() == b"not replaced"
    # a second capture while one runs is refused; the size limit ends a capture
    ok(topo, "pcap", "start", "any", "rx", "big.pcapng", "count", "100000")
    r = topo.ctl("pcap", "start", "any", "rx", "z.pcapng")
    assert not r["ok"] and "running" in r["error"]
    subprocess.run(["ip", "netns", "exec", topo.h1, "ping", "-f", "-c", "400", "-s", "1000",
                    H2_V4], capture_output=True, timeout=60)
    row = wait_for(lambda: (r := ok(topo, "show", "pcap")["data"]) and not r["running"] and r)
    if row["running"] if row else True:
        row = ok(topo, "pcap", "stop")["data"]
    assert row["bytes"] <= 200000 and row["stopped"] == "max_bytes", row
    assert (topo.capdir / "big.pcapng").stat().st_size == row["bytes"]
    assert len(rdpcap(str(topo.capdir / "big.pcapng"))) == row["written"]


def test_capture_file_safety(tmp_path):
    d = tmp_path / "c"
    fd = open_capture_file(str(d), "a.pcapng")
    os.close(fd)
    assert (d / "a.pcapng").stat().st_mode & 0o777 == 0o600
    assert d.stat().st_mode & 0o777 == 0o700
    (d / "link").symlink_to(tmp_path / "target")
    for name in ("a.pcapng", "link", "..", ".", "x/y", "", "a" * 200):
        with pytest.raises(CaptureError):
            open_capture_file(str(d), name)
    assert not (tmp_path / "target").exists()
    (tmp_path / "dirlink").symlink_to(d)
    with pytest.raises(CaptureError):
        open_capture_file(str(tmp_path / "dirlink"), "b.pcapng")
    os.chmod(d, 0o777)
    with pytest.raises(CaptureError):
        open_capture_file(str(d), "c.pcapng")
