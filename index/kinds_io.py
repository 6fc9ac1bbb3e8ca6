"""Subscription files with a ``kind`` column: threshold, boolean and top-k rows mixed.

Columns beside those of :mod:`roadpubsub.index.io` (``id``, a location, ``keywords``):

``kind``
    string: ``threshold`` (also when null or when the column is absent), ``boolean`` or
    ``topk``.
``alpha``, ``tau``
    float64; threshold rows need both, top-k rows need alpha, boolean rows leave both null.
``radius``
    float64 metres in [0, Dmax]; boolean rows only.
``k``
    integer >= 1; top-k rows only.

A field a row's kind does not use must be null (a radius on a threshold row is refused,
not ignored). Every problem is reported in one
:class:`~roadpubsub.index.model.InvalidSubscriptionError`
naming the file and the offending ids. A file without a ``kind`` column reads exactly as
:func:`roadpubsub.index.io.read_subscriptions` reads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from roadpubsub.index import io as _io
from roadpubsub.index import rows as _rows
from roadpubsub.index import tables as _tables
from roadpubsub.index.csr import take_csr
from roadpubsub.index.kinds import (
    KIND_BOOLEAN,
    KIND_CODES,
    KIND_THRESHOLD,
    KIND_TOPK,
    SUBSCRIPTION_KIND_NAMES,
    BooleanSubscriptions,
    SubscriptionSet,
    TopkSubscriptions,
)
from roadpubsub.index.model import InvalidSubscriptionError, Subscriptions
from roadpubsub.index.rows import kind_codes, optional_floats
from roadpubsub.index.terms import TermWeights
from roadpubsub.roadnet.lengths import check_dmax
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.settings import DEFAULTS

__all__ = ["kind_field_checks", "read_subscription_set", "subscription_set_table",
           "write_subscription_set"]



def kind_field_checks(kind: npt.NDArray[np.int8], f: dict[str, npt.NDArray[np.float64]],
                      dmax_m: float) -> list[tuple[npt.NDArray[np.bool_], tuple[str, ...], str]]:
    """The rules of kinds and fields: (offending rows, the fields concerned, what is wrong).

    ``kind`` holds indexes of SUBSCRIPTION_KIND_NAMES; ``f`` maps alpha, tau, radius and k
    to float64 (NaN: null or absent). The one statement of the rules, used by the file
    reader here and by the live service's body parser (:mod:`roadpubsub.index.events`).
    """
    thr, boo, top = (kind == KIND_CODES[KIND_THRESHOLD], kind == KIND_CODES[KIND_BOOLEAN],
                     kind == KIND_CODES[KIND_TOPK])
    given = {name: ~np.isnan(v) for name, v in f.items()}
    alpha, tau, radius, k = f["alpha"], f["tau"], f["radius"], f["k"]
    return [
        (thr & ~((alpha >= 0) & (alpha <= 1)), ("alpha",), "alpha missing or outside [0, 1]"),
        (thr & ~((tau > 0) & (tau <= 1)), ("tau",), "tau missing or outside (0, 1]"),
        (thr & given["radius"], ("radius",), "radius on a threshold subscription"),
        (thr & given["k"], ("k",), "k on a threshold subscription"),
        (boo & ~given["radius"], ("radius",), "boolean subscription without a radius"),
        (boo & given["radius"] & ~(radius >= 0), ("radius",), "radius < 0"),
        (boo & given["radius"] & ~np.isinf(radius) & (radius > dmax_m), ("radius",),
         f"radius > Dmax ({dmax_m:g} m)"),
        (boo & np.isinf(radius), ("radius",), "radius not finite"),
        (boo & (given["alpha"] | given["tau"] | given["k"]), ("alpha", "tau", "k"),
         "alpha, tau or k on a boolean subscription (leave them null)"),
        (top & ~given["k"], ("k",), "top-k subscription without k"),
        (top & given["k"] & ~(k >= 1), ("k",), "k < 1"),
        (top & given["k"] & (k >= 1) & ((k != np.floor(k)) | ~np.isfinite(k) | (k >= 2**31)),
         ("k",), "k not a whole number below 2^31"),
        (top & ~((alpha >= 0) & (alpha <= 1)), ("alpha",), "alpha missing or outside [0, 1]"),
        (top & (given["tau"] | given["radius"]), ("tau", "radius"),
         "tau or radius on a top-k subscription (leave them null)"),
    ]


def _field_problems(kind: npt.NDArray[np.int8], f: dict[str, npt.NDArray[np.float64]],
                    labels: npt.NDArray[Any], dmax_m: float, problems: list[str]) -> None:
    """Every bad combination of kind and fields, with the ids."""
    for mask, _fields, what in kind_field_checks(kind, f, dmax_m):
        if mask.any():
            problems.append(f"{what}: ids {_rows.label_names(labels, mask)}")


def read_subscription_set(
    path: _tables.PathLike,
    network: RoadNetwork,
    weights: TermWeights,
    *,
    dmax_m: float,
    max_snap_m: float = DEFAULTS.snap_distance_m,
) -> SubscriptionSet:
    """Read and validate a subscriptions file of any kinds (see the module docstring).

    Parameters
    ----------
    path
        Parquet or JSON Lines file.
    network
        The network the locations refer to.
    weights
        Keyword weights; keywords not in it are added at its default weight.
    dmax_m
        Dmax in metres: no boolean radius may exceed it.
    max_snap_m
        Largest distance in metres from a lon/lat location to its road.

    Raises
    ------
    InvalidSubscriptionError
        Missing or mistyped columns, unknown kinds, missing or extra fields for a row's
        kind, values out of range, and every problem of
        :func:`roadpubsub.index.io.read_subscriptions`, all in one message naming the ids.

    Examples
    --------
    >>> import tempfile, pathlib, pyarrow as pa, pyarrow.parquet as pq
    >>> from roadpubsub.roadnet.network import RoadNetwork
    >>> from roadpubsub.index.terms import TermWeights
    >>> net = RoadNetwork.from_arrays(node_ids=[1, 2], node_lon=[0.0, 0.01],
    ...     node_lat=[0.0, 0.0], edge_u_ids=[1], edge_v_ids=[2], edge_length=[1000.0],
    ...     edge_oneway=[False], directed=False, name="x")
    >>> t = pa.table({"id": [1, 2], "u": [1, 1], "v": [2, 2], "offset": [0.0, 10.0],
    ...     "keywords": [["a"], ["b"]], "kind": ["boolean", "topk"],
    ...     "radius": [500.0, None], "k": [None, 3], "alpha": [None, 0.5]})
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "s.parquet"; pq.write_table(t, p)
    >>> s = read_subscription_set(p, net, TermWeights({}, default_weight=1.0), dmax_m=1000)
    >>> s.counts()
    {'threshold': 0, 'boolean': 1, 'topk': 1}
    """
    dmax = check_dmax(dmax_m)
    p = Path(path)
    error = InvalidSubscriptionError
    table = _tables.read_table(p, error=error)
    has_uv, has_ll = _rows.check_columns(table, p, error, kind="subscriptions", extra=())
    problems: list[str] = []
    ids, labels = _rows.read_ids(table, problems)
    kind = kind_codes(table, labels, problems)
    f = optional_floats(table, p)
    _field_problems(kind, f, labels, dmax, problems)
    lengths, values = _rows.keyword_rows(table, labels, problems)
    points = _rows.read_locations(table, network, labels, problems, has_uv=has_uv,
                                 has_ll=has_ll, max_snap_m=max_snap_m)
    if problems:
        msg = f"invalid subscriptions in {p}: " + "; ".join(problems)
        raise error(msg)
    ptr, terms = _rows.keyword_term_csr(lengths, values, weights, add=True)
    rows = [np.flatnonzero(kind == code) for code in range(len(SUBSCRIPTION_KIND_NAMES))]
    thr, boo, top = rows

    def csr(r: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]:
        return take_csr(ptr, terms, r)

    return SubscriptionSet(
        Subscriptions(ids[thr], points[thr], f["alpha"][thr], f["tau"][thr], *csr(thr)),
        BooleanSubscriptions(ids[boo], points[boo], f["radius"][boo], *csr(boo)),
        TopkSubscriptions(ids[top], points[top], f["alpha"][top], f["k"][top].astype(np.int64),
                          *csr(top)),
    )


def subscription_set_table(subs: SubscriptionSet, *, network: RoadNetwork,
                           weights: TermWeights, lonlat: bool = True) -> pa.Table:
    """Every kind as one Arrow table with a ``kind`` column (unused fields null)."""
    parts = []
    nan = np.nan
    for name, batch, cols in (
        (KIND_THRESHOLD, subs.threshold,
         lambda b: (b.alpha, b.tau, np.full(len(b), nan), np.full(len(b), nan))),
        (KIND_BOOLEAN, subs.boolean,
         lambda b: (np.full(len(b), nan), np.full(len(b), nan), b.radius, np.full(len(b), nan))),
        (KIND_TOPK, subs.topk,
         lambda b: (b.alpha, np.full(len(b), nan), np.full(len(b), nan), b.k.astype(float))),
    ):
        if len(batch) == 0:
            continue
        alpha, tau, radius, k = cols(batch)
        parts.append(pa.table({
            "id": pa.array(batch.ids, pa.int64()),
            **_io.location_columns(network, batch.points, lonlat=lonlat),
            "keywords": _io.keywords_array(batch.kw_ptr, batch.kw_terms, weights),
            "kind": pa.array([name] * len(batch), pa.string()),
            "alpha": pa.array(alpha, pa.float64(), from_pandas=True),
            "tau": pa.array(tau, pa.float64(), from_pandas=True),
            "radius": pa.array(radius, pa.float64(), from_pandas=True),
            "k": pa.array(k, pa.float64(), from_pandas=True).cast(pa.int64()),
        }))
    if not parts:
        msg = "no subscriptions to write"
        raise InvalidSubscriptionError(msg)
    return pa.concat_tables(parts, promote_options="permissive")


def write_subscription_set(subs: SubscriptionSet, path: _tables.PathLike, *,
                           network: RoadNetwork, weights: TermWeights,
                           lonlat: bool = True) -> Path:
    """Write every kind to one file atomically (Parquet, or JSON Lines for ``.jsonl``)."""
    return _tables.write_table(subscription_set_table(subs, network=network, weights=weights,
                                                   lonlat=lonlat), path)
