"""Subscription and message files read into the frames of :mod:`roadpubsub.spark_jobs.cell_frames`
by the executors, each row validated, located and given its cell in the tasks.

The Spark jobs never load subscription or message files on the driver: Spark's Parquet
reader spreads the rows over the executors, and each task validates its rows and locates
them on the road network with the project's one reader
(:func:`roadpubsub.index.io.read_subscriptions`,
:func:`roadpubsub.index.io.read_messages`, run on the task's rows), then computes each point's cell
(``cells.edge_cell``). The network and its cells travel as one broadcast
(:func:`roadpubsub.spark_jobs.payload.broadcast_network`). What comes back to the driver is small:
the problems found (one error naming the file, as the local reader gives), the keywords
missing from the weights table, and per-cell counts and distance limits.

The frames' columns are described in :mod:`roadpubsub.spark_jobs.cell_frames`.

Term ids equal the local reader's: keywords missing from the weights table are added to
it (at the default weight) in the order of their first appearance in the file, as
:func:`roadpubsub.index.io.read_subscriptions` adds them, so the scores are summed in the same order
and come out bit for bit the same. Message keywords missing from the weights (after the
subscriptions' were added) are dropped, as :func:`roadpubsub.index.io.read_messages` drops them.

Inputs are Parquet files or directories, local paths or storage URLs. JSON Lines files
(meant for small inputs) are read on the driver by the same reader and then distributed.

Examples
--------
>>> weights = read_weights("weights.parquet")                          # doctest: +SKIP
>>> subs = read_subscriptions_frame(spark, "s3a://b/subs.parquet", network, cells,
...                                 weights, dmax_m=2000.0)
>>> msgs = read_messages_frame(spark, "s3a://b/msgs.parquet", network, cells, weights)
"""

from __future__ import annotations

import copy
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from roadpubsub.index.io import read_messages, read_subscriptions
from roadpubsub.index.kinds_io import read_subscription_set
from roadpubsub.index.model import (
    InvalidMessageError,
    InvalidSubscriptionError,
    Messages,
    Subscriptions,
)
from roadpubsub.index.rows import keyword_term_csr
from roadpubsub.index.tables import read_table
from roadpubsub.index.terms import TermWeights
from roadpubsub.roadnet.cells import Cells
from roadpubsub.roadnet.errors import InputError, describe_rows
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.settings import DEFAULTS
from roadpubsub.spark_jobs import storage, storage_paths
from roadpubsub.spark_jobs.payload import cells_payload, network_and_cells, network_payload
from roadpubsub.spark_jobs.session import broadcast_payload, cached_payload

if TYPE_CHECKING:  # pragma: no cover
    from pyspark import Broadcast
    from pyspark.sql import DataFrame, SparkSession

from roadpubsub.spark_jobs.cell_frames import (
    MESSAGE_SCHEMA,
    ORDERED_MESSAGE_SCHEMA,
    SUBSCRIPTION_SCHEMA,
    SUBSCRIPTION_SET_SCHEMA,
    cell_limits,
    kind_codes,
    messages_frame,
    subscription_set_frame,
    subscription_set_frame_table,
    subscriptions_frame,
    term_id_lists,
    weights_from_payload,
    weights_payload,
)

__all__ = ["read_messages_frame", "read_subscription_set_frame", "read_subscriptions_frame"]

# The columns the readers know (roadpubsub.index.io); others are not shipped to the tasks.
_FILE_COLUMNS = ("id", "u", "v", "offset", "lon", "lat", "keywords", "alpha", "tau",
                 "kind", "radius", "k")
_JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")
# Pass 1 output: parsed rows (kind 0), problems (kind 1), unknown keywords (kind 2) with
# the place of their first appearance (file, block, row id, position in the list).
_PARSED_SCHEMA = ("kind int, cell int, id long, edge int, offset double, alpha double, "
                  "tau double, dn_limit double, raw array<string>, problem string, "
                  "term string, o_file string, o_block long, o_row long, o_k int, "
                  "skind int, radius double, k long")
_ROW, _PROBLEM, _TERM = 0, 1, 2
#: Rows per call of the index.io reader in a task.
_CHUNK_ROWS = 100_000
#: At most this many problems are gathered for the error message.
_MAX_PROBLEMS = 20


