"""Top-k sliding-window subscriptions: the index's events against the reference's, and the
reference's results against the definition recomputed from scratch after every message."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import random_points, scenarios

from index.kinds import TopkSubscriptions
from index.model import Messages, Subscriptions
from index.spatial import SpatialIndex
from index.terms import TermWeights
from pruning.brute import match_brute
from pruning.kinds_reference import TopkBruteMatcher
from pruning.similarity import spatio_textual_similarity, text_similarity
from pruning.topk import TopkIndexMatcher
from pruning.topk_events import TopkEvents
from roadnet.locations import EdgePoints
from roadnet.network import RoadNetwork


def stream(network: RoadNetwork, subs: Subscriptions, weights: TermWeights,
           rng: np.random.Generator, n: int) -> Messages:
    """Messages often on a subscription's edge, and often repeating an earlier message's
    place and keywords (equal scores: ties the newer must win)."""
    pts = random_points(rng, network, n)
    edge, off = pts.edge.copy(), pts.offset.copy()
    vocab = weights.terms
    kws = [list(rng.choice(vocab, rng.integers(0, 5), replace=False)) for _ in range(n)]
    for i in range(n):
        u = rng.random()
        if u < 0.3:
            r = rng.integers(0, len(subs))
            edge[i] = subs.points.edge[r]
            off[i] = network.edge_length[edge[i]] * rng.random()
        elif u < 0.5 and i > 0:
            j = rng.integers(0, i)
            edge[i], off[i], kws[i] = edge[j], off[j], kws[j]
    return Messages.from_rows(ids=rng.permutation(10 * n)[:n] + 500, points=EdgePoints.of(
        edge, off), keywords=kws, weights=weights)


def as_topk(subs: Subscriptions, rng: np.random.Generator, ks: tuple[int, ...]
            ) -> TopkSubscriptions:
    return TopkSubscriptions(subs.ids, subs.points, subs.alpha,
                             rng.choice(ks, len(subs)).astype(np.int64), subs.kw_ptr,
                             subs.kw_terms)


def from_scratch(network: RoadNetwork, subs: TopkSubscriptions, messages: Messages,
                 weights: TermWeights, dmax: float, window: int) -> list[dict[int, list[int]]]:
    """Every subscription's top-k after each message, by sorting the window every time."""
    loose = Subscriptions(subs.ids, subs.points, np.ones(len(subs)), np.full(len(subs), 1e-9),
                          subs.kw_ptr, subs.kw_terms)
    pairs = match_brute(network, loose, messages, weights, dmax_m=dmax)
    seq_of = {int(m): i for i, m in enumerate(messages.ids)}
    row_of = {int(s): r for r, s in enumerate(subs.ids)}
    scored: dict[int, list[tuple[float, int]]] = {}
    for mid, sid, d in zip(pairs.message_id, pairs.subscription_id, pairs.distance,
                           strict=True):
        r, i = row_of[int(sid)], seq_of[int(mid)]
        tsim = text_similarity(loose, np.array([r]), messages.keywords(i), weights.weights)
        score = spatio_textual_similarity(subs.alpha[r:r + 1], np.array([d]), dmax, tsim)
        scored.setdefault(r, []).append((float(score[0]), i))
    states = []
    for t in range(len(messages)):
        state = {}
        for r, entries in scored.items():
            live = sorted((e for e in entries if t - window < e[1] <= t), reverse=True)
            top = [int(messages.ids[i]) for _, i in live[:int(subs.k[r])]]
            if top:
                state[int(subs.ids[r])] = top
        states.append(state)
    return states


def replay(events: TopkEvents, n: int) -> list[dict[int, list[int]]]:
    out = []
    for t in range(n):
        upto = events.seq <= t
        part = TopkEvents(*(getattr(events, f)[upto] for f in (
            "seq", "phase", "event", "message_id", "subscription_id", "rank", "score",
            "distance")))
        out.append({s: top for s, top in part.results().items() if top})
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.integers(0, 2**32 - 1), st.sampled_from([1, 2, 3, 5, 40]),
       st.integers(1, 40), st.booleans())
def test_index_equals_reference_on_random_graphs(scenario, seed, window, n_msgs, split):
    network, subs, _, weights, dmax, capacity = scenario
    rng = np.random.default_rng(seed)
    tsubs = as_topk(subs, rng, (1, 2, 3, 50))  # 50: k larger than the window
    messages = stream(network, subs, weights, rng, n_msgs)
    ref = TopkBruteMatcher(network, tsubs, weights, dmax_m=dmax, window=window)
    want = ref.push(messages)
    idx = TopkIndexMatcher(network, tsubs, weights, dmax_m=dmax, window=window,
                           spatial=SpatialIndex.build(network, capacity=capacity),
                           resort_every=int(rng.integers(1, 6)))
    if split:  # the stream in several calls gives the same events
        cut = int(rng.integers(0, n_msgs + 1))
        got = TopkEvents.concat([idx.push(messages.take(np.arange(cut))),
                                 idx.push(messages.take(np.arange(cut, n_msgs)))])
    else:
        got = idx.push(messages)
    assert got.rows() == want.rows()
    assert replay(want, n_msgs) == from_scratch(network, tsubs, messages, weights, dmax,
                                                window)


@pytest.mark.parametrize(("net", "window", "k"), [("andorra", 30, 3), ("rome", 200, 5),
                                                  ("rome", 7, 10)])
def test_index_equals_reference_on_real_networks(net, window, k, request,
                                                 make_region_workload) -> None:
    network = request.getfixturevalue(net)
    rng = np.random.default_rng(3)
    subs, messages, weights, _ = make_region_workload(network, rng, n_subs=1500,
                                                      n_messages=400, radius_m=3000)
    tsubs = TopkSubscriptions(subs.ids, subs.points, subs.alpha,
                              np.full(len(subs), k, np.int64), subs.kw_ptr, subs.kw_terms)
    dmax = 1500.0
    want = TopkBruteMatcher(network, tsubs, weights, dmax_m=dmax, window=window).push(messages)
    idx = TopkIndexMatcher(network, tsubs, weights, dmax_m=dmax, window=window)
    got = idx.push(messages)
    assert len(want) > 500
    assert (want.phase == 0).any()  # expiries happened
    assert got.rows() == want.rows()
    if k < window <= 100:  # buffers ran dry and were refilled from the window
        assert idx.stats["reevaluations"] > 0
