"""The Linux kernel as the reference router: a namespace router, capture, a normaliser.

A vecroute config (the dict ``parse_config`` reads) is turned into a Linux router in a
network namespace: one veth per vecroute interface with the same name, MAC, MTU and
addresses, the same static routes and permanent neighbours, forwarding on, ICMP rate
limits set to vecroute's. The other end of every veth sits in a second namespace, where
AF_PACKET sockets inject each input frame and capture what the kernel emits on every
link. Each input is followed by a *marker* (an echo request to the router from a
configured neighbour on the same link); the marker's reply closes the input's window, so
outputs map to inputs without guessing at timeouts.

The same inputs go through vecroute's replay path (``vecroute.io.replay.Replayer``, pcap
in, pcap out), where output timestamps name the input that caused them.

Both outputs are reduced to the same per-input summary (:func:`summarize`): one string per
emitted frame (forwarded: interface, TTL/hop limit, length, next-hop MAC, a digest of the
rest of the packet; ICMP: interface, type/code, source, quoted length, ...), sorted, or
``dropped``. Fields that legitimately differ (IP id, checksums, ICMP id of replies) are
left out. Differences that vecroute makes on purpose are rows of :data:`EXPECTED`, the
one table that docs/linux-differences.md renders; anything else is a failure.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import ipaddress
import os
import select
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from scapy.layers.inet import ICMP, IP, TCP, IPerror
from scapy.layers.inet6 import (
    ICMPv6EchoRequest,
    IPv6,
)
from scapy.layers.l2 import ARP, Ether

from vecroute.config_types import Config, format_mac
from vecroute.control.config import parse_config
from vecroute.io.netns import Lab, LabError, entered, ip, run_in
from vecroute.io.pcap import read_capture
from vecroute.io.replay import Replayer

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
PACKET_IGNORE_OUTGOING = 23  # SOL_PACKET option, Linux >= 4.20
SOL_PACKET = 263
MARKER_ID = 0xFEED
MARKER_MAGIC = b"vecroute-linux-reference-marker:"
PEER_MTU = 9000  # peers accept whatever the router sends; the router end's MTU gates input
TS0 = 1_000_000_000  # replay clock of the first input (ns)
TS_STEP = 1_000_000  # one input per millisecond of replay clock


@dataclass(frozen=True)
class Case:
    """One input: a frame received on interface ``rx``, with a label saying what it is."""

    label: str
    rx: str
    frame: bytes

    def describe(self) -> str:
        """Label, receiving interface and scapy's summary of the frame."""
        return f"{self.label} [rx {self.rx}] {Ether(self.frame).summary()}"

    def hex(self, limit: int = 400) -> str:
        """The frame's bytes in hex (a reproducer: Ether(bytes.fromhex(...))), capped."""
        hx = self.frame.hex()
        return hx if len(hx) <= limit else f"{hx[:limit]}...(+{len(self.frame) - limit // 2} bytes)"


Frame = tuple[str, bytes]  # (interface name, frame bytes)


# --- the Linux router ---------------------------------------------------------------------


def _sysctl(ns: str, *settings: str) -> None:
    run_in(ns, ["sysctl", "-qw", *settings])


