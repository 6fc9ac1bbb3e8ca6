"""Exactness of Algorithms 1 and 2 at their edges, against independent computations.

* Algorithm 2's :func:`verify_candidates` (bucket queue, heap fallback) against the
  reference arithmetic (a full heap search, as the brute-force matcher runs it) and an
  independent networkx graph with every point split into its edge;
* Algorithm 1's :func:`eia_candidates` (it stops an inverted list at the first edge group
  below the cell's bound, and an edge group at the first posting below the edge's bound)
  against a plain-Python port of the same tests that never stops early, on indexes
  reached by every path that builds or changes postings: build, subscribe, unsubscribe,
  move, compaction, save and load;
* the DNUB order of edge groups those stops rely on, checked independently of
  :func:`roadpubsub.index.postings.edge_groups_by_value`.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from split_graph import split_graph
from strategies import assert_same, random_points, tiny_network

from roadpubsub.index.base import SubscriptionIndex
from roadpubsub.index.bia import BasicIndex
from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.model import Messages, Subscriptions
from roadpubsub.index.postings import build_posting_layout
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.store import load_index
from roadpubsub.index.terms import TermWeights
from roadpubsub.pruning.algorithm1 import cell_lower_bounds, edge_record, eia_candidates
from roadpubsub.pruning.algorithm2 import VerifySearch, verify_candidates
from roadpubsub.pruning.brute import match_brute
from roadpubsub.pruning.indexed import IndexMatcher
from roadpubsub.pruning.kernel_args import (
    BoundArrays,
    EdgeArrays,
    EiaCellArrays,
    GraphArrays,
    LayoutArrays,
    MatchLimits,
    MessageProbe,
    ScratchArrays,
    SlotArrays,
)
from roadpubsub.roadnet.dijkstra_kernels import (
    BucketQueue,
    SearchGraph,
    SearchQuery,
    SearchWorkspace,
    bucket_dijkstra_kernel,
    reset_kernel,
)
from roadpubsub.roadnet.distance import NodeSearch, dead_ends, distances_to_point
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork

INF = float("inf")
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

HEAVY = settings(max_examples=300, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ============================================================================ Algorithm 2
def split_graph_distances(net: RoadNetwork, target: EdgePoints, sources: EdgePoints
                          ) -> FloatArray:
    """Distance from each source point to the target point, written independently of
    roadpubsub.roadnet.distance: every point becomes a node splitting its edge (networkx)."""
    on_edge: dict[int, list[tuple[float, object]]] = {}
    for i in range(len(sources)):
        on_edge.setdefault(int(sources.edge[i]), []).append(
            (float(sources.offset[i]), ("s", i)))
    on_edge.setdefault(int(target.edge[0]), []).append((float(target.offset[0]), ("m",)))
    g = split_graph(net, on_edge)
    dist = nx.single_source_dijkstra_path_length(g.reverse(copy=False), ("m",))
    return np.array([dist.get(("s", i), INF) for i in range(len(sources))])


def verify(net: RoadNetwork, m_edge: int, m_offset: float, cand: EdgePoints,
           limits: FloatArray, *, width: float = 10.0, n_heads: int | None = None,
           search: NodeSearch | None = None) -> tuple[FloatArray, NodeSearch]:
    """Run :func:`verify_candidates` as the matcher does, on the network's own edges."""
    search = search or NodeSearch(net, reverse=True)
    adj = search.adjacency
    net_arrays = GraphArrays(adj.indptr, adj.indices, adj.weights, net.edge_u, net.edge_v,
                             net.edge_length, net.edge_twoway, dead_ends(adj))
    ws = search.workspace()
    heap_d = ws.heap_d
    if n_heads is None:
        n_heads = int(float(limits.max(initial=0.0)) / width) + 3
    buckets = BucketQueue(np.empty(n_heads, dtype=np.int64),
                          np.empty(heap_d.size, dtype=np.int64), width)
    n = len(cand)
    out = np.full(n + 1, -1.0)
    verify_candidates(VerifySearch(net_arrays, ws, buckets, np.empty(2 * n + 2, dtype=np.int64),
                                   np.empty(2 * n + 2)),
                      m_edge, m_offset,
                      np.ascontiguousarray(cand.edge, dtype=np.int32),
                      np.ascontiguousarray(cand.offset, dtype=np.float64),
                      np.ascontiguousarray(limits, dtype=np.float64), n, out)
    assert out[n] == -1.0  # nothing written past the candidates
    # The workspace comes back clean for the next message.
    assert np.all(ws.dist == INF)
    assert np.all(ws.target_ws == -INF)
    return out[:n], search


