"""Shared by the stream job tests: a world of files and the single-process reference.

The reference keeps the subscription set as a plain dict, applies each round's events in
file order, builds a fresh :class:`~roadpubsub.index.eia.EnhancedIndex` and matches the round's
messages with :class:`~roadpubsub.pruning.indexed.IndexMatcher`: no part of the stream job's own
change handling is used.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.io import messages_table, read_messages, subscriptions_table
from roadpubsub.index.model import Messages, Subscriptions
from roadpubsub.index.store import load_index
from roadpubsub.index.terms import TermWeights
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.indexed import IndexMatcher
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork

#: A keyword no generated subscription or message holds: subscribing it adds a term.
NEW_TERM = "zzstreamword"


def land(path: Path, data: bytes) -> None:
    """Write a file as a producer must: a hidden temporary name, then a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def land_table(path: Path, table: pa.Table) -> None:
    """Land a table as Parquet (``.parquet``) or JSON Lines (``.jsonl``)."""
    if path.suffix == ".jsonl":
        land(path, "".join(json.dumps(r) + "\n" for r in table.to_pylist()).encode())
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, path)


@dataclass
class Reference:
    """The subscription set as plain rows, and the deliveries of each round."""

    index_file: Path
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    weights: TermWeights | None = None
    found: list[Deliveries] = field(default_factory=list)

    def __post_init__(self) -> None:
        index = load_index(self.index_file)
        self.spatial = index.spatial
        self.dmax_m = index.dmax_m
        self.weights = index.weights
        subs = index.subscriptions()
        terms = index.weights.terms
        for i in range(len(subs)):
            self.rows[int(subs.ids[i])] = {
                "edge": int(subs.points.edge[i]), "offset": float(subs.points.offset[i]),
                "alpha": float(subs.alpha[i]), "tau": float(subs.tau[i]),
                "keywords": [terms[t] for t in subs.keywords(i).tolist()]}

    def apply(self, events: list[dict[str, Any]]) -> None:
        """Events as the test wrote them (with their resolved edge and offset)."""
        for e in events:
            if e["op"] == "subscribe":
                assert e["id"] not in self.rows
                self.rows[e["id"]] = {k: e[k] for k in ("edge", "offset", "alpha", "tau",
                                                        "keywords")}
            elif e["op"] == "unsubscribe":
                del self.rows[e["id"]]
            else:
                self.rows[e["id"]].update(edge=e["edge"], offset=e["offset"])

    def match(self, files: list[Path]) -> Deliveries:
        """Deliveries of message files against the current set (a fresh index)."""
        assert self.weights is not None
        ids = sorted(self.rows)
        r = [self.rows[i] for i in ids]
        subs = Subscriptions.from_rows(
            ids=np.asarray(ids, dtype=np.int64),
            points=EdgePoints.of([x["edge"] for x in r], [x["offset"] for x in r]),
            keywords=[x["keywords"] for x in r], alpha=[x["alpha"] for x in r],
            tau=[x["tau"] for x in r], weights=self.weights)
        index = EnhancedIndex(self.spatial, subs, self.weights, dmax_m=self.dmax_m)
        matcher = IndexMatcher(index)
        parts = [matcher.match(read_messages(f, self.spatial.network, self.weights))
                 for f in files]
        found = Deliveries.concat(parts)
        self.found.append(found)
        return found


def subscribe_events(subs: Subscriptions, weights: TermWeights, network: RoadNetwork,
                     *, extra_term: bool = False) -> tuple[list[dict[str, Any]],
                                                           list[dict[str, Any]]]:
    """(file rows, reference events) subscribing ``subs`` (the first with NEW_TERM)."""
    table = subscriptions_table(subs, network=network, weights=weights)
    rows, events = [], []
    for i, rec in enumerate(table.to_pylist()):
        if extra_term and i == 0:
            rec["keywords"] = [*rec["keywords"], NEW_TERM]
        rows.append({"op": "subscribe", **rec})
        events.append({"op": "subscribe", "id": rec["id"],
                       "edge": int(subs.points.edge[i]),
                       "offset": float(subs.points.offset[i]), "alpha": rec["alpha"],
                       "tau": rec["tau"], "keywords": rec["keywords"]})
    return rows, events


def move_events(ids: list[int], targets: Subscriptions, weights: TermWeights,
                network: RoadNetwork) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(file rows, reference events) moving ``ids`` to the locations of ``targets``."""
    table = subscriptions_table(targets, network=network, weights=weights)
    rows, events = [], []
    for i, (sid, rec) in enumerate(zip(ids, table.to_pylist(), strict=True)):
        loc = {k: rec[k] for k in ("u", "v", "offset", "lon", "lat")}
        rows.append({"op": "move", "id": sid, **loc})
        events.append({"op": "move", "id": sid, "edge": int(targets.points.edge[i]),
                       "offset": float(targets.points.offset[i])})
    return rows, events


def unsubscribe_events(ids: list[int]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(file rows, reference events) unsubscribing ``ids``."""
    rows = [{"op": "unsubscribe", "id": i} for i in ids]
    return rows, [dict(r) for r in rows]


def message_table(messages: Messages, weights: TermWeights, network: RoadNetwork, *,
                  extra_term: bool = False) -> pa.Table:
    """Messages as a file table (the first with NEW_TERM added)."""
    table = messages_table(messages, network=network, weights=weights)
    if extra_term:
        rows = table.to_pylist()
        rows[0]["keywords"] = [*rows[0]["keywords"], NEW_TERM]
        table = pa.Table.from_pylist(rows, schema=table.schema)
    return table


def jsonl(rows: list[dict[str, Any]]) -> bytes:
    """JSON Lines bytes of rows."""
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def assert_same(sink: pa.Table, want: Deliveries) -> None:
    """The sink's deliveries equal ``want`` exactly (each pair once)."""
    order = np.lexsort((np.asarray(sink.column("subscription_id")),
                        np.asarray(sink.column("message_id"))))
    got = sink.take(pa.array(order))
    pairs = set(zip(got.column("message_id").to_pylist(),
                    got.column("subscription_id").to_pylist(), strict=True))
    assert len(pairs) == got.num_rows, "a delivery is in the sink more than once"
    for name, value in want.to_columns().items():
        np.testing.assert_array_equal(np.asarray(got.column(name)), value, err_msg=name)
