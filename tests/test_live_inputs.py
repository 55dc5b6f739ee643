"""Bad inputs to a live `vecroute run` (issue 12, findings 4 and 9): a reload of a bad file
of any kind keeps the running state and logs one line; [icmp] takes effect on reload; the
control socket path is never taken from something that is not a stale socket."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from vecroute.io.netns import Lab
from vecroute.lab import H2_V4, RT0_V4, build, start_router

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def topo(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.fail("live tests need root (network namespaces): run them as root, as CI does")
    with Lab("vi") as lab:
        t = build(lab, tmp_path_factory.mktemp("inputs"))
        t.good = t.config.read_text()
        start_router(t)
        yield t
        if t.router and t.router.poll() is not None:
            print(t.log.read_text()[-3000:])


def ping(t, dst: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", t.h1, "ping", *args, dst],
                          capture_output=True, text=True, timeout=60)


def reload(t, marker: str, timeout: float = 20.0) -> list[str]:
    """SIGHUP, then the log lines from then on once one contains ``marker``."""
    start = len(t.log.read_bytes())
    os.kill(t.router.pid, signal.SIGHUP)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = t.log.read_bytes()[start:].decode(errors="replace").splitlines()
        if any(marker in line for line in new):
            return new
        time.sleep(0.1)
    raise AssertionError(f"no {marker!r} in the log: {t.log.read_text()[-2000:]}")


FW = '\n[firewall]\ndefault = "allow"\n'
BAD = [
    ("not-utf8", lambda good: good.encode() + b"# caf\xe9\n", "not UTF-8"),
    ("nesting", lambda good: b"a = " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested too deep"),
    ("huge-int", lambda good: (good + "[icmp]\nrate = " + "9" * 5000 + "\n").encode(),
     "invalid TOML"),
    ("rule-number", lambda good: (good + FW + 'rules = ["\u00b2 allow ip from any to any"]\n'
                                  ).encode(), "firewall.rules[0]"),
    ("localsids", lambda good: (good + "[srv6]\nlocalsids = 5\n").encode(), "srv6.localsids"),
    ("policy-v4-segment", lambda good: (
        good + '[srv6]\nencap_source = "2001:db8:2::1"\n[[srv6.policies]]\n'
        'bsid = "2001:db8:b::1"\nsegments = ["192.0.2.7"]\n').encode(),
     "srv6.policies[0].segments"),
]


@pytest.mark.parametrize("name,make,problem", BAD, ids=[b[0] for b in BAD])
def test_bad_reload_keeps_the_running_state_and_logs_one_line(topo, name, make, problem):
    before = topo.ctl("show", "routes")["data"]
    topo.config.write_bytes(make(topo.good))
    try:
        lines = reload(topo, "reload failed")
    finally:
        topo.config.write_text(topo.good)
    failed = [x for x in lines if "reload failed" in x]
    assert len(failed) == 1 and problem in failed[0] and str(topo.config) in failed[0], lines
    assert "Traceback" not in "\n".join(lines), lines
    assert topo.router.poll() is None
    assert topo.ctl("show", "routes")["data"] == before
    assert ping(topo, H2_V4, "-c", "1", "-W", "3").returncode == 0


def test_config_replaced_by_a_fifo_does_not_hang_the_reload(topo):
    topo.config.unlink()
    os.mkfifo(topo.config)
    try:
        lines = reload(topo, "reload failed")
    finally:
        topo.config.unlink()
        topo.config.write_text(topo.good)
    assert any("not a regular file" in x for x in lines), lines
    assert any("reloaded" in x for x in reload(topo, "reloaded"))  # reloads go on


def test_icmp_section_takes_effect_on_reload(topo):
    def ttl_exceeded() -> bool:
        r = ping(topo, H2_V4, "-c", "1", "-t", "1", "-W", "2")
        return f"From {RT0_V4}" in r.stdout and "Time to live exceeded" in r.stdout

    def limited() -> int:
        rows = topo.ctl("show", "errors")["data"]
        return sum(r["count"] for r in rows if r["counter"] == "icmp-rate-limited")

    assert ttl_exceeded()
    topo.config.write_text(topo.good + "\n[icmp]\nrate = 0\nburst = 0\n")
    try:
        reload(topo, "reloaded")
        n = limited()
        assert not ttl_exceeded()
        assert limited() == n + 1
    finally:
        topo.config.write_text(topo.good)
        reload(topo, "reloaded")
    time.sleep(0.1)  # a token again (rate 1000/s)
    assert ttl_exceeded()


def test_socket_path_that_is_not_a_socket_is_refused(topo, tmp_path):
    """A file, a directory or a live router's socket at the socket path: exit 2 with one
    line, and the thing there is untouched (a regular file used to be deleted)."""
    ns = topo.lab.netns("solo")  # its own loopback: nothing shared with the topology
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me\n")
    (tmp_path / "adir").mkdir()
    for path, problem in [(victim, "not a socket"), (tmp_path / "adir", "a directory"),
                          (topo.socket, "another vecroute is listening")]:
        cfg = tmp_path / "solo.toml"
        cfg.write_text(f'[control]\nsocket = "{path}"\n[[interfaces]]\nname = "lo"\n'
                       'addresses = ["192.0.2.1/24"]\n')
        p = topo.lab.popen(ns, [sys.executable, "-m", "vecroute.cli", "run", str(cfg)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            _, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            raise AssertionError(f"{path}: the router started instead of refusing") from None
        err = err.decode()
        assert p.returncode == 2 and err.count("\n") == 1 and problem in err, err
        assert "Traceback" not in err
    assert victim.read_text() == "keep me\n"
    assert (tmp_path / "adir").is_dir()
    assert topo.ctl("show", "interfaces")["ok"]  # the live one is untouched