def expected(net: RoadNetwork, m: EdgePoints, cand: EdgePoints, limits: FloatArray
             ) -> tuple[FloatArray, FloatArray]:
    """(reference distances, what verification must return for these limits)."""
    ref = distances_to_point(net, m, cand)
    return ref, np.where(ref <= limits, ref, INF)


@st.composite
def verifications(draw: st.DrawFn) -> tuple[RoadNetwork, EdgePoints, EdgePoints, FloatArray]:
    net = tiny_network(draw)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    k = draw(st.integers(1, 12))
    m = random_points(rng, net, 1)
    cand = random_points(rng, net, k)
    # Some candidates on the message's edge (the direct run along it).
    same = rng.random(k) < 0.3
    edge = np.where(same, m.edge[0], cand.edge)
    off = np.where(same, rng.choice([0.0, 1.0, float(rng.random())], k)
                   * net.edge_length[edge], cand.offset)
    cand = EdgePoints.of(edge, off)
    ref = distances_to_point(net, m, cand)
    limits = np.empty(k)
    for i in range(k):
        options = [0.0, 10.0, 250.0, 3000.0]
        if np.isfinite(ref[i]):
            d = float(ref[i])
            options += [d, d, float(np.nextafter(d, -INF)), float(np.nextafter(d, INF)),
                        d * 0.5]
        limits[i] = max(0.0, draw(st.sampled_from(options)))
    return net, m, cand, limits


@HEAVY
@given(case=verifications(),
       width=st.sampled_from([0.05, 1.0, 10.0, 37.5, 1e5]),
       heads=st.sampled_from(["enough", "too few"]))
def test_verification_equals_the_reference_distances(case, width: float, heads: str) -> None:
    """Every candidate within its limit gets the reference matcher's distance to the bit,
    every other one inf; with limits one ulp under and over the distance, many bucket
    widths, and too few buckets (the heap fallback). The reference itself agrees with an
    independent split-edge networkx graph."""
    net, m, cand, limits = case
    ref, want = expected(net, m, cand, limits)
    got, _ = verify(net, int(m.edge[0]), float(m.offset[0]), cand, limits, width=width,
                    n_heads=1 if heads == "too few" else None)
    np.testing.assert_array_equal(got, want)
    independent = split_graph_distances(net, m, cand)
    assert np.array_equal(np.isinf(independent), np.isinf(ref))
    finite = np.isfinite(ref)
    np.testing.assert_array_equal(ref[finite], independent[finite])


def label_correcting_trap(k: int) -> RoadNetwork:
    """A network on which a bucket holding everything rescans a chain once per spoke.

    The message sits on pendant node r, 1 m from node 0, which reaches hub h through k
    spokes 0 - s_i - h, the i-th dearer than the one before it; the search queues them in
    that order and, last in first out, scans the dearest first, and every improvement of
    h runs down the chain h - c_1 - ... - c_k again: about k * k entries against some
    9 k arcs and nodes, so the entry arrays overflow and the heap search must take over.
    The pendant edge (r, 0) is the last edge.
    """
    edges: list[tuple[int, int, float]] = []
    hub = k + 1
    for i in range(1, k + 1):
        edges.append((0, i, 0.01 * i))            # spoke i: 0 - s_i
        edges.append((i, hub, 0.001 * i))         # s_i - h
    for j in range(k):
        edges.append((hub + j, hub + j + 1, 0.001))  # the chain
    root = hub + k + 1
    edges.append((root, 0, 1.0))
    n = root + 1
    angle = np.linspace(0, 2 * np.pi, n, endpoint=False)
    return RoadNetwork.from_arrays(
        node_ids=np.arange(n), node_lon=10 + 0.001 * np.cos(angle),
        node_lat=50 + 0.001 * np.sin(angle),
        edge_u_ids=[u for u, _, _ in edges], edge_v_ids=[v for _, v, _ in edges],
        edge_length=[w for _, _, w in edges], directed=False, name="trap")


