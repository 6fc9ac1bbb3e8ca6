"""Shared fixtures of the index-layer tests: a tiny synthetic network and real data.

Real data lives in ``../shared/data`` beside the checkout (``ROADPUBSUB_SHARED_DATA``
overrides it); tests that need a missing file are skipped with the path in the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.text import read_tweet_tokens
from roadpubsub.index.workload import Workload, generate_workload
from roadpubsub.roadnet.io import load_network
from roadpubsub.roadnet.network import RoadNetwork


@pytest.fixture(scope="session")
def tweet_docs(shared: Callable[[str], Path]) -> list[list[str]]:
    """The shared airline tweets, tokenised."""
    return read_tweet_tokens(shared("text/airline_tweets.csv"))


@pytest.fixture(scope="session")
def andorra_workload(shared: Callable[[str], Path]
                     ) -> Callable[..., tuple[RoadNetwork, SpatialIndex, Workload]]:
    """``andorra_workload(n_subscriptions, n_messages, seed=)``: Andorra's roads with their
    one-way streets, its cells of at most 60 edges (both loaded once) and a workload whose
    alpha and tau spread wide (the dynamic-update tests)."""
    network = load_network(shared("osm/andorra-latest.osm.pbf"), directed=True)
    spatial = SpatialIndex.build(network, capacity=60)

    def make(n_subscriptions: int, n_messages: int, *, seed: int
             ) -> tuple[RoadNetwork, SpatialIndex, Workload]:
        return network, spatial, generate_workload(
            network, n_subscriptions=n_subscriptions, n_messages=n_messages, seed=seed,
            alpha_spread=0.5, tau_spread=0.3)

    return make


#: Node ids and positions of :func:`tiny`: a row of four nodes about 84 m apart.
TINY_IDS = (10, 20, 30, 40)
TINY_LON = (2.000, 2.001, 2.002, 2.003)
TINY_LAT = 41.0


@pytest.fixture(scope="session")
def tiny() -> RoadNetwork:
    """Three straight edges 10-20, 20-30, 30-40 along a parallel near 2 E, 41 N.

    Edge lengths are 100, 100 and 50 metres (not the geometric ~84 m: lengths are data).
    """
    return RoadNetwork.from_arrays(
        node_ids=np.array(TINY_IDS), node_lon=np.array(TINY_LON),
        node_lat=np.full(4, TINY_LAT), edge_u_ids=[10, 20, 30], edge_v_ids=[20, 30, 40],
        edge_length=[100.0, 100.0, 50.0], name="tiny")
