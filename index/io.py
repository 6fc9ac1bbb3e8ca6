"""Subscription, message, weight and delivery files: Parquet, JSON Lines or CSV.

File layouts (one row per object)
---------------------------------
subscriptions
    ``id`` int64 (unique), a location, ``keywords`` list<string> (non-empty; a set),
    ``alpha`` float64 in [0, 1], ``tau`` float64 in (0, 1]. Files may add a ``kind``
    column mixing boolean and top-k rows (:mod:`roadpubsub.index.kinds_io`); this module's reader
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
    ``geometry`` column instead, in any CRS (:mod:`roadpubsub.index.geofiles`).
weights
    ``term`` string (unique), ``weight`` float64 > 0. The weight of terms missing from the
    table is kept in the Parquet schema metadata (``roadpubsub.default_weight``) when known.
deliveries
    ``message_id``, ``subscription_id`` int64, ``distance`` float64 metres, ``score``.

Readers accept ``.parquet``/``.pq`` (GeoParquet too), ``.jsonl``/``.ndjson``/``.json``
(JSON Lines, or one JSON array of records) and ``.csv`` (the same columns; ``keywords``
separated by ``;`` in one cell, see :mod:`roadpubsub.index.geofiles`). Invalid input raises one
error naming every problem and the offending ids
(:class:`~roadpubsub.index.model.InvalidSubscriptionError`,
:class:`~roadpubsub.index.model.InvalidMessageError`,
:class:`~roadpubsub.index.terms.InvalidWeightsError`, all
``ValueError``). Every writer is atomic: it writes a temporary file in the target's folder
and renames it over the target, so a failed write leaves nothing behind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from pyproj import CRS, Transformer

from roadpubsub.index.model import (
    InvalidMessageError,
    InvalidSubscriptionError,
    Messages,
    Subscriptions,
)
from roadpubsub.index.rows import (
    arrow_errors,
    check_columns,
    column,
    float_values,
    int_values,
    is_numeric,
    is_string,
    keyword_term_csr,
    keywords_and_places,
    label_names,
    raise_problems,
    read_ids,
    read_rows,
    refuse_other_kinds,
)
from roadpubsub.index.tables import PathLike, read_table, write_table
from roadpubsub.index.terms import MAX_WEIGHT, MIN_WEIGHT, InvalidWeightsError, TermWeights
from roadpubsub.roadnet.errors import InputError, describe_rows
from roadpubsub.roadnet.locations import EdgePoints, point_xy
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.settings import DEFAULTS

__all__ = [
    "DEFAULT_WEIGHT_KEY",
    "DeliveryColumns",
    "deliveries_table",
    "messages_table",
    "read_deliveries",
    "read_messages",
    "read_subscriptions",
    "read_weights",
    "subscriptions_table",
    "weights_table",
    "write_deliveries",
    "write_messages",
    "write_subscriptions",
    "write_weights",
]

#: Parquet schema metadata key holding the weight of terms absent from a weights table.
DEFAULT_WEIGHT_KEY = b"roadpubsub.default_weight"

class DeliveryColumns(Protocol):
    """Anything with the deliveries columns, such as
    :class:`roadpubsub.pruning.deliveries.Deliveries`
    (the index layer does not import the pruning layer)."""

    def to_columns(self) -> dict[str, npt.NDArray[np.generic]]:
        """Columns ``message_id``, ``subscription_id``, ``distance``, ``score``."""
        ...


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
    with arrow_errors(p, InvalidSubscriptionError):
        error = InvalidSubscriptionError
        table = read_rows(p, error)
        refuse_other_kinds(table, p)
        has_uv, has_ll = check_columns(table, p, error, kind="subscriptions",
                                        extra=("alpha", "tau"))
        problems: list[str] = []
        ids, labels = read_ids(table, problems)
        alpha = float_values(column(table, "alpha"))
        tau = float_values(column(table, "tau"))
        bad_alpha = ~((alpha >= 0) & (alpha <= 1))
        if bad_alpha.any():
            problems.append(f"alpha missing or outside [0, 1]: ids "
                            f"{label_names(labels, bad_alpha)}")
        bad_tau = ~((tau > 0) & (tau <= 1))
        if bad_tau.any():
            problems.append(f"tau missing or outside (0, 1]: ids {label_names(labels, bad_tau)}")
        lengths, values, points = keywords_and_places(
            table, network, labels, problems, has_uv=has_uv, has_ll=has_ll,
            max_snap_m=max_snap_m)
        raise_problems(problems, error, f"invalid subscriptions in {p}")
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
    with arrow_errors(p, InvalidMessageError):
        error = InvalidMessageError
        table = read_rows(p, error)
        if {"alpha", "tau"} <= set(table.column_names):
            msg = (f"{p}: has alpha and tau columns, so it holds subscriptions, not messages "
                   f"(was it given as the messages by mistake?)")
            raise error(msg)
        has_uv, has_ll = check_columns(table, p, error, kind="messages", extra=())
        problems: list[str] = []
        ids, labels = read_ids(table, problems)
        lengths, values, points = keywords_and_places(
            table, network, labels, problems, has_uv=has_uv, has_ll=has_ll,
            max_snap_m=max_snap_m)
        raise_problems(problems, error, f"invalid messages in {p}")
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
    with arrow_errors(p, InvalidWeightsError):
        table = read_table(p, error=InvalidWeightsError)
        cols = set(table.column_names)
        missing = [c for c in ("term", "weight") if c not in cols]
        if missing:
            msg = f"invalid weights in {p}: missing columns: {', '.join(missing)}"
            raise InvalidWeightsError(msg)
        wrong = []
        if not is_string(table.schema.field("term").type):
            wrong.append(f"term is {table.schema.field('term').type}, expected string")
        if not is_numeric(table.schema.field("weight").type):
            wrong.append(f"weight is {table.schema.field('weight').type}, expected float")
        if wrong:
            msg = f"invalid weights in {p}: wrong column types: {'; '.join(wrong)}"
            raise InvalidWeightsError(msg)
        term_col = column(table, "term")
        if pa.types.is_dictionary(term_col.type):
            term_col = term_col.dictionary_decode()
        terms = pc.cast(term_col, pa.string()).to_pylist()
        weight = float_values(column(table, "weight"))
        problems = []
        null_rows = [i for i, t in enumerate(terms) if t is None or t == ""]
        if null_rows:
            problems.append(f"missing terms at rows {describe_rows(null_rows)}")
        labels = np.asarray(terms, dtype=object)
        bad = ~((weight >= MIN_WEIGHT) & (weight <= MAX_WEIGHT))  # NaN fails both
        if bad.any():
            problems.append(f"weights missing or outside [{MIN_WEIGHT:g}, {MAX_WEIGHT:g}]: "
                            f"terms {label_names(labels, bad)}")
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

    ``roadpubsub.pruning.deliveries.Deliveries(**read_deliveries(path))`` rebuilds the object.
    """
    p = Path(path)
    with arrow_errors(p, InputError):
        table = read_table(p)
        names = ("message_id", "subscription_id", "distance", "score")
        missing = [c for c in names if c not in table.column_names]
        if missing:
            msg = f"{p}: not a deliveries file; missing columns: {', '.join(missing)}"
            raise InputError(msg)
        mid, _ = int_values(column(table, "message_id"))
        sid, _ = int_values(column(table, "subscription_id"))
        order = np.lexsort((sid, mid))
        return {"message_id": mid[order], "subscription_id": sid[order],
                "distance": float_values(column(table, "distance"))[order],
                "score": float_values(column(table, "score"))[order]}


