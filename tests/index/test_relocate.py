"""Moves through the compiled relocate (``SubscriptionIndex._relocate``, behind ``move``):
one at a time or batched, they leave the index in the state the general ``_move_rows``
gives, and matching equals the reference matcher. Bad moves get one clear error and change
nothing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roadpubsub.index.base import SubscriptionIndex
from roadpubsub.index.bia import BasicIndex
from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.model import InvalidSubscriptionError
from roadpubsub.index.spatial import PointFacts, SpatialIndex
from roadpubsub.index.workload import Workload
from roadpubsub.pruning.brute import match_brute
from roadpubsub.pruning.indexed import IndexMatcher
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork

DMAX = 3000.0


@pytest.fixture(scope="module")
def andorra(andorra_workload: Callable[..., tuple[RoadNetwork, SpatialIndex, Workload]]
           ) -> tuple[RoadNetwork, SpatialIndex, Workload]:
    return andorra_workload(900, 10, seed=5)


def _state(index: SubscriptionIndex) -> dict[int, tuple[Any, ...]]:
    """Every live subscription by id: point, alpha, tau, keywords, and for delta rows their
    facts, DNlimit and wildcard flag (the delta's row order is free)."""
    out: dict[int, tuple[Any, ...]] = {}
    live = index.subscriptions()
    for r, sid in enumerate(live.ids.tolist()):
        out[sid] = (int(live.points.edge[r]), float(live.points.offset[r]),
                    float(live.alpha[r]), float(live.tau[r]),
                    tuple(live.kw_terms[live.kw_ptr[r]:live.kw_ptr[r + 1]].tolist()))
    d = index.delta
    for r, sid in enumerate(d.ids.tolist()):
        facts = tuple(getattr(index.delta_facts, f.name)[r].item() for f in fields(PointFacts))
        out[sid] = (*out[sid], "delta", facts, float(index.delta_dn_limit[r]),
                    bool(index.delta_wildcard[r]))
    return out


def _check_consistent(index: SubscriptionIndex) -> None:
    """The delta's id order, its facts and the slots' flags agree with its rows."""
    d = index.delta
    n = len(d)
    buf = index._delta
    order = buf._order[:n]
    np.testing.assert_array_equal(np.sort(order), np.arange(n))
    np.testing.assert_array_equal(buf._sorted[:n], d.ids[order])
    assert np.all(np.diff(buf._sorted[:n]) > 0)
    fresh = index.spatial.facts(d.points)
    for f in fields(PointFacts):
        np.testing.assert_array_equal(getattr(index.delta_facts, f.name), getattr(fresh, f.name))
    assert np.all(np.diff(d.kw_ptr) > 0)  # every row keeps its keywords
    assert d.kw_ptr[-1] == d.kw_terms.size
    # no id both in an active slot and in the delta
    active_ids = index.subs.ids[index.active]
    assert np.intersect1d(active_ids, d.ids).size == 0


def _point(network: RoadNetwork, rng: np.random.Generator, k: int) -> EdgePoints:
    e = rng.integers(0, network.n_edges, k)
    # offsets at both ends of the edge as well as inside
    f = rng.choice([0.0, 1.0, 0.5, rng.random()], k)
    return EdgePoints.of(e, f * network.edge_length[e])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31), n_moves=st.integers(1, 60),
       architecture=st.sampled_from([EnhancedIndex, BasicIndex]))
def test_single_moves_equal_the_batch_and_move(andorra, seed: int, n_moves: int,
                                               architecture: type) -> None:
    network, spatial, wl = andorra
    rng = np.random.default_rng(seed)
    subs = wl.subscriptions
    n = len(subs)
    base = rng.permutation(n)[: n // 2]
    late = np.setdiff1d(np.arange(n), base)[:100]  # subscribed later: delta rows
    one, batch, general = (architecture(spatial, subs.take(np.sort(base)), wl.weights,
                                        dmax_m=DMAX) for _ in range(3))
    for index in (one, batch, general):
        index.auto_compact = False
        index.subscribe(subs.take(late))
    gone = subs.ids[rng.choice(base, 20, replace=False)]
    for index in (one, batch, general):
        index.unsubscribe(gone)
    live = one.subscriptions().ids
    # ids moved several times, from the slots and from the delta
    ids = rng.choice(live, n_moves, replace=True)
    points = _point(network, rng, n_moves)
    matcher = IndexMatcher(one)  # lives through the moves, reusing its scratch arrays
    for i in range(n_moves):
        one.move(ids[i:i + 1], points[i:i + 1])
        general._move_rows(ids[i:i + 1], points[i:i + 1])
        if i % 20 == 19:
            got = matcher.match(wl.messages)
            want = match_brute(network, one.subscriptions(), wl.messages, wl.weights,
                               dmax_m=DMAX)
            assert got.pairs() == want.pairs()
    # the batch: the last move of each id wins, as the service's applier groups them
    _, first_reversed = np.unique(ids[::-1], return_index=True)
    last = np.sort(ids.size - 1 - first_reversed)
    batch.move(ids[last], points[last])
    assert _state(one) == _state(batch)
    np.testing.assert_array_equal(one.active, batch.active)
    state_general = {k: v[:5] for k, v in _state(general).items()}
    assert {k: v[:5] for k, v in _state(one).items()} == state_general
    for index in (one, batch):
        _check_consistent(index)
    got = IndexMatcher(one).match(wl.messages)
    want = match_brute(network, one.subscriptions(), wl.messages, wl.weights, dmax_m=DMAX)
    assert got.pairs() == want.pairs()
    np.testing.assert_array_equal(got.distance, want.distance)
    np.testing.assert_array_equal(got.score, want.score)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31),
       bad=st.sampled_from(["unsubscribed", "unknown", "edge", "negative_edge", "offset",
                            "negative_offset", "nan", "inf", "repeat"]),
       k=st.integers(1, 4))
