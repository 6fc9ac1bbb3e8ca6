"""Spark batch matching of route and area subscriptions (issue 32): on Andorra, a
subscriptions file mixing points, routes (LineString) and areas (Polygon, MultiPolygon),
threshold and boolean kinds, messages carrying the words of real tweets. The Spark job's
deliveries equal ``roadpubsub match``'s (indexed) and the reference's (``--index brute``)
row for row; a bad geometry row fails with one line naming the file, row and field."""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from set_rows import lonlat, mixed_rows, point_drawer

from roadpubsub.cli import main as cli_main
from roadpubsub.cli.match_sets import read_set_sources
from roadpubsub.index.io import read_deliveries, read_messages
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.roadnet.io import load_network
from roadpubsub.roadnet.settings import DEFAULTS
from roadpubsub.spark_jobs.batch_kinds import batch_match_kinds

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DMAX = 1500.0


def _tweets(path: Path, n: int) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        texts = [row["text"] for _, row in zip(range(n), csv.DictReader(fh), strict=False)]
    return [re.findall(r"[a-z]{3,}", t.lower()) for t in texts]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, shared: Callable[[str], Path],
          tweets_csv: Path) -> dict[str, Path]:
    path = shared("osm/andorra-latest.osm.pbf")
    net = load_network(path)
    out = tmp_path_factory.mktemp("spark-sets")
    rng = np.random.default_rng(5)
    points = point_drawer(net, rng)
    tweets = _tweets(tweets_csv, 400)
    vocab = [w for w, _ in Counter(w for t in tweets for w in set(t)).most_common(12)]
    rows, route_ll = mixed_rows(net, rng, points, vocab, n=90, tau=0.1, dmax=DMAX)
    with (out / "subscriptions.jsonl").open("w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    # Messages: real tweets' words (those of the vocabulary), half on a route's waypoint.
    words = [[w for w in dict.fromkeys(t) if w in vocab] for t in tweets]
    words = [w for w in words if w][:80]
    m = len(words)
    mll = lonlat(net, points(m))
    for j in range(0, m, 2):
        wp = route_ll[j % len(route_ll)]
        mll[j] = wp[j % wp.shape[0]]
    pq.write_table(pa.table({"id": np.arange(m), "lon": mll[:, 0], "lat": mll[:, 1],
                             "keywords": words}), out / "messages.parquet")
    pq.write_table(pa.table({"term": vocab, "weight": np.linspace(1.0, 3.0, len(vocab))}),
                   out / "weights.parquet")
    return {"network": path, "dir": out, "subscriptions": out / "subscriptions.jsonl",
            "messages": out / "messages.parquet", "weights": out / "weights.parquet"}


def _cli(files: dict[str, Path], out: Path, index: str) -> Deliveries:
    assert cli_main(["match", "--network", str(files["network"]), "--subscriptions",
                     str(files["subscriptions"]), "--messages", str(files["messages"]),
                     "--weights", str(files["weights"]), "--dmax", str(DMAX), "--index",
                     index, "--out", str(out), "--quiet"]) == 0
    return Deliveries(**read_deliveries(out))


def _equal(a: Deliveries, b: Deliveries) -> None:
    np.testing.assert_array_equal(a.message_id, b.message_id)
    np.testing.assert_array_equal(a.subscription_id, b.subscription_id)
    np.testing.assert_array_equal(a.distance, b.distance)
    np.testing.assert_array_equal(a.score, b.score)


def test_spark_deliveries_to_routes_areas_and_points_equal_cli_and_reference(
        spark: SparkSession, files: dict[str, Path], tmp_path: Path) -> None:
    cli = _cli(files, tmp_path / "cli.parquet", "eia")
    ref = _cli(files, tmp_path / "ref.parquet", "brute")
    _equal(cli, ref)
    args = argparse.Namespace(
        network=str(files["network"]), directed=False, subscriptions=str(files["subscriptions"]),
        weights=str(files["weights"]), corpus=None, max_snap=DEFAULTS.snap_distance_m,
        exact_keywords=False)
    network, weights, subs, located = read_set_sources(args, DMAX, kinds=True)
    assert located.threshold is not None and located.boolean is not None
    assert len(located.by_id) == 40  # 30 routes and 10 areas
    messages = read_messages(files["messages"], network, weights)
    got, events = batch_match_kinds(
        spark, SpatialIndex.build(network), subs, messages, weights, dmax_m=DMAX,
        n_partitions=3, threshold_sets=located.threshold, boolean_sets=located.boolean)
    assert len(events) == 0
    _equal(got, cli)
    # Not vacuous: deliveries to routes, to areas and to points, of both kinds.
    on_sets = set(located.by_id)
    hit = set(got.subscription_id.tolist())
    assert hit & on_sets and hit - on_sets
    assert len(got) > 20


def _spark_job(files: dict[str, Path], subs: Path, out: Path) -> int:
    return cli_main(["spark", "batch-match", str(files["network"]), "--subscriptions",
                     str(subs), "--messages", str(files["messages"]), "--weights",
                     str(files["weights"]), "--dmax", str(DMAX), "--partitions", "3",
                     "--capacity", "64", "--out", str(out)])


def test_spark_job_file_with_routes_areas_and_points_equals_cli(
        spark: SparkSession, files: dict[str, Path], tmp_path: Path) -> None:
    """``roadpubsub spark batch-match`` on the same files: the CLI's rows, written under a
    temporary name and renamed (no other entry is left beside the output)."""
    cli = _cli(files, tmp_path / "cli.parquet", "eia")
    out = tmp_path / "spark.parquet"
    assert _spark_job(files, files["subscriptions"], out) == 0
    _equal(Deliveries(**read_deliveries(out)), cli)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cli-sets.jsonl", "cli.parquet",
                                                          "spark.parquet"]


@pytest.mark.parametrize(("geometry", "words"), [
    ("{not json", ["not GeoJSON text"]),
    (json.dumps({"type": "LineString", "coordinates": [[100.0, 10.0], [100.1, 10.1]]}),
     []),
])
def test_spark_job_bad_geometry_is_one_line(
        spark: SparkSession, files: dict[str, Path], tmp_path: Path, geometry: str,
        words: list[str]) -> None:
    rows = [json.loads(line) for line in files["subscriptions"].read_text().splitlines()]
    rows[4]["geometry"] = geometry
    bad = tmp_path / "bad subs.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.parquet"
    # A separate process: what the user sees on stderr, whole.
    proc = subprocess.run(
        [sys.executable, "-m", "roadpubsub", "spark", "batch-match", str(files["network"]),
         "--subscriptions", str(bad), "--messages", str(files["messages"]), "--weights",
         str(files["weights"]), "--dmax", str(DMAX), "--out", str(out)],
        capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr
    assert "Traceback" not in err and "Py4J" not in err and "at org.apache" not in err
    lines = [line for line in err.splitlines() if "error" in line]
    assert len(lines) == 1, err
    for w in [str(bad), "row 4", "(id 1004)", "field geometry", *words]:
        assert w in lines[0], err
    assert not out.exists()
