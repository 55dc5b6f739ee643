"""The firewall in a live router between Linux hosts (the kernel is the peer): ping allowed
and denied, RST for a blocked TCP port, keep-state from inside only, run-time changes.

h1 (198.51.100.10, 2001:db8:1::10) is "inside", h2 (203.0.113.10, 2001:db8:2::10) is
"outside". Runs as root in CI (`pytest -m netns`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from vecroute.io.netns import Lab
from vecroute.lab import H1_V4, H1_V6, H2_V4, H2_V6, build, start_router

pytestmark = pytest.mark.netns

FIREWALL = """
[firewall]
default = "deny"
rules = [
  "100 check-state",
  "200 allow ipv6-icmp from any to any icmp6types 133,134,135,136",
  "300 deny icmp from any to table(blocked) in",
  "400 allow icmp from any to any",
  "500 reset tcp from any to any 23",
  "600 allow tcp from 198.51.100.0/24 to any setup keep-state",
  "610 allow tcp from 2001:db8:1::/64 to any setup keep-state",
  "700 allow udp from 198.51.100.0/24 to any keep-state",
  "710 allow udp from 2001:db8:1::/64 to any keep-state",
]

[[firewall.tables]]
name = "blocked"
type = "addr"
"""


def _running_lab(tmp_path_factory, prefix: str, workers: int):
    if os.geteuid() != 0:
        pytest.fail("live tests need root (network namespaces): run them as root, as CI does")
    with Lab(prefix) as lab:
        t = build(lab, tmp_path_factory.mktemp("fwlive"), workers=workers, extra_config=FIREWALL)
        start_router(t)
        yield t
        if t.router and t.router.poll() is not None:
            print(t.log.read_text()[-3000:])


@pytest.fixture(scope="module")
def fwt(tmp_path_factory):
    yield from _running_lab(tmp_path_factory, "vf", 1)


def run_in(t, host: str, argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
    ns = t.h1 if host == "h1" else t.h2
    return subprocess.run(
        ["ip", "netns", "exec", ns, *argv], capture_output=True, text=True, timeout=timeout
    )


def ping(t, host: str, dst: str, count: int = 1, wait: int = 2) -> bool:
    fam = ["-6"] if ":" in dst else ["-4"]
    r = run_in(t, host, ["ping", *fam, "-c", str(count), "-W", str(wait), dst])
    return r.returncode == 0


def ctl(t, *words: str) -> dict:
    reply = t.ctl("fw", *words)
    assert reply.get("ok"), reply
    return reply


CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))
    print("connected")
except ConnectionRefusedError:
    print("refused")
except (TimeoutError, socket.timeout):
    print("timeout")
"""

LISTEN_TCP = """
import socket, sys
fam = socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET
s = socket.socket(fam, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(4)
print("ready", flush=True)
s.settimeout(float(sys.argv[3]))
try:
    c, _ = s.accept(); c.sendall(b"hello"); c.close(); print("accepted", flush=True)
except (TimeoutError, socket.timeout):
    print("none", flush=True)
"""

UDP_ECHO = """
import socket, sys
fam = socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM); s.bind((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
s.settimeout(float(sys.argv[3]))
try:
    d, a = s.recvfrom(100); s.sendto(b"re:" + d, a); print("got", d.decode(), flush=True)
except (TimeoutError, socket.timeout):
    print("none", flush=True)
"""

UDP_ASK = """
import socket, sys
fam = socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM); s.settimeout(float(sys.argv[3]))
s.sendto(b"ping", (sys.argv[1], int(sys.argv[2])))
try:
    print(s.recv(100).decode())
except (TimeoutError, socket.timeout):
    print("no answer")
"""


def server(t, host: str, script: str, addr: str, port: int, timeout: float):
    ns = t.h1 if host == "h1" else t.h2
    p = t.lab.popen(
        ns, [sys.executable, "-c", script, addr, str(port), str(timeout)],
        stdout=subprocess.PIPE, text=True,
    )
    assert p.stdout.readline().strip() == "ready"
    return p


def client(t, host: str, script: str, addr: str, port: int, timeout: float) -> str:
    r = run_in(t, host, [sys.executable, "-c", script, addr, str(port), str(timeout)])
    return r.stdout.strip()


def test_ping_allowed_v4_and_denied_v6(fwt):
    assert ping(fwt, "h1", H2_V4)
    assert ping(fwt, "h2", H1_V4)  # rule 400 allows ICMP both ways
    assert not ping(fwt, "h1", H2_V6)  # no rule allows ICMPv6 echo: the default denies
    counters = fwt.ctl("show", "errors")["data"]
    assert any(c["counter"] == "fw-deny" and c["count"] >= 1 for c in counters), counters


def test_table_update_takes_effect_on_the_next_packet(fwt):
    assert ping(fwt, "h1", H2_V4)
    ctl(fwt, "table", "blocked", "add", H2_V4)
    assert not ping(fwt, "h1", H2_V4)
    assert "203.0.113.10/32" in ctl(fwt, "table", "blocked", "list")["text"]
    ctl(fwt, "table", "blocked", "delete", H2_V4)
    assert ping(fwt, "h1", H2_V4)


@pytest.mark.parametrize("dst", [H2_V4, H2_V6])
def test_blocked_tcp_port_gets_a_reset(fwt, dst):
    # nobody listens on h2:23 either, but h2 never sees the SYN: the RST is vecroute's
    # (the firewall's reset counter proves it)
    before = _count(fwt, "tcp-reset-sent")
    assert client(fwt, "h1", CONNECT, dst, 23, 5) == "refused"
    assert _count(fwt, "tcp-reset-sent") == before + 1


