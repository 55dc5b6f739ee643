"""The live router's lifecycle: its ports are given back on every way out (issue 12).

Each test starts ``vecroute run`` in a namespace of its own, on two veth ports, the first
one with a dotted name (``p0.100``, as VLAN devices are named). Before a start the ports
get settings of their own (``arp_ignore=2``, ``forwarding=1`` and IPv6 on, on p0.100;
another program's clsact qdisc and filters, and the link down, on p1 in the first test);
after the router is gone they must be exactly as before: the sysctls, the link state, the
qdiscs and every filter.

* a normal stop (SIGTERM): the dotted port got its sysctls while the router ran, the
  foreign tc filters were never touched;
* a start that fails with exit 2 (a route error; the control socket in use: after the
  ports were prepared);
* SIGKILL, then the next start takes the killed run's record over (and removes the
  records of namespaces that no longer exist);
* a second router on the same port: refused in one line, exit 2, the first one unharmed;
* SIGTERM during start-up (a test hook slows the start after the ports are prepared);
* SIGTERM under a flood of ARP requests for the router: out within STOP_LIMIT_S, and
  SIGINT/SIGTERM repeated while it stops do not abort the cleanup;
* a worker that dies (a test hook makes its loop raise): exit 1.

Hooks are ``python -c`` wrappers around the command line (no test code in the router).
Only documentation addresses, in namespaces this file creates.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from vecroute.control.server import request
from vecroute.io.netns import Lab, entered, ip
from vecroute.lab import RT0_V4, router_config

pytestmark = pytest.mark.netns

PORTS = ("p0.100", "p1")
SYSCTLS = (("ipv4", "arp_ignore"), ("ipv4", "forwarding"), ("ipv6", "disable_ipv6"))
START_TIMEOUT_S = 120.0  # the numba cache loads in ~2 s; compiling it is minutes
STOP_LIMIT_S = 5.0  # SIGTERM to exit, even under a punt flood
OUR_PREF = 0xFFFF  # vecroute's ingress drop (vecroute.control.ports.DROP_PREF)
STATE_DIR = Path("/run/vecroute/ports")  # vecroute.control.ports.STATE_DIR

SLOW_START = """
import time, vecroute.control.router as R
_W = R.DataPlaneWorker
def slow_worker(*a, **k):  # the ports are prepared by now: linger here
    time.sleep(float(__import__("os").environ["VR_TEST_SLEEP"]))
    return _W(*a, **k)
R.DataPlaneWorker = slow_worker
"""
DYING_WORKER = """
import os, vecroute.io.worker as W
_run_once = W.DataPlaneWorker.run_once
def run_once(self):
    if os.path.exists(os.environ["VR_TEST_TRIGGER"]):
        raise RuntimeError("test hook: the worker breaks")
    return _run_once(self)
W.DataPlaneWorker.run_once = run_once
"""


def _require_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("live tests need root (network namespaces): run them as root, as CI does")


@dataclass
class Rig:
    lab: Lab
    rt: str
    h: str
    h_ifs: tuple[str, str]
    workdir: Path
    config: Path
    socket: str

    def sh(self, cmd: str, check: bool = True) -> str:
        return self.lab.run(self.rt, ["sh", "-c", cmd], check=check)


@pytest.fixture
def rig(tmp_path):
    _require_root()
    with Lab("vp") as lab:
        rt, h = lab.netns("rt"), lab.netns("h")
        h_ifs = (lab.name("h"), lab.name("h"))
        for port, peer in zip(PORTS, h_ifs, strict=True):
            ip("link", "add", port, "netns", rt, "type", "veth", "peer", "name", peer,
               "netns", h)
            ip("link", "set", port, "up", ns=rt)
            ip("link", "set", peer, "up", ns=h)
        r = Rig(lab, rt, h, h_ifs, tmp_path, tmp_path / "router.toml",
                str(tmp_path / "vecroute.sock"))
        r.config.write_text(router_config(list(PORTS), r.socket))
        # settings of the port's own, to be found again after the router
        p0 = PORTS[0]
        r.sh(f"echo 2 > /proc/sys/net/ipv4/conf/{p0}/arp_ignore; "
             f"echo 1 > /proc/sys/net/ipv4/conf/{p0}/forwarding; "
             f"echo 0 > /proc/sys/net/ipv6/conf/{p0}/disable_ipv6; "
             f"echo 0 > /proc/sys/net/ipv6/conf/{PORTS[1]}/disable_ipv6")
        yield r


def snapshot(r: Rig) -> dict:
    """Everything of the ports' kernel state that vecroute may change."""
    out: dict = {}
    for p in PORTS:
        out[p] = {
            "sysctls": {f"{f}.{k}": r.sh(f"cat /proc/sys/net/{f}/conf/{p}/{k}").strip()
                        for f, k in SYSCTLS},
            "up": int(r.sh(f"cat /sys/class/net/{p}/flags"), 16) & 1,
            "qdiscs": sorted(q["kind"] for q in json.loads(r.sh(f"tc -j qdisc show dev {p}"))),
            "ingress": json.loads(r.sh(f"tc -j filter show dev {p} ingress")),
            "egress": json.loads(r.sh(f"tc -j filter show dev {p} egress")),
        }
    return out


