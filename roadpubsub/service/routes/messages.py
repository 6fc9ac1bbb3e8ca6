"""``/messages``: publish (one or a batch) and a published message's deliveries."""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response

from roadpubsub.index.events import RequestError, parse_ids
from roadpubsub.service.context import JSONAnswer, body_of, service_of, who
from roadpubsub.service.dispatch import Event

__all__ = ["get_message", "post_messages"]


async def post_messages(request: Request) -> Response:
    """``POST /messages``: the answer lists the deliveries (durable, webhook deliveries in
    the outbox)."""
    t0 = time.perf_counter()
    service = service_of(request)
    principal = who(request)
    service.guard.check(principal, "publish")
    done = await service.dispatch.run(Event("publish", await body_of(request), principal))
    service.metrics.observe("publish", time.perf_counter() - t0)
    return JSONAnswer(done.body)


async def get_message(request: Request) -> Response:
    """``GET /messages/{mid}``: a published message's deliveries (404: never published)."""
    service = service_of(request)
    mid = parse_ids(request.path_params["mid"], what="message id")
    service.guard.check(who(request), "message", [mid])
    found = service.state.message(mid)
    if found is None:
        msg = f"message {mid} was never published"
        raise RequestError(msg, status=404)
    return JSONAnswer(found)
