"""``/messages``: publish (one or a batch) and a published message's deliveries."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from roadpubsub.index.events import RequestError, parse_ids
from roadpubsub.service.context import JSONAnswer, dispatched, service_of, who

__all__ = ["get_message", "post_messages"]


async def post_messages(request: Request) -> Response:
    """``POST /messages``: the answer lists the deliveries (durable, webhook deliveries in
    the outbox)."""
    return await dispatched(request, "publish")


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
