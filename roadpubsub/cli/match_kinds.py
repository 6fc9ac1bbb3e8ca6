"""``roadpubsub match`` on a subscriptions file with a ``kind`` column (issue 21).

Threshold and boolean subscriptions produce deliveries (the ``--out`` file, as always; a
boolean delivery's score is 1.0). Top-k subscriptions produce the events of
:mod:`pruning.topk_events` in the ``--topk-out`` file (default: ``--out`` with ``-topk``
before its suffix): columns seq, event (insert/evict), message_id, subscription_id, rank,
score, distance. Messages arrive in file order; the window holds the last ``--window``.
``--index brute`` runs every kind's reference matcher instead of its index.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from roadnet.errors import InputError

__all__ = ["has_kind_column", "run_kinds", "run_kinds_command", "topk_expiry",
           "topk_out_path"]


def has_kind_column(path: str | Path) -> bool:
    """Whether a subscriptions file has a ``kind`` column (Parquet: from its schema)."""
    import pyarrow.parquet as pq

    from index.io import read_table

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


def topk_expiry(subscriptions: str | Path, messages: str | Path, sub_ids: Any,
                message_ids: Any) -> tuple[Any, Any]:
    """``expires_at`` of the top-k rows and the messages' times, or (None, None) when the
    subscriptions file has no ``expires_at`` column.

    The rule of 'roadpubsub serve' and of threshold matching: a message whose ``time``
    (epoch seconds; the clock now when the messages have no such column or a null) is
    at least a subscription's ``expires_at`` (null: never) is not offered to it. For a
    top-k subscription that is the instant it is withdrawn: at the first such message in
    stream order its top-k is evicted and its result stays empty
    (:meth:`pruning.topk.TopkIndexMatcher.push`).
    """
    import numpy as np

    from index.io import read_table

    subs = read_table(subscriptions)
    if "expires_at" not in subs.column_names:
        return None, None
    sid = np.asarray(subs.column("id").to_numpy(zero_copy_only=False), dtype=np.int64)
    exp = np.asarray(subs.column("expires_at").to_numpy(zero_copy_only=False),
                     dtype=np.float64)  # nulls are NaN: never
    order = np.argsort(sid, kind="stable")
    expires = exp[order[np.searchsorted(sid[order], np.asarray(sub_ids, np.int64))]]
    msgs = read_table(messages)
    now = time.time()
    if "time" not in msgs.column_names:
        return expires, np.full(len(message_ids), now)
    mid = np.asarray(msgs.column("id").to_numpy(zero_copy_only=False), dtype=np.int64)
    when = np.asarray(msgs.column("time").to_numpy(zero_copy_only=False), dtype=np.float64)
    when = np.where(np.isnan(when), now, when)
    order = np.argsort(mid, kind="stable")
    return expires, when[order[np.searchsorted(mid[order], np.asarray(message_ids,
                                                                       np.int64))]]


def run_kinds(args: argparse.Namespace, dmax: float, say: Any) -> tuple[Any, dict[str, Any]]:
    """Read every kind, match, write the top-k events; (deliveries, summary additions)."""
    import pyarrow as pa

    from index.io import read_messages, write_tables
    from index.kinds_io import read_subscription_set
    from index.spatial import SpatialIndex
    from pruning.boolean import BooleanIndexMatcher
    from pruning.deliveries import Deliveries
    from pruning.kinds_reference import BooleanBruteMatcher, TopkBruteMatcher, check_window
    from pruning.matchers import build_matcher
    from pruning.topk import TopkIndexMatcher
    from roadnet.files import check_output_path
    from roadnet.io import load_network
    from roadpubsub.cli.sources import read_weights_option

    t0 = time.perf_counter()
    window = check_window(args.window)
    topk_out = topk_out_path(args)
    check_output_path(topk_out, what="--topk-out", inputs=(
        args.network, args.subscriptions, args.messages, args.weights, args.corpus, args.out))
    if topk_out.resolve() == Path(args.out).resolve():
        msg = f"--topk-out {topk_out} is the --out file; give another"
        raise InputError(msg)
    network = load_network(args.network, directed=args.directed)
    weights = read_weights_option(args)
    known = len(weights)
    subs = read_subscription_set(args.subscriptions, network, weights, dmax_m=dmax,
                                 max_snap_m=args.max_snap)
    args.keywords_not_in_weights = len(weights) - known
    messages = read_messages(args.messages, network, weights, max_snap_m=args.max_snap)
    if args.weights_from == "own keywords":
        weights.reweigh_by_idf(*((b.kw_ptr, b.kw_terms) for b in
                                 (subs.threshold, subs.boolean, subs.topk)),
                               (messages.kw_ptr, messages.kw_terms))
        args.keywords_not_in_weights = 0
    brute = args.index == "brute"
    name = args.index or "eia"
    t_read = time.perf_counter()
    say(f"read {subs.counts()} subscriptions and {len(messages):,} messages in "
        f"{t_read - t0:.1f} s")
    parts = []
    # One cell structure (cells and cell-pair bounds, the costly part of every index's
    # build) shared by the threshold index and the kind indexes.
    spatial = None if brute or len(subs) == 0 else SpatialIndex.build(network)
    if len(subs.threshold):
        parts.append(build_matcher(name, network, subs.threshold, weights, dmax_m=dmax,
                                   spatial=spatial).match(messages))
    if len(subs.boolean):
        bm = (BooleanBruteMatcher(network, subs.boolean, weights, dmax_m=dmax) if brute
              else BooleanIndexMatcher(network, subs.boolean, weights, dmax_m=dmax,
                                       spatial=spatial))
        parts.append(bm.match(messages))
    deliveries = Deliveries.concat(parts)
    n_events = 0
    if len(subs.topk):
        expires, times = topk_expiry(args.subscriptions, args.messages, subs.topk.ids,
                                     messages.ids)
        tm = (TopkBruteMatcher(network, subs.topk, weights, dmax_m=dmax, window=window,
                               expires_at=expires)
              if brute else TopkIndexMatcher(network, subs.topk, weights, dmax_m=dmax,
                                             window=window, spatial=spatial,
                                             expires_at=expires))
        events = tm.push(messages, times=times)
        n_events = len(events)
        write_tables({topk_out: pa.table({k: pa.array(v)
                                          for k, v in events.to_columns().items()})})
    t_match = time.perf_counter()
    return deliveries, {
        "kinds": subs.counts(), "subscriptions": len(subs), "window": window,
        "topk_events": n_events, "topk_out": str(topk_out) if len(subs.topk) else None,
        "network_obj": network, "messages_obj": messages,
        "index": "brute" if brute else f"{name}+boolean+topk",
        "t_read": t_read, "t_match": t_match,
    }


def run_kinds_command(args: argparse.Namespace, dmax: float, say: Any, t0: float) -> int:
    """The rest of ``roadpubsub match`` for a file with a ``kind`` column."""
    import json
    import sys

    from index.io import write_deliveries
    from roadpubsub.cli.match import _drop_expired

    deliveries, info = run_kinds(args, dmax, say)
    deliveries = _drop_expired(deliveries, args.subscriptions, args.messages)
    t_match = info["t_match"]
    write_deliveries(deliveries, Path(args.out))
    t_write = time.perf_counter()
    n = len(info["messages_obj"])
    match_s = t_match - info["t_read"]
    summary = {
        "index": info["index"], "index_file": None, "network": str(args.network),
        "directed": bool(info["network_obj"].directed), "dmax_m": dmax,
        "subscriptions": info["subscriptions"], "kinds": info["kinds"], "messages": n,
        "deliveries": len(deliveries), "window": info["window"],
        "topk_events": info["topk_events"], "topk_out": info["topk_out"],
        "keywords_not_in_weights": getattr(args, "keywords_not_in_weights", 0),
        "weights_from": getattr(args, "weights_from", None), "out": str(args.out),
        "seconds": {"read": round(info["t_read"] - t0, 3), "match": round(match_s, 3),
                    "write": round(t_write - t_match, 3)},
        "messages_per_second": round(n / match_s, 1) if match_s > 0 else None,
    }
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif not args.quiet:
        extra = (f"; {info['topk_events']:,} top-k events -> {info['topk_out']}"
                 if info["topk_out"] else "")
        print(f"{len(deliveries):,} deliveries of {n:,} messages to {info['kinds']} "
              f"subscriptions (Dmax {dmax:g} m) -> {args.out}{extra}")
    return 0
