"""Prometheus metrics (`[metrics] listen`, docs/metrics.md).

Unit tests run the collector and the HTTP server against a router built without ports
(the FIB, neighbour table and data-plane workers LiveRouter holds, the workers not
started) and parse what they serve with prometheus-client's own parsers; the live tests
scrape a real `vecroute run` in network namespaces and compare with `ctl show` and with
the traffic they send.
"""

from __future__ import annotations

import asyncio
import errno
import gzip
import ipaddress
import os
import socket
import subprocess
import sys
import time

import pytest
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families

from vecroute.config_types import ConfigError
from vecroute.control import metrics_http as MH
from vecroute.control.config import load_config, parse_config
from vecroute.control.metrics import NEIGHBOR_HELP, RouterCollector, router_registry
from vecroute.control.metrics_http import MetricsServer, bind_listener
from vecroute.control.neighbors import STAT_FIELDS, NeighborTable
from vecroute.control.show import errors_view, interfaces_view, runtime_view
from vecroute.graph import counters as C
from vecroute.graph.dataplane import build_dataplane, fib_state
from vecroute.graph.state import IFS_DROPS, IFS_RX_PKTS, IFS_TX_PKTS, DataPlaneState
from vecroute.io import worker_loop as L
from vecroute.io.channel import R_DROPS
from vecroute.io.worker import DataPlaneWorker
from vecroute.packet.node_ids import NODE_NAMES

BASE = {
    "interfaces": [
        {"name": "eth0", "mac": "02:00:00:00:00:01",
         "addresses": ["198.51.100.254/24", "2001:db8:1::1/64"]},
        {"name": "eth1", "mac": "02:00:00:00:00:02",
         "addresses": ["192.0.2.254/24", "2001:db8:2::1/64"], "table": 7},
    ],
    "routes": [
        {"prefix": "203.0.113.0/24", "via": "198.51.100.1"},
        {"prefix": "2001:db8:100::/48", "via": "2001:db8:1::2"},
        {"prefix": "203.0.113.0/25", "via": "192.0.2.1", "table": 7},
    ],
    "neighbors": [{"ip": "198.51.100.1", "mac": "02:00:00:00:00:aa", "interface": "eth0"}],
}
FIREWALL = {"default": "allow", "rules": ["100 check-state", "200 allow tcp from any to any "
                                          "setup keep-state", "300 deny ip from any to any"]}


class PortlessRouter:
    """What LiveRouter holds, built without ports: the FIB and neighbour table of a
    config, and ``workers`` data-plane workers with no sockets (never started)."""

    def __init__(self, workers: int = 1, firewall: bool = False) -> None:
        raw = dict(BASE, firewall=FIREWALL) if firewall else BASE
        cfg = parse_config(raw, "router.toml")
        dp = build_dataplane(cfg)
        self.fib = dp.fib
        self.neigh = NeighborTable(self.fib, lambda *a: None, lambda *a: None)
        tables = fib_state(self.fib).frozen()
        fws = [dp.firewall] + [dp.new_firewall() for _ in range(workers - 1)]
        self.workers = [DataPlaneWorker(k, [], tables.with_runtime(None), 64, fws[k])
                        for k in range(workers)]
        self.started_at = 1_700_000_000.0
        self.last_reload_ok = self.started_at
        self.reloads = {"ok": 2, "failed": 1}

    def stats(self) -> DataPlaneState:  # as LiveRouter.stats
        total = DataPlaneState.summed([w.state for w in self.workers])
        total.counters[C.C_INJECT_QUEUE_FULL] += sum(int(w.inject.ctl[R_DROPS])
                                                     for w in self.workers)
        return total


def scrape(router, openmetrics: bool = False) -> dict:
    """{family name: {labels as a sorted tuple: value}} plus the types, from the parser."""
    reg = router_registry(router)
    if openmetrics:
        fams = parse_openmetrics(generate_openmetrics(reg).decode())
    else:
        fams = text_string_to_metric_families(generate_latest(reg).decode())
    out: dict = {"_types": {}}
    for f in fams:
        out["_types"][f.name] = f.type
        for s in f.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def value(m: dict, name: str, **labels) -> float:
    return m[name][tuple(sorted(labels.items()))]


