"""``roadpubsub match`` with routes and areas: a GeoJSON ``geometry`` column (issue 32).

On Andorra: a JSON Lines file mixing point rows (lon/lat), route rows (LineString) and
area rows (Polygon, MultiPolygon), threshold and boolean kinds. The indexed run equals
the reference run, and the deliveries are recomputed from the ``--sets-out`` file alone
(the resolved node paths and segments, read back by ``SegmentSet.from_json``) with the
reference matchers. Bad geometries fail with one line naming the file, row, id and field.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from set_rows import lonlat, mixed_rows, point_drawer

from roadpubsub.cli import main
from roadpubsub.index.io import read_deliveries, read_messages, read_weights
from roadpubsub.index.kinds import BooleanSubscriptions
from roadpubsub.index.model import Subscriptions
from roadpubsub.pruning.brute import BruteMatcher
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.kinds_reference import BooleanBruteMatcher
from roadpubsub.pruning.set_locations import SetLocations
from roadpubsub.roadnet.io import load_network
from roadpubsub.roadnet.segment_sets import SegmentSet

VOCAB = ["a", "b", "c", "d"]
DMAX = 1500.0


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory,
          shared: Callable[[str], Path]) -> dict[str, Path]:
    path = shared("osm/andorra-latest.osm.pbf")
    net = load_network(path)
    out = tmp_path_factory.mktemp("sets")
    rng = np.random.default_rng(3)
    points = point_drawer(net, rng)
    rows, route_ll = mixed_rows(net, rng, points, VOCAB, n=90, tau=0.2, dmax=DMAX)
    with (out / "subscriptions.jsonl").open("w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    # Messages: half on a route's waypoint, half anywhere.
    m = 60
    mll = lonlat(net, points(m))
    for j in range(0, m, 2):
        wp = route_ll[j % len(route_ll)]
        mll[j] = wp[j % wp.shape[0]]
    pq.write_table(pa.table({"id": np.arange(m), "lon": mll[:, 0], "lat": mll[:, 1],
                             "keywords": [list(rng.choice(VOCAB, 3, replace=False))
                                          for _ in range(m)]}), out / "messages.parquet")
    pq.write_table(pa.table({"term": VOCAB, "weight": [1.0, 2.0, 3.0, 4.0]}),
                   out / "weights.parquet")
    return {"network": path, "dir": out, "subscriptions": out / "subscriptions.jsonl",
            "messages": out / "messages.parquet", "weights": out / "weights.parquet"}


def argv(files: dict[str, Path], subs: Path, out: Path, index: str, *extra: str) -> list[str]:
    return ["match", "--network", str(files["network"]), "--subscriptions", str(subs),
            "--messages", str(files["messages"]), "--weights", str(files["weights"]),
            "--dmax", str(DMAX), "--index", index, "--out", str(out), "--quiet", *extra]


def test_routes_and_areas_index_equals_reference_and_recomputes(
        files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert main(argv(files, files["subscriptions"], a, "eia", "--json")) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["set_subscriptions"] == 40  # 30 routes and 10 areas
    sets_out = Path(summary["sets_out"])
    assert sets_out == tmp_path / "a-sets.jsonl"
    assert main(argv(files, files["subscriptions"], b, "brute", "--sets-out",
                     str(tmp_path / "b.jsonl"))) == 0
    da, db = Deliveries(**read_deliveries(a)), Deliveries(**read_deliveries(b))
    np.testing.assert_array_equal(da.message_id, db.message_id)
    np.testing.assert_array_equal(da.subscription_id, db.subscription_id)
    np.testing.assert_array_equal(da.distance, db.distance)
    np.testing.assert_array_equal(da.score, db.score)
    assert sets_out.read_text() == (tmp_path / "b.jsonl").read_text()
    # Recompute from the written sets alone, with the reference matchers.
    net = load_network(files["network"])
    written = [json.loads(line) for line in sets_out.read_text().splitlines()]
    assert {w["kind"] for w in written} == {"route", "area"}
    assert all(w["node_paths"] for w in written if w["kind"] == "route")
    sets = {w["subscription_id"]: SegmentSet.from_json(net, w) for w in written}
    weights = read_weights(files["weights"])
    msgs = read_messages(files["messages"], net, weights)
    table = [json.loads(line) for line in files["subscriptions"].read_text().splitlines()]
    on_sets = {i for i, r in enumerate(table) if r["geometry"]}
    # Set rows' points are never used: put them anywhere.
    ll = np.array([[r["lon"], r["lat"]] if i not in on_sets else [np.nan, np.nan]
                   for i, r in enumerate(table)])
    from roadpubsub.roadnet.locations import locate_lonlat
    pts, _ = locate_lonlat(net, np.where(np.isnan(ll[:, 0]), ll[0, 0], ll[:, 0]),
                           np.where(np.isnan(ll[:, 1]), ll[0, 1], ll[:, 1]))
    parts = []
    for kind in ("threshold", "boolean"):
        rows = [i for i, r in enumerate(table) if r["kind"] == kind]
        ids = np.array([table[i]["id"] for i in rows])
        kws = [table[i]["keywords"] for i in rows]
        p = pts[np.array(rows)]
        loc = SetLocations.of([k for k, i in enumerate(rows) if i in on_sets],
                              [sets[table[i]["id"]] for i in rows if i in on_sets])
        if kind == "threshold":
            subs = Subscriptions.from_rows(ids=ids, points=p, keywords=kws, weights=weights,
                                           alpha=[table[i]["alpha"] for i in rows],
                                           tau=[table[i]["tau"] for i in rows])
            parts.append(BruteMatcher(net, subs, weights, dmax_m=DMAX,
                                      set_locations=loc).match(msgs))
        else:
            tmp = Subscriptions.from_rows(ids=ids, points=p, keywords=kws, weights=weights,
                                          alpha=np.ones(len(rows)), tau=np.ones(len(rows)))
            bsubs = BooleanSubscriptions(ids, p, np.array([table[i]["radius"] for i in rows]),
                                         tmp.kw_ptr, tmp.kw_terms)
            parts.append(BooleanBruteMatcher(net, bsubs, weights, dmax_m=DMAX,
                                             set_locations=loc).match(msgs))
    want = Deliveries.concat(parts)
    assert da.pairs() == want.pairs()
    np.testing.assert_array_equal(da.distance, want.distance)
    set_ids = {table[i]["id"] for i in on_sets}
    on_route = [d for (_, s), d in zip(da.pairs(), da.distance, strict=False) if s in set_ids]
    assert len(on_route) > 10
    assert (da.distance[np.isin(da.subscription_id, list(set_ids))] == 0).sum() >= 5


def _bad_file(files: dict[str, Path], tmp_path: Path, row: int, geometry: object) -> Path:
    lines = files["subscriptions"].read_text().splitlines()
    r = json.loads(lines[row])
    r["geometry"] = geometry
    lines[row] = json.dumps(r)
    p = tmp_path / "bad.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.mark.parametrize(("geometry", "words"), [
    ("{not json", ["not GeoJSON text"]),
    (json.dumps({"type": "GeometryCollection", "geometries": []}), ["GeometryCollection"]),
    (json.dumps({"type": "LineString", "coordinates": [[0.0, 0.0], [0.001, 0.0]]}),
     ["waypoint 0"]),
    (json.dumps({"type": "Polygon", "coordinates": [[[0, 0], [0.001, 0], [0.001, 0.001],
                                                     [0, 0]]]}), ["no road"]),
])
def test_bad_geometry_names_file_row_and_field(files: dict[str, Path], tmp_path: Path,
                                               geometry: str, words: list[str]) -> None:
    bad = _bad_file(files, tmp_path, 4, geometry)
    done = subprocess.run([sys.executable, "-m", "roadpubsub",
                           *argv(files, bad, tmp_path / "x.parquet", "eia")],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    line = done.stderr.strip().splitlines()[-1]
    for w in [str(bad), "row 4", "(id 1004)", "field geometry", *words]:
        assert w in line, line
    assert not (tmp_path / "x.parquet").exists()


def test_topk_rows_must_be_points(files: dict[str, Path], tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    lines = files["subscriptions"].read_text().splitlines()
    r = json.loads(lines[1])  # a route row
    assert r["geometry"]
    r.update(kind="topk", k=2, alpha=0.5, radius=None, tau=None)
    lines[1] = json.dumps(r)
    p = tmp_path / "topk.jsonl"
    p.write_text("\n".join(lines) + "\n")
    assert main(argv(files, p, tmp_path / "x.parquet", "eia")) == 2
    err = capsys.readouterr().err
    assert "row 1 (id 1001): field geometry: a top-k subscription must be a point" in err


def test_generate_routes_then_match(shared: Callable[[str], Path], tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """``generate --routes`` writes routes between random places (a LineString geometry
    of two waypoints) that ``match`` resolves: the indexed run equals the reference, and
    every route is written back with its node path."""
    shared("text/airline_tweets.csv")
    net = shared("osm/andorra-latest.osm.pbf")
    wl = tmp_path / "wl"
    assert main(["generate", "--network", str(net), "--out-dir", str(wl), "--subscriptions",
                 "400", "--messages", "40", "--seed", "4", "--tau", "0.3", "--routes", "25",
                 "--route-min-m", "1000", "--route-max-m", "6000", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["routes"]["routes"] == 25
    assert 1 <= summary["routes"]["route_km"]["min"] <= summary["routes"]["route_km"]["max"] <= 6
    geom = pq.read_table(wl / "subscriptions.parquet").column("geometry").to_pylist()
    assert sum(g is not None for g in geom) == 25 and geom[-1] is not None
    outs = []
    for index in ("eia", "brute"):
        out = tmp_path / f"{index}.parquet"
        assert main(["match", "--network", str(net), "--subscriptions",
                     str(wl / "subscriptions.parquet"), "--messages",
                     str(wl / "messages.parquet"), "--weights", str(wl / "weights.parquet"),
                     "--dmax", "3000", "--index", index, "--out", str(out), "--quiet"]) == 0
        outs.append(Deliveries(**read_deliveries(out)))
    a, b = outs
    assert a.pairs() == b.pairs()
    np.testing.assert_array_equal(a.distance, b.distance)
    np.testing.assert_array_equal(a.score, b.score)
    written = [json.loads(x) for x in (tmp_path / "eia-sets.jsonl").read_text().splitlines()]
    assert len(written) == 25 and all(w["kind"] == "route" and w["node_paths"]
                                      for w in written)
    route_ids = {w["subscription_id"] for w in written}
    assert route_ids & set(a.subscription_id.tolist())
    assert main(["generate", "--network", str(net), "--out-dir", str(tmp_path / "x"),
                 "--subscriptions", "5", "--messages", "1", "--routes", "6", "--quiet"]) == 2


def test_csv_and_parquet_read_like_json_lines(files: dict[str, Path], tmp_path: Path) -> None:
    """The same rows as CSV (keywords joined by ';', GeoJSON text quoted, empty cells for
    the point rows' geometry) and as Parquet (a string column): the same deliveries."""
    import pyarrow.csv as pacsv

    rows = [json.loads(x) for x in files["subscriptions"].read_text().splitlines()]
    table = pa.Table.from_pylist(rows)
    pq.write_table(table, tmp_path / "subs.parquet")
    flat = table.set_column(table.column_names.index("keywords"), "keywords",
                            pa.array([";".join(r["keywords"]) for r in rows]))
    flat = flat.set_column(flat.column_names.index("geometry"), "geometry",
                           pa.array([r["geometry"] or "" for r in rows]))
    pacsv.write_csv(flat, tmp_path / "subs.csv")
    got = []
    for name in ("subscriptions", "parquet", "csv"):
        src = files["subscriptions"] if name == "subscriptions" else tmp_path / f"subs.{name}"
        out = tmp_path / f"{name}.parquet"
        assert main(argv(files, src, out, "eia")) == 0
        got.append(Deliveries(**read_deliveries(out)))
        assert (tmp_path / f"{name}-sets.jsonl").read_text() == \
            (tmp_path / "subscriptions-sets.jsonl").read_text()
    assert len(got[0]) > 20
    for other in got[1:]:
        assert other.pairs() == got[0].pairs()
        np.testing.assert_array_equal(other.distance, got[0].distance)


def test_geometry_output_is_refused_with_sets(files: dict[str, Path], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """--geometry draws a subscription's point; with routes and areas it would draw the
    placeholder, so it is refused with one line."""
    assert main(argv(files, files["subscriptions"], tmp_path / "g.parquet", "eia",
                     "--geometry", "line")) == 2
    assert "--sets-out instead" in capsys.readouterr().err
    assert not (tmp_path / "g.parquet").exists()