# ---------------------------------------------------------------------------- writers
def _lonlat(network: RoadNetwork, points: EdgePoints
            ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    xy = point_xy(network, points)
    to_wgs = Transformer.from_crs(CRS.from_user_input(network.crs), CRS.from_epsg(4326),
                                  always_xy=True)
    lon, lat = to_wgs.transform(xy[:, 0], xy[:, 1])
    return np.asarray(lon, dtype=np.float64), np.asarray(lat, dtype=np.float64)


def keywords_array(ptr: npt.NDArray[np.int64], terms: npt.NDArray[np.int32],
                    weights: TermWeights) -> pa.Array:
    vocab = pa.array(weights.terms, pa.string())
    values = vocab.take(pa.array(terms, pa.int32()))
    if ptr[-1] < 2**31 - 1:
        return pa.ListArray.from_arrays(pa.array(ptr.astype(np.int32)), values)
    return pa.LargeListArray.from_arrays(pa.array(ptr), values)


def location_columns(network: RoadNetwork, points: EdgePoints, *, lonlat: bool
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
            **location_columns(network, subs.points, lonlat=lonlat),
            "keywords": keywords_array(subs.kw_ptr, subs.kw_terms, weights),
            "alpha": pa.array(subs.alpha, pa.float64()),
            "tau": pa.array(subs.tau, pa.float64())}
    return pa.table(cols)


def messages_table(messages: Messages, *, network: RoadNetwork, weights: TermWeights,
                   lonlat: bool = True) -> pa.Table:
    """Messages as an Arrow table with the file columns."""
    cols = {"id": pa.array(messages.ids, pa.int64()),
            **location_columns(network, messages.points, lonlat=lonlat),
            "keywords": keywords_array(messages.kw_ptr, messages.kw_terms, weights)}
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
    return write_table(subscriptions_table(subs, network=network, weights=weights,
                                            lonlat=lonlat), path)


def write_messages(messages: Messages, path: PathLike, *, network: RoadNetwork,
                   weights: TermWeights, lonlat: bool = True) -> Path:
    """Write messages atomically; see :func:`write_subscriptions`."""
    return write_table(messages_table(messages, network=network, weights=weights,
                                       lonlat=lonlat), path)


def write_weights(weights: TermWeights, path: PathLike) -> Path:
    """Write a weights table atomically."""
    return write_table(weights_table(weights), path)


def write_deliveries(deliveries: DeliveryColumns, path: PathLike) -> Path:
    """Write deliveries atomically: Parquet, JSON Lines (``.jsonl``/``.json``) or ``.csv``."""
    return write_table(deliveries_table(deliveries), path)
