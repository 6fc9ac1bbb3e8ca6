"""Request bodies: JSON decoded once for every route and transport, with a depth limit.

The hot routes (:mod:`~roadpubsub.service.hotpath`), the Starlette routes
(:mod:`roadpubsub.service.routes`) and the MQTT connector decode with
:func:`decode_body`; nesting deeper than the limit is refused before anything is decoded.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import orjson

from roadpubsub.index.events import RequestError
from roadpubsub.roadnet.settings import DEFAULTS

__all__ = ["decode_body", "decode_body_async", "json_depth"]


# Every byte but brackets and quotes, deleted before the depth is counted.
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')
_OPEN = np.zeros(256, dtype=np.int8)
_OPEN[[ord("["), ord("{")]] = 1
_OPEN[[ord("]"), ord("}")]] = -1


def json_depth(raw: bytes) -> int:
    """The deepest nesting of arrays and objects in a JSON text, without recursion and
    in C and numpy passes (about a quarter of orjson's decoding time for a batch).

    Escaped backslashes and quotes are dropped first (then every quote left opens or
    closes a string), everything but brackets and quotes next, and brackets inside
    strings do not count. Exact for JSON; only approximate for malformed text, which the
    decoders refuse anyway (and the fallback decoder's RecursionError is a 400 too).
    """
    if b"\\" in raw:
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    skeleton = np.frombuffer(raw.translate(None, _NOT_STRUCTURE), dtype=np.uint8)
    steps = _OPEN[skeleton]
    if b'"' in raw:
        steps[(np.cumsum(skeleton == ord('"'), dtype=np.int64) & 1).astype(bool)] = 0
    return int(np.cumsum(steps, dtype=np.int64).max(initial=0))


def decode_body(raw: bytes, *, max_depth: int = DEFAULTS.max_json_depth) -> Any:
    """A request body's JSON (the hot routes' and the Starlette routes' one decoder).

    Refused with a 400: text that is not JSON, and nesting deeper than ``max_depth``
    (counted without recursion before anything is decoded, so 100,000 brackets cost one
    linear pass). Integers beyond 64 bits, NaN and lone surrogates (``"\\ud800"``) decode
    and are named by the body's checks (:mod:`roadpubsub.index.events`), which refuse them.
    """
    # Few brackets cannot nest deep: the common small body skips the count.
    if raw.count(b"[") + raw.count(b"{") > max_depth:
        depth = json_depth(raw)
        if depth > max_depth:
            msg = (f"the body nests arrays and objects {depth:,} deep, more than the limit "
                   f"of {max_depth}")
            raise RequestError(msg, status=400)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass  # integers beyond 64 bits, NaN or lone surrogates: let the checks name them
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        msg = f"the body is not valid JSON: {exc}"
        raise RequestError(msg, status=400) from exc


async def decode_body_async(raw: bytes, *, max_depth: int = DEFAULTS.max_json_depth,
                            thread_bytes: int = DEFAULTS.decode_thread_bytes) -> Any:
    """:func:`decode_body` in line for a small body, on a worker thread for one larger
    than ``thread_bytes`` (decoding megabytes would stall every other request)."""
    if len(raw) <= thread_bytes:
        return decode_body(raw, max_depth=max_depth)
    return await asyncio.to_thread(decode_body, raw, max_depth=max_depth)
