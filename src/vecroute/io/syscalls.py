"""System calls and memory primitives for compiled loops (numba, nopython, nogil).

A worker's forwarding loop runs inside one compiled call for many batches, so it must
wait for packets, kick the TX rings and read the clock without returning to Python.
libc functions are declared by symbol (``types.ExternalFunction``): the symbol is bound
when the module is linked, so the kernels stay cacheable (ctypes function pointers
would not be). ``addr`` gives an array's data pointer; ``fence`` keeps the compiler from
moving stores across a ring's index publication (x86 keeps store order itself).
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

# int poll(struct pollfd *fds, nfds_t nfds, int timeout)
libc_poll = types.ExternalFunction("poll", types.int32(types.voidptr, types.uint64, types.int32))
# ssize_t send(int fd, const void *buf, size_t len, int flags)
libc_send = types.ExternalFunction(
    "send", types.int64(types.int32, types.voidptr, types.uint64, types.int32)
)
# int sendmmsg(int fd, struct mmsghdr *msgvec, unsigned int vlen, int flags)
libc_sendmmsg = types.ExternalFunction(
    "sendmmsg", types.int32(types.int32, types.voidptr, types.uint32, types.int32)
)
# ssize_t write(int fd, const void *buf, size_t count) / read
libc_write = types.ExternalFunction(
    "write", types.int64(types.int32, types.voidptr, types.uint64)
)
libc_read = types.ExternalFunction("read", types.int64(types.int32, types.voidptr, types.uint64))
# ssize_t recv(int fd, void *buf, size_t len, int flags)
libc_recv = types.ExternalFunction(
    "recv", types.int64(types.int32, types.voidptr, types.uint64, types.int32)
)
# int clock_gettime(clockid_t clk, struct timespec *tp)
libc_clock_gettime = types.ExternalFunction(
    "clock_gettime", types.int32(types.int32, types.voidptr)
)

# int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
libc_getsockopt = types.ExternalFunction(
    "getsockopt",
    types.int32(types.int32, types.int32, types.int32, types.voidptr, types.voidptr),
)

CLOCK_MONOTONIC = 1
CLOCK_REALTIME = 0
MSG_DONTWAIT = 0x40
POLLIN = 0x001
POLLERR = 0x008
POLLHUP = 0x010


@intrinsic
def addr(typingctx, arr):
    """The data pointer of a C-contiguous array, as ``void *``."""
    sig = types.voidptr(arr)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        return builder.bitcast(ary.data, cgutils.voidptr_t)

    return sig, codegen


@intrinsic
def null(typingctx):
    """A NULL ``void *`` (send(2) with no data kicks a TX ring)."""
    sig = types.voidptr()

    def codegen(context, builder, signature, args):
        return cgutils.voidptr_t(None)

    return sig, codegen


@intrinsic
def fence(typingctx):
    """A sequentially consistent fence: no load or store moves across it."""
    sig = types.void()

    def codegen(context, builder, signature, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True)
def clock_ns(ts: np.ndarray, clock: int) -> np.int64:
    """clock_gettime(clock) in ns; ``ts`` is an int64[2] scratch timespec."""
    libc_clock_gettime(np.int32(clock), addr(ts))
    return ts[0] * np.int64(1_000_000_000) + ts[1]


@njit(cache=True, nogil=True)
def poll_fds(pollfd: np.ndarray, n: int, timeout_ms: int) -> int:
    """poll(2) over ``pollfd`` (int32 [n, 2]: fd, events | revents << 16)."""
    return libc_poll(addr(pollfd), np.uint64(n), np.int32(timeout_ms))


@njit(cache=True, nogil=True)
def clear_socket_error(fd: int, scratch: np.ndarray) -> None:
    """getsockopt(SO_ERROR): read (and so reset) a socket's pending error, e.g. ENETDOWN
    after its interface went down, so poll(2) stops reporting it (int32 [2] scratch)."""
    scratch[1] = 4
    libc_getsockopt(np.int32(fd), np.int32(1), np.int32(4), addr(scratch[:1]),
                    addr(scratch[1:]))


@njit(cache=True, nogil=True)
def kick(fd: int) -> np.int64:
    """send(fd, NULL, 0, MSG_DONTWAIT): make the kernel transmit a TX ring's frames."""
    return libc_send(np.int32(fd), null(), np.uint64(0), np.int32(MSG_DONTWAIT))


@njit(cache=True, nogil=True)
def sock_recv(fd: int, arr: np.ndarray, n: int, flags: int) -> np.int64:
    """recv(2) of at most ``n`` bytes (n <= arr.size, the caller's guarantee) into ``arr``:
    the bytes received, or -1."""
    return libc_recv(np.int32(fd), addr(arr), np.uint64(n), np.int32(flags))


@njit(cache=True, nogil=True)
def eventfd_signal(fd: int, one: np.ndarray) -> None:
    """Add ``one[0]`` (uint64 [1]) to an eventfd counter: wakes whoever polls it."""
    libc_write(np.int32(fd), addr(one), np.uint64(8))


@njit(cache=True, nogil=True)
def eventfd_drain(fd: int, scratch: np.ndarray) -> None:
    """Reset a non-blocking eventfd (reads its counter, uint64 [1] scratch)."""
    libc_read(np.int32(fd), addr(scratch), np.uint64(8))


def _pointer_intrinsic(elem):
    @intrinsic
    def at(typingctx, address):
        sig = types.CPointer(elem)(address)

        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], context.get_value_type(signature.return_type))

        return sig, codegen

    return at


#: typed pointers from integer addresses (mappings and arrays Python keeps alive), for
#: ``numba.carray``: a compiled loop gets any number of rings through one int64 table
u8_at = _pointer_intrinsic(types.uint8)
u16_at = _pointer_intrinsic(types.uint16)
u32_at = _pointer_intrinsic(types.uint32)
i64_at = _pointer_intrinsic(types.int64)
