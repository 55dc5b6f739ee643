"""`vecroute gen`: a pktgen-style packet generator on an AF_PACKET TX ring.

A template frame is built once; a compiled kernel stamps each vector of frames with its
flow (incrementing or random source port / source / destination address) and recomputes
the IP and upper-layer checksums with the wide-word checksum kernel; the frames leave
through the same TX ring code the router uses, one send() per vector. The result is
printed the way Linux pktgen prints it (same arithmetic).
"""

from __future__ import annotations

import ipaddress
import json
import struct
import time
from dataclasses import asdict, dataclass

import numpy as np
from numba import njit

from vecroute.packet.batch import HEADROOM, M_LEN, M_OFF, SLOT, PacketBatch
from vecroute.packet.checksum import checksum, pseudo_header4, pseudo_header6
from vecroute.packet.headers import wr16, wr32

PROTOS = ("udp", "tcp-syn", "icmp")
VARY = ("sport", "src", "dst")
_UDP, _TCP, _ICMP = 0, 1, 2


class GenError(ValueError):
    """Bad generator arguments (one line)."""


@dataclass
class GenSpec:
    src: str
    dst: str
    dst_mac: bytes
    src_mac: bytes
    proto: str = "udp"
    size: int = 64
    sport: int = 9
    dport: int = 9
    flows: int = 1
    vary: str = "sport"
    random: bool = False
    ttl: int = 64


