"""The MQTT connector of ``roadpubsub serve --mqtt HOST:PORT``: road sensors and vehicles.

Topics (``prefix`` is ``roadpubsub`` by default); bodies are those of the HTTP API:

=====================================  =================================================
``{prefix}/subscriptions``             subscribe (one object or an array)
``{prefix}/moves``                     moves (``{"id", "lon", "lat"}`` or u/v/offset ...)
``{prefix}/moves/{subscription}``      one vehicle's moves (every row's id must be that
                                       id): a broker ACL lets each vehicle write here only
``{prefix}/unsubscriptions``           ``{"id": ID}`` or an array of them
``{prefix}/messages``                  publish (one object or an array, each with an id)
``{prefix}/deliveries/{subscription}`` each delivery, published by the service (QoS 1)
``{prefix}/errors``                    why an event was refused (with its topic)
=====================================  =================================================

Incoming events use QoS 1 with manual acknowledgements: the PUBACK goes to the broker only
after the event's log record has been fsynced (a refused event is acknowledged too: it can
never succeed, and the refusal is published on ``{prefix}/errors``). A crash before the
PUBACK makes the broker redeliver; message ids make the repeat harmless. Events from MQTT
and from HTTP go through the same apply thread, so they share one log order.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from index.events import BodyParser, RequestError, parse_ids
from roadnet.errors import InputError, format_error
from roadpubsub.service.applier import Applier
from roadpubsub.service.hotpath import decode_body
from roadpubsub.service.state import Applied, ServiceState, deliveries_json, topk_json

__all__ = ["MqttConnector", "parse_broker"]


def parse_broker(text: str) -> tuple[str, int]:
    """``HOST:PORT`` as (host, port); one clear error otherwise."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        msg = f"--mqtt must be HOST:PORT, got {text!r}"
        raise InputError(msg)
    return host, int(port)


