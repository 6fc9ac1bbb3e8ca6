"""Indexed matching of subscriptions located on routes and areas (issue 32).

The set side of the matchers, beside the point indexes (it shares only their public
names: the cells and bounds of :class:`~roadpubsub.index.spatial.SpatialIndex`, the network's
reverse
adjacency and exit costs, the scores of :mod:`roadpubsub.pruning.similarity`).

Per message m:

1. **Candidates** (:func:`~roadpubsub.index.set_cells.set_candidates`): every set whose lower bound
   LB(S, m), the minimum over the set's cells of the point index's cell bound
   (:func:`~roadpubsub.pruning.algorithm1.cell_lower_bounds`), is within the limit (Dmax; for
   boolean subscriptions the largest radius), each once.
2. **Pruning** without a search: a threshold subscription is dropped when even at distance
   LB it would not be delivered (SIM falls as the distance grows, also in floating point,
   so the test with LB is an upper bound: :func:`~roadpubsub.pruning.similarity.delivered`); a
   boolean one when LB exceeds its radius or the message lacks one of its keywords.
3. **Verification**: one reverse search from m (:mod:`roadpubsub.pruning.set_search`) that stops as
   soon as every remaining candidate is decided: its best exit so far is below the next
   node's distance, or the next node lies beyond the candidate's own limit (its radius,
   or for a threshold one the distance beyond which SIM provably falls below tau:
   :func:`reach_limits`). The direct runs along m's own edge come from
   :func:`~roadpubsub.roadnet.segment_sets.piece_distances_to_target`. Each exit value is a node
   distance plus the exit cost the reference adds, so dN(S, m) is the reference's bit for
   bit, and so are the scores and the delivery rule (the kernels of
   :mod:`roadpubsub.pruning.similarity`): the result equals
   :class:`~roadpubsub.pruning.brute.BruteMatcher` and
   :class:`~roadpubsub.pruning.kinds_reference.BooleanBruteMatcher` with ``set_locations``.

A message with no candidate costs one pass over the occupied cells and no search.
:class:`PointsAndSets` joins a point matcher and a set matcher of one kind into one
``match(messages) -> Deliveries``; :func:`split_set_rows` splits a batch for it.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

import numba
import numpy as np
import numpy.typing as npt

from roadpubsub.index.kinds import BooleanSubscriptions
from roadpubsub.index.model import KeywordRows, Messages, Subscriptions
from roadpubsub.index.set_cells import CandidateWork, SetCellIndex, set_candidates
from roadpubsub.index.spatial import PointFacts, SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.pruning.algorithm1 import cell_lower_bounds
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.edge_rows import csr_gather
from roadpubsub.pruning.kinds_reference import holds_all_keywords
from roadpubsub.pruning.set_locations import SetLocations
from roadpubsub.pruning.set_search import (
    SetExits,
    SetSearchGraph,
    SetSearchWork,
    set_search_kernel,
)
from roadpubsub.pruning.similarity import delivered, spatio_textual_similarity, text_similarity
from roadpubsub.roadnet.distance import entry_costs, exit_costs
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.lengths import check_dmax
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.segment_sets import SegmentSets, piece_distances_to_target
from roadpubsub.roadnet.settings import DEFAULTS

__all__ = ["PointsAndSets", "SetBooleanMatcher", "SetThresholdMatcher", "SetVerifier",
           "reach_limits", "split_set_rows"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
Rows = TypeVar("Rows", bound=KeywordRows)


class _Matches(Protocol):
    def match(self, messages: Messages) -> Deliveries: ...


def split_set_rows(subs: Rows, locations: SetLocations) -> tuple[Rows, Rows, SegmentSets]:
    """(point rows, set rows, their sets in the same order) of a batch.

    Raises
    ------
    InputError
        A set row outside the batch.
    """
    locations.check_rows(len(subs))
    is_set = np.zeros(len(subs), dtype=bool)
    is_set[locations.rows] = True
    order = np.argsort(locations.rows, kind="stable")
    return (subs.take(np.flatnonzero(~is_set)), subs.take(locations.rows[order]),
            locations.sets.take(order))


class SetVerifier:
    """Candidates and exact distances of segment sets for one message at a time.

    Parameters
    ----------
    network
        The network the sets lie on.
    sets
        The sets (set i is the location of subscription row i of the caller's batch).
    spatial
        Cells and bounds of ``network`` (built when omitted).
    """

    def __init__(self, network: RoadNetwork, sets: SegmentSets, *,
                 spatial: SpatialIndex | None = None) -> None:
        self.network, self.sets = network, sets
        self.spatial = spatial or SpatialIndex.build(network)
        if self.spatial.cells.edge_cell.size != network.n_edges:
            msg = "the spatial index belongs to another network (edge counts differ)"
            raise InputError(msg)
        #: The sets filed by cell.
        self.index = SetCellIndex.build(self.spatial.cells, sets)
        self._post = self.index.postings()
        b = self.spatial.bounds
        # Column cm of D and eta_minus (from every cell to the message's), contiguous.
        self._D_t = np.ascontiguousarray(b.D.T)
        self._eta_t = np.ascontiguousarray(b.eta_minus.T)
        self._cell_lb = np.empty(self.spatial.cells.n_cells)
        self._work = CandidateWork.of(len(sets))
        rev = network.adjacency(reverse=True)
        self._graph = SetSearchGraph(rev.indptr, rev.indices, rev.weights)
        self._work_search = SetSearchWork.of(network.n_nodes, int(rev.indices.size))
        self._no_nodes = np.full(network.n_nodes, np.inf)  # direct runs only
        self._piece_ids = np.arange(sets.edge.size, dtype=np.int64)
        self._sizes = np.diff(sets.ptr)

    @property
    def nbytes(self) -> int:
        """Memory of the set index and the sets' pieces in bytes (not the shared cells)."""
        s = self.sets
        return self.index.nbytes + sum(int(a.nbytes) for a in (
            s.ptr, s.edge, s.start, s.end, self._piece_ids, self._sizes))
        # (the search workspaces, O(nodes + arcs), are per matcher, not per set)

    def message_facts(self, messages: Messages) -> PointFacts:
        """Cell, position and din_in of each message."""
        return self.spatial.facts(messages.points)

    def cell_bounds(self, facts: PointFacts, i: int) -> FloatArray:
        """dNmin(c, m) of every cell c for message i of ``facts`` (the point index's cell
        bound, :func:`~roadpubsub.pruning.algorithm1.cell_lower_bounds`; a view reused per call)."""
        c = int(facts.cell[i])
        cell_lower_bounds(c, float(facts.x[i]), float(facts.y[i]), float(facts.din_in[i]),
                          self.spatial.bounds.kappa, self._D_t[c], self._eta_t[c],
                          self.spatial.cells.bbox, self._cell_lb)
        return self._cell_lb

    def candidates(self, facts: PointFacts, i: int, limit: float
                   ) -> tuple[IntArray, FloatArray]:
        """(sets, lower bounds) of the sets whose LB is within ``limit`` of message i of
        ``facts`` (each once; bounds already lowered by the slack)."""
        k = set_candidates(self._post, self.cell_bounds(facts, i), float(limit), self._work)
        return self._work.sets[:k].copy(), self._work.bound[:k].copy()

    def distances(self, point: EdgePoints, cand: IntArray, limits: FloatArray
                  ) -> tuple[FloatArray, int]:
        """(dN from each candidate set to the message at ``point``, +inf where it exceeds
        the candidate's limit; nodes settled by the one search).

        One reverse search (:func:`~roadpubsub.pruning.set_search.set_search_kernel`) that stops
        once every candidate is decided; the direct runs along the message's own edge
        come from :func:`~roadpubsub.roadnet.segment_sets.piece_distances_to_target` with no node
        reached.
        """
        sets, net = self.sets, self.network
        k = cand.size
        pieces = csr_gather(sets.ptr, self._piece_ids, cand)
        e, a, b = sets.edge[pieces], sets.start[pieces], sets.end[pieces]
        owner = np.repeat(np.arange(k, dtype=np.int64), self._sizes[cand])
        # Both ends of every piece with both their exits: the reference's four values.
        v1, c1, u1, d1 = exit_costs(net, EdgePoints(e, b))
        v0, c0, u0, d0 = exit_costs(net, EdgePoints(e, a))
        node = np.r_[v1, u1, v0, u0]
        cost = np.r_[c1, d1, c0, d0]
        who = np.tile(owner, 4)
        ok = np.isfinite(cost)
        node, cost, who = node[ok], cost[ok], who[ok]
        order = np.argsort(node, kind="stable")
        limits = np.asarray(limits, dtype=np.float64)
        exits = SetExits(node[order].astype(np.int64), who[order], cost[order], limits)
        # The direct runs first: a message on a set decides it at once (0), before the
        # search, which then stops sooner.
        best = np.full(k, np.inf)
        on = e == point.edge[0]
        if on.any():
            run = piece_distances_to_target(net, self._no_nodes, point, e[on], a[on], b[on])
            np.minimum.at(best, owner[on], run)
        ua, ca, ub, cb = entry_costs(net, point)
        settled = set_search_kernel(self._graph, np.r_[ua, ub].astype(np.int64),
                                    np.r_[ca, cb], exits, best, self._work_search)
        best[best > limits] = np.inf
        return best, int(settled)


@numba.njit(cache=True, nogil=True)
def _holding_all(kw_ptr: IntArray, kw_terms: npt.NDArray[np.int32], rows: IntArray,
                 terms: npt.NDArray[np.int32], mark: IntArray,
                 out: npt.NDArray[np.bool_]) -> None:  # pragma: no cover - compiled
    """Whether the message (``terms``) holds every keyword of each row; ``mark`` (all 0)
    is restored."""
    for t in terms:
        mark[t] = 1
    for i in range(rows.size):
        out[i] = holds_all_keywords(kw_ptr, kw_terms, rows[i], mark, 1)
    for t in terms:
        mark[t] = 0


def reach_limits(alpha: FloatArray, tau: FloatArray, tsim: FloatArray, dmax: float,
                 tolerance: float) -> FloatArray:
    """Per threshold candidate, a distance beyond which it is provably not delivered.

    Solving SIM(d) = tau - tolerance for d gives the candidate; it is kept only where the
    delivery rule fails at the next float above it (SIM falls as d grows, also in floating
    point, so it fails at every larger d); elsewhere (alpha = 0, rounding) Dmax.
    """
    out = np.full(alpha.size, float(dmax))
    pos = alpha > 0
    if not pos.any():
        return out
    with np.errstate(divide="ignore", invalid="ignore"):
        d = dmax * (1.0 - (tau - tolerance - (1.0 - alpha) * tsim) / alpha)
    d = np.clip(np.where(np.isfinite(d), d, dmax), 0.0, dmax)
    beyond = np.nextafter(d, np.inf)
    fails = ~delivered(spatio_textual_similarity(alpha, beyond, dmax, tsim), tau, beyond,
                       dmax, tolerance=tolerance)
    keep = pos & fails
    out[keep] = d[keep]
    return out


def _stats() -> dict[str, int]:
    return {"messages": 0, "candidates": 0, "verified": 0, "searches": 0, "settled": 0}


class SetThresholdMatcher:
    """Threshold subscriptions located on segment sets, matched through the set index.

    Parameters
    ----------
    network, weights
        The road network and the vocabulary of ``subs``.
    subs
        The subscriptions (each row's point is not used).
    sets
        Row i's location is set i (``len(sets) == len(subs)``).
    dmax_m
        Dmax in metres.
    spatial
        Cells and bounds to share with the point indexes (built when omitted).
    tolerance
        The delivery rule's score tolerance (:func:`~roadpubsub.pruning.similarity.delivered`).

    Attributes
    ----------
    stats
        Work since the start: messages, candidates (sets within the bound), verified (left
        after the score bound), searches, settled nodes.
    """

    name = "sets"

    def __init__(self, network: RoadNetwork, subs: Subscriptions, sets: SegmentSets,
                 weights: TermWeights, *, dmax_m: float, spatial: SpatialIndex | None = None,
                 tolerance: float = DEFAULTS.score_tolerance) -> None:
        if len(sets) != len(subs):
            msg = f"one set per subscription is needed: {len(sets)} sets, {len(subs)} rows"
            raise InputError(msg)
        self.dmax_m = check_dmax(dmax_m)
        self.subs, self.weights, self.tolerance = subs, weights, float(tolerance)
        self.verifier = SetVerifier(network, sets, spatial=spatial)
        self.stats = _stats()

    def match(self, messages: Messages) -> Deliveries:
        """Deliveries sorted by (message_id, subscription_id)."""
        subs, dmax, w, st = self.subs, self.dmax_m, self.weights.weights, self.stats
        if len(subs) == 0 or len(messages) == 0:
            return Deliveries.empty()
        facts = self.verifier.message_facts(messages)
        parts: list[Deliveries] = []
        st["messages"] += len(messages)
        for i in range(len(messages)):
            cand, lb = self.verifier.candidates(facts, i, dmax)
            st["candidates"] += cand.size
            if cand.size == 0:
                continue
            tsim = text_similarity(subs, cand, messages.keywords(i), w)
            alpha, tau = subs.alpha[cand], subs.tau[cand]
            # The score at distance LB bounds every score the set can reach.
            keep = delivered(spatio_textual_similarity(alpha, lb, dmax, tsim), tau, lb, dmax,
                             tolerance=self.tolerance)
            if not keep.any():
                continue
            cand, tsim, alpha, tau = cand[keep], tsim[keep], alpha[keep], tau[keep]
            st["verified"] += cand.size
            st["searches"] += 1
            limits = reach_limits(alpha, tau, tsim, dmax, self.tolerance)
            d, settled = self.verifier.distances(messages.points[i:i + 1], cand, limits)
            st["settled"] += settled
            score = spatio_textual_similarity(alpha, d, dmax, tsim)
            hit = delivered(score, tau, d, dmax, tolerance=self.tolerance)
            if hit.any():
                k = int(hit.sum())
                parts.append(Deliveries(np.full(k, messages.ids[i], np.int64),
                                        subs.ids[cand[hit]], d[hit], score[hit]))
        return Deliveries.concat(parts)


class SetBooleanMatcher:
    """Boolean subscriptions located on segment sets, matched through the set index.

    Parameters as :class:`SetThresholdMatcher` (``subs`` boolean; every radius at most
    Dmax). Deliveries carry the distance and a score of 1.0.
    """

    name = "sets"

    def __init__(self, network: RoadNetwork, subs: BooleanSubscriptions, sets: SegmentSets,
                 weights: TermWeights, *, dmax_m: float,
                 spatial: SpatialIndex | None = None) -> None:
        if len(sets) != len(subs):
            msg = f"one set per subscription is needed: {len(sets)} sets, {len(subs)} rows"
            raise InputError(msg)
        self.dmax_m = check_dmax(dmax_m)
        if np.any(subs.radius > self.dmax_m):
            msg = f"boolean radii must be at most Dmax = {self.dmax_m:g} m"
            raise InputError(msg)
        self.subs, self.weights = subs, weights
        self.verifier = SetVerifier(network, sets, spatial=spatial)
        self._limit = float(subs.radius.max(initial=0.0))
        self._mark = np.zeros(len(weights) + 1, dtype=np.int64)
        self.stats = _stats()

    def match(self, messages: Messages) -> Deliveries:
        """Deliveries sorted by (message_id, subscription_id)."""
        subs, st, mark = self.subs, self.stats, self._mark
        if len(subs) == 0 or len(messages) == 0:
            return Deliveries.empty()
        facts = self.verifier.message_facts(messages)
        parts: list[Deliveries] = []
        st["messages"] += len(messages)
        for i in range(len(messages)):
            cand, lb = self.verifier.candidates(facts, i, self._limit)
            st["candidates"] += cand.size
            if cand.size == 0:
                continue
            cand = cand[lb <= subs.radius[cand]]
            terms = messages.keywords(i)
            terms = terms[(terms >= 0) & (terms < mark.size)]
            holds = np.empty(cand.size, dtype=bool)
            _holding_all(subs.kw_ptr, subs.kw_terms, cand, terms, mark, holds)
            cand = cand[holds]
            if cand.size == 0:
                continue
            st["verified"] += cand.size
            st["searches"] += 1
            radius = subs.radius[cand]
            d, settled = self.verifier.distances(messages.points[i:i + 1], cand, radius)
            st["settled"] += settled
            hit = d <= radius
            if hit.any():
                k = int(hit.sum())
                parts.append(Deliveries(np.full(k, messages.ids[i], np.int64),
                                        subs.ids[cand[hit]], d[hit], np.ones(k)))
        return Deliveries.concat(parts)


class PointsAndSets:
    """One kind's point matcher and set matcher as one: ``match`` joins their deliveries
    (sorted by message and subscription); ``stats`` is the point matcher's,
    ``set_stats`` the set matcher's counters.

    Parameters
    ----------
    points, sets
        Matchers with ``match(messages) -> Deliveries`` (None: no such rows).
    """

    def __init__(self, points: _Matches | None, sets: _Matches | None) -> None:
        self.points, self.sets = points, sets

    @property
    def stats(self) -> Any:
        """The point matcher's ``stats`` (None without one)."""
        return getattr(self.points, "stats", None)

    @property
    def set_stats(self) -> dict[str, int]:
        """The set matcher's counters (empty without one)."""
        return dict(getattr(self.sets, "stats", None) or {})

    def match(self, messages: Messages) -> Deliveries:
        """Deliveries of both, sorted by (message_id, subscription_id)."""
        parts = [m.match(messages) for m in (self.points, self.sets) if m is not None]
        parts = [p for p in parts if len(p)]
        return parts[0] if len(parts) == 1 else Deliveries.concat(parts)
