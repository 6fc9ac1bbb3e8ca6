"""Rows of a CSR (compressed sparse rows: a pointer array and the values), gathered
compiled: the keyword lists of subscriptions and messages are CSRs.
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

__all__ = ["take_csr"]

IntArray = npt.NDArray[np.int64]


@numba.njit(cache=True, nogil=True)
def take_csr_kernel(ptr: IntArray, values: npt.NDArray[np.int32], rows: IntArray
                    ) -> tuple[IntArray, npt.NDArray[np.int32]]:  # pragma: no cover
    """Rows ``rows`` of a CSR (ptr, values), in that order: (new ptr, new values)."""
    n = rows.size
    new_ptr = np.empty(n + 1, dtype=np.int64)
    new_ptr[0] = 0
    for i in range(n):
        r = rows[i]
        new_ptr[i + 1] = new_ptr[i] + ptr[r + 1] - ptr[r]
    out = np.empty(new_ptr[n], dtype=values.dtype)
    for i in range(n):
        r = rows[i]
        base = new_ptr[i] - ptr[r]
        for j in range(ptr[r], ptr[r + 1]):
            out[base + j] = values[j]
    return new_ptr, out


def take_csr(ptr: IntArray, values: npt.NDArray[np.int32], rows: IntArray
              ) -> tuple[IntArray, npt.NDArray[np.int32]]:
    """Rows ``rows`` of the CSR (``ptr``, ``values``), in that order (negative rows count
    from the end): (new ptr, new values).

    Raises
    ------
    IndexError
        A row out of range (checked before the kernel reads any).
    """
    # Compiled: the vectorised gather made three keyword-sized int64 temporaries (600 MB
    # at 10M subscriptions).
    if rows.size and (int(rows.min()) < -(ptr.size - 1) or int(rows.max()) >= ptr.size - 1):
        msg = f"row index out of range for {ptr.size - 1} rows"
        raise IndexError(msg)
    rows = np.where(rows < 0, rows + (ptr.size - 1), rows)
    return take_csr_kernel(np.ascontiguousarray(ptr, dtype=np.int64), values,
                           np.ascontiguousarray(rows, dtype=np.int64))
