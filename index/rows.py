"""The rows of subscription and message files, checked and turned into arrays: column
names and types, ids, keywords (a term-id CSR, :func:`keyword_term_csr`) and locations
(u/v/offset or lon/lat, see :mod:`roadpubsub.index.io`).

Each check appends what it finds to a list of problems, so that one error names every
problem of a file with the offending ids (row labels: the id, or ``row N`` without one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from pyproj import CRS, Transformer

from roadpubsub.index.geofiles import geometry_to_lonlat, keywords_from_text
from roadpubsub.index.kinds import KIND_CODES, KIND_THRESHOLD, SUBSCRIPTION_KIND_NAMES
from roadpubsub.index.model import InvalidSubscriptionError
from roadpubsub.index.tables import ErrorType, read_table
from roadpubsub.index.terms import TermWeights
from roadpubsub.roadnet.errors import InvalidLocationError, describe_rows
from roadpubsub.roadnet.locations import EdgePoints, locate_uv, locate_xy, point_xy
from roadpubsub.roadnet.network import RoadNetwork

__all__ = ["keyword_term_csr", "refuse_other_kinds"]


def column(table: pa.Table, name: str) -> pa.Array:
    col = table.column(name)
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def is_numeric(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_null(t))


def _is_int(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_null(t))


def is_string(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        return is_string(t.value_type)
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t))


def _is_keyword_list(t: pa.DataType) -> bool:
    if pa.types.is_null(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return is_string(t.value_type)
    return False


def float_values(arr: pa.Array) -> npt.NDArray[np.float64]:
    """Numeric column as float64 with NaN for nulls."""
    if pa.types.is_null(arr.type):
        return np.full(len(arr), np.nan)
    # A copy: Arrow's buffers are read-only and the arrays outlive the table.
    return np.array(pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False),
                    dtype=np.float64, copy=True)


def int_values(arr: pa.Array) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """Integer column as int64 (0 for nulls) and its null mask."""
    if pa.types.is_null(arr.type):
        return np.zeros(len(arr), np.int64), np.ones(len(arr), dtype=bool)
    null = np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    values = pc.cast(arr.fill_null(0), pa.int64()).to_numpy(zero_copy_only=False)
    return np.array(values, dtype=np.int64, copy=True), null


def check_columns(table: pa.Table, path: Path, error: ErrorType, *, kind: str,
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
        expect[c] = (is_numeric, "float")
    if has_uv:
        expect.update({"u": (_is_int, "integer"), "v": (_is_int, "integer"),
                       "offset": (is_numeric, "float")})
    if has_ll:
        expect.update({"lon": (is_numeric, "float"), "lat": (is_numeric, "float")})
    wrong = [f"{c} is {table.schema.field(c).type}, expected {want}"
             for c, (ok, want) in expect.items() if not ok(table.schema.field(c).type)]
    if wrong:
        msg = f"invalid {kind} in {path}: wrong column types: {'; '.join(wrong)}"
        raise error(msg)
    return has_uv, has_ll


def label_names(labels: npt.NDArray[Any], mask: npt.NDArray[np.bool_]) -> str:
    rows = np.flatnonzero(mask)
    return describe_rows(labels[rows[:10]].tolist(), total=int(rows.size))


def row_labels(ids: npt.NDArray[np.int64], null: npt.NDArray[np.bool_]) -> npt.NDArray[Any]:
    """Ids as labels for messages; rows without an id are called ``row N``."""
    if not null.any():
        return ids
    labels = ids.astype(object)
    for r in np.flatnonzero(null):
        labels[r] = f"row {r}"
    return labels


# ---------------------------------------------------------------------------- locations
def read_locations(
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
        u, u_null = int_values(column(table, "u"))
        v, v_null = int_values(column(table, "v"))
        off = float_values(column(table, "offset"))
        use_uv = ~u_null & ~v_null & np.isfinite(off)
    use_ll = np.zeros(n, dtype=bool)
    if has_ll:
        lon = float_values(column(table, "lon"))
        lat = float_values(column(table, "lat"))
        use_ll = ~use_uv & np.isfinite(lon) & np.isfinite(lat)
    missing = ~(use_uv | use_ll)
    if missing.any():
        problems.append(f"missing or NaN location: ids {label_names(labels, missing)}")
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
                problems.append(f"unknown node ids in u/v: ids "
                                f"{label_names(labels[rows], unknown)}")
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
            problems.append(f"lon/lat outside the valid range: ids "
                            f"{label_names(labels[rows], bad)}")
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
            f"{label_names(labels[given], far)}")


# ---------------------------------------------------------------------------- keywords
def keyword_rows(table: pa.Table, labels: npt.NDArray[Any], problems: list[str]
                  ) -> tuple[npt.NDArray[np.int64], pa.Array]:
    """Per-row keyword counts (as in the file) and the flat keyword strings."""
    col = column(table, "keywords")
    n = len(col)
    if pa.types.is_null(col.type):
        problems.append(f"missing or empty keyword list: ids "
                        f"{label_names(labels, np.ones(n, bool))}")
        return np.zeros(n, np.int64), pa.array([], pa.string())
    lengths = np.asarray(pc.list_value_length(col).fill_null(0).to_numpy(
        zero_copy_only=False), dtype=np.int64)
    empty = lengths == 0
    if empty.any():
        problems.append(f"missing or empty keyword list: ids {label_names(labels, empty)}")
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
        problems.append(f"null, empty or white-space-only keywords: ids "
                        f"{label_names(labels, bad_rows)}")
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
    >>> from roadpubsub.index.terms import TermWeights
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


def read_ids(table: pa.Table, problems: list[str]
             ) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
    ids, null = int_values(column(table, "id"))
    labels = row_labels(ids, null)
    if null.any():
        problems.append(f"missing ids: {label_names(labels, null)}")
    _, inverse, counts = np.unique(ids[~null], return_inverse=True, return_counts=True)
    dup = np.zeros(ids.size, dtype=bool)
    dup[~null] = counts[inverse] > 1
    if dup.any():
        shown = np.unique(ids[dup])
        problems.append(f"duplicate ids: {describe_rows(shown[:10].tolist(), total=shown.size)}")
    return ids, labels


def keywords_and_places(table: pa.Table, network: RoadNetwork, labels: npt.NDArray[Any],
                         problems: list[str], *, has_uv: bool, has_ll: bool,
                         max_snap_m: float) -> tuple[npt.NDArray[np.int64], pa.Array, EdgePoints]:
    """Keyword counts and strings, and edge points, of every row (problems appended)."""
    lengths, values = keyword_rows(table, labels, problems)
    points = read_locations(table, network, labels, problems, has_uv=has_uv, has_ll=has_ll,
                             max_snap_m=max_snap_m)
    return lengths, values, points


def raise_problems(problems: list[str], error: ErrorType, what: str) -> None:
    if problems:
        msg = f"{what}: " + "; ".join(problems)
        raise error(msg)


@contextmanager
def arrow_errors(path: Path, error: ErrorType) -> Iterator[None]:
    """Turn an Arrow error while reading ``path``'s columns into ``error`` naming the file.

    The checks above name the usual problems; a value Arrow itself refuses (an unsigned id
    beyond int64, say) still reaches the user as one line about the file, not a traceback.
    """
    try:
        yield
    except pa.ArrowException as exc:
        msg = f"{path}: cannot read its columns ({type(exc).__name__}: {exc})"
        raise error(msg) from exc


def read_rows(path: Path, error: ErrorType) -> pa.Table:
    """A subscriptions or messages file as a table with the file columns: a GeoParquet
    geometry becomes lon/lat, a CSV cell of keywords a list."""
    table = geometry_to_lonlat(read_table(path, error=error), path, error)
    return keywords_from_text(table) if path.suffix.lower() == ".csv" else table


# ---------------------------------------------------------------------- kind columns
def kind_codes(table: pa.Table, labels: npt.NDArray[Any], problems: list[str]
                ) -> npt.NDArray[np.int8]:
    """Kind of each row as an index of SUBSCRIPTION_KIND_NAMES (null: threshold)."""
    n = table.num_rows
    if "kind" not in table.column_names:
        return np.zeros(n, dtype=np.int8)
    col = column(table, "kind")
    if not is_string(col.type):
        msg = f"kind is {col.type}, expected string"
        raise InvalidSubscriptionError(msg)
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    values = pc.cast(col, pa.string()).to_pylist() if not pa.types.is_null(col.type) \
        else [None] * n
    codes = np.array([KIND_CODES.get(v if v is not None else KIND_THRESHOLD, -1)
                      for v in values], dtype=np.int8)
    bad = codes < 0
    if bad.any():
        problems.append(f"kind not one of {', '.join(SUBSCRIPTION_KIND_NAMES)}: ids "
                        f"{label_names(labels, bad)}")
    return codes


def optional_floats(table: pa.Table, path: Path) -> dict[str, npt.NDArray[np.float64]]:
    """alpha, tau, radius, k as float64 (NaN for null or absent), types checked."""
    out: dict[str, npt.NDArray[np.float64]] = {}
    wrong = []
    for name in ("alpha", "tau", "radius", "k"):
        if name not in table.column_names:
            out[name] = np.full(table.num_rows, np.nan)
            continue
        arr = column(table, name)
        if not is_numeric(arr.type):
            wrong.append(f"{name} is {arr.type}, expected a number")
            continue
        out[name] = float_values(arr)
    if wrong:
        msg = f"invalid subscriptions in {path}: wrong column types: {'; '.join(wrong)}"
        raise InvalidSubscriptionError(msg)
    return out


def refuse_other_kinds(table: pa.Table, path: Path) -> None:
    """Raise when a table read as threshold subscriptions holds another kind.

    For :func:`roadpubsub.index.io.read_subscriptions`, which reads threshold subscriptions only: a
    boolean or top-k row, or a radius or k on a threshold row, is named rather than lost.
    """
    if not ({"kind", "radius", "k"} & set(table.column_names)):
        return
    problems: list[str] = []
    ids, null = int_values(column(table, "id")) if "id" in table.column_names \
        else (np.arange(table.num_rows), np.zeros(table.num_rows, bool))
    labels = row_labels(ids, null)
    kind = kind_codes(table, labels, problems)
    other = kind > 0
    if other.any():
        problems.append("boolean or top-k subscriptions (read the file with "
                        "roadpubsub.index.read_subscription_set, or match it with 'roadpubsub "
                        f"match'): ids {label_names(labels, other)}")
    f = optional_floats(table, path)
    for name in ("radius", "k"):
        bad = (kind == 0) & ~np.isnan(f[name])
        if bad.any():
            problems.append(f"{name} on a threshold subscription: ids "
                            f"{label_names(labels, bad)}")
    if problems:
        msg = f"invalid subscriptions in {path}: " + "; ".join(problems)
        raise InvalidSubscriptionError(msg)
