"""Event bodies (subscribe, move, message) of the live service and the streaming job,
checked and turned into columnar batches.

Bodies use the field names of the Parquet schemas (:mod:`roadpubsub.index.io`): a subscription is
``{"id", "keywords", "alpha", "tau"}`` plus a location (``u``, ``v``, ``offset`` or ``lon``,
``lat``) and an optional ``expires_at`` (seconds since the Unix epoch); with ``kinds=True``
(the live service) also ``kind`` (``threshold``, the default, ``boolean`` with ``radius``
in metres, ``topk`` with ``k`` and ``alpha``), the rules of :mod:`roadpubsub.index.kinds_io` (a
field a row's kind does not use must be null or absent); a message is
``{"id", "keywords"}`` plus a location and an optional ``time`` (epoch seconds; the
server's clock when absent); a move is ``{"id"}`` plus a location. A batch is a JSON array
of such objects, and a single object is a batch of one. Every problem is reported with the
row, the field and the value, and a batch with any problem is refused whole.

Everything that reaches the log is checked here first, so a request that cannot be logged
fails alone: keywords are non-empty strings that encode as UTF-8 (a lone surrogate such as
``"\ud800"`` does not), at most ``max_keywords`` per row and ``max_keyword_bytes`` UTF-8
bytes each after normalisation; ids and node ids are 64-bit integers; every number is
finite and in its range; times (``time``, ``expires_at``) lie in [``time_min``,
``time_max``] (epoch seconds, :class:`~roadpubsub.roadnet.settings.Settings`); a batch holds at most
``max_batch_rows`` rows. Values are quoted shortened in errors.

Locations are resolved here with :mod:`roadpubsub.roadnet.locations` (the network never changes);
keywords stay strings until the service maps them to term ids, in log order.

Routes and areas (issue 32): a threshold or boolean subscription, or a move, may give
``geometry`` instead of a location: a GeoJSON ``LineString`` (lon/lat waypoints, joined by
shortest paths: :func:`~roadpubsub.roadnet.segment_sets.route_from_lonlat`), ``Polygon`` or
``MultiPolygon`` (:func:`~roadpubsub.roadnet.segment_sets.area_from_geojson`), or
``{"type": "NodePath", "nodes": [node id, ...], "start_m": m, "end_m": m or null}``
(:func:`~roadpubsub.roadnet.segment_sets.route_from_nodes`). Its shape and size (at most
``max_set_points`` positions, ``max_set_batch_points`` per request) are checked before
anything is resolved, the resolved set (at most ``max_set_pieces`` pieces) after; a top-k
row or a row that also gives a location is refused.
"""

from __future__ import annotations

import math
import re
import reprlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from pyproj import CRS, Transformer

from roadpubsub.index.model import has_repeats
from roadpubsub.roadnet.errors import InvalidLocationError, RoadPubSubError
from roadpubsub.roadnet.locations import EdgePoints, locate_uv, locate_xy
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.segment_sets import (
    SegmentSet,
    area_from_geojson,
    route_from_lonlat,
    route_from_nodes,
)
from roadpubsub.roadnet.settings import DEFAULTS

