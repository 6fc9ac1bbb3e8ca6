"""Measurements of the benchmarks: one sweep point, update and one-message latency, the
verification floor."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from roadpubsub.records import (
    MethodResult,
    brute_method,
    deliveries_agree,
    index_method,
    time_in_turns,
)

if TYPE_CHECKING:
    from roadpubsub.index.base import SubscriptionIndex
    from roadpubsub.index.model import Messages, Subscriptions
    from roadpubsub.index.spatial import SpatialIndex
    from roadpubsub.index.terms import TermWeights
    from roadpubsub.pruning.deliveries import Deliveries
    from roadpubsub.pruning.indexed import IndexMatcher

__all__ = [
    "measure_point",
    "single_message_latency",
    "update_latency",
    "warm_up",
]


def measure_point(
    spatial: SpatialIndex,
    subscriptions: Subscriptions,
    messages: Messages,
    weights: TermWeights,
    *,
    dmax_m: float,
    n_brute: int,
    repeats: int,
) -> dict[str, Any]:
    """EIA, BIA and brute force on one workload (brute on the first ``n_brute`` messages).

    Each index is built, timed ``repeats`` times (after one warm-up message) and freed
    before the next is built; brute force runs once.

    Returns
    -------
    dict
        ``methods``: one :meth:`~roadpubsub.records.MethodResult.to_dict` per method
        (``seconds`` is the median run); ``agree``: whether the three matchers deliver the
        same pairs on the brute-force messages (None when brute force was skipped).
    """
    from roadpubsub.index.bia import BasicIndex
    from roadpubsub.index.eia import EnhancedIndex
    from roadpubsub.pruning.brute import BruteMatcher
    from roadpubsub.pruning.indexed import IndexMatcher

    k = min(n_brute, len(messages))
    methods: dict[str, MethodResult] = {}
    found: dict[str, Deliveries] = {}
    for cls in (EnhancedIndex, BasicIndex):
        t0 = time.perf_counter()
        index = cls(spatial, subscriptions, weights, dmax_m=dmax_m)
        build = time.perf_counter() - t0
        matcher = IndexMatcher(index)
        matcher.match(messages.take([0]))  # allocates the matcher's scratch arrays
        results, last = time_in_turns([index_method(cls.kind, matcher, messages)], repeats)
        methods[cls.kind] = results[cls.kind]
        methods[cls.kind].build_seconds = build
        methods[cls.kind].bytes_per_subscription = index.nbytes_per_subscription()
        found[cls.kind] = last[cls.kind].deliveries
        del index, matcher, last
    agree: bool | None = None
    if k:
        t0 = time.perf_counter()
        brute = BruteMatcher(spatial.network, subscriptions, weights, dmax_m=dmax_m)
        build = time.perf_counter() - t0
        subset = messages.take(np.arange(k))
        results, last = time_in_turns([brute_method(brute, subset, chunk=k)], 1)
        methods["brute"] = results["brute"]
        methods["brute"].build_seconds = build
        agree = deliveries_agree(last["brute"].deliveries, found.values(),
                                 message_ids=subset.ids)
    return {"methods": {name: r.to_dict() for name, r in methods.items()}, "agree": agree}


def warm_up(spatial: SpatialIndex, subs: Subscriptions, msgs: Messages,
            weights: TermWeights, dmax_m: float) -> float:
    """Compile (or load) the kernels and build the lazy per-network caches once; seconds."""
    t0 = time.perf_counter()
    few_subs = subs.take(np.arange(min(len(subs), 500)))
    measure_point(spatial, few_subs, msgs.take(np.arange(min(len(msgs), 2))), weights,
                  dmax_m=dmax_m, n_brute=1, repeats=1)
    return time.perf_counter() - t0


def update_latency(index: SubscriptionIndex, matcher: IndexMatcher, subs: Subscriptions,
                   msgs: Messages, *, n: int = 100) -> dict[str, float]:
    """Median milliseconds of one-subscription updates on a built index (it is changed).

    ``subscribe``, ``unsubscribe`` and ``move`` of one subscription each (``n`` times), and
    ``subscribe_then_match``: one subscribe followed by matching one message with the same
    matcher, as an operator's stream of single events does.
    """
    from roadpubsub.index.model import Subscriptions
    from roadpubsub.roadnet.locations import EdgePoints

    rng = np.random.default_rng(0)
    k = min(n, len(subs) // 4, len(msgs))
    if k < 1:
        return {}
    fresh = int(subs.ids.max()) + 1
    rows = rng.choice(len(subs), size=4 * k, replace=False)
    new = subs.take(rows[:2 * k])
    new = Subscriptions(np.arange(fresh, fresh + 2 * k), new.points, new.alpha, new.tau,
                        new.kw_ptr, new.kw_terms)
    network = index.network
    edges = rng.integers(0, network.n_edges, k)
    moves = EdgePoints.of(edges, rng.random(k) * network.edge_length[edges])
    def subscribe_then_match(i: int) -> None:
        index.subscribe(new.take([k + i]))
        matcher.match(msgs.take([i]))

    ops: dict[str, Callable[[int], None]] = {
        "subscribe": lambda i: index.subscribe(new.take([i])),
        "unsubscribe": lambda i: index.unsubscribe(subs.ids[rows[2 * k + i:2 * k + i + 1]]),
        "move": lambda i: index.move(subs.ids[rows[3 * k + i:3 * k + i + 1]], moves[i:i + 1]),
        "subscribe_then_match": subscribe_then_match,
    }
    out = {}
    for name, op in ops.items():
        times = []
        for i in range(k):
            t0 = time.perf_counter()
            op(i)
            times.append(time.perf_counter() - t0)
        out[name] = round(1000 * statistics.median(times), 3)
    return out


def single_message_latency(matcher: IndexMatcher, msgs: Messages, count: int
                           ) -> dict[str, float]:
    """Percentiles (ms) of one-message ``match`` calls: the live service's path.

    The messages are taken apart before timing, so each timed call is the matcher alone.
    """
    k = min(count, len(msgs))
    singles = [msgs.take([i]) for i in range(k)]
    matcher.match(singles[0])
    times = []
    for one in singles:
        t0 = time.perf_counter()
        matcher.match(one)
        times.append(1000 * (time.perf_counter() - t0))
    q = np.percentile(times, [50, 90, 99, 100])
    return {"calls": k, "p50": round(float(q[0]), 4), "p90": round(float(q[1]), 4),
            "p99": round(float(q[2]), 4), "max": round(float(q[3]), 4)}
