"""The bucket-queue search (:func:`bucket_dijkstra_kernel`) and its shared
target setup, against ``scipy.sparse.csgraph.dijkstra`` on random small graphs.

The graphs are raw CSR arcs, not road networks, so that anything the kernel may meet can
be drawn: self loops, parallel arcs, zero-length arcs and zero cycles, arcs far shorter
than a bucket, lengths one ulp either side of a bucket boundary, sums that round across
one (0.1 + 0.2), seeds at distance 0 or repeated, duplicate targets with other limits,
limits equal to a distance or one ulp off it, dead ends, and entry arrays too small.

scipy relaxes ``dist[x] + w`` in float64 like the kernels do, and a node's float distance
is the least fixpoint of those sums whatever the scan order, so the comparisons are exact
(``==``), not approximate. Every array the kernel writes is a view into a larger buffer
whose tail is checked afterwards: a write past the end of an array is a failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra as scipy_dijkstra

from roadpubsub.roadnet.dijkstra_kernels import (
    BucketQueue,
    SearchGraph,
    SearchQuery,
    SearchWorkspace,
    _mark_targets,
    bucket_dijkstra_kernel,
    dijkstra_kernel,
    reset_kernel,
)
from roadpubsub.roadnet.distance import dead_ends
from roadpubsub.roadnet.network import Adjacency

INF = float("inf")
GUARD = 4  # guard cells after each array the kernel writes into
SENTINEL_I = -7_777_777
SENTINEL_F = -7.5e300

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

PROPERTY = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

#: Arc lengths: zero, far below a bucket, sums that round (0.1 + 0.2 != 0.3), exact bucket
#: multiples and the doubles next to them.
LENGTHS = (0.0, 0.0, 1e-12, 0.1, 0.2, 0.3, 0.7, 1.0, 2.5, 3.3, 10.0,
           float(np.nextafter(10.0, 0.0)), float(np.nextafter(10.0, 20.0)), 25.0)
WIDTHS = (0.1, 0.3, 1.0, 2.5, 10.0, 1e3)
SEED_DIST = (0.0, 0.0, 0.1, 0.30000000000000004, 5.0, 10.0)


# ----------------------------------------------------------------------------- helpers
@dataclass
class Graph:
    n: int
    tails: IntArray
    heads: IntArray
    lengths: FloatArray

    def csr(self) -> tuple[IntArray, npt.NDArray[np.int32], FloatArray]:
        order = np.argsort(self.tails, kind="stable")
        indptr = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.tails, minlength=self.n), out=indptr[1:])
        return (indptr, self.heads[order].astype(np.int32),
                self.lengths[order].astype(np.float64))


def scipy_distances(g: Graph, seeds: IntArray, seed_dist: FloatArray) -> FloatArray:
    """Multi-source distances from scipy: a super source joined to each seed at its
    distance (0 + d0 = d0 exactly); parallel arcs keep their shortest, self loops go."""
    best: dict[tuple[int, int], float] = {}
    for a, b, w in zip(g.tails.tolist(), g.heads.tolist(), g.lengths.tolist(), strict=True):
        if a != b:
            best[(a, b)] = min(best.get((a, b), INF), w)
    for s, d0 in zip(seeds.tolist(), seed_dist.tolist(), strict=True):
        best[(g.n, s)] = min(best.get((g.n, s), INF), d0)
    keys = list(best)
    rows = np.array([k[0] for k in keys], dtype=np.int64)
    cols = np.array([k[1] for k in keys], dtype=np.int64)
    vals = np.array([best[k] for k in keys], dtype=np.float64)
    # Explicit zeros of a sparse matrix are arcs for csgraph.
    m = csr_matrix((vals, (rows, cols)), shape=(g.n + 1, g.n + 1))
    dist: FloatArray = scipy_dijkstra(m, directed=True, indices=g.n)
    return dist[:g.n]


def slow_dead_ends(indptr: IntArray, indices: npt.NDArray[np.int32]) -> npt.NDArray[Any]:
    """Per node, the one neighbour all its arcs lead to, else -1 (written independently)."""
    n = indptr.size - 1
    out = np.full(n, -1, dtype=np.int32)
    for x in range(n):
        heads = set(indices[indptr[x]:indptr[x + 1]].tolist())
        if len(heads) == 1:
            out[x] = heads.pop()
    return out


def guarded(size: int, dtype: type, fill: float) -> npt.NDArray[Any]:
    return np.full(size + GUARD, fill, dtype=dtype)


@dataclass
class BucketRun:
    dist: FloatArray
    touched: IntArray
    n_scanned: int
    ok: bool


class Workspace:
    """The arrays of one bucket search, each a view of a guarded buffer."""

    def __init__(self, n: int, capacity: int, n_heads: int) -> None:
        self.n, self.capacity, self.n_heads = n, capacity, n_heads
        self._dist = np.full(n + GUARD, SENTINEL_F)
        self._dist[:n] = INF
        self._tws = np.full(n + GUARD, SENTINEL_F)
        self._tws[:n] = -INF
        self._touched = guarded(n, np.int64, SENTINEL_I)
        self._entry_d = guarded(capacity, np.float64, SENTINEL_F)
        self._entry_n = guarded(capacity, np.int64, SENTINEL_I)
        self._entry_next = guarded(capacity, np.int64, SENTINEL_I)
        self._heads = guarded(n_heads, np.int64, SENTINEL_I)
        self.dist = self._dist[:n]
        self.target_ws = self._tws[:n]

    def run(self, csr: tuple[IntArray, npt.NDArray[np.int32], FloatArray], seeds: IntArray,
            seed_dist: FloatArray, limit: float, targets: IntArray, limits: FloatArray,
            dead_end_to: npt.NDArray[Any], width: float) -> BucketRun:
        indptr, indices, weights = csr
        n_touched, n_scanned, ok = bucket_dijkstra_kernel(
            SearchGraph(indptr, indices, weights, dead_end_to),
            SearchQuery(seeds, seed_dist, limit, targets, limits),
            SearchWorkspace(self.dist, self.target_ws, self._entry_d[:self.capacity],
                            self._entry_n[:self.capacity], self._touched[:self.n]),
            BucketQueue(self._heads[:self.n_heads], self._entry_next[:self.capacity], width))
        self.check_guards()
        return BucketRun(self.dist.copy(), self._touched[:n_touched].copy(), n_scanned,
                         bool(ok))

    def check_guards(self) -> None:
        for buf in (self._dist, self._tws, self._entry_d):
            assert np.all(buf[-GUARD:] == SENTINEL_F), "write past the end of an array"
        for ibuf in (self._touched, self._entry_n, self._entry_next, self._heads):
            assert np.all(ibuf[-GUARD:] == SENTINEL_I), "write past the end of an array"

    def reset(self, run: BucketRun) -> None:
        reset_kernel(self.dist, run.touched, run.touched.size)
        assert np.all(self.dist == INF)


def heads_for(limit: float, width: float) -> int:
    """The fewest bucket heads the kernel accepts for ``limit``."""
    h = 2
    while not limit < (h - 1) * width:
        h += 1
    return h


def check_run(run: BucketRun, ws: Workspace, want: FloatArray, limit: float,
              targets: IntArray, limits: FloatArray) -> None:
    """What any finished search owes its caller, whatever its outcome."""
    assert np.all(ws.target_ws == -INF), "target_ws not restored"
    reached = np.flatnonzero(np.isfinite(run.dist)).tolist()
    assert sorted(reached) == sorted(run.touched.tolist()), "touched != reached nodes"
    assert len(set(run.touched.tolist())) == run.touched.size, "a node touched twice"
    finite = np.isfinite(run.dist)
    # A tentative distance is the length of some walk: never below the true distance, and
    # never recorded beyond the limit.
    assert np.all(run.dist[finite] >= want[finite])
    assert np.all(run.dist[finite] <= limit)
    if not run.ok:
        return
    if targets.size == 0:
        bounded = np.where(want <= limit, want, INF)
        np.testing.assert_array_equal(run.dist, bounded)
        return
    # Every target within its (largest) limit is final, at the exact float distance; any
    # other one is farther than its limit.
    largest: dict[int, float] = {}
    for t, lim in zip(targets.tolist(), limits.tolist(), strict=True):
        largest[t] = max(largest.get(t, -INF), lim)
    for t, lim in largest.items():
        if want[t] <= lim and want[t] <= limit:
            assert run.dist[t] == want[t], (t, lim, run.dist[t], want[t])
        else:
            assert not run.dist[t] <= min(lim, limit) or run.dist[t] == want[t]


# ----------------------------------------------------------------------------- strategies
@dataclass
class Case:
    g: Graph
    seeds: IntArray
    seed_dist: FloatArray
    targets: IntArray
    limits: FloatArray
    limit: float
    width: float
    capacity: int
    dead_ends: bool
    spare_heads: int

    def dead_end_to(self) -> npt.NDArray[Any]:
        indptr, indices, _ = self.g.csr()
        return (slow_dead_ends(indptr, indices) if self.dead_ends
                else np.empty(0, dtype=np.int32))


@st.composite
def searches(draw: st.DrawFn, *, small_capacity: bool = False) -> Case:
    n = draw(st.integers(1, 10), label="n")
    m = draw(st.integers(0, 3 * n), label="m")
    tails = np.array(draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m)),
                     dtype=np.int64)
    heads = np.array(draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m)),
                     dtype=np.int64)
    length = st.one_of(st.sampled_from(LENGTHS), st.floats(0.0, 30.0))
    lengths = np.array(draw(st.lists(length, min_size=m, max_size=m)), dtype=np.float64)
    g = Graph(n, tails, heads, lengths)
    k = draw(st.integers(1, 3), label="seeds")
    seeds = np.array(draw(st.lists(st.integers(0, n - 1), min_size=k, max_size=k)),
                     dtype=np.int64)
    seed_dist = np.array(draw(st.lists(st.sampled_from(SEED_DIST), min_size=k, max_size=k)),
                         dtype=np.float64)
    full = scipy_distances(g, seeds, seed_dist)
    n_t = draw(st.integers(0, 6), label="targets")
    targets = np.array(draw(st.lists(st.integers(0, n - 1), min_size=n_t, max_size=n_t)),
                       dtype=np.int64)
    limits = []
    for t in targets.tolist():
        options: list[float] = [0.0, 0.3, 5.0, 10.0, 20.0, 60.0]
        if np.isfinite(full[t]):
            d = float(full[t])
            # The distance itself (often), one ulp under it, one ulp over it.
            options += [d, d, d, float(np.nextafter(d, -INF)), float(np.nextafter(d, INF))]
        limits.append(draw(st.sampled_from(options)))
    tl = np.array(limits, dtype=np.float64)
    limit = max(float(tl.max(initial=0.0)), draw(st.sampled_from([0.0, 0.3, 10.0, 30.0, 100.0])))
    width = draw(st.sampled_from(WIDTHS), label="width")
    capacity = m + n + 2 + k
    if small_capacity:
        capacity = draw(st.integers(k, max(k, m + 2)), label="capacity")
    return Case(g, seeds, seed_dist, targets, tl, limit, width, capacity,
                draw(st.booleans(), label="dead_ends"), draw(st.integers(0, 3), label="spare"))


# ----------------------------------------------------------------------------- properties
def heap_search(case: Case, dist: FloatArray, target_ws: FloatArray) -> int:
    """The same search on the 4-ary heap kernel (the verification's fallback)."""
    indptr, indices, weights = case.g.csr()
    size = indices.size + case.g.n + 2 + case.seeds.size
    touched = np.empty(case.g.n, dtype=np.int64)
    n_touched, _ = dijkstra_kernel(
        SearchGraph(indptr, indices, weights, case.dead_end_to()),
        SearchQuery(case.seeds, case.seed_dist, case.limit, case.targets, case.limits),
        SearchWorkspace(dist, target_ws, np.empty(size), np.empty(size, dtype=np.int64),
                        touched))
    reached = touched[:n_touched].copy()
    return int(reached.size)


@PROPERTY
@given(case=searches())
def test_bucket_search_equals_scipy(case: Case) -> None:
    """Targets within their limits (or, without targets, every node within the search's
    limit) get scipy's float distance exactly; the workspace comes back clean; no array is
    written past its end, even with the fewest bucket heads the kernel accepts."""
    want = scipy_distances(case.g, case.seeds, case.seed_dist)
    n_heads = heads_for(case.limit, case.width) + case.spare_heads
    ws = Workspace(case.g.n, case.capacity, n_heads)
    run = ws.run(case.g.csr(), case.seeds, case.seed_dist, case.limit, case.targets,
                 case.limits, case.dead_end_to(), case.width)
    assert run.ok
    if case.targets.size == 0:  # a full search scans each node it reaches at least once
        assert run.n_scanned >= int(np.isfinite(run.dist).sum())
    check_run(run, ws, want, case.limit, case.targets, case.limits)
    ws.reset(run)
    # The heap kernel agrees on every target within its limit.
    dist = np.full(case.g.n, INF)
    tws = np.full(case.g.n, -INF)
    heap_search(case, dist, tws)
    assert np.all(tws == -INF)
    for t, lim in zip(case.targets.tolist(), case.limits.tolist(), strict=True):
        if want[t] <= min(lim, case.limit):
            assert dist[t] == run.dist[t] == want[t]


@PROPERTY
@given(case=searches(small_capacity=True))
def test_entry_overflow_reports_and_leaves_a_clean_workspace(case: Case) -> None:
    """With entry arrays too small the kernel either finishes exactly or says ok=False,
    never writes past the arrays, restores target_ws and lists every node it touched, so
    that resetting those and running the heap kernel on the same workspace is exact."""
    want = scipy_distances(case.g, case.seeds, case.seed_dist)
    ws = Workspace(case.g.n, case.capacity, heads_for(case.limit, case.width))
    run = ws.run(case.g.csr(), case.seeds, case.seed_dist, case.limit, case.targets,
                 case.limits, case.dead_end_to(), case.width)
    check_run(run, ws, want, case.limit, case.targets, case.limits)
    ws.reset(run)
    heap_search(case, ws.dist, ws.target_ws)
    for t, lim in zip(case.targets.tolist(), case.limits.tolist(), strict=True):
        if want[t] <= min(lim, case.limit):
            assert ws.dist[t] == want[t]
    assert np.all(ws.target_ws == -INF)


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases=st.lists(searches(), min_size=2, max_size=5), width=st.sampled_from(WIDTHS))
def test_reused_buffers_carry_nothing_between_searches(cases: list[Case],
                                                       width: float) -> None:
    """One set of bucket heads and entry arrays serves searches one after another (as in
    the matcher), whatever an earlier search left in them (it may have stopped early with
    entries still queued, or overflowed)."""
    heads = np.empty(heads_for(100.0, width) + 1, dtype=np.int64)
    capacity = 24
    entry_d = np.empty(capacity)
    entry_n = np.empty(capacity, dtype=np.int64)
    entry_next = np.empty(capacity, dtype=np.int64)
    for case in cases:
        limit = min(case.limit, 100.0)
        indptr, indices, weights = case.g.csr()
        want = scipy_distances(case.g, case.seeds, case.seed_dist)
        dist = np.full(case.g.n, INF)
        tws = np.full(case.g.n, -INF)
        touched = np.empty(case.g.n, dtype=np.int64)
        de: npt.NDArray[Any] = dead_ends(Adjacency(indptr, indices, weights,
                                                   np.zeros(indices.size, dtype=np.int32)))
        np.testing.assert_array_equal(de, slow_dead_ends(indptr, indices))
        n_touched, _, ok = bucket_dijkstra_kernel(
            SearchGraph(indptr, indices, weights, de),
            SearchQuery(case.seeds, case.seed_dist, limit, case.targets, case.limits),
            SearchWorkspace(dist, tws, entry_d, entry_n, touched),
            BucketQueue(heads, entry_next, width))
        assert np.all(tws == -INF)
        if ok:
            for t, lim in zip(case.targets.tolist(), case.limits.tolist(), strict=True):
                if want[t] <= min(lim, limit):
                    assert dist[t] == want[t]
        reset_kernel(dist, touched, n_touched)
        assert np.all(dist == INF)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from([-INF, 0.0, 1.0, 2.5, 7.0])),
                min_size=1, max_size=10))
