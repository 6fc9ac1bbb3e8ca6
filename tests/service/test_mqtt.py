"""The MQTT connector against a real Mosquitto broker on loopback (skips without one)."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from live import free_port, message_rows, subscription_rows
from oracle import as_deliveries, assert_same

from roadpubsub.index.workload import Workload
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.settings import DEFAULTS
from roadpubsub.service.mqtt_wire import publish_packet

mqtt = pytest.importorskip("paho.mqtt.client")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[int]:
    binary = shutil.which("mosquitto") or (
        "/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else None)
    if binary is None:
        pytest.skip("needs the mosquitto broker (apt-get install mosquitto)")
    port = free_port()
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\n")
    proc = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            probe = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
            try:
                probe.connect("127.0.0.1", port)
                probe.disconnect()
                break
            except OSError:
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def test_broker_events_and_deliveries(serve: Any, broker: int, workload: Workload,
                                      andorra: RoadNetwork) -> None:
    server = serve("--mqtt", f"127.0.0.1:{broker}")
    got: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    ready = threading.Event()
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="test-vehicle")

    def on_connect(c: Any, *_: Any) -> None:
        c.subscribe("roadpubsub/deliveries/#", qos=1)
        c.subscribe("roadpubsub/errors", qos=1)

    def on_subscribe(c: Any, *_: Any) -> None:
        ready.set()

    def on_message(c: Any, userdata: Any, msg: Any) -> None:
        body = json.loads(msg.payload)
        if msg.topic == "roadpubsub/errors":
            errors.append(body)
        else:
            assert msg.topic == f"roadpubsub/deliveries/{body['subscription_id']}"
            got.append(body)

    client.on_connect = on_connect
    client.on_subscribe = on_subscribe
    client.on_message = on_message
    client.connect("127.0.0.1", broker)
    client.loop_start()
    try:
        assert ready.wait(20)
        subs = subscription_rows(workload, andorra)[:600]
        client.publish("roadpubsub/subscriptions", json.dumps(subs), qos=1).wait_for_publish(20)
        move = {"id": subs[0]["id"], "u": subs[1]["u"], "v": subs[1]["v"],
                "offset": subs[1]["offset"]}
        client.publish("roadpubsub/moves", json.dumps(move), qos=1).wait_for_publish(20)
        client.publish("roadpubsub/unsubscriptions", json.dumps({"id": subs[2]["id"]}),
                       qos=1).wait_for_publish(20)
        msgs = message_rows(workload, andorra)[:30]
        for m in msgs:
            client.publish("roadpubsub/messages", json.dumps(m), qos=1).wait_for_publish(20)
        client.publish("roadpubsub/messages", json.dumps({"id": "bad"}),
                       qos=1).wait_for_publish(20)
        with server.client() as c:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if all(c.get(f"/messages/{m['id']}").status_code == 200 for m in msgs):
                    break
                time.sleep(0.2)
            own = [d for m in msgs for d in c.get(f"/messages/{m['id']}").json()["deliveries"]]
            assert c.get(f"/subscriptions/{subs[2]['id']}").status_code == 404
            moved = c.get(f"/subscriptions/{subs[0]['id']}").json()
            assert (moved["u"], moved["v"], moved["offset"]) == (move["u"], move["v"],
                                                                 move["offset"])
            # HTTP and MQTT share one log: a message published over HTTP reaches the topics
            extra = {**message_rows(workload, andorra)[40]}
            own += c.post("/messages", json=extra).json()["deliveries"]
        assert len(own) > 20
        deadline = time.monotonic() + 30
        while len(got) < len(own) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # nothing more may come
        assert_same(as_deliveries(got), as_deliveries(own), "MQTT topics vs the service")
        assert errors and "'id'" in errors[0]["error"] and errors[0]["topic"].endswith("messages")
        _check_stage_histograms(server.url, publishes=len(msgs) + 1, others=3)
    finally:
        client.loop_stop()
        client.disconnect()


def _check_stage_histograms(url: str, *, publishes: int, others: int) -> None:
    """/metrics counts every MQTT event once per stage, messages apart from the rest, and
    an event reaches each stage no sooner than the one before."""
    from roadpubsub.bench.fleet import _metrics

    name = "roadpubsub_mqtt_event_stage_seconds"
    m = _metrics(url)
    for kind, n in (("publish", publishes), ("other", others)):
        sums = []
        for stage in ("applied", "durable", "sent"):
            labels = f'stage="{stage}",kind="{kind}"'
            buckets = sorted((float(k.rsplit('le="', 1)[1][:-2]), v) for k, v in m.items()
                             if k.startswith(f"{name}_bucket{{{labels},"))
            counts = [v for _, v in buckets]
            assert counts == sorted(counts) and counts[-1] == n, (stage, kind, buckets)
            assert m[f"{name}_count{{{labels}}}"] == n
            sums.append(m[f"{name}_sum{{{labels}}}"])
        assert 0 < sums[0] <= sums[1] <= sums[2] < 60 * n, (kind, sums)
    # the loaded state is frozen out of the collector's scans (no full-collection pauses)
    assert m["roadpubsub_gc_frozen_objects"] > 10_000
    assert m['roadpubsub_gc_threshold{generation="0"}'] == DEFAULTS.gc_young_threshold > 700


def test_unacknowledged_broker_events_survive_kill_9(serve: Any, broker: int,
                                                    workload: Workload,
                                                    andorra: RoadNetwork) -> None:
    """The broker redelivers what the killed service had not acknowledged; every message
    ends up logged once, with one set of deliveries."""
    server = serve("--mqtt", f"127.0.0.1:{broker}")
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="test-sensor")
    client.connect("127.0.0.1", broker)
    client.loop_start()
    try:
        subs = subscription_rows(workload, andorra)[:600]
        client.publish("roadpubsub/subscriptions", json.dumps(subs), qos=1).wait_for_publish(20)
        msgs = [{**m, "id": 5000 + k} for k, m in enumerate(message_rows(workload, andorra))]
        infos = [client.publish("roadpubsub/messages", json.dumps(m), qos=1)
                 for m in msgs[:150]]
        time.sleep(0.3)
        server.kill()  # some events applied, some queued at the broker, some in between
        for m in msgs[150:300]:  # published while the service is down
            infos.append(client.publish("roadpubsub/messages", json.dumps(m), qos=1))
        for info in infos:
            info.wait_for_publish(20)
        server.start()
        with server.client() as c:
            deadline = time.monotonic() + 90
            missing = msgs[:300]
            while missing and time.monotonic() < deadline:
                missing = [m for m in missing
                           if c.get(f"/messages/{m['id']}").status_code != 200]
                time.sleep(0.2)
            assert not missing, f"{len(missing)} broker messages never applied"
            assert len(c.get(f"/subscriptions/{subs[5]['id']}").json()["keywords"]) > 0
        server.stop()
        import pyarrow.parquet as pq

        folder = server.state_dir / "deliveries"
        published = [m for p in sorted(folder.glob("*.published.parquet"))
                     for m in pq.read_table(p).column("message_id").to_pylist()]
        assert sorted(published) == sorted(m["id"] for m in msgs[:300])  # each once
    finally:
        client.loop_stop()
        client.disconnect()


def test_the_connector_reconnects_after_a_broker_restart(
        serve: Any, tmp_path: Path, workload: Workload, andorra: RoadNetwork,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker goes away and comes back (a new process, its sessions lost): the
    connector reconnects, subscribes again, and events and deliveries flow as before."""
    from roadpubsub.bench.fleet import SERVICE_USER, Broker, _metrics

    if not Path("/usr/sbin/mosquitto").exists():
        pytest.skip("needs the mosquitto broker")
    broker = Broker(tmp_path / "broker")
    with broker:
        monkeypatch.setenv("ROADPUBSUB_MQTT_PASSWORD", broker.passwords[SERVICE_USER])
        server = serve("--mqtt", f"127.0.0.1:{broker.port}", "--mqtt-user", SERVICE_USER)
        subs = subscription_rows(workload, andorra)[:600]
        with server.client() as c:
            assert c.post("/subscriptions", json=subs).status_code == 201
        msgs = [{**m, "id": 7000 + k} for k, m in enumerate(message_rows(workload, andorra))]

        def publish_and_wait(m: dict[str, Any]) -> list[dict[str, Any]]:
            got: list[dict[str, Any]] = []
            obs = broker.client(f"observer-{m['id']}")
            obs.on_publish = lambda pubs: got.extend(json.loads(p) for _, p, _, _ in pubs)
            obs.connect()
            obs.subscribe(["roadpubsub/deliveries/#"], qos=0)
            pub = broker.client(f"sensor-{m['id']}")
            pub.connect()
            try:
                pub.send(publish_packet(b"roadpubsub/messages", json.dumps(m).encode(), 1))
                with server.client() as c:
                    deadline = time.monotonic() + 60
                    while c.get(f"/messages/{m['id']}").status_code != 200:
                        assert time.monotonic() < deadline, (
                            f"the event was not applied: {_metrics(server.url)}")
                        time.sleep(0.1)
                    want = c.get(f"/messages/{m['id']}").json()["deliveries"]
                deadline = time.monotonic() + 30
                while len(got) < len(want) and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert_same(as_deliveries(got), as_deliveries(want), "after a restart")
                return want
            finally:
                pub.close()
                obs.close()

        assert publish_and_wait(msgs[0])
    with broker:  # the same port, a fresh broker (no session: nothing kept meanwhile)
        deadline = time.monotonic() + 30
        while _metrics(server.url)["roadpubsub_mqtt_reconnects_total"] < 1:
            assert time.monotonic() < deadline, "the connector did not reconnect"
            time.sleep(0.1)
        time.sleep(0.5)  # its subscriptions again, before anything is published
        assert publish_and_wait(msgs[1])
        assert publish_and_wait(msgs[2])
        figures = _metrics(server.url)
        assert figures["roadpubsub_mqtt_reconnects_total"] == 1
        assert figures["roadpubsub_mqtt_events_pending"] == 0


