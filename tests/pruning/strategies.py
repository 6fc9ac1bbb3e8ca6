"""Shared Hypothesis strategies and checks of the matcher tests.

Inputs are drawn to break the matchers: tiny graphs with parallel edges, one-way streets,
zero-length and curved edges; points at edge ends; scores exactly at tau and pairs exactly
at Dmax; keyword weights over many orders of magnitude.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from roadpubsub.index.model import Messages, Subscriptions
from roadpubsub.index.terms import TermWeights
from roadpubsub.pruning.brute import match_brute
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork

__all__ = ["assert_same", "dmax_at_a_pair_distance", "random_points", "scenarios",
           "tiny_network", "with_borderline_taus"]


def assert_same(got: Deliveries, want: Deliveries) -> None:
    """Same (message, subscription) pairs, with bit-identical distances and scores.

    Lengths and offsets lie on the grid of :mod:`roadpubsub.roadnet.lengths`, so every matcher's
    sums are exact whatever order it adds in (well inside the issue's 1e-6 m).
    """
    assert got.pairs() == want.pairs()
    np.testing.assert_array_equal(got.message_id, want.message_id)
    np.testing.assert_array_equal(got.subscription_id, want.subscription_id)
    np.testing.assert_array_equal(got.distance, want.distance)
    np.testing.assert_array_equal(got.score, want.score)


def tiny_network(draw: st.DrawFn) -> RoadNetwork:
    """A random small road graph around (0.01 E, 0.01 N): nodes on a jittered grid."""
    n = draw(st.integers(3, 14))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    lon = 0.01 + rng.uniform(0, 0.02, n)
    lat = 0.01 + rng.uniform(0, 0.02, n)
    m = draw(st.integers(1, 3 * n))
    u = rng.integers(0, n, m)
    v = rng.integers(0, n, m)
    v = np.where(u == v, (v + 1) % n, v)
    # A few parallel edges and some lengths below the chord (kappa < 1 must stay safe).
    chord = np.hypot(lon[u] - lon[v], lat[u] - lat[v]) * 111_000
    length = chord * rng.choice([0.0, 0.6, 1.0, 1.3, 2.0], m, p=[0.05, 0.1, 0.45, 0.3, 0.1])
    oneway = rng.random(m) < 0.3
    return RoadNetwork.from_arrays(
        node_ids=np.arange(n) * 10 + 7, node_lon=lon, node_lat=lat,
        edge_u_ids=u * 10 + 7, edge_v_ids=v * 10 + 7, edge_length=length,
        edge_oneway=oneway, directed=draw(st.booleans()), name="tiny")


def random_points(rng: np.random.Generator, network: RoadNetwork, k: int) -> EdgePoints:
    e = rng.integers(0, network.n_edges, k)
    frac = rng.choice([0.0, 1.0, 0.5, -1.0], k, p=[0.1, 0.1, 0.1, 0.7])
    frac = np.where(frac < 0, rng.random(k), frac)
    return EdgePoints.of(e, frac * network.edge_length[e])


@st.composite
def scenarios(draw: st.DrawFn, *, weight_decades: tuple[float, float] | None = None
              ) -> tuple[RoadNetwork, Subscriptions, Messages, TermWeights, float, int]:
    """(network, subscriptions, messages, weights, Dmax, cell capacity).

    ``weight_decades=(lo, hi)`` draws each keyword weight log-uniformly from 10^lo to
    10^hi (and pins some to the ends); by default weights lie in [0.2, 3].
    """
    network = tiny_network(draw)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    vocab = [f"t{i}" for i in range(8)]
    if weight_decades is None:
        w = rng.uniform(0.2, 3, 8)
    else:
        lo, hi = weight_decades
        w = 10.0 ** rng.uniform(lo, hi, 8)
        w[rng.random(8) < 0.25] = 10.0**hi
        w[rng.random(8) < 0.25] = 10.0**lo
    weights = TermWeights({t: float(x) for t, x in zip(vocab, w, strict=True)})
    n_subs = draw(st.integers(1, 40))
    alpha = rng.choice([0.0, 1.0, 0.3, 0.5, 0.8], n_subs)
    tau = rng.choice([0.05, 0.3, 0.5, 0.7, 0.95, 1.0], n_subs)
    keywords = [list(rng.choice(vocab, rng.integers(1, 5), replace=False))
                for _ in range(n_subs)]
    subs = Subscriptions.from_rows(ids=rng.permutation(1000)[:n_subs],
                                   points=random_points(rng, network, n_subs),
                                   keywords=keywords, alpha=alpha, tau=tau, weights=weights)
    n_msgs = draw(st.integers(1, 6))
    # Messages often sit on a subscription's edge.
    mpoints = random_points(rng, network, n_msgs)
    same = rng.random(n_msgs) < 0.4
    pick = rng.integers(0, n_subs, n_msgs)
    medge = np.where(same, subs.points.edge[pick], mpoints.edge)
    moff = np.where(same, network.edge_length[medge] * rng.random(n_msgs), mpoints.offset)
    messages = Messages.from_rows(
        ids=np.arange(n_msgs), points=EdgePoints.of(medge, moff),
        keywords=[list(rng.choice(vocab, rng.integers(0, 6), replace=False))
                  for _ in range(n_msgs)], weights=weights)
    dmax = float(draw(st.sampled_from([50.0, 500.0, 3000.0])))
    capacity = draw(st.integers(1, 6))
    return network, subs, messages, weights, dmax, capacity


def with_borderline_taus(network: RoadNetwork, subs: Subscriptions, messages: Messages,
                         weights: TermWeights, dmax: float) -> Subscriptions:
    """Set some subscriptions' tau to exactly the score they reach with some message."""
    loose = Subscriptions(subs.ids, subs.points, subs.alpha, np.full(len(subs), 1e-6),
                          subs.kw_ptr, subs.kw_terms)
    ref = match_brute(network, loose, messages, weights, dmax_m=dmax)
    tau = subs.tau.copy()
    row_of = {int(i): r for r, i in enumerate(subs.ids)}
    for sid, score in zip(ref.subscription_id[::2], ref.score[::2], strict=True):
        if 0 < score <= 1:
            tau[row_of[int(sid)]] = score
    return Subscriptions(subs.ids, subs.points, subs.alpha, tau, subs.kw_ptr, subs.kw_terms)


def dmax_at_a_pair_distance(network: RoadNetwork, subs: Subscriptions, messages: Messages,
                            weights: TermWeights, dmax: float) -> float:
    """A Dmax equal to some pair's exact network distance (or ``dmax`` if none is > 0)."""
    loose = Subscriptions(subs.ids, subs.points, np.ones(len(subs)), np.full(len(subs), 1e-6),
                          subs.kw_ptr, subs.kw_terms)
    ref = match_brute(network, loose, messages, weights, dmax_m=dmax)
    positive = ref.distance[ref.distance > 0]
    return float(np.median(positive)) if positive.size else dmax
