"""Route and area subscriptions in ``roadpubsub match`` (issue 32).

A subscriptions file may carry a ``geometry`` column of GeoJSON text (Parquet string,
JSON Lines string, CSV cell): a row whose geometry is a ``LineString`` is located on a
route through its lon/lat waypoints (consecutive ones joined by the shortest path of
:func:`~roadpubsub.roadnet.segment_sets.route_from_lonlat`, ties broken by its documented rule); a
``Polygon`` or ``MultiPolygon`` on every road inside it
(:func:`~roadpubsub.roadnet.segment_sets.area_from_geojson`). A row whose geometry is null, empty or
a ``Point`` is a point subscription as today (a Point gives its lon/lat). Every other
column is as for points (``kind``, ``alpha``, ``tau``, ``radius``, ...); threshold and
boolean rows may lie on sets, top-k rows may not. A GeoParquet file whose ``geometry``
column is WKB is read as today (points only).

The resolved sets are written next to the deliveries (``--sets-out``, default ``--out``
with ``-sets.jsonl`` in place of its suffix), one JSON line per set subscription:
``{"subscription_id", "kind", "length_m", "node_paths", "segments"}`` with original node
ids and offsets in metres (:meth:`~roadpubsub.roadnet.segment_sets.SegmentSet.to_json`), enough for
any reference to recompute every distance. Errors name the file, the row (and its id) and
the field.

``roadpubsub generate --routes N`` turns the last N generated subscriptions into routes
between random places (:func:`~roadpubsub.roadnet.segment_sets.random_routes`, 2-20 km by default):
their ``geometry`` holds the two waypoints as a GeoJSON LineString (:func:`add_routes`).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roadpubsub.roadnet.errors import InputError

if TYPE_CHECKING:
    import pyarrow as pa

    from roadpubsub.index.kinds import SubscriptionSet
    from roadpubsub.index.terms import TermWeights
    from roadpubsub.pruning.set_locations import SetLocations
    from roadpubsub.roadnet.network import RoadNetwork
    from roadpubsub.roadnet.segment_sets import SegmentSet

__all__ = ["LocatedSets", "add_routes", "has_set_geometry", "read_set_sources",
           "sets_out_path", "write_sets"]

#: GeoJSON types that make a row a route or an area.
SET_TYPES = ("LineString", "Polygon", "MultiPolygon")


@dataclass(frozen=True)
class LocatedSets:
    """The set rows of a subscriptions file, per kind, and every set by subscription id."""

    threshold: SetLocations | None
    boolean: SetLocations | None
    by_id: dict[int, SegmentSet]


def has_set_geometry(path: str | Path) -> bool:
    """Whether a subscriptions file has a ``geometry`` column of text (GeoJSON)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from roadpubsub.index.tables import read_table

    p = Path(path)
    try:
        schema = (pq.read_schema(p) if p.suffix.lower() in (".parquet", ".pq")
                  else read_table(p).schema)
    except (ValueError, OSError):  # the reader names a damaged file properly
        return False
    if "geometry" not in schema.names:
        return False
    t = schema.field("geometry").type
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def sets_out_path(args: argparse.Namespace) -> Path:
    """``--sets-out``, or ``--out`` with ``-sets.jsonl`` in place of its suffix."""
    if getattr(args, "sets_out", None):
        return Path(args.sets_out)
    out = Path(args.out)
    return out.with_name(f"{out.stem}-sets.jsonl")


def _parse(text: str, where: str) -> dict[str, Any]:
    try:
        geom = json.loads(text)
    except json.JSONDecodeError as exc:
        msg = f"{where}: field geometry: not GeoJSON text ({exc.msg} at char {exc.pos})"
        raise InputError(msg) from exc
    if not isinstance(geom, dict) or geom.get("type") not in (*SET_TYPES, "Point"):
        kind = geom.get("type") if isinstance(geom, dict) else type(geom).__name__
        msg = (f"{where}: field geometry: type must be Point, LineString, Polygon or "
               f"MultiPolygon, got {kind!r}")
        raise InputError(msg)
    return geom


