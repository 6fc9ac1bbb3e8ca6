"""Edge points: places on roads, as (edge, offset in metres from the edge's first node).

Locations come from lon/lat (snapped to the nearest edge, then projected onto its polyline)
or from (u, v, offset) with node ids of the source file. All functions are vectorised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numba
import numpy as np
import numpy.typing as npt
from pyproj import CRS, Transformer
from scipy.spatial import cKDTree

from roadpubsub.roadnet.errors import InputError, InvalidLocationError, describe_rows
from roadpubsub.roadnet.lengths import snap_unless_on_grid
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.settings import DEFAULTS

__all__ = [
    "EdgeGeometry",
    "EdgePoints",
    "check_edge_ids",
    "edge_between",
    "edge_geometry",
    "locate_lonlat",
    "locate_uv",
    "locate_xy",
    "point_xy",
    "points_on_edges",
    "xy_on_edge",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class EdgePoints:
    """Points on edges: ``edge`` (int32 edge indices) and ``offset`` (metres from edge_u).

    Offsets are stored on the grid of :data:`~roadpubsub.roadnet.lengths.LENGTH_GRID_M`, like edge
    lengths, so that a distance through a point is an exact sum whatever the order.
    """

    edge: npt.NDArray[np.int32]
    offset: FloatArray

    def __post_init__(self) -> None:
        if self.edge.shape != self.offset.shape:
            msg = "edge and offset must have one shape"
            raise InputError(msg)
        object.__setattr__(self, "offset", snap_unless_on_grid(self.offset))

    def __len__(self) -> int:
        return int(self.edge.size)

    def __getitem__(self, item: int | slice | npt.NDArray[np.int64] | npt.NDArray[np.bool_]
                    ) -> EdgePoints:
        idx = np.atleast_1d(np.arange(len(self))[item]) if isinstance(item, int) else item
        return EdgePoints(np.atleast_1d(self.edge[idx]), np.atleast_1d(self.offset[idx]))

    @classmethod
    def of(cls, edge: npt.ArrayLike, offset: npt.ArrayLike) -> EdgePoints:
        """Build from array-likes (copies, with the canonical dtypes)."""
        return cls(np.atleast_1d(np.array(edge, dtype=np.int32)),
                   np.atleast_1d(np.array(offset, dtype=np.float64)))

    @classmethod
    def concat(cls, parts: Sequence[EdgePoints]) -> EdgePoints:
        """The points of each part, in order."""
        return cls(np.concatenate([p.edge for p in parts]).astype(np.int32),
                   np.concatenate([p.offset for p in parts]).astype(np.float64))


def _pieces(network: RoadNetwork, piece_m: float) -> tuple[FloatArray, IntArray, float]:
    """Midpoints of polyline segments cut into pieces <= piece_m, with their segment index."""
    xy = network.geom_xy
    seg_start = np.arange(xy.shape[0] - 1)
    # Drop the joins between one edge's last point and the next edge's first point.
    is_join = np.zeros(xy.shape[0] - 1, dtype=bool)
    is_join[network.geom_ptr[1:-1] - 1] = True
    seg_start = seg_start[~is_join]
    a = xy[seg_start]
    b = xy[seg_start + 1]
    seg_len = np.hypot(*(b - a).T)
    n_pieces = np.maximum(1, np.ceil(seg_len / piece_m)).astype(np.int64)
    seg_of_piece = np.repeat(np.arange(seg_start.size), n_pieces)
    first = np.cumsum(n_pieces) - n_pieces
    k = np.arange(seg_of_piece.size) - first[seg_of_piece]
    frac = (k + 0.5) / n_pieces[seg_of_piece]
    mids = a[seg_of_piece] + frac[:, None] * (b - a)[seg_of_piece]
    half = float(np.max(seg_len / n_pieces / 2.0)) if seg_len.size else 0.0
    return mids, seg_start[seg_of_piece], half


class _SegmentIndex:
    """Nearest polyline segment search over a network (cached on the network)."""

    def __init__(self, network: RoadNetwork, piece_m: float) -> None:
        mids, seg, half = _pieces(network, piece_m)
        self.tree = cKDTree(mids)
        self.piece_segment = seg
        self.half_piece = half
        xy = network.geom_xy
        # Which edge owns each polyline vertex, and the polyline distance of each vertex
        # from its edge's start.
        counts = np.diff(network.geom_ptr)
        self.vertex_edge = np.repeat(np.arange(network.n_edges), counts)
        step = np.zeros(xy.shape[0])
        step[1:] = np.hypot(*np.diff(xy, axis=0).T)
        step[network.geom_ptr[:-1]] = 0.0
        cum = np.cumsum(step)
        self.vertex_along = cum - np.repeat(cum[network.geom_ptr[:-1]], counts)


def _segment_index(network: RoadNetwork, piece_m: float) -> _SegmentIndex:
    return network.memo(f"locations.segment_index:{piece_m}",
                        lambda: _SegmentIndex(network, piece_m))


def locate_xy(
    network: RoadNetwork,
    x: npt.ArrayLike,
    y: npt.ArrayLike,
    *,
    max_snap_m: float = DEFAULTS.snap_distance_m,
    labels: npt.ArrayLike | None = None,
    piece_m: float = DEFAULTS.locate_piece_m,
) -> tuple[EdgePoints, FloatArray]:
    """Snap projected points (metres in ``network.crs``) to their nearest edge.

    Returns the edge points and each point's snap distance in metres. The offset is the
    projection's position along the edge polyline, scaled to the edge's length.

    Raises
    ------
    InvalidLocationError
        For points farther than ``max_snap_m`` from every road, or not finite; the message
        names them by ``labels`` (row numbers by default).
    ValueError
        When ``max_snap_m`` is negative or NaN.
    """
    if not max_snap_m >= 0:  # also refuses NaN, which would switch the check off
        msg = f"the largest snap distance must be >= 0 metres (inf: any), got {max_snap_m!r}"
        raise InputError(msg)
    px = np.atleast_1d(np.asarray(x, dtype=np.float64))
    py = np.atleast_1d(np.asarray(y, dtype=np.float64))
    names = np.arange(px.size) if labels is None else np.asarray(labels)
    bad = ~(np.isfinite(px) & np.isfinite(py))
    if bad.any():
        msg = f"locations that are missing or not finite: {_labels(names, bad)}"
        raise InvalidLocationError(msg)
    if px.size == 0:
        return EdgePoints.of([], []), np.empty(0)
    idx = _segment_index(network, piece_m)
    q = np.column_stack([px, py])
    xy = network.geom_xy
    # The nearest piece midpoint is within half a piece of the true nearest segment, so
    # every segment closer than (nearest midpoint distance + half piece) is a candidate.
    k = min(16, idx.tree.n)
    d_mid, i_mid = idx.tree.query(q, k=k)
    d_mid = d_mid.reshape(px.size, k)
    i_mid = i_mid.reshape(px.size, k)
    seg = idx.piece_segment[i_mid]
    best_d, best_seg, best_t = _closest_on_segments(q, seg, xy)
    radius = best_d + idx.half_piece
    # Rare: candidates beyond the k nearest midpoints; look them up exactly.
    need = d_mid[:, -1] < radius
    for row in np.flatnonzero(need):
        cand = np.asarray(idx.tree.query_ball_point(q[row], radius[row]), dtype=np.int64)
        s2 = idx.piece_segment[cand][None, :]
        d2, sg2, t2 = _closest_on_segments(q[row:row + 1], s2, xy)
        if d2[0] < best_d[row]:
            best_d[row], best_seg[row], best_t[row] = d2[0], sg2[0], t2[0]
    far = best_d > max_snap_m
    if far.any():
        msg = (f"locations farther than {max_snap_m:g} m from every road: "
               f"{_labels(names, far)}")
        raise InvalidLocationError(msg)
    edge = idx.vertex_edge[best_seg]
    seg_len = np.hypot(*(xy[best_seg + 1] - xy[best_seg]).T)
    along = idx.vertex_along[best_seg] + best_t * seg_len
    glen = network.geom_length[edge]
    length = network.edge_length[edge]
    frac = np.divide(along, glen, out=np.zeros_like(along), where=glen > 0)
    offset = np.clip(frac, 0.0, 1.0) * length
    return EdgePoints.of(edge, offset), best_d


def _closest_on_segments(
    q: FloatArray, seg: IntArray, xy: FloatArray
) -> tuple[FloatArray, IntArray, FloatArray]:
    """Per query row, the closest of its candidate segments: (distance, segment, t in [0,1])."""
    a = xy[seg]
    ab = xy[seg + 1] - a
    aq = q[:, None, :] - a
    denom = np.einsum("ijk,ijk->ij", ab, ab)
    t = np.divide(np.einsum("ijk,ijk->ij", aq, ab), denom, out=np.zeros_like(denom),
                  where=denom > 0)
    t = np.clip(t, 0.0, 1.0)
    proj = a + t[..., None] * ab
    d = np.hypot(*(q[:, None, :] - proj).transpose(2, 0, 1))
    j = np.argmin(d, axis=1)
    rows = np.arange(q.shape[0])
    return d[rows, j], seg[rows, j], t[rows, j]


def locate_lonlat(
    network: RoadNetwork,
    lon: npt.ArrayLike,
    lat: npt.ArrayLike,
    *,
    max_snap_m: float = DEFAULTS.snap_distance_m,
    labels: npt.ArrayLike | None = None,
) -> tuple[EdgePoints, FloatArray]:
    """Snap WGS84 points (degrees) to their nearest edge; see :func:`locate_xy`."""
    lo = np.atleast_1d(np.asarray(lon, dtype=np.float64))
    la = np.atleast_1d(np.asarray(lat, dtype=np.float64))
    names = np.arange(lo.size) if labels is None else np.asarray(labels)
    bad = ~(np.isfinite(lo) & np.isfinite(la) & (np.abs(la) <= 90) & (np.abs(lo) <= 180))
    if bad.any():
        msg = f"locations with missing or invalid lon/lat: {_labels(names, bad)}"
        raise InvalidLocationError(msg)
    tr = Transformer.from_crs(CRS.from_epsg(4326), CRS.from_user_input(network.crs),
                              always_xy=True)
    x, y = tr.transform(lo, la)
    return locate_xy(network, x, y, max_snap_m=max_snap_m, labels=names)


def locate_uv(
    network: RoadNetwork,
    u: npt.ArrayLike,
    v: npt.ArrayLike,
    offset: npt.ArrayLike,
    *,
    labels: npt.ArrayLike | None = None,
    tolerance_m: float = 1e-6,
    near_xy: npt.ArrayLike | None = None,
) -> EdgePoints:
    """Edge points from original node ids (u, v) and an offset in metres from u.

    An edge stored as (v, u) is accepted and the offset measured from its other end. Among
    parallel edges between u and v, the one whose point at the offset lies nearest to
    ``near_xy`` is taken; rows without it (or with NaN there) take the shortest edge long
    enough for the offset. In a directed network a one-way edge must be named in its
    travel direction.

    Parameters
    ----------
    near_xy
        Optional (k, 2) positions in metres in ``network.crs`` (e.g. the rows' own lon/lat,
        projected) that tell parallel edges apart.

    Raises
    ------
    InvalidLocationError
        Unknown node ids, no edge between u and v, or an offset outside [0, length].
    """
    uu = np.atleast_1d(np.asarray(u, dtype=np.int64))
    vv = np.atleast_1d(np.asarray(v, dtype=np.int64))
    off = np.atleast_1d(np.asarray(offset, dtype=np.float64))
    if uu.shape == vv.shape == off.shape:
        found = _locate_uv_plain(network, uu, vv, off, near_xy, tolerance_m)
        if found is not None:
            return found
    return _locate_uv_general(network, uu, vv, off, labels=labels, tolerance_m=tolerance_m,
                              near_xy=near_xy)


class _UvArrays(NamedTuple):
    """What the compiled (u, v, offset) lookup reads of a network."""

    node_sorted: IntArray  # original node ids, sorted
    node_order: IntArray  # node index of each sorted id
    edge_keys: IntArray  # u * n_nodes + v, sorted, shortest edge first among equal keys
    key_edge: IntArray  # edge of each key
    edge_length: FloatArray
    edge_oneway: npt.NDArray[np.bool_]
    has_parallel: npt.NDArray[np.bool_]
    n_nodes: int
    directed: bool


def _uv_arrays(network: RoadNetwork) -> _UvArrays:
    def build() -> _UvArrays:
        order = network.memo("id_order", lambda: np.argsort(network.node_ids, kind="stable"))
        node_sorted = network.memo("sorted_ids", lambda: network.node_ids[order])
        keys, key_edge = _edge_keys(network)
        return _UvArrays(np.ascontiguousarray(node_sorted, dtype=np.int64),
                         np.ascontiguousarray(order, dtype=np.int64),
                         np.ascontiguousarray(keys, dtype=np.int64),
                         np.ascontiguousarray(key_edge, dtype=np.int64),
                         np.ascontiguousarray(network.edge_length, dtype=np.float64),
                         np.ascontiguousarray(network.edge_oneway, dtype=np.bool_),
                         np.ascontiguousarray(_has_parallel(network), dtype=np.bool_),
                         int(network.n_nodes), bool(network.directed))

    return network.memo("locations.uv_arrays", build)


@numba.njit(cache=True, nogil=True)
def _first_of(sorted_values: IntArray, values: IntArray, x: int) -> int:
    # the value of the first entry whose key is x (keys sorted), -1 when none is
    pos = np.searchsorted(sorted_values, x)
    if pos < sorted_values.size and sorted_values[pos] == x:
        return int(values[pos])
    return -1


# Holds the GIL (no nogil): a call lasts microseconds, and a thread that releases the GIL
# for so little waits about 100 µs to get it back from a busy thread (the live service's
# apply thread against its event loop); measured: 5-6% less server CPU per request.
@numba.njit(cache=True)
def _locate_uv_kernel(net: _UvArrays, u: IntArray, v: IntArray, off: FloatArray,
                      known: npt.NDArray[np.bool_], tolerance_m: float, edge_out: IntArray,
                      offset_out: FloatArray) -> bool:
    """:func:`_locate_uv_general` for rows that are all valid and name no edge with a
    parallel twin to choose from (the same operations, row by row); False, with the
    outputs unfinished, at the first row that is not so."""
    n = net.n_nodes
    for i in range(u.size):
        ui = _first_of(net.node_sorted, net.node_order, u[i])
        vi = _first_of(net.node_sorted, net.node_order, v[i])
        o = off[i]
        if ui < 0 or vi < 0 or not np.isfinite(o):
            return False
        # edge_between: the shortest edge either way, a one-way edge only forwards
        fwd = _first_of(net.edge_keys, net.key_edge, ui * n + vi)
        back = _first_of(net.edge_keys, net.key_edge, vi * n + ui)
        if net.directed and back >= 0 and net.edge_oneway[back]:
            back = -1
        use_back = back >= 0 and (fwd < 0 or net.edge_length[back] < net.edge_length[fwd])
        e = back if use_back else fwd
        if e < 0:
            return False
        length = net.edge_length[e]
        if net.has_parallel[e] and (known[i] or o > length + tolerance_m):
            return False  # _choose_parallel would look at this row
        if o < -tolerance_m or o > length + tolerance_m:
            return False
        o = min(max(o, 0.0), length)  # np.clip
        edge_out[i] = e
        offset_out[i] = length - o if use_back else o
    return True


def _locate_uv_plain(network: RoadNetwork, uu: IntArray, vv: IntArray, off: FloatArray,
                     near_xy: npt.ArrayLike | None, tolerance_m: float) -> EdgePoints | None:
    """:func:`locate_uv` compiled, when no row is invalid or has parallel edges to choose
    from (a moving vehicle's single location is one row: the vectorised path was some
    thirty numpy calls on one-element arrays); None otherwise."""
    if near_xy is None:
        known = np.zeros(uu.size, dtype=np.bool_)
    else:
        near = np.asarray(near_xy, dtype=np.float64)
        if near.size != 2 * uu.size:
            return None
        known = np.asarray(np.isfinite(near.reshape(uu.size, 2)).all(axis=1), dtype=np.bool_)
    edge = np.empty(uu.size, dtype=np.int64)
    out = np.empty(uu.size, dtype=np.float64)
    if not _locate_uv_kernel(_uv_arrays(network), np.ascontiguousarray(uu),
                             np.ascontiguousarray(vv), np.ascontiguousarray(off), known,
                             float(tolerance_m), edge, out):
        return None
    return EdgePoints.of(edge, out)


def _locate_uv_general(network: RoadNetwork, uu: IntArray, vv: IntArray, off: FloatArray, *,
                       labels: npt.ArrayLike | None, tolerance_m: float,
                       near_xy: npt.ArrayLike | None) -> EdgePoints:
    """:func:`locate_uv` for any rows, vectorised; names the rows it refuses."""
    names = np.arange(uu.size) if labels is None else np.asarray(labels)
    ui = network.node_index(uu)
    vi = network.node_index(vv)
    unknown = (ui < 0) | (vi < 0)
    if unknown.any():
        msg = f"locations naming unknown node ids: {_labels(names, unknown)}"
        raise InvalidLocationError(msg)
    if not np.isfinite(off).all():
        msg = f"locations with a missing offset: {_labels(names, ~np.isfinite(off))}"
        raise InvalidLocationError(msg)
    edge, flipped = edge_between(network, ui, vi)
    near = (np.full((uu.size, 2), np.nan) if near_xy is None
            else np.asarray(near_xy, dtype=np.float64).reshape(uu.size, 2))
    _choose_parallel(network, ui, vi, off, near, edge, flipped, tolerance_m=tolerance_m)
    missing = edge < 0
    if missing.any():
        msg = f"locations whose (u, v) is not an edge of the network: {_labels(names, missing)}"
        raise InvalidLocationError(msg)
    length = network.edge_length[edge]
    outside = (off < -tolerance_m) | (off > length + tolerance_m)
    if outside.any():
        msg = f"offsets outside their edge's length: {_labels(names, outside)}"
        raise InvalidLocationError(msg)
    off = np.clip(off, 0.0, length)
    return EdgePoints.of(edge, np.where(flipped, length - off, off))


def edge_between(network: RoadNetwork, ui: IntArray, vi: IntArray
                 ) -> tuple[IntArray, npt.NDArray[np.bool_]]:
    """The shortest edge joining each (u, v) node pair, as a driver may travel it.

    Parameters
    ----------
    network : RoadNetwork
        The network; on a directed one, a one-way edge joins (u, v) only forwards.
    ui, vi : ndarray of int64
        Node indices (0 to ``n_nodes - 1``), one pair per row.

    Returns
    -------
    edge : ndarray of int64
        Per pair the edge index, or -1 where no edge joins the pair.
    flipped : ndarray of bool
        Per pair, whether the edge is stored as (v, u).
    """
    keys, order = _edge_keys(network)
    n = np.int64(network.n_nodes)

    def find(a: IntArray, b: IntArray) -> IntArray:
        k = a * n + b
        pos = np.minimum(np.searchsorted(keys, k), keys.size - 1)
        return np.where(keys[pos] == k, order[pos], -1)

    fwd = find(ui, vi)
    back = find(vi, ui)
    if network.directed:
        back = np.where(network.edge_oneway[np.maximum(back, 0)], -1, back)
    use_back = (fwd < 0) | ((back >= 0) & (fwd >= 0) &
                            (network.edge_length[np.maximum(back, 0)] <
                             network.edge_length[np.maximum(fwd, 0)]))
    use_back &= back >= 0
    return np.where(use_back, back, fwd), use_back


def _edge_keys(network: RoadNetwork) -> tuple[IntArray, IntArray]:
    """(sorted u * n + v keys, the edges in that order), shortest first among equal keys."""
    def build() -> tuple[IntArray, IntArray]:
        n = np.int64(network.n_nodes)
        eu = network.edge_u.astype(np.int64)
        ev = network.edge_v.astype(np.int64)
        # Shortest first, so the first match per key wins among parallel edges.
        order = np.lexsort((network.edge_length, eu * n + ev))
        return (eu * n + ev)[order], order

    return network.memo("locations.edge_keys", build)


def _has_parallel(network: RoadNetwork) -> npt.NDArray[np.bool_]:
    """Per edge: whether another edge joins the same two nodes (either way round)."""
    def build() -> npt.NDArray[np.bool_]:
        lo = np.minimum(network.edge_u, network.edge_v).astype(np.int64)
        hi = np.maximum(network.edge_u, network.edge_v).astype(np.int64)
        _, inverse, counts = np.unique(lo * network.n_nodes + hi, return_inverse=True,
                                       return_counts=True)
        return np.asarray(counts[inverse] > 1)

    return network.memo("locations.has_parallel", build)


def _choose_parallel(
    network: RoadNetwork, ui: IntArray, vi: IntArray, offset: FloatArray, near_xy: FloatArray,
    edge: IntArray, flipped: npt.NDArray[np.bool_], *, tolerance_m: float,
) -> None:
    """Where several edges join u and v, switch ``edge``/``flipped`` (in place) to the one
    whose point at ``offset`` lies nearest to ``near_xy`` (the writer's own edge), or, in a
    row without ``near_xy``, to the shortest one the offset fits on."""
    keys, order = _edge_keys(network)
    n = np.int64(network.n_nodes)
    known = np.asarray(np.isfinite(near_xy).all(axis=1), dtype=bool)
    length_now = network.edge_length[np.maximum(edge, 0)]
    misfit = (edge >= 0) & (offset > length_now + tolerance_m)
    # Only rows on an edge with a parallel twin have a choice (one gather for all rows;
    # the range searches below then run on those few rows alone).
    rows = np.flatnonzero((edge >= 0) & _has_parallel(network)[np.maximum(edge, 0)]
                          & (known | misfit))
    if rows.size == 0:
        return
    ranges = []
    for a, b, is_back in ((ui[rows], vi[rows], False), (vi[rows], ui[rows], True)):
        k = a * n + b
        lo = np.zeros(ui.size, dtype=np.int64)
        hi = np.zeros(ui.size, dtype=np.int64)
        lo[rows], hi[rows] = np.searchsorted(keys, k, "left"), np.searchsorted(keys, k, "right")
        ranges.append((lo, hi, is_back))
    cand_row, cand_edge, cand_back = [], [], []
    for lo, hi, is_back in ranges:
        width = (hi - lo)[rows]
        row = np.repeat(rows, width)
        pos = np.arange(row.size) - np.repeat(np.cumsum(width) - width, width) + lo[row]
        cand_row.append(row)
        cand_edge.append(order[pos])
        cand_back.append(np.full(row.size, is_back))
    row = np.concatenate(cand_row)
    cand = np.concatenate(cand_edge)
    back = np.concatenate(cand_back)
    if network.directed:
        keep = ~(back & network.edge_oneway[cand])
        row, cand, back = row[keep], cand[keep], back[keep]
    length = network.edge_length[cand]
    off = offset[row]
    fits = (off >= -tolerance_m) & (off <= length + tolerance_m)
    along = np.clip(off, 0.0, length)
    xy = point_xy(network, EdgePoints.of(cand, np.where(back, length - along, along)))
    # Nearest to the given position; without one, shortest (each row uses one rule).
    gap = np.where(known[row], np.hypot(*(xy - near_xy[row]).T), length)
    gap = np.where(fits, gap, np.inf)
    best = np.lexsort((gap, row))
    first = best[np.r_[True, row[best][1:] != row[best][:-1]]]
    first = first[np.isfinite(gap[first])]
    edge[row[first]] = cand[first]
    flipped[row[first]] = back[first]


def check_edge_ids(edge: npt.NDArray[np.integer], n_edges: int) -> None:
    """Refuse edge ids outside [0, n_edges) before compiled code indexes with them.

    Raises
    ------
    InvalidLocationError
        Naming the first offending row.
    """
    if edge.size and (int(edge.min()) < 0 or int(edge.max()) >= n_edges):
        row = int(np.flatnonzero((edge < 0) | (edge >= n_edges))[0])
        msg = f"edge id {int(edge[row])} (row {row}) is outside [0, {n_edges})"
        raise InvalidLocationError(msg)


@numba.njit(cache=True, nogil=True)
def _on_edges(edge: npt.NDArray[np.int32], offset: FloatArray,
              edge_length: FloatArray) -> bool:  # pragma: no cover - compiled
    n = edge_length.size
    for i in range(edge.size):
        e = edge[i]
        if e < 0 or e >= n:
            return False
        if not (offset[i] >= 0.0 and offset[i] <= edge_length[e]):  # NaN fails too
            return False
    return True


def points_on_edges(points: EdgePoints, edge_length: FloatArray) -> bool:
    """Whether every point lies on the network: an edge id in [0, n_edges) and a finite
    offset within [0, the edge's length] (metres).

    One compiled pass, for callers that check every request's points; they name the
    offending rows themselves when it answers False. It answers False too for columns not
    of :class:`EdgePoints`' own dtypes (int32 edges, float64 offsets), which it does not
    cast (a cast could wrap a bad id onto a good one): the caller's general check decides.

    Examples
    --------
    >>> import numpy as np
    >>> length = np.array([10.0, 5.0])
    >>> points_on_edges(EdgePoints.of([0, 1], [10.0, 0.0]), length)
    True
    >>> points_on_edges(EdgePoints.of([1], [5.5]), length), points_on_edges(
    ...     EdgePoints.of([2], [0.0]), length)
    (False, False)
    """
    edge, offset = np.asarray(points.edge), np.asarray(points.offset)
    if (edge.dtype != np.int32 or offset.dtype != np.float64 or edge.ndim != 1
            or edge.shape != offset.shape):
        return False
    return bool(_on_edges(np.ascontiguousarray(edge), np.ascontiguousarray(offset),
                          np.ascontiguousarray(edge_length, dtype=np.float64)))


class EdgeGeometry(NamedTuple):
    """The edge polylines :func:`xy_on_edge` reads (for compiled callers): edge and
    polyline lengths (metres), the CSR of polyline vertices, their coordinates (metres in
    the network's CRS) and each vertex's polyline distance from its edge's start."""

    edge_length: FloatArray
    geom_length: FloatArray
    geom_ptr: IntArray
    geom_xy: FloatArray
    vertex_along: FloatArray


def edge_geometry(network: RoadNetwork) -> EdgeGeometry:
    """The :class:`EdgeGeometry` of ``network`` (its vertex distances cached on it)."""
    idx = _segment_index(network, DEFAULTS.locate_piece_m)
    return EdgeGeometry(network.edge_length, network.geom_length, network.geom_ptr,
                        network.geom_xy, idx.vertex_along)


@numba.njit(cache=True, nogil=True, inline="always")
def xy_on_edge(  # pragma: no cover - compiled
    geo: EdgeGeometry, e: int, offset: float
) -> tuple[float, float]:
    """Projected (x, y) of the point ``offset`` metres from the start of edge ``e``
    (``e`` must be a valid edge: compiled, nothing is checked)."""
    length = geo.edge_length[e]
    frac = offset / length if length > 0 else 0.0
    along = frac * geo.geom_length[e]
    # Binary search for the polyline segment holding ``along``.
    left = geo.geom_ptr[e]
    right = geo.geom_ptr[e + 1] - 1
    while right - left > 1:
        mid = (left + right) // 2
        if geo.vertex_along[mid] <= along:
            left = mid
        else:
            right = mid
    seg = geo.vertex_along[right] - geo.vertex_along[left]
    t = (along - geo.vertex_along[left]) / seg if seg > 0 else 0.0
    t = min(max(t, 0.0), 1.0)
    ax = geo.geom_xy[left, 0]
    ay = geo.geom_xy[left, 1]
    return ax + t * (geo.geom_xy[right, 0] - ax), ay + t * (geo.geom_xy[right, 1] - ay)


@numba.njit(cache=True, nogil=True)
def _point_xy_kernel(  # pragma: no cover - compiled
    edge: npt.NDArray[np.int32], offset: FloatArray, geo: EdgeGeometry, out: FloatArray,
) -> None:
    for i in range(edge.size):
        out[i, 0], out[i, 1] = xy_on_edge(geo, edge[i], offset[i])


def point_xy(network: RoadNetwork, points: EdgePoints) -> FloatArray:
    """Projected coordinates (metres in ``network.crs``) of edge points, shape (k, 2)."""
    out = np.empty((len(points), 2))
    if len(points) == 0:
        return out
    edge = np.ascontiguousarray(points.edge, dtype=np.int32)
    check_edge_ids(edge, network.n_edges)
    _point_xy_kernel(edge, np.ascontiguousarray(points.offset, dtype=np.float64),
                     edge_geometry(network), out)
    return out


def _labels(names: npt.NDArray[np.generic], mask: npt.NDArray[np.bool_]) -> str:
    rows = np.flatnonzero(mask)
    return describe_rows(names[rows[:10]].tolist(), total=rows.size)
