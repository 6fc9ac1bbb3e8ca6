"""The service's live route and area store under changes (issue 32).

:class:`~roadpubsub.service.live_sets.LiveSets` answers from a base matcher built over an
earlier version of the rows, minus the changed ids, plus a delta matcher over the changed
rows; new bases are built on a worker thread. After every step of a random sequence of
subscribes, moves, unsubscribes and re-subscribes under an old id (on Andorra, threshold
and boolean rows), its deliveries must equal those of matchers built whole over the rows
as they are, bit for bit; and a small change must not rebuild the base.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from roadpubsub.index.kinds import KIND_BOOLEAN, KIND_CODES, KIND_THRESHOLD
from roadpubsub.index.model import Messages
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.roadnet.errors import InvalidLocationError
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.segment_sets import SegmentSet, route_through_points
from roadpubsub.service.live_sets import LiveSets

VOCAB = [f"t{i}" for i in range(5)]
DMAX = 800.0


class _World:
    def __init__(self, net: RoadNetwork, seed: int) -> None:
        self.net = net
        self.rng = np.random.default_rng(seed)
        labels = net.components()[1]
        self.main = np.flatnonzero(labels[net.edge_u] == np.bincount(labels).argmax())
        self.spatial = SpatialIndex.build(net)
        self.weights = TermWeights({t: 1.0 + i for i, t in enumerate(VOCAB)})

    def route(self) -> SegmentSet:
        while True:
            k = int(self.rng.integers(2, 12))
            e = self.rng.choice(self.main, k)
            try:
                return route_through_points(
                    self.net, EdgePoints.of(e, self.rng.random(k) * self.net.edge_length[e]))
            except InvalidLocationError:  # a one-way dead end: draw again
                continue

    def store(self, **options: Any) -> LiveSets:
        return LiveSets(self.net, self.spatial, self.weights, dmax_m=DMAX, **options)

    def add(self, stores: list[LiveSets], ids: list[int]) -> None:
        n = len(ids)
        kind = np.where(self.rng.random(n) < 0.3, KIND_CODES[KIND_BOOLEAN],
                        KIND_CODES[KIND_THRESHOLD]).astype(np.int8)
        terms = [self.rng.choice(len(VOCAB), int(self.rng.integers(1, 3)), replace=False)
                 for _ in range(n)]
        kw_ptr = np.r_[0, np.cumsum([t.size for t in terms])].astype(np.int64)
        kw_terms = np.concatenate(terms).astype(np.int32)
        # alpha in {0, 1} and tau at round values: scores land exactly on tau
        alpha = self.rng.choice([0.0, 0.5, 1.0], n)
        tau = self.rng.choice([0.25, 0.5, 1.0], n)
        radius = self.rng.random(n) * DMAX
        sets = [self.route() for _ in range(n)]
        for s in stores:
            s.add(np.asarray(ids, np.int64), kind, sets, kw_ptr, kw_terms,
                  np.where(kind == KIND_CODES[KIND_BOOLEAN], np.nan, alpha),
                  np.where(kind == KIND_CODES[KIND_BOOLEAN], np.nan, tau),
                  np.where(kind == KIND_CODES[KIND_BOOLEAN], radius, np.nan))

    def messages(self, store: LiveSets, k: int) -> Messages:
        """``k`` messages on live routes (dN 0) and ``k`` at random places."""
        live = [store.rows[i].set for i in sorted(store.rows)]
        on = [live[int(j)] for j in self.rng.integers(0, len(live), k)]
        at = [int(self.rng.integers(0, len(s))) for s in on]
        edge = np.r_[[s.edge[j] for s, j in zip(on, at, strict=True)],
                     self.rng.choice(self.main, k)]
        off = np.r_[[s.start[j] + self.rng.random() * (s.end[j] - s.start[j])
                     for s, j in zip(on, at, strict=True)],
                    self.rng.random(k) * self.net.edge_length[self.rng.choice(self.main, k)]]
        off = np.minimum(off, self.net.edge_length[edge])
        return Messages.from_rows(
            ids=np.arange(2 * k), points=EdgePoints.of(edge, off),
            keywords=[list(self.rng.choice(VOCAB, 3, replace=False)) for _ in range(2 * k)],
            weights=self.weights)


def assert_same(got: Deliveries, want: Deliveries) -> None:
    """The same pairs in the same order, with bit-identical distances and scores."""
    for column in ("message_id", "subscription_id", "distance", "score"):
        np.testing.assert_array_equal(getattr(got, column), getattr(want, column))


def _deliveries(store: LiveSets, messages: Messages) -> Deliveries:
    parts = [m.match(messages) for m in store.matchers() if m is not None]
    return Deliveries.concat([p for p in parts if len(p)])


def _whole(world: _World, store: LiveSets) -> LiveSets:
    """A store built whole over ``store``'s rows as they are now."""
    fresh = world.store(sync_pieces=10**12)
    fresh.load_arrays(store.arrays(), where="test")
    return fresh


