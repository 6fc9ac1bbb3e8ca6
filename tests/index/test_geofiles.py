"""GeoParquet and CSV inputs, and GeoParquet deliveries, on Andorra's real roads and the
shared airline tweets: the same locations whatever the file's CRS or format, and one
clear error naming the file for each bad input."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from roadpubsub.index.io import (
    read_messages,
    read_subscriptions,
    subscriptions_table,
    write_messages,
    write_subscriptions,
    write_weights,
)
from roadpubsub.index.model import InvalidMessageError, InvalidSubscriptionError, Subscriptions
from roadpubsub.index.terms import TermWeights
from roadpubsub.index.workload import Workload, generate_workload
from roadpubsub.roadnet.network import RoadNetwork

shapely = pytest.importorskip("shapely")
UTM_31N = "EPSG:25831"  # ETRS89 / UTM zone 31N, Andorra's metric CRS


@pytest.fixture(scope="module")
def andorra_workload(andorra: RoadNetwork, shared: Callable[[str], Path]) -> Workload:
    return generate_workload(andorra, n_subscriptions=400, n_messages=40, seed=5,
                             tweets=shared("text/airline_tweets.csv"))


def geoparquet(table: pa.Table, path: Path, *, crs: object = "absent",
               column: str = "geometry") -> Path:
    """Write ``table`` (with lon/lat) as GeoParquet, its points reprojected to ``crs``
    ("absent": lon/lat and no crs key, GeoParquet's default), with shapely and pyproj."""
    from pyproj import CRS, Transformer

    lon = table.column("lon").to_numpy()
    lat = table.column("lat").to_numpy()
    meta: dict[str, object] = {"encoding": "WKB", "geometry_types": ["Point"]}
    if crs != "absent":
        if isinstance(crs, str) and crs.startswith("EPSG:"):
            to = Transformer.from_crs(CRS.from_epsg(4326), CRS.from_user_input(crs),
                                      always_xy=True)
            lon, lat = to.transform(lon, lat)
            meta["crs"] = CRS.from_user_input(crs).to_json_dict()
        else:
            meta["crs"] = crs
    wkb = shapely.to_wkb(shapely.points(np.column_stack([lon, lat])))
    out = table.drop_columns(["u", "v", "offset", "lon", "lat"]).append_column(
        column, pa.array(list(wkb), pa.binary()))
    geo = {"version": "1.1.0", "primary_column": column, "columns": {column: meta}}
    pq.write_table(out.replace_schema_metadata({b"geo": json.dumps(geo).encode()}), path)
    return path


def assert_same_places(a: Subscriptions, b: Subscriptions) -> None:
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.points.edge, b.points.edge)
    np.testing.assert_allclose(a.points.offset, b.points.offset, atol=1e-4)
    np.testing.assert_array_equal(a.kw_ptr, b.kw_ptr)
    np.testing.assert_array_equal(a.kw_terms, b.kw_terms)


def test_geoparquet_in_any_crs_reads_as_lonlat(andorra: RoadNetwork,
                                               andorra_workload: Workload,
                                               tmp_path: Path) -> None:
    wl = andorra_workload
    table = subscriptions_table(wl.subscriptions, network=andorra, weights=wl.weights)
    plain = tmp_path / "plain.parquet"
    pq.write_table(table.drop_columns(["u", "v", "offset"]), plain)
    want = read_subscriptions(plain, andorra, wl.weights)
    for crs in ("absent", UTM_31N, "EPSG:3857"):
        path = geoparquet(table, tmp_path / f"geo_{crs.replace(':', '_')}.parquet", crs=crs)
        assert_same_places(read_subscriptions(path, andorra, wl.weights), want)


