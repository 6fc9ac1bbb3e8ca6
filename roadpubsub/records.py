"""How a matcher did on a batch of messages, and whether matchers agree.

One record, :class:`MethodResult`, serves the demo and every benchmark; one check,
:func:`deliveries_agree`, compares a matcher's deliveries with the reference's.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from roadpubsub.index.model import Messages
    from roadpubsub.pruning.brute import BruteMatcher
    from roadpubsub.pruning.deliveries import Deliveries
    from roadpubsub.pruning.indexed import IndexMatcher, MatchStats
    from roadpubsub.pruning.lanes import CallTiming

__all__ = [
    "Matched",
    "MethodResult",
    "TimedMethod",
    "brute_method",
    "deliveries_agree",
    "index_method",
    "time_in_turns",
    "timing_summary",
]

#: A progress callback: called with the number of messages just matched.
Progress = Callable[[int], None]


@dataclass
class MethodResult:
    """How one matcher did on a batch of messages.

    Attributes
    ----------
    name
        ``"eia"``, ``"bia"``, ``"brute"``, ``"eia_1thread"`` ...
    messages
        Messages matched per timed run.
    seconds_all
        Wall-clock seconds of each timed run (index build excluded, kernels warmed up).
    deliveries
        Deliveries found (None for a timing that delivers nothing itself).
    candidates
        Subscriptions verified (indexes) or scored within Dmax (brute), summed.
    counters
        Summed :class:`~roadpubsub.pruning.indexed.MatchStats` counters (indexes only).
    build_seconds
        Seconds to build the matcher's index (cells and bounds excluded), when measured.
    bytes_per_subscription
        Index bytes per subscription (indexes only).
    threads
        Threads the matcher used (indexes only).
    extra
        Further measurements of this method (e.g. ``latency_ms``, ``update_ms``), written
        into the JSON as they are.
    """

    name: str
    messages: int
    seconds_all: list[float]
    deliveries: int | None = None
    candidates: int | None = None
    counters: dict[str, int] = field(default_factory=dict)
    build_seconds: float | None = None
    bytes_per_subscription: float | None = None
    threads: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        """Median of the timed runs."""
        return float(statistics.median(self.seconds_all))

    @property
    def messages_per_second(self) -> float:
        """Matching throughput (messages per second) of the median run."""
        return self.messages / self.seconds if self.seconds > 0 else math.inf

    def per_message(self, name: str) -> float:
        """``"candidates"``, ``"deliveries"`` or a counter of :attr:`counters`, per message."""
        fixed = {"candidates": self.candidates, "deliveries": self.deliveries}
        value = fixed[name] if name in fixed else self.counters.get(name, 0)
        return (value or 0) / max(self.messages, 1)

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready values (fields that were not measured are left out)."""
        n = max(self.messages, 1)
        seconds = self.seconds
        doc: dict[str, Any] = {
            "messages": self.messages,
            "seconds": round(seconds, 6),
            "seconds_all": [round(t, 6) for t in self.seconds_all],
            "messages_per_second": (round(self.messages / seconds, 3) if seconds > 0
                                    else None),
            "ms_per_message": round(1000 * seconds / n, 4),
            "build_seconds": (round(self.build_seconds, 4)
                              if self.build_seconds is not None else None),
            "deliveries": self.deliveries,
            "candidates": self.candidates,
            "candidates_per_message": (round(self.candidates / n, 2)
                                       if self.candidates is not None else None),
            "deliveries_per_message": (round(self.deliveries / n, 2)
                                       if self.deliveries is not None else None),
            "counters": self.counters or None,
            "counters_per_message": ({k: round(v / n, 2) for k, v in self.counters.items()}
                                     or None),
            "bytes_per_subscription": (round(self.bytes_per_subscription, 1)
                                       if self.bytes_per_subscription is not None else None),
            "threads": self.threads,
        }
        return {k: v for k, v in doc.items() if v is not None} | self.extra


