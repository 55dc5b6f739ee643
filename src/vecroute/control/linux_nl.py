"""Netlink -> the FIB: vecroute follows the kernel's tables (linux-cp, like VPP's linux-nl).

Linux (and the routing daemons running there: BIRD, FRR) is the control plane; vecroute
copies what the kernel holds in one network namespace: links (which mirror is up),
addresses on mirrors (the port's addresses), neighbours on mirrors (the port's neighbour
table, origin "linux"), nexthop objects (``ip nexthop``, FRR's default) and the routes of
every table. Kernel tables 254 (main) and 255 (local) are vecroute's table 0, other ids the
vecroute table of the same id. Only what goes through a mirror can be mirrored: a route
through any other device is ignored and counted.

One raw netlink socket (128 MiB receive buffer, SO_RCVBUFFORCE) carries both the dumps and
the events, read on the asyncio loop with a bounded amount of work per callback. Route
messages, the only ones that come by the million, are parsed by a compiled kernel over the
bytes recv() returned and applied in batches (Fib.install_many: one Lpm.add_many per table
and turn); the rest is parsed in Python. Whatever goes wrong with the socket (ENOBUFS: the
kernel dropped messages for us; an error answer; an interrupted dump) ends in a
resynchronisation as VPP's lcp_nl does it: dump everything again, mark what the dump
refreshes, then sweep what it did not. The kernel also changes routes without telling
(a link going down, an address going away: IPv4 routes vanish; a deleted nexthop object
takes its routes): a deleted nexthop is followed here; a mirror's link going up or down
and an IPv4 address leaving a mirror are answered with a resynchronisation.
"""

from __future__ import annotations

import errno
import gc
import ipaddress
import itertools
import logging
import math
import operator
import os
import socket
import struct
import time
from collections.abc import Callable
from ipaddress import IPv4Address, IPv6Address
from typing import Any, Protocol

import numpy as np
from numba import njit

from vecroute.control.neighbors import NeighborTable
from vecroute.fib.adjacency import MAX_BUCKETS
from vecroute.fib.fib import Fib, RouteError, address_routes
from vecroute.fib.route_table import bulk_arrays, bulk_key

log = logging.getLogger("vecroute.linux_nl")

LINUX = "linux"  # the neighbour-table origin of entries learnt from the kernel

# netlink and rtnetlink constants (linux/netlink.h, linux/rtnetlink.h, linux/nexthop.h)
NETLINK_ROUTE = 0
SOL_NETLINK = 270
NETLINK_ADD_MEMBERSHIP = 1
SO_RCVBUFFORCE = 33
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_MULTI, NLM_F_DUMP, NLM_F_DUMP_INTR = 0x1, 0x2, 0x300, 0x10
RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
RTM_NEWADDR, RTM_DELADDR, RTM_GETADDR = 20, 21, 22
RTM_NEWROUTE, RTM_DELROUTE, RTM_GETROUTE = 24, 25, 26
RTM_NEWNEIGH, RTM_DELNEIGH, RTM_GETNEIGH = 28, 29, 30
RTM_NEWNEXTHOP, RTM_DELNEXTHOP, RTM_GETNEXTHOP = 104, 105, 106
MSG_NAMES = {
    RTM_NEWLINK: "newlink", RTM_DELLINK: "dellink", RTM_NEWADDR: "newaddr",
    RTM_DELADDR: "deladdr", RTM_NEWROUTE: "newroute", RTM_DELROUTE: "delroute",
    RTM_NEWNEIGH: "newneigh", RTM_DELNEIGH: "delneigh", RTM_NEWNEXTHOP: "newnexthop",
    RTM_DELNEXTHOP: "delnexthop", NLMSG_ERROR: "error", NLMSG_DONE: "done",
}
GROUPS = (1, 3, 5, 7, 9, 11, 32)  # LINK, NEIGH, IPV4_IFADDR, IPV4_ROUTE, IPV6_IFADDR, ..., NEXTHOP
AF_INET, AF_INET6 = 2, 10
RTN_UNICAST, RTN_BLACKHOLE, RTN_UNREACHABLE, RTN_PROHIBIT = 1, 6, 7, 8
RTN_NAMES = {2: "local", 3: "broadcast", 4: "anycast", 5: "multicast", 9: "throw", 10: "nat"}
RTM_F_CLONED = 0x200
RTNH_F_DEAD = 1
NH_ENCAP = -2  # _Nexthop.oif of an object with an encapsulation (or an FDB one)
IFF_UP, IFF_LOWER_UP = 0x1, 0x10000
NUD_INCOMPLETE, NUD_FAILED, NUD_NOARP = 0x01, 0x20, 0x40
NTF_PROXY = 0x08
IFA_F_DADFAILED = 0x08
RCVBUF = 128 << 20  # VPP's lcp_nl default
RECV_CHUNK = 1 << 20  # bytes read per recv burst (then parsed in one compiled pass)
DGRAM_MAX = 1 << 17  # room left for one datagram (dump ones are <= 32 KiB)
BYTES_PER_CALLBACK = 1 << 20  # then let the event loop serve others (~0.1 s of work)
BATCH_ROUTES = 200_000  # route messages applied to the FIB together, at most
PATH_CACHE_MAX = 65536  # distinct inline path sets remembered (each holds its lb)
BIG_BATCH = 20_000  # a batch this big is applied with the cyclic collector paused

# the parsed route messages: one row of R per netlink message (columns below), their next
# hops in H (R_HOP0 .. R_HOP0 + R_NHOPS)
(R_TYPE, R_OFF, R_LEN, R_FLAGS, R_SEQ, R_FAM, R_DLEN, R_TABLE, R_RTYPE, R_RTFLAGS, R_TOS,
 R_METRIC, R_NHID, R_HOP0, R_NHOPS, R_BAD, R_HI, R_LO, R_ERR) = range(19)
R_COLS = 19
H_OIF, H_WEIGHT, H_GWFAM, H_HI, H_LO, H_FLAGS = range(6)
H_COLS = 6
_M64 = (1 << 64) - 1


# -- the compiled route parser ------------------------------------------------------------


@njit(cache=True, inline="always")
def _u16(b, o):
    return np.int64(b[o]) | (np.int64(b[o + 1]) << 8)


@njit(cache=True, inline="always")
def _u32(b, o):
    return (np.int64(b[o]) | (np.int64(b[o + 1]) << 8) | (np.int64(b[o + 2]) << 16)
            | (np.int64(b[o + 3]) << 24))


@njit(cache=True, inline="always")
def _be64(b, o):
    v = np.uint64(0)
    for k in range(8):
        v = (v << np.uint64(8)) | np.uint64(b[o + k])
    return np.int64(v)


