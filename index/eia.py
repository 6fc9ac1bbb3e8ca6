"""The enhanced indexing architecture, EIA (paper Sec. V-D, Fig. 3).

On top of the shared slots and cells it keeps, per cell, DNlimit(ci) (the largest
DNlimit of its subscriptions, Lemma 2), and a sub inverted file over the location-aware
prefixes only: IL(ci|t) for each t in LAP(ci), holding <s, DNUB(s|t)> grouped by edge and
sorted by DNUB descending, with DNUB(ci|t) (Eq. 15) per list and the edge statistics of
Fig. 3(b) (min/max alpha, min tau).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from roadpubsub.index.base import SubscriptionIndex
from roadpubsub.index.limits import effective_tau, location_aware_prefixes
from roadpubsub.index.postings import build_posting_layout, edge_groups_by_value

__all__ = ["EnhancedIndex"]


class EnhancedIndex(SubscriptionIndex):
    """EIA: location-aware prefixes with DNUB postings (see :class:`SubscriptionIndex`)."""

    kind: ClassVar[str] = "eia"

    def _build_structures(self) -> None:
        lap = location_aware_prefixes(self.subs, self.weights.weights, self.term_rank,
                                      dmax_m=self.dmax_m, tolerance=self.tolerance)
        # Slots and term slots fit int32 (slots are int32 in the layout already); each
        # part of the prefixes is dropped once copied, so that at 10M subscriptions the
        # build holds one copy of the postings, not three.
        n_wild = lap.wildcard_rows.size
        slot = np.empty(lap.row.size + n_wild, dtype=np.int32)
        slot[:lap.row.size] = lap.row
        slot[lap.row.size:] = lap.wildcard_rows
        term_slot = np.zeros(slot.size, dtype=np.int32)
        np.add(lap.term, 1, out=term_slot[:lap.row.size])
        value = np.concatenate([lap.dnub, lap.wildcard_dnub])
        dn_limit = lap.dn_limit
        del lap
        self.layout = build_posting_layout(
            post_slot=slot, post_term_slot=term_slot, post_value=value,
            slot_cell=self.facts.cell, slot_edge=self.subs.points.edge,
            n_term_slots=len(self.weights) + 1, edges_by_value=True,
        )
        del slot, term_slot, value
        # DNlimit(ci) = max over s in ci of DNlimit(s) (Lemma 2); -inf for empty cells.
        self.cell_dn_limit = np.full(self.spatial.cells.n_cells, -np.inf)
        np.maximum.at(self.cell_dn_limit, self.facts.cell, dn_limit)
        self._edge_statistics(effective_tau(self.subs.tau, tolerance=self.tolerance))

    def _restore_cell_statistics(self, arrays: dict[str, npt.NDArray[Any]]) -> None:
        self.cell_dn_limit = arrays["cell_dn_limit"]

    def _restore_structures(self, arrays: dict[str, npt.NDArray[Any]]) -> None:
        super()._restore_structures(arrays)
        # Files saved before the edge groups were ordered by DNUB hold them in edge order,
        # where the early stop of Algorithm 1 would lose candidates: rebuild those.
        if not edge_groups_by_value(self.layout):
            self._build_structures()

    def structure_arrays(self) -> dict[str, npt.NDArray[np.generic]]:
        """Postings, DNlimit per cell and the edge statistics."""
        return {**super().structure_arrays(), "cell_dn_limit": self.cell_dn_limit}

