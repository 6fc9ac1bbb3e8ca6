"""The static side of the top-k sliding-window index: subscriptions per cell, the cells'
alpha ranges and which cells hold each keyword.

The dynamic side (each subscription's result buffer and its threshold, the window of
messages, the per-cell order by threshold) lives with the matcher,
:class:`pruning.topk.TopkIndexMatcher`. For a message m and a cell ci, the score of any
subscription s of ci is at most

    UB(ci, m) = max over alpha in {alpha_min(ci), alpha_max(ci)} of
                alpha * (1 - dNmin(ci, m) / Dmax) + (1 - alpha) * T(ci, m)

(SIM is linear in alpha), where T(ci, m) = 1 when some subscription of ci shares a
keyword with m and 0 otherwise (then TSIM = 0 exactly: no shared weight is summed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from index.kinds import TopkSubscriptions
from index.spatial import PointFacts, SpatialIndex
from index.terms import TermWeights
from roadnet.errors import InputError
from roadnet.lengths import check_dmax

__all__ = ["TopkIndex", "buffer_capacity"]

IntArray = npt.NDArray[np.int64]


def buffer_capacity(k: IntArray, window: int) -> IntArray:
    """Result-buffer slots per subscription: 2 min(k, W) + 3.

    The buffer keeps at most C = 2 min(k, W) + 2 entries; the one spare slot takes the
    entry being inserted before a full buffer drops its lowest score. A k-skyband holds at
    most k messages of one score (of equal scores the newer dominates), so a buffer of
    more than 2k entries can always drop its lowest score and keep more than k: the top-k
    is never cut (see :mod:`pruning.topk_buffers`). A top-k never holds more than W
    messages, hence min(k, W).
    """
    return 2 * np.minimum(np.asarray(k, dtype=np.int64), int(window)) + 3


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
    buf_ptr
        Result buffer of row s: slots ``buf_ptr[s]:buf_ptr[s + 1]`` (:func:`buffer_capacity`).
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
    buf_ptr: IntArray

    def __len__(self) -> int:
        return len(self.subs)

    @classmethod
    def build(cls, spatial: SpatialIndex, subs: TopkSubscriptions, weights: TermWeights, *,
              dmax_m: float, window: int) -> TopkIndex:
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
        pair = np.unique(subs.kw_terms.astype(np.int64) * n_cells + cell[row_of_kw])
        term_ptr = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(np.bincount(pair // n_cells, minlength=n_terms), out=term_ptr[1:])
        buf_ptr = np.zeros(len(subs) + 1, dtype=np.int64)
        np.cumsum(buffer_capacity(subs.k, int(window)), out=buf_ptr[1:])
        return cls(spatial=spatial, subs=subs, weights=weights, dmax_m=dmax,
                   window=int(window), facts=facts, cell_ptr=cell_ptr, cell_row=cell_row,
                   cell_min_alpha=amin, cell_max_alpha=amax, term_ptr=term_ptr,
                   term_cell=(pair % n_cells).astype(np.int32), buf_ptr=buf_ptr)
