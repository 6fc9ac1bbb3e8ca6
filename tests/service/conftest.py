"""Fixtures of the live-service tests: a real uvicorn server in a subprocess on loopback.

The service folder is created once per session on Andorra (keyword weights: idf over the
shared airline tweets) and copied for each test. Events are built from
:func:`roadpubsub.index.workload.generate_workload` (real tweet keywords), with locations sent as
u/v/offset, which round-trip exactly to the generated edge points.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from hooks import Receiver
from live import DMAX_M, Server, tweet_weights

from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.model import Subscriptions
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.text import read_tweet_tokens
from roadpubsub.index.workload import Workload, generate_workload
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.service.state import create_state


@pytest.fixture(scope="session")
def tweets(shared: Callable[[str], Path]) -> list[list[str]]:
    return read_tweet_tokens(shared("text/airline_tweets.csv"))


@pytest.fixture(scope="session")
def service_template(andorra: RoadNetwork, tweets: list[list[str]],
                     tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A service folder on Andorra with no subscription (copied by each test)."""
    folder = tmp_path_factory.mktemp("template") / "svc"
    empty = Subscriptions(np.empty(0, np.int64), EdgePoints.of([], []), np.empty(0),
                          np.empty(0), np.zeros(1, np.int64), np.empty(0, np.int32))
    index = EnhancedIndex(SpatialIndex.build(andorra), empty, tweet_weights(tweets),
                          dmax_m=DMAX_M)
    create_state(folder, index)
    return folder


@pytest.fixture(scope="session")
def andorra_path(shared: Callable[[str], Path]) -> Path:
    return shared("osm/andorra-latest.osm.pbf")


@pytest.fixture
def service_dir(service_template: Path, tmp_path: Path) -> Path:
    target = tmp_path / "svc"
    shutil.copytree(service_template, target)
    return target


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    """Servers started by a test are stopped after it, whatever happens."""
    started: list[Server] = []
    yield started
    for s in started:
        s.stop()


@pytest.fixture
def receivers() -> Iterator[list[Receiver]]:
    """Webhook receivers a test starts (``hooks.Receiver``) are stopped after it."""
    started: list[Receiver] = []
    yield started
    for receiver in started:
        receiver.stop()


@pytest.fixture
def serve(service_dir: Path, servers: list[Server]) -> Callable[..., Server]:
    def start(*extra: str, folder: Path | None = None) -> Server:
        server = Server(folder or service_dir, *extra)
        servers.append(server)
        return server.start()
    return start


@pytest.fixture(scope="session")
def workload(andorra: RoadNetwork, tweets: list[list[str]]) -> Workload:
    """Subscriptions and messages with real tweet keywords (spread alpha and tau)."""
    return generate_workload(andorra, n_subscriptions=1500, n_messages=400, seed=17,
                             tweets=tweets, alpha=0.5, alpha_spread=0.5, tau=0.5,
                             tau_spread=0.4)


@pytest.fixture(scope="session")
def move_points(andorra: RoadNetwork, tweets: list[list[str]]) -> EdgePoints:
    """Positions to move subscriptions to (uniform by length, round-tripping u/v/offset)."""
    return generate_workload(andorra, n_subscriptions=5000, n_messages=0, seed=18,
                             tweets=tweets).subscriptions.points