@pytest.mark.parametrize("k", [6, 12, 20])
def test_verification_falls_back_to_the_heap_when_entries_overflow(k: int) -> None:
    net = label_correcting_trap(k)
    m_edge = net.n_edges - 1
    # The trap does overflow the bucket kernel at its real entry capacity, seeded as
    # the verification seeds it (r at 0 m, node 0 at 1 m).
    search = NodeSearch(net, reverse=True)
    adj = search.adjacency
    dist, tws, heap_d, heap_n, touched = search.workspace()
    seeds = np.array([net.edge_u[m_edge], net.edge_v[m_edge]], dtype=np.int64)
    n_touched, _, ok = bucket_dijkstra_kernel(
        SearchGraph(adj.indptr, adj.indices, adj.weights, np.empty(0, dtype=np.int32)),
        SearchQuery(seeds, np.array([0.0, 1.0]), 100.0, np.empty(0, dtype=np.int64),
                    np.empty(0)),
        SearchWorkspace(dist, tws, heap_d, heap_n, touched),
        BucketQueue(np.empty(4, dtype=np.int64), np.empty(heap_d.size, dtype=np.int64), 1e4))
    assert not ok
    reset_kernel(dist, touched, n_touched)
    rng = np.random.default_rng(k)
    cand = random_points(rng, net, 3 * k)
    m = EdgePoints.of([m_edge], [0.0])  # on r
    ref = distances_to_point(net, m, cand)
    assert np.all(np.isfinite(ref))
    for limits in (np.full(len(cand), 100.0), ref.copy(), np.nextafter(ref, -INF),
                   rng.random(len(cand)) * float(ref.max())):
        for width in (1e4, 10.0, 0.001):
            got, _ = verify(net, m_edge, 0.0, cand, limits, width=width, search=search)
            np.testing.assert_array_equal(got, np.where(ref <= limits, ref, INF))


def test_verification_on_zero_length_and_one_way_edges() -> None:
    """A zero-length one-way edge in the middle, points at both of its ends, the message
    at the full length of a one-way edge (it stands on v)."""
    edges = [(0, 1, 50.0), (1, 2, 0.0), (2, 3, 30.0), (3, 0, 40.0), (1, 3, 0.0)]
    angle = np.linspace(0, 2 * np.pi, 4, endpoint=False)
    net = RoadNetwork.from_arrays(
        node_ids=np.arange(4), node_lon=10 + 0.001 * np.cos(angle),
        node_lat=50 + 0.001 * np.sin(angle), edge_u_ids=[e[0] for e in edges],
        edge_v_ids=[e[1] for e in edges], edge_length=[e[2] for e in edges],
        edge_oneway=[True, True, False, True, False], directed=True, name="z")
    pts = EdgePoints.of([0, 0, 1, 1, 2, 3, 4, 4], [0.0, 50.0, 0.0, 0.0, 30.0, 40.0, 0.0, 0.0])
    for j in range(len(pts)):
        m = pts[j]
        ref = distances_to_point(net, m, pts)
        independent = split_graph_distances(net, m, pts)
        np.testing.assert_array_equal(ref, independent)
        for limits in (np.full(len(pts), 200.0), np.where(np.isfinite(ref), ref, 0.0)):
            for width in (0.5, 10.0, 1e3):
                got, _ = verify(net, int(m.edge[0]), float(m.offset[0]), pts, limits,
                                width=width)
                np.testing.assert_array_equal(got, np.where(ref <= limits, ref, INF))


