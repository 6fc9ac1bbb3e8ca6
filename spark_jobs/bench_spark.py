"""Benchmark: the Spark jobs against the single-process path, on Rome by default.

Measures, on one machine:

* cell-bound precompute: :func:`roadnet.cell_bounds.compute_cell_bounds` in this process
  vs the ``dijkstra`` engine of :mod:`spark_jobs.precompute_bounds` on ``--master``
  (first run, which pays for starting the Python workers, and a second, warm run), plus
  the pure-local border overlay (:func:`spark_jobs.overlay.overlay_cell_bounds`);
* matching: ``IndexMatcher(EnhancedIndex(...))`` in this process (index build and match
  timed apart) vs :func:`spark_jobs.batch_match.batch_match` (index build per partition
  included), in messages per second, on a workload from
  :func:`index.workload.generate_workload` (real tweets, uniform locations).

Both sides must produce identical results; the script checks it. Times are wall-clock
seconds, distances metres.

Examples
--------
::

    python spark_jobs/bench_spark.py --master 'local[2]' --json bench.json
    python spark_jobs/bench_spark.py --subscriptions 20000 --messages 100   # quick look
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from roadnet.settings import DEFAULTS, shared_data_dir

__all__ = ["bench", "build_parser", "main"]

T = TypeVar("T")


def _timed(func: Callable[[], T]) -> tuple[T, float]:
    t0 = time.perf_counter()
    value = func()
    return value, time.perf_counter() - t0


def _same_tables(a: Any, b: Any) -> bool:
    return all(np.array_equal(getattr(a, k), getattr(b, k), equal_nan=True)
               for k in ("D", "D_far", "din_out", "din_in", "eta_minus"))


def bench(
    *,
    network_path: str | Path,
    master: str = "local[2]",
    capacity: int = DEFAULTS.cell_capacity,
    n_subscriptions: int = 200_000,
    n_messages: int = 500,
    dmax_m: float = DEFAULTS.dmax_m,
    seed: int = 0,
    partitions: int | None = None,
    repeats: int = 3,
) -> dict[str, Any]:
    """Run the benchmark; returns the measurements (seconds, messages/s) as a dict.

    Each Spark measurement runs ``repeats`` times: the first run (which starts the Python
    workers) is reported apart, the rest as warm runs (their median is used for rates).
    """
    from index.eia import EnhancedIndex
    from index.spatial import SpatialIndex
    from index.workload import generate_workload
    from pruning.indexed import IndexMatcher
    from roadnet.cell_bounds import compute_cell_bounds
    from roadnet.cells import build_cells
    from roadnet.io import load_network
    from spark_jobs.batch_match import batch_match, plan_match
    from spark_jobs.overlay import overlay_cell_bounds
    from spark_jobs.precompute_bounds import precompute_cell_bounds
    from spark_jobs.session import get_spark, log

    result: dict[str, Any] = {
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "network": str(network_path), "capacity": capacity, "master": master,
    }
    network, t_load = _timed(lambda: load_network(network_path))
    cells = build_cells(network, capacity=capacity)
    result.update(n_nodes=network.n_nodes, n_edges=network.n_edges, n_cells=cells.n_cells,
                  load_s=round(t_load, 2))
    log(f"{network.name}: {network.n_nodes} nodes, {network.n_edges} edges, "
        f"{cells.n_cells} cells")

    # ---- precompute
    local, t_local = _timed(lambda: compute_cell_bounds(network, cells))
    log(f"local compute_cell_bounds: {t_local:.1f} s")
    overlay, t_overlay = _timed(lambda: overlay_cell_bounds(network, cells))
    spark, t_session = _timed(lambda: get_spark(master=master, app_name="roadpubsub bench"))
    tables, times = [], []
    for _ in range(repeats):
        table, t = _timed(lambda: precompute_cell_bounds(spark, network, cells))
        tables.append(table)
        times.append(t)
    t_warm = float(np.median(times[1:])) if repeats > 1 else times[0]
    result["precompute"] = {
        "local_s": round(t_local, 2), "spark_first_run_s": round(times[0], 2),
        "spark_warm_runs_s": [round(t, 2) for t in times[1:]],
        "spark_warm_median_s": round(t_warm, 2),
        "spark_session_start_s": round(t_session, 2),
        "speedup_warm": round(t_local / t_warm, 2),
        "overlay_local_s": round(t_overlay, 2),
        "spark_equals_local": all(_same_tables(t, local) for t in tables),
        "overlay_D_equals_local": bool(np.array_equal(overlay.D, local.D)),
    }

    # ---- matching
    spatial = SpatialIndex.build(network, cells=cells, bounds=local)
    wl, t_gen = _timed(lambda: generate_workload(network, n_subscriptions=n_subscriptions,
                                                 n_messages=n_messages, seed=seed))
    log(f"workload: {n_subscriptions} subscriptions, {n_messages} messages "
        f"in {t_gen:.1f} s")
    index, t_build = _timed(lambda: EnhancedIndex(spatial, wl.subscriptions, wl.weights,
                                                  dmax_m=dmax_m))
    matcher = IndexMatcher(index)
    (ref, stats), t_match = _timed(lambda: matcher.match(wl.messages))
    log(f"local EIA: build {t_build:.1f} s, match {t_match:.1f} s, {len(ref)} deliveries")
    plan = plan_match(spark, spatial, wl.subscriptions, wl.weights, dmax_m=dmax_m,
                      n_partitions=partitions)
    _, parts = plan.router.route(wl.messages.points)
    runs = []
    for _ in range(repeats):
        got, t = _timed(lambda: batch_match(spark, spatial, wl.subscriptions, wl.messages,
                                            wl.weights, dmax_m=dmax_m,
                                            n_partitions=partitions))
        same = all(np.array_equal(getattr(got, k), getattr(ref, k))
                   for k in ("message_id", "subscription_id", "distance", "score"))
        runs.append((t, same))
    m_warm = float(np.median([t for t, _ in runs[1:]])) if repeats > 1 else runs[0][0]
    result["match"] = {
        "n_subscriptions": n_subscriptions, "n_messages": n_messages, "dmax_m": dmax_m,
        "deliveries": len(ref), "partitions": plan.n_partitions,
        "routed_pairs": int(parts.size),
        "local_build_s": round(t_build, 2), "local_match_s": round(t_match, 2),
        "local_msgs_per_s": round(n_messages / t_match, 1),
        "local_build_and_match_msgs_per_s": round(n_messages / (t_build + t_match), 1),
        "spark_first_run_s": round(runs[0][0], 2),
        "spark_warm_runs_s": [round(t, 2) for t, _ in runs[1:]],
        "spark_msgs_per_s": round(n_messages / m_warm, 1),
        "spark_equals_local": all(s for _, s in runs),
        "local_candidates": int(stats.totals().get("candidates", 0)),
    }
    return result


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's argument parser."""
    default_net = shared_data_dir() / "dimacs" / "rome.gr.gz"
    parser = argparse.ArgumentParser(
        prog="bench_spark.py", description="Spark jobs vs the single-process path.",
        epilog="example:\n  python spark_jobs/bench_spark.py --master 'local[2]' "
               "--json bench.json", formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--network", default=str(default_net),
                        help="network file (default: %(default)s)")
    parser.add_argument("--master", default="local[2]", help="Spark master (default: %(default)s)")
    parser.add_argument("--cell-capacity", "--capacity", dest="capacity", type=int,
                        default=DEFAULTS.cell_capacity,
                        help="cell capacity (default: %(default)s)")
    parser.add_argument("--subscriptions", type=int, default=200_000)
    parser.add_argument("--messages", type=int, default=500)
    parser.add_argument("--dmax", type=float, default=DEFAULTS.dmax_m, help="Dmax, metres")
    parser.add_argument("--partitions", type=int, default=None,
                        help="subscription partitions (default: one per core)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3, help="Spark runs per measurement")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the results as JSON."""
    args = build_parser().parse_args(argv)
    if not Path(args.network).exists():
        print(f"bench_spark: error: network not found: {args.network}", file=sys.stderr)
        return 2
    result = bench(network_path=args.network, master=args.master, capacity=args.capacity,
                   n_subscriptions=args.subscriptions, n_messages=args.messages,
                   dmax_m=args.dmax, seed=args.seed, partitions=args.partitions,
                   repeats=max(1, args.repeats))
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover
    from spark_jobs.bench_spark import main as _main

    sys.exit(_main())
