"""Shared fixtures of the index-layer tests: a tiny synthetic network and real data.

Real data lives in ``../shared/data`` beside the checkout (``ROADPUBSUB_SHARED_DATA``
overrides it); tests that need a missing file are skipped with the path in the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from roadpubsub.index.text import read_tweet_tokens
from roadpubsub.roadnet.network import RoadNetwork


@pytest.fixture(scope="session")
def tweet_docs(shared: Callable[[str], Path]) -> list[list[str]]:
    """The shared airline tweets, tokenised."""
    return read_tweet_tokens(shared("text/airline_tweets.csv"))


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
