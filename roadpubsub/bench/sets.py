"""Route and area subscriptions next to point ones: throughput, candidates, memory (issue 32).

:func:`run_sets_bench` builds one workload on a network (default Rome, DIMACS): point
threshold subscriptions, routes of 2-20 km along shortest paths between random places
(the way real trips run) and square areas, all with the generator's keywords, alpha and
tau; messages uniform over the network, a share of them on the routes. It times

* ``points``: the one matcher (:class:`~roadpubsub.pruning.mixed.MixedMatcher`, EIA) on the point
  subscriptions alone;
* ``sets``: the same matcher on points plus routes and areas (the set index of
  :mod:`roadpubsub.pruning.set_matchers`);
* ``reference``: the reference matchers (``index="brute"`` with the set locations) on
  the first ``n_brute`` messages, whose deliveries must equal the indexed ones there;

and reports messages per second, candidates (sets filed under one of the message's
keywords, or always, whose cell bound is within Dmax) and verified sets per message
(before and after the score bound), candidates per delivery to a set, nodes settled per
searched message, and the set index's memory.
Not a test: a measurement, run by hand (``python -c "from roadpubsub.bench.sets import
run_sets_bench; print(run_sets_bench())"``).
"""

from __future__ import annotations

import os
import resource
import time
from typing import Any

import numpy as np

__all__ = ["run_sets_bench"]


