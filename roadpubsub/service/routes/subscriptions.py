"""``/subscriptions``: subscribe, list, read, unsubscribe, move (one or a batch)."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from starlette.requests import Request
from starlette.responses import Response

from roadpubsub.index.events import RequestError, parse_ids
from roadpubsub.service.access import ADMIN
from roadpubsub.service.context import JSONAnswer, dispatched, service_of, who

__all__ = ["delete_subscription", "get_subscription", "list_subscriptions", "post_moves",
           "post_subscriptions", "put_location"]


async def post_subscriptions(request: Request) -> Response:
    """``POST /subscriptions``: one subscription or a batch (201)."""
    return await dispatched(request, "subscribe", status=201)


async def list_subscriptions(request: Request) -> Response:
    """``GET /subscriptions?after=&limit=``: live subscriptions by id (a subscriber's own)."""
    service = service_of(request)
    state, guard = service.state, service.guard
    q = request.query_params
    after = parse_ids(q["after"], what="'after' id") if "after" in q else None
    limit = parse_ids(q.get("limit", "1000"), what="'limit'")
    if not 1 <= limit <= 100_000:
        msg = f"'limit' must lie in [1, 100000], got {limit}"
        raise RequestError(msg, status=400)
    principal = who(request)
    guard.check(principal, "list")
    if principal.role != ADMIN:  # a subscriber lists its own live ids only
        def own() -> list[dict[str, Any]]:
            ids = np.array(guard.owned(principal), dtype=np.int64)
            ids = ids[state.contains(ids)] if ids.size else ids
            if after is not None:
                ids = ids[ids > after]
            return state.subscription_rows(ids[:limit]) if ids.size else []

        rows = await asyncio.wrap_future(service.applier.call(own))
    else:
        rows = await asyncio.wrap_future(service.applier.call(
            lambda: state.list_subscriptions(after=after, limit=limit)))
    return JSONAnswer({"subscriptions": rows})


async def get_subscription(request: Request) -> Response:
    """``GET /subscriptions/{sid}``: one subscription."""
    service = service_of(request)
    state = service.state
    sid = parse_ids(request.path_params["sid"])
    service.guard.check(who(request), "read", [sid])

    def read() -> list[dict[str, Any]]:
        ids = np.array([sid], dtype=np.int64)
        state.require_live(ids)
        return state.subscription_rows(ids)

    rows = await asyncio.wrap_future(service.applier.call(read))
    return JSONAnswer(rows[0])


async def delete_subscription(request: Request) -> Response:
    """``DELETE /subscriptions/{sid}``: unsubscribe."""
    sid = parse_ids(request.path_params["sid"])
    return await dispatched(request, "unsubscribe", ids=[sid],
                            body=np.array([sid], dtype=np.int64))


async def put_location(request: Request) -> Response:
    """``PUT /subscriptions/{sid}/location``: move one."""
    sid = parse_ids(request.path_params["sid"])
    return await dispatched(request, "move", ids=[sid], path_id=sid)


async def post_moves(request: Request) -> Response:
    """``POST /subscriptions/moves``: a batch of moves, applied in one index update."""
    # the rows' ids are checked before the body is parsed or any id looked up
    return await dispatched(request, "move", row_ids=True)