def test_geopandas_files_read_and_deliveries_map(andorra: RoadNetwork,
                                                 andorra_workload: Workload,
                                                 shared: Callable[[str], Path],
                                                 tmp_path: Path) -> None:
    """A GeoPandas user's round trip: to_parquet in UTM in, match, read_parquet out."""
    gpd = pytest.importorskip("geopandas")
    from roadpubsub.cli import main

    wl = andorra_workload
    write_subscriptions(wl.subscriptions, tmp_path / "subs.parquet", network=andorra,
                        weights=wl.weights)
    write_messages(wl.messages, tmp_path / "msgs.parquet", network=andorra, weights=wl.weights)
    write_weights(wl.weights, tmp_path / "weights.parquet")
    for name in ("subs", "msgs"):
        df = pq.read_table(tmp_path / f"{name}.parquet").to_pandas()
        gdf = gpd.GeoDataFrame(df.drop(columns=["u", "v", "offset", "lon", "lat"]),
                               geometry=gpd.points_from_xy(df.lon, df.lat), crs="EPSG:4326")
        gdf.to_crs(UTM_31N).to_parquet(tmp_path / f"{name}_utm.parquet")
    network = str(shared("osm/andorra-latest.osm.pbf"))
    common = ["match", "--network", network, "--weights", str(tmp_path / "weights.parquet"),
              "--dmax", "2000", "--quiet"]
    assert main([*common, "--subscriptions", str(tmp_path / "subs.parquet"), "--messages",
                 str(tmp_path / "msgs.parquet"), "--out", str(tmp_path / "plain.parquet")]) == 0
    assert main([*common, "--subscriptions", str(tmp_path / "subs_utm.parquet"),
                 "--messages", str(tmp_path / "msgs_utm.parquet"), "--geometry", "line",
                 "--out", str(tmp_path / "lines.parquet")]) == 0
    plain = pq.read_table(tmp_path / "plain.parquet").to_pandas()
    assert len(plain) > 0
    lines = gpd.read_parquet(tmp_path / "lines.parquet")
    assert (lines.geom_type == "LineString").all() and lines.crs.equals("OGC:CRS84")
    assert lines[["message_id", "subscription_id"]].equals(
        plain[["message_id", "subscription_id"]])
    # Each line runs from the subscription's lon/lat to the message's.
    subs = pq.read_table(tmp_path / "subs.parquet").to_pandas().set_index("id")
    first = lines.iloc[0]
    start = first.geometry.coords[0]
    s = subs.loc[first.subscription_id]
    assert start == pytest.approx((s.lon, s.lat), abs=1e-7)
    assert main([*common, "--subscriptions", str(tmp_path / "subs.parquet"), "--messages",
                 str(tmp_path / "msgs.parquet"), "--geometry", "points",
                 "--out", str(tmp_path / "points.parquet")]) == 0
    points = gpd.read_parquet(tmp_path / "points.parquet")
    assert (points.geom_type == "Point").all() and len(points) == len(plain)
    assert points.geometry.iloc[0].coords[0] == pytest.approx((s.lon, s.lat), abs=1e-7)
    assert "message_geometry" in points.columns


def test_csv_input_equals_parquet(andorra: RoadNetwork, andorra_workload: Workload,
                                  tmp_path: Path) -> None:
    import pyarrow.csv as pacsv

    wl = andorra_workload
    table = subscriptions_table(wl.subscriptions, network=andorra, weights=wl.weights)
    plain = tmp_path / "subs.parquet"
    pq.write_table(table, plain)
    joined = [";".join(k) for k in table.column("keywords").to_pylist()]
    csv = table.set_column(table.column_names.index("keywords"), "keywords", pa.array(joined))
    pacsv.write_csv(csv, tmp_path / "subs.csv")
    assert_same_places(read_subscriptions(tmp_path / "subs.csv", andorra, wl.weights),
                       read_subscriptions(plain, andorra, wl.weights))


def one_row_table(andorra: RoadNetwork, wl: Workload, n: int = 3) -> pa.Table:
    return subscriptions_table(wl.subscriptions.take(np.arange(n)), network=andorra,
                               weights=wl.weights)


