"""The compiled matcher's batching: chunks, output-buffer growth, the delta buffer, and the
bucket queue of its verification search.

:class:`~roadpubsub.pruning.indexed.IndexMatcher` prunes a whole chunk of messages before verifying
any of them and resumes where its buffers ran out; none of that may change a delivery or a
counter.
"""

from __future__ import annotations

import numpy as np
import pytest
from strategies import assert_same

from roadpubsub.index.bia import BasicIndex
from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.workload import generate_workload
from roadpubsub.pruning.brute import match_brute
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.indexed import IndexMatcher
from roadpubsub.roadnet.network import spatial_order

#: The andorra cases' Dmax (m).
DMAX = 3000.0


def _andorra_case(andorra, arch, *, n_messages: int, seed: int, alpha_spread: float,
                  tau_spread: float):
    """A workload of 3,000 subscriptions on Andorra, its index of kind ``arch`` and the
    reference matcher's deliveries."""
    wl = generate_workload(andorra, n_subscriptions=3000, n_messages=n_messages, seed=seed,
                           alpha_spread=alpha_spread, tau_spread=tau_spread)
    index = arch(SpatialIndex.build(andorra, capacity=80), wl.subscriptions, wl.weights,
                 dmax_m=DMAX)
    want = match_brute(andorra, wl.subscriptions, wl.messages, wl.weights, dmax_m=DMAX)
    return wl, index, want


@pytest.mark.parametrize("arch", [EnhancedIndex, BasicIndex], ids=["eia", "bia"])
def test_chunks_and_buffer_growth_change_nothing(andorra, arch) -> None:
    wl = generate_workload(andorra, n_subscriptions=4000, n_messages=40, seed=3,
                           alpha_spread=0.4, tau_spread=0.3)
    dmax = 3000.0
    spatial = SpatialIndex.build(andorra, capacity=80)
    index = arch(spatial, wl.subscriptions, wl.weights, dmax_m=dmax)
    want = match_brute(andorra, wl.subscriptions, wl.messages, wl.weights, dmax_m=dmax)
    assert len(want) > 40  # several deliveries per message: the tiny buffers must grow
    base = (_m := IndexMatcher(index)).match(wl.messages)
    base_stats = _m.stats
    assert_same(base, want)
    for chunk, threads in ((1, 1), (3, 2), (64, 3)):
        matcher = IndexMatcher(index, chunk=chunk, threads=threads)
        for k in range(threads):
            matcher._lane(k).out_capacity = 2  # forces the grow-and-resume path
        seen: list[int] = []
        got = matcher.match(wl.messages, progress=seen.append)
        stats = matcher.stats
        assert_same(got, want)
        np.testing.assert_array_equal(stats.values, base_stats.values)
        assert sum(seen) == len(wl.messages)
        # The matcher keeps its grown buffers and scratch arrays for the next call.
        again = matcher.match(wl.messages)
        assert_same(again, want)


@pytest.mark.parametrize("arch", [EnhancedIndex, BasicIndex], ids=["eia", "bia"])
def test_delta_rows_are_verified_with_the_main_ones(andorra, arch) -> None:
    """Recent subscriptions (the delta) and indexed ones share a chunk's queue."""
    wl = generate_workload(andorra, n_subscriptions=3000, n_messages=30, seed=8)
    dmax = 3000.0
    subs = wl.subscriptions
    half = np.arange(len(subs)) < len(subs) // 2
    spatial = SpatialIndex.build(andorra, capacity=80)
    index = arch(spatial, subs.take(np.flatnonzero(half)), wl.weights, dmax_m=dmax)
    index.subscribe(subs.take(np.flatnonzero(~half)))
    assert len(index.delta) > 0
    want = match_brute(andorra, subs, wl.messages, wl.weights, dmax_m=dmax)
    got = (_m := IndexMatcher(index, chunk=7)).match(wl.messages)
    stats = _m.stats
    assert_same(got, want)
    assert stats.totals()["deliveries"] == len(want) > 0


