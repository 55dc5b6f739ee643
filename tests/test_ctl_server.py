"""The asyncio control socket: limits, slow clients, streamed replies (no namespaces).

The server runs on an asyncio loop in a background thread, over a small router object
with a real Fib; the clients are plain sockets in the test's thread. Big tables are Fibs
whose route dict is filled directly with ``Route`` objects (what ``Fib.add_route`` stores;
``show routes`` reads only that dict): the first IPv4 and IPv6 prefixes of the shared BGP
table plus edge cases, in two tables, with five kinds of paths. The independent check of a
listing is ``ipaddress``: routes sorted by their network objects, ``str()`` of each prefix,
``Fib.describe_paths``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import socket
import stat
import tempfile
import threading
import time
from pathlib import Path

import pytest

import vecroute.control.server as srvmod
from vecroute.control.commands import Reply, execute
from vecroute.control.config import parse_config
from vecroute.control.server import (
    MAX_CONNECTIONS,
    MAX_REQUEST,
    MAX_STREAMS,
    MAX_WORD,
    MAX_WORDS,
    ControlServer,
    request,
)
from vecroute.control.show import (
    JSON_MAX_ROWS,
    RICH_MAX_ROWS,
    ROUTE_COLUMNS,
    render_table,
    routes_stream,
    routes_view,
)
from vecroute.fib.fib import Fib, Route
from vecroute.fib.lpm import load_prefix_file

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "bgp-full-table-prefixes.txt.gz"
PROMPT = 0.5  # seconds: "answered promptly"


# --- a router, a served loop, raw clients ----------------------------------------------------


class Router:
    """The RouterControl surface the route commands use (a real Fib, no data plane)."""

    def __init__(self, fib: Fib) -> None:
        self.fib = fib
        self.commits = 0

    def stats(self):
        raise AssertionError("show routes must not need the data-plane counters")

    def commit(self) -> None:
        self.commits += 1

    def neighbor_rows(self):
        return []

    def neighbor_stats(self):
        return []

    def add_neighbor(self, ip, mac, ifname) -> None:
        self.fib.add_neighbor(ip, mac, ifname)

    def del_neighbor(self, ip, ifname) -> bool:
        self.fib.del_neighbor(ip, ifname)
        return True

    def clear_counters(self) -> None:
        pass

    def fw_command(self, argv):
        return "fw: " + " ".join(argv) + "\n"


def small_fib() -> Fib:
    cfg = parse_config(
        {
            "interfaces": [
                {
                    "name": "eth0",
                    "mac": "02:00:00:00:00:01",
                    "addresses": ["192.0.2.1/24", "2001:db8::1/64"],
                },
                {"name": "eth1", "mac": "02:00:00:00:00:02", "addresses": ["198.51.100.1/24"]},
            ],
            "neighbors": [
                {"ip": "192.0.2.10", "mac": "02:00:00:00:aa:10", "interface": "eth0"},
                {"ip": "2001:db8::10", "mac": "02:00:00:00:aa:11", "interface": "eth0"},
            ],
        }
    )
    return Fib.from_config(cfg)


V6_EDGES = [
    "::/0", "::1/128", "::/96", "::ffff:0:0/96", "::ffff:192.0.2.0/120", "::192.0.2.0/120",
    "::1:0:0:0/80", "0:0:0:1::/64", "2001:db8::/32", "2001:db8:0:1::/64", "2001:0:0:1::/64",
    "2001:db8:1:0:1::/80", "fe80::/10", "ff02::1:ff00:0/104", "64:ff9b::/96",
    "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff/128",
]
V4_EDGES = ["0.0.0.0/0", "255.255.255.255/32", "10.0.0.0/8", "203.0.113.0/24", "203.0.113.7/32"]


def fill(fib: Fib, nets, every_table10: int = 50) -> None:
    """Static routes to nets, round robin over five kinds of paths; some in table 10."""
    ip = ipaddress.ip_address
    variants = {
        4: [[(0, ip("192.0.2.10"))], [(0, ip("192.0.2.11"))],
            [(0, ip("192.0.2.10")), (0, ip("192.0.2.11"))], [], [(1, None)]],
        6: [[(0, ip("2001:db8::10"))], [(0, ip("2001:db8::11"))],
            [(0, ip("2001:db8::10")), (0, ip("2001:db8::11"))], [], [(0, None)]],
    }
    for i, net in enumerate(nets):
        table = 10 if i % every_table10 == 0 else 0
        paths = variants[net.version][i % 5]
        fib.routes[(table, net)] = Route(net, table, "static", list(paths), None, i % 7)


def big_fib(n4: int, n6: int) -> Fib:
    if not DATA.exists():
        pytest.fail(f"missing {DATA}: the shared data directory must sit beside the checkout")
    a4, l4, h6, o6, l6 = load_prefix_file(DATA)
    fib = small_fib()
    nets = [ipaddress.ip_network(x) for x in V4_EDGES + V6_EDGES]
    nets += [ipaddress.IPv4Network((int(a), int(n))) for a, n in zip(a4[:n4], l4[:n4], strict=True)]
    nets += [
        ipaddress.IPv6Network(((int(h) << 64) | int(o), int(n)))
        for h, o, n in zip(h6[:n6], o6[:n6], l6[:n6], strict=True)
    ]
    fill(fib, nets)
    return fib


@pytest.fixture(scope="module")
def big() -> Fib:
    """About 200K routes (150K IPv4, 50K IPv6)."""
    return big_fib(150_000, 50_000)


class Served:
    """A ControlServer on its own event loop in a background thread."""

    def __init__(self, router) -> None:
        self.dir = tempfile.mkdtemp(prefix="vr-ctl-")
        self.path = os.path.join(self.dir, "ctl.sock")
        self.loop = asyncio.new_event_loop()
        self.server = ControlServer(self.path, router)
        self.loop.run_until_complete(self.server.start())
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn, *args):
        async def go():
            return fn(*args)

        return self.run(go())

    def wait_for(self, predicate, timeout: float = 10.0) -> float:
        t0 = time.perf_counter()
        while not self.call(predicate):
            if time.perf_counter() - t0 > timeout:
                raise AssertionError("condition not reached in time")
            time.sleep(0.01)
        return time.perf_counter() - t0

    def stop(self) -> None:
        async def shutdown():
            self.server.close()
            await self.server.wait_closed()

        if self.loop.is_running():
            self.run(shutdown())
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
        self.loop.close()


@pytest.fixture
def served():
    made = []

    def make(router=None) -> Served:
        s = Served(router or Router(small_fib()))
        made.append(s)
        return s

    yield make
    for s in made:
        s.stop()


def connect(path: str, rcvbuf: int | None = None) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(30)
    s.connect(path)
    return s


def read_all(s: socket.socket) -> bytes:
    parts = []
    while True:
        try:
            chunk = s.recv(1 << 20)
        except ConnectionResetError:
            break
        if not chunk:
            break
        parts.append(chunk)
    return b"".join(parts)


def send(s: socket.socket, payload: bytes) -> None:
    try:
        s.sendall(payload)
    except BrokenPipeError:  # answered and closed before reading it all: read the answer
        pass


def raw(path: str, payload: bytes) -> dict:
    with connect(path) as s:
        send(s, payload)
        return json.loads(read_all(s))


def timed(path: str, argv: list[str]) -> tuple[float, dict]:
    t0 = time.perf_counter()
    rep = request(path, argv, timeout=30)
    return time.perf_counter() - t0, rep


def req_line(argv) -> bytes:
    return json.dumps({"argv": argv}).encode() + b"\n"


# --- the independent reference and the plain-text parser ------------------------------------


def reference(fib: Fib, prefix: str | None = None, table: int | None = None) -> list[tuple]:
    want = None
    if prefix:
        want = ipaddress.ip_network(prefix, False) if "/" in prefix else ipaddress.ip_address(
            prefix
        )
    out = []
    for (t, net), r in fib.routes.items():
        if table is not None and t != table:
            continue
        if isinstance(want, ipaddress.IPv4Network | ipaddress.IPv6Network):
            if net.version != want.version or not net.subnet_of(want):
                continue
        elif want is not None and (net.version != want.version or want not in net):
            continue
        out.append(((t, net.version, net.network_address, net.prefixlen), r))
    out.sort(key=lambda x: x[0])
    return [(k[0], str(r.prefix), r.kind, fib.describe_paths(r)) for k, r in out]


def parse_plain(text: str) -> list[tuple]:
    """Rows of the plain listing; checks the count line, headers and fixed columns."""
    lines = text.splitlines()
    head, n = lines[0].split(": ")
    assert head == "Routes"
    rows, cols = [], None
    for line in lines[1:]:
        if line.split()[0] == "table":
            cols = (line.index("prefix"), line.index("kind"), line.index("paths"))
            continue
        t, p, k, paths = line.split(None, 3)
        assert line.index(p) == cols[0] and line.index(k, cols[0] + len(p)) == cols[1]
        assert line[cols[2] :] == paths
        rows.append((int(t), p, k, paths))
    assert len(rows) == int(n)
    return rows


# --- slow and silent clients -----------------------------------------------------------------


def test_trickling_client_is_cut_off_and_others_are_answered_meanwhile(served, monkeypatch):
    monkeypatch.setattr(srvmod, "REQUEST_TIMEOUT", 2.0)
    s = served()
    result = {}

    def trickle():
        with connect(s.path) as c:
            c.settimeout(0.2)
            t0 = time.perf_counter()
            for b in b'{"argv": ["show", "routes"]}' * 100:  # one byte every 0.2 s, no newline
                try:
                    c.send(bytes([b]))
                    got = c.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    got = b""
                result["after"] = time.perf_counter() - t0
                result["reply"] = got + read_all(c)
                return

    th = threading.Thread(target=trickle)
    th.start()
    time.sleep(0.5)
    times = [timed(s.path, ["show", "routes"]) for _ in range(5)]
    th.join(10)
    assert all(rep["ok"] and "192.0.2.0/24" in rep["text"] for _, rep in times)
    assert max(t for t, _ in times) < PROMPT, [t for t, _ in times]
    assert 2.0 <= result["after"] < 3.5, result  # cut off at the timeout, not at its first byte
    rep = json.loads(result["reply"])
    assert rep == {"ok": False, "error": "request timeout: no complete request line in 2 s"}


def test_100_silent_clients_do_not_delay_a_request(served):
    s = served()
    silent = [connect(s.path) for _ in range(100)]
    try:
        s.wait_for(lambda: s.server.connections == 100)
        for _ in range(3):
            dt, rep = timed(s.path, ["show", "routes"])
            assert rep["ok"] and dt < PROMPT, dt
        assert s.call(lambda: s.server.connections) == 100  # still waiting for their requests
    finally:
        for c in silent:
            c.close()
    s.wait_for(lambda: s.server.connections == 0)


def test_connection_limit_answers_at_once_and_recovers(served):
    s = served()
    held = [connect(s.path) for _ in range(MAX_CONNECTIONS)]
    try:
        s.wait_for(lambda: s.server.connections == MAX_CONNECTIONS)
        t0 = time.perf_counter()
        rep = raw(s.path, req_line(["show", "routes"]))
        assert time.perf_counter() - t0 < PROMPT
        assert rep == {"ok": False, "error": f"busy: {MAX_CONNECTIONS} control connections open"}
    finally:
        for c in held:
            c.close()
    s.wait_for(lambda: s.server.connections == 0)
    assert request(s.path, ["show", "routes"])["ok"]


# --- malformed and oversize requests ---------------------------------------------------------


def test_request_size_limit(served):
    s = served()
    line = req_line(["show", "routes"])
    exact = line[:-1] + b" " * (MAX_REQUEST - len(line) + 1) + b"\n"
    assert len(exact) == MAX_REQUEST + 1  # MAX_REQUEST bytes and the newline
    assert raw(s.path, exact)["ok"]
    t0 = time.perf_counter()
    rep = raw(s.path, exact[:-1] + b" \n")
    assert rep == {"ok": False, "error": f"request too large: more than {MAX_REQUEST} bytes"}
    with connect(s.path) as c:  # endless line, no newline: refused without waiting for it
        send(c, b" " * (4 * MAX_REQUEST))
        rep = json.loads(read_all(c))
    assert rep["error"].startswith("request too large") and time.perf_counter() - t0 < PROMPT


def test_deeply_nested_json_is_malformed_not_a_crash(served):
    s = served()
    for payload in (b"[" * 60000, b'{"argv": ' + b"[" * 60000, b'{"argv": [' + b"{" * 30000):
        rep = raw(s.path, payload + b"\n")
        assert rep == {"ok": False, "error": srvmod.MALFORMED}, payload[:20]
    assert request(s.path, ["show", "routes"])["ok"]


@pytest.mark.parametrize(
    "payload,error",
    [
        (b'{"argv": ["show", 1]}', "must be a list of strings"),
        (b'{"argv": [["show"]]}', "must be a list of strings"),
        (b'{"argv": [null]}', "must be a list of strings"),
        (b'{"argv": "show routes"}', "malformed request"),
        (b'["show", "routes"]', "malformed request"),
        (b'{"args": ["show"]}', "malformed request"),
        (b'{"argv": ["show"', "malformed request"),
        (b'\xff\xfe{"argv": []}', "malformed request"),
        (b'{"argv": [], "n": ' + b"9" * 5000 + b"}", "malformed request"),
        (b"", "malformed request"),
        (b'{"argv": ["show", "\\ud800"]}', "word 1 is not valid Unicode"),
    ],
)
def test_malformed_requests(served, payload, error):
    s = served()
    rep = raw(s.path, payload + b"\n")
    assert not rep["ok"] and error in rep["error"] and "\n" not in rep["error"]


def test_argv_word_limits(served):
    s = served()
    ok_words = ["show", "routes"] + ["x"] * (MAX_WORDS - 2)
    rep = request(s.path, ok_words)  # at the limit: reaches the command parser
    assert rep["ok"] is False and "'x' is not an IPv4 or IPv6 address" in rep["error"]
    rep = request(s.path, ok_words + ["x"])
    assert rep["error"] == f"request too long: {MAX_WORDS + 1} words, at most {MAX_WORDS}"
    rep = request(s.path, ["show", "routes", "z" * MAX_WORD])
    assert "is not an IPv4 or IPv6 address" in rep["error"]
    rep = request(s.path, ["show", "routes", "z" * (MAX_WORD + 1)])
    assert rep["error"] == f"request too long: word 2 has more than {MAX_WORD} characters"


def test_request_without_newline_before_eof_is_served(served):
    s = served()
    with connect(s.path) as c:
        c.sendall(b'{"argv": ["show", "routes"]}')
        c.shutdown(socket.SHUT_WR)
        assert json.loads(read_all(c))["ok"]


# --- the socket file -------------------------------------------------------------------------


def test_socket_file_mode_stale_socket_and_second_server(served):
    s = served()
    assert stat.S_IMODE(os.stat(s.path).st_mode) == 0o660
    with pytest.raises(OSError, match="another vecroute is listening"):
        ControlServer(s.path, Router(small_fib()))
    assert request(s.path, ["show", "routes"])["ok"]  # the first one is untouched
    stale = os.path.join(s.dir, "stale.sock")
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(stale)
    dead.close()  # a socket file nobody listens on
    again = ControlServer(stale, Router(small_fib()))  # replaces the stale file
    assert stat.S_ISSOCK(os.stat(stale).st_mode)
    again.close()
    assert not os.path.exists(stale)
    s.stop()
    assert not os.path.exists(s.path)


@pytest.mark.parametrize("kind", ["file", "directory", "symlink", "fifo"])
def test_whatever_is_not_a_socket_at_the_path_is_refused_and_kept(tmp_path, kind):
    """Only a stale socket is replaced; a file there (a typo in [control] socket naming
    something precious) used to be deleted."""
    path = tmp_path / "ctl.sock"
    if kind == "file":
        path.write_text("precious\n")
    elif kind == "directory":
        path.mkdir()
    elif kind == "symlink":
        (tmp_path / "target").write_text("precious\n")
        path.symlink_to(tmp_path / "target")
    else:
        os.mkfifo(path)
    before = os.lstat(path)
    with pytest.raises(OSError, match="refusing to replace it") as e:
        ControlServer(str(path), Router(small_fib()))
    assert "\n" not in str(e.value) and str(path) in str(e.value)
    after = os.lstat(path)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    if kind in ("file", "symlink"):
        assert path.read_text() == "precious\n"


def test_close_drops_connected_clients(served):
    s = served()
    c = connect(s.path)
    s.wait_for(lambda: s.server.connections == 1)
    s.stop()
    c.settimeout(2)
    assert read_all(c) == b""  # closed under it, no reply
    c.close()


def test_peer_credentials_checked(served):
    s = served()
    os.chmod(s.dir, 0o755)
    os.chmod(s.path, 0o666)  # let nobody connect: the credential check must refuse it
    out = _as_nobody(s.path, [])
    denied = {"ok": False, "error": "permission denied: root or the socket's group"}
    assert json.loads(out) == denied
    assert request(s.path, ["show", "routes"])["ok"]


def _as_nobody(path: str, groups: list[int]) -> bytes:
    """``show routes`` from a child running as uid/gid 65534 with these supplementary
    groups; its raw reply (or the exception it met)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: only the socket module, then exit
        try:
            os.close(r)
            os.setgroups(groups)
            os.setgid(65534)
            os.setuid(65534)
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.settimeout(5)
            c.connect(path)
            send(c, req_line(["show", "routes"]))
            os.write(w, read_all(c))
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            os.write(w, repr(e).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read()
    os.waitpid(pid, 0)
    return out


def test_supplementary_group_members_are_allowed(served):
    """`usermod -aG GROUP alice`: GROUP is one of alice's supplementary groups, not her
    primary one; the kernel lets her connect (mode 0660) and so must the router."""
    s = served()
    group = 4242  # the socket's group; the peer's primary group stays 65534
    os.chmod(s.dir, 0o755)
    os.chown(s.path, 0, group)
    os.chmod(s.path, 0o660)
    rep = json.loads(_as_nobody(s.path, [group]))
    assert rep["ok"], rep
    # without the group, the kernel refuses the connect itself (0660)
    assert b"PermissionError" in _as_nobody(s.path, [])
    os.chmod(s.path, 0o666)  # now the kernel lets anyone in: the router must refuse
    rep = json.loads(_as_nobody(s.path, [4243]))
    assert rep == {"ok": False, "error": "permission denied: root or the socket's group"}


# --- streamed replies ------------------------------------------------------------------------


TRICKY = ['a"b\\c\n', "\t\x00\x1f\x7f", "é€", "\U0001f600x", "\ud800", "", "</script>", "\u2028"]


def test_chunk_escaping_gives_the_bytes_of_the_whole_text(served, monkeypatch):
    text = "".join(TRICKY) * 3
    splits = [[text[:i], text[i:j], text[j:]] for i in range(0, len(text), 3) for j in (i, i + 5)]

    def fake_execute(router, argv):
        parts = splits[int(argv[0])]
        rep = Reply(None)
        rep.chunks = iter(parts)
        rep.data = {"n": int(argv[0])}
        return rep

    monkeypatch.setattr(srvmod, "execute", fake_execute)
    s = served()
    whole = json.dumps(text).encode()
    for n in range(len(splits)):
        with connect(s.path) as c:
            c.sendall(req_line([str(n)]))
            out = read_all(c)
        assert out.endswith(b"}\n")
        assert out[len(b'{"ok": true, "text": ') :].startswith(whole + b', "data": ')
        assert json.loads(out) == {"ok": True, "text": text, "data": {"n": n}}


def test_error_while_streaming_reads_as_an_error(served, monkeypatch):
    def chunks():
        yield "Routes: 3\n"
        raise RuntimeError("boom")

    monkeypatch.setattr(srvmod, "execute", lambda r, argv: Reply(None, chunks=chunks()))
    s = served()
    rep = request(s.path, ["show", "routes"])
    assert rep["ok"] is False and rep["error"] == "internal error: boom"
    assert s.call(lambda: s.server.streams) == 0


def test_streamed_show_routes_is_the_renderer_text_and_the_fib(served, big):
    s = served(Router(big))
    rep = request(s.path, ["show", "routes"], timeout=60)
    assert rep["ok"] and rep["data"] is None
    assert "too many for --json" in rep["data_error"] and "show routes 203.0.113.0/24" in (
        rep["data_error"]
    )
    assert rep["text"] == "".join(routes_stream(big))  # the same renderer, not streamed
    rows = parse_plain(rep["text"])
    assert len(rows) == len(big.routes) > 200_000
    assert rows == reference(big)  # independent: ipaddress order, str(), describe_paths
    kinds = {r[2] for r in rows}
    paths = {r[3].split()[0] for r in rows}
    assert {"static", "connected", "local", "neighbor"} <= kinds
    assert {"via", "dev", "blackhole", "local"} <= paths
    assert {r[0] for r in rows} == {0, 10}


@pytest.mark.parametrize(
    "prefix,table",
    [
        ("10.0.0.0/8", None),
        ("203.0.113.7", None),
        ("2001:db8::/32", None),
        ("::ffff:192.0.2.5", None),
        ("0.0.0.0/0", 10),
        (None, 10),
        ("2000::/3", 10),
        ("0.0.0.0/1", None),
        ("198.51.100.0/24", None),
        ("192.0.2.10", None),
    ],
)
def test_streamed_filters_match_the_unstreamed_view(big, prefix, table):
    args = ([prefix] if prefix else []) + (["table", str(table)] if table is not None else [])
    rep = execute(Router(big), ["show", "routes", *args])
    assert rep.chunks is not None  # a big table: always the streamed path
    rep.complete()
    want = reference(big, prefix, table)
    assert want, args
    view = [x for x in routes_view(big, prefix) if table is None or x["table"] == table]
    assert [(x["table"], x["prefix"], x["kind"], x["paths"]) for x in view] == want
    if len(want) <= RICH_MAX_ROWS:  # exactly what the unstreamed command renders
        assert rep.text == render_table("Routes", view, ROUTE_COLUMNS)
    else:
        assert parse_plain(rep.text) == want
    if len(want) <= JSON_MAX_ROWS:
        assert rep.data == view and rep.data_error is None
    else:
        assert rep.data is None and str(len(want)) in rep.data_error


def test_small_table_keeps_the_rich_unstreamed_reply():
    fib = small_fib()
    rep = execute(Router(fib), ["show", "routes"])
    assert rep.chunks is None and "┃" in rep.text  # a rich table, as before
    assert rep.text == render_table("Routes", routes_view(fib), ROUTE_COLUMNS)
    assert [x["prefix"] for x in rep.data] == [r[1] for r in reference(fib)]


def test_plain_prefixes_are_ipaddress_strings_on_the_whole_table():
    """inet_ntop and the IPv4 formatter against str() on every prefix of the BGP table."""
    a4, l4, h6, o6, l6 = load_prefix_file(DATA)
    fib = small_fib()
    nets = [ipaddress.ip_network(x) for x in V6_EDGES + V4_EDGES]
    nets += [
        ipaddress.IPv6Network(((int(h) << 64) | int(o), int(n)))
        for h, o, n in zip(h6, o6, l6, strict=True)
    ]
    nets += [ipaddress.IPv4Network((int(a), int(n))) for a, n in zip(a4[::4], l4[::4], strict=True)]
    fill(fib, nets, every_table10=10**9)
    rows = parse_plain("".join(routes_stream(fib)))
    assert sorted(r[1] for r in rows) == sorted(str(n) for _, n in fib.routes)


def test_never_reading_client_does_not_block_another_big_reply(served, big, monkeypatch):
    monkeypatch.setattr(srvmod, "WRITE_TIMEOUT", 4.0)
    s = served(Router(big))
    stuck = connect(s.path, rcvbuf=4096)
    stuck.sendall(req_line(["show", "routes"]))
    s.wait_for(lambda: s.server.streams == 1)
    time.sleep(0.3)  # its buffers are full by now
    dt, rep = timed(s.path, ["route", "add", "203.0.113.128/25", "via", "192.0.2.10"])
    assert rep["ok"] and dt < PROMPT
    t0 = time.perf_counter()
    rep = request(s.path, ["show", "routes"], timeout=60)  # the same huge listing, read
    assert len(parse_plain(rep["text"])) == len(big.routes)
    assert s.call(lambda: s.server.streams) == 1  # the stuck one is still there
    assert time.perf_counter() - t0 < 4.0
    dropped = s.wait_for(lambda: s.server.connections == 0, timeout=10)
    assert dropped < 5.0
    got = read_all(stuck)  # what it had been sent, then the end: not a complete reply
    stuck.close()
    assert got.startswith(b'{"ok": true, "text": "Routes: ') and not got.endswith(b"}\n")
    big.del_route("203.0.113.128/25")


def test_streams_are_limited_and_slots_come_back(served, big, monkeypatch):
    monkeypatch.setattr(srvmod, "WRITE_TIMEOUT", 2.0)
    s = served(Router(big))
    stuck = [connect(s.path, rcvbuf=4096) for _ in range(MAX_STREAMS)]
    for c in stuck:
        c.sendall(req_line(["show", "routes"]))
    s.wait_for(lambda: s.server.streams == MAX_STREAMS)
    dt, rep = timed(s.path, ["show", "routes"])
    assert rep == {"ok": False, "error": f"busy: {MAX_STREAMS} long listings in progress, retry"}
    assert dt < PROMPT
    s.wait_for(lambda: s.server.streams == 0, timeout=15)
    for c in stuck:
        c.close()
    rep = request(s.path, ["show", "routes", "203.0.113.0/24"])
    assert rep["ok"] and [x["prefix"] for x in rep["data"]] == ["203.0.113.0/24", "203.0.113.7/32"]


def test_event_loop_keeps_ticking_during_a_200k_row_stream(served, big):
    s = served(Router(big))
    ticks: list[float] = []
    stop = threading.Event()

    async def ticker():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            await asyncio.sleep(0.01)

    fut = asyncio.run_coroutine_threadsafe(ticker(), s.loop)
    time.sleep(0.1)
    with connect(s.path) as c:
        t0 = time.perf_counter()
        c.sendall(req_line(["show", "routes"]))
        out = read_all(c)
        t1 = time.perf_counter()
    stop.set()
    fut.result(5)
    during = [b - a for a, b in zip(ticks, ticks[1:], strict=False) if b >= t0 and a <= t1]
    assert len(during) >= 10 and t1 - t0 > 0.2  # the stream lasted: the test measured it
    assert max(during) < 0.1, f"loop stalled {max(during) * 1e3:.0f} ms"
    assert len(parse_plain(json.loads(out)["text"])) == len(big.routes) >= 200_000


def test_ctl_json_of_a_big_listing_is_refused_with_a_hint(served, big):
    from click.testing import CliRunner

    from vecroute.cli import main

    s = served(Router(big))
    res = CliRunner().invoke(main, ["ctl", "--socket", s.path, "--json", "show", "routes"])
    assert res.exit_code == 1 and "too many for --json" in res.output
    assert "show routes 203.0.113.0/24" in res.output and res.output.count("\n") == 1
    res = CliRunner().invoke(
        main, ["ctl", "--socket", s.path, "--json", "show", "routes", "203.0.113.0/24"]
    )
    assert res.exit_code == 0
    assert [x["prefix"] for x in json.loads(res.output)] == ["203.0.113.0/24", "203.0.113.7/32"]
