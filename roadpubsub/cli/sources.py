"""Command-line options shared by commands that read a network and subscriptions.

``roadpubsub match`` and ``roadpubsub index build`` take the same inputs: a network, a
subscriptions file, keyword weights (a file, or idf over a corpus), one-way handling and
the snap distance for lon/lat locations. They declare and load them here, once.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from roadpubsub.roadnet import lengths
from roadpubsub.roadnet.settings import DEFAULTS, shared_data_hint

if TYPE_CHECKING:
    from roadpubsub.index.model import Subscriptions
    from roadpubsub.index.terms import TermWeights
    from roadpubsub.roadnet.network import RoadNetwork

__all__ = [
    "add_source_arguments",
    "check_dmax",
    "read_sources",
    "read_weights_option",
    "snap_metres",
]


def add_source_arguments(parser: argparse.ArgumentParser, *, required: bool = True,
                         dmax_default: float | None = DEFAULTS.dmax_m) -> None:
    """Add --network, --subscriptions, --dmax, --weights, --corpus, --directed, --max-snap.

    Parameters
    ----------
    parser
        The command's parser.
    required
        Whether --network and --subscriptions must be given (a command may accept another
        source instead and check the combination itself).
    dmax_default
        Default of --dmax in metres (None: the command resolves it).
    """
    parser.add_argument("--network", required=required, metavar="PATH",
                        help="road network file")
    parser.add_argument("--subscriptions", required=required, metavar="F",
                        help="subscriptions (.parquet/GeoParquet, .jsonl or .csv)")
    parser.add_argument("--dmax", type=float, default=dmax_default, metavar="METRES",
                        help="largest network distance in metres "
                             f"(default {DEFAULTS.dmax_m:g})")
    parser.add_argument("--weights", metavar="F", default=None,
                        help="keyword weights (term, weight); default: idf over --corpus")
    parser.add_argument("--corpus", metavar="PATH", default=None,
                        help="text corpus for idf weights when --weights is absent: a CSV "
                             "with a 'text' column or one document per line (default: "
                             "shared tweets)")
    parser.add_argument("--directed", action="store_true",
                        help="honour one-way roads (distance runs from subscription to "
                             "message)")
    parser.add_argument("--max-snap", type=snap_metres, default=DEFAULTS.snap_distance_m,
                        metavar="METRES", help="largest snap distance for lon/lat locations, "
                        "and largest gap between a row's u/v/offset and its own lon/lat "
                        f"(default {DEFAULTS.snap_distance_m:g}; inf: no limit)")
    parser.add_argument("--exact-keywords", action="store_true",
                        help="compare keywords as exact strings (default: after Unicode NFC, "
                             "case folding and stripping, so 'DELAYED' matches 'delayed')")


def snap_metres(text: str) -> float:
    """The --max-snap value: metres >= 0, or inf for any distance (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value >= 0:  # NaN would switch the snap check off silently
        msg = f"must be a number of metres >= 0 (inf: any distance), got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def check_dmax(dmax: float) -> float:
    """The --dmax value (metres), or one clear error when it is out of range."""
    return lengths.check_dmax(dmax, name="--dmax")


def read_weights_option(args: argparse.Namespace) -> TermWeights:
    """The --weights file, or smoothed idf over --corpus (default: the shared tweets)."""
    from roadpubsub.index.io import read_weights
    from roadpubsub.index.terms import TermWeights
    from roadpubsub.index.text import read_text_corpus
    from roadpubsub.index.workload import default_tweets_path

    normalize = not getattr(args, "exact_keywords", False)
    args.weights_from = "file"
    if args.weights:
        return read_weights(args.weights, normalize=normalize)
    corpus = Path(args.corpus) if args.corpus else default_tweets_path()
    if not args.corpus and not corpus.exists():
        # No corpus anywhere: the run's own keyword lists stand in for one (reweighed
        # once they are read; see read_sources and the match command).
        args.weights_from = "own keywords"
        if not getattr(args, "quiet", False):
            print(f"note: no tweet corpus found ({shared_data_hint()}); keyword weights are "
                  "idf over this run's own subscriptions and messages", file=sys.stderr)
        return TermWeights({}, default_weight=1.0, normalize=normalize)
    args.weights_from = "corpus"
    return TermWeights.from_idf(read_text_corpus(corpus), normalize=normalize)


def read_sources(args: argparse.Namespace) -> tuple[RoadNetwork, TermWeights, Subscriptions]:
    """Load the network, the weights and the subscriptions the options name."""
    from roadpubsub.index.io import read_subscriptions
    from roadpubsub.roadnet.io import load_network

    network = load_network(args.network, directed=args.directed)
    weights = read_weights_option(args)
    known = len(weights)
    subs = read_subscriptions(args.subscriptions, network, weights, max_snap_m=args.max_snap)
    added = len(weights) - known
    if args.weights_from == "own keywords":
        weights.reweigh_by_idf((subs.kw_ptr, subs.kw_terms))
        added = 0  # every keyword is weighed by the run itself
    args.keywords_not_in_weights = added  # for the command's JSON summary, even with --quiet
    if added and not getattr(args, "quiet", False):
        # Legal (they weigh the default), but a mistyped keyword shows up here.
        print(f"note: {added:,} keyword(s) of the subscriptions are not in the weights "
              f"table; they weigh the default, {weights.default_weight:g}", file=sys.stderr)
    return network, weights, subs
