"""The set matchers' keyword postings (issue 32: routes and areas must not multiply work).

A set is a candidate of a message only when it is filed under one of the message's
keywords or in an always list (:mod:`roadpubsub.index.set_cells`, the filing rules of
:mod:`roadpubsub.pruning.set_matchers`). These tests draw the keyword edge cases that rule
must survive, against the reference matchers with ``set_locations``: sets sharing no
keyword with the message yet deliverable (alpha >= tau), alpha in {0, 1}, tau exactly at
a score, at a score plus the tolerance and exactly at alpha, term weights from 1e-3 to
1e12 in one row, a keyword repeated in a message and in a subscription, boolean rows
whose keywords the message holds only in part.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import assert_same, random_points, tiny_network
from test_set_locations import VOCAB, distances, expected_threshold
from test_set_matchers import big_set, check_boolean

from roadpubsub.index.kinds import SubscriptionSet
from roadpubsub.index.model import Messages, Subscriptions
from roadpubsub.index.set_cells import SetCellIndex
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.pruning.brute import BruteMatcher
from roadpubsub.pruning.mixed import MixedMatcher
from roadpubsub.pruning.set_locations import SetLocations
from roadpubsub.pruning.set_matchers import PointsAndSets, SetThresholdMatcher
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.settings import DEFAULTS

PROPS = settings(max_examples=150, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
TOL = DEFAULTS.score_tolerance


def _csr(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(r) for r in rows])
    return ptr, np.array([t for r in rows for t in r], dtype=np.int32)


def _draw_terms(rng: np.random.Generator, pool: list[int], lo: int, hi: int) -> list[int]:
    """Sorted distinct terms of ``pool``, at times one of them twice (a repeated keyword)."""
    k = int(rng.integers(lo, min(hi, len(pool)) + 1))
    terms = sorted(int(t) for t in rng.choice(pool, k, replace=False))
    if terms and rng.random() < 0.25:
        terms.insert(int(rng.integers(0, len(terms) + 1)), int(rng.choice(terms)))
    return terms


@st.composite
def keyword_scenarios(draw: st.DrawFn) -> tuple:
    """(network, subs, sets, messages, weights, dmax, d): most rows on sets; messages and
    subscriptions drawn from overlapping or disjoint halves of the vocabulary, keywords
    repeated, weights over fifteen orders of magnitude, taus at the rule's edges."""
    network = tiny_network(draw)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = 10.0 ** rng.uniform(-3, 12, 6) if rng.random() < 0.6 else np.ones(6)
    weights = TermWeights({t: float(w) for t, w in zip(VOCAB, scale, strict=True)})
    ids = [int(i) for i in weights.ids(VOCAB, add=False)]
    low, high = ids[:3], ids[3:]
    n = int(rng.integers(1, 10))
    points = random_points(rng, network, n)
    set_rows = np.flatnonzero(rng.random(n) < 0.85)
    sets = {int(r): big_set(network, rng) for r in set_rows}
    n_msg = int(rng.integers(1, 7))
    mp = random_points(rng, network, n_msg)
    if sets:
        on = rng.random(n_msg) < 0.5
        pick = [sets[int(r)] for r in rng.choice(set_rows, n_msg)]
        k = [int(rng.integers(0, len(s))) for s in pick]
        e = np.array([s.edge[i] for s, i in zip(pick, k, strict=True)])
        o = np.array([s.start[i] + rng.choice([0.0, 1.0, rng.random()])
                      * (s.end[i] - s.start[i]) for s, i in zip(pick, k, strict=True)])
        mp = EdgePoints.of(np.where(on, e, mp.edge), np.where(on, o, mp.offset))
    pools = [low, high, ids]
    msg_terms = [_draw_terms(rng, pools[int(rng.integers(0, 3))], 0, 4) for _ in range(n_msg)]
    kw_ptr, kw_terms = _csr(msg_terms)
    messages = Messages(np.arange(n_msg, dtype=np.int64) + 100, mp, kw_ptr, kw_terms)
    sub_terms = [_draw_terms(rng, pools[int(rng.integers(0, 3))], 1, 4) for _ in range(n)]
    d = distances(network, points, sets, messages)
    sd = d[set_rows] if set_rows.size else np.empty(0)
    pos = sd[np.isfinite(sd) & (sd > 0)]
    dmax = (float(rng.choice(pos)) if pos.size
            else float(draw(st.sampled_from([50.0, 500.0]))))
    alpha = rng.choice([0.0, 1.0, 0.5, -1.0], n)
    alpha = np.where(alpha < 0, rng.random(n), alpha)
    s_ptr, s_terms = _csr(sub_terms)
    ids_ = rng.permutation(1000)[:n].astype(np.int64)
    loose = Subscriptions(ids_, points, alpha, np.full(n, 1e-12), s_ptr, s_terms)
    scores = expected_threshold(loose, messages, weights, d, dmax)
    row_of = {int(i): r for r, i in enumerate(ids_)}
    by_row: dict[int, list[float]] = {}
    for sid, score in zip(scores.subscription_id, scores.score, strict=True):
        by_row.setdefault(row_of[int(sid)], []).append(float(score))
    tau = np.empty(n)
    for r in range(n):
        got = by_row.get(r, [])
        pick = int(rng.integers(0, 6))
        if pick <= 1 and got:  # exactly at a score, or a tolerance above it
            tau[r] = float(rng.choice(got)) + (TOL if pick == 1 else 0.0)
        elif pick == 2:  # exactly alpha: TSIM 0 reaches it at distance 0 only
            tau[r] = alpha[r]
        elif pick == 3:  # below alpha: deliverable near the set with no keyword shared
            tau[r] = alpha[r] * rng.random()
        else:
            tau[r] = float(rng.choice([1e-6, 0.5, 0.9, 1.0, rng.random()]))
    tau = np.clip(tau, 1e-12, 1.0)  # tau lies in (0, 1]
    subs = Subscriptions(ids_, points, alpha, tau, s_ptr, s_terms)
    return network, subs, sets, messages, weights, dmax, d


