"""Benchmark of the boolean range and top-k subscription kinds against their references.

``python -m roadpubsub.bench_kinds [--network rome.gr.gz] [--json out.json]``

One run, one machine, both methods on the same inputs (so ratios hold under shared CPU):

* boolean range: ``--boolean-subs`` subscriptions (default 1,000,000) on uniform points
  with 1-3 keywords of one real tweet each, radii uniform in 500 m - 5 km, messages of
  5-25 keywords of real tweets. The index matches ``--boolean-messages`` (with its
  threads and with one), the reference the first ``--boolean-reference`` of them, in
  ``--boolean-rounds`` interleaved slices; their deliveries must agree exactly. The
  floor is one search per message to its known deliveries (one thread): what no pruning
  goes below.
* top-k: ``--topk-subs`` subscriptions (default 100,000, k = 5), window W (default
  10,000), a stream of W + ``--topk-steady`` messages. Both matchers process the fill
  (the first W messages, nothing expires); the index then all steady messages, the
  reference the first ``--topk-reference-steady`` of them (at W = 10,000 it re-scores the
  window for every top-k member that expires: seconds per message). Events must be
  identical on what both processed; rates are given for the fill and the steady state,
  by wall clock and by this process's CPU time.

Load average is recorded before and after (other processes share the cores).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from typing import Any

import numpy as np

from roadpubsub.index.kinds import BooleanSubscriptions, TopkSubscriptions
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.workload import generate_workload
from roadpubsub.pruning.boolean import BooleanIndexMatcher
from roadpubsub.pruning.kinds_reference import BooleanBruteMatcher, TopkBruteMatcher
from roadpubsub.pruning.topk import TopkIndexMatcher
from roadpubsub.pruning.topk_events import TopkEvents
from roadpubsub.roadnet.io import load_network
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.settings import DEFAULTS, shared_data_dir

__all__ = ["boolean_benchmark", "main", "topk_benchmark"]


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def boolean_benchmark(network: RoadNetwork, spatial: SpatialIndex, *, n_subs: int,
                      n_messages: int, n_reference: int, dmax_m: float = DEFAULTS.dmax_m,
                      seed: int = 0, rounds: int = 10) -> dict[str, Any]:
    """Boolean range: index vs reference rates and the check that they agree.

    Interleaved, so that every method sees the same load on a shared machine: the
    messages are cut into ``rounds`` slices, and in each round the index matches its
    slice with its threads and again with one, the verification floor (one search per
    message to its known deliveries, one thread) runs on it, and the reference matches
    the slice's first messages (``n_reference`` in all). Rates are messages over
    the summed times; ``speedup_rounds`` gives each round's ratio.
    """
    t0 = time.perf_counter()
    wl = generate_workload(network, n_subscriptions=n_subs, n_messages=n_messages, seed=seed)
    s = wl.subscriptions
    rng = np.random.default_rng(seed)
    # 1-3 keywords: each row keeps a prefix of its (random) tweet keyword subset.
    keep = np.minimum(np.diff(s.kw_ptr), rng.integers(1, 4, len(s)))
    rows = np.repeat(np.arange(len(s)), keep)
    starts = np.repeat(s.kw_ptr[:-1], keep)
    within = np.arange(rows.size) - np.repeat(np.cumsum(keep) - keep, keep)
    terms = s.kw_terms[starts + within]
    ptr = np.zeros(len(s) + 1, dtype=np.int64)
    np.cumsum(keep, out=ptr[1:])
    radius = rng.uniform(500.0, 5000.0, len(s))
    subs = BooleanSubscriptions(s.ids, s.points, radius, ptr, terms)
    t_gen = time.perf_counter()
    index = BooleanIndexMatcher(network, subs, wl.weights, dmax_m=dmax_m, spatial=spatial)
    t_build = time.perf_counter()
    msgs = wl.messages
    ref = BooleanBruteMatcher(network, subs, wl.weights, dmax_m=dmax_m)
    warm = msgs.take(np.arange(min(20, n_messages)))
    index.verification_floor(warm, index.match(warm))  # compile outside the timing
    ref.match(msgs.take(np.arange(min(2, n_messages))))
    index.stats = dict.fromkeys(index.stats, 0)
    ref.stats = dict.fromkeys(ref.stats, 0)
    threads = index.threads
    cuts = np.linspace(0, n_messages, rounds + 1).astype(np.int64)
    ref_cuts = np.linspace(0, n_reference, rounds + 1).astype(np.int64)
    spent = {"index": 0.0, "one": 0.0, "floor": 0.0, "reference": 0.0}
    per_round: list[float] = []
    floor_settled = 0
    same = True
    n_deliveries = 0
    load_start = _load()
    for k in range(rounds):
        part = msgs.take(np.arange(cuts[k], cuts[k + 1]))
        index.threads = threads
        t1 = time.perf_counter()
        got = index.match(part)
        t_index = time.perf_counter() - t1
        index.threads = 1
        t2 = time.perf_counter()
        index.match(part)
        spent["one"] += time.perf_counter() - t2
        seconds, settled = index.verification_floor(part, got)
        head = part.take(np.arange(ref_cuts[k + 1] - ref_cuts[k]))  # within the slice
        t3 = time.perf_counter()
        want = ref.match(head)
        t_ref = time.perf_counter() - t3
        spent["index"] += t_index
        spent["floor"] += seconds
        spent["reference"] += t_ref
        floor_settled += settled
        n_deliveries += len(got)
        per_round.append((part.ids.size / t_index) / (head.ids.size / t_ref))
        mine = np.isin(got.message_id, head.ids)
        same = same and (np.array_equal(got.message_id[mine], want.message_id)
                         and np.array_equal(got.subscription_id[mine], want.subscription_id)
                         and np.array_equal(got.distance[mine], want.distance))
    index.threads = threads
    rate = {k: (n_reference if k == "reference" else n_messages) / v for k, v in spent.items()}
    calls = 2 * n_messages
    return {"subscriptions": n_subs, "messages_index": n_messages,
            "messages_reference": n_reference, "rounds": rounds, "dmax_m": dmax_m,
            "keywords_per_subscription": float(keep.mean()),
            "keywords_per_message": float(np.diff(msgs.kw_ptr).mean()),
            "deliveries_per_message": n_deliveries / n_messages,
            "generate_s": round(t_gen - t0, 2), "build_s": round(t_build - t_gen, 2),
            "index_threads": threads,
            "index_msg_per_s": round(rate["index"], 1),
            "index_1_thread_msg_per_s": round(rate["one"], 1),
            "reference_msg_per_s": round(rate["reference"], 2),
            "speedup": round(rate["index"] / rate["reference"], 1),
            "speedup_1_thread": round(rate["one"] / rate["reference"], 1),
            "speedup_rounds": [round(r, 1) for r in per_round],
            "speedup_rounds_median": round(float(np.median(per_round)), 1),
            "identical": bool(same),
            "floor_1_thread_msg_per_s": round(rate["floor"], 1),
            "index_1_thread_vs_floor": round(rate["floor"] / rate["one"], 2),
            "floor_settled_per_message": round(floor_settled / n_messages, 1),
            "index_candidates_per_message": round(index.stats["candidates"] / calls, 1),
            "index_postings_per_message": round(index.stats["postings"] / calls, 1),
            "index_settled_per_message": round(index.stats["settled"] / calls, 1),
            "reference_candidates_per_message": round(ref.stats["candidates"] / n_reference, 1),
            "reference_settled_per_message": round(ref.stats["settled"] / n_reference, 1),
            "load_start": load_start, "load_end": _load()}


def topk_benchmark(network: RoadNetwork, spatial: SpatialIndex, *, n_subs: int, k: int,
                   window: int, n_steady: int, dmax_m: float = DEFAULTS.dmax_m, seed: int = 0,
                   reference: bool = True, reference_steady: int | None = None,
                   reference_fill: int | None = None,
                   buffer_extra: int | None = None) -> dict[str, Any]:
    """Top-k: index vs reference rates over the fill and the steady state, events equal.

    Both matchers get the whole fill (W messages); the reference then gets only the first
    ``reference_steady`` steady messages (all when None), the index all ``n_steady``; the
    steady ratio compares per-message times over those, and the events are compared on
    what both processed. CPU seconds of this process are given beside the wall clock
    (on a shared machine the wall clock counts the other processes' turns too).

    With ``reference_fill`` = N the reference times only the first N fill messages, and
    its steady state is handed over from the index's top-k lists after the fill (the
    reference's own state: sorted (score, arrival) keys and distances per subscription,
    and the window); its steady events are then compared with the index's, which checks
    the hand-over too.
    """
    n = window + n_steady
    t0 = time.perf_counter()
    wl = generate_workload(network, n_subscriptions=n_subs, n_messages=n, seed=seed + 1)
    s = wl.subscriptions
    subs = TopkSubscriptions(s.ids, s.points, s.alpha, np.full(len(s), k, np.int64),
                             s.kw_ptr, s.kw_terms)
    t_gen = time.perf_counter()
    extra = {} if buffer_extra is None else {"buffer_extra": buffer_extra}
    index = TopkIndexMatcher(network, subs, wl.weights, dmax_m=dmax_m, window=window,
                             spatial=spatial, **extra)
    t_build = time.perf_counter()
    # Compile outside the timing: a throw-away matcher on a few rows and messages.
    warm = TopkIndexMatcher(network, subs.take(np.arange(min(50, n_subs))), wl.weights,
                            dmax_m=dmax_m, window=3, spatial=spatial, **extra)
    warm.push(wl.messages.take(np.arange(min(8, n))))
    fill, steady = wl.messages.take(np.arange(window)), wl.messages.take(np.arange(window, n))
    out: dict[str, Any] = {"subscriptions": n_subs, "k": k, "window": window,
                           "steady_messages": n_steady, "dmax_m": dmax_m,
                           "buffer_extra": index.buffer_extra,
                           "generate_s": round(t_gen - t0, 2),
                           "build_s": round(t_build - t_gen, 2), "load_before_index": _load()}
    t1, c1 = time.perf_counter(), time.process_time()
    ev_fill = index.push(fill)
    t2, c2 = time.perf_counter(), time.process_time()
    index_at_fill = _top_state(index, subs) if reference_fill is not None else None
    ev_steady = index.push(steady)
    t3, c3 = time.perf_counter(), time.process_time()
    stats = index.stats
    out.update(index_fill_msg_per_s=round(window / (t2 - t1), 1),
               index_steady_msg_per_s=round(n_steady / (t3 - t2), 1),
               index_fill_cpu_msg_per_s=round(window / (c2 - c1), 1),
               index_steady_cpu_msg_per_s=round(n_steady / (c3 - c2), 1),
               events_per_steady_message=round(len(ev_steady) / n_steady, 1),
               index_stats=stats,
               index_per_message={k_: round(v / n, 1) for k_, v in stats.items()},
               load_after_index=_load())
    if reference:
        n_ref = n_steady if reference_steady is None else min(reference_steady, n_steady)
        ref = TopkBruteMatcher(network, subs, wl.weights, dmax_m=dmax_m, window=window)
        t4, c4 = time.perf_counter(), time.process_time()
        if reference_fill is None:
            rf = ref.push(fill)
            same_fill = rf.rows() == ev_fill.rows()
            n_fill_ref = window
        else:  # a sample of the fill timed; the steady state handed over from the index
            n_fill_ref = min(reference_fill, window)
            rf = ref.push(fill.take(np.arange(n_fill_ref)))
            head_f = ev_fill.seq < n_fill_ref
            same_fill = rf.rows() == TopkEvents(*(getattr(ev_fill, f)[head_f] for f in (
                "seq", "phase", "event", "message_id", "subscription_id", "rank", "score",
                "distance"))).rows()
        t5_fill, c5_fill = time.perf_counter(), time.process_time()
        out["load_after_reference_fill"] = _load()
        if reference_fill is not None:
            ref = TopkBruteMatcher(network, subs, wl.weights, dmax_m=dmax_m, window=window)
            assert index_at_fill is not None
            ref.resume(index_at_fill, fill)
        t5, c5x = time.perf_counter(), time.process_time()
        rs = ref.push(steady.take(np.arange(n_ref)))
        t6, c6 = time.perf_counter(), time.process_time()
        c5 = c5x
        head = ev_steady.seq < window + n_ref
        same_steady = rs.rows() == TopkEvents(*(getattr(ev_steady, f)[head] for f in (
            "seq", "phase", "event", "message_id", "subscription_id", "rank", "score",
            "distance"))).rows()
        out.update(reference_steady_messages=n_ref,
                   reference_fill_messages=n_fill_ref,
                   reference_fill_msg_per_s=round(n_fill_ref / (t5_fill - t4), 2),
                   reference_steady_msg_per_s=round(n_ref / (t6 - t5), 3),
                   reference_fill_cpu_msg_per_s=round(n_fill_ref / (c5_fill - c4), 2),
                   reference_steady_cpu_msg_per_s=round(n_ref / (c6 - c5), 3),
                   identical=same_fill and same_steady,
                   load_after_reference=_load())
        for what in ("fill", "steady"):
            for clock in ("", "cpu_"):
                out[f"speedup_{what}{'_cpu' if clock else ''}"] = round(
                    out[f"index_{what}_{clock}msg_per_s"]
                    / out[f"reference_{what}_{clock}msg_per_s"], 1)
    return out


def _top_state(index: TopkIndexMatcher, subs: TopkSubscriptions
               ) -> dict[int, list[tuple[float, int, float]]]:
    """Each subscription id's top-k (score, arrival number, distance) from the index."""
    st, ptr, k = index.state, index.index.buf_ptr, index.subs.k
    out = {}
    for r, sid in enumerate(index.subs.ids.tolist()):
        base = int(ptr[r])
        out[sid] = [(float(st.b_score[base + j]), int(st.b_seq[base + j]),
                     float(st.b_dist[base + j])) for j in range(min(int(k[r]), int(st.size[r])))]
    return out