def test_bad_moves_change_nothing(andorra, seed: int, bad: str, k: int) -> None:
    network, spatial, wl = andorra
    rng = np.random.default_rng(seed)
    subs = wl.subscriptions
    index = EnhancedIndex(spatial, subs.take(np.arange(400)), wl.weights, dmax_m=DMAX)
    index.auto_compact = False
    index.subscribe(subs.take(np.arange(400, 450)))
    index.move(subs.ids[[3, 410]], _point(network, rng, 2))  # a moved row, a delta row
    index.unsubscribe(subs.ids[[5, 420]])
    before = _state(index)
    active = index.active.copy()
    live = index.subscriptions().ids
    ids = rng.choice(live, k, replace=False)
    points = _point(network, rng, k)
    edge = points.edge.astype(np.int64)
    offset = points.offset.copy()
    j = int(rng.integers(0, k))
    if bad == "unsubscribed":
        ids[j] = subs.ids[rng.choice([5, 420])]
        match = "unknown subscription ids"
    elif bad == "unknown":
        ids[j] = 10**15
        match = "unknown subscription ids"
    elif bad == "repeat":
        if k == 1:
            ids = np.array([ids[0], ids[0]])
            edge, offset = np.repeat(edge, 2), np.repeat(offset, 2)
        else:
            ids[j] = ids[(j + 1) % k]
        match = "repeat|duplicate"
    else:
        if bad == "edge":
            edge[j] = network.n_edges
        elif bad == "negative_edge":
            edge[j] = -1
        elif bad == "offset":
            offset[j] = network.edge_length[edge[j]] + 0.01
        elif bad == "negative_offset":
            offset[j] = -0.01
        elif bad == "nan":
            offset[j] = np.nan
        elif bad == "inf":
            offset[j] = np.inf
        match = "edge ids outside|offsets not within"
    with pytest.raises(InvalidSubscriptionError, match=match):
        index.move(ids, EdgePoints(edge, offset))
    assert _state(index) == before
    np.testing.assert_array_equal(index.active, active)
    _check_consistent(index)


def test_a_full_buffer_grows_and_keeps_every_row(andorra) -> None:
    """Hundreds of single moves from the slots: the delta's buffers grow (several times
    from their first 256 rows) and the rows stay those of one batched relocate."""
    network, spatial, wl = andorra
    subs = wl.subscriptions
    rng = np.random.default_rng(1)
    one, batch = (EnhancedIndex(spatial, subs, wl.weights, dmax_m=DMAX) for _ in range(2))
    for index in (one, batch):
        index.auto_compact = False
    ids = rng.permutation(subs.ids)[:700]
    points = _point(network, rng, ids.size)
    for i in range(ids.size):
        one.move(ids[i:i + 1], points[i:i + 1])
    batch.move(ids, points)
    assert len(one.delta) == 700
    assert _state(one) == _state(batch)
    _check_consistent(one)


@pytest.mark.parametrize("architecture", [EnhancedIndex, BasicIndex])
def test_a_move_reads_the_slots_in_place(andorra, architecture) -> None:
    """The slots' columns a move reads are the index's own arrays, not copies: alpha and
    tau are strided columns of the slot record, and a contiguous copy of them per move
    made a single move cost the whole index's size (4 ms at 1M slots)."""

    _, spatial, wl = andorra
    index = architecture(spatial, wl.subscriptions, wl.weights, dmax_m=DMAX)
    index.slot_record  # noqa: B018 - packs the record first, as matching does
    source = index._slot_source()
    for name in ("ids", "alpha", "tau", "kw_ptr", "kw_terms"):
        assert np.shares_memory(getattr(source, name), getattr(index.subs, name)), name
    assert source.active is index.active
