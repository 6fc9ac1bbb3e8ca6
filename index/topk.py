"""The static side of the top-k sliding-window index: subscriptions per cell, the cells'
alpha ranges, which cells hold each keyword and, per (keyword, cell), which rows.

The dynamic side (each subscription's result buffer and its threshold, the window of
messages, the per-cell order by threshold) lives with the matcher,
:class:`roadpubsub.pruning.topk.TopkIndexMatcher`. For a message m and a cell ci, a subscription s
of ci that shares no keyword with m has TSIM = 0 exactly, so its score is at most

    UB0(ci, m) = max over alpha in {alpha_min(ci), alpha_max(ci)} of
                 alpha * (1 - dNmin(ci, m) / Dmax)

(SIM is linear in alpha); those that share one are found through the postings of the
(keyword, cell) pairs of m's keywords and checked one by one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from roadpubsub.index.kinds import TopkSubscriptions
from roadpubsub.index.postings import group_by_term_cell
from roadpubsub.index.spatial import PointFacts, SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.lengths import check_dmax

__all__ = ["DEFAULT_BUFFER_EXTRA", "TopkIndex", "buffer_capacity"]

IntArray = npt.NDArray[np.int64]

#: Default number of buffer entries kept beyond k (see :func:`buffer_capacity`).
DEFAULT_BUFFER_EXTRA = 4


def buffer_capacity(k: IntArray, window: int, extra: int = DEFAULT_BUFFER_EXTRA
                    ) -> tuple[IntArray, IntArray]:
    """(C, slots) per subscription: C = min(k, W) + ``extra`` entries are kept beyond which
    the lowest scores are dropped (:func:`roadpubsub.pruning.topk_buffers.offer`), in
    max(C_max, 2 min(k, W)) + 2 slots, C_max = min(k, W) + max(extra, 3 min(k, W)).

    A k-skyband holds at most k messages of one score (of equal scores the newer
    dominates), so dropping the lowest score group while more than k stay never needs more
    than max(C, 2k - 1) + 1 entries, plus the one being inserted. A top-k never holds more
    than W messages, hence min(k, W). A larger C means fewer re-evaluations of the window
    when top-k members expire, a smaller one a higher threshold theta: fewer offers and
    shorter verification searches. C grows by k at each re-evaluation of the subscription
    (:func:`roadpubsub.pruning.topk_buffers.expire`), up to C_max: the slots allow for it.
    """
    kk = np.minimum(np.asarray(k, dtype=np.int64), int(window))
    cap = kk + int(extra)
    return cap, np.maximum(kk + np.maximum(int(extra), 3 * kk), 2 * kk) + 2


@dataclass(frozen=True, eq=False)
class TopkIndex:
    """Top-k subscriptions filed by cell (see the module docstring).

    Attributes
    ----------
    spatial, subs, weights, dmax_m, window
        Cells and bounds, the subscriptions, their vocabulary, Dmax (metres), W.
    facts
        Position, cell, border distances and chain-graph point of each subscription.
    cell_ptr, cell_row
        Rows of cell c: ``cell_row[cell_ptr[c]:cell_ptr[c + 1]]``.
    cell_min_alpha, cell_max_alpha
        alpha range of each cell's subscriptions (+inf/-inf for an empty cell).
    term_ptr, term_cell
        Cells holding a subscription with term t: ``term_cell[term_ptr[t]:term_ptr[t+1]]``.
    pair_ptr, pair_row
        Postings of each (term, cell) pair g of ``term_cell``: the rows of that cell holding
        that term, ``pair_row[pair_ptr[g]:pair_ptr[g + 1]]`` (ascending).
    buf_ptr, buf_cap
        Result buffer of row s: slots ``buf_ptr[s]:buf_ptr[s + 1]``, of which it keeps
        ``buf_cap[s]`` before dropping low scores (:func:`buffer_capacity`).
    """

    spatial: SpatialIndex
    subs: TopkSubscriptions
    weights: TermWeights
    dmax_m: float
    window: int
    facts: PointFacts
    cell_ptr: IntArray
    cell_row: IntArray
    cell_min_alpha: npt.NDArray[np.float64]
    cell_max_alpha: npt.NDArray[np.float64]
    term_ptr: IntArray
    term_cell: npt.NDArray[np.int32]
    pair_ptr: IntArray
    pair_row: IntArray
    buf_ptr: IntArray
    buf_cap: IntArray

    def __len__(self) -> int:
        return len(self.subs)

    @classmethod
    def build(cls, spatial: SpatialIndex, subs: TopkSubscriptions, weights: TermWeights, *,
              dmax_m: float, window: int,
              buffer_extra: int = DEFAULT_BUFFER_EXTRA) -> TopkIndex:
        """File the subscriptions by cell and keyword.

        Raises
        ------
        InputError
            W < 1, or keyword ids outside the vocabulary.
        """
        dmax = check_dmax(dmax_m)
        if int(window) != window or window < 1:
            msg = f"window must be a whole number of messages >= 1, got {window!r}"
            raise InputError(msg)
        n_terms = len(weights)
        if subs.kw_terms.size and int(subs.kw_terms.max()) >= n_terms:
            msg = "top-k subscriptions hold keyword ids outside the weights' vocabulary"
            raise InputError(msg)
        facts = spatial.facts(subs.points)
        n_cells = spatial.cells.n_cells
        cell = facts.cell.astype(np.int64)
        cell_row = np.argsort(cell, kind="stable").astype(np.int64)
        cell_ptr = np.zeros(n_cells + 1, dtype=np.int64)
        np.cumsum(np.bincount(cell, minlength=n_cells), out=cell_ptr[1:])
        amin = np.full(n_cells, np.inf)
        amax = np.full(n_cells, -np.inf)
        np.minimum.at(amin, cell, subs.alpha)
        np.maximum.at(amax, cell, subs.alpha)
        row_of_kw = np.repeat(np.arange(len(subs)), np.diff(subs.kw_ptr))
        pairs = group_by_term_cell(subs.kw_terms, cell[row_of_kw], n_terms,
                                   within=(row_of_kw,))
        if int(buffer_extra) != buffer_extra or buffer_extra < 0:
            msg = f"buffer_extra must be a whole number >= 0, got {buffer_extra!r}"
            raise InputError(msg)
        buf_cap, slots = buffer_capacity(subs.k, int(window), int(buffer_extra))
        buf_ptr = np.zeros(len(subs) + 1, dtype=np.int64)
        np.cumsum(slots, out=buf_ptr[1:])
        return cls(spatial=spatial, subs=subs, weights=weights, dmax_m=dmax,
                   window=int(window), facts=facts, cell_ptr=cell_ptr, cell_row=cell_row,
                   cell_min_alpha=amin, cell_max_alpha=amax, term_ptr=pairs.term_ptr,
                   term_cell=pairs.cell, pair_ptr=pairs.start,
                   pair_row=row_of_kw[pairs.order].astype(np.int64), buf_ptr=buf_ptr,
                   buf_cap=buf_cap)
