"""The mixed-kinds entry point (roadpubsub.pruning.mixed) against every kind's reference matcher and
the expiry rule (roadpubsub.pruning.expiry) written out pair by pair; Deliveries.take and concat."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import assert_same, scenarios, with_borderline_taus

from roadpubsub.index.kinds import BooleanSubscriptions, SubscriptionSet, TopkSubscriptions
from roadpubsub.index.model import Messages, Subscriptions
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.index.workload import generate_workload
from roadpubsub.pruning.brute import match_brute
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.expiry import Expiry, withhold_expired
from roadpubsub.pruning.kinds_reference import BooleanBruteMatcher, TopkBruteMatcher
from roadpubsub.pruning.mixed import MixedMatcher, MixedResult
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.network import RoadNetwork

SLOW = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _kinds(subs: Subscriptions, kind: np.ndarray, radius: np.ndarray, k: np.ndarray
           ) -> SubscriptionSet:
    """``subs`` split by ``kind`` (0 threshold, 1 boolean, 2 top-k)."""
    t, b, p = (subs.take(np.flatnonzero(kind == c)) for c in (0, 1, 2))
    return SubscriptionSet(
        t,
        BooleanSubscriptions(b.ids, b.points, radius[kind == 1], b.kw_ptr, b.kw_terms),
        TopkSubscriptions(p.ids, p.points, p.alpha, k[kind == 2], p.kw_ptr, p.kw_terms))


@st.composite
def mixed_cases(draw: st.DrawFn) -> tuple[RoadNetwork, SubscriptionSet, Messages,
                                         TermWeights, float, int, int, Expiry,
                                         np.ndarray, float | None]:
    """A mixed set drawn to break the entry point: every kind, tau exactly at a score,
    alpha in {0, 1} among others, repeated messages (equal scores: ties), radii of 0 and
    Dmax, message times with ties and out of order, expiries exactly at a message's time;
    a batch's clock (None: each message's time) or a service's (a number)."""
    network, subs, messages, weights, dmax, capacity = draw(scenarios())
    subs = with_borderline_taus(network, subs, messages, weights, dmax)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n, n_msgs = len(subs), len(messages)
    if n_msgs > 1 and draw(st.booleans()):  # a message repeated later: equal scores
        rows = np.r_[np.arange(n_msgs), rng.integers(0, n_msgs, 2)]
        kws = [messages.keywords(int(r)) for r in rows]
        ptr = np.zeros(rows.size + 1, np.int64)
        np.cumsum([w.size for w in kws], out=ptr[1:])
        messages = Messages(np.arange(rows.size, dtype=np.int64) + 100, messages.points[rows],
                            ptr, np.concatenate(kws).astype(np.int32))
        n_msgs = len(messages)
    kind = rng.integers(0, 3, n)
    radius = rng.choice([0.0, dmax, dmax / 3, dmax * rng.random()], n)
    k = rng.integers(1, 4, n).astype(np.int64)
    times = rng.integers(0, 5, n_msgs).astype(np.float64)  # ties, out of order
    expires = np.where(rng.random(n) < 0.5, rng.choice(np.r_[times, 2.5, 9.0], n), np.nan)
    window = draw(st.sampled_from([1, 2, 5]))
    clock = draw(st.sampled_from([None, None, 0.0, 2.0, 3.0]))
    return (network, _kinds(subs, kind, radius, k), messages, weights, dmax, capacity,
            window, Expiry.of(subs.ids, expires), times, clock)


def _reference(network: RoadNetwork, subs: SubscriptionSet, messages: Messages,
               weights: TermWeights, dmax: float, window: int, expiry: Expiry,
               times: np.ndarray, clock: float | None) -> MixedResult:
    """Every kind's reference matcher; the expiry rule applied pair by pair."""
    c = times if clock is None else np.full(times.size, clock)  # a batch: each own time
    parts = [match_brute(network, subs.threshold, messages, weights, dmax_m=dmax)]
    if len(subs.boolean):
        parts.append(BooleanBruteMatcher(network, subs.boolean, weights,
                                         dmax_m=dmax).match(messages))
    found = Deliveries.concat(parts)
    pos = {int(m): i for i, m in enumerate(messages.ids.tolist())}
    keep = [expiry.at.get(int(s), np.inf) > max(times[pos[int(m)]], c[pos[int(m)]])
            for m, s in zip(found.message_id.tolist(), found.subscription_id.tolist(),
                            strict=True)]
    events = TopkBruteMatcher(
        network, subs.topk, weights, dmax_m=dmax, window=window,
        expires_at=[expiry.at.get(int(s), np.nan) for s in subs.topk.ids.tolist()],
    ).push(messages, times=c)
    return MixedResult(found.take(np.asarray(keep, dtype=bool)), events)


