"""Spark Structured Streaming job: match messages as they land, exactly once.

The distributed counterpart of ``roadpubsub serve``: message files landing in a directory
are matched micro-batch by micro-batch with the EIA matcher
(:class:`~roadpubsub.pruning.indexed.IndexMatcher` over the index file's
:class:`~roadpubsub.index.eia.EnhancedIndex`), while subscription changes landing in a second
directory update the subscription set between micro-batches.

Ordering rule
-------------
Every message is matched against the subscription set as of its micro-batch: at the start
of micro-batch *b* the driver takes the change files present that no earlier batch took,
in file-name order, and applies them (each file whole, or refused whole); then the
messages of *b* are matched. Changes wait for the next micro-batch with messages.

How executors learn the changes
-------------------------------
The index file is shipped to the executors once (``SparkContext.addFile``); each Python
worker loads it once and keeps it. Each micro-batch broadcasts only the change *records*
since that base, numbered by a version; a worker applies the records it has not applied
yet, with the index's own ``subscribe``/``unsubscribe``/``move``, and matches. When the
records since the base exceed ``--rebase-rows`` rows the driver saves its index as a new
base file and ships that instead, so the broadcast stays small.

Exactly once
------------
* Which message files make micro-batch *b* is fixed by Spark's checkpoint (the file
  source's offset log), so a batch re-run after a crash reads the same files.
* Which change files *b* consumed, and the records they became, are in this job's change
  log in the checkpoint (:class:`~roadpubsub.spark_jobs.stream_changes.ChangeLog`), written before
  they are applied; a restart rebuilds the subscription set from the index file and the
  log, so a re-run batch sees the same subscriptions.
* The deliveries of *b* are written by the tasks as part files (each fsynced, named by its
  input, so a retried task rewrites the same part) into a temporary directory that the
  driver renames to ``OUT/batch_id=<b>`` once every task is done; a re-run of a batch
  whose directory exists writes nothing.

So after a SIGKILL at any moment and a restart on the same checkpoint, the sink holds each
delivery exactly once. Files that cannot be read or validated are moved to
``_rejected/`` in their directory with ``NAME.reason.txt`` beside them; the query goes on.

Examples
--------
::

    roadpubsub spark stream --index-file work/rome/eia.npz --messages in/messages \\
        --changes in/changes --out out/deliveries --checkpoint out/checkpoint --once
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roadpubsub.index.events import BodyParser
from roadpubsub.index.store import load_index
from roadpubsub.roadnet.errors import format_error
from roadpubsub.roadnet.settings import DEFAULTS
from roadpubsub.spark_jobs.session import (
    SparkJobError,
    add_spark_arguments,
    broadcast_payload,
    log,
    run_job,
    session_from_args,
)
from roadpubsub.spark_jobs.storage_paths import spark_uri
from roadpubsub.spark_jobs.stream_changes import (
    ChangeFileError,
    ChangeLog,
    apply_record,
    change_records,
    check_records,
    visible_files,
)
from roadpubsub.spark_jobs.stream_files import (
    REJECTED,
    check_stream_paths,
    clean_temporaries,
    commit_batch,
    fault_point,
    move_aside,
    sink_path,
    stream_local_path,
    write_rejected_records,
)
from roadpubsub.spark_jobs.stream_tasks import (
    TASK_SCHEMA,
    kafka_problem,
    kafka_task,
    match_task,
    warm_task,
)

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

__all__ = [
    "StreamDriver",
    "add_arguments",
    "build_parser",
    "main",
    "run",
    "run_stream",
    "start_stream",
]

_BINARY_FILE_SCHEMA = "path string, modificationTime timestamp, length long, content binary"


# ---------------------------------------------------------------------------- driver
class StreamDriver:
    """The driver side of the job: the subscription set, the change log, the sink.

    Parameters
    ----------
    spark
        The session.
    index_file
        The index the subscription set starts from (``roadpubsub index build``).
    messages, changes, out, checkpoint
        The two input directories, the sink directory and the checkpoint directory.
    rebase_rows
        Rows of change records since the base index after which a new base is written.
    """

    def __init__(self, spark: SparkSession, *, index_file: Path, messages: Path,
                 changes: Path, out: Path, checkpoint: Path,
                 rebase_rows: int = DEFAULTS.stream_rebase_rows) -> None:
        self.spark = spark
        self.messages = messages
        self.changes = changes
        self.out = out
        self.checkpoint = checkpoint
        self.rebase_rows = int(rebase_rows)
        self.base_dir = checkpoint / "roadpubsub" / "base"
        self.log_ = ChangeLog(checkpoint / "roadpubsub" / "changes")
        t0 = time.perf_counter()
        self.index = load_index(index_file)
        self.parser = BodyParser(self.index.network, max_snap_m=DEFAULTS.snap_distance_m)
        self.records: list[tuple[int, dict[str, Any]]] = []  # (version, record) since base
        self.version = 0
        self.consumed: set[str] = set()
        self.last_logged = -1
        for entry in self.log_.entries():  # restart: the subscription set of the log
            self._apply(entry["records"])
            self.consumed.update(entry["files"])
            self.consumed.update(entry["rejected"])
            self.last_logged = int(entry["batch_id"])
        shutil.rmtree(self.base_dir, ignore_errors=True)  # earlier bases: caches only
        out.mkdir(parents=True, exist_ok=True)
        clean_temporaries(out)
        self._set_base(Path(index_file), 0)
        self.last_end = time.time()
        self.batches = 0
        self.rows = 0
        self.last_batch: int | None = None
        # A stop asked for (SIGTERM): the batch under way completes, none starts after it.
        self.stopping = threading.Event()
        self._busy = threading.Lock()
        self.failure: BaseException | None = None  # a micro-batch that failed (not refused)
        log(f"stream: {len(self.index):,} subscriptions at version {self.version} "
            f"({len(self.consumed)} change files in the log) in "
            f"{time.perf_counter() - t0:.1f} s")

    def _apply(self, records: list[dict[str, Any]]) -> None:
        for rec in records:
            apply_record(self.index, rec)
            self.version += 1
            self.records.append((self.version, rec))

    def _set_base(self, path: Path, version: int) -> None:
        """Ship ``path`` (the index at ``version``) to the executors under a unique name
        (``addFile`` refuses a second file of the same name)."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        shipped = self.base_dir / f"base-{version:09d}-{uuid.uuid4().hex[:8]}.npz"
        if path.parent != self.base_dir:
            try:
                os.link(path, shipped)  # no copy of a large file where a link will do
            except OSError:
                shutil.copyfile(path, shipped)
        else:
            shipped = path
        self.base = {"base_token": shipped.name, "base_version": version,
                     "base_name": shipped.name, "base_path": str(shipped), "base_shipped": True}
        self.spark.sparkContext.addFile(str(shipped))
        self.records = [(v, r) for v, r in self.records if v > version]

    def _maybe_rebase(self) -> None:
        rows = sum(len(r["id"]) for _, r in self.records)
        if rows <= self.rebase_rows:
            return
        t0 = time.perf_counter()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        path = self.base_dir / f"base-{self.version:09d}-{uuid.uuid4().hex[:8]}.npz"
        self.index.save(path)
        self._set_base(path, self.version)
        log(f"stream: {rows:,} change rows since the base: new base index at version "
            f"{self.version} in {time.perf_counter() - t0:.1f} s")

    # ------------------------------------------------------------------ changes
    def _consume_changes(self, batch_id: int) -> dict[str, Any]:
        files: list[str] = []
        rejected: dict[str, str] = {}
        records: list[dict[str, Any]] = []
        for path in visible_files(self.changes):
            if path.name in self.consumed:
                continue
            try:
                recs = change_records(path, self.parser)
                check_records(self.index, recs, path)
            except (ChangeFileError, OSError) as exc:
                rejected[path.name] = format_error(exc)
                continue
            self._apply(recs)  # the next file is checked against this one's result
            files.append(path.name)
            records.extend(recs)
        if not files and not rejected:
            # Nothing to log: a re-run of this batch may take files landed meanwhile, which
            # is fine, since no attempt of it was committed with another set.
            return {"batch_id": batch_id, "files": [], "rejected": {}, "records": []}
        entry = self.log_.write(batch_id, files=files, rejected=rejected, records=records)
        self.consumed.update(files)
        self.consumed.update(rejected)
        self.last_logged = batch_id
        return entry

    # ------------------------------------------------------------------ a micro-batch
    def process(self, frame: DataFrame, batch_id: int) -> None:
        """foreachBatch function: apply the batch's changes, match, commit the sink file
        (a batch that starts once a stop was asked for fails before it does anything, so
        the next start runs it from the checkpoint)."""
        if self.stopping.is_set():
            msg = f"micro-batch {batch_id} not started: the stream is stopping"
            raise SparkJobError(msg)
        with self._busy:
            try:
                self._process(frame, batch_id)
            except BaseException as exc:
                self.failure = exc
                raise
            self.last_batch = batch_id

    def wait_idle(self) -> None:
        """Return once no micro-batch is being processed (after ``stopping`` is set, none
        starts again)."""
        with self._busy:
            pass

    def _process(self, frame: DataFrame, batch_id: int) -> None:
        t0 = time.time()
        kafka = "value" in frame.columns
        paths = [] if kafka else sorted(str(stream_local_path(r[0]))
                                        for r in frame.select("path").collect())
        entry = self.log_.get(batch_id)
        if entry is None:
            if batch_id <= self.last_logged:
                msg = (f"micro-batch {batch_id} is older than the change log "
                       f"(batch {self.last_logged}): the checkpoint was altered")
                raise SparkJobError(msg)
            entry = self._consume_changes(batch_id)
            fault_point("after-changelog", batch_id)
        elif batch_id != self.last_logged:
            msg = (f"micro-batch {batch_id} re-run after later batches were logged "
                   f"(last {self.last_logged}): the checkpoint was altered")
            raise SparkJobError(msg)
        for name, reason in entry["rejected"].items():
            if (self.changes / name).exists():
                move_aside(self.changes / name, reason, "change")
        target = sink_path(self.out, batch_id)
        if target.exists():
            log(f"batch {batch_id}: already committed ({target.name}), skipped")
            return
        self._maybe_rebase()
        n_msgs, n_found = self._match(paths, batch_id, target, frame if kafka else None)
        fault_point("after-sink", batch_id)
        t1 = time.time()
        wait = max(t1 - self.last_end, 1e-9)
        self.last_end = t1
        self.batches += 1
        self.rows += n_msgs
        n_events = sum(len(r["id"]) for r in entry["records"])
        log(f"batch {batch_id}: {len(paths)} files, {n_msgs:,} messages, "
            f"{n_found:,} deliveries; {len(entry['files'])} change files "
            f"({n_events:,} events, version {self.version}); {t1 - t0:.2f} s, "
            f"{n_msgs / max(t1 - t0, 1e-9):,.0f} messages/s processed, "
            f"{n_msgs / wait:,.0f} messages/s input")

    def warm(self) -> None:
        """Load the index in every Python worker before the first micro-batch (one task
        per core, each a few seconds long, so they run side by side in distinct workers)."""
        t0 = time.perf_counter()
        n = self.spark.sparkContext.defaultParallelism
        bc = broadcast_payload(self.spark, {**self.base, "version": self.version,
                                            "records": self.records, "paths": []})
        try:
            self.spark.sparkContext.setJobDescription("stream: loading the index in the workers")
            self.spark.range(0, n, 1, n).mapInArrow(warm_task(bc), "id long").collect()
        finally:
            self.spark.sparkContext.setJobDescription(None)  # type: ignore[arg-type]
            bc.unpersist()
        log(f"stream: index loaded in the workers ({n} tasks) in "
            f"{time.perf_counter() - t0:.1f} s")

    def _match(self, paths: list[str], batch_id: int, target: Path,
               records: DataFrame | None = None) -> tuple[int, int]:
        """Match the batch's message files, or its Kafka ``records``, into the sink
        directory ``target``; (messages, deliveries)."""
        tmp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:12]}")
        tmp.mkdir()
        n_msgs = n_found = 0
        if paths or records is not None:
            bc = broadcast_payload(self.spark, {**self.base, "version": self.version,
                                                "records": self.records, "paths": paths,
                                                "folder": str(tmp)})
            try:
                n = len(paths)
                self.spark.sparkContext.setJobDescription(
                    f"stream: batch {batch_id}, {n or 'Kafka'} files, version {self.version}")
                inputs = (self.spark.range(0, n, 1, n).mapInArrow(match_task(bc), TASK_SCHEMA)
                          if records is None else
                          records.mapInArrow(kafka_task(bc), TASK_SCHEMA))
                result = inputs.toArrow()
            finally:
                self.spark.sparkContext.setJobDescription(None)  # type: ignore[arg-type]
                bc.unpersist()
            bad_records: list[dict[str, Any]] = []
            for f, s, reason, k, d in zip(*(result.column(c).to_pylist() for c in (
                    "file", "status", "reason", "messages", "deliveries")), strict=True):
                if s == "ok":
                    n_msgs += int(k)
                    n_found += int(d)
                elif s == "bad" and records is not None:
                    bad_records.append({"record": f, "reason": reason})
                elif s == "bad":
                    move_aside(Path(f), str(reason), "message")
                elif not (Path(f).parent / REJECTED / Path(f).name).exists():
                    log(f"batch {batch_id}: message file {f} vanished before it was read")
            if bad_records:  # Kafka records cannot be moved aside: kept beside the sink
                write_rejected_records(self.out / REJECTED / f"batch-{batch_id:012d}.jsonl",
                                        bad_records)
                log(f"batch {batch_id}: rejected {len(bad_records)} Kafka records (kept in "
                    f"{self.out / REJECTED}): {bad_records[0]['reason']}")
        commit_batch(tmp, target)
        return n_msgs, n_found


