"""The streaming job's files: its sink (one deliveries directory per micro-batch, made
visible by one rename after its part files are durable, read back by :func:`read_sink`),
bad input files moved aside to ``_rejected/``, the local-path checks of its folders, and
the crash tests' kill points (:data:`FAULT_ENV`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from roadpubsub.roadnet.files import atomic_paths
from roadpubsub.spark_jobs.session import (
    SparkJobError,
    log,
)
from roadpubsub.spark_jobs.storage import check_output
from roadpubsub.spark_jobs.storage_paths import local_path
from roadpubsub.spark_jobs.stream_changes import (
    fsync_dir,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

__all__ = [
    "FAULT_ENV",
    "REJECTED",
    "SINK_SCHEMA",
    "check_stream_paths",
    "clean_temporaries",
    "commit_batch",
    "fault_point",
    "move_aside",
    "read_sink",
    "sink_path",
    "stream_local_path",
    "write_rejected_records",
]

#: Columns of the sink's Parquet files.
SINK_SCHEMA = pa.schema([("message_id", pa.int64()), ("subscription_id", pa.int64()),
                         ("distance", pa.float64()), ("score", pa.float64()),
                         ("batch_id", pa.int64())])
#: Name of the folder bad files are moved to (Spark's file source skips ``_`` names).
REJECTED = "_rejected"
#: Test hook: ``after-changelog:B`` or ``after-sink:B`` kills this driver with SIGKILL
#: right after batch B's change log entry, or its sink file, is durable (the crash test's
#: precise moments; its random moments need no hook).
FAULT_ENV = "ROADPUBSUB_STREAM_FAULT"


def stream_local_path(uri: str, what: str = "a message file") -> Path:
    """The local path of a path or ``file:`` URL; a :class:`SparkJobError` for another URL
    (the stream job's folders are local or mounted)."""
    path = local_path(uri)
    if path is None:
        msg = (f"{what} {uri}: the stream job reads and writes local or mounted "
               f"directories only (paths or file: URLs); its sink commits by rename")
        raise SparkJobError(msg)
    return path


def check_stream_paths(spark: SparkSession, args: argparse.Namespace) -> None:
    """Local paths only; --out and --checkpoint are neither inputs nor each other, and are
    locked for this process (two drivers on one checkpoint would break exactly-once)."""
    for what in ("index_file", "messages", "changes", "out", "checkpoint"):
        stream_local_path(getattr(args, what), f"--{what.replace('_', '-')}")
    inputs = (args.index_file, args.messages, args.changes)
    check_output(spark, args.out, folder=True, what="--out", inputs=inputs)
    check_output(spark, args.checkpoint, folder=True, what="--checkpoint",
                 inputs=(*inputs, args.out))


def fault_point(point: str, batch_id: int) -> None:
    """Kill this driver (SIGKILL) when :data:`FAULT_ENV` names ``point`` of ``batch_id``."""
    if os.environ.get(FAULT_ENV) == f"{point}:{batch_id}":
        log(f"{FAULT_ENV}: SIGKILL {point} of batch {batch_id}")
        if os.getpgrp() == os.getpid():  # a session of its own: the JVM goes too
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


def move_aside(path: Path, reason: str, what: str) -> None:
    """Move a bad input file to ``_rejected/`` beside it, with its reason; log it."""
    folder = path.parent / REJECTED
    folder.mkdir(exist_ok=True)
    note = folder / f"{path.name}.reason.txt"
    note.write_text(reason + "\n", encoding="utf-8")
    if path.exists():
        os.replace(path, folder / path.name)
    log(f"rejected {what} file {path.name} (moved to {folder}): {reason}")


def commit_batch(tmp: Path, target: Path) -> None:
    """Make a batch's sink directory visible: its part files are durable (the tasks
    fsynced them), then one rename, then an fsync of the sink folder."""
    fsync_dir(tmp)
    os.rename(tmp, target)
    fsync_dir(target.parent)


def clean_temporaries(out: Path) -> None:
    """Remove temporary batch directories left by a killed driver."""
    for stale in out.glob(".batch_id=*.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)


def write_rejected_records(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write a batch's rejected records as JSON Lines, atomically."""
    with atomic_paths(path) as (tmp,):
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def sink_path(out: Path, batch_id: int) -> Path:
    """The sink directory of a micro-batch (Hive-style: readers get a ``batch_id``)."""
    return out / f"batch_id={batch_id}"


def read_sink(out: str | os.PathLike[str]) -> pa.Table:
    """Every committed delivery of a sink folder (sorted by batch, message, subscription).

    Spark reads the same folder with ``spark.read.parquet(OUT)`` (``batch_id`` from the
    directory names).
    """
    parts = []
    for folder in Path(out).glob("batch_id=*"):
        b = int(folder.name.split("=", 1)[1])
        for f in sorted(folder.glob("part-*.parquet")):
            t = pq.read_table(f)
            parts.append(t.append_column("batch_id", pa.array(np.full(t.num_rows, b),
                                                               pa.int64())))
    if not parts:
        return SINK_SCHEMA.empty_table()
    table = pa.concat_tables(parts)
    return table.sort_by([("batch_id", "ascending"), ("message_id", "ascending"),
                          ("subscription_id", "ascending")])
