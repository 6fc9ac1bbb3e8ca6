"""EIA against its verification floor on the two dense workloads, in one run.

For each dense workload (:func:`roadpubsub.index.workload.hotspot`, one wide crowd at the centre;
:func:`roadpubsub.index.workload.hotspots`, tight crowds around a few spots with alpha and tau over
their whole range) it builds the EIA index and times, in turns over ``repeats`` rounds,
EIA on one thread, EIA on ``threads`` threads and the floor (one search per message that
already knows the deliveries, :meth:`roadpubsub.pruning.indexed.IndexMatcher.verification_floor`),
then reports the medians and the ratios. With ``phases`` it also times one thread's
matching stopped after each phase, in the matcher's own compiled loop
(:meth:`roadpubsub.pruning.indexed.IndexMatcher.phase_seconds`: the candidates; their text
similarity and verification limits; the search, scoring and output rows), CPU time, the
fastest of three.

Run: ``python -m roadpubsub.bench.floor --subscriptions 1000000 --messages 200 --repeats 5``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from roadpubsub.index.eia import EnhancedIndex
    from roadpubsub.index.model import Messages

__all__ = ["run_floor"]


def _median(values: list[float]) -> float:
    return float(np.median(np.asarray(values)))


def _one_workload(name: str, index: EnhancedIndex, messages: Messages, *, threads: int,
                  repeats: int, phases: bool) -> dict[str, Any]:
    from roadpubsub.pruning.indexed import IndexMatcher

    one = IndexMatcher(index, threads=1)
    many = IndexMatcher(index, threads=threads)
    for m in (one, many):
        m.match(messages.take(np.arange(min(len(messages), 16 * m.threads + 1))))
    d1 = one.match(messages)
    one.verification_floor(messages, d1)  # compile outside the timing
    t_one: list[float] = []
    t_many: list[float] = []
    t_floor: list[float] = []
    # CPU time of this thread too: on a machine other processes share, it leaves out
    # the time the one-thread matcher and the floor waited for a core.
    c_one: list[float] = []
    c_floor: list[float] = []
    agree = True
    for _ in range(repeats):
        c0, t0 = time.thread_time(), time.perf_counter()
        d1 = one.match(messages)
        t_one.append(time.perf_counter() - t0)
        c_one.append(time.thread_time() - c0)
        t0 = time.perf_counter()
        dn = many.match(messages)
        t_many.append(time.perf_counter() - t0)
        agree = agree and all(np.array_equal(getattr(d1, c), getattr(dn, c))
                              for c in ("message_id", "subscription_id", "distance", "score"))
        seconds, settled = one.verification_floor(messages, d1)
        t_floor.append(seconds)
        c_floor.append(one.verification_floor(messages, d1, clock=time.thread_time)[0])
    assert one.stats is not None
    totals = one.stats.totals()
    k = len(messages)
    s1, sn, sf = _median(t_one), _median(t_many), _median(t_floor)
    doc: dict[str, Any] = {
        "workload": name, "messages": k, "subscriptions": len(index.subs),
        "deliveries_per_message": round(len(d1) / k, 1),
        "candidates_per_message": round(totals["candidates"] / k, 1),
        "candidates_verified_per_message": round(totals["candidates_verified"] / k, 1),
        "settled_per_message": round(totals["vertices_settled"] / k, 1),
        "floor_settled_per_message": round(settled / k, 1),
        "msg_per_s": {"eia_1thread": round(k / s1, 1), f"eia_{threads}threads": round(k / sn, 1),
                      "floor": round(k / sf, 1)},
        "runs_s": {"eia_1thread": [round(t, 4) for t in t_one],
                   f"eia_{threads}threads": [round(t, 4) for t in t_many],
                   "floor": [round(t, 4) for t in t_floor]},
        "eia_1thread_over_floor": round(s1 / sf, 3),
        "cpu_ms_per_message": {"eia_1thread": round(1e3 * _median(c_one) / k, 4),
                               "floor": round(1e3 * _median(c_floor) / k, 4)},
        "eia_1thread_over_floor_cpu": round(_median(c_one) / _median(c_floor), 3),
        "threads_speedup": round(s1 / sn, 3),
        "agree_1_and_many_threads": bool(agree),
    }
    if phases:
        runs = [one.phase_seconds(messages) for _ in range(3)]
        ph = {name: min(r[name] for r in runs) for name in runs[0]}
        whole = _median(c_one)
        doc["phases_cpu_ms_per_message"] = {
            "candidates": round(1e3 * ph["candidates"] / k, 4),
            "tsim_and_limits": round(1e3 * (ph["limits"] - ph["candidates"]) / k, 4),
            "search_score_output": round(1e3 * (ph["all"] - ph["limits"]) / k, 4),
            "assembly_and_rest": round(1e3 * (whole - ph["all"]) / k, 4),
            "whole_1thread": round(1e3 * whole / k, 4),
            "floor": round(1e3 * _median(c_floor) / k, 4),
        }
    return doc


def run_floor(*, n_subscriptions: int = 1_000_000, n_messages: int = 200, repeats: int = 5,
              threads: int = 2, seed: int = 0, workloads: tuple[str, ...] = ("dense",
                                                                               "hotspots"),
              phases: bool = True, network: str | None = None) -> dict[str, Any]:
    """EIA (1 and ``threads`` threads) and the floor on the dense workloads named in
    ``workloads`` (``dense``: :func:`roadpubsub.index.workload.hotspot` as the throughput suite's
    ``--dense``; ``hotspots``: :func:`roadpubsub.index.workload.hotspots`), in one run."""
    from roadpubsub.bench.workloads import prepare
    from roadpubsub.index.eia import EnhancedIndex
    from roadpubsub.index.workload import Workload, hotspot, hotspots
    from roadpubsub.progress import Steps

    steps = Steps(3, quiet=True)
    prep = prepare(network, None, None, None, None, steps)
    subs, msgs, weights = prep.source.generate(prep.network, n_subscriptions=n_subscriptions,
                                               n_messages=n_messages, seed=seed)
    base = Workload(subs, msgs, weights)
    doc: dict[str, Any] = {"load_before": os.getloadavg(), "results": []}
    for name in workloads:
        if name == "dense":
            wl = hotspot(base, prep.network, share=0.5, radius_m=3000.0, seed=seed)
        elif name == "hotspots":
            wl = hotspots(base, prep.network, seed=seed)
        else:
            msg = f"unknown workload {name!r}"
            raise ValueError(msg)
        t0 = time.perf_counter()
        index = EnhancedIndex(prep.spatial, wl.subscriptions, weights, dmax_m=prep.dmax_m)
        built = time.perf_counter() - t0
        res = _one_workload(name, index, wl.messages, threads=threads, repeats=repeats,
                            phases=phases)
        res["build_s"] = round(built, 2)
        doc["results"].append(res)
        print(json.dumps(res), file=sys.stderr, flush=True)
    doc["load_after"] = os.getloadavg()
    return doc


def main(argv: list[str] | None = None) -> int:
    """Command line: prints the JSON document."""
    p = argparse.ArgumentParser(prog="python -m roadpubsub.bench.floor",
                                description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--subscriptions", type=int, default=1_000_000)
    p.add_argument("--messages", type=int, default=200)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", choices=("dense", "hotspots"), default=None)
    p.add_argument("--no-phases", action="store_true")
    p.add_argument("--network", default=None,
                   help="network file (default: the project's default network, Rome with "
                        "the shared data)")
    args = p.parse_args(argv)
    doc = run_floor(n_subscriptions=args.subscriptions, n_messages=args.messages,
                    repeats=args.repeats, threads=args.threads, seed=args.seed,
                    workloads=(args.only,) if args.only else ("dense", "hotspots"),
                    phases=not args.no_phases, network=args.network)
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
