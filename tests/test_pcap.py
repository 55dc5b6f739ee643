"""pcap / pcapng I/O, with scapy as the independent oracle.

scapy writes files that ``read_capture`` must read packet for packet, and reads
the files ``PcapWriter`` produces.  pcapng features scapy cannot write (big
endian, several interfaces with different ``if_tsresol``, SPB, obsolete PB,
several sections) come from a small struct-based builder below; scapy's reader
checks those too where it implements them.  Damaged files must return every
packet before the damage plus a one-line error at the right offset.
"""

from __future__ import annotations

import random
import struct
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import EDecimal, PcapNgWriter, RawPcapWriter, rdpcap, wrpcap

from vecroute.io.pcap import Capture, CaptureError, PcapWriter, read_capture

SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
T0 = 1_700_000_000  # a plausible epoch second
ETH = Ether(dst="02:00:00:00:00:01", src="02:00:00:00:00:02")  # explicit: no ARP lookups

# --- helpers


def sample_packets(n: int, seed: int = 1) -> list[tuple[bytes, int]]:
    """n realistic frames (IPv4/IPv6 UDP, random payload) with ns timestamps."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        payload = rng.randbytes(rng.randrange(0, 300))
        if i % 3:
            pkt = ETH / IP(dst=f"10.0.{i % 256}.1") / UDP(sport=i) / Raw(payload)
        else:
            pkt = ETH / IPv6(dst="2001:db8::1") / UDP(dport=i) / Raw(payload)
        out.append((bytes(pkt), T0 * 10**9 + i * 1_234_567_891 + rng.randrange(10**9)))
    return out


def scapy_ns(p: object) -> int:
    return int(Decimal(p.time) * 10**9)  # type: ignore[attr-defined]


def check_invariants(cap: Capture) -> None:
    """Whatever the input, every packet must lie inside the file bytes."""
    n = len(cap)
    assert cap.offsets.size == cap.caplens.size == cap.origlens.size == cap.ts_ns.size == n
    assert (cap.offsets >= 0).all()
    assert (cap.caplens >= 0).all()
    assert (cap.offsets + cap.caplens <= cap.data.size).all()
    assert (cap.error is None) == (cap.error_offset == -1)
    if cap.error is not None:
        assert "\n" not in cap.error and 0 <= cap.error_offset < cap.data.size


def assert_matches_scapy(cap: Capture, path: Path) -> None:
    ref = rdpcap(str(path))
    assert len(cap) == len(ref)
    for i, p in enumerate(ref):
        assert cap.packet(i) == bytes(p)
        assert int(cap.origlens[i]) == p.wirelen or p.wirelen is None
        assert abs(int(cap.ts_ns[i]) - scapy_ns(p)) <= 1


def pcap_bytes(pkts: list[tuple[bytes, int]], *, be: bool = False, nano: bool = True) -> bytes:
    """A classic pcap file built with struct (big endian is not in PcapWriter)."""
    e = ">" if be else "<"
    out = [struct.pack(e + "IHHiIII", 0xA1B23C4D if nano else 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for data, ts in pkts:
        sec, frac = divmod(ts, 10**9)
        out.append(
            struct.pack(e + "IIII", sec, frac if nano else frac // 1000, len(data), len(data))
        )
        out.append(data)
    return b"".join(out)


# pcapng builder ----------------------------------------------------------------------


def _pad(b: bytes) -> bytes:
    return b + b"\0" * (-len(b) % 4)


def block(e: str, btype: int, body: bytes) -> bytes:
    body = _pad(body)
    n = len(body) + 12
    return struct.pack(e + "II", btype, n) + body + struct.pack(e + "I", n)


def opt(e: str, code: int, value: bytes) -> bytes:
    return struct.pack(e + "HH", code, len(value)) + _pad(value)


def shb(e: str) -> bytes:
    return block(e, 0x0A0D0D0A, struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1))


def idb(
    e: str,
    linktype: int = 1,
    snaplen: int = 262144,
    tsresol: int | None = None,
    tsoffset: int | None = None,
) -> bytes:
    opts = opt(e, 2, b"eth0")
    if tsresol is not None:
        opts += opt(e, 9, bytes([tsresol]))
    if tsoffset is not None:
        opts += opt(e, 14, struct.pack(e + "q", tsoffset))
    return block(e, 1, struct.pack(e + "HHI", linktype, 0, snaplen) + opts + opt(e, 0, b""))


def epb(e: str, ifid: int, units: int, data: bytes, orig: int | None = None) -> bytes:
    head = struct.pack(
        e + "IIIII", ifid, units >> 32, units & 0xFFFFFFFF, len(data), orig or len(data)
    )
    return block(e, 6, head + _pad(data) + opt(e, 1, b"comment") + opt(e, 0, b""))


def pb(e: str, ifid: int, units: int, data: bytes) -> bytes:
    head = struct.pack(e + "HHIIII", ifid, 0, units >> 32, units & 0xFFFFFFFF, len(data), len(data))
    return block(e, 2, head + data)


def spb(e: str, data: bytes, orig: int | None = None) -> bytes:
    return block(e, 3, struct.pack(e + "I", orig or len(data)) + data)


def units_for(ts_ns: int, tsresol: int | None) -> tuple[int, int]:
    """Timestamp units for a resolution code, and the ns value a reader must return."""
    code = 6 if tsresol is None else tsresol
    if code & 0x80:
        units = (ts_ns << (code & 0x7F)) // 10**9
        return units, (units * 10**9) >> (code & 0x7F)
    units = ts_ns * 10**code // 10**9
    return units, units * 10**9 // 10**code


def pcapng_file(pkts: list[tuple[bytes, int]], e: str = "<") -> tuple[bytes, list[int]]:
    """One section, one interface at nanosecond resolution; returns file and block starts."""
    out = shb(e) + idb(e, tsresol=9)
    starts = []
    for data, ts in pkts:
        starts.append(len(out))
        out += epb(e, 0, ts, data)
    return out, starts


# --- scapy writes, we read


@pytest.mark.parametrize("nano", [False, True])
@pytest.mark.parametrize("endian", ["<", ">"])
def test_classic_pcap_from_scapy(tmp_path: Path, nano: bool, endian: str) -> None:
    pkts = sample_packets(40)
    path = tmp_path / "s.pcap"
    with RawPcapWriter(str(path), linktype=1, nano=nano, endianness=endian) as w:
        w.write_header(None)
        for data, ts in pkts:
            sec, frac = divmod(ts, 10**9)
            w.write_packet(data, sec=sec, usec=frac if nano else frac // 1000)
    cap = read_capture(path)
    assert cap.error is None and cap.linktype == 1
    assert_matches_scapy(cap, path)
    for i, (data, ts) in enumerate(pkts):
        assert cap.packet(i) == data
        assert cap.ts_ns[i] == (ts if nano else ts // 1000 * 1000)


def test_modified_pcap_and_fcs_linktype(tmp_path: Path) -> None:
    """Kuznetzov's modified pcap (24-byte record headers); FCS bits in the link type field."""
    pkts = sample_packets(5, seed=31)
    out = [struct.pack("<IHHiIII", 0xA1B2CD34, 2, 4, 0, 0, 65535, 1 | 0x14000000)]
    for data, ts in pkts:
        sec, frac = divmod(ts, 10**9)
        out.append(struct.pack("<IIIIIHBx", sec, frac // 1000, len(data), len(data), 2, 8, 0))
        out.append(data)
    path = tmp_path / "kuz.pcap"
    path.write_bytes(b"".join(out))
    cap = read_capture(path)
    assert cap.error is None and cap.linktype == 1
    assert [cap.packet(i) for i in range(5)] == [d for d, _ in pkts]
    assert cap.ts_ns.tolist() == [t // 1000 * 1000 for _, t in pkts]


def test_wrpcap_packets(tmp_path: Path) -> None:
    pkts = []
    for data, ts in sample_packets(20, seed=7):
        p = Ether(data)
        p.time = EDecimal(ts) / 10**9
        pkts.append(p)
    for nano in (False, True):
        path = tmp_path / f"w{nano}.pcap"
        wrpcap(str(path), pkts, nano=nano)
        cap = read_capture(path, use_mmap=nano)
        assert cap.error is None
        assert_matches_scapy(cap, path)


def test_pcapng_from_scapy(tmp_path: Path) -> None:
    pkts = sample_packets(30, seed=3)
    path = tmp_path / "s.pcapng"
    w = PcapNgWriter(str(path))
    for data, ts in pkts:
        p = Ether(data)
        p.time = EDecimal(ts) / 10**9
        w.write(p)
    w.close()
    cap = read_capture(path)
    assert cap.error is None and cap.linktype == 1
    assert_matches_scapy(cap, path)
    for i, (data, ts) in enumerate(pkts):
        # scapy's pcapng writer goes through a float, so allow its rounding
        assert cap.packet(i) == data and cap.ts_ns[i] % 1000 == 0 and abs(cap.ts_ns[i] - ts) < 2000


@pytest.mark.parametrize("e", ["<", ">"])
def test_pcapng_two_interfaces_different_tsresol(tmp_path: Path, e: str) -> None:
    """EPB, PB and SPB on interfaces at 1 ns, 2**-20 s and default (1 us) resolution."""
    resols = [9, 0x80 | 20, None]
    body = shb(e) + b"".join(idb(e, tsresol=r) for r in resols)
    body += block(e, 4, b"\x00" * 8)  # name resolution block: skipped
    body += block(e, 0x40000BAD, b"custom data")  # unknown / custom block: skipped
    expect = []
    for i, (data, ts) in enumerate(sample_packets(30, seed=5)):
        ifid = i % 3
        units, want = units_for(ts, resols[ifid])
        body += pb(e, ifid, units, data) if i % 5 == 4 else epb(e, ifid, units, data)
        expect.append((data, want))
    spb_data = b"\x02" * 60
    body += spb(e, spb_data)
    path = tmp_path / "multi.pcapng"
    path.write_bytes(body)
    cap = read_capture(path)
    assert cap.error is None, cap.error
    assert len(cap) == len(expect) + 1
    for i, (data, want) in enumerate(expect):
        assert cap.packet(i) == data and int(cap.ts_ns[i]) == want
    assert cap.packet(len(expect)) == spb_data
    assert cap.ts_ns[-1] == cap.ts_ns[-2]  # an SPB has no timestamp: it keeps the previous one
    ref = rdpcap(str(path))
    assert [bytes(p) for p in ref] == [cap.packet(i) for i in range(len(cap))]
    for i, p in enumerate(ref[: len(expect)]):
        assert abs(int(cap.ts_ns[i]) - scapy_ns(p)) <= 1


def test_pcapng_sections_tsoffset_snaplen_linktypes(tmp_path: Path) -> None:
    """Interface ids restart per section; byte order may change; SPB honours IDB snaplen."""
    a, b, c = b"\xaa" * 100, b"\xbb" * 70, b"\xcc" * 90
    body = shb("<") + idb("<", tsresol=3, tsoffset=100) + epb("<", 0, 5_000, a)
    body += shb(">") + idb(">", linktype=101) + idb(">", snaplen=64) + epb(">", 0, 7, b)
    body += spb(">", c)  # interface 0 of this section: raw IP, snaplen 262144
    body += epb(">", 1, 9, a)
    path = tmp_path / "sections.pcapng"
    path.write_bytes(body)
    cap = read_capture(path)
    assert cap.error is None
    assert [cap.packet(i) for i in range(4)] == [a, b, c, a]
    assert cap.ts_ns.tolist() == [105 * 10**9, 7_000, 7_000, 9_000]
    assert cap.linktype == -1 and cap.linktypes is not None
    assert cap.linktypes.tolist() == [1, 101, 101, 1]

    # SPB: captured length is min(original length, snaplen of interface 0)
    path.write_bytes(shb("<") + idb("<", snaplen=64) + spb("<", c))
    cap = read_capture(path)
    assert cap.packet(0) == c[:64] and cap.origlens[0] == 90 and cap.linktypes is None


# --- we write, scapy reads


def test_writer_read_by_scapy(tmp_path: Path) -> None:
    pkts = sample_packets(50, seed=11)
    buf, offs, lens, ts = to_batch(pkts, headroom=32)
    path = tmp_path / "out.pcap"
    with PcapWriter(path) as w:
        w.write_batch(buf, offs[:20], lens[:20], ts[:20])
        w.write_batch(buf, offs[20:], lens[20:], ts[20:])
        assert w.packets == 50
    assert path.read_bytes()[:4] == b"\x4d\x3c\xb2\xa1"  # nanosecond magic, little endian
    ref = rdpcap(str(path))
    assert len(ref) == 50
    for p, (data, t) in zip(ref, pkts, strict=True):
        assert bytes(p) == data and scapy_ns(p) == t and p.wirelen == len(data)


def test_writer_index_snaplen_and_big_batches(tmp_path: Path) -> None:
    pkts = sample_packets(40, seed=13)
    buf, offs, lens, ts = to_batch(pkts)
    index = np.array([5, 3, 3, 39, 0], dtype=np.int32)
    path = tmp_path / "idx.pcap"
    # a tiny staging buffer forces both the flush path and the oversized-batch path
    with PcapWriter(path, snaplen=100, buffer_size=1) as w:
        w.write_batch(buf, offs, lens, ts, index)
        w.write_batch(buf, offs, lens, ts)
        w.write_batch(buf, offs[:0], lens[:0], ts[:0])
    cap = read_capture(path)
    want = [pkts[i] for i in index] + pkts
    assert len(cap) == len(want) and cap.error is None
    for i, (data, t) in enumerate(want):
        assert cap.packet(i) == data[:100] and cap.origlens[i] == len(data) and cap.ts_ns[i] == t
    assert [bytes(p) for p in rdpcap(str(path))] == [d[:100] for d, _ in want]


def test_writer_rejects_bad_batches(tmp_path: Path) -> None:
    buf = np.zeros(100, dtype=np.uint8)
    one = np.array([0], dtype=np.int64)
    w = PcapWriter(tmp_path / "bad.pcap")
    with pytest.raises(ValueError, match="outside"):
        w.write_batch(buf, np.array([90]), np.array([20]), one)
    with pytest.raises(ValueError, match="outside"):
        w.write_batch(buf, one, np.array([-1]), one)
    with pytest.raises(ValueError, match="outside"):
        w.write_batch(buf, one, np.array([10]), one, np.array([1]))
    with pytest.raises(ValueError, match="differ in size"):
        w.write_batch(buf, one, np.array([1, 2]), one)
    with pytest.raises(ValueError, match="outside"):  # o + len would overflow int64
        w.write_batch(buf, np.array([2**62]), np.array([2**62]), one)
    with pytest.raises(TypeError):
        w.write_batch(buf.astype(np.int16), one, one, one)
    with pytest.raises(TypeError):
        w.write_batch(buf[::2], one, one, one)
    with pytest.raises(TypeError):
        w.write_batch(buf, one, one, one, np.array([True]))
    assert w.packets == 0
    w.close()
    w.close()
    with pytest.raises(ValueError, match="closed"):
        w.write_batch(buf, one, one, one)
    assert len(read_capture(tmp_path / "bad.pcap")) == 0


def to_batch(
    pkts: list[tuple[bytes, int]], headroom: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pack packets into one buffer the way the router's batch does (with headroom)."""
    offs, pos = [], 0
    for data, _ in pkts:
        pos += headroom
        offs.append(pos)
        pos += len(data)
    buf = np.full(pos, 0xEE, dtype=np.uint8)
    for (data, _), o in zip(pkts, offs, strict=True):
        buf[o : o + len(data)] = np.frombuffer(data, dtype=np.uint8)
    lens = np.array([len(d) for d, _ in pkts], dtype=np.int32)
    ts = np.array([t for _, t in pkts], dtype=np.int64)
    return buf, np.array(offs, dtype=np.int64), lens, ts


@SETTINGS
@given(
    st.lists(
        st.tuples(st.binary(max_size=200), st.integers(0, 2**32 * 10**9 - 1)),
        max_size=30,
    ),
    st.integers(1, 8),
)
def test_roundtrip_random(tmp_path: Path, pkts: list[tuple[bytes, int]], nbatch: int) -> None:
    buf, offs, lens, ts = to_batch(pkts, headroom=3)
    path = tmp_path / "rt.pcap"
    with PcapWriter(path) as w:
        for part in np.array_split(np.arange(len(pkts)), nbatch):
            w.write_batch(buf, offs, lens, ts, part)
    cap = read_capture(path)
    assert cap.error is None and len(cap) == len(pkts)
    assert [cap.packet(i) for i in range(len(cap))] == [d for d, _ in pkts]
    assert cap.ts_ns.tolist() == [t for _, t in pkts]


# --- damaged files


def _check_cut(path: Path, whole: bytes, cut: int, starts: list[int], ends: list[int]) -> None:
    path.write_bytes(whole[:cut])
    cap = read_capture(path)
    check_invariants(cap)
    complete = sum(1 for e in ends if e <= cut)
    assert len(cap) == complete
    if cut in starts:
        assert cap.error is None
    else:
        assert cap.error is not None and "truncated" in cap.error
        assert cap.error_offset == starts[complete]
        assert f"offset {starts[complete]}" in cap.error


@pytest.mark.parametrize("be", [False, True])
def test_truncated_pcap(tmp_path: Path, be: bool) -> None:
    pkts = sample_packets(6, seed=17)
    whole = pcap_bytes(pkts, be=be)
    starts, pos = [], 24
    for data, _ in pkts:
        starts.append(pos)
        pos += 16 + len(data)
    ends = starts[1:] + [pos]
    for cut in range(starts[-2], len(whole)):
        _check_cut(tmp_path / "t.pcap", whole, cut, starts, ends)


@pytest.mark.parametrize("e", ["<", ">"])
def test_truncated_pcapng(tmp_path: Path, e: str) -> None:
    whole, starts = pcapng_file(sample_packets(6, seed=19), e)
    ends = starts[1:] + [len(whole)]
    for cut in range(starts[-2], len(whole)):
        _check_cut(tmp_path / "t.pcapng", whole, cut, starts, ends)


def test_absurd_pcap_caplen(tmp_path: Path) -> None:
    pkts = sample_packets(3)
    whole = bytearray(pcap_bytes(pkts))
    bad = 24 + 16 + len(pkts[0][0])
    struct.pack_into("<I", whole, bad + 8, 70000)  # snaplen in pcap_bytes is 65535
    path = tmp_path / "big.pcap"
    path.write_bytes(bytes(whole))
    cap = read_capture(path)
    assert len(cap) == 1 and cap.packet(0) == pkts[0][0]
    assert cap.error_offset == bad
    assert cap.error == f"record caplen 70000 exceeds snaplen 65535 at byte offset {bad}"


@pytest.mark.parametrize(
    ("mangle", "msg"),
    [
        (lambda b, s: struct.pack_into("<I", b, s + 4, 90), "bad block length 90"),
        (lambda b, s: struct.pack_into("<I", b, s + 4, 8), "bad block length 8"),
        (lambda b, s: struct.pack_into("<I", b, s + 4, 1 << 30), "truncated block"),
        (lambda b, s: struct.pack_into("<I", b, s + 4, 32), "trailing length"),
        (lambda b, s: struct.pack_into("<I", b, s, 0), "bad block type 0x00000000"),
        (lambda b, s: struct.pack_into("<I", b, s + 8, 2), "references interface 2"),
        (lambda b, s: struct.pack_into("<I", b, s + 20, 4000), "caplen 4000 exceeds its block"),
        (lambda b, s: struct.pack_into("<I", b, s, 0x0A0D0D0A), "bad byte-order magic"),
    ],
)
def test_bad_pcapng_blocks(tmp_path: Path, mangle: object, msg: str) -> None:
    pkts = sample_packets(4, seed=23)
    whole, starts = pcapng_file(pkts)
    buf = bytearray(whole)
    mangle(buf, starts[2])  # type: ignore[operator]
    path = tmp_path / "bad.pcapng"
    path.write_bytes(bytes(buf))
    cap = read_capture(path)
    check_invariants(cap)
    assert len(cap) == 2 and [cap.packet(i) for i in range(2)] == [d for d, _ in pkts[:2]]
    assert cap.error is not None and msg in cap.error
    assert cap.error_offset == starts[2]


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\xd4\xc3",
        b"hello world, this is not a capture file at all" * 3,
        b"\xd4\xc3\xb2\xa1\x02\x00\x04\x00",  # pcap header cut short
        b"\x0a\x0d\x0d\x0a\x1c\x00\x00\x00",  # pcapng SHB cut short
        shb("<")[:8] + b"\x11\x22\x33\x44" + shb("<")[12:],  # bad byte-order magic
        shb("<")[:4] + struct.pack("<I", 30) + shb("<")[8:],  # bad SHB length
    ],
)
def test_not_a_capture(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "garbage.bin"
    path.write_bytes(content)
    for use_mmap in (True, False):
        with pytest.raises(CaptureError, match="garbage.bin") as info:
            read_capture(path, use_mmap=use_mmap)
        assert "\n" not in str(info.value)


@SETTINGS
@given(st.data())
def test_fuzzed_files_never_crash(tmp_path: Path, data: st.DataObject) -> None:
    """Random byte edits of valid pcap/pcapng files: no exception, no packet out of bounds."""
    pkts = sample_packets(5, seed=29)
    kind = data.draw(st.sampled_from(["pcap", "pcapng<", "pcapng>", "multi"]))
    if kind == "pcap":
        whole = pcap_bytes(pkts, be=data.draw(st.booleans()))
    elif kind == "multi":
        whole = shb(">") + idb(">", tsresol=0x80 | 70) + spb(">", pkts[0][0]) + pb(">", 0, 1, b"x")
        whole += shb("<") + idb("<") + epb("<", 0, 2**64 - 1, pkts[1][0])
    else:
        whole = pcapng_file(pkts, kind[-1])[0]
    buf = bytearray(whole)
    for _ in range(data.draw(st.integers(1, 6))):
        pos = data.draw(st.integers(0, len(buf) - 1))
        buf[pos] = data.draw(st.integers(0, 255))
    buf = buf[: data.draw(st.integers(1, len(buf)))]
    path = tmp_path / "fuzz.bin"
    path.write_bytes(bytes(buf))
    try:
        cap = read_capture(path)
    except CaptureError:
        return
    check_invariants(cap)