def deliveries_agree(reference: Deliveries, others: Iterable[Deliveries], *,
                     message_ids: npt.NDArray[np.int64] | None = None) -> bool:
    """Whether every one of ``others`` delivers exactly the pairs of ``reference``.

    Parameters
    ----------
    reference
        The reference deliveries (usually the brute-force matcher's).
    others
        Deliveries to compare; only their messages in ``message_ids`` count.
    message_ids
        Messages the reference matched (None: all of them). Deliveries are sorted by
        (message_id, subscription_id), so equal pairs means equal arrays.
    """
    for other in others:
        mid, sid = other.message_id, other.subscription_id
        if message_ids is not None:
            keep = np.isin(mid, message_ids)
            mid, sid = mid[keep], sid[keep]
        if not (np.array_equal(mid, reference.message_id)
                and np.array_equal(sid, reference.subscription_id)):
            return False
    return True


class Matched(NamedTuple):
    """What one matching run of a :class:`TimedMethod` returns."""

    deliveries: Deliveries
    candidates: int
    counters: dict[str, int]
    stats: MatchStats | None = None


@dataclass
class TimedMethod:
    """A matcher to time: ``run(progress)`` matches its ``messages`` once."""

    name: str
    messages: int
    run: Callable[[Progress | None], Matched]
    threads: int | None = None
    #: Where each run's time went (index matchers: ``IndexMatcher.last_timing``).
    timings: list[CallTiming] = field(default_factory=list)


def index_method(name: str, matcher: IndexMatcher, messages: Messages) -> TimedMethod:
    """EIA or BIA (an :class:`~roadpubsub.pruning.indexed.IndexMatcher`) on ``messages``."""

    def run(progress: Progress | None) -> Matched:
        deliveries = matcher.match(messages, progress=progress)
        stats = matcher.stats
        assert stats is not None  # set by every call
        if matcher.last_timing is not None:
            method.timings.append(matcher.last_timing)
        totals = stats.totals()
        return Matched(deliveries, int(totals["candidates"]), totals, stats)

    method = TimedMethod(name, len(messages), run, threads=matcher.threads)
    return method


def brute_method(brute: BruteMatcher, messages: Messages, *, chunk: int = 8) -> TimedMethod:
    """The brute-force reference on ``messages``, ``chunk`` messages per call."""
    from roadpubsub.pruning.deliveries import Deliveries

    def run(progress: Progress | None) -> Matched:
        parts = []
        candidates = 0
        for start in range(0, len(messages), chunk):
            part = messages.take(np.arange(start, min(len(messages), start + chunk)))
            parts.append(brute.match(part))
            assert brute.counters is not None
            candidates += int(brute.counters.candidates.sum())
            if progress is not None:
                progress(len(part))
        return Matched(Deliveries.concat(parts), candidates, {})

    return TimedMethod("brute", len(messages), run)


def time_in_turns(methods: Sequence[TimedMethod], repeats: int, *,
                  progress: Progress | None = None
                  ) -> tuple[dict[str, MethodResult], dict[str, Matched]]:
    """Time ``methods`` over ``repeats`` rounds, one run of each per round.

    The methods take turns so that a change in the host's speed during the run (this
    shared machine's memory-bound speed varies by the hour) falls on all of them rather
    than on whichever ran last. Returns the results and the last round's runs, by name.
    """
    times: dict[str, list[float]] = {m.name: [] for m in methods}
    last: dict[str, Matched] = {}
    for _ in range(repeats):
        for method in methods:
            t0 = time.perf_counter()
            last[method.name] = method.run(progress)
            times[method.name].append(time.perf_counter() - t0)
    results = {m.name: MethodResult(m.name, m.messages, times[m.name],
                                    deliveries=len(last[m.name].deliveries),
                                    candidates=last[m.name].candidates,
                                    counters=last[m.name].counters, threads=m.threads)
               for m in methods}
    for m in methods:
        if m.timings:
            results[m.name].extra["timing"] = timing_summary(m.timings)
    return results, last


def timing_summary(timings: Sequence[CallTiming]) -> dict[str, Any]:
    """Medians over runs of where a matcher's call time went (ms): the whole call, its
    serial part, and each thread's busy wall and CPU time (``CallTiming.to_dict``)."""
    docs = [t.to_dict() for t in timings]
    lanes = min(len(d["lane_busy_ms"]) for d in docs)
    return {"wall_ms": statistics.median(d["wall_ms"] for d in docs),
            "serial_ms": statistics.median(d["serial_ms"] for d in docs),
            "lane_busy_ms": [statistics.median(d["lane_busy_ms"][k] for d in docs)
                             for k in range(lanes)],
            "lane_cpu_ms": [statistics.median(d["lane_cpu_ms"][k] for d in docs)
                            for k in range(lanes)]}
