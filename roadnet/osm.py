"""OpenStreetMap road networks: osmnx graphs, OSM XML, GraphML and PBF extracts.

All readers produce a :class:`~roadnet.network.RoadNetwork` with lengths in metres and one
edge per physical road segment between intersections (osmnx-style simplification): a
two-way street is one edge with ``oneway=False``, a one-way street one edge with
``oneway=True`` running in its direction of travel.

* :func:`from_osmnx_graph` converts any osmnx ``MultiDiGraph`` (projected or not).
* :func:`read_osm_file` reads ``.osm``/``.osm.bz2``/``.xml`` through
  ``osmnx.graph_from_xml``, ``.graphml`` through ``osmnx.load_graphml`` and
  ``.osm.pbf``/``.pbf`` through pyosmium, keeping drivable roads only (osmnx's ``drive``
  filter). PBF extracts clipped at a border load: ways are cut where they reference nodes
  missing from the file.

Every network is built canonically: nodes sorted by id, two-way edges stored from the
smaller to the larger node id, edges sorted by (u id, v id, length). The same roads
therefore give equal arrays whichever reader produced them.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from pyproj import CRS, Transformer

from roadnet.errors import NetworkFormatError, UnsupportedNetworkFormatError
from roadnet.network import RoadNetwork

if TYPE_CHECKING:
    import networkx as nx

__all__ = [
    "DRIVE_EXCLUDE",
    "from_osmnx_graph",
    "is_drivable",
    "is_oneway",
    "read_osm_file",
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
_ONEWAY_VALUES = frozenset({"yes", "true", "1", "-1", "reverse", "T", "F"})
_REVERSED_VALUES = frozenset({"-1", "reverse", "T"})
# OSM: highway=motorway implies oneway=yes unless tagged otherwise (osmnx 2.1 does not apply
# this implication; see is_oneway).
_TWOWAY_VALUES = frozenset({"no", "false", "0"})

_XML_SUFFIXES = (".osm", ".osm.bz2", ".xml")
_PBF_SUFFIXES = (".osm.pbf", ".pbf")
_GRAPHML_SUFFIXES = (".graphml",)

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
    if oneway_tag in _ONEWAY_VALUES:
        return True, oneway_tag in _REVERSED_VALUES
    if tags.get("junction") == "roundabout":
        return True, False
    if tags.get("highway") == "motorway" and oneway_tag not in _TWOWAY_VALUES:
        return True, False
    return False, False


# ---------------------------------------------------------------------------- geometry
def _great_circle_m(lon1: FloatArray, lat1: FloatArray, lon2: FloatArray,
                    lat2: FloatArray) -> FloatArray:
    """Haversine distance in metres, the formula and radius osmnx uses."""
    y1, y2 = np.deg2rad(lat1), np.deg2rad(lat2)
    dx = np.deg2rad(lon2) - np.deg2rad(lon1)
    h = np.sin((y2 - y1) / 2) ** 2 + np.cos(y1) * np.cos(y2) * np.sin(dx / 2) ** 2
    return np.asarray(2 * np.arcsin(np.sqrt(np.minimum(1.0, h))) * EARTH_RADIUS_M)


def _polyline_lengths_m(ptr: IntArray, lonlat: FloatArray) -> FloatArray:
    """Great-circle length in metres of each flattened polyline."""
    seg = _great_circle_m(lonlat[:-1, 0], lonlat[:-1, 1], lonlat[1:, 0], lonlat[1:, 1])
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


def _flip_positions(ptr: IntArray, flip: BoolArray) -> IntArray:
    """Positions that reverse the polylines where ``flip`` holds and keep the others."""
    counts = np.diff(ptr)
    owner = np.repeat(np.arange(flip.size), counts)
    pos = np.arange(ptr[-1], dtype=np.int64)
    mirrored = ptr[owner] + ptr[owner + 1] - 1 - pos
    return np.where(flip[owner], mirrored, pos)


# ---------------------------------------------------------------------------- assembly
def _assemble(
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
    geom_lonlat = geom_lonlat[_flip_positions(geom_ptr, flip)]
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
    return _assemble(node_ids=node_ids, node_lon=node_lon, node_lat=node_lat, u_ids=u_ids,
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


# ---------------------------------------------------------------------------- files
def read_osm_file(path: str | os.PathLike[str]) -> RoadNetwork:
    """Read an OpenStreetMap file into a :class:`RoadNetwork` (lengths in metres).

    * ``.osm``, ``.osm.bz2``, ``.xml``: ``osmnx.graph_from_xml(simplify=True,
      retain_all=True)``, every way of the file as osmnx builds it. If ways reference nodes
      missing from the file (which osmnx rejects), they are read as for PBF instead, with
      osmnx's one-way rules, cut at the missing nodes.
    * ``.graphml``: ``osmnx.load_graphml``.
    * ``.osm.pbf``, ``.pbf``: pyosmium; drivable roads only (:func:`is_drivable`), one-way
      rules of :func:`is_oneway`, osmnx-style simplification, all components kept; ways
      are cut at nodes missing from the extract.

    Parameters
    ----------
    path
        The file.

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    UnsupportedNetworkFormatError
        The suffix is not one of the above.
    NetworkFormatError
        The file is malformed or holds no roads; the message names the file.
    """
    p = Path(path)
    lower = p.name.lower()
    if not p.exists():
        msg = f"network file not found: {p}"
        raise FileNotFoundError(msg)
    if lower.endswith(_PBF_SUFFIXES):
        return _read_with_osmium(p, drivable_only=True)
    if lower.endswith(_XML_SUFFIXES):
        return _read_xml(p)
    if lower.endswith(_GRAPHML_SUFFIXES):
        return _read_graphml(p)
    suffixes = ", ".join(_XML_SUFFIXES + _GRAPHML_SUFFIXES + _PBF_SUFFIXES)
    msg = f"{p}: not an OSM file suffix; use one of {suffixes}"
    raise UnsupportedNetworkFormatError(msg)


def _format_error(p: Path, what: str, exc: Exception) -> NetworkFormatError:
    if isinstance(exc, NetworkFormatError):
        return exc
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return NetworkFormatError(f"{p}: not a readable {what} file ({detail})")


def _osmnx_oneway(tags: Mapping[str, str]) -> tuple[bool, bool]:
    """osmnx's one-way rules exactly (no motorway implication), for OSM XML."""
    oneway_tag = tags.get("oneway")
    if oneway_tag in _ONEWAY_VALUES:
        return True, oneway_tag in _REVERSED_VALUES
    return tags.get("junction") == "roundabout", False


