"""Live packet I/O on a Linux interface: AF_PACKET sockets with PACKET_MMAP rings.

One :class:`PacketSocket` per interface (per worker) owns two sockets:

- RX: a TPACKET_V2 ring (``rx_version=2``, the default) or a TPACKET_V3 ring
  (``rx_version=3``); :meth:`PacketSocket.recv_batch` walks it in compiled code, copies
  frames into batch slots and gives the ring memory back once consumed.  No system
  call per packet, none per batch either.  PACKET_IGNORE_OUTGOING keeps our own
  transmissions out; frames tagged PACKET_OUTGOING are skipped anyway.

  V2 hands each frame over as soon as the kernel wrote it (and wakes ``poll``): a lone
  packet waits for nobody.  Frames are ``rx_frame_size`` bytes (:data:`RX_FRAME_SIZE`
  = 2176: the 76 bytes the kernel puts before an Ethernet frame with a vnet header --
  TPACKET_ALIGN(52 + 16) + 10 - 14 -- plus a 2048-byte frame, with room to spare), as
  many as the ring memory holds (``rx_blocks * block_size``, 16 MiB by default: 7680
  frames).  Bigger packets (GSO super-packets) come whole through the socket's receive
  queue (PACKET_COPY_THRESH; at most :data:`RX_COPY_MEMORY` bytes queued, above that
  they are counted as rx_truncated); see :mod:`vecroute.io.af_packet_ring`.

  V3 fills blocks of frames and hands a block over only when it is full or after
  ``block_timeout_ms``: a lone packet waits up to that long.
- TX: TPACKET_V2 ring (simpler than V3 for sending), PACKET_QDISC_BYPASS on, PACKET_LOSS
  on (a bad frame is discarded instead of stalling the ring).  :meth:`send_batch` copies
  a batch into free frames, marks them TP_STATUS_SEND_REQUEST and makes one
  ``send(MSG_DONTWAIT)``.  A full ring drops (counted), it never blocks the worker.
  The TX socket is bound with protocol 0, so it never receives anything.

Idle costs (almost) nothing: :meth:`wait` sleeps in ``poll()`` on the RX socket; with
no traffic the process uses no CPU (the tests check < 2% of a core over a 1 s wait).
V2 has no timer at all.  With V3 an empty block is never retired, so the process is
never woken, but the kernel still runs the block-retire timer every
``block_timeout_ms`` per RX socket (an hrtimer on 6.18: about 1000 timer softirqs/s per
socket at the default 1 ms, roughly 0.1-0.2% of a core).  The same timeout bounds the
latency a lone packet sees with V3, so 1 ms favours latency; raise it to trade.

Several workers can share an interface with ``fanout_group``: PACKET_FANOUT_HASH spreads
packets by the kernel's symmetric flow hash, so both directions of a flow stay on one
worker.  PACKET_FANOUT_FLAG_DEFRAG is deliberately not set: it would make the kernel
reassemble IP fragments before hashing and hand the router datagrams larger than the
wire MTU (and larger than a batch slot), which a router must forward as fragments.
Without it, all fragments of a datagram still hash alike (the flow dissector uses only
the addresses for fragments), only their order relative to unfragmented packets of the
same flow may change.

``vnet_hdr`` (PACKET_VNET_HDR) is what makes traffic from Linux hosts on veth/tap
forwardable: see :mod:`vecroute.io.af_packet_ring`.  Limits: a frame (after GSO
segmentation) must fit a batch slot (``MAX_FRAME`` = 2048 bytes); GSO other than TCP
or UDP over IPv4/IPv6 is dropped (counted); VLAN tags the kernel took out of the frame
are put back in.
"""

from __future__ import annotations

import mmap
import select
import socket
import struct
from types import TracebackType

import numpy as np

from vecroute.io import af_packet_ring as ring
from vecroute.io import control_filter
from vecroute.io.af_packet_ring import N_STATS, STAT_INDEX, STATS, TX_BLOCK

__all__ = ["FANOUT_NEW", "InterfaceError", "PacketSocket", "STATS", "STAT_INDEX"]

