"""OpenStreetMap road networks: osmnx graphs, OSM XML, GraphML and PBF extracts.

All readers produce a :class:`~roadpubsub.roadnet.network.RoadNetwork` with lengths in metres and
one edge per physical road segment between intersections (osmnx-style simplification): a
two-way street is one edge with ``oneway=False``, a one-way street one edge with
``oneway=True`` running in its direction of travel.

* :func:`from_osmnx_graph` converts any osmnx ``MultiDiGraph`` (projected or not).
* :func:`~roadpubsub.roadnet.osm_files.read_osm_file` reads ``.osm``/``.osm.bz2``/``.xml`` through
  ``osmnx.graph_from_xml``, ``.graphml`` through ``osmnx.load_graphml`` and
  ``.osm.pbf``/``.pbf`` through pyosmium, keeping drivable roads only (osmnx's ``drive``
  filter). PBF extracts clipped at a border load: ways are cut where they reference nodes
  missing from the file.

Every network is built canonically: nodes sorted by id, two-way edges stored from the
smaller to the larger node id, edges sorted by (u id, v id, length). The same roads
therefore give equal arrays whichever reader produced them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from pyproj import CRS, Transformer

from roadpubsub.roadnet.errors import NetworkFormatError
from roadpubsub.roadnet.network import RoadNetwork

if TYPE_CHECKING:
    import networkx as nx

__all__ = [
    "DRIVE_EXCLUDE",
    "from_osmnx_graph",
    "is_drivable",
    "is_oneway",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

#: Earth radius osmnx uses for great-circle lengths, metres (``osmnx.distance``).
EARTH_RADIUS_M = 6_371_009.0

#: osmnx 2.x ``drive`` network filter (``osmnx._overpass._get_network_filter("drive")`` with
#: the default ``settings.default_access``): a way needs a ``highway`` tag, and is dropped when
#: one of these tags' values *contains* a match of the pattern (Overpass ``!~`` is an
#: unanchored regular expression; a missing tag never excludes).
DRIVE_EXCLUDE: Mapping[str, str] = {
    "area": "yes",
    "access": "private",
    "highway": (
        "abandoned|bridleway|bus_guideway|construction|corridor|cycleway|elevator|escalator|"
        "footway|no|path|pedestrian|planned|platform|proposed|raceway|razed|rest_area|service|"
        "services|steps|track"
    ),
    "motor_vehicle": "no",
    "motorcar": "no",
    "service": "alley|driveway|emergency_access|parking|parking_aisle|private",
}
_DRIVE_EXCLUDE_RE = {key: re.compile(pattern) for key, pattern in DRIVE_EXCLUDE.items()}

# osmnx graph._add_paths: values of 'oneway' meaning one-way, and those meaning one-way
# against the order of the way's nodes.
ONEWAY_VALUES = frozenset({"yes", "true", "1", "-1", "reverse", "T", "F"})
REVERSED_VALUES = frozenset({"-1", "reverse", "T"})
# OSM: highway=motorway implies oneway=yes unless tagged otherwise (osmnx 2.1 does not apply
# this implication; see is_oneway).
_TWOWAY_VALUES = frozenset({"no", "false", "0"})

# Twin arcs of a two-way street: equal lengths within this relative tolerance ...
_TWIN_LENGTH_RTOL = 1e-6
# ... and geometries equal, reversed, within this many degrees (about 0.1 mm).
_TWIN_GEOM_ATOL_DEG = 1e-9


# ---------------------------------------------------------------------------- tag rules
def is_drivable(tags: Mapping[str, str]) -> bool:
    """Whether a way with these OSM tags passes osmnx's ``drive`` filter.

    Parameters
    ----------
    tags
        The way's tags (key to value).

    Returns
    -------
    bool
        True for ways with a ``highway`` tag that none of :data:`DRIVE_EXCLUDE` rejects.
    """
    if "highway" not in tags:
        return False
    for key, pattern in _DRIVE_EXCLUDE_RE.items():
        value = tags.get(key)
        if value is not None and pattern.search(value):
            return False
    return True


def is_oneway(tags: Mapping[str, str]) -> tuple[bool, bool]:
    """One-way rules of osmnx for a drivable way: (is one-way, runs against node order).

    A way is one-way when ``oneway`` is one of osmnx's one-way values (``yes``, ``true``,
    ``1``, ``-1``, ``reverse``, ...), when it is a roundabout (``junction=roundabout``), or,
    following the OSM convention that osmnx 2.1 does not apply, when it is a
    ``highway=motorway`` not tagged ``oneway=no``. ``oneway=-1``/``reverse`` mean travel
    against the order of the way's nodes.

    Parameters
    ----------
    tags
        The way's tags.

    Returns
    -------
    tuple of bool
        ``(oneway, reversed)``.
    """
    oneway_tag = tags.get("oneway")
    if oneway_tag in ONEWAY_VALUES:
        return True, oneway_tag in REVERSED_VALUES
    if tags.get("junction") == "roundabout":
        return True, False
    if tags.get("highway") == "motorway" and oneway_tag not in _TWOWAY_VALUES:
        return True, False
    return False, False


# ---------------------------------------------------------------------------- geometry
def great_circle_m(lon1: FloatArray, lat1: FloatArray, lon2: FloatArray,
                    lat2: FloatArray) -> FloatArray:
    """Haversine distance in metres, the formula and radius osmnx uses."""
    y1, y2 = np.deg2rad(lat1), np.deg2rad(lat2)
    dx = np.deg2rad(lon2) - np.deg2rad(lon1)
    h = np.sin((y2 - y1) / 2) ** 2 + np.cos(y1) * np.cos(y2) * np.sin(dx / 2) ** 2
    return np.asarray(2 * np.arcsin(np.sqrt(np.minimum(1.0, h))) * EARTH_RADIUS_M)


def _polyline_lengths_m(ptr: IntArray, lonlat: FloatArray) -> FloatArray:
    """Great-circle length in metres of each flattened polyline."""
    seg = great_circle_m(lonlat[:-1, 0], lonlat[:-1, 1], lonlat[1:, 0], lonlat[1:, 1])
    # Drop the joins between one polyline's last point and the next one's first.
    seg[ptr[1:-1] - 1] = 0.0
    cum = np.zeros(lonlat.shape[0], dtype=np.float64)
    np.cumsum(seg, out=cum[1:])
    return np.asarray(cum[ptr[1:] - 1] - cum[ptr[:-1]])


def _gather_ranges(ptr: IntArray, order: IntArray) -> tuple[IntArray, IntArray]:
    """Concatenate ranges ``ptr[i]:ptr[i + 1]`` for i in ``order``: (new ptr, positions)."""
    counts = np.diff(ptr)[order]
    new_ptr = np.zeros(order.size + 1, dtype=np.int64)
    np.cumsum(counts, out=new_ptr[1:])
    pos = np.arange(new_ptr[-1], dtype=np.int64) + np.repeat(ptr[order] - new_ptr[:-1], counts)
    return new_ptr, pos


def flip_positions(ptr: IntArray, flip: BoolArray) -> IntArray:
    """Positions that reverse the polylines where ``flip`` holds and keep the others."""
    counts = np.diff(ptr)
    owner = np.repeat(np.arange(flip.size), counts)
    pos = np.arange(ptr[-1], dtype=np.int64)
    mirrored = ptr[owner] + ptr[owner + 1] - 1 - pos
    return np.where(flip[owner], mirrored, pos)


# ---------------------------------------------------------------------------- assembly
def assemble_network(
    *,
    node_ids: IntArray,
    node_lon: FloatArray,
    node_lat: FloatArray,
    u_ids: IntArray,
    v_ids: IntArray,
    length: FloatArray,
    oneway: BoolArray,
    geom_ptr: IntArray,
    geom_lonlat: FloatArray,
    name: str,
) -> RoadNetwork:
    """Canonical RoadNetwork: isolated nodes dropped, two-way edges from the smaller id,
    edges sorted by (u, v, length), nodes by id."""
    if length.size == 0:
        msg = f"{name}: no roads found (the network has no edges)"
        raise NetworkFormatError(msg)
    flip = ~oneway & (u_ids > v_ids)
    # A two-way loop has no smaller end: orient its polyline by its lexicographically
    # smaller direction so equal roads compare equal.
    for e in np.flatnonzero(~oneway & (u_ids == v_ids)):
        pts = geom_lonlat[geom_ptr[e]:geom_ptr[e + 1]]
        fwd, back = pts.ravel().tolist(), pts[::-1].ravel().tolist()
        flip[e] = back < fwd
    geom_lonlat = geom_lonlat[flip_positions(geom_ptr, flip)]
    u_ids, v_ids = np.where(flip, v_ids, u_ids), np.where(flip, u_ids, v_ids)

    order = np.lexsort((length, v_ids, u_ids))
    new_ptr, pos = _gather_ranges(geom_ptr, order)

    used = np.unique(np.concatenate([u_ids, v_ids]))
    node_order = np.argsort(node_ids, kind="stable")
    at = np.searchsorted(node_ids[node_order], used)
    at = node_order[np.minimum(at, node_ids.size - 1)]
    known = node_ids[at] == used
    if not known.all():
        missing = used[~known][:10].tolist()
        msg = f"{name}: edges reference nodes without coordinates: {missing}"
        raise NetworkFormatError(msg)
    return RoadNetwork.from_arrays(
        node_ids=used,
        node_lon=node_lon[at],
        node_lat=node_lat[at],
        edge_u_ids=u_ids[order],
        edge_v_ids=v_ids[order],
        edge_length=length[order],
        edge_oneway=oneway[order],
        geom_ptr=new_ptr,
        geom_lonlat=geom_lonlat[pos],
        name=name,
    )


# ---------------------------------------------------------------------------- osmnx graphs
def from_osmnx_graph(G: nx.MultiDiGraph, *, name: str = "") -> RoadNetwork:
    """Convert an osmnx street graph to a :class:`RoadNetwork`.

    Parameters
    ----------
    G
        An osmnx ``MultiDiGraph`` (``graph_from_place``/``bbox``/``xml``, ``load_graphml``,
        simplified or not). Node attributes ``x``/``y`` are lon/lat degrees, or coordinates
        in ``G.graph["crs"]`` for a projected graph (converted back to WGS84).
    name
        Label of the source.

    Returns
    -------
    RoadNetwork
        One edge per physical road: twin arcs ``(u, v)`` and ``(v, u)`` of a two-way
        street (same ``length`` within 1e-6 relative, mirrored geometry) become one edge
        with ``oneway=False``; an arc without a twin becomes a one-way edge in its
        direction. Parallel roads stay separate edges. Lengths are the arcs' ``length``
        attribute in metres (great-circle length of the geometry where missing); geometry
        is the arc's ``geometry`` LineString, else the straight line between its nodes.
        Nodes without any edge are dropped.

    Raises
    ------
    NetworkFormatError
        Nodes without coordinates, edges without valid lengths, or no edges at all.
    """
    import shapely

    label = name or str(G.graph.get("name", "")) or "osmnx graph"
    nodes = list(G.nodes(data=True))
    try:
        node_ids = np.fromiter((n for n, _ in nodes), dtype=np.int64, count=len(nodes))
        node_x = np.fromiter((d["x"] for _, d in nodes), dtype=np.float64, count=len(nodes))
        node_y = np.fromiter((d["y"] for _, d in nodes), dtype=np.float64, count=len(nodes))
    except (KeyError, TypeError, ValueError) as exc:
        msg = f"{label}: every node needs integer id and numeric 'x'/'y' attributes ({exc})"
        raise NetworkFormatError(msg) from exc

    arcs = list(G.edges(data=True))
    m = len(arcs)
    try:
        u_ids = np.fromiter((u for u, _, _ in arcs), dtype=np.int64, count=m)
        v_ids = np.fromiter((v for _, v, _ in arcs), dtype=np.int64, count=m)
        length = np.fromiter((d.get("length", np.nan) for _, _, d in arcs),
                             dtype=np.float64, count=m)
    except (TypeError, ValueError) as exc:
        msg = f"{label}: edges need integer node ids and numeric 'length' ({exc})"
        raise NetworkFormatError(msg) from exc
    if m == 0:
        msg = f"{label}: no roads found (the graph has no edges)"
        raise NetworkFormatError(msg)

    # Polylines: the arc's geometry, else its end nodes (filled in below).
    geoms = [d.get("geometry") for _, _, d in arcs]
    has_geom = np.fromiter((g is not None for g in geoms), dtype=bool, count=m)
    npts = np.full(m, 2, dtype=np.int64)
    coords = np.empty((0, 2))
    if has_geom.any():
        coords, owner = shapely.get_coordinates(
            [g for g in geoms if g is not None], return_index=True)
        npts[has_geom] = np.bincount(owner, minlength=int(has_geom.sum()))
    ptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(npts, out=ptr[1:])
    xy = np.empty((ptr[-1], 2), dtype=np.float64)
    # Positions of the arcs with geometry, in order, inside the flattened array.
    with_geom_pos = _gather_ranges(ptr, np.flatnonzero(has_geom))[1]
    xy[with_geom_pos] = coords
    straight = np.flatnonzero(~has_geom)
    node_pos = {int(n): i for i, n in enumerate(node_ids)} if straight.size else {}
    try:
        ui = np.fromiter((node_pos[int(u_ids[e])] for e in straight), np.int64, straight.size)
        vi = np.fromiter((node_pos[int(v_ids[e])] for e in straight), np.int64, straight.size)
    except KeyError as exc:
        msg = f"{label}: an edge references node {exc} that is not in the graph"
        raise NetworkFormatError(msg) from exc
    xy[ptr[straight], 0], xy[ptr[straight], 1] = node_x[ui], node_y[ui]
    xy[ptr[straight] + 1, 0], xy[ptr[straight] + 1, 1] = node_x[vi], node_y[vi]

    node_lon, node_lat, lonlat = _to_lonlat(G.graph.get("crs"), node_x, node_y, xy, label)

    missing = ~np.isfinite(length)
    if missing.any():
        length[missing] = _polyline_lengths_m(ptr, lonlat)[missing]
    u_ids, v_ids, length, oneway, ptr, lonlat = _merge_twin_arcs(
        u_ids, v_ids, length, ptr, lonlat)
    return assemble_network(node_ids=node_ids, node_lon=node_lon, node_lat=node_lat, u_ids=u_ids,
                     v_ids=v_ids, length=length, oneway=oneway, geom_ptr=ptr,
                     geom_lonlat=lonlat, name=label)


def _to_lonlat(crs: Any, node_x: FloatArray, node_y: FloatArray, xy: FloatArray, label: str
               ) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Node and polyline coordinates converted from the graph's CRS to lon/lat degrees."""
    try:
        src = CRS.from_user_input(crs if crs is not None else "EPSG:4326")
    except Exception as exc:  # pyproj raises CRSError, a plain Exception subclass
        msg = f"{label}: unknown graph CRS {crs!r} ({exc})"
        raise NetworkFormatError(msg) from exc
    if src.is_geographic:
        return node_x, node_y, xy
    to_wgs84 = Transformer.from_crs(src, CRS.from_epsg(4326), always_xy=True)
    lon, lat = to_wgs84.transform(node_x, node_y)
    glon, glat = to_wgs84.transform(xy[:, 0], xy[:, 1])
    return (np.asarray(lon, dtype=np.float64), np.asarray(lat, dtype=np.float64),
            np.column_stack([glon, glat]).astype(np.float64))


