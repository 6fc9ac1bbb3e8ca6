"""The boolean range index's layout: every row filed once under its rarest keyword and its
cell, radii descending within a group, and its facts and other keywords copied in posting
order."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roadpubsub.index.boolean import BooleanIndex, rarest_keywords
from roadpubsub.index.kinds import BooleanSubscriptions
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork


@pytest.fixture(scope="module")
def grid() -> RoadNetwork:
    """A 4 x 4 grid of 200 m two-way streets (cells of capacity 3 split it)."""
    ids = np.arange(16)
    lon, lat = (ids % 4) * 0.0018, (ids // 4) * 0.0018
    u = [i for i in ids if i % 4 < 3] + [i for i in ids if i < 12]
    v = [i + 1 for i in ids if i % 4 < 3] + [i + 4 for i in ids if i < 12]
    return RoadNetwork.from_arrays(node_ids=ids, node_lon=lon, node_lat=lat, edge_u_ids=u,
                                   edge_v_ids=v, edge_length=np.full(len(u), 200.0),
                                   name="grid")


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 60))
def test_layout_files_each_row_once_with_its_facts(grid, seed, n) -> None:
    rng = np.random.default_rng(seed)
    n_terms = 5
    weights = TermWeights({f"t{i}": 1.0 for i in range(n_terms)})
    lens = rng.integers(1, 5, n)
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=ptr[1:])
    terms = rng.integers(0, n_terms, int(ptr[-1])).astype(np.int32)  # duplicates too
    edge = rng.integers(0, grid.n_edges, n)
    subs = BooleanSubscriptions(rng.permutation(10 * n)[:n].astype(np.int64),
                                EdgePoints.of(edge, rng.random(n) * 200.0),
                                rng.choice([0.0, 300.0, 1000.0], n), ptr, terms)
    spatial = SpatialIndex.build(grid, capacity=3)
    ix = BooleanIndex.build(spatial, subs, weights, dmax_m=1000.0)
    key = rarest_keywords(ptr, terms, n_terms)
    df = np.bincount(terms, minlength=n_terms)
    assert np.array_equal(np.sort(ix.post_row), np.arange(n))
    for t in range(n_terms):
        for g in range(ix.term_ptr[t], ix.term_ptr[t + 1]):
            posts = np.arange(ix.grp_start[g], ix.grp_start[g + 1])
            rows = ix.post_row[posts]
            assert np.all(key[rows] == t)
            assert np.all(ix.facts.cell[rows] == ix.grp_cell[g])
            assert np.all(np.diff(ix.post_radius[posts]) <= 0)
            assert ix.grp_radius[g] == ix.post_radius[posts].max()
            for p, r in zip(posts, rows, strict=True):
                own = set(subs.keywords(r).tolist())
                assert key[r] in own and df[key[r]] == min(df[list(own)])
                others = ix.post_kw_terms[ix.post_kw_ptr[p]:ix.post_kw_ptr[p + 1]]
                assert set(others.tolist()) == own - {key[r]}
                assert np.all(np.diff(df[others]) >= 0)  # rarest first
                assert ix.post_id[p] == subs.ids[r]
                assert ix.post_radius[p] == subs.radius[r]
                for name in ("x", "y", "din_out", "chain", "chain_offset"):
                    assert getattr(ix, f"post_{name}")[p] == getattr(ix.facts, name)[r]


def test_radius_above_dmax_and_unknown_terms_are_refused(grid) -> None:
    weights = TermWeights({"a": 1.0})
    spatial = SpatialIndex.build(grid)
    pts = EdgePoints.of([0], [0.0])
    one = np.array([0, 1], np.int64)
    with pytest.raises(InputError, match="at most Dmax"):
        BooleanIndex.build(spatial, BooleanSubscriptions(
            np.array([1]), pts, np.array([1000.5]), one, np.zeros(1, np.int32)),
            weights, dmax_m=1000.0)
    with pytest.raises(InputError, match="outside the weights"):
        BooleanIndex.build(spatial, BooleanSubscriptions(
            np.array([1]), pts, np.array([10.0]), one, np.ones(1, np.int32)),
            weights, dmax_m=1000.0)