@dataclass
class GenResult:
    packets: int
    size: int
    elapsed_ns: int
    idle_ns: int
    errors: int

    @property
    def pps(self) -> int:
        return self.packets * 1_000_000_000 // self.elapsed_ns if self.elapsed_ns else 0

    @property
    def bps(self) -> int:
        return self.pps * 8 * self.size

    def pktgen_text(self) -> str:
        """pktgen's two result lines (net/core/pktgen.c, same integer arithmetic)."""
        us = self.elapsed_ns // 1000
        idle = self.idle_ns // 1000
        return (
            f"OK: {us}(c{us - idle}+d{idle}) usec, {self.packets} ({self.size}byte,0frags)\n"
            f"  {self.pps}pps {self.bps // 1_000_000}Mb/sec ({self.bps}bps) "
            f"errors: {self.errors}"
        )

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(pps=self.pps, bps=self.bps, mbps=self.bps // 1_000_000)
        return d


def build_template(spec: GenSpec) -> tuple[bytes, int, int, int]:
    """The first frame, plus (family, l3 offset, protocol code) for the stamping kernel."""
    src, dst = ipaddress.ip_address(spec.src), ipaddress.ip_address(spec.dst)
    if src.version != dst.version:
        raise GenError(f"--src {src} and --dst {dst} are not the same IP version")
    v6 = src.version == 6
    l3len = 40 if v6 else 20
    code = PROTOS.index(spec.proto)
    l4min = {_UDP: 8, _TCP: 20, _ICMP: 8}[code]
    minimum = 14 + l3len + l4min
    if not minimum <= spec.size <= 2048:
        raise GenError(
            f"--size {spec.size}: must be {minimum}..2048 for {spec.proto} over IPv{src.version}"
        )
    payload = b"\x00" * (spec.size - minimum) if code != _TCP else b""
    if code == _UDP:
        l4 = struct.pack("!HHHH", spec.sport, spec.dport, 8 + len(payload), 0) + payload
        proto = 17
    elif code == _TCP:
        l4 = struct.pack("!HHIIBBHHH", spec.sport, spec.dport, 1, 0, 5 << 4, 0x02, 65535, 0, 0)
        proto = 6
    else:
        l4 = struct.pack("!BBHHH", 128 if v6 else 8, 0, 0, 1, 0) + payload
        proto = 58 if v6 else 1
    if v6:
        l3 = struct.pack("!IHBB", 0x60000000, len(l4), proto, spec.ttl) + src.packed + dst.packed
        et = 0x86DD
    else:
        l3 = struct.pack("!BBHHHBBH", 0x45, 0, 20 + len(l4), 0, 0x4000, spec.ttl, proto, 0)
        l3 += src.packed + dst.packed
        et = 0x0800
    frame = spec.dst_mac + spec.src_mac + struct.pack("!H", et) + l3 + l4
    frame += b"\x00" * (spec.size - len(frame))  # Ethernet padding (TCP SYN)
    return frame, 6 if v6 else 4, 14, code


@njit(cache=True)
def stamp(buf, meta, tmpl, n, seq, flows, vary, rand, family, code, rng_state) -> None:
    """Write n frames from the template, each with its flow and fresh checksums."""
    ln = tmpl.shape[0]
    l3 = 14
    l3len = 40 if family == 6 else 20
    l4 = l3 + l3len
    for i in range(n):
        o = i * SLOT + HEADROOM
        for b in range(ln):
            buf[o + b] = tmpl[b]
        meta[M_OFF, i] = o
        meta[M_LEN, i] = ln
        if rand:
            x = rng_state[0]
            x ^= (x << np.uint64(13)) & np.uint64(0xFFFFFFFFFFFFFFFF)
            x ^= x >> np.uint64(7)
            x ^= (x << np.uint64(17)) & np.uint64(0xFFFFFFFFFFFFFFFF)
            rng_state[0] = x
            f = np.int64(x % np.uint64(flows))
        else:
            f = (seq + i) % flows
        if vary == 0:  # source port (ICMP: the echo id)
            p = o + l4 if code != 2 else o + l4 + 4
            v = (np.int64(tmpl[p - o]) << 8 | np.int64(tmpl[p - o + 1])) + f
            wr16(buf, p, v & 0xFFFF)
        else:  # the last 32 bits of the source or destination address
            a = (
                o
                + l3
                + (12 if family == 4 else 20)
                + (0 if vary == 1 else (4 if family == 4 else 16))
            )
            v = (
                (np.int64(tmpl[a - o]) << 24)
                | (np.int64(tmpl[a - o + 1]) << 16)
                | (np.int64(tmpl[a - o + 2]) << 8)
                | np.int64(tmpl[a - o + 3])
            ) + f
            wr32(buf, a, v & 0xFFFFFFFF)
        if code == 2 and vary != 0:
            wr16(buf, o + l4 + 6, (seq + i) & 0xFFFF)  # echo sequence number
        if family == 4:
            wr16(buf, o + l3 + 10, 0)
            wr16(buf, o + l3 + 10, checksum(buf, o + l3, 20, np.uint64(0)))
            tot = (np.int64(buf[o + l3 + 2]) << 8 | np.int64(buf[o + l3 + 3])) - 20
        else:
            tot = np.int64(buf[o + l3 + 4]) << 8 | np.int64(buf[o + l3 + 5])
        ck = o + l4 + (6 if code == 0 else (16 if code == 1 else 2))
        wr16(buf, ck, 0)
        if code == 2 and family == 4:
            acc = np.uint64(0)
        elif family == 4:
            acc = pseudo_header4(buf, o + l3, 17 if code == 0 else 6, tot)
        else:
            acc = pseudo_header6(buf, o + l3, 17 if code == 0 else (6 if code == 1 else 58), tot)
        c = checksum(buf, o + l4, tot, acc)
        if c == 0 and code == 0:
            c = 0xFFFF  # UDP: a computed 0 is sent as all ones
        wr16(buf, ck, c)


def run_gen(
    sock,
    spec: GenSpec,
    *,
    count: int = 0,
    duration: float = 0.0,
    rate: float = 0.0,
    vector: int = 256,
) -> GenResult:
    """Send ``count`` frames (or for ``duration`` seconds) at ``rate`` pps (0 = max)."""
    if count <= 0 and duration <= 0:
        raise GenError("give --count N or --duration S")
    if spec.flows < 1:
        raise GenError("--flows must be >= 1")
    tmpl_bytes, family, _l3, code = build_template(spec)
    tmpl = np.frombuffer(tmpl_bytes, dtype=np.uint8).copy()
    b = PacketBatch(vector, spare_factor=1)
    idx = np.arange(vector, dtype=np.int32)
    rng = np.array([0x9E3779B97F4A7C15], dtype=np.uint64)
    vary = VARY.index(spec.vary)
    sent = errors = 0
    idle = 0
    stamp(b.buf, b.meta, tmpl, 0, 0, spec.flows, vary, spec.random, family, code, rng)  # JIT
    sock.send_batch(b.buf, b.meta, idx, 0)
    start = time.perf_counter_ns()
    stop_at = start + int(duration * 1e9) if duration > 0 else None
    while True:
        n = vector if count <= 0 else min(vector, count - sent)
        if n <= 0:
            break
        now = time.perf_counter_ns()
        if stop_at is not None and now >= stop_at:
            break
        if rate > 0:
            due = start + int(sent * 1e9 / rate)
            if due > now:
                time.sleep((due - now) / 1e9)
                idle += time.perf_counter_ns() - now
            n = min(n, max(1, int(rate / 1000)))  # small vectors keep the rate smooth
        stamp(b.buf, b.meta, tmpl, n, sent, spec.flows, vary, spec.random, family, code, rng)
        done = 0
        tries = 0
        while done < n:
            q = sock.send_batch(b.buf, b.meta, idx[done:n], n - done)
            done += q
            if q == 0:
                tries += 1
                if tries > 10000:  # the ring does not drain: count and give up
                    errors += n - done
                    break
                time.sleep(0)
        sent += done
    elapsed = time.perf_counter_ns() - start
    return GenResult(sent, spec.size, elapsed, idle, errors)


def result_json(res: GenResult) -> str:
    return json.dumps(res.as_dict(), indent=2)
