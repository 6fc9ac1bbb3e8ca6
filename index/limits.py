"""Per-subscription pruning limits of the enhanced architecture (paper Sec. V, Eqs. 7-15).

All functions are vectorised over subscriptions. They work with the *effective* threshold
``tau_e = tau - score_tolerance``, the one the delivery rule uses, so a bound derived here
never excludes a pair the reference matcher delivers.

Where the paper divides by alpha or 1 - alpha (Eqs. 7, 8, 13), the edge cases are handled
exactly rather than clamped away:

* alpha = 1: SIM = SPRO, the text never matters; TSIMlimit is -inf and the subscription is
  a wildcard (its LAP holds ``*``) with DNUB = (1 - tau_e) * Dmax.
* alpha = 0: SIM = TSIM, the distance only has to be <= Dmax; DNUB(s|t) = Dmax when
  TUB(s|t) >= tau_e, and the keyword is not in the prefix otherwise.
* tau_e <= alpha (TSIMlimit <= 0): a message sharing no keyword can still match, so the
  prefix is all keywords plus the wildcard (Lemma 3's "LAP(s) = s.psi U {*}").
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import numpy.typing as npt

from index.model import Subscriptions
from roadnet.settings import DEFAULTS

__all__ = [
    "TEXT_BOUND_INFLATION",
    "LocationAwarePrefixes",
    "distance_limit",
    "distance_upper_bound",
    "distance_upper_bound_kernel",
    "effective_tau",
    "location_aware_prefixes",
    "tsim_limit",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Added to every textual upper bound (TUB) so that summing the same weights in another
#: order (the verifier sums in term-id order) can never make a bound fall short of TSIM.
TEXT_BOUND_INFLATION = 1e-12


def effective_tau(tau: FloatArray, *, tolerance: float = DEFAULTS.score_tolerance) -> FloatArray:
    """tau_e = tau - tolerance: the threshold the delivery rule compares SIM with."""
    return np.asarray(tau - tolerance, dtype=np.float64)


def tsim_limit(alpha: FloatArray, tau_e: FloatArray) -> FloatArray:
    """TSIMlimit = (tau_e - alpha) / (1 - alpha) (paper Eq. 8); -inf where alpha = 1.

    A message delivered to s has TSIM(s, m) >= TSIMlimit, because SPRO <= 1.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (tau_e - alpha) / (1.0 - alpha)
    return np.where(alpha >= 1.0, -np.inf, out)


@numba.njit(cache=True, nogil=True, inline="always")
def distance_upper_bound_kernel(alpha: float, tau_e: float, tub: float,
                                dmax_m: float) -> float:  # pragma: no cover - compiled
    """DNUB = min(1, 1 - (tau_e - (1 - alpha) * TUB) / alpha) * Dmax (Eqs. 13-14), scalar.

    alpha = 0 is handled without dividing: Dmax where TUB >= tau_e, else -Dmax.
    """
    if alpha > 0.0:
        # The numerator carries a rounding error of a few 1e-16, which the division by a
        # small alpha magnifies; widen by more than that so the bound stays an upper bound.
        frac = 1.0 - (tau_e - (1.0 - alpha) * tub) / alpha + 1e-15 / alpha
    else:
        frac = 1.0 if tub >= tau_e else -1.0
    return min(frac, 1.0) * dmax_m


@numba.njit(cache=True, nogil=True)
def _distance_upper_bounds(alpha: FloatArray, tau_e: FloatArray, tub: FloatArray,
                           dmax_m: float, out: FloatArray) -> None:  # pragma: no cover
    for i in range(alpha.size):
        out[i] = distance_upper_bound_kernel(alpha[i], tau_e[i], tub[i], dmax_m)


def distance_upper_bound(
    alpha: FloatArray, tau_e: FloatArray, tub: FloatArray, dmax_m: float
) -> FloatArray:
    """DNUB = min(1, 1 - (tau_e - (1 - alpha) * TUB) / alpha) * Dmax (paper Eqs. 13-14).

    The largest network distance (metres) at which a subscription whose textual similarity
    is at most ``tub`` can still be delivered. Negative where no distance works (the
    keyword is then outside the location-aware prefix). See
    :func:`distance_upper_bound_kernel`; with the exact TSIM of a pair in place of TUB it
    is the exact distance limit of that pair, which Algorithm 2 uses.
    """
    a, t, u = np.broadcast_arrays(np.asarray(alpha, dtype=np.float64),
                                  np.asarray(tau_e, dtype=np.float64),
                                  np.asarray(tub, dtype=np.float64))
    out = np.empty(a.shape)
    _distance_upper_bounds(np.ascontiguousarray(a).ravel(), np.ascontiguousarray(t).ravel(),
                           np.ascontiguousarray(u).ravel(), float(dmax_m), out.reshape(-1))
    return out


