"""Arrow tables in files: Parquet (GeoParquet too), JSON Lines (or one JSON array of
records) and CSV read into a table; one table or a group written atomically.

Every writer writes temporary files in the targets' folders and renames them over the
targets (:func:`roadpubsub.roadnet.files.atomic_paths`), so a failed write leaves nothing behind.
The readers of subscriptions, messages, weights and deliveries build on these
(:mod:`roadpubsub.index.io`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.json as pajson
import pyarrow.parquet as pq

from roadpubsub.index.geofiles import read_csv_table
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.files import atomic_paths

__all__ = ["INPUT_SUFFIXES", "read_table", "write_tables"]

#: Suffixes the readers accept.
INPUT_SUFFIXES = (".parquet", ".pq", ".jsonl", ".ndjson", ".json", ".csv")
_JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")

PathLike = str | os.PathLike[str]
ErrorType = type[ValueError]


def write_table(table: pa.Table, path: PathLike) -> Path:
    """Write ``table`` atomically as Parquet, or JSON Lines for a ``.jsonl``/``.json`` path."""
    return write_tables({Path(path): table})[0]


def write_tables(tables: Mapping[PathLike, pa.Table]) -> list[Path]:
    """Write several tables atomically as a group (all files appear, or none changes).

    Each path's suffix picks the format: ``.jsonl``/``.ndjson``/``.json`` JSON Lines,
    ``.csv`` CSV, anything else Parquet.
    """
    targets = [Path(t) for t in tables]
    with atomic_paths(*targets) as temps:
        for tmp, target, table in zip(temps, targets, tables.values(), strict=True):
            _write_table_to(table, tmp, suffix=target.suffix.lower())
    return targets


def _write_table_to(table: pa.Table, tmp: Path, *, suffix: str) -> None:
    if suffix in _JSON_SUFFIXES:
        # json.dumps writes the shortest repr of each float, so values round-trip exactly.
        with tmp.open("w", encoding="utf-8") as fh:
            for row in table.to_pylist():
                fh.write(json.dumps(row, ensure_ascii=False))
                fh.write("\n")
    elif suffix == ".csv":
        import pyarrow.csv as pacsv

        pacsv.write_csv(table, tmp)
    else:
        # Page checksums let a reader tell a damaged file from a valid one.
        pq.write_table(table, tmp, write_page_checksum=True)


def read_table(path: PathLike, *, error: ErrorType = InputError) -> pa.Table:
    """Read a Parquet, JSON (Lines) or CSV file into an Arrow table.

    Raises
    ------
    FileNotFoundError
        No such file.
    error
        Unsupported suffix, or a file that is not valid Parquet/JSON.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in INPUT_SUFFIXES:
        msg = f"{p}: unsupported file type {suffix or '(no suffix)'!r}; use one of " \
              f"{', '.join(INPUT_SUFFIXES)}"
        raise error(msg)
    if not p.exists():
        msg = f"file not found: {p}"
        raise FileNotFoundError(msg)
    try:
        if suffix in _JSON_SUFFIXES:
            return _read_json(p)
        if suffix == ".csv":
            return read_csv_table(p)
        return pq.read_table(p, page_checksum_verification=True)
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        raise
    except (pa.ArrowException, OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        # pyarrow reports damaged Parquet (bad checksums, corrupt pages) as OSError.
        msg = f"{p}: cannot read the file ({type(exc).__name__}: {exc})"
        raise error(msg) from exc


def _read_json(path: Path) -> pa.Table:
    with path.open("rb") as fh:
        head = fh.read(4096).lstrip()
    if head.startswith(b"["):
        with path.open("r", encoding="utf-8") as fh:
            records = json.load(fh)
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            msg = "expected a JSON array of objects"
            raise pa.ArrowInvalid(msg)
        return pa.Table.from_pylist(records)
    if not head:
        return pa.table({})
    table = pajson.read_json(path)
    table.validate(full=True)  # the JSON reader lets bytes that are not UTF-8 through
    return table
