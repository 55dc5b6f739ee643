"""Checksum kernels against an independent plain-Python RFC 1071 / RFC 1624 oracle."""

from __future__ import annotations

import struct

import numpy as np
from conftest import inet_checksum, inet_sum
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from vecroute.packet.checksum import (
    checksum,
    fold,
    incremental_update,
    pseudo_header4,
    pseudo_header6,
    sum_bytes,
)
from vecroute.packet.headers import copy_moves, wr16, wr32
from vecroute.packet.intrinsics import store_be16, store_be32

SETTINGS = settings(max_examples=150, deadline=None)


def _buf(data: bytes, lead: int) -> np.ndarray:
    """data placed at offset ``lead`` of a buffer with junk around it."""
    return np.frombuffer(b"\xa5" * lead + data + b"\x5a" * 7, dtype=np.uint8).copy()


@SETTINGS
@given(data=st.binary(min_size=0, max_size=300), lead=st.integers(0, 9), acc=st.integers(0, 2**40))
def test_checksum_matches_rfc1071(data: bytes, lead: int, acc: int) -> None:
    """Any length (odd included), any alignment, any starting accumulator."""
    buf = _buf(data, lead)
    got = int(checksum(buf, lead, len(data), np.uint64(acc)))
    # the accumulator is a plain integer added in: fold it like any other sum
    s = inet_sum(data) + acc
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    want = ~s & 0xFFFF
    assert got == want
    if acc == 0:
        assert got == inet_checksum(data)


@SETTINGS
@given(data=st.binary(min_size=0, max_size=200), lead=st.integers(0, 9))
def test_sum_bytes_and_fold(data: bytes, lead: int) -> None:
    buf = _buf(data, lead)
    s = int(fold(sum_bytes(buf, lead, len(data), np.uint64(0))))
    want = inet_sum(data)
    # 0 and 0xFFFF are the same number in one's complement; fold gives 0 only for all-zero
    assert s == want or (want == 0 and s == 0xFFFF) or (want == 0xFFFF and s == 0)
    if any(data):
        assert s == want


