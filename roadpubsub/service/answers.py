"""The deliveries of an answer as JSON bytes, written from the delivery columns.

A publish at Dmax 5 km on Rome delivers about 750 times; building a dict per delivery and
encoding the list took 0.7 ms of the GIL per message (a third of a publish). Here orjson
encodes the two columns of doubles (numpy arrays, no Python number per row; each as the
shortest decimal that reads back as the same double), and one compiled kernel writes the
objects ``{"message_id", "subscription_id", "distance", "score"}``: the integers itself,
the doubles copied from orjson's text. The bytes are those orjson gives for the objects.

:class:`DeliveryList` keeps an answer's deliveries as columns: a sequence of the delivery
objects to Python code (built on first access), raw JSON to :func:`dumps`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numba
import numpy as np
import orjson

from roadpubsub.pruning.deliveries import Deliveries

__all__ = ["DeliveryList", "deliveries_bytes", "dumps"]

_KEYS = (b'{"message_id":', b',"subscription_id":', b',"distance":', b',"score":', b"}")
_KEYS_TEXT = np.frombuffer(b"".join(_KEYS), dtype=np.uint8).copy()
_KEY_BOUNDS = np.cumsum([0] + [len(k) for k in _KEYS]).astype(np.int64)
# with each delivery's sequence number first (issue 30)
_SEQ_KEYS = (b'{"seq":', b',"message_id":', b',"subscription_id":', b',"distance":',
             b',"score":', b"}")
_SEQ_KEYS_TEXT = np.frombuffer(b"".join(_SEQ_KEYS), dtype=np.uint8).copy()
_SEQ_KEY_BOUNDS = np.cumsum([0] + [len(k) for k in _SEQ_KEYS]).astype(np.int64)
_NUMPY = orjson.OPT_SERIALIZE_NUMPY
_NO_SEQ = np.empty(0, dtype=np.int64)


@numba.njit(cache=True, nogil=True, inline="always")
def _put_int(v: int, out: Any, o: int) -> int:  # pragma: no cover - compiled
    """Write int64 ``v`` in decimal at ``out[o:]`` (as ``str(v)``); returns the end."""
    if v < 0:
        out[o] = 45  # '-'
        o += 1
        u = np.uint64(-(v + 1)) + np.uint64(1)  # INT64_MIN has no int64 opposite
    else:
        u = np.uint64(v)
    ten = np.uint64(10)
    width = 1
    t = u
    while t >= ten:
        t //= ten
        width += 1
    for k in range(o + width - 1, o - 1, -1):
        out[k] = 48 + np.int64(u % ten)  # int64, not uint64 + int64: a float
        u //= ten
    return o + width


@numba.njit(cache=True, nogil=True, inline="always")
def _put_key(keys: Any, key_bounds: Any, j: int, out: Any,
             o: int) -> int:  # pragma: no cover - compiled
    """Write key j (``keys[key_bounds[j]:key_bounds[j + 1]]``) at ``out[o:]``; returns
    the end."""
    for k in range(key_bounds[j], key_bounds[j + 1]):
        out[o] = keys[k]
        o += 1
    return o


@numba.njit(cache=True, nogil=True, inline="always")
def _put_value(text: Any, p: int, out: Any,
               o: int) -> tuple[int, int]:  # pragma: no cover - compiled
    """Copy the value of orjson's array ``text`` that starts at ``p`` (it ends at the
    next ``,`` or ``]``) to ``out[o:]``; returns where the next value starts and the end."""
    while text[p] != 44 and text[p] != 93:
        out[o] = text[p]
        o += 1
        p += 1
    return p + 1, o


@numba.njit(cache=True, nogil=True)
def _write_objects(seq: Any, message_id: Any, subscription_id: Any, distance_text: Any,
                   score_text: Any, keys: Any, key_bounds: Any,
                   out: Any) -> int:  # pragma: no cover - compiled
    """Write the JSON array of the delivery objects to ``out``; returns its length.

    The integers are written here; the doubles are copied from orjson's encoding of their
    columns (``distance_text`` and ``score_text``, ``[v0,v1,...]``). Key j
    (``keys[key_bounds[j]:key_bounds[j + 1]]``) is the text before value j, the last one
    closes the object; ``seq`` is empty when the objects have none.
    """
    with_seq = seq.size > 0
    first = 1 if with_seq else 0  # the key before message_id
    out[0] = 91  # '['
    o = 1
    d = s = 1  # after each text's '['
    for i in range(message_id.size):
        if i:
            out[o] = 44  # ','
            o += 1
        if with_seq:
            o = _put_int(seq[i], out, _put_key(keys, key_bounds, 0, out, o))
        o = _put_int(message_id[i], out, _put_key(keys, key_bounds, first, out, o))
        o = _put_int(subscription_id[i], out, _put_key(keys, key_bounds, first + 1, out, o))
        d, o = _put_value(distance_text, d, out, _put_key(keys, key_bounds, first + 2, out, o))
        s, o = _put_value(score_text, s, out, _put_key(keys, key_bounds, first + 3, out, o))
        o = _put_key(keys, key_bounds, first + 4, out, o)
    out[o] = 93  # ']'
    return o + 1


def deliveries_bytes(d: Deliveries, seq: Any = None) -> bytes:
    """The JSON array of ``d``'s delivery objects (what ``orjson.dumps`` of the objects
    gives: the same bytes); with ``seq`` (an int64 array, one per delivery), each object
    starts with ``"seq"``."""
    n = len(d)
    if n == 0:
        return b"[]"
    distance = orjson.dumps(np.ascontiguousarray(d.distance, dtype=np.float64),
                            option=_NUMPY)
    score = orjson.dumps(np.ascontiguousarray(d.score, dtype=np.float64), option=_NUMPY)
    keys, key_bounds = (_KEYS_TEXT, _KEY_BOUNDS) if seq is None else \
        (_SEQ_KEYS_TEXT, _SEQ_KEY_BOUNDS)
    ints = 2 if seq is None else 3
    # an int64 is at most 20 bytes; the doubles' text is orjson's
    out = np.empty(2 + n * (keys.size + 1 + 20 * ints) + len(distance) + len(score),
                   dtype=np.uint8)
    used = _write_objects(_NO_SEQ if seq is None else np.ascontiguousarray(seq, np.int64),
                          np.ascontiguousarray(d.message_id, dtype=np.int64),
                          np.ascontiguousarray(d.subscription_id, dtype=np.int64),
                          np.frombuffer(distance, dtype=np.uint8),
                          np.frombuffer(score, dtype=np.uint8), keys, key_bounds, out)
    return out[:used].tobytes()


class DeliveryList(Sequence[dict[str, Any]]):
    """An answer's deliveries: the objects on access, JSON bytes to :func:`dumps`."""

    __slots__ = ("_rows", "deliveries", "seq")

    def __init__(self, deliveries: Deliveries, *, seq: Any = None) -> None:
        self.deliveries = deliveries
        self.seq = seq  # each delivery's sequence number (int64 array), or None
        self._rows: list[dict[str, Any]] | None = None

    def _objects(self) -> list[dict[str, Any]]:
        if self._rows is None and self.seq is not None:
            d = self.deliveries
            self._rows = [{"seq": q, "message_id": m, "subscription_id": s, "distance": x,
                           "score": y}
                          for q, m, s, x, y in zip(self.seq.tolist(), d.message_id.tolist(),
                                                   d.subscription_id.tolist(),
                                                   d.distance.tolist(), d.score.tolist(),
                                                   strict=True)]
        if self._rows is None:
            d = self.deliveries
            self._rows = [{"message_id": m, "subscription_id": s, "distance": x, "score": y}
                          for m, s, x, y in zip(d.message_id.tolist(),
                                                d.subscription_id.tolist(),
                                                d.distance.tolist(), d.score.tolist(),
                                                strict=True)]
        return self._rows

    def __len__(self) -> int:
        return len(self.deliveries)

    @overload
    def __getitem__(self, k: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, k: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, k: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        return self._objects()[k]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self._objects())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DeliveryList):
            other = other._objects()
        return self._objects() == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._objects())


def _default(obj: Any) -> Any:
    if isinstance(obj, DeliveryList):
        return orjson.Fragment(deliveries_bytes(obj.deliveries, obj.seq))
    msg = f"{type(obj).__name__} is not JSON serializable"
    raise TypeError(msg)


def dumps(content: Any) -> bytes:
    """``orjson.dumps`` that writes :class:`DeliveryList` values from their columns."""
    return orjson.dumps(content, default=_default)
