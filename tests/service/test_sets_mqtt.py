"""Route and area subscriptions over MQTT (issue 32): the subscribe and move topics take
the same ``geometry`` rows as HTTP (one Dispatch and BodyParser path), against a real
Mosquitto broker on loopback (skips without one)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import numpy as np
import pytest
from test_mqtt import broker  # noqa: F401  (the real broker fixture)
from test_sets import _geometries, _route

from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.segment_sets import route_from_lonlat

mqtt = pytest.importorskip("paho.mqtt.client")
pytestmark = pytest.mark.slow


def test_mqtt_takes_routes_and_areas(serve: Any, broker: int,  # noqa: F811
                                     andorra: RoadNetwork, tweets: list[list[str]]) -> None:
    net = andorra
    server = serve("--mqtt", f"127.0.0.1:{broker}")
    got: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    ready = threading.Event()
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="test-sets")

    def on_connect(c: Any, *_: Any) -> None:
        c.subscribe("roadpubsub/deliveries/#", qos=1)
        c.subscribe("roadpubsub/errors", qos=1)

    def on_message(c: Any, userdata: Any, msg: Any) -> None:
        (errors if msg.topic == "roadpubsub/errors" else got).append(json.loads(msg.payload))

    client.on_connect = on_connect
    client.on_subscribe = lambda *_: ready.set()
    client.on_message = on_message
    client.connect("127.0.0.1", broker)
    client.loop_start()
    word = tweets[0][0]
    try:
        assert ready.wait(20)
        area = _geometries(net, np.random.default_rng(5), 3)[2]
        rows = [{"id": 70, "keywords": [word], "alpha": 0.5, "tau": 0.2,
                 "geometry": _route(net, 10, 400)},
                {"id": 71, "keywords": [word], "kind": "boolean", "radius": 100.0,
                 "geometry": area}]
        client.publish("roadpubsub/subscriptions", json.dumps(rows), qos=1).wait_for_publish(20)
        bad = {"id": 72, "keywords": [word], "alpha": 0.5, "tau": 0.2,
               "geometry": {"type": "Circle"}}
        client.publish("roadpubsub/subscriptions", json.dumps(bad), qos=1).wait_for_publish(20)
        moved_to = _route(net, 20, 300)
        client.publish("roadpubsub/moves", json.dumps({"id": 70, "geometry": moved_to}),
                       qos=1).wait_for_publish(20)
        with server.client() as c:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (
                    c.get("/subscriptions/71").status_code == 200 and errors):
                time.sleep(0.2)
            time.sleep(1.0)  # the move follows on its own topic
            route = c.get("/subscriptions/70").json()["geometry"]
            assert route == route_from_lonlat(net, moved_to).to_json(net)  # moved
            assert c.get("/subscriptions/71").json()["geometry"]["kind"] == "area"
            assert c.get("/subscriptions/72").status_code == 404
            seg = route["segments"][len(route["segments"]) // 2]
            msg = {"id": 1, "keywords": [word], "u": seg["u"], "v": seg["v"],
                   "offset": seg["start_m"]}
            client.publish("roadpubsub/messages", json.dumps(msg), qos=1).wait_for_publish(20)
            while time.monotonic() < deadline and c.get("/messages/1").status_code != 200:
                time.sleep(0.2)
            own = c.get("/messages/1").json()["deliveries"]
        assert {(d["subscription_id"], d["distance"]) for d in own} >= {(70, 0.0)}
        deadline = time.monotonic() + 30
        while len(got) < len(own) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sorted(got, key=lambda d: d["seq"]) == own
        assert errors and "row 0 (id 72)" in errors[0]["error"] \
            and "geometry" in errors[0]["error"]
    finally:
        client.loop_stop()
        client.disconnect()