@njit(cache=True, inline="always")
def _addr(b, o, alen, fam, out, row, chi, clo):
    """An address attribute (4 or 16 bytes) as (hi, lo): IPv4 in lo."""
    if fam == 2 and alen >= 4:
        out[row, chi] = 0
        out[row, clo] = (np.int64(b[o]) << 24) | (np.int64(b[o + 1]) << 16) | (
            np.int64(b[o + 2]) << 8) | np.int64(b[o + 3])
    elif fam == 10 and alen >= 16:
        out[row, chi] = _be64(b, o)
        out[row, clo] = _be64(b, o + 8)


@njit(cache=True)
def parse_messages(b, n, R, H):
    """Split ``b[:n]`` into netlink messages (one row of R each: type, offset, length,
    flags, seq) and parse route messages fully (family, table, type, metric, nexthop id,
    destination, their next hops in H, RTA_MULTIPATH and RFC 5549 RTA_VIA included).
    Returns (messages, hops); stops early when R or H is full (the caller reads on)."""
    m = 0
    nh = 0
    o = 0
    while o + 16 <= n and m < R.shape[0]:
        ln = _u32(b, o)
        if ln < 16 or o + ln > n:
            break
        t = _u16(b, o + 4)
        for c in range(R_COLS):
            R[m, c] = 0
        R[m, R_TYPE] = t
        R[m, R_OFF] = o
        R[m, R_LEN] = ln
        R[m, R_FLAGS] = _u16(b, o + 6)
        R[m, R_SEQ] = _u32(b, o + 8)
        if t == 2 and ln >= 20:  # NLMSG_ERROR: the errno (negative)
            e = _u32(b, o + 16)
            R[m, R_ERR] = e - (1 << 32) if e >= (1 << 31) else e
        if (t == 24 or t == 25) and ln >= 28:
            if nh + 64 > H.shape[0]:
                break  # room for one more route's hops: read on next time
            p = o + 16
            fam = np.int64(b[p])
            R[m, R_FAM] = fam
            R[m, R_DLEN] = b[p + 1]
            if b[p + 2] != 0:
                R[m, R_BAD] = 1  # a source prefix (source routing)
            R[m, R_TOS] = b[p + 3]
            R[m, R_TABLE] = b[p + 4]
            R[m, R_RTYPE] = b[p + 7]
            R[m, R_RTFLAGS] = _u32(b, p + 8)
            R[m, R_HOP0] = nh
            a = p + 12
            end = o + ln
            gw_hi = np.int64(0)
            gw_lo = np.int64(0)
            gw_fam = np.int64(0)
            oif = np.int64(0)
            multi = False
            while a + 4 <= end:
                alen = _u16(b, a)
                at = _u16(b, a + 2) & 0x3FFF
                if alen < 4 or a + alen > end:
                    break
                d = a + 4
                dl = alen - 4
                if at == 1:  # RTA_DST
                    _addr(b, d, dl, fam, R, m, R_HI, R_LO)
                elif at == 2:  # RTA_SRC
                    R[m, R_BAD] = 1
                elif at == 4 and dl >= 4:  # RTA_OIF
                    oif = _u32(b, d)
                elif at == 5:  # RTA_GATEWAY
                    gw_fam = fam
                    if fam == 2 and dl >= 4:
                        gw_lo = (np.int64(b[d]) << 24) | (np.int64(b[d + 1]) << 16) | (
                            np.int64(b[d + 2]) << 8) | np.int64(b[d + 3])
                    elif fam == 10 and dl >= 16:
                        gw_hi = _be64(b, d)
                        gw_lo = _be64(b, d + 8)
                elif at == 18 and dl >= 2:  # RTA_VIA: struct rtvia (family, address)
                    vf = _u16(b, d)
                    gw_fam = vf
                    if vf == 10 and dl >= 18:
                        gw_hi = _be64(b, d + 2)
                        gw_lo = _be64(b, d + 10)
                    elif vf == 2 and dl >= 6:
                        gw_lo = (np.int64(b[d + 2]) << 24) | (np.int64(b[d + 3]) << 16) | (
                            np.int64(b[d + 4]) << 8) | np.int64(b[d + 5])
                elif at == 6 and dl >= 4:  # RTA_PRIORITY
                    R[m, R_METRIC] = _u32(b, d)
                elif at == 15 and dl >= 4:  # RTA_TABLE
                    R[m, R_TABLE] = _u32(b, d)
                elif at == 30 and dl >= 4:  # RTA_NH_ID
                    R[m, R_NHID] = _u32(b, d)
                elif at == 21 or at == 22:  # RTA_ENCAP_TYPE / RTA_ENCAP: not mirrored
                    R[m, R_BAD] = 2
                elif at == 9:  # RTA_MULTIPATH: struct rtnexthop, each with attributes
                    multi = True
                    q = d
                    while q + 8 <= d + dl and nh < H.shape[0]:
                        hl = _u16(b, q)
                        if hl < 8 or q + hl > d + dl:
                            break
                        H[nh, H_FLAGS] = b[q + 2]
                        H[nh, H_WEIGHT] = np.int64(b[q + 3]) + 1
                        H[nh, H_OIF] = _u32(b, q + 4)
                        H[nh, H_GWFAM] = 0
                        H[nh, H_HI] = 0
                        H[nh, H_LO] = 0
                        r = q + 8
                        while r + 4 <= q + hl:
                            rl = _u16(b, r)
                            rt = _u16(b, r + 2) & 0x3FFF
                            if rl < 4 or r + rl > q + hl:
                                break
                            if rt == 5:
                                H[nh, H_GWFAM] = fam
                                _addr(b, r + 4, rl - 4, fam, H, nh, H_HI, H_LO)
                            elif rt == 18 and rl >= 6:
                                vf = _u16(b, r + 4)
                                H[nh, H_GWFAM] = vf
                                _addr(b, r + 6, rl - 6, vf, H, nh, H_HI, H_LO)
                            elif rt == 21 or rt == 22:
                                R[m, R_BAD] = 2
                            r += (rl + 3) & ~3
                        nh += 1
                        if nh - R[m, R_HOP0] >= 64:
                            break
                        q += (hl + 3) & ~3
                a += (alen + 3) & ~3
            if not multi and (oif != 0 or gw_fam != 0):
                H[nh, H_OIF] = oif
                H[nh, H_WEIGHT] = 1
                H[nh, H_GWFAM] = gw_fam
                H[nh, H_HI] = gw_hi
                H[nh, H_LO] = gw_lo
                H[nh, H_FLAGS] = R[m, R_RTFLAGS] & 0xFF
                nh += 1
            R[m, R_NHOPS] = nh - R[m, R_HOP0]
        m += 1
        o += (ln + 3) & ~3
    return m, nh


# -- small Python parsers for the rest (few messages: links, addresses, neighbours) -------