def fill(router: PortlessRouter) -> None:
    """Different counts in every worker, so that sums and per-worker series differ."""
    for k, w in enumerate(router.workers, 1):
        st = w.state
        st.if_stats[0, IFS_RX_PKTS] = 10 * k
        st.if_stats[1, IFS_TX_PKTS] = 7 * k
        st.if_stats[0, IFS_DROPS] = k
        st.counters[C.C_NO_ROUTE] = 3 * k
        st.counters[C.C_FIB_LOOKUPS] = 100 * k
        st.node_stats[2, :] = (k, 50 * k, 5000 * k)
        w.ctl[L.W_BATCHES] = 11 * k
        w.ctl[L.W_PACKETS] = 99 * k
        w.inject.ctl[R_DROPS] = k


# -- config ---------------------------------------------------------------------------------

@pytest.mark.parametrize("listen,host,port", [
    ("127.0.0.1:9475", "127.0.0.1", 9475),
    ("[::1]:9475", "::1", 9475),
    ("0.0.0.0:65535", "0.0.0.0", 65535),
    ("[2001:db8::1]:1", "2001:db8::1", 1),
])
def test_config_listen(listen, host, port):
    cfg = parse_config({**BASE, "metrics": {"listen": listen}})
    assert (cfg.metrics.host, cfg.metrics.port, cfg.metrics.listen) == (host, port, listen)


def test_config_default_and_absent():
    assert parse_config(BASE).metrics is None
    assert parse_config({**BASE, "metrics": {}}).metrics.listen == "127.0.0.1:9475"


@pytest.mark.parametrize("listen", [
    "127.0.0.1", "127.0.0.1:", ":9475", "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:http",
    "127.0.0.1:+80", "127.0.0.1:٣", "::1:9475", "[::1]", "[127.0.0.1]:80", "localhost:9475",
    "[fe80::1%eth0]:9475", "300.0.0.1:80", "", "9" * 1000, 9475, True, ["127.0.0.1:1"],
])
def test_config_bad_listen_is_one_line(tmp_path, listen):
    with pytest.raises(ConfigError) as e:
        parse_config({**BASE, "metrics": {"listen": listen}}, "r.toml")
    msg = str(e.value)
    assert msg.startswith("r.toml: metrics.listen: ") and "\n" not in msg and len(msg) < 200


def test_config_unknown_key_and_not_a_table(tmp_path):
    p = tmp_path / "r.toml"
    p.write_text('[[interfaces]]\nname = "eth0"\n[metrics]\nport = 9475\n')
    with pytest.raises(ConfigError, match=r"metrics\.port: unknown key \(allowed: listen\)"):
        load_config(p)
    with pytest.raises(ConfigError, match="metrics: expected a table"):
        parse_config({**BASE, "metrics": "127.0.0.1:9475"})


def test_check_accepts_metrics(tmp_path):
    from click.testing import CliRunner

    from vecroute.cli import main

    p = tmp_path / "r.toml"
    p.write_text('[[interfaces]]\nname = "eth0"\nmac = "02:00:00:00:00:01"\n'
                 '[metrics]\nlisten = "127.0.0.1:9475"\n')
    assert CliRunner().invoke(main, ["check", str(p)]).exit_code == 0
    p.write_text('[[interfaces]]\nname = "eth0"\n[metrics]\nlisten = "127.0.0.1:99999"\n')
    res = CliRunner().invoke(main, ["check", str(p)])
    assert res.exit_code == 2 and "metrics.listen" in res.output


# -- the collector --------------------------------------------------------------------------

