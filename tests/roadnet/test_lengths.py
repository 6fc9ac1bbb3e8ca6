"""Lengths and offsets on the binary grid: sums are exact in any order and grouping."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roadpubsub.roadnet.chains import build_chain_graph
from roadpubsub.roadnet.distance import distances_to_point
from roadpubsub.roadnet.errors import NetworkFormatError
from roadpubsub.roadnet.lengths import (
    LENGTH_GRID_M,
    LONGEST_EXACT_M,
    check_dmax,
    on_length_grid,
    snap_unless_on_grid,
)
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork

metres = st.floats(min_value=0.0, max_value=50_000.0, allow_nan=False)


def test_snap_is_nearest_grid_value_and_idempotent() -> None:
    raw = np.array([0.0, 0.1, 12.345678901234, 4999.999999999, 1e-9, 2.0 ** -27])
    snapped = on_length_grid(raw)
    steps = snapped / LENGTH_GRID_M
    np.testing.assert_array_equal(steps, np.round(steps))
    assert np.abs(snapped - raw).max() <= LENGTH_GRID_M / 2
    np.testing.assert_array_equal(on_length_grid(snapped), snapped)
    assert on_length_grid(np.array([np.inf]))[0] == np.inf
    # Beyond the exact range values pass through (scaling 1e300 would overflow to inf).
    np.testing.assert_array_equal(on_length_grid([LONGEST_EXACT_M + 0.5, 1e300, -1e300]),
                                  [LONGEST_EXACT_M + 0.5, 1e300, -1e300])


@pytest.mark.parametrize("size", [1, 16, 17, 10_000])
def test_arrays_already_on_the_grid_are_kept_without_a_copy(size) -> None:
    rng = np.random.default_rng(size)
    on = on_length_grid(rng.uniform(0, 1000, size))
    assert snap_unless_on_grid(on) is on
    off = on.copy()
    off[-1] += LENGTH_GRID_M / 3  # one value between grid points
    fixed = snap_unless_on_grid(off)
    assert fixed is not off
    np.testing.assert_array_equal(fixed, on)
    as_int = np.arange(size)
    assert snap_unless_on_grid(as_int).dtype == np.float64


@settings(max_examples=300, deadline=None)
@given(values=st.lists(metres, min_size=2, max_size=60), seed=st.integers(0, 2**32 - 1))
def test_sums_of_grid_lengths_do_not_depend_on_order_or_grouping(values, seed) -> None:
    # The property the matchers rely on: Dijkstra edge by edge, the chain graph chain by
    # chain and the reference's split edges all add the same lengths differently.
    x = on_length_grid(np.array(values))
    rng = np.random.default_rng(seed)
    left_to_right = 0.0
    for v in x:
        left_to_right += v
    shuffled = 0.0
    for v in x[rng.permutation(x.size)]:
        shuffled += v
    cut = int(rng.integers(1, x.size))
    grouped = math.fsum(x[:cut]) + float(np.sum(x[cut:]))
    assert left_to_right == shuffled == grouped == math.fsum(x)


def test_grid_values_add_up_alike_in_any_grouping() -> None:
    """Why the grid exists: raw 0.1, 0.2 and 0.3 add up differently by grouping,
    (0.1 + 0.2) + 0.3 != 0.1 + (0.2 + 0.3); on the grid they do not."""
    ga, gb, gc = on_length_grid([0.1, 0.2, 0.3])
    assert (ga + gb) + gc == ga + (gb + gc)


def _net(lengths: list[float]) -> RoadNetwork:
    n = len(lengths) + 1
    return RoadNetwork.from_arrays(
        node_ids=np.arange(n), node_lon=np.linspace(12.0, 12.01, n),
        node_lat=np.full(n, 41.0), edge_u_ids=np.arange(n - 1), edge_v_ids=np.arange(1, n),
        edge_length=lengths)


def test_networks_and_edge_points_store_grid_values() -> None:
    net = _net([100.1, 33.333333333, 0.0])
    np.testing.assert_array_equal(on_length_grid(net.edge_length), net.edge_length)
    assert abs(net.edge_length[0] - 100.1) <= LENGTH_GRID_M / 2
    # Every constructor path ends on the grid, also a direct one with raw floats.
    again = RoadNetwork(**{**net.to_arrays(), "edge_length": np.array([0.1, 0.2, 0.3])})
    np.testing.assert_array_equal(again.edge_length, on_length_grid([0.1, 0.2, 0.3]))
    pts = EdgePoints.of([0, 1], [50.05, 1 / 3])
    np.testing.assert_array_equal(pts.offset, on_length_grid([50.05, 1 / 3]))
    np.testing.assert_array_equal(pts[np.array([1])].offset, on_length_grid([1 / 3]))


def test_lengths_beyond_the_exact_range_are_refused_by_row() -> None:
    with pytest.raises(NetworkFormatError, match=r"invalid length .*row: u-v.*1: 1-2"):
        _net([10.0, LONGEST_EXACT_M, 5.0])



def test_constructors_copy_so_callers_cannot_move_values_off_the_grid() -> None:
    offsets = np.array([0.5, 1.0])
    pts = EdgePoints.of([0, 1], offsets)
    offsets[0] = 0.1
    assert pts.offset[0] == 0.5
    lengths = np.array([100.0, 50.0])
    net = _net(list(lengths))
    lengths[0] = 0.1
    assert net.edge_length[0] == 100.0


def test_direct_construction_checks_lengths_too() -> None:
    net = _net([10.0, 20.0])
    with pytest.raises(NetworkFormatError, match="invalid length"):
        RoadNetwork(**{**net.to_arrays(), "edge_length": np.array([10.0, -1.0])})


def test_dmax_must_stay_in_the_exact_range() -> None:
    assert check_dmax(5000) == 5000.0
    for bad in (0.0, -1.0, np.inf, np.nan, LONGEST_EXACT_M):
        with pytest.raises(ValueError, match="--dmax must be a number of metres"):
            check_dmax(bad, name="--dmax")


def test_chains_end_before_positions_along_them_could_round() -> None:
    """Two 100,000 km edges through a degree-2 node would make one 200,000 km chain, where
    a float64 step is 2**-25 m; the chain is cut so every position stays exact."""
    net = _net([1e8, 1e8, 3.0])
    graph = build_chain_graph(net)
    assert graph.edge_length.max() < LONGEST_EXACT_M
    np.testing.assert_array_equal(np.sort(graph.edge_length), [1e8, 1e8 + 3.0])
    # Half a metre apart, far along the second edge: exact on both graphs.
    target = EdgePoints.of([1], [5e7 + 0.5])
    pts = EdgePoints.of([1, 1], [5e7 + 2.0 ** -26, 5e7 + 2.0 ** -25])
    want = distances_to_point(net, target, pts, limit=1.0)
    got = distances_to_point(graph, target, pts, limit=1.0)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(want, [0.5 - 2.0 ** -26, 0.5 - 2.0 ** -25])