def _attrs(data: bytes, off: int, end: int) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    while off + 4 <= end:
        alen, atype = struct.unpack_from("=HH", data, off)
        if alen < 4 or off + alen > end:
            break
        out[atype & 0x3FFF] = data[off + 4 : off + alen]
        off += (alen + 3) & ~3
    return out


def _ip(fam: int, raw: bytes) -> IPv4Address | IPv6Address | None:
    if fam == AF_INET and len(raw) >= 4:
        return IPv4Address(raw[:4])
    if fam == AF_INET6 and len(raw) >= 16:
        return IPv6Address(raw[:16])
    return None


def fit_weights(weights: list[int]) -> list[int]:
    """Kernel weights (1..256 per hop, any sum) as vecroute ECMP buckets (at most
    MAX_BUCKETS in all): divided by their gcd, then scaled down keeping each >= 1."""
    g = 0
    for w in weights:
        g = math.gcd(g, w)
    ws = [w // g for w in weights] if g else list(weights)
    total = sum(ws)
    if total <= MAX_BUCKETS:
        return ws
    scaled = [max(1, round(w * MAX_BUCKETS / total)) for w in ws]
    while sum(scaled) > MAX_BUCKETS:
        k = scaled.index(max(scaled))
        scaled[k] -= 1
    return scaled


class Target(Protocol):
    """What KernelSync changes: the router (LiveRouter) or a test's stand-in."""

    fib: Fib
    neigh: NeighborTable

    def commit(self) -> None: ...


class _Nexthop:
    __slots__ = ("id", "family", "oif", "gw", "blackhole", "group", "mark")

    def __init__(self, nid: int, family: int, oif: int, gw, blackhole: bool,
                 group: list[tuple[int, int]] | None, mark: int) -> None:
        self.id, self.family, self.oif, self.gw = nid, family, oif, gw
        self.blackhole, self.group, self.mark = blackhole, group, mark


class KernelSync:
    """Follows the kernel's tables in one network namespace into ``target.fib``.

    ``mirrors`` maps the kernel ifindex of each mirror interface (in that namespace) to
    the vecroute port index it stands for. ``target.fib`` is read again at each apply (a
    reload replaces it; call resync() then)."""

    def __init__(self, target: Target, netns: str | None, mirrors: dict[int, int]) -> None:
        self.target = target
        self.netns = netns
        self.mirrors = dict(mirrors)
        self.sock: socket.socket | None = None
        self.loop = None
        self.state = "idle"  # -> dumping -> synced; closed
        self._gen = 0  # the mark of the current dump
        self._fib: Fib | None = None  # the Fib our per-FIB state below belongs to
        # kernel state (independent of the FIB): route key -> [mark, {alt: path key}]; the
        # dicts are replaced, never changed in place (routes with one path share them)
        self._rt: dict[tuple, list] = {}
        self._inst: dict[tuple, tuple] = {}  # route key -> installed path key
        self._nh: dict[int, _Nexthop] = {}
        self._nh_users: dict[int, set] = {}  # nexthop id -> route keys using it
        self._nh_lb: dict[tuple[int, int], int] = {}  # (nexthop id, family) -> private lb
        self._paths: dict[tuple, tuple] = {}  # (family, path key) -> (lb, paths) or reason
        self._links: dict[int, bool] = {}  # mirror ifindex -> up
        self._addrs: dict[tuple[int, Any], int] = {}  # (port, interface address) -> mark
        self._neigh: dict[tuple[int, Any], int] = {}  # (port, ip) -> mark
        self._touched: dict[tuple, None] = {}
        self._dump_queue: list[int] = []
        self._dump_seq = 0
        self._dump_intr = False
        self._resync_wanted = False
        self._inflight = False
        self._buf = np.zeros(RECV_CHUNK + DGRAM_MAX, np.uint8)
        self._R = np.zeros((8192, R_COLS), np.int64)
        self._H = np.zeros((16384, H_COLS), np.int64)
        self._seq = int(time.time()) & 0xFFFFFF
        self.counts: dict[str, int] = {}  # messages by type
        self.ignored: dict[str, int] = {}  # routes not mirrored, by reason
        self.installed = 0
        self.removed = 0
        self.resyncs = 0
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        self.synced_at: float | None = None
        self.dump_started: float | None = None
        self.last_dump_s: float | None = None
        self.on_synced: Callable[[], None] | None = None  # called after each full dump

    # -- the socket -----------------------------------------------------------------------

    def open(self) -> None:
        """Open the netlink socket in the namespace, joined to every group we follow."""
        if self.netns is not None:
            from vecroute.io.netns import entered

            ctx = entered(self.netns)
        else:
            import contextlib

            ctx = contextlib.nullcontext()
        with ctx:
            s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_NONBLOCK,
                              NETLINK_ROUTE)
        try:
            s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
        except OSError:  # not CAP_NET_ADMIN: what rmem_max allows
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        s.bind((0, 0))
        for g in GROUPS:
            s.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, g)
        self.sock = s

    def start(self, loop) -> None:
        """Dump everything, then follow events, on ``loop`` (asyncio)."""
        if self.sock is None:
            self.open()
        self.loop = loop
        loop.add_reader(self.sock.fileno(), self._readable)
        self.resync()

    def close(self) -> None:
        if self.sock is not None:
            if self.loop is not None:
                try:
                    self.loop.remove_reader(self.sock.fileno())
                except (ValueError, OSError):
                    pass
            self.sock.close()
            self.sock = None
        self.state = "closed"

    def resync(self) -> None:
        """Dump links, addresses, neighbours, nexthops and routes again; what the dump
        does not refresh is swept when it ends (after a reload, an error, an overflow)."""
        if self.sock is None:
            return
        if self._inflight:  # one dump at a time per socket (else EBUSY): after this one
            self._resync_wanted = True
            return
        self.resyncs += 1
        self._gen += 1
        self._dump_intr = False
        self._resync_wanted = False
        self.state = "dumping"
        self.dump_started = time.monotonic()
        self._dump_queue = [RTM_GETLINK, RTM_GETADDR, RTM_GETNEIGH, RTM_GETNEXTHOP,
                            RTM_GETROUTE]
        self._check_fib()
        self._next_dump()

    def _stage_done(self) -> None:
        """One dump answered in full: the next one, or the sweep (unless a resync is
        already wanted: then it starts over from the links)."""
        self._flush()
        if self._resync_wanted:
            self.resync()
        elif self._dump_queue:
            self._next_dump()
        else:
            self._dump_done()

    def _next_dump(self) -> None:
        t = self._dump_queue.pop(0)
        self._seq += 1
        self._dump_seq = self._seq
        self._inflight = True
        body = struct.pack("=BxHiII", 0, 0, 0, 0, 0) if t == RTM_GETLINK else (
            struct.pack("=BBBBI", 0, 0, 0, 0, 0) if t in (RTM_GETADDR, RTM_GETNEXTHOP)
            else struct.pack("=BxxxiHBB", 0, 0, 0, 0, 0) if t == RTM_GETNEIGH
            else struct.pack("=BBBBBBBBI", 0, 0, 0, 0, 0, 0, 0, 0, 0))
        hdr = struct.pack("=IHHII", 16 + len(body), t, NLM_F_REQUEST | NLM_F_DUMP,
                          self._seq, 0)
        try:
            self.sock.send(hdr + body)
        except OSError as e:
            self._inflight = False
            self._error(f"dump request: {e}")

    def _error(self, what: str) -> None:
        self.last_error = what
        self.last_error_at = time.time()
        log.warning("netlink: %s: resynchronising", what)
        self._resync_wanted = True

    # -- reading ----------------------------------------------------------------------------

    def _readable(self) -> None:
        """Read what is there (bounded per call), parse, apply; more on the next turn."""
        try:
            self.poll(BYTES_PER_CALLBACK)
        except Exception as e:  # noqa: BLE001 - the mirror must outlive a bad message
            log.exception("netlink: unexpected error")
            self._error(f"{type(e).__name__}: {e}")
        if self._resync_wanted and self.sock is not None and not self._inflight:
            self.resync()

    def poll(self, budget: int = BYTES_PER_CALLBACK) -> int:
        """Read and apply up to about ``budget`` bytes; returns the bytes read."""
        s = self.sock
        if s is None:
            return 0
        buf = self._buf
        mv = memoryview(buf)
        got = 0
        # a dump makes millions of long-lived objects: no collection pass while they are
        # made (a full pass over a million routes costs ~1 s); bounded by ``budget``
        paused = gc.isenabled()
        if paused:
            gc.disable()
        try:
            got = self._read(s, buf, mv, budget)
        finally:
            if paused:
                gc.enable()
        return got

    def _read(self, s, buf, mv, budget: int) -> int:
        got = 0
        while got < budget:
            n = 0
            # many small datagrams (events) into one buffer, then one compiled parse
            while n < RECV_CHUNK:
                try:
                    k, sender = s.recvfrom_into(mv[n:], DGRAM_MAX)
                except BlockingIOError:
                    break
                except OSError as e:
                    if e.errno == errno.ENOBUFS:
                        self.counts["enobufs"] = self.counts.get("enobufs", 0) + 1
                        self._error("receive buffer overflow (ENOBUFS): messages lost")
                        continue
                    raise
                if k == 0:
                    break
                if sender[0] != 0:  # not the kernel: any root process could send it
                    self.counts["forged"] = self.counts.get("forged", 0) + 1
                    continue
                n += (k + 3) & ~3
            if n == 0:
                break
            got += n
            self._handle(buf, n)
        self._flush()
        return got

    def _handle(self, buf: np.ndarray, n: int) -> None:
        off = 0
        while off < n:
            m, _ = parse_messages(buf[off:n], n - off, self._R, self._H)
            if m == 0:
                break
            self._apply_messages(buf[off:n], self._R[:m], self._H)
            last = self._R[m - 1]
            off += int((last[R_OFF] + last[R_LEN] + 3) & ~3)

    def _apply_messages(self, b: np.ndarray, R: np.ndarray, H: np.ndarray) -> None:
        types = R[:, R_TYPE]
        is_route = (types == RTM_NEWROUTE) | (types == RTM_DELROUTE)
        # runs of route messages go in one batch; everything else one by one, in order
        i, m = 0, R.shape[0]
        while i < m:
            if is_route[i]:
                j = i
                while j < m and is_route[j]:
                    j += 1
                self._routes(R[i:j], H)
                i = j
            else:
                self._other(b, R[i])
                i += 1

    # -- non-route messages -------------------------------------------------------------------

    def _count(self, t: int) -> None:
        name = MSG_NAMES.get(t, str(t))
        self.counts[name] = self.counts.get(name, 0) + 1

    def _other(self, b: np.ndarray, r: np.ndarray) -> None:
        t = int(r[R_TYPE])
        self._count(t)
        seq = int(r[R_SEQ])
        if int(r[R_FLAGS]) & NLM_F_DUMP_INTR:
            self._dump_intr = True
        if t == NLMSG_DONE:
            if seq == self._dump_seq and self._inflight:
                self._inflight = False
                self._stage_done()
            return
        if t == NLMSG_ERROR:
            err = int(r[R_ERR])
            if err != 0 and seq == self._dump_seq and self._inflight:
                self._inflight = False
                if err in (-errno.EOPNOTSUPP, -errno.EINVAL) and not self._resync_wanted:
                    # a kernel without nexthop objects: go on with the next dump
                    self.counts["dump-unsupported"] = self.counts.get("dump-unsupported", 0) + 1
                    self._stage_done()
                    return
            if err != 0:
                self._error(f"error answer: {os.strerror(-err)}")
            return
        off, ln = int(r[R_OFF]), int(r[R_LEN])
        data = bytes(b[off : off + ln])
        if t in (RTM_NEWLINK, RTM_DELLINK):
            self._link(t, data)
        elif t in (RTM_NEWADDR, RTM_DELADDR):
            self._addr(t, data)
        elif t in (RTM_NEWNEIGH, RTM_DELNEIGH):
            self._neighbor(t, data)
        elif t in (RTM_NEWNEXTHOP, RTM_DELNEXTHOP):
            self._flush()  # routes before it refer to the nexthops as they were
            self._nexthop(t, data)

    def _link(self, t: int, data: bytes) -> None:
        _, _, index, flags, _ = struct.unpack_from("=BxHiII", data, 16)
        if index not in self.mirrors:
            return
        up = t == RTM_NEWLINK and (flags & IFF_UP) != 0 and (flags & IFF_LOWER_UP) != 0
        was = self._links.get(index)
        self._links[index] = up
        if was is not None and was != up and self.state != "dumping":
            # IPv4 routes through it vanish (or come back) without a message: dump again
            self._error(f"mirror ifindex {index} went {'up' if up else 'down'}")

    def _addr(self, t: int, data: bytes) -> None:
        fam, plen, flags, _, index = struct.unpack_from("=BBBBI", data, 16)
        port = self.mirrors.get(index)
        if port is None or fam not in (AF_INET, AF_INET6):
            return
        at = _attrs(data, 24, len(data))
        raw = at.get(2) if fam == AF_INET and 2 in at else at.get(1)
        ip = _ip(fam, raw or b"")
        if ip is None or (ip.version == 6 and ip.is_link_local):
            return  # link-local: the port's own (EUI-64 of the shared MAC)
        a = ipaddress.ip_interface(f"{ip}/{plen}")
        fib = self._check_fib()
        key = (port, a)
        if t == RTM_NEWADDR and not flags & IFA_F_DADFAILED:
            # only what Linux added is Linux's to take away: the config's own addresses
            # (on the mirror too) stay when they leave it, a deleted mirror included
            added = fib.add_address(port, a)
            if added or key in self._addrs:
                self._addrs[key] = self._gen
            if added:
                self._changed()
        elif t == RTM_DELADDR:
            if self._addrs.pop(key, None) is not None and fib.del_address(port, a):
                self._changed()
            if self.state != "dumping" and fam == AF_INET:
                # the kernel drops routes through it without telling (config addresses too)
                self._error(f"address {a} left a mirror")

    def _neighbor(self, t: int, data: bytes) -> None:
        fam, index, state, flags, _ = struct.unpack_from("=BxxxiHBB", data, 16)
        port = self.mirrors.get(index)
        if port is None or fam not in (AF_INET, AF_INET6) or flags & NTF_PROXY:
            return
        at = _attrs(data, 28, len(data))
        ip = _ip(fam, at.get(1, b""))
        mac = at.get(2)
        if ip is None:
            return
        neigh = self.target.neigh
        key = (port, ip)
        usable = (t == RTM_NEWNEIGH and mac is not None and len(mac) == 6
                  and not state & (NUD_INCOMPLETE | NUD_FAILED | NUD_NOARP))
        if usable:
            n = neigh.entries.get(key)
            if n is None or n.mac != mac or n.origin != LINUX:
                neigh.add_static(port, ip, bytes(mac), time.monotonic_ns(), origin=LINUX)
                self._changed()
            self._neigh[key] = self._gen
        elif t == RTM_DELNEIGH or state & (NUD_FAILED | NUD_INCOMPLETE):
            if self._neigh.pop(key, None) is not None:
                n = neigh.entries.get(key)
                if n is not None and n.origin == LINUX:
                    neigh.delete(port, ip)
                    self._changed()

    # -- nexthop objects -----------------------------------------------------------------------

    def _nexthop(self, t: int, data: bytes) -> None:
        fam, _, _, _, flags = struct.unpack_from("=BBBBI", data, 16)
        at = _attrs(data, 24, len(data))
        if 1 not in at:
            return
        nid = struct.unpack_from("=I", at[1])[0]
        if t == RTM_DELNEXTHOP:
            self._nh_gone(nid)
            return
        group = None
        if 2 in at:
            raw = at[2]
            group = []
            for k in range(len(raw) // 8):
                gid, w, whi, _ = struct.unpack_from("=IBBH", raw, 8 * k)
                group.append((gid, ((whi << 8) | w) + 1))
        oif = struct.unpack_from("=I", at[5])[0] if 5 in at else 0
        gw = _ip(fam, at.get(6, b""))
        if flags & RTNH_F_DEAD:
            oif = -1  # a dead nexthop forwards nothing
        if 7 in at or 8 in at or 11 in at:  # NHA_ENCAP_TYPE / NHA_ENCAP / NHA_FDB
            oif = NH_ENCAP  # vecroute cannot do what Linux would: its routes are not mirrored
        self._nh[nid] = _Nexthop(nid, fam, oif, gw, 4 in at, group, self._gen)
        self._nh_changed(nid)

    def _nh_paths(self, nid: int, family: int, depth: int = 0):
        """(paths, weights) of a nexthop object for routes of ``family``, or a reason
        string when vecroute cannot forward through it."""
        o = self._nh.get(nid)
        if o is None:
            return "unknown-nexthop"
        if o.blackhole:
            return "blackhole"
        if o.group is not None:
            if depth:
                return "nested-group"
            paths, weights = [], []
            for gid, w in o.group:
                sub = self._nh_paths(gid, family, 1)
                if isinstance(sub, str):
                    continue  # a member we cannot use: the others carry the traffic
                paths += sub[0]
                weights += [w * x for x in sub[1]]
            if not paths:
                return "not-mirror"
            return paths, weights
        if o.oif == NH_ENCAP:
            return "encap"
        if o.oif < 0:
            return "dead"
        port = self.mirrors.get(o.oif)
        if port is None:
            return "not-mirror"
        if o.gw is not None and o.gw.version == 4 and family == 6:
            return "family"
        return [(port, o.gw)], [1]

    def _nh_lbi(self, nid: int, family: int):
        """The private load-balance of nexthop ``nid`` for ``family`` routes (made on
        first use), or a reason string."""
        fib = self._fib
        got = self._nh_lb.get((nid, family))
        if got is not None:
            return got
        r = self._nh_paths(nid, family)
        if isinstance(r, str) and r != "blackhole":
            return r
        adjs, ws = self._adjs(fib, family, r)
        lb = fib.lbs.get_private(adjs, ws)
        fib.lbs.ref(lb)
        self._nh_lb[(nid, family)] = lb
        return lb

    def _adjs(self, fib: Fib, family: int, r) -> tuple[list[int], list[int] | None]:
        if r == "blackhole":
            return [fib.special_adjacency("blackhole")], None
        paths, ws = r
        if len(paths) > MAX_BUCKETS:
            paths, ws = paths[:MAX_BUCKETS], ws[:MAX_BUCKETS]
        return fib.path_adjacencies(family, paths), fit_weights(ws)

    def _groups_of(self, nid: int) -> list[int]:
        return [o.id for o in self._nh.values()
                if o.group is not None and any(g == nid for g, _ in o.group)]

    def _nh_changed(self, nid: int) -> None:
        """A nexthop (or a member of groups) changed: rewrite their load-balances in place;
        routes whose usability changed are re-evaluated."""
        self._check_fib()
        for x in [nid] + self._groups_of(nid):
            for fam in (4, 6):
                lb = self._nh_lb.get((x, fam))
                r = self._nh_paths(x, fam)
                usable = not isinstance(r, str) or r == "blackhole"
                if lb is not None and usable:
                    adjs, ws = self._adjs(self._fib, fam, r)
                    self._fib.set_load_balance(lb, adjs, ws)
                    self._changed()
                elif lb is not None or usable:
                    # became unusable, or usable for the first time: its routes again
                    if lb is not None and not usable:
                        self._drop_nh_lb(x, fam)
                    for key in list(self._nh_users.get(x, ())):
                        if key[0] == fam:
                            self._touched[key] = None

    def _drop_nh_lb(self, nid: int, fam: int) -> None:
        """Forget a private load-balance: its routes are taken off first."""
        for key in list(self._nh_users.get(nid, ())):
            if key[0] == fam and key in self._inst:
                self._touched[key] = None
                self._uninstall_now(key)
        lb = self._nh_lb.pop((nid, fam), None)
        if lb is not None:
            self._fib.lbs.unref(lb)

    def _nh_gone(self, nid: int) -> None:
        """As Linux: the routes using a deleted nexthop go with it, silently; groups lose
        the member (an emptied group goes too)."""
        self._check_fib()
        groups = self._groups_of(nid)
        for key in list(self._nh_users.pop(nid, ())):
            ent = self._rt.get(key)
            if ent is None:
                continue
            alts = ent[1] = dict(ent[1])  # (never changed in place: maybe shared)
            for alt, pk in list(alts.items()):
                if pk == ("nh", nid):
                    del alts[alt]
            if not alts:
                del self._rt[key]
            self._touched[key] = None
        self._flush()
        for fam in (4, 6):
            lb = self._nh_lb.pop((nid, fam), None)
            if lb is not None:
                self._fib.lbs.unref(lb)
        self._nh.pop(nid, None)
        for g in groups:
            o = self._nh.get(g)
            if o is None:
                continue
            o.group = [(x, w) for x, w in o.group if x != nid]
            if not o.group:
                self._nh_gone(g)
            else:
                self._nh_changed(g)

    # -- routes ---------------------------------------------------------------------------------

    def _ignore(self, reason: str, n: int = 1) -> None:
        self.ignored[reason] = self.ignored.get(reason, 0) + n

    def _routes(self, R: np.ndarray, H: np.ndarray) -> None:
        """A run of route messages: the kernel's view updated, the touched keys noted.
        The plain ones (a dump, a BGP feed) take the fast path, the others the full one,
        in message order."""
        self._check_fib()
        n = R.shape[0]
        self.counts["newroute"] = self.counts.get("newroute", 0) + int(
            np.count_nonzero(R[:, R_TYPE] == RTM_NEWROUTE))
        self.counts["delroute"] = self.counts.get("delroute", 0) + int(
            np.count_nonzero(R[:, R_TYPE] == RTM_DELROUTE))
        if np.any(R[:, R_FLAGS] & NLM_F_DUMP_INTR):
            self._dump_intr = True
        fam = R[:, R_FAM]
        fast = ((R[:, R_TYPE] == RTM_NEWROUTE) & (R[:, R_RTYPE] == RTN_UNICAST)
                & ((R[:, R_RTFLAGS] & RTM_F_CLONED) == 0) & (R[:, R_BAD] == 0)
                & (R[:, R_TOS] == 0)
                & (((fam == AF_INET) & (R[:, R_DLEN] <= 32))
                   | ((fam == AF_INET6) & (R[:, R_DLEN] <= 128)))
                & ((R[:, R_NHID] != 0) | (R[:, R_NHOPS] == 1)))
        # runs of fast / full rows, in order
        cuts = np.flatnonzero(fast[1:] != fast[:-1]) + 1
        start = 0
        for end in [*cuts.tolist(), n]:
            if fast[start]:
                self._routes_fast(R[start:end], H)
            else:
                self._routes_full(R[start:end], H)
            start = end
        if len(self._touched) >= BATCH_ROUTES:
            self._flush()

    def _routes_fast(self, R: np.ndarray, H: np.ndarray) -> None:
        """RTM_NEWROUTEs of unicast routes through a nexthop object or one inline hop, of
        a valid prefix length, nothing unusual: what _routes_full does with them, with
        the per-route work done over columns first."""
        fam6 = R[:, R_FAM] == AF_INET6
        ktab = R[:, R_TABLE]
        fs = np.where(fam6, 6, 4).tolist()
        tabs = np.where((ktab == 254) | (ktab == 255), 0, ktab).tolist()
        kinds = (ktab != 255).astype(np.int64).tolist()  # the local table's first
        his = np.where(fam6, R[:, R_HI], 0).astype(np.uint64).tolist()
        los = R[:, R_LO].astype(np.uint64).tolist()
        nhid = R[:, R_NHID]
        if nhid.all():
            rows = itertools.repeat(None)
        else:  # each route's first (with no nexthop id: only) hop, as a tuple of ints
            h0 = R[:, R_HOP0]
            rows = zip(*(H[h0, c].tolist() for c in range(H_COLS)), strict=True)
        rt, touched, users, gen = self._rt, self._touched, self._nh_users, self._gen
        rt_get, users_get = rt.get, users.get
        # one path key per nexthop id / hop in this run, with the {alt: path key} dicts of
        # routes that have only that one (shared: the kernel view's dicts are replaced,
        # never changed in place; a full table holds a million of them)
        pks: dict = {}
        for f, table, kind, hi, lo, plen, metric, nid, row in zip(
                fs, tabs, kinds, his, los, R[:, R_DLEN].tolist(), R[:, R_METRIC].tolist(),
                nhid.tolist(), rows, strict=False):
            key = (f, table, hi, lo, plen)
            alt = (kind, metric)
            got = pks.get(nid or row)
            if got is None:
                got = pks[nid or row] = (("nh", nid) if nid else ("hops", (row,)), {})
            pk, single = got
            ent = rt_get(key)
            if ent is None:
                one = single.get(alt)
                if one is None:
                    one = single[alt] = {alt: pk}
                rt[key] = [gen, one]
            else:
                ent[0] = gen
                alts = ent[1]
                old = alts.get(alt)
                if old is not pk and old != pk:
                    if old is not None and old[0] == "nh":
                        self._unuse(old[1], key, alts, alt)
                    alts = ent[1] = dict(alts)
                    alts[alt] = pk
            if nid:
                u = users_get(nid)
                if u is None:
                    users[nid] = {key}
                else:
                    u.add(key)
            touched[key] = None

    def _routes_full(self, R: np.ndarray, H: np.ndarray) -> None:
        """Route messages of every kind: the kernel's view updated, the touched keys
        noted, what is not mirrored counted."""
        n = R.shape[0]
        types = R[:, R_TYPE].tolist()
        col = R.T.tolist()
        fams, dlens, tables = col[R_FAM], col[R_DLEN], col[R_TABLE]
        rtypes, rtflags, toss = col[R_RTYPE], col[R_RTFLAGS], col[R_TOS]
        metrics, nhids, bads = col[R_METRIC], col[R_NHID], col[R_BAD]
        his, los, hop0, nhops = col[R_HI], col[R_LO], col[R_HOP0], col[R_NHOPS]
        rt, touched, users, gen = self._rt, self._touched, self._nh_users, self._gen
        hops_cache: dict[int, tuple] = {}
        for i in range(n):
            fam = fams[i]
            if fam == AF_INET:
                f = 4
            elif fam == AF_INET6:
                f = 6
            else:
                continue
            rtype = rtypes[i]
            if rtflags[i] & RTM_F_CLONED:
                continue
            if rtype == RTN_UNICAST:
                nid = nhids[i]
                if nid:
                    pk = ("nh", nid)
                else:
                    k = nhops[i]
                    if k == 0:
                        self._ignore("no-nexthop")
                        continue
                    h0 = hop0[i]
                    pk = hops_cache.get(h0)
                    if pk is None:
                        pk = ("hops", tuple(tuple(x) for x in H[h0 : h0 + k].tolist()))
                        hops_cache[h0] = pk
            elif rtype == RTN_BLACKHOLE:
                pk = ("blackhole",)
            elif rtype == RTN_UNREACHABLE:
                pk = ("unreachable",)
            elif rtype == RTN_PROHIBIT:
                pk = ("prohibit",)
            else:
                if types[i] == RTM_NEWROUTE:
                    self._ignore(RTN_NAMES.get(rtype, f"type-{rtype}"))
                continue
            if bads[i] or toss[i]:
                if types[i] == RTM_NEWROUTE:
                    self._ignore("source-route" if bads[i] == 1 else "encap" if bads[i] == 2
                                 else "tos")
                continue
            if dlens[i] > (32 if f == 4 else 128):  # a lying message (the kernel sends none)
                self._ignore("bad-prefix-length")
                continue
            ktab = tables[i]
            table = 0 if ktab in (254, 255) else ktab
            hi = his[i] & _M64 if f == 6 else 0
            key = (f, table, hi, los[i] & _M64, dlens[i])
            alt = (0 if ktab == 255 else 1, metrics[i])
            ent = rt.get(key)
            if types[i] == RTM_NEWROUTE:
                if ent is None:
                    rt[key] = [gen, {alt: pk}]
                else:
                    ent[0] = gen
                    ent[1] = dict(ent[1])  # (never changed in place: maybe shared)
                    old = ent[1].get(alt)
                    if old is not None and old != pk and old[0] == "nh":
                        self._unuse(old[1], key, ent[1], alt)
                    ent[1][alt] = pk
                if pk[0] == "nh":
                    u = users.get(pk[1])
                    if u is None:
                        users[pk[1]] = {key}
                    else:
                        u.add(key)
            else:
                if ent is None:
                    continue
                ent[1] = dict(ent[1])  # (never changed in place: maybe shared)
                if f == 6 and pk[0] == "hops" and self._del_hops(ent[1], alt, pk[1]):
                    touched[key] = None  # IPv6 siblings: only those hops went
                    continue
                old = ent[1].pop(alt, None)
                if old is None and f == 6 and len(ent[1]) == 1:
                    old = ent[1].popitem()[1]  # an IPv6 delete without its metric
                if old is not None and old[0] == "nh":
                    self._unuse(old[1], key, ent[1], None)
                if not ent[1]:
                    del rt[key]
            touched[key] = None

    @staticmethod
    def _del_hops(alts: dict, alt: tuple, gone: tuple) -> bool:
        """An IPv6 RTM_DELROUTE names the hops it removes (the kernel keeps each hop of a
        multipath route as a sibling): take those out of the route and keep the rest.
        False when it is not such a partial delete (then the whole route goes)."""
        if alt not in alts and len(alts) == 1:
            alt = next(iter(alts))  # an IPv6 delete without its metric
        cur = alts.get(alt)
        if cur is None or cur[0] != "hops" or len(cur[1]) <= len(gone):
            return False
        drop = {(h[H_OIF], h[H_GWFAM], h[H_HI], h[H_LO]) for h in gone}
        rest = tuple(h for h in cur[1] if (h[H_OIF], h[H_GWFAM], h[H_HI], h[H_LO]) not in drop)
        if not rest or len(rest) == len(cur[1]):
            return False
        alts[alt] = ("hops", rest)
        return True

    def _unuse(self, nid: int, key: tuple, alts: dict, skip) -> None:
        if not any(pk == ("nh", nid) for a, pk in alts.items() if a != skip):
            u = self._nh_users.get(nid)
            if u is not None:
                u.discard(key)

    def _path(self, f: int, pk: tuple):
        """(lb, paths) of a path key for family f, or a reason string (not mirrored)."""
        kind = pk[0]
        if kind == "nh":
            lb = self._nh_lbi(pk[1], f)
            if isinstance(lb, str):
                return lb
            o = self._nh.get(pk[1])
            return lb, self._nh_desc(o, f)
        got = self._paths.get((f, pk))
        if got is not None:
            return got
        fib = self._fib
        if kind == "hops":
            paths, ws = [], []
            for oif, w, gwfam, hi, lo, flags in pk[1]:
                if flags & RTNH_F_DEAD:
                    continue
                port = self.mirrors.get(oif)
                if port is None:
                    continue
                if gwfam == AF_INET:
                    nh = IPv4Address(lo & 0xFFFFFFFF)
                elif gwfam == AF_INET6:
                    nh = IPv6Address(((hi & _M64) << 64) | (lo & _M64))
                else:
                    nh = None
                if nh is not None and nh.version == 4 and f == 6:
                    continue
                paths.append((port, nh))
                ws.append(w)
            if not paths:
                got = "not-mirror"
            else:
                adjs, ws2 = self._adjs(fib, f, (paths, ws))
                lb = fib.lbs.get(adjs, ws2 if len(adjs) > 1 else None)
                got = (lb, paths)
        else:
            got = (fib.lbs.get([fib.special_adjacency(kind)]), [])
        if not isinstance(got, str):
            if len(self._paths) >= PATH_CACHE_MAX:
                self._clear_paths()
            fib.lbs.ref(got[0])  # the cache holds it: never freed under a cached key
        self._paths[(f, pk)] = got
        return got

    def _nh_desc(self, o, f):
        r = self._nh_paths(o.id, f) if o is not None else "x"
        return [] if isinstance(r, str) else r[0]

    def _clear_paths(self) -> None:
        for got in self._paths.values():
            if not isinstance(got, str):
                self._fib.lbs.unref(got[0])
        self._paths.clear()

    def _uninstall_now(self, key: tuple) -> None:
        cur = self._fib.routes.get_bulk(key)
        if cur is not None and cur[0] in KERNEL_KINDS:
            f, table = key[0], key[1]
            self.removed += self._fib.uninstall_many(f, table, [key], *bulk_arrays(f, [key]))
        self._inst.pop(key, None)
        self._changed()

    def _flush(self) -> None:
        """Apply every touched route key to the FIB: bulk installs and removals per
        (family, table)."""
        if not self._touched:
            return
        touched, self._touched = self._touched, {}
        fib = self._check_fib()
        big = len(touched) >= BIG_BATCH
        if big:
            gc.disable()
        try:
            self._apply(fib, touched)
        except Exception:
            # _inst holds only what the FIB took: the keys go back, to be applied again
            # (the resync the error asks for refreshes them anyway)
            touched.update(self._touched)
            self._touched = touched
            raise
        finally:
            if big:
                gc.enable()
        self._changed()

    def _apply(self, fib: Fib, touched: dict) -> None:
        """The FIB brought in step with the kernel view at the touched keys: what each
        key should hold is decided first, then applied in one bulk call per (family,
        table); the installed set (_inst) follows each call that succeeded only."""
        rt_get, inst = self._rt.get, self._inst
        inst_get = inst.get
        # vecroute's own routes (the addresses'): as int keys, cheap to test
        protected = {bulk_key(itf.table, net) for itf in fib.interfaces
                     for a in itf.addresses for _, net in address_routes(a)}
        pcache: tuple[dict, dict] = ({}, {})  # per family: path key -> value or reason
        adds: dict[tuple, tuple[list, list]] = {}  # (f, table) -> keys, path keys
        dels: dict[tuple, list] = {}  # (f, table) -> keys
        add_f = add_t = -1
        add_k: list = []
        add_p: list = []
        for key in touched:
            ent = rt_get(key)
            f = key[0]
            want = None
            if ent is not None:
                alts = ent[1]
                if len(alts) == 1:
                    [pk] = alts.values()
                else:
                    pk = alts[min(alts)]
                pc = pcache[f == 6]
                got = pc.get(pk)
                if got is None:
                    got = pc[pk] = self._value(f, pk)
                if got.__class__ is str:
                    self._ignore(got)
                else:
                    want = pk
                    if f == 6 and (key[2] >> 54) == 0x3FA:  # fe80::/10: per link
                        self._ignore("link-local")
                        want = None
            have = inst_get(key)
            if want is None:
                if have is None:
                    continue
            elif have == want:
                continue  # unchanged (a resync refreshing what is installed)
            if key in protected:
                cur = fib.routes.get_bulk(key)
                if cur is not None and cur[0] in PROTECTED:
                    if want is not None:
                        self._ignore(f"shadowed-{cur[0]}")  # vecroute's own route stays
                    inst.pop(key, None)  # (not ours in the FIB: nothing to undo)
                    continue
            if want is None:
                ft = key[:2]
                d = dels.get(ft)
                if d is None:
                    d = dels[ft] = []
                d.append(key)
            else:
                if f != add_f or key[1] != add_t:  # (a batch is mostly one table)
                    add_f, add_t = f, key[1]
                    add_k, add_p = adds.get((f, add_t)) or adds.setdefault(
                        (f, add_t), ([], []))
                add_k.append(key)
                add_p.append(want)
        for (f, table), ks in dels.items():
            self.removed += fib.uninstall_many(f, table, ks, *bulk_arrays(f, ks))
            for k in ks:
                del inst[k]
        for (f, table), (ks, pks) in adds.items():
            vals = list(map(pcache[f == 6].__getitem__, pks))
            lbs = np.fromiter(map(_LB, vals), np.int64, len(vals))
            try:
                fib.install_many(f, table, ks, vals, *bulk_arrays(f, ks), lbs, distinct=True)
            except RouteError as e:  # one table too many (nothing of it installed)
                self._ignore("tables-full", len(ks))
                log.warning("netlink: %d routes of table %d not mirrored: %s",
                            len(ks), table, e)
                continue
            inst.update(zip(ks, pks, strict=True))
            self.installed += len(ks)

    def _value(self, f: int, pk: tuple):
        """The FIB's (kind, paths, lb) of a path key for family f, or a reason string."""
        got = self._path(f, pk)
        if isinstance(got, str):
            return got
        lb, paths = got
        return ("kernel" if pk[0] in ("nh", "hops") else pk[0], paths, lb)

    def _dump_done(self) -> None:
        """The dump ended: sweep what it did not refresh (VPP lcp_nl's mark and sweep)."""
        gen = self._gen
        stale = [k for k, e in self._rt.items() if e[0] != gen]
        for k in stale:
            del self._rt[k]
            self._touched[k] = None
        self._flush()
        for nid in [i for i, o in self._nh.items() if o.mark != gen]:
            self._nh_gone(nid)
        fib = self._fib
        for key in [k for k, m in self._addrs.items() if m != gen]:
            del self._addrs[key]
            if fib.del_address(*key):
                self._changed()
        neigh = self.target.neigh
        for key in [k for k, m in self._neigh.items() if m != gen]:
            del self._neigh[key]
            n = neigh.entries.get(key)
            if n is not None and n.origin == LINUX:
                neigh.delete(*key)
                self._changed()
        self.last_dump_s = time.monotonic() - (self.dump_started or time.monotonic())
        self.synced_at = time.time()
        self.state = "synced"
        if self._dump_intr:
            self._error("dump interrupted by changes (NLM_F_DUMP_INTR)")
        log.info("netlink: synchronised in %.2f s: %d routes mirrored", self.last_dump_s,
                 len(self._inst))
        if self.on_synced is not None:
            self.on_synced()

    # -- the FIB ------------------------------------------------------------------------------

    def _check_fib(self) -> Fib:
        """The target's current Fib; a new one (a reload) starts our per-FIB state over:
        nothing of ours is in it, the next dump installs it all."""
        fib = self.target.fib
        if fib is not self._fib:
            self._fib = fib
            self._inst.clear()
            self._nh_lb.clear()
            self._paths.clear()
            self._addrs.clear()
            for key in self._rt:
                self._touched[key] = None  # reinstalled from what we know, at once
        return fib

    def _changed(self) -> None:
        self.target.commit()

    # -- introspection --------------------------------------------------------------------------

    def stats(self) -> dict:
        """Counters and state for ``ctl show linux-cp``."""
        return {
            "state": self.state,
            "netns": self.netns,
            "mirrors": len(self.mirrors),
            "messages": dict(self.counts),
            "routes_kernel": len(self._rt),
            "routes_mirrored": len(self._inst),
            "routes_installed": self.installed,
            "routes_removed": self.removed,
            "routes_ignored": dict(self.ignored),
            "nexthops": len(self._nh),
            "addresses": len(self._addrs),
            "neighbors": len(self._neigh),
            "resyncs": self.resyncs,
            "last_error": self.last_error,
            "last_error_at": self.last_error_at,
            "synced_at": self.synced_at,
            "last_dump_s": self.last_dump_s,
        }


KERNEL_KINDS = frozenset(("kernel", "blackhole", "unreachable", "prohibit"))
# vecroute's own routes that a kernel route never replaces (the addresses' routes: the
# kernel's "proto kernel" subnet routes duplicate them)
PROTECTED = frozenset(("local", "anycast", "connected", "broadcast"))


_LB = operator.itemgetter(2)  # the load-balance of a (kind, paths, lb) value
