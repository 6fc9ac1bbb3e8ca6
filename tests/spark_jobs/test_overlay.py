"""The border overlay (pure local, no Spark): it reproduces the cell-pair table."""

from __future__ import annotations

import numpy as np
import pytest

from roadpubsub.roadnet.cell_bounds import CellBounds, compute_cell_bounds
from roadpubsub.roadnet.cells import Cells
from roadpubsub.roadnet.distance import NodeSearch
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.spark_jobs.overlay import cell_shortcuts, overlay_cell_bounds, overlay_shortcuts


def _assert_same_tables(got: CellBounds, want: CellBounds) -> None:
    for name in ("D", "D_far", "dE_min", "dE_max", "eta_minus", "eta_plus", "din_out",
                 "din_in"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)


def test_overlay_equals_local_table_exactly_on_rome(rome: RoadNetwork, rome_cells: Cells,
                                                    rome_bounds: CellBounds) -> None:
    # Rome's lengths are integers: every partial sum is exact, so bit-identical tables.
    assert np.array_equal(rome.edge_length, np.round(rome.edge_length))
    _assert_same_tables(overlay_cell_bounds(rome, rome_cells), rome_bounds)


def test_overlay_matches_local_table_on_andorra(andorra: RoadNetwork, andorra_cells: Cells,
                                                andorra_bounds: CellBounds) -> None:
    # Fractional OSM lengths: sums grouped per shortcut may differ in the last bits only.
    got = overlay_cell_bounds(andorra, andorra_cells)
    for name in ("D", "D_far"):
        a, b = getattr(got, name), getattr(andorra_bounds, name)
        assert np.array_equal(np.isnan(a), np.isnan(b)), name
        assert np.array_equal(np.isinf(a), np.isinf(b)), name
        np.testing.assert_array_equal(a, b, err_msg=name)


@pytest.mark.parametrize("limit", [1500.0])
def test_overlay_with_limit_matches_local(andorra: RoadNetwork, andorra_cells: Cells,
                                          limit: float) -> None:
    got = overlay_cell_bounds(andorra, andorra_cells, limit=limit)
    want = compute_cell_bounds(andorra, andorra_cells, limit=limit)
    assert got.D.max() <= limit
    np.testing.assert_array_equal(got.D, want.D)
    assert np.array_equal(np.isnan(got.D_far), np.isnan(want.D_far))


def test_shortcuts_are_network_distances_within_the_cell(andorra: RoadNetwork,
                                                         andorra_cells: Cells) -> None:
    # A shortcut never beats the true distance, and all shortcuts of the overlay join
    # border vertices of one cell.
    search = NodeSearch(andorra)
    checked = 0
    for cell in range(0, andorra_cells.n_cells, 7):
        src, dst, w = cell_shortcuts(andorra, andorra_cells, cell)
        border = set(andorra_cells.border_of(cell).tolist())
        assert set(src.tolist()) <= border and set(dst.tolist()) <= border
        for s in np.unique(src)[:3]:
            d = search.run([s], [0.0]).dist
            rows = src == s
            assert np.all(w[rows] >= d[dst[rows]] * (1 - 1e-12))
            checked += int(rows.sum())
    assert checked > 0
    src, dst, w = overlay_shortcuts(andorra, andorra_cells)
    assert np.all(src != dst) and np.all(w >= 0)
    key = src * andorra.n_nodes + dst
    assert np.unique(key).size == key.size  # the lightest arc per pair only
