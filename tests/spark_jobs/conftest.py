"""Fixtures of the Spark job tests: one local Spark session and real networks.

The session runs on ``local[2,2]``: two worker threads (this machine's two cores) and
``spark.task.maxFailures`` 2, so that a task failing on its first attempt is retried, as on a
cluster (plain ``local[2]`` never retries). Tests that need it are marked ``spark`` and skip
when no Java 17+ is installed; tests that need ``../shared/data`` skip when it is absent.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from roadpubsub.roadnet.cell_bounds import CellBounds, compute_cell_bounds
from roadpubsub.roadnet.cells import Cells, build_cells
from roadpubsub.roadnet.io import load_network
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.settings import shared_data_dir

#: Master of the test session (see the module docstring).
TEST_MASTER = "local[2,2]"
#: Cell capacity used for Andorra (2,432 edges): 110 cells.
ANDORRA_CAPACITY = 64
#: Cell capacity used for Rome in the Spark tests: ~30 cells keep a full table fast.
ROME_CAPACITY = 20_000


def shared_file(relative: str) -> Path:
    """A file of the shared data folder, or skip the test when it is absent."""
    path = shared_data_dir() / relative
    if not path.exists():
        pytest.skip(f"needs {path} (../shared/data beside the checkout, or "
                    f"ROADPUBSUB_SHARED_DATA)")
    return path


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The one SparkSession of the test run (skips without Java 17+)."""
    from roadpubsub.spark_jobs.session import JavaNotFoundError, get_spark

    try:
        session = get_spark(master=TEST_MASTER, app_name="roadpubsub tests",
                            config={"spark.sql.shuffle.partitions": "4"})
    except JavaNotFoundError as exc:
        pytest.skip(f"Spark needs Java 17+: {exc} ({exc.hint})")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def andorra_path() -> Path:
    """The Andorra OSM extract file."""
    return shared_file("osm/andorra-latest.osm.pbf")


@pytest.fixture(scope="session")
def andorra_capacity() -> int:
    """Cell capacity used for Andorra (:data:`ANDORRA_CAPACITY`)."""
    return ANDORRA_CAPACITY


@pytest.fixture(scope="session")
def andorra(andorra_path: Path) -> RoadNetwork:
    """The Andorra OSM extract (1,904 nodes, 2,432 edges)."""
    return load_network(andorra_path)


@pytest.fixture(scope="session")
def andorra_cells(andorra: RoadNetwork) -> Cells:
    """Andorra's PMR cells at :data:`ANDORRA_CAPACITY`."""
    return build_cells(andorra, capacity=ANDORRA_CAPACITY)


@pytest.fixture(scope="session")
def rome() -> RoadNetwork:
    """The Rome DIMACS network (234,496 nodes; integer edge lengths)."""
    return load_network(shared_file("dimacs/rome.gr.gz"))


@pytest.fixture(scope="session")
def rome_cells(rome: RoadNetwork) -> Cells:
    """Rome's PMR cells at :data:`ROME_CAPACITY`."""
    return build_cells(rome, capacity=ROME_CAPACITY)


@pytest.fixture(scope="session")
def tweets_csv() -> Path:
    """The airline tweets corpus."""
    return shared_file("text/airline_tweets.csv")


@pytest.fixture(scope="session")
def andorra_bounds(andorra: RoadNetwork, andorra_cells: Cells) -> CellBounds:
    """The local (single-process) bound table of Andorra."""
    return compute_cell_bounds(andorra, andorra_cells)


@pytest.fixture(scope="session")
def rome_bounds(rome: RoadNetwork, rome_cells: Cells) -> CellBounds:
    """The local (single-process) bound table of Rome at :data:`ROME_CAPACITY`."""
    return compute_cell_bounds(rome, rome_cells)
