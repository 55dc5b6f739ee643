"""Shared test helpers: a scapy-driven router harness and independent checksum oracles.

``Router`` builds a Fib from a config dict (the same dict a TOML file parses to), pushes
scapy packets (or raw bytes) through the compiled graph in batches, and hands back what
was transmitted as raw frames plus the tx interface name, together with the counters
that changed, by name. Everything emitted is meant to be parsed back with scapy and
checked field by field; the checksum helpers below recompute checksums with scapy
(delete the field, rebuild) so the oracle is independent of vecroute's kernels.
"""

from __future__ import annotations

import ipaddress
import os
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Padding

from vecroute.control.config import parse_config
from vecroute.graph.counters import COUNTERS
from vecroute.graph.dataplane import build_dataplane
from vecroute.graph.state import TB_RST, icmp_bucket
from vecroute.packet.batch import M_NEXT, M_ORIG, M_SEQ, M_TX, MAX_FRAME, SLOT, PacketBatch
from vecroute.packet.node_ids import DONE_DROP, DONE_PUNT, DONE_TX, FREE

# --- numba cache hygiene -----------------------------------------------------------------------


def pytest_configure(config) -> None:
    """Drop stale numba cache indexes once, in the controlling process (not in xdist
    workers), before anything compiles: see vecroute.warmup.clear_stale_cache."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    from vecroute.warmup import clear_stale_cache

    clear_stale_cache()


# --- the standard test network (documentation prefixes only) -------------------------------

R0, R1, R2, R3 = (f"02:00:00:00:00:0{i}" for i in range(1, 5))  # router interface MACs
H0 = "02:00:00:00:aa:10"  # host on eth0
N1 = "02:00:00:00:bb:02"  # next hop on eth1
N2 = "02:00:00:00:cc:02"  # next hop on eth2 (small MTU)
N3 = "02:00:00:00:dd:02"  # next hop on eth3 (IPv6 minimum MTU)
BCAST = "ff:ff:ff:ff:ff:ff"

R0_IP4, R0_IP6 = "198.51.100.254", "2001:db8:1::1"
R1_IP4, R1_IP6 = "192.0.2.1", "2001:db8:2::1"
R2_IP4 = "192.0.2.65"
R3_IP4, R3_IP6 = "192.0.2.129", "2001:db8:3::1"
H0_IP4, H0_IP6 = "198.51.100.10", "2001:db8:1::10"
N1_IP4, N1_IP6 = "192.0.2.2", "2001:db8:2::2"
N2_IP4 = "192.0.2.66"
N3_IP4, N3_IP6 = "192.0.2.130", "2001:db8:3::2"

DST4 = "203.0.113.5"  # via N1 on eth1 (MTU 1500)
DST4_SMALL = "203.0.113.130"  # via N2 on eth2 (MTU 576)
DST4_INCOMPLETE = "203.0.113.200"  # via 192.0.2.3 on eth1, no neighbour entry
DST4_NOROUTE = "198.18.0.1"
DST6 = "2001:db8:100::5"  # via N1 on eth1
DST6_SMALL = "2001:db8:200::5"  # via N3 on eth3 (MTU 1280)
DST6_INCOMPLETE = "2001:db8:300::5"  # via 2001:db8:2::3, no neighbour entry
DST6_NOROUTE = "2001:db8:dead::1"
SMALL_MTU = 576


def base_config(**overrides) -> dict:
    """The standard four-interface router as a config dict (deep-copied each call)."""
    cfg = {
        "interfaces": [
            {"name": "eth0", "mac": R0, "addresses": [f"{R0_IP4}/24", f"{R0_IP6}/64"]},
            {"name": "eth1", "mac": R1, "addresses": [f"{R1_IP4}/26", f"{R1_IP6}/64"]},
            {"name": "eth2", "mac": R2, "addresses": [f"{R2_IP4}/26"], "mtu": SMALL_MTU},
            {"name": "eth3", "mac": R3, "addresses": [f"{R3_IP4}/26", f"{R3_IP6}/64"], "mtu": 1280},
        ],
        "routes": [
            {"prefix": "203.0.113.0/25", "via": N1_IP4},
            {"prefix": "203.0.113.128/26", "via": N2_IP4},
            {"prefix": "203.0.113.192/26", "via": "192.0.2.3"},
            {"prefix": "2001:db8:100::/48", "via": N1_IP6},
            {"prefix": "2001:db8:200::/48", "via": N3_IP6},
            {"prefix": "2001:db8:300::/48", "via": "2001:db8:2::3"},
        ],
        "neighbors": [
            {"ip": H0_IP4, "mac": H0, "interface": "eth0"},
            {"ip": H0_IP6, "mac": H0, "interface": "eth0"},
            {"ip": N1_IP4, "mac": N1, "interface": "eth1"},
            {"ip": N1_IP6, "mac": N1, "interface": "eth1"},
            {"ip": N2_IP4, "mac": N2, "interface": "eth2"},
            {"ip": N3_IP4, "mac": N3, "interface": "eth3"},
            {"ip": N3_IP6, "mac": N3, "interface": "eth3"},
        ],
        "icmp": {"rate": 1000, "burst": 1000, "tcp_reset_burst": 1000},
    }
    cfg.update(overrides)
    return cfg


DROP_COUNTERS = frozenset(c.name for c in COUNTERS if c.kind == "drop")


# --- the harness ---------------------------------------------------------------------------


@dataclass
class Tx:
    """One transmitted frame: the interface it leaves by and its bytes."""

    ifname: str
    data: bytes
    orig: int  # index (in the run() call) of the input packet it came from
    seq: int  # order among the frames made from that input (0: the input's own slot)
    generated: bool  # built in a spare slot (fragment 2..n, ARP request, NS)

    @property
    def pkt(self) -> Packet:
        return Ether(self.data)


@dataclass
class Result:
    tx: list[Tx]
    counters: dict[str, int]  # counters that changed during this run (delta), by name
    fates: list[str] = field(default_factory=list)  # per input packet: tx / drop / punt
    n_in: int = 0

    def c(self, name: str) -> int:
        assert name in {c.name for c in COUNTERS}, f"undeclared counter {name}"
        return self.counters.get(name, 0)

    def on(self, ifname: str) -> list[Tx]:
        return [t for t in self.tx if t.ifname == ifname]

    def of(self, orig: int) -> list[Tx]:
        return [t for t in self.tx if t.orig == orig]

    @property
    def drops(self) -> int:
        return sum(v for k, v in self.counters.items() if k in DROP_COUNTERS)

    def check_accounting(self) -> None:
        """Every input packet ends in exactly one counted disposition.

        Drops are counted by reason; an input that triggers an ICMP error or a TCP RST is
        counted as a drop and its slot is reused for the answer, so answers are taken off
        the tx count; an answer that died is a second drop, counted as answer-dropped too.
        Generated packets (fragments 2..n, ARP/NS requests, redirects) live in spare
        slots; so does the Time Exceeded of an expired reassembly, which answers no input
        packet."""
        assert len(self.fates) == self.n_in
        assert all(f in ("tx", "drop", "punt") for f in self.fates), Counter(self.fates)
        tx_in_slots = sum(1 for t in self.tx if not t.generated)
        spare_errors = sum(1 for t in self.tx if t.generated and _is_icmp_error(t.data))
        answers = self.c("icmp-error-sent") + self.c("tcp-reset-sent") - spare_errors
        drops = self.drops - self.c("answer-dropped")
        assert drops + self.c("punt") + tx_in_slots - answers == self.n_in, (
            self.counters,
            tx_in_slots,
            self.n_in,
        )


def _is_icmp_error(frame: bytes) -> bool:
    """An unfragmented ICMP/ICMPv6 error (or a first fragment of one), by its bytes."""
    if frame[12:14] == b"\x08\x00" and frame[23] == 1:
        ihl = (frame[14] & 15) * 4
        if int.from_bytes(frame[20:22], "big") & 0x1FFF or len(frame) <= 14 + ihl:
            return False
        return frame[14 + ihl] in (3, 4, 11, 12)  # not redirects: those are not "errors sent"
    if frame[12:14] == b"\x86\xdd" and frame[20] == 58 and len(frame) > 54:
        return frame[54] < 128
    return False


def _frame(p) -> bytes:
    return p if isinstance(p, bytes | bytearray) else bytes(p)


# A canary: a full-size frame to a MAC that is not the router's. ethernet-input drops it
# (not-for-us) without writing a byte, so its whole slot must come out of a batch exactly
# as it went in; guarded runs put one before and after every packet (slot 0 and the last
# slot included), so any write outside a packet's own slot changes a canary.
CANARY_MAC = "02:00:00:00:ca:fe"
_rng = np.random.default_rng(1812)
CANARY = bytes(Ether(dst=CANARY_MAC, src=H0, type=0x88B5)) + _rng.integers(
    0, 256, MAX_FRAME - 14, dtype=np.uint8).tobytes()
CANARY_HEADROOM = _rng.integers(0, 256, SLOT, dtype=np.uint8)


class Router:
    """A router built from a config dict; runs scapy packets through the compiled graph."""

    def __init__(
        self, config: dict | None = None, vector_size: int = 256, spare_factor: int = 4
    ) -> None:
        self.cfg = parse_config(config if config is not None else base_config())
        dp = build_dataplane(self.cfg)
        self.fib, self.firewall = dp.fib, dp.firewall
        self.batch = PacketBatch(vector_size, spare_factor)
        self.graph = dp.graph(self.batch)
        self.state = self.graph.state
        self.names = [i.name for i in self.cfg.interfaces]

    def counters(self) -> dict[str, int]:
        return {c.name: int(v) for c, v in zip(COUNTERS, self.state.counters, strict=True)}

    def set_icmp_rate(self, rate: int, burst: int) -> None:
        self.state.icmp_tb[:TB_RST] = icmp_bucket(rate, burst)[:TB_RST]

    def run(
        self, packets, rx: str = "eth0", now_ns: int = 0, ts_ns=None, guard: bool = False
    ) -> Result:
        """Run packets (scapy packets, bytes, or (ifname, packet) pairs) received on rx.

        Packets go through in batches of the vector size; each batch is run with the
        timestamp of its last packet as the clock (like replay). ``ts_ns`` gives each
        packet its own timestamp (default: all ``now_ns``). ``guard`` surrounds every
        packet with canary slots and fails if any byte of a canary slot changed."""
        items = [p if isinstance(p, tuple) else (rx, p) for p in packets]
        frames = [_frame(p) for _, p in items]
        ts = (
            np.full(len(items), now_ns, dtype=np.int64)
            if ts_ns is None
            else np.asarray(ts_ns, dtype=np.int64)
        )
        if guard:
            return self._run_guarded(items, frames, ts)
        return self._run(items, frames, ts, self.batch.vector_size)

    def _run_guarded(self, items, frames, ts) -> Result:
        per = (self.batch.vector_size - 1) // 2  # packets per batch: C p C p ... p C
        g_items, g_frames, g_ts, real = [], [], [], []
        for start in range(0, len(frames), per):
            chunk = range(start, min(start + per, len(frames)))
            for k in chunk:
                g_items += [(items[k][0], None), items[k]]
                g_frames += [CANARY, frames[k]]
                g_ts += [ts[k], ts[k]]
                real += [-1, k]
            g_items.append((items[chunk[-1]][0], None))
            g_frames.append(CANARY)
            g_ts.append(ts[chunk[-1]])
            real.append(-1)
        res = self._run(g_items, g_frames, np.asarray(g_ts, dtype=np.int64), 2 * per + 1,
                        canaries=[r < 0 for r in real])
        canaries = sum(r < 0 for r in real)
        assert [f for f, r in zip(res.fates, real, strict=True) if r < 0] == ["drop"] * canaries
        res.counters["not-for-us"] -= canaries
        if not res.counters["not-for-us"]:
            del res.counters["not-for-us"]
        res.fates = [f for f, r in zip(res.fates, real, strict=True) if r >= 0]
        res.n_in = len(frames)
        for t in res.tx:  # a spare slot answering no input (reassembly timeout): -1
            t.orig = real[t.orig] if t.orig < len(real) else -1
        return res

    def _run(self, items, frames, ts, step: int, canaries=None) -> Result:
        rxs = np.array([self.names.index(r) for r, _ in items], dtype=np.int32)
        lens = np.array([len(f) for f in frames], dtype=np.int32)
        offs = np.zeros(len(frames), dtype=np.int64)
        if len(frames) > 1:
            offs[1:] = np.cumsum(lens[:-1])
        data = np.frombuffer(b"".join(frames) or b"\0", dtype=np.uint8)
        before = self.state.counters.copy()
        b, g = self.batch, self.graph
        out: list[Tx] = []
        fates: list[str] = []
        pos = 0
        fate_names = {DONE_TX: "tx", DONE_DROP: "drop", DONE_PUNT: "punt"}
        while pos < len(frames):
            n = b.load(data, offs, lens, ts, rxs, pos, min(step, len(frames) - pos))
            guarded = [i for i in range(n) if canaries and canaries[pos + i]]
            for i in guarded:  # the canary slot's headroom: noise too, not zeros
                b.buf[i * SLOT : i * SLOT + 256] = CANARY_HEADROOM[:256]
                b.buf[i * SLOT + 256 + MAX_FRAME : (i + 1) * SLOT] = CANARY_HEADROOM[
                    256 + MAX_FRAME :]
            before_slots = {i: b.buf[i * SLOT : (i + 1) * SLOT].copy() for i in guarded}
            txl = g.run(b, int(ts[pos + n - 1])).copy()
            for i, want in before_slots.items():
                got = b.buf[i * SLOT : (i + 1) * SLOT]
                bad = np.nonzero(got != want)[0]
                assert bad.size == 0, (
                    f"bytes {bad[0]}..{bad[-1]} of canary slot {i} were overwritten "
                    f"(a write outside packet slot {i - 1 if bad[0] < 256 else i + 1})")
            meta = b.meta
            for i in txl:
                i = int(i)
                out.append(
                    Tx(
                        self.names[int(meta[M_TX, i])],
                        b.frame(i),
                        pos + int(meta[M_ORIG, i]),
                        int(meta[M_SEQ, i]),
                        i >= n,
                    )
                )
            fates += [fate_names.get(int(meta[M_NEXT, i]), f"?{meta[M_NEXT, i]}") for i in range(n)]
            # generated slots must be transmitted or free, never left in a node (or dropped:
            # an expired reassembly's Time Exceeded that was rate-limited, say)
            for i in range(n, int(b.nalloc[0])):
                assert int(meta[M_NEXT, i]) in (DONE_TX, FREE, DONE_DROP), int(meta[M_NEXT, i])
            pos += n
        out.sort(key=lambda t: (t.orig, t.seq))
        delta = self.state.counters - before
        counters = {c.name: int(v) for c, v in zip(COUNTERS, delta, strict=True) if v}
        return Result(out, counters, fates, len(frames))


@pytest.fixture
def router() -> Router:
    return Router()


# --- scapy helpers ---------------------------------------------------------------------------


def eth(dst: str = R0, src: str = H0) -> Ether:
    return Ether(dst=dst, src=src)


def mac_bytes(mac: str) -> bytes:
    return bytes(int(x, 16) for x in mac.split(":"))


def recomputed(pkt: Packet, layer: type, fname: str) -> int | None:
    """What scapy computes for a checksum field when it is deleted and the packet rebuilt;
    None when scapy cannot rebuild this packet faithfully (its dissection of an ICMP quote
    as RFC 4884 extensions, say): then only the independent RFC 1071 check applies."""
    if layer is not IP and Padding in pkt[layer]:
        return None  # scapy leaves dissected padding (a lying quoted length) out of its sum
    data = _wire(pkt)
    p = pkt.copy()
    p[layer].setfieldval(fname, None)
    rebuilt = bytes(p)
    diff = [i for i, (a, b) in enumerate(zip(rebuilt, data, strict=False)) if a != b]
    if len(rebuilt) != len(data) or (diff and diff[-1] - diff[0] > 1):
        return None
    return pkt.__class__(rebuilt)[layer].getfieldval(fname)


_CK_FIELDS = {IP: "chksum", ICMP: "chksum", UDP: "chksum", TCP: "chksum"}


def assert_checksums(pkt: Packet) -> None:
    """Every outer checksum of pkt is right: verified with an independent RFC 1071 sum over
    the bytes, and equal to scapy's recomputation (field deleted, packet rebuilt). Headers
    quoted inside ICMP errors are not outer layers (scapy dissects them as IPerror...)."""
    assert_sums(_wire(pkt))
    frag = IP in pkt and (pkt[IP].flags.MF or pkt[IP].frag)
    layer = pkt
    while layer is not None and layer.name != "NoPayload":
        cls = type(layer)
        if cls.__name__ in ("IPerror", "IPerror6"):
            break  # the quote inside an ICMP error: not ours to checksum
        fname = _CK_FIELDS.get(cls)
        if fname is None and cls.__name__.startswith("ICMPv6") and "cksum" in layer.fields:
            fname = "cksum"
        no_udp_ck = cls is UDP and layer.chksum == 0 and IP in pkt  # RFC 768: not computed
        if fname is not None and not (frag and cls is not IP) and not no_udp_ck:
            have = layer.getfieldval(fname)
            want = recomputed(pkt, cls, fname)
            if want is not None:
                assert have == want, f"{cls.__name__}.{fname} {have:#06x} != scapy {want:#06x}"
        layer = layer.payload if layer.payload else None


def _wire(pkt: Packet) -> bytes:
    """The bytes pkt was dissected from (re-serializing an odd dissection may differ)."""
    return pkt.original if getattr(pkt, "original", None) else bytes(pkt)


def assert_sums(frame: bytes) -> None:
    """Independent oracle: the IPv4 header sum and, for an unfragmented ICMP/UDP/TCP/ICMPv6
    packet without IPv6 extension headers, the upper-layer sum verify (RFC 1071)."""
    et = frame[12:14]
    if et == b"\x08\x00":
        ip = frame[14:]
        ihl = (ip[0] & 15) * 4
        ip = ip[: int.from_bytes(ip[2:4], "big")]
        assert inet_sum(ip[:ihl]) == 0xFFFF, "ip4 header checksum"
        if int.from_bytes(ip[6:8], "big") & 0x3FFF:
            return  # a fragment: the upper-layer sum spans other fragments
        proto, l4 = ip[9], ip[ihl:]
        if proto == 1:
            assert inet_sum(l4) == 0xFFFF, "icmp checksum"
        elif proto in (6, 17) and not (proto == 17 and l4[6:8] == b"\0\0"):
            pseudo = ip[12:20] + bytes([0, proto]) + len(l4).to_bytes(2, "big")
            assert inet_sum(pseudo + l4) == 0xFFFF, "tcp/udp checksum"
    elif et == b"\x86\xdd":
        ip = frame[14:]
        plen, nh = int.from_bytes(ip[4:6], "big"), ip[6]
        if nh in (6, 17, 58):
            pseudo = ip[8:40] + plen.to_bytes(4, "big") + bytes([0, 0, 0, nh])
            assert inet_sum(pseudo + ip[40 : 40 + plen]) == 0xFFFF, "ip6 upper-layer checksum"


def ip4_header_ok(hdr: bytes) -> bool:
    """Independent RFC 1071 verification of an IPv4 header."""
    return inet_sum(hdr) == 0xFFFF


def inet_sum(data: bytes) -> int:
    """One's complement sum (folded, not inverted) of data as big-endian 16-bit words."""
    if len(data) % 2:
        data += b"\0"
    s = 0
    for i in range(0, len(data), 2):
        s += (data[i] << 8) | data[i + 1]
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def inet_checksum(data: bytes) -> int:
    return ~inet_sum(data) & 0xFFFF


def solicited_node(addr: str) -> str:
    a = ipaddress.IPv6Address(addr).packed
    return str(ipaddress.IPv6Address(bytes([0xFF, 0x02] + [0] * 9 + [0x01, 0xFF]) + a[13:]))
