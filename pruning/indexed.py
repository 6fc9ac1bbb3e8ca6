"""Prune-then-verify matchers over the basic (BIAB) and enhanced (EIAB) architectures.

For each message: Algorithm 1 (:mod:`pruning.algorithm1`) over the index's postings, the
same distance/prefix tests over the index's small delta of recent subscriptions, then
Algorithm 2 (:mod:`pruning.algorithm2`) and the one scoring implementation
(:mod:`pruning.similarity`). Results equal the reference matcher's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from index.base import SubscriptionIndex
from index.bia import BasicIndex
from index.eia import EnhancedIndex
from index.model import Messages, Subscriptions
from index.spatial import PointFacts
from pruning.algorithm1 import COUNTER_NAMES, bia_candidates, eia_candidates
from pruning.algorithm2 import verify_distances
from pruning.deliveries import Deliveries
from pruning.similarity import delivered, spatio_textual_similarity, text_similarity
from roadnet.distance import NodeSearch
from roadnet.locations import EdgePoints
from roadpubsub.settings import DEFAULTS

__all__ = ["STAT_NAMES", "IndexMatcher", "MatchStats"]

#: Per-message statistics: the pruning counters, then verification figures.
STAT_NAMES = (*COUNTER_NAMES, "deliveries", "vertices_settled")


@dataclass(frozen=True, eq=False)
class MatchStats:
    """Per-message counters: ``values[i, j]`` is statistic ``names[j]`` of message i."""

    message_id: npt.NDArray[np.int64]
    values: npt.NDArray[np.int64]
    names: tuple[str, ...] = STAT_NAMES

    def column(self, name: str) -> npt.NDArray[np.int64]:
        """One statistic for every message."""
        return self.values[:, self.names.index(name)]

    def totals(self) -> dict[str, int]:
        """Each statistic summed over the messages."""
        return {n: int(v) for n, v in zip(self.names, self.values.sum(axis=0), strict=True)}


class IndexMatcher:
    """Matches messages against a :class:`BasicIndex` or an :class:`EnhancedIndex`.

    Parameters
    ----------
    index
        The subscription index (it may change between calls to :meth:`match`).
    slack_abs, slack_rel
        Rounding slack of the bound comparisons (metres and fraction).
    """

    def __init__(
        self,
        index: SubscriptionIndex,
        *,
        slack_abs: float = DEFAULTS.bound_slack_m,
        slack_rel: float = DEFAULTS.bound_slack_rel,
    ) -> None:
        if not isinstance(index, EnhancedIndex | BasicIndex):
            msg = f"IndexMatcher needs an EnhancedIndex or a BasicIndex, got {type(index)}"
            raise TypeError(msg)
        self.index = index
        self.slack_abs = float(slack_abs)
        self.slack_rel = float(slack_rel)
        self._search = NodeSearch(index.network, reverse=True)
        bounds = index.spatial.bounds
        # Columns of the (subscription cell, message cell) tables, contiguous per message cell.
        self._D_t = np.ascontiguousarray(bounds.D.T)
        self._eta_t = np.ascontiguousarray(bounds.eta_minus.T)
        n_cells = index.spatial.cells.n_cells
        self._cell_lb = np.empty(n_cells)
        self._cell_state = np.empty(n_cells, dtype=np.int8)
        self._cell_tsum = np.empty(n_cells)
        self._edge_tsum = np.empty(index.network.n_edges)
        self._edge_stamp = np.zeros(index.network.n_edges, dtype=np.int64)
        self._stamp = 0
        self._workspace_for: int = -1

    def _ensure_workspace(self) -> None:
        n = len(self.index.subs)
        if self._workspace_for != id(self.index.subs):
            self._mark = np.zeros(n, dtype=np.int64)
            self._cand = np.empty(n, dtype=np.int32)
            self._cand_dnub = np.empty(n)
            self._workspace_for = id(self.index.subs)

    def match(
        self,
        messages: Messages,
        *,
        progress: Callable[[int], None] | None = None,
    ) -> tuple[Deliveries, MatchStats]:
        """Deliveries of a batch of messages, with per-message statistics."""
        index = self.index
        self._ensure_workspace()
        mfacts = index.spatial.facts(messages.points)
        stats = np.zeros((len(messages), len(STAT_NAMES)), dtype=np.int64)
        parts: list[Deliveries] = []
        for i in range(len(messages)):
            parts.append(self._match_one(messages, i, mfacts, stats[i]))
            if progress is not None:
                progress(1)
        return Deliveries.concat(parts), MatchStats(messages.ids.copy(), stats)

    # ------------------------------------------------------------------ one message
    def _match_one(self, messages: Messages, i: int, f: PointFacts,
                   counters: npt.NDArray[np.int64]) -> Deliveries:
        index = self.index
        m_cell = int(f.cell[i])
        m_x = float(f.x[i])
        m_y = float(f.y[i])
        m_din = float(f.din_in[i])
        terms = messages.keywords(i)
        term_slots = np.concatenate([[0], terms.astype(np.int64) + 1])
        self._stamp += 1
        n = self._prune(m_cell, m_x, m_y, m_din, term_slots, counters)
        slots = self._cand[:n].astype(np.int64)
        if isinstance(index, EnhancedIndex):
            limits = self._cand_dnub[slots]
        else:
            limits = np.full(n, index.dmax_m)
        d_rows, d_limit = self._delta_candidates(m_cell, m_x, m_y, m_din, terms)
        counters[7] += d_rows.size
        if n + d_rows.size == 0:
            return Deliveries.empty()
        limit = max(float(limits.max()) if n else -np.inf,
                    float(d_limit.max()) if d_rows.size else -np.inf)
        limit = min(limit + self.slack_abs + self.slack_rel * limit, index.dmax_m)
        points = EdgePoints(np.concatenate([index.subs.points.edge[slots],
                                            index.delta.points.edge[d_rows]]),
                            np.concatenate([index.subs.points.offset[slots],
                                            index.delta.points.offset[d_rows]]))
        message = messages.points[np.array([i])]
        dist, settled = verify_distances(self._search, message, points, limit_m=limit)
        counters[-1] = settled
        found = [self._score(index.subs, slots, dist[:n], messages.ids[i], terms),
                 self._score(index.delta, d_rows, dist[n:], messages.ids[i], terms)]
        out = Deliveries.concat(found)
        counters[-2] = len(out)
        return out

    def _prune(self, m_cell: int, m_x: float, m_y: float, m_din: float,
               term_slots: npt.NDArray[np.int64], counters: npt.NDArray[np.int64]) -> int:
        index = self.index
        sp = index.spatial
        lay = index.layout
        common = (m_cell, m_x, m_y, m_din, term_slots, sp.bounds.kappa,
                  self._D_t[m_cell], self._eta_t[m_cell], sp.cells.bbox)
        edge_stats = (sp.edge_bbox, sp.edge_din_out, index.edge_min_alpha,
                      index.edge_max_alpha, index.edge_min_tau_e,
                      lay.term_ptr, lay.grp_cell, lay.grp_value, lay.grp_start, lay.eg_edge,
                      lay.eg_value, lay.eg_start, lay.post_slot)
        if isinstance(index, EnhancedIndex):
            return int(eia_candidates(
                *common, index.cell_dn_limit, *edge_stats, lay.post_value,
                index.facts.x, index.facts.y, index.facts.din_out, index.active,
                index.dmax_m, self.slack_abs, self.slack_rel,
                self._cell_lb, self._cell_state, self._mark, self._stamp,
                self._cand, self._cand_dnub, counters))
        assert isinstance(index, BasicIndex)
        return int(bia_candidates(
            *common, index.cell_min_alpha, index.cell_max_alpha, index.cell_min_tau_e,
            *edge_stats, index.active, index.dmax_m, self.slack_abs, self.slack_rel,
            self._cell_lb, self._cell_state, self._cell_tsum, self._edge_tsum,
            self._edge_stamp, self._mark, self._stamp, self._cand, counters))

    def _delta_candidates(self, m_cell: int, m_x: float, m_y: float, m_din: float,
                          terms: npt.NDArray[np.int32]
                          ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """Recent subscriptions that pass Lemma 1 (distance) and Lemma 3 (shared keyword)."""
        index = self.index
        delta = index.delta
        if len(delta) == 0:
            return np.empty(0, dtype=np.int64), np.empty(0)
        f = index.delta_facts
        bounds = index.spatial.bounds
        de = np.hypot(f.x - m_x, f.y - m_y)
        other = f.cell != m_cell
        lb = np.where(other, np.maximum(bounds.eta_minus[f.cell, m_cell] * de,
                                        f.din_out + bounds.D[f.cell, m_cell] + m_din),
                      bounds.kappa * de)
        limit = index.delta_dn_limit
        near = lb <= limit + self.slack_abs + self.slack_rel * np.abs(limit)
        shares = np.add.reduceat(np.isin(delta.kw_terms, terms).astype(np.int64),
                                 delta.kw_ptr[:-1]) > 0
        rows = np.flatnonzero(near & (shares | index.delta_wildcard))
        return rows, limit[rows]

    def _score(self, subs: Subscriptions, rows: npt.NDArray[np.int64],
               dist: npt.NDArray[np.float64], message_id: int,
               terms: npt.NDArray[np.int32]) -> Deliveries:
        if rows.size == 0:
            return Deliveries.empty()
        index = self.index
        tsim = text_similarity(subs, rows, terms, index.weights.weights)
        alpha = subs.alpha[rows]
        score = spatio_textual_similarity(alpha, dist, index.dmax_m, tsim)
        ok = delivered(score, subs.tau[rows], dist, index.dmax_m, tolerance=index.tolerance)
        return Deliveries(np.full(int(ok.sum()), message_id, dtype=np.int64),
                          subs.ids[rows[ok]], dist[ok], score[ok])