def test_mark_targets_keeps_each_nodes_largest_limit(pairs: list[tuple[int, float]]) -> None:
    """One stop-test entry per target node, carrying that node's largest limit; popping
    gives the limits largest first."""
    nodes = np.array([p[0] for p in pairs], dtype=np.int64)
    limits = np.array([p[1] for p in pairs], dtype=np.float64)
    tws = np.full(6, -INF)
    keys, heap_nodes, size = _mark_targets(nodes, limits, tws)
    largest: dict[int, float] = {}
    for t, lim in pairs:
        largest[t] = max(largest.get(t, -INF), lim)
    for t in range(6):
        assert tws[t] == largest.get(t, -INF)
    got = sorted(zip((-keys[:size]).tolist(), heap_nodes[:size].tolist(), strict=True))
    # Each node once per listing of its largest limit (duplicates of that limit repeat).
    want = sorted((lim, t) for t, lim in pairs if lim == largest[t])
    assert got == want
    assert keys[0] == min(keys[:size].tolist())  # heap order: largest limit on top


# ----------------------------------------------------------------------------- unit cases
def _line(arcs: list[tuple[int, int, float]], n: int) -> Graph:
    return Graph(n, np.array([a for a, _, _ in arcs], dtype=np.int64),
                 np.array([b for _, b, _ in arcs], dtype=np.int64),
                 np.array([w for _, _, w in arcs], dtype=np.float64))