# ---------------------------------------------------------------------------- the query
def _source(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    return (spark.readStream.format("binaryFile")
            .option("maxFilesPerTrigger", str(args.max_files_per_trigger))
            .option("ignoreMissingFiles", "true")
            .schema(_BINARY_FILE_SCHEMA)
            .load(spark_uri(stream_local_path(args.messages)))
            .select("path"))


def _kafka_source(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """Kafka records as messages: ``value`` is one JSON message object (the service's)."""
    return (spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", args.kafka_bootstrap)
            .option("subscribe", args.kafka_topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(1000 * args.max_files_per_trigger))
            .load().selectExpr("CAST(value AS STRING) AS value"))


def _progress(query: StreamingQuery, stop: threading.Event) -> None:
    """Print Spark's progress of each new micro-batch (input rate, batch duration)."""
    seen = -1
    while not stop.wait(1.0):
        p = query.lastProgress
        if not p or p.get("batchId", -1) == seen:
            continue
        seen = int(p["batchId"])
        d = p.get("durationMs", {})
        log(f"progress: batch {seen}, {p.get('numInputRows', 0)} files, input "
            f"{p.get('inputRowsPerSecond', 0.0):.2f} files/s, processed "
            f"{p.get('processedRowsPerSecond', 0.0):.2f} files/s, batch duration "
            f"{d.get('triggerExecution', 0)} ms")


def run_stream(spark: SparkSession, args: argparse.Namespace) -> int:
    """Start the query and wait for it (``--once``: until the files present are done)."""
    query, driver = start_stream(spark, args)
    stop = threading.Event()
    watcher = threading.Thread(target=_progress, args=(query, stop), daemon=True)
    watcher.start()
    # The handler only notes the signal: it runs on the main thread between two bytecodes,
    # possibly inside a py4j call reading the gateway's socket, and a py4j call from it
    # (query.stop) re-entered that reader ("reentrant call inside BufferedReader") and
    # crashed the driver. The main thread polls the flag and stops the query itself.
    signals: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _f: signals.append(signum))
                for sig in (signal.SIGTERM, signal.SIGINT)}
    t0 = time.perf_counter()
    from pyspark.errors import StreamingQueryException

    try:
        while not query.awaitTermination(1):
            if signals:
                _stop_after_batch(query, driver)
    except StreamingQueryException as exc:  # one line, as the other errors
        if not signals or driver.failure is not None:
            cause = driver.failure if driver.failure is not None else exc
            first = str(cause).strip().splitlines()[0] if str(cause).strip() \
                else type(cause).__name__
            msg = f"the streaming query stopped: {first}"
            raise SparkJobError(msg) from exc
        # the stop made a batch that was starting fail: the checkpoint re-runs it
    finally:
        stop.set()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    dt = time.perf_counter() - t0
    how = f" on {signal.Signals(signals[0]).name}" if signals else ""
    last = "none" if driver.last_batch is None else str(driver.last_batch)
    log(f"stream: stopped{how}; {driver.batches} micro-batches (last committed: {last}), "
        f"{driver.rows:,} messages in {dt:.1f} s")
    return 0