class MqttConnector:
    """Feeds broker topics to the service and publishes its deliveries.

    Parameters
    ----------
    host, port
        The broker.
    state, applier, parser
        The service's state, its apply thread and its body parser.
    on_applied
        Called (in the connector's thread) with every durable publish, e.g. to push the
        deliveries to WebSocket clients too.
    prefix
        Topic prefix.
    username, password
        The service's broker credentials (None: anonymous).
    tls_ca
        A CA certificate file: connect over TLS, checking the broker's certificate.
    """

    def __init__(self, host: str, port: int, *, state: ServiceState, applier: Applier,
                 parser: BodyParser, on_applied: Callable[[Applied], None] | None = None,
                 prefix: str = "roadpubsub", username: str | None = None,
                 password: str | None = None, tls_ca: str | None = None) -> None:
        import paho.mqtt.client as mqtt

        self.state = state
        self.applier = applier
        self.parser = parser
        self.on_applied = on_applied
        self.prefix = prefix.rstrip("/")
        self.received = 0
        self.refused = 0
        self._connected = threading.Event()
        self._refused: str | None = None
        # acknowledgements and deliveries leave in arrival order, off the network thread
        self._out = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mqtt-ack")
        # A persistent session named after the service's folder: after a crash the broker
        # redelivers to the restarted service what it had not acknowledged.
        name = hashlib.sha1(str(state.dir.resolve()).encode()).hexdigest()[:16]
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2,
                                  client_id=f"roadpubsub-serve-{name}",
                                  clean_session=False, manual_ack=True)
        if username is not None:
            self.client.username_pw_set(username, password)
        if tls_ca is not None:
            self.client.tls_set(ca_certs=tls_ca)
        self.client.on_connect = self._on_connect
        self.client.on_message = self._on_message
        self.host, self.port = host, port

    def start(self, timeout: float = 30.0) -> None:
        """Connect and subscribe; raises ConnectionError when the broker does not answer."""
        try:
            self.client.connect(self.host, self.port, keepalive=30)
        except OSError as exc:
            msg = f"cannot reach the MQTT broker at {self.host}:{self.port}: {exc}"
            raise ConnectionError(msg) from exc
        self.client.loop_start()
        if not self._connected.wait(timeout):
            self.client.loop_stop()
            msg = f"the MQTT broker at {self.host}:{self.port} did not accept the connection"
            raise ConnectionError(msg)
        if self._refused is not None:
            self.client.loop_stop()
            msg = (f"the MQTT broker at {self.host}:{self.port} refused the connection: "
                   f"{self._refused} (check --mqtt-user and the password)")
            raise ConnectionError(msg)

    def stop(self) -> None:
        """Finish pending acknowledgements and disconnect."""
        self._out.shutdown(wait=True)
        self.client.disconnect()
        self.client.loop_stop()

    def publish_deliveries(self, deliveries: list[dict[str, Any]]) -> None:
        """Publish durable deliveries, each on its subscription's topic (QoS 1)."""
        for d in deliveries:
            self.client.publish(f"{self.prefix}/deliveries/{d['subscription_id']}",
                                json.dumps(d), qos=1)

    # ------------------------------------------------------------------ callbacks
    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any,
                    properties: Any) -> None:
        if getattr(reason, "is_failure", False):
            self._refused = str(reason)  # e.g. "Not authorized": start() says so at once
            self._connected.set()
            return
        for topic in ("subscriptions", "moves", "moves/+", "unsubscriptions", "messages"):
            client.subscribe(f"{self.prefix}/{topic}", qos=1)
        self._connected.set()

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        self.received += 1
        topic = msg.topic[len(self.prefix) + 1:]
        try:
            body = decode_body(msg.payload, max_depth=self.state.options.max_json_depth)
            fut = self._submit(topic, body)
        except (ValueError, RequestError) as exc:
            fut = Future()
            fut.set_exception(exc)
        self._out.submit(self._finish, fut, msg.mid, msg.qos, msg.topic)

    def _submit(self, topic: str, body: Any) -> Future[Applied]:
        state, parser = self.state, self.parser
        if topic == "messages":
            return self.applier.publish(body)
        if topic == "moves":
            return self.applier.move(body)
        if topic.startswith("moves/"):  # one vehicle's own topic: only its own id
            sid = parse_ids(topic[6:])
            rows = body if isinstance(body, list) else [body]
            if not all(isinstance(r, dict) and r.get("id", sid) == sid for r in rows):
                msg = f"the topic {self.prefix}/{topic} takes moves of subscription {sid} only"
                raise RequestError(msg, status=403)
            return self.applier.move([{**r, "id": sid} for r in rows])
        if topic == "subscriptions":
            return self.applier.call(lambda: state.subscribe(parser.subscriptions(body)))
        if topic == "unsubscriptions":
            rows = body if isinstance(body, list) else [body]
            if not all(isinstance(r, dict) and isinstance(r.get("id"), int)
                       and not isinstance(r["id"], bool) and -2**63 <= r["id"] < 2**63
                       for r in rows):
                msg = "an unsubscription is {\"id\": ID} or an array of them"
                raise RequestError(msg, status=400)
            ids = np.asarray([r["id"] for r in rows], dtype=np.int64)
            return self.applier.call(lambda: state.unsubscribe(ids))
        msg = f"unknown topic {topic!r}"
        raise RequestError(msg, status=404)

    def _finish(self, fut: Future[Applied], mid: int, qos: int, topic: str) -> None:
        try:
            applied = fut.result()
            self.state.wal.wait_durable_blocking(applied.seq)
        except Exception as exc:
            self.refused += 1
            self.client.publish(f"{self.prefix}/errors", json.dumps(
                {"topic": topic, "error": format_error(exc)}), qos=1)
            self.client.ack(mid, qos)
            return
        if applied.deliveries is not None:
            self.publish_deliveries(deliveries_json(applied.deliveries,
                                                    applied.delivery_seq))
        if applied.topk is not None:  # top-k insertions and evictions, on the same topics
            self.publish_deliveries(topk_json(applied.topk))
        if self.on_applied is not None and applied.messages is not None:
            self.on_applied(applied)
        self.client.ack(mid, qos)  # only now: the event is durable
