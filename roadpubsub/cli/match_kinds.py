"""The inputs and outputs of ``roadpubsub match`` beyond threshold subscriptions (issue 21).

A subscriptions file with a ``kind`` column may mix threshold, boolean and top-k rows
(:func:`read_kind_sources`). Threshold and boolean subscriptions produce deliveries (the
``--out`` file, as always; a boolean delivery's score is 1.0). Top-k subscriptions
produce the events of :mod:`roadpubsub.pruning.topk_events` in the ``--topk-out`` file (default:
``--out`` with ``-topk`` before its suffix; :func:`write_topk_events`): columns seq,
event (insert/evict), message_id, subscription_id, rank, score, distance. Messages
arrive in file order; the window holds the last ``--window``. ``--index brute`` runs
every kind's reference matcher instead of its index. Matching is the library's
(:class:`roadpubsub.pruning.mixed.MixedMatcher`), expiry its rule (:mod:`roadpubsub.pruning.expiry`;
:func:`read_expiry` reads the columns).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING

from roadpubsub.roadnet.errors import InputError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from roadpubsub.index.kinds import SubscriptionSet
    from roadpubsub.index.terms import TermWeights
    from roadpubsub.pruning.expiry import Expiry
    from roadpubsub.pruning.topk_events import TopkEvents
    from roadpubsub.roadnet.network import RoadNetwork

__all__ = ["check_topk_out", "has_kind_column", "read_expiry", "read_kind_sources",
           "topk_out_path", "write_topk_events"]


def has_kind_column(path: str | Path) -> bool:
    """Whether a subscriptions file has a ``kind`` column (Parquet: from its schema)."""
    import pyarrow.parquet as pq

    from roadpubsub.index.tables import read_table

    p = Path(path)
    if p.suffix.lower() in (".parquet", ".pq") and p.exists():
        try:
            return "kind" in pq.read_schema(p).names
        except (OSError, ValueError):  # the reader names a damaged file properly
            return False
    try:
        return "kind" in read_table(p).column_names
    except (ValueError, OSError):
        return False


def topk_out_path(args: argparse.Namespace) -> Path:
    """The top-k events file: --topk-out, or --out with ``-topk`` before its suffix."""
    if getattr(args, "topk_out", None):
        return Path(args.topk_out)
    out = Path(args.out)
    return out.with_name(f"{out.stem}-topk{out.suffix}")


def check_topk_out(args: argparse.Namespace) -> Path:
    """The top-k events file, checked before any work: not an input, not ``--out``."""
    from roadpubsub.roadnet.files import check_output_path

    topk_out = topk_out_path(args)
    check_output_path(topk_out, what="--topk-out", inputs=(
        args.network, args.subscriptions, args.messages, args.weights, args.corpus, args.out))
    if topk_out.resolve() == Path(args.out).resolve():
        msg = f"--topk-out {topk_out} is the --out file; give another"
        raise InputError(msg)
    return topk_out


def read_kind_sources(args: argparse.Namespace, dmax: float
                      ) -> tuple[RoadNetwork, TermWeights, SubscriptionSet]:
    """The network, the weights and the subscriptions of every kind the options name
    (``args.keywords_not_in_weights`` counts the subscriptions' keywords the weights
    lacked)."""
    from roadpubsub.cli.sources import read_weights_option
    from roadpubsub.index.kinds_io import read_subscription_set
    from roadpubsub.roadnet.io import load_network

    network = load_network(args.network, directed=args.directed)
    weights = read_weights_option(args)
    known = len(weights)
    subs = read_subscription_set(args.subscriptions, network, weights, dmax_m=dmax,
                                 max_snap_m=args.max_snap)
    args.keywords_not_in_weights = len(weights) - known
    return network, weights, subs


def read_expiry(subscriptions: str | Path, messages: str | Path,
                message_ids: npt.NDArray[np.int64]
                ) -> tuple[Expiry | None, npt.NDArray[np.float64] | None]:
    """Who expires when, and each message's time (epoch seconds, in the order of
    ``message_ids``), or (None, None) when the subscriptions file has no ``expires_at``
    column.

    A null ``expires_at`` never expires; a message without a ``time`` (no column, or a
    null) takes the clock now. The rule is :mod:`roadpubsub.pruning.expiry`'s (a batch's clock:
    each message's own time).
    """
    import numpy as np

    from roadpubsub.index.tables import read_table
    from roadpubsub.pruning.expiry import Expiry

    subs = read_table(subscriptions)
    if "expires_at" not in subs.column_names:
        return None, None
    sid = np.asarray(subs.column("id").to_numpy(zero_copy_only=False), dtype=np.int64)
    exp = np.asarray(subs.column("expires_at").to_numpy(zero_copy_only=False),
                     dtype=np.float64)  # nulls are NaN: never
    msgs = read_table(messages)
    now = time.time()
    if "time" not in msgs.column_names:
        return Expiry.of(sid, exp), np.full(message_ids.size, now)
    mid = np.asarray(msgs.column("id").to_numpy(zero_copy_only=False), dtype=np.int64)
    when = np.asarray(msgs.column("time").to_numpy(zero_copy_only=False), dtype=np.float64)
    when = np.where(np.isnan(when), now, when)
    order = np.argsort(mid, kind="stable")
    return Expiry.of(sid, exp), when[order[np.searchsorted(mid[order], message_ids)]]


def write_topk_events(events: TopkEvents, path: Path) -> None:
    """The top-k events file (written under a temporary name, then renamed)."""
    import pyarrow as pa

    from roadpubsub.index.tables import write_tables

    write_tables({path: pa.table({k: pa.array(v) for k, v in events.to_columns().items()})})