def _resolve(table: pa.Table, path: Path, network: RoadNetwork, max_snap_m: float
             ) -> tuple[pa.Table, dict[int, SegmentSet]]:
    """The table with set rows given a placeholder location (their first piece's start:
    the readers need one; the matchers do not use it) and Point rows their lon/lat, and
    the sets by row."""
    import numpy as np
    import pyarrow as pa

    from roadpubsub.index.geofiles import keywords_from_text
    from roadpubsub.index.io import location_columns
    from roadpubsub.roadnet.errors import InvalidLocationError
    from roadpubsub.roadnet.locations import EdgePoints
    from roadpubsub.roadnet.segment_sets import area_from_geojson, route_from_lonlat

    texts = table.column("geometry").to_pylist()
    ids = (table.column("id").to_pylist() if "id" in table.column_names
           else [None] * table.num_rows)
    sets: dict[int, SegmentSet] = {}
    point_ll: dict[int, tuple[float, float]] = {}
    for i, text in enumerate(texts):
        if text is None or not str(text).strip():
            continue
        where = f"{path}: row {i}" + (f" (id {ids[i]})" if ids[i] is not None else "")
        geom = _parse(str(text), where)
        try:
            if geom["type"] == "Point":
                lon, lat = (float(c) for c in geom["coordinates"][:2])
                point_ll[i] = (lon, lat)
            elif geom["type"] == "LineString":
                sets[i] = route_from_lonlat(network, geom, max_snap_m=max_snap_m)
            else:
                sets[i] = area_from_geojson(network, geom)
        except (InvalidLocationError, KeyError, TypeError, ValueError) as exc:
            msg = f"{where}: field geometry: {exc}"
            raise InputError(msg) from exc
    table = keywords_from_text(table.drop_columns(["geometry"]))
    rows = np.array(sorted(sets), dtype=np.int64)
    n = table.num_rows
    place = {}
    if rows.size:
        first = EdgePoints.of([sets[int(r)].edge[0] for r in rows],
                              [sets[int(r)].start[0] for r in rows])
        place = location_columns(network, first, lonlat=True)
    names = set(table.column_names)
    wanted = [c for c in ("u", "v", "offset") if {"u", "v", "offset"} <= names]
    if {"lon", "lat"} <= names or not wanted or point_ll:
        wanted += ["lon", "lat"]
    for name in wanted:
        typ = pa.int64() if name in ("u", "v") else pa.float64()
        values = table.column(name).cast(typ).to_pylist() if name in names else [None] * n
        if rows.size:
            for r, x in zip(rows.tolist(), place[name].to_pylist(), strict=True):
                values[r] = x
        if name in ("lon", "lat"):
            for r, (lon, lat) in point_ll.items():
                values[r] = lon if name == "lon" else lat
        col = pa.array(values, typ)
        table = (table.set_column(table.column_names.index(name), name, col)
                 if name in names else table.append_column(name, col))
    return table, {int(r): sets[int(r)] for r in rows}


