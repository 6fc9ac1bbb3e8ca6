"""A software prefetch for compiled kernels: ask the CPU to start loading ``a[i]``.

Matching touches a few entries of many large per-subscription arrays per candidate (its
keywords, alpha, tau, location), each usually a cache miss. Loops that know which rows
come next (a candidate list, a posting list) issue :func:`prefetch` a few rows ahead, so
the misses overlap instead of stalling one after another. A prefetch never changes a
result: it is a hint (LLVM's ``llvm.prefetch``; the CPU drops it if it cannot serve it),
and it is only issued for an index inside the array.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["prefetch"]


@intrinsic
def _prefetch(typingctx: Any, arr: Any, idx: Any) -> Any:  # pragma: no cover - compiled
    """Start loading element ``i`` of ``a`` in memory order (``a[i]`` for 1-d ``a``; row
    ``i // n_columns`` of a C-ordered 2-d ``a``) into the cache; nothing if i is outside
    the array. Returns at once and changes nothing.

    An intrinsic, not a jitted function inlined by numba: numba's IR inlining binds the
    array to a new variable, and each binding costs an atomic reference-count increment
    and decrement (``NRT_incref``/``NRT_decref``), several per posting and candidate,
    which two threads reading the same arrays make contend on one cache line
    (BENCHMARKS.md, "hot slot records"). Here the check and the hint are emitted inline
    with no reference taken.
    """
    if not isinstance(arr, types.Array) or not isinstance(idx, types.Integer):
        return None
    sig = types.void(arr, idx)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        aryty, idxty = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        i64 = ir.IntType(64)
        i = context.cast(builder, args[1], idxty, types.int64)
        size = ary.nitems
        inside = builder.and_(builder.icmp_signed(">=", i, ir.Constant(i64, 0)),
                              builder.icmp_signed("<", i, size))
        with builder.if_then(inside, likely=True):
            ptr = builder.gep(ary.data, [i])
            i8p = ir.IntType(8).as_pointer()
            i32 = ir.IntType(32)
            fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
            builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0),
                              ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


#: Called as ``prefetch(a, i)`` from compiled code (the intrinsic's typing context is
#: numba's to pass); typed for the callers' type checks.
prefetch = cast(Callable[[Any, int], None], _prefetch)