def _locations(sets: dict) -> SetLocations:
    rows = sorted(sets)
    return SetLocations.of(rows, [sets[r] for r in rows])


@PROPS
@given(keyword_scenarios(), st.integers(1, 4))
def test_threshold_keyword_postings_equal_reference(scenario: tuple, capacity: int) -> None:
    network, subs, sets, messages, weights, dmax, d = scenario
    loc = _locations(sets)
    want = BruteMatcher(network, subs, weights, dmax_m=dmax, set_locations=loc).match(messages)
    # The reference itself against the pair-by-pair computation.
    assert_same(want, expected_threshold(subs, messages, weights, d, dmax))
    spatial = SpatialIndex.build(network, capacity=capacity)
    got = MixedMatcher.build(network, SubscriptionSet.only_threshold(subs), weights,
                             dmax_m=dmax, spatial=spatial, threshold_sets=loc
                             ).deliver(messages)
    assert_same(got, want)


@PROPS
@given(keyword_scenarios(), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_boolean_keyword_postings_equal_reference(scenario: tuple, capacity: int,
                                                  seed: int) -> None:
    check_boolean(scenario, capacity, seed, shares=(0.2, 0.3, 0.5))


def test_keywords_decide_the_candidates(andorra) -> None:  # type: ignore[no-untyped-def]
    """On a real network, with every set within the cell bound of every message: a set
    sharing no keyword with the message is a candidate only when it could be delivered
    without one (alpha >= tau), and then is delivered at distance 0; one that needs more
    keyword weight than a keyword gives is not filed under it; the rest are candidates
    only of messages holding a filed keyword."""
    net = andorra
    from roadpubsub.roadnet.segment_sets import SegmentSet

    every = np.arange(net.n_edges)
    whole = SegmentSet.of(net, every, np.zeros(every.size), net.edge_length[every])
    w = TermWeights({"a": 1.0, "b": 1.0, "c": 1e-3, "d": 1e12})
    a, b, c, dd = (int(i) for i in w.ids("abcd", add=False))
    rows = [[a], [b], [a, b], [a, c], [dd]]
    # 0: needs a; 1: alpha >= tau, no keyword needed; 2: needs a or b; 3: needs a (c alone
    # gives TSIM 1e-3); 4: tau 1.0 with alpha 0: needs d.
    alpha = np.array([0.5, 0.8, 0.2, 0.5, 0.0])
    tau = np.array([0.9, 0.8, 0.5, 0.9, 1.0])
    ptr, terms = _csr(rows)
    n = len(rows)
    e0 = EdgePoints.of(np.zeros(n, np.int64), np.zeros(n))
    subs = Subscriptions(np.arange(n, dtype=np.int64) + 1, e0, alpha, tau, ptr, terms)
    sets = SetLocations.of(np.arange(n), [whole] * n)
    spatial = SpatialIndex.build(net)
    matcher = SetThresholdMatcher(net, subs, sets.sets, w, dmax_m=500.0, spatial=spatial)
    post = matcher.term_postings
    index = SetCellIndex.build(spatial.cells, sets.sets)
    n_cells = int(np.count_nonzero(np.diff(index.cell_ptr)))
    assert post.always_set.size == n_cells  # set 1 alone, in each of its cells
    assert set(post.always_set.tolist()) == {1}
    filed = {int(t): set(post.ent_set[post.ent_ptr[post.term_ptr[t]]:
                                      post.ent_ptr[post.term_ptr[t + 1]]].tolist())
             for t in (a, b, c, dd)}
    assert filed == {a: {0, 2, 3}, b: {2}, c: set(), dd: {4}}
    m = Messages(np.array([1, 2, 3], np.int64), EdgePoints.of([5, 5, 5], [0.0, 0.0, 0.0]),
                 np.array([0, 1, 3, 4]), np.array([c, b, b, dd], np.int32))
    got = matcher.match(m)
    want = BruteMatcher(net, subs, w, dmax_m=500.0, set_locations=sets).match(m)
    assert_same(got, want)
    # per message: {1} (c shared), {1, 2} (b twice), {1, 4} (d): 5 candidates in all
    assert matcher.stats["candidates"] == 5
    assert {(int(i), int(s)) for i, s in got.pairs()} >= {(1, 2), (2, 2), (3, 2), (3, 5)}
    mixed = MixedMatcher.build(net, SubscriptionSet.only_threshold(subs), w, dmax_m=500.0,
                               spatial=spatial, threshold_sets=sets)
    assert isinstance(mixed.threshold, PointsAndSets)


def test_tau_exactly_at_the_filing_edge(andorra) -> None:  # type: ignore[no-untyped-def]
    """tau - tolerance exactly equal to the score a message sharing one keyword of four
    reaches at distance 0 (alpha 0, TSIM 1/4): delivered by the reference, so that one
    keyword must file the set (the filing's test is strict: a score equal to tau -
    tolerance is delivered)."""
    from roadpubsub.roadnet.segment_sets import SegmentSet

    net = andorra
    every = np.arange(net.n_edges)
    whole = SegmentSet.of(net, every, np.zeros(every.size), net.edge_length[every])
    w = TermWeights({"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0})
    a, b, c, d = (int(i) for i in w.ids("abcd", add=False))
    tau = 0.25 + TOL
    assert tau - TOL == 0.25
    ptr, terms = _csr([[a, b, c, d]])
    subs = Subscriptions(np.array([1], np.int64), EdgePoints.of([0], [0.0]),
                         np.array([0.0]), np.array([tau]), ptr, terms)
    sets = SetLocations.of([0], [whole])
    m = Messages(np.array([1, 2], np.int64), EdgePoints.of([5, 9], [0.0, 0.0]),
                 np.array([0, 1, 2]), np.array([a, d], np.int32))
    want = BruteMatcher(net, subs, w, dmax_m=500.0, set_locations=sets).match(m)
    assert want.pairs() == {(1, 1), (2, 1)} and want.score.tolist() == [0.25, 0.25]
    got = SetThresholdMatcher(net, subs, sets.sets, w, dmax_m=500.0,
                              spatial=SpatialIndex.build(net)).match(m)
    assert_same(got, want)
