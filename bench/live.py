"""Live forwarding on veth in namespaces: Linux kernel vs vecroute vs a per-packet Python forwarder.

    python -m bench.live [--repeat N] [--seconds S] [--warmup S]
                         [--variants kernel,vecroute,naive[,kernel-napi]]
                         [--ping-count N] [--light-pps PPS] [--sample N] [--nice N]
                         [--json] [--save PATH]

Needs root, iproute2 (ip, tc; a kernel with cls_bpf), trafgen (Debian netsniff-ng), ping, ethtool,
tcpdump, taskset.

Topology (vecroute.lab.build, fresh for every run, removed afterwards by Lab):

    h1 198.51.100.10 --veth-- [p0  router namespace  p1] --veth-- h2 203.0.113.10

Generator: trafgen in h1 pinned to CPU 0 (``taskset -c 0``, one process, its TX ring,
qdisc bypass), 64-byte frames (Ethernet 14 + IPv4 20 + UDP 8 + 22 payload, no FCS):
198.51.100.10 -> 203.0.113.10 UDP 1024-1279 -> 9 (the source port's low byte counts up,
so there are 256 flows; trafgen recomputes the UDP checksum per packet), destination MAC
= the router port p0.  Router (pinned to CPU 1 where it is a process):

* ``kernel``: Linux forwarding, net.ipv4.ip_forward=1 in the router namespace and the
  router addresses on p0/p1; no vecroute.  On veth the whole receive path (and so the
  kernel's forwarding and the veth hand-over to h2) runs in softirq on the CPU that
  sent the frame, i.e. CPU 0, shared with trafgen; nothing is pinned to CPU 1.
* ``kernel-napi`` (optional): the same, but p0 receives through threaded NAPI (GRO on,
  which gives a veth a NAPI ring; ``/sys/class/net/p0/threaded`` = 1) and that NAPI
  kthread, where the forwarding then runs, is pinned to CPU 1 at the router priority:
  one core for the generator, one for the router, like the userspace variants.
* ``vecroute``: ``vecroute run`` with ``workers = 1`` (the vecroute.lab config: the
  router's ports have no kernel addresses), under ``taskset -c 1``.
* ``vecroute-1ring`` (optional): the same with ``[router] control_ring = false`` (one
  RX ring per port, no fanout program): what the control rings cost.
* ``naive``: bench/naive_forwarder.py in the router namespace under ``taskset -c 1``
  (AF_PACKET raw socket per port, per-packet Python); the hosts get permanent neighbour
  entries for the router addresses (it answers no ARP).

Priority: the machines are shared and sched_autogroup is on, so the generator and the
router each run in a session of their own whose autogroup gets nice ``--nice`` (-20):
other tenants' jobs then barely take their cores.  The same for every variant (the
kernel's forwarding runs in trafgen's softirq context, so it is covered too).

Every run: trafgen sends at full rate; after ``--warmup`` seconds the counters are read,
again ``--seconds`` later (each rate over the times of its own two reads).  Delivered =
frames dropped by the sink on h2: a classic-BPF cls_bpf filter (direct action) on the
clsact ingress hook of h2's veth that matches exactly the generator's flow after one
router hop (src/dst address, UDP dport 9, IPv4 without options, TTL 63) and counted by
the clsact qdisc; h2's IP stack never sees them, so the receiver costs as little as it
can (on veth the receive runs in the sender's context: the router's, or for the kernel
variant CPU 0).  Any other frame goes on to h2's stack, where a mangled one shows up as
an IP header / address error, a closed UDP port or a UDP checksum error in h2's
/proc/net/snmp (``mangled``, should stay 0).  Sent = h1's veth tx_packets; loss = sent -
delivered.
Then tcpdump on h2 samples ``--sample`` forwarded frames, and scapy checks each one:
Ethernet addresses (router p1 -> h2), TTL 63, IPv4 header checksum, UDP checksum,
length, addresses, ports and payload unchanged.

RTT: in each run, after the rate test, ``ping -i 0.01 -c N`` h1 -> h2 through the router
idle and while trafgen sends at ``--light-pps`` (default: 10% of the first kernel run's
delivered rate; evenly spaced with ``trafgen -t GAP``, the gap calibrated in up to three
0.4 s tries): p50 / p99 / max of all replies of all runs of a variant.

Variants run interleaved (kernel vecroute naive kernel vecroute naive ...), each
``--repeat`` times; the delivered pps distributions are compared with
vecroute.measure.stat (ministat) and the ratio vecroute / kernel is reported against the
target (>= 1.2).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import eprint, fmt_summary, machine_info, machine_line, summary, verdict

TARGET_RATIO = 1.2
GEN_CPU = 0
ROUTER_CPU = 1
SPORT_BASE = 1024  # source ports SPORT_BASE .. SPORT_BASE + 255
DPORT = 9
PAYLOAD = b"vecroute-live-bench!\x00\x01"  # 22 bytes: the frame is 64 bytes
FRAME_LEN = 14 + 20 + 8 + len(PAYLOAD)
PRIORITY = [-20]  # nice of the generator's and the router's autogroups; main() may change it
ALL_VARIANTS = ("kernel", "kernel-napi", "vecroute", "vecroute-1ring", "naive")
DEFAULT_VARIANTS = ("kernel", "vecroute", "naive")


# -- traffic ------------------------------------------------------------------------------


def _macb(mac: str) -> list[int]:
    return [int(x, 16) for x in mac.split(":")]


def trafgen_config(dst_mac: str, src_mac: str, src_ip: str, dst_ip: str) -> str:
    """64-byte IPv4/UDP frame; sport low byte = dinc() (256 flows), checksums by trafgen."""
    hexs = lambda bs: ", ".join(f"0x{b:02x}" for b in bs)  # noqa: E731
    ip_s = [int(x) for x in src_ip.split(".")]
    ip_d = [int(x) for x in dst_ip.split(".")]
    total = 20 + 8 + len(PAYLOAD)
    return (
        "{\n"
        f"  {hexs(_macb(dst_mac))}, {hexs(_macb(src_mac))}, 0x08, 0x00,\n"
        f"  0x45, 0x00, c16({total}), 0x00, 0x00, 0x40, 0x00, 64, 17, csumip(14, 33),\n"
        f"  {hexs(ip_s)}, {hexs(ip_d)},\n"
        f"  c8({SPORT_BASE >> 8}), dinc(0, 255), c16({DPORT}), c16({8 + len(PAYLOAD)}),"
        " csumudp(14, 34),\n"
        f"  {hexs(PAYLOAD)}\n"
        "}\n"
    )


def start_trafgen(lab: Any, ns: str, ifname: str, conf: Path, gap_ns: int | None = None):
    """trafgen on the generator CPU: full rate, or one frame every ``gap_ns`` (plus
    trafgen's own sleep overhead; ``-b RATE`` would send each second's frames in one
    burst at full rate, which is no light load for an RTT test)."""
    argv = ["taskset", "-c", str(GEN_CPU), "trafgen", "-o", ifname, "-i", str(conf),
            "-P", "1", "-C", "-Q", "--no-sock-mem"]  # fmt: skip
    if gap_ns is not None:
        argv += ["-t", f"{max(1, int(gap_ns))}ns"]
    return start_boosted(lab, ns, argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def start_light_load(
    lab: Any, ns: str, ifname: str, conf: Path, pps: float, gens: list
) -> subprocess.Popen:
    """trafgen at about ``pps`` evenly spaced frames/s: the per-frame overhead on top of
    the gap is measured in a first 0.4 s try and taken off the gap of the second."""
    gap = 1e9 / pps
    tries = 3
    for attempt in range(tries):
        g = start_trafgen(lab, ns, ifname, conf, gap_ns=int(gap))
        gens.append(g)
        time.sleep(0.2)
        a = timed(lambda: link_stats(lab, ns, ifname)["tx"])
        time.sleep(0.4)
        b = timed(lambda: link_stats(lab, ns, ifname)["tx"])
        rate = (b[1] - a[1]) / (b[0] - a[0])
        if attempt == tries - 1 or rate <= 0 or abs(rate - pps) < 0.05 * pps:
            return g
        stop(g)
        overhead = 1e9 / rate - gap  # ns per frame on top of the gap
        gap = max(1.0, 1e9 / pps - overhead)
    return g


def start_boosted(lab: Any, ns: str, argv: list[str], **kw: Any) -> subprocess.Popen:
    """Start a command in a namespace in its own session (so stop() can end its whole
    process group: trafgen forks its sender) and raise the session's priority.

    The machines here are shared and the kernel has sched_autogroup on: every session
    is one scheduling entity, whatever the nice values inside.  Giving the generator's
    and the router's sessions nice -20 keeps other tenants' jobs from taking their
    cores (the same for every variant; ``--nice 0`` turns it off)."""
    p = lab.popen(ns, argv, start_new_session=True, **kw)
    if PRIORITY[0]:
        with contextlib.suppress(OSError):
            Path(f"/proc/{p.pid}/autogroup").write_text(str(PRIORITY[0]))
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PGRP, p.pid, PRIORITY[0])
    return p


def start_vecroute(lab: Any, t: Any, timeout: float = 600.0) -> subprocess.Popen:
    """``vecroute run`` in the router namespace pinned to the router CPU (what
    vecroute.lab.start_router does, plus taskset and the priority): waits for ctl."""
    t.log = t.workdir / "router.log"
    logf = open(t.log, "wb")  # noqa: SIM115 - the process keeps it
    t.router = start_boosted(
        lab, t.rt,
        ["taskset", "-c", str(ROUTER_CPU), sys.executable, "-m", "vecroute.cli", "run",
         str(t.config)],
        stdout=logf, stderr=subprocess.STDOUT,
    )  # fmt: skip
    logf.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if t.router.poll() is not None:
            raise RuntimeError(f"vecroute run exited {t.router.returncode}: {t.log.read_text()}")
        with contextlib.suppress(OSError):
            if t.ctl("show", "interfaces").get("ok"):
                return t.router
        time.sleep(0.2)
    raise RuntimeError(f"vecroute did not start within {timeout} s: {t.log.read_text()[-2000:]}")


def stop(p: subprocess.Popen | None, timeout: float = 5) -> None:
    """End a process started in its own session, and everything in its group."""
    if p is None:
        return
    for sig in (signal.SIGINT, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, sig)
        try:
            p.wait(timeout=timeout)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGKILL)  # a forked child that outlived its parent


def setup_kernel_router(lab: Any, t: Any, *, napi: bool = False, ipv6: bool = False) -> None:
    """The ``kernel`` variant: the Linux kernel routes in the router namespace (the
    vecroute.lab router addresses on p0/p1, forwarding on). ``napi``: the kernel-napi
    variant (p0 received in a NAPI kthread on the router CPU). ``ipv6``: IPv6 too (the
    lab disables IPv6 on the router ports; re-enabled, addresses without DAD)."""
    from vecroute.lab import RT0_V4, RT0_V6, RT1_V4, RT1_V6

    p0, p1 = t.ports
    lab.addr(t.rt, p0, f"{RT0_V4}/24")
    lab.addr(t.rt, p1, f"{RT1_V4}/24")
    lab.run(t.rt, ["sysctl", "-qw", "net.ipv4.ip_forward=1"])
    if ipv6:
        for port in (p0, p1):
            lab.run(t.rt, ["sysctl", "-qw", f"net.ipv6.conf.{port}.disable_ipv6=0"])
        lab.run(t.rt, ["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"])
        lab.addr(t.rt, p0, f"{RT0_V6}/64")
        lab.addr(t.rt, p1, f"{RT1_V6}/64")
    if napi:
        kernel_napi_thread(lab, t.rt, p0)


def kernel_napi_thread(lab: Any, ns: str, ifname: str) -> int:
    """Move a veth's receive processing into its own NAPI kthread on the router CPU."""
    lab.run(ns, ["ethtool", "-K", ifname, "gro", "on"])
    lab.run(ns, ["sh", "-c", f"echo 1 > /sys/class/net/{ifname}/threaded"])
    for _ in range(50):
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                with contextlib.suppress(OSError):
                    if (d / "comm").read_text().startswith(f"napi/{ifname}-"):
                        pid = int(d.name)
                        os.sched_setaffinity(pid, {ROUTER_CPU})
                        if PRIORITY[0]:
                            os.setpriority(os.PRIO_PROCESS, pid, PRIORITY[0])
                        return pid
        time.sleep(0.1)
    raise RuntimeError(f"no NAPI thread for {ifname}")