@pytest.mark.parametrize("workers", [1, 2])
def test_collector_matches_ctl_views(workers):
    r = PortlessRouter(workers)
    fill(r)
    m = scrape(r)
    st = r.stats()
    for row in interfaces_view(r.fib, st):
        for key in ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "drops", "punts"):
            assert value(m, f"vecroute_interface_{key}_total", interface=row["name"]) == row[key]
    for row in errors_view(st, all_counters=True):
        if row["kind"] == "drop":
            got = value(m, "vecroute_drops_total", reason=row["counter"], node=row["node"])
        else:
            got = value(m, "vecroute_events_total", event=row["counter"], node=row["node"])
        assert got == row["count"], row
    inject = C.COUNTERS[C.C_INJECT_QUEUE_FULL]  # counted by the control plane, per ring
    assert value(m, "vecroute_drops_total", reason=inject.name, node=inject.node) == sum(
        range(1, workers + 1))
    assert len(m["vecroute_drops_total"]) + len(m["vecroute_events_total"]) == len(C.COUNTERS)
    for row in runtime_view(st):
        assert value(m, "vecroute_node_calls_total", node=row["node"]) == row["calls"]
        assert value(m, "vecroute_node_packets_total", node=row["node"]) == row["vectors"]
    assert len(m["vecroute_node_calls_total"]) == len(NODE_NAMES)  # idle nodes too: 0
    assert value(m, "vecroute_node_clocks_total", node=NODE_NAMES[2]) == int(
        st.node_stats[2, 2])
    assert value(m, "vecroute_cycle_counter_hertz") > 0
    # per worker: its own share, and the shares add up to the router's series
    for k, w in enumerate(r.workers):
        row = w.row()
        assert value(m, "vecroute_worker_batches_total", worker=str(k)) == row["batches"]
        assert value(m, "vecroute_worker_packets_total", worker=str(k)) == row["packets"]
        assert value(m, "vecroute_worker_up", worker=str(k)) == 0  # never started
        assert value(m, "vecroute_worker_interface_rx_packets_total", worker=str(k),
                     interface="eth0") == 10 * (k + 1)
        assert value(m, "vecroute_worker_drops_total", worker=str(k)) == 3 * (k + 1) + (k + 1)
    assert sum(m["vecroute_worker_interface_rx_packets_total"].values()) == value(
        m, "vecroute_interface_rx_packets_total", interface="eth0")
    assert sum(m["vecroute_worker_drops_total"].values()) == sum(m["vecroute_drops_total"].values())
    assert value(m, "vecroute_workers") == workers
    assert "vecroute_worker_heartbeat_age_seconds" not in m  # no heartbeat yet: no sample


def test_collector_info_routes_neighbors():
    r = PortlessRouter()
    ifx = r.fib.interface_index("eth1")
    r.neigh.add_static(ifx, ipaddress.ip_address("192.0.2.1"), b"\x02\0\0\0\0\xbb", 0)
    m = scrape(r)
    want: dict = {}
    for table, prefix in r.fib.routes:
        key = (str(table), f"ipv{prefix.version}")
        want[key] = want.get(key, 0) + 1
    got = {(dict(k)["table"], dict(k)["family"]): v for k, v in m["vecroute_routes"].items()}
    assert got == want and ("7", "ipv4") in got
    rows = r.neigh.rows()
    for fam in (4, 6):
        for state in ("incomplete", "reachable", "stale", "probe", "failed", "permanent"):
            n = sum(1 for x in rows if x["state"] == state
                    and ipaddress.ip_address(x["ip"]).version == fam)
            assert value(m, "vecroute_neighbors", family=f"ipv{fam}", state=state) == n
    assert value(m, "vecroute_neighbors", family="ipv4", state="permanent") == 2
    assert value(m, "vecroute_neighbor_queued_packets") == 0
    assert value(m, "vecroute_neighbor_requests_sent_total") == r.neigh.stats.requests_sent
    assert len(m["vecroute_neighbor_nd_invalid_total"]) == 10
    assert value(m, "vecroute_interface_info", interface="eth1", mac="02:00:00:00:00:02",
                 table="7") == 1
    assert value(m, "vecroute_interface_mtu_bytes", interface="eth0") == 1500
    assert value(m, "vecroute_start_time_seconds") == r.started_at
    assert value(m, "vecroute_config_reloads_total", result="failed") == 1
    assert "process_start_time_seconds" in m  # restarts show as its change
    assert "vecroute_firewall_rules" not in m  # no [firewall]: no firewall families


