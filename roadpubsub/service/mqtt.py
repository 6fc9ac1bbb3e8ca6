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

Whose deliveries are published: a subscription says ``"mqtt": true`` or ``false``, and
``serve --mqtt-push`` decides for those that say nothing (``all``, the default: published;
``chosen``: not) (:mod:`~roadpubsub.service.mqtt_choice`). A fleet among subscribers served
otherwise runs ``chosen`` and its vehicles say true: nobody then pays for pushes nobody
reads. Every delivery is recorded whether published or not.

**Acknowledgements.** Incoming events use QoS 1, and the connector sends an event's
PUBACK only after the event's log record has been fsynced and its webhook deliveries are in
the outbox (:mod:`roadpubsub.service.dispatch`, the path of every transport's events; a
refused event is acknowledged
too: it can never succeed, and the refusal is published on ``{prefix}/errors``). PUBACKs
leave in the order the events arrived (MQTT 3.1.1, 4.6). An event that failed for the
service's own reason (an I/O error of the log) is not acknowledged: the broker sends it
again to the restarted service. A crash before the PUBACK makes the broker redeliver;
message ids make the repeat harmless, and a repeated move lands where it did. Events from
MQTT and from HTTP go through the same apply thread, so they share one log order.

**Groups.** Every PUBLISH of one read from the socket is handed to the apply thread at
once, and the apply thread applies runs of moves and of publishes together, as it does
HTTP's (:mod:`roadpubsub.service.applier`). Moves and publishes from MQTT are concurrent
there (moves may be applied before publishes queued with them): MQTT orders the messages
of one client on one topic only (3.1.1, 4.6 "Ordered Topic"), moves and messages travel
on different topics, and nothing of a queued event is visible before its group is
applied. Subscriptions and unsubscriptions are not reordered: nothing crosses them.

**Deliveries.** A separate thread (``mqtt-out``) takes the applied events in arrival
order, waits once for the log to be durable up to the last of them, encodes every
delivery of the lot as one QoS 1 PUBLISH on ``{prefix}/deliveries/{subscription}``, and
writes them and the events' PUBACKs with one ``sendall``; the broker's PUBACKs of the
deliveries are counted by the reader. At most ``max_inflight`` deliveries wait for the
broker's PUBACK; beyond that the thread waits (the backlog shows in ``/metrics``). After a
reconnection the unacknowledged deliveries are sent again (DUP). The apply thread does
none of this work.

