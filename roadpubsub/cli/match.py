"""``roadpubsub match``: deliver messages to subscriptions and write the deliveries."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from roadnet.errors import InputError
from roadnet.files import check_output_path
from roadnet.settings import DEFAULTS
from roadpubsub.cli.sources import add_source_arguments, check_dmax, read_sources

if TYPE_CHECKING:
    from pruning.deliveries import Deliveries

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
a subscription is not delivered messages whose time is >= its expires_at (the rule of
'roadpubsub serve'; without a time column the clock decides).

The output has one row per delivery: message_id, subscription_id, distance (network
metres from the subscription to the message) and score (SIM); with --geometry line (or
points) also its geometry, as GeoParquet. Inputs may be Parquet, GeoParquet (a point
geometry column in any CRS), JSON Lines or CSV (keywords separated by ';'). The output
is written atomically: a failed run leaves no file. Without --weights, keyword weights
are the smoothed idf over --corpus (default: the shared airline tweets).
"""


def _index_choices() -> list[str]:
    from pruning.matchers import MATCHERS

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
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Match and write the deliveries; returns the exit code."""
    from tqdm import tqdm

    from index.geofiles import deliveries_geotable
    from index.io import deliveries_table, read_messages, write_deliveries, write_tables
    from index.store import load_index
    from pruning.deliveries import Deliveries
    from pruning.matchers import LoadedIndexMatcher, Matcher, build_matcher
    from roadnet.locations import point_xy
    from roadnet.network import spatial_order

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
    from roadnet.jit import preload_in_background

    preload = preload_in_background()  # the cached kernels, while the inputs are read
    say = _status(args.quiet)
    say("reading the inputs")
    from roadpubsub.cli.match_kinds import has_kind_column, run_kinds_command

    if not args.index_file and has_kind_column(args.subscriptions):
        return run_kinds_command(args, dmax, say, t0)
    matcher: Matcher
    if args.index_file:
        index = load_index(args.index_file)
        network, weights, dmax = index.network, index.weights, index.dmax_m
        index_name, n_subs = index.kind, len(index)
        matcher = LoadedIndexMatcher(index)
        subs = index.subscriptions()
        messages = read_messages(args.messages, network, weights, max_snap_m=args.max_snap)
        t_read = time.perf_counter()  # loading the file rebuilds the postings: no build step
    else:
        network, weights, subs = read_sources(args)
        messages = read_messages(args.messages, network, weights, max_snap_m=args.max_snap)
        if args.weights_from == "own keywords":  # no corpus: the run's keywords are one
            weights.reweigh_by_idf((subs.kw_ptr, subs.kw_terms),
                                   (messages.kw_ptr, messages.kw_terms))
        index_name, n_subs = args.index or "eia", len(subs)
        t_read = time.perf_counter()
        say(f"read {n_subs:,} subscriptions and {len(messages):,} messages in "
            f"{t_read - t0:.1f} s; building the {index_name} index")
        matcher = build_matcher(index_name, network, subs, weights, dmax_m=dmax)
    if args.threads is not None and isinstance(matcher, LoadedIndexMatcher):
        matcher.threads = args.threads
    preload.join()  # out of the timed match phase
    t_build = time.perf_counter()
    say(f"ready in {t_build - t0:.1f} s (read {t_read - t0:.1f} s, build "
        f"{t_build - t_read:.1f} s)")
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
            parts.append(matcher.match(messages.take(rows)))
            bar.update(rows.size)
    deliveries = Deliveries.concat(parts)
    if args.subscriptions:
        deliveries = _drop_expired(deliveries, args.subscriptions, args.messages)
    t_match = time.perf_counter()
    if args.geometry:
        table = deliveries_geotable(
            deliveries_table(deliveries), network, subscription_ids=subs.ids,
            subscription_points=subs.points, message_ids=messages.ids,
            message_points=messages.points, geometry=args.geometry)
        write_tables({out: table})
    else:
        write_deliveries(deliveries, out)
    t_write = time.perf_counter()

    match_s = t_match - t_build
    summary = {
        "index": index_name,
        "index_file": args.index_file,
        "network": str(args.network) if args.network else network.name,
        "directed": bool(network.directed),
        "dmax_m": dmax,
        "subscriptions": n_subs,
        "messages": n,
        "deliveries": len(deliveries),
        "keywords_not_in_weights": getattr(args, "keywords_not_in_weights", 0),
        "weights_from": getattr(args, "weights_from", "index file"),
        "out": str(out),
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
        print(f"{len(deliveries):,} deliveries of {n:,} messages to {n_subs:,} "
              f"subscriptions (index {index_name}, Dmax {dmax:g} m, {rate}; "
              f"{t_write - t0:.1f} s in all) -> {out}")
    return 0


def _drop_expired(deliveries: Deliveries, subscriptions: str, messages: str) -> Deliveries:
    """The expiry rule of 'roadpubsub serve': a subscription whose ``expires_at`` (epoch
    seconds; null: never) is <= a message's ``time`` (epoch seconds; the clock now when the
    messages have no such column) is not delivered that message.

    Deliveries are decided pair by pair, so dropping the expired pairs afterwards gives
    exactly what matching without the expired subscriptions gives.
    """
    import numpy as np

    from index.io import read_table
    from pruning.deliveries import Deliveries

    subs = read_table(subscriptions)
    if "expires_at" not in subs.column_names or len(deliveries) == 0:
        return deliveries
    sid = np.asarray(subs.column("id").to_numpy(zero_copy_only=False), dtype=np.int64)
    exp = np.asarray(subs.column("expires_at").to_numpy(zero_copy_only=False),
                     dtype=np.float64)  # nulls are NaN: never
    msgs = read_table(messages)
    mid = np.asarray(msgs.column("id").to_numpy(zero_copy_only=False), dtype=np.int64)
    if "time" in msgs.column_names:
        when = np.asarray(msgs.column("time").to_numpy(zero_copy_only=False), dtype=np.float64)
        when = np.where(np.isnan(when), time.time(), when)
    else:
        when = np.full(mid.size, time.time())
    s_order, m_order = np.argsort(sid), np.argsort(mid)
    d_exp = exp[s_order[np.searchsorted(sid[s_order], deliveries.subscription_id)]]
    d_time = when[m_order[np.searchsorted(mid[m_order], deliveries.message_id)]]
    keep = ~(d_exp <= d_time)
    if keep.all():
        return deliveries
    return Deliveries(deliveries.message_id[keep], deliveries.subscription_id[keep],
                      deliveries.distance[keep], deliveries.score[keep])


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