# ============================================================================ Algorithm 1
def eia_arguments(index: EnhancedIndex, messages: Messages, i: int
                  ) -> tuple[tuple[Any, ...], IntArray]:
    """The arguments :func:`eia_candidates` gets for message i (as in the matcher),
    without the scratch and output arrays; and the message's term slots."""
    sp = index.spatial
    mf = sp.facts(messages.points)
    c = int(mf.cell[i])
    slots = np.array([0, *(int(t) + 1 for t in messages.keywords(i))], dtype=np.int64)
    lay = index.layout
    D_t = np.ascontiguousarray(sp.bounds.D.T)
    eta_t = np.ascontiguousarray(sp.bounds.eta_minus.T)
    args = (c, float(mf.x[i]), float(mf.y[i]), float(mf.din_in[i]), slots,
            float(sp.bounds.kappa), D_t[c], eta_t[c], sp.cells.bbox, index.cell_dn_limit,
            sp.edge_bbox, sp.edge_din_out, index.edge_min_alpha, index.edge_max_alpha,
            index.edge_min_tau_e, lay.term_ptr, lay.grp_cell, lay.grp_value, lay.grp_start,
            lay.eg_edge, lay.eg_value, lay.eg_start, lay.post_slot, lay.post_value,
            index.facts.x, index.facts.y, index.facts.din_out, index.active)
    return args, slots


def kernel_candidates(index: EnhancedIndex, messages: Messages, i: int, *,
                      slack_abs: float, slack_rel: float) -> dict[int, float]:
    """:func:`eia_candidates` on message i, its arguments grouped as the matcher does."""
    (c, x, y, din_in, slots, kappa, _D_col, _eta_col, cell_bbox, cell_dn_limit, *edge,
     term_ptr, grp_cell, grp_value, grp_start, eg_edge, eg_value, eg_start, post_slot,
     post_value, slot_x, slot_y, slot_din_out, slot_active), _ = eia_arguments(index,
                                                                              messages, i)
    sp = index.spatial
    n_cells = sp.cells.n_cells
    n_slots = len(index.subs)
    none_f, none_i = np.empty(0), np.empty(0, dtype=np.int64)
    bounds = BoundArrays(kappa, np.ascontiguousarray(sp.bounds.D.T),
                         np.ascontiguousarray(sp.bounds.eta_minus.T), cell_bbox)
    layout = LayoutArrays(term_ptr, grp_cell, grp_value, grp_start, eg_edge, eg_value,
                          eg_start, post_slot, post_value)
    # The kernel reads the slots' point record; the reference below reads the facts'
    # columns, which are views of it.
    record = index.slot_record
    assert np.shares_memory(record, slot_x)
    np.testing.assert_array_equal(record[:, :3],
                                  np.column_stack([slot_x, slot_y, slot_din_out]))
    slot_arrays = SlotArrays(record, record.view(np.int32), slot_active, none_i,
                             np.empty(0, dtype=np.int32))
    cand = np.empty(n_slots + 1, dtype=np.int32)
    dnub = np.full(n_slots + 1, np.nan)
    scratch = ScratchArrays(np.empty(n_cells), np.empty(n_cells, dtype=np.int8), none_f,
                            none_f, none_i, np.zeros(n_slots + 1, dtype=np.int64), cand, dnub,
                            np.empty(n_slots + 1), none_i, none_i, none_i, none_f, none_i,
                            none_f, np.empty(3, dtype=np.int64), np.empty(3, dtype=np.int64),
                            np.empty(3))
    n = eia_candidates(MessageProbe(c, x, y, din_in, slots), bounds,
                       EiaCellArrays(cell_dn_limit),
                       EdgeArrays(*edge, edge_record(*edge, index.dmax_m)), layout,
                       slot_arrays, MatchLimits(index.dmax_m, 0.0, slack_abs, slack_rel),
                       scratch, 1, np.zeros(8, dtype=np.int64))
    chosen = cand[:n].tolist()
    assert len(set(chosen)) == len(chosen)
    return {int(s): float(dnub[j]) for j, s in enumerate(chosen)}


