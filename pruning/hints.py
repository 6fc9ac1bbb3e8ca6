"""A memory prefetch hint for compiled kernels.

At 10M subscriptions each of a message's ~5,000 candidates reads its slot's keyword
list, alpha, tau, chain point and DNUB from arrays far larger than the caches: a handful
of cache misses per candidate, each waited for in turn. Asking for the data of the
candidate a few places ahead lets those misses overlap (BENCHMARKS.md has the figures).
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
def _prefetch(typingctx: Any, array: Any, index: Any) -> Any:  # pragma: no cover - compiled
    """Hint that ``array[index]`` (a 1-d array) will be read soon (LLVM ``prefetch``: read,
    high locality, data cache).

    Only a hint: nothing is read and the address is never dereferenced, so an index past
    the end is harmless (a prefetch never faults); the result is unchanged.
    """
    if not (isinstance(array, types.Array) and array.ndim == 1
            and isinstance(index, types.Integer)):
        return None
    sig = types.void(array, index)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        array_type = signature.args[0]
        arr = context.make_array(array_type)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, array_type, arr, [args[1]],
                                       wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3),
                          ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


#: ``prefetch(array, index)`` in a compiled kernel (see ``_prefetch``).
prefetch = cast(Callable[[Any, int], None], _prefetch)
