"""Subscribe, unsubscribe and move without a rebuild; save and load: results identical to
a fresh build and to the reference matcher."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roadpubsub.index.bia import BasicIndex
from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.model import InvalidSubscriptionError, Subscriptions, concat_subscriptions
from roadpubsub.index.postings import build_posting_layout, edge_groups_by_value
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.store import load_index
from roadpubsub.index.workload import Workload
from roadpubsub.pruning.brute import match_brute
from roadpubsub.pruning.indexed import IndexMatcher
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork

DMAX = 3000.0


@pytest.fixture(scope="module")
def andorra_setup(andorra_workload: Callable[..., tuple[RoadNetwork, SpatialIndex, Workload]]
                 ) -> tuple[RoadNetwork, SpatialIndex, Workload]:
    return andorra_workload(1200, 12, seed=9)


def _points(network: RoadNetwork, rng: np.random.Generator, k: int) -> EdgePoints:
    e = rng.integers(0, network.n_edges, k)
    return EdgePoints.of(e, rng.random(k) * network.edge_length[e])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31), steps=st.integers(1, 6),
       architecture=st.sampled_from([EnhancedIndex, BasicIndex]))
def test_random_update_sequences_match_fresh_build(andorra_setup, seed, steps,
                                                   architecture) -> None:
    network, spatial, wl = andorra_setup
    rng = np.random.default_rng(seed)
    subs = wl.subscriptions
    live = rng.permutation(len(subs))[: len(subs) // 2]
    pending = np.setdiff1d(np.arange(len(subs)), live)
    index = architecture(spatial, subs.take(np.sort(live)), wl.weights, dmax_m=DMAX)
    matcher = IndexMatcher(index)  # lives through the updates, reusing its scratch arrays
    for _ in range(steps):
        op = rng.integers(0, 3)
        current = index.subscriptions()
        if op == 0 and pending.size:
            k = min(pending.size, int(rng.integers(1, 200)))
            index.subscribe(subs.take(pending[:k]))
            pending = pending[k:]
        elif op == 1 and len(current):
            gone = rng.choice(current.ids, size=min(len(current), int(rng.integers(1, 100))),
                              replace=False)
            index.unsubscribe(gone)
        elif len(current):
            moved = rng.choice(current.ids, size=min(len(current), int(rng.integers(1, 100))),
                               replace=False)
            index.move(moved, _points(network, rng, moved.size))
        step = matcher.match(wl.messages)
        want = match_brute(network, index.subscriptions(), wl.messages, wl.weights,
                           dmax_m=DMAX)
        assert step.pairs() == want.pairs()
    current = index.subscriptions()
    want = match_brute(network, current, wl.messages, wl.weights, dmax_m=DMAX)
    got = IndexMatcher(index).match(wl.messages)
    fresh = IndexMatcher(architecture(spatial, current, wl.weights,
                                         dmax_m=DMAX)).match(wl.messages)
    assert got.pairs() == want.pairs() == fresh.pairs()
    np.testing.assert_array_equal(got.distance, want.distance)
    np.testing.assert_array_equal(got.distance, fresh.distance)
    np.testing.assert_array_equal(got.score, fresh.score)


def test_move_keeps_everything_but_the_location(andorra_setup) -> None:
    """Ids from the slots and from the delta, in any order, keep keywords, alpha, tau."""
    network, spatial, wl = andorra_setup
    subs = wl.subscriptions
    index = EnhancedIndex(spatial, subs.take(np.arange(500)), wl.weights, dmax_m=DMAX)
    index.subscribe(subs.take(np.arange(500, 700)))
    rng = np.random.default_rng(4)
    ids = rng.permutation(np.concatenate([subs.ids[rng.choice(500, 30, replace=False)],
                                          subs.ids[500 + rng.choice(200, 30, replace=False)]]))
    points = _points(network, rng, ids.size)
    index.move(ids, points)
    after = index.subscriptions()
    assert len(after) == 700
    row_after = {int(i): r for r, i in enumerate(after.ids)}
    row_before = {int(i): r for r, i in enumerate(subs.ids)}
    for k, sid in enumerate(ids.tolist()):
        a, b = row_after[sid], row_before[sid]
        assert after.points.edge[a] == points.edge[k]
        assert after.points.offset[a] == points.offset[k]
        assert after.alpha[a] == subs.alpha[b] and after.tau[a] == subs.tau[b]
        np.testing.assert_array_equal(after.kw_terms[after.kw_ptr[a]:after.kw_ptr[a + 1]],
                                      subs.kw_terms[subs.kw_ptr[b]:subs.kw_ptr[b + 1]])
    with pytest.raises(InvalidSubscriptionError, match="unknown subscription ids: 123456789"):
        index.move([int(ids[0]), 123456789], EdgePoints.of([0, 0], [0.0, 0.0]))
    assert len(index) == 700


def test_compaction_keeps_results(andorra_setup) -> None:
    _, spatial, wl = andorra_setup
    subs = wl.subscriptions
    index = EnhancedIndex(spatial, subs.take(np.arange(600)), wl.weights, dmax_m=DMAX)
    index.subscribe(subs.take(np.arange(600, len(subs))))
    index.unsubscribe(subs.ids[::5])
    before = IndexMatcher(index).match(wl.messages)
    index.compact()
    assert len(index.delta) == 0
    after = IndexMatcher(index).match(wl.messages)
    assert before.pairs() == after.pairs()
    np.testing.assert_array_equal(before.distance, after.distance)


@pytest.mark.parametrize("architecture", [EnhancedIndex, BasicIndex])
def test_save_and_load_give_identical_results(andorra_setup, architecture,
                                              tmp_path: Path) -> None:
    _, spatial, wl = andorra_setup
    index = architecture(spatial, wl.subscriptions.take(np.arange(800)), wl.weights,
                         dmax_m=DMAX)
    index.subscribe(wl.subscriptions.take(np.arange(800, len(wl.subscriptions))))
    want = IndexMatcher(index).match(wl.messages)
    path = index.save(tmp_path / "index.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.npz"]
    loaded = load_index(path)
    assert type(loaded) is architecture and loaded.network.directed
    got = IndexMatcher(loaded).match(wl.messages)
    assert got.pairs() == want.pairs()
    np.testing.assert_array_equal(got.distance, want.distance)
    np.testing.assert_array_equal(got.score, want.score)


@pytest.mark.parametrize("architecture", [EnhancedIndex, BasicIndex])
def test_load_restores_the_postings_without_building_them(
        andorra_setup, architecture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, spatial, wl = andorra_setup
    index = architecture(spatial, wl.subscriptions, wl.weights, dmax_m=DMAX)
    path = index.save(tmp_path / "index.npz")
    with monkeypatch.context() as m:
        def no_build(self: object) -> None:
            raise AssertionError("load_index rebuilt the postings")
        m.setattr(architecture, "_build_structures", no_build)
        loaded = load_index(path)
    want_arrays = index.structure_arrays()
    got_arrays = loaded.structure_arrays()
    assert set(got_arrays) == set(want_arrays)
    for name, value in want_arrays.items():
        np.testing.assert_array_equal(got_arrays[name], value, err_msg=name)
    # The restored index stays dynamic: the same updates give the same deliveries.
    gone = wl.subscriptions.ids[::7]
    for idx in (index, loaded):
        idx.unsubscribe(gone)
    a = IndexMatcher(index).match(wl.messages)
    b = IndexMatcher(loaded).match(wl.messages)
    assert a.pairs() == b.pairs() and len(a) > 0
    np.testing.assert_array_equal(a.distance, b.distance)

    # A file without the structures (as written before they were saved) is rebuilt...
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    old = tmp_path / "old.npz"
    np.savez(old, **{k: v for k, v in arrays.items() if not k.startswith("structure.")})
    rebuilt = load_index(old)
    c = IndexMatcher(rebuilt).match(wl.messages)
    want = IndexMatcher(architecture(spatial, wl.subscriptions, wl.weights,
                                        dmax_m=DMAX)).match(wl.messages)
    assert c.pairs() == want.pairs()
    # ... and one missing a structure says so.
    broken = tmp_path / "broken.npz"
    np.savez(broken, **{k: v for k, v in arrays.items() if k != "structure.edge_min_alpha"})
    with pytest.raises(ValueError, match=r"structure\.edge_min_alpha is missing"):
        load_index(broken)


def test_eia_file_with_edge_groups_in_edge_order_is_rebuilt(
        andorra_setup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Files saved before the edge groups were ordered by DNUB keep them in edge order;
    # Algorithm 1 stops a group at its first edge group below the cell's bound, which in
    # that order would lose deliveries. Loading must notice and rebuild the postings.
    _, spatial, wl = andorra_setup
    want = IndexMatcher(EnhancedIndex(spatial, wl.subscriptions, wl.weights,
                                         dmax_m=DMAX)).match(wl.messages)
    old = tmp_path / "old_order.npz"
    with monkeypatch.context() as m:  # build and save as the older code did
        m.setattr("roadpubsub.index.eia.build_posting_layout",
                  lambda **kw: build_posting_layout(**{**kw, "edges_by_value": False}))
        before = EnhancedIndex(spatial, wl.subscriptions, wl.weights, dmax_m=DMAX)
        before.save(old)
    assert not edge_groups_by_value(before.layout)  # the old order really differs here
    loaded = load_index(old)
    assert edge_groups_by_value(loaded.layout)
    got = IndexMatcher(loaded).match(wl.messages)
    assert got.pairs() == want.pairs() and len(got) > 0
    np.testing.assert_array_equal(got.distance, want.distance)
    # Without the check, the edge-ordered postings would lose deliveries.
    monkeypatch.setattr("roadpubsub.index.eia.edge_groups_by_value", lambda layout: True)
    unchecked = IndexMatcher(load_index(old)).match(wl.messages)
    assert unchecked.pairs() < want.pairs()


def test_bad_updates_name_the_ids(andorra_setup) -> None:
    _, spatial, wl = andorra_setup
    index = EnhancedIndex(spatial, wl.subscriptions.take(np.arange(10)), wl.weights,
                          dmax_m=DMAX)
    with pytest.raises(InvalidSubscriptionError, match="already in the index: 0"):
        index.subscribe(wl.subscriptions.take(np.arange(1)))
    with pytest.raises(InvalidSubscriptionError, match="unknown subscription ids: 999999"):
        index.unsubscribe([999999])
    with pytest.raises(InvalidSubscriptionError, match="unknown subscription ids: 888888"):
        index.move([888888], EdgePoints.of([0], [0.0]))
    assert len(index) == 10


def test_concat_subscriptions_keeps_rows() -> None:
    a = Subscriptions(np.array([1]), EdgePoints.of([0], [1.0]), np.array([0.5]),
                      np.array([0.5]), np.array([0, 2]), np.array([3, 4], dtype=np.int32))
    b = Subscriptions(np.array([2]), EdgePoints.of([1], [2.0]), np.array([0.1]),
                      np.array([0.9]), np.array([0, 1]), np.array([7], dtype=np.int32))
    c = concat_subscriptions([a, b])
    assert c.ids.tolist() == [1, 2]
    assert c.keywords(1).tolist() == [7]
    assert c.keywords(0).tolist() == [3, 4]