# -- counters -----------------------------------------------------------------------------


def link_stats(lab: Any, ns: str, ifname: str) -> dict[str, int]:
    """Packet counters of one interface, read from /proc/thread-self/net/dev with this
    thread inside the namespace (no subprocess: the read takes microseconds)."""
    from vecroute.io.netns import entered

    with entered(ns), open("/proc/thread-self/net/dev") as f:
        text = f.read()
    for line in text.splitlines()[2:]:
        name, _, rest = line.partition(":")
        if name.strip() == ifname:
            v = [int(x) for x in rest.split()]
            return {"rx": v[1], "rx_dropped": v[3], "tx": v[9], "tx_dropped": v[11]}
    raise KeyError(f"{ifname} not in {ns}")


def timed(fn: Any, *a: Any) -> tuple[float, Any]:
    """(monotonic time at the middle of the call, result): a counter read through a
    subprocess takes milliseconds, so every rate uses the times of its own two reads."""
    t0 = time.monotonic()
    v = fn(*a)
    return (t0 + time.monotonic()) / 2, v


def _ip_int(addr: str) -> int:
    return int.from_bytes(bytes(int(x) for x in addr.split(".")), "big")


def sink_program(src_ip: str, dst_ip: str) -> str:
    """Classic BPF for cls_bpf direct-action on h2's ingress (offsets from the Ethernet
    header, which cls_bpf pushes back at ingress): the generator's flow after exactly
    one router hop (IPv4 without options, TTL 63, src/dst address, UDP dport) returns
    TC_ACT_SHOT (2), anything else TC_ACT_OK (0) and goes on to h2's stack."""
    ld_h, ld_b, ld_w, jeq, ret = 0x28, 0x30, 0x20, 0x15, 0x06
    checks = [
        (ld_h, 12, 0x0800),
        (ld_b, 14, 0x45),
        (ld_b, 22, 63),
        (ld_b, 23, 17),
        (ld_w, 26, _ip_int(src_ip)),
        (ld_w, 30, _ip_int(dst_ip)),
        (ld_h, 36, DPORT),
    ]
    n = 2 * len(checks) + 2
    ins = []
    for load, off, value in checks:
        ins.append((load, 0, 0, off))
        ins.append((jeq, 0, n - 1 - (len(ins) + 1), value))  # false: to "ret OK"
    ins += [(ret, 0, 0, 2), (ret, 0, 0, 0)]
    return f"{len(ins)}," + ",".join(f"{c} {jt} {jf} {k}" for c, jt, jf, k in ins)


