"""LLVM intrinsics for the hot kernels: memcpy, prefetch and big-endian loads and stores.

numba's slice assignment costs ~25 ns for a 64-byte packet (view objects, overlap checks)
and a byte loop does not vectorise; one LLVM memcpy takes ~3 ns. A lookup over a vector of
packets hides its cache misses by prefetching every packet's next trie level before
reading any of them. A network-order field read byte by byte is one load, shift and or
per byte (LLVM does not merge them behind numba's index wraparound): the IPv6 flow hash's
four 64-bit address words cost 26 ns that way, 7 ns as four unaligned loads + bswap. A
field written byte by byte is a shift, a mask and a store per byte, each index checked for
wraparound: SRv6's outer header fields cost ~2 ns a packet more that way than as stores.
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


def _load_be(bits: int):  # type: ignore[no-untyped-def]
    """An intrinsic reading the ``bits``-wide big-endian integer at ``arr[off]`` (uint8,
    C layout) as one unaligned load and a byte swap. No bounds check, no wraparound: the
    caller has checked ``0 <= off`` and ``off + bits // 8 <= arr.size``."""
    ret = {16: types.uint16, 32: types.uint32, 64: types.uint64}[bits]

    @intrinsic
    def load(typingctx, arr, off):  # type: ignore[no-untyped-def]
        if not (isinstance(arr, types.Array) and arr.dtype == types.uint8
                and arr.layout == "C"):
            return None
        sig = ret(arr, types.int64)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            a = context.make_array(signature.args[0])(context, builder, args[0])
            ity = ir.IntType(bits)
            ptr = builder.bitcast(builder.gep(a.data, [args[1]]), ity.as_pointer())
            v = builder.load(ptr, align=1)
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ity, [ity]),
                                                f"llvm.bswap.i{bits}")
            return builder.call(fn, [v])

        return sig, codegen

    return load


load_be16 = _load_be(16)
load_be32 = _load_be(32)
load_be64 = _load_be(64)


def _store_be(bits: int):  # type: ignore[no-untyped-def]
    """An intrinsic writing the integer v as the ``bits``-wide big-endian field at
    ``arr[off]`` (uint8, C layout): one byte swap and one unaligned store. v is cut to its
    low ``bits`` bits, or widened (with its sign when signed, with zeros when not: as
    ``(v >> 8) & 0xFF`` byte by byte reads it). No bounds check, no wraparound, as
    ``_load_be``."""

    @intrinsic
    def store(typingctx, arr, off, v):  # type: ignore[no-untyped-def]
        if not (isinstance(arr, types.Array) and arr.dtype == types.uint8
                and arr.layout == "C" and isinstance(v, types.Integer)):
            return None
        sig = types.void(arr, types.int64, v)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            a = context.make_array(signature.args[0])(context, builder, args[0])
            ity = ir.IntType(bits)
            x = args[2]
            if x.type.width > bits:
                x = builder.trunc(x, ity)
            elif x.type.width < bits:
                x = builder.sext(x, ity) if signature.args[2].signed else builder.zext(x, ity)
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ity, [ity]),
                                                f"llvm.bswap.i{bits}")
            ptr = builder.bitcast(builder.gep(a.data, [args[1]]), ity.as_pointer())
            builder.store(builder.call(fn, [x]), ptr, align=1)
            return context.get_dummy_value()

        return sig, codegen

    return store


store_be16 = _store_be(16)
store_be32 = _store_be(32)
