"""Packet capture to a pcapng file (``ctl pcap start|stop``), the control plane's side.

The workers copy matching frames into their capture rings (io/capture.py); this module
opens the file safely, drains the rings into it every few milliseconds and stops at the
packet count or the size limit. The file is pcapng (RFC-draft "PCAP Next Generation",
read by tcpdump, Wireshark and scapy): one Interface Description Block per port (its name,
nanosecond timestamps), one Enhanced Packet Block per frame with its direction in
``epb_flags`` and, for a drop, the reason as an ``opt_comment`` ("drop: ip4-bad-checksum:
…"), since pcapng has no standard drop-reason option.

Files are created only in the configured directory (``[capture] directory``), by a plain
name, never through a symlink, never over an existing file, mode 0600.
"""

from __future__ import annotations

import os
import re
import stat
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vecroute.graph.counters import COUNTERS
from vecroute.io.capture import (
    CAP_DROP,
    CAP_RX,
    CAP_TX,
    CP_IF,
    CP_LEFT,
    CP_LOST,
    CP_MODE,
    CP_SNAP,
    CP_TAKEN,
    CR_DIR,
    CR_IF,
    CR_LEN,
    CR_REASON,
    CR_TS,
)
from vecroute.io.channel import R_HEAD, R_TAIL, Ring

DIRECTIONS = {"rx": CAP_RX, "tx": CAP_TX, "drop": CAP_DROP}
LINKTYPE_ETHERNET = 1
MAX_COUNT = 1_000_000
DEFAULT_COUNT = 1000
_NAME = re.compile(r"[A-Za-z0-9._+-]{1,128}")


class CaptureError(ValueError):
    """A capture that cannot start (one line)."""


def start_capture(cfg: np.ndarray, ring: Ring, mode: int, ifx: int, snaplen: int,
                  count: int) -> None:
    """Set a worker's capture words (its mode last: the loop reads it first), in the
    worker's thread between two batches; what an earlier capture left in its ring (copied
    as it was being stopped) is discarded first."""
    cfg[CP_MODE] = 0
    ring.ctl[R_TAIL] = ring.ctl[R_HEAD]
    cfg[CP_IF] = ifx
    cfg[CP_SNAP] = snaplen
    cfg[CP_LEFT] = count
    cfg[CP_TAKEN] = 0
    cfg[CP_LOST] = 0
    cfg[CP_MODE] = mode


def _block(btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    n = len(body) + 12
    return struct.pack("<II", btype, n) + body + struct.pack("<I", n)


def _option(code: int, value: bytes) -> bytes:
    return struct.pack("<HH", code, len(value)) + value + b"\0" * (-len(value) % 4)


END_OF_OPTIONS = struct.pack("<HH", 0, 0)


def section_header() -> bytes:
    """A pcapng Section Header Block (byte-order magic, version 1.0, length unknown)."""
    body = struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)
    body += _option(4, b"vecroute") + END_OF_OPTIONS  # shb_userappl
    return _block(0x0A0D0D0A, body)


def interface_block(name: str, snaplen: int) -> bytes:
    """An Interface Description Block: Ethernet, its name, timestamps in nanoseconds."""
    body = struct.pack("<HHI", LINKTYPE_ETHERNET, 0, snaplen)
    body += _option(2, name.encode()) + _option(9, bytes([9])) + END_OF_OPTIONS
    return _block(0x00000001, body)


def packet_block(ifx: int, ts_ns: int, data: bytes, orig_len: int, inbound: bool,
                 comment: str | None = None) -> bytes:
    """An Enhanced Packet Block; ``epb_flags`` bits 0-1 give the direction (1 in, 2 out)."""
    body = struct.pack("<IIIII", ifx, (ts_ns >> 32) & 0xFFFFFFFF, ts_ns & 0xFFFFFFFF,
                       len(data), orig_len) + data + b"\0" * (-len(data) % 4)
    body += _option(2, struct.pack("<I", 1 if inbound else 2))
    if comment:
        body += _option(1, comment.encode())
    return _block(0x00000006, body + END_OF_OPTIONS)


def open_capture_file(directory: str, name: str) -> int:
    """A new file ``name`` in ``directory`` (created 0700 if missing), opened for writing:
    a plain name only, the directory ours and not writable by others, no symlink
    followed, no existing file replaced."""
    if not _NAME.fullmatch(name) or name in (".", ".."):
        raise CaptureError(f"capture file {name[:40]!r}: give a plain name (letters, digits, "
                           f"'._+-', at most 128); it is created in {directory}")
    d = Path(directory)
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise CaptureError(f"capture directory {directory}: {e.strerror or e}") from None
    try:
        st = os.fstat(dfd)
        if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise CaptureError(f"capture directory {directory}: must belong to uid "
                               f"{os.geteuid()} and not be writable by group or others")
        try:
            return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                           | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        except FileExistsError:
            raise CaptureError(f"{d / name} exists: choose another name") from None
        except OSError as e:
            raise CaptureError(f"{d / name}: {e.strerror or e}") from None
    finally:
        os.close(dfd)


@dataclass
class CaptureSession:
    """One running capture: its file, limits and what it wrote so far."""

    path: str
    fd: int
    interface: str  # a port name or "any"
    ifx: int  # -1: any
    direction: str
    count: int
    snaplen: int
    max_bytes: int
    names: list[str]
    written: int = 0
    bytes: int = 0
    lost: int = 0  # frames the workers could not copy (ring full)
    started: float = field(default_factory=time.time)
    stopped_because: str = ""

    def __post_init__(self) -> None:
        head = section_header() + b"".join(interface_block(n, self.snaplen) for n in self.names)
        if not self._write(head):
            err = self.stopped_because
            try:
                os.unlink(self.path)  # nothing useful in it
            except OSError:
                pass
            raise CaptureError(f"{self.path}: {err}")

    def _write(self, data: bytes) -> bool:
        """Append to the file; on an error (a full disk) the capture ends, saying why."""
        view = memoryview(data)
        try:
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
        except OSError as e:
            self.stopped_because = f"write error: {e.strerror or e}"
            self.close()
            return False
        self.bytes += len(data)
        return True

    def add(self, records: list) -> bool:
        """Write drained ring records (header row, bytes); False once a limit is reached
        or the file cannot be written (the rest are not written)."""
        if self.fd < 0:
            return False
        out = []
        size = self.bytes
        for h, data in records:
            if self.written >= self.count:
                self.stopped_because = "count"
                break
            d = int(h[CR_DIR])
            comment = None
            if d == CAP_DROP:
                r = int(h[CR_REASON])
                c = COUNTERS[r] if 0 <= r < len(COUNTERS) else None
                comment = f"drop: {c.name}: {c.description}" if c else f"drop: reason {r}"
            blk = packet_block(int(h[CR_IF]), int(h[CR_TS]), data, int(h[CR_LEN]),
                               d != CAP_TX, comment)
            if size + len(blk) > self.max_bytes:
                self.stopped_because = "max_bytes"
                break
            out.append(blk)
            size += len(blk)
            self.written += 1
        if out and not self._write(b"".join(out)):
            self.written -= len(out)
            return False
        if self.written >= self.count and not self.stopped_because:
            self.stopped_because = "count"
        return not self.stopped_because

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def row(self) -> dict:
        return {"file": self.path, "interface": self.interface, "direction": self.direction,
                "count": self.count, "snaplen": self.snaplen, "written": self.written,
                "bytes": self.bytes, "lost": self.lost, "running": self.fd >= 0,
                "stopped": self.stopped_because}
