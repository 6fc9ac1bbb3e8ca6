"""Lengths on a binary grid, so that every path length is an exact sum.

Floating-point addition is not associative: the raw road graph adds edge lengths one by
one along a path, the chain graph (:mod:`roadpubsub.roadnet.chains`) adds whole chains, the
reference matcher's networkx graph adds split half-edges, and the three totals could differ in the
last bit. A pair whose score sits exactly on its threshold could then be delivered by one
matcher and not by another.

Every edge length and every offset along an edge is therefore stored as an integer
multiple of :data:`LENGTH_GRID_M` = 2**-26 m (about 15 nanometres). A float64 holds every
such multiple below 2**27 m (:data:`LONGEST_EXACT_M`, about 134,000 km) exactly, and the
sum or difference of two of them is again one *as long as the result stays below that
bound*. So the project keeps every value that a delivered distance is summed from below
it: edge lengths (:meth:`~roadpubsub.roadnet.network.RoadNetwork.from_arrays`), chain lengths
(:func:`~roadpubsub.roadnet.chains.build_chain_graph` ends a chain before it gets that long) and
Dmax (:func:`check_dmax`). A delivered distance is at most Dmax and its partial sums are
no larger (lengths are >= 0), so every one of them is exact, in any order and grouping:
all matchers get bit-identical distances. A sum beyond the bound may round, but then it
exceeds Dmax and the rounding is monotone, so it still exceeds Dmax.
The snap moves a length by at most 2**-27 m (7.5 nanometres), far below any survey's
precision.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from roadpubsub.roadnet.errors import InputError

__all__ = [
    "LENGTH_GRID_M",
    "LONGEST_EXACT_M",
    "check_dmax",
    "on_length_grid",
    "snap_unless_on_grid",
]

#: The grid step of stored lengths and offsets, metres (a power of two).
LENGTH_GRID_M = 2.0 ** -26

#: Sums of grid lengths are exact below this many metres (2**53 grid steps).
LONGEST_EXACT_M = 2.0 ** 27

_SCALE = 2.0 ** 26


def on_length_grid(metres: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Lengths in metres rounded to the nearest multiple of :data:`LENGTH_GRID_M`.

    Scaling by a power of two and rounding to an integer are exact in float64, so the
    result is the grid value nearest to each input; grid values come back unchanged,
    non-finite values pass through, and so do values of :data:`LONGEST_EXACT_M` or more
    (already multiples of the grid step there; scaling them could overflow). The input is
    not modified.

    Parameters
    ----------
    metres
        Lengths or offsets in metres, any shape; exact on the grid below
        :data:`LONGEST_EXACT_M`.
    """
    values = np.asarray(metres, dtype=np.float64)
    snapped = np.rint(values * _SCALE) / _SCALE
    big = ~(np.abs(values) < LONGEST_EXACT_M)
    if big.any():
        snapped = np.where(big, values, snapped)
    return snapped


def snap_unless_on_grid(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``values`` itself when it is float64 and already on the grid, else its snapped copy.

    For the constructors that keep every stored length on the grid: arrays that are
    already there (loaded files, slices of snapped arrays) are kept without a copy.
    """
    if values.dtype == np.float64 and values.size <= 16:
        # A few points (every subscribe, move and single-message match): Python floats are
        # several times faster than numpy calls here; round() rounds half to even, as rint.
        xs = values.ravel().tolist()
        snapped_xs = [round(x * _SCALE) / _SCALE if abs(x) < LONGEST_EXACT_M else x
                      for x in xs]
        if snapped_xs == xs:  # NaN compares unequal: such arrays take the copy below
            return values
        return np.array(snapped_xs, dtype=np.float64).reshape(values.shape)
    snapped = on_length_grid(values)
    if values.dtype != np.float64:
        return snapped
    # Small arrays (one point per update) compare fastest as bytes; NaN stays NaN either way.
    same = (snapped.tobytes() == values.tobytes() if values.size <= 64
            else not np.any(snapped != values))
    return values if same else snapped


def check_dmax(dmax_m: float, *, name: str = "dmax_m") -> float:
    """Dmax in metres as a float, or one ValueError naming ``name`` and the value.

    Dmax must be finite, > 0 and below :data:`LONGEST_EXACT_M`, so that every distance a
    matcher delivers is an exact sum (see the module docstring).
    """
    value = float(dmax_m)
    if not (np.isfinite(value) and 0 < value < LONGEST_EXACT_M):
        msg = (f"{name} must be a number of metres > 0 and below {LONGEST_EXACT_M:.0f},"
               f" got {dmax_m!r}")
        raise InputError(msg)
    return value
