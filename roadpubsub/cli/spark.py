"""``roadpubsub spark``: the Spark jobs, run locally (``local[*]``) or on ``--master``.

``roadpubsub spark precompute-bounds``, ``roadpubsub spark idf`` and
``roadpubsub spark batch-match`` take the same options as
``spark-submit spark_jobs/<job>.py`` and call the same ``run`` functions
(:mod:`roadpubsub.spark_jobs.precompute_bounds`, :mod:`roadpubsub.spark_jobs.idf`,
:mod:`roadpubsub.spark_jobs.batch_match`).
Every input and output may be a local path (spaces allowed) or a storage URL
(``file://``, ``hdfs://``, ``s3a://``; :mod:`roadpubsub.spark_jobs.storage`). A missing Java 17+ or
GraphFrames package is reported as one line with a hint (exit 2).
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

__all__ = ["JOBS", "register"]

#: Subcommand -> (job module, one-line help).
JOBS: dict[str, tuple[str, str]] = {
    "precompute-bounds": ("roadpubsub.spark_jobs.precompute_bounds",
                          "compute the cell-pair bound table of a network on Spark"),
    "idf": ("roadpubsub.spark_jobs.idf", "smoothed idf keyword weights of a text corpus on Spark"),
    "batch-match": ("roadpubsub.spark_jobs.batch_match",
                    "match a message set against a subscription set on Spark "
                    "(threshold, boolean and top-k subscriptions)"),
    "stream": ("roadpubsub.spark_jobs.stream",
               "match messages as they land (Structured Streaming, exactly once)"),
}


def register(subparsers: Any) -> None:
    """Add the ``spark`` command and its job subcommands to the CLI."""
    parser = subparsers.add_parser(
        "spark",
        help="run a Spark job (precompute-bounds, idf, batch-match, stream)",
        description="Run one of the Spark jobs; each also runs as "
                    "'spark-submit spark_jobs/<job>.py'. Needs Java 17+.",
        epilog="Run 'roadpubsub spark JOB --help' for a job's options and an example.",
    )
    from roadpubsub.spark_jobs.session import spark_errors

    sub = parser.add_subparsers(dest="spark_job", metavar="JOB", required=True)
    for name, (module_name, help_text) in JOBS.items():
        module = importlib.import_module(module_name)
        job_parser = module.build_parser()
        child = sub.add_parser(
            name, help=help_text, description=job_parser.description,
            epilog=job_parser.epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(child)
        child.set_defaults(func=spark_errors(module.run))  # one line for JVM failures
        if name == "batch-match":  # routes and areas, resolved as 'roadpubsub match' does
            child.set_defaults(read_sets=_read_sets)


def _read_sets(args: argparse.Namespace) -> tuple[Any, ...] | None:
    """(network, weights, subscriptions, sets) of a local subscriptions file with a
    GeoJSON ``geometry`` column (issue 32), read by ``roadpubsub match``'s reader; None
    for any other file (the job reads it on the executors)."""
    from roadpubsub.cli.match_sets import has_set_geometry, read_set_sources
    from roadpubsub.roadnet.settings import DEFAULTS
    from roadpubsub.spark_jobs.storage_paths import local_path

    local = local_path(args.subscriptions)
    if local is None or not local.is_file() or not has_set_geometry(local):
        return None
    ns = argparse.Namespace(network=args.network, directed=args.directed,
                            subscriptions=str(local), weights=args.weights, corpus=None,
                            max_snap=DEFAULTS.snap_distance_m, exact_keywords=False)
    return read_set_sources(ns, args.dmax, kinds=True)
