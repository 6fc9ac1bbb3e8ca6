"""The Starlette routes of the live service as module-level handlers, by subject.

Each handler takes a ``Request`` (or a ``WebSocket``) and finds the service's objects with
:func:`~roadpubsub.service.context.service_of`; :func:`~roadpubsub.service.app.build_app`
lists them in its route table. The hot routes' plain-ASGI answers are in
:mod:`~roadpubsub.service.hotpath`.
"""

__all__: list[str] = []
