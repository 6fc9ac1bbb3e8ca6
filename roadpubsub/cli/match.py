"""``roadpubsub match``: deliver messages to subscriptions and write the deliveries."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roadpubsub.cli.sources import add_source_arguments, check_dmax, read_sources
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.files import check_output_path
from roadpubsub.roadnet.settings import DEFAULTS

if TYPE_CHECKING:
    from roadpubsub.index.kinds import SubscriptionSet

__all__ = ["register", "run"]

_OUT_SUFFIXES = (".parquet", ".pq", ".jsonl", ".ndjson", ".json", ".csv")

_EXAMPLE = """\
example:
  roadpubsub generate --network ../shared/data/li_california/cal.cnode --out-dir work/cal
  roadpubsub match --network ../shared/data/li_california/cal.cnode \\
      --subscriptions work/cal/subscriptions.parquet --messages work/cal/messages.parquet \\
      --weights work/cal/weights.parquet --dmax 5000 --index eia \\
      --out work/cal/deliveries.parquet

With an index saved by 'roadpubsub index build', --index-file FILE replaces --network,
--subscriptions, --weights, --dmax, --directed and --index.

A subscriptions file with a kind column may mix threshold, boolean (radius) and topk (k)
rows: boolean deliveries join the deliveries file (score 1.0); top-k results go to
--topk-out as insert/evict events over a window of the last --window messages.

Subscriptions may carry an expires_at column (epoch seconds) and messages a time column:
a subscription is not delivered messages whose time is >= its expires_at, and a top-k
one is withdrawn (its results evicted) at the first message, in file order, whose time
reaches it (the rule of 'roadpubsub serve', pruning/expiry.py; without a time column,
or for a null, the clock decides).

