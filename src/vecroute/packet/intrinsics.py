"""LLVM intrinsics for the hot kernels: memcpy and prefetch.

numba's slice assignment costs ~25 ns for a 64-byte packet (view objects, overlap checks)
and a byte loop does not vectorise; one LLVM memcpy takes ~3 ns. A lookup over a vector of
packets hides its cache misses by prefetching every packet's next trie level before
reading any of them.
"""

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def memcpy(typingctx, dst, dst_off, src, src_off, n):  # type: ignore[no-untyped-def]
    """``dst[dst_off : dst_off + n] = src[src_off : src_off + n]`` as one LLVM memcpy.

    The caller must have bounds-checked both ranges; the ranges must not overlap.
    """
    if not (
        isinstance(dst, types.Array)
        and isinstance(src, types.Array)
        and dst.dtype == types.uint8
        and src.dtype == types.uint8
        and dst.layout == "C"
        and src.layout == "C"
    ):
        return None
    sig = types.void(dst, types.int64, src, types.int64, types.int64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        d = context.make_array(signature.args[0])(context, builder, args[0])
        s = context.make_array(signature.args[2])(context, builder, args[2])
        dp = builder.gep(d.data, [args[1]])
        sp = builder.gep(s.data, [args[3]])
        cgutils.raw_memcpy(builder, dp, sp, args[4], 1)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def prefetch(typingctx, arr, idx):  # type: ignore[no-untyped-def]
    """Hint the CPU to load the cache line holding ``arr.flat[idx]`` (read, keep)."""
    if not isinstance(arr, types.Array) or arr.layout != "C":
        return None
    sig = types.void(arr, types.int64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        a = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.gep(a.data, [args[1]])
        i8p = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i8p, ir.IntType(32), ir.IntType(32),
                                               ir.IntType(32)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(ir.IntType(32), 0),
                          ir.Constant(ir.IntType(32), 3), ir.Constant(ir.IntType(32), 1)])
        return context.get_dummy_value()

    return sig, codegen
