"""``/subscriptions``: subscribe, list, read, unsubscribe, move (one or a batch)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
from starlette.requests import Request
from starlette.responses import Response

from roadpubsub.index.events import RequestError, parse_ids
from roadpubsub.service.access import ADMIN
from roadpubsub.service.context import JSONAnswer, body_of, service_of, who
from roadpubsub.service.dispatch import Event

__all__ = ["delete_subscription", "get_subscription", "list_subscriptions", "post_moves",
           "post_subscriptions", "put_location"]


async def post_subscriptions(request: Request) -> Response:
    """``POST /subscriptions``: one subscription or a batch (201)."""
    t0 = time.perf_counter()
    service = service_of(request)
    principal = who(request)
    service.guard.check(principal, "subscribe")
    done = await service.dispatch.run(Event("subscribe", await body_of(request), principal))
    service.metrics.observe("subscribe", time.perf_counter() - t0)
    return JSONAnswer(done.body, status_code=201)


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
    t0 = time.perf_counter()
    service = service_of(request)
    principal = who(request)
    sid = parse_ids(request.path_params["sid"])
    service.guard.check(principal, "unsubscribe", [sid])
    done = await service.dispatch.run(Event(
        "unsubscribe", np.array([sid], dtype=np.int64), principal))
    service.metrics.observe("unsubscribe", time.perf_counter() - t0)
    return JSONAnswer(done.body)


async def put_location(request: Request) -> Response:
    """``PUT /subscriptions/{sid}/location``: move one."""
    t0 = time.perf_counter()
    service = service_of(request)
    principal = who(request)
    sid = parse_ids(request.path_params["sid"])
    service.guard.check(principal, "move", [sid])
    done = await service.dispatch.run(Event("move", await body_of(request), principal, sid))
    service.metrics.observe("move", time.perf_counter() - t0)
    return JSONAnswer(done.body)


async def post_moves(request: Request) -> Response:
    """``POST /subscriptions/moves``: a batch of moves, applied in one index update."""
    t0 = time.perf_counter()
    service = service_of(request)
    principal = who(request)
    service.guard.check(principal, "move")
    body = await body_of(request)
    service.guard.row_ids(principal, body)  # before the body is parsed or any id looked up
    done = await service.dispatch.run(Event("move", body, principal))
    service.metrics.observe("move", time.perf_counter() - t0)
    return JSONAnswer(done.body)