def test_every_neighbor_stat_is_documented():
    assert set(NEIGHBOR_HELP) == set(STAT_FIELDS)


def test_collector_firewall_two_workers():
    r = PortlessRouter(workers=2, firewall=True)
    from vecroute.firewall.states import FC_COUNT, FC_CREATED

    for k, w in enumerate(r.workers, 1):
        w.graph.firewall.ctl[FC_COUNT] = 4 * k
        w.graph.firewall.ctl[FC_CREATED] = 9 * k
    m = scrape(r)
    assert value(m, "vecroute_firewall_rules") == 4  # three and the default rule
    assert value(m, "vecroute_firewall_states") == 4 + 8
    assert value(m, "vecroute_worker_firewall_states", worker="1") == 8
    assert value(m, "vecroute_firewall_states_created_total") == 9 + 18
    assert value(m, "vecroute_firewall_max_states") == 1_000_000


def test_scrape_never_walks_the_routes():
    """A full table is a million routes: the route gauge comes from per-table counts."""
    r = PortlessRouter()
    want = scrape(r)["vecroute_routes"]

    class NoWalk(dict):
        def _walk(self, *a):
            raise AssertionError("a scrape walked fib.routes")
        __iter__ = values = items = keys = _walk

    r.fib.routes = NoWalk(r.fib.routes)
    assert scrape(r)["vecroute_routes"] == want


def test_names_follow_prometheus_conventions():
    r = PortlessRouter(workers=2, firewall=True)
    reg = router_registry(r)
    fams = list(text_string_to_metric_families(generate_latest(reg).decode()))
    names = [f.name for f in fams]
    assert len(names) == len(set(names))
    ours = [f for f in fams if f.name.startswith("vecroute")]
    assert len(ours) > 40
    for f in ours:
        assert f.name.startswith("vecroute_") and f.name == f.name.lower(), f.name
        assert f.documentation, f.name
        for s in f.samples:
            if f.type == "counter":
                assert s.name.endswith("_total"), s.name
            else:
                assert not s.name.endswith("_total"), s.name
    # OpenMetrics (what Prometheus asks for) parses too, with the same numbers
    assert scrape(r, openmetrics=True)["vecroute_drops_total"] == scrape(r)["vecroute_drops_total"]


def test_collector_reads_workers_without_a_call():
    """A scrape never queues a call into a worker (it would wait for the worker's next
    batch boundary): the counters are read as arrays, as `ctl show` reads them."""
    r = PortlessRouter(workers=2, firewall=True)
    list(RouterCollector(r).collect())
    assert all(w._calls.empty() for w in r.workers)


# -- the HTTP server ------------------------------------------------------------------------

async def _request(port: int, data: bytes, eof: bool = False) -> bytes:
    rd, wr = await asyncio.open_connection("127.0.0.1", port)
    wr.write(data)
    await wr.drain()
    if eof:
        wr.write_eof()
    out = await asyncio.wait_for(rd.read(), 5)
    wr.close()
    return out


def _split(resp: bytes) -> tuple[int, dict, bytes]:
    head, _, body = resp.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, body


def _serve(test, monkeypatch=None, **consts):
    """Run ``await test(server, port)`` against a MetricsServer on 127.0.0.1:<free>."""
    for k, v in consts.items():
        monkeypatch.setattr(MH, k, v)

    async def main():
        sock = bind_listener("127.0.0.1", 0)
        server = MetricsServer(sock, PortlessRouter(workers=2))
        await server.start()
        try:
            return await test(server, sock.getsockname()[1])
        finally:
            server.close()
            await server.wait_closed()

    return asyncio.run(main())


