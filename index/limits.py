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

from roadpubsub.index.model import Subscriptions
from roadpubsub.roadnet.settings import DEFAULTS

__all__ = [
    "DNUB_NUMERATOR_SLACK",
    "SIMILARITY_SLACK",
    "TEXT_BOUND_INFLATION",
    "LocationAwarePrefixes",
    "distance_limit",
    "distance_upper_bound",
    "distance_upper_bound_kernel",
    "effective_tau",
    "limit_and_wildcard",
    "location_aware_prefixes",
    "row_suffix_sums",
    "subscription_limits",
    "text_bound_allowance",
    "tsim_limit",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Added to every textual upper bound (TUB), on top of the per-row rounding allowance of
#: :func:`text_bound_allowance`, so that summing the same weights in another order (the
#: verifier sums in term-id order) can never make a bound fall short of TSIM.
TEXT_BOUND_INFLATION = 1e-12

#: Added to a region's SIM upper bound before it is compared with the smallest tau_e
#: there (Algorithm 1, lines 14-17, and BIA's cell and edge tests). The bound is a few
#: rounded operations on values in [0, 1] (each off by at most 2^-53), so 1e-12 covers its
#: rounding by three orders of magnitude and a region is never pruned for an ulp.
SIMILARITY_SLACK = 1e-12

#: Unit roundoff of float64 (2^-53).
_U = 2.0**-53

#: Absolute widening of the DNUB numerator (Eq. 13), 2^-48. The delivery rule evaluates
#: SIM = a(1 - d/Dmax) + (1 - a) TSIM with 6 rounded operations and DNUB's numerator
#: tau_e - (1 - a) TUB with 3 more (tau_e itself is the same float on both sides). Every
#: operand lies in [0, 2], so each rounding is at most 2^-52 in absolute value: at most
#: 9 * 2^-52 in all. Turning the numerator into a distance (1 - x / a, then * Dmax) adds at
#: most 3 roundings of values in [0, 1] (3 * 2^-53 after dividing by a <= 1, which only
#: scales the numerator's allowance up). 2^-48 = 16 * 2^-52 covers both, so a pair whose
#: rounded SIM reaches tau_e never lies beyond its rounded DNUB.
DNUB_NUMERATOR_SLACK = 2.0**-48


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
        # Widened by DNUB_NUMERATOR_SLACK (its comment has the rounding argument). Written
        # as a test on the numerator's sign so that no subnormal alpha makes inf - inf.
        num = tau_e - (1.0 - alpha) * tub - DNUB_NUMERATOR_SLACK
        frac = 1.0 if num <= 0.0 else 1.0 - num / alpha
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


@numba.njit(cache=True, nogil=True, inline="always")
def limit_and_wildcard(alpha: float, tau_e: float,
                       dmax_m: float) -> tuple[float, bool]:  # pragma: no cover - compiled
    """DNlimit(s) of one subscription (Eq. 7, metres; -1 where no message can reach it)
    and whether LAP(s) holds the wildcard (TSIMlimit <= 0, Eq. 8), scalar: what
    :func:`lap_kernel` writes per row."""
    lim = -np.inf if alpha >= 1.0 else (tau_e - alpha) / (1.0 - alpha)
    d = distance_upper_bound_kernel(alpha, tau_e, 1.0 + TEXT_BOUND_INFLATION, dmax_m)
    return (d if d >= 0.0 else -1.0), lim <= 0.0


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _subscription_limits_kernel(alpha: FloatArray, tau: FloatArray, tolerance: float,
                                dmax_m: float, dn_limit: FloatArray,
                                wildcard: npt.NDArray[np.bool_]
                                ) -> None:  # pragma: no cover - compiled
    for r in range(alpha.size):
        dn_limit[r], wildcard[r] = limit_and_wildcard(alpha[r], tau[r] - tolerance, dmax_m)


def subscription_limits(
    alpha: FloatArray, tau: FloatArray, *, dmax_m: float,
    tolerance: float = DEFAULTS.score_tolerance,
) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
    """DNlimit(s) (Eq. 7, metres, -1 where nothing can reach s) and the wildcard flag of
    LAP(s) (TSIMlimit(s) <= 0, Eq. 8) of each subscription.

    The ``dn_limit`` and ``wildcard_rows`` of :func:`location_aware_prefixes`, bit for
    bit, without its postings: they depend on alpha and tau only, and a moved
    subscription needs nothing else.

    Examples
    --------
    >>> import numpy as np
    >>> limit, wildcard = subscription_limits(np.array([1.0, 0.5]), np.array([0.5, 0.9]),
    ...                                       dmax_m=1000.0, tolerance=0.0)
    >>> limit.round(6).tolist(), wildcard.tolist()
    ([500.0, 200.0], [True, False])
    """
    a = np.ascontiguousarray(alpha, dtype=np.float64)
    t = np.ascontiguousarray(tau, dtype=np.float64)
    dn_limit = np.empty(a.size)
    wildcard = np.empty(a.size, dtype=np.bool_)
    _subscription_limits_kernel(a, t, float(tolerance), float(dmax_m), dn_limit, wildcard)
    return dn_limit, wildcard


def text_bound_allowance(n_keywords: IntArray) -> FloatArray:
    """Per-row absolute allowance added to TUB(s|t): TEXT_BOUND_INFLATION + (8k + 8) u.

    Why it suffices, for a row of k keywords with positive weights: a float sum of at most
    k positive terms, in any order, is within gamma_k = k u / (1 - k u) of the exact sum
    (relative). TSIM = fl(common / total) and TUB = fl(suffix / wsum) are each a quotient of
    two such sums (the verifier's in term-id order, ours in weight order), and in exact
    arithmetic common <= suffix (the shared keywords are among the suffix that starts at
    the first shared one) and total = wsum. So fl(TSIM) <= fl(TUB) (1 + gamma_k)^4
    (1 + u)^2 <= fl(TUB) + (4 gamma_k + 3u) as both lie in [0, 1] (to first order; the
    doubled constant, 8k + 8, covers the higher-order terms for any k < 2^40). The bound
    does not depend on the weights' magnitudes, because every sum is taken per row.
    """
    k = np.asarray(n_keywords, dtype=np.float64)
    return np.asarray(TEXT_BOUND_INFLATION + (8.0 * k + 8.0) * _U, dtype=np.float64)


@numba.njit(cache=True, nogil=True)
def _row_suffix_sums(ptr: IntArray, w: FloatArray, out: FloatArray) -> None:  # pragma: no cover
    for r in range(ptr.size - 1):
        acc = 0.0
        for i in range(ptr[r + 1] - 1, ptr[r] - 1, -1):
            acc += w[i]
            out[i] = acc


def row_suffix_sums(ptr: IntArray, w: FloatArray) -> FloatArray:
    """Within each CSR row, ``out[i] = w[i] + w[i + 1] + ... + w[row end - 1]``.

    Each row is summed on its own, from its last entry back, so a row's sums carry only
    that row's rounding (at most gamma_k relative for k entries), whatever the other rows
    hold. (A difference of one running sum over all rows, as before, carried the rounding
    of the whole running total: 1e16 in an earlier row wiped out a later row's weights.)
    """
    out = np.empty(np.asarray(w).size, dtype=np.float64)
    _row_suffix_sums(np.asarray(ptr, dtype=np.int64), np.asarray(w, dtype=np.float64), out)
    return out


@numba.njit(cache=True, nogil=True, error_model="numpy")
def lap_kernel(kw_ptr: IntArray, kw_terms: npt.NDArray[np.int32], alpha: FloatArray,
               tau: FloatArray, weights: FloatArray, term_rank: IntArray, dmax_m: float,
               tolerance: float):  # type: ignore[no-untyped-def]  # pragma: no cover
    """The arrays of :func:`roadpubsub.index.limits.location_aware_prefixes`, row by row.

    Per row: keywords in rank order (weight descending), suffix sums from the row's last
    keyword back (as ``row_suffix_sums``), TUB = min(suffix / wsum + allowance,
    1 + allowance) with allowance = TEXT_BOUND_INFLATION + (8k + 8) u, DNUB by the shared
    scalar kernel; the same float operations in the same order as the vectorised code.
    Returns (row, term, dnub, tub, wildcard_rows, wildcard_dnub, dn_limit).
    """
    n = alpha.size
    longest = 0
    for r in range(n):
        longest = max(longest, kw_ptr[r + 1] - kw_ptr[r])
    order = np.empty(longest, dtype=np.int64)
    suffix = np.empty(longest, dtype=np.float64)
    # Pass 1 counts; pass 2 (fill=True) writes. No per-keyword array is kept between them.
    count = 0
    n_wild = 0
    row_o = np.empty(0, dtype=np.int64)
    term_o = np.empty(0, dtype=np.int32)
    dnub_o = np.empty(0, dtype=np.float64)
    tub_o = np.empty(0, dtype=np.float64)
    wild_o = np.empty(0, dtype=np.int64)
    wdnub_o = np.empty(0, dtype=np.float64)
    dn_limit = np.empty(n, dtype=np.float64)
    for fill in (False, True):
        if fill:
            row_o = np.empty(count, dtype=np.int64)
            term_o = np.empty(count, dtype=np.int32)
            dnub_o = np.empty(count, dtype=np.float64)
            tub_o = np.empty(count, dtype=np.float64)
            wild_o = np.empty(n_wild, dtype=np.int64)
            wdnub_o = np.empty(n_wild, dtype=np.float64)
        k_out = 0
        k_wild = 0
        for r in range(n):
            a = kw_ptr[r]
            k = kw_ptr[r + 1] - a
            # Insertion sort of the row's keywords by rank (ranks are unique).
            for i in range(k):
                j = i
                while j > 0 and term_rank[kw_terms[a + order[j - 1]]] > term_rank[kw_terms[a + i]]:
                    order[j] = order[j - 1]
                    j -= 1
                order[j] = i
            acc = 0.0
            for i in range(k - 1, -1, -1):
                acc += weights[kw_terms[a + order[i]]]
                suffix[i] = acc
            wsum = suffix[0] if k > 0 else 0.0
            allowance = TEXT_BOUND_INFLATION + (8.0 * float(k) + 8.0) * _U
            tau_e = tau[r] - tolerance
            al = alpha[r]
            for i in range(k):
                tub = min(suffix[i] / wsum + allowance, 1.0 + allowance)
                dnub = distance_upper_bound_kernel(al, tau_e, tub, dmax_m)
                if dnub >= 0.0:
                    if fill:
                        row_o[k_out] = r
                        term_o[k_out] = kw_terms[a + order[i]]
                        dnub_o[k_out] = dnub
                        tub_o[k_out] = tub
                    k_out += 1
            limit, wild = limit_and_wildcard(al, tau_e, dmax_m)
            if wild:
                if fill:
                    wild_o[k_wild] = r
                    wdnub_o[k_wild] = distance_upper_bound_kernel(al, tau_e, 0.0, dmax_m)
                k_wild += 1
            if fill:
                dn_limit[r] = limit
        count = k_out
        n_wild = k_wild
    return row_o, term_o, dnub_o, tub_o, wild_o, wdnub_o, dn_limit



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
    # One compiled pass per row (lap_kernel): the same operations as the vectorised form
    # kept in _location_aware_prefixes_vectorised, without its per-keyword temporaries
    # (26 million keywords at 10M subscriptions).
    row, term, dnub, tub, wild_rows, wild_dnub, dn_limit = lap_kernel(
        np.ascontiguousarray(subs.kw_ptr, dtype=np.int64),
        np.ascontiguousarray(subs.kw_terms, dtype=np.int32),
        np.ascontiguousarray(subs.alpha, dtype=np.float64),
        np.ascontiguousarray(subs.tau, dtype=np.float64),
        np.ascontiguousarray(weights, dtype=np.float64),
        np.ascontiguousarray(term_rank, dtype=np.int64), float(dmax_m), float(tolerance))
    return LocationAwarePrefixes(row=row, term=term, dnub=dnub, tub=tub,
                                 wildcard_rows=wild_rows, wildcard_dnub=wild_dnub,
                                 dn_limit=dn_limit)


def _location_aware_prefixes_vectorised(
    subs: Subscriptions,
    weights: FloatArray,
    term_rank: IntArray,
    *,
    dmax_m: float,
    tolerance: float = DEFAULTS.score_tolerance,
) -> LocationAwarePrefixes:
    """:func:`location_aware_prefixes` in numpy operations (the tests' reference)."""
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
    # wsum(s_i) per row, summed within the row (see row_suffix_sums); wsum(s) = wsum(s_1).
    suffix = row_suffix_sums(subs.kw_ptr, w)
    wsum = suffix[subs.kw_ptr[:-1]] if w.size else np.zeros(n)
    allowance = text_bound_allowance(lengths)[row]
    tub = np.minimum(suffix / wsum[row] + allowance, 1.0 + allowance)
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