def _run_case(g: Graph, seeds: list[int], seed_dist: list[float], limit: float,
              targets: list[int], limits: list[float], width: float,
              *, dead_end_skip: bool = False, capacity: int | None = None
              ) -> tuple[BucketRun, FloatArray, Workspace]:
    s = np.array(seeds, dtype=np.int64)
    sd = np.array(seed_dist, dtype=np.float64)
    csr = g.csr()
    de = slow_dead_ends(csr[0], csr[1]) if dead_end_skip else np.empty(0, dtype=np.int32)
    de = np.asarray(de)
    ws = Workspace(g.n, capacity or (g.tails.size + g.n + 2 + s.size), heads_for(limit, width))
    tg = np.array(targets, dtype=np.int64)
    tl = np.array(limits, dtype=np.float64)
    run = ws.run(csr, s, sd, limit, tg, tl, de, width)
    want = scipy_distances(g, s, sd)
    check_run(run, ws, want, limit, tg, tl)
    return run, want, ws


def test_sum_rounding_across_a_bucket_boundary() -> None:
    """0.1 + 0.2 = 0.30000000000000004 lands in bucket 3 of width 0.1, the direct 0.3 in
    bucket 2 (0.3 / 0.1 = 2.9999999999999996): the later, longer arc must still win, and
    a target limit of exactly 0.3 must see it."""
    # 0 -> 1 -> 2 is 0.1 + 0.2; 0 -> 3 -> 2 is 0.0 + 0.3; 2 -> 4 is 0.0.
    g = _line([(0, 1, 0.1), (1, 2, 0.2), (0, 3, 0.0), (3, 2, 0.3), (2, 4, 0.0)], 5)
    for limit in (0.3, 0.30000000000000004, 1.0):
        run, want, _ = _run_case(g, [0], [0.0], limit, [2, 4], [0.3, 0.3], 0.1)
        assert run.ok and want[2] == 0.3
        assert run.dist[2] == 0.3 and run.dist[4] == 0.3
    # Only the rounded-up route: 0.30000000000000004 is past a limit of 0.3.
    g2 = _line([(0, 1, 0.1), (1, 2, 0.2)], 3)
    run, want, _ = _run_case(g2, [0], [0.0], 1.0, [2], [0.3], 0.1)
    assert want[2] == 0.30000000000000004 and run.dist[2] > 0.3
    run, _, _ = _run_case(g2, [0], [0.0], 1.0, [2], [0.30000000000000004], 0.1)
    assert run.dist[2] == 0.30000000000000004


