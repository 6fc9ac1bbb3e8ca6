"""``roadpubsub generate``: a synthetic workload from real tweets or real POIs."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from roadpubsub.cli.sources import snap_metres
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.files import check_output_path
from roadpubsub.roadnet.settings import DEFAULTS

__all__ = ["register", "run"]

_EXAMPLE = """\
example:
  roadpubsub generate --network ../shared/data/li_california/cal.cnode \\
      --out-dir work/cal --subscriptions 100000 --messages 1000 --seed 7 \\
      --keywords-from tweets --locations uniform

writes DIR/subscriptions.parquet, DIR/messages.parquet and DIR/weights.parquet
(smoothed idf over the keyword source). Locations are written as u, v (node ids of the
network file) and offset (metres from u), plus lon/lat. POIs come from the network's own
file: Li's X.poi_on_edges.txt beside X.cnode, or the OSM file itself (--pois overrides).
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``generate`` subcommand."""
    p = subparsers.add_parser(
        "generate",
        help="generate subscriptions, messages and weights from real text and places",
        description="Generate a spatio-textual workload as in the PSTPSN paper (Sec. VII-A): "
                    "subscriptions with 1-5 keywords of one tweet or POI, messages with "
                    "5-25 keywords of several combined, at uniform or POI locations.",
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--network", required=True, metavar="PATH", help="road network file")
    p.add_argument("--out-dir", required=True, metavar="DIR", help="folder for the files")
    p.add_argument("--subscriptions", type=int, default=DEFAULTS.generate_subscriptions,
                   metavar="N", help="number of subscriptions (default %(default)s)")
    p.add_argument("--messages", type=int, default=DEFAULTS.generate_messages, metavar="N",
                   help="number of messages (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, metavar="S",
                   help="random seed; one seed gives identical files (default 0)")
    p.add_argument("--keywords-from", choices=("tweets", "pois"), default="tweets",
                   help="keyword source (default tweets)")
    p.add_argument("--locations", choices=("uniform", "pois"), default="uniform",
                   help="uniform over the roads by length, or at real POIs (default uniform)")
    p.add_argument("--alpha", type=float, default=DEFAULTS.generate_alpha,
                   help="alpha centre in [0, 1] (%(default)s)")
    p.add_argument("--alpha-spread", type=float, default=DEFAULTS.generate_alpha_spread,
                   help="alpha drawn uniformly within +-spread, clipped (%(default)s; "
                        "0 = fixed)")
    p.add_argument("--tau", type=float, default=DEFAULTS.generate_tau,
                   help="tau centre in (0, 1] (%(default)s)")
    p.add_argument("--tau-spread", type=float, default=DEFAULTS.generate_tau_spread,
                   help="tau drawn uniformly within +-spread, clipped (%(default)s; "
                        "0 = fixed)")
    p.add_argument("--tweets", metavar="PATH", default=None,
                   help="tweet CSV with a 'text' column (default: the shared airline tweets)")
    p.add_argument("--pois", metavar="PATH", default=None,
                   help="POI file (X.poi_on_edges.txt or an OSM file); default: found from "
                        "--network")
    p.add_argument("--max-snap", type=snap_metres, default=DEFAULTS.snap_distance_m,
                   metavar="METRES", help="drop OSM POIs farther than this from every road "
                                          f"(default {DEFAULTS.snap_distance_m:g})")
    p.add_argument("--routes", type=int, default=DEFAULTS.generate_routes, metavar="N",
                   help="make the last N subscriptions routes between random places (a "
                        "GeoJSON LineString geometry column; roadpubsub match reads it)")
    p.add_argument("--route-min-m", type=float, default=DEFAULTS.generate_route_min_m,
                   metavar="M", help="shortest route length (default %(default)g)")
    p.add_argument("--route-max-m", type=float, default=DEFAULTS.generate_route_max_m,
                   metavar="M", help="longest route length (default %(default)g)")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Generate and write the workload; returns the exit code."""
    from roadpubsub.index.pois import find_poi_source, load_pois
    from roadpubsub.index.workload import (
        default_tweets_path,
        generate_workload,
        keyword_histogram,
        write_workload,
    )
    from roadpubsub.roadnet.io import load_network

    t0 = time.perf_counter()
    if args.subscriptions < 0 or args.messages < 0:
        msg = "--subscriptions and --messages must be >= 0"
        raise InputError(msg)
    if not 0 <= args.routes <= args.subscriptions:
        msg = f"--routes must be between 0 and --subscriptions ({args.subscriptions})"
        raise InputError(msg)
    check_output_path(args.out_dir, folder=True, what="--out-dir",
                      inputs=(args.network, getattr(args, "pois", None)))
    network = load_network(args.network)
    t_net = time.perf_counter()
    pois = None
    if "pois" in (args.keywords_from, args.locations):
        source = Path(args.pois) if args.pois else find_poi_source(args.network)
        if source is None:
            msg = (f"network {args.network} comes with no POIs; pass --pois PATH or use "
                   f"--keywords-from tweets --locations uniform")
            raise InputError(msg)
        pois = load_pois(network, source, max_snap_m=args.max_snap)
    workload = generate_workload(
        network,
        n_subscriptions=args.subscriptions,
        n_messages=args.messages,
        seed=args.seed,
        keywords_from=args.keywords_from,
        locations=args.locations,
        alpha=args.alpha,
        alpha_spread=args.alpha_spread,
        tau=args.tau,
        tau_spread=args.tau_spread,
        tweets=args.tweets or default_tweets_path(),
        pois=pois,
    )
    t_gen = time.perf_counter()
    paths = write_workload(workload, args.out_dir, network=network)
    routes = None
    if args.routes:  # issue 32: routes between random places (roadpubsub/cli/match_sets.py)
        from roadpubsub.cli.match_sets import add_routes

        routes = add_routes(paths["subscriptions"], network, n=args.routes, seed=args.seed,
                            min_m=args.route_min_m, max_m=args.route_max_m)
    t_write = time.perf_counter()

    subs, msgs = workload.subscriptions, workload.messages
    used = np.unique(np.concatenate([subs.kw_terms, msgs.kw_terms]))
    summary = {
        "network": str(args.network),
        "subscriptions": len(subs),
        "messages": len(msgs),
        "seed": args.seed,
        "keywords_from": args.keywords_from,
        "locations": args.locations,
        "pois": len(pois) if pois is not None else None,
        "vocabulary": len(workload.weights),
        "keywords_used": int(used.size),
        "subscription_keywords": keyword_histogram(subs.kw_ptr),
        "message_keywords": keyword_histogram(msgs.kw_ptr),
        "files": {k: str(v) for k, v in paths.items()},
        **({"routes": routes} if routes else {}),
        "seconds": {"load_network": round(t_net - t0, 3), "generate": round(t_gen - t_net, 3),
                    "write": round(t_write - t_gen, 3)},
    }
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif not args.quiet:
        print(f"wrote {len(subs):,} subscriptions, {len(msgs):,} messages and "
              f"{len(workload.weights):,} weights to {args.out_dir} "
              f"(generated in {t_gen - t_net:.2f} s, written in {t_write - t_gen:.2f} s)")
        print(f"  keywords per subscription: {_hist(summary['subscription_keywords'])}")
        print(f"  keywords per message:      {_hist(summary['message_keywords'])}")
        print(f"  vocabulary: {len(workload.weights):,} terms, {used.size:,} used")
    return 0


def _hist(h: object) -> str:
    assert isinstance(h, dict)
    return " ".join(f"{k}:{v}" for k, v in h.items()) or "-"
