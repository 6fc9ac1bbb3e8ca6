"""What an applied event gives back (:class:`Applied`), and deliveries as JSON objects."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.service.mqtt_choice import MqttChoices
from roadpubsub.service.topk_found import TopkFound

__all__ = ["Applied", "deliveries_json"]

IntArray = npt.NDArray[np.int64]


@dataclass
class Applied:
    """What one event did: its log sequence number and the answer's body."""

    seq: int
    body: dict[str, Any]
    deliveries: Deliveries | None = None  # new deliveries (pushed to WebSocket clients)
    everything: Deliveries | None = None  # the answer's deliveries, repeats included
    messages: tuple[IntArray, EdgePoints] | None = None  # new messages (for the live map)
    topk: TopkFound | None = None  # new top-k events (pushed to WebSocket clients)
    topk_all: TopkFound | None = None  # the answer's top-k events, repeats included
    delivery_seq: IntArray | None = None  # the seq of each of ``deliveries``
    mqtt: MqttChoices | None = None  # the subscriptions' MQTT choices when applied


def deliveries_json(d: Deliveries, seq: IntArray | None = None) -> list[dict[str, Any]]:
    """Deliveries as the objects of the HTTP answers and the WebSocket stream (with
    ``seq``, each delivery's sequence number, when given)."""
    if seq is not None:
        return [{"seq": q, "message_id": m, "subscription_id": s, "distance": x, "score": y}
                for q, m, s, x, y in zip(seq.tolist(), d.message_id.tolist(),
                                         d.subscription_id.tolist(), d.distance.tolist(),
                                         d.score.tolist(), strict=True)]
    return [{"message_id": m, "subscription_id": s, "distance": x, "score": y}
            for m, s, x, y in zip(d.message_id.tolist(), d.subscription_id.tolist(),
                                  d.distance.tolist(), d.score.tolist(), strict=True)]
