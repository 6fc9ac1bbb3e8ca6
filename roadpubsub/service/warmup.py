"""Compile (or load) the live service's hot kernels before it first answers.

:func:`roadpubsub.roadnet.jit.preload_kernels` loads what the kernel cache holds; on a first start
with an empty cache (a fresh install, a new version) the kernels would instead compile at
the first events, for a minute or more while the events wait. :func:`warm_kernels` runs
the hot paths once on a made-up message and move, without changing anything: the
location of a move, a move of no subscription (the lookups and writes of the index's
move), the limits a move computes for its subscription (LAP and DNlimit, Eq.
13: with an index loaded from a file nothing else compiles them, and the first move of a
fleet waited 1.2-1.7 s for them), and the matching of a message (the log and the other
kinds still compile at their first use), and builds the route and area matchers
(:meth:`~roadpubsub.service.live_sets.LiveSets.matchers`: about 0.6 s per 1,000 routes on
Rome). With a warm cache and no routes it takes milliseconds.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["warm_kernels"]


def warm_kernels(state: Any, parser: Any) -> float:
    """Locate one move and match one message against ``state``'s index (nothing is
    applied, logged or answered); returns the seconds it took. Any failure is ignored:
    the first real event then compiles what is missing."""
    import numpy as np

    from roadpubsub.index.limits import location_aware_prefixes
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
        one = Subscriptions(np.zeros(1, np.int64), EdgePoints.of([0], [0.0]), np.full(1, 0.5),
                            np.full(1, 0.5), np.array([0, 1], np.int64), np.zeros(1, np.int32))
        location_aware_prefixes(one, index.weights.weights, index.weights.rank(),
                                dmax_m=index.dmax_m, tolerance=index.tolerance)
        batch = parser.messages([{"id": 0, **where, "keywords": [terms[0]]}])
        state.matcher.match(Messages.from_rows(ids=batch.ids, points=batch.points,
                                               keywords=batch.keywords,
                                               weights=state.index.weights))
        if len(state.sets):  # routes and areas: their whole build, not at the first publish
            state.sets.matchers()
    except Exception:  # an optimisation only
        pass
    return time.perf_counter() - t0