def python_candidates(index: EnhancedIndex, messages: Messages, i: int, *,
                      slack_abs: float, slack_rel: float) -> dict[int, float]:
    """Algorithm 1 of the EIA, the same tests as the kernel, with no early stop: every
    edge group and every posting of a list that passes Lemma 7 is looked at."""
    (m_cell, m_x, m_y, m_din_in, slots, kappa, D_col, eta_col, cell_bbox, cell_dn_limit,
     edge_bbox, edge_din_out, edge_min_alpha, edge_max_alpha, edge_min_tau_e, term_ptr,
     grp_cell, grp_value, grp_start, eg_edge, eg_value, eg_start, post_slot, post_value,
     slot_x, slot_y, slot_din_out, slot_active), _ = eia_arguments(index, messages, i)
    dmax = index.dmax_m
    cell_lb = np.empty(cell_bbox.shape[0])
    cell_lower_bounds(m_cell, m_x, m_y, m_din_in, kappa, D_col, eta_col, cell_bbox, cell_lb)

    def keep(lb: float, limit: float) -> bool:
        return lb <= limit + slack_abs + slack_rel * abs(limit)

    def box(x: float, y: float, b: npt.NDArray[Any], j: int) -> float:
        dx = max(b[j, 0] - x, 0.0, x - b[j, 2])
        dy = max(b[j, 1] - y, 0.0, y - b[j, 3])
        return math.sqrt(dx * dx + dy * dy)

    out: dict[int, float] = {}
    for k in slots.tolist():
        if k >= term_ptr.size - 1:
            continue
        for g in range(term_ptr[k], term_ptr[k + 1]):
            c = int(grp_cell[g])
            if cell_dn_limit[c] < 0.0 or not keep(cell_lb[c], cell_dn_limit[c]):
                continue
            if not keep(cell_lb[c], grp_value[g]):
                continue
            same = c == m_cell
            for eg in range(grp_start[g], grp_start[g + 1]):
                e = int(eg_edge[eg])
                de = box(m_x, m_y, edge_bbox, e)
                lbe = kappa * de if same else max(eta_col[c] * de,
                                                  edge_din_out[e] + D_col[c] + m_din_in)
                if not keep(lbe, eg_value[eg]):
                    continue
                spro = 1.0 - lbe / dmax
                a0, a1 = edge_min_alpha[e], edge_max_alpha[e]
                best = max(a0 * spro + (1.0 - a0), a1 * spro + (1.0 - a1))
                if best + 1e-12 < edge_min_tau_e[e]:
                    continue
                for p in range(eg_start[eg], eg_start[eg + 1]):
                    v = float(post_value[p])
                    s = int(post_slot[p])
                    if not keep(lbe, v) or not slot_active[s]:
                        continue
                    dx, dy = slot_x[s] - m_x, slot_y[s] - m_y
                    d = math.sqrt(dx * dx + dy * dy)
                    lb = kappa * d if same else max(eta_col[c] * d,
                                                    slot_din_out[s] + D_col[c] + m_din_in)
                    if keep(lb, v):
                        out[s] = max(out.get(s, -INF), v)
    return out


def check_dnub_order(index: SubscriptionIndex) -> None:
    """Within each IL(cell|term), edge groups by largest DNUB descending, postings of an
    edge group descending, each edge group's value its first posting's."""
    lay = index.layout
    for g in range(lay.grp_cell.size):
        a, b = int(lay.grp_start[g]), int(lay.grp_start[g + 1])
        vals = lay.eg_value[a:b]
        assert np.all(vals[1:] <= vals[:-1]), f"group {g}: edge groups not DNUB-descending"
        assert lay.grp_value[g] == vals[0]
        for eg in range(a, b):
            p = lay.post_value[lay.eg_start[eg]:lay.eg_start[eg + 1]]
            assert p.size and p[0] == lay.eg_value[eg] and np.all(p[1:] <= p[:-1])


