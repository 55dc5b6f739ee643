"""`vecroute top`: the rate arithmetic (pure functions) and the live view under tmux.

The live test runs `vecroute top` in a detached tmux session of a fixed size against a
real `vecroute run` in network namespaces, drives pings through the router and reads the
screen with `tmux capture-pane`.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from vecroute.control.top import (
    Top,
    drop_rows,
    growth,
    interface_rows,
    parse_si,
    rates,
    run,
    runtime_rows,
    sample,
    si,
    worker_rows,
)

# -- the arithmetic ------------------------------------------------------------------------------


def _if(name: str, rx: int, rxb: int = 0, tx: int = 0, drops: int = 0) -> dict:
    return {"name": name, "rx_packets": rx, "rx_bytes": rxb, "tx_packets": tx,
            "tx_bytes": tx * 100, "drops": drops, "punts": 0}


def test_growth_reads_a_smaller_counter_as_a_reset():
    assert growth(150, 100) == 50
    assert growth(100, 100) == 0
    assert growth(7, 100) == 7  # cleared, then 7 more: never negative
    assert growth(0, 100) == 0


def test_rates_divide_by_the_measured_interval():
    prev = sample("interfaces", [_if("eth0", 100, 10_000)], 10.0)
    cur = sample("interfaces", [_if("eth0", 350, 60_000)], 12.5)
    r = rates(prev, cur, ("rx_packets", "rx_bytes"))
    assert r["eth0"] == {"rx_packets": 100.0, "rx_bytes": 20_000.0}
    row = interface_rows(prev, cur)[0]
    assert row["rx_pps"] == 100.0 and row["rx_bps"] == 160_000.0
    assert row["rx_packets"] == 350


def test_counter_reset_gives_no_negative_rate():
    prev = sample("interfaces", [_if("eth0", 1_000_000, 90_000_000, 5000, drops=40)], 0.0)
    cur = sample("interfaces", [_if("eth0", 20, 2000, 10, drops=0)], 1.0)  # clear counters
    row = interface_rows(prev, cur)[0]
    assert row["rx_pps"] == 20 and row["rx_bps"] == 16_000 and row["tx_pps"] == 10
    assert row["drops_ps"] == 0
    assert all(v is None or v >= 0 for v in row.values() if not isinstance(v, str))


def test_zero_or_backwards_interval_gives_no_rate():
    a = sample("interfaces", [_if("eth0", 1)], 5.0)
    b = sample("interfaces", [_if("eth0", 9)], 5.0)
    assert rates(a, b, ("rx_packets",)) == {"eth0": None}
    assert rates(b, sample("interfaces", [_if("eth0", 9)], 4.0), ("rx_packets",)) == {
        "eth0": None}
    assert interface_rows(a, b)[0]["rx_pps"] is None
    assert interface_rows(None, b)[0]["rx_pps"] is None  # the first sample


def test_new_interface_has_no_rate_until_its_second_sample():
    prev = sample("interfaces", [_if("eth0", 10)], 0.0)
    cur = sample("interfaces", [_if("eth0", 20), _if("eth9", 5000)], 1.0)
    rows = {r["name"]: r for r in interface_rows(prev, cur)}
    assert rows["eth0"]["rx_pps"] == 10
    assert rows["eth9"]["rx_pps"] is None  # its 5000 are not "5000 in the last second"
    nxt = sample("interfaces", [_if("eth0", 20), _if("eth9", 5100)], 2.0)
    assert {r["name"]: r["rx_pps"] for r in interface_rows(cur, nxt)} == {
        "eth0": 0.0, "eth9": 100.0}


def _err(name: str, count: int, kind: str = "drop") -> dict:
    return {"counter": name, "node": "ip4-lookup", "kind": kind, "count": count,
            "description": name}


def test_drop_rows_sorted_by_rate_and_new_counters_count_from_zero():
    # `show errors` leaves zero counters out: one that appears counted from zero
    prev = sample("drops", [_err("no-route", 100), _err("ttl-expired", 5)], 0.0)
    cur = sample("drops", [_err("no-route", 110), _err("ttl-expired", 5),
                           _err("ip4-bad-checksum", 40)], 2.0)
    rows = drop_rows(prev, cur)
    assert [(r["counter"], r["rate"]) for r in rows] == [
        ("ip4-bad-checksum", 20.0), ("no-route", 5.0), ("ttl-expired", 0.0)]


def _node(name: str, calls: int, vectors: int, clocks: int) -> dict:
    cpp = round(clocks / vectors, 2) if vectors else 0.0
    return {"node": name, "calls": calls, "vectors": vectors, "clocks": clocks,
            "vectors_per_call": round(vectors / calls, 2), "clocks_per_packet": cpp,
            "ns_per_packet": round(cpp / 2, 2)}  # a 2 GHz clock


def test_runtime_rows_are_per_interval_like_vpp_after_clear_runtime():
    # lifetime: 10 clocks/packet; the last second: 2000 packets in 10 calls at 100 each
    prev = sample("runtime", [_node("ip4-lookup", 1000, 1000, 10_000)], 0.0)
    cur = sample("runtime", [_node("ip4-lookup", 1010, 3000, 210_000),
                             _node("ip4-rewrite", 10, 2000, 40_000)], 1.0)
    rows = {r["node"]: r for r in runtime_rows(prev, cur)}
    lk = rows["ip4-lookup"]
    assert lk["vectors_ps"] == 2000 and lk["calls_ps"] == 10
    assert lk["vectors_per_call"] == 200 and lk["clocks_per_packet"] == 100
    assert lk["ns_per_packet"] == pytest.approx(50)
    assert rows["ip4-rewrite"]["clocks_per_packet"] == 20  # new: counted from zero
    idle = runtime_rows(cur, sample("runtime", list(cur.rows.values()), 2.0))
    assert idle[0]["vectors_ps"] == 0 and idle[0]["clocks_per_packet"] is None


def _worker(w: int, packets: int, batches: int) -> dict:
    return {"worker": w, "alive": True, "batches": batches, "packets": packets, "generated": 0,
            "sleeps": 3, "punted": 0, "entries": 1, "heartbeat_age_ms": 4, "punt_queue": 0,
            "inject_queue": 0, "error": ""}


def test_worker_rows_busiest_first():
    prev = sample("workers", [_worker(0, 100, 10), _worker(1, 100, 10)], 0.0)
    cur = sample("workers", [_worker(0, 150, 20), _worker(1, 900, 18)], 1.0)
    rows = worker_rows(prev, cur)
    assert [r["worker"] for r in rows] == [1, 0]
    assert rows[0]["packets_ps"] == 800 and rows[0]["packets_per_batch"] == 100


@pytest.mark.parametrize("x,text", [
    (None, "-"), (0, "0.0"), (12.34, "12.3"), (999.9, "999.9"), (999.96, "1.0k"),
    (12_345, "12.3k"), (1_500_000, "1.5M"), (2.5e9, "2.5G"),
])
def test_si(x, text):
    assert si(x) == text
    if x is not None:
        assert parse_si(text) == pytest.approx(x, rel=0.05, abs=0.05)


class FakeRouter:
    """Answers ctl requests from a counter the test advances; can be taken away."""

    def __init__(self) -> None:
        self.rx = 1000
        self.up = True
        self.cleared = 0

    def __call__(self, argv: list[str]) -> dict:
        if not self.up:
            raise ConnectionRefusedError(111, "Connection refused")
        if argv == ["clear", "counters"]:
            self.rx, self.cleared = 0, self.cleared + 1
            return {"ok": True, "data": {"cleared": True}}
        data = {
            "interfaces": [_if("eth0", self.rx, self.rx * 100)],
            "errors": [_err("no-route", self.rx // 10)],
            "runtime": [_node("ip4-lookup", max(1, self.rx // 100), max(1, self.rx),
                              50 * max(1, self.rx))],
            "workers": [_worker(0, self.rx, max(1, self.rx // 100))],
        }[argv[1]]
        return {"ok": True, "data": data}


def _text(top: Top) -> str:
    buf = io.StringIO()
    Console(file=buf, width=160, color_system=None).print(top.frame())
    return buf.getvalue()


def test_top_clear_and_router_outage_never_go_negative_or_raise():
    fake = FakeRouter()
    top = Top("/fake.sock", ask=fake)
    top.refresh()
    assert "rates from the next refresh" in _text(top)
    fake.rx += 500
    top.refresh()
    assert top.rows()[0]["rx_pps"] > 0
    top.clear()
    assert fake.cleared == 1 and "counters cleared" in top.note
    for view in ("interfaces", "drops", "runtime", "workers"):
        top.view = view
        for row in top.rows():
            assert all(v is None or v >= 0 for k, v in row.items()
                       if isinstance(v, float)), (view, row)
    fake.up = False
    top.refresh()
    text = _text(top)
    assert "cannot reach the router at /fake.sock: Connection refused" in text
    assert "retrying" in text and top.rows() == []
    fake.up = True
    top.refresh()
    assert not top.error and top.rows()[0]["packets_ps"] is None  # afresh, no outage average


def test_frame_cuts_the_table_to_the_screen_busiest_first():
    many = [_err(f"reason-{i:03}", 10 * i) for i in range(100)]
    top = Top("/fake.sock", view="drops")
    top.prev = {"drops": sample("drops", [_err(r["counter"], 0) for r in many], 0.0)}
    top.cur = {"drops": sample("drops", many, 1.0)}
    buf = io.StringIO()
    Console(file=buf, width=160, height=20, color_system=None).print(top.frame(20))
    lines = buf.getvalue().splitlines()
    assert len(lines) == 20 and "q  quit" in lines[-1]
    shown = [line.split()[0] for line in lines if line.startswith("reason-")]
    assert shown == [f"reason-{i:03}" for i in range(99, 85, -1)]  # 20 - 6 lines of rows


def test_once_without_a_router_is_one_line_and_exit_2(tmp_path, capsys):
    assert run(str(tmp_path / "none.sock"), interval=0.1, once=True) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot reach the router" in err


# -- live: a real router, `vecroute top` in tmux ---------------------------------------------------

SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.fixture(scope="module")
def topo(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.fail("live tests need root (network namespaces): run them as root, as CI does")
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed (make system-deps)")
    from vecroute.io.netns import Lab
    from vecroute.lab import build, start_router

    with Lab("vtop") as lab:
        t = build(lab, tmp_path_factory.mktemp("top"))
        start_router(t)
        yield t
        if t.router and t.router.poll() is not None:
            print(t.log.read_text()[-3000:])


class Tmux:
    """A private tmux server (its own socket) holding one detached session."""

    def __init__(self, workdir: Path) -> None:
        self.sock = str(workdir / "tmux.sock")
        self.dir = workdir
        self.rc = workdir / "top.rc"

    def __call__(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", self.sock, *args], capture_output=True,
                              text=True, timeout=10, check=True).stdout

    def start(self, argv: list[str]) -> None:
        """Run argv in a 160x50 pane; its exit status goes to ``rc``, and the terminal's
        settings before and after it to ``stty.before`` / ``stty.after``."""
        self.rc.unlink(missing_ok=True)
        cmd = " ".join(_quote(a) for a in argv)
        d = _quote(str(self.dir))
        self("new-session", "-d", "-s", "top", "-x", "160", "-y", "50",
             # pytest exports COLUMNS=80 LINES=24, which rich would take over the pane's size
             f"stty -g > {d}/stty.before; env -u COLUMNS -u LINES PYTHONPATH={_quote(SRC)} "
             f"{cmd}; rc=$?; stty -g > {d}/stty.after; echo $rc > {_quote(str(self.rc))}")

    def exit_status(self, timeout: float = 10) -> int:
        """Wait for the pane's command to end; its status (the terminal restored, too)."""
        deadline = time.monotonic() + timeout
        while not self.rc.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert self.rc.exists(), self.screen()
        before, after = ((self.dir / f"stty.{w}").read_text() for w in ("before", "after"))
        assert before.strip() and before == after, "the terminal's settings were not restored"
        return int(self.rc.read_text())

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "top")

    def wait_for(self, pred, what: str, timeout: float = 20) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if pred(text):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} on the screen within {timeout} s:\n{text}")
            time.sleep(0.2)

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.sock, "kill-server"], capture_output=True)


