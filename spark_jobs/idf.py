"""Spark job: keyword weights (smoothed idf) over a large text corpus.

The weights are those of :meth:`roadpubsub.index.terms.TermWeights.from_idf` over the corpus
tokenised by :func:`roadpubsub.index.text.tokenize`: w(t) = ln((1 + N) / (1 + df(t))) + 1
(:func:`roadpubsub.index.terms.smoothed_idf`), with N the number of documents (empty ones included)
and df(t) the number of documents holding t. Both functions run inside the Spark tasks:

1. each task tokenises its documents and counts, per term, the documents holding it (and
   the documents it saw, as a row with a null term);
2. the counts are summed per term (one shuffle);
3. tasks turn the document frequencies into weights with ``smoothed_idf(N, df)``.

The driver collects the (term, weight) rows, sorts them by term as ``from_idf`` does, and
writes one weights file with :func:`roadpubsub.index.io.write_weights` (``term`` string, ``weight``
float64, the weight of unseen terms in the schema metadata), atomically.

Inputs: plain text (one document per line; ``\\n``, ``\\r\\n`` or ``\\r`` ends a line, the rule of
:func:`roadpubsub.index.text.split_lines` that the local readers share), CSV with
a header and a text column (quoted fields may span lines), or Parquet with a text column.
A path may be a file, a directory or a glob, as Spark reads them, and a local path or a
storage URL (``file://``, ``hdfs://``, ``s3a://``; :mod:`roadpubsub.spark_jobs.storage`); so may
the output.

Examples
--------
::

    spark-submit spark_jobs/idf.py ../shared/data/text/airline_tweets.csv --out weights.parquet
    roadpubsub spark idf corpus/*.txt --format text --out weights.parquet
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from roadpubsub.index.terms import TermWeights, smoothed_idf
from roadpubsub.index.text import tokenize
from roadpubsub.roadnet.errors import InputError
from roadpubsub.spark_jobs import storage, storage_paths
from roadpubsub.spark_jobs.session import (
    add_spark_arguments,
    log,
    run_job,
    session_from_args,
    stage,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["FORMATS", "add_arguments", "build_parser", "compute_idf", "main", "read_corpus",
           "run", "write_idf"]

#: Input formats (``auto`` picks by suffix: .csv, .parquet/.pq, anything else text).
FORMATS = ("auto", "text", "csv", "parquet")


def _detect_format(spark: SparkSession, path: str, fmt: str) -> str:
    if fmt != "auto":
        return fmt
    name = path.lower().rstrip("/")
    if name.endswith(".csv"):
        return "csv"
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if not any(ch in path for ch in "*?[") and storage_paths.is_dir(spark, path) and any(
            n.endswith(".parquet") for n in storage_paths.list_names(spark, path)):
        return "parquet"
    return "text"


def read_corpus(spark: SparkSession, path: str, *, fmt: str = "auto",
                column: str = "text") -> DataFrame:
    """The corpus as a one-column DataFrame (``text``), one row per document.

    Raises
    ------
    FileNotFoundError
        A local path that does not exist.
    ValueError
        An unknown format, or a CSV/Parquet input without ``column``.
    """
    if fmt not in FORMATS:
        msg = f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}"
        raise InputError(msg)
    _check_local_corpus(path)
    kind = _detect_format(spark, path, fmt)
    uri = storage_paths.spark_uri(path)
    if kind == "text":
        return spark.read.text(uri).withColumnRenamed("value", "text")
    if kind == "csv":
        df = (spark.read.option("header", True).option("multiLine", True)
              .option("escape", '"').option("encoding", "UTF-8").csv(uri))
    else:
        df = spark.read.parquet(uri)
    if column not in df.columns:
        msg = f"{path}: no {column!r} column (columns: {', '.join(df.columns)})"
        raise InputError(msg)
    return df.select(df[column].cast("string").alias("text"))


def _count_task() -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow function: documents -> (term, documents holding it) and (null, documents)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        df: dict[str, int] = {}
        n = 0
        for batch in batches:
            for doc in batch.column(0).to_pylist():
                n += 1
                for term in set(tokenize(doc)):
                    df[term] = df.get(term, 0) + 1
        terms: list[str | None] = [*df, None]
        counts = [*df.values(), n]
        yield pa.RecordBatch.from_arrays([pa.array(terms, pa.string()),
                                          pa.array(counts, pa.int64())], names=["term", "docs"])

    return run


def _weight_task(n_documents: int
                 ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow function: (term, df) -> (term, smoothed idf weight)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            df = np.asarray(batch.column(1).to_numpy(zero_copy_only=False), dtype=np.int64)
            w = smoothed_idf(n_documents, df)
            yield pa.RecordBatch.from_arrays([batch.column(0), pa.array(w, pa.float64())],
                                             names=["term", "weight"])

    return run


def compute_idf(spark: SparkSession, corpus: DataFrame) -> TermWeights:
    """Smoothed idf weights of a one-column corpus DataFrame (see the module docstring)."""
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.storagelevel import StorageLevel

    with stage(spark, "idf: tokenise and count document frequencies"):
        # Tens of thousands of terms: as many partitions as cores, not the 200 of
        # spark.sql.shuffle.partitions (each a task of the weights stage).
        counts = (corpus.mapInArrow(_count_task(), "term string, docs long")
                  .groupBy("term").agg(F.sum("docs").alias("docs"))
                  .coalesce(max(1, spark.sparkContext.defaultParallelism))
                  .persist(StorageLevel.MEMORY_AND_DISK))
        total = counts.filter(F.col("term").isNull()).select("docs").toArrow()
    n_documents = int(sum(v or 0 for v in total.column(0).to_pylist()))
    with stage(spark, f"idf: weights of the terms of {n_documents} documents"):
        table = (counts.filter(F.col("term").isNotNull())
                 .mapInArrow(_weight_task(n_documents), "term string, weight double")
                 .toArrow())
    counts.unpersist()
    terms = table.column("term").to_pylist()
    weights = np.asarray(table.column("weight").to_numpy(), dtype=np.float64)
    order = sorted(range(len(terms)), key=terms.__getitem__)
    return TermWeights({terms[i]: float(weights[i]) for i in order},
                       default_weight=float(smoothed_idf(n_documents, [0])[0]))


def write_idf(spark: SparkSession, path: str, out: str | Path, *, fmt: str = "auto",
              column: str = "text") -> tuple[str | Path, TermWeights]:
    """Compute the weights of a corpus and write them (atomically) to ``out``.

    ``path`` and ``out`` may be local paths or storage URLs (:mod:`roadpubsub.spark_jobs.storage`);
    the weights file is small and written from the driver. Returns ``out`` (a Path for a
    local one) and the weights.
    """
    from roadpubsub.index.io import write_weights

    weights = compute_idf(spark, read_corpus(spark, path, fmt=fmt, column=column))
    written = storage.write_via_local(out, lambda local: write_weights(weights, local),
                                      spark=spark)
    return (written if storage_paths.local_path(out) is not None else str(out)), weights


# ---------------------------------------------------------------------------- command line
_EXAMPLE = """\
example:
  spark-submit spark_jobs/idf.py ../shared/data/text/airline_tweets.csv --out weights.parquet
  roadpubsub spark idf 'corpus/*.txt' --format text --out weights.parquet --master 'local[2]'
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the job (shared by the script and ``roadpubsub spark``)."""
    parser.add_argument("corpus", help="text, CSV or Parquet file, directory or glob")
    parser.add_argument("--out", required=True,
                        help="weights file to write (.parquet, or .jsonl/.json)")
    parser.add_argument("--format", dest="fmt", choices=FORMATS, default="auto",
                        help="input format (default: by suffix; text for anything unknown)")
    parser.add_argument("--column", default="text",
                        help="text column of CSV/Parquet input (default: %(default)s)")
    add_spark_arguments(parser)


def build_parser() -> argparse.ArgumentParser:
    """The job's argument parser."""
    parser = argparse.ArgumentParser(
        prog="idf.py",
        description="Smoothed idf keyword weights of a text corpus, computed on Spark.",
        epilog=_EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return parser


def _check_local_corpus(path: str) -> None:
    """FileNotFoundError for a local corpus path or ``file:`` URL (no glob) that does not
    exist; other URLs are left to Spark's reader."""
    local = storage_paths.local_path(path)
    if local is not None and not any(ch in path for ch in "*?[") and not local.exists():
        msg = f"corpus not found: {path}"
        raise FileNotFoundError(msg)


def run(args: argparse.Namespace) -> int:
    """Run the job for parsed arguments; returns the exit code."""
    t0 = time.perf_counter()
    _check_local_corpus(args.corpus)  # before Spark starts, which takes seconds
    if storage_paths.local_path(args.out) is not None:
        storage.check_output(None, args.out, what="--out", inputs=(args.corpus,))
    spark = session_from_args(args, app_name="roadpubsub idf")
    if storage_paths.local_path(args.out) is None:  # a URL: checked through Spark's Hadoop
        storage.check_output(spark, args.out, what="--out", inputs=(args.corpus,))
    out, weights = write_idf(spark, args.corpus, args.out, fmt=args.fmt, column=args.column)
    log(f"wrote {len(weights)} term weights to {out} in {time.perf_counter() - t0:.1f} s")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Script entry point (``spark-submit spark_jobs/idf.py ...``)."""
    return run_job(run, build_parser().parse_args(argv), name="idf")


if __name__ == "__main__":  # pragma: no cover
    from roadpubsub.spark_jobs.idf import main as _main

    sys.exit(_main())
