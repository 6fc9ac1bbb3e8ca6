"""Live route subscriptions that change: the cost of the first publish after a change.

The service's set store (:class:`~roadpubsub.service.live_sets.LiveSets`) answers from a
base matcher plus a delta over the rows changed since. This bench loads ``routes`` routes
of 2-20 km on a network (default Rome) into two stores, one rebuilt whole after every
change (``sync_pieces`` above every piece: the former design) and one with the default
settings, and times, ``changes`` times, a move of one route followed by the match of one
message (what a publish after a move pays), alternating the two stores; then the same
match with no change in between. The deliveries of both stores must be equal.

Run it as::

    python -m roadpubsub.bench.set_changes --routes 1000 --changes 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import numpy as np

__all__ = ["run_set_changes"]


def run_set_changes(*, network: str | None = None, routes: int = 1_000, changes: int = 20,
                    seed: int = 0) -> dict[str, Any]:
    """Time a publish after a route moved, whole rebuild against base and delta.

    Parameters
    ----------
    network
        A network file, or None: Rome.
    routes
        Live route subscriptions (threshold kind, the generator's keywords, alpha, tau).
    changes
        Moves timed per store (each followed by one message).
    seed
        Seed of the routes, keywords and messages.

    Returns
    -------
    dict
        Per store, median and maximum seconds of a move plus one message's match, and of a
        match alone; the base and delta builds; pieces; whether the deliveries agree.
    """
    from roadpubsub.bench.workloads import prepare
    from roadpubsub.index.kinds import KIND_CODES, KIND_THRESHOLD
    from roadpubsub.progress import Steps
    from roadpubsub.pruning.deliveries import Deliveries
    from roadpubsub.roadnet.segment_sets import random_routes
    from roadpubsub.service.live_sets import LiveSets

    load = [round(v, 2) for v in os.getloadavg()]
    prep = prepare(network, None, None, None, None, Steps(3, quiet=True))
    net = prep.network
    subs, msgs, weights = prep.source.generate(net, n_subscriptions=routes,
                                               n_messages=changes * 2 + 10, seed=seed)
    drawn = [r for r, _ in random_routes(net, routes + changes, seed=seed + 1)]
    ids = subs.ids.astype(np.int64)
    stores = {"whole": LiveSets(net, prep.spatial, weights, dmax_m=prep.dmax_m,
                                sync_pieces=10**15),
              "base_and_delta": LiveSets(net, prep.spatial, weights, dmax_m=prep.dmax_m)}
    kind = np.full(routes, KIND_CODES[KIND_THRESHOLD], np.int8)
    for s in stores.values():
        s.add(ids, kind, drawn[:routes], subs.kw_ptr, subs.kw_terms, subs.alpha, subs.tau,
              np.full(routes, np.nan))
        s.matchers()  # the first base, before timing (a service builds it at its start)

    def publish(store: LiveSets, i: int) -> Deliveries:
        parts = [m.match(msgs.take(np.array([i]))) for m in store.matchers() if m]
        return Deliveries.concat(parts)

    after_move: dict[str, list[float]] = {k: [] for k in stores}
    alone: dict[str, list[float]] = {k: [] for k in stores}
    agree = True
    rng = np.random.default_rng(seed)
    for c in range(changes):
        moved = np.array([ids[int(rng.integers(0, routes))]])
        got = []
        for name, s in stores.items():
            t = time.perf_counter()
            s.move(moved, [drawn[routes + c]])
            got.append(publish(s, c))
            after_move[name].append(time.perf_counter() - t)
            t = time.perf_counter()
            publish(s, changes + c)
            alone[name].append(time.perf_counter() - t)
        agree &= got[0].pairs() == got[1].pairs()
    return {"routes": routes, "pieces": int(sum(r.edge.size for r in drawn[:routes])),
            "changes": changes, "load": [load, [round(v, 2) for v in os.getloadavg()]],
            "after_move_s": {k: {"median": round(statistics.median(v), 4),
                                 "max": round(max(v), 4)} for k, v in after_move.items()},
            "match_alone_s": {k: round(statistics.median(v), 4) for k, v in alone.items()},
            "builds": {k: {"bases": s.builds, "deltas": s.delta_builds}
                       for k, s in stores.items()},
            "agree": bool(agree)}


def main(argv: list[str] | None = None) -> int:
    """Command line: print the result as JSON."""
    p = argparse.ArgumentParser(prog="python -m roadpubsub.bench.set_changes",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--network", default=None)
    p.add_argument("--routes", type=int, default=1_000)
    p.add_argument("--changes", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    print(json.dumps(run_set_changes(network=a.network, routes=a.routes, changes=a.changes,
                                     seed=a.seed), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