def _mirrored(ptr: IntArray, lonlat: FloatArray, a: IntArray, b: IntArray) -> BoolArray:
    """Whether polyline ``a[i]`` equals polyline ``b[i]`` reversed (vectorised)."""
    counts_a = ptr[a + 1] - ptr[a]
    same_n = counts_a == ptr[b + 1] - ptr[b]
    out = np.zeros(a.size, dtype=bool)
    if not same_n.any():
        return out
    aa, bb, cnt = a[same_n], b[same_n], counts_a[same_n]
    pair = np.repeat(np.arange(aa.size), cnt)
    k = np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    pa = ptr[aa][pair] + k
    pb = ptr[bb + 1][pair] - 1 - k
    close = np.all(np.abs(lonlat[pa] - lonlat[pb]) <= _TWIN_GEOM_ATOL_DEG, axis=1)
    bad = np.bincount(pair, weights=~close, minlength=aa.size)
    out[np.flatnonzero(same_n)] = bad == 0
    return out


def _lengths_match(x: FloatArray, y: FloatArray) -> BoolArray:
    return np.asarray(np.abs(x - y) <= _TWIN_LENGTH_RTOL * np.maximum(np.abs(x), np.abs(y)))


def _merge_twin_arcs(
    u: IntArray, v: IntArray, length: FloatArray, ptr: IntArray, lonlat: FloatArray
) -> tuple[IntArray, IntArray, FloatArray, BoolArray, IntArray, FloatArray]:
    """Pair each arc with its reversed twin; returns edges (u, v, length, oneway, geometry)."""
    m = u.size
    lo, hi = np.minimum(u, v), np.maximum(u, v)
    order = np.lexsort((length, hi, lo))
    key_change = np.ones(m, dtype=bool)
    key_change[1:] = (lo[order][1:] != lo[order][:-1]) | (hi[order][1:] != hi[order][:-1])
    start = np.flatnonzero(key_change)
    size = np.diff(np.append(start, m))
    partner = np.full(m, -1, dtype=np.int64)

    # Common case, vectorised: a group of exactly two opposite arcs between distinct nodes.
    pairs = start[(size == 2)]
    a, b = order[pairs], order[pairs + 1]
    ok = (u[a] != v[a]) & (u[a] == v[b]) & (v[a] == u[b]) & _lengths_match(length[a], length[b])
    ok[ok] = _mirrored(ptr, lonlat, a[ok], b[ok])
    partner[a[ok]], partner[b[ok]] = b[ok], a[ok]

    # Rare case: parallel arcs or loops; pair greedily within each group.
    for g in np.flatnonzero(size > 2):
        members = order[start[g]:start[g] + size[g]].tolist()
        for i, x in enumerate(members):
            if partner[x] >= 0:
                continue
            for y in members[i + 1:]:
                if (partner[y] < 0 and u[x] == v[y] and v[x] == u[y]
                        and _lengths_match(length[x:x + 1], length[y:y + 1])[0]
                        and _mirrored(ptr, lonlat, np.array([x]), np.array([y]))[0]):
                    partner[x], partner[y] = y, x
                    break
    # Two loops at one node were skipped above (u == v): twins if mirrored.
    loops = pairs[u[a] == v[a]]
    x, y = order[loops], order[loops + 1]
    ok = _lengths_match(length[x], length[y]) & _mirrored(ptr, lonlat, x, y)
    partner[x[ok]], partner[y[ok]] = y[ok], x[ok]

    # Keep the first arc of each twin pair (in input order) and every unpaired arc.
    keep = (partner < 0) | (np.arange(m) < partner)
    idx = np.flatnonzero(keep)
    new_ptr, pos = _gather_ranges(ptr, idx)
    return u[idx], v[idx], length[idx], partner[idx] < 0, new_ptr, lonlat[pos]