@pytest.mark.parametrize("width", [0.1, 1.0, 10.0, 100.0])
def test_zero_cycles_and_label_correction_inside_one_bucket(width: float) -> None:
    """A zero-length cycle and a long first path improved later in the same bucket:
    entries come out last in first out, so nodes are rescanned with better labels."""
    arcs = [(0, 1, 0.0), (1, 2, 0.0), (2, 0, 0.0), (0, 3, 9.0), (3, 4, 0.0),
            (1, 5, 0.05), (5, 3, 0.05), (4, 6, 0.0), (6, 4, 0.0), (3, 3, 0.0)]
    g = _line(arcs, 7)
    run, want, _ = _run_case(g, [0], [0.0], 20.0, [], [], width)
    assert run.ok and want[3] == 0.1 and run.dist[6] == 0.1
    run, want, _ = _run_case(g, [0], [0.0], 20.0, [6], [0.1], width)
    assert run.dist[6] == want[6] == 0.1


def test_duplicate_targets_keep_the_largest_limit() -> None:
    """Node 2 listed with limits 5 and 50 at distance 30: it must be settled exactly."""
    g = _line([(0, 1, 10.0), (1, 2, 20.0), (0, 3, 1.0)], 4)
    for order in ([5.0, 50.0], [50.0, 5.0]):
        run, want, _ = _run_case(g, [0], [0.0], 50.0, [2, 3, 2], [order[0], 1.0, order[1]],
                                 10.0)
        assert run.dist[2] == want[2] == 30.0


