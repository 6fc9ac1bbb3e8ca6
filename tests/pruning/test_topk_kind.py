"""Top-k sliding-window subscriptions: the index's events against the reference's, and the
reference's results against the definition recomputed from scratch after every message."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import random_points, scenarios

from roadpubsub.index.kinds import TopkSubscriptions
from roadpubsub.index.model import Messages, Subscriptions
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.pruning.brute import match_brute
from roadpubsub.pruning.kinds_reference import TopkBruteMatcher
from roadpubsub.pruning.similarity import spatio_textual_similarity, text_similarity
from roadpubsub.pruning.topk import TopkIndexMatcher
from roadpubsub.pruning.topk_events import TopkEvents
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork


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


def _both(network, tsubs, weights, dmax, window, capacity, rng, expires=None):
    ref = TopkBruteMatcher(network, tsubs, weights, dmax_m=dmax, window=window,
                           expires_at=expires)
    idx = TopkIndexMatcher(network, tsubs, weights, dmax_m=dmax, window=window,
                           spatial=SpatialIndex.build(network, capacity=capacity),
                           resort_every=int(rng.integers(1, 6)), expires_at=expires)
    return ref, idx


def _same_now(ref, idx) -> None:
    ids = idx.live_ids()
    assert ids.tolist() == sorted(ref.subs.ids[ref._live].tolist())
    assert idx.results(ids) == ref.results(ids)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.integers(0, 2**32 - 1), st.sampled_from([1, 2, 3, 40]),
       st.integers(1, 30))
def test_subscriptions_come_and_go_as_in_the_reference(scenario, seed, window, n_msgs):
    """Subscriptions added and removed between pushes (one id removed and re-added at
    another place: a move): the same events as the reference, whose new top-k is scored
    from scratch over the window; results read back equal."""
    network, subs, _, weights, dmax, capacity = scenario
    rng = np.random.default_rng(seed)
    pool = as_topk(subs, rng, (1, 2, 3, 50))
    first = rng.random(len(pool)) < 0.5
    start = pool.take(np.flatnonzero(first))
    later = pool.take(np.flatnonzero(~first))
    messages = stream(network, subs, weights, rng, n_msgs)
    ref, idx = _both(network, start, weights, dmax, window, capacity, rng)
    cuts = np.sort(rng.integers(0, n_msgs + 1, 3))
    bounds = [0, *cuts.tolist(), n_msgs]
    added = 0
    for a, b in itertools.pairwise(bounds):
        part = messages.take(np.arange(a, b))
        assert idx.push(part).rows() == ref.push(part).rows()
        _same_now(ref, idx)
        live = idx.live_ids()
        gone = rng.choice(live, int(rng.integers(0, live.size + 1)), replace=False)
        assert (idx.remove_subscriptions(gone).rows()
                == ref.remove_subscriptions(gone).rows())
        take = int(rng.integers(0, len(later) - added + 1))
        new = later.take(np.arange(added, added + take))
        added += take
        if gone.size and rng.random() < 0.5:  # a move: the same id back elsewhere
            back = pool.take(np.flatnonzero(pool.ids == gone[0]))
            moved = TopkSubscriptions(back.ids, random_points(rng, network, 1), back.alpha,
                                      back.k, back.kw_ptr, back.kw_terms)
            new = _concat(new, moved)
        got = idx.add_subscriptions(new)
        want = ref.add_subscriptions(new)
        assert got.rows() == want.rows()
        assert all(e == 1 and p == 2 for e, p in zip(got.event, got.phase, strict=True))
        _same_now(ref, idx)


def _concat(a: TopkSubscriptions, b: TopkSubscriptions) -> TopkSubscriptions:
    return TopkSubscriptions(np.r_[a.ids, b.ids],
                             EdgePoints.of(np.r_[a.points.edge, b.points.edge],
                                           np.r_[a.points.offset, b.points.offset]),
                             np.r_[a.alpha, b.alpha], np.r_[a.k, b.k],
                             np.r_[a.kw_ptr[:-1], b.kw_ptr + a.kw_ptr[-1]],
                             np.r_[a.kw_terms, b.kw_terms].astype(np.int32))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.integers(0, 2**32 - 1), st.sampled_from([1, 2, 3, 40]),
       st.integers(1, 30), st.booleans())
def test_expires_at_as_in_the_reference(scenario, seed, window, n_msgs, monotone):
    """expires_at drawn from the messages' own times (a subscription expiring at the very
    message whose arrival expires the window's oldest), NaN (never) and beyond the end;
    times in order or not: the same events as the reference, and an expired subscription
    leaves with its whole top-k evicted and gets nothing after."""
    network, subs, _, weights, dmax, capacity = scenario
    rng = np.random.default_rng(seed)
    tsubs = as_topk(subs, rng, (1, 2, 3, 50))
    messages = stream(network, subs, weights, rng, n_msgs)
    times = (np.arange(n_msgs, dtype=float) if monotone
             else rng.integers(0, n_msgs, n_msgs).astype(float))
    expires = rng.choice(np.r_[times, np.nan, n_msgs + 5.0, -1.0], len(tsubs))
    ref, idx = _both(network, tsubs, weights, dmax, window, capacity, rng, expires)
    cut = int(rng.integers(0, n_msgs + 1))
    got = TopkEvents.concat([idx.push(messages.take(np.arange(cut)), times=times[:cut]),
                             idx.push(messages.take(np.arange(cut, n_msgs)),
                                      times=times[cut:])])
    want = ref.push(messages, times=times)
    assert got.rows() == want.rows()
    _same_now(ref, idx)
    gone = set(tsubs.ids[expires <= np.maximum.accumulate(times)[-1]].tolist())
    assert set(idx.live_ids().tolist()).isdisjoint(gone)
    for sid in gone:  # every insert is evicted, nothing comes after the withdrawal
        mine = got.subscription_id == sid
        assert (got.event[mine] == 1).sum() == (got.event[mine] == 0).sum()


def test_dynamic_subscriptions_on_rome(rome, make_region_workload) -> None:
    """Rome, 1,500 subscriptions over 300 messages (W = 60): a third start late, a sixth
    leave midway, some expire; events equal the reference's."""
    rng = np.random.default_rng(5)
    subs, messages, weights, _ = make_region_workload(rome, rng, n_subs=1500, n_messages=300,
                                                      radius_m=3000)
    tsubs = TopkSubscriptions(subs.ids, subs.points, subs.alpha,
                              np.full(len(subs), 4, np.int64), subs.kw_ptr, subs.kw_terms)
    late = rng.random(len(tsubs)) < 1 / 3
    times = np.arange(300, dtype=float)
    expires = np.where(rng.random(len(tsubs)) < 0.1, rng.integers(0, 300, len(tsubs)),
                       np.nan)
    start, add = np.flatnonzero(~late), np.flatnonzero(late)
    kw = {"dmax_m": 1500.0, "window": 60}
    ref = TopkBruteMatcher(rome, tsubs.take(start), weights, expires_at=expires[start], **kw)
    idx = TopkIndexMatcher(rome, tsubs.take(start), weights, expires_at=expires[start], **kw)
    for a, b in ((0, 100), (100, 200), (200, 300)):
        part = messages.take(np.arange(a, b))
        assert idx.push(part, times=times[a:b]).rows() == ref.push(part,
                                                                  times=times[a:b]).rows()
        if a == 0:
            got = idx.add_subscriptions(tsubs.take(add), expires_at=expires[add])
            assert got.rows() == ref.add_subscriptions(tsubs.take(add),
                                                       expires_at=expires[add]).rows()
            assert len(got) > 100
        if a == 100:
            gone = rng.choice(idx.live_ids(), 250, replace=False)
            got = idx.remove_subscriptions(gone)
            assert got.rows() == ref.remove_subscriptions(gone).rows()
            assert len(got) > 100
    _same_now(ref, idx)


