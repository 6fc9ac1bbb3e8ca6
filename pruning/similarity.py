"""The spatio-textual similarity SIM(s, m) (paper Defs. 4-6, Eqs. 1-2): one implementation.

Every matcher scores its final candidates here, on the canonical keyword rows of
:class:`~index.model.Subscriptions`, so equal inputs give bit-identical scores.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from index.model import Subscriptions
from roadpubsub.settings import DEFAULTS

__all__ = ["delivered", "keyword_weight_sums", "spatio_textual_similarity", "text_similarity"]

FloatArray = npt.NDArray[np.float64]


def keyword_weight_sums(subs: Subscriptions, weights: FloatArray) -> FloatArray:
    """wsum(s) = sum of w(t) over s's keywords (paper Eq. 10), per subscription."""
    w = weights[subs.kw_terms]
    sums = np.add.reduceat(w, subs.kw_ptr[:-1]) if w.size else np.zeros(len(subs))
    return np.asarray(sums, dtype=np.float64)


def text_similarity(
    subs: Subscriptions,
    rows: npt.NDArray[np.int64],
    message_terms: npt.NDArray[np.int32],
    weights: FloatArray,
) -> FloatArray:
    """TSIM(s, m) = sum of w(t) over s.psi & m.psi / sum of w(t) over s.psi (paper Eq. 2).

    Parameters
    ----------
    subs
        The subscription batch; ``rows`` selects the ones to score.
    message_terms
        The message's term ids (sorted, unique).
    weights
        w(t) per term id.

    Returns
    -------
    TSIM in [0, 1] for each selected row.
    """
    if rows.size == 0:
        return np.empty(0)
    starts = subs.kw_ptr[rows]
    lengths = subs.kw_ptr[rows + 1] - starts
    ptr = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=ptr[1:])
    flat = np.arange(ptr[-1]) + np.repeat(starts - ptr[:-1], lengths)
    terms = subs.kw_terms[flat]
    w = weights[terms]
    shared = np.where(np.isin(terms, message_terms, assume_unique=False), w, 0.0)
    total = np.add.reduceat(w, ptr[:-1])
    common = np.add.reduceat(shared, ptr[:-1])
    return np.asarray(common / total)


def spatio_textual_similarity(
    alpha: FloatArray, distance_m: FloatArray, dmax_m: float, tsim: FloatArray
) -> FloatArray:
    """SIM = alpha * (1 - dN / Dmax) + (1 - alpha) * TSIM (paper Eq. 1, SPRO of Def. 5).

    An unreachable subscription (dN = inf) scores -inf unless alpha = 0; either way the
    delivery rule rejects it, because dN > Dmax.
    """
    with np.errstate(invalid="ignore"):
        spatial = np.where(alpha > 0.0, alpha * (1.0 - distance_m / dmax_m), 0.0)
    return np.asarray(spatial + (1.0 - alpha) * tsim)


def delivered(
    score: FloatArray,
    tau: FloatArray,
    distance_m: FloatArray,
    dmax_m: float,
    *,
    tolerance: float = DEFAULTS.score_tolerance,
) -> npt.NDArray[np.bool_]:
    """The delivery rule: dN(s, m) <= Dmax and SIM(s, m) >= s.tau - tolerance."""
    return np.asarray((distance_m <= dmax_m) & (score >= tau - tolerance))