SOL_PACKET = 263
PACKET_RX_RING = 5
PACKET_STATISTICS = 6
PACKET_VERSION = 10
PACKET_TX_RING = 13
PACKET_LOSS = 14
PACKET_VNET_HDR = 15
PACKET_FANOUT = 18
PACKET_QDISC_BYPASS = 20
PACKET_IGNORE_OUTGOING = 23
PACKET_COPY_THRESH = 7
TPACKET_V2 = 1
TPACKET_V3 = 2
PACKET_FANOUT_DATA = 22
PACKET_FANOUT_HASH = 0
PACKET_FANOUT_CBPF = 6
PACKET_FANOUT_FLAG_UNIQUEID = 0x2000
PACKET_FANOUT_FLAG_IGNORE_OUTGOING = 0x4000
#: ``fanout_group``: start a new group with an id the kernel picks (:attr:`fanout_id`)
FANOUT_NEW = -1
PACKET_FANOUT_FLAG_DEFRAG = 0x8000
#: fanout modes (DEFRAG is never set; see the module docstring): the kernel's symmetric
#: flow hash, or a classic BPF program choosing the socket (io/control_filter.py); a group
#: ignores its members' PACKET_IGNORE_OUTGOING, so it is asked to in the cbpf mode
FANOUT_MODES = {"hash": PACKET_FANOUT_HASH,
                "cbpf": PACKET_FANOUT_CBPF | PACKET_FANOUT_FLAG_IGNORE_OUTGOING}
ETH_P_ALL = 0x0003
ARPHRD_ETHER = 1
ARPHRD_LOOPBACK = 772
SO_SNDBUFFORCE = 32
SO_RCVBUFFORCE = 33
TPACKET_ALIGNMENT = 16
TPACKET2_HDRLEN = 52  # TPACKET_ALIGN(sizeof tpacket2_hdr) + sizeof sockaddr_ll
TPACKET3_HDRLEN = 68
#: V2 RX frame: 2048 bytes of frame after the 76 bytes of header the kernel puts first
RX_FRAME_SIZE = 2176
#: V2: bytes of whole packets (bigger than a ring frame) the kernel may queue on the RX
#: socket at once (SO_RCVBUF, skb truesize counted); a packet that finds it full arrives
#: truncated (counted).  As much as the default ring: measured with a 32 MiB TCP transfer
#: from a TSO host and a lagging reader, 4 MiB kept 134 of ~530 super-packets, 16 MiB 523
RX_COPY_MEMORY = 16 << 20
#: V2: the copy buffer, the largest packet taken whole (GSO super-packets are <= 64 KiB
#: unless BIG TCP raised gso_max_size)
RX_COPY_MAX = 1 << 18
#: a control ring's blocks (x 256 KiB: 960 V2 frames, 2 MiB a port; a flood of traffic
#: to the router fills it, not the data ring)
CONTROL_RX_BLOCKS = 8

_PAGE = mmap.PAGESIZE


MMSGHDR_WORDS = 8  # struct mmsghdr on 64-bit Linux: 64 bytes


class InterfaceError(OSError):
    """The interface does not exist (or vanished while the socket was set up), or it is
    not an Ethernet interface."""


def _check(cond: bool, what: str) -> None:
    if not cond:
        raise ValueError(what)