def _count(t, name: str) -> int:
    rows = t.ctl("show", "errors", "all")["data"]
    return next(r["count"] for r in rows if r["counter"] == name)


@pytest.mark.parametrize("inside,outside", [(H1_V4, H2_V4), (H1_V6, H2_V6)])
def test_keep_state_tcp_inside_out_only(fwt, inside, outside):
    created = _fw_counter(fwt, "created")
    srv = server(fwt, "h2", LISTEN_TCP, outside, 8080, 10)
    assert client(fwt, "h1", CONNECT, outside, 8080, 5) == "connected"
    assert srv.communicate(timeout=20)[0].strip() == "accepted"
    # the outside cannot open a connection to the inside
    srv = server(fwt, "h1", LISTEN_TCP, inside, 8081, 4)
    assert client(fwt, "h2", CONNECT, inside, 8081, 3) == "timeout"
    assert srv.communicate(timeout=20)[0].strip() == "none"
    # one state for the connection (closed by now: FIN/RST states live 1 s)
    assert _fw_counter(fwt, "created") == created + 1


def _fw_counter(t, name: str) -> int:
    text = ctl(t, "counters")["text"]
    return int(next(ln.split(":")[1] for ln in text.splitlines() if ln.startswith(name + ":")))


def test_states_are_listed_while_a_flow_lives(fwt):
    srv = server(fwt, "h2", UDP_ECHO, H2_V4, 5310, 10)
    assert client(fwt, "h1", UDP_ASK, H2_V4, 5310, 5) == "re:ping"
    srv.communicate(timeout=20)
    text = ctl(fwt, "states")["text"]
    assert f"STATE udp {H1_V4}" in text and f"<-> {H2_V4} 5310" in text, text


@pytest.mark.parametrize("inside,outside", [(H1_V4, H2_V4), (H1_V6, H2_V6)])
def test_keep_state_udp_inside_out_only(fwt, inside, outside):
    srv = server(fwt, "h2", UDP_ECHO, outside, 5300, 10)
    assert client(fwt, "h1", UDP_ASK, outside, 5300, 5) == "re:ping"
    assert srv.communicate(timeout=20)[0].strip() == "got ping"
    srv = server(fwt, "h1", UDP_ECHO, inside, 5301, 4)
    assert client(fwt, "h2", UDP_ASK, inside, 5301, 3) == "no answer"
    assert srv.communicate(timeout=20)[0].strip() == "none"


def test_ctl_fw_show_counts_and_bad_rule_changes_nothing(fwt):
    assert ping(fwt, "h1", H2_V4)
    show = ctl(fwt, "show")["text"]
    line = next(ln for ln in show.splitlines() if ln.startswith("00400"))
    assert int(line.split()[1]) >= 2  # echo request and reply, in and out
    bad = fwt.ctl("fw", "add", "450", "allow", "icmp", "frm", "any")
    assert not bad["ok"] and "frm" in bad["error"]
    assert ctl(fwt, "show")["text"].count("\n") == show.count("\n")
    ctl(fwt, "add", "350", "deny", "icmp", "from", "any", "to", H2_V4)  # before 400
    assert not ping(fwt, "h1", H2_V4)
    ctl(fwt, "delete", "350")
    assert ping(fwt, "h1", H2_V4)


@pytest.fixture(scope="module")
def fwt2(tmp_path_factory):
    yield from _running_lab(tmp_path_factory, "vg", 2)


def test_two_workers_keep_state_tables_and_gathered_counters(fwt2):
    # each connection's two directions must reach the worker holding its state
    for k in range(6):
        srv = server(fwt2, "h2", LISTEN_TCP, H2_V4, 8100 + k, 10)
        assert client(fwt2, "h1", CONNECT, H2_V4, 8100 + k, 5) == "connected", k
        assert srv.communicate(timeout=20)[0].strip() == "accepted"
    show = ctl(fwt2, "show")["text"]
    line = next(ln for ln in show.splitlines() if ln.startswith("00600"))
    assert int(line.split()[1]) >= 6 * 4  # SYN, ACK ... at least, in and out, all workers
    # a table change reaches every worker: pings of several flows (ids) all stop
    assert ping(fwt2, "h1", H2_V4, count=3)
    ctl(fwt2, "table", "blocked", "add", H2_V4)
    for _ in range(4):
        assert not ping(fwt2, "h1", H2_V4)
    ctl(fwt2, "table", "blocked", "flush")
    assert ping(fwt2, "h1", H2_V4)


def test_sighup_reloads_the_rules_from_the_file(fwt):
    original = fwt.config.read_text()
    assert ping(fwt, "h1", H2_V4)
    ctl(fwt, "add", "380", "count", "ip", "from", "any", "to", "any")  # run-time change
    try:
        extra = '"390 deny icmp from any to 203.0.113.10",\n  "400 allow icmp'
        fwt.config.write_text(original.replace('"400 allow icmp', extra))
        os.kill(fwt.router.pid, signal.SIGHUP)
        deadline = time.monotonic() + 20
        while "00390" not in ctl(fwt, "show")["text"] and time.monotonic() < deadline:
            time.sleep(0.2)
        show = ctl(fwt, "show")["text"]
        assert "00390" in show and "00380" not in show  # the file, not the run-time change
        assert not ping(fwt, "h1", H2_V4)
    finally:
        fwt.config.write_text(original)
        os.kill(fwt.router.pid, signal.SIGHUP)
    deadline = time.monotonic() + 20
    while "00390" in ctl(fwt, "show")["text"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ping(fwt, "h1", H2_V4)