def test_non_point_geometry_is_refused(andorra: RoadNetwork, andorra_workload: Workload,
                                       tmp_path: Path) -> None:
    table = one_row_table(andorra, andorra_workload)
    path = geoparquet(table, tmp_path / "lines.parquet")
    geo = pq.read_table(path)
    line = shapely.to_wkb(shapely.linestrings([[1.5, 42.5], [1.51, 42.51]]))
    blobs = geo.column("geometry").to_pylist()
    blobs[1] = line
    geo = geo.set_column(geo.column_names.index("geometry"), "geometry",
                         pa.array(blobs, pa.binary()))
    pq.write_table(geo, path)
    bad_id = int(table.column("id")[1].as_py())
    with pytest.raises(InvalidSubscriptionError) as exc:
        read_subscriptions(path, andorra, TermWeights.from_idf([["x"]]))
    text = str(exc.value)
    assert str(path) in text and "LineString" in text and f"ids {bad_id}" in text


def test_missing_geometry(andorra: RoadNetwork, andorra_workload: Workload,
                          tmp_path: Path) -> None:
    wl = andorra_workload
    table = one_row_table(andorra, wl)
    # A null point is a missing location, named by id.
    path = geoparquet(table, tmp_path / "null.parquet")
    geo = pq.read_table(path)
    blobs = geo.column("geometry").to_pylist()
    blobs[2] = None
    pq.write_table(geo.set_column(geo.column_names.index("geometry"), "geometry",
                                  pa.array(blobs, pa.binary())), path)
    with pytest.raises(InvalidSubscriptionError, match=r"missing or NaN location: ids \d+"
                       ) as exc:
        read_subscriptions(path, andorra, wl.weights)
    assert str(path) in str(exc.value)
    # Metadata naming a geometry column the file lacks.
    path = geoparquet(table, tmp_path / "renamed.parquet")
    geo = pq.read_table(path)
    renamed = geo.rename_columns([c if c != "geometry" else "geom" for c in geo.column_names])
    pq.write_table(renamed.replace_schema_metadata(geo.schema.metadata), path)
    with pytest.raises(InvalidSubscriptionError, match="names the geometry column 'geometry'"
                       ) as exc:
        read_subscriptions(path, andorra, wl.weights)
    assert str(path) in str(exc.value)


@pytest.mark.parametrize(("crs", "needle"), [
    ("urn:ogc:def:crs:EPSG::999999", "a CRS pyproj cannot read"),
    ({"type": "GeographicCRS", "name": "nonsense"}, "a CRS pyproj cannot read"),
    (None, "unknown CRS (crs: null)"),
])
def test_bad_crs(andorra: RoadNetwork, andorra_workload: Workload, tmp_path: Path,
                 crs: object, needle: str) -> None:
    table = one_row_table(andorra, andorra_workload)
    path = geoparquet(table, tmp_path / "msgs.parquet", crs=crs)
    # As messages: the same reader path, with its own error class.
    msgs = pq.read_table(path).drop_columns(["alpha", "tau"])
    pq.write_table(msgs, path)
    with pytest.raises(InvalidMessageError) as exc:
        read_messages(path, andorra, andorra_workload.weights)
    assert str(path) in str(exc.value) and needle in str(exc.value)


def test_bad_csv_rows_are_named(andorra: RoadNetwork, andorra_workload: Workload,
                                tmp_path: Path) -> None:
    header = "id,lon,lat,keywords,alpha,tau\n"
    good = "1,1.5218,42.5075,delay;gate,0.5,0.7\n"
    path = tmp_path / "subs.csv"
    path.write_text(header + good + "2,1.5218,42.5075,delay,0.5\n" + good.replace("1,", "3,", 1))
    with pytest.raises(InvalidSubscriptionError) as exc:
        read_subscriptions(path, andorra, andorra_workload.weights)
    assert str(path) in str(exc.value) and "line 3 has 5 cells" in str(exc.value)
    path.write_text(header + good + "2,1.5218,42.5075,delay;;gate,0.5,0.7\n")
    with pytest.raises(InvalidSubscriptionError, match="white-space-only keywords: ids 2"):
        read_subscriptions(path, andorra, andorra_workload.weights)
