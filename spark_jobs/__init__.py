"""Spark jobs of roadpubsub: the local computations, distributed.

Each job runs as ``spark-submit spark_jobs/<job>.py ...`` and as
``roadpubsub spark <job> ...`` (``--master``, default ``local[*]``); each distributes the
functions the single-process path calls, so their outputs are the local ones.

:mod:`roadpubsub.spark_jobs.precompute_bounds`
    The cell-pair distance bound table, written to Parquet, computed by one of two engines:
    :mod:`roadpubsub.spark_jobs.dijkstra_engine` (one border Dijkstra per cell in the tasks) or
    :mod:`roadpubsub.spark_jobs.graphframes_engine` (GraphFrames Pregel over the border overlay).
:mod:`roadpubsub.spark_jobs.bound_table`
    The table's format; :func:`~roadpubsub.spark_jobs.bound_table.load_bounds_table` reads it back
    for :meth:`roadpubsub.index.spatial.SpatialIndex.build`.
:mod:`roadpubsub.spark_jobs.payload`
    Networks and cells as broadcasts, the per-cell task frame.
:mod:`roadpubsub.spark_jobs.idf`
    Smoothed idf keyword weights of a large corpus (text, CSV or Parquet).
:mod:`roadpubsub.spark_jobs.batch_match`
    Deliveries of many messages against many subscriptions: subscriptions partitioned by
    cell, one EIA index per task, messages routed by cell-level pruning (Lemma 2).
:mod:`roadpubsub.spark_jobs.match_plan`
    The batch match's plan (cells to partitions, on the driver) and its routing and
    matching tasks.
:mod:`roadpubsub.spark_jobs.batch_kinds`
    The same for files mixing subscription kinds: boolean range subscriptions routed and
    matched beside the threshold ones, top-k subscriptions partitioned by cell over the
    whole ordered message stream.
:mod:`roadpubsub.spark_jobs.arrow_batches`
    The tasks' Arrow rows as the index's batches (every kind, messages) and their
    deliveries and top-k events as rows again.
:mod:`roadpubsub.spark_jobs.read_frames`
    Subscriptions and messages read by the executors as DataFrames, each row validated,
    located and given its cell in the tasks (the driver reads nothing big); the frames'
    schemas, frames of in-memory batches and per-cell figures:
    :mod:`roadpubsub.spark_jobs.cell_frames`.
:mod:`roadpubsub.spark_jobs.bound_frames`
    The bound table as a DataFrame, shuffled to the partitions that need its rows.
:mod:`roadpubsub.spark_jobs.stream`
    Structured Streaming matching: message files matched as they land against a
    subscription set that change files update between micro-batches, exactly once
    (:mod:`roadpubsub.spark_jobs.stream_changes`: the change files, their log, their application;
    :mod:`roadpubsub.spark_jobs.stream_files`: the sink, rejected files and kill points;
    :mod:`roadpubsub.spark_jobs.stream_tasks`: the executors' index and tasks;
    :mod:`roadpubsub.spark_jobs.bench_stream`: its benchmark against ``roadpubsub match``).
:mod:`roadpubsub.spark_jobs.overlay`
    The border overlay graph and its pure-local reference computation.
:mod:`roadpubsub.spark_jobs.session`
    Session creation (Java 17+ check), progress lines, broadcasts, SQL settings for a
    block, whether a JVM package is on the classpath.
:mod:`roadpubsub.spark_jobs.storage`
    Inputs and outputs as local paths or storage URLs (``file://``, ``hdfs://``,
    ``s3a://``): output checks, atomic output directories, whole files on the driver
    (what a path or URL names, and the filesystem questions asked of it:
    :mod:`roadpubsub.spark_jobs.storage_paths`).
:mod:`roadpubsub.spark_jobs.bench_spark`
    Spark vs single-process timings on Rome (batch-match: phases, per-task figures).

Nothing in ``roadpubsub.roadnet``, ``roadpubsub.index`` or ``roadpubsub.pruning`` imports
this package.
"""

__all__ = [
    "arrow_batches",
    "batch_kinds",
    "batch_match",
    "bench_spark",
    "bench_stream",
    "bound_frames",
    "bound_table",
    "cell_frames",
    "dijkstra_engine",
    "graphframes_engine",
    "idf",
    "match_plan",
    "overlay",
    "payload",
    "precompute_bounds",
    "read_frames",
    "session",
    "storage",
    "storage_paths",
    "stream",
    "stream_changes",
    "stream_files",
    "stream_tasks",
]