@pytest.mark.parametrize("background", [False, True])
def test_changes_answered_by_base_and_delta_equal_a_whole_build(
        andorra: RoadNetwork, background: bool) -> None:
    """Random subscribes, moves, unsubscribes and re-subscribes of old ids, each followed
    by messages on the routes and elsewhere: the layered store equals a whole build; the
    base is rebuilt only when the delta outgrows it, and changes made while a new base
    builds stay answered by the delta."""
    world = _World(andorra, seed=11)
    live = world.store(sync_pieces=0, delta_share=0.3, background=background)
    world.add([live], list(range(1, 41)))
    next_id, compared, layered = 41, 0, 0
    for step in range(24):
        ids = sorted(live.rows)
        action = step % 4
        if action == 0:
            world.add([live], [next_id, next_id + 1])
            next_id += 2
        elif action == 1:
            moved = world.rng.choice(ids, 3, replace=False)
            live.move(np.asarray(moved, np.int64), [world.route() for _ in moved])
        elif action == 2:
            gone = np.asarray(world.rng.choice(ids, 2, replace=False), np.int64)
            live.remove(gone)
        else:  # an id removed earlier subscribes again, with another route
            gone = int(world.rng.choice(ids))
            live.remove(np.asarray([gone], np.int64))
            world.add([live], [gone])
        messages = world.messages(live, 12)
        got = _deliveries(live, messages)
        layered += bool(live.changed())
        assert_same(got, _deliveries(_whole(world, live), messages))
        compared += len(got)
    live.finish()
    messages = world.messages(live, 12)
    assert_same(_deliveries(live, messages), _deliveries(_whole(world, live), messages))
    assert compared > 100  # deliveries were compared, not empty sets
    assert layered >= 12  # most steps were answered by a base and a delta
    assert 1 < live.builds < 12 and live.delta_builds >= 12


def test_a_small_change_does_not_rebuild_the_base(andorra: RoadNetwork) -> None:
    """Past ``sync_pieces``, one move builds a delta of one row, not a new base."""
    world = _World(andorra, seed=3)
    live = world.store(sync_pieces=0, delta_share=0.5, background=False)
    world.add([live], list(range(1, 31)))
    messages = world.messages(live, 5)
    _deliveries(live, messages)
    assert (live.builds, live.delta_builds) == (1, 0)
    live.move(np.asarray([7], np.int64), [world.route()])
    assert_same(_deliveries(live, messages), _deliveries(_whole(world, live), messages))
    assert (live.builds, live.delta_builds) == (1, 1)
    deltas = [m.delta.subs.ids.tolist() for m in live.matchers()
              if m is not None and m.delta is not None]
    assert deltas == [[7]]


def test_rows_changed_while_a_base_builds_stay_in_the_delta(andorra: RoadNetwork,
                                                            monkeypatch: Any) -> None:
    """A new base built from a copy of the rows is adopted after more changes came: the
    rows changed meanwhile are retired from it and answered by the delta."""
    world = _World(andorra, seed=8)
    live = world.store(sync_pieces=0, delta_share=0.0, background=True)
    world.add([live], list(range(1, 21)))
    _deliveries(live, world.messages(live, 3))  # the first base, in line
    gate = threading.Event()
    build = LiveSets._build_base

    def held(self: LiveSets, rows: Any) -> Any:
        gate.wait(60)
        return build(self, rows)

    monkeypatch.setattr(LiveSets, "_build_base", held)
    live.move(np.asarray([4], np.int64), [world.route()])
    _deliveries(live, world.messages(live, 3))  # the delta passes 0 %: a build starts
    assert live.building
    live.move(np.asarray([4, 9], np.int64), [world.route(), world.route()])
    live.remove(np.asarray([12], np.int64))
    gate.set()
    live.finish()  # adopts the new base
    messages = world.messages(live, 15)
    got = _deliveries(live, messages)
    assert live.builds >= 2 and live.changed() >= {4, 9, 12}  # a third may be under way
    assert_same(got, _deliveries(_whole(world, live), messages))