def test_a_target_beyond_its_limit_does_not_stop_a_farther_limit() -> None:
    """Node 1 (limit 1, distance 10) is unreachable within its limit; node 2 (limit 40)
    must still be settled, and a target never reached stays harmless."""
    g = _line([(0, 1, 10.0), (1, 2, 25.0)], 4)
    run, want, _ = _run_case(g, [0], [0.0], 40.0, [1, 2, 3], [1.0, 40.0, 40.0], 10.0)
    assert run.dist[2] == want[2] == 35.0
    # Limit exactly the distance, with the distance exactly on a bucket boundary.
    run, _, _ = _run_case(g, [0], [0.0], 35.0, [2], [35.0], 5.0)
    assert run.dist[2] == 35.0
    run, _, _ = _run_case(g, [0], [0.0], 35.0, [2], [float(np.nextafter(35.0, 0.0))], 5.0)
    assert run.dist[2] > float(np.nextafter(35.0, 0.0))


def test_stop_waits_for_the_bucket_of_the_limit() -> None:
    """With every limit in bucket 1 (width 10), a target at exactly 19.999... first seen at
    25 must be corrected before the search stops at bucket 2."""
    below = float(np.nextafter(20.0, 0.0))
    g = _line([(0, 2, 25.0), (0, 1, 10.0), (1, 2, below - 10.0)], 3)
    run, want, _ = _run_case(g, [0], [0.0], 30.0, [2], [below], 10.0)
    assert run.dist[2] == want[2] <= below