def install_sink(lab: Any, ns: str, ifname: str, src_ip: str, dst_ip: str) -> None:
    """The sink on h2's veth: a cls_bpf filter on the clsact ingress hook drops the
    forwarded flow (sink_program); the clsact qdisc counts what it dropped.  AF_PACKET
    taps (tcpdump) see the frames before the hook; h2's IP stack never does, so the
    sink costs as little as a receiver can (a drop right after the veth hand-over)."""
    lab.run(ns, ["tc", "qdisc", "add", "dev", ifname, "clsact"])
    lab.run(ns, ["tc", "filter", "add", "dev", ifname, "ingress", "protocol", "ip", "pref", "1",
                 "bpf", "da", "bytecode", sink_program(src_ip, dst_ip)])  # fmt: skip


def sink_counts(lab: Any, ns: str, ifname: str) -> dict[str, int]:
    """good: frames the sink filter dropped (the forwarded flow, intact headers): the
    clsact qdisc's drop counter, read over rtnetlink from inside h2 (a ``tc -s`` process
    would take milliseconds, which blur the time of the read)."""
    import socket

    from vecroute.io.netns import entered

    rtm_getqdisc, rtm_newqdisc, nlmsg_done, nlmsg_error = 38, 36, 3, 2
    tca_kind, tca_stats = 1, 3
    with entered(ns):
        ifindex = socket.if_nametoindex(ifname)
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    with sock:
        body = struct.pack("BBHiIII", socket.AF_UNSPEC, 0, 0, ifindex, 0, 0, 0)
        hdr = struct.pack("IHHII", 16 + len(body), rtm_getqdisc, 0x301, 1, 0)  # REQUEST|DUMP
        sock.send(hdr + body)
        while True:
            data = sock.recv(1 << 16)
            off = 0
            while off + 16 <= len(data):
                length, mtype, _, _, _ = struct.unpack_from("IHHII", data, off)
                if mtype in (nlmsg_done, nlmsg_error) or length < 16:
                    raise RuntimeError(f"no clsact qdisc on {ifname} in {ns}")
                if mtype == rtm_newqdisc:
                    q_ifindex = struct.unpack_from("i", data, off + 20)[0]
                    kind, drops = "", None
                    a = off + 16 + 20
                    while a + 4 <= off + length:
                        alen, atype = struct.unpack_from("HH", data, a)
                        if alen < 4:
                            break
                        if atype == tca_kind:
                            kind = data[a + 4 : a + alen].rstrip(b"\0").decode()
                        elif atype == tca_stats:  # struct tc_stats: bytes u64, packets, drops
                            drops = struct.unpack_from("QII", data, a + 4)[2]
                        a += (alen + 3) & ~3
                    if q_ifindex == ifindex and kind == "clsact" and drops is not None:
                        return {"good": drops}
                off += (length + 3) & ~3


