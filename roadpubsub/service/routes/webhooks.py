"""``/webhooks/dead`` and ``/webhooks/replay`` (admin), and the webhooks' metrics."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import Response

from roadpubsub.index.events import RequestError
from roadpubsub.service.context import JSONAnswer, body_of, service_of, who
from roadpubsub.service.streams import WebhookFeeder
from roadpubsub.service.webhooks import WebhookService

__all__ = ["webhook_metrics", "webhooks_dead", "webhooks_replay"]


def _hooks_of(request: Request) -> WebhookService:
    service = service_of(request)
    service.guard.check(who(request), "webhooks")  # admin only
    if service.webhooks is None:
        msg = "webhooks are not enabled on this service"
        raise RequestError(msg, status=404)
    return service.webhooks


async def webhooks_dead(request: Request) -> Response:
    """``GET /webhooks/dead``: webhook deliveries given up."""
    hooks = _hooks_of(request)
    return JSONAnswer({"dead": await asyncio.to_thread(hooks.dead_letters)})


async def webhooks_replay(request: Request) -> Response:
    """``POST /webhooks/replay``: re-queue dead letters ``{"ids": [...]}``."""
    hooks = _hooks_of(request)
    most = service_of(request).state.options.max_batch_rows
    body = await body_of(request)
    ids = body.get("ids") if isinstance(body, dict) else None
    if not isinstance(ids, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and i > 0 for i in ids) \
            or len(ids) > most:
        msg = (f"the body must be {{\"ids\": [...]}}: at most {most} "
               "dead-letter ids (positive integers, from GET /webhooks/dead)")
        raise RequestError(msg, status=400)
    return JSONAnswer({"replayed": await asyncio.to_thread(hooks.replay, ids)})


def _label(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def webhook_metrics(webhooks: WebhookService | None, feeder: WebhookFeeder | None) -> str:
    """Prometheus lines of the webhooks, per endpoint: queued, sent, retried, dead,
    oldest queued age."""
    if webhooks is None:
        return ""
    per = webhooks.metrics()
    out = []
    for name, key, kind, text in (
            ("queued", "queued", "gauge", "webhook deliveries waiting in the outbox"),
            ("sent_total", "sent", "counter", "webhook deliveries acknowledged (2xx)"),
            ("retried_total", "retried", "counter", "webhook deliveries sent again"),
            ("dead_total", "dead", "counter", "webhook deliveries moved to dead letters"),
            ("oldest_queued_age_seconds", "oldest_queued_age_s", "gauge",
             "age of the oldest queued webhook delivery")):
        metric = f"roadpubsub_webhook_{name}"
        out.append(f"# HELP {metric} {text} (per endpoint)")
        out.append(f"# TYPE {metric} {kind}")
        for url, m in per.items():
            out.append(f'{metric}{{endpoint="{_label(url)}"}} {m[key]}')
    if feeder is not None:
        out.append("# HELP roadpubsub_webhook_fed_seq the highest delivery seq fed to the "
                   "outbox")
        out.append("# TYPE roadpubsub_webhook_fed_seq gauge")
        out.append(f"roadpubsub_webhook_fed_seq {feeder.fed}")
        out.append("# HELP roadpubsub_webhook_recovered_total webhook deliveries a start or "
                   "a reload read back from the deliveries log and queued")
        out.append("# TYPE roadpubsub_webhook_recovered_total counter")
        out.append(f"roadpubsub_webhook_recovered_total {feeder.recovered}")
        held = feeder.state.journal.status()
        for name, key, text in (
                ("held_deliveries", "held", "deliveries the stream journal holds"),
                ("held_for_webhooks", "held_for_webhooks", "deliveries the stream journal "
                 "holds beyond its retention because the webhook feeder has not queued "
                 "them yet")):
            out.append(f"# HELP roadpubsub_stream_{name} {text}")
            out.append(f"# TYPE roadpubsub_stream_{name} gauge")
            out.append(f"roadpubsub_stream_{name} {held[key]}")
    return "\n".join(out) + "\n"