__all__ = [
    "BodyParser",
    "MessageBatch",
    "MoveBatch",
    "RequestError",
    "SubscriptionBatch",
    "parse_ids",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_LOCATION = ("u", "v", "offset", "lon", "lat")
_SUB_FIELDS = frozenset({"id", "keywords", "alpha", "tau", "expires_at", "webhook",
                         "mqtt", "geometry", *_LOCATION})
#: Longest webhook URL a subscription may carry (characters; issue 30).
MAX_WEBHOOK_CHARS = 2048
_KIND_FIELDS = frozenset({"kind", "radius", "k"})
_MSG_FIELDS = frozenset({"id", "keywords", "time", *_LOCATION})
_MOVE_FIELDS = frozenset({"id", "geometry", *_LOCATION})
#: Largest batch one request may carry (rows), by default.
MAX_BATCH = DEFAULTS.max_batch_rows

# Values quoted in errors: short, and bounded in depth (a hostile value can be deep or long).
_SHOW = reprlib.Repr()
_SHOW.maxlevel, _SHOW.maxstring, _SHOW.maxother, _SHOW.maxlist = 3, 60, 60, 8
_SHOW.maxdict = 8


def show(value: Any) -> str:
    """``repr`` of a request value, shortened (long strings, deep or long lists)."""
    return _SHOW.repr(value)


class RequestError(RoadPubSubError, ValueError):
    """A request the service refuses; ``status`` is the HTTP status of the answer."""

    def __init__(self, message: str, *, status: int = 422, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status


@dataclass(frozen=True, eq=False)
class SubscriptionBatch:
    """Subscriptions of one request, located, keywords still strings."""

    ids: IntArray
    points: EdgePoints
    keywords: list[list[str]]
    alpha: FloatArray
    tau: FloatArray
    expires_at: FloatArray  # NaN: never
    #: Kind of each row, an index of :data:`roadpubsub.index.kinds.SUBSCRIPTION_KIND_NAMES` (None:
    #: all threshold); radius (metres) and k are NaN where the kind does not use them.
    kind: npt.NDArray[np.int8] | None = None
    radius: FloatArray | None = None
    k: FloatArray | None = None
    #: Webhook URL of each row, None where absent (None: no row has one); its address is
    #: checked by the service (:mod:`roadpubsub.service.webhooks`).
    webhook: list[str | None] | None = None
    #: Route or area of each row given a ``geometry``, None elsewhere (None: no row has
    #: one); such a row's ``points`` entry is a placeholder (its set's first piece start).
    sets: tuple[SegmentSet | None, ...] | None = None
    #: Each row's ``mqtt`` choice: 1 its deliveries are pushed over MQTT, 0 they are not,
    #: -1 not said (the service's ``mqtt_push`` decides); None: no row says.
    mqtt: npt.NDArray[np.int8] | None = None

    def __len__(self) -> int:
        return int(self.ids.size)


@dataclass(frozen=True, eq=False)
class MoveBatch:
    """New locations of live subscriptions."""

    ids: IntArray
    points: EdgePoints
    #: New route or area of each row given a ``geometry`` (as in
    #: :class:`SubscriptionBatch`), None elsewhere; None: every row is a point.
    sets: tuple[SegmentSet | None, ...] | None = None

    def __len__(self) -> int:
        return int(self.ids.size)


@dataclass(frozen=True, eq=False)
class MessageBatch:
    """Messages of one request, located; ``time`` NaN where the server's clock decides."""

    ids: IntArray
    points: EdgePoints
    keywords: list[list[str]]
    time: FloatArray

    def __len__(self) -> int:
        return int(self.ids.size)


# ---------------------------------------------------------------------------- fields
def _rows(body: Any, what: str, max_rows: int = MAX_BATCH) -> list[dict[str, Any]]:
    rows = [body] if isinstance(body, dict) else body
    if not isinstance(rows, list):
        msg = f"the body must be a {what} object or a JSON array of them, got " \
              f"{type(body).__name__}"
        raise RequestError(msg, status=400)
    if not rows:
        msg = f"the batch of {what}s is empty"
        raise RequestError(msg)
    if len(rows) > max_rows:
        msg = f"a batch holds at most {max_rows:,} rows, got {len(rows):,}"
        raise RequestError(msg, status=413)
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            msg = f"the body must be a {what} object or a JSON array of them, got " \
                  f"{type(r).__name__} {show(r)} at row {i}"
            raise RequestError(msg, status=400)
    return rows


class _Problems:
    """Collects 'row i (id x): field ...: value' lines; raises them as one error."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.lines: list[str] = []

    def add(self, row: int, rec: dict[str, Any], text: str) -> None:
        if len(self.lines) < 20:
            ident = rec.get("id")
            who = f"row {row}" + (f" (id {show(ident)})" if "id" in rec else "")
            self.lines.append(f"{who}: {text}")
        else:
            self.lines.append("")

    def raise_if_any(self) -> None:
        if self.lines:
            shown = [x for x in self.lines if x]
            more = len(self.lines) - len(shown)
            tail = f"; and {more} more" if more else ""
            msg = f"invalid {self.what}: " + "; ".join(shown) + tail
            raise RequestError(msg)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) \
        and -(2**63) <= value < 2**63


def _is_number(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    # an int too large for a float (JSON allows any length) is not a usable number
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**1000


def _webhooks(rows: list[dict[str, Any]], problems: _Problems) -> list[str | None] | None:
    """The optional ``webhook`` field: an http(s) URL of printable ASCII, at most
    :data:`MAX_WEBHOOK_CHARS` (None when no row has one)."""
    if not any(rec.get("webhook") is not None for rec in rows):
        return None
    out: list[str | None] = []
    for i, rec in enumerate(rows):
        value = rec.get("webhook")
        if value is not None and not (
                isinstance(value, str) and 0 < len(value) <= MAX_WEBHOOK_CHARS
                and value.isascii() and value.isprintable()
                and value.lower().startswith(("http://", "https://"))):
            problems.add(i, rec, "field 'webhook' must be an http:// or https:// URL of at "
                                 f"most {MAX_WEBHOOK_CHARS} printable ASCII characters, got "
                                 f"{show(value)}")
            value = None
        out.append(value)
    return out


def _mqtt_choices(rows: list[dict[str, Any]], problems: _Problems
                  ) -> npt.NDArray[np.int8] | None:
    """The optional ``mqtt`` field: a JSON boolean (null: not said); None when no row
    says."""
    if not any(rec.get("mqtt") is not None for rec in rows):
        return None
    out = np.full(len(rows), -1, np.int8)
    for i, rec in enumerate(rows):
        value = rec.get("mqtt")
        if isinstance(value, bool):
            out[i] = value
        elif value is not None:
            problems.add(i, rec, f"field 'mqtt' must be true or false, got {show(value)}")
    return out


def _check_fields(rows: list[dict[str, Any]], allowed: frozenset[str], problems: _Problems
                  ) -> None:
    for i, rec in enumerate(rows):
        unknown = sorted(set(rec) - allowed)
        if unknown:
            problems.add(i, rec, f"unknown field(s) {', '.join(map(show, unknown[:5]))} "
                                 f"(allowed: {', '.join(sorted(allowed))})")


#: Batches up to this many rows look for repeated ids with a Python set (np.unique's
#: fixed cost dominates a run of a few requests parsed together).
_FEW_IDS = 64


def _ids(rows: list[dict[str, Any]], problems: _Problems) -> IntArray:
    ids = np.zeros(len(rows), dtype=np.int64)
    for i, rec in enumerate(rows):
        value: Any = rec.get("id")
        if _is_int(value):
            ids[i] = value
        else:
            problems.add(i, rec, f"field 'id' must be a 64-bit integer, got {show(value)}")
    if ids.size < 2:  # one id (a single move or message) repeats nothing
        return ids
    if ids.size <= _FEW_IDS:  # a run of a few requests: a set costs less than np.unique
        listed = ids.tolist()
        if len(set(listed)) == len(listed):
            return ids
    uniq, counts = np.unique(ids, return_counts=True)
    dup = uniq[counts > 1]
    if dup.size:
        problems.lines.append(f"duplicate ids in the batch: {dup[:10].tolist()}")
    return ids


def _keywords(rows: list[dict[str, Any]], problems: _Problems, *, max_keywords: int,
              max_bytes: int) -> list[list[str]]:
    out: list[list[str]] = []
    for i, rec in enumerate(rows):
        kw = rec.get("keywords")
        if not isinstance(kw, list) or not kw or \
                not all(isinstance(k, str) and k for k in kw):
            problems.add(i, rec, "field 'keywords' must be a non-empty list of non-empty "
                                 f"strings, got {show(kw)}")
            out.append([])
            continue
        if len(kw) > max_keywords:
            problems.add(i, rec, f"field 'keywords' holds at most {max_keywords} keywords, "
                                 f"got {len(kw)}")
            out.append([])
            continue
        for k in kw:
            problem = _keyword_problem(k, max_bytes)
            if problem:
                problems.add(i, rec, f"field 'keywords': keyword {show(k)} {problem}")
                break
        out.append(kw)
    return out


def _keyword_problem(k: str, max_bytes: int) -> str | None:
    """Why a keyword cannot be stored, or None (it encodes as UTF-8 and is short enough)."""
    try:
        size = len(k.encode("utf-8"))
    except UnicodeEncodeError as exc:
        return f"is not valid Unicode text ({exc.reason} at character {exc.start})"
    # Normalisation (NFC, case folding) can make a keyword a few times longer: measure it
    # only where it could matter (a short keyword stays short).
    if size * 9 > max_bytes:
        from roadpubsub.index.terms import normalize_keyword

        size = max(size, len(normalize_keyword(k).encode("utf-8")))
    if size > max_bytes:
        return f"is {size:,} UTF-8 bytes long, more than the limit of {max_bytes:,}"
    return None


def _numbers(rows: list[dict[str, Any]], field: str, problems: _Problems, *,
             low: float, high: float, low_open: bool = False, optional: bool = False
             ) -> FloatArray:
    out = np.full(len(rows), np.nan)
    lo = "(" if low_open else "["
    for i, rec in enumerate(rows):
        value: Any = rec.get(field)
        if value is None and optional:
            continue
        if not _is_number(value):
            problems.add(i, rec, f"field {field!r} must be a finite number, got "
                                 f"{show(value)}")
        elif value < low or (low_open and value == low) or value > high:
            problems.add(i, rec, f"field {field!r} must lie in {lo}{low:.15g}, {high:.15g}], "
                                 f"got {show(value)}")
        else:
            out[i] = value
    return out


_NO_LONLAT = np.empty(0)


class _Locator:
    """Resolves location fields of rows to edge points (one projection per network)."""

    def __init__(self, network: RoadNetwork, *, max_snap_m: float) -> None:
        self.network = network
        self.max_snap_m = max_snap_m
        self._to_metric = Transformer.from_crs(CRS.from_epsg(4326),
                                               CRS.from_user_input(network.crs),
                                               always_xy=True)

    def points(self, rows: list[dict[str, Any]], ids: IntArray, problems: _Problems
               ) -> EdgePoints:
        n = len(rows)
        edge = np.zeros(n, dtype=np.int32)
        offset = np.zeros(n)
        uv_rows: list[int] = []
        ll_rows: list[int] = []
        u = np.zeros(n, dtype=np.int64)
        v = np.zeros(n, dtype=np.int64)
        off = np.zeros(n)
        lon = lat = _NO_LONLAT  # filled in only when a row gives lon/lat
        for i, rec in enumerate(rows):
            has_uv = any(rec.get(k) is not None for k in ("u", "v", "offset"))
            has_ll = any(rec.get(k) is not None for k in ("lon", "lat"))
            if has_ll:
                a: Any = rec.get("lon")
                b: Any = rec.get("lat")
                if not (_is_number(a) and _is_number(b)):
                    problems.add(i, rec, f"fields 'lon', 'lat' must be finite numbers, got "
                                         f"{show(a)}, {show(b)}")
                    continue
                if abs(a) > 180 or abs(b) > 90:
                    problems.add(i, rec, f"fields 'lon', 'lat': lon/lat outside the valid "
                                         f"range [-180, 180] x [-90, 90]: {show(a)}, "
                                         f"{show(b)}")
                    continue
                if lon is _NO_LONLAT:
                    lon, lat = np.full(n, np.nan), np.full(n, np.nan)
                lon[i], lat[i] = a, b
            if has_uv:
                a = rec.get("u")
                b = rec.get("v")
                c: Any = rec.get("offset")
                if not (_is_int(a) and _is_int(b) and _is_number(c)):
                    problems.add(i, rec, "fields 'u', 'v' must be node ids (integers) and "
                                         f"'offset' a finite number, got {show(a)}, "
                                         f"{show(b)}, {show(c)}")
                    continue
                u[i], v[i], off[i] = a, b, c
                uv_rows.append(i)
            elif has_ll:
                ll_rows.append(i)
            else:
                problems.add(i, rec, "no location: give 'u', 'v', 'offset' or 'lon', 'lat'")
        if problems.lines:
            return EdgePoints(edge, offset)
        xy = np.full((n, 2), np.nan)
        if lon is not _NO_LONLAT:
            given = np.isfinite(lon)
            xy[given, 0], xy[given, 1] = self._to_metric.transform(lon[given], lat[given])
        if uv_rows:
            r = np.asarray(uv_rows, dtype=np.int64)
            near = xy[r] if lon is not _NO_LONLAT and np.isfinite(xy[r]).all() else None
            try:
                pts = locate_uv(self.network, u[r], v[r], off[r], labels=ids[r], near_xy=near)
            except InvalidLocationError as exc:
                problems.lines.append(f"fields 'u', 'v', 'offset': {exc}")
            else:
                if len(uv_rows) == n and pts.edge.dtype == np.int32:
                    return pts  # every row by (u, v): its points as they are, in order
                edge[r], offset[r] = pts.edge, pts.offset
        if ll_rows:
            r = np.asarray(ll_rows, dtype=np.int64)
            try:
                pts, _ = locate_xy(self.network, xy[r, 0], xy[r, 1],
                                   max_snap_m=self.max_snap_m, labels=ids[r])
            except InvalidLocationError as exc:
                problems.lines.append(f"fields 'lon', 'lat': {exc}")
            else:
                edge[r], offset[r] = pts.edge, pts.offset
        return EdgePoints(edge, offset)


# ---------------------------------------------------------------------------- parsers
class BodyParser:
    """Parses request bodies against one network.

    Parameters
    ----------
    network
        The service's road network.
    max_snap_m
        Largest distance from a lon/lat to its road, metres.
    kinds
        Accept the ``kind``, ``radius`` and ``k`` fields (the live service); needs
        ``dmax_m``, the largest boolean radius.
    max_keywords, max_keyword_bytes, max_batch_rows, time_min, time_max
        The limits of :class:`~roadpubsub.roadnet.settings.Settings` (keywords per row, UTF-8 bytes
        per keyword after normalisation, rows per body, accepted times in epoch seconds).
    max_set_points, max_set_pieces, max_set_batch_points
        Limits of ``geometry`` (routes and areas, issue 32): positions per geometry, pieces
        per resolved set, positions per request (``service_set_*`` of
        :class:`~roadpubsub.roadnet.settings.Settings`).
    """

    def __init__(self, network: RoadNetwork, *, max_snap_m: float, kinds: bool = False,
                 dmax_m: float | None = None, max_keywords: int = DEFAULTS.max_keywords,
                 max_keyword_bytes: int = DEFAULTS.max_keyword_bytes,
                 max_batch_rows: int = DEFAULTS.max_batch_rows,
                 time_min: float = DEFAULTS.time_min,
                 time_max: float = DEFAULTS.time_max,
                 max_set_points: int = DEFAULTS.service_set_max_points,
                 max_set_pieces: int = DEFAULTS.service_set_max_pieces,
                 max_set_batch_points: int = DEFAULTS.service_set_batch_points) -> None:
        self.locator = _Locator(network, max_snap_m=max_snap_m)
        self.geometries = _Geometries(network, max_snap_m=max_snap_m,
                                      max_points=max_set_points, max_pieces=max_set_pieces,
                                      batch_points=max_set_batch_points)
        if kinds and dmax_m is None:
            msg = "a parser of subscription kinds needs Dmax (boolean radii are at most it)"
            raise ValueError(msg)
        for name, value in (("max_keywords", max_keywords),
                            ("max_keyword_bytes", max_keyword_bytes),
                            ("max_batch_rows", max_batch_rows)):
            if value < 1:
                msg = f"{name} must be >= 1, got {value}"
                raise ValueError(msg)
        if not (math.isfinite(time_min) and math.isfinite(time_max) and time_min < time_max):
            msg = f"time_min < time_max must be finite, got {time_min}, {time_max}"
            raise ValueError(msg)
        self.kinds = kinds
        self.dmax_m = dmax_m
        self.max_keywords = max_keywords
        self.max_keyword_bytes = max_keyword_bytes
        self.max_batch_rows = max_batch_rows
        self.time_min = time_min
        self.time_max = time_max

    def _keywords(self, rows: list[dict[str, Any]], problems: _Problems) -> list[list[str]]:
        return _keywords(rows, problems, max_keywords=self.max_keywords,
                         max_bytes=self.max_keyword_bytes)

    def _time(self, rows: list[dict[str, Any]], field: str, problems: _Problems
              ) -> FloatArray:
        return _numbers(rows, field, problems, low=self.time_min, high=self.time_max,
                        optional=True)

    def subscriptions(self, body: Any) -> SubscriptionBatch:
        """A batch of new subscriptions (see the module docstring)."""
        rows = _rows(body, "subscription", self.max_batch_rows)
        problems = _Problems("subscriptions")
        _check_fields(rows, _SUB_FIELDS | _KIND_FIELDS if self.kinds else _SUB_FIELDS,
                      problems)
        ids = _ids(rows, problems)
        keywords = self._keywords(rows, problems)
        kind = radius = k = None
        if self.kinds:
            alpha, tau, kind, radius, k = self._kind_fields(rows, problems)
        else:
            alpha = _numbers(rows, "alpha", problems, low=0.0, high=1.0)
            tau = _numbers(rows, "tau", problems, low=0.0, high=1.0, low_open=True)
        expires = self._time(rows, "expires_at", problems)
        webhook = _webhooks(rows, problems)
        mqtt = _mqtt_choices(rows, problems)
        if kind is not None:
            _point_kinds_only(rows, kind, problems)
        problems.raise_if_any()
        points, sets = self._located(rows, ids, problems)
        return SubscriptionBatch(ids, points, keywords, alpha, tau, expires, kind, radius, k,
                                 webhook, sets, mqtt)

    def _located(self, rows: list[dict[str, Any]], ids: IntArray, problems: _Problems
                 ) -> tuple[EdgePoints, tuple[SegmentSet | None, ...] | None]:
        """Each row's point, and its route or area where it gives a ``geometry`` (then
        its point is the set's first piece start, a placeholder)."""
        on_set = [i for i, r in enumerate(rows) if r.get("geometry") is not None]
        if not on_set:
            points = self.locator.points(rows, ids, problems)
            problems.raise_if_any()
            return points, None
        sets = self.geometries.resolve(rows, on_set, problems)
        rest = [i for i, r in enumerate(rows) if r.get("geometry") is None]
        edge = np.zeros(len(rows), dtype=np.int32)
        offset = np.zeros(len(rows))
        if rest:
            pts = self.locator.points([rows[i] for i in rest], ids[rest], problems)
            edge[rest], offset[rest] = pts.edge, pts.offset
        problems.raise_if_any()
        for i in on_set:
            s = sets[i]
            assert s is not None
            edge[i], offset[i] = s.edge[0], s.start[0]
        return EdgePoints(edge, offset), tuple(sets)

    def _kind_fields(self, rows: list[dict[str, Any]], problems: _Problems
                     ) -> tuple[FloatArray, FloatArray, npt.NDArray[np.int8], FloatArray,
                                FloatArray]:
        """kind, alpha, tau, radius, k checked by the rules of :mod:`roadpubsub.index.kinds_io`."""
        from roadpubsub.index.kinds import KIND_CODES, SUBSCRIPTION_KIND_NAMES
        from roadpubsub.index.kinds_io import kind_field_checks

        kind = np.zeros(len(rows), dtype=np.int8)
        for i, rec in enumerate(rows):
            value: Any = rec.get("kind")
            if value is None:
                continue
            if not isinstance(value, str) or value not in KIND_CODES:
                problems.add(i, rec, f"field 'kind' must be one of "
                                     f"{', '.join(SUBSCRIPTION_KIND_NAMES)} (or null), got "
                                     f"{show(value)}")
            else:
                kind[i] = KIND_CODES[value]
        # types first (a number or null), then the rules of kinds and fields
        f = {name: _numbers(rows, name, problems, low=-math.inf, high=math.inf,
                            optional=True)
             for name in ("alpha", "tau", "radius", "k")}
        for name in ("radius", "k"):  # -inf/inf/NaN were refused above as not finite
            f[name] = np.where(np.isfinite(f[name]), f[name], np.nan)
        if problems.lines:
            return f["alpha"], f["tau"], kind, f["radius"], f["k"]
        assert self.dmax_m is not None
        checks = kind_field_checks(kind, f, self.dmax_m)
        # one reduction says whether any rule is broken: a subscribe is one good row,
        # for which a search of each rule's mask was a third of its parse
        if not np.logical_or.reduce([mask for mask, _, _ in checks], axis=0).any():
            return f["alpha"], f["tau"], kind, f["radius"], f["k"]
        bad_rows: set[int] = set()
        for mask, fields, what in checks:
            for i in np.flatnonzero(mask).tolist():
                if i in bad_rows:
                    continue  # one problem per row is enough
                bad_rows.add(i)
                rec = rows[i]
                given = [name for name in fields if rec.get(name) is not None] or fields
                kind_name = SUBSCRIPTION_KIND_NAMES[int(kind[i])]
                problems.add(i, rec, f"field {', '.join(map(repr, given))} of a {kind_name} "
                                     f"subscription: {what}, got "
                                     f"{', '.join(show(rec.get(n)) for n in given)}")
        return f["alpha"], f["tau"], kind, f["radius"], f["k"]

    def moves(self, body: Any, *, id_from_path: int | None = None) -> MoveBatch:
        """A batch of moves; ``id_from_path`` fills the id of a single-move body."""
        if id_from_path is not None:
            if not isinstance(body, dict):
                msg = "the body must be one location object"
                raise RequestError(msg, status=400)
            if "id" in body and body["id"] != id_from_path:
                msg = f"field 'id' is {show(body['id'])} but the path names {id_from_path}"
                raise RequestError(msg)
            body = {**body, "id": id_from_path}
        if id_from_path is None and type(body) is list:
            plain = self._plain_moves(body)
            if plain is not None:
                return plain
        rows = _rows(body, "move", self.max_batch_rows)
        problems = _Problems("moves")
        _check_fields(rows, _MOVE_FIELDS, problems)
        ids = _ids(rows, problems)
        problems.raise_if_any()
        points, sets = self._located(rows, ids, problems)
        return MoveBatch(ids, points, sets)

    def _plain_moves(self, rows: list[Any]) -> MoveBatch | None:
        """The batch of :meth:`moves` when every row is exactly ``{"id", "u", "v",
        "offset"}`` (integer ids and node ids, finite offsets, no id twice), read a
        column at a time and located by one call (a fleet's reports: no Python per row
        beyond reading the columns); None for anything else, which the general path
        checks and names."""
        if not rows or len(rows) > self.max_batch_rows \
                or any(type(r) is not dict or len(r) != 4 for r in rows):
            return None
        try:
            ids, u, v = ([r[k] for r in rows] for k in ("id", "u", "v"))
            off = [r["offset"] for r in rows]
        except KeyError:
            return None
        if {*map(type, ids), *map(type, u), *map(type, v)} != {int} \
                or not {*map(type, off)} <= {int, float}:
            return None  # bool is not int here
        try:
            ida, ua, va = (np.array(c, dtype=np.int64) for c in (ids, u, v))
            offa = np.array(off, dtype=np.float64)
        except OverflowError:
            return None
        # few rows (single moves grouped): a set of the Python ints; many (a fleet's
        # bundle): a sort; np.unique's fixed cost was half of a small run's parse
        repeats = len(set(ids)) < len(ids) if len(ids) <= _FEW_IDS else has_repeats(ida)
        if not np.isfinite(offa).all() or repeats:
            return None
        try:
            pts = locate_uv(self.locator.network, ua, va, offa, labels=ida, near_xy=None)
        except InvalidLocationError:
            return None
        if pts.edge.dtype != np.int32:  # the points themselves otherwise: a fresh copy
            pts = EdgePoints.of(pts.edge, pts.offset)
        return MoveBatch(ida, pts, None)

    def messages(self, body: Any) -> MessageBatch:
        """A batch of messages (see the module docstring)."""
        rows = _rows(body, "message", self.max_batch_rows)
        problems = _Problems("messages")
        _check_fields(rows, _MSG_FIELDS, problems)
        ids = _ids(rows, problems)
        keywords = self._keywords(rows, problems)
        time = self._time(rows, "time", problems)
        problems.raise_if_any()
        points = self.locator.points(rows, ids, problems)
        problems.raise_if_any()
        return MessageBatch(ids, points, keywords, time)


def parse_ids(text: str, *, what: str = "subscription id") -> int:
    """An id from a URL path segment or query: canonical decimal only (``0|-?[1-9]\\d*``
    within 64 bits), so that one id has one spelling (``int`` also reads ``1_0``, ``+7``,
    ``007``, `` 7 `` and other digits than ASCII); else :class:`RequestError`, 400."""
    value = int(text) if _CANONICAL_ID.fullmatch(text) else None
    if value is None or not _is_int(value):
        msg = f"the {what} must be a 64-bit integer in decimal (no sign +, no leading " \
              f"zero, no space), got {text[:40]!r}"
        raise RequestError(msg, status=400)
    return value


_CANONICAL_ID = re.compile(r"0|-?[1-9][0-9]{0,18}", re.ASCII)


# ---------------------------------------------------------------- routes and areas
#: ``geometry`` types a subscription or move may give (issue 32).
GEOMETRY_TYPES = ("LineString", "Polygon", "MultiPolygon", "NodePath")
_GEOMETRY_KEYS = {"LineString": {"type", "coordinates"}, "Polygon": {"type", "coordinates"},
                  "MultiPolygon": {"type", "coordinates"},
                  "NodePath": {"type", "nodes", "start_m", "end_m"}}


def _point_kinds_only(rows: list[dict[str, Any]], kind: npt.NDArray[np.int8],
                      problems: _Problems) -> None:
    """A top-k subscription must be a point (routes and areas: threshold and boolean)."""
    from roadpubsub.index.kinds import KIND_CODES

    for i, rec in enumerate(rows):
        if rec.get("geometry") is not None and int(kind[i]) == KIND_CODES["topk"]:
            problems.add(i, rec, "field 'geometry': a topk subscription must be a point "
                                 "(routes and areas are for threshold and boolean ones)")


def _positions(value: Any, depth: int) -> int | None:
    """How many [lon, lat] positions ``value`` holds at nesting ``depth`` (1: a list of
    positions), or None when it is not such a nest of finite lon/lat pairs."""
    if not isinstance(value, list):
        return None
    if depth == 0:
        ok = len(value) in (2, 3) and all(_is_number(c) for c in value) \
            and abs(value[0]) <= 180 and abs(value[1]) <= 90
        return 1 if ok else None
    total = 0
    for part in value:
        n = _positions(part, depth - 1)
        if n is None:
            return None
        total += n
    return total


class _Geometries:
    """Checks and resolves the ``geometry`` field of rows into segment sets."""

    def __init__(self, network: RoadNetwork, *, max_snap_m: float, max_points: int,
                 max_pieces: int, batch_points: int) -> None:
        self.network, self.max_snap_m = network, max_snap_m
        self.max_points, self.max_pieces = max_points, max_pieces
        self.batch_points = batch_points

    def _shape(self, geom: Any) -> tuple[int, str | None]:
        """(positions, the problem or None) of a ``geometry`` value, before resolving."""
        if not isinstance(geom, dict) or geom.get("type") not in GEOMETRY_TYPES:
            got = geom.get("type") if isinstance(geom, dict) else geom
            return 0, (f"must be a GeoJSON LineString, Polygon, MultiPolygon or a NodePath "
                       f"object, got type {show(got)}")
        kind = geom["type"]
        extra = sorted(set(geom) - _GEOMETRY_KEYS[kind])
        if extra:
            return 0, f"unknown member(s) {', '.join(map(show, extra[:5]))} of a {kind}"
        if kind == "NodePath":
            nodes = geom.get("nodes")
            if not (isinstance(nodes, list) and len(nodes) >= 2
                    and all(_is_int(x) for x in nodes)):
                return 0, f"a NodePath's 'nodes' must be >= 2 node ids, got {show(nodes)}"
            for name in ("start_m", "end_m"):
                x = geom.get(name)
                if x is not None and not (_is_number(x) and x >= 0):
                    return 0, f"a NodePath's {name!r} must be a number >= 0, got {show(x)}"
            return len(nodes), None
        depth = {"LineString": 1, "Polygon": 2, "MultiPolygon": 3}[kind]
        n = _positions(geom.get("coordinates"), depth)
        if n is None:
            return 0, (f"a {kind}'s 'coordinates' must nest {depth} list(s) deep of [lon, "
                       f"lat] positions in degrees, got {show(geom.get('coordinates'))}")
        if kind == "LineString" and n < 2:
            return 0, f"a LineString needs at least two positions, got {n}"
        return n, None

    def resolve(self, rows: list[dict[str, Any]], which: list[int], problems: _Problems
                ) -> list[SegmentSet | None]:
        """The set of each row of ``which`` (None elsewhere); problems name row and field."""
        out: list[SegmentSet | None] = [None] * len(rows)
        sizes: dict[int, int] = {}
        for i in which:
            rec = rows[i]
            if any(rec.get(k) is not None for k in _LOCATION):
                problems.add(i, rec, "field 'geometry' replaces 'u', 'v', 'offset', 'lon', "
                                     "'lat': give one location")
                continue
            n, problem = self._shape(rec["geometry"])
            if problem is None and n > self.max_points:
                problem = f"holds {n:,} positions, more than the limit of {self.max_points:,}"
            if problem is not None:
                problems.add(i, rec, f"field 'geometry': {problem}")
                continue
            sizes[i] = n
        total = sum(sizes.values())
        if total > self.batch_points:
            problems.lines.append(f"field 'geometry': the request's geometries hold {total:,} "
                                  f"positions, more than the limit of {self.batch_points:,}")
        if problems.lines:
            return out
        for i in which:
            rec = rows[i]
            geom = rec["geometry"]
            try:
                if geom["type"] == "LineString":
                    got = route_from_lonlat(self.network, geom, max_snap_m=self.max_snap_m)
                elif geom["type"] == "NodePath":
                    got = route_from_nodes(self.network, geom["nodes"],
                                           start_m=float(geom.get("start_m") or 0.0),
                                           end_m=None if geom.get("end_m") is None
                                           else float(geom["end_m"]))
                else:
                    got = area_from_geojson(self.network, geom)
            except InvalidLocationError as exc:
                problems.add(i, rec, f"field 'geometry': {exc}")
                continue
            if len(got) > self.max_pieces:
                problems.add(i, rec, f"field 'geometry': the {got.kind} holds {len(got):,} "
                                     f"road pieces, more than the limit of "
                                     f"{self.max_pieces:,}")
                continue
            out[i] = got
        return out
