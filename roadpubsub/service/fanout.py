"""Durable deliveries pushed to their live readers: WebSocket clients, the map, the broker.

:class:`DeliveryHub` holds each WebSocket client's bounded send buffer; :class:`Fanout`
takes each durable publish (from :mod:`~roadpubsub.service.dispatch`) to the clients of
``/deliveries`` and ``/events``, the MQTT connector and the resumable streams' readers.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.roadnet.settings import DEFAULTS
from roadpubsub.service.geo import lonlat_of
from roadpubsub.service.results import Applied, deliveries_json
from roadpubsub.service.state import ServiceState
from roadpubsub.service.streams import Pulse
from roadpubsub.service.topk_found import topk_json

if TYPE_CHECKING:
    from roadpubsub.service.mqtt import MqttConnector

__all__ = ["CLOSE_GRACE_S", "SLOW_READER_CLOSE", "DeliveryHub", "Fanout", "HubClient", "Want",
           "message_events"]

#: Close code of a WebSocket client that fell too far behind (its send buffer passed
#: ``ws_buffer_deliveries`` or ``ws_buffer_bytes``): 1013, "try again later" (RFC 6455's
#: registry): it should reconnect; the deliveries it missed are in ``GET /messages/{id}``.
SLOW_READER_CLOSE = 1013
#: Seconds a dropped client is given to take its close frame before its socket is ended.
CLOSE_GRACE_S = 10.0


def _text(item: dict[str, Any]) -> str:
    # Starlette's send_json encoding, done once per push for all clients
    return json.dumps(item, separators=(",", ":"), ensure_ascii=False)


#: What a WebSocket client wants: everything (None), one subscription id, or a test of ids
#: (a subscriber token's own).
Want = int | Callable[[int], bool] | None


class HubClient:
    """One WebSocket client's send buffer: JSON texts not yet sent."""

    __slots__ = ("dropped", "gone", "items", "nbytes", "over", "ready", "revoked", "want")

    def __init__(self, want: Want) -> None:
        self.want = want
        self.revoked = False  # its token was revoked: closed with 1008
        self.items: deque[str] = deque()
        self.nbytes = 0
        self.ready = asyncio.Event()  # items to send
        self.over = asyncio.Event()  # dropped or gone: the connection ends
        self.dropped = False  # fell behind: closed with SLOW_READER_CLOSE
        self.gone = False  # the client closed


class DeliveryHub:
    """WebSocket clients and what each wants: every delivery, or one subscription's.

    Each client's buffer holds at most ``max_deliveries`` items and ``max_bytes`` bytes of
    JSON; a client that would pass either is dropped: its buffer is freed at once and its
    socket closed with :data:`SLOW_READER_CLOSE`.
    """

    def __init__(self, *, max_deliveries: int = DEFAULTS.ws_buffer_deliveries,
                 max_bytes: int = DEFAULTS.ws_buffer_bytes) -> None:
        # what each wants: None everything, an id, or a test of ids (a token's own)
        self.clients: dict[HubClient, Want] = {}
        self.max_deliveries = max_deliveries
        self.max_bytes = max_bytes
        self.dropped = 0

    def add(self, want: Want) -> HubClient:
        """A new client's buffer (``want``: one subscription id, a test of ids, or None
        for all)."""
        client = HubClient(want)
        self.clients[client] = want
        return client

    def push(self, deliveries: list[dict[str, Any]]) -> None:
        """Queue deliveries for every interested client (never blocks)."""
        if not deliveries or not self.clients:
            return
        every: list[str] | None = None
        for client, want in list(self.clients.items()):
            if want is None:
                if every is None:
                    every = [_text(d) for d in deliveries]
                mine = every
            elif isinstance(want, int):
                mine = [_text(d) for d in deliveries if d["subscription_id"] == want]
            else:
                mine = [_text(d) for d in deliveries if want(d["subscription_id"])]
            if not mine:
                continue
            size = sum(map(len, mine))  # ASCII: characters are bytes
            if len(client.items) + len(mine) > self.max_deliveries or \
                    client.nbytes + size > self.max_bytes:
                self.clients.pop(client, None)  # too slow: freed now, closed by its sender
                client.items.clear()
                client.nbytes = 0
                client.dropped = True
                client.over.set()
                self.dropped += 1
            else:
                client.items.extend(mine)
                client.nbytes += size
            client.ready.set()


def message_events(state: ServiceState, done: Applied) -> list[dict[str, Any]]:
    """One event per new message: its place and its deliveries (for the live map)."""
    assert done.messages is not None
    ids, points = done.messages
    lonlat = lonlat_of(state.index.network, points)
    found = done.deliveries if done.deliveries is not None else None
    out = []
    for k, m in enumerate(ids.tolist()):
        mine: list[dict[str, Any]] = []
        if found is not None:
            rows = found.message_id == m
            seq = None if done.delivery_seq is None else done.delivery_seq[rows]
            mine = deliveries_json(Deliveries(*(a[rows] for a in (
                found.message_id, found.subscription_id, found.distance, found.score))), seq)
        out.append({"type": "message", "id": m, "lon": float(lonlat[k, 0]),
                    "lat": float(lonlat[k, 1]), "deliveries": mine})
    return out


class Fanout:
    """Where durable publishes go: ``hub`` (``WS /deliveries``), ``events`` (``WS /events``,
    the map), the MQTT ``connector`` (set once it runs) and the streams' ``pulse``."""

    def __init__(self, state: ServiceState, *, max_deliveries: int, max_bytes: int) -> None:
        self.state = state
        self.hub = DeliveryHub(max_deliveries=max_deliveries, max_bytes=max_bytes)
        # the live map's stream: messages with their deliveries
        self.events = DeliveryHub(max_deliveries=max_deliveries, max_bytes=max_bytes)
        self.pulse = Pulse()
        self.connector: MqttConnector | None = None

    def announce(self, done: Applied) -> None:
        """A durable publish of HTTP or WebSocket: to every reader, the broker's too."""
        self.pulse.kick()
        hub, connector = self.hub, self.connector
        if not hub.clients:
            pass  # the objects only when someone takes them
        elif done.deliveries is not None and len(done.deliveries):
            hub.push(deliveries_json(done.deliveries, done.delivery_seq))
        if hub.clients and done.topk is not None and len(done.topk):
            hub.push(topk_json(done.topk))  # top-k insertions and evictions, same stream
        if connector is not None:
            connector.publish_applied(done)
        if self.events.clients and done.messages is not None:
            self.events.push(message_events(self.state, done))

    def local(self, done: Applied) -> None:
        """A durable publish of the broker (which has its deliveries already): to the
        WebSocket clients and the streams' readers."""
        self.pulse.kick()
        if not self.hub.clients:
            pass  # the objects only when someone takes them (a fleet's 18,000 a second)
        elif done.deliveries is not None and len(done.deliveries):
            self.hub.push(deliveries_json(done.deliveries, done.delivery_seq))
        if self.hub.clients and done.topk is not None and len(done.topk):
            self.hub.push(topk_json(done.topk))
        if self.events.clients and done.messages is not None:
            self.events.push(message_events(self.state, done))