class PacketSocket:
    """RX and TX rings on one interface; see the module docstring.

    ``stats`` is an int64 array indexed as :data:`STATS` (``STAT_INDEX[name]``); reading
    it also folds in the kernel's drop counter (one getsockopt, so read it off the fast
    path).  ``rx_version`` is 2 or 3 (TPACKET_V2 / TPACKET_V3 RX ring); ``rx_blocks`` x
    ``block_size`` is the RX ring memory for both; ``rx_frame_size`` is V2's frame size,
    ``rx_copy_memory`` the bytes of packets bigger than a V2 frame the kernel may queue
    (SO_RCVBUF), ``block_timeout_ms`` V3's block-retire timer.
    """

    def __init__(
        self,
        ifname: str,
        *,
        rx_blocks: int = 64,
        block_size: int = 1 << 18,
        frame_size: int = 2048,
        tx_frames: int = 1024,
        fanout_group: int | None = None,
        vnet_hdr: bool = True,
        block_timeout_ms: int = 1,
        tx_mode: str = "ring",
        rx_version: int = 2,
        rx_frame_size: int = RX_FRAME_SIZE,
        rx_copy_memory: int = RX_COPY_MEMORY,
        fanout_mode: str = "hash",
    ) -> None:
        _check(rx_blocks >= 1, f"rx_blocks must be >= 1, not {rx_blocks}")
        _check(
            block_size >= _PAGE and block_size % _PAGE == 0,
            f"block_size must be a multiple of the page size ({_PAGE}), not {block_size}",
        )
        _check(
            128 <= frame_size <= min(block_size, TX_BLOCK) and frame_size % TPACKET_ALIGNMENT == 0,
            f"frame_size must be a multiple of 16 in 128..{TX_BLOCK}, not {frame_size}",
        )
        _check(rx_version in (2, 3), f"rx_version must be 2 or 3, not {rx_version}")
        _check(
            128 <= rx_frame_size <= block_size and rx_frame_size % TPACKET_ALIGNMENT == 0,
            f"rx_frame_size must be a multiple of 16 in 128..block_size, not {rx_frame_size}",
        )
        _check(rx_copy_memory >= 0, f"rx_copy_memory must be >= 0, not {rx_copy_memory}")
        _check(tx_frames >= 0, f"tx_frames must be >= 0, not {tx_frames}")
        _check(
            fanout_group is None or FANOUT_NEW <= fanout_group <= 0xFFFF,
            f"fanout_group must be 0..65535 or FANOUT_NEW, not {fanout_group}",
        )
        _check(fanout_mode in FANOUT_MODES,
               f"fanout_mode must be {' or '.join(FANOUT_MODES)}, not {fanout_mode}")
        _check(block_timeout_ms >= 1, f"block_timeout_ms must be >= 1, not {block_timeout_ms}")
        _check(tx_mode in ("ring", "sendmmsg"), f"tx_mode must be ring or sendmmsg, not {tx_mode}")
        self.tx_mode = tx_mode
        self.rx_version = rx_version
        self.ifname = ifname
        self.vnet_hdr = bool(vnet_hdr)
        self._stats = np.zeros(N_STATS, dtype=np.int64)
        self._rx_sock: socket.socket | None = None
        self._tx_sock: socket.socket | None = None
        self._rx_map: mmap.mmap | None = None
        self._tx_map: mmap.mmap | None = None
        self._fanout_mode = FANOUT_MODES[fanout_mode]
        #: the fanout group joined (None: none); with FANOUT_NEW, the id the kernel chose
        self.fanout_id = fanout_group
        #: the port's control ring (:meth:`open_control`), None without one
        self.control: PacketSocket | None = None
        try:
            self.ifindex = socket.if_nametoindex(ifname)
        except OSError:
            raise InterfaceError(f"{ifname}: no such interface") from None
        try:
            if rx_version == 2:
                self._open_rx2(rx_blocks, block_size, rx_frame_size, fanout_group, rx_copy_memory)
            else:
                self._open_rx(rx_blocks, block_size, frame_size, fanout_group, block_timeout_ms)
            if tx_frames and tx_mode == "sendmmsg":
                self._open_tx_mmsg(tx_frames)
            elif tx_frames:
                self._open_tx(tx_frames, frame_size)
        except BaseException:
            self.close()
            raise
        self._poll = select.poll()
        self._poll.register(self._rx_sock.fileno(), select.POLLIN)

    # -- setup --------------------------------------------------------------------------

    def _socket(self) -> socket.socket:
        # protocol 0 until bind: a socket created with ETH_P_ALL would start receiving
        # from every interface before it is bound to ours
        try:
            return socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        except PermissionError:
            raise PermissionError(
                f"{self.ifname}: AF_PACKET sockets need root (CAP_NET_RAW)"
            ) from None

    def _bind(self, sock: socket.socket, proto: int) -> None:
        try:
            sock.bind((self.ifname, proto))
        except OSError as e:
            raise InterfaceError(f"{self.ifname}: cannot bind ({e.strerror})") from None
        hatype = sock.getsockname()[3]
        if hatype not in (ARPHRD_ETHER, ARPHRD_LOOPBACK):
            # tun and other L3 devices hand over frames without an Ethernet header
            raise InterfaceError(f"{self.ifname}: not an Ethernet interface (ARPHRD {hatype})")

    def _opt(self, sock: socket.socket, opt: int, value: int | bytes, what: str) -> None:
        try:
            sock.setsockopt(SOL_PACKET, opt, value)
        except OSError as e:
            raise OSError(e.errno, f"{self.ifname}: {what}: {e.strerror}") from None

    def _open_rx(
        self, nblocks: int, block_size: int, frame_size: int, fanout: int | None, tmo: int
    ) -> None:
        s = self._rx_sock = self._socket()
        self._opt(s, PACKET_VERSION, TPACKET_V3, "TPACKET_V3")
        if self.vnet_hdr:
            self._opt(s, PACKET_VNET_HDR, 1, "PACKET_VNET_HDR")
        frame_nr = nblocks * (block_size // frame_size)
        req3 = struct.pack("7I", block_size, nblocks, frame_size, frame_nr, tmo, 0, 0)
        self._opt(s, PACKET_RX_RING, req3, "RX ring")
        self._map_rx(nblocks, block_size)
        self._finish_rx(fanout)

    def _open_rx2(
        self, nblocks: int, block_size: int, frame_size: int, fanout: int | None, copy_mem: int
    ) -> None:
        s = self._rx_sock = self._socket()
        self._opt(s, PACKET_VERSION, TPACKET_V2, "TPACKET_V2")
        if self.vnet_hdr:
            self._opt(s, PACKET_VNET_HDR, 1, "PACKET_VNET_HDR")
        # packets bigger than a frame: truncated in the ring (TP_STATUS_COPY), whole on
        # the receive queue, whose memory SO_RCVBUF bounds
        self._opt(s, PACKET_COPY_THRESH, 1, "PACKET_COPY_THRESH")
        try:
            s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, copy_mem)
        except OSError:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, copy_mem)
        fpb = block_size // frame_size
        self._rx_nframes = nblocks * fpb
        self._rx_frame_size = frame_size
        self._rx_fpb = fpb
        req = struct.pack("4I", block_size, nblocks, frame_size, self._rx_nframes)
        self._opt(s, PACKET_RX_RING, req, "RX ring")
        self._rx_copy = np.zeros(RX_COPY_MAX, dtype=np.uint8)
        self._rx_fd = s.fileno()
        self._map_rx(nblocks, block_size)
        self._finish_rx(fanout)

    def _map_rx(self, nblocks: int, block_size: int) -> None:
        assert self._rx_sock is not None
        size = nblocks * block_size
        self._rx_map = mmap.mmap(
            self._rx_sock.fileno(), size, mmap.MAP_SHARED | mmap.MAP_POPULATE
        )
        self._rx8 = np.frombuffer(self._rx_map, dtype=np.uint8)
        self._rx16 = self._rx8.view(np.uint16)
        self._rx32 = self._rx8.view(np.uint32)
        self._rx_state = np.zeros(ring.N_RX_STATE, dtype=np.int64)
        self._nblocks = nblocks
        self._block_size = block_size

    def _finish_rx(self, fanout: int | None) -> None:
        s = self._rx_sock
        assert s is not None
        self._opt(s, PACKET_IGNORE_OUTGOING, 1, "PACKET_IGNORE_OUTGOING")
        self._bind(s, ETH_P_ALL)
        if fanout == FANOUT_NEW:  # a group of our own: no other process's id is taken
            self._opt(s, PACKET_FANOUT, (self._fanout_mode | PACKET_FANOUT_FLAG_UNIQUEID) << 16,
                      "PACKET_FANOUT")
            raw = s.getsockopt(SOL_PACKET, PACKET_FANOUT, 4)
            self.fanout_id = struct.unpack("I", raw)[0] & 0xFFFF
        elif fanout is not None:
            self._opt(s, PACKET_FANOUT, fanout | (self._fanout_mode << 16), "PACKET_FANOUT")

    def _open_tx_mmsg(self, nmax: int) -> None:
        """TX by sendmmsg(2) on a plain socket: on veth the TX ring's zero-copy frames must
        be copied into new pages by the kernel anyway (measured: sendmmsg +19% there)."""
        s = self._tx_sock = self._socket()
        self._opt(s, PACKET_QDISC_BYPASS, 1, "PACKET_QDISC_BYPASS")
        if self.vnet_hdr:  # each frame gets a virtio_net_hdr: GSO super-packets leave whole
            self._opt(s, PACKET_VNET_HDR, 1, "PACKET_VNET_HDR (TX)")
        self._bind(s, 0)
        self._mm = np.zeros((nmax, MMSGHDR_WORDS), dtype=np.uint64)
        self._iov = np.zeros((2 * nmax, 2), dtype=np.uint64)
        self._vh = np.zeros((nmax, 16), dtype=np.uint8)

    def _open_tx(self, nframes: int, frame_size: int) -> None:
        s = self._tx_sock = self._socket()
        self._opt(s, PACKET_VERSION, TPACKET_V2, "TPACKET_V2")
        if self.vnet_hdr:
            self._opt(s, PACKET_VNET_HDR, 1, "PACKET_VNET_HDR")
        self._opt(s, PACKET_LOSS, 1, "PACKET_LOSS")
        self._opt(s, PACKET_QDISC_BYPASS, 1, "PACKET_QDISC_BYPASS")
        fpb = TX_BLOCK // frame_size
        nblocks = -(-nframes // fpb)
        self._tx_nframes = nblocks * fpb
        req = struct.pack("4I", TX_BLOCK, nblocks, frame_size, self._tx_nframes)
        self._opt(s, PACKET_TX_RING, req, "TX ring")
        self._tx_map = mmap.mmap(
            s.fileno(), nblocks * TX_BLOCK, mmap.MAP_SHARED | mmap.MAP_POPULATE
        )
        self._tx8 = np.frombuffer(self._tx_map, dtype=np.uint8)
        self._tx32 = self._tx8.view(np.uint32)
        self._tx_state = np.zeros(1, dtype=np.int64)
        self._tx_frame_size = frame_size
        self._tx_fpb = fpb
        # a full ring of in-flight skbs must not hit the socket send buffer limit first
        try:
            s.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, 2 * nblocks * TX_BLOCK)
        except OSError:
            pass
        self._bind(s, 0)

    # -- data path ----------------------------------------------------------------------

    def recv_batch(
        self,
        buf: np.ndarray,
        meta: np.ndarray,
        ts: np.ndarray,
        start: int,
        max_packets: int,
        rx_if: int,
    ) -> int:
        """Copy up to ``max_packets`` frames into slots ``start..`` (reset_slot meta,
        M_RX = rx_if, ts in ns) and return how many slots were filled.  GSO segments
        take one slot each and may run past max_packets into the batch's spare slots
        (never past its capacity).  Slots outside the returned range are not touched."""
        if self.rx_version == 2:
            return ring.rx_ring2_to_batch(
                self._rx8, self._rx16, self._rx32, self._rx_state, self._rx_nframes,
                self._rx_frame_size, self._rx_fpb, self._block_size, self.vnet_hdr,
                self._rx_fd, self._rx_copy, buf, meta, ts, start, max_packets, rx_if,
                self._stats,
            )  # fmt: skip
        return ring.rx_ring_to_batch(
            self._rx8, self._rx16, self._rx32, self._rx_state, self._nblocks,
            self._block_size, self.vnet_hdr, buf, meta, ts, start, max_packets, rx_if,
            self._stats,
        )  # fmt: skip

    def rx_ring_args(self) -> tuple:
        """The arguments of the RX walker for this socket's version that come before
        ``buf``, for a compiled caller that walks the ring itself::

            ring.rx_ring2_to_batch(*ps.rx_ring_args(), buf, meta, ts, start, max_packets,
                                   rx_if, stats)   # rx_version 2
            ring.rx_ring_to_batch(*ps.rx_ring_args(), buf, ...)   # rx_version 3

        V2: (ring8, ring16, ring32, state, nframes, frame_size, frames_per_block,
        block_size, vnet, fd, copy); V3: (ring8, ring16, ring32, state, nblocks,
        block_size, vnet).  The arrays are views of the ring (and the cursor and copy
        buffer this socket uses in :meth:`recv_batch`: the two share one cursor), valid
        until :meth:`close`; pass :attr:`stats_array` as ``stats`` to keep one set of
        counters."""
        if self._rx_sock is None:
            raise ValueError(f"{self.ifname}: socket is closed")
        if self.rx_version == 2:
            return (
                self._rx8, self._rx16, self._rx32, self._rx_state, self._rx_nframes,
                self._rx_frame_size, self._rx_fpb, self._block_size, self.vnet_hdr,
                self._rx_fd, self._rx_copy,
            )  # fmt: skip
        return (
            self._rx8, self._rx16, self._rx32, self._rx_state, self._nblocks,
            self._block_size, self.vnet_hdr,
        )  # fmt: skip

    @property
    def stats_array(self) -> np.ndarray:
        """The counters array itself (no getsockopt): what the walkers take as ``stats``."""
        return self._stats

    def send_batch(self, buf: np.ndarray, meta: np.ndarray, index: np.ndarray, count: int) -> int:
        """Queue frames ``index[:count]`` of the batch on the TX ring and make one
        ``send()``; returns the frames queued (ring full: the rest are counted, dropped)."""
        if self._tx_sock is None:
            raise ValueError(f"{self.ifname}: opened with tx_frames=0")
        if self.tx_mode == "sendmmsg":
            return ring.send_mmsg(
                self._tx_sock.fileno(), self._mm, self._iov, self._mm.ctypes.data,
                self._iov.ctypes.data, buf, buf.ctypes.data, meta, index, count, self._stats,
                self._vh, self._vh.ctypes.data, self.vnet_hdr,
            )  # fmt: skip
        return ring.send_ring(
            self._tx_sock.fileno(), self._tx8, self._tx32, self._tx_state, self._tx_nframes,
            self._tx_frame_size, self._tx_fpb, TX_BLOCK, self.vnet_hdr, buf, meta, index, count,
            self._stats,
        )  # fmt: skip

    def loop_descriptor(self) -> np.ndarray:
        """This socket for a compiled loop (int64 [PD_COLS], see af_packet_ring): the
        loop walks the same rings, cursors and counters as recv_batch / send_batch, so
        the two may be used in turn (never at the same time)."""
        if self._rx_sock is None:
            raise ValueError(f"{self.ifname}: socket is closed")
        d = np.zeros(ring.PD_COLS, np.int64)
        d[ring.PD_RX_FD] = self._rx_sock.fileno()
        d[ring.PD_RX_VERSION] = self.rx_version
        d[ring.PD_RX_ADDR] = self._rx8.ctypes.data
        d[ring.PD_RX_BYTES] = self._rx8.size
        if self.rx_version == 2:
            d[ring.PD_RX_N] = self._rx_nframes
            d[ring.PD_RX_SIZE] = self._rx_frame_size
            d[ring.PD_RX_FPB] = self._rx_fpb
            d[ring.PD_RX_BLOCK] = self._block_size
            d[ring.PD_RX_COPY] = self._rx_copy.ctypes.data
            d[ring.PD_RX_COPY_BYTES] = self._rx_copy.size
        else:
            d[ring.PD_RX_N] = self._nblocks
            d[ring.PD_RX_SIZE] = self._block_size
        d[ring.PD_VNET] = int(self.vnet_hdr)
        d[ring.PD_RX_STATE] = self._rx_state.ctypes.data
        d[ring.PD_STATS] = self._stats.ctypes.data
        if self._tx_sock is None:
            d[ring.PD_TX_MODE] = ring.TXM_NONE
            return d
        d[ring.PD_TX_FD] = self._tx_sock.fileno()
        if self.tx_mode == "sendmmsg":
            d[ring.PD_TX_MODE] = ring.TXM_MMSG
            d[ring.PD_TX_VNET] = int(self.vnet_hdr)
            return d
        d[ring.PD_TX_MODE] = ring.TXM_RING
        d[ring.PD_TX_ADDR] = self._tx8.ctypes.data
        d[ring.PD_TX_BYTES] = self._tx8.size
        d[ring.PD_TX_N] = self._tx_nframes
        d[ring.PD_TX_SIZE] = self._tx_frame_size
        d[ring.PD_TX_FPB] = self._tx_fpb
        d[ring.PD_TX_STATE] = self._tx_state.ctypes.data
        return d

    def open_control(self, rx_blocks: int = CONTROL_RX_BLOCKS) -> PacketSocket:
        """Give this port a control ring: one more RX socket (V2, no TX) in this socket's
        fanout group (``fanout_mode="cbpf"``), joined after the data sockets, so its index
        is their number; the group's program (:meth:`set_fanout_program`) sends it the
        frames for the router itself (see :mod:`control_filter`)."""
        if self.control is not None:
            raise ValueError(f"{self.ifname}: already has a control ring")
        if self.fanout_id is None or self._fanout_mode != FANOUT_MODES["cbpf"]:
            raise ValueError(f"{self.ifname}: a control ring needs a cbpf fanout group")
        self.control = PacketSocket(self.ifname, rx_blocks=rx_blocks, tx_frames=0,
                                    vnet_hdr=self.vnet_hdr, fanout_group=self.fanout_id,
                                    fanout_mode="cbpf")
        return self.control

    def rings(self) -> list[tuple[str, PacketSocket]]:
        """("data", this socket) and, with one, ("control", its control ring)."""
        return [("data", self)] + ([("control", self.control)] if self.control else [])

    def set_fanout_program(self, prog: list) -> None:
        """Install the cbpf fanout group's program (any member may; the new one replaces
        the old atomically, and until the first, every frame goes to the first member)."""
        if self._rx_sock is None:
            raise ValueError(f"{self.ifname}: socket is closed")
        raw, keep = control_filter.fprog(prog)
        self._opt(self._rx_sock, PACKET_FANOUT_DATA, raw, "PACKET_FANOUT_DATA")
        del keep

    def wait(self, timeout_ms: int) -> bool:
        """Sleep until the RX ring has a frame (V2) or a block (V3) for us or
        ``timeout_ms`` passes; True when :meth:`recv_batch` has something to read.  No
        spinning: one poll() call."""
        if self._rx_ready():
            return True
        events = self._poll.poll(timeout_ms)
        if events and events[0][1] & (select.POLLERR | select.POLLHUP):
            # interface down/gone (ENETDOWN): read the error so poll does not fire again
            self._stats[ring.S_LINK_ERRORS] += 1
            assert self._rx_sock is not None
            self._rx_sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        return self._rx_ready()

    def _rx_ready(self) -> bool:
        if self.rx_version == 2:
            cur, fpb = int(self._rx_state[ring.R_FRAME]), self._rx_fpb
            h = (cur // fpb) * self._block_size + (cur % fpb) * self._rx_frame_size
            return bool(self._rx32[h >> 2] & ring.TP_STATUS_USER)
        base = int(self._rx_state[ring.R_BLOCK]) * self._block_size
        return bool(self._rx32[(base + ring.BLK_STATUS) >> 2] & ring.TP_STATUS_USER)

    # -- introspection and lifetime -----------------------------------------------------

    @property
    def stats(self) -> np.ndarray:
        """Counters indexed as STATS; folds in the kernel's tp_drops (read-and-reset)."""
        if self._rx_sock is not None:
            # struct tpacket_stats_v3 (V3, 12 bytes) starts like tpacket_stats (V2, 8)
            raw = self._rx_sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 12)
            _packets, drops = struct.unpack_from("2I", raw)
            self._stats[ring.S_RX_KERNEL_DROPS] += drops
        return self._stats

    def stats_dict(self) -> dict[str, int]:
        """The counters by name (slow path: ``ctl show``, tests)."""
        s = self.stats
        return {name: int(s[i]) for i, (name, _) in enumerate(STATS)}

    def fileno(self) -> int:
        """The RX socket, for an external poll/epoll loop."""
        if self._rx_sock is None:
            raise ValueError(f"{self.ifname}: socket is closed")
        return self._rx_sock.fileno()

    def close(self) -> None:
        """Release rings and sockets (the control ring's too); safe to call twice."""
        if self.control is not None:
            self.control.close()
        for attr in ("_rx8", "_rx16", "_rx32", "_tx8", "_tx32"):
            self.__dict__.pop(attr, None)  # views must go before their mmap closes
        for attr in ("_rx_map", "_tx_map", "_rx_sock", "_tx_sock"):
            obj = getattr(self, attr, None)
            if obj is not None:
                setattr(self, attr, None)
                try:
                    obj.close()
                except BufferError:
                    pass  # a caller still holds a view of the ring: freed with it

    def __enter__(self) -> PacketSocket:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._rx_sock is None else f"fd {self._rx_sock.fileno()}"
        return f"PacketSocket({self.ifname!r}, ifindex {self.ifindex}, {state})"
