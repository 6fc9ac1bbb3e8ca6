"""Load a road network from a file, dispatching on the path's suffix.

================================  ==========================================================
suffix                            reader
================================  ==========================================================
``.npz``                          a network saved by :meth:`RoadNetwork.save`
``.gr`` / ``.gr.gz``              DIMACS 9th challenge arcs, with ``.co[.gz]`` beside it
``.cnode``                        Li et al. nodes, with ``.cedge`` beside it
``.osm``, ``.osm.bz2``, ``.xml``  OSM XML through ``osmnx.graph_from_xml``
``.osm.pbf``, ``.pbf``            OSM PBF, drivable roads (osmnx ``drive`` filter)
``.graphml``                      GraphML saved by osmnx
================================  ==========================================================
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from roadpubsub.roadnet.errors import (
    NetworkFormatError,
    UnsupportedNetworkFormatError,
    describe_rows,
)
from roadpubsub.roadnet.network import RoadNetwork

__all__ = ["SUPPORTED_SUFFIXES", "load_network", "read_dimacs", "read_li"]

SUPPORTED_SUFFIXES = (".npz", ".gr", ".gr.gz", ".cnode", ".osm", ".osm.bz2", ".xml",
                      ".osm.pbf", ".pbf", ".graphml")

_EARTH_RADIUS_M = 6_371_008.8


def _suffix(path: Path) -> str:
    name = path.name.lower()
    for suffix in sorted(SUPPORTED_SUFFIXES, key=len, reverse=True):
        if name.endswith(suffix):
            return suffix
    return path.suffix.lower()


def load_network(path: str | os.PathLike[str] | Any, *, directed: bool = False
                 ) -> RoadNetwork:
    """Read a road network file (see the module table for the formats), or convert an
    osmnx graph.

    Parameters
    ----------
    path
        The file; its suffix selects the reader. A networkx ``MultiDiGraph`` from osmnx
        (``ox.graph_from_place``, ``ox.load_graphml``, ...) is converted directly
        (:func:`roadpubsub.roadnet.osm.from_osmnx_graph`).
    directed
        Honour one-way roads (distances run from a subscription to a message).

    Raises
    ------
    FileNotFoundError
        The file (or its companion file) does not exist.
    UnsupportedNetworkFormatError
        The suffix is not one of :data:`SUPPORTED_SUFFIXES`.
    NetworkFormatError
        The file is malformed.
    """
    if _is_networkx_graph(path):
        from roadpubsub.roadnet import osm

        return osm.from_osmnx_graph(path).with_direction(directed=directed)
    if not isinstance(path, str | os.PathLike):
        msg = (f"load_network takes a file path or an osmnx MultiDiGraph, got "
               f"{type(path).__name__}")
        raise TypeError(msg)
    p = Path(path)
    suffix = _suffix(p)
    readers: dict[str, Callable[[Path], RoadNetwork]] = {
        ".npz": RoadNetwork.load,
        ".gr": read_dimacs,
        ".gr.gz": read_dimacs,
        ".cnode": read_li,
    }
    if suffix not in SUPPORTED_SUFFIXES:
        msg = (f"{p}: unsupported network format {suffix or '(no suffix)'!r}; "
               f"use one of {', '.join(SUPPORTED_SUFFIXES)}")
        lower = p.name.lower()
        hint = None
        if lower.endswith((".co", ".co.gz")):
            arcs = p.name.replace(".co", ".gr", 1)
            hint = f"that is DIMACS coordinates; pass the arcs file, {arcs}"
        elif lower.endswith(".cedge"):
            hint = "pass the .cnode file beside it"
        raise UnsupportedNetworkFormatError(msg, hint=hint)
    if not p.exists():
        msg = f"network file not found: {p}"
        raise FileNotFoundError(msg)
    if suffix in readers:
        network = readers[suffix](p)
    else:
        from roadpubsub.roadnet import osm_files  # osmnx is heavy: import it only for OSM inputs

        network = osm_files.read_osm_file(p)
    return network.with_direction(directed=directed)


def _is_networkx_graph(obj: object) -> bool:
    # Checked by duck type, so networkx is imported only when a graph is passed.
    return hasattr(obj, "graph") and hasattr(obj, "edges") and hasattr(obj, "nodes") \
        and not isinstance(obj, str | os.PathLike)


def _open_text(path: Path) -> IO[str]:
    if path.name.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="ascii")
    return path.open("r", encoding="ascii")


def _companion(path: Path, old: str, new: str) -> Path:
    name = path.name
    stem = name[: name.lower().rfind(old)]
    rest = name[len(stem) + len(old):]
    for candidate in (path.with_name(stem + new + rest), path.with_name(stem + new),
                      path.with_name(stem + new + ".gz")):
        if candidate.exists():
            return candidate
    msg = f"{path}: companion file {stem + new + rest} not found beside it"
    raise FileNotFoundError(msg)


def _read_tagged(path: Path, tag: str, ncols: int) -> npt.NDArray[np.int64]:
    """Rows starting with ``tag`` of a DIMACS file, as int64 columns after the tag."""
    try:
        with _open_text(path) as fh:
            numbered = [(i, line) for i, line in enumerate(fh, 1) if line.startswith(tag + " ")]
    except (EOFError, OSError, UnicodeDecodeError, zlib.error) as exc:
        if isinstance(exc, FileNotFoundError | PermissionError | IsADirectoryError):
            raise
        what = "truncated" if isinstance(exc, EOFError) else "unreadable"
        msg = f"{path}: {what} file ({exc})"
        raise NetworkFormatError(msg) from exc
    lines = [line for _, line in numbered]
    if not lines:
        msg = f"{path}: no '{tag}' lines found; is this a DIMACS file?"
        raise NetworkFormatError(msg)
    try:
        data = np.loadtxt(io.StringIO("".join(lines)), usecols=range(1, ncols + 1),
                          dtype=np.int64, ndmin=2)
    except ValueError as exc:
        msg = f"{path}: malformed '{tag}' line ({exc})"
        raise NetworkFormatError(msg) from exc
    if tag == "a":
        negative = np.flatnonzero(data[:, 2] < 0)
        if negative.size:
            at = [numbered[i][0] for i in negative[:10]]
            msg = (f"{path}: arcs with a negative length at lines "
                   f"{describe_rows(at, total=negative.size)}")
            raise NetworkFormatError(msg)
    return data


def read_dimacs(path: Path) -> RoadNetwork:
    """DIMACS 9th challenge ``.gr[.gz]`` arcs and the ``.co[.gz]`` beside it.

    Arc weights are taken as metres; coordinates are integer micro-degrees (lon, lat).
    A pair of opposite arcs with one weight is one two-way road segment; an arc without
    its twin is a one-way segment.
    """
    co = _companion(path, ".gr", ".co")
    arcs = _read_tagged(path, "a", 3)
    nodes = _read_tagged(co, "v", 3)
    u, v, w = arcs[:, 0], arcs[:, 1], arcs[:, 2]
    u_ids, v_ids, length, oneway = _pair_opposite_arcs(u, v, w.astype(np.float64))
    return RoadNetwork.from_arrays(
        node_ids=nodes[:, 0], node_lon=nodes[:, 1] / 1e6, node_lat=nodes[:, 2] / 1e6,
        edge_u_ids=u_ids, edge_v_ids=v_ids, edge_length=length, edge_oneway=oneway,
        name=path.name,
    )


def _pair_opposite_arcs(
    u: npt.NDArray[np.int64], v: npt.NDArray[np.int64], w: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64],
           npt.NDArray[np.bool_]]:
    """Merge arcs (a, b, w) and (b, a, w) into one two-way edge; keep the rest one-way."""
    lo = np.minimum(u, v)
    hi = np.maximum(u, v)
    forward = u <= v
    # Sort by (segment key, weight, direction) so twins sit side by side.
    order = np.lexsort((~forward, w, hi, lo))
    lo, hi, w, fwd, uu, vv = lo[order], hi[order], w[order], forward[order], u[order], v[order]
    # Groups of arcs with one (segment, weight); forward arcs come first in each group.
    new_group = np.ones(lo.size, dtype=bool)
    new_group[1:] = (lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1]) | (w[1:] != w[:-1])
    group = np.cumsum(new_group) - 1
    start = np.flatnonzero(new_group)
    rank = np.arange(lo.size) - start[group]
    n_fwd = np.bincount(group, weights=fwd).astype(np.int64)
    n_bwd = np.bincount(group, weights=~fwd).astype(np.int64)
    # The k-th forward arc of a group pairs with its k-th backward arc.
    twoway = fwd & (rank < n_bwd[group])
    dropped = ~fwd & (rank - n_fwd[group] < n_fwd[group])
    keep = ~dropped
    return uu[keep], vv[keep], w[keep], ~twoway[keep]


def _haversine_m(lon1: npt.NDArray[np.float64], lat1: npt.NDArray[np.float64],
                 lon2: npt.NDArray[np.float64], lat2: npt.NDArray[np.float64]
                 ) -> npt.NDArray[np.float64]:
    p1, p2 = np.radians(lat1), np.radians(lat2)
    dphi = p2 - p1
    dlmb = np.radians(lon2 - lon1)
    h = np.sin(dphi / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin(dlmb / 2) ** 2
    return np.asarray(2 * _EARTH_RADIUS_M * np.arcsin(np.sqrt(np.minimum(h, 1.0))))


def read_li(path: Path) -> RoadNetwork:
    """Li et al.'s ``.cnode`` (id lon lat) with the ``.cedge`` beside it.

    Their edge lengths are in degrees, so lengths are recomputed in metres as the
    great-circle distance between the end nodes.
    """
    cedge = _companion(path, ".cnode", ".cedge")
    try:
        nodes = np.loadtxt(path, skiprows=_header_rows(path), ndmin=2)
        edges = np.loadtxt(cedge, skiprows=_header_rows(cedge), ndmin=2)
    except ValueError as exc:
        msg = f"{path}: malformed Li node/edge file ({exc})"
        raise NetworkFormatError(msg) from exc
    if nodes.shape[1] < 3 or edges.shape[1] < 3:
        msg = f"{path}: expected 'id lon lat' nodes and 'id u v length' edges"
        raise NetworkFormatError(msg)
    ids = nodes[:, 0].astype(np.int64)
    lon, lat = nodes[:, 1], nodes[:, 2]
    u_ids = edges[:, 1].astype(np.int64)
    v_ids = edges[:, 2].astype(np.int64)
    order = np.argsort(ids)
    pos_u = order[np.clip(np.searchsorted(ids[order], u_ids), 0, ids.size - 1)]
    pos_v = order[np.clip(np.searchsorted(ids[order], v_ids), 0, ids.size - 1)]
    length = _haversine_m(lon[pos_u], lat[pos_u], lon[pos_v], lat[pos_v])
    # Unknown ids are reported by from_arrays; their placeholder lengths are never used.
    return RoadNetwork.from_arrays(
        node_ids=ids, node_lon=lon, node_lat=lat, edge_u_ids=u_ids, edge_v_ids=v_ids,
        edge_length=length, name=path.name,
    )


def _header_rows(path: Path) -> int:
    with path.open("r", encoding="ascii") as fh:
        first = fh.readline().split()
    try:
        [float(tok) for tok in first]
    except ValueError:
        return 1
    return 0
