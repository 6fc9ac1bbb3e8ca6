"""Cells partition the edges, and every cell-pair bound is a true lower bound."""

from __future__ import annotations

import numpy as np
import pytest

from roadpubsub.roadnet.cell_bounds import (
    cell_graph,
    compute_cell_bounds,
    point_facts,
    point_tables,
)
from roadpubsub.roadnet.cells import build_cells
from roadpubsub.roadnet.distance import NodeSearch, distances_from_point, distances_to_point
from roadpubsub.roadnet.errors import InvalidLocationError
from roadpubsub.roadnet.locations import EdgePoints, point_xy
from roadpubsub.roadnet.network import RoadNetwork


def test_rome_has_about_256_cells_each_edge_in_one(rome) -> None:
    cells = build_cells(rome)
    assert 200 <= cells.n_cells <= 320
    assert cells.edge_cell.min() == 0 and cells.edge_cell.max() == cells.n_cells - 1
    # Every edge's polyline lies inside its cell's region.
    gx = rome.geom_xy[:, 0]
    owner = np.repeat(cells.edge_cell, np.diff(rome.geom_ptr))
    box = cells.bbox[owner]
    assert ((gx >= box[:, 0]) & (gx <= box[:, 2])).all()
    # Border vertices touch edges of two or more cells.
    border = np.flatnonzero(cells.node_is_border)
    touching = np.zeros(rome.n_nodes, dtype=np.int64)
    for ends in (rome.edge_u, rome.edge_v):
        np.add.at(touching, ends, 1)
    assert (touching[border] >= 2).all()


@pytest.mark.parametrize("directed", [False, True])
def test_bounds_never_exceed_network_distance(andorra, directed) -> None:
    network: RoadNetwork = andorra.with_direction(directed=directed)
    cells = build_cells(network, capacity=40)
    bounds = compute_cell_bounds(network, cells)
    rng = np.random.default_rng(4)
    k = 300
    e = rng.integers(0, network.n_edges, k)
    pts = EdgePoints.of(e, rng.random(k) * network.edge_length[e])
    facts = point_facts(point_tables(cell_graph(network, cells), cells, bounds), pts)
    xy = point_xy(network, pts)
    cell = cells.edge_cell[pts.edge]
    din_out, din_in = facts.din_out, facts.din_in
    search = NodeSearch(network, reverse=True)
    checked = 0
    for j in range(40):  # j: the message side
        d = distances_to_point(network, pts[np.array([j])], pts, search=search)
        de = np.hypot(*(xy - xy[j]).T)
        other = cell != cell[j]
        additive = din_out + bounds.D[cell, cell[j]] + din_in[j]
        eta = bounds.eta_minus[cell, cell[j]] * de
        lower = np.where(other, np.maximum(additive, eta), bounds.kappa * de)
        finite = np.isfinite(d)
        assert (lower[finite] <= d[finite] + 1e-6).all()
        # Unreachable pairs in different cells may get any bound, reachable ones never inf.
        checked += int(finite.sum())
    assert checked > 1000


def test_eta_minus_is_at_least_kappa(california) -> None:
    cells = build_cells(california, capacity=500)
    bounds = compute_cell_bounds(california, cells)
    assert (bounds.eta_minus >= bounds.kappa - 1e-12).all()
    np.testing.assert_array_equal(np.diag(bounds.D), 0.0)
    assert (bounds.dE_min <= bounds.dE_max).all()


@pytest.mark.parametrize("directed", [False, True])
def test_point_facts_equal_searches_to_the_border(andorra, directed) -> None:
    """din out of and into each point is its network distance to / from the nearest
    border vertex, found by a search over the whole network; x, y, cell and the chain
    position agree with the one-fact functions. Points include both ends of edges and
    one-way edges (the end-cost rules at offset 0 and at the edge's length)."""
    network: RoadNetwork = andorra.with_direction(directed=directed)
    cells = build_cells(network, capacity=40)
    bounds = compute_cell_bounds(network, cells)
    graph = cell_graph(network, cells)
    rng = np.random.default_rng(7)
    k = 120
    e = rng.integers(0, network.n_edges, k)
    off = rng.random(k) * network.edge_length[e]
    off[:20] = 0.0
    off[20:40] = network.edge_length[e[20:40]]
    pts = EdgePoints.of(e, off)
    tables = point_tables(graph, cells, bounds)
    facts = point_facts(tables, pts)
    np.testing.assert_array_equal(np.column_stack([facts.x, facts.y]), point_xy(network, pts))
    np.testing.assert_array_equal(facts.cell, cells.edge_cell[pts.edge])
    local = graph.to_local(pts)
    np.testing.assert_array_equal(facts.chain, local.edge)
    np.testing.assert_array_equal(facts.chain_offset, local.offset)
    border = np.flatnonzero(cells.node_is_border)
    # each border vertex as an edge point: offset 0 of an edge leaving it (or the end of
    # one arriving at it)
    first_out = {int(u): i for i, u in reversed(list(enumerate(network.edge_u.tolist())))}
    first_in = {int(v): i for i, v in reversed(list(enumerate(network.edge_v.tolist())))}
    be = np.array([first_out.get(int(n), first_in.get(int(n), -1)) for n in border])
    at_u = np.array([int(n) in first_out for n in border])
    assert (be >= 0).all()
    border_pts = EdgePoints.of(be, np.where(at_u, 0.0, network.edge_length[be]))
    for j in range(k):
        out = distances_from_point(network, pts[np.array([j])], border_pts).min()
        inn = distances_to_point(network, pts[np.array([j])], border_pts).min()
        assert facts.din_out[j] == pytest.approx(out, rel=1e-12, abs=1e-9), j
        assert facts.din_in[j] == pytest.approx(inn, rel=1e-12, abs=1e-9), j
    with pytest.raises(InvalidLocationError, match="outside"):
        point_facts(tables, EdgePoints.of([network.n_edges], [0.0]))
