"""The live router between Linux hosts in network namespaces (the kernel is the peer).

Runs as root in CI (`pytest -m netns` selects these). Each fixture builds its own
namespaces and removes them, on failure too (vecroute.io.netns.Lab).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from vecroute.io.netns import Lab
from vecroute.lab import H1_V4, H2_V4, H2_V6, RT0_V4, RT0_V6, build, start_router

pytestmark = pytest.mark.netns

MTU1 = 1400  # vecroute's MTU on the port towards h2


def _require_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("live tests need root (network namespaces): run them as root, as CI does")


@pytest.fixture(scope="module")
def topo(tmp_path_factory):
    _require_root()
    with Lab("vt") as lab:
        t = build(lab, tmp_path_factory.mktemp("live"), mtu1=MTU1)
        start_router(t)
        yield t
        if t.router and t.router.poll() is not None:
            print(t.log.read_text()[-3000:])


def ping(t, host: str, dst: str, *args: str, check: bool = False) -> subprocess.CompletedProcess:
    ns = t.h1 if host == "h1" else t.h2
    fam = ["-6"] if ":" in dst else []
    return subprocess.run(
        ["ip", "netns", "exec", ns, "ping", *fam, *args, dst],
        capture_output=True,
        text=True,
        timeout=60,
        check=check,
    )


def test_first_ping_through_cold_router_is_not_lost(topo):
    # the router starts with empty neighbour tables: the first echo request waits in the
    # pending queue while vecroute resolves h2, and must still arrive
    r4 = ping(topo, "h1", H2_V4, "-c", "1", "-W", "3")
    assert r4.returncode == 0, r4.stdout + r4.stderr
    r6 = ping(topo, "h1", H2_V6, "-c", "1", "-W", "3")
    assert r6.returncode == 0, r6.stdout + r6.stderr
    neigh = topo.ctl("show", "neighbors")["data"]
    assert {n["ip"] for n in neigh} >= {H1_V4, H2_V4, H2_V6}


def test_ping_router_addresses(topo):
    assert ping(topo, "h1", RT0_V4, "-c", "2", "-i", "0.2").returncode == 0
    assert ping(topo, "h1", RT0_V6, "-c", "2", "-i", "0.2").returncode == 0


def test_fragmented_ping_to_router_is_reassembled(topo):
    """RFC 1812 4.3.3.6: h1's kernel fragments a 1828-byte echo request for the router;
    vecroute reassembles it, answers, and fragments the reply, which h1 reassembles."""
    def reass_ok() -> int:
        rows = topo.ctl("show", "errors")["data"]
        return sum(r["count"] for r in rows if r["counter"] == "reass-ok")

    before = reass_ok()
    r = ping(topo, "h1", RT0_V4, "-c", "2", "-i", "0.2", "-s", "1800", "-W", "3")
    assert r.returncode == 0, r.stdout + r.stderr
    assert reass_ok() - before == 2


def test_ttl_expired_comes_from_router_address(topo):
    r = ping(topo, "h1", H2_V4, "-c", "1", "-t", "1", "-W", "2")
    assert f"From {RT0_V4}" in r.stdout and "Time to live exceeded" in r.stdout, r.stdout
    r6 = ping(topo, "h1", H2_V6, "-c", "1", "-t", "1", "-W", "2")
    assert f"From {RT0_V6}" in r6.stdout and "Time exceeded" in r6.stdout, r6.stdout
    tr = topo.host("h1", ["traceroute", "-n", "-q", "1", "-w", "2", H2_V4], check=False)
    assert re.search(rf"^\s*1\s+{re.escape(RT0_V4)}\s", tr, re.M), tr
    assert re.search(rf"^\s*2\s+{re.escape(H2_V4)}\s", tr, re.M), tr


def test_no_route_gives_unreachable(topo):
    r = ping(topo, "h1", "192.0.2.99", "-c", "1", "-W", "2")
    assert f"From {RT0_V4}" in r.stdout and "Destination Net Unreachable" in r.stdout, r.stdout
    r6 = ping(topo, "h1", "2001:db8:ffff::1", "-c", "1", "-W", "2")
    assert f"From {RT0_V6}" in r6.stdout and "no route" in r6.stdout.lower(), r6.stdout


def test_unresolvable_neighbor_gives_host_unreachable(topo):
    # RFC 4861 7.2.2: nobody on h2's subnet answers ARP/NS for .99; after 3 requests the
    # waiting echo request is answered with host / address unreachable from the router
    r = ping(topo, "h1", "203.0.113.99", "-c", "1", "-W", "8")
    assert f"From {RT0_V4}" in r.stdout and "Destination Host Unreachable" in r.stdout, r.stdout
    r6 = ping(topo, "h1", "2001:db8:2::99", "-c", "1", "-W", "8")
    assert f"From {RT0_V6}" in r6.stdout and "Address unreachable" in r6.stdout, r6.stdout
    stats = {x["stat"]: x["count"] for x in topo.ctl("show", "neighbors", "stats")["data"]}
    assert stats["resolution_failed"] >= 2, stats
    errors = {x["counter"]: x["count"] for x in topo.ctl("show", "errors")["data"]}
    assert errors["neighbor-failed"] >= 2, errors


def test_df_too_big_gets_frag_needed_and_packet_too_big(topo):
    r = ping(topo, "h1", H2_V4, "-c", "1", "-W", "2", "-M", "do", "-s", "1450")
    assert f"mtu = {MTU1}" in r.stdout or f"mtu={MTU1}" in r.stdout, r.stdout + r.stderr
    r6 = ping(topo, "h1", H2_V6, "-c", "1", "-W", "2", "-M", "do", "-s", "1450")
    assert f"mtu={MTU1}" in (r6.stdout + r6.stderr).replace(" ", ""), r6.stdout + r6.stderr


RECV = """
import hashlib, socket, sys
fam = socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET
s = socket.socket(fam, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1)
print('ready', flush=True)
c, _ = s.accept(); h = hashlib.sha256(); n = 0
while True:
    d = c.recv(1 << 16)
    if not d: break
    h.update(d); n += len(d)
