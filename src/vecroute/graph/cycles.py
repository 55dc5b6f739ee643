"""CPU clock reads from compiled code (VPP's ``show runtime`` clocks per packet)."""

import time

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def readcyclecounter(typingctx):
    """llvm.readcyclecounter: rdtsc on x86-64, a cheap monotonic counter elsewhere."""
    sig = types.uint64()

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(64), [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.readcyclecounter")
        return builder.call(fn, [])

    return sig, codegen


@njit(cache=True)
def _cycles() -> int:
    return readcyclecounter()


_HZ: float | None = None


def cycles_per_second() -> float:
    """Calibrate the cycle counter against the monotonic clock once (about 20 ms)."""
    global _HZ
    if _HZ is None:
        c0, t0 = _cycles(), time.perf_counter_ns()
        while time.perf_counter_ns() - t0 < 20_000_000:
            pass
        c1, t1 = _cycles(), time.perf_counter_ns()
        _HZ = (c1 - c0) * 1e9 / (t1 - t0) if c1 > c0 else 1e9
    return _HZ
