"""linux-cp mirrors: what vecroute does not answer reaches Linux on the port's TAP, and what
Linux sends there leaves by the port. The kernel is both the peer (h1) and the control
plane on the mirror; its sockets are the oracle.

The lab's router gets a mirror on its first port (``mirror0``, in the router namespace)
and none on the second, which keeps today's behaviour (a RST, a port unreachable).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from vecroute.config_types import ConfigError
from vecroute.control.config import parse_config
from vecroute.io.netns import Lab
from vecroute.lab import H1_V4, H1_V6, RT0_V4, RT0_V6, RT1_V4, build, start_router

pytestmark = pytest.mark.netns

LCP = '[linux_cp]\n'


@pytest.fixture(scope="module")
def topo(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.fail("live tests need root (network namespaces): run them as root, as CI does")
    with Lab("vl") as lab:
        t = build(lab, tmp_path_factory.mktemp("lcp"), extra_config=LCP)
        text = t.config.read_text()
        # the first [[interfaces]] gets the mirror
        head, sep, rest = text.partition('name = "' + t.ports[0] + '"')
        t.config.write_text(head + sep + '\nhost_if = "mirror0"' + rest)
        start_router(t)
        yield t
        if t.router and t.router.poll() is not None:
            print(t.log.read_text()[-3000:])


def in_ns(t, ns: str, code: str, timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=timeout)


def server(t, family: str, addr: str, port: int) -> subprocess.Popen:
    """A TCP echo server on the router's Linux side (one connection)."""
    code = (f"import socket; s = socket.socket(socket.{family}); "
            "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
            f"s.bind(({addr!r}, {port})); s.listen(1); print('ready', flush=True); "
            "c, a = s.accept(); c.sendall(c.recv(100).upper() + str(a[0]).encode()); c.close()")
    p = t.lab.popen(t.rt, [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def client(t, family: str, addr: str, port: int) -> str:
    code = (f"import socket; s = socket.create_connection(({addr!r}, {port}), timeout=5); "
            "s.sendall(b'hello'); print(s.recv(200).decode())")
    r = in_ns(t, t.h1, code)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@pytest.mark.parametrize("family,addr,port", [("AF_INET", RT0_V4, 7001),
                                              ("AF_INET6", RT0_V6, 7002)])
def test_tcp_to_the_router_is_served_by_linux(topo, family, addr, port):
    srv = server(topo, family, addr, port)
    try:
        got = client(topo, family, addr, port)
    finally:
        srv.wait(timeout=10)
    assert got == "HELLO" + (H1_V4 if family == "AF_INET" else H1_V6)
    rows = topo.ctl("show", "linux-cp")["data"]["pairs"]
    assert rows[0]["mirror"] == "mirror0" and rows[0]["punted"] > 0 and rows[0]["injected"] > 0
    # Linux resolved h1 itself (its ARP / ND went out the port, the answers came back)
    neigh = topo.lab.run(topo.rt, ["ip", "neigh", "show", "dev", "mirror0"])
    assert (H1_V4 if family == "AF_INET" else H1_V6) in neigh


def test_a_bulk_tcp_transfer_to_linux_is_fast_and_whole(topo):
    """A fast sender's segments arrive as GRO super-packets (a BGP peer sending a full
    table): they are cut for the mirror, nothing is lost as too long."""
    before = _counter(topo, "punt-malformed")
    code = ("import socket, hashlib; s = socket.socket(); "
            "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
            f"s.bind(({RT0_V4!r}, 7010)); s.listen(1); print('ready', flush=True); "
            "c, _ = s.accept(); h = hashlib.sha256(); n = 0\n"
            "while True:\n d = c.recv(1 << 16)\n if not d: break\n h.update(d); n += len(d)\n"
            "print(n, h.hexdigest())")
    srv = topo.lab.popen(topo.rt, [sys.executable, "-c", code], stdout=subprocess.PIPE,
                         text=True)
    assert srv.stdout.readline().strip() == "ready"
    send = ("import socket, hashlib, time; d = bytes(range(256)) * 32768; "
            f"s = socket.create_connection(({RT0_V4!r}, 7010), timeout=10); t = time.time();"
            " s.sendall(d); s.close(); print(time.time() - t, hashlib.sha256(d).hexdigest())")
    r = in_ns(topo, topo.h1, send, timeout=60)
    assert r.returncode == 0, r.stderr
    took, digest = r.stdout.split()
    out, _ = srv.communicate(timeout=30)
    assert out.split() == [str(256 * 32768), digest]
    assert float(took) < 5, took  # 8 MiB; was a crawl when super-packets were dropped
    assert _counter(topo, "punt-malformed") == before


def test_echo_is_still_answered_by_vecroute_alone(topo):
    before = _counter(topo, "echo-reply-sent")
    r = subprocess.run(["ip", "netns", "exec", topo.h1, "ping", "-c", "3", "-i", "0.1", "-W",
                        "2", RT0_V4], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "DUP" not in r.stdout, r.stdout
    assert _counter(topo, "echo-reply-sent") - before == 3


def test_link_scope_multicast_reaches_linux(topo):
    """A UDP datagram to 224.0.0.9 (RIP's group; OSPF's 224.0.0.5 goes the same way)."""
    code = ("import socket, struct; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
            "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('', 5520)); "
            "s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, "
            f"struct.pack('4s4s', socket.inet_aton('224.0.0.9'), socket.inet_aton('{RT0_V4}')));"
            " s.settimeout(8); print('ready', flush=True); print(s.recvfrom(100)[0].decode())")
    p = topo.lab.popen(topo.rt, [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    send = ("import socket, time; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
            "s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, "
            f"socket.inet_aton('{H1_V4}'));"
            "[s.sendto(b'rip', ('224.0.0.9', 5520)) or time.sleep(0.2) for _ in range(5)]")
    assert in_ns(topo, topo.h1, send).returncode == 0
    out, _ = p.communicate(timeout=15)
    assert out.strip() == "rip"


def test_a_port_without_mirror_keeps_answering_itself(topo):
    """Port 1 has no host_if: TCP arriving there gets vecroute's RST, as before (what a
    port hands to Linux depends on the port a packet arrives on)."""
    before = _counter(topo, "tcp-port-closed")
    code = (f"import socket\ntry:\n socket.create_connection(({RT1_V4!r}, 7003), timeout=5)\n"
            "except ConnectionRefusedError: print('refused')")
    r = in_ns(topo, topo.h2, code)
    assert r.stdout.strip() == "refused", r.stdout + r.stderr
    assert _counter(topo, "tcp-port-closed") > before


def test_kernel_routes_on_a_mirror_are_forwarded_by_vecroute(topo):
    """A route Linux has through the mirror (as a routing daemon would install it) is in
    vecroute's FIB within a second and carries traffic; deleting it removes it."""
    topo.lab.run(topo.h1, ["ip", "addr", "add", "10.99.0.1/32", "dev", "lo"])
    topo.lab.run(topo.rt, ["ip", "route", "add", "10.99.0.0/24", "via", H1_V4, "dev",
                           "mirror0"])

    def mirrored(present: bool) -> bool:
        rows = topo.ctl("show", "routes", "10.99.0.0/24")["data"]
        return any(r["prefix"] == "10.99.0.0/24" for r in rows) == present

    assert _wait(lambda: mirrored(True), 1.0), topo.ctl("show", "linux-cp")
    row = next(r for r in topo.ctl("show", "routes", "10.99.0.0/24")["data"]
               if r["prefix"] == "10.99.0.0/24")
    assert H1_V4 in row["paths"] and topo.ports[0] in row["paths"], row
    r = subprocess.run(["ip", "netns", "exec", topo.h2, "ping", "-c", "2", "-i", "0.1", "-W",
                        "2", "10.99.0.1"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout
    sync = topo.ctl("show", "linux-cp")["data"]["sync"]
    assert sync["state"] == "synced" and sync["resyncs"] >= 0
    topo.lab.run(topo.rt, ["ip", "route", "del", "10.99.0.0/24"])
    assert _wait(lambda: mirrored(False), 1.0)


def test_config_errors(tmp_path):
    base = {"interfaces": [{"name": "eth0", "addresses": ["192.0.2.1/24"]}]}
    with pytest.raises(ConfigError, match="needs a \\[linux_cp\\]"):
        parse_config({"interfaces": [{"name": "eth0", "host_if": "m0"}]})
    with pytest.raises(ConfigError, match="host_if"):
        parse_config({"interfaces": [{"name": "eth0", "host_if": "eth0"}], "linux_cp": {}})
    with pytest.raises(ConfigError, match="host_if"):
        parse_config({"interfaces": [{"name": "eth0", "host_if": "a/b"}], "linux_cp": {}})
    with pytest.raises(ConfigError, match="needs at least one"):
        parse_config({**base, "linux_cp": {}})
    with pytest.raises(ConfigError, match="netns"):
        parse_config({"interfaces": [{"name": "eth0", "host_if": "m0"}],
                      "linux_cp": {"netns": "../x"}})
    cfg = parse_config({"interfaces": [{"name": "eth0", "host_if": "m0"}],
                        "linux_cp": {"netns": "cp", "punt_rate": 5}})
    assert cfg.linux_cp.netns == "cp" and cfg.interfaces[0].host_if == "m0"


def _wait(pred, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def _counter(t, name: str) -> int:
    rows = t.ctl("show", "errors")["data"]
    return sum(r["count"] for r in rows if r["counter"] == name)


def test_mtu_too_big_for_a_mirror():
    with pytest.raises(ConfigError, match="2018"):
        parse_config({"interfaces": [{"name": "eth0", "host_if": "m0", "mtu": 9000}],
                      "linux_cp": {}})


def test_a_mirror_deleted_under_the_router_is_given_up(topo):
    """Last in this file: it breaks the topology's mirror. The router must not spin on
    the dead descriptor (it did: a core and 8 MB of log per second) and goes on
    forwarding."""
    from vecroute.lab import H2_V4

    topo.lab.run(topo.rt, ["ip", "link", "del", "mirror0"])
    assert _wait(lambda: topo.ctl("show", "linux-cp")["data"]["pairs"][0]["state"] != "up",
                 5.0)

    def cpu() -> float:
        f = open(f"/proc/{topo.router.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

    c0 = cpu()
    time.sleep(1.0)
    assert cpu() - c0 < 0.3
    r = subprocess.run(["ip", "netns", "exec", topo.h1, "ping", "-c", "2", "-i", "0.1", "-W",
                        "2", H2_V4], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout


# --- fw-out sees what Linux sends --------------------------------------------------------

FW_OUT_CONFIG = LCP + '''
[firewall]
default = "allow"
rules = [
  "100 deny tcp from any to any 7101 out",
  "200 deny udp from any to any 7102 out xmit {p0}",
  "300 reset tcp from any to any 7103 out",
]
'''


@pytest.fixture(scope="module")
def fw_topo(tmp_path_factory):
    """The lab with mirrors on both ports and an output firewall."""
    if os.geteuid() != 0:
        pytest.fail("live tests need root (network namespaces): run them as root, as CI does")
    with Lab("vf") as lab:
        t = build(lab, tmp_path_factory.mktemp("lcpfw"), host_ifs=("fwm0", "fwm1"))
        t.config.write_text(t.config.read_text() + FW_OUT_CONFIG.format(p0=t.ports[0]))
        start_router(t)
        yield t
        if t.router and t.router.poll() is not None:
            print(t.log.read_text()[-3000:])


def _rule_packets(t) -> dict[int, int]:
    text = t.ctl("fw", "show")["text"]
    out = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 2 and f[0].isdigit() and f[1].isdigit():
            out[int(f[0])] = int(f[1])
    return out


def _udp_listener(t, port: int) -> subprocess.Popen:
    code = ("import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
            f"s.bind(('0.0.0.0', {port})); s.settimeout(3); print('ready', flush=True)\n"
            "try:\n    print(s.recv(100).decode(), flush=True)\nexcept OSError:\n"
            "    print('nothing', flush=True)")
    p = t.lab.popen(t.h1, [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def test_frames_from_linux_pass_the_output_firewall(fw_topo):
    """Linux's own traffic on a mirror leaves through fw-out: a denied TCP port and a denied
    UDP port on port 0 never reach h1 (the rules count them), a `reset` rule drops (it would
    answer the router itself), other ports and ICMP pass, and ARP is not filtered."""
    t = fw_topo
    before = _rule_packets(t)
    # allowed: ping from the router's Linux side (ARP on the mirror first, not filtered)
    r = subprocess.run(["ip", "netns", "exec", t.rt, "ping", "-c", "2", "-i", "0.2", "-W", "2",
                        H1_V4], capture_output=True, text=True, timeout=30)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    # denied UDP on port 0 (rule 200) and allowed UDP to the next port
    for port, expect in ((7102, "nothing"), (7104, "hello")):
        p = _udp_listener(t, port)
        send = ("import socket, time; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                f"for _ in range(3):\n    s.sendto(b'hello', ({H1_V4!r}, {port})); "
                "time.sleep(0.1)")
        assert in_ns(t, t.rt, send).returncode == 0
        out, _ = p.communicate(timeout=10)
        assert out.strip() == expect, (port, out)
    # denied TCP (rule 100: its SYNs never leave) and reset (rule 300: dropped too)
    for port in (7101, 7103):
        code = ("import socket\ntry:\n"
                f"    socket.create_connection(({H1_V4!r}, {port}), timeout=1.5)\n"
                "    print('connected')\nexcept OSError as e:\n    print(type(e).__name__)")
        r = in_ns(t, t.rt, code)
        assert r.stdout.strip() in ("timeout", "TimeoutError"), (port, r.stdout, r.stderr)
    after = _rule_packets(t)
    assert after[200] - before.get(200, 0) == 3, (before, after)
    assert after[100] - before.get(100, 0) >= 1 and after[300] - before.get(300, 0) >= 1
    errs = {x["counter"]: x["count"] for x in t.ctl("show", "errors")["data"]}
    assert errs.get("fw-deny", 0) >= 5, errs
    assert errs.get("fw-reset", 0) == 0 and errs.get("tcp-reset-sent", 0) == 0, errs
