"""The reference matcher: exact, simple, and the definition of a correct answer.

For each message m, one bounded reverse Dijkstra from m's location gives every node's
network distance *to* m (at most Dmax). A subscription s can be within Dmax of m only if
it lies on m's own edge or on an edge with a reached end node, so exactly those
subscriptions are looked up (per-edge CSR of subscription rows), their distances dN(s, m)
completed with their exit costs or the direct run along m's edge
(:func:`roadpubsub.roadnet.distance.point_distances_to_target`), and the ones within Dmax scored by
:mod:`roadpubsub.pruning.similarity`. m is delivered to s iff dN(s, m) <= Dmax and
SIM(s, m) >= s.tau - tolerance.

No pruning by text or by bounds happens here: every subscription within Dmax is scored.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from roadpubsub.index.model import Messages, Subscriptions
from roadpubsub.index.terms import TermWeights
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.edge_rows import EdgeRows
from roadpubsub.pruning.set_locations import SetLocations, SetReach
from roadpubsub.pruning.similarity import delivered, spatio_textual_similarity, text_similarity
from roadpubsub.roadnet.distance import NodeSearch, entry_costs, point_distances_to_target
from roadpubsub.roadnet.lengths import check_dmax
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork

__all__ = ["BruteMatcher", "MatchCounters", "match_brute"]

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class MatchCounters:
    """Work done per message by the last :meth:`BruteMatcher.match` call.

    Attributes
    ----------
    message_id
        The messages, in input order.
    candidates
        Subscriptions scored (those within Dmax of the message).
    deliveries
        Subscriptions the message was delivered to.
    settled
        Nodes settled by the message's Dijkstra search.
    """

    message_id: IntArray
    candidates: IntArray
    deliveries: IntArray
    settled: IntArray


class BruteMatcher:
    """Exact matcher of messages against a fixed batch of subscriptions.

    Parameters
    ----------
    network
        The road network (its ``directed`` flag decides whether one-way roads count).
    subs
        The subscriptions; their keyword ids refer to ``weights``.
    weights
        Keyword weights w(t).
    dmax_m
        Dmax, the largest tolerated network distance, in metres (> 0).
    set_locations
        Rows located on a route or an area instead of their point (issue 32; see
        :mod:`roadpubsub.pruning.set_locations`).
    """

    name = "brute"

    def __init__(self, network: RoadNetwork, subs: Subscriptions, weights: TermWeights, *,
                 dmax_m: float, set_locations: SetLocations | None = None) -> None:
        self.dmax_m = check_dmax(dmax_m)
        self.network = network
        self.subs = subs
        self.weights = weights
        self._rows = EdgeRows(network, subs.points.edge)
        self._search = NodeSearch(network, reverse=True)
        self.counters: MatchCounters | None = None
        self._sets = (None if set_locations is None
                      else SetReach(network, set_locations, n_subscriptions=len(subs)))

    def match(self, messages: Messages) -> Deliveries:
        """Deliveries of every message, sorted by (message_id, subscription_id).

        Per-message work is recorded in :attr:`counters`.
        """
        n = len(messages)
        w = self.weights.weights
        subs = self.subs
        dmax = self.dmax_m
        parts: list[Deliveries] = []
        cand = np.zeros(n, dtype=np.int64)
        deliv = np.zeros(n, dtype=np.int64)
        settled = np.zeros(n, dtype=np.int64)
        for i in range(n):
            point = EdgePoints(messages.points.edge[i:i + 1], messages.points.offset[i:i + 1])
            a, ca, b, cb = entry_costs(self.network, point)
            seeds = np.r_[a, b]
            costs = np.r_[ca, cb]
            ok = np.isfinite(costs)
            res = self._search.run(seeds[ok], costs[ok], limit=dmax)
            settled[i] = res.n_settled
            rows = self._rows.near(res.dist, res.touched, int(point.edge[0]))
            dist = point_distances_to_target(self.network, res.dist, point, subs.points[rows],
                                             limit=dmax)
            near = np.isfinite(dist)
            rows, dist = rows[near], dist[near]
            if self._sets is not None:
                keep = ~self._sets.is_set_row[rows]
                set_rows, set_dist = self._sets.reach(res.dist, res.touched, point, dmax)
                rows, dist = np.r_[rows[keep], set_rows], np.r_[dist[keep], set_dist]
            cand[i] = rows.size
            if rows.size == 0:
                continue
            tsim = text_similarity(subs, rows, messages.keywords(i), w)
            score = spatio_textual_similarity(subs.alpha[rows], dist, dmax, tsim)
            hit = delivered(score, subs.tau[rows], dist, dmax)
            deliv[i] = int(hit.sum())
            if deliv[i]:
                parts.append(Deliveries(np.full(deliv[i], messages.ids[i], dtype=np.int64),
                                        subs.ids[rows[hit]], dist[hit], score[hit]))
        self.counters = MatchCounters(messages.ids.copy(), cand, deliv, settled)
        return Deliveries.concat(parts)


def match_brute(network: RoadNetwork, subs: Subscriptions, messages: Messages,
                weights: TermWeights, *, dmax_m: float) -> Deliveries:
    """Match ``messages`` against ``subs`` exactly (see :class:`BruteMatcher`).

    Parameters
    ----------
    network
        The road network; distances run from each subscription to each message (one-way
        roads count when ``network.directed``).
    subs, messages
        Keyword ids of both refer to ``weights``.
    weights
        Keyword weights w(t).
    dmax_m
        Dmax in metres (> 0).

    Returns
    -------
    Deliveries
        Sorted by (message_id, subscription_id), with distances in metres and SIM scores.
    """
    return BruteMatcher(network, subs, weights, dmax_m=dmax_m).match(messages)
