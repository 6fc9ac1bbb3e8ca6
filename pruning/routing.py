"""Routing messages to subscription partitions by cell-level pruning (paper Lemma 2).

When subscriptions are split by cell into partitions (e.g. Spark tasks, each with its own
:class:`~roadpubsub.index.eia.EnhancedIndex`), a message needs to visit only the partitions holding
a cell that survives Lemma 2 for it: dNmin(ci, m) <= DNlimit(ci), with dNmin the cell lower
bound of :func:`roadpubsub.pruning.algorithm1.cell_lower_bounds` and DNlimit(ci) the largest
DNlimit (Eq. 7, :func:`roadpubsub.index.limits.distance_limit`) of the cell's subscriptions. The
test, its slack and the treatment of cells whose subscriptions nothing can reach are those
of :func:`roadpubsub.pruning.algorithm1.eia_candidates`, so a partition skipped here is one whose
index would have pruned every cell for that message: routing never loses a delivery.

Partitions are contiguous runs of cells in the cells' Z-order (:func:`partition_cells`),
so a partition covers a compact area and most messages reach few of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from roadpubsub.index.limits import distance_limit, effective_tau
from roadpubsub.index.model import Subscriptions
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.pruning.algorithm1 import cell_lower_bounds
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.settings import DEFAULTS

__all__ = ["CellRouter", "cell_distance_limits", "partition_cells"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def cell_distance_limits(
    spatial: SpatialIndex,
    subs: Subscriptions,
    *,
    dmax_m: float,
    tolerance: float = DEFAULTS.score_tolerance,
) -> FloatArray:
    """DNlimit(ci) per cell in metres: the largest DNlimit(s) of its subscriptions.

    As in :class:`~roadpubsub.index.eia.EnhancedIndex`: -inf for a cell without subscriptions and -1
    for one whose subscriptions no message can reach (both are never visited).
    """
    limit = distance_limit(subs.alpha, effective_tau(subs.tau, tolerance=tolerance), dmax_m)
    limit = np.where(limit >= 0.0, limit, -1.0)
    out = np.full(spatial.cells.n_cells, -np.inf)
    np.maximum.at(out, spatial.cells.edge_cell[subs.points.edge].astype(np.int64), limit)
    return out


def partition_cells(cell_load: npt.ArrayLike, n_partitions: int) -> IntArray:
    """Split cells into ``n_partitions`` contiguous runs of about equal load.

    Parameters
    ----------
    cell_load
        Work per cell (e.g. its number of subscriptions), in cell order.
    n_partitions
        Number of partitions (>= 1); fewer are used when there are fewer loaded cells.

    Returns
    -------
    Partition of each cell (0 .. n_partitions - 1, non-decreasing).
    """
    if n_partitions < 1:
        msg = f"n_partitions must be >= 1, got {n_partitions}"
        raise InputError(msg)
    load = np.asarray(cell_load, dtype=np.float64)
    total = float(load.sum())
    if total <= 0:
        return np.zeros(load.size, dtype=np.int64)
    # A cell goes to the partition where its load's midpoint falls.
    mid = np.cumsum(load) - 0.5 * load
    part = np.floor(mid / total * n_partitions).astype(np.int64)
    return np.clip(part, 0, n_partitions - 1)


@dataclass(frozen=True, eq=False)
class CellRouter:
    """Which partitions of subscriptions a message must visit.

    Attributes
    ----------
    spatial
        Cells and bounds (the same as every partition's index uses).
    cell_part
        Partition of each cell.
    cell_dn_limit
        DNlimit(ci) per cell, metres (:func:`cell_distance_limits` over all subscriptions).
    slack_abs, slack_rel
        Rounding slack of the bound comparison (as in the matchers).
    """

    spatial: SpatialIndex
    cell_part: IntArray
    cell_dn_limit: FloatArray
    slack_abs: float = DEFAULTS.bound_slack_m
    slack_rel: float = DEFAULTS.bound_slack_rel

    @property
    def n_partitions(self) -> int:
        """Number of partitions (one more than the largest partition id)."""
        return int(self.cell_part.max(initial=-1)) + 1

    def route(self, points: EdgePoints) -> tuple[IntArray, IntArray]:
        """(message row, partition) pairs for messages at ``points``.

        A message visits a partition iff one of its cells holds subscriptions someone can
        reach (DNlimit >= 0) and has dNmin(ci, m) <= DNlimit(ci) up to the slack.
        Pairs are sorted by message row, then partition.
        """
        sp = self.spatial
        bounds = sp.bounds
        facts = sp.facts(points)
        D_t = np.ascontiguousarray(bounds.D.T)
        eta_t = np.ascontiguousarray(bounds.eta_minus.T)
        lim = self.cell_dn_limit
        live = lim >= 0.0
        # The comparison of algorithm1._keep, evaluated for the cells that hold someone.
        finite = np.where(live, lim, 0.0)
        threshold = finite + self.slack_abs + self.slack_rel * np.abs(finite)
        n_parts = max(self.n_partitions, 1)
        lb = np.empty(sp.cells.n_cells)
        rows: list[IntArray] = []
        parts: list[IntArray] = []
        for i in range(len(points)):
            c = int(facts.cell[i])
            cell_lower_bounds(c, float(facts.x[i]), float(facts.y[i]), float(facts.din_in[i]),
                              bounds.kappa, D_t[c], eta_t[c], sp.cells.bbox, lb)
            keep = live & (lb <= threshold)
            hit = np.flatnonzero(np.bincount(self.cell_part[keep], minlength=n_parts))
            rows.append(np.full(hit.size, i, dtype=np.int64))
            parts.append(hit.astype(np.int64))
        if not rows:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        return np.concatenate(rows), np.concatenate(parts)
