"""The live service's state with boolean range and top-k subscriptions, in process.

``python -m roadpubsub.bench._live_kinds --threshold N --boolean N --topk N --window W``
builds two service folders on Rome (fsync on, no HTTP): one with the threshold
subscriptions only, one with all three kinds, fills the top-k window, then measures in the
same run the single-message publish latency of both, and the cost of a boolean or top-k
subscribe (or move) followed by a publish, a clean stop (snapshot) and a reopen. Prints
one JSON object per folder, with the machine and its load average.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np


def _run(args: argparse.Namespace, label: str, n_bool: int, n_topk: int) -> dict[str, Any]:
    from roadpubsub.index.eia import EnhancedIndex
    from roadpubsub.index.events import MessageBatch, MoveBatch, SubscriptionBatch
    from roadpubsub.index.spatial import SpatialIndex
    from roadpubsub.index.terms import TermWeights
    from roadpubsub.index.text import read_tweet_tokens
    from roadpubsub.index.workload import generate_workload
    from roadpubsub.roadnet.io import load_network
    from roadpubsub.roadnet.settings import shared_data_dir
    from roadpubsub.service.options import ServiceOptions
    from roadpubsub.service.state import ServiceState, create_state

    data = shared_data_dir()
    net = load_network(data / "dimacs/rome.gr.gz")
    tweets = read_tweet_tokens(data / "text/airline_tweets.csv")
    n = args.threshold + n_bool + n_topk
    wl = generate_workload(net, n_subscriptions=n + 100, n_messages=3000, seed=1,
                           tweets=tweets, tau=0.5, tau_spread=0.3)
    rng = np.random.default_rng(2)
    subs, vocab = wl.subscriptions, wl.weights.terms
    mw = [[vocab[t] for t in wl.messages.keywords(i)] for i in range(len(wl.messages))]
    kinds = np.array([0] * args.threshold + [1] * n_bool + [2] * n_topk + [1, 2] * 50,
                     np.int8)

    def batch(rows: np.ndarray) -> SubscriptionBatch:
        kw: list[list[str]] = []
        radius, k = np.full(rows.size, np.nan), np.full(rows.size, np.nan)
        alpha, tau = subs.alpha[rows].copy(), subs.tau[rows].copy()
        for j, r in enumerate(rows.tolist()):
            if kinds[r] == 1:  # 1-3 keywords of a real message, radius 500 m .. Dmax
                m = mw[int(rng.integers(len(mw)))]
                kw.append(list(rng.choice(m, min(len(m), int(rng.integers(1, 4))),
                                          replace=False)))
                radius[j] = rng.uniform(500, args.dmax)
                alpha[j] = tau[j] = np.nan
            else:
                kw.append([vocab[t] for t in subs.keywords(r)])
                if kinds[r] == 2:
                    k[j], tau[j] = args.k, np.nan
        return SubscriptionBatch(subs.ids[rows], subs.points[rows], kw, alpha, tau,
                                 np.full(rows.size, np.nan), kinds[rows], radius, k)

    folder = Path(args.dir) / label
    shutil.rmtree(folder, ignore_errors=True)
    empty = generate_workload(net, n_subscriptions=0, n_messages=0, tweets=tweets)
    create_state(folder, EnhancedIndex(SpatialIndex.build(net), empty.subscriptions,
                                       TermWeights.from_idf(tweets), dmax_m=args.dmax),
                 window=args.window)
    st = ServiceState.open(folder, ServiceOptions(snapshot_every=10**9))
    out: dict[str, Any] = {"label": label, "threshold": args.threshold, "boolean": n_bool,
                           "topk": n_topk, "k": args.k, "window": args.window,
                           "dmax_m": args.dmax}
    t0 = time.perf_counter()
    live = np.arange(n)  # rows n .. n + 99 are the spare ones subscribed later
    for a in range(0, live.size, 50_000):
        st.subscribe(batch(live[a:a + 50_000]))
    out["subscribe_s"] = round(time.perf_counter() - t0, 2)
    mid = [10**12]

    def publish(i: int) -> float:
        m = i % len(mw)
        b = MessageBatch(np.array([mid[0]]), wl.messages.points[np.array([m])], [mw[m]],
                         np.array([float(mid[0])]))
        mid[0] += 1
        t = time.perf_counter()
        st.publish(b)
        return time.perf_counter() - t

    t0 = time.perf_counter()
    for i in range(args.window):
        publish(i)
    out["fill_window_s"] = round(time.perf_counter() - t0, 2)
    lat = [publish(i) for i in range(args.messages)]
    out["publish_p50_ms"] = round(1e3 * statistics.median(lat), 2)
    out["publish_p99_ms"] = round(1e3 * float(np.quantile(lat, 0.99)), 2)
    spare = iter(range(n, n + 100))

    def change(kind: int, what: str) -> float:
        res = []
        for j in range(args.changes):
            t = time.perf_counter()
            if what == "subscribe":
                r = next(r for r in spare if kinds[r] == kind)
                st.subscribe(batch(np.array([r])))
            else:
                i = int(live[kinds[live] == kind][j])
                st.move(MoveBatch(subs.ids[np.array([i])], subs.points[np.array([j])]))
            res.append(time.perf_counter() - t + publish(j))
        return round(1e3 * statistics.median(res), 1)

    if n_bool:
        out["boolean_subscribe_then_publish_ms"] = change(1, "subscribe")
        out["boolean_move_then_publish_ms"] = change(1, "move")
    if n_topk:
        out["topk_subscribe_then_publish_ms"] = change(2, "subscribe")
        out["topk_move_then_publish_ms"] = change(2, "move")
    t0 = time.perf_counter()
    st.close()
    out["close_with_snapshot_s"] = round(time.perf_counter() - t0, 2)
    t0 = time.perf_counter()
    again = ServiceState.open(folder)
    out["reopen_s"] = round(time.perf_counter() - t0, 2)
    st = again
    t0 = time.perf_counter()
    publish(0)
    out["first_publish_after_reopen_s"] = round(time.perf_counter() - t0, 2)
    again.close()
    out["load_average"] = os.getloadavg()
    return out


def main(argv: list[str] | None = None) -> int:
    """Run both folders and print their figures."""
    from roadpubsub.bench.machine import machine_info
    from roadpubsub.roadnet.settings import DEFAULTS

    p = argparse.ArgumentParser(prog="python -m roadpubsub.bench._live_kinds")
    p.add_argument("--threshold", type=int, default=100_000)
    p.add_argument("--boolean", type=int, default=100_000)
    p.add_argument("--topk", type=int, default=10_000)
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--window", type=int, default=DEFAULTS.live_topk_window)
    p.add_argument("--dmax", type=float, default=DEFAULTS.dmax_m)
    p.add_argument("--messages", type=int, default=300, help="publishes timed")
    p.add_argument("--changes", type=int, default=5, help="changes timed per kind")
    p.add_argument("--dir", default=None, help="work folder (default: a temporary one)")
    args = p.parse_args(argv)
    tmp = None
    if args.dir is None:
        tmp = tempfile.mkdtemp(prefix="live-kinds-")
        args.dir = tmp
    try:
        print(json.dumps({"machine": machine_info()}), flush=True)
        for label, nb, nt in (("threshold-only", 0, 0),
                              ("kinds", args.boolean, args.topk)):
            print(json.dumps(_run(args, label, nb, nt)), flush=True)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
