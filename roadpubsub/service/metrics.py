"""Prometheus text exposition of the live service's figures (format 0.0.4).

Counters and histograms are kept here, updated by the HTTP layer on the event loop; gauges
are read from the state when ``/metrics`` is scraped. The interpreter's garbage collections
are counted by :class:`GcPauses`, installed while the service runs (every transport).
"""

from __future__ import annotations

import bisect
import gc
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["GcPauses", "Histogram", "Metrics", "rss_bytes", "thread_cpu"]

#: Latency buckets, seconds.
LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0,
                   5.0)


def rss_bytes() -> int:
    """Resident memory of this process (Linux; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def thread_cpu() -> dict[str, float]:
    """CPU seconds (user + system) of each Python thread of this process, by thread name
    (Linux /proc; empty elsewhere): the event loop, the apply thread, the log's fsyncs."""
    out: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for t in threading.enumerate():
        try:
            with open(f"/proc/self/task/{t.native_id}/stat") as fh:
                f = fh.read().rsplit(")", 1)[1].split()
        except (OSError, ValueError, IndexError):
            continue
        out[t.name] = (int(f[11]) + int(f[12])) / tick
    return out


class Histogram:
    """Cumulative buckets, a sum and a count (Prometheus semantics)."""

    def __init__(self, buckets: Iterable[float] = LATENCY_BUCKETS) -> None:
        self.bounds = tuple(buckets)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str, labels: str) -> list[str]:
        out = []
        running = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += n
            le = "+Inf" if bound == float("inf") else repr(bound)
            out.append(f'{name}_bucket{{{labels}{"," if labels else ""}le="{le}"}} {running}')
        tail = f"{{{labels}}}" if labels else ""
        out.append(f"{name}_sum{tail} {self.sum!r}")
        out.append(f"{name}_count{tail} {self.count}")
        return out


class GcPauses:
    """The interpreter's garbage collections while the service runs: count, total and
    longest pause by generation (a full collection stops every thread for as long as it
    scans the tracked objects: with a large state not frozen, a tail-latency source).

    :meth:`install` adds it to :data:`gc.callbacks`, :meth:`remove` takes it out again:
    services started and stopped in one process (tests) leave no callback behind.

    Attributes
    ----------
    count
        Collections so far, by generation (0, 1, 2).
    seconds
        Seconds spent in them, by generation.
    longest
        The longest one, seconds, by generation.
    frozen
        Objects out of every collection's scan, read at :meth:`install` (``serve``
        freezes once, before it).
    """

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.longest = [0.0, 0.0, 0.0]
        self.frozen = 0
        self._t0 = 0.0

    def install(self) -> None:
        """Start counting (once: a second call changes nothing)."""
        # counted once: gc.get_freeze_count walks the frozen objects' list, 15 ms holding
        # the GIL at 1M subscriptions, which stalled every thread at each scrape
        self.frozen = gc.get_freeze_count()
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def remove(self) -> None:
        """Stop counting (the figures so far stay)."""
        if self in gc.callbacks:
            gc.callbacks.remove(self)

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        g = int(info.get("generation", 2))
        dt = time.perf_counter() - self._t0
        self.count[g] += 1
        self.seconds[g] += dt
        self.longest[g] = max(self.longest[g], dt)

    def lines(self) -> list[str]:
        """The figures in Prometheus text."""
        out = ["# HELP roadpubsub_gc_collections_total Garbage collections by generation.",
               "# TYPE roadpubsub_gc_collections_total counter"]
        out += [f'roadpubsub_gc_collections_total{{generation="{g}"}} {self.count[g]}'
                for g in range(3)]
        out += ["# HELP roadpubsub_gc_pause_seconds_total Seconds spent in garbage "
                "collections (every thread stopped), by generation.",
                "# TYPE roadpubsub_gc_pause_seconds_total counter"]
        out += [f'roadpubsub_gc_pause_seconds_total{{generation="{g}"}} '
                f'{self.seconds[g]:.6f}' for g in range(3)]
        out += ["# HELP roadpubsub_gc_longest_pause_seconds The longest collection so far.",
                "# TYPE roadpubsub_gc_longest_pause_seconds gauge"]
        out += [f'roadpubsub_gc_longest_pause_seconds{{generation="{g}"}} '
                f'{self.longest[g]:.6f}' for g in range(3)]
        out += ["# HELP roadpubsub_gc_frozen_objects Objects out of every collection's "
                "scan (gc.freeze once the state is loaded).",
                "# TYPE roadpubsub_gc_frozen_objects gauge",
                f"roadpubsub_gc_frozen_objects {self.frozen}",
                "# HELP roadpubsub_gc_threshold The collector's thresholds by generation.",
                "# TYPE roadpubsub_gc_threshold gauge"]
        out += [f'roadpubsub_gc_threshold{{generation="{g}"}} {t}'
                for g, t in enumerate(gc.get_threshold())]
        return out