def ours(state: dict, port: str) -> bool:
    """vecroute's ingress drop is on the port."""
    return any(f.get("pref") == OUR_PREF for f in state[port]["ingress"])


def start(r: Rig, hook: str = "", config: Path | None = None, wait: bool = True,
          env: dict | None = None, tag: str = "router") -> subprocess.Popen:
    """`vecroute run` in the router's namespace (through a ``python -c`` hook if given);
    with ``wait``, until it answers ctl."""
    cfg = str(config or r.config)
    log = open(r.workdir / f"{tag}.log", "wb")  # noqa: SIM115 - closed with the process
    argv = [sys.executable, "-c", f"{hook}\nfrom vecroute.cli import main\nmain(['run', {cfg!r}])"]
    # a session of its own, as a router started from a terminal has its process group:
    # a "Ctrl-C" (SIGINT to the group) reaches it and the commands it runs, not pytest
    proc = r.lab.popen(r.rt, argv, stdout=log, stderr=subprocess.STDOUT,
                       env={**os.environ, **(env or {})}, start_new_session=True)
    proc.log = r.workdir / f"{tag}.log"  # type: ignore[attr-defined]
    if not wait:
        return proc
    sock = config_socket(cfg)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"vecroute run exited {proc.returncode}: {logtext(proc)}")
        try:
            if request(sock, ["show", "interfaces"], timeout=5).get("ok"):
                return proc
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    pytest.fail(f"vecroute did not start within {START_TIMEOUT_S} s: {logtext(proc)}")


def config_socket(cfg: str) -> str:
    import tomllib

    return tomllib.loads(Path(cfg).read_text())["control"]["socket"]


def logtext(proc: subprocess.Popen) -> str:
    return proc.log.read_text()[-3000:]  # type: ignore[attr-defined]


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> int:
    proc.send_signal(sig)
    return wait_exit(proc)


def wait_exit(proc: subprocess.Popen, limit: float = STOP_LIMIT_S) -> int:
    try:
        return proc.wait(limit)
    except subprocess.TimeoutExpired:
        pytest.fail(f"vecroute still running {limit} s later: {logtext(proc)}")


def with_socket(r: Rig, name: str) -> Path:
    """A copy of the config with another control socket (a second router)."""
    cfg = r.workdir / f"{name}.toml"
    cfg.write_text(r.config.read_text().replace(r.socket, str(r.workdir / f"{name}.sock")))
    return cfg


# -- the tests ---------------------------------------------------------------------------------


def test_normal_stop_gives_ports_back_and_foreign_filters_stay(rig):
    p0, p1 = PORTS
    # another program's clsact filters (classic BPF, "no match": they pass everything on)
    rig.sh(f"tc qdisc add dev {p1} clsact && "
           f"tc filter add dev {p1} ingress pref 5 handle 5 bpf bytecode '1,6 0 0 0,' && "
           f"tc filter add dev {p1} egress pref 6 handle 6 bpf bytecode '1,6 0 0 0,' && "
           f"ip link set {p1} down && ip addr add 2001:db8:1::99/64 dev {p0} nodad")
    before = snapshot(rig)
    router = start(rig)
    running = snapshot(rig)
    # the dotted name got its sysctls (/proc/sys/net/ipv4/conf/p0.100/..., dots kept)
    assert running[p0]["sysctls"] == {"ipv4.arp_ignore": "8", "ipv4.forwarding": "0",
                                      "ipv6.disable_ipv6": "1"}, running[p0]
    assert running[p1]["sysctls"]["ipv4.arp_ignore"] == "8"
    assert running[p1]["up"] == 1
    assert ours(running, p0) and ours(running, p1), running
    foreign = [f for f in running[p1]["ingress"] if f.get("pref") == 5]
    assert foreign == [f for f in before[p1]["ingress"]], running[p1]  # untouched
    assert running[p1]["egress"] == before[p1]["egress"]
    assert stop(router) == 0, logtext(router)
    assert snapshot(rig) == before, logtext(router)
    assert "2001:db8:1::99/64" in logtext(router)  # its removal was announced


def test_failed_start_leaves_ports_as_they_were(rig):
    before = snapshot(rig)
    # a route error: found before the ports are touched
    bad = rig.workdir / "bad.toml"
    bad.write_text(rig.config.read_text()
                   + '\n[[routes]]\nprefix = "192.0.2.0/24"\nvia = "192.0.2.99"\n')
    p = start(rig, config=bad, wait=False, tag="bad")
    assert wait_exit(p, START_TIMEOUT_S) == 2, logtext(p)
    assert "192.0.2.99" in logtext(p)
    assert snapshot(rig) == before, logtext(p)
    # the control socket is taken (by a listener here): found after the ports were prepared
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as lsn:
        lsn.bind(rig.socket)
        lsn.listen(1)
        p = start(rig, wait=False, tag="busy")
        assert wait_exit(p, START_TIMEOUT_S) == 2, logtext(p)
    assert "another vecroute is listening" in logtext(p)
    assert snapshot(rig) == before, logtext(p)