STACK_ERRORS = ("Ip.InHdrErrors", "Ip.InAddrErrors", "Udp.NoPorts", "Udp.InErrors",
                "Udp.InCsumErrors")  # fmt: skip


def stack_errors(ns: str) -> int:
    """Frames that reached h2's IPv4/UDP stack and were refused there (bad header
    checksum, wrong address, UDP port 9 closed, bad UDP checksum): a forwarded frame
    that the sink filter did not take for intact ends up in one of these."""
    from vecroute.io.netns import entered

    with entered(ns), open("/proc/thread-self/net/snmp") as f:
        lines = f.read().splitlines()
    values = {}
    for head, vals in zip(lines[::2], lines[1::2], strict=False):
        proto = head.split(":")[0]
        for k, v in zip(head.split()[1:], vals.split()[1:], strict=False):
            values[f"{proto}.{k}"] = int(v)
    return sum(values.get(k, 0) for k in STACK_ERRORS)


def cpu_times() -> list[list[int]]:
    """Per-CPU /proc/stat jiffies: user nice system idle iowait irq softirq steal."""
    rows = []
    with open("/proc/stat") as f:
        for line in f:
            if re.match(r"cpu\d+ ", line):
                rows.append([int(x) for x in line.split()[1:9]])
    return rows


def cpu_busy(a: list[list[int]], b: list[list[int]]) -> list[dict[str, float]]:
    out = []
    for ra, rb in zip(a, b, strict=True):
        d = [y - x for x, y in zip(ra, rb, strict=True)]
        tot = sum(d) or 1
        out.append(
            {
                "busy": round(1 - (d[3] + d[4]) / tot, 3),
                "user": round((d[0] + d[1]) / tot, 3),
                "system": round(d[2] / tot, 3),
                "softirq": round((d[5] + d[6]) / tot, 3),
                "steal": round(d[7] / tot, 3),
            }
        )
    return out


