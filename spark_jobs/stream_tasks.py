"""Executor side of the stream job: the index kept in each Python worker, and the tasks.

:func:`worker_index` keeps, per Python worker, the base index shipped with ``addFile`` and
brings it forward with the change records of each micro-batch's broadcast (those it has
not applied yet), so a change costs its records, never a new index. The tasks read and
match message files (:func:`match_task`) or Kafka records (:func:`kafka_task`, each
record one message object with the live service's fields), write the deliveries as part
files of the batch's temporary sink directory (:func:`write_part`) and return one status
row per input.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from roadpubsub.index.base import SubscriptionIndex
from roadpubsub.index.events import BodyParser, RequestError
from roadpubsub.index.io import read_messages
from roadpubsub.index.model import Messages
from roadpubsub.index.store import load_index
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.indexed import IndexMatcher
from roadpubsub.roadnet.errors import RoadPubSubError, format_error
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.settings import DEFAULTS
from roadpubsub.spark_jobs.session import SparkJobError, jvm_class_problem
from roadpubsub.spark_jobs.stream_changes import apply_record

if TYPE_CHECKING:  # pragma: no cover
    from pyspark import Broadcast
    from pyspark.sql import SparkSession

__all__ = [
    "KAFKA_CLASS",
    "PART_SCHEMA",
    "TASK_ARROW",
    "TASK_SCHEMA",
    "kafka_package",
    "kafka_problem",
    "kafka_task",
    "match_task",
    "status_row",
    "warm_task",
    "worker_index",
    "write_part",
]

#: A class of the spark-sql-kafka package (its presence on the classpath is the test).
KAFKA_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
#: Rows the tasks return, one per input (a message file, or a task's Kafka records): what
#: happened, why when it failed, and how many messages and deliveries it had. The
#: deliveries themselves never travel through Spark: each task writes them as a part file
#: of the batch's temporary sink directory.
TASK_SCHEMA = ("file string, status string, reason string, messages long, "
               "deliveries long")
TASK_ARROW = pa.schema([("file", pa.string()), ("status", pa.string()),
                        ("reason", pa.string()), ("messages", pa.int64()),
                        ("deliveries", pa.int64())])
#: Columns of a sink part file (the batch id is its directory's name, ``batch_id=N``).
PART_SCHEMA = pa.schema([("message_id", pa.int64()), ("subscription_id", pa.int64()),
                         ("distance", pa.float64()), ("score", pa.float64())])


# ---------------------------------------------------------------------------- Kafka
def kafka_package(spark_version: str) -> str:
    """Maven coordinate of the Kafka source matching a Spark version."""
    major = int(spark_version.split(".")[0])
    scala = "2.13" if major >= 4 else "2.12"
    return f"org.apache.spark:spark-sql-kafka-0-10_{scala}:{spark_version}"


def kafka_problem(spark: SparkSession) -> str | None:
    """Why the Kafka source cannot run on ``spark`` (one line), or None if it can."""
    return jvm_class_problem(spark, KAFKA_CLASS, what="spark-sql-kafka",
                             package=kafka_package(spark.version))


# ---------------------------------------------------------------------------- executors
_WORKER: dict[str, Any] = {}


def worker_index(value: dict[str, Any]) -> tuple[SubscriptionIndex, IndexMatcher]:
    """The index at the broadcast's version, kept in the Python worker between batches:
    loaded once per base file, then brought forward with the records it has not seen."""
    if _WORKER.get("token") != value["base_token"] or _WORKER["version"] > value["version"]:
        _WORKER.clear()
        path = value["base_path"]
        if value["base_shipped"]:
            from pyspark import SparkFiles

            path = SparkFiles.get(value["base_name"])
        index = load_index(path)
        _WORKER.update(token=value["base_token"], version=value["base_version"], index=index,
                       matcher=IndexMatcher(index, threads=1))
    index = _WORKER["index"]
    for seq, rec in value["records"]:
        if seq > _WORKER["version"]:
            apply_record(index, rec)
            _WORKER["version"] = seq
    if _WORKER["version"] != value["version"]:
        msg = (f"worker index at version {_WORKER['version']}, the batch needs "
               f"{value['version']} (records missing from the broadcast)")
        raise SparkJobError(msg)
    return index, _WORKER["matcher"]


def status_row(file: str, status: str, reason: str | None, n: int = 0,
               deliveries: int = 0) -> pa.RecordBatch:
    """The status row of one input."""
    return pa.RecordBatch.from_pydict({
        "file": [file], "status": [status], "reason": [reason], "messages": [n],
        "deliveries": [deliveries]}, schema=TASK_ARROW)


def write_part(found: Deliveries, folder: str, name: str) -> None:
    """Write deliveries as ``folder/name.parquet`` (temporary name, fsync, rename): a
    retried task attempt rewrites the same name with the same rows."""
    final = os.path.join(folder, f"{name}.parquet")
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    table = pa.table({"message_id": found.message_id, "subscription_id": found.subscription_id,
                      "distance": found.distance, "score": found.score}, schema=PART_SCHEMA)
    pq.write_table(table, tmp)
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)


def _match_file(index: SubscriptionIndex, matcher: IndexMatcher, path: str, folder: str,
                k: int) -> pa.RecordBatch:
    """Match one message file into part ``k`` of ``folder``; its status row."""
    if not Path(path).exists():
        return status_row(path, "missing", "the file is gone")
    try:
        messages = read_messages(path, index.network, index.weights)
        found = matcher.match(messages)
    except (RoadPubSubError, ValueError, OSError, pa.ArrowException) as exc:
        return status_row(path, "bad", format_error(exc))
    if len(found):
        write_part(found, folder, f"part-{k:05d}")
    return status_row(path, "ok", None, len(messages), len(found))


def warm_task(bc: Broadcast[dict[str, Any]]
              ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow function: load the index and compile the matcher in this worker."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        index, matcher = worker_index(bc.value)
        k = min(len(index.weights), 1)  # one keyword (term 0) when there is a vocabulary
        one = Messages(np.zeros(1, np.int64), EdgePoints.of([0], [0.0]),
                       np.asarray([0, k], np.int64), np.zeros(k, np.int32))
        matcher.match(one)  # compiles (or loads the compiled kernels from numba's cache)
        for batch in batches:
            yield pa.RecordBatch.from_pydict({"id": batch.column("id")})

    return run


def match_task(bc: Broadcast[dict[str, Any]]
               ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow function over file numbers: each file matched into its part file."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        value = bc.value
        index, matcher = worker_index(value)
        for batch in batches:
            for k in batch.column("id").to_pylist():
                yield _match_file(index, matcher, value["paths"][k], value["folder"], k)

    return run


def _parser(index: SubscriptionIndex) -> BodyParser:
    parser = _WORKER.get("parser")
    if parser is None:
        parser = _WORKER["parser"] = BodyParser(index.network, max_snap_m=DEFAULTS.snap_distance_m)
    return parser


def kafka_task(bc: Broadcast[dict[str, Any]]
               ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow function over Kafka records (column ``value``: one JSON message object).

    A record the service would refuse gets a ``bad`` status row (``file`` holds the
    record, ``reason`` why); the others are matched together.
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        part = 0  # parts named by partition and order: the same on a retried attempt
        index, matcher = worker_index(bc.value)
        parser = _parser(index)
        for batch in batches:
            good: list[Any] = []
            for value in batch.column("value").to_pylist():
                try:
                    body = json.loads(value) if value is not None else None
                    if not isinstance(body, dict):
                        msg = "a record must hold one JSON message object"
                        raise RequestError(msg)
                    parser.messages(body)
                except (ValueError, RequestError) as exc:
                    yield status_row(str(value)[:2000], "bad", format_error(exc))
                    continue
                good.append(body)
            if not good:
                continue
            try:
                mb = parser.messages(good)
                messages = Messages.from_rows(ids=mb.ids, points=mb.points,
                                              keywords=mb.keywords, weights=index.weights)
                found = matcher.match(messages)
            except (RoadPubSubError, ValueError) as exc:  # e.g. an id twice in the batch
                yield status_row(json.dumps(good)[:2000], "bad", format_error(exc))
                continue
            name = f"part-k{partition:05d}-{part:05d}"
            part += 1
            if len(found):
                write_part(found, bc.value["folder"], name)
            yield status_row(name, "ok", None, len(messages), len(found))

    return run
