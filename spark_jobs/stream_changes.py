"""Subscription changes of the streaming job: change files, their log, their application.

A change file (JSON Lines or Parquet) holds one event per row: ``op`` is ``subscribe``,
``unsubscribe`` or ``move``, and the other fields are the live service's
(:mod:`roadpubsub.index.events`): a subscribe has ``id``, ``keywords``, ``alpha``,
``tau`` and a location (``u``, ``v``, ``offset`` or ``lon``, ``lat``); an unsubscribe has
``id``; a move has ``id`` and a location. Runs of consecutive rows with the same ``op`` are
checked by the service's own parser, :class:`~roadpubsub.index.events.BodyParser`, then against
the subscription set the file meets (a subscribe's id must be new, an unsubscribed or moved
id live), so a file is accepted or refused whole, before anything is applied.

Accepted events become *records* shaped like the service's log records (``op``, ``id``,
``edge``, ``offset``, ``alpha``, ``tau``, ``keywords``: locations resolved once, on the
driver) and are applied with the index's own ``subscribe``/``unsubscribe``/``move``
(:func:`apply_record`), on the driver and, in the same order, in every executor.

:class:`ChangeLog` keeps, in the checkpoint, which change files each micro-batch consumed
and the records they became: a restart rebuilds the subscription set of any batch from the
index file and this log alone, whatever happened to the change directory since.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow.parquet as pq

from roadpubsub.index.base import SubscriptionIndex
from roadpubsub.index.events import BodyParser, RequestError
from roadpubsub.index.model import Subscriptions
from roadpubsub.roadnet.errors import InputError, describe_rows
from roadpubsub.roadnet.files import atomic_paths
from roadpubsub.roadnet.locations import EdgePoints

__all__ = [
    "CHANGE_OPS",
    "ChangeFileError",
    "ChangeLog",
    "apply_record",
    "apply_records",
    "change_records",
    "check_records",
    "fsync_dir",
    "read_change_rows",
    "visible_files",
]

#: The events a change file may hold (the live service's names).
CHANGE_OPS = ("subscribe", "unsubscribe", "move")
_JSON = (".jsonl", ".json", ".ndjson")
_PARQUET = (".parquet", ".pq")


class ChangeFileError(InputError):
    """A change file that cannot be applied (the file, rows and fields are named)."""


def visible_files(folder: Path) -> list[Path]:
    """Files of ``folder`` Spark's file source would see, in name order (the file order).

    Names starting with ``.`` or ``_`` are skipped, as Spark skips them: a producer writes
    ``.name.tmp`` and renames it, so no half-written file is ever read.
    """
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.iterdir()
                   if p.is_file() and not p.name.startswith((".", "_"))),
                  key=lambda p: p.name)


def read_change_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a change file as dicts (null fields dropped, as JSON would omit them)."""
    suffix = path.suffix.lower()
    try:
        if suffix in _JSON:
            rows: list[Any] = []
            with path.open(encoding="utf-8") as fh:
                for line_no, line in enumerate(fh, 1):
                    if line.strip():
                        try:
                            rows.append(json.loads(line))
                        except json.JSONDecodeError as exc:
                            msg = f"{path}: line {line_no} is not JSON ({exc})"
                            raise ChangeFileError(msg) from exc
        elif suffix in _PARQUET:
            rows = pq.read_table(path).to_pylist()
        else:
            msg = (f"{path}: unsupported change file type {suffix or '(no suffix)'!r}; use "
                   f"one of {', '.join(_JSON + _PARQUET)}")
            raise ChangeFileError(msg)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, ChangeFileError):
            raise
        msg = f"{path}: cannot read the file ({type(exc).__name__}: {exc})"
        raise ChangeFileError(msg) from exc
    if not all(isinstance(r, dict) for r in rows):
        msg = f"{path}: every line must be a JSON object"
        raise ChangeFileError(msg)
    return [{k: v for k, v in r.items() if v is not None} for r in rows]


def _runs(rows: list[dict[str, Any]], path: Path) -> Iterator[tuple[int, str, list[Any]]]:
    """(first row, op, rows without 'op') for each run of consecutive rows of one op."""
    start = 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or rows[i].get("op") != rows[start].get("op"):
            op = rows[start].get("op")
            if op not in CHANGE_OPS:
                msg = (f"{path}: row {start}: field 'op' must be one of "
                       f"{', '.join(CHANGE_OPS)}, got {op!r}")
                raise ChangeFileError(msg)
            yield start, str(op), [{k: v for k, v in r.items() if k != "op"}
                                   for r in rows[start:i]]
            start = i


def _unsubscribe_ids(rows: list[dict[str, Any]], path: Path, first: int
                     ) -> npt.NDArray[np.int64]:
    ids = np.zeros(len(rows), dtype=np.int64)
    for i, rec in enumerate(rows):
        value = rec.get("id")
        if set(rec) != {"id"} or not isinstance(value, int) or isinstance(value, bool) \
                or not -(2**63) <= value < 2**63:
            msg = (f"{path}: row {first + i}: an unsubscribe holds one field 'id', a 64-bit "
                   f"integer; got {rec!r}")
            raise ChangeFileError(msg)
        ids[i] = value
    return ids