def test_http_get_head_and_errors(monkeypatch):
    async def test(server, port):
        code, h, body = _split(await _request(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"))
        assert code == 200 and h["content-type"].startswith("text/plain; version=0.0.4")
        assert int(h["content-length"]) == len(body) and h["connection"] == "close"
        fams = {f.name for f in text_string_to_metric_families(body.decode())}
        assert {"vecroute_interface_rx_packets", "vecroute_drops", "vecroute_worker_up",
                "vecroute_metrics_http_responses", "process_start_time_seconds"} <= fams
        code, h, body2 = _split(await _request(port, b"HEAD /metrics?x=1 HTTP/1.0\r\n\r\n"))
        assert code == 200 and body2 == b"" and int(h["content-length"]) > 1000
        om = (b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text; version=1.0.0"
              b"\r\nAccept-Encoding: gzip\r\n\r\n")
        code, h, body = _split(await _request(port, om))
        assert code == 200 and h["content-encoding"] == "gzip"
        assert h["content-type"].startswith("application/openmetrics-text")
        assert gzip.decompress(body).endswith(b"# EOF\n")
        assert _split(await _request(port, b"GET / HTTP/1.1\r\n\r\n"))[0] == 200
        assert _split(await _request(port, b"GET /nope HTTP/1.1\r\n\r\n"))[0] == 404
        code, h, _ = _split(await _request(port, b"POST /metrics HTTP/1.1\r\n\r\n"))
        assert code == 405 and h["allow"] == "GET, HEAD"
        for bad in (b"GET /metrics\r\n\r\n", b"GET  /metrics HTTP/1.1\r\n\r\n",
                    b"\xff\xfe / HTTP/1.1\r\n\r\n", b"GET /metrics HTTP/1.1\r\nnocolon\r\n\r\n",
                    b"GET /\xff HTTP/1.1\r\n\r\n"):
            assert _split(await _request(port, bad))[0] == 400, bad
        assert await _request(port, b"GET /metr", eof=True) == b""  # left half-way: no answer
        # its own counters count what happened above
        _, _, body = _split(await _request(port, b"GET /metrics HTTP/1.1\r\n\r\n"))
        return body

    body = _serve(test, monkeypatch, CACHE_S=0)
    assert b'vecroute_metrics_http_responses_total{code="400"} 5.0' in body


def test_http_scrape_runs_on_the_event_loop_thread(monkeypatch):
    """The FIB and the neighbour table belong to the event loop's thread: the scrape
    reads them there, never from a thread of its own."""
    import threading

    seen = []
    real = RouterCollector.collect

    def spy(self):
        seen.append(threading.get_ident())
        return real(self)

    monkeypatch.setattr(RouterCollector, "collect", spy)

    async def test(server, port):
        assert _split(await _request(port, b"GET /metrics HTTP/1.1\r\n\r\n"))[0] == 200
        return threading.get_ident()

    assert seen == [_serve(test)]


def test_http_huge_request_is_refused_unread(monkeypatch):
    async def test(server, port):
        rd, wr = await asyncio.open_connection("127.0.0.1", port)
        wr.write(b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * (1 << 20))  # no line end
        try:
            code, _, body = _split(await asyncio.wait_for(rd.read(), 5))
            assert code == 431 and b"8192" in body
        except ConnectionResetError:
            pass  # closed with our unread megabyte in its buffer: the kernel sent a RST
        wr.close()
        await asyncio.sleep(0.05)
        assert server.responses[431] == 1 and server.connections == 0
        # many short header lines: bounded too
        many = b"GET /metrics HTTP/1.1\r\n" + b"X: y\r\n" * 100 + b"\r\n"
        assert _split(await _request(port, many))[0] == 431
        return server.responses[431]

    assert _serve(test) == 2


def test_http_slow_clients_are_bounded(monkeypatch):
    """Slowloris: clients that trickle or never finish their request hold a connection
    only until REQUEST_TIMEOUT (408), at most MAX_CONNECTIONS of them (503 beyond), and
    the event loop keeps running on time meanwhile."""
    async def test(server, port):
        lag = []

        async def ticker():
            while True:
                t = time.perf_counter()
                await asyncio.sleep(0.01)
                lag.append(time.perf_counter() - t - 0.01)

        tick = asyncio.create_task(ticker())
        slow = []
        for _ in range(MH.MAX_CONNECTIONS):
            rd, wr = await asyncio.open_connection("127.0.0.1", port)
            wr.write(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
            slow.append((rd, wr))
        await asyncio.sleep(0.1)
        assert server.connections == MH.MAX_CONNECTIONS
        code, h, _ = _split(await _request(port, b"GET /metrics HTTP/1.1\r\n\r\n"))
        assert code == 503 and h["retry-after"] == "1"
        for _ in range(3):  # trickling bytes does not extend the deadline
            for _, wr in slow:
                wr.write(b"a")
            await asyncio.sleep(0.1)
        t0 = time.monotonic()
        answers = await asyncio.gather(*(asyncio.wait_for(rd.read(), 5) for rd, _ in slow))
        assert all(_split(a)[0] == 408 for a in answers)
        assert time.monotonic() - t0 < 1.0  # timeout 0.5 s from the connect
        for _, wr in slow:
            wr.close()
        await asyncio.sleep(0.05)
        assert server.connections == 0
        assert _split(await _request(port, b"GET /metrics HTTP/1.1\r\n\r\n"))[0] == 200
        tick.cancel()
        return max(lag)

    assert _serve(test, monkeypatch, REQUEST_TIMEOUT=0.5) < 0.2


def test_http_render_is_cached(monkeypatch):
    async def test(server, port):
        a = _split(await _request(port, b"GET /metrics HTTP/1.1\r\n\r\n"))[2]
        b = _split(await _request(port, b"GET /metrics HTTP/1.1\r\n\r\n"))[2]
        assert a == b  # the same bytes within CACHE_S (the response counters moved)
        await asyncio.sleep(0.35)
        c = _split(await _request(port, b"GET /metrics HTTP/1.1\r\n\r\n"))[2]
        assert c != a
        return server.render_seconds

    assert 0 < _serve(test, monkeypatch, CACHE_S=0.3) < 0.5


def test_bind_listener_port_in_use():
    taken = bind_listener("127.0.0.1", 0)
    try:
        with pytest.raises(OSError) as e:
            bind_listener("127.0.0.1", taken.getsockname()[1])
        assert e.value.errno == errno.EADDRINUSE
    finally:
        taken.close()


# -- live: a real `vecroute run` -------------------------------------------------------------

pytest_netns = pytest.mark.netns
METRICS_PORT = 9475  # inside the router's own namespace: no clash with anything else


def _require_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("live tests need root (network namespaces): run them as root, as CI does")


def http_get(ns: str, path: str = "/metrics", port: int = METRICS_PORT) -> bytes:
    from vecroute.io.netns import entered

    with entered(ns):  # the socket is made in the router's namespace
        conn = socket.create_connection(("127.0.0.1", port), timeout=5)
    with conn:
        conn.sendall(f"GET {path} HTTP/1.1\r\nHost: router\r\n\r\n".encode())
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    code, _, body = _split(b"".join(chunks))
    assert code == 200, code
    return body


def live_scrape(ns: str) -> dict:
    out: dict = {}
    for f in text_string_to_metric_families(http_get(ns).decode()):
        for s in f.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


@pytest.fixture(scope="module", params=[1, 2], ids=["1worker", "2workers"])
def mtopo(request, tmp_path_factory):
    _require_root()
    from vecroute.io.netns import Lab
    from vecroute.lab import build, start_router

    workers = request.param
    with Lab(f"vm{workers}") as lab:
        t = build(lab, tmp_path_factory.mktemp("metrics"), workers=workers,
                  extra_config=f'\n[metrics]\nlisten = "127.0.0.1:{METRICS_PORT}"\n')
        if workers == 2:
            _check_port_in_use(t)
        start_router(t)
        t.workers = workers
        yield t
        if t.router and t.router.poll() is not None:
            print(t.log.read_text()[-3000:])


def _check_port_in_use(t) -> None:
    """A taken metrics port stops `vecroute run` with one line, exit 2, before it
    touches a port (the veth keeps its kernel settings)."""
    from vecroute.io.netns import entered

    with entered(t.rt):
        taken = bind_listener("127.0.0.1", METRICS_PORT)
    sysctl = f"/proc/sys/net/ipv6/conf/{t.ports[0]}/disable_ipv6"
    before = subprocess.run(["ip", "netns", "exec", t.rt, "cat", sysctl], capture_output=True,
                            text=True).stdout
    try:
        r = subprocess.run(["ip", "netns", "exec", t.rt, sys.executable, "-m", "vecroute.cli",
                            "run", str(t.config)], capture_output=True, text=True, timeout=60)
    finally:
        taken.close()
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        f"vecroute: [metrics] listen 127.0.0.1:{METRICS_PORT}: Address already in use")
    after = subprocess.run(["ip", "netns", "exec", t.rt, "cat", sysctl], capture_output=True,
                           text=True).stdout
    assert before == after
    assert "kernels ready" not in r.stderr  # it stopped before the (slow) start-up work


def _ping(t, dst: str, n: int) -> None:
    fam = ["-6"] if ":" in dst else []
    r = subprocess.run(["ip", "netns", "exec", t.h1, "ping", *fam, "-c", str(n), "-i", "0.01",
                        "-W", "2", "-q", dst], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest_netns
def test_live_metrics_agree_with_ctl_and_traffic(mtopo):
    from vecroute.lab import H2_V4

    t = mtopo
    _ping(t, H2_V4, 1)  # neighbours resolved
    ifs0 = {r["name"]: r for r in t.ctl("show", "interfaces")["data"]}
    errs0 = t.ctl("show", "errors", "all")["data"]
    m0 = live_scrape(t.rt)
    ifs1 = {r["name"]: r for r in t.ctl("show", "interfaces")["data"]}
    errs1 = t.ctl("show", "errors", "all")["data"]
    # between two ctl readings (background ND/ARP may move them meanwhile)
    for name in t.ports:
        for key in ("rx_packets", "tx_packets", "rx_bytes", "drops", "punts"):
            got = m0[f"vecroute_interface_{key}_total"][(("interface", name),)]
            assert ifs0[name][key] <= got <= ifs1[name][key], (name, key)
    for a, b in zip(errs0, errs1, strict=True):
        fam, lab = ("drops", "reason") if a["kind"] == "drop" else ("events", "event")
        got = m0[f"vecroute_{fam}_total"][tuple(sorted({lab: a["counter"],
                                                        "node": a["node"]}.items()))]
        assert a["count"] <= got <= b["count"], a["counter"]
    n = 20
    _ping(t, H2_V4, n)
    time.sleep(MH.CACHE_S)  # past the render cache
    m1 = live_scrape(t.rt)

    def grew(name: str, **labels) -> float:
        k = tuple(sorted(labels.items()))
        return m1[name][k] - m0[name][k]

    assert grew("vecroute_interface_rx_packets_total", interface=t.ports[0]) >= n
    assert grew("vecroute_interface_tx_packets_total", interface=t.ports[1]) >= n
    assert grew("vecroute_interface_rx_packets_total", interface=t.ports[1]) >= n  # replies
    assert grew("vecroute_node_packets_total", node="ip4-lookup") >= 2 * n
    assert grew("vecroute_events_total", event="fib-lookups", node="ip4-lookup") >= 2 * n
    ws = [str(k) for k in range(t.workers)]
    assert sorted(dict(k)["worker"] for k in m1["vecroute_worker_up"]) == ws
    assert all(v == 1 for v in m1["vecroute_worker_up"].values())
    assert all(0 <= v < 5 for v in m1["vecroute_worker_heartbeat_age_seconds"].values())
    assert sum(grew("vecroute_worker_packets_total", worker=w) for w in ws) >= 2 * n
    for name in t.ports:  # the per-worker shares add up to the router's series
        per = sum(m1["vecroute_worker_interface_rx_packets_total"][
            tuple(sorted({"worker": w, "interface": name}.items()))] for w in ws)
        assert per == m1["vecroute_interface_rx_packets_total"][(("interface", name),)]
    assert m1["vecroute_workers"][()] == t.workers
    v4 = {dict(k)["state"]: v for k, v in m1["vecroute_neighbors"].items()
          if dict(k)["family"] == "ipv4"}
    assert v4["reachable"] + v4["stale"] + v4["probe"] >= 2  # h1 and h2
    assert m1["vecroute_routes"][(("family", "ipv4"), ("table", "0"))] == sum(
        1 for r in t.ctl("show", "routes")["data"] if ":" not in r["prefix"])
    start = m1["process_start_time_seconds"][()]
    assert abs(m1["vecroute_start_time_seconds"][()] - start) < 120
    assert start <= time.time()


@pytest_netns
def test_live_slow_clients_do_not_stall_the_router(mtopo):
    """Every metrics connection slot held by a client that never finishes its request:
    forwarding and the control socket go on, a further scrape gets 503 at once."""
    from vecroute.io.netns import entered
    from vecroute.lab import H2_V4

    t = mtopo
    held = []
    try:
        with entered(t.rt):
            for _ in range(MH.MAX_CONNECTIONS):
                s = socket.create_connection(("127.0.0.1", METRICS_PORT), timeout=5)
                s.sendall(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
                held.append(s)
            time.sleep(0.2)
            extra = socket.create_connection(("127.0.0.1", METRICS_PORT), timeout=5)
        with extra:
            extra.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            assert extra.recv(100).startswith(b"HTTP/1.1 503")
        t0 = time.monotonic()
        assert t.ctl("show", "interfaces")["ok"]
        assert time.monotonic() - t0 < 1.0
        _ping(t, H2_V4, 5)
    finally:
        for s in held:
            s.close()
    time.sleep(0.2)
    with entered(t.rt):
        big = socket.create_connection(("127.0.0.1", METRICS_PORT), timeout=5)
    with big:  # a huge request: refused after 8 KiB, never buffered whole
        try:
            big.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * (1 << 20))
        except OSError:
            pass  # closed on us while we wrote: that is the point
    time.sleep(MH.CACHE_S)
    codes = live_scrape(t.rt)["vecroute_metrics_http_responses_total"]
    assert codes[(("code", "503"),)] >= 1 and codes[(("code", "431"),)] >= 1


@pytest_netns
def test_live_reload_counts_and_keeps_the_listener(mtopo):
    """A SIGHUP reload is counted (ok / failed); [metrics] is restart-only: a changed
    listen address is logged and the running listener stays."""
    import signal

    t = mtopo
    good = t.config.read_text()
    before = live_scrape(t.rt)["vecroute_config_reloads_total"]

    def reloads(result: str) -> float:
        return live_scrape(t.rt)["vecroute_config_reloads_total"][(("result", result),)]

    try:
        t.config.write_text(good.replace(f"127.0.0.1:{METRICS_PORT}", "127.0.0.1:9476"))
        os.kill(t.router.pid, signal.SIGHUP)
        deadline = time.monotonic() + 10
        while reloads("ok") == before[(("result", "ok"),)] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert reloads("ok") == before[(("result", "ok"),)] + 1
        assert "[metrics] changed" in t.log.read_text()
        t.config.write_text(good + "\n[bogus]\n")
        os.kill(t.router.pid, signal.SIGHUP)
        deadline = time.monotonic() + 10
        while reloads("failed") == before[(("result", "failed"),)] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert reloads("failed") == before[(("result", "failed"),)] + 1
    finally:
        t.config.write_text(good)