def _read_xml(p: Path) -> RoadNetwork:
    import osmnx as ox

    try:
        G = ox.graph_from_xml(p, simplify=True, retain_all=True)
    except (FileNotFoundError, PermissionError, MemoryError):
        raise
    except ValueError as exc:
        if "missing nodes" not in str(exc):
            raise _format_error(p, "OSM XML", exc) from exc
        # osmnx cannot build ways that reference nodes missing from the file (a clipped
        # extract): read them like a PBF, cut at the missing nodes.
        return _read_with_osmium(p, drivable_only=False)
    except Exception as exc:  # XML, bz2 and osmnx errors have no common base class
        raise _format_error(p, "OSM XML", exc) from exc
    return from_osmnx_graph(G, name=p.name)


def _read_graphml(p: Path) -> RoadNetwork:
    import osmnx as ox

    try:
        G = ox.load_graphml(p)
    except (FileNotFoundError, PermissionError, MemoryError):
        raise
    except Exception as exc:  # XML parse and attribute conversion errors vary
        raise _format_error(p, "GraphML", exc) from exc
    return from_osmnx_graph(G, name=p.name)


# ---------------------------------------------------------------------------- pyosmium
def _read_with_osmium(p: Path, *, drivable_only: bool) -> RoadNetwork:
    """Roads of an OSM file read with pyosmium, simplified as osmnx does.

    ``drivable_only``: keep the ways passing :func:`is_drivable` with the one-way rules of
    :func:`is_oneway` (PBF); else every way with osmnx's own one-way rules, as
    ``graph_from_xml`` does (the fallback for clipped OSM XML).
    """
    try:
        counts, refs, lon, lat, way_oneway, way_reversed = _osmium_ways(
            p, drivable_only=drivable_only)
    except (FileNotFoundError, PermissionError, MemoryError, NetworkFormatError):
        raise
    except Exception as exc:  # libosmium reports format problems as RuntimeError etc.
        raise _format_error(p, "OSM", exc) from exc
    seg_a, seg_b, seg_oneway = _way_segments(counts, refs, lon, way_oneway, way_reversed)
    if seg_a.size == 0:
        msg = f"{p}: no drivable roads found in the file"
        raise NetworkFormatError(msg)
    # Unique nodes of the segments with their coordinates.
    node_ids, first = np.unique(refs, return_index=True)
    node_lon, node_lat = lon[first], lat[first]
    a = np.searchsorted(node_ids, refs[seg_a])
    b = np.searchsorted(node_ids, refs[seg_b])
    seg_len = _great_circle_m(node_lon[a], node_lat[a], node_lon[b], node_lat[b])
    chains = _simplify(a, b, seg_oneway, seg_len, node_ids.size)
    path_nodes, path_ptr, length, edge_oneway = chains
    geom = np.column_stack([node_lon[path_nodes], node_lat[path_nodes]])
    return _assemble(
        node_ids=node_ids, node_lon=node_lon, node_lat=node_lat,
        u_ids=node_ids[path_nodes[path_ptr[:-1]]], v_ids=node_ids[path_nodes[path_ptr[1:] - 1]],
        length=length, oneway=edge_oneway, geom_ptr=path_ptr, geom_lonlat=geom, name=p.name,
    )


