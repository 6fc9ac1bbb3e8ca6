"""The tunables of a running service (:class:`ServiceOptions`)."""

from __future__ import annotations

from dataclasses import dataclass

from roadpubsub.roadnet.settings import DEFAULTS

__all__ = ["DEFAULT_WINDOW", "ServiceOptions"]

#: The top-k window W (messages) of a folder whose manifest names none.
DEFAULT_WINDOW = DEFAULTS.live_topk_window


@dataclass(frozen=True)
class ServiceOptions:
    """Tunables of a running service.

    Attributes
    ----------
    snapshot_every
        Replay cost between background snapshots (>= 1), in single-row events; a batch of
        n rows counts 1 + n // 25.
    flush_every
        Published messages between deliveries-log segments (>= 1).
    fsync
        fsync the log before answering (False only to measure what it costs).
    max_snap_m
        Largest snap distance of lon/lat locations, metres.
    background_compaction
        Fold the index's delta on a worker thread while events go on
        (:mod:`roadpubsub.service.compactor`); False compacts in line, on the apply thread.
    compact_delta
        Compact once the delta holds more rows than this (>= 1); None: the index's own rule
        (``DEFAULTS.delta_compaction_min`` and ``delta_compaction_ratio``).
    max_keywords, max_keyword_bytes, max_batch_rows, max_json_depth, decode_thread_bytes
        Limits on request bodies (:class:`~roadpubsub.roadnet.settings.Settings`): keywords per row,
        UTF-8 bytes per keyword after normalisation, rows per body, nesting depth, and the
        body size above which it is decoded on a worker thread.
    max_log_bytes
        Largest size of the write-ahead log (bytes, >= 1): past it events are refused
        (503) until a snapshot lets covered segments be dropped
        (``DEFAULTS.service_max_log_bytes``).
    snapshot_retry_s, snapshot_retry_max_s
        A failed snapshot is retried after ``snapshot_retry_s`` seconds, doubling after
        each further failure up to ``snapshot_retry_max_s``.
    stream_retention
        Deliveries held for resumable streams, at least (>= 1;
        ``DEFAULTS.stream_retention_deliveries``).
    stream_retention_s
        Seconds a delivery stays held for resumable streams, at most (0: no age bound;
        ``DEFAULTS.stream_retention_s``).
    set_max_points, set_max_pieces, set_batch_points
        Limits of route and area ``geometry`` fields (issue 32; all >= 1): positions per
        geometry, pieces per resolved set, positions per request
        (``DEFAULTS.service_set_max_points`` etc.).
    """

    snapshot_every: int = DEFAULTS.snapshot_every
    flush_every: int = DEFAULTS.flush_every
    fsync: bool = True
    max_snap_m: float = DEFAULTS.snap_distance_m
    background_compaction: bool = True
    compact_delta: int | None = None
    # --- validation ---
    max_keywords: int = DEFAULTS.max_keywords
    max_keyword_bytes: int = DEFAULTS.max_keyword_bytes
    max_batch_rows: int = DEFAULTS.max_batch_rows
    max_json_depth: int = DEFAULTS.max_json_depth
    decode_thread_bytes: int = DEFAULTS.decode_thread_bytes
    # --- runtime resilience ---
    max_log_bytes: int = DEFAULTS.service_max_log_bytes
    snapshot_retry_s: float = DEFAULTS.service_snapshot_retry_s
    snapshot_retry_max_s: float = DEFAULTS.service_snapshot_retry_max_s
    # --- push (issue 30) ---
    stream_retention: int = DEFAULTS.stream_retention_deliveries
    stream_retention_s: float = DEFAULTS.stream_retention_s
    # --- set limits (issue 32) ---
    set_max_points: int = DEFAULTS.service_set_max_points
    set_max_pieces: int = DEFAULTS.service_set_max_pieces
    set_batch_points: int = DEFAULTS.service_set_batch_points