@pytest.mark.parametrize("arch", [EnhancedIndex, BasicIndex], ids=["eia", "bia"])
def test_bucket_width_and_heap_fallback_change_no_delivery(andorra, arch) -> None:
    """Verification runs on a bucket queue; any width, and the heap search it falls back
    to when its buckets run short, give the reference matcher's deliveries."""
    wl, index, want = _andorra_case(andorra, arch, n_messages=30, seed=4, alpha_spread=0.4,
                                    tau_spread=0.3)
    assert len(want) > 30
    base = (_m := IndexMatcher(index)).match(wl.messages)
    base_stats = _m.stats
    assert_same(base, want)
    for width in (0.25, 3.0, 250.0, 1e4):
        got = (_m := IndexMatcher(index, bucket_width_m=width)).match(wl.messages)
        stats = _m.stats
        assert_same(got, want)
        assert stats.totals()["candidates"] == base_stats.totals()["candidates"]
    heap_only = IndexMatcher(index, threads=1)
    lane = heap_only._lane(0)
    lane.buckets = lane.buckets._replace(head=np.empty(1, dtype=np.int64))  # too few
    got = heap_only.match(wl.messages)
    assert_same(got, want)
    with pytest.raises(ValueError, match="bucket_width_m must be a positive"):
        IndexMatcher(index, bucket_width_m=0.0)


@pytest.mark.parametrize("arch", [EnhancedIndex, BasicIndex], ids=["eia", "bia"])
def test_hilbert_order_changes_nothing_but_the_order_of_work(andorra, arch) -> None:
    """A batch is matched in Hilbert order, yet deliveries and row i of the statistics
    belong to message i, exactly as when each message is matched alone."""
    wl = generate_workload(andorra, n_subscriptions=3000, n_messages=30, seed=5)
    dmax = 3000.0
    spatial = SpatialIndex.build(andorra, capacity=80)
    index = arch(spatial, wl.subscriptions, wl.weights, dmax_m=dmax)
    facts = spatial.facts(wl.messages.points)
    order = spatial_order(facts.x, facts.y)
    assert not np.array_equal(order, np.arange(len(wl.messages)))  # the order does differ
    got = (_m := IndexMatcher(index, chunk=8)).match(wl.messages)
    stats = _m.stats
    plain = (_m := IndexMatcher(index, chunk=8, hilbert_order=False)).match(wl.messages)
    plain_stats = _m.stats
    assert_same(got, plain)
    np.testing.assert_array_equal(stats.values, plain_stats.values)
    alone = IndexMatcher(index)
    for i in range(len(wl.messages)):
        one = alone.match(wl.messages.take([i]))
        one_stats = alone.stats
        np.testing.assert_array_equal(one_stats.values[0], stats.values[i])
        rows = got.message_id == wl.messages.ids[i]
        assert_same(one, Deliveries(got.message_id[rows], got.subscription_id[rows],
                                    got.distance[rows], got.score[rows]))
    assert_same(got, match_brute(andorra, wl.subscriptions, wl.messages, wl.weights,
                                 dmax_m=dmax))


def test_spatial_order_follows_the_curve() -> None:
    """Points along a 2 x 2 grid come back in the curve's order; fewer than 2 as they are."""
    x = np.array([10.0, 10.0, 0.0, 0.0])
    y = np.array([0.0, 10.0, 10.0, 0.0])
    order = spatial_order(x, y)
    assert sorted(order.tolist()) == [0, 1, 2, 3]
    steps = np.hypot(np.diff(x[order]), np.diff(y[order]))
    np.testing.assert_allclose(steps, 10.0)  # each step moves to a neighbouring cell
    np.testing.assert_array_equal(spatial_order(x[:1], y[:1]), [0])


