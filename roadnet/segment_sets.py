"""Sets of road-segment pieces: routes and areas as locations, and the distance from a set.

A :class:`SegmentSet` is a list of *pieces* ``(edge, start, end)``: the part of ``edge``
between ``start`` and ``end`` metres from its first node ``edge_u`` (``0 <= start <= end
<= length``; a piece may be a single point). It is the location of a subscription that is
not a point: a route or an area (issue 32). The set index (:mod:`roadpubsub.index.set_cells`,
:mod:`roadpubsub.pruning.set_matchers`), ``roadpubsub match`` and the live service
(:mod:`roadpubsub.service.live_sets`) build on it.

Constructors
------------
:func:`route_from_lonlat`
    A route through lon/lat waypoints (a GeoJSON LineString's coordinates). Each waypoint
    is snapped to the network (:func:`~roadpubsub.roadnet.locations.locate_lonlat`) and consecutive
    ones are joined by a shortest path, as a driver would take (on a directed network,
    travelling the one-way streets their way).
:func:`route_through_points`
    The same through waypoints already on the network (edge points).
:func:`route_from_nodes`
    A route along an explicit node path (original node ids), starting ``start_m`` metres
    along its first edge and ending ``end_m`` metres along its last one.
:func:`area_from_geojson`
    Every road inside a GeoJSON Polygon or MultiPolygon (lon/lat), a road crossing its
    boundary for the part(s) inside.

Each returns the set with how it was resolved (:attr:`SegmentSet.node_paths`);
:meth:`SegmentSet.to_json` gives both in JSON (original node ids, edge indices, offsets in
metres), enough for any other implementation to recompute every distance.

The tie rule of routes
----------------------
Lengths and offsets lie on the grid of :mod:`roadpubsub.roadnet.lengths`, so path lengths are exact
sums and equal lengths are really equal (on grid-like networks they are common). Between
two consecutive snapped waypoints p and q the route is, among the shortest ways from p to
q:

1. the direct run along their shared edge when it is one of the shortest (it visits no
   node); otherwise
2. the one visiting the *fewest nodes*; among those,
3. the one whose sequence of *original node ids* is lexicographically smallest; and
   between two consecutive nodes of that sequence, the edge of the lowest index among the
   shortest ones joining them in the direction of travel.

A way's nodes run from the node by which it leaves p's edge to the node by which it enters
q's edge (so a waypoint standing on a junction may leave its edge by the far end when that
passes fewer nodes: the grid test in ``tests/roadnet/test_segment_sets.py`` shows one).

On a loop edge (both ends one node) a point leaves forwards (by ``edge_v``) and is entered
from ``edge_u`` when either way is as short. Rule 2 makes the choice well defined even with
zero-length edges (a shortest path could otherwise loop through them) and makes rule 3 a
greedy choice, node after node. The chosen way is exact: one search gives the distances
from p, and a node belongs to a shortest way iff its distance plus the arc's length equals
the next node's distance (exact sums).

Areas
-----
The polygon's lon/lat vertices are projected to the network's CRS and joined by straight
lines there (as the network's own polylines are). Each edge's polyline is clipped to the
closed polygon segment by segment; a part of positive length inside becomes a piece whose
offsets are its polyline distances from ``edge_u`` scaled to the edge's length, the
mapping of :func:`~roadpubsub.roadnet.locations.locate_xy` and
:func:`~roadpubsub.roadnet.locations.point_xy`.
Parts touching the polygon in a single point are left out; an edge whose polyline has no
length counts whole when its point lies in the polygon.

The distance from a set
-----------------------
dN(S, m) = min over the points p of S of dN(p, m): the shortest-path distance from the
nearest point of the set to m, 0 when m lies on a piece. On a directed network it is
measured *from the set to m*, as dN(s, m) is from a point subscription's location to the
message's (:mod:`roadpubsub.roadnet.network`). The minimum over a piece ``[a, b]`` of ``edge`` is
attained at ``b`` (leaving by ``edge_v`` at ``length - b``), at ``a`` (leaving by
``edge_u`` at ``a``, where the edge is two-way or ``a = 0``: a point on ``edge_u`` stands on
that node, the rule of :func:`~roadpubsub.roadnet.distance.exit_costs`) or, for m on the same edge
at
offset o, by the direct run: 0 if ``a <= o <= b``, ``o - b`` if ``o > b``, ``a - o`` if
``o < a`` and the edge is two-way (the run of
:func:`~roadpubsub.roadnet.dijkstra_kernels.distance_to_target_kernel`).
:func:`segment_set_distances`
is the multi-source search seeded with those exit costs;
:func:`piece_distances_to_target` finishes a reverse search from one message at pieces
(the reference matcher's side).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numba
import numpy as np
import numpy.typing as npt

from roadpubsub.roadnet.distance import (
    NodeSearch,
    entry_costs,
    exit_costs,
    point_distances_to_target,
)
from roadpubsub.roadnet.errors import InputError, InvalidLocationError
from roadpubsub.roadnet.lengths import snap_unless_on_grid
from roadpubsub.roadnet.locations import EdgePoints, edge_between, locate_lonlat
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.settings import DEFAULTS

__all__ = [
    "SegmentSet",
    "SegmentSets",
    "area_from_geojson",
    "piece_distances_to_target",
    "random_routes",
    "route_from_lonlat",
    "route_from_nodes",
    "route_through_points",
    "segment_set_distances",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Int32Array = npt.NDArray[np.int32]

#: The kinds of set :attr:`SegmentSet.kind` names.
KINDS = ("route", "area", "pieces")


def _check_pieces(network: RoadNetwork, edge: npt.ArrayLike, start: npt.ArrayLike,
                  end: npt.ArrayLike, *, what: str) -> tuple[Int32Array, FloatArray, FloatArray]:
    """The pieces as canonical arrays (offsets on the length grid), or one clear error
    naming the field and the first offending row."""
    e_raw = np.atleast_1d(np.asarray(edge))
    s = np.atleast_1d(np.asarray(start, dtype=np.float64))
    t = np.atleast_1d(np.asarray(end, dtype=np.float64))
    if not (e_raw.ndim == s.ndim == t.ndim == 1 and e_raw.size == s.size == t.size):
        msg = (f"{what}: edge, start and end must be 1-D with one row per piece, got shapes "
               f"{e_raw.shape}, {s.shape}, {t.shape}")
        raise InvalidLocationError(msg)
    if e_raw.size == 0:
        msg = f"{what}: a segment set needs at least one piece"
        raise InvalidLocationError(msg)
    if not (np.issubdtype(e_raw.dtype, np.integer)
            or (np.issubdtype(e_raw.dtype, np.floating) and np.all(e_raw == np.floor(e_raw)))):
        msg = f"{what}: edge must hold whole edge indices, got dtype {e_raw.dtype}"
        raise InvalidLocationError(msg)
    e = e_raw.astype(np.int64)

    def first_bad(mask: npt.NDArray[np.bool_], field: str, why: str) -> None:
        if mask.any():
            row = int(np.flatnonzero(mask)[0])
            value = {"edge": e, "start": s, "end": t}[field][row].item()
            msg = f"{what}: row {row}: {field} = {value!r} {why} ({int(mask.sum())} row(s))"
            raise InvalidLocationError(msg)

    first_bad((e < 0) | (e >= network.n_edges), "edge",
              f"is not an edge index of the network (0..{network.n_edges - 1})")
    first_bad(~np.isfinite(s) | (s < 0), "start", "is not a finite offset >= 0 m")
    first_bad(~np.isfinite(t), "end", "is not a finite offset")
    length = network.edge_length[e]
    first_bad(t > length, "end", "lies beyond its edge's length")
    first_bad(s > t, "start", "lies beyond the piece's end")
    s, t = snap_unless_on_grid(s), snap_unless_on_grid(t)
    return e.astype(np.int32), np.minimum(s, t), np.minimum(t, length)


@dataclass(frozen=True, eq=False)
class SegmentSet:
    """A set of road-segment pieces on one network, and how it was resolved.

    Build one with :meth:`of`, :func:`route_from_lonlat`, :func:`route_from_nodes` or
    :func:`area_from_geojson` (they validate); the fields are then canonical.

    Attributes
    ----------
    edge
        Edge index of each piece, int32, shape (k,), k >= 1.
    start, end
        Offsets in metres from the edge's ``edge_u``, ``0 <= start <= end <= length``, on
        the grid of :data:`~roadpubsub.roadnet.lengths.LENGTH_GRID_M`.
    kind
        ``"route"``, ``"area"`` or ``"pieces"`` (given directly).
    node_paths
        For a route, per leg (pair of consecutive waypoints) the internal node indices it
        passes, in travel order (empty for a direct run along one edge); empty otherwise.
        Pieces of a route come in travel order, leg after leg (they may overlap when the
        route comes back on itself; the distance is the same).
    """

    edge: Int32Array
    start: FloatArray
    end: FloatArray
    kind: str = "pieces"
    node_paths: tuple[IntArray, ...] = ()

    def __len__(self) -> int:
        return int(self.edge.size)

    @classmethod
    def of(cls, network: RoadNetwork, edge: npt.ArrayLike, start: npt.ArrayLike,
           end: npt.ArrayLike, *, kind: str = "pieces",
           node_paths: Sequence[npt.ArrayLike] = ()) -> SegmentSet:
        """A validated set of pieces on ``network``.

        Raises
        ------
        InvalidLocationError
            No piece, rows of different lengths, an unknown edge, or an offset that is not
            finite, negative, beyond its edge or (start) beyond its end; the message names
            the field and the first such row.
        """
        if kind not in KINDS:
            msg = f"segment set: kind must be one of {KINDS}, got {kind!r}"
            raise InvalidLocationError(msg)
        e, s, t = _check_pieces(network, edge, start, end, what=f"{kind} segments")
        paths = tuple(np.asarray(p, dtype=np.int64).reshape(-1) for p in node_paths)
        for i, p in enumerate(paths):
            if p.size and (p.min() < 0 or p.max() >= network.n_nodes):
                msg = f"{kind}: node path {i} names a node outside the network"
                raise InvalidLocationError(msg)
        return cls(e, s, t, kind, paths)

    @property
    def length_m(self) -> float:
        """Total length of the pieces in metres (overlaps counted twice)."""
        return float(np.sum(self.end - self.start))

    def normalized(self) -> SegmentSet:
        """The same set of road points with its pieces sorted by (edge, start) and the
        overlapping or touching pieces of one edge merged (the distance is unchanged;
        ``kind`` and ``node_paths`` are kept)."""
        e, a, b = _merge(self.edge.astype(np.int64), self.start, self.end)
        return SegmentSet(e.astype(np.int32), a, b, self.kind, self.node_paths)

    def endpoints(self) -> tuple[EdgePoints, EdgePoints]:
        """(start points, end points) of the pieces as edge points."""
        return EdgePoints(self.edge, self.start), EdgePoints(self.edge, self.end)

    def to_json(self, network: RoadNetwork) -> dict[str, Any]:
        """The set as JSON-able data: kind, node paths and segments, by original node ids.

        ``{"kind", "length_m", "node_paths": [[node id, ...] per leg], "segments": [{"edge",
        "u", "v", "start_m", "end_m"}, ...]}``: ``u``/``v`` are the original ids of the
        edge's first and second node, offsets are metres from ``u`` (floats written
        exactly). :meth:`from_json` reads it back.
        """
        ids = network.node_ids
        e = self.edge.astype(np.int64)
        segments = [{"edge": int(k), "u": int(u), "v": int(v), "start_m": float(a),
                     "end_m": float(b)}
                    for k, u, v, a, b in zip(e.tolist(), ids[network.edge_u[e]].tolist(),
                                             ids[network.edge_v[e]].tolist(),
                                             self.start.tolist(), self.end.tolist(),
                                             strict=True)]
        return {"kind": self.kind, "length_m": self.length_m,
                "node_paths": [ids[p].tolist() for p in self.node_paths],
                "segments": segments}

    @classmethod
    def from_json(cls, network: RoadNetwork, data: Mapping[str, Any]) -> SegmentSet:
        """A set written by :meth:`to_json`, checked against ``network``.

        Raises
        ------
        InvalidLocationError
            Missing fields, or segments whose ``u``/``v`` are not their edge's nodes on
            this network (another network's file), or invalid pieces.
        """
        try:
            segs = list(data["segments"])
            kind = str(data.get("kind", "pieces"))
            edge = [int(x["edge"]) for x in segs]
            start = [float(x["start_m"]) for x in segs]
            end = [float(x["end_m"]) for x in segs]
            uv = [(int(x["u"]), int(x["v"])) for x in segs]
            paths = [network.node_index(np.asarray(p, dtype=np.int64))
                     for p in data.get("node_paths", [])]
        except (KeyError, TypeError, ValueError) as exc:
            msg = f"segment set JSON: missing or malformed field ({exc})"
            raise InvalidLocationError(msg) from exc
        out = cls.of(network, np.asarray(edge, dtype=np.int64), start, end, kind=kind,
                     node_paths=paths)
        e = out.edge.astype(np.int64)
        got = np.column_stack([network.node_ids[network.edge_u[e]],
                               network.node_ids[network.edge_v[e]]])
        bad = np.flatnonzero(np.any(got != np.asarray(uv, dtype=np.int64).reshape(-1, 2),
                                    axis=1))
        if bad.size:
            msg = (f"segment set JSON: segment {int(bad[0])}: (u, v) = {uv[int(bad[0])]} is "
                   f"not edge {edge[int(bad[0])]}'s ends on this network")
            raise InvalidLocationError(msg)
        return out


@dataclass(frozen=True, eq=False)
class SegmentSets:
    """Many segment sets as one columnar batch (CSR): set i has the pieces
    ``ptr[i]:ptr[i + 1]`` of ``edge``, ``start``, ``end`` (each set at least one)."""

    ptr: IntArray
    edge: Int32Array
    start: FloatArray
    end: FloatArray

    def __post_init__(self) -> None:
        p = self.ptr
        if not (p.ndim == 1 and p.size >= 1 and p[0] == 0 and p[-1] == self.edge.size
                and self.edge.size == self.start.size == self.end.size
                and np.all(np.diff(p) >= 1)):
            msg = ("segment sets: ptr must start at 0, rise by at least 1 per set and end "
                   "at the number of pieces, with edge/start/end one row per piece")
            raise InvalidLocationError(msg)

    def __len__(self) -> int:
        return int(self.ptr.size - 1)

    @classmethod
    def of_sets(cls, sets: Sequence[SegmentSet]) -> SegmentSets:
        """The batch of ``sets``, in order (each already validated)."""
        ptr = np.zeros(len(sets) + 1, dtype=np.int64)
        np.cumsum([len(s) for s in sets], out=ptr[1:])
        if not sets:
            return cls(ptr, np.empty(0, np.int32), np.empty(0), np.empty(0))
        return cls(ptr, np.concatenate([s.edge for s in sets]).astype(np.int32),
                   np.concatenate([s.start for s in sets]),
                   np.concatenate([s.end for s in sets]))

    @property
    def owner(self) -> IntArray:
        """The set of each piece."""
        return np.repeat(np.arange(len(self), dtype=np.int64), np.diff(self.ptr))

    def take(self, rows: npt.ArrayLike) -> SegmentSets:
        """The sets ``rows``, in that order."""
        r = np.asarray(rows, dtype=np.int64)
        sizes = np.diff(self.ptr)[r]
        ptr = np.zeros(r.size + 1, dtype=np.int64)
        np.cumsum(sizes, out=ptr[1:])
        idx = np.repeat(self.ptr[r] - ptr[:-1], sizes) + np.arange(int(ptr[-1]))
        return SegmentSets(ptr, self.edge[idx], self.start[idx], self.end[idx])

    def set(self, i: int) -> SegmentSet:
        """Set ``i`` as a :class:`SegmentSet` of kind ``"pieces"``."""
        a, b = int(self.ptr[i]), int(self.ptr[i + 1])
        return SegmentSet(self.edge[a:b], self.start[a:b], self.end[a:b])


# ----------------------------------------------------------------------------- distances
@numba.njit(cache=True, nogil=True)
def _direct_runs_kernel(  # pragma: no cover - compiled
    order_edge: Int32Array, order_start: FloatArray, order_end: FloatArray,
    edge_twoway: npt.NDArray[np.bool_], tgt_edge: Int32Array, tgt_off: FloatArray,
    out: FloatArray,
) -> None:
    """Lower ``out`` by the direct run along each target's edge from the pieces on it
    (pieces sorted by edge)."""
    for i in range(tgt_edge.size):
        e = tgt_edge[i]
        o = tgt_off[i]
        j = np.searchsorted(order_edge, e)
        while j < order_edge.size and order_edge[j] == e:
            a = order_start[j]
            b = order_end[j]
            if a <= o <= b:
                d = 0.0
            elif o > b:
                d = o - b
            elif edge_twoway[e]:
                d = a - o
            else:
                d = np.inf
            if d < out[i]:
                out[i] = d
            j += 1


def segment_set_distances(network: RoadNetwork, segments: SegmentSet, targets: EdgePoints,
                          *, limit: float = np.inf, search: NodeSearch | None = None
                          ) -> FloatArray:
    """dN from the set to each target point, in metres (``inf`` beyond ``limit``).

    One multi-source forward search seeded with every piece's exit costs (``edge_v`` at
    ``length - end``; ``edge_u`` at ``start`` where the edge is two-way or ``start = 0``),
    finished at each target with its entry costs and the direct runs from the pieces on its
    edge (see the module docstring).

    Parameters
    ----------
    search
        A forward :class:`~roadpubsub.roadnet.distance.NodeSearch` on ``network`` to reuse.
    """
    search = search or NodeSearch(network, reverse=False)
    if search.reverse:
        msg = "segment_set_distances needs a forward NodeSearch"
        raise InputError(msg)
    starts, ends = segments.endpoints()
    v, cv, _, _ = exit_costs(network, ends)
    _, _, u, cu = exit_costs(network, starts)
    seeds, costs = np.r_[v, u], np.r_[cv, cu]
    ok = np.isfinite(costs)
    res = search.run(seeds[ok], costs[ok], limit=limit)
    a, ca, b, cb = entry_costs(network, targets)
    out = np.minimum(res.dist[a] + ca, res.dist[b] + cb)
    order = np.argsort(segments.edge, kind="stable")
    _direct_runs_kernel(np.ascontiguousarray(segments.edge[order], dtype=np.int32),
                        segments.start[order], segments.end[order],
                        np.ascontiguousarray(network.edge_twoway), np.ascontiguousarray(
                            targets.edge, dtype=np.int32),
                        np.ascontiguousarray(targets.offset, dtype=np.float64), out)
    out[out > limit] = np.inf
    return out


def piece_distances_to_target(network: RoadNetwork, dist: FloatArray, target: EdgePoints,
                              edge: Int32Array, start: FloatArray, end: FloatArray, *,
                              limit: float = np.inf) -> FloatArray:
    """dN from each piece to one target point, given node distances to the target.

    ``dist`` as for :func:`~roadpubsub.roadnet.distance.point_distances_to_target` (a finished
    reverse
    search seeded with the target's entry costs, bounded by ``limit``). A piece's distance
    is the smaller of its two ends' (each with its exit costs and direct run), or 0 when the
    target lies on it: the minimum over a piece is attained there (module docstring).
    """
    at_start = point_distances_to_target(network, dist, target, EdgePoints(edge, start),
                                         limit=limit)
    at_end = point_distances_to_target(network, dist, target, EdgePoints(edge, end),
                                       limit=limit)
    o = float(target.offset[0])
    on = (edge == target.edge[0]) & (start <= o) & (o <= end)
    return np.where(on, 0.0, np.minimum(at_start, at_end))


# ----------------------------------------------------------------------------- routes
class TightGraph(NamedTuple):
    """Both adjacencies of the network, as the route walk reads them (CSR arrays)."""

    indptr: IntArray
    indices: Int32Array
    weights: FloatArray
    arc_edge: Int32Array
    rindptr: IntArray
    rindices: Int32Array
    rweights: FloatArray


class LegEnds(NamedTuple):
    """A leg's start nodes with their exit costs and end nodes with their entry costs (m)."""

    start_nodes: IntArray
    start_costs: FloatArray
    end_nodes: IntArray
    end_costs: FloatArray


class WalkWork(NamedTuple):
    """The walk's workspaces, each of ``n_nodes`` entries (``hops`` all -1 between calls)."""

    hops: IntArray
    queue: IntArray
    path: IntArray
    path_edges: IntArray


@numba.njit(cache=True, nogil=True)
def _tight_walk_kernel(  # pragma: no cover - compiled
    graph: TightGraph, dist: FloatArray, node_ids: IntArray, ends: LegEnds, total: float,
    work: WalkWork,
) -> tuple[int, int, int]:
    """The route's node path by the tie rule: among the shortest ways (arcs x -> y with
    dist[x] + w == dist[y]), the fewest nodes, then the smallest original ids.

    ``hops`` comes in all -1 (size n) and is restored. Returns (number of
    nodes in ``path``, index of the start taken, index of the end taken); path_edges[i]
    is the edge from path[i] to path[i + 1].
    """
    indptr, indices, weights, arc_edge = graph.indptr, graph.indices, graph.weights, graph.arc_edge
    rindptr, rindices, rweights = graph.rindptr, graph.rindices, graph.rweights
    start_nodes, start_costs = ends.start_nodes, ends.start_costs
    end_nodes, end_costs = ends.end_nodes, ends.end_costs
    hops, queue, path, path_edges = work.hops, work.queue, work.path, work.path_edges
    # Hops to the end over tight arcs, breadth first from the end nodes backwards.
    head = 0
    tail = 0
    for k in range(end_nodes.size):
        t = end_nodes[k]
        if dist[t] + end_costs[k] == total and hops[t] < 0:
            hops[t] = 0
            queue[tail] = t
            tail += 1
    while head < tail:
        y = queue[head]
        head += 1
        for a in range(rindptr[y], rindptr[y + 1]):
            x = rindices[a]
            if hops[x] < 0 and dist[x] + rweights[a] == dist[y]:
                hops[x] = hops[y] + 1
                queue[tail] = x
                tail += 1
    best = -1
    for k in range(start_nodes.size):
        s = start_nodes[k]
        if start_costs[k] == dist[s] and hops[s] >= 0 and (
                best < 0 or hops[s] < hops[start_nodes[best]]
                or (hops[s] == hops[start_nodes[best]]
                    and node_ids[s] < node_ids[start_nodes[best]])):
            best = k
    if best < 0:  # no shortest way (cannot happen when ``total`` is the search's own)
        for i in range(tail):
            hops[queue[i]] = -1
        return 0, -1, -1
    x = start_nodes[best]
    n = 0
    path[n] = x
    n += 1
    while hops[x] > 0:
        nxt = -1
        nxt_edge = -1
        for a in range(indptr[x], indptr[x + 1]):
            y = indices[a]
            if hops[y] == hops[x] - 1 and dist[x] + weights[a] == dist[y] and (
                    nxt < 0 or node_ids[y] < node_ids[nxt]
                    or (y == nxt and arc_edge[a] < nxt_edge)):
                nxt = y
                nxt_edge = arc_edge[a]
        path_edges[n - 1] = nxt_edge
        path[n] = nxt
        n += 1
        x = nxt
    end = -1
    for k in range(end_nodes.size):
        if end_nodes[k] == x and dist[x] + end_costs[k] == total:
            end = k
            break
    for i in range(tail):
        hops[queue[i]] = -1
    return n, best, end


class _Legs:
    """Shortest legs between edge points on one network (reusable workspaces)."""

    def __init__(self, network: RoadNetwork) -> None:
        self.network = network
        self.search = NodeSearch(network, reverse=False)
        self.fwd = network.adjacency(reverse=False)
        self.rev = network.adjacency(reverse=True)
        n = network.n_nodes
        self.work = WalkWork(np.full(n, -1, dtype=np.int64), np.empty(n, dtype=np.int64),
                             np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64))
        f, r = self.fwd, self.rev
        self.graph = TightGraph(f.indptr, f.indices, f.weights, f.arc_edge,
                                r.indptr, r.indices, r.weights)

    def leg(self, p: EdgePoints, q: EdgePoints, label: str
            ) -> tuple[IntArray, list[tuple[int, float, float]]]:
        """(node path, pieces in travel order) of the chosen shortest way from p to q."""
        net = self.network
        ep, op = int(p.edge[0]), float(p.offset[0])
        eq, oq = int(q.edge[0]), float(q.offset[0])
        v, cv, u, cu = exit_costs(net, p)
        su, scu, sv, scv = entry_costs(net, q)
        # Start and end candidates, forwards first (the loop-edge preference).
        starts, scost = np.r_[v, u], np.r_[cv, cu]
        ends, ecost = np.r_[su, sv], np.r_[scu, scv]
        direct = np.inf
        if ep == eq:
            ahead = oq - op
            direct = ahead if ahead >= 0 else (-ahead if net.edge_twoway[ep] else np.inf)
        ok = np.isfinite(scost)
        eok = np.isfinite(ecost)
        res = self.search.run(starts[ok], scost[ok], targets=ends[eok])
        via = float(np.min(res.dist[ends] + ecost))
        if direct <= via:
            if not np.isfinite(direct):
                msg = f"route: {label}: the next waypoint cannot be reached from this one"
                raise InvalidLocationError(msg)
            return np.empty(0, np.int64), [(ep, min(op, oq), max(op, oq))]
        # Every node at most ``via`` away, with its final distance.
        res = self.search.run(starts[ok], scost[ok], limit=via)
        leg_ends = LegEnds(starts.astype(np.int64), scost, ends.astype(np.int64), ecost)
        n, k_start, k_end = _tight_walk_kernel(self.graph, res.dist, net.node_ids, leg_ends,
                                               via, self.work)
        if n == 0:
            msg = f"route: {label}: no shortest way found (an internal inconsistency)"
            raise RuntimeError(msg)
        nodes = self.work.path[:n].copy()
        edges = self.work.path_edges[:n - 1].tolist()
        pieces = [(ep, op, float(net.edge_length[ep])) if k_start == 0 else (ep, 0.0, op)]
        pieces += [(e, 0.0, float(net.edge_length[e])) for e in edges]
        pieces.append((eq, 0.0, oq) if k_end == 0 else (eq, oq, float(net.edge_length[eq])))
        return nodes, pieces