def check_algorithm1(index: EnhancedIndex, messages: Messages) -> None:
    check_dnub_order(index)
    for slack_abs, slack_rel in ((1e-6, 1e-9), (0.0, 0.0)):
        for i in range(len(messages)):
            got = kernel_candidates(index, messages, i, slack_abs=slack_abs,
                                    slack_rel=slack_rel)
            want = python_candidates(index, messages, i, slack_abs=slack_abs,
                                     slack_rel=slack_rel)
            assert got == want, (i, sorted(set(got) ^ set(want)))


@st.composite
def dynamic_scenarios(draw: st.DrawFn) -> tuple[RoadNetwork, Subscriptions, Messages,
                                                TermWeights, float, int, int]:
    net = tiny_network(draw)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    vocab = [f"t{i}" for i in range(6)]
    weights = TermWeights({t: float(w) for t, w in zip(vocab, rng.uniform(0.2, 3, 6),
                                                       strict=True)})
    n = draw(st.integers(2, 60))
    subs = Subscriptions.from_rows(
        ids=rng.permutation(10_000)[:n], points=random_points(rng, net, n),
        keywords=[list(rng.choice(vocab, rng.integers(1, 4), replace=False))
                  for _ in range(n)],
        alpha=rng.choice([0.0, 1.0, 0.2, 0.5, 0.9], n),
        tau=rng.choice([0.1, 0.4, 0.6, 0.8, 1.0], n), weights=weights)
    k = draw(st.integers(1, 5))
    messages = Messages.from_rows(
        ids=np.arange(k), points=random_points(rng, net, k),
        keywords=[list(rng.choice(vocab, rng.integers(1, 5), replace=False))
                  for _ in range(k)], weights=weights)
    dmax = float(draw(st.sampled_from([60.0, 400.0, 2500.0])))
    return net, subs, messages, weights, dmax, draw(st.integers(1, 5)), \
        draw(st.integers(0, 2**32 - 1))


def check_matches(index: SubscriptionIndex, messages: Messages, weights: TermWeights,
                  dmax: float, widths: tuple[float, ...] = (10.0,)) -> None:
    want = match_brute(index.network, index.subscriptions(), messages, weights, dmax_m=dmax)
    for width in widths:
        got = IndexMatcher(index, bucket_width_m=width).match(messages)
        assert_same(got, want)