class LinuxRouter:
    """The kernel configured from a vecroute config in a namespace, with peers to drive it.

    Use as a context manager; every namespace and veth goes with it, on failure too.
    """

    def __init__(self, config: dict, lab_prefix: str = "ld") -> None:
        self.cfg: Config = parse_config(config)
        _check_supported(self.cfg)
        self.lab = Lab(lab_prefix)
        self.socks: dict[str, socket.socket] = {}
        self.peer_if: dict[str, str] = {}
        self.seq = 0
        self.lost_markers = 0
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    # -- building ----------------------------------------------------------------------------

    def _build(self) -> None:
        lab, cfg = self.lab, self.cfg
        self.rt = rt = lab.netns("rt")
        self.peer = peer = lab.netns("pe")
        # defaults first: devices created afterwards inherit them
        for fam in ("all", "default"):
            _sysctl(
                rt,
                f"net.ipv4.conf.{fam}.forwarding=1",
                f"net.ipv4.conf.{fam}.rp_filter=0",
                f"net.ipv4.conf.{fam}.send_redirects=0",  # per interface below
                f"net.ipv4.conf.{fam}.accept_redirects=0",
                f"net.ipv4.conf.{fam}.log_martians=0",
                f"net.ipv6.conf.{fam}.forwarding=1",
                f"net.ipv6.conf.{fam}.accept_dad=0",
                f"net.ipv6.conf.{fam}.dad_transmits=0",
                f"net.ipv6.conf.{fam}.accept_ra=0",
                f"net.ipv6.conf.{fam}.router_solicitations=0",
                f"net.ipv6.conf.{fam}.accept_redirects=0",
            )
        _sysctl(
            rt,
            "net.ipv4.ip_forward=1",
            # vecroute has one global bucket, no per-destination one: ratemask 0 keeps
            # icmp_send away from the per-peer limiter altogether
            "net.ipv4.icmp_ratelimit=0",
            "net.ipv4.icmp_ratemask=0",
            "net.ipv6.icmp.ratelimit=0",
            f"net.ipv4.icmp_msgs_per_sec={cfg.icmp.rate}",
            f"net.ipv4.icmp_msgs_burst={cfg.icmp.burst}",
            "net.ipv4.icmp_echo_ignore_broadcasts=1",
        )
        for itf in cfg.interfaces:
            a, b = lab.veth(rt, peer, up=False, disable_ipv6=(False, True))
            assert itf.mac is not None
            ip("link", "set", "dev", a, "name", itf.name, ns=rt)
            ip("link", "set", "dev", itf.name, "address", format_mac(itf.mac),
               "mtu", str(itf.mtu), ns=rt)
            ip("link", "set", "dev", b, "mtu", str(PEER_MTU), "promisc", "on", "up", ns=peer)
            self.peer_if[itf.name] = b
        for itf in cfg.interfaces:
            # vecroute's per-interface `redirects` (IPv4 host redirects; default true where
            # the key exists) is Linux's send_redirects ("all" is 0: the interface decides)
            _sysctl(rt, f"net.ipv4.conf.{itf.name}.send_redirects="
                        f"{int(getattr(itf, 'redirects', False))}")
            ip("link", "set", "dev", itf.name, "up", ns=rt)
            for addr in itf.addresses:
                if addr.version == 4:
                    ip("addr", "add", str(addr), "brd", "+", "dev", itf.name, ns=rt)
                else:
                    ip("-6", "addr", "add", str(addr), "dev", itf.name, "nodad", ns=rt)
        for nb in cfg.neighbors:
            ip("neigh", "replace", str(nb.ip), "lladdr", format_mac(nb.mac), "dev",
               nb.interface, "nud", "permanent", ns=rt)
        for r in cfg.routes:
            fam = f"-{r.prefix.version}"
            if r.blackhole:
                ip(fam, "route", "add", "blackhole", str(r.prefix), ns=rt)
            elif r.via:
                dev = ("dev", r.dev) if r.dev else ()
                ip(fam, "route", "add", str(r.prefix), "via", str(r.via[0]), *dev, ns=rt)
            else:
                ip(fam, "route", "add", str(r.prefix), "dev", str(r.dev), ns=rt)
        with entered(peer):
            for itf in cfg.interfaces:
                s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
                s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
                s.bind((self.peer_if[itf.name], 0))
                s.setblocking(False)
                self.socks[itf.name] = s
        with entered(rt):
            self._netstat = open("/proc/thread-self/net/netstat", "rb", buffering=0)  # noqa: SIM115
        self.no_route_waits = 0
        self.resolutions = 0
        self._bucket: dict[str, tuple[float, float]] = {}
        self.markers = {itf.name: _marker_template(self.cfg, itf.name) for itf in cfg.interfaces}
        _wait_link_local(rt, [i.name for i in cfg.interfaces if i.mtu >= 1280])
        time.sleep(0.2)
        self._drain(0.05)

    # -- driving -----------------------------------------------------------------------------

    def _drain(self, quiet: float) -> list[Frame]:
        """Read every socket until ``quiet`` seconds pass without a frame."""
        got: list[Frame] = []
        by_fd = {s.fileno(): name for name, s in self.socks.items()}
        while True:
            ready, _, _ = select.select(list(self.socks.values()), [], [], quiet)
            if not ready:
                return got
            for s in ready:
                got += self._read(by_fd[s.fileno()], s)

    def _read(self, name: str, s: socket.socket) -> list[Frame]:
        out: list[Frame] = []
        while True:
            try:
                data, addr = s.recvfrom(65536)
            except BlockingIOError:
                return out
            if addr[2] != PACKET_OUTGOING:
                out.append((name, data))

    def _no_routes(self) -> int:
        """IpExtInNoRoutes: how many times ip_error() ran for a route miss."""
        self._netstat.seek(0)
        lines = self._netstat.read().decode().splitlines()
        for head, vals in zip(lines[::2], lines[1::2], strict=False):
            if head.startswith("IpExt:"):
                return int(vals.split()[head.split().index("InNoRoutes")])
        return 0

    def _bucket_take(self, src: str) -> float:
        """Linux answers a route miss through a per-source bucket (net.ipv4.route.
        error_cost = 1 s, error_burst = 5 s; global sysctls, not per namespace). Model it:
        take a token for src; return how long to wait if there was none."""
        now = time.monotonic()
        tokens, last = self._bucket.get(src, (5.0, now))
        tokens = min(5.0, tokens + now - last)
        if tokens >= 1.0:
            self._bucket[src] = (tokens - 1.0, now)
            return 0.0
        self._bucket[src] = (tokens, now)
        return 1.0 - tokens + 0.02

    def send(self, case: Case, timeout: float = 1.0) -> list[Frame]:
        """Inject one frame and return what the kernel emitted because of it (chatter out).

        A route miss whose ICMP error Linux's per-source limiter swallowed (see
        _bucket_take) is sent again once the bucket has refilled, so that what is compared
        is Linux's answer, not its rate limit."""
        before = self._no_routes()
        got = self._send(case, timeout)
        if self._no_routes() != before and IP in Ether(case.frame):
            wait = self._bucket_take(Ether(case.frame)[IP].src)
            if wait:
                self.no_route_waits += 1
                time.sleep(wait)
                self._bucket_take(Ether(case.frame)[IP].src)
                got = self._send(case, timeout)
        return got

    def _send(self, case: Case, timeout: float) -> list[Frame]:
        s = self.socks[case.rx]
        s.send(case.frame)
        self.seq += 1
        marker = self.markers[case.rx]
        got: list[Frame] = []
        if marker is None:  # no neighbour on this link to send a marker from
            return _strip_chatter(self._drain(0.05))
        s.send(marker(self.seq))
        by_fd = {x.fileno(): name for name, x in self.socks.items()}
        deadline = time.monotonic() + timeout
        seen = False
        while not seen:
            left = deadline - time.monotonic()
            if left <= 0:
                self.lost_markers += 1
                break
            ready, _, _ = select.select(list(self.socks.values()), [], [], left)
            for x in ready:
                for f in self._read(by_fd[x.fileno()], x):
                    if _is_marker_reply(f[1], self.seq):
                        seen = True
                    else:
                        got.append(f)
        got += [f for f in self._drain(0.002) if not _is_marker_reply(f[1], self.seq)]
        got = _strip_chatter(got)
        if any(_resolving(d) for _, d in got):
            # the input needs a neighbour nobody configured: fail the resolution now, so
            # that the queued packet's host/address unreachable comes in this window
            # rather than ~3 s later in another one, and no retransmission follows
            ip("neigh", "flush", "nud", "incomplete", ns=self.rt, check=False)
            got += _strip_chatter(self._drain(0.02))
            self.resolutions += 1
        return got

    def run(self, cases: Sequence[Case]) -> list[list[Frame]]:
        """Every case, one at a time: the frames each caused."""
        return [self.send(c) for c in cases]

    def close(self) -> None:
        for s in self.socks.values():
            with contextlib.suppress(OSError):
                s.close()
        self.socks.clear()
        if getattr(self, "_netstat", None) is not None:
            self._netstat.close()
        self.lab.close()

    def __enter__(self) -> LinuxRouter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_supported(cfg: Config) -> None:
    """The harness maps the plain routing subset; say so when a config goes beyond it."""
    if cfg.firewall is not None or "srv6" in cfg.raw:
        raise ValueError("linux reference: firewall and srv6 sections are not mapped")
    for r in cfg.routes:
        if len(r.via) > 1:
            raise ValueError(f"linux reference: {r.prefix}: ECMP hashes differ, not compared")
        if r.table:
            raise ValueError(f"linux reference: {r.prefix}: FIB tables are not mapped")
    for itf in cfg.interfaces:
        if itf.table:
            raise ValueError(f"linux reference: {itf.name}: FIB tables are not mapped")
        if itf.mac is None:
            raise ValueError(f"linux reference: {itf.name}: needs a mac")