def test_killed_run_is_cleaned_up_by_the_next_start(rig):
    p0, p1 = PORTS
    before = snapshot(rig)
    first = start(rig, tag="first")
    first.kill()
    first.wait(10)
    left = snapshot(rig)
    assert left[p1]["sysctls"]["ipv4.arp_ignore"] == "8" and ours(left, p1)  # SIGKILL
    # the files of a namespace that is gone (nsfs inodes start at 0xf0000000: 1 is none)
    ghosts = [STATE_DIR / f"1-ghost.{ext}" for ext in ("json", "lock")]
    for g in ghosts:
        g.write_text("{}")
    second = start(rig, tag="second")
    assert "did not restore this port" in logtext(second)
    assert not any(g.exists() for g in ghosts)
    assert stop(second) == 0, logtext(second)
    assert snapshot(rig) == before, logtext(second)


def test_second_router_on_a_port_is_refused(rig):
    first = start(rig, tag="first")
    running = snapshot(rig)
    other = start(rig, config=with_socket(rig, "other"), wait=False, tag="other")
    try:
        rc = other.wait(30)
    except subprocess.TimeoutExpired:
        other.kill()
        pytest.fail(f"a second router runs on the same ports: {logtext(other)}")
    lines = logtext(other).splitlines()
    assert rc == 2 and len(lines) == 1 and "in use by another vecroute" in lines[0], lines
    assert PORTS[0] in lines[0] and f"pid {first.pid}" in lines[0], lines
    assert snapshot(rig) == running  # the first router's ports are still its own
    assert request(rig.socket, ["show", "interfaces"]).get("ok")
    assert stop(first) == 0


def test_sigterm_during_startup_restores_ports(rig):
    p1 = PORTS[1]
    before = snapshot(rig)
    p = start(rig, hook=SLOW_START, wait=False, env={"VR_TEST_SLEEP": "30"})
    deadline = time.monotonic() + START_TIMEOUT_S
    while snapshot(rig)[p1]["sysctls"]["ipv4.arp_ignore"] != "8":  # ports prepared
        assert p.poll() is None and time.monotonic() < deadline, logtext(p)
        time.sleep(0.05)
    assert stop(p) == 0, logtext(p)
    assert snapshot(rig) == before, logtext(p)


def _arp_flood(r: Rig, stop_flag: threading.Event) -> None:
    """ARP requests for the router's address from ever new hosts of its subnet."""
    rnd = random.Random(12)
    frames = []
    for _ in range(2000):
        mac = bytes([0x02, *rnd.randbytes(5)])
        spa = bytes([198, 51, 100, rnd.randrange(2, 250)])
        frames.append(b"\xff" * 6 + mac + b"\x08\x06"
                      + struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + mac + spa + b"\0" * 6
                      + socket.inet_aton(RT0_V4))
    with entered(r.h):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        s.bind((r.h_ifs[0], 0))
    with s:
        while not stop_flag.is_set():
            for f in frames:
                try:
                    s.send(f)
                except OSError:
                    pass


def test_sigterm_under_punt_flood_exits_in_time_and_second_signal_is_harmless(rig):
    before = snapshot(rig)
    router = start(rig)
    stop_flag = threading.Event()
    flood = threading.Thread(target=_arp_flood, args=(rig, stop_flag), daemon=True)
    flood.start()
    try:
        time.sleep(1.5)
        errs = {x["counter"]: x["count"] for x in request(rig.socket, ["show", "errors"])["data"]}
        assert errs.get("arp-punt", 0) > 100, errs  # the control plane is busy
        t0 = time.monotonic()
        router.send_signal(signal.SIGTERM)
        time.sleep(0.05)
        while router.poll() is None and time.monotonic() - t0 < STOP_LIMIT_S:
            with contextlib.suppress(ProcessLookupError):  # Ctrl-C again and again: the
                os.killpg(router.pid, signal.SIGINT)  # group, the ip and tc it runs too
                router.send_signal(signal.SIGTERM)
            time.sleep(0.01)
        rc = wait_exit(router, 0.5)
        took = time.monotonic() - t0
    finally:
        stop_flag.set()
        flood.join(10)
    assert rc == 0, logtext(router)
    assert took < STOP_LIMIT_S
    assert snapshot(rig) == before, logtext(router)


def test_dead_worker_stops_router_with_failure(rig):
    before = snapshot(rig)
    trigger = rig.workdir / "break-worker"
    router = start(rig, hook=DYING_WORKER, env={"VR_TEST_TRIGGER": str(trigger)})
    trigger.touch()
    # the loop comes back to Python when the control plane asks it something
    with contextlib.suppress(OSError, ValueError):
        request(rig.socket, ["clear", "counters"], timeout=5)
    rc = wait_exit(router, 10)
    assert rc == 1, logtext(router)
    assert "worker 0 exited" in logtext(router)
    assert snapshot(rig) == before, logtext(router)
