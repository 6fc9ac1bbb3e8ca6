"""The spatio-textual similarity SIM(s, m) (paper Defs. 4-6, Eqs. 1-2): one implementation.

The scalar kernels here (:func:`tsim_kernel`, :func:`sim_kernel`, :func:`delivered_kernel`)
are the only place the scores are computed. The vectorised functions below loop over them,
and the compiled matchers call them directly, so every matcher produces bit-identical
scores and decisions for the same pair.
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

from roadpubsub.index.model import Subscriptions
from roadpubsub.roadnet.settings import DEFAULTS

__all__ = [
    "delivered",
    "delivered_kernel",
    "sim_kernel",
    "spatio_textual_similarity",
    "text_similarity",
    "tsim_kernel",
    "tsim_span_kernel",
]

FloatArray = npt.NDArray[np.float64]


@numba.njit(cache=True, nogil=True, inline="always")
def tsim_kernel(  # pragma: no cover - compiled
    kw_ptr: npt.NDArray[np.int64], kw_terms: npt.NDArray[np.int32], weights: FloatArray,
    row: int, term_mark: npt.NDArray[np.int64], stamp: int,
) -> float:
    """TSIM of one subscription row; the message's terms are those with ``term_mark == stamp``.

    TSIM = sum of w(t) over s.psi & m.psi / sum of w(t) over s.psi (Eq. 2), summed in
    the row's (ascending term id) order.
    """
    return tsim_span_kernel(kw_terms, weights, kw_ptr[row], kw_ptr[row + 1], term_mark,
                            stamp)


@numba.njit(cache=True, nogil=True, inline="always")
def tsim_span_kernel(  # pragma: no cover - compiled
    kw_terms: npt.NDArray[np.int32], weights: FloatArray, start: int, stop: int,
    term_mark: npt.NDArray[np.int64], stamp: int,
) -> float:
    """TSIM of the subscription whose keywords are ``kw_terms[start:stop]`` (as
    :func:`tsim_kernel`, which calls it: one summation, one order)."""
    total = 0.0
    common = 0.0
    for k in range(start, stop):
        t = kw_terms[k]
        w = weights[t]
        total += w
        if t < term_mark.size and term_mark[t] == stamp:
            common += w
    return common / total


@numba.njit(cache=True, nogil=True, inline="always")
def sim_kernel(alpha: float, distance_m: float, dmax_m: float,
               tsim: float) -> float:  # pragma: no cover - compiled
    """SIM = alpha * (1 - dN / Dmax) + (1 - alpha) * TSIM (Eq. 1, SPRO of Def. 5).

    The spatial term is 0 when alpha = 0 (so an unreachable dN = inf gives no NaN).
    """
    spatial = alpha * (1.0 - distance_m / dmax_m) if alpha > 0.0 else 0.0
    return spatial + (1.0 - alpha) * tsim


@numba.njit(cache=True, nogil=True, inline="always")
def delivered_kernel(score: float, tau: float, distance_m: float, dmax_m: float,
                     tolerance: float) -> bool:  # pragma: no cover - compiled
    """The delivery rule: dN(s, m) <= Dmax and SIM(s, m) >= s.tau - tolerance."""
    return distance_m <= dmax_m and score >= tau - tolerance


@numba.njit(cache=True, nogil=True)
def _text_similarity_rows(  # pragma: no cover - compiled
    kw_ptr: npt.NDArray[np.int64], kw_terms: npt.NDArray[np.int32], weights: FloatArray,
    rows: npt.NDArray[np.int64], message_terms: npt.NDArray[np.int32],
    term_mark: npt.NDArray[np.int64], out: FloatArray,
) -> None:
    for t in message_terms:
        term_mark[t] = 1
    for i in range(rows.size):
        out[i] = tsim_kernel(kw_ptr, kw_terms, weights, rows[i], term_mark, 1)


@numba.njit(cache=True, nogil=True)
def _sim_rows(alpha: FloatArray, distance_m: FloatArray, dmax_m: float, tsim: FloatArray,
              out: FloatArray) -> None:  # pragma: no cover - compiled
    for i in range(alpha.size):
        out[i] = sim_kernel(alpha[i], distance_m[i], dmax_m, tsim[i])


@numba.njit(cache=True, nogil=True)
def _delivered_rows(score: FloatArray, tau: FloatArray, distance_m: FloatArray, dmax_m: float,
                    tolerance: float, out: npt.NDArray[np.bool_]) -> None:  # pragma: no cover
    for i in range(score.size):
        out[i] = delivered_kernel(score[i], tau[i], distance_m[i], dmax_m, tolerance)


def text_similarity(
    subs: Subscriptions,
    rows: npt.NDArray[np.int64],
    message_terms: npt.NDArray[np.int32],
    weights: FloatArray,
) -> FloatArray:
    """TSIM(s, m) for the selected rows (paper Eq. 2), in [0, 1].

    Parameters
    ----------
    subs
        The subscription batch; ``rows`` selects the ones to score.
    message_terms
        The message's term ids.
    weights
        w(t) per term id.
    """
    rows = np.asarray(rows, dtype=np.int64)
    out = np.empty(rows.size)
    mark = np.zeros(weights.size, dtype=np.int64)
    terms = np.asarray(message_terms, dtype=np.int32)
    _text_similarity_rows(subs.kw_ptr, subs.kw_terms, weights, rows,
                          terms[(terms >= 0) & (terms < weights.size)], mark, out)
    return out


def spatio_textual_similarity(
    alpha: FloatArray, distance_m: FloatArray, dmax_m: float, tsim: FloatArray
) -> FloatArray:
    """SIM per pair (paper Eq. 1); see :func:`sim_kernel`."""
    a, d, t = np.broadcast_arrays(np.asarray(alpha, dtype=np.float64),
                                  np.asarray(distance_m, dtype=np.float64),
                                  np.asarray(tsim, dtype=np.float64))
    out = np.empty(a.shape)
    _sim_rows(np.ascontiguousarray(a).ravel(), np.ascontiguousarray(d).ravel(), float(dmax_m),
              np.ascontiguousarray(t).ravel(), out.reshape(-1))
    return out


def delivered(
    score: FloatArray,
    tau: FloatArray,
    distance_m: FloatArray,
    dmax_m: float,
    *,
    tolerance: float = DEFAULTS.score_tolerance,
) -> npt.NDArray[np.bool_]:
    """The delivery rule per pair; see :func:`delivered_kernel`."""
    s, t, d = np.broadcast_arrays(np.asarray(score, dtype=np.float64),
                                  np.asarray(tau, dtype=np.float64),
                                  np.asarray(distance_m, dtype=np.float64))
    out = np.empty(s.shape, dtype=bool)
    _delivered_rows(np.ascontiguousarray(s).ravel(), np.ascontiguousarray(t).ravel(),
                    np.ascontiguousarray(d).ravel(), float(dmax_m), float(tolerance),
                    out.reshape(-1))
    return out