def _wait_link_local(ns: str, names: list[str], timeout: float = 5.0) -> None:
    """Link-local addresses appear when a link comes up; wait until each has one."""
    deadline = time.monotonic() + timeout
    for name in names:
        while "fe80::" not in ip("-6", "addr", "show", "dev", name, ns=ns):
            if time.monotonic() > deadline:
                raise LabError(f"{ns}: {name} has no IPv6 link-local address")
            time.sleep(0.05)


def _marker_template(cfg: Config, name: str) -> Callable[[int], bytes] | None:
    """An echo request to the router on link ``name`` from a configured neighbour there."""
    itf = cfg.interfaces[cfg.interface_index(name)]
    assert itf.mac is not None
    me4 = [a.ip for a in itf.addresses if a.version == 4]
    for nb in cfg.neighbors:
        if nb.interface != name:
            continue
        if nb.ip.version == 4 and me4:
            hdr = Ether(dst=format_mac(itf.mac), src=format_mac(nb.mac)) / IP(
                src=str(nb.ip), dst=str(me4[0]))
            return functools.partial(_marker, hdr, ICMP, 8)
        if nb.ip.version == 6 and not nb.ip.is_link_local and itf.mtu >= 1280:
            hdr = Ether(dst=format_mac(itf.mac), src=format_mac(nb.mac)) / IPv6(
                src=str(nb.ip), dst=str(_link_local(itf.mac)))
            return functools.partial(_marker, hdr, ICMPv6EchoRequest, 128)
    return None


def _marker(hdr: Ether, cls: type, typ: int, seq: int) -> bytes:
    return bytes(hdr / cls(type=typ, id=MARKER_ID, seq=seq & 0xFFFF)
                 / (MARKER_MAGIC + struct.pack("!I", seq)))


def _link_local(mac: bytes) -> ipaddress.IPv6Address:
    eui = bytes([mac[0] ^ 0x02, mac[1], mac[2], 0xFF, 0xFE, mac[3], mac[4], mac[5]])
    return ipaddress.IPv6Address(b"\xfe\x80" + b"\x00" * 6 + eui)


def _is_marker_reply(data: bytes, seq: int) -> bool:
    return MARKER_MAGIC + struct.pack("!I", seq) in data


def _resolving(data: bytes) -> bool:
    """An ARP request or a neighbour solicitation."""
    et = int.from_bytes(data[12:14], "big")
    if et == 0x0806:
        return data[20:22] == b"\x00\x01"
    if et == 0x86DD and len(data) >= 56:
        _, nh, l4 = walk6(data[14:])
        return nh == 58 and data[14 + l4] == 135
    return False


def _strip_chatter(frames: list[Frame]) -> list[Frame]:
    """The kernel's own traffic that no input caused: MLD, RS/RA/NA, IGMP, and the
    reassembly-timeout errors that come 30 s after an incomplete fragment set (vecroute
    does not reassemble: those fragments are dropped at once, listed in the docs)."""
    return [f for f in frames if not _chatter(f[1])]


def _chatter(data: bytes) -> bool:
    if len(data) < 14:
        return False
    et = int.from_bytes(data[12:14], "big")
    if et == 0x0806:
        return False  # requests are caused by an input (every configured neighbour is permanent)
    if MARKER_MAGIC in data:
        return True  # a marker reply that arrived late (after its window)
    if et == 0x0800 and len(data) >= 34:
        ihl = (data[14] & 15) * 4
        proto = data[23]
        l4 = 14 + ihl
        if proto == 2:
            return True  # IGMP
        if proto == 1 and len(data) >= l4 + 2 and data[l4] == 11 and data[l4 + 1] == 1:
            return True  # reassembly time exceeded
    if et == 0x86DD and len(data) >= 54:
        _, nh, l4 = walk6(data[14:])
        if nh == 58 and l4 + 2 <= len(data) - 14:
            t, code = data[14 + l4], data[15 + l4]
            if t in (130, 131, 132, 133, 134, 136, 143):
                return True  # MLD, RS/RA, NA (solicitations and redirects are compared)
            if t == 3 and code == 1:
                return True  # reassembly time exceeded
    return False


# --- vecroute's side: the replay path ------------------------------------------------------