@pytest.mark.parametrize("n_fill", [40, 130])  # the window exactly (as the benchmark), more
def test_a_resumed_reference_goes_on_as_the_one_that_pushed(andorra, make_region_workload,
                                                            n_fill) -> None:
    """:meth:`TopkBruteMatcher.resume` from another matcher's top-k after the first
    messages: the rest of the stream gives the same events as pushing all of it."""
    rng = np.random.default_rng(5)
    subs, messages, weights, _ = make_region_workload(andorra, rng, n_subs=800,
                                                      n_messages=260, radius_m=3000)
    tsubs = as_topk(subs, rng, (1, 3, 5))
    window, dmax = 40, 1500.0
    fill = messages.take(np.arange(n_fill))
    rest = messages.take(np.arange(n_fill, len(messages)))
    pushed = TopkBruteMatcher(andorra, tsubs, weights, dmax_m=dmax, window=window)
    pushed.push(fill)
    seq_of = {int(m): i for i, m in enumerate(fill.ids)}
    top = {sid: [(score, seq_of[mid], d) for mid, score, d in entries]
           for sid, entries in zip(tsubs.ids.tolist(), pushed.results(tsubs.ids), strict=True)}
    resumed = TopkBruteMatcher(andorra, tsubs, weights, dmax_m=dmax, window=window)
    resumed.resume(top, fill)
    want = pushed.push(rest)
    assert len(want) > 100 and (want.phase == 0).any()
    assert resumed.push(rest).rows() == want.rows()