def read_set_sources(args: argparse.Namespace, dmax: float, *, kinds: bool
                     ) -> tuple[RoadNetwork, TermWeights, SubscriptionSet, LocatedSets]:
    """The network, weights and subscriptions of a file with a GeoJSON ``geometry``
    column, and its set rows (``args.keywords_not_in_weights`` as the other readers).

    Raises
    ------
    InputError
        A geometry that is not GeoJSON text of a Point, LineString, Polygon or
        MultiPolygon, a route waypoint off the network or unreachable, an area with no
        road, a top-k row on a set; the file, row, id and field are named. Every other
        problem as the point readers report it.
    """
    import numpy as np
    import pyarrow.parquet as pq

    from roadpubsub.cli.sources import read_weights_option
    from roadpubsub.index.io import read_subscriptions
    from roadpubsub.index.kinds import SubscriptionSet
    from roadpubsub.index.kinds_io import read_subscription_set
    from roadpubsub.index.tables import read_table
    from roadpubsub.pruning.set_locations import SetLocations
    from roadpubsub.roadnet.io import load_network

    path = Path(args.subscriptions)
    network = load_network(args.network, directed=args.directed)
    weights = read_weights_option(args)
    known = len(weights)
    table, sets = _resolve(read_table(path), path, network, args.max_snap)
    row_ids = table.column("id").to_pylist() if "id" in table.column_names else []
    with tempfile.TemporaryDirectory(prefix="roadpubsub-sets-") as tmp:
        staged = Path(tmp) / "subscriptions.parquet"
        pq.write_table(table, staged)
        try:
            if kinds:
                subs = read_subscription_set(staged, network, weights, dmax_m=dmax,
                                             max_snap_m=args.max_snap)
            else:
                subs = SubscriptionSet.only_threshold(read_subscriptions(
                    staged, network, weights, max_snap_m=args.max_snap))
        except (InputError, ValueError) as exc:  # name the user's file, not the staged one
            msg = str(exc).replace(str(staged), str(path))
            raise InputError(msg) from exc
    args.keywords_not_in_weights = len(weights) - known
    by_id = {int(row_ids[r]): s for r, s in sets.items()}
    top = set(subs.topk.ids.tolist()) & set(by_id)
    if top:
        sid = min(top)
        row = row_ids.index(sid)
        msg = (f"{path}: row {row} (id {sid}): field geometry: a top-k subscription must "
               f"be a point (routes and areas are for threshold and boolean ones)")
        raise InputError(msg)

    def located(ids: np.ndarray) -> SetLocations | None:
        rows = [r for r, i in enumerate(ids.tolist()) if i in by_id]
        if not rows:
            return None
        return SetLocations.of(rows, [by_id[int(ids[r])] for r in rows])

    return network, weights, subs, LocatedSets(located(subs.threshold.ids),
                                               located(subs.boolean.ids), by_id)


def write_sets(sets: LocatedSets, network: RoadNetwork, path: Path) -> Path:
    """The resolved sets as JSON Lines, by subscription id, written atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for sid in sorted(sets.by_id):
                row = {"subscription_id": sid, **sets.by_id[sid].to_json(network)}
                fh.write(json.dumps(row) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def add_routes(path: Path, network: RoadNetwork, *, n: int, seed: int, min_m: float,
               max_m: float) -> dict[str, Any]:
    """Turn the last ``n`` rows of a written subscriptions file into routes between random
    places (a GeoJSON LineString ``geometry`` of their two waypoints; null elsewhere),
    rewriting the file atomically; returns a summary (count, lengths in km)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from roadpubsub.index.io import location_columns
    from roadpubsub.index.tables import write_tables
    from roadpubsub.roadnet.locations import EdgePoints
    from roadpubsub.roadnet.segment_sets import random_routes

    table = pq.read_table(path)
    if not 0 <= n <= table.num_rows:
        msg = f"--routes {n}: between 0 and the {table.num_rows} subscriptions"
        raise InputError(msg)
    routes = random_routes(network, n, seed=seed, min_m=min_m, max_m=max_m)
    ends = EdgePoints.concat([p for _, p in routes]) if routes else None
    texts: list[str | None] = [None] * (table.num_rows - n)
    if ends is not None:
        cols = location_columns(network, ends, lonlat=True)
        lon, lat = cols["lon"].to_numpy(), cols["lat"].to_numpy()
        texts += [json.dumps({"type": "LineString",
                              "coordinates": [[float(lon[2 * i]), float(lat[2 * i])],
                                              [float(lon[2 * i + 1]), float(lat[2 * i + 1])]]})
                  for i in range(n)]
    write_tables({path: table.append_column("geometry", pa.array(texts, pa.string()))})
    km = np.array([r.length_m for r, _ in routes]) / 1000
    return {"routes": n, "route_km": {"min": round(float(km.min()), 2),
                                      "median": round(float(np.median(km)), 2),
                                      "max": round(float(km.max()), 2)} if n else None}
