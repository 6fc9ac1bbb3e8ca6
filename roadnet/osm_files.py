"""OpenStreetMap files read into a :class:`~roadpubsub.roadnet.network.RoadNetwork`: OSM XML and
GraphML through osmnx (:func:`~roadpubsub.roadnet.osm.from_osmnx_graph`), PBF through pyosmium with
the tag rules and osmnx-style simplification of :mod:`roadpubsub.roadnet.osm`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt

from roadpubsub.roadnet.errors import NetworkFormatError, UnsupportedNetworkFormatError
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.osm import (
    ONEWAY_VALUES,
    REVERSED_VALUES,
    assemble_network,
    flip_positions,
    from_osmnx_graph,
    great_circle_m,
    is_drivable,
    is_oneway,
)

__all__ = ["read_osm_file"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

_XML_SUFFIXES = (".osm", ".osm.bz2", ".xml")
_PBF_SUFFIXES = (".osm.pbf", ".pbf")
_GRAPHML_SUFFIXES = (".graphml",)


def read_osm_file(path: str | os.PathLike[str]) -> RoadNetwork:
    """Read an OpenStreetMap file into a :class:`RoadNetwork` (lengths in metres).

    * ``.osm``, ``.osm.bz2``, ``.xml``: ``osmnx.graph_from_xml(simplify=True,
      retain_all=True)``, every way of the file as osmnx builds it. If ways reference nodes
      missing from the file (which osmnx rejects), they are read as for PBF instead, with
      osmnx's one-way rules, cut at the missing nodes.
    * ``.graphml``: ``osmnx.load_graphml``.
    * ``.osm.pbf``, ``.pbf``: pyosmium; drivable roads only
      (:func:`~roadpubsub.roadnet.osm.is_drivable`), one-way rules of
      :func:`~roadpubsub.roadnet.osm.is_oneway`,
      osmnx-style simplification, all components kept; ways are cut at nodes missing from
      the extract.

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
    if oneway_tag in ONEWAY_VALUES:
        return True, oneway_tag in REVERSED_VALUES
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

    ``drivable_only``: keep the ways passing :func:`~roadpubsub.roadnet.osm.is_drivable` with the
    one-way rules of :func:`~roadpubsub.roadnet.osm.is_oneway` (PBF); else every way with osmnx's
    own one-way rules, as ``graph_from_xml`` does (the fallback for clipped OSM XML).
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
    seg_len = great_circle_m(node_lon[a], node_lat[a], node_lon[b], node_lat[b])
    chains = _simplify(a, b, seg_oneway, seg_len, node_ids.size)
    path_nodes, path_ptr, length, edge_oneway = chains
    geom = np.column_stack([node_lon[path_nodes], node_lat[path_nodes]])
    return assemble_network(
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
    pos = flip_positions(ptr, way_oneway & way_reversed)
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