def _osmium_ways(
    p: Path, *, drivable_only: bool
) -> tuple[IntArray, IntArray, FloatArray, FloatArray, BoolArray, BoolArray]:
    """Accepted ways of an OSM file as flattened node lists with locations.

    Returns per-way node counts, then per way-node the node id and lon/lat (NaN where the
    node is missing from the file), then per-way one-way and reversed flags.

    pyosmium hands out way nodes one Python object at a time, which costs microseconds
    each; instead the accepted ways are written (in C++) to a temporary OPL file with node
    locations on the ways, whose node lists are parsed here a chunk at a time with numpy.
    """
    import osmium
    from osmium.filter import EntityFilter, KeyFilter

    oneway = is_oneway if drivable_only else _osmnx_oneway
    flags: list[tuple[bool, bool]] = []
    with tempfile.TemporaryDirectory(prefix="roadnet-osm-") as tmp:
        opl = Path(tmp) / "ways.opl"
        writer = osmium.SimpleWriter(
            osmium.io.File(str(opl), "opl,locations_on_ways=true,add_metadata=false"))
        try:
            processor = (osmium.FileProcessor(str(p), osmium.osm.NODE | osmium.osm.WAY)
                         .with_locations()
                         .with_filter(EntityFilter(osmium.osm.WAY)))
            if drivable_only:
                processor = processor.with_filter(KeyFilter("highway"))
            for way in processor:
                tags = {t.k: t.v for t in way.tags}
                if not drivable_only or is_drivable(tags):
                    flags.append(oneway(tags))
                    writer.add_way(way)
        finally:
            writer.close()
        counts, refs, lon, lat = _parse_opl_nodes(opl, len(flags), p)
    way_flags = np.array(flags, dtype=bool).reshape(-1, 2)
    return counts, refs, lon, lat, way_flags[:, 0].copy(), way_flags[:, 1].copy()


def _parse_opl_nodes(opl: Path, n_ways: int, p: Path, *, chunk: int = 100_000
                     ) -> tuple[IntArray, IntArray, FloatArray, FloatArray]:
    """Node lists (``Nn1x1.5y2.5,n2xy,...``) of an OPL file of ways, parsed with numpy."""
    counts: list[int] = []
    parts: list[FloatArray] = []

    def flush(fields: list[str]) -> None:
        if not fields:
            return
        text = "," + ",".join(fields)
        # ",n<id>x<lon>y<lat>" -> " <id> <lon> <lat>"; a missing location prints as "xy".
        text = (text.replace(",n", " ").replace("xy", " nan nan")
                .replace("x", " ").replace("y", " "))
        values = np.fromstring(text, dtype=np.float64, sep=" ")  # fast text parser
        expected = 3 * sum(f.count(",") + 1 for f in fields)
        if values.size != expected:
            msg = f"{p}: could not parse the node lists of its ways"
            raise NetworkFormatError(msg)
        parts.append(values)

    fields: list[str] = []
    with opl.open("r", encoding="utf-8") as fh:
        for line in fh:
            # Tags escape spaces, so " N" only ever starts the node-list field.
            nodes = line.rstrip("\n").rpartition(" N")[2]
            if nodes:
                counts.append(nodes.count(",") + 1)
                fields.append(nodes)
            else:
                counts.append(0)
            if len(fields) >= chunk:
                flush(fields)
                fields = []
    flush(fields)
    if len(counts) != n_ways:
        msg = f"{p}: expected {n_ways} ways in the temporary OPL file, found {len(counts)}"
        raise NetworkFormatError(msg)
    values = np.concatenate(parts) if parts else np.empty(0)
    triples = values.reshape(-1, 3)
    if triples.size and np.abs(triples[:, 0]).max() >= 2.0**53:
        msg = f"{p}: node ids beyond 2**53 are not supported"
        raise NetworkFormatError(msg)
    return (np.asarray(counts, dtype=np.int64), triples[:, 0].astype(np.int64),
            triples[:, 1].copy(), triples[:, 2].copy())


