"""Subscription, message, weight and delivery files: Parquet, JSON Lines or CSV.

File layouts (one row per object)
---------------------------------
subscriptions
    ``id`` int64 (unique), a location, ``keywords`` list<string> (non-empty; a set),
    ``alpha`` float64 in [0, 1], ``tau`` float64 in (0, 1]. Files may add a ``kind``
    column mixing boolean and top-k rows (:mod:`index.kinds_io`); this module's reader
    refuses those rows by id.
messages
    ``id`` int64 (unique), a location, ``keywords`` list<string> (non-empty).
location
    either ``u``, ``v`` (int64 node ids of the network file) and ``offset`` (float64, metres
    from u along the u-v edge), or ``lon``, ``lat`` (float64 WGS84 degrees; snapped to the
    nearest road within ``max_snap_m`` metres). A row with u, v and offset uses them; a row
    without uses lon/lat. Writers emit both; u/v/offset round-trip exactly. A row with both
    uses its lon/lat to tell parallel edges between u and v apart, and is refused when its
    u/v/offset place lies more than ``max_snap_m`` (at least 1 m) from its lon/lat: the
    sign of a file written for another network. A GeoParquet file may give a point
    ``geometry`` column instead, in any CRS (:mod:`index.geofiles`).
weights
    ``term`` string (unique), ``weight`` float64 > 0. The weight of terms missing from the
    table is kept in the Parquet schema metadata (``roadpubsub.default_weight``) when known.
deliveries
    ``message_id``, ``subscription_id`` int64, ``distance`` float64 metres, ``score``.

Readers accept ``.parquet``/``.pq`` (GeoParquet too), ``.jsonl``/``.ndjson``/``.json``
(JSON Lines, or one JSON array of records) and ``.csv`` (the same columns; ``keywords``
separated by ``;`` in one cell, see :mod:`index.geofiles`). Invalid input raises one error
naming every problem and the offending ids (:class:`~index.model.InvalidSubscriptionError`,
:class:`~index.model.InvalidMessageError`, :class:`~index.terms.InvalidWeightsError`, all
``ValueError``). Every writer is atomic: it writes a temporary file in the target's folder
and renames it over the target, so a failed write leaves nothing behind.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
import pyarrow.parquet as pq
from pyproj import CRS, Transformer

from index.geofiles import geometry_to_lonlat, keywords_from_text, read_csv_table
from index.model import InvalidMessageError, InvalidSubscriptionError, Messages, Subscriptions
from index.terms import MAX_WEIGHT, MIN_WEIGHT, InvalidWeightsError, TermWeights
from roadnet.errors import InputError, InvalidLocationError, describe_rows
from roadnet.files import atomic_paths
from roadnet.locations import EdgePoints, locate_uv, locate_xy, point_xy
from roadnet.network import RoadNetwork
from roadnet.settings import DEFAULTS

__all__ = [
    "DEFAULT_WEIGHT_KEY",
    "INPUT_SUFFIXES",
    "DeliveryColumns",
    "atomic_paths",
    "deliveries_table",
    "keyword_term_csr",
    "messages_table",
    "read_deliveries",
    "read_messages",
    "read_subscriptions",
    "read_table",
    "read_weights",
    "subscriptions_table",
    "weights_table",
    "write_deliveries",
    "write_messages",
    "write_subscriptions",
    "write_tables",
    "write_weights",
]

#: Parquet schema metadata key holding the weight of terms absent from a weights table.
DEFAULT_WEIGHT_KEY = b"roadpubsub.default_weight"
#: Suffixes the readers accept.
INPUT_SUFFIXES = (".parquet", ".pq", ".jsonl", ".ndjson", ".json", ".csv")
_JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")

PathLike = str | os.PathLike[str]
ErrorType = type[ValueError]


class DeliveryColumns(Protocol):
    """Anything with the deliveries columns, such as :class:`pruning.deliveries.Deliveries`
    (the index layer does not import the pruning layer)."""

    def to_columns(self) -> dict[str, npt.NDArray[np.generic]]:
        """Columns ``message_id``, ``subscription_id``, ``distance``, ``score``."""
        ...


# atomic_paths lives in roadnet.files (the lowest layer) so every writer shares it.


def _write_table(table: pa.Table, path: PathLike) -> Path:
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


# ---------------------------------------------------------------------------- reading tables
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


# ---------------------------------------------------------------------------- column checks
def _column(table: pa.Table, name: str) -> pa.Array:
    col = table.column(name)
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _is_numeric(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_null(t))


def _is_int(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_null(t))


def _is_string(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        return _is_string(t.value_type)
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t))


def _is_keyword_list(t: pa.DataType) -> bool:
    if pa.types.is_null(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _is_string(t.value_type)
    return False


def _float_values(arr: pa.Array) -> npt.NDArray[np.float64]:
    """Numeric column as float64 with NaN for nulls."""
    if pa.types.is_null(arr.type):
        return np.full(len(arr), np.nan)
    # A copy: Arrow's buffers are read-only and the arrays outlive the table.
    return np.array(pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False),
                    dtype=np.float64, copy=True)


def _int_values(arr: pa.Array) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """Integer column as int64 (0 for nulls) and its null mask."""
    if pa.types.is_null(arr.type):
        return np.zeros(len(arr), np.int64), np.ones(len(arr), dtype=bool)
    null = np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    values = pc.cast(arr.fill_null(0), pa.int64()).to_numpy(zero_copy_only=False)
    return np.array(values, dtype=np.int64, copy=True), null


def _check_columns(table: pa.Table, path: Path, error: ErrorType, *, kind: str,
                   extra: Sequence[str]) -> tuple[bool, bool]:
    """Raise for missing or mistyped columns; returns (has u/v/offset, has lon/lat)."""
    cols = set(table.column_names)
    has_uv = {"u", "v", "offset"} <= cols
    has_ll = {"lon", "lat"} <= cols
    missing = [c for c in ("id", "keywords", *extra) if c not in cols]
    if not (has_uv or has_ll):
        missing.append("location (u, v, offset or lon, lat)")
    if missing:
        msg = f"invalid {kind} in {path}: missing columns: {', '.join(missing)}"
        raise error(msg)
    expect: dict[str, tuple[Callable[[pa.DataType], bool], str]] = {
        "id": (_is_int, "integer"),
        "keywords": (_is_keyword_list, "list<string>"),
    }
    for c in extra:
        expect[c] = (_is_numeric, "float")
    if has_uv:
        expect.update({"u": (_is_int, "integer"), "v": (_is_int, "integer"),
                       "offset": (_is_numeric, "float")})
    if has_ll:
        expect.update({"lon": (_is_numeric, "float"), "lat": (_is_numeric, "float")})
    wrong = [f"{c} is {table.schema.field(c).type}, expected {want}"
             for c, (ok, want) in expect.items() if not ok(table.schema.field(c).type)]
    if wrong:
        msg = f"invalid {kind} in {path}: wrong column types: {'; '.join(wrong)}"
        raise error(msg)
    return has_uv, has_ll


def _names(labels: npt.NDArray[Any], mask: npt.NDArray[np.bool_]) -> str:
    rows = np.flatnonzero(mask)
    return describe_rows(labels[rows[:10]].tolist(), total=int(rows.size))


def _row_labels(ids: npt.NDArray[np.int64], null: npt.NDArray[np.bool_]) -> npt.NDArray[Any]:
    """Ids as labels for messages; rows without an id are called ``row N``."""
    if not null.any():
        return ids
    labels = ids.astype(object)
    for r in np.flatnonzero(null):
        labels[r] = f"row {r}"
    return labels


# ---------------------------------------------------------------------------- locations
def _read_locations(
    table: pa.Table,
    network: RoadNetwork,
    labels: npt.NDArray[Any],
    problems: list[str],
    *,
    has_uv: bool,
    has_ll: bool,
    max_snap_m: float,
) -> EdgePoints:
    """Edge points of every row; problems are appended (the points are then meaningless)."""
    n = table.num_rows
    edge = np.zeros(n, dtype=np.int32)
    offset = np.zeros(n, dtype=np.float64)
    use_uv = np.zeros(n, dtype=bool)
    if has_uv:
        u, u_null = _int_values(_column(table, "u"))
        v, v_null = _int_values(_column(table, "v"))
        off = _float_values(_column(table, "offset"))
        use_uv = ~u_null & ~v_null & np.isfinite(off)
    use_ll = np.zeros(n, dtype=bool)
    if has_ll:
        lon = _float_values(_column(table, "lon"))
        lat = _float_values(_column(table, "lat"))
        use_ll = ~use_uv & np.isfinite(lon) & np.isfinite(lat)
    missing = ~(use_uv | use_ll)
    if missing.any():
        problems.append(f"missing or NaN location: ids {_names(labels, missing)}")
    near_xy = _projected(network, lon, lat) if has_ll else None
    if use_uv.any():
        rows = np.flatnonzero(use_uv)
        near = near_xy[rows] if near_xy is not None else None
        try:
            pts = locate_uv(network, u[rows], v[rows], off[rows], labels=labels[rows],
                            near_xy=near)
        except InvalidLocationError:
            # Diagnose: unknown node ids first, then whatever the rest breaks.
            unknown = (network.node_index(u[rows]) < 0) | (network.node_index(v[rows]) < 0)
            if unknown.any():
                problems.append(f"unknown node ids in u/v: ids {_names(labels[rows], unknown)}")
                rows = rows[~unknown]
            try:
                locate_uv(network, u[rows], v[rows], off[rows], labels=labels[rows])
            except InvalidLocationError as exc:
                problems.append(str(exc).replace(": ", ": ids ", 1))
        else:
            edge[rows], offset[rows] = pts.edge, pts.offset
            if near is not None:
                _check_uv_against_lonlat(network, pts, near, labels[rows], problems,
                                         max_snap_m=max_snap_m)
    if use_ll.any():
        rows = np.flatnonzero(use_ll)
        bad = (np.abs(lon[rows]) > 180) | (np.abs(lat[rows]) > 90)
        if bad.any():
            problems.append(f"lon/lat outside the valid range: ids {_names(labels[rows], bad)}")
            rows = rows[~bad]
        assert near_xy is not None  # has_ll holds wherever use_ll does
        try:
            # Projected once above, for these rows and for the u/v rows' check alike.
            pts, _ = locate_xy(network, near_xy[rows, 0], near_xy[rows, 1],
                               max_snap_m=max_snap_m, labels=labels[rows])
        except InvalidLocationError as exc:
            problems.append(str(exc).replace(": ", ": ids ", 1))
        else:
            edge[rows], offset[rows] = pts.edge, pts.offset
    return EdgePoints(edge, offset)


def _projected(network: RoadNetwork, lon: npt.NDArray[np.float64],
               lat: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """(n, 2) positions in ``network.crs`` metres; NaN rows where lon/lat are invalid."""
    valid = np.isfinite(lon) & np.isfinite(lat) & (np.abs(lon) <= 180) & (np.abs(lat) <= 90)
    xy = np.full((lon.size, 2), np.nan)
    if valid.any():
        to_metric = Transformer.from_crs(CRS.from_epsg(4326), CRS.from_user_input(network.crs),
                                         always_xy=True)
        xy[valid, 0], xy[valid, 1] = to_metric.transform(lon[valid], lat[valid])
    return xy


def _check_uv_against_lonlat(
    network: RoadNetwork,
    points: EdgePoints,
    near_xy: npt.NDArray[np.float64],
    labels: npt.NDArray[Any],
    problems: list[str],
    *,
    max_snap_m: float,
) -> None:
    """Rows whose u/v/offset place lies far from their own lon/lat (``near_xy``, projected).

    Node ids alone cannot tell networks apart (small ids exist in many files), but a row
    read with another network's file lands far from its coordinates: say so rather than
    match it quietly. "Far" is beyond ``max_snap_m``, and never below 1 m: the writers'
    lon/lat round-trip to within nanometres. Rows without lon/lat, or with inf
    ``max_snap_m``, are not checked.
    """
    given = np.isfinite(near_xy).all(axis=1)
    if not np.isfinite(max_snap_m) or not given.any():
        return
    limit = max(max_snap_m, 1.0)
    xy = point_xy(network, points[np.flatnonzero(given)])
    gap = np.hypot(*(xy - near_xy[given]).T)
    far = gap > limit
    if far.any():
        problems.append(
            f"u/v/offset more than {limit:g} m from the row's own lon/lat (a file written "
            f"for another network? largest gap {gap[far].max():,.0f} m): ids "
            f"{_names(labels[given], far)}")


# ---------------------------------------------------------------------------- keywords
def _keyword_rows(table: pa.Table, labels: npt.NDArray[Any], problems: list[str]
                  ) -> tuple[npt.NDArray[np.int64], pa.Array]:
    """Per-row keyword counts (as in the file) and the flat keyword strings."""
    col = _column(table, "keywords")
    n = len(col)
    if pa.types.is_null(col.type):
        problems.append(f"missing or empty keyword list: ids {_names(labels, np.ones(n, bool))}")
        return np.zeros(n, np.int64), pa.array([], pa.string())
    lengths = np.asarray(pc.list_value_length(col).fill_null(0).to_numpy(
        zero_copy_only=False), dtype=np.int64)
    empty = lengths == 0
    if empty.any():
        problems.append(f"missing or empty keyword list: ids {_names(labels, empty)}")
    values = pc.list_flatten(col)
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    if pa.types.is_null(values.type):
        values = pa.array([None] * len(values), pa.string())
    values = pc.cast(values, pa.string())
    blank = pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(values)), 0)
    bad_value = np.asarray(
        pc.or_kleene(values.is_null(), blank).fill_null(True)
        .to_numpy(zero_copy_only=False), dtype=bool)
    if bad_value.any():
        row_of = np.repeat(np.arange(n), lengths)
        bad_rows = np.zeros(n, dtype=bool)
        bad_rows[row_of[bad_value]] = True
        problems.append(f"null, empty or white-space-only keywords: ids {_names(labels, bad_rows)}")
    return lengths, values


def keyword_term_csr(lengths: npt.NDArray[np.int64], values: pa.Array,
                     weights: TermWeights, *, add: bool
                     ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]:
    """Term-id CSR of flat keyword strings, each row's ids sorted and distinct (vectorised).

    The readers' own conversion of a keywords column, shared with the Spark jobs so that
    term ids (and the order in which unknown keywords are added) are the same everywhere.

    Parameters
    ----------
    lengths
        Keywords per row (int64, >= 0); they sum to ``len(values)``.
    values
        The keywords of all rows, flat (Arrow strings; already checked non-blank).
    weights
        The vocabulary. With ``add=True`` keywords it lacks are added (at its default
        weight) in the order of their first appearance in ``values``; with ``add=False``
        they are dropped.

    Returns
    -------
    (ptr, terms)
        ``terms[ptr[i]:ptr[i + 1]]`` are row i's term ids (int64 ptr, int32 ids).

    Examples
    --------
    >>> import numpy as np, pyarrow as pa
    >>> from index.terms import TermWeights
    >>> w = TermWeights({"a": 1.0, "b": 2.0})
    >>> ptr, terms = keyword_term_csr(np.array([2, 1]), pa.array(["b", "a", "zz"]), w,
    ...                               add=False)
    >>> ptr.tolist(), terms.tolist()
    ([0, 2, 2], [0, 1])
    """
    n = lengths.size
    if len(values) == 0:
        return np.zeros(n + 1, np.int64), np.empty(0, np.int32)
    encoded = pc.dictionary_encode(values)
    uniq = encoded.dictionary.to_pylist()
    id_of_uniq = weights.ids(uniq, add=add).astype(np.int64)
    tid = id_of_uniq[np.asarray(encoded.indices.to_numpy(zero_copy_only=False),
                                dtype=np.int64)]
    row = np.repeat(np.arange(n, dtype=np.int64), lengths)
    keep = tid >= 0
    vocab = np.int64(max(len(weights), 1))
    key = np.sort(row[keep] * vocab + tid[keep])
    if key.size:
        first = np.ones(key.size, dtype=bool)
        first[1:] = key[1:] != key[:-1]
        key = key[first]
    rows_u = key // vocab
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows_u, minlength=n), out=ptr[1:])
    return ptr, (key % vocab).astype(np.int32)


#: The former private name (other branches of this session still call it).
_keyword_csr = keyword_term_csr


def _ids(table: pa.Table, problems: list[str]) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
    ids, null = _int_values(_column(table, "id"))
    labels = _row_labels(ids, null)
    if null.any():
        problems.append(f"missing ids: {_names(labels, null)}")
    _, inverse, counts = np.unique(ids[~null], return_inverse=True, return_counts=True)
    dup = np.zeros(ids.size, dtype=bool)
    dup[~null] = counts[inverse] > 1
    if dup.any():
        shown = np.unique(ids[dup])
        problems.append(f"duplicate ids: {describe_rows(shown[:10].tolist(), total=shown.size)}")
    return ids, labels


def _keywords_and_places(table: pa.Table, network: RoadNetwork, labels: npt.NDArray[Any],
                         problems: list[str], *, has_uv: bool, has_ll: bool,
                         max_snap_m: float) -> tuple[npt.NDArray[np.int64], pa.Array, EdgePoints]:
    """Keyword counts and strings, and edge points, of every row (problems appended)."""
    lengths, values = _keyword_rows(table, labels, problems)
    points = _read_locations(table, network, labels, problems, has_uv=has_uv, has_ll=has_ll,
                             max_snap_m=max_snap_m)
    return lengths, values, points


def _raise_problems(problems: list[str], error: ErrorType, what: str) -> None:
    if problems:
        msg = f"{what}: " + "; ".join(problems)
        raise error(msg)


@contextmanager
def _arrow_errors(path: Path, error: ErrorType) -> Iterator[None]:
    """Turn an Arrow error while reading ``path``'s columns into ``error`` naming the file.

    The checks above name the usual problems; a value Arrow itself refuses (an unsigned id
    beyond int64, say) still reaches the user as one line about the file, not a traceback.
    """
    try:
        yield
    except pa.ArrowException as exc:
        msg = f"{path}: cannot read its columns ({type(exc).__name__}: {exc})"
        raise error(msg) from exc


def _read_rows(path: Path, error: ErrorType) -> pa.Table:
    """A subscriptions or messages file as a table with the file columns: a GeoParquet
    geometry becomes lon/lat, a CSV cell of keywords a list."""
    table = geometry_to_lonlat(read_table(path, error=error), path, error)
    return keywords_from_text(table) if path.suffix.lower() == ".csv" else table


# ---------------------------------------------------------------------------- public readers
def read_subscriptions(
    path: PathLike,
    network: RoadNetwork,
    weights: TermWeights,
    *,
    max_snap_m: float = DEFAULTS.snap_distance_m,
) -> Subscriptions:
    """Read and validate a subscriptions file.

    Parameters
    ----------
    path
        Parquet (GeoParquet too), JSON Lines or CSV file (see the module docstring for the
        columns).
    network
        The network the locations refer to (u/v are its file's node ids).
    weights
        Keyword weights; keywords not in it are added at its default weight.
    max_snap_m
        Largest distance in metres from a lon/lat location to its road.

    Raises
    ------
    FileNotFoundError
        No such file.
    InvalidSubscriptionError
        Missing or mistyped columns, or rows breaking the input rules: missing/NaN
        location, unknown node ids, an offset outside its edge, a point beyond the snap
        distance, u/v/offset far from the row's own lon/lat, alpha outside [0, 1], tau
        outside (0, 1], an empty keyword list, duplicate ids. The message lists every
        problem with the offending ids.
    """
    p = Path(path)
    with _arrow_errors(p, InvalidSubscriptionError):
        error = InvalidSubscriptionError
        table = _read_rows(p, error)
        from index.kinds_io import refuse_other_kinds  # it builds on this module

        refuse_other_kinds(table, p)
        has_uv, has_ll = _check_columns(table, p, error, kind="subscriptions",
                                        extra=("alpha", "tau"))
        problems: list[str] = []
        ids, labels = _ids(table, problems)
        alpha = _float_values(_column(table, "alpha"))
        tau = _float_values(_column(table, "tau"))
        bad_alpha = ~((alpha >= 0) & (alpha <= 1))
        if bad_alpha.any():
            problems.append(f"alpha missing or outside [0, 1]: ids {_names(labels, bad_alpha)}")
        bad_tau = ~((tau > 0) & (tau <= 1))
        if bad_tau.any():
            problems.append(f"tau missing or outside (0, 1]: ids {_names(labels, bad_tau)}")
        lengths, values, points = _keywords_and_places(
            table, network, labels, problems, has_uv=has_uv, has_ll=has_ll,
            max_snap_m=max_snap_m)
        _raise_problems(problems, error, f"invalid subscriptions in {p}")
        ptr, terms = keyword_term_csr(lengths, values, weights, add=True)
        return Subscriptions(ids, points, alpha, tau, ptr, terms)


def read_messages(
    path: PathLike,
    network: RoadNetwork,
    weights: TermWeights,
    *,
    max_snap_m: float = DEFAULTS.snap_distance_m,
) -> Messages:
    """Read and validate a messages file.

    Keywords unknown to ``weights`` are dropped (no subscription holds them), so read the
    subscriptions with the same ``weights`` first. See :func:`read_subscriptions` for the
    parameters.

    Raises
    ------
    FileNotFoundError
        No such file.
    InvalidMessageError
        Missing or mistyped columns, or rows with a missing/NaN location, unknown node ids,
        an offset outside its edge, a point beyond the snap distance, u/v/offset far from
        the row's own lon/lat, an empty keyword list or duplicate ids (all named in one
        message).
    """
    p = Path(path)
    with _arrow_errors(p, InvalidMessageError):
        error = InvalidMessageError
        table = _read_rows(p, error)
        if {"alpha", "tau"} <= set(table.column_names):
            msg = (f"{p}: has alpha and tau columns, so it holds subscriptions, not messages "
                   f"(was it given as the messages by mistake?)")
            raise error(msg)
        has_uv, has_ll = _check_columns(table, p, error, kind="messages", extra=())
        problems: list[str] = []
        ids, labels = _ids(table, problems)
        lengths, values, points = _keywords_and_places(
            table, network, labels, problems, has_uv=has_uv, has_ll=has_ll,
            max_snap_m=max_snap_m)
        _raise_problems(problems, error, f"invalid messages in {p}")
        ptr, terms = keyword_term_csr(lengths, values, weights, add=False)
        return Messages(ids, points, ptr, terms)


def read_weights(path: PathLike, *, normalize: bool = DEFAULTS.normalize_keywords
                 ) -> TermWeights:
    """Read a weights table (``term``, ``weight`` > 0).

    Raises
    ------
    FileNotFoundError
        No such file.
    InvalidWeightsError
        Missing or mistyped columns, null or duplicate terms, weights that are missing,
        not finite or not > 0 (offending terms are named).
    """
    p = Path(path)
    with _arrow_errors(p, InvalidWeightsError):
        table = read_table(p, error=InvalidWeightsError)
        cols = set(table.column_names)
        missing = [c for c in ("term", "weight") if c not in cols]
        if missing:
            msg = f"invalid weights in {p}: missing columns: {', '.join(missing)}"
            raise InvalidWeightsError(msg)
        wrong = []
        if not _is_string(table.schema.field("term").type):
            wrong.append(f"term is {table.schema.field('term').type}, expected string")
        if not _is_numeric(table.schema.field("weight").type):
            wrong.append(f"weight is {table.schema.field('weight').type}, expected float")
        if wrong:
            msg = f"invalid weights in {p}: wrong column types: {'; '.join(wrong)}"
            raise InvalidWeightsError(msg)
        term_col = _column(table, "term")
        if pa.types.is_dictionary(term_col.type):
            term_col = term_col.dictionary_decode()
        terms = pc.cast(term_col, pa.string()).to_pylist()
        weight = _float_values(_column(table, "weight"))
        problems = []
        null_rows = [i for i, t in enumerate(terms) if t is None or t == ""]
        if null_rows:
            problems.append(f"missing terms at rows {describe_rows(null_rows)}")
        labels = np.asarray(terms, dtype=object)
        bad = ~((weight >= MIN_WEIGHT) & (weight <= MAX_WEIGHT))  # NaN fails both
        if bad.any():
            problems.append(f"weights missing or outside [{MIN_WEIGHT:g}, {MAX_WEIGHT:g}]: "
                            f"terms {_names(labels, bad)}")
        seen: dict[str, int] = {}
        for t in terms:
            if t is not None:
                seen[t] = seen.get(t, 0) + 1
        dups = [t for t, c in seen.items() if c > 1]
        if dups:
            problems.append(f"duplicate terms: {describe_rows(dups)}")
        if problems:
            msg = f"invalid weights in {p}: " + "; ".join(problems)
            raise InvalidWeightsError(msg)
        meta = table.schema.metadata or {}
        default = _default_weight(meta.get(DEFAULT_WEIGHT_KEY), p)
        if default is None and not terms:
            msg = f"invalid weights in {p}: the table is empty"
            raise InvalidWeightsError(msg)
        try:
            return TermWeights(dict(zip(terms, weight.tolist(), strict=True)),
                               default_weight=default, normalize=normalize)
        except InvalidWeightsError as exc:
            msg = f"invalid weights in {p}: {exc}"
            raise InvalidWeightsError(msg) from exc


def _default_weight(raw: bytes | None, p: Path) -> float | None:
    """The default weight kept in a weights file's metadata, checked like the column."""
    if raw is None:
        return None
    key = DEFAULT_WEIGHT_KEY.decode()
    try:
        value = float(raw.decode("utf-8", errors="replace"))
    except ValueError as exc:
        msg = f"invalid weights in {p}: metadata {key} is not a number: {raw[:40]!r}"
        raise InvalidWeightsError(msg) from exc
    if not MIN_WEIGHT <= value <= MAX_WEIGHT:
        msg = (f"invalid weights in {p}: metadata {key} = {value!r} is outside "
               f"[{MIN_WEIGHT:g}, {MAX_WEIGHT:g}]")
        raise InvalidWeightsError(msg)
    return value


