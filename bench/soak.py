"""Soak: a live router with two workers under mixed traffic while a driver disturbs it.

`python -m bench.soak --seconds 3600` by hand (root); tests/test_soak.py runs a short one.
Between two Linux hosts in network namespaces (vecroute.lab), h1 sends UDP over IPv4 and
IPv6 to h2 (sizes 18..1400 bytes, every payload derived from its sequence number) and
pings; meanwhile a driver, round after round:

* churns routes through ``ctl route add`` / ``route del``;
* adds a static neighbour with ``ctl neighbor add`` and reloads the unchanged file with
  SIGHUP (issue 12 finding 1: this once looped re-injections forever);
* adds and deletes firewall rules (``ctl fw add`` / ``fw delete``);
* runs hostile control clients: garbage, a 1 MiB line, nested JSON, a client that never
  finishes its request, more connections than the server takes;
* floods the router with NS and ARP requests from new sources (finding 2);
* once, halfway, kills a worker (a ``python -c`` wrapper around ``vecroute run`` makes
  worker 1's loop raise when a trigger file appears; no test code in the router): the
  router must exit 1 promptly with its ports given back, and is started again, as
  systemd's ``Restart=on-failure`` would (vecroute supervises by exiting non-zero; it does
  not restart a worker thread itself).

It reports, and the test asserts: the router never stopped but for the killed worker;
its memory stayed bounded;
the neighbour table stayed within its limits; the data path's counters add up (every
packet that entered a worker — received or injected — was forwarded, answered, dropped
by a counted reason or punted); no packet arrived corrupted (every payload checked, one
in SAMPLE parsed by scapy with its checksums recomputed); h2 kept receiving (no gap
longer than MAX_GAP_S); and the ports were left as found.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.flood import neighbor_flood_frames
from vecroute.config_types import NeighborSettings
from vecroute.io.netns import Lab, entered
from vecroute.lab import H2_V4, H2_V6, build, start_router

PORT = 9999
SAMPLE = 25  # one received packet in SAMPLE is parsed by scapy
MAX_GAP_S = 3.0  # h2 receives something at least this often
UDP_PPS = 1500
ETH_P_ALL = 0x0003
FIREWALL = """
[firewall]
default = "allow"
rules = ["100 allow ip from any to any"]
"""
KILL_HOOK = """
import os
from vecroute.io import worker as W
_run_once = W.DataPlaneWorker.run_once
def run_once(self):
    if self.index == 1 and os.path.exists(os.environ["VR_SOAK_TRIGGER"]):
        raise RuntimeError("soak: worker 1 killed")
    return _run_once(self)
