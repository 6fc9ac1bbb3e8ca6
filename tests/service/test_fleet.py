"""The fleet benchmark at CI scale: a few hundred vehicles for a few seconds through a real
Mosquitto (password file and ACL), every delivery checked.

Two checks: every delivery the service recorded arrived on MQTT, once, to the observer
and (for vehicles) to the vehicle's own topic; and for messages published after the fleet
parked, the deliveries that arrived are those of the reference replay (brute force on the
final positions), bit for bit.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from live import DMAX_M, message_rows, subscription_rows, tweet_weights
from oracle import Oracle, as_deliveries, assert_same

from roadpubsub.bench.fleet import (
    MOSQUITTO,
    SERVICE_USER,
    Broker,
    FleetDriver,
    _metrics,
    mark_vehicles,
)
from roadpubsub.index.workload import Workload
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.service.mqtt_wire import publish_packet

pytestmark = pytest.mark.skipif(not Path(MOSQUITTO).exists(),
                                reason="needs the mosquitto broker")


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_fleet_every_delivery_arrives(serve: Any, tmp_path: Path, workload: Workload,
                                      andorra: RoadNetwork, tweets: list[list[str]],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    with Broker(tmp_path / "broker") as broker:
        monkeypatch.setenv("ROADPUBSUB_MQTT_PASSWORD", broker.passwords[SERVICE_USER])
        server = serve("--mqtt", f"127.0.0.1:{broker.port}", "--mqtt-user", SERVICE_USER)
        subs = subscription_rows(workload, andorra)
        with server.client() as c:
            assert c.post("/subscriptions", json=subs).status_code == 201
        msgs = [{k: m[k] for k in ("u", "v", "offset", "keywords")}
                for m in message_rows(workload, andorra)]
        vehicles = np.asarray([s["id"] for s in subs[:300]], dtype=np.int64)
        driver = FleetDriver(broker, andorra, vehicles, rate=2.0, messages=msgs[:300],
                             message_rate=25.0, first_message_id=50_000, keep=True)
        try:
            driver.run(3.0)
            sent = list(driver.sent_at)
            assert driver.moves_sent >= 1500 and len(sent) >= 60
            with server.client() as c:
                _wait(lambda: all(c.get(f"/messages/{m}").status_code == 200
                                  for m in sent), 90, "fleet messages not applied")
                recorded = [d for m in sent
                            for d in c.get(f"/messages/{m}").json()["deliveries"]]
                # the fleet parks; the last report of each vehicle is where it stands
                _wait(lambda: _metrics(server.url)[
                    'roadpubsub_mqtt_events_total{stage="acknowledged"}']
                    >= driver.moves_sent + len(sent), 60, "moves not acknowledged")
                for k in (0, 150, 299):
                    got = c.get(f"/subscriptions/{vehicles[k]}").json()
                    want = driver.last[k]
                    assert want is not None
                    assert (got["u"], got["v"], got["offset"]) == want
            assert len(recorded) > 200
            _wait(lambda: len(driver.all_got.rows) >= len(recorded), 30,
                  f"{len(recorded) - len(driver.all_got.rows)} deliveries did not arrive")
            time.sleep(0.5)  # nothing more may come
            bodies = driver.all_got.bodies
            assert bodies is not None
            got = as_deliveries([b for b in bodies if b["message_id"] in driver.sent_at])
            assert_same(got, as_deliveries(recorded), "MQTT deliveries vs the service's")
            mine = {(d["message_id"], d["subscription_id"]) for d in recorded
                    if d["subscription_id"] in set(vehicles.tolist())}
            _wait(lambda: len(driver.vehicle_got.rows) >= len(mine), 10,
                  "vehicle deliveries missing")
            assert {(m, s) for m, s, _ in driver.vehicle_got.rows} == mine

            # messages after the fleet parked: the reference replay on the final positions
            oracle = Oracle(andorra, tweet_weights(tweets), dmax_m=DMAX_M)
            oracle.apply("subscribe", subs)
            oracle.apply("move", [{"id": int(v), "u": p[0], "v": p[1], "offset": p[2]}
                                  for v, p in zip(vehicles.tolist(), driver.last,
                                                  strict=True) if p is not None])
            final = [{**m, "id": 90_000 + k, "time": 1.0}
                     for k, m in enumerate(message_rows(workload, andorra)[300:340])]
            oracle.apply("publish", final)
            before = len(bodies)
            driver.pubs[0].send(b"".join(
                publish_packet(b"roadpubsub/messages", json.dumps(
                    {k: v for k, v in m.items() if k != "time"}).encode(), 60_000 + k)
                for k, m in enumerate(final)))
            want = as_deliveries([{"message_id": int(m), "subscription_id": int(s),
                                   "distance": float(x), "score": float(y)}
                                  for f in final for m, s, x, y in zip(
                                      *(getattr(oracle.deliveries[f["id"]], a) for a in (
                                          "message_id", "subscription_id", "distance",
                                          "score")), strict=True)])
            assert len(want) > 20
            _wait(lambda: len(bodies) - before >= len(want), 60,
                  "deliveries of the final messages missing")
            time.sleep(0.5)
            assert_same(as_deliveries(bodies[before:]), want, "MQTT vs reference replay")
            assert not driver.errors
            figures = _metrics(server.url)
            assert figures['roadpubsub_mqtt_deliveries_total{stage="acknowledged"}'] \
                == figures['roadpubsub_mqtt_deliveries_total{stage="queued"}'] \
                >= len(recorded) + len(want)
            assert figures["roadpubsub_mqtt_events_pending"] == 0
        finally:
            driver.close()


def test_fleet_pushing_the_vehicles_only(serve: Any, tmp_path: Path, workload: Workload,
                                        andorra: RoadNetwork,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """``--push vehicles``: the vehicles, subscribed again with "mqtt": true, get every
    delivery of theirs; nobody else's is published, and all are recorded."""
    with Broker(tmp_path / "broker") as broker:
        monkeypatch.setenv("ROADPUBSUB_MQTT_PASSWORD", broker.passwords[SERVICE_USER])
        server = serve("--mqtt", f"127.0.0.1:{broker.port}", "--mqtt-user", SERVICE_USER,
                       "--mqtt-push", "chosen")
        subs = subscription_rows(workload, andorra)
        assert [s["id"] for s in subs[:300]] == list(range(300))
        # rows that say more than a point: marking must keep what they say
        for k in (3, 150, 299):
            subs[k]["expires_at"] = time.time() + 86_400.0 * (k + 1)
        subs[7].update(kind="boolean", radius=DMAX_M / 2, alpha=None, tau=None)
        with server.client() as c:
            assert c.post("/subscriptions", json=subs).status_code == 201
            with pytest.raises(InputError, match="lacks some"):
                mark_vehicles(server.url, len(subs) + 1)  # refused before any change
            before = {k: c.get(f"/subscriptions/{k}").json() for k in (0, 3, 7, 150, 299)}
            assert mark_vehicles(server.url, 300, batch=128) > 0
            for k, row in before.items():
                assert c.get(f"/subscriptions/{k}").json() == {**row, "mqtt": True}
            assert before[7]["kind"] == "boolean" and before[3]["expires_at"] is not None
            assert "mqtt" not in c.get(f"/subscriptions/{subs[300]['id']}").json()
        msgs = [{k: m[k] for k in ("u", "v", "offset", "keywords")}
                for m in message_rows(workload, andorra)]
        driver = FleetDriver(broker, andorra, np.arange(300), rate=2.0, messages=msgs[:300],
                             message_rate=25.0, first_message_id=50_000, keep=True)
        try:
            driver.run(3.0)
            sent = list(driver.sent_at)
            with server.client() as c:
                _wait(lambda: all(c.get(f"/messages/{m}").status_code == 200
                                  for m in sent), 90, "fleet messages not applied")
                recorded = [d for m in sent
                            for d in c.get(f"/messages/{m}").json()["deliveries"]]
            mine = [d for d in recorded if d["subscription_id"] < 300]
            assert len(mine) > 20 and len(recorded) > len(mine)
            _wait(lambda: len(driver.all_got.rows) >= len(mine), 30,
                  f"{len(mine) - len(driver.all_got.rows)} vehicle deliveries did not arrive")
            time.sleep(0.5)  # nothing more may come
            bodies = driver.all_got.bodies
            assert bodies is not None
            # only the vehicles' deliveries went out, though others' were recorded
            assert max(b["subscription_id"] for b in bodies) < 300
            assert max(d["subscription_id"] for d in recorded) >= 300
            assert_same(as_deliveries(bodies), as_deliveries(mine), "pushed vs the vehicles'")
            assert {(m, s) for m, s, _ in driver.vehicle_got.rows} \
                == {(d["message_id"], d["subscription_id"]) for d in mine}
            figures = _metrics(server.url)
            assert figures["roadpubsub_mqtt_deliveries_unpushed_total"] \
                == len(recorded) - len(mine)
            assert not driver.errors
        finally:
            driver.close()