def _quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def _row(text: str, first: str) -> list[str] | None:
    for line in text.splitlines():
        words = line.split()
        if words and words[0] == first:
            return words
    return None


def _rx_pps(text: str, port: str) -> float:
    row = _row(text, port)
    return parse_si(row[1]) or 0.0 if row else 0.0


def test_top_live_under_tmux(topo, tmp_path):
    from vecroute.lab import H2_V4

    tm = Tmux(tmp_path)
    p0, p1 = topo.ports
    pinger = None
    try:
        tm.start([sys.executable, "-m", "vecroute.cli", "top", "--socket", topo.socket])
        tm.wait_for(lambda s: _row(s, p0) and _row(s, p1), "interfaces")
        # ~200 echo requests/s through the router for 3 s: rx on both ports (requests on
        # p0, replies on p1), 1028-byte frames (1000 bytes of payload)
        pinger = subprocess.Popen(
            ["ip", "netns", "exec", topo.h1, "ping", "-q", "-i", "0.005", "-c", "600",
             "-s", "986", H2_V4], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        text = tm.wait_for(lambda s: _rx_pps(s, p0) > 50 and _rx_pps(s, p1) > 50,
                           "rx rates on both ports")
        for port in (p0, p1):
            row = _row(text, port)
            pps, bps, tx_pps = parse_si(row[1]), parse_si(row[2]), parse_si(row[3])
            assert 50 < pps < 400, row  # ping -i 0.005: at most 200/s
            assert bps == pytest.approx(pps * 1028 * 8, rel=0.15), row
            assert 50 < tx_pps < 400, row  # each request out one way, each reply the other

        tm("send-keys", "-t", "top", "r")
        tm.wait_for(lambda s: "view: runtime" in s and "ip4-lookup" in s
                    and (_row(s, "ip4-lookup") or ["", "-"])[2] not in ("-", "0.0"),
                    "runtime view with ip4-lookup busy")
        tm("send-keys", "-t", "top", "w")
        tm.wait_for(lambda s: "view: workers" in s and _row(s, "0") is not None,
                    "workers view with worker 0")
        # something that drops: no route to 192.0.2.99 (the router answers unreachable)
        subprocess.run(["ip", "netns", "exec", topo.h1, "ping", "-c", "3", "-i", "0.2",
                        "-W", "1", "192.0.2.99"], capture_output=True, timeout=30)
        tm("send-keys", "-t", "top", "d")
        tm.wait_for(lambda s: "view: drops" in s and _row(s, "no-route") is not None,
                    "drops view with no-route")
        assert pinger.wait(timeout=30) == 0, pinger.stdout.read().decode()
        pinger = None

        tm("send-keys", "-t", "top", "i")
        tm.wait_for(lambda s: "view: interfaces" in s, "interfaces view")
        tm("send-keys", "-t", "top", "c")
        tm.wait_for(lambda s: "counters cleared" in s, "the clear")
        rows = json.loads(subprocess.run(
            [sys.executable, "-m", "vecroute.cli", "ctl", "--socket", topo.socket, "--json",
             "show", "interfaces"], capture_output=True, text=True, timeout=30,
            env={**os.environ, "PYTHONPATH": SRC}, check=True).stdout)
        assert all(r["rx_packets"] < 20 and r["tx_packets"] < 20 for r in rows), rows
        # the totals on screen went to ~0 too, and no rate went negative
        text = tm.wait_for(lambda s: (_row(s, p0) or [""] * 8)[7].isdigit()
                           and int(_row(s, p0)[7]) < 20, "cleared totals")
        assert not re.search(r"\s-\d", text), text

        tm("send-keys", "-t", "top", "q")
        assert tm.exit_status() == 0

        # a frame for scripts
        once = subprocess.run(
            [sys.executable, "-m", "vecroute.cli", "top", "--socket", topo.socket, "--once",
             "--interval", "0.3", "--view", "workers"], capture_output=True, text=True,
            timeout=30, env={**os.environ, "PYTHONPATH": SRC})
        assert once.returncode == 0 and once.stderr == "", once.stderr
        assert "view: workers" in once.stdout and _row(once.stdout, "0")[1] == "yes", once.stdout

        # Ctrl-C quits cleanly too; so does a router that is gone (shown, retried)
        topo.router.terminate()
        topo.router.wait(timeout=30)
        tm.start([sys.executable, "-m", "vecroute.cli", "top", "--socket", topo.socket])
        tm.wait_for(lambda s: "cannot reach the router" in s and "retrying" in s,
                    "the router's absence")
        tm("send-keys", "-t", "top", "C-c")
        assert tm.exit_status() == 0
    finally:
        if pinger is not None and pinger.poll() is None:
            pinger.kill()
        tm.close()