def proc_cpu(pid: int) -> float:
    """utime + stime of a process (all its threads), seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- checks -------------------------------------------------------------------------------


def vecroute_if_counts(t: Any) -> dict[str, dict[str, int]]:
    """vecroute's own per-port counters (ctl show interfaces), by port name."""
    rows = t.ctl("show", "interfaces").get("data") or []
    return {r["name"]: {k: int(r[k]) for k in ("rx_packets", "tx_packets", "drops")} for r in rows}


def check_sample(pcap: Path, h2_mac: str, rt_mac: str, src_ip: str, dst_ip: str) -> dict[str, Any]:
    """scapy parses every sampled frame and recomputes its checksums."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.utils import rdpcap

    res: dict[str, Any] = {"frames": 0, "ok": 0, "bad": 0, "sports": 0, "problems": []}
    try:
        pkts = rdpcap(str(pcap))
    except (OSError, EOFError) as e:
        res["problems"].append(f"no capture: {e}")
        return res
    sports = set()
    for p in pkts:
        res["frames"] += 1
        why = []
        raw = bytes(p)
        e = Ether(raw)
        if len(raw) != FRAME_LEN:
            why.append(f"length {len(raw)}")
        if e.dst != h2_mac or e.src != rt_mac:
            why.append(f"MAC {e.src} -> {e.dst}")
        if IP not in e or UDP not in e:
            why.append("not IPv4/UDP")
        else:
            ip, udp = e[IP], e[UDP]
            if ip.src != src_ip or ip.dst != dst_ip:
                why.append(f"addresses {ip.src} -> {ip.dst}")
            if ip.ttl != 63:
                why.append(f"TTL {ip.ttl}")
            fresh = IP(bytes(ip))
            fresh.chksum = None
            if IP(bytes(fresh)).chksum != ip.chksum:
                why.append("IPv4 header checksum")
            u = UDP(bytes(udp))
            u.chksum = None
            recomputed = IP(bytes(IP(src=ip.src, dst=ip.dst, proto=17) / u))[UDP].chksum
            if udp.chksum != recomputed:
                why.append(f"UDP checksum {udp.chksum:#06x} != {recomputed:#06x}")
            if not SPORT_BASE <= udp.sport < SPORT_BASE + 256 or udp.dport != DPORT:
                why.append(f"ports {udp.sport} -> {udp.dport}")
            if bytes(udp.payload) != PAYLOAD:
                why.append("payload")
            sports.add(udp.sport)
        if why:
            res["bad"] += 1
            if len(res["problems"]) < 5:
                res["problems"].append("; ".join(why))
        else:
            res["ok"] += 1
    res["sports"] = len(sports)
    return res


PING_RE = re.compile(r"time=([0-9.]+) ms")


def ping(lab: Any, ns: str, dst: str, count: int) -> dict[str, Any]:
    out = lab.run(
        ns,
        ["ping", "-n", "-i", "0.01", "-c", str(count), "-W", "1", dst],
        check=False,
        timeout=count * 0.05 + 30,
    )
    rtts = [float(x) for x in PING_RE.findall(out)]
    return {"sent": count, "received": len(rtts), "rtt_ms": rtts}


def percentile(v: list[float], q: float) -> float | None:
    if not v:
        return None
    s = sorted(v)
    k = max(0, min(len(s) - 1, int(round(q / 100 * len(s) + 0.5)) - 1))  # nearest rank
    return s[k]


# -- one run ------------------------------------------------------------------------------


def run_one(variant: str, args: argparse.Namespace, light_pps: int | None) -> dict[str, Any]:
    from vecroute.io.netns import Lab
    from vecroute.lab import H1_V4, H2_V4, RT0_V4, RT1_V4, build

    workdir = Path(tempfile.mkdtemp(prefix="vecroute-live-"))
    res: dict[str, Any] = {"variant": variant}
    router = None
    gens: list[subprocess.Popen] = []  # every trafgen started, stopped on the way out
    with Lab("lv") as lab:
        try:
            t = build(lab, workdir)
            p0, p1 = t.ports
            p0_mac, p1_mac = lab.mac(t.rt, p0), lab.mac(t.rt, p1)
            h1_mac, h2_mac = lab.mac(t.h1, t.h1_if), lab.mac(t.h2, t.h2_if)
            if variant.startswith("kernel"):
                setup_kernel_router(lab, t, napi=variant == "kernel-napi")
            elif variant.startswith("vecroute"):
                if variant == "vecroute-1ring":  # no control rings: one RX ring per port
                    t.config.write_text(t.config.read_text().replace(
                        "[router]\n", "[router]\ncontrol_ring = false\n", 1))
                router = start_vecroute(lab, t)
            elif variant == "naive":
                lab.neigh(t.h1, t.h1_if, RT0_V4, p0_mac)
                lab.neigh(t.h2, t.h2_if, RT1_V4, p1_mac)
                router = start_boosted(
                    lab, t.rt,
                    ["taskset", "-c", str(ROUTER_CPU), sys.executable, "-m",
                     "bench.naive_forwarder",
                     "--port", f"{p0}={p0_mac}", "--port", f"{p1}={p1_mac}",
                     "--route", f"198.51.100.0/24={p0},{h1_mac}",
                     "--route", f"203.0.113.0/24={p1},{h2_mac}"],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    cwd=str(Path(__file__).resolve().parent.parent),
                )  # fmt: skip
            else:
                raise ValueError(variant)
            install_sink(lab, t.h2, t.h2_if, H1_V4, H2_V4)
            conf = workdir / "trafgen.cfg"
            conf.write_text(trafgen_config(p0_mac, h1_mac, H1_V4, H2_V4))
            # the router (kernel or vecroute) must know h2's MAC before the flood: one ping
            lab.run(t.h1, ["ping", "-n", "-c", "2", "-i", "0.2", "-W", "2", H2_V4], check=False)

            # -- full rate ------------------------------------------------------------------
            gen = start_trafgen(lab, t.h1, t.h1_if, conf)
            gens.append(gen)
            time.sleep(args.warmup)
            if gen.poll() is not None:
                raise RuntimeError(f"trafgen exited: {gen.stderr.read().decode()[-500:]}")
            if router is not None and router.poll() is not None:
                raise RuntimeError(f"{variant} router exited {router.returncode}")
            links = {
                "h1": (t.h1, t.h1_if),
                "p0": (t.rt, p0),
                "p1": (t.rt, p1),
                "h2": (t.h2, t.h2_if),
            }

            def snapshot() -> dict[str, Any]:
                snap: dict[str, Any] = {}
                # the fast reads (microseconds) together, the slow ctl one last
                snap["links"] = timed(lambda: {k: link_stats(lab, *v) for k, v in links.items()})
                snap["sink"] = timed(sink_counts, lab, t.h2, t.h2_if)
                snap["refused"] = stack_errors(t.h2)
                snap["cpu"] = timed(cpu_times)
                snap["rcpu"] = timed(proc_cpu, router.pid) if router else (0.0, 0.0)
                if variant.startswith("vecroute"):
                    snap["vr"] = timed(vecroute_if_counts, t)
                return snap

            def rate(a: tuple[float, Any], b: tuple[float, Any], get: Any) -> float:
                return (get(b[1]) - get(a[1])) / (b[0] - a[0])

            sa = snapshot()
            time.sleep(args.seconds)
            sb = snapshot()
            lk = sa["links"], sb["links"]
            sent = rate(*lk, lambda v: v["h1"]["tx"])
            delivered = rate(sa["sink"], sb["sink"], lambda v: v["good"])
            res.update(
                seconds=round(sb["sink"][0] - sa["sink"][0], 3),
                sent_pps=sent,
                delivered_pps=delivered,
                loss_pps=sent - delivered,
                loss_fraction=(sent - delivered) / sent if sent else None,
                mangled=sb["refused"] - sa["refused"],
                link_pps={
                    f"{k}_{c}": round(rate(*lk, lambda v, k=k, c=c: v[k][c]), 1)
                    for k in links
                    for c in ("rx", "rx_dropped", "tx", "tx_dropped")
                },
                cpu=cpu_busy(sa["cpu"][1], sb["cpu"][1]),
                router_cpu=round(rate(sa["rcpu"], sb["rcpu"], float), 3) if router else None,
                load_avg=os.getloadavg(),
            )
            if "vr" in sa:
                res["vecroute_pps"] = {
                    f"{name}_{c}": round(
                        rate(sa["vr"], sb["vr"], lambda v, n=name, c=c: v[n][c]), 1
                    )
                    for name in sa["vr"][1]
                    for c in ("rx_packets", "tx_packets", "drops")
                }
            if variant.startswith("vecroute"):
                with contextlib.suppress(Exception):
                    res["vecroute_interfaces"] = [
                        {k: r[k] for k in ("name", "rx_packets", "tx_packets", "drops", "punts")}
                        for r in t.ctl("show", "interfaces").get("data") or []
                    ]
                    res["vecroute_runtime"] = t.ctl("show", "runtime").get("data") or []
                    res["vecroute_errors"] = [
                        {k: r[k] for k in ("counter", "count")}
                        for r in t.ctl("show", "errors").get("data") or []
                    ]
            # -- sample check: tcpdump on h2 while the flood goes on ------------------------
            pcap = workdir / "sample.pcap"
            lab.run(
                t.h2,
                ["timeout", "10", "tcpdump", "-i", t.h2_if, "-n", "-s", "0", "-c", str(args.sample),
                 "-w", str(pcap), "udp", "port", str(DPORT)],
                check=False, timeout=20,
            )  # fmt: skip
            res["sample"] = check_sample(pcap, h2_mac, p1_mac, H1_V4, H2_V4)
            stop(gen)
            gen = None

            # -- RTT: idle, then under light load ------------------------------------------
            if args.ping_count:
                time.sleep(0.2)
                res["ping_idle"] = ping(lab, t.h1, H2_V4, args.ping_count)
                pps = light_pps or int(0.1 * res["delivered_pps"])
                gen = start_light_load(lab, t.h1, t.h1_if, conf, pps, gens)
                l0 = sink_counts(lab, t.h2, t.h2_if)["good"]
                s0 = link_stats(lab, t.h1, t.h1_if)["tx"]
                tl0 = time.monotonic()
                res["ping_light"] = ping(lab, t.h1, H2_V4, args.ping_count)
                tl1 = time.monotonic()
                res["light"] = {
                    "target_pps": pps,
                    "sent_pps": (link_stats(lab, t.h1, t.h1_if)["tx"] - s0) / (tl1 - tl0),
                    "delivered_pps": (sink_counts(lab, t.h2, t.h2_if)["good"] - l0) / (tl1 - tl0),
                }
                stop(gen)
                gen = None
            if variant == "naive" and router is not None:
                router.terminate()
                try:
                    out, _ = router.communicate(timeout=5)
                    res["naive_counts"] = json.loads(out.decode().strip().splitlines()[-1])
                except (subprocess.TimeoutExpired, ValueError, IndexError):
                    pass
            if router is not None and variant.startswith("vecroute") and router.poll() is not None:
                res["router_exit"] = router.returncode
        finally:
            for g in gens:
                stop(g)
    shutil.rmtree(workdir, ignore_errors=True)
    return res


# -- report -------------------------------------------------------------------------------


def rtt_summary(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    rtts = [x for r in runs if key in r for x in r[key]["rtt_ms"]]
    sent = sum(r[key]["sent"] for r in runs if key in r)
    return {
        "n": len(rtts),
        "lost": sent - len(rtts),
        "p50_ms": percentile(rtts, 50),
        "p99_ms": percentile(rtts, 99),
        "max_ms": max(rtts) if rtts else None,
        "per_run_p50_ms": [percentile(r[key]["rtt_ms"], 50) for r in runs if key in r],
        "per_run_p99_ms": [percentile(r[key]["rtt_ms"], 99) for r in runs if key in r],
    }


def report(results: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> dict[str, Any]:
    from vecroute.measure import stat

    out: dict[str, Any] = {"variants": {}}
    for v, runs in results.items():
        out["variants"][v] = {
            "delivered_pps": summary([r["delivered_pps"] for r in runs]),
            "sent_pps": summary([r["sent_pps"] for r in runs]),
            "loss_pps": summary([r["loss_pps"] for r in runs]),
            "loss_fraction": summary([r["loss_fraction"] or 0.0 for r in runs]),
            "router_cpu": summary([r["router_cpu"] for r in runs if r["router_cpu"] is not None]),
            "cpu0_busy": summary([r["cpu"][GEN_CPU]["busy"] for r in runs]),
            "cpu1_busy": summary([r["cpu"][ROUTER_CPU]["busy"] for r in runs]),
            "mangled": sum(r["mangled"] for r in runs),
            "sample_frames": sum(r["sample"]["frames"] for r in runs),
            "sample_bad": sum(r["sample"]["bad"] for r in runs),
            "sample_problems": [p for r in runs for p in r["sample"]["problems"]][:5],
            "rtt_idle": rtt_summary(runs, "ping_idle"),
            "rtt_light": rtt_summary(runs, "ping_light"),
            "light_pps": summary([r["light"]["delivered_pps"] for r in runs if "light" in r]),
        }
    sets = [(v, [r["delivered_pps"] for r in runs]) for v, runs in results.items()]
    if all(len(vals) >= 3 for _, vals in sets) and len(sets) <= 7:
        out["ministat"] = stat.render(sets)
    med = {v: out["variants"][v]["delivered_pps"]["median"] for v in results}
    ratios = {}
    for base in ("kernel", "kernel-napi", "naive"):
        if "vecroute" in med and base in med and med[base]:
            ratios[f"vecroute/{base}"] = med["vecroute"] / med[base]
    if "vecroute" in med and med.get("vecroute-1ring"):
        ratios["vecroute/vecroute-1ring"] = med["vecroute"] / med["vecroute-1ring"]
    out["ratios"] = ratios
    if "vecroute/kernel" in ratios:
        out["target"] = {
            "ratio": ratios["vecroute/kernel"],
            "required": TARGET_RATIO,
            "verdict": verdict(ratios["vecroute/kernel"] >= TARGET_RATIO),
        }
    return out


def print_report(out: dict[str, Any], args: argparse.Namespace, info: dict[str, Any]) -> None:
    print(machine_line(info))
    print(
        f"live forwarding, veth in namespaces, 64-byte UDP, trafgen on CPU {GEN_CPU}, router "
        f"on CPU {ROUTER_CPU}; {args.seconds:g} s x {args.repeat}, interleaved; "
        "median [min .. max]"
    )
    hdr = (
        f"{'variant':11s} {'delivered pps':>30s} {'sent pps':>10s} {'loss':>7s} "
        f"{'rtr CPU':>7s} {'cpu0':>5s} {'cpu1':>5s} {'bad':>5s}"
    )
    print(hdr)
    for v, s in out["variants"].items():
        rc = s["router_cpu"]["median"]
        # the two counters are read microseconds apart: a -0.0x % is that, shown as 0
        loss = max(0.0, s["loss_fraction"]["median"])
        print(
            f"{v:11s} {fmt_summary(s['delivered_pps'], '', 0):>30s} "
            f"{s['sent_pps']['median']:10.0f} {100 * loss:6.1f}% "
            f"{'' if rc is None else f'{rc:.2f}':>7s} {s['cpu0_busy']['median']:5.2f} "
            f"{s['cpu1_busy']['median']:5.2f} "
            f"{s['sample_bad'] + s['mangled']:>5d}"
        )
    print("bad = sampled frames failing the scapy check + frames refused by h2's stack")
    for v, s in out["variants"].items():
        print(
            f"  {v:11s} sample: {s['sample_frames']} frames checked, {s['sample_bad']} bad"
            + (f" ({'; '.join(s['sample_problems'])})" if s["sample_problems"] else "")
        )
    print()
    print("ping h1 -> h2 through the router, RTT ms (all replies of all runs):")
    print(f"{'variant':11s} {'idle p50':>9s} {'idle p99':>9s} {'light p50':>10s} "
          f"{'light p99':>10s} {'lost':>5s} {'light load pps':>15s}")  # fmt: skip
    f = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    for v, s in out["variants"].items():
        i, li = s["rtt_idle"], s["rtt_light"]
        lp = s["light_pps"]["median"]
        print(
            f"{v:11s} {f(i['p50_ms']):>9s} {f(i['p99_ms']):>9s} {f(li['p50_ms']):>10s} "
            f"{f(li['p99_ms']):>10s} {i['lost'] + li['lost']:>5d} "
            f"{'-' if lp is None else f'{lp:.0f}':>15s}"
        )
    if "ministat" in out:
        print()
        print("delivered pps, ministat (vecroute.measure.stat):")
        print(out["ministat"], end="")
    print()
    for k, r in out["ratios"].items():
        print(f"ratio {k} (medians): {r:.3f}")
    if "target" in out:
        t = out["target"]
        print(f"target vecroute >= {t['required']}x kernel: {t['verdict']} ({t['ratio']:.3f}x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                    help=f"comma-separated, from {', '.join(ALL_VARIANTS)}")  # fmt: skip
    ap.add_argument("--ping-count", type=int, default=500, help="0: no RTT test")
    ap.add_argument("--light-pps", type=int, default=0,
                    help="light load (default: 10%% of the first kernel run's rate)")  # fmt: skip
    ap.add_argument("--sample", type=int, default=200, help="frames checked with scapy per run")
    ap.add_argument("--nice", type=int, default=-20,
                    help="nice of the generator's and the router's sessions (autogroups); default "
                    "-20: the machine may be shared; 0: leave them alone")  # fmt: skip
    ap.add_argument("--json", action="store_true", help="print JSON instead of the text")
    ap.add_argument("--save", metavar="PATH", help="also write the JSON (all runs) to PATH")
    args = ap.parse_args()
    PRIORITY[0] = args.nice
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for v in variants:
        if v not in ALL_VARIANTS:
            ap.error(f"unknown variant {v!r}")
    if os.geteuid() != 0:
        raise SystemExit("bench.live: needs root (namespaces, AF_PACKET)")
    for tool in ("trafgen", "tc", "ping", "tcpdump", "taskset"):
        if shutil.which(tool) is None:
            raise SystemExit(f"bench.live: {tool} not found (apt-get install -y netsniff-ng "
                             "iproute2 iputils-ping tcpdump util-linux)")  # fmt: skip
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("bench.live: needs 2 CPUs (generator and router)")
    info = machine_info()
    light = args.light_pps or None
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    t_start = time.time()
    for rep in range(args.repeat):
        for v in variants:
            r = run_one(v, args, light)
            results[v].append(r)
            if light is None and v.startswith("kernel") and args.ping_count:
                light = max(1000, int(0.1 * r["delivered_pps"]))
            eprint(
                f"[{rep + 1}/{args.repeat}] {v:10s} delivered {r['delivered_pps']:9.0f} pps, "
                f"sent {r['sent_pps']:9.0f}, loss {100 * (r['loss_fraction'] or 0):5.1f}%, "
                f"router cpu {r['router_cpu']}, cpu {[c['busy'] for c in r['cpu']]}, "
                f"sample {r['sample']['ok']}/{r['sample']['frames']} ok, "
                f"load {r['load_avg'][0]:.2f}"
            )
            eprint(
                f"      links {r['link_pps']}"
                + (f"\n      vecroute {r['vecroute_pps']}" if "vecroute_pps" in r else "")
            )
    out = report(results, args)
    out["machine"] = info
    out["command"] = " ".join(["python", "-m", "bench.live", *sys.argv[1:]])
    out["elapsed_s"] = round(time.time() - t_start, 1)
    out["runs"] = results
    if args.save:
        Path(args.save).write_text(json.dumps(out, indent=2, default=str))
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return
    print_report(out, args, info)


if __name__ == "__main__":
    main()