@HEAVY
@given(dynamic_scenarios())
def test_algorithm1_early_stops_lose_nothing_through_every_update_path(scenario) -> None:
    """After build, subscribe (new terms too), unsubscribe, move, compaction and a save /
    load round trip, the kernel's candidates (and their DNUBs) are those of a scan with no
    early stop, the layout is DNUB-ordered, and both matchers deliver the reference's."""
    net, subs, messages, weights, dmax, capacity, seed = scenario
    rng = np.random.default_rng(seed)
    spatial = SpatialIndex.build(net, capacity=capacity)
    n = len(subs)
    first = np.arange(n) < max(1, n // 2)
    index = EnhancedIndex(spatial, subs.take(np.flatnonzero(first)), weights, dmax_m=dmax)
    check_algorithm1(index, messages)
    check_matches(index, messages, weights, dmax, widths=(10.0, 0.5, 1e4))
    # subscribe the rest (one of them with a term the index has never seen)
    rest = subs.take(np.flatnonzero(~first))
    if len(rest):
        kw = [[weights.terms[t] for t in rest.keywords(j)] for j in range(len(rest))]
        kw[0] = [*kw[0], "brand-new-term"]
        rest = Subscriptions.from_rows(ids=rest.ids, points=rest.points, keywords=kw,
                                       alpha=rest.alpha, tau=rest.tau, weights=weights)
        index.subscribe(rest)
    check_algorithm1(index, messages)  # the delta does not touch the postings
    check_matches(index, messages, weights, dmax)
    live = index.subscriptions().ids
    gone = rng.choice(live, size=min(live.size - 1, int(rng.integers(0, 4))), replace=False)
    if gone.size:
        index.unsubscribe(gone)
    live = index.subscriptions().ids
    moved = rng.choice(live, size=min(live.size, 3), replace=False)
    index.move(moved, random_points(rng, net, moved.size))
    check_algorithm1(index, messages)
    check_matches(index, messages, weights, dmax)
    index.compact()
    assert len(index.delta) == 0
    check_algorithm1(index, messages)
    check_matches(index, messages, weights, dmax, widths=(10.0, 0.5))
    with tempfile.TemporaryDirectory() as tmp:
        if len(index) > 1:
            index.unsubscribe(index.subscriptions().ids[:1])  # saved after a removal
        path = index.save(Path(tmp) / "eia.npz")
        loaded = load_index(path)
    assert isinstance(loaded, EnhancedIndex)
    check_algorithm1(loaded, messages)
    check_matches(loaded, messages, weights, dmax)
    # BIA, on the same live subscriptions, agrees too.
    basic = BasicIndex(spatial, loaded.subscriptions(), weights, dmax_m=dmax)
    check_matches(basic, messages, weights, dmax, widths=(10.0, 0.5))


def test_edge_order_file_is_put_in_dnub_order_on_load(tmp_path: Path) -> None:
    """A saved EIA whose edge groups are in edge order (as older files) is rebuilt in DNUB
    order when loaded, and matches exactly."""
    rng = np.random.default_rng(3)
    net = RoadNetwork.from_arrays(
        node_ids=np.arange(5), node_lon=10 + 0.001 * np.arange(5),
        node_lat=np.full(5, 50.0), edge_u_ids=[0, 1, 2, 3], edge_v_ids=[1, 2, 3, 4],
        edge_length=[80.0, 70.0, 90.0, 60.0], name="row")
    weights = TermWeights({"a": 1.0, "b": 2.0})
    n = 40
    subs = Subscriptions.from_rows(
        ids=np.arange(n), points=random_points(rng, net, n),
        keywords=[["a"] if j % 2 else ["a", "b"] for j in range(n)],
        alpha=rng.uniform(0.2, 0.9, n), tau=rng.uniform(0.3, 0.9, n), weights=weights)
    messages = Messages.from_rows(ids=np.arange(6), points=random_points(rng, net, 6),
                                  keywords=[["a"], ["b"], ["a", "b"]] * 2, weights=weights)
    spatial = SpatialIndex.build(net, capacity=4)
    index = EnhancedIndex(spatial, subs, weights, dmax_m=300.0)
    lay = index.layout
    # Rewrite the saved postings in edge order.
    n_post = lay.post_slot.size
    term_slot = np.repeat(np.repeat(np.arange(lay.term_ptr.size - 1),
                                    np.diff(lay.term_ptr)), np.diff(lay.grp_start))
    post_term = np.repeat(term_slot, np.diff(lay.eg_start))
    assert post_term.size == n_post
    by_edge = build_posting_layout(
        post_slot=lay.post_slot.astype(np.int64), post_term_slot=post_term,
        post_value=lay.post_value, slot_cell=index.facts.cell,
        slot_edge=index.subs.points.edge, n_term_slots=lay.term_ptr.size - 1)
    rises = any(np.any(np.diff(by_edge.eg_value[by_edge.grp_start[g]:by_edge.grp_start[g + 1]])
                       > 0) for g in range(by_edge.grp_cell.size))
    assert rises  # the edge order really is out of DNUB order somewhere
    index.layout = by_edge
    path = index.save(tmp_path / "old.npz")
    loaded = load_index(path)
    assert isinstance(loaded, EnhancedIndex)
    check_algorithm1(loaded, messages)
    check_matches(loaded, messages, weights, 300.0)


def test_counter_constants_name_their_positions() -> None:
    """The kernels count by name (CANDIDATES, ...); the names are COUNTER_NAMES' order."""
    import roadpubsub.pruning.algorithm1 as a1

    for i, name in enumerate(a1.COUNTER_NAMES):
        assert getattr(a1, name.upper()) == i