W.DataPlaneWorker.run_once = run_once
from vecroute.cli import main
"""
PORT_SYSCTLS = ("ipv4/conf/{}/arp_ignore", "ipv4/conf/{}/forwarding", "ipv6/conf/{}/disable_ipv6")


@dataclass
class Report:
    seconds: float = 0.0
    router_alive: bool = False
    exit_status: int | None = None
    rss_start_mb: float = 0.0  # of the router running at the end, after its warm-up
    rss_max_mb: float = 0.0
    rss_end_mb: float = 0.0
    rss_samples: list = field(default_factory=list)  # (seconds, MB), one per round
    worker_killed: bool = False
    kill_exit_status: int | None = None
    kill_exit_s: float = 0.0
    ports_restored_after_kill: bool = False
    restart_s: float = 0.0
    udp_sent: int = 0
    udp_received: int = 0
    corrupted: int = 0
    scapy_checked: int = 0
    max_gap_s: float = 0.0
    rounds: int = 0
    reloads: int = 0
    routes_churned: int = 0
    fw_changes: int = 0
    hostile_clients: int = 0
    flood_frames: int = 0
    neighbor_entries_max: int = 0
    neighbor_limit: int = 0
    accounting: dict = field(default_factory=dict)
    accounting_ok: bool = False
    ports_restored: bool = False
    port_diff: dict = field(default_factory=dict)
    errors: list = field(default_factory=list)


def _payload(seq: int, size: int) -> bytes:
    body = random.Random(seq).randbytes(max(size - 8, 0))
    return struct.pack("!II", seq, size) + body


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _port_state(ns: str, ports: list[str]) -> dict:
    """The sysctls and tc qdiscs vecroute may touch on its ports, read in its namespace."""
    out = {}
    with entered(ns):
        for p in ports:
            for s in PORT_SYSCTLS:
                path = Path("/proc/sys/net", s.format(p))
                out[str(path)] = path.read_text().strip() if path.exists() else None
    for p in ports:
        out[f"tc {p}"] = subprocess.run(
            ["ip", "netns", "exec", ns, "tc", "filter", "show", "dev", p, "ingress"],
            capture_output=True, text=True, check=False,
        ).stdout.strip()
    return out


class Traffic:
    """UDP from h1 to h2 (both families), checked as it arrives."""

    def __init__(self, t, stop: threading.Event) -> None:
        self.t, self.stop = t, stop
        self.sent = self.received = self.corrupted = self.checked = 0
        self.last_rx = time.monotonic()
        self.max_gap = 0.0
        self.paused = False  # while the router restarts: gaps are not counted
        self.errors: list[str] = []
        with entered(t.h2):
            self.rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            self.rx.bind((t.h2_if, 0))
            self.rx.settimeout(0.2)
            self.sinks = []
            for fam, addr in ((socket.AF_INET, H2_V4), (socket.AF_INET6, H2_V6)):
                s = socket.socket(fam, socket.SOCK_DGRAM)
                s.bind((addr, PORT))
                s.setblocking(False)
                self.sinks.append(s)
        with entered(t.h1):
            self.tx4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.tx6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)

    def send_loop(self) -> None:
        rng = random.Random(1)
        seq = 0
        period = 1.0 / UDP_PPS
        nxt = time.monotonic()
        while not self.stop.is_set():
            if self.paused:  # the router restarts: what is sent now is lost, not counted
                time.sleep(0.05)
                nxt = time.monotonic()
                continue
            size = rng.choice((18, 64, 200, 512, 1000, 1400))
            v6 = seq % 2 == 1
            try:
                if v6:
                    self.tx6.sendto(_payload(seq, size), (H2_V6, PORT))
                else:
                    self.tx4.sendto(_payload(seq, size), (H2_V4, PORT))
                self.sent += 1
            except OSError:
                pass  # neighbour not yet resolved by h1's kernel, buffer full: not ours
            seq += 1
            nxt += period
            delay = nxt - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                nxt = time.monotonic()

    def receive_loop(self) -> None:
        from scapy.all import IP, UDP, Ether, IPv6

        k = 0
        while not self.stop.is_set() or k == 0:
            for s in self.sinks:  # keep the sinks' queues empty
                try:
                    while True:
                        s.recv(4096)
                except OSError:
                    pass
            try:
                frame = self.rx.recv(65535)
            except TimeoutError:
                self._gap()
                if self.stop.is_set():
                    return
                continue
            et = int.from_bytes(frame[12:14], "big")
            if et == 0x0800 and frame[23] == 17:
                l4 = 14 + (frame[14] & 15) * 4
            elif et == 0x86DD and frame[20] == 17:
                l4 = 14 + 40
            else:
                continue
            if int.from_bytes(frame[l4 + 2 : l4 + 4], "big") != PORT:
                continue
            self._gap()
            self.received += 1
            data = frame[l4 + 8 :]
            seq, size = struct.unpack("!II", data[:8]) if len(data) >= 8 else (0, -1)
            if data != _payload(seq, size):
                self.corrupted += 1
                self.errors.append(f"payload of seq {seq} corrupted")
            k += 1
            if k % SAMPLE == 0:
                self.checked += 1
                p = Ether(frame)
                ip = p[IP] if IP in p else p[IPv6]
                ttl = ip.ttl if IP in p else ip.hlim
                sums_ok = True
                if IP in p:
                    want = ip.chksum
                    del ip.chksum
                    sums_ok &= IP(bytes(ip)).chksum == want
                want = p[UDP].chksum
                u = p[UDP]
                del u.chksum
                again = Ether(bytes(p))
                sums_ok &= again[UDP].chksum == want
                if not sums_ok or ttl != 63:
                    self.corrupted += 1
                    self.errors.append(f"seq {seq}: checksums ok {sums_ok}, ttl {ttl}")
            self.last_rx = time.monotonic()

    def _gap(self) -> None:
        if self.paused:
            self.last_rx = time.monotonic()
        self.max_gap = max(self.max_gap, time.monotonic() - self.last_rx)


def _ctl(t, *words: str) -> dict:
    """A driver's ctl command: retried while the server says busy (the hostile crowd of
    the round before may still hold its connections); any other error is a finding."""
    deadline = time.monotonic() + 10
    while True:
        try:
            r = t.ctl(*words)
        except BlockingIOError:  # the listen backlog is full: the same "busy"
            r = {"ok": False, "error": "busy: backlog full"}
        if r.get("ok"):
            return r
        if not str(r.get("error", "")).startswith("busy") or time.monotonic() > deadline:
            raise RuntimeError(f"ctl {' '.join(words)}: {r.get('error')}")
        time.sleep(0.05)


def _hostile_clients(path: str) -> int:
    """Clients that misbehave on the control socket; each must end in one error (or a
    closed connection), never in a stopped router. Returns how many ran."""
    def raw(data: bytes, read: bool = True) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(10)
            for _ in range(100):  # a backlog still full of the last round's crowd: wait
                try:
                    s.connect(path)
                    break
                except BlockingIOError:
                    time.sleep(0.02)
            try:
                s.sendall(data)
                if read:
                    s.recv(65536)
            except OSError:
                pass

    n = 0
    for data in (b"\xff\xfe garbage\n", b"[" * 60000 + b"\n", b"x" * (1 << 20) + b"\n",
                 b'{"argv": ["route", "add", "10.0.0.0/8", "via", "1.2.3.4", "weight", "0"]}\n',
                 b'{"argv": [' + b'"show",' * 5000 + b'"routes"]}\n', b'{"argv": 5}\n'):
        raw(data)
        n += 1
    slow = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # never finishes its request
    slow.connect(path)
    slow.sendall(b'{"argv": ["show", ')
    many = []
    for _ in range(200):  # more than the server takes at once
        try:
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect(path)
            many.append(c)
        except OSError:
            break
    for c in many:
        c.close()
    slow.close()
    return n + 2


def _flood(t, count: int, rng: random.Random) -> int:
    """``count`` NS and as many ARP requests for the router from new sources on h1's link
    (bench.flood: never h1's address, whose entry a spoofed MAC would break), as fast as a
    packet socket in h1's namespace takes them."""
    frames = neighbor_flood_frames(count, count, rng.randrange(1 << 30))
    with entered(t.h1):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        s.bind((t.h1_if, 0))
        for f in frames:
            try:
                s.send(f)
            except OSError:
                time.sleep(0.001)
        s.close()
    return len(frames)


def _accounting_snapshot(t) -> dict:
    """One reading of the data path's identity (see _accounting). The ends are read
    before the slots, so a packet that enters and ends while the three replies are read
    shows as a slot without its end; only a batch that is between its drop counters and
    its worker's packet count during the read can show the reverse."""
    from vecroute.graph.counters import COUNTERS

    c = {r["counter"]: r["count"] for r in _ctl(t, "show", "errors", "all")["data"]}
    tx = sum(i["tx_packets"] for i in _ctl(t, "show", "interfaces")["data"])
    workers = _ctl(t, "show", "workers")["data"]
    drop = sum(c.get(x.name, 0) for x in COUNTERS if x.kind == "drop")
    entered_ = sum(w["packets"] for w in workers)
    generated = sum(w["generated"] for w in workers)
    answers = c.get("icmp-error-sent", 0) + c.get("tcp-reset-sent", 0)
    ends = drop - c.get("answer-dropped", 0) - answers + c.get("punt", 0) + tx
    return {"entered": entered_, "generated": generated, "dropped": drop,
            "punted": c.get("punt", 0), "tx": tx, "answers": answers,
            "slots": entered_ + generated, "ends": ends}


def _accounting(t, settle_s: float = 20.0) -> dict:
    """The data path's identity, read after the traffic stopped (tests/conftest.py
    Result.check_accounting holds the same one for a batch): every slot — a packet that
    entered a worker (received or injected) or one the graph made itself (ARP/NS
    requests, fragments, the copy of an ARP request punted for the RFC 826 merge) — was
    sent, punted, or dropped by a counted reason; an input answered in its own slot (an
    ICMP error, a RST) is counted both as its drop reason and as sent, so the answers are
    taken off once (and an answer that died once more: answer-dropped).

    The router is not silent when the traffic stops: the flood's neighbour entries are
    probed (RFC 4861 7.3.3) and the hosts' kernels resolve and solicit, while the workers
    keep counting. Readings are taken until two in a row agree (nothing moved between
    them), ``settle_s`` at most; the last one is returned, with ``stable`` and how many
    ``readings`` it took."""
    deadline = time.monotonic() + settle_s
    last = _accounting_snapshot(t)
    readings = 1
    while True:
        time.sleep(0.25)
        cur = _accounting_snapshot(t)
        readings += 1
        if cur == last or time.monotonic() > deadline:
            cur["stable"], cur["readings"] = cur == last, readings
            return cur
        last = cur


def _start(t, trigger: Path) -> None:
    """`vecroute run` through the kill hook (vecroute.lab.start_router's wait, reused)."""
    argv = [sys.executable, "-c", f"{KILL_HOOK}\nmain(['run', {str(t.config)!r}])"]
    env = dict(os.environ, VR_SOAK_TRIGGER=str(trigger))
    start_router(t, argv=argv, env=env)


def _kill_worker(t, trigger: Path, before: dict, rep: Report, traffic: Traffic) -> None:
    traffic.paused = True
    t0 = time.monotonic()
    trigger.touch()
    try:
        rep.kill_exit_status = t.router.wait(15)
    except Exception:
        rep.errors.append("the router did not exit within 15 s of a worker's death")
        return
    rep.worker_killed = True
    rep.kill_exit_s = round(time.monotonic() - t0, 2)
    diff = _port_state(t.rt, t.ports)
    rep.ports_restored_after_kill = diff == before
    trigger.unlink()
    t1 = time.monotonic()
    _start(t, trigger)
    rep.restart_s = round(time.monotonic() - t1, 2)
    traffic.paused = False


OPS = ("routes", "firewall", "reload", "hostile", "flood")


def run(seconds: float, workdir: Path, seed: int = 1, kill_worker: bool = True,
        ops: tuple[str, ...] = OPS, log=print) -> Report:
    rep = Report()
    rng = random.Random(seed)
    trigger = workdir / "kill-worker-1"
    with Lab("vs") as lab:
        t = build(lab, workdir, workers=2, extra_config=FIREWALL)
        before = _port_state(t.rt, t.ports)
        _start(t, trigger)
        h2_mac = lab.mac(t.h2, t.h2_if)
        stop = threading.Event()
        traffic = Traffic(t, stop)
        threads = [threading.Thread(target=traffic.send_loop, daemon=True),
                   threading.Thread(target=traffic.receive_loop, daemon=True)]
        for th in threads:
            th.start()
        pinger = lab.popen(t.h1, ["ping", "-q", "-i", "0.05", H2_V4],
                           stdout=subprocess.DEVNULL)
        t0 = time.monotonic()
        rep.rss_start_mb = rep.rss_max_mb = _rss_mb(t.router.pid)
        rep.neighbor_limit = NeighborSettings().gc_thresh3  # per family
        try:
            while time.monotonic() - t0 < seconds and t.router.poll() is None:
                if kill_worker and not rep.worker_killed and time.monotonic() - t0 > seconds / 2:
                    _kill_worker(t, trigger, before, rep, traffic)
                    rep.rss_start_mb = rep.rss_max_mb = _rss_mb(t.router.pid)
                pid = t.router.pid
                k = rep.rounds
                net = f"10.{77 + k % 50}.{k % 250}.0/24"
                if "routes" in ops:
                    _ctl(t, "route", "add", net, "via", H2_V4)
                    _ctl(t, "route", "del", net)
                    rep.routes_churned += 1
                if "firewall" in ops:
                    _ctl(t, "fw", "add", "50", "deny", "udp", "from", "any", "to", "any", "7777")
                    _ctl(t, "fw", "delete", "50")
                    rep.fw_changes += 2
                if k % 2 == 0 and "reload" in ops:
                    _ctl(t, "neighbor", "add", H2_V4, "lladdr", h2_mac, "dev", t.ports[1])
                    os.kill(pid, signal.SIGHUP)
                    rep.reloads += 1
                if "hostile" in ops:
                    rep.hostile_clients += _hostile_clients(t.socket)
                if "flood" in ops:
                    rep.flood_frames += _flood(t, 500, rng)
                st = {r["stat"]: r["count"] for r in _ctl(t, "show", "neighbors", "stats")["data"]}
                rep.neighbor_entries_max = max(rep.neighbor_entries_max, st.get("entries ipv4", 0),
                                               st.get("entries ipv6", 0))
                rss = _rss_mb(pid)
                rep.rss_max_mb = max(rep.rss_max_mb, rss)
                rep.rss_samples.append((round(time.monotonic() - t0, 1), round(rss, 1)))
                rep.rounds += 1
                time.sleep(0.5)
        except Exception as e:  # a failed ctl is a finding, not a crash of the soak
            rep.errors.append(f"driver: {type(e).__name__}: {e}")
        rep.seconds = time.monotonic() - t0
        stop.set()
        pinger.send_signal(signal.SIGINT)
        pinger.wait(10)
        for th in threads:
            th.join(10)
        time.sleep(1.5)  # in flight: drained
        rep.router_alive = t.router.poll() is None
        rep.rss_end_mb = _rss_mb(t.router.pid) if rep.router_alive else 0.0
        rep.udp_sent, rep.udp_received = traffic.sent, traffic.received
        rep.corrupted, rep.scapy_checked = traffic.corrupted, traffic.checked
        rep.max_gap_s = round(traffic.max_gap, 3)
        rep.errors += traffic.errors[:10]
        if rep.router_alive:
            rep.accounting = _accounting(t)
            rep.accounting_ok = rep.accounting["stable"] and (
                rep.accounting["ends"] == rep.accounting["slots"])
            t.router.send_signal(signal.SIGTERM)
            try:
                rep.exit_status = t.router.wait(30)
            except Exception:
                rep.errors.append("router did not stop within 30 s of SIGTERM")
        else:
            rep.exit_status = t.router.returncode
            rep.errors.append(t.log.read_text()[-2000:])
        after = _port_state(t.rt, t.ports)
        rep.port_diff = {k: (before[k], after.get(k)) for k in before if before[k] != after.get(k)}
        rep.ports_restored = not rep.port_diff
    log(json.dumps(asdict(rep), indent=1))
    return rep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-kill", action="store_true", help="do not kill a worker halfway")
    ap.add_argument("--ops", default=",".join(OPS),
                    help=f"the driver's disturbances, comma-separated (default: all of {OPS})")
    args = ap.parse_args(argv)
    ops = tuple(o for o in args.ops.split(",") if o)
    if set(ops) - set(OPS):
        ap.error(f"--ops: unknown {sorted(set(ops) - set(OPS))}")
    with tempfile.TemporaryDirectory() as d:
        rep = run(args.seconds, Path(d), args.seed, kill_worker=not args.no_kill, ops=ops)
    ok = (rep.router_alive and rep.exit_status == 0 and rep.corrupted == 0
          and rep.accounting_ok and rep.ports_restored and not rep.errors
          and (args.no_kill or (rep.kill_exit_status == 1 and rep.ports_restored_after_kill)))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