def write_pcap(path: Path, frames: Iterable[tuple[int, bytes]]) -> None:
    """A nanosecond pcap of (timestamp ns, frame) pairs."""
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1))
        for ts, data in frames:
            f.write(struct.pack("<IIII", ts // 10**9, ts % 10**9, len(data), len(data)))
            f.write(data)


def vecroute_run(config: dict, cases: Sequence[Case], workdir: Path) -> list[list[Frame]]:
    """Replay the cases through vecroute (one pcap per receiving interface, one input per
    millisecond of replay clock); each output is mapped back to its input by timestamp."""
    cfg = parse_config(config)
    workdir.mkdir(parents=True, exist_ok=True)
    by_rx: dict[str, list[tuple[int, bytes]]] = {}
    for n, c in enumerate(cases):
        by_rx.setdefault(c.rx, []).append((TS0 + n * TS_STEP, c.frame))
    inputs = []
    for rx, frames in by_rx.items():
        p = workdir / f"in-{rx}.pcap"
        write_pcap(p, frames)
        inputs.append((rx, str(p)))
    out_dir = workdir / "out"
    if out_dir.exists():
        for old in out_dir.iterdir():
            old.unlink()
    res = Replayer(cfg).run(inputs, out_dir)
    outs: list[list[Frame]] = [[] for _ in cases]
    for name, path in res.outputs.items():
        cap = read_capture(path)
        for k in range(len(cap.offsets)):
            n = (int(cap.ts_ns[k]) - TS0) // TS_STEP
            outs[n].append((name, cap.packet(k)))
    return outs


def vecroute_run_cli(config_path: Path, cases: Sequence[Case], workdir: Path,
                     exe: str | None = None) -> list[list[Frame]]:
    """The same through the ``vecroute replay`` command line (the user's exact path);
    ``exe`` defaults to the vecroute script next to this Python (the venv's)."""
    if exe is None:
        own = Path(sys.executable).parent / "vecroute"
        exe = str(own) if own.exists() else "vecroute"
    workdir.mkdir(parents=True, exist_ok=True)
    by_rx: dict[str, list[tuple[int, bytes]]] = {}
    for n, c in enumerate(cases):
        by_rx.setdefault(c.rx, []).append((TS0 + n * TS_STEP, c.frame))
    argv = [exe, "replay", str(config_path), "--out-dir", str(workdir / "out"), "-q"]
    for rx, frames in by_rx.items():
        p = workdir / f"in-{rx}.pcap"
        write_pcap(p, frames)
        argv += ["--in", f"{rx}={p}"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {p.returncode}: {p.stderr.strip()}")
    outs: list[list[Frame]] = [[] for _ in cases]
    for p in sorted((workdir / "out").glob("*.pcap")):
        cap = read_capture(p)
        for k in range(len(cap.offsets)):
            outs[(int(cap.ts_ns[k]) - TS0) // TS_STEP].append((p.stem, cap.packet(k)))
    return outs


# --- the normaliser ------------------------------------------------------------------------

Summary = tuple[str, ...]
DROPPED: Summary = ("dropped",)


def _digest(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()[:8]


def _ip4_body(raw: bytes) -> bytes:
    """The IPv4 packet with TTL, checksum and id zeroed: what forwarding must not change."""
    b = bytearray(raw)
    b[4:6] = b"\0\0"
    b[8] = 0
    b[10:12] = b"\0\0"
    return bytes(b)


def walk6(ip6: bytes) -> tuple[list[int], int, int]:
    """The IPv6 next-header chain from raw bytes: (headers seen, upper-layer protocol,
    its offset); hop-by-hop, routing, fragment, destination options and AH are skipped."""
    nh, p, chain = ip6[6], 40, []
    end = 40 + int.from_bytes(ip6[4:6], "big")
    for _ in range(16):
        chain.append(nh)
        if nh in (0, 43, 60) and p + 2 <= end:
            nh, p = ip6[p], p + (ip6[p + 1] + 1) * 8
        elif nh == 44 and p + 8 <= end:
            if int.from_bytes(ip6[p + 2:p + 4], "big") & 0xFFF8:
                return chain, -1, p + 8  # a later fragment: no upper-layer header
            nh, p = ip6[p], p + 8
        elif nh == 51 and p + 2 <= end:
            nh, p = ip6[p], p + (ip6[p + 1] + 2) * 4
        else:
            return chain, nh, p
    return chain, nh, p


def _ext_chain(raw: bytes) -> str:
    """The next-header numbers from the IPv6 header to the upper layer: 0,43,58."""
    chain, nh, _ = walk6(raw)
    return ",".join(str(x) for x in chain) if chain else str(nh)


def _quote_len(err_ip_total: int, hdr: int) -> int:
    return max(err_ip_total - hdr - 8, 0)


def frame_summary(cfg: Config, case: Case, name: str, data: bytes) -> str:
    """One emitted frame as a short, comparable string (see the module docstring)."""
    e = Ether(data)
    inp = Ether(case.frame)
    in_ip4 = inp[IP] if IP in inp and not isinstance(inp[IP], IPerror) else None
    in_ip6 = inp[IPv6] if IPv6 in inp else None
    dmac = e.dst
    if ARP in e:
        a = e[ARP]
        return f"{name} arp op={a.op} psrc={a.psrc} pdst={a.pdst} dmac={dmac}"
    if e.type == 0x0800 and IP in e:
        p = e[IP]
        raw = data[14 : 14 + p.len] if p.len else data[14:]  # the wire bytes, not scapy's
        tot = p.len
        ihl = p.ihl * 4
        same_flow = in_ip4 is not None and p.src == in_ip4.src and p.dst == in_ip4.dst
        if same_flow and p.proto == in_ip4.proto:
            s = f"{name} fwd ttl={p.ttl} len={tot} dmac={dmac}"
            if p.flags.MF or p.frag:
                s += f" frag={p.frag * 8}{'+' if p.flags.MF else ''}"
            if ihl > 20:
                s += f" ihl={ihl}"
            return s + f" body={_digest(_ip4_body(raw))}"
        if p.proto == 1 and ICMP in p:
            ic = p[ICMP]
            base = f"{name} icmp4 {ic.type}/{ic.code} src={p.src} dst={p.dst} ttl={p.ttl}"
            if ihl > 20:
                base += f" ihl={ihl}"
            if ic.type in (3, 4, 5, 11, 12):
                base += f" tos={p.tos:#04x} quote={_quote_len(tot, ihl)}"
                if ic.type == 3 and ic.code == 4:
                    base += f" mtu={ic.nexthopmtu}"
                if ic.type == 12:
                    base += f" ptr={ic.ptr}"
                if ic.type == 5:
                    base += f" gw={ic.gw}"
                if IPerror in ic:
                    base += f" qttl={ic[IPerror].ttl}"
                return base
            # echo replies: id, sequence and data must come back unchanged
            body = f" data={_digest(raw[ihl + 4:])}" if ic.type == 0 else ""
            return base + f" len={tot} dmac={dmac}{body}"
        if p.proto == 6 and TCP in p:
            t = p[TCP]
            return f"{name} tcp src={p.src} dst={p.dst} flags={t.flags} ttl={p.ttl}"
        return f"{name} ip4 proto={p.proto} src={p.src} dst={p.dst} ttl={p.ttl} len={tot}"
    if e.type == 0x86DD and IPv6 in e:
        p = e[IPv6]
        raw = data[14 : 14 + 40 + p.plen]
        chain_list, nh, l4 = walk6(raw)
        chain = ",".join(str(x) for x in chain_list)
        typ = raw[l4] if nh == 58 and l4 < len(raw) else -1
        code = raw[l4 + 1] if nh == 58 and l4 + 1 < len(raw) else -1
        in_reply = False
        if in_ip6 is not None:
            ic, inh, il4 = walk6(bytes(in_ip6))
            in_reply = inh == 58 and il4 < len(bytes(in_ip6)) and bytes(in_ip6)[il4] == 129
        same_flow = in_ip6 is not None and p.src == in_ip6.src and p.dst == in_ip6.dst
        if same_flow and not (typ == 129 and not in_reply):
            body = bytearray(raw)
            body[7] = 0
            return (f"{name} fwd hlim={p.hlim} plen={p.plen} dmac={dmac} nh={chain}"
                    f" body={_digest(bytes(body))}")
        if 0 <= typ < 128:
            s = (f"{name} icmp6 {typ}/{code} src={p.src} dst={p.dst} hlim={p.hlim}"
                 f" quote={max(len(raw) - l4 - 8, 0)}")
            if typ in (2, 4) and l4 + 8 <= len(raw):
                word = int.from_bytes(raw[l4 + 4:l4 + 8], "big")
                s += f" mtu={word}" if typ == 2 else f" ptr={word}"
            if chain != "58":
                s += f" nh={chain}"
            return s
        if typ == 129:
            return (f"{name} echo-reply6 src={p.src} dst={p.dst} hlim={p.hlim} plen={p.plen}"
                    f" data={_digest(raw[l4 + 4:])} nh={chain}")
        if typ == 137:
            return f"{name} redirect6 src={p.src} dst={p.dst}"
        if typ == 135 and l4 + 24 <= len(raw):
            tgt = ipaddress.IPv6Address(raw[l4 + 8:l4 + 24])
            return f"{name} ns target={tgt} src={p.src} dst={p.dst} hlim={p.hlim}"
        if nh == 6 and l4 + 14 <= len(raw):
            flags = TCP(raw[l4:]).flags
            return f"{name} tcp6 src={p.src} dst={p.dst} flags={flags} hlim={p.hlim}"
        t = f" type={typ}" if typ >= 0 else ""
        return f"{name} ip6 nh={chain}{t} src={p.src} dst={p.dst} hlim={p.hlim}"
    return f"{name} ether type={e.type:#06x} len={len(data)}"


def summarize(cfg: Config, case: Case, frames: Sequence[Frame]) -> Summary:
    """What one input caused, order-free: sorted frame summaries, or ``("dropped",)``.
    A frame whose source MAC is not its interface's says so (``smac=``)."""
    if not frames:
        return DROPPED
    macs = {i.name: format_mac(i.mac) for i in cfg.interfaces if i.mac is not None}
    out = []
    for n, d in frames:
        s = frame_summary(cfg, case, n, d)
        src = ":".join(f"{b:02x}" for b in d[6:12])
        out.append(s if src == macs.get(n) else f"{s} smac={src}")
    return tuple(sorted(out))


# --- the expected differences --------------------------------------------------------------


@dataclass
class Diff:
    """An input whose summaries differ, and the parsed input packet for matchers."""

    case: Case
    linux: Summary
    vecroute: Summary
    cfg: Config | None = None
    pkt: Ether = field(init=False)

    def __post_init__(self) -> None:
        self.pkt = Ether(self.case.frame)

    def line(self) -> str:
        """One line: the input, what Linux did, what vecroute did, the frame's bytes."""
        return (f"{self.case.describe()} -- linux: {' + '.join(self.linux)} -- vecroute: "
                f"{' + '.join(self.vecroute)} -- frame={self.case.hex()}")

    # helpers for matchers
    @property
    def l2_unicast(self) -> bool:
        """The frame went to a unicast MAC (Linux treats anything else as not for it)."""
        return not self.case.frame[0] & 1

    @property
    def v4(self) -> IP | None:
        return self.pkt[IP] if IP in self.pkt else None

    @property
    def v6(self) -> IPv6 | None:
        return self.pkt[IPv6] if IPv6 in self.pkt else None

    def dst_in(self, *nets: str) -> bool:
        p = self.v4 or self.v6
        return p is not None and _in(p.dst, nets)

    def src_in(self, *nets: str) -> bool:
        p = self.v4 or self.v6
        return p is not None and _in(p.src, nets)

    def only_linux_has(self, word: str) -> bool:
        """Linux emitted exactly vecroute's frames plus frames containing ``word``."""
        extra = list(self.linux)
        for v in self.vecroute:
            if v == "dropped":
                continue
            if v not in extra:
                return False
            extra.remove(v)
        return bool(extra) and all(word in x for x in extra if x != "dropped")


def _in(addr: str, nets: Sequence[str]) -> bool:
    a = ipaddress.ip_address(addr)
    return any(a.version == ipaddress.ip_network(n).version and a in ipaddress.ip_network(n)
               for n in nets)


def _fwd(s: Summary) -> bool:
    return any(" fwd " in x for x in s)


def _without(s: Summary, *keys: str) -> Summary:
    """s with the named key=value fields left out of every frame summary."""
    return tuple(" ".join(w for w in x.split() if w.split("=")[0] not in keys) for x in s)


def _ip4_opts(d: Diff) -> bytes:
    v4 = d.v4
    return bytes(v4)[20 : v4.ihl * 4] if v4 is not None and v4.ihl and v4.ihl > 5 else b""


def _ip6_chain(d: Diff) -> list[int]:
    v6 = d.v6
    return walk6(bytes(v6))[0] if v6 is not None else []


def _answered_from_dst(d: Diff) -> bool:
    """Linux answered the input from the input's own destination: it was for the router."""
    p = d.v4 or d.v6
    return p is not None and bool(d.linux) and all(f" src={p.dst} " in x for x in d.linux)


def _is_frag(d: Diff) -> bool:
    if d.v4 is not None:
        return bool(d.v4.flags.MF or d.v4.frag)
    return 44 in _ip6_chain(d)


def _martian4(d: Diff, net: str, exclude: str = "") -> bool:
    v4 = d.v4
    if v4 is None:
        return False
    hit = [a for a in (v4.src, v4.dst) if _in(a, [net]) and a != exclude]
    return bool(hit) and d.vecroute == DROPPED and d.linux != DROPPED


def _linux_rejects_options(opts: bytes) -> bool:
    """Would Linux's ip_options_compile() refuse these options, or its
    accept_source_route=0 drop the packet? (Malformed lengths, record-route and timestamp
    pointers below their minimum, loose or strict source routes.)"""
    i = 0
    while i < len(opts):
        t = opts[i]
        if t == 0:
            return False
        if t == 1:
            i += 1
            continue
        if i + 1 >= len(opts):
            return True
        ln = opts[i + 1]
        if ln < 2 or i + ln > len(opts):
            return True
        if t in (0x83, 0x89):
            return True
        if t == 7 and (ln < 3 or opts[i + 2] < 4):
            return True
        if t == 0x44 and (ln < 4 or opts[i + 2] < 5):
            return True
        i += ln
    return False


def _frag_sets(s: Summary) -> bool:
    return bool(s) and all(" fwd " in x and " frag=" in x for x in s)


def _first_fragment(s: Summary) -> Summary:
    """The piece with the lowest offset, without its digest."""
    def off(x: str) -> int:
        return next(int(w[5:].rstrip("+")) for w in x.split() if w.startswith("frag="))

    first = min(s, key=off)
    return _without((first,), "body")


def _network_address(d: Diff) -> bool:
    """The input's destination is the all-zeros host of one of the router's subnets."""
    p = d.v4
    if p is None or d.cfg is None:
        return False
    a = ipaddress.ip_address(p.dst)
    return any(x.version == 4 and x.network.prefixlen <= 30 and a == x.network.network_address
               for i in d.cfg.interfaces for x in i.addresses)


def _field(x: str, key: str, default: str = "") -> str:
    return next((w.split("=", 1)[1] for w in x.split() if w.startswith(key + "=")), default)


def _wrapped_fragments(d: Diff) -> bool:
    """Linux refragmented a fragment into pieces that end past 65535 or whose offset
    wrapped around."""
    if d.v4 is None or not d.v4.frag or not _frag_sets(d.linux):
        return False
    for x in d.linux:
        off = int(_field(x, "frag").rstrip("+"))
        end = off + int(_field(x, "len")) - int(_field(x, "ihl", "20"))
        if off < d.v4.frag * 8 or end > 65535:
            return True
    return False


_FORWARDING_PATH = (" fwd ", " icmp6 1/", " icmp6 2/", " icmp6 3/", " icmp6 4/", " ns target=",
                    " redirect6 ")


def _forwarding_path(s: Summary) -> bool:
    """Linux's output is what its forwarding path makes: the packet, errors, NS, redirect."""
    return s != DROPPED and all(any(k in x for k in _FORWARDING_PATH) for x in s)


def _chain_broken(d: Diff) -> bool:
    """The IPv6 extension header chain runs past the payload (a truncated header)."""
    if d.v6 is None:
        return False
    raw = bytes(d.v6)
    end = 40 + int.from_bytes(raw[4:6], "big")
    _, nh, p = walk6(raw[:end])
    return nh in (0, 43, 44, 51, 60) or p > end


def _unreachables(s: Summary) -> Summary:
    return tuple(x for x in s if " icmp4 3/1 " not in x and " icmp6 1/3 " not in x)


@dataclass(frozen=True)
class Expected:
    """A deliberate difference: which inputs, what each router does, and why."""

    key: str
    inputs: str
    linux: str
    vecroute: str
    reason: str
    match: Callable[[Diff], bool]


# The one table of deliberate differences. docs/linux-differences.md renders it (a test
# keeps the two in step: after editing a row, run python -m bench.linux_differential
# --update-docs). A row
# explains a Diff when its match() is true; keep matches narrow, so that a new difference
# on the same packets still fails.
EXPECTED: list[Expected] = [
    Expected(
        "reserved-240",
        "IPv4 from or to 240.0.0.0/4 (255.255.255.255 aside)",
        "routes it like unicast (forwards, or answers TTL expiry)",
        "drops it (`martian-source` / `martian-destination`)",
        "RFC 1812 5.3.7 / 4.2.2.11: class E addresses are not forwarded; Linux has treated "
        "240/4 as unicast since 2.6.25.",
        lambda d: _martian4(d, "240.0.0.0/4", "255.255.255.255"),
    ),
    Expected(
        "own-source-address",
        "IPv4 from outside whose source is one of the router's own addresses",
        "drops it as a martian (fib_validate_source finds a local route for the source)",
        "forwards it",
        "vecroute validates no source against the FIB (no RFC 3704 reverse-path check): it "
        "would cost every packet a second lookup (the one-lookup principle); a firewall "
        "rule (`deny ip from me to any in`) does it where wanted.",
        lambda d: d.v4 is not None and d.cfg is not None and d.linux == DROPPED
        and _fwd(d.vecroute) and any(
            a.version == 4 and str(a.ip) == d.v4.src
            for itf in d.cfg.interfaces for a in itf.addresses),
    ),
    Expected(
        "zeronet",
        "IPv4 from or to 0.0.0.0/8 (0.0.0.0 itself aside)",
        "routes it like unicast (0/8 is unicast since Linux 5.3): forwards it, or answers "
        "no route",
        "drops it (`martian-source` / `martian-destination`)",
        "RFC 1812 5.3.7 and 4.2.2.11: {0, host} addresses are not forwarded.",
        lambda d: _martian4(d, "0.0.0.0/8", "0.0.0.0"),
    ),
    Expected(
        "icmp4-error-source",
        "IPv4 to one router address that is answered with an ICMP error leaving by another "
        "interface (UDP to a closed port of eth1's address, received on eth0)",
        "sends the error from the address the packet was sent to",
        "sends it from the first address of the interface the error leaves by",
        "RFC 1812 4.3.2.4: a router's ICMP message comes from an address of the interface "
        "it is sent on (docs/config.md); Linux follows the host rule.",
        lambda d: d.v4 is not None and len(d.linux) == len(d.vecroute) == 1
        and " icmp4 " in d.linux[0] and f" src={d.v4.dst} " in d.linux[0]
        and _without(d.linux, "src") == _without(d.vecroute, "src"),
    ),
    Expected(
        "link-local-169-254",
        "IPv4 from or to 169.254.0.0/16",
        "forwards it",
        "drops it (`ip4-link-local`)",
        "RFC 3927 2.7: a router must not forward a packet with an IPv4 link-local source "
        "or destination.",
        lambda d: _martian4(d, "169.254.0.0/16"),
    ),
    Expected(
        "ip4-options",
        "IPv4 with options",
        "processes them: fills record-route and timestamp, drops source-routed packets "
        "(`accept_source_route=0`), answers a malformed option with parameter problem, "
        "echoes options in its ICMP errors",
        "forwards options unchanged (errors quote the packet, with a 20-byte header)",
        "A documented limit (docs/architecture.md, Known limits): the fast path does not "
        "parse options.",
        lambda d: bool(_ip4_opts(d)) and (
            _without(d.linux, "body", "ihl", "quote", "len", "src")
            == _without(d.vecroute, "body", "ihl", "quote", "len", "src")
            or (_linux_rejects_options(_ip4_opts(d)) and d.l2_unicast
                and (d.linux == DROPPED or all(" icmp4 12/" in x for x in d.linux)))),
    ),
    Expected(
        "ip4-frag-options",
        "IPv4 with options that are not copied on fragmentation (record route, timestamp), "
        "fragmented on a smaller MTU",
        "keeps the header length in later fragments (ip_options_fragment() overwrites the "
        "options with NOPs), so the fragments are cut at other offsets",
        "leaves the options out of later fragments (20-byte header)",
        "RFC 791 3.2: options whose copy flag is clear go in the first fragment only; both "
        "fragment sets reassemble to the same packet.",
        lambda d: bool(_ip4_opts(d)) and _frag_sets(d.linux) and _frag_sets(d.vecroute)
        and _first_fragment(d.linux) == _first_fragment(d.vecroute),
    ),
    Expected(
        "refrag-past-65535",
        "an IPv4 fragment that must be fragmented again and whose offset + length passes "
        "65535",
        "fragments it anyway: the last piece ends past 65535, or its 13-bit offset wraps "
        "around (65904 goes out as 368)",
        "drops it (`frag-offset-overflow`)",
        "RFC 791: the offset field cannot say more than 65528; a wrapped fragment corrupts "
        "the reassembly of an unrelated part of the packet.",
        lambda d: d.vecroute == DROPPED and _wrapped_fragments(d),
    ),
    Expected(
        "network-address",
        "IPv4 to the network (all-zeros host) address of a connected subnet up to /30",
        "sends it on the link: ARP request, then host unreachable when nobody answers",
        "drops it (`blackhole`: the subnet's network and broadcast addresses get drop "
        "routes)",
        "docs/config.md: RFC 1812 4.2.3.1 / 5.3.5: {net, 0} is an obsolete broadcast form "
        "and is not forwarded.",
        lambda d: _network_address(d) and d.vecroute == DROPPED and d.linux != DROPPED,
    ),
    Expected(
        "neighbour-unresolved",
        "a packet to a next hop with no neighbour entry (the corpus only has such next hops "
        "where vecroute and Linux disagree on what an address is)",
        "queues the packet, sends ARP / NS; when resolution fails (the harness fails it at "
        "once) host unreachable / address unreachable",
        "offline replay drops it (`neighbor-incomplete`) and sends one ARP / NS; live it "
        "queues it too",
        "Replay has no time to wait for an answer; the unreachable of a failed resolution "
        "belongs to the live control plane.",
        lambda d: bool(d.vecroute) and d.vecroute != DROPPED
        and any(" arp op=1 " in x or " ns target=" in x for x in d.vecroute)
        and _unreachables(d.linux) == d.vecroute,
    ),
    Expected(
        "fragment-to-router",
        "fragments addressed to the router that vecroute does not reassemble (a datagram over "
        "2000 bytes, more than 64 fragments, lengths it refuses)",
        "reassembles them and answers the whole packet",
        "drops them (`reass-too-big`, `reass-too-many`, ...)",
        "Documented limits of the reassembly (docs/architecture.md): contexts are fixed-size "
        "slots of flat arrays, so the datagram size and fragment count are bounded.",
        lambda d: _is_frag(d) and d.vecroute == DROPPED and _answered_from_dst(d),
    ),
    Expected(
        "answer-to-link-local-source",
        "an IPv6 packet from a link-local source that is no neighbour yet, answered with an "
        "ICMPv6 error (beyond scope, time exceeded, parameter problem, unreachable)",
        "resolves the source's MAC first (a Neighbour Solicitation), then answers",
        "answers at once, to the MAC the packet came from",
        "A link-local source is on the link its frame came from, so its MAC is the frame's "
        "(RFC 4291 2.5.6; docs/architecture.md); replay has no resolution to wait for.",
        lambda d: d.v6 is not None and _in(d.v6.src, ["fe80::/10"])
        and len(d.vecroute) == 1 and " icmp6 " in d.vecroute[0]
        and f" dst={d.v6.src} " in d.vecroute[0] and d.vecroute[0].split()[0] == d.case.rx
        and bool(d.linux) and all(f" ns target={d.v6.src} " in x for x in d.linux),
    ),
    Expected(
        "unspecified-destination",
        "IPv6 to :: (unspecified)",
        "looks it up like any destination: no route, destination unreachable (or a "
        "parameter problem from its hop-by-hop options first)",
        "drops it (`ip6-bad-destination`)",
        "RFC 4291 2.5.2: the unspecified address must never be a destination.",
        lambda d: d.v6 is not None and d.v6.dst == "::" and d.vecroute == DROPPED
        and all(" icmp6 1/0 " in x or " icmp6 4/" in x for x in d.linux),
    ),
    Expected(
        "link-local-destination",
        "IPv6 to a link-local address that is not the receiving interface's own",
        "sends it back onto the link it came from: NS for it, address unreachable when "
        "nobody answers (time exceeded at hop limit 1)",
        "drops it (`ip6-link-local`)",
        "ip6-input: link-local destinations are never routed (RFC 4291 2.5.6: such packets "
        "are not forwarded); a router has no business relaying on-link traffic.",
        lambda d: d.v6 is not None and _in(d.v6.dst, ["fe80::/10"]) and d.vecroute == DROPPED
        and d.linux != DROPPED and all(
            x.split()[0] == d.case.rx and (" ns target=" in x or " icmp6 1/3 " in x
                                           or " icmp6 3/0 " in x or " fwd " in x
                                           or " redirect6 " in x) for x in d.linux),
    ),
    Expected(
        "unspecified-source",
        "IPv6 from :: (unspecified) to be forwarded",
        "forwards it (ip6_forward() only checks the source when the packet goes back out "
        "of its own interface)",
        "drops it (`ip6-bad-source`)",
        "RFC 4291 2.5.2: a packet with the unspecified source must never be forwarded.",
        lambda d: d.v6 is not None and d.v6.src == "::" and d.vecroute == DROPPED
        and _fwd(d.linux),
    ),
    Expected(
        "srh-at-router",
        "IPv6 with a type-4 routing header (SRH) to a router address that is no SRv6 SID",
        "drops it silently (`seg6_enabled=0`), whatever Segments Left says",
        "Segments Left 0: ignores the header and handles the packet; > 0: ICMPv6 "
        "parameter problem code 0 at the Routing Type",
        "RFC 8200 4.4; Linux only parses an SRH where seg6 is enabled and drops it "
        "everywhere else.",
        lambda d: d.linux == DROPPED and d.pkt.haslayer("IPv6ExtHdrSegmentRouting")
        and len(d.vecroute) == 1 and (" icmp6 " in d.vecroute[0]
                                      or (" echo-reply6 " in d.vecroute[0]
                                          and d.vecroute[0].endswith(" nh=58"))),
    ),
    Expected(
        "redirect6",
        "IPv6 that leaves by the interface it came in on",
        "also sends an ICMPv6 redirect (no sysctl turns it off)",
        "an ND redirect only for a destination on the sender's link (target = destination); "
        "none naming a better router, and none when the interface's `redirects` is false",
        "RFC 4861 8.2 names a better router by its link-local address, which configured "
        "next hops do not give (Linux too sends none for a global target); Linux has no "
        "switch for IPv6 redirects, vecroute's `redirects` key turns both families off.",
        lambda d: d.only_linux_has(" redirect6 "),
    ),
    Expected(
        "icmp-timestamp",
        "ICMP timestamp request (type 13) to the router",
        "timestamp reply (type 14)",
        "drops it (`local-unhandled`)",
        "RFC 1812 4.3.3.8: a router MAY answer; vecroute does not (it leaks the clock).",
        lambda d: d.v4 is not None and d.pkt.haslayer(ICMP) and d.pkt[ICMP].type == 13
        and d.vecroute == DROPPED and all(" icmp4 14/0 " in x for x in d.linux),
    ),
    Expected(
        "ext-chain-broken",
        "forwarded IPv6 whose extension header chain runs past the payload (a truncated "
        "routing, fragment, destination options or AH header)",
        "forwards it (a router parses only hop-by-hop options)",
        "drops it (`ip6-bad-ext-header`)",
        "Bad input is normal input: ip6-input walks the whole chain (the firewall, SRv6 "
        "and ICMP need the upper layer) and counts a chain it cannot walk.",
        lambda d: _chain_broken(d) and d.vecroute == DROPPED and _forwarding_path(d.linux)
        and not _answered_from_dst(d),
    ),
    Expected(
        "hbh-not-first",
        "forwarded IPv6 whose hop-by-hop header is not the first extension header",
        "forwards it, or answers what its forwarding path finds first (hop limit, no route, "
        "the first header's options); a destination answers parameter problem code 1",
        "drops it (`ip6-bad-ext-header`)",
        "RFC 8200 4.1: hop-by-hop options must immediately follow the IPv6 header.",
        lambda d: 0 in _ip6_chain(d)[1:] and d.vecroute == DROPPED
        and _forwarding_path(d.linux),
    ),
]


def classify(d: Diff) -> Expected | None:
    """The expected-difference row that explains d, if one does."""
    for row in EXPECTED:
        if row.match(d):
            return row
    return None


def compare(cfg_dict: dict, cases: Sequence[Case], linux: Sequence[Sequence[Frame]],
            vecroute: Sequence[Sequence[Frame]]) -> list[Diff]:
    """Every input whose two summaries differ."""
    cfg = parse_config(cfg_dict)
    diffs = []
    for c, lo, vo in zip(cases, linux, vecroute, strict=True):
        ls, vs = summarize(cfg, c, lo), summarize(cfg, c, vo)
        if ls != vs:
            diffs.append(Diff(c, ls, vs, cfg))
    return diffs


def render_expected_table() -> str:
    """The EXPECTED table as the markdown docs/linux-differences.md carries."""
    rows = ["| key | inputs | Linux | vecroute | why |", "|---|---|---|---|---|"]
    for e in EXPECTED:
        rows.append(f"| `{e.key}` | {e.inputs} | {e.linux} | {e.vecroute} | {e.reason} |")
    return "\n".join(rows) + "\n"


def require_root() -> None:
    """The differential tests need root and network namespaces; without them they fail."""
    if os.geteuid() != 0:
        import pytest

        pytest.fail("the Linux reference router needs root (network namespaces)")


__all__ = [
    "Case",
    "Diff",
    "EXPECTED",
    "Expected",
    "LinuxRouter",
    "classify",
    "compare",
    "render_expected_table",
    "summarize",
    "vecroute_run",
    "vecroute_run_cli",
]
