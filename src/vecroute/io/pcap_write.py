"""Batch pcap writer for ``vecroute replay`` output.

The router hands over whole batches (one byte buffer plus offset/length
arrays), so the writer formats a whole batch with one ``@njit`` call into a
large staging buffer and hands that to the OS in multi-megabyte writes: no
per-packet Python, no per-batch syscall.  Output is classic pcap with the
nanosecond magic so router timestamps survive unrounded, little-endian, which
every reader (tcpdump, Wireshark, scapy) accepts.
"""

from __future__ import annotations

import os
import struct
from types import TracebackType

import numpy as np
from numba import njit

from vecroute.packet.intrinsics import memcpy

__all__ = ["DEFAULT_SNAPLEN", "PcapWriter", "PCAP_NANO_MAGIC", "RECORD_HDR", "put_record"]

PCAP_NANO_MAGIC = 0xA1B23C4D
RECORD_HDR = 16
DEFAULT_SNAPLEN = 262144


@njit(cache=True, inline="always")
def _wr32(out: np.ndarray, p: int, v: int) -> None:
    out[p] = v & 0xFF
    out[p + 1] = (v >> 8) & 0xFF
    out[p + 2] = (v >> 16) & 0xFF
    out[p + 3] = (v >> 24) & 0xFF


@njit(cache=True, inline="always")
def put_record(out: np.ndarray, q: int, buf: np.ndarray, o: int, ln: int, t: int,
               snaplen: int) -> int:
    """Format one record for ``buf[o : o + ln]`` stamped ``t`` ns at ``out[q:]``; returns the
    position after it. The caller has checked both ranges (numba does not)."""
    c = ln if ln < snaplen else snaplen
    sec = t // 1_000_000_000
    _wr32(out, q, sec)
    _wr32(out, q + 4, t - sec * 1_000_000_000)
    _wr32(out, q + 8, c)
    _wr32(out, q + 12, ln)
    q += RECORD_HDR
    memcpy(out, q, buf, o, c)
    return q + c


@njit(cache=True)
def _emit(
    out: np.ndarray,
    pos: int,
    buf: np.ndarray,
    offsets: np.ndarray,
    lengths: np.ndarray,
    ts_ns: np.ndarray,
    index: np.ndarray | None,
    snaplen: int,
) -> tuple[int, int]:
    """Format a batch as pcap records into ``out[pos:]``.

    Everything is validated before a byte is written, because numba does not
    bounds-check.  Returns (0, new pos) on success, (1, bytes needed) when the
    batch does not fit in ``out[pos:]`` (nothing written), or (2, k) when
    batch entry k points outside ``buf`` or ``index`` is out of range.
    """
    n = offsets.size if index is None else index.size
    npk = offsets.size
    need = 0
    for k in range(n):
        i = k if index is None else np.int64(index[k])
        if i < 0 or i >= npk:
            return 2, k
        o = np.int64(offsets[i])
        ln = np.int64(lengths[i])
        if o < 0 or ln < 0 or o > buf.size or ln > buf.size - o:  # no o + ln overflow
            return 2, k
        need += RECORD_HDR + (ln if ln < snaplen else snaplen)
    if need > out.size - pos:
        return 1, need
    q = pos
    for k in range(n):
        i = k if index is None else np.int64(index[k])
        q = put_record(out, q, buf, np.int64(offsets[i]), np.int64(lengths[i]),
                       np.int64(ts_ns[i]), snaplen)
    return 0, q


class PcapWriter:
    """Write batches as classic nanosecond pcap (Ethernet, snaplen 262144).

    Records are staged in a ``buffer_size`` byte buffer and written when it
    fills, on ``flush()`` and on ``close()``; a batch bigger than the buffer is
    formatted separately and written at once.  Packets longer than ``snaplen``
    are truncated to it, with the original length kept in the record.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        snaplen: int = DEFAULT_SNAPLEN,
        linktype: int = 1,
        buffer_size: int = 1 << 22,
    ) -> None:
        if snaplen <= 0:
            raise ValueError(f"snaplen must be positive, got {snaplen}")
        self.path = os.fspath(path)
        self.snaplen = snaplen
        self.packets = 0
        self._buf = np.empty(max(buffer_size, 1 << 12), dtype=np.uint8)
        self._fill = 0
        self._f = open(path, "wb")  # noqa: SIM115 - closed in close()
        self._f.write(struct.pack("<IHHiIII", PCAP_NANO_MAGIC, 2, 4, 0, 0, snaplen, linktype))

    def write_batch(
        self,
        buf: np.ndarray,
        offsets: np.ndarray,
        lengths: np.ndarray,
        ts_ns: np.ndarray,
        index: np.ndarray | None = None,
    ) -> None:
        """Append packets ``buf[offsets[i] : offsets[i] + lengths[i]]`` stamped ``ts_ns[i]``.

        With ``index``, only packets ``index[0], index[1], ...`` are written, in
        that order (e.g. the forwarded subset of a batch).  pcap stores seconds
        as u32, so timestamps outside [0, 2**32) s are written modulo 2**32.
        Raises (writing nothing) if any selected packet lies outside ``buf``.
        """
        if self._f.closed:
            raise ValueError(f"{self.path}: write_batch on a closed PcapWriter")
        if buf.dtype != np.uint8 or buf.ndim != 1 or not buf.flags.c_contiguous:
            raise TypeError("buf must be a contiguous 1-D uint8 array")
        if index is not None and index.dtype.kind not in "iu":
            raise TypeError(f"index must be an integer array, not {index.dtype}")
        if offsets.size != lengths.size or ts_ns.size != offsets.size:
            raise ValueError(
                f"offsets, lengths and ts_ns differ in size "
                f"({offsets.size}, {lengths.size}, {ts_ns.size})"
            )
        status, v = _emit(self._buf, self._fill, buf, offsets, lengths, ts_ns, index, self.snaplen)
        if status == 1:
            self.flush()
            if v <= self._buf.size:
                status, v = _emit(self._buf, 0, buf, offsets, lengths, ts_ns, index, self.snaplen)
            else:
                big = np.empty(v, dtype=np.uint8)
                status, v = _emit(big, 0, buf, offsets, lengths, ts_ns, index, self.snaplen)
                self._f.write(big)
                v = 0
        if status == 2:
            i = v if index is None else int(index[v])
            raise ValueError(f"batch entry {v} (packet {i}) lies outside buf or offsets")
        self._fill = v
        self.packets += offsets.size if index is None else index.size

    def write_records(self, records: np.ndarray, packets: int) -> None:
        """Append ``packets`` records already formatted with :func:`put_record` (replay's
        compiled loop fills its own buffer) after whatever is staged."""
        if self._f.closed:
            raise ValueError(f"{self.path}: write_records on a closed PcapWriter")
        if self._fill:
            self.flush()
        self._f.write(records)
        self.packets += packets

    def flush(self) -> None:
        """Hand the staged records to the OS."""
        if self._fill:
            self._f.write(self._buf[: self._fill])
            self._fill = 0
        self._f.flush()

    def close(self) -> None:
        """Flush and close; calling it again does nothing."""
        if not self._f.closed:
            try:
                self.flush()
            finally:
                self._f.close()

    def __enter__(self) -> PcapWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
