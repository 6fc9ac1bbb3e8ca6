"""``roadpubsub index``: build a subscription index once, save it, inspect it.

An index file holds everything matching needs (network, cells, cell-pair bounds, keyword
weights, subscriptions and the index itself), so ``roadpubsub match --index-file`` can
match batch after batch of messages without reading the subscriptions or rebuilding.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from roadpubsub.cli.sources import add_source_arguments, check_dmax, read_sources
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.files import check_output_path
from roadpubsub.roadnet.settings import DEFAULTS

__all__ = ["register", "run_build", "run_info", "run_verify"]

_EXAMPLE = """\
example:
  roadpubsub generate --network ../shared/data/dimacs/rome.gr.gz --out-dir work/rome \\
      --subscriptions 1000000 --messages 1000
  roadpubsub index build --network ../shared/data/dimacs/rome.gr.gz \\
      --subscriptions work/rome/subscriptions.parquet --weights work/rome/weights.parquet \\
      --dmax 5000 --kind eia --out work/rome/eia.npz
  roadpubsub index info work/rome/eia.npz
  roadpubsub match --index-file work/rome/eia.npz --messages work/rome/messages.parquet \\
      --out work/rome/deliveries.parquet

The file is written under a temporary name and renamed: a failed build leaves no file.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``index`` subcommand and its ``build`` and ``info`` actions."""
    p = subparsers.add_parser(
        "index",
        help="build an EIA or BIA index file for repeated matching, or describe one",
        description="Build a subscription index (EIA or BIA) once and save it to one file "
                    "that 'roadpubsub match --index-file' loads.",
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    b = actions.add_parser("build", help="build an index from a subscriptions file and save it",
                           epilog=_EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source_arguments(b)
    b.add_argument("--kind", choices=("eia", "bia"), default="eia",
                   help="index architecture (default eia)")
    b.add_argument("--cell-capacity", type=int, default=DEFAULTS.cell_capacity,
                   metavar="EDGES",
                   help=f"PMR split threshold (default {DEFAULTS.cell_capacity})")
    b.add_argument("--bounds", metavar="DIR", default=None,
                   help="cell-pair bound table from 'roadpubsub spark precompute-bounds' "
                        "(same network and --cell-capacity); default: computed here")
    b.add_argument("--out", required=True, metavar="FILE", help="index file to write (.npz)")
    b.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    b.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    b.set_defaults(func=run_build)

    i = actions.add_parser("info", help="describe an index file")
    i.add_argument("path", metavar="FILE", help="index file written by 'index build'")
    i.add_argument("--json", action="store_true", help="print JSON instead of text")
    i.set_defaults(func=run_info)
    i.epilog = ("examples:\n  roadpubsub index info work/rome/eia.npz\n"
                "  roadpubsub index info work/rome/eia.npz --json   # for scripts\n\n"
                "Prints the kind, Dmax, subscriptions, terms, cells and network of the\n"
                "file. Every array is checked for range and against the digest saved with\n"
                "it; 'index verify' also rebuilds the postings and bounds to compare them.")
    i.formatter_class = argparse.RawDescriptionHelpFormatter

    v = actions.add_parser(
        "verify", help="check an index file thoroughly (exit 0 if sound, 2 if damaged)",
        epilog="example:\n  roadpubsub index verify work/rome/eia.npz\n\nChecks every "
               "array's range, the digest saved with the arrays, and rebuilds the cell "
               "bounds and postings from the file's network and subscriptions to compare "
               "them bit for bit (about as long as 'index build' without reading inputs).",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    v.add_argument("path", metavar="FILE", help="index file written by 'index build'")
    v.add_argument("--json", action="store_true", help="print JSON instead of text")
    v.set_defaults(func=run_verify)


def run_build(args: argparse.Namespace) -> int:
    """Build the index and save it; returns the exit code."""
    from tqdm import tqdm

    from roadpubsub.index.bia import BasicIndex
    from roadpubsub.index.eia import EnhancedIndex
    from roadpubsub.index.spatial import SpatialIndex
    from roadpubsub.roadnet.cells import build_cells

    out = Path(args.out)
    if out.suffix.lower() != ".npz":
        msg = f"--out {out}: an index file must end in .npz"
        raise InputError(msg)
    check_output_path(out, what="--out", inputs=(
        args.network, args.subscriptions, args.weights, args.corpus, args.bounds))
    check_dmax(args.dmax)
    if args.cell_capacity < 1:
        msg = f"--cell-capacity must be >= 1, got {args.cell_capacity}"
        raise InputError(msg)
    def say(text: str) -> None:
        if not args.quiet and not args.json:
            print(f"index build: {text}", file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    say("reading the network, weights and subscriptions")
    network, weights, subs = read_sources(args)
    t_read = time.perf_counter()
    say(f"read {len(subs):,} subscriptions in {t_read - t0:.1f} s; building cells and bounds")
    cells = build_cells(network, capacity=args.cell_capacity)
    if args.bounds:
        # The table of the Spark job, checked against this network and these cells.
        from roadpubsub.spark_jobs.bound_table import load_bounds_table

        bounds = load_bounds_table(args.bounds, network, cells)
        spatial = SpatialIndex.build(network, cells=cells, bounds=bounds)
    else:
        with tqdm(total=cells.n_cells, unit="cell", desc="bounds", disable=args.quiet,
                  file=sys.stderr) as bar:
            spatial = SpatialIndex.build(network, cells=cells, progress=bar.update)
    t_spatial = time.perf_counter()
    architecture = EnhancedIndex if args.kind == "eia" else BasicIndex
    say(f"building the {args.kind} index")
    index = architecture(spatial, subs, weights, dmax_m=args.dmax)
    t_index = time.perf_counter()
    say(f"built in {t_index - t_spatial:.1f} s; saving {out}")
    index.save(out)
    t_save = time.perf_counter()
    summary = {
        "kind": args.kind, "network": str(args.network), "directed": bool(args.directed),
        "dmax_m": args.dmax, "subscriptions": len(subs), "cells": cells.n_cells,
        "keywords_not_in_weights": getattr(args, "keywords_not_in_weights", 0),
        "weights_from": getattr(args, "weights_from", "file"),
        "bounds": str(args.bounds) if args.bounds else "computed",
        "bytes_per_subscription": round(index.nbytes_per_subscription(), 1),
        "file": str(out), "file_bytes": out.stat().st_size,
        "seconds": {"read": round(t_read - t0, 3), "cells_and_bounds": round(t_spatial - t_read, 3),
                    "index": round(t_index - t_spatial, 3), "save": round(t_save - t_index, 3)},
    }
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif not args.quiet:
        print(f"{args.kind.upper()} index of {len(subs):,} subscriptions on {cells.n_cells} cells "
              f"(Dmax {args.dmax:g} m) built in {t_index - t_read:.1f} s "
              f"-> {out} ({out.stat().st_size / 2**20:,.1f} MiB)")
    return 0


def run_info(args: argparse.Namespace) -> int:
    """Print what an index file holds; returns the exit code."""
    from roadpubsub.index.index_file import index_file_info

    info = {"file": str(args.path), **index_file_info(args.path)}
    if args.json:
        return _print_json(info)
    net = info["network"]
    print(f"{info['file']}: {info['kind'].upper()} index, {info['subscriptions']:,} "
          f"subscriptions, {info['terms']:,} terms, Dmax {info['dmax_m']:g} m")
    print(f"  network  {net['name'] or '-'}: {net['nodes']:,} nodes, {net['edges']:,} edges, "
          f"{'directed' if net['directed'] else 'undirected'}, {net['crs']}")
    print(f"  cells    {info['cells']} PMR cells with their cell-pair bounds")
    print(f"  checked  {info['checked']} ('roadpubsub index verify' rebuilds and compares "
          "postings and bounds)")
    return 0


def run_verify(args: argparse.Namespace) -> int:
    """Verify an index file; exit 0 when sound (a damaged file raises, exit 2)."""
    from roadpubsub.index.store import verify_index

    report = {"file": str(args.path), **verify_index(args.path)}
    if args.json:
        return _print_json(report)
    print(f"{report['file']}: ok ({report['kind'].upper()}, {report['subscriptions']:,} "
          f"subscriptions; ranges, digest {report['digest']}, bounds and postings "
          "rebuilt and equal)")
    return 0


def _print_json(doc: dict[str, object]) -> int:
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0
