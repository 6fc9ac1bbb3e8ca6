"""MQTT and HTTP share one dispatch (:mod:`roadpubsub.service.dispatch`): a message
published over MQTT has its webhook deliveries in the outbox before the service's PUBACK,
as an HTTP publish has before its answer (issue 30), against a real Mosquitto, a real
``serve`` subprocess and a real loopback receiver; a kill -9 right after the PUBACK loses
none.

QoS 1 acknowledgements go hop by hop: the publisher's PUBACK comes from the broker. The
service's PUBACK to the broker is seen in the broker's own log (``log_type all``, which
Mosquitto writes line by line), and the service is killed as soon as it appears.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hooks import Receiver, secret_file
from live import free_port, message_rows, subscription_rows
from test_webhooks_live import FLAGS

from roadpubsub.index.workload import Workload
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.service.outbox import Outbox

mqtt = pytest.importorskip("paho.mqtt.client")

_BROKER = Path("/usr/sbin/mosquitto")


@pytest.fixture
def logged_broker(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A Mosquitto on loopback logging every packet: (port, its log file)."""
    binary = shutil.which("mosquitto") or (str(_BROKER) if _BROKER.exists() else None)
    if binary is None:
        pytest.skip("needs the mosquitto broker (apt-get install mosquitto)")
    port = free_port()
    log = tmp_path / "mosquitto.log"
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\n"
                    f"log_dest file {log}\nlog_type all\n"
                    # as root it would drop to the mosquitto user, who cannot write here
                    + ("user root\n" if os.geteuid() == 0 else ""))
    proc = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while "running" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline, "mosquitto did not start"
            time.sleep(0.05)
        yield port, log
    finally:
        proc.terminate()
        proc.wait(10)


def _service_pubacks(log: Path) -> int:
    """PUBACKs the broker received from the service (its client id starts so)."""
    return log.read_text(errors="replace").count("Received PUBACK from roadpubsub-serve-")


def test_mqtt_publish_is_in_the_outbox_before_its_puback(
        serve: Any, logged_broker: tuple[int, Path], workload: Workload,
        andorra: RoadNetwork, tmp_path: Path, receivers: list[Receiver]) -> None:
    broker, log = logged_broker
    receiver = Receiver()  # down until the service restarts: everything stays queued
    receivers.append(receiver)
    flags = (*FLAGS, "--webhook-secret-file", str(secret_file(tmp_path)),
             "--mqtt", f"127.0.0.1:{broker}")
    server = serve(*flags)
    subs = subscription_rows(workload, andorra)[:900]
    for row in subs:
        row["webhook"] = receiver.url
    with server.client() as c:
        for k in range(0, len(subs), 300):
            assert c.post("/subscriptions", json=subs[k:k + 300]).status_code == 201
    msgs = [{**m, "id": 7000 + k} for k, m in enumerate(message_rows(workload, andorra)[:40])]
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="test-hook-sensor")
    client.connect("127.0.0.1", broker)
    client.loop_start()
    try:
        before = _service_pubacks(log)
        client.publish("roadpubsub/messages", json.dumps(msgs), qos=1).wait_for_publish(20)
        deadline = time.monotonic() + 60
        while _service_pubacks(log) == before:  # the service's PUBACK of the message
            assert time.monotonic() < deadline, "the service never acknowledged the message"
            time.sleep(0.002)
        server.kill()  # right after the PUBACK: no time for a later feed of the outbox
    finally:
        client.loop_stop()
        client.disconnect()
    # the outbox as the dead service left it (read from a copy: the evidence stays as is)
    copy = tmp_path / "outbox-after-kill"
    shutil.copytree(server.state_dir / "outbox", copy)
    outbox = Outbox(copy, fsync=False)
    try:
        queued = {(int(q.entry.seq), int(q.entry.message_id), int(q.entry.subscription_id))
                  for q in outbox.peek(receiver.url, 1_000_000)}
    finally:
        outbox.close()
    receiver.start()
    server.start()  # the log recovered: the same deliveries with the same seqs
    with server.client() as c:
        logged = {(int(d["seq"]), m["id"], int(d["subscription_id"])) for m in msgs
                  for d in c.get(f"/messages/{m['id']}").json()["deliveries"]}
    assert len(logged) > 20, "the test needs deliveries to webhook subscriptions"
    assert queued == logged, (f"{len(logged - queued)} deliveries acknowledged over MQTT "
                              "were not in the outbox at the PUBACK")
    deadline = time.monotonic() + 90
    while not {s for s, _, _ in logged} <= set(receiver.deduplicated()):
        assert time.monotonic() < deadline, "the receiver did not get every delivery"
        time.sleep(0.2)