@pytest.mark.parametrize("arch", [EnhancedIndex, BasicIndex], ids=["eia", "bia"])
def test_threads_give_the_one_thread_result(rome, arch) -> None:
    """Any thread count: the same deliveries (to the bit), the same per-message counters,
    and both equal to the reference; updates between calls reach every thread's lane."""
    wl = generate_workload(rome, n_subscriptions=40_000, n_messages=300, seed=9)
    dmax = 5000.0
    index = arch(SpatialIndex.build(rome), wl.subscriptions, wl.weights, dmax_m=dmax)
    one = (_m := IndexMatcher(index, threads=1, chunk=16)).match(wl.messages)
    one_stats = _m.stats
    sample = wl.messages.take(np.arange(40))
    assert_same(IndexMatcher(index, threads=1).match(sample),
                match_brute(rome, wl.subscriptions, sample, wl.weights, dmax_m=dmax))
    for threads in (2, 3, 8):
        matcher = IndexMatcher(index, threads=threads, chunk=16)
        got = matcher.match(wl.messages)
        stats = matcher.stats
        assert_same(got, one)
        np.testing.assert_array_equal(stats.values, one_stats.values)
    # An update between calls, then the same matcher again.
    index.unsubscribe(wl.subscriptions.ids[::5])
    again = matcher.match(wl.messages)
    fresh = IndexMatcher(index, threads=1).match(wl.messages)
    assert_same(again, fresh)
    assert len(fresh) < len(one)


def test_verification_floor_finds_the_reference_distances(andorra) -> None:
    """The floor's search (the delivered subscriptions as the only candidates, each limited
    to its own distance) finds exactly the reference matcher's distances, settles no more
    junctions than the matcher, and refuses deliveries it cannot reproduce."""
    from roadpubsub.roadnet.errors import InputError

    wl, index, want = _andorra_case(andorra, EnhancedIndex, n_messages=30, seed=6,
                                    alpha_spread=0.4, tau_spread=0.3)
    assert len(want) > 30
    matcher = IndexMatcher(index, threads=1)
    matcher.match(wl.messages)
    stats = matcher.stats
    seconds, settled = matcher.verification_floor(wl.messages, want)
    assert seconds >= 0.0 and 0 < settled <= stats.totals()["vertices_settled"]
    nudged = Deliveries(want.message_id, want.subscription_id, want.distance * (1 - 1e-9),
                        want.score)
    with pytest.raises(InputError, match="differs"):
        matcher.verification_floor(wl.messages, nudged)
    with pytest.raises(InputError, match="increasing id order"):
        matcher.verification_floor(wl.messages.take(np.arange(29, -1, -1)), want)


@pytest.mark.parametrize("arch", [EnhancedIndex, BasicIndex], ids=["eia", "bia"])
def test_phase_runs_stop_early_and_change_nothing(andorra, arch) -> None:
    """``phase_seconds`` runs the matcher's loop stopped after each phase, once each in
    that order, on one lane: the calls that follow, on one lane and on two, still deliver
    exactly the reference's deliveries (marks and stamps stay consistent)."""
    wl, index, want = _andorra_case(andorra, arch, n_messages=40, seed=8, alpha_spread=0.5,
                                    tau_spread=0.4)
    assert len(want) > 40
    one = IndexMatcher(index, threads=1)
    ticks: list[int] = []
    out = one.phase_seconds(wl.messages, clock=lambda: float(len(ticks.append(0) or ticks)))
    assert out == {"candidates": 1.0, "limits": 1.0, "all": 1.0} and len(ticks) == 6
    assert_same(one.match(wl.messages), want)
    assert_same(IndexMatcher(index, threads=2).match(wl.messages), want)
    for _ in range(2):
        one.phase_seconds(wl.messages.take(np.arange(5)))
        assert_same(one.match(wl.messages), want)