def _fast_routes(net: Any, n: int, *, min_m: float, max_m: float, per_source: int,
                 rng: np.random.Generator) -> list[Any]:
    """``n`` routes of ``min_m``-``max_m`` metres of whole edges along shortest paths: one
    bounded Dijkstra (scipy) per random source node of the largest component and
    ``per_source`` targets drawn among the nodes it reaches in range (the issue's 100,000
    routes by one search each would take about 3 hours here)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import dijkstra

    from roadpubsub.roadnet.segment_sets import SegmentSet

    adj = net.adjacency()
    tail = np.repeat(np.arange(net.n_nodes, dtype=np.int64), np.diff(adj.indptr))
    head = adj.indices.astype(np.int64)
    # The shortest arc of each (tail, head) pair: csr_matrix would sum parallel arcs.
    order = np.lexsort((adj.weights, head, tail))
    key = tail[order] * net.n_nodes + head[order]
    first = np.r_[True, key[1:] != key[:-1]]
    key, arc = key[first], order[first]
    graph = csr_matrix((adj.weights[arc], (key // net.n_nodes, key % net.n_nodes)),
                       shape=(net.n_nodes, net.n_nodes))
    labels = net.components()[1]
    main = np.flatnonzero(labels == np.bincount(labels).argmax())
    out: list[Any] = []
    while len(out) < n:
        src = int(rng.choice(main))
        dist, pred = dijkstra(graph, indices=src, limit=max_m, return_predecessors=True)
        ok = np.flatnonzero((dist >= min_m) & (dist <= max_m))
        if ok.size == 0:
            continue
        for t in rng.choice(ok, min(per_source, ok.size, n - len(out)), replace=False):
            path = [int(t)]
            while path[-1] != src:
                path.append(int(pred[path[-1]]))
            nodes = np.array(path[::-1], dtype=np.int64)
            edges = adj.arc_edge[arc[np.searchsorted(key, nodes[:-1] * net.n_nodes
                                                     + nodes[1:])]]
            out.append(SegmentSet.of(net, edges, np.zeros(edges.size),
                                     net.edge_length[edges], kind="route",
                                     node_paths=[nodes]))
    return out


def _median_time(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def run_sets_bench(*, network: str | None = None, n_points: int = 100_000,
                   n_routes: int = 1_000, n_areas: int = 100, n_messages: int = 2_000,
                   n_brute: int = 100, on_routes: float = 0.2, dmax_m: float | None = None,
                   area_half_m: tuple[float, float] = (300.0, 1500.0),
                   route_km: tuple[float, float] = (2.0, 20.0), repeats: int = 3,
                   routes_per_source: int = 1, seed: int = 0,
                   quiet: bool = False) -> dict[str, Any]:
    """Measure matching with route and area subscriptions (module docstring).

    Parameters
    ----------
    network
        A network file, or None: Rome (:func:`~roadpubsub.networks.resolve_network`).
    n_points, n_routes, n_areas
        Point subscriptions, routes and areas (threshold kind).
    n_messages, n_brute
        Messages matched by the indexes, and the prefix the reference matches.
    on_routes
        Share of the messages placed on a route's piece.
    dmax_m
        Dmax in metres (None: the network's default, :func:`~roadpubsub.networks.auto_dmax`).
    area_half_m
        Range of an area's half side in metres.
    route_km
        Range of a route's length in kilometres.
    repeats
        Timed runs of each indexed matcher (median), after one cold pass each (timed
        apart: the first match of a fresh process, kernels loaded from numba's cache).
    routes_per_source
        1: routes between random places (``random_routes``, one search each); more: whole
        edges from a random node to that many random nodes in range, one search per
        source (:func:`_fast_routes`; for 100,000 routes).

    Returns
    -------
    dict
        ``workload`` (counts, route and area sizes), ``messages_per_second`` per method,
        ``ratios``, ``set_work`` (per message: candidates, verified, settled),
        ``memory_bytes`` (set index, per set), ``agree`` (indexed == reference on the
        reference's messages), ``seconds`` (build and setup).
    """
    from pyproj import Transformer

    from roadpubsub.bench.workloads import prepare
    from roadpubsub.index.kinds import SubscriptionSet
    from roadpubsub.index.model import Messages
    from roadpubsub.progress import Steps
    from roadpubsub.pruning.mixed import MixedMatcher
    from roadpubsub.pruning.set_locations import SetLocations
    from roadpubsub.pruning.set_matchers import PointsAndSets, SetThresholdMatcher
    from roadpubsub.roadnet.errors import InvalidLocationError
    from roadpubsub.roadnet.locations import EdgePoints, point_xy
    from roadpubsub.roadnet.segment_sets import SegmentSet, area_from_geojson, random_routes

    load_start = [round(v, 2) for v in os.getloadavg()]
    steps = Steps(7, quiet=quiet)
    prep = prepare(network, None, None, None, dmax_m, steps)
    net, spatial, dmax = prep.network, prep.spatial, prep.dmax_m
    rng = np.random.default_rng(seed)
    n_sets = n_routes + n_areas
    with steps.step("workload", "points, routes, areas and messages") as info:
        subs, msgs, weights = prep.source.generate(
            net, n_subscriptions=n_points + n_sets, n_messages=n_messages, seed=seed)
        labels = net.components()[1]
        main = np.flatnonzero(labels[net.edge_u] == np.bincount(labels).argmax())

        def place(k: int) -> EdgePoints:
            e = rng.choice(main, k)
            return EdgePoints.of(e, rng.random(k) * net.edge_length[e])

        t0 = time.perf_counter()
        if routes_per_source > 1:
            routes = _fast_routes(net, n_routes, min_m=route_km[0] * 1000,
                                  max_m=route_km[1] * 1000, per_source=routes_per_source,
                                  rng=rng)
        else:
            routes = [r for r, _ in random_routes(net, n_routes, seed=seed,
                                                  min_m=route_km[0] * 1000,
                                                  max_m=route_km[1] * 1000)]
        route_s = time.perf_counter() - t0
        to_ll = Transformer.from_crs(net.crs, "EPSG:4326", always_xy=True)
        areas: list[SegmentSet] = []
        while len(areas) < n_areas:
            xy = point_xy(net, place(1))[0]
            h = rng.uniform(*area_half_m)
            ring = [to_ll.transform(xy[0] + dx, xy[1] + dy)
                    for dx, dy in ((-h, -h), (h, -h), (h, h), (-h, h), (-h, -h))]
            try:
                areas.append(area_from_geojson(net, {"type": "Polygon",
                                                     "coordinates": [ring]}))
            except InvalidLocationError:
                continue
        sets = routes + areas
        # A share of the messages on a route's piece.
        k = int(on_routes * n_messages)
        pick = rng.integers(0, n_routes, k) if n_routes else np.empty(0, np.int64)
        piece = [int(rng.integers(0, len(routes[i]))) for i in pick]
        e = np.array([routes[i].edge[j] for i, j in zip(pick, piece, strict=True)], np.int64)
        o = np.array([routes[i].start[j] + rng.random() * (routes[i].end[j]
                                                             - routes[i].start[j])
                      for i, j in zip(pick, piece, strict=True)])
        pts = msgs.points
        medge, moff = pts.edge.astype(np.int64).copy(), pts.offset.copy()
        medge[:k], moff[:k] = e, o
        msgs = Messages(msgs.ids, EdgePoints.of(medge, moff), msgs.kw_ptr, msgs.kw_terms)
        point_subs = subs.take(np.arange(n_points))
        loc = SetLocations.of(np.arange(n_points, n_points + n_sets), sets)
        info["note"] = f"{len(routes)} routes, {len(areas)} areas"
    lengths = np.array([s.length_m for s in routes])
    pieces = np.array([len(s) for s in sets])
    out: dict[str, Any] = {
        "network": str(prep.path.name), "nodes": net.n_nodes, "edges": net.n_edges,
        "directed": bool(net.directed), "cells": prep.cells["count"], "dmax_m": dmax,
        "workload": {"points": n_points, "routes": len(routes), "areas": len(areas),
                     "messages": n_messages, "messages_on_routes": k,
                     "route_km": {"min": round(float(lengths.min()) / 1000, 2),
                                  "median": round(float(np.median(lengths)) / 1000, 2),
                                  "max": round(float(lengths.max()) / 1000, 2)}
                     if lengths.size else None,
                     "pieces_per_set": {"median": float(np.median(pieces)),
                                        "max": int(pieces.max())},
                     "route_seconds": round(route_s, 2)},
        "seconds": {}, "messages_per_second": {},
    }
    with steps.step("build", "the point-only and the mixed matcher") as info:
        t0 = time.perf_counter()
        only = MixedMatcher.build(net, SubscriptionSet.only_threshold(point_subs), weights,
                                  dmax_m=dmax, spatial=spatial)
        t1 = time.perf_counter()
        mixed = MixedMatcher.build(net, SubscriptionSet.only_threshold(subs), weights,
                                   dmax_m=dmax, spatial=spatial, threshold_sets=loc)
        t2 = time.perf_counter()
        out["seconds"].update(build_points=round(t1 - t0, 3), build_points_and_sets=round(
            t2 - t1, 3))
        assert isinstance(mixed.threshold, PointsAndSets)
        set_matcher = mixed.threshold.sets
        assert isinstance(set_matcher, SetThresholdMatcher)
        # One cold pass each (kernels loaded from the cache, arrays first touched), timed
        # apart from the warm runs.
        cold = {}
        for name, fn in (("points", lambda: only.deliver(msgs)),
                         ("points_and_sets", lambda: mixed.deliver(msgs)),
                         ("sets_alone", lambda: set_matcher.match(msgs))):
            t0 = time.perf_counter()
            fn()
            cold[name] = round(n_messages / (time.perf_counter() - t0), 1)
        out["cold_messages_per_second"] = cold
        set_matcher.stats = dict.fromkeys(set_matcher.stats, 0)
    with steps.step("match", "timing the indexed matchers") as info:
        out["messages_per_second"]["points"] = round(
            n_messages / _median_time(lambda: only.deliver(msgs), repeats), 1)
        got: list[Any] = []
        out["messages_per_second"]["points_and_sets"] = round(
            n_messages / _median_time(lambda: got.append(mixed.deliver(msgs)), repeats), 1)
        st = {k: v / repeats for k, v in set_matcher.stats.items()}
        alone: list[Any] = []
        out["messages_per_second"]["sets_alone"] = round(
            n_messages / _median_time(lambda: alone.append(set_matcher.match(msgs)),
                                      repeats), 1)
        sets_only = alone[-1]
        info["note"] = f"{len(got[-1]):,} deliveries"
    with steps.step("reference", f"the reference on {n_brute} messages") as info:
        ref = MixedMatcher.build(net, SubscriptionSet.only_threshold(subs), weights,
                                 dmax_m=dmax, index="brute", threshold_sets=loc)
        head = msgs.take(np.arange(min(n_brute, n_messages)))
        t0 = time.perf_counter()
        want = ref.deliver(head)
        ref_s = time.perf_counter() - t0
        out["messages_per_second"]["reference"] = round(len(head) / ref_s, 1)
        have = mixed.deliver(head)
        out["agree"] = bool(
            have.pairs() == want.pairs()
            and np.array_equal(have.distance, want.distance)
            and np.array_equal(have.score, want.score))
        info["note"] = f"agree: {out['agree']}"
    mps = out["messages_per_second"]
    out["ratios"] = {
        "points_and_sets_over_points": round(mps["points_and_sets"] / mps["points"], 3),
        "points_and_sets_over_reference": round(mps["points_and_sets"] / mps["reference"], 1),
    }
    set_ids = set(subs.ids[n_points:].tolist())
    delivered_to_sets = int(np.isin(got[-1].subscription_id, list(set_ids)).sum())
    out["set_work"] = {
        "candidates_per_message": round(st["candidates"] / n_messages, 2),
        "verified_per_message": round(st["verified"] / n_messages, 2),
        "searched_messages_share": round(st["searches"] / n_messages, 3),
        "settled_per_search": round(st["settled"] / max(st["searches"], 1), 1),
        "deliveries_to_sets_per_message": round(delivered_to_sets / n_messages, 2),
        "candidates_per_delivery": round(st["candidates"] / max(delivered_to_sets, 1), 2),
        "set_deliveries": len(sets_only),
    }
    nbytes = set_matcher.verifier.nbytes
    out["load_average"] = {"start": load_start, "end": [round(v, 2) for v in os.getloadavg()]}
    out["max_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out["memory_bytes"] = {"set_index_and_pieces": nbytes,
                           "exits": set_matcher.verifier.exits.nbytes,
                           "per_set": round(nbytes / max(n_sets, 1), 1),
                           "cell_postings": set_matcher.verifier.index.nbytes,
                           "keyword_postings": set_matcher.term_postings.nbytes,
                           "pieces": int(pieces.sum())}
    return out