def change_records(path: Path, parser: BodyParser) -> list[dict[str, Any]]:
    """The records of one change file, checked field by field (not yet against a state).

    Raises
    ------
    ChangeFileError
        Unreadable file, unknown ``op``, or a run of rows the service would refuse (the
        service's message, prefixed by the file and the run's first row).
    """
    rows = read_change_rows(path)
    if not rows:
        msg = f"{path}: the change file holds no events"
        raise ChangeFileError(msg)
    records: list[dict[str, Any]] = []
    for first, op, run in _runs(rows, path):
        try:
            if op == "subscribe":
                if any("expires_at" in r for r in run):
                    msg = (f"{path}: rows from {first}: 'expires_at' is not supported by the "
                           f"stream job (send an unsubscribe instead)")
                    raise ChangeFileError(msg)
                sb = parser.subscriptions(run)
                records.append({"op": op, "id": sb.ids.tolist(),
                                "edge": sb.points.edge.tolist(),
                                "offset": sb.points.offset.tolist(),
                                "alpha": sb.alpha.tolist(), "tau": sb.tau.tolist(),
                                "keywords": sb.keywords})
            elif op == "move":
                mb = parser.moves(run)
                records.append({"op": op, "id": mb.ids.tolist(),
                                "edge": mb.points.edge.tolist(),
                                "offset": mb.points.offset.tolist()})
            else:
                records.append({"op": op, "id": _unsubscribe_ids(run, path, first).tolist()})
        except RequestError as exc:
            msg = f"{path}: rows {first}-{first + len(run) - 1} ({op}): {exc}"
            raise ChangeFileError(msg) from exc
    return records


def check_records(index: SubscriptionIndex, records: Sequence[dict[str, Any]], path: Path
                  ) -> None:
    """Refuse records that do not fit the subscription set of ``index`` as they come:
    a subscribe of a live id, an unsubscribe or move of an id that is not live."""
    added: set[int] = set()
    removed: set[int] = set()

    def live(ids: list[int]) -> npt.NDArray[np.bool_]:
        known = index.contains(np.asarray(ids, dtype=np.int64)) if ids else np.empty(0, bool)
        return np.asarray([(k and i not in removed) or i in added
                           for i, k in zip(ids, known.tolist(), strict=True)], dtype=bool)

    for rec in records:
        ids = [int(i) for i in rec["id"]]
        now = live(ids)
        if rec["op"] == "subscribe":
            if now.any():
                taken = [i for i, x in zip(ids, now.tolist(), strict=True) if x]
                msg = f"{path}: subscription ids already exist: {describe_rows(taken)}"
                raise ChangeFileError(msg)
            added.update(ids)
            removed.difference_update(ids)
        else:
            if not now.all():
                gone = [i for i, x in zip(ids, now.tolist(), strict=True) if not x]
                msg = f"{path}: {rec['op']} of unknown subscription ids: {describe_rows(gone)}"
                raise ChangeFileError(msg)
            if len(set(ids)) != len(ids):
                msg = f"{path}: duplicate ids in one {rec['op']} run"
                raise ChangeFileError(msg)
            if rec["op"] == "unsubscribe":
                removed.update(ids)
                added.difference_update(ids)


def apply_record(index: SubscriptionIndex, rec: dict[str, Any]) -> None:
    """Apply one record with the index's own update (as the live service applies it)."""
    ids = np.asarray(rec["id"], dtype=np.int64)
    op = rec["op"]
    if op == "subscribe":
        subs = Subscriptions.from_rows(ids=ids, points=EdgePoints.of(rec["edge"], rec["offset"]),
                                       keywords=rec["keywords"],
                                       alpha=np.asarray(rec["alpha"], dtype=np.float64),
                                       tau=np.asarray(rec["tau"], dtype=np.float64),
                                       weights=index.weights)
        index.subscribe(subs)
    elif op == "unsubscribe":
        index.unsubscribe(ids)
    elif op == "move":
        index.move(ids, EdgePoints.of(rec["edge"], rec["offset"]))
    else:
        msg = f"unknown change operation {op!r}"
        raise InputError(msg)


def apply_records(index: SubscriptionIndex, records: Sequence[dict[str, Any]]) -> None:
    """Apply records in order."""
    for rec in records:
        apply_record(index, rec)


def _fsync_write(path: Path, data: bytes) -> None:
    with atomic_paths(path) as (tmp,), tmp.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ChangeLog:
    """Which change files each micro-batch consumed, and their records (in the checkpoint).

    One file per batch that consumed change files (accepted or rejected),
    ``NNNNNNNNNNNN.json``, written with temp + fsync + rename before the batch's messages
    are matched; a batch re-run after a crash finds its entry and applies exactly the same
    records (a restart has applied every entry already).
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def _path(self, batch_id: int) -> Path:
        return self.folder / f"{batch_id:012d}.json"

    def entries(self) -> list[dict[str, Any]]:
        """Every entry, by batch id."""
        out = []
        for p in sorted(self.folder.glob("[0-9]*.json")):
            with p.open(encoding="utf-8") as fh:
                out.append(json.load(fh))
        return out

    def get(self, batch_id: int) -> dict[str, Any] | None:
        """The entry of a batch, or None."""
        p = self._path(batch_id)
        if not p.exists():
            return None
        with p.open(encoding="utf-8") as fh:
            entry: dict[str, Any] = json.load(fh)
        return entry

    def write(self, batch_id: int, *, files: list[str], rejected: dict[str, str],
              records: list[dict[str, Any]]) -> dict[str, Any]:
        """Record a batch's change files (accepted in order, rejected with reasons)."""
        entry = {"batch_id": batch_id, "files": files, "rejected": rejected,
                 "records": records}
        _fsync_write(self._path(batch_id), json.dumps(entry).encode())
        return entry