@pytest.mark.parametrize("arch", [EnhancedIndex, BasicIndex], ids=["eia", "bia"])
def test_scratch_kept_while_the_delta_and_vocabulary_grow(andorra, arch) -> None:
    """One matcher across subscribes that grow the delta past its scratch's headroom
    (256, 768, ... rows) and the vocabulary past its own, moves of indexed slots and an
    unsubscribe: the slot-sized marks stay, the stamps go on counting, and every call
    delivers exactly the reference's deliveries for the subscriptions live then."""
    from roadpubsub.index.model import Subscriptions, concat_subscriptions

    wl = generate_workload(andorra, n_subscriptions=4000, n_messages=25, seed=12,
                           alpha_spread=0.5, tau_spread=0.4)
    dmax = 3000.0
    first, later = wl.subscriptions.take(np.arange(2000)), wl.subscriptions.take(
        np.arange(2000, 4000))
    index = arch(SpatialIndex.build(andorra, capacity=80), first, wl.weights, dmax_m=dmax)
    matcher = IndexMatcher(index, threads=1)
    live = [first]
    marks = None
    for k, (a, b) in enumerate(((0, 200), (200, 700), (700, 1900), (1900, 2000))):
        batch = later.take(np.arange(a, b))
        if k == 2:  # keywords the vocabulary has not seen: it grows past its headroom
            kws = [[f"new{i}-{j}" for j in range(3)] for i in range(len(batch))]
            batch = Subscriptions.from_rows(ids=batch.ids, points=batch.points, keywords=kws,
                                            alpha=batch.alpha, tau=batch.tau,
                                            weights=wl.weights)
        index.subscribe(batch)
        live.append(batch)
        subs = concat_subscriptions(live)
        assert_same(matcher.match(wl.messages),
                    match_brute(andorra, subs, wl.messages, wl.weights, dmax_m=dmax))
        lane = matcher._lanes[0]
        assert lane.capacity is not None and lane.capacity[1] >= len(index.delta)
        if marks is not None:
            assert lane.scratch is not None and lane.scratch.mark is marks
        marks = lane.scratch.mark if lane.scratch is not None else None
    gone = subs.ids[::7]
    index.unsubscribe(gone)
    keep = ~np.isin(subs.ids, gone)
    subs = subs.take(np.flatnonzero(keep))
    assert_same(matcher.match(wl.messages),
                match_brute(andorra, subs, wl.messages, wl.weights, dmax_m=dmax))


@pytest.mark.parametrize("arch", [EnhancedIndex, BasicIndex], ids=["eia", "bia"])
def test_single_messages_of_growing_length_change_nothing(andorra, arch) -> None:
    """One message at a time, each longer than any before (the lane's term slots kept
    between calls grow), then all of them at once: the reference's deliveries each time."""
    from roadpubsub.index.model import Messages

    wl = generate_workload(andorra, n_subscriptions=3000, n_messages=12, seed=5)
    dmax = 3000.0
    index = arch(SpatialIndex.build(andorra, capacity=80), wl.subscriptions, wl.weights,
                 dmax_m=dmax)
    m = wl.messages
    n_terms = len(wl.weights)
    rng = np.random.default_rng(5)
    # message i holds 1, 2, 4, ... up to every keyword of the vocabulary (more than 64)
    sizes = np.minimum(2 ** np.arange(len(m)), n_terms)
    assert sizes[-1] > 64
    rows = [np.sort(rng.choice(n_terms, k, replace=False)).astype(np.int32) for k in sizes]
    grown = Messages(m.ids, m.points, np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
                     np.concatenate(rows))
    matcher = IndexMatcher(index)
    for i in range(len(grown)):
        one = grown.take(np.array([i]))
        want = match_brute(andorra, wl.subscriptions, one, wl.weights, dmax_m=dmax)
        assert_same(matcher.match(one), want)
    want = match_brute(andorra, wl.subscriptions, grown, wl.weights, dmax_m=dmax)
    assert len(want) > 0
    assert_same(matcher.match(grown), want)
