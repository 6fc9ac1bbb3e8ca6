"""The bound table's storage format: rows, metadata, fingerprints, and its reader.

A table is a directory written by
:func:`roadpubsub.spark_jobs.precompute_bounds.write_bounds_table`:

``part-*.parquet``
    Rows ``cell_i`` int32, ``cell_j`` int32, ``D`` float64 (inf: unreachable),
    ``D_far`` float64 (NaN: no border vertex of j reached), one per ordered pair.
``_roadpubsub_bounds.json`` (:data:`BOUNDS_META_FILE`)
    Format version, engine, search limit, the network's fingerprint (node and edge
    counts, direction, SHA-256 of the edge arrays) and the cells' (count, capacity,
    SHA-256 of the cell assignment and border vertices). Parquet readers skip it.

The per-node border distances (``din_out``/``din_in``) are not stored: they cost two
Dijkstras and :func:`load_bounds_table` recomputes them through
:meth:`roadpubsub.roadnet.cell_bounds.CellBounds.from_rows`, the local path's own assembly, which
also derives the Euclidean tables and eta bounds from the cells.

The local CLI (``roadpubsub index build --bounds``) and :mod:`roadpubsub.spark_jobs.batch_match`
read tables through :func:`load_bounds_table`; :func:`read_bounds_rows` is the one place
that reads the files.

Examples
--------
>>> spatial = SpatialIndex.build(network, cells=cells,                  # doctest: +SKIP
...                              bounds=load_bounds_table("rome.bounds", network, cells))
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from roadpubsub.roadnet.cell_bounds import CellBounds
from roadpubsub.roadnet.cells import Cells
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.network import RoadNetwork

__all__ = [
    "BOUNDS_META_FILE",
    "ROW_SCHEMA",
    "BoundsTableError",
    "bounds_meta",
    "cells_fingerprint",
    "check_bounds_format",
    "check_bounds_meta",
    "load_bounds_table",
    "network_fingerprint",
    "read_bounds_rows",
    "rows_batch",
    "table_from_rows",
]

FloatArray = npt.NDArray[np.float64]

#: Name of the metadata file inside a table directory.
BOUNDS_META_FILE = "_roadpubsub_bounds.json"
#: Spark schema of the table's rows.
ROW_SCHEMA = "cell_i int, cell_j int, D double, D_far double"
_FORMAT = "roadpubsub-cell-bounds"
_VERSION = 1


class BoundsTableError(InputError):
    """A bound table that is missing, corrupt, or made for another network or cells."""


# ---------------------------------------------------------------------------- fingerprints
def _sha256(*arrays: npt.NDArray[Any]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        arr = np.ascontiguousarray(a)
        h.update(str(arr.dtype).encode())
        h.update(str(arr.shape).encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def network_fingerprint(network: RoadNetwork) -> dict[str, Any]:
    """Node and edge counts, direction and a SHA-256 of the edge arrays."""
    return {"name": network.name, "n_nodes": network.n_nodes, "n_edges": network.n_edges,
            "directed": bool(network.directed),
            "sha256": _sha256(network.edge_u, network.edge_v, network.edge_length,
                              network.edge_oneway)}


def cells_fingerprint(cells: Cells, *, capacity: int | None = None,
                      max_depth: int | None = None) -> dict[str, Any]:
    """Cell count, the quadtree settings when known and a SHA-256 of the partition."""
    return {"n_cells": cells.n_cells, "capacity": capacity, "max_depth": max_depth,
            "sha256": _sha256(cells.edge_cell, cells.border_ptr, cells.border_nodes)}


# ---------------------------------------------------------------------------- rows
def rows_batch(cell_i: Sequence[int], rows: Sequence[FloatArray], fars: Sequence[FloatArray],
               n_cells: int) -> pa.RecordBatch:
    """Long-format rows (``cell_i``, ``cell_j``, ``D``, ``D_far``) of whole table rows:
    ``rows[k]`` and ``fars[k]`` are row ``cell_i[k]`` of D and D_far (``n_cells`` each)."""
    k = len(cell_i)
    return pa.RecordBatch.from_arrays(
        [pa.array(np.repeat(np.asarray(cell_i, dtype=np.int32), n_cells)),
         pa.array(np.tile(np.arange(n_cells, dtype=np.int32), k)),
         pa.array(np.concatenate(rows) if k else np.empty(0), type=pa.float64()),
         pa.array(np.concatenate(fars) if k else np.empty(0), type=pa.float64())],
        names=["cell_i", "cell_j", "D", "D_far"])


def table_from_rows(rows: pa.Table, n: int) -> tuple[FloatArray, FloatArray]:
    """Dense (D, D_far) from long rows, checking that every pair is there once.

    Raises
    ------
    BoundsTableError
        Missing, out-of-range or duplicate cell pairs.
    """
    i = np.asarray(rows.column("cell_i").to_numpy(), dtype=np.int64)
    j = np.asarray(rows.column("cell_j").to_numpy(), dtype=np.int64)
    if i.size != n * n or (i.size and (i.min() < 0 or j.min() < 0 or i.max() >= n
                                       or j.max() >= n)):
        msg = f"expected {n * n} rows (cell pairs of {n} cells), found {i.size}"
        raise BoundsTableError(msg)
    key = i * n + j
    if np.bincount(key, minlength=n * n).max(initial=0) > 1:
        msg = "duplicate cell pairs in the bound table"
        raise BoundsTableError(msg)
    D = np.empty(n * n)
    D_far = np.empty(n * n)
    D[key] = rows.column("D").to_numpy()
    D_far[key] = rows.column("D_far").to_numpy()
    return D.reshape(n, n), D_far.reshape(n, n)


# ---------------------------------------------------------------------------- metadata
def bounds_meta(network: RoadNetwork, cells: Cells, *, engine: str, limit: float,
                capacity: int | None, max_depth: int | None, seconds: float
                ) -> dict[str, Any]:
    """The metadata of a table (the content of :data:`BOUNDS_META_FILE`)."""
    return {
        "format": _FORMAT, "version": _VERSION, "engine": engine,
        "limit_m": None if math.isinf(limit) else float(limit),
        "network": network_fingerprint(network),
        "cells": cells_fingerprint(cells, capacity=capacity, max_depth=max_depth),
        "seconds": round(seconds, 3),
    }


def check_bounds_format(meta: Any, where: str | Path) -> None:
    """Refuse metadata that is not of a bound table this version reads.

    Parameters
    ----------
    meta
        The parsed content of :data:`BOUNDS_META_FILE`.
    where
        The table's path or URL, for the message.

    Raises
    ------
    BoundsTableError
        Not a dict, another format, or another format version.

    Examples
    --------
    >>> check_bounds_format({"format": "x"}, "t.bounds")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    spark_jobs.bound_table.BoundsTableError: t.bounds: unsupported bound table format 'x'...
    """
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT \
            or meta.get("version") != _VERSION:
        got = meta if isinstance(meta, dict) else {}
        msg = (f"{where}: unsupported bound table format {got.get('format')!r} version "
               f"{got.get('version')!r} (expected {_FORMAT!r} version {_VERSION})")
        raise BoundsTableError(msg)


# ---------------------------------------------------------------------------- reading
def read_bounds_rows(path: str | Path) -> tuple[dict[str, Any], FloatArray, FloatArray]:
    """(metadata, D, D_far) of a table directory, without checking it against a network.

    Raises
    ------
    FileNotFoundError
        No such directory.
    BoundsTableError
        Not a table written by the job, an unsupported version, or missing/duplicate rows.
    """
    import pyarrow.parquet as pq

    p = Path(path)
    if not p.exists():
        msg = f"bound table not found: {p}"
        raise FileNotFoundError(msg)
    meta_path = p / BOUNDS_META_FILE
    if not meta_path.is_file():
        msg = (f"{p} is not a cell-bound table written by 'roadpubsub spark "
               f"precompute-bounds' (no {BOUNDS_META_FILE})")
        raise BoundsTableError(msg)
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        msg = f"{meta_path}: unreadable metadata ({exc})"
        raise BoundsTableError(msg) from exc
    check_bounds_format(meta, p)
    try:
        rows = pq.read_table(p, columns=["cell_i", "cell_j", "D", "D_far"])
    except (pa.ArrowException, OSError) as exc:
        msg = f"{p}: cannot read the bound table rows ({exc})"
        raise BoundsTableError(msg) from exc
    n = int(meta["cells"]["n_cells"])
    try:
        D, D_far = table_from_rows(rows, n)
    except BoundsTableError as exc:
        msg = f"{p}: {exc}"
        raise BoundsTableError(msg) from exc
    return meta, D, D_far


def load_bounds_table(path: str | Path, network: RoadNetwork, cells: Cells) -> CellBounds:
    """Read a table written by :func:`roadpubsub.spark_jobs.precompute_bounds.write_bounds_table` as
    :class:`~roadpubsub.roadnet.cell_bounds.CellBounds`.

    The table must have been computed for this network and these cells: a table of another
    network (different counts or edge arrays, or direction) or of other cells (e.g. another
    ``capacity``) is rejected. The per-node border distances are recomputed here (two
    Dijkstras; see the module docstring).

    Raises
    ------
    FileNotFoundError
        No such directory.
    BoundsTableError
        Not a bound table, or one made for another network or cells.
    """
    meta, D, D_far = read_bounds_rows(path)
    check_bounds_meta(meta, path, network, cells)
    return CellBounds.from_rows(network, cells, D, D_far)


def check_bounds_meta(meta: dict[str, Any], path: str | Path, network: RoadNetwork,
                      cells: Cells) -> None:
    """Refuse a table (by its metadata) made for another network or other cells.

    Raises
    ------
    BoundsTableError
        The fingerprints differ (see :func:`load_bounds_table`).
    """
    want_net = network_fingerprint(network)
    have_net = meta.get("network", {})
    diffs = [f"{k} {have_net.get(k)!r} != {want_net[k]!r}"
             for k in ("n_nodes", "n_edges", "directed") if have_net.get(k) != want_net[k]]
    if not diffs and have_net.get("sha256") != want_net["sha256"]:
        diffs.append("edge arrays differ (SHA-256)")
    if diffs:
        msg = (f"{path}: bound table was computed for another network "
               f"({have_net.get('name')!r}; {'; '.join(diffs)}), not {network.name!r}")
        raise BoundsTableError(msg)
    want_cells = cells_fingerprint(cells)
    have_cells = meta.get("cells", {})
    if (have_cells.get("n_cells") != want_cells["n_cells"]
            or have_cells.get("sha256") != want_cells["sha256"]):
        msg = (f"{path}: bound table was computed for other cells ({have_cells.get('n_cells')} "
               f"cells, capacity {have_cells.get('capacity')}) than the given "
               f"{want_cells['n_cells']} cells; rebuild the cells with the table's capacity "
               f"or recompute the table")
        raise BoundsTableError(msg)