@pytest.mark.parametrize("index", ["eia", "bia", "brute"])
@SLOW
@given(case=mixed_cases())
def test_entry_point_equals_the_references(index: str, case: tuple) -> None:
    network, subs, messages, weights, dmax, capacity, window, expiry, times, clock = case
    want = _reference(network, subs, messages, weights, dmax, window, expiry, times, clock)
    spatial = None if index == "brute" else SpatialIndex.build(network, capacity=capacity)
    matcher = MixedMatcher.build(network, subs, weights, dmax_m=dmax, window=window,
                                 index=index, spatial=spatial, expiry=expiry, threads=2)
    got = matcher.match(messages, times=times, clock=clock)
    assert_same(got.deliveries, want.deliveries)
    assert got.events.rows() == want.events.rows()


@SLOW
@given(case=mixed_cases(), cut=st.integers(0, 8))
def test_batches_in_any_order_deliver_the_same(case: tuple, cut: int) -> None:
    """deliver() over batches in any order, push() over the whole stream: the CLI's way
    equals one call."""
    network, subs, messages, weights, dmax, capacity, window, expiry, times, _ = case
    spatial = SpatialIndex.build(network, capacity=capacity)
    one = MixedMatcher.build(network, subs, weights, dmax_m=dmax, window=window,
                             spatial=spatial, expiry=expiry).match(messages, times=times)
    again = MixedMatcher.build(network, subs, weights, dmax_m=dmax, window=window,
                               spatial=spatial, expiry=expiry)
    c = times
    order = np.random.default_rng(cut).permutation(len(messages))
    parts = [again.deliver(messages.take(rows), at=c[rows])
             for rows in (order[:cut], order[cut:])]
    assert_same(Deliveries.concat(parts), one.deliveries)
    assert again.push(messages, clock=c).rows() == one.events.rows()


def test_no_times_no_expiry_and_bad_times(andorra: RoadNetwork) -> None:
    network = andorra
    wl = generate_workload(network, n_subscriptions=4000, n_messages=40, seed=3,
                           alpha_spread=0.4, tau_spread=0.3)
    spatial = SpatialIndex.build(network)
    subs = SubscriptionSet.only_threshold(wl.subscriptions)
    every = Expiry.of(subs.threshold.ids, np.zeros(len(subs)))  # all expired at 0
    m = MixedMatcher.build(network, subs, wl.weights, dmax_m=3000.0, spatial=spatial,
                           expiry=every)
    plain = m.match(wl.messages)
    assert len(plain.deliveries) > 0 and len(plain.events) == 0  # no times: none expires
    assert len(m.match(wl.messages, times=np.full(len(wl.messages), -1.0)).deliveries) == \
        len(plain.deliveries)  # every time before the expiry
    assert len(m.match(wl.messages, times=np.zeros(len(wl.messages))).deliveries) == 0
    with pytest.raises(InputError, match="NaN"):
        m.match(wl.messages, times=np.full(len(wl.messages), np.nan))
    with pytest.raises(InputError, match="one number per message"):
        m.match(wl.messages, times=[1.0])
    with pytest.raises(InputError, match="needs the messages' times"):
        m.match(wl.messages, clock=1.0)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_take_concat_and_withholding(data: st.DataObject) -> None:
    key = np.unique(np.asarray(data.draw(st.lists(st.integers(0, 59), max_size=30)),
                               dtype=np.int64))  # (message 0-5, subscription 0-9) pairs
    n = key.size
    d = Deliveries(key // 10, key % 10, np.arange(n, dtype=float), np.ones(n))
    mask = np.asarray(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    kept = d.take(mask)
    assert kept.pairs() == {(int(k // 10), int(k % 10)) for k in key[mask]}
    assert_same(d.take(np.flatnonzero(mask)), kept)
    assert_same(Deliveries.concat([d.take(~mask), kept]), d)
    with pytest.raises(ValueError, match="mask"):
        d.take(np.ones(n + 1, dtype=bool))
    # rule 2 as a filter: a pair goes when expires_at <= the message's reading, exactly
    exp = np.asarray(data.draw(st.lists(st.sampled_from([0.0, 1.0, 2.0, np.nan]),
                                        min_size=10, max_size=10)))
    expiry = Expiry.of(np.arange(10), exp)
    at = np.asarray(data.draw(st.lists(st.sampled_from([0.0, 1.0, 2.0]), min_size=6,
                                       max_size=6)))
    got = withhold_expired(d, expiry, np.arange(6), at)
    want = {(m, s) for m, s in d.pairs() if not exp[s] <= at[m]}
    assert got.pairs() == want
    many = np.repeat(np.arange(12), 500)  # enough ids for the sorted lookup
    never = np.where(np.isnan(exp), np.inf, exp)
    np.testing.assert_array_equal(expiry.expires(many), np.where(
        many < 10, never[np.minimum(many, 9)], np.inf))
