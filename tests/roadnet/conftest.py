"""Shared fixtures of the road-network tests: real networks, loaded once per session.

Real data lives in ``../shared/data`` beside the checkout (``ROADPUBSUB_SHARED_DATA``
overrides it); tests that need a missing file are skipped with the path in the reason.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork


def random_edge_points(network: RoadNetwork, rng: np.random.Generator, k: int,
                       *, edges: np.ndarray | None = None) -> EdgePoints:
    """``k`` uniformly random edge points (optionally restricted to ``edges``); about one
    in eight sits exactly on an end node, where rounding is most delicate."""
    pool = np.arange(network.n_edges) if edges is None else np.asarray(edges)
    e = rng.choice(pool, size=k)
    frac = rng.random(k)
    frac[rng.random(k) < 0.0625] = 0.0
    frac[rng.random(k) < 0.0625] = 1.0
    return EdgePoints.of(e, frac * network.edge_length[e])


@pytest.fixture(scope="session")
def edge_points() -> Callable[..., EdgePoints]:
    """``edge_points(network, rng, k)``: random edge points (see :func:`random_edge_points`)."""
    return random_edge_points