**Broker settings.** With QoS 1 the broker has at most ``max_inflight_messages`` events
on their way to one client (Mosquitto's default, 20): the connector then applies at most
that many events per fsync. A broker feeding a fleet needs a larger window (the fleet
benchmark uses ``max_inflight_messages 4000``, ``max_queued_messages 0``).
"""

from __future__ import annotations

import collections
import hashlib
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson

from roadpubsub.index.events import RequestError, parse_ids
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.roadnet.errors import InputError, format_error
from roadpubsub.roadnet.settings import DEFAULTS
from roadpubsub.service.applier import MoveBundle
from roadpubsub.service.bodies import decode_body
from roadpubsub.service.dispatch import Dispatch, Event
from roadpubsub.service.mqtt_choice import MQTT_PUSH_MODES, NO_CHOICES
from roadpubsub.service.mqtt_wire import Publish, WireClient, puback, publish1
from roadpubsub.service.results import Applied
from roadpubsub.service.topk_found import topk_json

__all__ = ["MqttConnector", "delivery_payloads", "parse_broker"]

#: Refusals that are the event's fault: acknowledged (the event can never succeed).
_REFUSALS = (RequestError, InputError, ValueError)


def parse_broker(text: str) -> tuple[str, int]:
    """``HOST:PORT`` as (host, port); one clear error otherwise."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        msg = f"--mqtt must be HOST:PORT, got {text!r}"
        raise InputError(msg)
    return host, int(port)


def _json_items(values: np.ndarray) -> list[bytes]:
    """Each value of a column as orjson writes it (one call for the column)."""
    return orjson.dumps(values.tolist())[1:-1].split(b",")


def delivery_payloads(d: Deliveries, seq: np.ndarray | None, base: bytes
                      ) -> list[tuple[bytes, bytes]]:
    """(topic, payload) of each delivery: the topic ``base`` + its subscription id, the
    payload the bytes of ``orjson.dumps`` of its :func:`deliveries_json` object, made a
    column at a time (one ``dumps`` per column, not one per delivery)."""
    n = len(d)
    if n == 0:
        return []
    mid, sid = _json_items(d.message_id), _json_items(d.subscription_id)
    dist, score = _json_items(d.distance), _json_items(d.score)
    if seq is None:
        return [(base + s, b'{"message_id":%b,"subscription_id":%b,"distance":%b,'
                           b'"score":%b}' % (m, s, x, y))
                for m, s, x, y in zip(mid, sid, dist, score, strict=True)]
    return [(base + s, b'{"seq":%b,"message_id":%b,"subscription_id":%b,"distance":%b,'
                       b'"score":%b}' % (q, m, s, x, y))
            for q, m, s, x, y in zip(_json_items(seq), mid, sid, dist, score, strict=True)]


#: Upper bounds (seconds) of the stage-latency histograms' buckets (then +Inf).
STAGE_BOUNDS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
#: The stages an event's latency is measured to, from its arrival (read from the socket):
#: applied (queued and applied by the apply thread), durable (its log record fsynced, as
#: the out thread saw it), sent (its deliveries and PUBACK written to the broker's socket).
STAGES = ("applied", "durable", "sent")


class _StageTimes:
    """Histograms of the events' latencies inside the service, by stage and by kind
    (``publish``: messages; ``other``: moves and the rest). Written by the out thread
    only; ``/metrics`` reads a copy."""

    def __init__(self) -> None:
        self.bounds = np.asarray(STAGE_BOUNDS)
        self.counts = {(stage, kind): np.zeros(self.bounds.size + 1, dtype=np.int64)
                       for stage in STAGES for kind in ("publish", "other")}
        self.sums = dict.fromkeys(self.counts, 0.0)

    def add(self, stage: str, kind: str, seconds: np.ndarray) -> None:
        """Count each latency of ``seconds`` (one call per lot of events)."""
        if seconds.size:
            key = (stage, kind)
            np.add.at(self.counts[key], np.searchsorted(self.bounds, seconds), 1)
            self.sums[key] += float(seconds.sum())

    def lines(self) -> list[str]:
        """The histograms in Prometheus text (cumulative buckets)."""
        name = "roadpubsub_mqtt_event_stage_seconds"
        out = [f"# HELP {name} Seconds from an event's arrival on the broker's socket to "
               "a stage: applied (queued and applied), durable (log fsynced), sent "
               "(deliveries and PUBACK written); kind publish (messages) or other.",
               f"# TYPE {name} histogram"]
        les = [f"{b:g}" for b in STAGE_BOUNDS] + ["+Inf"]
        for (stage, kind), counts in self.counts.items():
            cum = np.cumsum(counts).tolist()
            labels = f'stage="{stage}",kind="{kind}"'
            out += [f'{name}_bucket{{{labels},le="{le}"}} {c}'
                    for le, c in zip(les, cum, strict=True)]
            out.append(f"{name}_sum{{{labels}}} {self.sums[(stage, kind)]:.6f}")
            out.append(f"{name}_count{{{labels}}} {cum[-1]}")
        return out


class _Event:
    """One incoming PUBLISH on its way: the apply thread's reply object for it."""

    __slots__ = ("applied", "arrived", "conn", "done_at", "error", "pid", "publish", "qos",
                 "settled", "topic")

    def __init__(self, conn: MqttConnector, topic: bytes, pid: int, qos: int,
                 arrived: float) -> None:
        self.conn = conn
        self.topic = topic
        self.pid = pid
        self.qos = qos
        self.arrived = arrived
        self.applied: Applied | None = None
        self.error: BaseException | None = None
        self.settled = False
        self.publish = False  # a message (its stage latencies are counted apart)
        self.done_at = arrived  # when the apply thread settled it

    def set_result(self, applied: Applied) -> None:
        self.applied = applied
        self.done_at = time.monotonic()
        self.settled = True
        self.conn._wake()

    def set_exception(self, exc: BaseException) -> None:
        self.error = exc
        self.done_at = time.monotonic()
        self.settled = True
        self.conn._wake()

    def done(self) -> bool:
        return self.settled


class _Events:
    """The reply of a bundle of move events (:class:`MoveBundle`): one answer for all,
    one wake-up of the out thread."""

    __slots__ = ("conn", "events", "settled")

    def __init__(self, conn: MqttConnector, events: list[_Event]) -> None:
        self.conn = conn
        self.events = events
        self.settled = False

    def set_result(self, applied: Applied) -> None:
        now = time.monotonic()
        for e in self.events:
            e.applied = applied
            e.done_at = now
            e.settled = True
        self.settled = True
        self.conn._wake()

    def set_exception(self, exc: BaseException) -> None:
        now = time.monotonic()
        for e in self.events:
            e.error = exc
            e.done_at = now
            e.settled = True
        self.settled = True
        self.conn._wake()

    def done(self) -> bool:
        return self.settled


#: Most vehicle topics whose ids are remembered (their ids parsed once).
_TOPIC_IDS_MAX = 1 << 17


class MqttConnector:
    """Feeds broker topics to the service and publishes its deliveries.

    Parameters
    ----------
    host, port
        The broker.
    dispatch
        The path of events into the service (:mod:`roadpubsub.service.dispatch`).
    on_applied
        Called (in the connector's thread) with every durable publish, e.g. to push the
        deliveries to WebSocket clients too.
    prefix
        Topic prefix.
    username, password
        The service's broker credentials (None: anonymous).
    tls_ca
        A CA certificate file: connect over TLS, checking the broker's certificate.
    max_inflight
        Most deliveries published and not yet acknowledged by the broker.
    push
        Whose deliveries are published: ``"all"`` or ``"chosen"``
        (:mod:`~roadpubsub.service.mqtt_choice`).
    """

    def __init__(self, host: str, port: int, *, dispatch: Dispatch,
                 on_applied: Callable[[Applied], None] | None = None,
                 prefix: str = "roadpubsub", username: str | None = None,
                 password: str | None = None, tls_ca: str | None = None,
                 max_inflight: int = 20000, push: str = DEFAULTS.mqtt_push) -> None:
        if push not in MQTT_PUSH_MODES:
            msg = f"push must be one of {', '.join(MQTT_PUSH_MODES)}, got {push!r}"
            raise InputError(msg)
        self.push = push
        self.dispatch = dispatch
        self.state = state = dispatch.state
        self.on_applied = on_applied
        self.prefix = prefix.rstrip("/")
        self.max_inflight = max(1, min(int(max_inflight), 60000))
        # figures for /metrics (each written by one thread)
        self.received = 0
        self.refused = 0
        self.failed = 0
        self.acknowledged = 0
        self.deliveries_queued = 0
        self.deliveries_unpushed = 0  # deliveries to subscriptions that do not want them
        self.deliveries_published = 0
        self.deliveries_acknowledged = 0
        self.stage_times = _StageTimes()
        self._pending: collections.deque[_Event] = collections.deque()
        self._cond = threading.Condition()
        self._accepting = True
        self._out_waiting = False  # the out thread waits for settled events (see _wake)
        self._stopping = False
        # deliveries sent and not yet acknowledged: packet id -> (packet, time queued)
        self._inflight: dict[int, tuple[bytes, float]] = {}
        self._ack_cond = threading.Condition()
        self._next_pid = 0
        self._waiting_since: float | None = None  # deliveries held back by the window
        p = self.prefix.encode() + b"/"
        self._messages_topic = p + b"messages"
        self._topics = {p + b"moves": "moves", p + b"messages": "messages",
                        p + b"subscriptions": "subscriptions",
                        p + b"unsubscriptions": "unsubscriptions"}
        self._own_moves = p + b"moves/"
        self._topic_ids: dict[bytes, int] = {}  # a vehicle's topic -> its id
        self._deliveries_topic = p + b"deliveries/"
        # A persistent session named after the service's folder: after a crash the broker
        # redelivers to the restarted service what it had not acknowledged.
        name = hashlib.sha1(str(state.dir.resolve()).encode()).hexdigest()[:16]
        self.client = WireClient(host, port, client_id=f"roadpubsub-serve-{name}",
                                 clean=False, username=username, password=password,
                                 tls_ca=tls_ca, on_publish=self._on_publish,
                                 on_puback=self._on_puback, on_connect=self._resend)
        self.host, self.port = host, port
        self._out = threading.Thread(target=self._out_loop, name="mqtt-out", daemon=True)

    def start(self, timeout: float = 30.0) -> None:
        """Connect and subscribe; raises ConnectionError when the broker does not answer."""
        try:
            self.client.connect(timeout)
        except ConnectionRefusedError as exc:
            msg = (f"the MQTT broker at {self.host}:{self.port} refused the connection: "
                   f"{exc} (check --mqtt-user and the password)")
            raise ConnectionError(msg) from exc
        except OSError as exc:
            msg = f"cannot reach the MQTT broker at {self.host}:{self.port}: {exc}"
            raise ConnectionError(msg) from exc
        self._out.start()
        self.client.subscribe([f"{self.prefix}/{t}" for t in (
            "subscriptions", "moves", "moves/+", "unsubscriptions", "messages")],
            timeout=timeout)

    def stop(self, timeout: float = 60.0) -> None:
        """Take no more events, finish (apply, acknowledge, publish) those taken, wait a
        little for the broker's acknowledgements, and disconnect."""
        self._accepting = False
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._out.is_alive():
            self._out.join(timeout)
        with self._ack_cond:
            self._ack_cond.wait_for(lambda: not self._inflight, timeout=5.0)
        self.client.close()

    def publish_applied(self, done: Applied) -> None:
        """Publish (QoS 1) what a durable publish of HTTP or WebSocket pushes
        (:meth:`_packets`)."""
        packets = self._packets(done)
        if packets:
            self._send_tracked(packets, b"")

    # ------------------------------------------------------------------ metrics
    def metric_lines(self) -> list[str]:
        """The connector's figures in Prometheus text (appended to ``/metrics``)."""
        now = time.monotonic()
        with self._cond:
            oldest_event = now - self._pending[0].arrived if self._pending else 0.0
            pending = len(self._pending)
        with self._ack_cond:
            first = next(iter(self._inflight.values()), None)
            inflight = len(self._inflight)
            waiting = self._waiting_since
        oldest = max(now - first[1] if first is not None else 0.0,
                     now - waiting if waiting is not None else 0.0)
        out: list[str] = []

        def head(name: str, kind: str, text: str) -> None:
            out.append(f"# HELP {name} {text}")
            out.append(f"# TYPE {name} {kind}")

        head("roadpubsub_mqtt_events_total", "counter",
             "Events taken from the broker, by outcome so far.")
        out += [f'roadpubsub_mqtt_events_total{{stage="received"}} {self.received}',
                f'roadpubsub_mqtt_events_total{{stage="acknowledged"}} {self.acknowledged}',
                f'roadpubsub_mqtt_events_total{{stage="refused"}} {self.refused}',
                f'roadpubsub_mqtt_events_total{{stage="failed"}} {self.failed}']
        head("roadpubsub_mqtt_events_pending", "gauge",
             "Events received and not yet acknowledged (being applied or made durable).")
        out.append(f"roadpubsub_mqtt_events_pending {pending}")
        head("roadpubsub_mqtt_oldest_event_seconds", "gauge",
             "Age of the oldest event received and not yet acknowledged.")
        out.append(f"roadpubsub_mqtt_oldest_event_seconds {oldest_event:.6f}")
        head("roadpubsub_mqtt_deliveries_total", "counter",
             "Deliveries (and refusal notices on the errors topic) queued for the broker, "
             "published, and acknowledged by it.")
        out += [f'roadpubsub_mqtt_deliveries_total{{stage="queued"}} '
                f'{self.deliveries_queued}',
                f'roadpubsub_mqtt_deliveries_total{{stage="published"}} '
                f'{self.deliveries_published}',
                f'roadpubsub_mqtt_deliveries_total{{stage="acknowledged"}} '
                f'{self.deliveries_acknowledged}']
        head("roadpubsub_mqtt_deliveries_unpushed_total", "counter",
             "Deliveries not published because their subscriptions do not want them "
             "pushed (their mqtt choice and --mqtt-push); recorded all the same.")
        out.append(f"roadpubsub_mqtt_deliveries_unpushed_total {self.deliveries_unpushed}")
        head("roadpubsub_mqtt_deliveries_inflight", "gauge",
             "Deliveries published and not yet acknowledged by the broker.")
        out.append(f"roadpubsub_mqtt_deliveries_inflight {inflight}")
        head("roadpubsub_mqtt_oldest_queued_seconds", "gauge",
             "Age of the oldest delivery queued and not yet acknowledged by the broker.")
        out.append(f"roadpubsub_mqtt_oldest_queued_seconds {oldest:.6f}")
        head("roadpubsub_mqtt_reconnects_total", "counter", "Reconnections to the broker.")
        out.append(f"roadpubsub_mqtt_reconnects_total {self.client.reconnects}")
        return out + self.stage_times.lines()

    # ------------------------------------------------------------------ reader thread
    def _on_publish(self, pubs: list[Publish]) -> None:
        if not self._accepting:
            return  # stopping: not acknowledged, so the broker keeps them for next time
        now = time.monotonic()
        events: list[_Event] = []
        # One-object moves on the vehicles' own topics go to the apply thread as one
        # bundle per read (one queue item and one reply instead of one per event); a
        # repeated vehicle or any other event closes the bundle, so each vehicle's moves
        # keep their order.
        rows: list[dict[str, Any]] = []
        bundled: list[_Event] = []
        ids: set[int] = set()
        own = self._own_moves
        messages = self._messages_topic
        depth = self.state.options.max_json_depth
        for topic, payload, pid, qos in pubs:
            ev = _Event(self, topic, pid, qos, now)
            events.append(ev)
            ev.publish = topic == messages
            try:
                sid = self._topic_ids.get(topic)
                if sid is None and topic.startswith(own):
                    sid = self._own_id(topic)
                if sid is not None:
                    body = decode_body(payload, max_depth=depth)
                    if isinstance(body, dict) and body.get("id", sid) == sid:
                        if sid in ids:
                            self._bundle(rows, bundled)
                            rows, bundled, ids = [], [], set()
                        body["id"] = sid
                        rows.append(body)
                        bundled.append(ev)
                        ids.add(sid)
                        continue
                    if rows:
                        self._bundle(rows, bundled)
                        rows, bundled, ids = [], [], set()
                    self.dispatch.submit(self._own_event(topic, sid, body), ev)
                    continue
                if rows:
                    self._bundle(rows, bundled)
                    rows, bundled, ids = [], [], set()
                self._submit(topic, payload, ev)
            except _REFUSALS as exc:
                ev.error = exc
                ev.settled = True
        if rows:
            self._bundle(rows, bundled)
        self.received += len(events)
        with self._cond:
            self._pending.extend(events)
            self._cond.notify()

    def _bundle(self, rows: list[dict[str, Any]], events: list[_Event]) -> None:
        if len(events) == 1:  # alone: its own request, its own reply
            self.dispatch.submit(Event("move", rows[0], pipelined=True), events[0])
            return
        bundle = MoveBundle(rows, list(events), _Events(self, events))
        self.dispatch.submit(Event("move", bundle, pipelined=True), bundle.reply)

    def _own_id(self, topic: bytes) -> int:
        """The subscription id of a vehicle's topic (remembered)."""
        sid = parse_ids(topic[len(self._own_moves):].decode("utf-8", "replace"))
        if len(self._topic_ids) >= _TOPIC_IDS_MAX:
            self._topic_ids.clear()
        self._topic_ids[topic] = sid
        return sid

    def _submit(self, topic: bytes, payload: bytes, ev: _Event) -> None:
        self.dispatch.submit(self._event(topic, payload), ev)

    def _event(self, topic: bytes, payload: bytes) -> Event:
        """The event of a PUBLISH (moves and messages concurrent, see the module
        docstring); a refusal (RequestError) for a bad topic or body shape."""
        kind = self._topics.get(topic)
        body = decode_body(payload, max_depth=self.state.options.max_json_depth)
        if kind == "moves":
            return Event("move", body, pipelined=True)
        if kind == "messages":
            return Event("publish", body, pipelined=True)
        if topic.startswith(self._own_moves):
            return self._own_event(topic, self._own_id(topic), body)
        if kind == "subscriptions":
            return Event("subscribe", body, concurrent=False)
        if kind == "unsubscriptions":
            rows = body if isinstance(body, list) else [body]
            if not all(isinstance(r, dict) and isinstance(r.get("id"), int)
                       and not isinstance(r["id"], bool) and -2**63 <= r["id"] < 2**63
                       for r in rows):
                msg = "an unsubscription is {\"id\": ID} or an array of them"
                raise RequestError(msg, status=400)
            ids = np.asarray([r["id"] for r in rows], dtype=np.int64)
            return Event("unsubscribe", ids, concurrent=False)
        msg = f"unknown topic {topic.decode('utf-8', 'replace')!r}"
        raise RequestError(msg, status=404)

    def _own_event(self, topic: bytes, sid: int, body: Any) -> Event:
        """A move on one vehicle's own topic: its id only."""
        if isinstance(body, dict):
            return Event("move", body, path_id=sid, pipelined=True)
        rows = body if isinstance(body, list) else [body]
        if not all(isinstance(r, dict) and r.get("id", sid) == sid for r in rows):
            msg = f"the topic {topic.decode()} takes moves of subscription {sid} only"
            raise RequestError(msg, status=403)
        return Event("move", [{**r, "id": sid} for r in rows], pipelined=True)

    def _on_puback(self, pids: list[int]) -> None:
        with self._ack_cond:
            inflight = self._inflight
            n = 0
            for p in pids:
                if inflight.pop(p, None) is not None:
                    n += 1
            self.deliveries_acknowledged += n
            self._ack_cond.notify_all()

    def _resend(self) -> None:
        """After a reconnection: the deliveries the broker had not acknowledged, again."""
        with self._ack_cond:
            again = [bytes((pkt[0] | 0x08,)) + pkt[1:] for pkt, _ in self._inflight.values()]
        if again:
            self.client.send(b"".join(again))

    # ------------------------------------------------------------------ out thread
    def _wake(self) -> None:
        # Called by the apply thread for every settled event: the lock and notify only
        # when the out thread waits (it sets the flag under the lock before it checks
        # for settled events, and an event is settled before this reads the flag, so a
        # wake-up is never lost; the wait's timeout is a backstop).
        if self._out_waiting:
            with self._cond:
                self._cond.notify()

    def _out_loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    self._out_waiting = True  # before the check (see _wake)
                    if self._pending and self._pending[0].settled:
                        break
                    if self._stopping and not self._pending:
                        self._out_waiting = False
                        return
                    self._cond.wait(0.5)
                self._out_waiting = False
                done: list[_Event] = []
                while self._pending and self._pending[0].settled:
                    done.append(self._pending.popleft())
            try:
                self._finish(done)
            except Exception as exc:  # never lose the thread: the events stay unacked
                self.failed += len(done)
                print(f"roadpubsub: mqtt: {len(done)} events not acknowledged: "
                      f"{format_error(exc)}", file=sys.stderr, flush=True)

    def _finish(self, done: list[_Event]) -> None:
        last = max((e.applied.seq for e in done if e.applied is not None), default=None)
        durable = True
        if last is not None:
            try:
                self.state.wal.wait_durable_blocking(last)
            except Exception:
                durable = False  # the log failed: acknowledge nothing it holds
        t_durable = time.monotonic()
        if durable:
            try:  # webhook deliveries in the outbox before any PUBACK (as HTTP answers)
                self.dispatch.to_outbox_blocking([e.applied for e in done
                                                  if e.applied is not None])
            except OSError as exc:
                durable = False  # unacknowledged: the broker sends them again
                print(f"roadpubsub: mqtt: the webhook outbox could not be written "
                      f"({exc}); {len(done)} events not acknowledged",
                      file=sys.stderr, flush=True)
        errors: list[bytes] = []
        acks: list[bytes] = []
        packets: list[tuple[bytes, bytes]] = []
        announce: list[Applied] = []
        for e in done:
            if e.error is not None:
                if not isinstance(e.error, _REFUSALS):
                    self.failed += 1
                    continue  # the service's failure, not the event's: the broker keeps it
                self.refused += 1
                errors.append(orjson.dumps({"topic": e.topic.decode("utf-8", "replace"),
                                            "error": format_error(e.error)}))
            elif not durable:
                self.failed += 1
                continue
            else:
                applied = e.applied
                assert applied is not None
                packets += self._packets(applied)
                if self.on_applied is not None and applied.messages is not None:
                    announce.append(applied)
            if e.qos:
                acks.append(puback(e.pid))
        packets += [(self.prefix.encode() + b"/errors", m) for m in errors]
        self._send_tracked(packets, b"".join(acks))
        self._stage_times(done, t_durable if durable else None, time.monotonic())
        self.acknowledged += len(acks)
        for applied in announce:
            assert self.on_applied is not None
            self.on_applied(applied)

    def _packets(self, applied: Applied) -> list[tuple[bytes, bytes]]:
        """(topic, payload) of the deliveries and top-k events of ``applied`` whose
        subscriptions want them pushed, as they had chosen when it was applied
        (:mod:`~roadpubsub.service.mqtt_choice`)."""
        choices = applied.mqtt if applied.mqtt is not None else NO_CHOICES
        out: list[tuple[bytes, bytes]] = []
        d, seq = applied.deliveries, applied.delivery_seq
        if d is not None and len(d):
            keep = choices.pushed(d.subscription_id, mode=self.push)
            if not keep.all():
                self.deliveries_unpushed += int(keep.size - np.count_nonzero(keep))
                rows = np.flatnonzero(keep)
                d, seq = d.take(rows), None if seq is None else seq[rows]
            out += delivery_payloads(d, seq, self._deliveries_topic)
        if applied.topk is not None and len(applied.topk):
            # topk_json keeps the events' order: the mask applies to its objects
            keep = choices.pushed(applied.topk.events.subscription_id, mode=self.push)
            out += self._encode([e for e, k in zip(topk_json(applied.topk), keep.tolist(),
                                                    strict=True) if k])
        return out

    def _stage_times(self, done: list[_Event], durable: float | None, sent: float) -> None:
        """Count the lot's latencies by stage (:data:`STAGES`) and kind."""
        arrived = np.fromiter((e.arrived for e in done), np.float64, len(done))
        applied = np.fromiter((e.done_at for e in done), np.float64, len(done))
        publish = np.fromiter((e.publish for e in done), np.bool_, len(done))
        add = self.stage_times.add
        for kind, sel in (("publish", publish), ("other", ~publish)):
            if not sel.any():
                continue
            a = arrived[sel]
            add("applied", kind, applied[sel] - a)
            if durable is not None:
                add("durable", kind, np.maximum(durable - a, 0.0))
                add("sent", kind, np.maximum(sent - a, 0.0))

    def _encode(self, rows: list[dict[str, Any]]) -> list[tuple[bytes, bytes]]:
        """(topic, payload) of each delivery or top-k event."""
        base = self._deliveries_topic
        dumps = orjson.dumps
        return [(b"%s%d" % (base, r["subscription_id"]), dumps(r)) for r in rows]

    def _send_tracked(self, packets: list[tuple[bytes, bytes]], tail: bytes) -> None:
        """Publish ``packets`` with QoS 1 within the in-flight window, then ``tail`` (the
        events' PUBACKs, once every delivery of theirs has been handed to the broker)."""
        self.deliveries_queued += len(packets)
        now = time.monotonic()
        i = 0
        while i < len(packets):
            with self._ack_cond:
                room = self.max_inflight - len(self._inflight)
                if room <= 0:
                    self._waiting_since = self._waiting_since or now
                    self._ack_cond.wait(0.5)
                    continue
                chunk = packets[i:i + room]
                out = []
                inflight = self._inflight
                pid = self._next_pid
                for topic, payload in chunk:
                    pid = pid % 65535 + 1
                    while pid in inflight:
                        pid = pid % 65535 + 1
                    pkt = publish1(topic, payload, pid)
                    inflight[pid] = (pkt, now)
                    out.append(pkt)
                self._next_pid = pid
                self._waiting_since = None
            i += len(chunk)
            self.client.send(b"".join(out))  # a broken connection: resent on reconnect
            self.deliveries_published += len(chunk)
        if tail:
            self.client.send(tail)