@SETTINGS
@given(
    data=st.binary(min_size=2, max_size=120).filter(lambda d: len(d) % 2 == 0), data_idx=st.data()
)
def test_checksum_verifies_to_zero(data: bytes, data_idx) -> None:
    """Inserting the checksum makes the whole sum 0xFFFF (what receivers check)."""
    k = data_idx.draw(st.integers(0, len(data) // 2 - 1)) * 2
    d = bytearray(data)
    d[k : k + 2] = b"\0\0"
    c = int(checksum(_buf(bytes(d), 0), 0, len(d), np.uint64(0)))
    d[k : k + 2] = struct.pack("!H", c)
    assert inet_sum(bytes(d)) == 0xFFFF


def _words(data: bytes) -> list[int]:
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]


@SETTINGS
@given(
    data=st.binary(min_size=4, max_size=60).filter(lambda d: len(d) % 2 == 0 and any(d)),
    data_idx=st.data(),
)
def test_incremental_update_matches_full_recomputation(data: bytes, data_idx) -> None:
    """RFC 1624 eqn. 3 on one changed 16-bit word == the checksum computed from scratch,
    also when the result is 0x0000 (never the -0 0xFFFF that eqn. 2 can produce)."""
    n = len(data) // 2
    ck = data_idx.draw(st.integers(0, n - 1))
    m = data_idx.draw(st.sampled_from([i for i in range(n) if i != ck]))
    new = data_idx.draw(st.integers(0, 0xFFFF))
    d = bytearray(data)
    d[2 * ck : 2 * ck + 2] = b"\0\0"
    hc = inet_checksum(bytes(d))
    old = int.from_bytes(d[2 * m : 2 * m + 2], "big")
    d[2 * m : 2 * m + 2] = struct.pack("!H", new)
    if not any(d):
        return  # eqn. 3 gives 0x0000 here, not 0xFFFF: see test_echo_reply_all_zero_message
    want = inet_checksum(bytes(d))
    got = int(incremental_update(np.uint32(hc), np.uint32(old), np.uint32(new)))
    assert got == want


def test_incremental_update_rfc1624_example() -> None:
    """RFC 1624 section 4's worked case: the result must be 0x0000, not 0xFFFF."""
    # the other header words sum to 0xCD7A; with m = 0x5555, HC = ~(0xCD7A + 0x5555)
    # = 0xDD2F; m' = 0x3285 makes the sum 0xFFFF, so the checksum must become 0x0000.
    hc, old, new = 0xDD2F, 0x5555, 0x3285
    got = int(incremental_update(np.uint32(hc), np.uint32(old), np.uint32(new)))
    assert got == 0x0000


def test_incremental_update_near_zero_and_ffff() -> None:
    """Exhaustive over the TTL-decrement word for headers whose checksum is near
    0x0000 / 0xFFFF: the incremental result always equals a full recomputation."""
    rng = np.random.default_rng(7)
    checked = 0
    for _ in range(400):
        hdr = bytearray(rng.integers(0, 256, 20, dtype=np.uint8).tobytes())
        hdr[0] = 0x45
        hdr[8] = int(rng.integers(2, 256))
        hdr[10:12] = b"\0\0"
        # steer the identification field so the checksum lands near 0x0000 or 0xFFFF
        target = int(rng.choice([0x0000, 0x0001, 0x0100, 0xFFFE, 0xFEFF, 0x00FF]))
        hdr[4:6] = b"\0\0"
        s = inet_sum(bytes(hdr))
        # want ~(s + id) == target  =>  id = ~target - s (one's complement)
        ident = ((~target) & 0xFFFF) + ((~s) & 0xFFFF)
        while ident >> 16:
            ident = (ident & 0xFFFF) + (ident >> 16)
        hdr[4:6] = struct.pack("!H", ident)
        hc = inet_checksum(bytes(hdr))
        hdr[10:12] = struct.pack("!H", hc)
        assert inet_sum(bytes(hdr)) == 0xFFFF
        old = int.from_bytes(hdr[8:10], "big")
        new = old - 0x100
        got = int(incremental_update(np.uint32(hc), np.uint32(old), np.uint32(new)))
        hdr[8:10] = struct.pack("!H", new)
        hdr[10:12] = b"\0\0"
        assert got == inet_checksum(bytes(hdr)), (hdr.hex(), hc, got)
        checked += 1
    assert checked == 400


@SETTINGS
@given(
    src=st.binary(min_size=4, max_size=4),
    dst=st.binary(min_size=4, max_size=4),
    proto=st.integers(0, 255),
    l4=st.binary(min_size=0, max_size=100),
)
def test_pseudo_header4(src: bytes, dst: bytes, proto: int, l4: bytes) -> None:
    hdr = bytes([0x45, 0, 0, 0, 0, 0, 0, 0, 64, proto, 0, 0]) + src + dst
    buf = _buf(hdr, 3)
    acc = pseudo_header4(buf, 3, proto, len(l4))
    buf2 = _buf(l4, 0)
    got = int(checksum(buf2, 0, len(l4), acc))
    pseudo = src + dst + bytes([0, proto]) + struct.pack("!H", len(l4))
    assert got == inet_checksum(pseudo + l4)


@SETTINGS
@given(
    src=st.binary(min_size=16, max_size=16),
    dst=st.binary(min_size=16, max_size=16),
    l4=st.binary(min_size=0, max_size=100),
)
def test_pseudo_header6(src: bytes, dst: bytes, l4: bytes) -> None:
    hdr = bytes([0x60, 0, 0, 0, 0, 0, 58, 64]) + src + dst
    buf = _buf(hdr, 1)
    acc = pseudo_header6(buf, 1, 58, len(l4))
    got = int(checksum(_buf(l4, 0), 0, len(l4), acc))
    pseudo = src + dst + struct.pack("!I", len(l4)) + b"\0\0\0" + bytes([58])
    assert got == inet_checksum(pseudo + l4)


def _fields_by(w32, w16):
    """A kernel writing the same eight fields of every integer width and signedness the
    kernels pass, with the given 32- and 16-bit writers."""

    @njit
    def write(buf, o, v64, v32, v16, v8) -> None:
        w32(buf, o, v64)
        w16(buf, o + 4, v64)
        w32(buf, o + 6, v32)
        w16(buf, o + 10, v32)
        w32(buf, o + 12, v16)
        w16(buf, o + 16, v16)
        w32(buf, o + 18, v8)
        w16(buf, o + 22, v8)

    return write


_write_fields = _fields_by(wr32, wr16)  # byte by byte
_store_fields = _fields_by(store_be32, store_be16)  # one store each (SRv6's outer header)


@SETTINGS
@given(v=st.integers(-(2**63), 2**63 - 1), lead=st.integers(0, 9), signed=st.booleans())
def test_field_writes_match_struct(v: int, lead: int, signed: bool) -> None:
    """wr16 / wr32 and the store intrinsics write the low bits of the value in network
    order, at any alignment, a value of a narrower signed type widened with its sign; the
    bytes around stay as they were. Oracle: ``struct.pack`` of the value cut to the field."""
    kinds = (np.int64, np.int32, np.int16, np.int8) if signed else (
        np.uint64, np.uint32, np.uint16, np.uint8)
    vals = [t(v & ((1 << (8 * np.dtype(t).itemsize)) - 1)) if not signed else
            np.array([v & ((1 << (8 * np.dtype(t).itemsize)) - 1)], np.uint64).view(
                np.int64).astype(t)[0] for t in kinds]  # two's complement cut to each width
    want = bytearray(b"\xa5" * lead)
    for x in vals:
        w = int(x)  # the field's bits: the value widened (with its sign) to 64 bits
        want += struct.pack(">IH", w & 0xFFFFFFFF, w & 0xFFFF)
    want += b"\x5a" * 7
    flat = np.frombuffer(b"\xa5" * lead + b"\0" * 24 + b"\x5a" * 7, np.uint8).copy()
    _write_fields(flat, lead, *vals)
    assert flat.tobytes() == bytes(want)
    stored = np.frombuffer(b"\xa5" * lead + b"\0" * 24 + b"\x5a" * 7, np.uint8).copy()
    _store_fields(stored, lead, *vals)
    assert stored.tobytes() == bytes(want)
    wide = np.zeros((len(flat), 2), np.uint8)
    wide[:, 0] = np.frombuffer(b"\xa5" * lead + b"\0" * 24 + b"\x5a" * 7, np.uint8)
    strided = wide[:, 0]  # a strided view
    _write_fields(strided, lead, *vals)
    assert strided.tobytes() == bytes(want)


@njit(cache=True)
def _copy_moves(dst, do, src, so, n) -> None:
    copy_moves(dst, do, src, so, n)


@SETTINGS
@given(n=st.integers(32, 304), row=st.integers(0, 2), at=st.integers(0, 40))
def test_copy_moves_is_the_slice(n: int, row: int, at: int) -> None:
    """copy_moves (SRv6's outer header, 40..304 bytes, from a row of sr_hdr) writes exactly
    dst[at:at+n] = src[row][:n], nothing around it, even from the last row."""
    rng = np.random.default_rng(n * 131 + row * 7 + at)
    src = rng.integers(0, 256, (3, 304), dtype=np.uint8)
    dst = rng.integers(0, 256, 400, dtype=np.uint8)
    want = dst.copy()
    want[at : at + n] = src[row, :n]
    _copy_moves(dst, at, src.reshape(-1), row * 304, n)
    assert (dst == want).all()