# ---------------------------------------------------------------------------- pass 1: parse
def _parse_task(bc: Broadcast[dict[str, Any]], *, kind: str, name: str, timer: Any = None
                ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow function: file rows -> located rows, problems and unknown keywords."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        work = 0.0
        t0 = time.perf_counter()
        network, cells = cached_payload(bc, "cells", network_and_cells)
        payload = bc.value
        base = cached_payload(bc, "weights", lambda p: weights_from_payload(p["weights"]))
        seen = 0  # rows of this task
        with tempfile.TemporaryDirectory(prefix="roadpubsub-rows-") as folder:
            tmp = Path(folder) / name
            work += time.perf_counter() - t0
            for table in _chunks(batches, _CHUNK_ROWS):
                t0 = time.perf_counter()
                out = _parse_batch(table, tmp, network, cells, base, kind=kind,
                                   dmax_m=payload["dmax_m"],
                                   tolerance=payload["tolerance"],
                                   kinds=payload.get("kinds", False),
                                   ordered=payload.get("ordered", False))
                seen += table.num_rows
                work += time.perf_counter() - t0
                yield from out
        if timer is not None:  # the reading of the input by Spark is not included
            from pyspark import TaskContext

            ctx = TaskContext.get()
            part = ctx.partitionId() if ctx is not None else -1
            timer.add([(f"read {kind}:validate and locate", part, work, seen, seen)])

    return run


def _chunks(batches: Iterator[pa.RecordBatch], rows: int) -> Iterator[pa.Table]:
    """Arrow batches regrouped into tables of about ``rows`` rows (the reader's fixed cost
    per call, a few tenths of a second, is paid once per chunk rather than per batch)."""
    pending: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        pending.append(batch)
        count += batch.num_rows
        if count >= rows:
            yield pa.Table.from_batches(pending)
            pending, count = [], 0
    if pending:
        yield pa.Table.from_batches(pending)


def _parse_batch(table: pa.Table, tmp: Path, network: RoadNetwork, cells: Cells,
                 base: TermWeights, *, kind: str, dmax_m: float, tolerance: float,
                 kinds: bool = False, ordered: bool = False) -> list[pa.RecordBatch]:
    data = table.select([c for c in table.column_names if c in _FILE_COLUMNS])
    # A scratch file read back at once: no compression, statistics or dictionaries.
    pq.write_table(data, tmp, compression="none", write_statistics=False, use_dictionary=False)
    weights = copy.deepcopy(base)  # the reader adds unknown keywords to its weights
    error = InvalidSubscriptionError if kind == "subscriptions" else InvalidMessageError
    try:
        if kind == "subscriptions" and kinds:
            subset = read_subscription_set(tmp, network, weights, dmax_m=dmax_m)
        elif kind == "subscriptions":
            parsed: Subscriptions | Messages = read_subscriptions(tmp, network, weights)
        else:
            parsed = read_messages(tmp, network, weights)
    except error as exc:
        text = str(exc)
        prefix = f"invalid {kind} in {tmp}: "
        problems = text[len(prefix):] if text.startswith(prefix) else text.replace(
            str(tmp), "")
        # Duplicates across the whole input are found once by the driver's check.
        parts = [p for p in problems.split("; ") if not p.startswith("duplicate ids")]
        return [_rows_batch({"kind": [_PROBLEM] * len(parts), "problem": parts})]
    n = table.num_rows
    if kind == "subscriptions" and kinds:
        codes = kind_codes(data)
        # The reader's batches hold each kind's rows in file order: the same order here.
        order = np.concatenate([np.flatnonzero(codes == c) for c in range(3)])
        rows = subscription_set_frame_table(subset, cells, dmax_m=dmax_m, tolerance=tolerance,
                                            raw=data.column("keywords").take(pa.array(order)))
        batch = {name: rows.column(name) for name in rows.column_names}
        batch["skind"] = batch.pop("kind")
        batch["kind"] = np.full(n, _ROW, np.int32)
        return [_rows_batch(batch), _unknown_terms(data.column("keywords"), base, table)]
    cell = cells.edge_cell[parsed.points.edge].astype(np.int64)
    cols: dict[str, Any] = {
        "kind": np.full(n, _ROW, np.int32), "cell": cell.astype(np.int32), "id": parsed.ids,
        "edge": parsed.points.edge, "offset": parsed.points.offset,
        "raw": data.column("keywords"),
    }
    if isinstance(parsed, Subscriptions):
        limits = cell_limits(cells, parsed, dmax_m=dmax_m, tolerance=tolerance)
        cols.update({"alpha": parsed.alpha, "tau": parsed.tau, "dn_limit": limits[cell]})
    elif ordered:
        cols.update({"o_file": table.column("_file"), "o_block": table.column("_block"),
                     "o_row": table.column("_row")})
    out = [_rows_batch(cols)]
    if isinstance(parsed, Subscriptions):
        out.append(_unknown_terms(data.column("keywords"), base, table))
    return out


def _unknown_terms(keywords: pa.ChunkedArray, base: TermWeights, table: pa.Table
                   ) -> pa.RecordBatch:
    """Keywords missing from ``base``, each with the place of its first appearance."""
    col = keywords.combine_chunks()
    flat = pc.cast(pc.list_flatten(col), pa.string())
    if len(flat) == 0:
        return _rows_batch({"kind": []})
    encoded = pc.dictionary_encode(flat)
    uniq = encoded.dictionary.to_pylist()
    unknown = base.ids(uniq, add=False) < 0
    if not unknown.any():
        return _rows_batch({"kind": []})
    index = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    lengths = np.asarray(pc.list_value_length(col).fill_null(0).to_numpy(
        zero_copy_only=False), dtype=np.int64)
    row_of = np.repeat(np.arange(lengths.size), lengths)  # the row of each flat keyword
    k_of = np.arange(index.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    files, file_rank = np.unique(np.asarray(table.column("_file").to_pylist(), dtype=object
                                            ).astype(str), return_inverse=True)
    blocks = np.asarray(table.column("_block").to_numpy(zero_copy_only=False), dtype=np.int64)
    places = np.asarray(table.column("_row").to_numpy(zero_copy_only=False), dtype=np.int64)
    # The rows of a chunk need not be in file order (they were shuffled): the first
    # appearance of a keyword is its least (file, block, row id, position) here.
    hit = np.flatnonzero(unknown[index])
    r = row_of[hit]
    order = np.lexsort((k_of[hit], places[r], blocks[r], file_rank[r], index[hit]))
    pick_flat = hit[order]
    term_of = index[pick_flat]
    first = np.ones(term_of.size, dtype=bool)
    first[1:] = term_of[1:] != term_of[:-1]
    pick_flat = pick_flat[first]
    rows = row_of[pick_flat]
    return _rows_batch({
        "kind": np.full(pick_flat.size, _TERM, np.int32),
        "term": [uniq[i] for i in index[pick_flat]],
        "o_file": [str(files[file_rank[i]]) for i in rows], "o_block": blocks[rows],
        "o_row": places[rows], "o_k": k_of[pick_flat].astype(np.int32),
    })


_PARSED_ARROW = pa.schema([
    ("kind", pa.int32()), ("cell", pa.int32()), ("id", pa.int64()), ("edge", pa.int32()),
    ("offset", pa.float64()), ("alpha", pa.float64()), ("tau", pa.float64()),
    ("dn_limit", pa.float64()), ("raw", pa.list_(pa.string())), ("problem", pa.string()),
    ("term", pa.string()), ("o_file", pa.string()), ("o_block", pa.int64()),
    ("o_row", pa.int64()), ("o_k", pa.int32()), ("skind", pa.int32()),
    ("radius", pa.float64()), ("k", pa.int64()),
])


def _rows_batch(cols: dict[str, Any]) -> pa.RecordBatch:
    """A batch of the pass-1 schema; absent columns are null."""
    n = len(cols["kind"])
    arrays = []
    for field in _PARSED_ARROW:
        value = cols.get(field.name)
        if value is None:
            arrays.append(pa.nulls(n, field.type))
        elif isinstance(value, pa.ChunkedArray):
            arrays.append(pc.cast(value.combine_chunks(), field.type))
        else:
            arrays.append(pa.array(value, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=_PARSED_ARROW)


# ---------------------------------------------------------------------------- pass 2: term ids
def _terms_task(bc: Broadcast[dict[str, Any]], *, kind: str, timer: Any = None
                ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow function: parsed rows -> frame rows (keywords as the final term ids)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        t0 = time.perf_counter()
        weights = cached_payload(bc, "final-weights",
                                 lambda p: weights_from_payload(p["weights"]))
        kinds = bool(bc.value.get("kinds", False))
        files = None if bc.value.get("files") is None else pa.array(bc.value["files"],
                                                                     pa.string())
        work, seen = time.perf_counter() - t0, 0
        for batch in batches:
            t0 = time.perf_counter()
            seen += batch.num_rows
            col = batch.column("raw")
            lengths = np.asarray(pc.list_value_length(col).fill_null(0).to_numpy(
                zero_copy_only=False), dtype=np.int64)
            values = pc.cast(pc.list_flatten(col), pa.string())
            # The reader's own conversion: normalised, sorted, distinct; unknown dropped.
            ptr, terms = keyword_term_csr(lengths, values, weights, add=False)
            names = ["cell", "id", "edge", "offset"]
            if kinds:
                names = ["skind", *names, "alpha", "tau", "radius", "k", "dn_limit"]
            elif kind == "subscriptions":
                names += ["alpha", "tau", "dn_limit"]
            arrays = [batch.column(c) for c in names] + [term_id_lists(ptr, terms)]
            out_names = ["kind" if c == "skind" else c for c in names] + ["keywords"]
            if files is not None:  # file order: the file's rank among the input's files
                rank = pc.index_in(batch.column("o_file"), value_set=files)
                arrays += [pc.cast(rank, pa.int32()), batch.column("o_block"),
                           batch.column("o_row")]
                out_names += ["o_file", "o_block", "o_row"]
            out = pa.RecordBatch.from_arrays(arrays, names=out_names)
            work += time.perf_counter() - t0
            yield out
        if timer is not None:
            from pyspark import TaskContext

            ctx = TaskContext.get()
            part = ctx.partitionId() if ctx is not None else -1
            timer.add([(f"read {kind}:term ids", part, work, seen, seen)])

    return run


# ---------------------------------------------------------------------------- reading

def _check_local_parquet(path: storage_paths.PathLike) -> None:
    """Read the footer of every Parquet file a local input holds (a file, or a folder of
    parts), so a truncated or damaged one fails here with one line naming it, rather
    than in Spark's tasks with a Java stack trace. URLs of other storage are read by
    Spark alone (its failures are one line too: :func:`roadpubsub.spark_jobs.session.spark_errors`).
    """
    local = storage_paths.local_path(path)
    if local is None:
        return
    files = [local] if not local.is_dir() else sorted(
        f for f in local.rglob("*") if f.is_file() and not f.name.startswith(("_", ".")))
    for f in files:
        try:
            pq.read_metadata(f)
        except (OSError, ValueError, pa.ArrowException) as exc:
            detail = " ".join(str(exc).split()) or type(exc).__name__
            msg = f"{f}: not a readable Parquet file ({detail})"
            raise InputError(msg) from exc


def _read_frame(spark: SparkSession, path: str, network: RoadNetwork, cells: Cells,
                weights: TermWeights, *, kind: str, dmax_m: float, tolerance: float,
                timer: Any = None, kinds: bool = False, ordered: bool = False) -> DataFrame:
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.storagelevel import StorageLevel

    error = InvalidSubscriptionError if kind == "subscriptions" else InvalidMessageError
    schema = (SUBSCRIPTION_SET_SCHEMA if kinds else SUBSCRIPTION_SCHEMA) \
        if kind == "subscriptions" else (ORDERED_MESSAGE_SCHEMA if ordered else MESSAGE_SCHEMA)
    if not storage_paths.exists(spark, path):
        msg = f"file not found: {path}"
        raise FileNotFoundError(msg)
    if os.fspath(path).lower().endswith(_JSON_SUFFIXES):
        # Small inputs only: read whole on the driver by the same reader.
        with storage.local_copy(path, spark=spark) as local:
            if kind == "subscriptions":
                table = read_table(local)
                if {"expires_at", "id"} <= set(table.column_names):  # else: the reader's error
                    ids = table.filter(pc.is_valid(table.column("expires_at"))).column("id")
                    _refuse_expiry(path, ids.to_pylist())
            if kind == "subscriptions" and kinds:
                subset = read_subscription_set(local, network, weights, dmax_m=dmax_m)
                return subscription_set_frame(spark, subset, cells, dmax_m=dmax_m,
                                              tolerance=tolerance)
            if kind == "subscriptions":
                subs = read_subscriptions(local, network, weights)
                return subscriptions_frame(spark, subs, cells, dmax_m=dmax_m,
                                           tolerance=tolerance)
            return messages_frame(spark, read_messages(local, network, weights), cells,
                                  ordered=ordered)
    _check_local_parquet(path)
    raw = spark.read.parquet(storage_paths.spark_uri(path))
    if kind == "subscriptions" and {"expires_at", "id"} <= set(raw.columns):
        expiring = raw.filter(F.col("expires_at").isNotNull()).select("id").limit(11)
        _refuse_expiry(path, expiring.toArrow().column("id").to_pylist())
    keep = [c for c in raw.columns if c in _FILE_COLUMNS]
    # Where each row lies in the input (file, block, then an id that grows along the rows
    # of a block), taken as the file is read: the order of first appearance of unknown
    # keywords, kept through the repartition below.
    raw = raw.select(*keep, F.input_file_name().alias("_file"),
                     F.input_file_block_start().alias("_block"),
                     F.monotonically_increasing_id().alias("_row"))
    # Spark splits a file by row groups: a file written as one row group (pyarrow's
    # default up to 1Mi rows, as index.io writes) is read by one task whatever the split
    # count says. Spread the rows round-robin over at least every core before the
    # validation and location work, the heavy part (one shuffle of the input's columns).
    raw = raw.repartition(max(spark.sparkContext.defaultParallelism,
                              raw.rdd.getNumPartitions()))
    name = Path(path.rstrip("/")).name
    name = name if name.lower().endswith((".parquet", ".pq")) else "rows.parquet"
    bc = broadcast_payload(spark, {"network": network_payload(network),
                                   "cells": cells_payload(cells),
                                   "weights": weights_payload(weights),
                                   "dmax_m": float(dmax_m), "tolerance": float(tolerance),
                                   "kinds": kinds, "ordered": ordered})
    parsed = raw.mapInArrow(_parse_task(bc, kind=kind, name=name, timer=timer), _PARSED_SCHEMA) \
        .persist(StorageLevel.MEMORY_AND_DISK)
    notes = parsed.filter(F.col("kind") != _ROW).toArrow()
    problems = list(dict.fromkeys(
        p for p in notes.column("problem").to_pylist() if p is not None))[:_MAX_PROBLEMS]
    rows = parsed.filter(F.col("kind") == _ROW)
    # Over the file's id column, so that rows of a batch with other problems count too.
    dups = [] if "id" not in keep else (
        raw.filter(F.col("id").isNotNull()).groupBy("id").count()
        .filter(F.col("count") > 1).select("id")
        .orderBy("id").limit(11).toArrow().column("id").to_pylist())
    if dups:
        problems.append(f"duplicate ids: {describe_rows(dups[:10])}"
                        + (" and more" if len(dups) > 10 else ""))
    if problems:
        parsed.unpersist()
        msg = f"invalid {kind} in {path}: " + "; ".join(problems)
        raise error(msg)
    if kind == "subscriptions":
        _add_unknown_terms(notes, weights)
    files = None
    if ordered:  # the input's files by name (few): each row's file as its rank
        files = sorted(rows.select("o_file").distinct().toArrow().column("o_file").to_pylist())
    final = broadcast_payload(spark, {"weights": weights_payload(weights), "kinds": kinds,
                                      "files": files})
    # Kept: the job reads the frame twice (per-cell figures, then the match).
    return rows.mapInArrow(_terms_task(final, kind=kind, timer=timer), schema) \
        .persist(StorageLevel.MEMORY_AND_DISK)


def _refuse_expiry(path: str, ids: list[Any]) -> None:
    """Refuse subscriptions that expire (``ids``: some of them, none when none does).

    The Spark jobs match every subscription against every message; ignoring the column
    would deliver messages the service and ``roadpubsub match`` withhold.

    Raises
    ------
    index.model.InvalidSubscriptionError
        Naming the file and up to ten of the ids.
    """
    if ids:
        shown = sorted(ids)[:10]  # the first found by the tasks: in no fixed order
        msg = (f"invalid subscriptions in {path}: expires_at set (ids "
               f"{describe_rows(shown)}{' and more' if len(ids) > 10 else ''}): the Spark "
               f"jobs do not apply expiry; 'roadpubsub match' does, or leave the column "
               f"empty")
        raise InvalidSubscriptionError(msg)


def _add_unknown_terms(notes: pa.Table, weights: TermWeights) -> None:
    """Add the keywords missing from ``weights`` in the order the local reader adds them."""
    first: dict[str, tuple[str, int, int, int]] = {}
    cols = [notes.column(c).to_pylist() for c in ("kind", "term", "o_file", "o_block",
                                                  "o_row", "o_k")]
    for kind, term, f, b, r, k in zip(*cols, strict=True):
        if kind != _TERM:
            continue
        key = (f, b, r, k)
        if term not in first or key < first[term]:
            first[term] = key
    weights.ids(sorted(first, key=first.__getitem__), add=True)


def read_subscriptions_frame(spark: SparkSession, path: str, network: RoadNetwork,
                             cells: Cells, weights: TermWeights, *, dmax_m: float,
                             tolerance: float = DEFAULTS.score_tolerance,
                             timer: Any = None) -> DataFrame:
    """Subscriptions of a file (local path or URL) as a distributed frame (see the module
    docstring). Keywords missing from ``weights`` are added to it, as the local reader does.

    Raises
    ------
    FileNotFoundError
        No such file.
    index.model.InvalidSubscriptionError
        One message naming the file and every problem found (up to 20), with row ids.
    """
    return _read_frame(spark, path, network, cells, weights, kind="subscriptions",
                       dmax_m=dmax_m, tolerance=tolerance, timer=timer)


def read_messages_frame(spark: SparkSession, path: str, network: RoadNetwork, cells: Cells,
                        weights: TermWeights, *, timer: Any = None,
                        ordered: bool = False) -> DataFrame:
    """Messages of a file (local path or URL) as a distributed frame; read the
    subscriptions first (their keywords extend ``weights``). ``ordered``: with the columns
    of :data:`ORDERED_MESSAGE_SCHEMA` that give the file order (the stream order of
    top-k matching; a directory's files in name order).

    Raises
    ------
    FileNotFoundError
        No such file.
    index.model.InvalidMessageError
        As :func:`read_subscriptions_frame`.
    """
    return _read_frame(spark, path, network, cells, weights, kind="messages",
                       dmax_m=DEFAULTS.dmax_m, tolerance=DEFAULTS.score_tolerance,
                       timer=timer, ordered=ordered)


def read_subscription_set_frame(spark: SparkSession, path: str, network: RoadNetwork,
                                cells: Cells, weights: TermWeights, *, dmax_m: float,
                                tolerance: float = DEFAULTS.score_tolerance,
                                timer: Any = None) -> DataFrame:
    """Subscriptions of every kind (a file with or without a ``kind`` column, as
    :func:`roadpubsub.index.kinds_io.read_subscription_set` reads it) as a distributed frame of
    :data:`SUBSCRIPTION_SET_SCHEMA`, read as :func:`read_subscriptions_frame` reads.

    Raises
    ------
    FileNotFoundError
        No such file.
    index.model.InvalidSubscriptionError
        One message naming the file and every problem found (up to 20), with row ids:
        bad kinds, fields a kind does not use, k < 1, a radius above Dmax, and all the
        problems of a threshold file.
    """
    return _read_frame(spark, path, network, cells, weights, kind="subscriptions",
                       dmax_m=dmax_m, tolerance=tolerance, timer=timer, kinds=True)
