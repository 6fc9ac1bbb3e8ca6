"""Every Spark job with file:// URLs for every input and output, and with local paths
holding spaces: the results equal the local computations (issue 19)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from pyspark.sql import SparkSession

from roadpubsub.cli import main as cli_main
from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.io import (
    read_deliveries,
    read_messages,
    read_subscriptions,
    read_weights,
    write_messages,
    write_subscriptions,
    write_weights,
)
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.index.text import read_tweet_tokens
from roadpubsub.index.workload import generate_workload
from roadpubsub.pruning.indexed import IndexMatcher
from roadpubsub.roadnet.cell_bounds import CellBounds
from roadpubsub.roadnet.cells import Cells
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.spark_jobs.bound_table import load_bounds_table

DMAX_M = 2000.0


def _url(path: Path) -> str:
    return f"file://{path}"


@pytest.mark.spark
@pytest.mark.parametrize("style", ["file URLs", "paths with spaces"])
def test_every_job_on_urls_and_paths_with_spaces(
        spark: SparkSession, andorra: RoadNetwork, andorra_path: Path, andorra_cells: Cells,
        andorra_capacity: int, andorra_bounds: CellBounds, tweets_csv: Path, tmp_path: Path,
        style: str) -> None:
    folder = tmp_path / "shared storage" / "in put"
    folder.mkdir(parents=True)
    net = folder / "andorra latest.osm.pbf"
    shutil.copy(andorra_path, net)
    wl = generate_workload(andorra, n_subscriptions=4000, n_messages=120, seed=11,
                           tweets=tweets_csv)
    subs, msgs, weights = (folder / "sub s.parquet", folder / "msg s.parquet",
                           folder / "weight s.parquet")
    write_subscriptions(wl.subscriptions, subs, network=andorra, weights=wl.weights)
    write_messages(wl.messages, msgs, network=andorra, weights=wl.weights)
    write_weights(wl.weights, weights)
    corpus = folder / "tweets copy.csv"
    shutil.copy(tweets_csv, corpus)
    out = tmp_path / "shared storage" / "out put"
    name = _url if style == "file URLs" else str

    # precompute-bounds: the table equals the local one.
    assert cli_main(["spark", "precompute-bounds", name(net), "--capacity",
                     str(andorra_capacity), "--out", name(out / "andorra bounds")]) == 0
    table = load_bounds_table(out / "andorra bounds", andorra, andorra_cells)
    np.testing.assert_array_equal(table.D, andorra_bounds.D)
    # idf: the weights equal the local ones.
    assert cli_main(["spark", "idf", name(corpus), "--out", name(out / "idf w.parquet")]) == 0
    want_w = TermWeights.from_idf(read_tweet_tokens(tweets_csv))
    got_w = read_weights(out / "idf w.parquet")
    assert got_w.terms == want_w.terms
    np.testing.assert_array_equal(got_w.weights, want_w.weights)
    # batch-match: the deliveries equal the local matcher's on the same files.
    assert cli_main(["spark", "batch-match", name(net), "--subscriptions", name(subs),
                     "--messages", name(msgs), "--weights", name(weights),
                     "--bounds", name(out / "andorra bounds"), "--capacity",
                     str(andorra_capacity), "--dmax", str(DMAX_M),
                     "--out", name(out / "deliveries.parquet")]) == 0
    w = read_weights(weights)
    local_subs = read_subscriptions(subs, andorra, w)
    local_msgs = read_messages(msgs, andorra, w)
    spatial = SpatialIndex.build(andorra, cells=andorra_cells, bounds=andorra_bounds)
    want = IndexMatcher(EnhancedIndex(spatial, local_subs, w, dmax_m=DMAX_M)).match(
        local_msgs)
    assert len(want) > 50
    got = read_deliveries(out / "deliveries.parquet")
    for key, value in want.to_columns().items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)
    # Nothing but the outputs was left beside them (temporaries were renamed or removed).
    assert sorted(p.name for p in out.iterdir()) == [
        "andorra bounds", "deliveries.parquet", "idf w.parquet"]


@pytest.mark.spark
def test_url_outputs_are_checked_before_the_work(
        spark: SparkSession, andorra_path: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a file").write_text("x")
    code = cli_main(["spark", "precompute-bounds", _url(andorra_path),
                     "--out", _url(tmp_path / "a file" / "b")])
    assert code == 2 and "is a file" in capsys.readouterr().err
    code = cli_main(["spark", "batch-match", _url(andorra_path), "--subscriptions", "s.parquet",
                     "--messages", "m.parquet", "--weights", "w.parquet",
                     "--out", _url(andorra_path)])
    err = capsys.readouterr().err
    assert code == 2 and "would destroy the input" in err
    assert andorra_path.stat().st_size > 0