print(n, h.hexdigest(), flush=True)
"""

SEND = """
import hashlib, os, socket, sys
fam = socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET
data = os.urandom(int(sys.argv[3]))
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
s.sendall(data); s.close()
print(len(data), hashlib.sha256(data).hexdigest(), flush=True)
"""


def _transfer(t, dst: str, port: int, size: int) -> tuple[str, str]:
    rx = t.lab.popen(
        t.h2, [sys.executable, "-c", RECV, dst, str(port)], stdout=subprocess.PIPE, text=True
    )
    assert rx.stdout.readline().strip() == "ready"
    sent = t.host("h1", [sys.executable, "-c", SEND, dst, str(port), str(size)], timeout=60)
    got, _ = rx.communicate(timeout=60)
    return sent.strip(), got.strip()


@pytest.mark.parametrize("dst,port", [(H2_V4, 5001), (H2_V6, 5002)])
def test_tcp_transfer_through_smaller_mtu_is_intact(topo, dst, port):
    # TCP sets DF: the router's frag-needed / packet-too-big drive Linux path MTU discovery
    sent, got = _transfer(topo, dst, port, 8 << 20)
    assert sent == got


def test_iperf3_tcp_five_seconds(topo):
    srv = topo.lab.popen(
        topo.h2,
        ["iperf3", "-s", "-1", "-p", "5201"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)
    out = topo.host("h1", ["iperf3", "-c", H2_V4, "-p", "5201", "-t", "5", "-J"], timeout=60)
    srv.wait(timeout=10)
    import json

    res = json.loads(out)
    assert res["end"]["sum_received"]["bytes"] > 10 << 20
    assert "error" not in res


def test_ctl_route_changes_forwarding_while_pinging(topo):
    topo.lab.run(topo.h2, ["ip", "addr", "add", "192.0.2.10/32", "dev", "lo"])
    assert ping(topo, "h1", "192.0.2.10", "-c", "1", "-W", "2").returncode != 0
    rep = topo.ctl("route", "add", "192.0.2.0/24", "via", H2_V4)
    assert rep["ok"], rep
    assert ping(topo, "h1", "192.0.2.10", "-c", "2", "-i", "0.2", "-W", "2").returncode == 0
    assert topo.ctl("route", "del", "192.0.2.0/24")["ok"]
    r = ping(topo, "h1", "192.0.2.10", "-c", "1", "-W", "2")
    assert "Destination Net Unreachable" in r.stdout
    bad = topo.ctl("route", "add", "192.0.2.0/24", "via")
    assert not bad["ok"] and "via" in bad["error"]
    assert ping(topo, "h1", H2_V4, "-c", "1", "-W", "2").returncode == 0


def test_sighup_reload_loses_no_ping(topo):
    p = subprocess.Popen(
        ["ip", "netns", "exec", topo.h1, "ping", "-c", "60", "-i", "0.05", "-W", "1", H2_V4],
        stdout=subprocess.PIPE,
        text=True,
    )
    for _ in range(3):
        time.sleep(0.7)
        os.kill(topo.router.pid, signal.SIGHUP)
    out, _ = p.communicate(timeout=30)
    assert " 0% packet loss" in out, out
    assert "reloaded" in topo.log.read_text()


def test_neighbor_mac_change_is_followed(topo):
    ns, ifn = topo.h2, topo.h2_if
    topo.lab.run(ns, ["sysctl", "-qw", f"net.ipv4.conf.{ifn}.arp_notify=1"])
    topo.lab.run(ns, ["sysctl", "-qw", f"net.ipv6.conf.{ifn}.ndisc_notify=1"])
    assert ping(topo, "h1", H2_V4, "-c", "1", "-W", "2").returncode == 0
    assert ping(topo, "h1", H2_V6, "-c", "1", "-W", "2").returncode == 0  # both learnt
    new = "02:00:00:00:5e:77"
    topo.lab.run(ns, ["ip", "link", "set", ifn, "address", new])
    deadline = time.monotonic() + 10  # gratuitous ARP / unsolicited NA from the kernel
    while True:
        neigh = {(n["ip"]): n["mac"] for n in topo.ctl("show", "neighbors")["data"]}
        if neigh.get(H2_V4) == new and neigh.get(H2_V6) == new or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert neigh.get(H2_V4) == new and neigh.get(H2_V6) == new, neigh
    assert ping(topo, "h1", H2_V4, "-c", "2", "-i", "0.2", "-W", "2").returncode == 0
    assert ping(topo, "h1", H2_V6, "-c", "2", "-i", "0.2", "-W", "2").returncode == 0


def test_idle_router_uses_little_cpu(topo):
    def cpu() -> float:
        f = open(f"/proc/{topo.router.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

    c0, t0 = cpu(), time.monotonic()
    time.sleep(3)
    share = (cpu() - c0) / (time.monotonic() - t0)
    assert share < 0.02, f"idle router used {share:.1%} of a CPU"


def test_counters_and_json(topo):
    # (self-contained: under xdist this module's tests may run on a topology of their own)
    ping(topo, "h1", H2_V4, "-c", "1", "-W", "3", check=True)  # forwarded
    ping(topo, "h1", H2_V4, "-c", "1", "-t", "1", "-W", "1")  # a ttl-expired, answered
    rep = topo.ctl("show", "errors")
    names = {r["counter"] for r in rep["data"]}
    assert {"fib-lookups", "ip4-forwarded", "icmp-error-sent", "ttl-expired"} <= names
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "vecroute.cli",
            "ctl",
            "--socket",
            topo.socket,
            "--json",
            "show",
            "interfaces",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    import json

    assert [r["name"] for r in json.loads(out)] == topo.ports


def test_two_workers_share_the_ports(tmp_path):
    _require_root()
    with Lab("vw") as lab:
        t = build(lab, tmp_path, workers=2)
        start_router(t)
        assert ping(t, "h1", H2_V4, "-c", "1", "-W", "3").returncode == 0
        flows = [
            t.lab.popen(
                t.h1,
                ["ping", "-c", "20", "-i", "0.05", "-W", "1", H2_V4],
                stdout=subprocess.DEVNULL,
            )
            for _ in range(3)
        ]
        for f in flows:
            assert f.wait(timeout=30) == 0
        ifs = t.ctl("show", "interfaces")["data"]
        assert ifs[0]["rx_packets"] >= 61 and ifs[1]["tx_packets"] >= 61, ifs
        assert ping(t, "h1", H2_V6, "-c", "1", "-W", "3").returncode == 0
        # the parent holds the neighbour table and answers a failed resolution itself
        r = ping(t, "h1", "203.0.113.99", "-c", "1", "-W", "8")
        assert f"From {RT0_V4}" in r.stdout and "Host Unreachable" in r.stdout, r.stdout


def test_run_errors_are_one_line(tmp_path):
    _require_root()
    cfg = tmp_path / "r.toml"
    cfg.write_text('[[interfaces]]\nname = "nosuchif0"\naddresses = ["192.0.2.1/24"]\n')
    r = subprocess.run(
        [sys.executable, "-m", "vecroute.cli", "run", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "nosuchif0" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            sys.executable,
            "-m",
            "vecroute.cli",
            "run",
            str(cfg),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "root" in r.stderr and "Traceback" not in r.stderr


def test_trace_and_pcap_with_one_worker(topo):
    """ctl trace and ctl pcap on the one-worker router (tests/test_live_tools.py runs
    them against two workers, in depth)."""
    ping(topo, "h1", H2_V4, "-c", "1", "-W", "3", check=True)  # h2 resolved: no punt
    rep = topo.ctl("trace", "add", "1", "match", "icmp", "and", "dst", "host", H2_V4)
    assert rep["ok"], rep
    name = f"live-{os.getpid()}.pcapng"
    rep = topo.ctl("pcap", "start", topo.ports[1], "tx", name, "count", "50")
    assert rep["ok"], rep
    path = rep["data"]["file"]
    try:
        ping(topo, "h1", H2_V4, "-c", "2", "-i", "0.1", "-W", "3", check=True)
        deadline = time.monotonic() + 10
        while not (pk := topo.ctl("show", "trace")["data"]["packets"]):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert len(pk) == 1 and pk[0]["fate"] == [f"tx {topo.ports[1]}"]
        assert [s["node"] for s in pk[0]["nodes"]][2] == "ip4-lookup"
        row = topo.ctl("pcap", "stop")["data"]
        from scapy.layers.inet import ICMP, IP
        from scapy.utils import rdpcap

        echo = [p for p in rdpcap(path) if ICMP in p and p[ICMP].type == 8]
        assert len(echo) == 2 and all(p[IP].ttl == 63 for p in echo), row
    finally:
        topo.ctl("pcap", "stop")
        topo.ctl("trace", "clear")
        if os.path.exists(path):
            os.unlink(path)