def _way_segments(counts: IntArray, refs: IntArray, lon: FloatArray, way_oneway: BoolArray,
                  way_reversed: BoolArray) -> tuple[IntArray, IntArray, BoolArray]:
    """Segments between consecutive way nodes, in travel direction for one-way ways.

    Returns positions (into ``refs``) of each segment's first and second node and its
    one-way flag. Repeated consecutive nodes are merged (as osmnx does) and segments
    touching a node missing from the file are dropped, which cuts the way there.
    """
    n_ways = counts.size
    way = np.repeat(np.arange(n_ways), counts)
    ptr = np.zeros(n_ways + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    # Reverse the nodes of ways travelled against their node order.
    pos = _flip_positions(ptr, way_oneway & way_reversed)
    same_way = way[1:] == way[:-1]
    a, b = pos[:-1][same_way], pos[1:][same_way]
    ok = (refs[a] != refs[b]) & np.isfinite(lon[a]) & np.isfinite(lon[b])
    a, b = a[ok], b[ok]
    return a, b, way_oneway[way[a]]


def _simplify(a: IntArray, b: IntArray, oneway: BoolArray, seg_len: FloatArray, n: int
              ) -> tuple[IntArray, IntArray, FloatArray, BoolArray]:
    """osmnx-style topological simplification of a segment graph.

    ``a``/``b`` are node indices of segments (one-way ones from ``a`` to ``b``). A node is
    interstitial when it joins exactly two segments to two distinct neighbours and travel
    passes straight through it: both two-way, or one one-way in and one out (osmnx's rules
    1-3 of ``_is_endpoint`` for the cases that occur in practice; its rare "two neighbours,
    degree four" mixtures are kept as endpoints here). Chains of segments through
    interstitial nodes become one edge; rings made only of interstitial nodes stay
    unsimplified (osmnx ``remove_rings=False``).

    Returns the flattened node index paths (``path_nodes[path_ptr[e]:path_ptr[e + 1]]``),
    the summed lengths in metres and the one-way flags of the edges.
    """
    s_count = a.size
    ends = np.concatenate([a, b])
    inc_order = np.argsort(ends, kind="stable")
    incident = (inc_order % s_count).astype(np.int64)
    inc_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(ends, minlength=n), out=inc_ptr[1:])
    degree = np.diff(inc_ptr)

    interior = np.zeros(n, dtype=bool)
    cand = np.flatnonzero(degree == 2)
    s1, s2 = incident[inc_ptr[cand]], incident[inc_ptr[cand] + 1]
    o1 = np.where(a[s1] == cand, b[s1], a[s1])
    o2 = np.where(a[s2] == cand, b[s2], a[s2])
    both_two = ~oneway[s1] & ~oneway[s2]
    # One-way through: exactly one of the two segments starts at the node.
    through = oneway[s1] & oneway[s2] & ((a[s1] == cand) != (a[s2] == cand))
    interior[cand] = (o1 != o2) & (both_two | through)

    a_l, b_l, inc_l, ptr_l = a.tolist(), b.tolist(), incident.tolist(), inc_ptr.tolist()
    interior_l = interior.tolist()
    used = [False] * s_count
    path_nodes: list[int] = []
    path_ptr = [0]
    edge_segs: list[list[int]] = []
    edge_first: list[int] = []  # the segment each edge starts with (for its direction)

    # Walk from every endpoint along each unused incident segment to the next endpoint.
    for e in np.flatnonzero(~interior & (degree > 0)).tolist():
        for s in inc_l[ptr_l[e]:ptr_l[e + 1]]:
            if used[s]:
                continue
            used[s] = True
            nodes = [e]
            segs = [s]
            cur = b_l[s] if a_l[s] == e else a_l[s]
            prev = s
            while interior_l[cur]:
                nodes.append(cur)
                k = ptr_l[cur]
                nxt = inc_l[k + 1] if inc_l[k] == prev else inc_l[k]
                used[nxt] = True
                segs.append(nxt)
                cur = b_l[nxt] if a_l[nxt] == cur else a_l[nxt]
                prev = nxt
            nodes.append(cur)
            if oneway[s] and a_l[s] != e:
                nodes.reverse()  # walked against the direction of travel
            path_nodes.extend(nodes)
            path_ptr.append(len(path_nodes))
            edge_segs.append(segs)
            edge_first.append(s)
    # Segments left over form rings of interstitial nodes only: keep them as they are.
    for s in (i for i, flag in enumerate(used) if not flag):
        path_nodes.extend((a_l[s], b_l[s]))
        path_ptr.append(len(path_nodes))
        edge_segs.append([s])
        edge_first.append(s)

    seg_counts = np.fromiter((len(x) for x in edge_segs), dtype=np.int64, count=len(edge_segs))
    flat = np.fromiter((s for x in edge_segs for s in x), dtype=np.int64,
                       count=int(seg_counts.sum()))
    owner = np.repeat(np.arange(seg_counts.size), seg_counts)
    length = np.bincount(owner, weights=seg_len[flat], minlength=seg_counts.size).astype(
        np.float64)
    return (np.asarray(path_nodes, dtype=np.int64), np.asarray(path_ptr, dtype=np.int64),
            length, oneway[np.asarray(edge_first, dtype=np.int64)])

