"""The storage layer: local paths, file:// URLs and the Hadoop path that other URLs take.

The Hadoop code (used for hdfs://, s3a://...) is exercised here on file:// URLs through
the module's remote functions, since this machine has no HDFS or object store.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from roadpubsub.roadnet.files import OutputIsInputError, release_output_locks
from roadpubsub.spark_jobs import storage, storage_paths


def test_paths_and_urls_are_told_apart() -> None:
    assert storage_paths.is_url("hdfs://nn:8020/x") and storage_paths.is_url("file:///x")
    assert not storage_paths.is_url("out dir/x.parquet") and not storage_paths.is_url("C:/x")
    assert storage_paths.local_path("file:///a b/x") == Path("/a b/x")
    assert storage_paths.local_path("file:/a%20b/x") == Path("/a b/x")
    assert storage_paths.local_path("file://localhost/a/x") == Path("/a/x")
    assert storage_paths.local_path("file://otherhost/a/x") is None
    assert storage_paths.local_path("s3a://bucket/x") is None
    assert storage_paths.spark_uri("s3a://bucket/x") == "s3a://bucket/x"
    assert storage_paths.spark_uri("rel dir/x") == "file:" + str(Path("rel dir/x").absolute())


def test_file_url_output_is_checked_like_a_local_path(tmp_path: Path) -> None:
    (tmp_path / "a file").write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file"):
        storage.check_output(None, f"file://{tmp_path}/a file/out.parquet", what="--out")
    src = tmp_path / "in put.parquet"
    src.write_text("x")
    with pytest.raises(OutputIsInputError):
        storage.check_output(None, f"file://{src}", inputs=[str(src)])
    release_output_locks()


def test_local_atomic_dir_keeps_the_previous_output_on_failure(tmp_path: Path) -> None:
    out = f"file://{tmp_path}/res ult"
    with storage.atomic_output_dir(out) as tmp:
        os.makedirs(tmp)
        Path(tmp, "a").write_text("first")
    with pytest.raises(RuntimeError), storage.atomic_output_dir(out) as tmp:
        os.makedirs(tmp)
        raise RuntimeError("boom")
    assert os.listdir(tmp_path / "res ult") == ["a"]
    assert os.listdir(tmp_path) == ["res ult"]


@pytest.mark.spark
def test_hadoop_output_checks(spark: SparkSession, tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    url = f"file://{tmp_path}/f/out"
    with pytest.raises(NotADirectoryError, match="is a file"):
        storage._remote_check(spark, url, folder=True, what="--out", inputs=())
    same = f"file://{tmp_path}/in"
    with pytest.raises(OutputIsInputError):
        storage._remote_check(spark, same, folder=True, what="--out",
                              inputs=[f"file:{tmp_path}//in"])
    with pytest.raises(storage_paths.StorageError, match="no filesystem"):
        storage.check_output(spark, "nosuchscheme://host/x", what="--out")
    storage._remote_check(spark, f"file://{tmp_path}/new dir/x", folder=True, what="--out",
                          inputs=())
    assert sorted(os.listdir(tmp_path)) == ["f"]  # the probe left nothing


@pytest.mark.spark
def test_hadoop_atomic_dir_and_whole_files(spark: SparkSession, tmp_path: Path) -> None:
    url = f"file://{tmp_path}/sp ace/out.parquet"
    for n in (3, 5):
        with storage._remote_atomic_dir(spark, url) as tmp:
            spark.range(n).write.parquet(tmp)
        assert spark.read.parquet(url).count() == n
    with pytest.raises(RuntimeError), storage._remote_atomic_dir(spark, url) as tmp:
        spark.range(7).write.parquet(tmp)
        raise RuntimeError("boom")
    assert spark.read.parquet(url).count() == 5
    assert os.listdir(tmp_path / "sp ace") == ["out.parquet"]
    # Whole files through Hadoop: upload atomically, copy back under their own names.
    text_url = f"file://{tmp_path}/sp ace/meta.json"
    storage._remote_write_text(spark, text_url, '{"a": 1}\n')
    with storage._remote_copies(spark, [text_url, f"file://{tmp_path}/missing.co"]) as (a, b):
        assert a.name == "meta.json" and a.read_text() == '{"a": 1}\n' and not b.exists()
        copy = a
    assert not copy.exists()
    with pytest.raises(ValueError, match=r"sp ace/meta.json: bad"), \
            storage._remote_copies(spark, [text_url]) as (a,):
        raise ValueError(f"{a}: bad")
    with pytest.raises(FileNotFoundError), storage._remote_copies(
            spark, [f"file://{tmp_path}/nope.json"]):
        pass