def _stop_after_batch(query: StreamingQuery, driver: StreamDriver) -> None:
    """Stop the query once the micro-batch under way (if any) is committed."""
    # A micro-batch Spark starts before the stop lands is refused (StreamDriver.process),
    # so the checkpoint re-runs it; Spark logs that expected refusal with the Python
    # traceback of the callback. Its logging is off from here on: a real failure of the
    # batch under way is still reported, once, from driver.failure (run_stream).
    driver.spark.sparkContext.setLogLevel("OFF")
    driver.stopping.set()
    driver.wait_idle()
    query.stop()


def start_stream(spark: SparkSession, args: argparse.Namespace
                 ) -> tuple[StreamingQuery, StreamDriver]:
    """Start the query (not waiting for it); the query and its driver."""
    check_stream_paths(spark, args)
    checkpoint = stream_local_path(args.checkpoint).absolute()
    out = stream_local_path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    for folder in (args.messages, args.changes):
        stream_local_path(folder).mkdir(parents=True, exist_ok=True)
    if args.kafka_bootstrap:
        problem = kafka_problem(spark)
        if problem is not None:
            raise SparkJobError(problem)
    driver = StreamDriver(spark, index_file=stream_local_path(args.index_file),
                          messages=stream_local_path(args.messages).absolute(),
                          changes=stream_local_path(args.changes).absolute(), out=out,
                          checkpoint=checkpoint, rebase_rows=args.rebase_rows)
    driver.warm()
    source = _kafka_source(spark, args) if args.kafka_bootstrap else _source(spark, args)
    writer = (source.writeStream.foreachBatch(driver.process)
              .option("checkpointLocation", str(checkpoint / "spark"))
              .queryName("roadpubsub_stream"))
    if args.once:
        writer = writer.trigger(availableNow=True)
    elif args.trigger_seconds > 0:
        writer = writer.trigger(processingTime=f"{args.trigger_seconds} seconds")
    return writer.start(), driver