def route_through_points(network: RoadNetwork, points: EdgePoints, *,
                         labels: Sequence[str] | None = None) -> SegmentSet:
    """A route through edge points (waypoints already on the network), in order.

    Consecutive points are joined by a shortest way chosen by the module docstring's tie
    rule. ``labels`` name the legs in errors (``"waypoints i -> i + 1"`` by default).

    Raises
    ------
    InvalidLocationError
        Fewer than two points, or a point that cannot be reached from the previous one.
    """
    if len(points) < 2:
        msg = f"route: at least two waypoints are needed, got {len(points)}"
        raise InvalidLocationError(msg)
    labels = labels or [f"waypoints {i} -> {i + 1}" for i in range(len(points) - 1)]
    # One set of workspaces per network and thread (O(nodes) each; routes come by the
    # thousand when a workload is generated).
    legs = network.memo(f"segment_sets.legs:{threading.get_ident()}",
                        lambda: _Legs(network))
    paths: list[IntArray] = []
    pieces: list[tuple[int, float, float]] = []
    for i in range(len(points) - 1):
        nodes, ps = legs.leg(points[i], points[i + 1], labels[i])
        paths.append(nodes)
        pieces += ps
    e, a, b = (np.asarray(c) for c in zip(*pieces, strict=True))
    return SegmentSet.of(network, e, a, b, kind="route", node_paths=paths)


