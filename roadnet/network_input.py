"""The input arrays of :meth:`RoadNetwork.from_arrays
<roadpubsub.roadnet.network.RoadNetwork.from_arrays>`
checked and resolved: node arrays (one length, unique ids, valid lon/lat), edge ends as
node indices, valid lengths, and edge polylines projected to the network's metric CRS.
Every problem raises one :class:`~roadpubsub.roadnet.errors.NetworkFormatError` naming the rows.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from pyproj import Transformer

from roadpubsub.roadnet.errors import NetworkFormatError, describe_rows
from roadpubsub.roadnet.lengths import LONGEST_EXACT_M

__all__: list[str] = []  # helpers of roadpubsub.roadnet.network only

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def checked_nodes(node_ids: npt.ArrayLike, node_lon: npt.ArrayLike, node_lat: npt.ArrayLike,
                   name: str) -> tuple[IntArray, FloatArray, FloatArray, IntArray, IntArray]:
    """Node arrays checked (one length, unique ids, valid degrees): (ids, lon, lat, the
    order that sorts ids, the sorted ids)."""
    ids = np.asarray(node_ids, dtype=np.int64)
    lon = np.asarray(node_lon, dtype=np.float64)
    lat = np.asarray(node_lat, dtype=np.float64)
    if not (ids.shape == lon.shape == lat.shape) or ids.ndim != 1:
        msg = "node_ids, node_lon and node_lat must be 1-d arrays of one length"
        raise NetworkFormatError(msg)
    if ids.size == 0:
        msg = f"network {name!r} has no nodes"
        raise NetworkFormatError(msg)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    dup = sorted_ids[1:][sorted_ids[1:] == sorted_ids[:-1]]
    if dup.size:
        msg = f"duplicate node ids: {describe_rows(np.unique(dup).tolist())}"
        raise NetworkFormatError(msg)
    bad = ~(np.isfinite(lon) & np.isfinite(lat) & (np.abs(lat) <= 90) & (np.abs(lon) <= 180))
    if bad.any():
        msg = f"nodes with invalid lon/lat: {describe_rows(ids[bad].tolist())}"
        raise NetworkFormatError(msg)
    return ids, lon, lat, order, sorted_ids


def edge_nodes(u_ids: IntArray, v_ids: IntArray, length: FloatArray, sorted_ids: IntArray,
                order: IntArray) -> tuple[IntArray, IntArray]:
    """Node indices of each edge's ends, every end checked to name a known node."""
    if not (u_ids.shape == v_ids.shape == length.shape):
        msg = "edge_u_ids, edge_v_ids and edge_length must have one length"
        raise NetworkFormatError(msg)
    u = lookup_ids(sorted_ids, order, u_ids)
    v = lookup_ids(sorted_ids, order, v_ids)
    missing = (u < 0) | (v < 0)
    if missing.any():
        rows = np.flatnonzero(missing)
        msg = f"edges naming unknown nodes (row: u-v): {_edge_labels(rows, u_ids, v_ids)}"
        raise NetworkFormatError(msg)
    return u, v


def edge_polylines(geom_ptr: npt.ArrayLike | None, geom_lonlat: npt.ArrayLike | None,
                    to_metric: Transformer, x: FloatArray, y: FloatArray, u: IntArray,
                    v: IntArray, n_edges: int) -> tuple[IntArray, FloatArray]:
    """(geom_ptr, geom_xy) in metres: the given polylines projected with their ends pinned
    to the nodes, or straight segments between the nodes when none are given."""
    if geom_ptr is None or geom_lonlat is None:
        ptr = np.arange(0, 2 * n_edges + 1, 2, dtype=np.int64)
        gxy = np.empty((2 * n_edges, 2), dtype=np.float64)
        gxy[0::2, 0], gxy[0::2, 1] = x[u], y[u]
        gxy[1::2, 0], gxy[1::2, 1] = x[v], y[v]
        return ptr, gxy
    ptr = np.asarray(geom_ptr, dtype=np.int64)
    gll = np.asarray(geom_lonlat, dtype=np.float64).reshape(-1, 2)
    if ptr.shape != (n_edges + 1,) or ptr[0] != 0 or ptr[-1] != gll.shape[0]:
        msg = "geom_ptr must have one entry per edge plus one and span geom_lonlat"
        raise NetworkFormatError(msg)
    short = np.flatnonzero(np.diff(ptr) < 2)
    if short.size:
        listed = describe_rows(short.tolist())
        msg = f"edge geometries with fewer than two points (rows): {listed}"
        raise NetworkFormatError(msg)
    gx, gy = to_metric.transform(gll[:, 0], gll[:, 1])
    gxy = np.column_stack([gx, gy]).astype(np.float64)
    # Pin polyline ends to the node positions so an offset of 0 or the full length lands
    # exactly on the node.
    gxy[ptr[:-1], 0], gxy[ptr[:-1], 1] = x[u], y[u]
    gxy[ptr[1:] - 1, 0], gxy[ptr[1:] - 1, 1] = x[v], y[v]
    return ptr, gxy

def lookup_ids(sorted_ids: IntArray, order: IntArray, query: IntArray) -> IntArray:
    """Positions of ``query`` ids in the unsorted id array, -1 where absent."""
    pos = np.searchsorted(sorted_ids, query)
    pos_clipped = np.minimum(pos, sorted_ids.size - 1)
    found = sorted_ids[pos_clipped] == query
    return np.where(found, order[pos_clipped], -1).astype(np.int64)


def check_lengths(length: FloatArray, u_ids: IntArray, v_ids: IntArray) -> None:
    """One NetworkFormatError naming the edges whose length is not a valid one."""
    bad = ~(np.isfinite(length) & (length >= 0) & (length < LONGEST_EXACT_M))
    if bad.any():
        rows = np.flatnonzero(bad)
        msg = (f"edges with invalid length (finite, 0 <= length < {LONGEST_EXACT_M:.0f} m;"
               f" row: u-v): {_edge_labels(rows, u_ids, v_ids)}")
        raise NetworkFormatError(msg)


def _edge_labels(rows: IntArray, u_ids: IntArray, v_ids: IntArray) -> str:
    return describe_rows([f"{r}: {u_ids[r]}-{v_ids[r]}" for r in rows[:10]], total=rows.size)