def distance_limit(alpha: FloatArray, tau_e: FloatArray, dmax_m: float) -> FloatArray:
    """DNlimit = min(Dmax, (1 - (tau_e - (1 - alpha)) / alpha) * Dmax) (paper Eq. 7).

    DNUB with TUB = 1: no message farther than this can be delivered to s (Lemma 1).
    """
    full = np.full(np.shape(alpha), 1.0 + TEXT_BOUND_INFLATION)
    return distance_upper_bound(alpha, tau_e, full, dmax_m)


@dataclass(frozen=True, eq=False)
class LocationAwarePrefixes:
    """LAP postings of a batch of subscriptions (paper Eq. 9, Lemmas 3-6).

    Attributes
    ----------
    row, term, dnub, tub
        One entry per LAP keyword: subscription row, term id, DNUB(s|t) in metres (Eq. 14)
        and TUB(s|t) (Eq. 12).
    wildcard_rows, wildcard_dnub
        Subscriptions whose LAP holds the wildcard ``*`` and DNUB(s|*) (TUB = 0).
    dn_limit
        DNlimit(s) per row (Eq. 7), metres; -1 for a subscription nothing can reach.
    """

    row: IntArray
    term: npt.NDArray[np.int32]
    dnub: FloatArray
    tub: FloatArray
    wildcard_rows: IntArray
    wildcard_dnub: FloatArray
    dn_limit: FloatArray


def location_aware_prefixes(
    subs: Subscriptions,
    weights: FloatArray,
    term_rank: IntArray,
    *,
    dmax_m: float,
    tolerance: float = DEFAULTS.score_tolerance,
) -> LocationAwarePrefixes:
    """Compute LAP(s), TUB(s|t), DNUB(s|t) and DNlimit(s) for every subscription.

    Keywords are taken in the general order (weight descending, :meth:`TermWeights.rank`).
    If the first keyword s shares with m is t_i, TSIM <= TUB(s|t_i) = wsum(s_i) / wsum(s)
    (Eqs. 11-12). t_i is in the prefix iff DNUB(s|t_i) >= 0, i.e. iff TUB(s|t_i) >=
    TSIMlimit: the minimal p of Eq. 9 (suffix sums decrease, so this is a prefix).
    """
    n = len(subs)
    lengths = np.diff(subs.kw_ptr)
    row = np.repeat(np.arange(n, dtype=np.int64), lengths)
    term = subs.kw_terms
    order = np.lexsort((term_rank[term], row))
    row = row[order]
    term = term[order]
    w = weights[term]
    alpha = subs.alpha[row]
    tau_e = effective_tau(subs.tau, tolerance=tolerance)
    # Suffix sums within each row: wsum(s_i) = wsum(s) - (sum of weights before i).
    cum = np.cumsum(w)
    row_start = subs.kw_ptr[:-1]
    before_row = np.where(row_start > 0, cum[np.maximum(row_start - 1, 0)], 0.0)
    wsum = (cum[subs.kw_ptr[1:] - 1] - before_row) if w.size else np.zeros(n)
    suffix = wsum[row] - (cum - w - before_row[row])
    tub = np.minimum(suffix / wsum[row] + TEXT_BOUND_INFLATION, 1.0 + TEXT_BOUND_INFLATION)
    dnub = distance_upper_bound(alpha, tau_e[row], tub, dmax_m)
    in_lap = dnub >= 0.0
    wild = tsim_limit(subs.alpha, tau_e) <= 0.0
    wild_rows = np.flatnonzero(wild)
    wild_dnub = distance_upper_bound(subs.alpha[wild_rows], tau_e[wild_rows],
                                     np.zeros(wild_rows.size), dmax_m)
    dn_limit = distance_limit(subs.alpha, tau_e, dmax_m)
    return LocationAwarePrefixes(
        row=row[in_lap], term=term[in_lap].astype(np.int32), dnub=dnub[in_lap],
        tub=tub[in_lap], wildcard_rows=wild_rows, wildcard_dnub=wild_dnub,
        dn_limit=np.where(dn_limit >= 0.0, dn_limit, -1.0),
    )