def random_routes(network: RoadNetwork, n: int, *, seed: int = 0,
                  min_m: float = DEFAULTS.generate_route_min_m,
                  max_m: float = DEFAULTS.generate_route_max_m,
                  max_tries: int | None = None) -> list[tuple[SegmentSet, EdgePoints]]:
    """``n`` routes between random places, as trips run: (route, its two waypoints).

    Start and end are drawn uniformly over the largest connected component's edges (a
    uniform offset along each); the route is their shortest path by the tie rule; pairs
    whose route is shorter than ``min_m`` or longer than ``max_m`` metres, or that cannot
    be joined (one-way streets), are drawn again.

    Raises
    ------
    InputError
        ``0 < min_m <= max_m`` does not hold, or fewer than ``n`` routes within
        ``max_tries`` draws (default ``50 * n + 100``).
    """
    if not 0 < min_m <= max_m:
        msg = f"route lengths need 0 < min <= max, got {min_m!r}, {max_m!r}"
        raise InputError(msg)
    rng = np.random.default_rng(seed)
    labels = network.components()[1]
    main = np.flatnonzero(labels[network.edge_u] == np.bincount(labels).argmax())
    tries = 50 * n + 100 if max_tries is None else max_tries
    out: list[tuple[SegmentSet, EdgePoints]] = []
    while len(out) < n:
        if tries <= 0:
            msg = (f"only {len(out)} of {n} routes of {min_m:g}-{max_m:g} m found between "
                   f"random places on {network.name}")
            raise InputError(msg)
        tries -= 1
        e = rng.choice(main, 2)
        points = EdgePoints.of(e, rng.random(2) * network.edge_length[e])
        try:
            route = route_through_points(network, points)
        except InvalidLocationError:
            continue
        if min_m <= route.length_m <= max_m:
            out.append((route, points))
    return out


