"""Compile (or load) the live service's hot kernels before it first answers.

:func:`roadpubsub.roadnet.jit.preload_kernels` loads what the kernel cache holds; on a
first start with an empty cache (a fresh install, a new version) the kernels would instead
compile at the first events, for a minute or more while the events wait.
:func:`warm_kernels` runs the hot paths once on a made-up message and move, without
changing anything: the location of a move, a move of no subscription (the lookups and
writes of the index's move), the limits a move computes for its subscription (DNlimit, Eq.
7, and the wildcard flag, Eq. 8: with an index loaded from a file nothing else compiles
them), LAP (a compaction's rebuild: the first move of a fleet once waited 1.2-1.7 s for it),
the matching of a message, every kind's subscribe, move, publish and unsubscribe on
throwaway copies (a first publish with boolean and top-k subscriptions waited 22 s for
their kernels), and builds the route and area matchers
(:meth:`~roadpubsub.service.live_sets.LiveSets.matchers`: about 0.6 s per 1,000 routes on
Rome). With a warm cache and no routes it takes about 0.3 s on Rome at 1M subscriptions.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["warm_kernels"]


def warm_kernels(state: Any, parser: Any) -> float:
    """Locate one move and match one message against ``state``'s index, and run every
    kind's events on throwaway copies (nothing of the state is applied, logged or
    answered); returns the seconds it took. Any failure is ignored: the first real event
    then compiles what is missing."""
    import numpy as np

    from roadpubsub.index.limits import location_aware_prefixes, subscription_limits
    from roadpubsub.index.model import Messages, Subscriptions
    from roadpubsub.roadnet.locations import EdgePoints

    t0 = time.perf_counter()
    try:
        net = state.index.network
        terms = state.index.weights.terms
        if not net.n_edges or not len(terms):
            return 0.0
        where = {"u": int(net.node_ids[net.edge_u[0]]), "v": int(net.node_ids[net.edge_v[0]]),
                 "offset": 0.0}
        parser.moves([{"id": 0, **where}])
        index = state.index
        # a move of no subscription: its lookups, facts and writes compile (the first move
        # of a first start waited 2.9 s for them on Rome) and nothing changes
        index.move(np.empty(0, np.int64), EdgePoints.of([], []))
        subscription_limits(np.full(1, 0.5), np.full(1, 0.5), dmax_m=index.dmax_m,
                            tolerance=index.tolerance)
        # LAP too: a compaction rebuilds the index with it, and compiling then would hold
        # the GIL for seconds in the middle of the load
        one = Subscriptions(np.zeros(1, np.int64), EdgePoints.of([0], [0.0]), np.full(1, 0.5),
                            np.full(1, 0.5), np.array([0, 1], np.int64), np.zeros(1, np.int32))
        location_aware_prefixes(one, index.weights.weights, index.weights.rank(),
                                dmax_m=index.dmax_m, tolerance=index.tolerance)
        batch = parser.messages([{"id": k, **where, "keywords": [terms[0]]} for k in (0, 1)])
        messages = Messages.from_rows(ids=batch.ids, points=batch.points,
                                      keywords=batch.keywords, weights=state.index.weights)
        # two messages: a group's Hilbert order compiles too (one has nothing to sort)
        state.matcher.match(messages)
        _warm_on_copies(state, messages.take(np.arange(1)))
        if len(state.sets):  # routes and areas: their whole build, not at the first publish
            state.sets.matchers()
    except Exception:  # an optimisation only
        pass
    return time.perf_counter() - t0


def _warm_on_copies(state: Any, messages: Any) -> None:
    """Every kind's subscribe, move, publish and unsubscribe, on throwaway indexes of one
    made-up subscription each (the state's own cells and weights: the same compiled
    signatures), so that nothing of the state changes. On a first start they compiled at
    the first such event instead: a first publish with boolean and top-k subscriptions
    live waited 22 s on Rome, a first unsubscribe 0.6 s."""
    import numpy as np

    from roadpubsub.index.kinds import BooleanSubscriptions, TopkSubscriptions
    from roadpubsub.index.model import Subscriptions
    from roadpubsub.pruning.deliveries import Deliveries
    from roadpubsub.pruning.live_kinds import LiveBoolean
    from roadpubsub.pruning.live_topk import LiveTopk
    from roadpubsub.service.answers import deliveries_bytes

    index = state.index
    spatial, weights, dmax = index.spatial, index.weights, index.dmax_m
    at = messages.points  # one point of the network, holding keyword id 0
    ptr, terms = np.array([0, 1], np.int64), np.zeros(1, np.int32)
    one = np.ones(1)

    def ids(i: int) -> Any:
        return np.array([i], np.int64)

    def threshold(i: int) -> Any:
        return Subscriptions(ids(i), at, one * 0.5, one * 0.25, ptr, terms)

    def boolean_row(i: int) -> Any:
        return BooleanSubscriptions(ids(i), at, one * dmax, ptr, terms)

    def topk_row(i: int) -> Any:
        return TopkSubscriptions(ids(i), at, one * 0.5, np.full(1, 2), ptr, terms)

    # the threshold index: a subscribe (to the delta), its compaction, a move of a slot and
    # of a delta row, an unsubscribe of each
    tiny = type(index)(spatial, threshold(1), weights, dmax_m=dmax)
    tiny.subscribe(threshold(2))
    tiny.compact()
    tiny.subscribe(threshold(3))
    tiny.move(np.array([1, 3], np.int64), at[np.zeros(2, np.int64)])
    tiny.unsubscribe(np.array([2, 3], np.int64))
    # boolean: matched from its base and from its delta, moved, removed
    boolean = LiveBoolean(spatial, weights, dmax_m=dmax, subs=boolean_row(4))
    boolean.match(messages)
    boolean.add(boolean_row(5))
    boolean.move(ids(4), at)
    found = boolean.match(messages)
    boolean.remove(np.array([4, 5], np.int64))
    # top-k: pushed, read, subscribed to, moved, withdrawn, removed
    topk = LiveTopk(spatial, weights, dmax_m=dmax, window=state.topk.window,
                    subs=topk_row(6))
    topk.push(messages)
    topk.results(ids(6))
    topk.add(topk_row(7))
    topk.move(ids(7), at)
    topk.push(messages)
    topk.withdraw(ids(6))
    topk.remove(ids(7))
    # an answer's deliveries, with and without their sequence numbers
    rows = found if len(found) else Deliveries(ids(0), ids(1), one, one)
    deliveries_bytes(rows)
    deliveries_bytes(rows, np.arange(len(rows), dtype=np.int64))
