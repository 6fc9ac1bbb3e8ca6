"""The basic indexing architecture, BIA (paper Sec. IV, Fig. 2).

Components (d) and (e) on top of the shared slots and cells: per cell, the maximum weight
of each term and the minimum tau (the subscription mapping component); per cell an
inverted file over *all* keywords, posting lists grouped by edge with per-edge maxwt and
min tau. Weights are stored normalised, w(t) / wsum(s), so that their sum over a
message's terms bounds TSIM from above.

The paper's BIA has no answer for subscriptions with tau <= alpha, which a message sharing
no keyword can still reach; they are kept in a wildcard list (term slot 0, weight 0) so
that BIA, too, is exact.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from roadpubsub.index.base import SubscriptionIndex
from roadpubsub.index.limits import effective_tau
from roadpubsub.index.postings import build_posting_layout

__all__ = ["BasicIndex"]


class BasicIndex(SubscriptionIndex):
    """BIA: all keywords, normalised maximum weights (see :class:`SubscriptionIndex`)."""

    kind: ClassVar[str] = "bia"

    def _build_structures(self) -> None:
        subs = self.subs
        n = len(subs)
        w = self.weights.weights
        # int32 slots and term slots, each temporary dropped once used (10M subscriptions
        # hold 26M keywords: every keyword-sized int64 array is 200 MB).
        k = subs.kw_terms.size
        row = np.repeat(np.arange(n, dtype=np.int32), np.diff(subs.kw_ptr))
        term_w = w[subs.kw_terms]
        wsum = np.add.reduceat(term_w, subs.kw_ptr[:-1]) if term_w.size else np.zeros(n)
        tau_e = effective_tau(subs.tau, tolerance=self.tolerance)
        spatial_only = np.flatnonzero(tau_e <= subs.alpha)
        value = np.zeros(k + spatial_only.size)
        np.divide(term_w, wsum[row], out=value[:k])
        del term_w, wsum
        slot = np.concatenate([row, spatial_only.astype(np.int32)])
        del row
        term_slot = np.zeros(slot.size, dtype=np.int32)
        np.add(subs.kw_terms, 1, out=term_slot[:k])
        self.layout = build_posting_layout(
            post_slot=slot, post_term_slot=term_slot, post_value=value,
            slot_cell=self.facts.cell, slot_edge=subs.points.edge,
            n_term_slots=len(self.weights) + 1,
        )
        del slot, term_slot, value
        c = self.spatial.cells.n_cells
        self.cell_min_alpha = np.full(c, np.inf)
        self.cell_max_alpha = np.full(c, -np.inf)
        self.cell_min_tau_e = np.full(c, np.inf)
        np.minimum.at(self.cell_min_alpha, self.facts.cell, subs.alpha)
        np.maximum.at(self.cell_max_alpha, self.facts.cell, subs.alpha)
        np.minimum.at(self.cell_min_tau_e, self.facts.cell, tau_e)
        self._edge_statistics(tau_e)

    def _restore_cell_statistics(self, arrays: dict[str, npt.NDArray[Any]]) -> None:
        self.cell_min_alpha = arrays["cell_min_alpha"]
        self.cell_max_alpha = arrays["cell_max_alpha"]
        self.cell_min_tau_e = arrays["cell_min_tau_e"]

    def structure_arrays(self) -> dict[str, npt.NDArray[np.generic]]:
        """Postings and the cell and edge statistics."""
        return {**super().structure_arrays(), "cell_min_alpha": self.cell_min_alpha,
                "cell_max_alpha": self.cell_max_alpha, "cell_min_tau_e": self.cell_min_tau_e}