def _line_coordinates(line: Any) -> FloatArray:
    """(k, 2) lon/lat of a GeoJSON LineString (a mapping) or of a bare coordinate list."""
    if isinstance(line, Mapping):
        if line.get("type") != "LineString":
            msg = f"route: geometry type must be 'LineString', got {line.get('type')!r}"
            raise InvalidLocationError(msg)
        line = line.get("coordinates")
    try:
        xy = np.asarray(line, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        msg = f"route: coordinates must be [lon, lat] pairs ({exc})"
        raise InvalidLocationError(msg) from exc
    if xy.ndim != 2 or xy.shape[1] not in (2, 3) or xy.shape[0] < 2:
        msg = (f"route: coordinates must be at least two [lon, lat] positions, got shape "
               f"{xy.shape}")
        raise InvalidLocationError(msg)
    return xy[:, :2]


def route_from_lonlat(network: RoadNetwork, line: Any, *,
                      max_snap_m: float = DEFAULTS.snap_distance_m) -> SegmentSet:
    """A route through lon/lat waypoints, consecutive ones joined by a shortest path.

    Parameters
    ----------
    line
        A GeoJSON LineString (mapping with ``"coordinates"``) or its coordinate list:
        at least two ``[lon, lat]`` positions (a third value, altitude, is ignored).
    max_snap_m
        The farthest a waypoint may lie from its road.

    Returns
    -------
    SegmentSet
        Kind ``"route"``; ``node_paths`` holds each leg's nodes. Ties between shortest
        paths follow the module docstring's rule.

    Raises
    ------
    InvalidLocationError
        Malformed coordinates, a waypoint off the network (named by its position), or a
        waypoint that cannot be reached from the previous one (directed networks, or
        separate components).
    """
    xy = _line_coordinates(line)
    labels = [f"waypoint {i}" for i in range(xy.shape[0])]
    points, _ = locate_lonlat(network, xy[:, 0], xy[:, 1], max_snap_m=max_snap_m,
                              labels=np.asarray(labels))
    return route_through_points(network, points)


def route_from_nodes(network: RoadNetwork, node_ids: npt.ArrayLike, *, start_m: float = 0.0,
                     end_m: float | None = None) -> SegmentSet:
    """A route along an explicit path of original node ids n0, n1, ..., nk (k >= 1).

    It starts ``start_m`` metres along the first edge from n0 and ends ``end_m`` metres
    along the last edge from n(k-1) (``None``: at nk). Consecutive nodes are joined by the
    shortest edge between them that may be travelled that way (lowest index among equal
    ones, as :func:`~roadpubsub.roadnet.locations.locate_uv` chooses).

    Raises
    ------
    InvalidLocationError
        Fewer than two nodes, unknown ids, consecutive nodes with no edge travelled that
        way, or offsets outside their edges (a one-edge route also needs
        ``start_m <= end_m``); the message names the position.
    """
    ids = np.atleast_1d(np.asarray(node_ids, dtype=np.int64))
    if ids.ndim != 1 or ids.size < 2:
        msg = f"route: a node path needs at least two nodes, got {ids.size}"
        raise InvalidLocationError(msg)
    idx = network.node_index(ids)
    if (idx < 0).any():
        k = int(np.flatnonzero(idx < 0)[0])
        msg = f"route: node path position {k}: unknown node id {int(ids[k])}"
        raise InvalidLocationError(msg)
    edge, flipped = edge_between(network, idx[:-1], idx[1:])
    if (edge < 0).any():
        k = int(np.flatnonzero(edge < 0)[0])
        msg = (f"route: node path positions {k} -> {k + 1}: no edge from node "
               f"{int(ids[k])} to node {int(ids[k + 1])} (that way)")
        raise InvalidLocationError(msg)
    length = network.edge_length[edge]
    end_along = float(length[-1]) if end_m is None else float(end_m)
    for name, value, lim in (("start_m", float(start_m), float(length[0])),
                             ("end_m", end_along, float(length[-1]))):
        if not 0.0 <= value <= lim:
            msg = f"route: {name} = {value!r} lies outside its edge (0..{lim} m)"
            raise InvalidLocationError(msg)
    if ids.size == 2 and start_m > end_along:
        msg = f"route: start_m = {start_m!r} lies beyond end_m = {end_along!r} on one edge"
        raise InvalidLocationError(msg)
    # Along travel: [lo, hi] metres from each edge's first node in travel order.
    lo = np.zeros(edge.size)
    hi = length.copy()
    lo[0] = start_m
    hi[-1] = end_along
    lo, hi = snap_unless_on_grid(lo), snap_unless_on_grid(hi)
    # Offsets from edge_u: an edge travelled v -> u is measured from its other end.
    a = np.where(flipped, length - hi, lo)
    b = np.where(flipped, length - lo, hi)
    return SegmentSet.of(network, edge, a, b, kind="route", node_paths=[idx])


# ----------------------------------------------------------------------------- areas
def _polygon(area: Any) -> Any:
    """The shapely (Multi)Polygon of a GeoJSON mapping or a shapely geometry, checked."""
    import shapely
    from shapely.geometry import shape

    try:
        geom = area if isinstance(area, shapely.Geometry) else shape(area)
    except (AttributeError, KeyError, TypeError, ValueError, IndexError) as exc:
        msg = f"area: not a GeoJSON geometry ({exc})"
        raise InvalidLocationError(msg) from exc
    if geom.geom_type not in ("Polygon", "MultiPolygon"):
        msg = f"area: geometry type must be 'Polygon' or 'MultiPolygon', got {geom.geom_type!r}"
        raise InvalidLocationError(msg)
    if geom.is_empty:
        msg = "area: the polygon is empty"
        raise InvalidLocationError(msg)
    coords = shapely.get_coordinates(geom)
    if not (np.isfinite(coords).all() and (np.abs(coords[:, 1]) <= 90).all()
            and (np.abs(coords[:, 0]) <= 180).all()):
        msg = "area: coordinates must be finite [lon, lat] degrees"
        raise InvalidLocationError(msg)
    if not geom.is_valid:
        msg = f"area: invalid polygon ({shapely.is_valid_reason(geom)})"
        raise InvalidLocationError(msg)
    return geom


def area_from_geojson(network: RoadNetwork, area: Any) -> SegmentSet:
    """Every road inside a polygon: the parts of positive length of each edge in it.

    Parameters
    ----------
    area
        A GeoJSON Polygon or MultiPolygon (mapping, lon/lat degrees) or a shapely one.

    Returns
    -------
    SegmentSet
        Kind ``"area"``, pieces sorted by edge and offset (touching parts of one edge
        merged). See the module docstring for the clipping rule.

    Raises
    ------
    InvalidLocationError
        Not a valid (Multi)Polygon in lon/lat, or no road inside it.
    """
    import shapely
    from pyproj import CRS, Transformer

    geom = _polygon(area)
    tr = Transformer.from_crs(CRS.from_epsg(4326), CRS.from_user_input(network.crs),
                              always_xy=True)
    poly = shapely.transform(geom, lambda c: np.column_stack(tr.transform(c[:, 0], c[:, 1])))
    shapely.prepare(poly)
    xy, ptr = network.geom_xy, network.geom_ptr
    counts = np.diff(ptr)
    vertex_edge = np.repeat(np.arange(network.n_edges), counts)
    step = np.zeros(xy.shape[0])
    step[1:] = np.hypot(*np.diff(xy, axis=0).T)
    step[ptr[:-1]] = 0.0
    cum = np.cumsum(step)
    along = cum - np.repeat(cum[ptr[:-1]], counts)  # as roadnet.locations measures it
    # Polyline segments i -> i + 1 within one edge, first those whose box meets the area.
    seg = np.flatnonzero(vertex_edge[:-1] == vertex_edge[1:])
    a, b = xy[seg], xy[seg + 1]
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    x0, y0, x1, y1 = shapely.bounds(poly)
    near = (hi[:, 0] >= x0) & (lo[:, 0] <= x1) & (hi[:, 1] >= y0) & (lo[:, 1] <= y1)
    seg, a, b = seg[near], a[near], b[near]
    lines = shapely.linestrings(np.stack([a, b], axis=1))
    parts = shapely.intersection(lines, poly)
    geoms, which = shapely.get_parts(parts, return_index=True)
    coords, owner = shapely.get_coordinates(geoms, return_index=True)
    # Parameter t in [0, 1] of every part's coordinates along its straight segment.
    k = which[owner]
    ab = b[k] - a[k]
    den = np.einsum("ij,ij->i", ab, ab)
    t = np.clip(np.divide(np.einsum("ij,ij->i", coords - a[k], ab), den,
                          out=np.zeros_like(den), where=den > 0), 0.0, 1.0)
    n_parts = geoms.size
    t_lo = np.full(n_parts, np.inf)
    t_hi = np.full(n_parts, -np.inf)
    np.minimum.at(t_lo, owner, t)
    np.maximum.at(t_hi, owner, t)
    keep = t_hi > t_lo  # parts of positive length
    s = seg[which[keep]]
    t_lo, t_hi = t_lo[keep], t_hi[keep]
    seg_len = along[s + 1] - along[s]
    # Segment ends take their vertex's own distance, so that touching parts meet exactly.
    g_lo = np.where(t_lo <= 0.0, along[s], np.where(t_lo >= 1.0, along[s + 1],
                                                     along[s] + t_lo * seg_len))
    g_hi = np.where(t_hi >= 1.0, along[s + 1], along[s] + t_hi * seg_len)
    e = vertex_edge[s]
    glen = network.geom_length[e]
    length = network.edge_length[e]
    last = s + 1 == ptr[e + 1] - 1

    def offset(g: FloatArray, at_end: npt.NDArray[np.bool_]) -> FloatArray:
        frac = np.clip(np.divide(g, glen, out=np.zeros_like(g), where=glen > 0), 0.0, 1.0)
        return np.where(at_end, length, frac * length)

    off_lo = snap_unless_on_grid(np.where((s == ptr[e]) & (t_lo <= 0.0), 0.0,
                                          offset(g_lo, np.zeros(e.size, dtype=bool))))
    off_hi = snap_unless_on_grid(offset(g_hi, last & (t_hi >= 1.0)))
    # Edges whose polyline has no length: whole when their point lies in the area.
    flat = np.flatnonzero(network.geom_length == 0)
    if flat.size:
        inside = shapely.covers(poly, shapely.points(xy[ptr[flat]]))
        fe = flat[inside]
        e = np.r_[e, fe]
        off_lo = np.r_[off_lo, np.zeros(fe.size)]
        off_hi = np.r_[off_hi, network.edge_length[fe]]
    if e.size == 0:
        msg = "area: no road of the network lies inside the polygon"
        raise InvalidLocationError(msg)
    me, ma, mb = _merge(e.astype(np.int64), off_lo, np.maximum(off_lo, off_hi))
    return SegmentSet.of(network, me, ma, mb, kind="area")


def _merge(edge: IntArray, start: FloatArray, end: FloatArray
           ) -> tuple[IntArray, FloatArray, FloatArray]:
    """Pieces sorted by (edge, start), overlapping or touching ones of one edge merged."""
    order = np.lexsort((start, edge))
    edge, start, end = edge[order], start[order], end[order]
    out_e: list[int] = []
    out_a: list[float] = []
    out_b: list[float] = []
    for e, a, b in zip(edge.tolist(), start.tolist(), end.tolist(), strict=True):
        if out_e and out_e[-1] == e and a <= out_b[-1]:
            out_b[-1] = max(out_b[-1], b)
        else:
            out_e.append(e)
            out_a.append(a)
            out_b.append(b)
    return np.asarray(out_e, np.int64), np.asarray(out_a), np.asarray(out_b)