class Metrics:
    """Request latencies per event kind and HTTP error counts."""

    KINDS = ("subscribe", "unsubscribe", "move", "publish")

    def __init__(self) -> None:
        self.latency = {k: Histogram() for k in self.KINDS}
        self.errors: dict[int, int] = {}
        self.gc_pauses = GcPauses()  # installed by the app's lifespan
        # more exposition lines, e.g. the MQTT connector's (read when scraped)
        self.extra: list[Callable[[], list[str]]] = []

    def observe(self, kind: str, seconds: float) -> None:
        """One answered request of ``kind``, from arrival to durable answer."""
        self.latency[kind].observe(seconds)

    def error(self, status: int) -> None:
        """One refused request."""
        self.errors[status] = self.errors.get(status, 0) + 1

    def render(self, state: Any) -> str:
        """The exposition text, with gauges read from ``state`` (a ServiceState)."""
        out: list[str] = []

        def head(name: str, kind: str, text: str) -> None:
            out.append(f"# HELP {name} {text}")
            out.append(f"# TYPE {name} {kind}")

        head("roadpubsub_events_total", "counter",
             "Rows applied per kind since the process started (replay included).")
        for kind, n in state.counts.items():
            out.append(f'roadpubsub_events_total{{kind="{kind}"}} {n}')
        head("roadpubsub_request_seconds", "histogram",
             "Time from a request's arrival to its durable answer, per event kind.")
        for kind, h in self.latency.items():
            out.extend(h.lines("roadpubsub_request_seconds", f'kind="{kind}"'))
        head("roadpubsub_match_seconds", "histogram",
             "Time of each matcher call (one publish batch, or a run of queued publishes).")
        out.extend(state.match_seconds.lines("roadpubsub_match_seconds", ""))
        head("roadpubsub_request_errors_total", "counter", "Refused requests per HTTP status.")
        for status, n in sorted(self.errors.items()):
            out.append(f'roadpubsub_request_errors_total{{status="{status}"}} {n}')
        head("roadpubsub_subscriptions", "gauge", "Live subscriptions.")
        counts = state.subscription_count()
        out.append(f"roadpubsub_subscriptions {sum(counts.values())}")
        head("roadpubsub_subscriptions_by_kind", "gauge", "Live subscriptions by kind.")
        out += [f'roadpubsub_subscriptions_by_kind{{kind="{k}"}} {v}'
                for k, v in counts.items()]
        head("roadpubsub_deliveries_total", "counter", "Deliveries made (replay included).")
        out.append(f"roadpubsub_deliveries_total {state.delivered}")
        head("roadpubsub_compactions_total", "counter", "Index compactions (delta folded).")
        out.append(f"roadpubsub_compactions_total {state.compactions}")
        head("roadpubsub_compaction_seconds", "gauge",
             "The last background compaction's build (worker thread).")
        out.append(f"roadpubsub_compaction_seconds {state.compactor.last_seconds!r}")
        head("roadpubsub_delta_rows", "gauge", "Subscriptions in the index's delta.")
        out.append(f"roadpubsub_delta_rows {len(state.index.delta)}")
        head("roadpubsub_snapshots_total", "counter", "Snapshots completed.")
        out.append(f"roadpubsub_snapshots_total {state.snapshots.completed}")
        head("roadpubsub_snapshot_failures_total", "counter", "Snapshots that failed.")
        out.append(f"roadpubsub_snapshot_failures_total {state.snapshots.failures}")
        head("roadpubsub_snapshot_seconds", "gauge", "Duration of the last snapshot.")
        out.append(f"roadpubsub_snapshot_seconds {state.snapshots.last_seconds!r}")
        head("roadpubsub_log_bytes", "gauge", "Bytes in the write-ahead log's segments.")
        out.append(f"roadpubsub_log_bytes {state.wal.size_bytes()}")
        head("roadpubsub_log_max_bytes", "gauge",
             "The log's size limit (--max-log-bytes): events are refused past it.")
        out.append(f"roadpubsub_log_max_bytes {state.options.max_log_bytes}")
        status, _ = state.health()
        head("roadpubsub_health", "gauge",
             "1 for the service's current status (ok, degraded, failed), 0 for the others.")
        out += [f'roadpubsub_health{{status="{s}"}} {int(s == status)}'
                for s in ("ok", "degraded", "failed")]
        head("roadpubsub_recoveries_total", "counter",
             "In-process reloads of the state after a log failure (the disk came back).")
        out.append(f"roadpubsub_recoveries_total {state.recoveries}")
        head("roadpubsub_log_seq", "gauge", "Last logged sequence number.")
        out.append(f"roadpubsub_log_seq {state.wal.next_seq - 1}")
        head("roadpubsub_fsyncs_total", "counter", "fsync calls of the log (group commits).")
        out.append(f"roadpubsub_fsyncs_total {state.wal.fsyncs}")
        head("roadpubsub_recovery_seconds", "gauge", "Time the last start took to recover.")
        out.append(f"roadpubsub_recovery_seconds {state.recovery_seconds!r}")
        head("process_resident_memory_bytes", "gauge", "Resident memory of the service.")
        out.append(f"process_resident_memory_bytes {rss_bytes()}")
        out += self.gc_pauses.lines()
        for lines in self.extra:
            out += lines()
        return "\n".join(out) + "\n"
