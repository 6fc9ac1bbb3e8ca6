"""Benchmark: the Spark jobs against the single-process path, on Rome by default.

Measures, on one machine:

* cell-bound precompute: :func:`roadpubsub.roadnet.cell_bounds.compute_cell_bounds` in this process
  vs the ``dijkstra`` engine of :mod:`roadpubsub.spark_jobs.precompute_bounds` on ``--master``
  (first run, which pays for starting the Python workers, and a second, warm run), plus
  the pure-local border overlay (:func:`roadpubsub.spark_jobs.overlay.overlay_cell_bounds`);
* batch matching as on a cluster (:func:`bench_match`): the workload
  (:func:`roadpubsub.index.workload.generate_workload`, real tweets, uniform locations; 1M
  subscriptions x 20,000 messages by default) and the bound table written to files, then
  the ``batch-match`` job on them (executors read and locate the rows) with its phases
  timed on the driver and every task timed inside it, against the local
  ``IndexMatcher(EnhancedIndex(...))`` on the same files. From the per-task figures it
  estimates the job's time on more cores: the driver's phases, plus per Spark phase the
  time not spent in tasks (scheduling, shuffles, Parquet I/O; taken as fixed) and the
  longest-first schedule of the measured tasks on that many cores. One machine cannot
  show a cluster: the estimate ignores network transfer and assumes tasks keep their
  measured times.

Both sides must produce identical results; the script checks it. Times are wall-clock
seconds, distances metres.

Examples
--------
::

    python spark_jobs/bench_spark.py --master 'local[2]' --json bench.json
    python spark_jobs/bench_spark.py --skip-precompute --partitions 8 --json match.json
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

from roadpubsub.roadnet.settings import DEFAULTS, shared_data_dir

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
    precompute: bool = True,
    match: bool = True,
    workdir: str | Path = "bench-spark-work",
) -> dict[str, Any]:
    """Run the benchmark; returns the measurements (seconds, messages/s) as a dict.

    Each Spark measurement runs ``repeats`` times: the first run (which starts the Python
    workers) is reported apart, the rest as warm runs (their median is used for rates).
    """
    from roadpubsub.roadnet.cell_bounds import compute_cell_bounds
    from roadpubsub.roadnet.cells import build_cells
    from roadpubsub.roadnet.io import load_network
    from roadpubsub.spark_jobs.overlay import overlay_cell_bounds
    from roadpubsub.spark_jobs.precompute_bounds import precompute_cell_bounds
    from roadpubsub.spark_jobs.session import get_spark, log

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
    spark, t_session = _timed(lambda: get_spark(master=master, app_name="roadpubsub bench"))
    if precompute:
        overlay, t_overlay = _timed(lambda: overlay_cell_bounds(network, cells))
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

    if match:
        result["match"] = bench_match(
            spark, network_path=str(network_path), network=network, cells=cells,
            bounds=local, capacity=capacity, n_subscriptions=n_subscriptions,
            n_messages=n_messages, dmax_m=dmax_m, seed=seed, partitions=partitions,
            workdir=workdir)
    return result


def _lpt_makespan(times: Sequence[float], workers: int) -> float:
    """Makespan of tasks on ``workers`` cores, longest first to the least loaded core."""
    load = [0.0] * max(1, workers)
    for t in sorted(times, reverse=True):
        k = load.index(min(load))
        load[k] += t
    return max(load)


def bench_match(
    spark: Any,
    *,
    network_path: str,
    network: Any,
    cells: Any,
    bounds: Any,
    capacity: int,
    n_subscriptions: int,
    n_messages: int,
    dmax_m: float,
    seed: int,
    partitions: int | None,
    workdir: str | Path,
) -> dict[str, Any]:
    """The batch-match job on files (as on a cluster), against the local matcher.

    Writes the workload (Parquet, as ``roadpubsub generate`` does) and the bound table to
    ``workdir``, runs :func:`roadpubsub.spark_jobs.batch_match.write_deliveries_frame` with per-task
    timings, checks the deliveries against ``IndexMatcher(EnhancedIndex(...))`` on the same
    files, and estimates the job's time on more cores from the per-task figures.
    """
    from roadpubsub.index.eia import EnhancedIndex
    from roadpubsub.index.io import (
        read_deliveries,
        read_messages,
        read_subscriptions,
        read_weights,
        write_messages,
        write_subscriptions,
        write_weights,
    )
    from roadpubsub.index.spatial import SpatialIndex
    from roadpubsub.index.workload import generate_workload
    from roadpubsub.pruning.indexed import IndexMatcher
    from roadpubsub.spark_jobs.batch_match import write_deliveries_frame
    from roadpubsub.spark_jobs.precompute_bounds import write_bounds_table
    from roadpubsub.spark_jobs.session import log, task_timer

    folder = Path(workdir)
    folder.mkdir(parents=True, exist_ok=True)
    wl, t_gen = _timed(lambda: generate_workload(network, n_subscriptions=n_subscriptions,
                                                 n_messages=n_messages, seed=seed))
    subs_p, msgs_p, w_p = (folder / "subscriptions.parquet", folder / "messages.parquet",
                           folder / "weights.parquet")
    write_subscriptions(wl.subscriptions, subs_p, network=network, weights=wl.weights)
    write_messages(wl.messages, msgs_p, network=network, weights=wl.weights)
    write_weights(wl.weights, w_p)
    bounds_dir, t_bounds = _timed(lambda: write_bounds_table(
        spark, network, cells, folder / "bounds", capacity=capacity))
    log(f"workload {n_subscriptions} x {n_messages} in {t_gen:.1f} s; bound table "
        f"{t_bounds:.1f} s")

    # Local reference on the same files: read, build, match (one thread, then all cores).
    t0 = time.perf_counter()
    w = read_weights(w_p)
    subs = read_subscriptions(subs_p, network, w)
    msgs = read_messages(msgs_p, network, w)
    t_read = time.perf_counter() - t0
    spatial = SpatialIndex.build(network, cells=cells, bounds=bounds)
    eia, t_build = _timed(lambda: EnhancedIndex(spatial, subs, w, dmax_m=dmax_m))
    ref, t_match1 = _timed(lambda: IndexMatcher(eia, threads=1).match(msgs))
    _, t_match2 = _timed(lambda: IndexMatcher(eia).match(msgs))
    log(f"local: read {t_read:.1f} s, EIA build {t_build:.1f} s, match {t_match1:.1f} s "
        f"(1 thread) / {t_match2:.1f} s (all cores), {len(ref)} deliveries")

    out = folder / "deliveries.parquet"
    args = argparse.Namespace(
        network=network_path, subscriptions=str(subs_p), messages=str(msgs_p),
        weights=str(w_p), bounds=str(bounds_dir), out=str(out), capacity=capacity,
        dmax=dmax_m, partitions=partitions, directed=False)
    timer = task_timer(spark)
    cpu0 = time.process_time()
    phases, t_job = _timed(lambda: write_deliveries_frame(spark, args, timer=timer))
    driver_cpu = time.process_time() - cpu0
    got = read_deliveries(out)
    same = all(np.array_equal(got[k], v) for k, v in ref.to_columns().items())

    tasks: dict[str, list[float]] = {}
    rows: dict[str, list[int]] = {}
    for label, _key, seconds, n_in, _n_out in timer.value:
        tasks.setdefault(label, []).append(float(seconds))
        rows.setdefault(label, []).append(int(n_in))
    per_task = {label: {"tasks": len(ts), "sum_s": round(sum(ts), 2),
                        "max_s": round(max(ts), 2), "median_s": round(float(np.median(ts)), 3),
                        "rows_in": int(sum(rows[label]))}
                for label, ts in sorted(tasks.items())}
    # Spark phase -> the labels of the tasks that run inside it. Reading is divisible (a
    # cluster splits the files over all its cores): sum / cores. Routing and matching run
    # one task per partition: the longest-first schedule of the measured tasks.
    inside = {"read and locate subscriptions": [("read subscriptions:validate", True)],
              "read and locate messages": [("read messages:validate", True)],
              "per-cell load and DNlimit": [("read subscriptions:term ids", True)],
              "route, match and write": [("read messages:term ids", True),
                                         ("route:", False), ("match:", False)]}
    cores = spark.sparkContext.defaultParallelism
    driver_s = sum(v for k, v in phases.items() if k.startswith("driver:"))
    estimate: dict[str, float] = {}
    overheads: dict[str, float] = {}
    for workers in (1, 2, 4, 8, 16, 32):
        total = driver_s
        for phase, groups in inside.items():
            spans_here, spans_there = 0.0, 0.0
            for prefix, divisible in groups:
                # A task's parts (slice, build, match) run in one task: summed per task.
                per: dict[int, float] = {}
                for label, key, seconds, _i, _o in timer.value:
                    if label.startswith(prefix):
                        per[key] = per.get(key, 0.0) + seconds
                times = list(per.values())
                if not times:
                    continue
                if divisible:
                    spans_here += sum(times) / cores
                    spans_there += sum(times) / workers
                else:
                    spans_here += _lpt_makespan(times, cores)
                    spans_there += _lpt_makespan(times, workers)
            overheads[phase] = round(max(0.0, phases[phase] - spans_here), 2)
            total += overheads[phase] + spans_there
        estimate[str(workers)] = round(total, 1)
    return {
        "n_subscriptions": n_subscriptions, "n_messages": n_messages, "dmax_m": dmax_m,
        "deliveries": len(ref), "spark_equals_local": bool(same),
        "workload_s": round(t_gen, 1), "bound_table_s": round(t_bounds, 1),
        "local": {"read_s": round(t_read, 2), "build_s": round(t_build, 2),
                  "match_1_thread_s": round(t_match1, 2),
                  "match_all_cores_s": round(t_match2, 2)},
        "spark_job_s": round(t_job, 2),
        "phases_s": {k: round(v, 2) for k, v in phases.items()},
        "driver_wall_s": round(driver_s, 2),
        "driver_python_cpu_s": round(driver_cpu, 2),
        "per_task": per_task,
        "phase_time_outside_tasks_s": overheads,
        "estimated_job_s_by_cores": estimate,
    }


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
    parser.add_argument("--subscriptions", type=int, default=1_000_000)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--dmax", type=float, default=DEFAULTS.dmax_m, help="Dmax, metres")
    parser.add_argument("--partitions", type=int, default=None,
                        help="subscription partitions (default: one per core)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3, help="Spark runs per measurement")
    parser.add_argument("--skip-precompute", action="store_true",
                        help="measure batch-match only")
    parser.add_argument("--workdir", default="bench-spark-work",
                        help="folder for the workload files and outputs (default: %(default)s)")
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
                   repeats=max(1, args.repeats), precompute=not args.skip_precompute,
                   workdir=args.workdir)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover
    from roadpubsub.spark_jobs.bench_spark import main as _main

    sys.exit(_main())