# ---------------------------------------------------------------------------- command line
_EXAMPLE = """\
ordering rule:
  every message is matched against the subscription set as of its micro-batch: at the
  start of each micro-batch the change files not taken yet are applied in file-name order
  (each whole, or refused whole), then that batch's messages are matched.

files:
  messages  Parquet or JSON Lines files with the columns of 'roadpubsub match --messages'
            (id, keywords, u/v/offset or lon/lat); write them as .NAME or _NAME and rename,
            names starting with '.' or '_' are not read.
  changes   JSON Lines or Parquet, one event per row: "op" is subscribe, unsubscribe or move,
            with the live service's fields (subscribe: id, keywords, alpha, tau, location;
            unsubscribe: id; move: id, location).
  bad files are moved to _rejected/ in their directory with NAME.reason.txt beside them.
  the sink: OUT/batch_id=<id>/part-*.parquet (message_id, subscription_id, distance, score;
  spark.read.parquet(OUT) adds batch_id), each batch committed once by a directory rename;
  restart on the same --checkpoint after any crash.
  SIGTERM or Ctrl-C to the driver's process: the micro-batch under way is committed, none
  starts after it, the job exits 0 with one line; a restart on the same --checkpoint goes on.

example:
  roadpubsub spark stream --index-file work/rome/eia.npz --messages in/messages \\
      --changes in/changes --out out/deliveries --checkpoint out/checkpoint
  spark-submit spark_jobs/stream.py --index-file work/rome/eia.npz --messages in/messages \\
      --changes in/changes --out out/deliveries --checkpoint out/checkpoint --once
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the job (shared by the script and ``roadpubsub spark``)."""
    parser.add_argument("--index-file", required=True, metavar="F",
                        help="the starting subscription index ('roadpubsub index build')")
    parser.add_argument("--messages", required=True, metavar="DIR",
                        help="directory where message files land")
    parser.add_argument("--changes", required=True, metavar="DIR",
                        help="directory where subscription change files land")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="sink directory of deliveries (Parquet, a directory per batch)")
    parser.add_argument("--checkpoint", required=True, metavar="DIR",
                        help="checkpoint directory (Spark's offsets and the change log)")
    parser.add_argument("--once", action="store_true",
                        help="process the files present, then stop (Trigger.AvailableNow)")
    parser.add_argument("--max-files-per-trigger", type=int,
                        default=DEFAULTS.stream_max_files_per_trigger, metavar="N",
                        help="message files per micro-batch at most (default: %(default)s)")
    parser.add_argument("--trigger-seconds", type=float,
                        default=DEFAULTS.stream_trigger_seconds, metavar="S",
                        help="micro-batch interval (default 0: as soon as the previous "
                             "one is done and files are there)")
    parser.add_argument("--rebase-rows", type=int, default=DEFAULTS.stream_rebase_rows, metavar="N",
                        help="change rows after which executors get a new base index "
                             "instead of a longer delta (default: %(default)s)")
    parser.add_argument("--kafka-bootstrap", default=None, metavar="HOST:PORT",
                        help="read messages from Kafka instead, one JSON message object per "
                             "record, at most 1,000 x --max-files-per-trigger records per "
                             "batch; bad records are kept in OUT/_rejected/ (needs the "
                             "spark-sql-kafka "
                             "package on the classpath, e.g. --packages)")
    parser.add_argument("--kafka-topic", default=DEFAULTS.stream_kafka_topic,
                        help="Kafka topic (default: %(default)s)")
    add_spark_arguments(parser)


def build_parser() -> argparse.ArgumentParser:
    """The job's argument parser."""
    parser = argparse.ArgumentParser(
        prog="stream.py",
        description="Match messages as they land, on Spark Structured Streaming, with "
                    "live subscription changes and exactly-once deliveries.",
        epilog=_EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run the job for parsed arguments; returns the exit code."""
    if not stream_local_path(args.index_file, "--index-file").is_file():
        msg = f"--index-file {args.index_file}: no such file"
        raise FileNotFoundError(msg)
    if args.max_files_per_trigger < 1:
        msg = f"--max-files-per-trigger must be >= 1, got {args.max_files_per_trigger}"
        raise SparkJobError(msg)
    spark = session_from_args(args, app_name="roadpubsub stream")
    return run_stream(spark, args)


def main(argv: Sequence[str] | None = None) -> int:
    """Script entry point (``spark-submit spark_jobs/stream.py ...``)."""
    return run_job(run, build_parser().parse_args(argv), name="stream")


if __name__ == "__main__":  # pragma: no cover
    from roadpubsub.spark_jobs.stream import main as _main

    sys.exit(_main())
