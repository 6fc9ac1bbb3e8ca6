"""Boolean range subscriptions: the index against the reference, the reference against an
independent networkx computation, on random small graphs and on Andorra and Rome."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import assert_same, random_points, scenarios, tiny_network

from roadpubsub.index.kinds import BooleanSubscriptions
from roadpubsub.index.model import Messages, Subscriptions
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.pruning.boolean import BooleanIndexMatcher
from roadpubsub.pruning.brute import match_brute
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.kinds_reference import BooleanBruteMatcher
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork


def as_boolean(network: RoadNetwork, subs: Subscriptions, messages: Messages,
               weights: TermWeights, dmax: float, rng: np.random.Generator
               ) -> BooleanSubscriptions:
    """The subscriptions as boolean ones; radii 0, Dmax, random, or exactly a pair's dN."""
    loose = Subscriptions(subs.ids, subs.points, np.ones(len(subs)),
                          np.full(len(subs), 1e-9), subs.kw_ptr, subs.kw_terms)
    pairs = match_brute(network, loose, messages, weights, dmax_m=dmax)
    radius = rng.choice([0.0, dmax, -1.0], len(subs), p=[0.15, 0.15, 0.7])
    radius = np.where(radius < 0, rng.random(len(subs)) * dmax, radius)
    row_of = {int(i): r for r, i in enumerate(subs.ids)}
    for sid, d in zip(pairs.subscription_id[::2], pairs.distance[::2], strict=True):
        radius[row_of[int(sid)]] = d  # a radius exactly at the distance
    return BooleanSubscriptions(subs.ids, subs.points, radius, subs.kw_ptr, subs.kw_terms)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.integers(0, 2**32 - 1))
def test_index_equals_reference_on_random_graphs(scenario, seed) -> None:
    network, subs, messages, weights, dmax, capacity = scenario
    rng = np.random.default_rng(seed)
    # Messages hold their subscriptions' keywords often enough for deliveries to happen.
    bsubs = as_boolean(network, subs, messages, weights, dmax, rng)
    spatial = SpatialIndex.build(network, capacity=capacity)
    want = BooleanBruteMatcher(network, bsubs, weights, dmax_m=dmax).match(messages)
    got = BooleanIndexMatcher(network, bsubs, weights, dmax_m=dmax,
                              spatial=spatial).match(messages)
    assert_same(got, want)


def test_reference_is_the_definition(andorra, make_region_workload, reference) -> None:
    """Reference deliveries = pairs with every keyword and an independent dN <= radius."""
    rng = np.random.default_rng(5)
    subs, messages, weights, _ = make_region_workload(andorra, rng, n_subs=60, n_messages=25,
                                                      radius_m=1500)
    dmax = 2000.0
    bsubs = BooleanSubscriptions(subs.ids, subs.points, rng.uniform(0, dmax, len(subs)),
                                 subs.kw_ptr, subs.kw_terms)
    got = BooleanBruteMatcher(andorra, bsubs, weights, dmax_m=dmax).match(messages)
    loose = Subscriptions(subs.ids, subs.points, np.ones(len(subs)), np.full(len(subs), 1e-9),
                          subs.kw_ptr, subs.kw_terms)
    dist = reference(andorra, loose, messages, weights, dmax_m=dmax)
    row_of = {int(i): r for r, i in enumerate(subs.ids)}
    want = set()
    for (mid, sid), (d, _) in dist.items():
        r = row_of[sid]
        m = int(np.flatnonzero(messages.ids == mid)[0])
        if d <= bsubs.radius[r] and set(subs.keywords(r)) <= set(messages.keywords(m)):
            want.add((mid, sid))
    assert got.pairs() == want
    assert len(want) > 5
    for mid, sid, d in zip(got.message_id, got.subscription_id, got.distance, strict=True):
        assert d == pytest.approx(dist[(int(mid), int(sid))][0], abs=1e-6)


@pytest.mark.parametrize("net", ["andorra", "rome"])
def test_index_equals_reference_on_real_networks(net, request, make_region_workload) -> None:
    network = request.getfixturevalue(net)
    rng = np.random.default_rng(11)
    subs, messages, weights, _ = make_region_workload(network, rng, n_subs=3000,
                                                      n_messages=120, radius_m=4000)
    dmax = 2500.0
    radius = rng.choice([0.0, dmax, -1.0], len(subs), p=[0.05, 0.1, 0.85])
    radius = np.where(radius < 0, rng.uniform(100, dmax, len(subs)), radius)
    bsubs = BooleanSubscriptions(subs.ids, subs.points, radius, subs.kw_ptr, subs.kw_terms)
    # Some subscriptions on a message's own edge, before and after it.
    edge, off = bsubs.points.edge.copy(), bsubs.points.offset.copy()
    edge[:40] = messages.points.edge[:40]
    off[:40] = network.edge_length[edge[:40]] * rng.random(40)
    bsubs = BooleanSubscriptions(bsubs.ids, EdgePoints.of(edge, off), radius, bsubs.kw_ptr,
                                 bsubs.kw_terms)
    want = BooleanBruteMatcher(network, bsubs, weights, dmax_m=dmax).match(messages)
    got = BooleanIndexMatcher(network, bsubs, weights, dmax_m=dmax).match(messages)
    assert len(want) > 50
    assert_same(got, want)


