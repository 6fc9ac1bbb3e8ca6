"""One-line errors of the Spark jobs (issue 29, item 8): a truncated or damaged Parquet
input names the file instead of hundreds of lines of Py4JJavaError, and a ``file://`` URL
with percent escapes means the same folder to the driver's checks and to Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from roadpubsub.cli import main as cli_main
from roadpubsub.index.io import write_messages, write_subscriptions, write_weights
from roadpubsub.index.workload import generate_workload
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.spark_jobs.session import run_job
from roadpubsub.spark_jobs.storage_paths import local_path, spark_uri


def _url(path: Path) -> str:
    """A ``file://`` URL of ``path`` with its spaces percent-escaped."""
    return "file://" + quote(str(path))


def _error_lines(err: str) -> list[str]:
    """stderr without the jobs' progress lines and Spark's own log lines."""
    return [x for x in err.splitlines()
            if x.strip() and not x.startswith(("[roadpubsub spark]", "WARNING", "Setting"))
            and " WARN " not in x and " INFO " not in x]


def test_file_urls_decode_one_way(tmp_path: Path) -> None:
    folder = tmp_path / "space dir"
    url = _url(folder / "x.parquet")
    assert "%20" in url
    assert local_path(url) == folder / "x.parquet"
    assert spark_uri(url) == f"file:{folder}/x.parquet"  # what Spark reads: decoded too
    assert spark_uri("file://localhost/a%20b/c") == "file:/a b/c"
    assert spark_uri("hdfs://nn/a%20b") == "hdfs://nn/a%20b"  # other schemes: as given


@pytest.mark.spark
def test_spark_reads_a_percent_escaped_file_url(spark: SparkSession, tmp_path: Path) -> None:
    folder = tmp_path / "space dir"
    folder.mkdir()
    pq.write_table(pa.table({"x": np.arange(37)}), folder / "x.parquet")
    assert spark.read.parquet(spark_uri(_url(folder / "x.parquet"))).count() == 37


@pytest.mark.spark
def test_batch_match_on_a_truncated_parquet_says_one_line(
        spark: SparkSession, andorra: RoadNetwork, andorra_path: Path, tweets_csv: Path,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "in put"
    folder.mkdir()
    wl = generate_workload(andorra, n_subscriptions=300, n_messages=20, seed=5,
                           tweets=tweets_csv)
    subs, msgs, weights = folder / "s.parquet", folder / "m.parquet", folder / "w.parquet"
    write_subscriptions(wl.subscriptions, subs, network=andorra, weights=wl.weights)
    write_messages(wl.messages, msgs, network=andorra, weights=wl.weights)
    write_weights(wl.weights, weights)
    data = msgs.read_bytes()
    msgs.write_bytes(data[:len(data) // 2])  # truncated: no footer
    code = cli_main(["spark", "batch-match", str(andorra_path), "--subscriptions", _url(subs),
                     "--messages", _url(msgs), "--weights", str(weights), "--dmax", "2000",
                     "--out", str(tmp_path / "out")])
    lines = _error_lines(capsys.readouterr().err)
    assert code == 2, lines
    assert len(lines) == 1, lines
    assert str(msgs) in lines[0] and "Parquet" in lines[0], lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.spark
def test_a_failure_inside_spark_is_one_line(spark: SparkSession, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A file whose footer reads but whose data does not: Spark's tasks fail, and the job
    still says one line naming the file."""
    path = tmp_path / "damaged.parquet"
    rng = np.random.default_rng(1)
    pq.write_table(pa.table({"x": rng.random(200_000)}), path, compression="snappy")
    data = bytearray(path.read_bytes())
    data[8:60_000] = bytes(60_000 - 8)  # the first pages; the footer stays intact
    path.write_bytes(bytes(data))
    pq.read_metadata(path)  # the footer reads: only Spark's tasks see the damage

    def job(_: Any) -> int:
        spark.read.parquet(spark_uri(path)).selectExpr("sum(x)").collect()
        return 0

    code = run_job(job, None, name="damaged-job")
    lines = _error_lines(capsys.readouterr().err)
    assert code == 2, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("damaged-job: error: Spark failed:"), lines[0]
    assert "damaged.parquet" in lines[0], lines[0]
