"""``/health``, ``/metrics`` and ``/openapi.json``: the service's status and description."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from roadpubsub.service.context import JSONAnswer, service_of, who
from roadpubsub.service.metrics import rss_bytes, thread_cpu
from roadpubsub.service.openapi import openapi_document
from roadpubsub.service.routes.webhooks import webhook_metrics

__all__ = ["health", "metrics_text", "openapi"]


async def health(request: Request) -> Response:
    """``GET /health``: status (503 when failed) and the figures of every part."""
    service = service_of(request)
    state, applier, watchman = service.state, service.applier, service.watchman
    status, reason = state.health()
    return JSONAnswer({
        "status": status, "reason": reason,
        "log_bytes": state.wal.size, "max_log_bytes": state.options.max_log_bytes,
        "recoveries": state.recoveries, "disk_probes": watchman.probes,
        "last_probe_error": watchman.last_probe_error,
        "snapshot_failures": state.snapshots.failures,
        "seq": state.wal.next_seq - 1, "durable_seq": state.wal.durable_seq,
        "snapshot_seq": state.snapshot_seq,
        "subscriptions": sum(state.subscription_count().values()),
        "kinds": state.subscription_count(), "window": state.window,
        "messages": len(state.messages), "snapshot_running": state.snapshots.running,
        "recovery_seconds": round(state.recovery_seconds, 3),
        "rss_bytes": rss_bytes(), "compactions": state.compactions,
        "compaction_running": state.compactor.running,
        "last_compaction_seconds": round(state.compactor.last_seconds, 3),
        "last_compaction_adopt_seconds": round(state.compactor.last_adopt_seconds, 4),
        "delta_rows": len(state.index.delta),
        "snapshots": state.snapshots.completed,
        "last_snapshot_seconds": round(state.snapshots.last_seconds, 3),
        "grouped_requests": applier.grouped_requests, "groups": applier.groups,
        "apply_cpu_seconds": {k: round(v, 4) for k, v in applier.cpu_seconds.items()},
        "apply_requests": dict(applier.requests), "thread_cpu_seconds": thread_cpu(),
        "fsyncs": state.wal.fsyncs, "stream": state.journal.status(),
        "network": state.manifest.get("network"), "dmax_m": state.index.dmax_m},
        status_code=503 if status == "failed" else 200)


async def metrics_text(request: Request) -> Response:
    """``GET /metrics``: Prometheus text."""
    service = service_of(request)
    service.guard.check(who(request), "metrics")
    text = service.metrics.render(service.state) + webhook_metrics(service.webhooks,
                                                                   service.feeder)
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")


async def openapi(request: Request) -> Response:
    """``GET /openapi.json``: this API's OpenAPI 3.1 description."""
    service = service_of(request)
    service.guard.check(who(request), "openapi")
    return JSONAnswer(openapi_document(dmax_m=service.state.index.dmax_m,
                                       set_max_points=service.state.options.set_max_points))