@st.composite
def boolean_cases(draw: st.DrawFn) -> tuple[RoadNetwork, BooleanSubscriptions, Messages,
                                            TermWeights, float, int]:
    """Inputs aimed at the index's own paths: keyword lists with duplicates (of the key
    term too, and within a message), subscriptions standing exactly on a message, radii 0,
    Dmax, exactly a delivered pair's dN and the float just below it, message ids unsorted
    and negative, and up to 70 messages for few subscriptions (the kernel's output fills
    and resumes, and two threads share the batch)."""
    network = tiny_network(draw)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    vocab = [f"t{i}" for i in range(6)]
    weights = TermWeights({t: 1.0 for t in vocab})
    n_subs = draw(st.integers(1, 30))
    n_msgs = draw(st.integers(1, 70))
    mpoints = random_points(rng, network, n_msgs)
    mids = rng.permutation(10**6)[:n_msgs].astype(np.int64) - 500_000
    messages = Messages.from_rows(
        ids=mids, points=mpoints,
        keywords=[list(rng.choice(vocab, rng.integers(0, 6), replace=False))
                  for _ in range(n_msgs)], weights=weights)
    if draw(st.booleans()):  # a hand-built batch may repeat a term within a message
        rows = [np.r_[messages.keywords(i), messages.keywords(i)[::2]] for i in range(n_msgs)]
        mptr = np.zeros(n_msgs + 1, np.int64)
        np.cumsum([r.size for r in rows], out=mptr[1:])
        messages = Messages(mids, mpoints, mptr, np.concatenate(rows).astype(np.int32))
    spoints = random_points(rng, network, n_subs)
    edge, off = spoints.edge.copy(), spoints.offset.copy()
    on_msg = rng.random(n_subs) < 0.3  # exactly at a message, or elsewhere on its edge
    pick = rng.integers(0, n_msgs, n_subs)
    edge[on_msg] = mpoints.edge[pick[on_msg]]
    off[on_msg] = np.where(rng.random(int(on_msg.sum())) < 0.5, mpoints.offset[pick[on_msg]],
                           network.edge_length[edge[on_msg]] * rng.random(int(on_msg.sum())))
    n_kw = rng.integers(1, 4, n_subs)
    ptr = np.zeros(n_subs + 1, np.int64)
    np.cumsum(n_kw, out=ptr[1:])
    terms = rng.integers(0, 3, int(ptr[-1])).astype(np.int32)  # few terms: duplicates
    dmax = float(draw(st.sampled_from([50.0, 500.0, 3000.0])))
    radius = rng.choice([0.0, dmax, -1.0], n_subs, p=[0.15, 0.15, 0.7])
    radius = np.where(radius < 0, rng.random(n_subs) * dmax, radius)
    ids = rng.permutation(1000)[:n_subs].astype(np.int64)
    subs = BooleanSubscriptions(ids, EdgePoints.of(edge, off), radius, ptr, terms)
    wide = BooleanSubscriptions(ids, subs.points, np.full(n_subs, dmax), ptr, terms)
    pairs = BooleanBruteMatcher(network, wide, weights, dmax_m=dmax).match(messages)
    row_of = {int(i): r for r, i in enumerate(ids)}
    for sid, d in zip(pairs.subscription_id, pairs.distance, strict=True):
        tie = rng.random()
        if tie < 0.3:
            radius[row_of[int(sid)]] = d  # exactly at the distance: delivered
        elif tie < 0.45:
            radius[row_of[int(sid)]] = np.nextafter(d, -np.inf) if d > 0 else 0.0
    subs = BooleanSubscriptions(ids, subs.points, radius, ptr, terms)
    return network, subs, messages, weights, dmax, draw(st.integers(1, 6))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(boolean_cases())
def test_index_paths_equal_reference(case) -> None:
    network, subs, messages, weights, dmax, capacity = case
    want = BooleanBruteMatcher(network, subs, weights, dmax_m=dmax).match(messages)
    matcher = BooleanIndexMatcher(network, subs, weights, dmax_m=dmax, threads=1,
                                  spatial=SpatialIndex.build(network, capacity=capacity))
    assert_same(matcher.match(messages), want)
    matcher.threads = 2
    assert_same(matcher.match(messages), want)
    # A subset in another order: the placement must not depend on the batch.
    part = messages.take(np.arange(len(messages))[::-1][: max(1, len(messages) // 2)])
    assert_same(matcher.match(part),
                BooleanBruteMatcher(network, subs, weights, dmax_m=dmax).match(part))


def test_verification_floor_checks_the_deliveries(andorra, make_region_workload) -> None:
    """The floor's search finds every delivered distance again, and refuses deliveries
    that are not the matcher's."""
    rng = np.random.default_rng(3)
    subs, messages, weights, _ = make_region_workload(andorra, rng, n_subs=400, n_messages=30,
                                                      radius_m=1500)
    dmax = 2000.0
    bsubs = BooleanSubscriptions(subs.ids, subs.points, rng.uniform(0, dmax, len(subs)),
                                 subs.kw_ptr, subs.kw_terms)
    matcher = BooleanIndexMatcher(andorra, bsubs, weights, dmax_m=dmax)
    got = matcher.match(messages)
    assert len(got) > 20
    seconds, settled = matcher.verification_floor(messages, got)
    assert seconds >= 0 and 0 < settled <= matcher.stats["settled"]
    wrong = Deliveries(got.message_id, got.subscription_id, got.distance + 0.5, got.score)
    with pytest.raises(InputError, match="differs"):
        matcher.verification_floor(messages, wrong)
    stranger = Deliveries(got.message_id, got.subscription_id + 10**9, got.distance,
                          got.score)
    with pytest.raises(InputError, match="not in the index"):
        matcher.verification_floor(messages, stranger)
    with pytest.raises(InputError, match="messages not given"):
        matcher.verification_floor(
            messages.take(np.flatnonzero(messages.ids != got.message_id[0])), got)
