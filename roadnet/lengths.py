"""Lengths on a binary grid, so that every path length is an exact sum.

Floating-point addition is not associative: the raw road graph adds edge lengths one by
one along a path, the chain graph (:mod:`roadnet.chains`) adds whole chains, the reference
matcher's networkx graph adds split half-edges, and the three totals could differ in the
last bit. A pair whose score sits exactly on its threshold could then be delivered by one
matcher and not by another.

Every edge length and every offset along an edge is therefore stored as an integer
multiple of :data:`LENGTH_GRID_M` = 2**-26 m (about 15 nanometres). A float64 holds every
such multiple below 2**27 m (:data:`LONGEST_EXACT_M`, about 134,000 km) exactly, and the
sum of two of them is again one, so below that bound every sum of lengths and offsets,
in any order and any grouping, is exact: all matchers get bit-identical distances. The
snap moves a length by at most 2**-27 m (7.5 nanometres), far below any survey's
precision.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["LENGTH_GRID_M", "LONGEST_EXACT_M", "on_length_grid", "snap_unless_on_grid"]

#: The grid step of stored lengths and offsets, metres (a power of two).
LENGTH_GRID_M = 2.0 ** -26

#: Sums of grid lengths are exact below this many metres (2**53 grid steps).
LONGEST_EXACT_M = 2.0 ** 27

_SCALE = 2.0 ** 26


def on_length_grid(metres: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Lengths in metres rounded to the nearest multiple of :data:`LENGTH_GRID_M`.

    Scaling by a power of two and rounding to an integer are exact in float64, so the
    result is the grid value nearest to each input; grid values come back unchanged,
    non-finite values pass through. The input is not modified.

    Parameters
    ----------
    metres
        Lengths or offsets in metres, any shape; exact on the grid below
        :data:`LONGEST_EXACT_M`.
    """
    values = np.asarray(metres, dtype=np.float64)
    return np.rint(values * _SCALE) / _SCALE


def snap_unless_on_grid(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``values`` itself when it is float64 and already on the grid, else its snapped copy.

    For the constructors that keep every stored length on the grid: arrays that are
    already there (loaded files, slices of snapped arrays) are kept without a copy.
    """
    snapped = on_length_grid(values)
    if values.dtype != np.float64:
        return snapped
    # Small arrays (one point per update) compare fastest as bytes; NaN stays NaN either way.
    same = (snapped.tobytes() == values.tobytes() if values.size <= 64
            else not np.any(snapped != values))
    return values if same else snapped
