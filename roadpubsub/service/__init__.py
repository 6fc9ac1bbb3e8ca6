"""The live service of ``roadpubsub serve``: a durable, single-machine pub/sub stream.

Request bodies are parsed by :mod:`roadpubsub.index.events` (shared with ``spark stream``). Modules:
:mod:`~roadpubsub.service.wal`
(the write-ahead log), :mod:`~roadpubsub.service.snapshot` (background snapshots and the
manifest), :mod:`~roadpubsub.service.deliveries_log` (Parquet segments of deliveries),
:mod:`~roadpubsub.service.state` (events applied through the index, recovery; its layers
``state_*``), :mod:`~roadpubsub.service.dispatch` (the one path of HTTP, WebSocket and MQTT
events: applied, durable, webhook deliveries in the outbox, then answered),
:mod:`~roadpubsub.service.app` (the route table; handlers in :mod:`roadpubsub.service.routes`),
:mod:`~roadpubsub.service.hotpath` (the hot routes in plain ASGI),
:mod:`~roadpubsub.service.answers` (publish answers written from the delivery columns),
:mod:`~roadpubsub.service.metrics` and
:mod:`~roadpubsub.service.loadgen`.
"""

from roadpubsub import roadnet  # noqa: F401  (points the kernel cache away from the install first)
