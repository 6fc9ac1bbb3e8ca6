"""GeoParquet and CSV inputs, and deliveries written as GeoParquet for GeoPandas.

Inputs
------
GeoParquet
    A subscriptions or messages Parquet file may give each row's location as a point
    ``geometry`` column (WKB, as ``GeoDataFrame.to_parquet`` writes it) instead of
    ``lon``/``lat`` or ``u``/``v``/``offset``. Any CRS the file's ``geo`` metadata names is
    reprojected to WGS84 lon/lat, then snapped as lon/lat are; without ``geo`` metadata the
    points are taken as lon/lat (GeoParquet's default, OGC:CRS84). A null or empty point
    is a missing location; a row holding another geometry type (a line, a polygon) or a
    CRS that cannot be read is refused with the file and rows named.
CSV
    The same columns as Parquet; ``keywords`` holds one row's keywords separated by ``;``
    (``delay;gate change;boston``), since a CSV cell has no lists. A keyword cannot hold a
    ``;``. A malformed line (too many or too few cells) is refused with its line number.

Output
------
:func:`deliveries_geotable` adds the geometry of each delivery to the deliveries columns:
``"line"`` the segment from the subscription to the message, ``"points"`` the
subscription's point (``geometry``) and the message's (``message_geometry``), both in
WGS84 lon/lat, so that ``geopandas.read_parquet(path).plot()`` maps them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from roadpubsub.roadnet.errors import InputError, describe_rows

if TYPE_CHECKING:
    from roadpubsub.roadnet.locations import EdgePoints
    from roadpubsub.roadnet.network import RoadNetwork

__all__ = [
    "GEOMETRY_KINDS",
    "KEYWORD_SEPARATOR",
    "deliveries_geotable",
    "geometry_to_lonlat",
    "keywords_from_text",
    "read_csv_table",
]

#: What ``--geometry`` may ask for.
GEOMETRY_KINDS = ("line", "points")
#: Separator of the keywords of one row in a CSV cell.
KEYWORD_SEPARATOR = ";"
#: GeoParquet metadata key, and the version written.
_GEO_KEY = b"geo"
_GEO_VERSION = "1.1.0"
_POINT = 0  # shapely's type id of a Point

ErrorType = Callable[[str], Exception]


# ---------------------------------------------------------------------------- CSV
def read_csv_table(path: Path) -> pa.Table:
    """A CSV file as an Arrow table; ``keywords``, ``term`` and ``text`` stay strings.

    Raises
    ------
    pyarrow.ArrowInvalid
        A line with another number of cells than the header (its line number is named),
        or a value no column type fits.
    """
    import pyarrow.csv as pacsv

    bad: list[Any] = []

    def invalid(row: Any) -> str:
        bad.append(row)
        return "skip"

    strings = {name: pa.string() for name in ("keywords", "term", "text")}
    table = pacsv.read_csv(path, parse_options=pacsv.ParseOptions(invalid_row_handler=invalid),
                           convert_options=pacsv.ConvertOptions(column_types=strings))
    if bad:
        # pyarrow does not always know a bad row's number: find its text in the file.
        texts = {row.text.rstrip("\r\n"): row for row in bad}
        found: list[str] = []
        with path.open(encoding="utf-8", errors="replace") as fh:
            for number, line in enumerate(fh, start=1):
                row = texts.get(line.rstrip("\r\n"))
                if row is not None:
                    found.append(f"line {number} has {row.actual_columns} cells, the header "
                                 f"{row.expected_columns}")
        found = found or [f"{len(bad)} lines have another number of cells than the header"]
        msg = "; ".join(found[:5]) + (f" (and {len(found) - 5} more)" if len(found) > 5 else "")
        raise pa.ArrowInvalid(msg)
    return table


def keywords_from_text(table: pa.Table) -> pa.Table:
    """``table`` with a string ``keywords`` column split at ``;`` into lists (CSV input).

    Blank pieces are kept, so that the readers report the row (``a;;b``). A table whose
    ``keywords`` are lists already, or absent, is returned as it is.
    """
    if "keywords" not in table.column_names:
        return table
    col = table.column("keywords")
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        return table
    parts = pc.split_pattern(col, KEYWORD_SEPARATOR)
    # An empty cell is no keyword at all, not one blank keyword.
    empty = pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(col)), 0)
    parts = pc.if_else(empty, pa.scalar([], pa.list_(pa.string())), parts)
    return table.set_column(table.column_names.index("keywords"), "keywords", parts)


# ---------------------------------------------------------------------------- GeoParquet in
def _geo_metadata(table: pa.Table, path: Path, error: ErrorType) -> dict[str, Any] | None:
    raw = (table.schema.metadata or {}).get(_GEO_KEY)
    if raw is None:
        return None
    try:
        geo = json.loads(raw)
    except ValueError as exc:
        msg = f"{path}: its GeoParquet 'geo' metadata is not JSON ({exc})"
        raise error(msg) from exc
    if not isinstance(geo, dict) or not isinstance(geo.get("columns"), dict):
        msg = f"{path}: its GeoParquet 'geo' metadata has no 'columns'"
        raise error(msg)
    return geo


def _row_names(table: pa.Table, rows: npt.NDArray[np.int64]) -> str:
    """Rows by id when the table has an integer ``id`` column, else by row number."""
    if "id" in table.column_names and pa.types.is_integer(table.schema.field("id").type):
        ids = table.column("id").take(pa.array(rows[:10])).to_pylist()
        return "ids " + describe_rows(ids, total=int(rows.size))
    return "rows " + describe_rows(rows[:10].tolist(), total=int(rows.size))


def geometry_to_lonlat(table: pa.Table, path: Path, error: ErrorType) -> pa.Table:
    """Replace a point geometry column by ``lon``/``lat`` columns (WGS84 degrees).

    The column is the ``geo`` metadata's primary column, or ``geometry``. A table without
    one, or with ``lon``/``lat`` columns already, is returned as it is.

    Raises
    ------
    error
        The metadata names a geometry column the file lacks, an encoding other than WKB,
        a CRS that cannot be read or is unset (``crs: null``), bytes that are not WKB, or
        rows holding another geometry than a point (the file and rows are named).
    """
    geo = _geo_metadata(table, path, error)
    name = str(geo.get("primary_column", "geometry")) if geo else "geometry"
    if name not in table.column_names:
        if geo is not None:
            msg = (f"{path}: its GeoParquet metadata names the geometry column {name!r}, "
                   f"which the file does not have (columns: {', '.join(table.column_names)})")
            raise error(msg)
        return table
    if {"lon", "lat"} <= set(table.column_names):
        return table.drop_columns([name])
    meta = (geo or {}).get("columns", {}).get(name, {})
    encoding = str(meta.get("encoding", "WKB"))
    if encoding.upper() != "WKB":
        msg = (f"{path}: geometry column {name!r} is encoded as {encoding}; write WKB "
               "(GeoPandas' default: GeoDataFrame.to_parquet)")
        raise error(msg)
    col = table.column(name)
    if not (pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type)):
        msg = f"{path}: geometry column {name!r} is {col.type}, expected WKB bytes"
        raise error(msg)
    lon, lat = _wkb_points(col, table, path, error, name=name)
    if "crs" in meta:  # absent means OGC:CRS84 (lon/lat); null means unknown
        lon, lat = _to_lonlat(lon, lat, meta["crs"], path, error, name=name)
    out = table.drop_columns([name])
    return out.append_column("lon", pa.array(lon)).append_column("lat", pa.array(lat))


def _wkb_points(col: pa.ChunkedArray, table: pa.Table, path: Path, error: ErrorType, *,
                name: str) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """x, y of WKB points (NaN for null or empty ones)."""
    import shapely

    blobs = np.array(col.to_pylist(), dtype=object)
    try:
        geoms = shapely.from_wkb(blobs)
    except shapely.errors.ShapelyError as exc:
        msg = f"{path}: geometry column {name!r} holds bytes that are not WKB ({exc})"
        raise error(msg) from exc
    kind = shapely.get_type_id(geoms)
    other = np.flatnonzero((kind != _POINT) & (kind >= 0))
    if other.size:
        types = sorted({shapely.get_type_id(g) for g in geoms[other[:50]]})
        names = ", ".join(_TYPE_NAMES.get(int(t), str(t)) for t in types)
        msg = (f"{path}: geometry column {name!r} holds {names} geometries, not points, "
               f"at {_row_names(table, other)}; give each row one point")
        raise error(msg)
    x = np.full(len(blobs), np.nan)
    y = np.full(len(blobs), np.nan)
    ok = (kind == _POINT) & ~shapely.is_empty(geoms)
    if ok.any():
        x[ok] = shapely.get_x(geoms[ok])
        y[ok] = shapely.get_y(geoms[ok])
    return x, y


_TYPE_NAMES = {1: "LineString", 2: "LinearRing", 3: "Polygon", 4: "MultiPoint",
               5: "MultiLineString", 6: "MultiPolygon", 7: "GeometryCollection"}


def _to_lonlat(x: npt.NDArray[np.float64], y: npt.NDArray[np.float64], crs: Any, path: Path,
               error: ErrorType, *, name: str
               ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    from pyproj import CRS, Transformer
    from pyproj.exceptions import CRSError

    if crs is None:
        msg = (f"{path}: geometry column {name!r} has an unknown CRS (crs: null), so its "
               "points cannot be placed")
        raise error(msg)
    try:
        source = CRS.from_user_input(crs)
    except CRSError as exc:
        shown = json.dumps(crs)[:80] if not isinstance(crs, str) else crs[:80]
        msg = f"{path}: geometry column {name!r} has a CRS pyproj cannot read: {shown} ({exc})"
        raise error(msg) from exc
    transformer = Transformer.from_crs(source, CRS.from_epsg(4326), always_xy=True)
    lon, lat = transformer.transform(x, y)
    lon = np.asarray(lon, dtype=np.float64)
    lat = np.asarray(lat, dtype=np.float64)
    # A point outside the CRS's domain comes back as inf: a missing location for the reader.
    bad = ~(np.isfinite(lon) & np.isfinite(lat))
    lon[bad] = np.nan
    lat[bad] = np.nan
    return lon, lat


# ---------------------------------------------------------------------------- GeoParquet out
def _points_of(ids: npt.NDArray[np.int64], all_ids: npt.NDArray[np.int64],
               points: EdgePoints, what: str) -> EdgePoints:
    order = np.argsort(all_ids, kind="stable")
    at = np.searchsorted(all_ids, ids, sorter=order)
    at = np.minimum(at, max(all_ids.size - 1, 0))
    rows = order[at] if all_ids.size else at
    if ids.size and (all_ids.size == 0 or not np.array_equal(all_ids[rows], ids)):
        msg = f"deliveries name {what} ids that the {what} do not hold"
        raise InputError(msg)
    return points[rows]


def deliveries_geotable(
    table: pa.Table,
    network: RoadNetwork,
    *,
    subscription_ids: npt.NDArray[np.int64],
    subscription_points: EdgePoints,
    message_ids: npt.NDArray[np.int64],
    message_points: EdgePoints,
    geometry: Literal["line", "points"] = "line",
) -> pa.Table:
    """The deliveries ``table`` with WGS84 geometry and GeoParquet metadata.

    Parameters
    ----------
    table
        Deliveries columns (``message_id``, ``subscription_id``, ...).
    network
        The network the points lie on.
    subscription_ids, subscription_points, message_ids, message_points
        Every subscription's and message's id and location (a superset of the delivered).
    geometry
        ``"line"``: the segment from the subscription to the message; ``"points"``: the
        subscription's point as ``geometry`` and the message's as ``message_geometry``.
    """
    import shapely
    from pyproj import CRS, Transformer

    from roadpubsub.roadnet.locations import point_xy

    if geometry not in GEOMETRY_KINDS:
        msg = f"geometry must be one of {', '.join(GEOMETRY_KINDS)}, got {geometry!r}"
        raise InputError(msg)
    sid = np.asarray(table.column("subscription_id").to_numpy(), dtype=np.int64)
    mid = np.asarray(table.column("message_id").to_numpy(), dtype=np.int64)
    to_wgs = Transformer.from_crs(CRS.from_user_input(network.crs), CRS.from_epsg(4326),
                                  always_xy=True)

    def lonlat(points: EdgePoints) -> npt.NDArray[np.float64]:
        xy = point_xy(network, points)
        lon, lat = to_wgs.transform(xy[:, 0], xy[:, 1])
        return np.column_stack([lon, lat]).astype(np.float64)

    s_ll = lonlat(_points_of(sid, subscription_ids, subscription_points, "subscription"))
    m_ll = lonlat(_points_of(mid, message_ids, message_points, "message"))
    columns: dict[str, tuple[Any, str]] = {}
    if geometry == "line":
        coords = np.stack([s_ll, m_ll], axis=1)  # (n, 2 points, 2)
        columns["geometry"] = (shapely.linestrings(coords), "LineString")
    else:
        columns["geometry"] = (shapely.points(s_ll), "Point")
        columns["message_geometry"] = (shapely.points(m_ll), "Point")
    crs = CRS.from_user_input("OGC:CRS84").to_json_dict()
    out = table
    meta_cols = {}
    for name, (geoms, kind) in columns.items():
        wkb = shapely.to_wkb(geoms) if len(geoms) else np.array([], dtype=object)
        out = out.append_column(name, pa.array(list(wkb), pa.binary()))
        meta_cols[name] = {"encoding": "WKB", "geometry_types": [kind], "crs": crs}
    geo = {"version": _GEO_VERSION, "primary_column": "geometry", "columns": meta_cols}
    return out.replace_schema_metadata({**(out.schema.metadata or {}),
                                        _GEO_KEY: json.dumps(geo).encode()})
