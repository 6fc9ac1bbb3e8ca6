"""Subscriptions located on a route or an area: the reference matchers' side (issue 32).

A subscription's location may be a set of road-segment pieces
(:class:`~roadpubsub.roadnet.segment_sets.SegmentSet`: a route or an area) instead of a point. Its
distance to a message is dN(S, m), the shortest-path distance from the nearest point of
the set to m (0 on it; from the set to m on a directed network, as for a point
subscription); everything else is unchanged: threshold subscriptions score SIM with that
distance, boolean ones compare it with their radius.

The reference matchers (:class:`~roadpubsub.pruning.brute.BruteMatcher`,
:class:`~roadpubsub.pruning.kinds_reference.BooleanBruteMatcher`) take such locations as
:class:`SetLocations`: which subscription rows have a set, and the sets. Per message they
run their one reverse search from the message as for points; every piece on an edge it
reached (or on the message's own edge) is finished at its ends and by the direct run
(:func:`~roadpubsub.roadnet.segment_sets.piece_distances_to_target`), and a subscription takes the
minimum over its pieces. The point a set row carries in its batch is not used.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from roadpubsub.pruning.edge_rows import EdgeRows
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.segment_sets import SegmentSet, SegmentSets, piece_distances_to_target

__all__ = ["SetLocations", "SetReach"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class SetLocations:
    """Which subscription rows are located on a segment set, and the sets.

    Attributes
    ----------
    rows
        Row positions in the subscription batch (not ids), unique, one per set.
    sets
        Row ``rows[i]``'s location is ``sets`` set i.
    """

    rows: IntArray
    sets: SegmentSets

    def __post_init__(self) -> None:
        rows = np.asarray(self.rows)
        if rows.ndim != 1 or rows.size != len(self.sets):
            msg = (f"set locations: rows must list one subscription row per set, got "
                   f"{rows.size} rows for {len(self.sets)} sets")
            raise InputError(msg)
        if np.unique(rows).size != rows.size:
            msg = "set locations: a subscription row is given two sets"
            raise InputError(msg)
        object.__setattr__(self, "rows", rows.astype(np.int64))

    def __len__(self) -> int:
        return int(self.rows.size)

    @classmethod
    def of(cls, rows: npt.ArrayLike, sets: list[SegmentSet]) -> SetLocations:
        """From row positions and one :class:`~roadpubsub.roadnet.segment_sets.SegmentSet` each."""
        return cls(np.asarray(rows, dtype=np.int64), SegmentSets.of_sets(sets))

    def check_rows(self, n_subscriptions: int) -> None:
        """Raise unless every row lies in a batch of ``n_subscriptions``."""
        bad = (self.rows < 0) | (self.rows >= n_subscriptions)
        if bad.any():
            msg = (f"set locations: row {int(self.rows[bad][0])} is not a row of the "
                   f"{n_subscriptions} subscriptions")
            raise InputError(msg)


class SetReach:
    """The set-located rows within a limit of one message, with their exact dN.

    Parameters
    ----------
    network
        The network the sets lie on.
    locations
        The set-located rows.
    n_subscriptions
        Rows in the subscription batch (to check ``locations`` and mark its rows).
    """

    def __init__(self, network: RoadNetwork, locations: SetLocations, *,
                 n_subscriptions: int) -> None:
        locations.check_rows(n_subscriptions)
        self.network, self.locations = network, locations
        sets = locations.sets
        self._owner_row = locations.rows[sets.owner]
        #: Per subscription row: whether its location is a set (its point is not used).
        self.is_set_row = np.zeros(n_subscriptions, dtype=bool)
        self.is_set_row[locations.rows] = True
        # The reference's candidate rule, over the pieces.
        self._lookup = EdgeRows(network, sets.edge)

    def reach(self, dist: FloatArray, touched: IntArray, point: EdgePoints, limit: float
              ) -> tuple[IntArray, FloatArray]:
        """(rows, dN) of the set rows within ``limit`` of the message at ``point``.

        ``dist``/``touched``: a finished reverse search from the message, seeded with its
        entry costs and bounded by ``limit`` (the reference matchers' search).
        """
        sets = self.locations.sets
        pieces = self._lookup.near(dist, touched, int(point.edge[0]))
        if pieces.size == 0:
            return np.empty(0, np.int64), np.empty(0)
        d = piece_distances_to_target(self.network, dist, point, sets.edge[pieces],
                                      sets.start[pieces], sets.end[pieces], limit=limit)
        rows = self._owner_row[pieces]
        order = np.lexsort((d, rows))
        rows, d = rows[order], d[order]
        first = np.r_[True, rows[1:] != rows[:-1]]
        rows, d = rows[first], d[first]  # each row's smallest distance
        near = d <= limit
        return rows[near], d[near]
