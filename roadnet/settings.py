"""Every tunable default of roadpubsub, in one typed place.

Functions take keyword-only options whose defaults come from :data:`DEFAULTS`; pass a
value to override one call, or build another :class:`Settings` with
``dataclasses.replace(DEFAULTS, ...)`` for a whole run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DEFAULTS", "Settings", "shared_data_candidates", "shared_data_dir",
           "shared_data_hint"]


@dataclass(frozen=True, slots=True)
class Settings:
    """Defaults used across the layers.

    Attributes
    ----------
    snap_distance_m
        Largest distance, in metres, between a lon/lat point and the road it is snapped to;
        a point farther than this from every road is an input error.
    locate_piece_m
        Length, in metres, of the pieces that long edge segments are cut into for the
        nearest-edge search tree. Smaller is faster per query, larger is a smaller tree.
    cell_capacity
        PMR quadtree split threshold: a leaf holding more edges than this is split in four.
        2,400 gives about 256 leaf cells on Rome (258K edges), the paper's setting.
    cell_max_depth
        Deepest quadtree level; stops splitting on piles of coincident edges.
    score_tolerance
        A message is delivered when SIM >= tau - score_tolerance (absorbs rounding).
    bound_slack_m
        Absolute slack, in metres, added in favour of keeping a candidate whenever a
        distance lower bound is compared with a distance limit; bounds are sums of
        floating-point lengths, so this keeps pruning safe under rounding.
    bound_slack_rel
        Relative slack of the same comparisons.
    dmax_m
        Default Dmax, the largest tolerated network distance, in metres.
    bucket_width_m
        Width, in metres, of the buckets of the verification search's bucket queue (> 0).
        Narrower buckets rescan fewer junctions, wider ones cost fewer empty buckets; on
        Rome 5-50 m gave the same speed.
    delta_compaction_min
        Subscriptions added since the last build that trigger an automatic compaction of an
        index's delta buffer (together with ``delta_compaction_ratio``).
    delta_compaction_ratio
        Compact when the delta buffer exceeds this fraction of the indexed subscriptions.
    topk_window
        W of top-k sliding-window subscriptions: their results come from the last W
        messages (``roadpubsub match --window``, ``roadpubsub spark batch-match --window``).
    normalize_keywords
        Compare keywords after Unicode NFC, case folding and stripping white space
        ("DELAYED" matches "delayed"); False compares them as exact strings.
    service_max_log_bytes
        Largest size, in bytes, of the live service's write-ahead log (>= 1; ``roadpubsub
        serve --max-log-bytes``). Past it events are refused with 503 until a snapshot lets
        the covered segments be dropped (snapshots keep the log far below it; the limit
        bites when snapshots keep failing). Default 2 GiB.
    service_snapshot_retry_s
        Seconds before a failed background snapshot of the service is retried (> 0); the
        wait doubles after each further failure in a row.
    service_snapshot_retry_max_s
        Longest wait, in seconds, between snapshot retries (>= service_snapshot_retry_s).
    service_probe_interval_s
        Seconds between the failed service's probes of its disk (a small file written and
        fsynced in the state folder); the first probe that succeeds reloads the state.
    """

    snap_distance_m: float = 250.0
    locate_piece_m: float = 50.0
    cell_capacity: int = 2400
    cell_max_depth: int = 16
    score_tolerance: float = 1e-9
    bound_slack_m: float = 1e-6
    bound_slack_rel: float = 1e-9
    dmax_m: float = 5000.0
    bucket_width_m: float = 10.0
    delta_compaction_min: int = 20_000
    delta_compaction_ratio: float = 0.05
    topk_window: int = 10_000
    normalize_keywords: bool = True
    # --- runtime resilience ---
    service_max_log_bytes: int = 2 * 1024**3
    service_snapshot_retry_s: float = 1.0
    service_snapshot_retry_max_s: float = 60.0
    service_probe_interval_s: float = 1.0


DEFAULTS = Settings()


def shared_data_candidates() -> list[Path]:
    """Folders searched, in order, for the real data sets.

    ``ROADPUBSUB_SHARED_DATA`` when set; else ``shared/data`` and ``../shared/data`` below
    the current directory, then ``../shared/data`` beside the source checkout (an editable
    install). A non-editable install lives in site-packages, so the working directory is
    what finds the data there.
    """
    env = os.environ.get("ROADPUBSUB_SHARED_DATA")
    if env:
        return [Path(env)]
    cwd = Path.cwd()
    checkout = Path(__file__).resolve().parent.parent
    found: list[Path] = []
    for folder in (cwd / "shared" / "data", cwd.parent / "shared" / "data",
                   checkout.parent / "shared" / "data"):
        if folder not in found:
            found.append(folder)
    return found


def shared_data_dir() -> Path:
    """Folder of the real data sets: the first of :func:`shared_data_candidates` that exists.

    When none exists, the first candidate is returned; callers check and name
    :func:`shared_data_candidates` in their message.
    """
    candidates = shared_data_candidates()
    for folder in candidates:
        if folder.is_dir():
            return folder
    return candidates[0]


def shared_data_hint() -> str:
    """Where the shared data was looked for, and how to point at it (for error hints)."""
    looked = ", ".join(str(p) for p in shared_data_candidates())
    return (f"looked in {looked}; set ROADPUBSUB_SHARED_DATA to the folder holding text/ "
            "and dimacs/, or run from the folder beside it")