def read_deliveries(path: PathLike) -> dict[str, npt.NDArray[Any]]:
    """Columns of a deliveries file, sorted by (message_id, subscription_id).

    ``pruning.deliveries.Deliveries(**read_deliveries(path))`` rebuilds the object.
    """
    p = Path(path)
    with _arrow_errors(p, InputError):
        table = read_table(p)
        names = ("message_id", "subscription_id", "distance", "score")
        missing = [c for c in names if c not in table.column_names]
        if missing:
            msg = f"{p}: not a deliveries file; missing columns: {', '.join(missing)}"
            raise InputError(msg)
        mid, _ = _int_values(_column(table, "message_id"))
        sid, _ = _int_values(_column(table, "subscription_id"))
        order = np.lexsort((sid, mid))
        return {"message_id": mid[order], "subscription_id": sid[order],
                "distance": _float_values(_column(table, "distance"))[order],
                "score": _float_values(_column(table, "score"))[order]}


# ---------------------------------------------------------------------------- writers
def _lonlat(network: RoadNetwork, points: EdgePoints
            ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    xy = point_xy(network, points)
    to_wgs = Transformer.from_crs(CRS.from_user_input(network.crs), CRS.from_epsg(4326),
                                  always_xy=True)
    lon, lat = to_wgs.transform(xy[:, 0], xy[:, 1])
    return np.asarray(lon, dtype=np.float64), np.asarray(lat, dtype=np.float64)


def _keywords_array(ptr: npt.NDArray[np.int64], terms: npt.NDArray[np.int32],
                    weights: TermWeights) -> pa.Array:
    vocab = pa.array(weights.terms, pa.string())
    values = vocab.take(pa.array(terms, pa.int32()))
    if ptr[-1] < 2**31 - 1:
        return pa.ListArray.from_arrays(pa.array(ptr.astype(np.int32)), values)
    return pa.LargeListArray.from_arrays(pa.array(ptr), values)


def _location_columns(network: RoadNetwork, points: EdgePoints, *, lonlat: bool
                      ) -> dict[str, pa.Array]:
    e = points.edge.astype(np.int64)
    cols = {
        "u": pa.array(network.node_ids[network.edge_u[e]], pa.int64()),
        "v": pa.array(network.node_ids[network.edge_v[e]], pa.int64()),
        "offset": pa.array(points.offset, pa.float64()),
    }
    if lonlat:
        lon, lat = _lonlat(network, points)
        cols["lon"] = pa.array(lon, pa.float64())
        cols["lat"] = pa.array(lat, pa.float64())
    return cols


def subscriptions_table(subs: Subscriptions, *, network: RoadNetwork, weights: TermWeights,
                        lonlat: bool = True) -> pa.Table:
    """Subscriptions as an Arrow table with the file columns."""
    cols = {"id": pa.array(subs.ids, pa.int64()),
            **_location_columns(network, subs.points, lonlat=lonlat),
            "keywords": _keywords_array(subs.kw_ptr, subs.kw_terms, weights),
            "alpha": pa.array(subs.alpha, pa.float64()),
            "tau": pa.array(subs.tau, pa.float64())}
    return pa.table(cols)


def messages_table(messages: Messages, *, network: RoadNetwork, weights: TermWeights,
                   lonlat: bool = True) -> pa.Table:
    """Messages as an Arrow table with the file columns."""
    cols = {"id": pa.array(messages.ids, pa.int64()),
            **_location_columns(network, messages.points, lonlat=lonlat),
            "keywords": _keywords_array(messages.kw_ptr, messages.kw_terms, weights)}
    return pa.table(cols)


def weights_table(weights: TermWeights) -> pa.Table:
    """Weights as an Arrow table (default weight in the schema metadata)."""
    table = pa.table({"term": pa.array(weights.terms, pa.string()),
                      "weight": pa.array(weights.weights, pa.float64())})
    return table.replace_schema_metadata({DEFAULT_WEIGHT_KEY: repr(weights.default_weight)})


def deliveries_table(deliveries: DeliveryColumns) -> pa.Table:
    """Deliveries as an Arrow table."""
    return pa.table({k: pa.array(v) for k, v in deliveries.to_columns().items()})


def write_subscriptions(subs: Subscriptions, path: PathLike, *, network: RoadNetwork,
                        weights: TermWeights, lonlat: bool = True) -> Path:
    """Write subscriptions atomically (Parquet, or JSON Lines for ``.jsonl``/``.json``).

    Locations are written as ``u``, ``v`` (original node ids), ``offset`` (metres) and,
    unless ``lonlat=False``, ``lon``/``lat`` (WGS84 degrees).
    """
    return _write_table(subscriptions_table(subs, network=network, weights=weights,
                                            lonlat=lonlat), path)


def write_messages(messages: Messages, path: PathLike, *, network: RoadNetwork,
                   weights: TermWeights, lonlat: bool = True) -> Path:
    """Write messages atomically; see :func:`write_subscriptions`."""
    return _write_table(messages_table(messages, network=network, weights=weights,
                                       lonlat=lonlat), path)


def write_weights(weights: TermWeights, path: PathLike) -> Path:
    """Write a weights table atomically."""
    return _write_table(weights_table(weights), path)


def write_deliveries(deliveries: DeliveryColumns, path: PathLike) -> Path:
    """Write deliveries atomically: Parquet, JSON Lines (``.jsonl``/``.json``) or ``.csv``."""
    return _write_table(deliveries_table(deliveries), path)