The output has one row per delivery: message_id, subscription_id, distance (network
metres from the subscription to the message) and score (SIM); with --geometry line (or
points) also its geometry, as GeoParquet. Inputs may be Parquet, GeoParquet (a point
geometry column in any CRS), JSON Lines or CSV (keywords separated by ';'). The output
is written atomically: a failed run leaves no file. Without --weights, keyword weights
are the smoothed idf over --corpus (default: the shared airline tweets).
"""


def _index_choices() -> list[str]:
    from roadpubsub.pruning.matchers import MATCHERS

    return sorted(MATCHERS)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``match`` subcommand."""
    p = subparsers.add_parser(
        "match",
        help="match messages against subscriptions on a road network",
        description="Deliver each message m to every subscription s with dN(s, m) <= Dmax "
                    "and SIM(s, m) >= s.tau (PSTPSN).",
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_source_arguments(p, required=False, dmax_default=None)
    p.add_argument("--index-file", metavar="FILE", default=None,
                   help="an index saved by 'roadpubsub index build', instead of --network, "
                        "--subscriptions, --weights/--corpus, --dmax, --directed and --index")
    p.add_argument("--messages", required=True, metavar="F",
                   help="messages (.parquet/GeoParquet, .jsonl or .csv)")
    p.add_argument("--index", choices=_index_choices(), default=None,
                   help="matching index: eia (default, the fastest), bia, or brute (the "
                        "reference: no index, every subscription within Dmax scored)")
    p.add_argument("--out", required=True, metavar="F",
                   help="deliveries file: .parquet, .jsonl/.json or .csv")
    p.add_argument("--geometry", choices=("line", "points"), default=None,
                   help="also write each delivery's geometry (WGS84) as GeoParquet: the line "
                        "from subscription to message, or both points (needs a .parquet "
                        "--out; geopandas.read_parquet(out).plot() maps it)")
    p.add_argument("--batch", type=int, default=DEFAULTS.match_batch, metavar="N",
                   help="messages per matcher call, taken in Hilbert order of their "
                        "locations (default %(default)s)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="threads matching each batch (default: every core this process may "
                        "use; the result is the same for any N)")
    p.add_argument("--window", type=int, default=DEFAULTS.topk_window, metavar="W",
                   help="top-k subscriptions (kind topk): results come from the last W "
                        "messages, in file order (default %(default)s)")
    p.add_argument("--topk-out", default=None, metavar="F",
                   help="top-k events file (insert/evict rows; default: --out with '-topk' "
                        "before its suffix)")
    p.add_argument("--sets-out", default=None, metavar="F",
                   help="routes and areas (subscriptions with a GeoJSON geometry column): "
                        "their resolved node paths and segments, JSON Lines (default: --out "
                        "with '-sets.jsonl' as suffix)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Match and write the deliveries; returns the exit code."""
    import numpy as np
    from tqdm import tqdm

    from roadpubsub.cli.match_kinds import (
        check_topk_out,
        has_kind_column,
        read_expiry,
        read_kind_sources,
        write_topk_events,
    )
    from roadpubsub.cli.match_sets import (
        has_set_geometry,
        read_set_sources,
        sets_out_path,
        write_sets,
    )
    from roadpubsub.index.geofiles import deliveries_geotable
    from roadpubsub.index.io import deliveries_table, read_messages, write_deliveries
    from roadpubsub.index.kinds import SubscriptionSet
    from roadpubsub.index.store import load_index
    from roadpubsub.index.tables import write_tables
    from roadpubsub.pruning.deliveries import Deliveries
    from roadpubsub.pruning.indexed import IndexMatcher
    from roadpubsub.pruning.kinds_reference import check_window
    from roadpubsub.pruning.mixed import MixedMatcher
    from roadpubsub.roadnet.locations import EdgePoints, point_xy
    from roadpubsub.roadnet.network import spatial_order

    out = Path(args.out)
    if out.suffix.lower() not in _OUT_SUFFIXES:
        msg = f"--out {out}: use one of the suffixes {', '.join(_OUT_SUFFIXES)}"
        raise InputError(msg)
    if args.geometry and out.suffix.lower() not in (".parquet", ".pq"):
        msg = f"--geometry writes GeoParquet: give --out a .parquet name, not {out.name}"
        raise InputError(msg)
    check_output_path(out, what="--out", inputs=(
        args.network, args.subscriptions, args.messages, args.weights, args.corpus,
        args.index_file))
    _check_sources(args)
    dmax = check_dmax(DEFAULTS.dmax_m if args.dmax is None else args.dmax)
    if args.threads is not None and args.threads < 1:
        msg = f"--threads must be >= 1, got {args.threads}"
        raise InputError(msg)
    if args.batch < 1:
        msg = "--batch must be >= 1"
        raise InputError(msg)
    t0 = time.perf_counter()
    from roadpubsub.roadnet.jit import preload_in_background

    preload = preload_in_background()  # the cached kernels, while the inputs are read
    say = _status(args.quiet)
    say("reading the inputs")
    kinds = not args.index_file and has_kind_column(args.subscriptions)
    located = None  # routes and areas (issue 32; roadpubsub/cli/match_sets.py)
    with_sets = not args.index_file and has_set_geometry(args.subscriptions)
    if with_sets and args.geometry:
        msg = ("--geometry draws subscription points; the routes and areas of a geometry "
               "column are written to --sets-out instead")
        raise InputError(msg)
    window, topk_out = DEFAULTS.topk_window, out
    if kinds:
        window = check_window(args.window)
        topk_out = check_topk_out(args)
    if args.index_file:
        index = load_index(args.index_file)
        network, weights, dmax = index.network, index.weights, index.dmax_m
        index_name = index.kind
        subs = SubscriptionSet.only_threshold(index.subscriptions())
        messages = read_messages(args.messages, network, weights, max_snap_m=args.max_snap)
        t_read = time.perf_counter()  # loading the file rebuilds the postings: no build step
        matcher = MixedMatcher(threshold=IndexMatcher(index, threads=args.threads))
        times = None  # the file holds no expiry
    else:
        if with_sets:
            network, weights, subs, located = read_set_sources(args, dmax, kinds=kinds)
        elif kinds:
            network, weights, subs = read_kind_sources(args, dmax)
        else:
            network, weights, threshold = read_sources(args)
            subs = SubscriptionSet.only_threshold(threshold)
        messages = read_messages(args.messages, network, weights, max_snap_m=args.max_snap)
        if args.weights_from == "own keywords":  # no corpus: the run's keywords are one
            weights.reweigh_by_idf(*((b.kw_ptr, b.kw_terms) for b in
                                     (subs.threshold, subs.boolean, subs.topk)),
                                   (messages.kw_ptr, messages.kw_terms))
            args.keywords_not_in_weights = 0
        index_name = args.index or "eia"
        expiry, times = read_expiry(args.subscriptions, args.messages, messages.ids)
        t_read = time.perf_counter()
        say(f"read {_counted(subs, kinds)} subscriptions and {len(messages):,} messages in "
            f"{t_read - t0:.1f} s; building the {index_name} index")
        matcher = MixedMatcher.build(network, subs, weights, dmax_m=dmax,
                                     window=window,
                                     index=index_name, expiry=expiry, threads=args.threads,
                                     threshold_sets=located.threshold if located else None,
                                     boolean_sets=located.boolean if located else None)
    n_subs = len(subs)
    preload.join()  # out of the timed match phase
    t_build = time.perf_counter()
    say(f"ready in {t_build - t0:.1f} s (read {t_read - t0:.1f} s, build "
        f"{t_build - t_read:.1f} s)")
    # A batch's clock (roadpubsub.pruning.expiry) is each message's own time.
    clock = times
    parts: list[Deliveries] = []
    n = len(messages)
    # Batches of neighbouring messages (Hilbert order of their locations) find the index
    # and the road graph in cache; the deliveries are sorted by message id in the end.
    xy = point_xy(network, messages.points)
    order = spatial_order(xy[:, 0], xy[:, 1])
    with tqdm(total=n, unit="msg", desc=f"match ({index_name})", disable=args.quiet,
              file=sys.stderr) as bar:
        for start in range(0, n, args.batch):
            rows = order[start:start + args.batch]
            parts.append(matcher.deliver(messages.take(rows),
                                         at=None if clock is None else clock[rows]))
            bar.update(rows.size)
    deliveries = Deliveries.concat(parts)
    n_events = 0
    if len(subs.topk):  # top-k results depend on the order: the whole stream, in file order
        events = matcher.push(messages, clock=clock)
        n_events = len(events)
        write_topk_events(events, topk_out)
    t_match = time.perf_counter()
    if args.geometry:
        every = [b for b in (subs.threshold, subs.boolean) if len(b)] or [subs.threshold]
        table = deliveries_geotable(
            deliveries_table(deliveries), network,
            subscription_ids=np.concatenate([b.ids for b in every]),
            subscription_points=EdgePoints(np.concatenate([b.points.edge for b in every]),
                                           np.concatenate([b.points.offset for b in every])),
            message_ids=messages.ids, message_points=messages.points,
            geometry=args.geometry)
        write_tables({out: table})
    else:
        write_deliveries(deliveries, out)
    sets_out = None if located is None else write_sets(located, network, sets_out_path(args))
    t_write = time.perf_counter()

    match_s = t_match - t_build
    summary: dict[str, Any] = {
        "index": (("brute" if index_name == "brute" else f"{index_name}+boolean+topk")
                  if kinds else index_name),
        "index_file": args.index_file,
        "network": str(args.network) if args.network else network.name,
        "directed": bool(network.directed),
        "dmax_m": dmax,
        "subscriptions": n_subs,
        **({"kinds": subs.counts()} if kinds else {}),
        "messages": n,
        "deliveries": len(deliveries),
        **({"window": window, "topk_events": n_events,
            "topk_out": str(topk_out) if len(subs.topk) else None} if kinds else {}),
        "keywords_not_in_weights": getattr(args, "keywords_not_in_weights", 0),
        "weights_from": getattr(args, "weights_from", "index file"),
        "out": str(out),
        **({"set_subscriptions": len(located.by_id), "sets_out": str(sets_out)}
           if located is not None else {}),
        "geometry": args.geometry,
        "seconds": {"read": round(t_read - t0, 3), "build": round(t_build - t_read, 3),
                    "match": round(match_s, 3), "write": round(t_write - t_match, 3)},
        "messages_per_second": round(n / match_s, 1) if match_s > 0 else None,
    }
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif not args.quiet:
        rate = f"{n / match_s:,.1f} messages/s" if match_s > 0 else "-"
        extra = (f"; {n_events:,} top-k events -> {topk_out}" if kinds and len(subs.topk)
                 else "")
        print(f"{len(deliveries):,} deliveries of {n:,} messages to "
              f"{_counted(subs, kinds)} subscriptions (index {summary['index']}, Dmax "
              f"{dmax:g} m, {rate}; {t_write - t0:.1f} s in all) -> {out}{extra}")
    return 0


def _counted(subs: SubscriptionSet, kinds: bool) -> str:
    """The subscriptions' count for the messages: per kind when the file has kinds."""
    return str(subs.counts()) if kinds else f"{len(subs):,}"


def _status(quiet: bool) -> Callable[[str], None]:
    """A function printing progress lines on stderr (nothing when ``quiet``)."""
    def say(text: str) -> None:
        if not quiet:
            print(f"match: {text}", file=sys.stderr, flush=True)
    return say


def _check_sources(args: argparse.Namespace) -> None:
    """Either an index file, or a network and subscriptions (with their options)."""
    if args.index_file:
        given = [flag for flag, value in (
            ("--network", args.network), ("--subscriptions", args.subscriptions),
            ("--weights", args.weights), ("--corpus", args.corpus), ("--dmax", args.dmax),
            ("--index", args.index), ("--directed", args.directed or None),
            ("--exact-keywords", args.exact_keywords or None)) if value is not None]
        if given:
            msg = (f"--index-file already holds the network, subscriptions, weights, Dmax and "
                   f"architecture; drop {', '.join(given)}")
            raise InputError(msg)
        return
    missing = [flag for flag, value in (("--network", args.network),
                                        ("--subscriptions", args.subscriptions)) if not value]
    if missing:
        msg = f"give {' and '.join(missing)}, or --index-file"
        raise InputError(msg)