def main(argv: list[str] | None = None) -> int:
    """Run both benchmarks and print (or write) a JSON report."""
    p = argparse.ArgumentParser(prog="python -m roadpubsub.bench_kinds",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--network", default=str(shared_data_dir() / "dimacs" / "rome.gr.gz"))
    p.add_argument("--boolean-subs", type=int, default=1_000_000)
    p.add_argument("--boolean-messages", type=int, default=2000)
    p.add_argument("--boolean-reference", type=int, default=200)
    p.add_argument("--boolean-rounds", type=int, default=10)
    p.add_argument("--topk-subs", type=int, default=100_000)
    p.add_argument("--topk-k", type=int, default=5)
    p.add_argument("--window", type=int, default=DEFAULTS.topk_window)
    p.add_argument("--topk-steady", type=int, default=1000)
    p.add_argument("--dmax", type=float, default=DEFAULTS.dmax_m)
    p.add_argument("--only", choices=("boolean", "topk"), default=None)
    p.add_argument("--topk-reference-steady", type=int, default=None, metavar="N",
                   help="the reference gets the whole fill but only the first N steady "
                        "messages (default: all)")
    p.add_argument("--topk-reference-fill", type=int, default=None, metavar="N",
                   help="time the reference on the first N fill messages only and hand it "
                        "the index's state after the fill for the steady part")
    p.add_argument("--buffer-extra", type=int, default=None,
                   help="top-k buffer entries kept beyond k (default: the matcher's)")
    p.add_argument("--no-topk-reference", action="store_true",
                   help="time the top-k index alone (the reference needs hours at W=10,000 "
                        "on a shared machine)")
    p.add_argument("--json", default=None, metavar="FILE")
    args = p.parse_args(argv)
    report: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0],
                                          "platform": platform.platform()},
                              "load_before": _load(), "network": args.network}
    t0 = time.perf_counter()
    network = load_network(args.network)
    spatial = SpatialIndex.build(network)
    report["network_and_cells_s"] = round(time.perf_counter() - t0, 1)
    if args.only in (None, "boolean"):
        report["boolean"] = boolean_benchmark(
            network, spatial, n_subs=args.boolean_subs, n_messages=args.boolean_messages,
            n_reference=args.boolean_reference, dmax_m=args.dmax,
            rounds=args.boolean_rounds)
        report["load_after_boolean"] = _load()
        print(json.dumps(report["boolean"]), file=sys.stderr, flush=True)
    if args.only in (None, "topk"):
        report["topk"] = topk_benchmark(network, spatial, n_subs=args.topk_subs, k=args.topk_k,
                                        window=args.window, n_steady=args.topk_steady,
                                        dmax_m=args.dmax,
                                        reference=not args.no_topk_reference,
                                        reference_steady=args.topk_reference_steady,
                                        reference_fill=args.topk_reference_fill,
                                        buffer_extra=args.buffer_extra)
        report["load_after_topk"] = _load()
    text = json.dumps(report, indent=2)
    if args.json:
        from roadpubsub.roadnet.files import atomic_paths

        with atomic_paths(args.json) as (tmp,):
            tmp.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