def _observe(port: int, name: str) -> tuple[Any, list[dict[str, Any]]]:
    """A client reading every delivery topic (connected and subscribed)."""
    got: list[dict[str, Any]] = []
    ready = threading.Event()
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=name)
    client.on_connect = lambda c, *_: c.subscribe("roadpubsub/deliveries/#", qos=1)
    client.on_subscribe = lambda *_: ready.set()
    client.on_message = lambda c, u, msg: got.append(json.loads(msg.payload))
    client.connect("127.0.0.1", port)
    client.loop_start()
    assert ready.wait(20)
    return client, got


@pytest.mark.parametrize("mode", ["all", "chosen"])
def test_only_the_deliveries_their_subscriptions_want_are_pushed(
        serve: Any, broker: int, workload: Workload, andorra: RoadNetwork, mode: str) -> None:
    """Each subscription's "mqtt" choice, kept through a snapshot and a log replay,
    decides with --mqtt-push which deliveries reach the broker; the rest are recorded."""
    subs = subscription_rows(workload, andorra)[:600]
    said: dict[int, bool] = {}
    for i, row in enumerate(subs):
        if i % 3 < 2:
            row["mqtt"] = said[row["id"]] = i % 3 == 0
        if i % 30 < 3:  # top-k subscriptions of each choice: their events are pushed too
            row.update(kind="topk", k=3, tau=None)
    args = ("--mqtt", f"127.0.0.1:{broker}", "--mqtt-push", mode)
    first = serve(*args)
    with first.client() as c:
        bad = c.post("/subscriptions", json=[{**subs[2], "id": 10**9, "mqtt": "yes"}])
        assert bad.status_code == 422, bad.text
        assert "row 0" in bad.json()["error"] and "'mqtt'" in bad.json()["error"]
        assert c.post("/subscriptions", json=subs[:300]).status_code in (200, 201)
    first.stop()  # a clean stop: the snapshot holds the first 300 choices
    second = serve(*args)
    with second.client() as c:
        assert c.post("/subscriptions", json=subs[300:]).status_code in (200, 201)
    second.kill()  # the last 300 choices are in the log only
    server = serve(*args)
    client, got = _observe(broker, f"observer-{mode}")
    try:
        with server.client() as c:
            for row in subs[:3] + subs[300:303]:
                back = c.get(f"/subscriptions/{row['id']}").json()
                assert back.get("mqtt") == said.get(row["id"]), back
            msgs = message_rows(workload, andorra)[:31]
            for m in msgs[:30]:
                client.publish("roadpubsub/messages", json.dumps(m), qos=1)
            own = c.post("/messages", json=msgs[30]).json()["deliveries"]
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if all(c.get(f"/messages/{m['id']}").status_code == 200 for m in msgs[:30]):
                    break
                time.sleep(0.2)
            own += [d for m in msgs[:30]
                    for d in c.get(f"/messages/{m['id']}").json()["deliveries"]]
            want = [d for d in own if said.get(d["subscription_id"], mode == "all")]
            assert 0 < len(want) < len(own)
            deadline = time.monotonic() + 30
            while len(got) < len(want) and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.5)  # nothing more may come
            events = [g for g in got if "event" in g]  # top-k insertions and evictions
            assert events and all(said.get(e["subscription_id"], mode == "all")
                                  for e in events)
            got = [g for g in got if "event" not in g]
            assert_same(as_deliveries(got), as_deliveries(want), "pushed vs wanted")
            unpushed = [ln for ln in c.get("/metrics").text.splitlines()
                        if ln.startswith("roadpubsub_mqtt_deliveries_unpushed_total ")]
            assert unpushed == [f"roadpubsub_mqtt_deliveries_unpushed_total "
                                f"{len(own) - len(want)}"]
    finally:
        client.loop_stop()
        client.disconnect()
