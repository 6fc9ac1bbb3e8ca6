"""Real points of interest placed on a road network: Li et al.'s POIs on edges (with their
category names) and OSM POIs (tokenised name plus the :data:`OSM_POI_TAGS` values), the
places and texts of :func:`roadpubsub.index.workload.generate_workload`'s POI workloads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from roadpubsub.index.text import tokenize
from roadpubsub.roadnet.errors import InputError, InvalidLocationError
from roadpubsub.roadnet.locations import EdgePoints, locate_lonlat, locate_uv
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.settings import DEFAULTS

__all__ = ["OSM_POI_TAGS", "POIs", "find_poi_source", "load_pois", "read_li_pois",
           "read_osm_pois"]

#: OSM tags whose values describe a POI (beside its tokenised name).
OSM_POI_TAGS = ("amenity", "shop", "tourism")

PathLike = str | os.PathLike[str]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class POIs:
    """Real points of interest placed on a network.

    Attributes
    ----------
    points
        Their positions on the network's edges (offsets in metres).
    documents
        Keywords describing each POI (possibly empty).
    source
        The file they came from.
    """

    points: EdgePoints
    documents: list[list[str]]
    source: str = ""

    def __len__(self) -> int:
        return len(self.points)


def find_poi_source(network_path: PathLike) -> Path | None:
    """The POI file that goes with a network file, or None.

    ``X.cnode`` (Li et al.) -> ``X.poi_on_edges.txt`` beside it; an OSM file
    (``.osm.pbf``, ``.pbf``, ``.osm``, ``.osm.bz2``) holds its own POIs.
    """
    p = Path(network_path)
    name = p.name.lower()
    if name.endswith(".cnode"):
        cand = p.with_name(p.name[: -len(".cnode")] + ".poi_on_edges.txt")
        return cand if cand.exists() else None
    if name.endswith((".osm.pbf", ".pbf", ".osm", ".osm.bz2")):
        return p
    return None


def load_pois(network: RoadNetwork, path: PathLike, *,
              max_snap_m: float = DEFAULTS.snap_distance_m) -> POIs:
    """POIs of a Li ``*.poi_on_edges.txt`` file or an OSM file (see :func:`find_poi_source`).

    Raises
    ------
    FileNotFoundError
        No such file (or no category file beside a Li POI file).
    ValueError
        An unsupported file, or no POI lies on the network.
    """
    p = Path(path)
    if not p.exists():
        msg = f"POI file not found: {p}"
        raise FileNotFoundError(msg)
    name = p.name.lower()
    if name.endswith(".poi_on_edges.txt"):
        cats = p.with_name(p.name[: -len(".poi_on_edges.txt")] + ".poi_categories.csv")
        pois = read_li_pois(network, p, cats)
    elif name.endswith((".osm.pbf", ".pbf", ".osm", ".osm.bz2")):
        pois = read_osm_pois(network, p, max_snap_m=max_snap_m)
    else:
        msg = f"{p}: not a POI file (expected *.poi_on_edges.txt or an OSM file)"
        raise InputError(msg)
    if len(pois) == 0:
        msg = f"{p}: no POI lies on the network {network.name!r}"
        raise InputError(msg)
    return pois


def read_li_pois(network: RoadNetwork, path: PathLike, categories: PathLike) -> POIs:
    """Li et al.'s POIs on edges, placed on ``network`` (read from their ``.cnode``).

    The file holds, per edge, a line ``start_node end_node edge_length n_pois`` followed,
    when ``n_pois > 0``, by one line of ``n_pois`` pairs ``category_id distance``. Lengths
    and distances are in the file's degree units: the fraction ``distance / edge_length``
    (clipped to [0, 1]) is scaled to the network's edge length in metres. POIs on edges
    the network lacks are skipped. Each POI's keywords are its category name.
    """
    import pandas as pd

    p, c = Path(path), Path(categories)
    if not c.exists():
        msg = f"POI category file not found: {c}"
        raise FileNotFoundError(msg)
    cat = pd.read_csv(c)
    if not {"cat_name", "cat_id"} <= set(cat.columns):
        msg = f"{c}: expected columns cat_name, cat_id"
        raise InputError(msg)
    names = {int(i): str(n).strip().lower() for n, i in zip(cat["cat_name"], cat["cat_id"],
                                                            strict=True)}
    u_l: list[int] = []
    v_l: list[int] = []
    frac_l: list[float] = []
    cat_l: list[int] = []
    with p.open("r", encoding="ascii") as fh:
        lines = iter(fh.read().splitlines())
        for lineno, line in enumerate(lines, start=1):
            head = line.split()
            if not head:
                continue
            try:
                su, sv, slen, scount = head
                count = int(scount)
                length = float(slen)
                pairs = next(lines).split() if count > 0 else []
                if len(pairs) != 2 * count:
                    raise ValueError
            except (ValueError, StopIteration) as exc:
                msg = f"{p}: malformed POI record near line {lineno}"
                raise InputError(msg) from exc
            for k in range(count):
                u_l.append(int(su))
                v_l.append(int(sv))
                cat_l.append(int(pairs[2 * k]))
                d = float(pairs[2 * k + 1])
                frac_l.append(d / length if length > 0 else 0.0)
    u = np.asarray(u_l, dtype=np.int64)
    v = np.asarray(v_l, dtype=np.int64)
    frac = np.clip(np.asarray(frac_l, dtype=np.float64), 0.0, 1.0)
    known = (network.node_index(u) >= 0) & (network.node_index(v) >= 0)
    unknown_cat = sorted({k for k in cat_l if k not in names})
    if unknown_cat:
        msg = f"{p}: unknown POI category ids {unknown_cat[:10]}"
        raise InputError(msg)
    rows = np.flatnonzero(known)
    points, ok = _locate_edges(network, u[rows], v[rows], frac[rows])
    rows = rows[ok]
    docs = [[names[cat_l[r]]] for r in rows.tolist()]
    return POIs(points, docs, source=str(p))


def _locate_edges(network: RoadNetwork, u: IntArray, v: IntArray,
                  frac: npt.NDArray[np.float64]) -> tuple[EdgePoints, npt.NDArray[np.bool_]]:
    """Points at a fraction of the u-v edges; rows whose (u, v) is not an edge are skipped."""
    ok = np.ones(u.size, dtype=bool)
    try:
        probe = locate_uv(network, u, v, np.zeros(u.size))
    except InvalidLocationError:
        probe = None
    if probe is None:  # rare: find the offending rows one by one
        for i in range(u.size):
            try:
                locate_uv(network, u[i:i + 1], v[i:i + 1], [0.0])
            except InvalidLocationError:
                ok[i] = False
        probe = locate_uv(network, u[ok], v[ok], np.zeros(int(ok.sum())))
    length = network.edge_length[probe.edge]
    # locate_uv measures the offset from the named u even when the edge is stored (v, u).
    pts = locate_uv(network, u[ok], v[ok], frac[ok] * length)
    return pts, ok


def read_osm_pois(network: RoadNetwork, path: PathLike, *,
                  max_snap_m: float = DEFAULTS.snap_distance_m) -> POIs:
    """OSM nodes and ways tagged ``amenity``, ``shop`` or ``tourism``, snapped to the network.

    A way stands at the mean of its nodes. Keywords: the tokenised ``name`` followed by the
    lower-cased tag values (``fast_food`` stays one keyword; ``a;b`` gives two). POIs
    farther than ``max_snap_m`` metres from every road are dropped.
    """
    import osmium

    lon_l: list[float] = []
    lat_l: list[float] = []
    docs: list[list[str]] = []
    fp = (osmium.FileProcessor(str(path)).with_locations()
          .with_filter(osmium.filter.KeyFilter(*OSM_POI_TAGS)))
    for obj in fp:
        if isinstance(obj, osmium.osm.Node):
            if not obj.location.valid():
                continue
            lon, lat = obj.location.lon, obj.location.lat
        elif isinstance(obj, osmium.osm.Way):
            locs = [(n.location.lon, n.location.lat) for n in obj.nodes if n.location.valid()]
            if not locs:
                continue
            lon = float(np.mean([a for a, _ in locs]))
            lat = float(np.mean([b for _, b in locs]))
        else:
            continue
        tags = obj.tags
        words: dict[str, None] = dict.fromkeys(tokenize(tags.get("name") or ""))
        for key in OSM_POI_TAGS:
            for value in (tags.get(key) or "").split(";"):
                value = value.strip().lower()
                if value and value not in ("yes", "no"):
                    words[value] = None
        lon_l.append(lon)
        lat_l.append(lat)
        docs.append(list(words))
    if not docs:
        return POIs(EdgePoints.of([], []), [], source=str(path))
    pts, dist = locate_lonlat(network, lon_l, lat_l, max_snap_m=np.inf)
    keep = np.flatnonzero(dist <= max_snap_m)
    return POIs(pts[keep], [docs[i] for i in keep.tolist()], source=str(path))