def test_seeds_at_zero_repeated_and_on_targets() -> None:
    g = _line([(0, 1, 5.0), (2, 1, 1.0), (1, 3, 0.0)], 4)
    run, want, _ = _run_case(g, [0, 2, 2, 1], [0.0, 3.0, 0.0, 9.0], 20.0, [1, 3, 2],
                             [2.0, 1.0, 0.0], 10.0)
    assert want[1] == 1.0 and run.dist[1] == 1.0 and run.dist[3] == 1.0
    assert run.dist[2] == 0.0
    # Two seeds at the same node and distance: one entry is enough, either is exact.
    run, _, _ = _run_case(g, [0, 0], [0.0, 0.0], 20.0, [3], [20.0], 0.1)
    assert run.dist[3] == 5.0


def test_dead_end_skipping_spares_targets_and_seeds() -> None:
    """3 and 4 are dead ends of 1 (every arc of theirs leads back to 1); 4 is a target
    and must be reached; 3 is not and may be left out, but it must never hide a node
    behind it. A dead-end seed keeps its seed distance."""
    arcs = [(0, 1, 2.0), (1, 0, 2.0), (1, 3, 1.0), (3, 1, 1.0), (1, 4, 0.0), (4, 1, 0.0),
            (4, 1, 7.0), (0, 5, 30.0), (5, 0, 30.0)]
    g = _line(arcs, 6)
    run, want, _ = _run_case(g, [0], [0.0], 40.0, [4, 5], [40.0, 40.0], 1.0,
                             dead_end_skip=True)
    assert run.dist[4] == want[4] == 2.0 and run.dist[5] == 30.0
    assert run.dist[3] in (INF, want[3])
    # Seeded on dead end 3 (far) and on 0: node 3 keeps what it can truly reach.
    run, want, _ = _run_case(g, [3, 0], [8.0, 0.0], 40.0, [3, 4], [40.0, 40.0], 1.0,
                             dead_end_skip=True)
    assert run.dist[4] == 2.0
    assert run.dist[3] == want[3] == 3.0


def test_too_few_heads_is_refused_exactly_at_the_boundary() -> None:
    """limit < (heads - 1) * width is required: 30 m in buckets of 10 m needs 5 heads."""
    g = _line([(0, 1, 10.0), (1, 2, 20.0)], 3)
    csr = g.csr()
    seeds, zero = np.array([0], dtype=np.int64), np.zeros(1)
    tg, tl = np.array([2], dtype=np.int64), np.array([30.0])
    for n_heads, ok_expected in ((4, False), (5, True)):
        ws = Workspace(3, 16, n_heads)
        run = ws.run(csr, seeds, zero, 30.0, tg, tl, np.empty(0, dtype=np.int32), 10.0)
        assert run.ok is ok_expected
        assert np.all(ws.target_ws == -INF)
        if ok_expected:
            assert run.dist[2] == 30.0
        else:
            assert run.touched.size == 0 and np.all(run.dist == INF)
    # An infinite or NaN limit is refused too (the heap kernel takes those).
    for bad in (INF, float("nan")):
        ws = Workspace(3, 16, 8)
        run = ws.run(csr, seeds, zero, bad, tg, tl, np.empty(0, dtype=np.int32), 10.0)
        assert not run.ok and np.all(ws.target_ws == -INF) and np.all(run.dist == INF)


def test_more_seeds_than_entries_does_not_write_past_the_arrays() -> None:
    g = _line([(0, 1, 1.0)], 3)
    ws = Workspace(3, 2, 8)
    run = ws.run(g.csr(), np.array([0, 1, 2], dtype=np.int64), np.zeros(3), 5.0,
                 np.empty(0, dtype=np.int64), np.empty(0), np.empty(0, dtype=np.int32), 1.0)
    assert not run.ok
