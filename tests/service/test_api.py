"""``roadpubsub serve`` end to end on Andorra: every endpoint, the batch CLI's deliveries,
WebSocket pushes, bad requests, expiry."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import websockets.sync.client as websockets_sync
from live import DMAX_M, Server, location_of, message_rows, subscription_rows, tweet_weights
from oracle import Oracle, as_deliveries, assert_same
from websockets.exceptions import ConnectionClosed

from roadpubsub.cli import main
from roadpubsub.index.io import read_deliveries, write_weights
from roadpubsub.index.workload import Workload
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork


def _collect(url: str, out: list[dict[str, Any]], ready: threading.Event,
             stop: threading.Event) -> None:
    with websockets_sync.connect(url, open_timeout=30) as ws:
        ready.set()
        while not stop.is_set():
            try:
                out.append(json.loads(ws.recv(timeout=0.2)))
            except TimeoutError:
                continue


def _read_log(folder: Path) -> Deliveries:
    parts = [Deliveries(**read_deliveries(p)) for p in sorted((folder / "deliveries").glob(
        "*.parquet")) if not p.name.endswith(".published.parquet")]
    return Deliveries.concat(parts)


def test_endpoints_match_the_batch_cli(serve: Any, workload: Workload, move_points: EdgePoints,
                                       andorra: RoadNetwork, andorra_path: Path,
                                       tweets: list[list[str]], service_dir: Path,
                                       tmp_path: Path) -> None:
    server = serve()
    c = server.client()
    subs = subscription_rows(workload, andorra)
    # one alone, then batches
    r = c.post("/subscriptions", json=subs[0])
    assert r.status_code == 201 and r.json()["subscribed"] == 1
    for k in range(1, len(subs), 500):
        r = c.post("/subscriptions", json=subs[k:k + 500])
        assert r.status_code == 201, r.text
    got = c.get(f"/subscriptions/{subs[7]['id']}").json()
    for f in ("u", "v", "offset", "alpha", "tau"):
        assert got[f] == subs[7][f]
    assert sorted(got["keywords"]) == sorted(subs[7]["keywords"])
    assert got["expires_at"] is None

    # single moves: u/v/offset, and lon/lat snapped to the nearest road
    for i in range(5):
        loc = location_of(andorra, move_points, i)
        r = c.put(f"/subscriptions/{subs[i]['id']}/location", json=loc)
        assert r.status_code == 200, r.text
        now = c.get(f"/subscriptions/{subs[i]['id']}").json()
        assert (now["u"], now["v"], now["offset"]) == (loc["u"], loc["v"], loc["offset"])
    lonlat = {"lon": got["lon"], "lat": got["lat"]}
    assert c.put(f"/subscriptions/{subs[5]['id']}/location", json=lonlat).status_code == 200
    snapped = c.get(f"/subscriptions/{subs[5]['id']}").json()
    assert abs(snapped["lon"] - got["lon"]) < 1e-6 and abs(snapped["lat"] - got["lat"]) < 1e-6
    # a batch of moves, in one index update
    batch = [{"id": subs[i]["id"], **location_of(andorra, move_points, 100 + i)}
             for i in range(10, 310)]
    r = c.post("/subscriptions/moves", json=batch)
    assert r.status_code == 200 and r.json()["moved"] == 300
    # unsubscribe 50
    for i in range(400, 450):
        assert c.delete(f"/subscriptions/{subs[i]['id']}").status_code == 200
    assert c.get(f"/subscriptions/{subs[400]['id']}").status_code == 404

    # WebSocket clients: everything, and one subscription's deliveries
    ws_url = server.url.replace("http", "ws") + "/deliveries"
    stop = threading.Event()
    every: list[dict[str, Any]] = []
    one: list[dict[str, Any]] = []
    watched = subs[20]["id"]
    threads = []
    for url, sink in ((ws_url, every), (f"{ws_url}?subscription={watched}", one)):
        ready = threading.Event()
        t = threading.Thread(target=_collect, args=(url, sink, ready, stop), daemon=True)
        t.start()
        assert ready.wait(30)
        threads.append(t)

    msgs = message_rows(workload, andorra)
    answers: list[dict[str, Any]] = []
    for m in msgs[:40]:
        r = c.post("/messages", json=m)
        assert r.status_code == 200, r.text
        answers.extend(r.json()["deliveries"])
    for k in range(40, len(msgs), 60):
        r = c.post("/messages", json=msgs[k:k + 60])
        assert r.status_code == 200, r.text
        answers.extend(r.json()["deliveries"])
    served = as_deliveries(answers)
    assert len(served) > 100  # the comparison below means something

    # a repeated message: the same deliveries, marked, and never logged twice
    again = c.post("/messages", json=msgs[3]).json()
    assert again["duplicates"] == [msgs[3]["id"]]
    assert_same(as_deliveries(again["deliveries"]),
                as_deliveries([d for d in answers if d["message_id"] == msgs[3]["id"]]),
                "repeat")
    assert c.get(f"/messages/{msgs[3]['id']}").json()["deliveries"] == again["deliveries"]

    # the batch CLI on the service's final subscriptions and the same messages
    rows: list[dict[str, Any]] = []
    after = None
    while True:
        page = c.get("/subscriptions", params={"limit": 400} | (
            {"after": after} if after is not None else {})).json()["subscriptions"]
        if not page:
            break
        rows.extend(page)
        after = page[-1]["id"]
    assert len(rows) == len(subs) - 50
    sub_file = tmp_path / "subs.json"
    sub_file.write_text(json.dumps([{k: v for k, v in r.items() if k != "expires_at"}
                                    for r in rows]))
    msg_file = tmp_path / "msgs.json"
    msg_file.write_text(json.dumps(msgs))
    weights_file = write_weights(tweet_weights(tweets), tmp_path / "w.parquet")
    out = tmp_path / "d.parquet"
    assert main(["match", "--network", str(andorra_path), "--subscriptions", str(sub_file),
                 "--messages", str(msg_file), "--weights", str(weights_file), "--dmax",
                 str(DMAX_M), "--quiet", "--out", str(out)]) == 0
    assert_same(served, Deliveries(**read_deliveries(out)), "service vs batch CLI")

    # pushed over WebSocket: every delivery once; the filtered stream only its own
    deadline = threading.Event()
    for _ in range(100):
        if len(every) >= len(served):
            break
        deadline.wait(0.1)
    stop.set()
    for t in threads:
        t.join(10)
    assert_same(as_deliveries(every), served, "WebSocket stream")
    assert_same(as_deliveries(one), Deliveries(
        *(a[served.subscription_id == watched] for a in (
            served.message_id, served.subscription_id, served.distance, served.score))),
        "filtered WebSocket stream")

    health = c.get("/health").json()
    assert health["status"] == "ok" and health["subscriptions"] == len(subs) - 50
    assert health["durable_seq"] == health["seq"]
    metrics = c.get("/metrics").text
    assert 'roadpubsub_events_total{kind="move"} 306' in metrics
    assert 'roadpubsub_request_seconds_count{kind="publish"}' in metrics
    assert "roadpubsub_log_bytes" in metrics and "roadpubsub_compactions_total" in metrics
    assert "roadpubsub_match_seconds_count " in metrics
    assert "process_resident_memory_bytes" in metrics
    spec = c.get("/openapi.json").json()
    assert {"/subscriptions", "/subscriptions/{sid}", "/subscriptions/{sid}/location",
            "/subscriptions/moves", "/messages", "/deliveries"} <= set(spec["paths"])
    c.close()
    server.stop()
    # the deliveries log holds every answer exactly once
    assert_same(_read_log(service_dir), served, "deliveries log")
    published = pq.read_table(sorted((service_dir / "deliveries").glob(
        "*.published.parquet"))[0]).column("message_id").to_pylist()
    assert msgs[0]["id"] in published


BAD_SUBSCRIPTIONS = [
    (b"{not json", 400, ["not valid JSON"]),
    (5, 400, ["subscription object"]),
    ([], 422, ["empty"]),
    ({"colour": "red"}, 422, ["'colour'"]),
    ({"id": "x"}, 422, ["'id'", "'x'"]),
    ({"alpha": 1.5}, 422, ["'alpha'", "1.5"]),
    ({"tau": 0}, 422, ["'tau'", "got 0"]),
    ({"tau": None}, 422, ["'tau'", "None"]),
    ({"keywords": []}, 422, ["'keywords'", "[]"]),
    ({"keywords": ["ok", ""]}, 422, ["'keywords'"]),
    ({"expires_at": "tomorrow"}, 422, ["'expires_at'", "'tomorrow'"]),
    ({"u": None, "v": None, "offset": None}, 422, ["no location"]),
    ({"u": None, "v": None, "offset": None, "lon": 200.0, "lat": 1.0}, 422,
     ["lon/lat outside", "200.0"]),
    ({"u": None, "v": None, "offset": None, "lon": 0.0, "lat": 0.0}, 422, ["'lon'", "farther"]),
    ({"u": 1, "v": 2}, 422, ["'u', 'v'"]),
    ({"offset": 1e9}, 422, ["'offset'"]),
    ({"offset": "far"}, 422, ["'offset'", "'far'"]),
]


@pytest.mark.parametrize(("change", "status", "fragments"), BAD_SUBSCRIPTIONS,
                         ids=[str(i) for i in range(len(BAD_SUBSCRIPTIONS))])
def test_bad_subscriptions(server_once: Any, workload: Workload, andorra: RoadNetwork,
                           change: Any, status: int, fragments: list[str]) -> None:
    c, _ = server_once
    good = subscription_rows(workload, andorra)[1000]
    if isinstance(change, bytes):
        r = c.post("/subscriptions", content=change)
    elif isinstance(change, dict):
        r = c.post("/subscriptions", json=[{**good, **change}])
    else:
        r = c.post("/subscriptions", json=change)
    assert r.status_code == status, r.text
    for f in fragments:
        assert f in r.json()["error"], (f, r.json())
    assert c.get(f"/subscriptions/{good['id']}").status_code == 404


@pytest.fixture(scope="module")
def server_once(service_template: Path, tmp_path_factory: pytest.TempPathFactory,
                workload: Workload, andorra: RoadNetwork) -> Any:
    """One server for the bad-request cases, holding subscriptions 0-99."""
    import shutil

    folder = tmp_path_factory.mktemp("bad") / "svc"
    shutil.copytree(service_template, folder)
    server = Server(folder).start()
    try:
        c = server.client()
        assert c.post("/subscriptions",
                      json=subscription_rows(workload, andorra)[:100]).status_code == 201
        yield c, server.url
        c.close()
    finally:
        server.stop()


def test_bad_requests(server_once: Any, workload: Workload, andorra: RoadNetwork,
                      move_points: EdgePoints) -> None:
    c, base = server_once
    subs = subscription_rows(workload, andorra)
    msgs = message_rows(workload, andorra)

    def refused(r: Any, status: int, *fragments: str) -> None:
        assert r.status_code == status, r.text
        for f in fragments:
            assert f in r.json()["error"], (f, r.json())

    # existing id, duplicate ids in a batch; a batch is refused whole
    refused(c.post("/subscriptions", json=subs[5]), 409, "already exist", "5")
    refused(c.post("/subscriptions", json=[subs[200], subs[200]]), 422, "duplicate ids", "200")
    refused(c.post("/subscriptions", json=[subs[201], {**subs[202], "alpha": -1}]), 422,
            "row 1", "'alpha'", "-1")
    assert c.get(f"/subscriptions/{subs[201]['id']}").status_code == 404
    # unknown and malformed ids
    refused(c.delete("/subscriptions/987654"), 404, "987654")
    refused(c.delete("/subscriptions/abc"), 400, "'abc'")
    refused(c.get("/subscriptions/987654"), 404, "987654")
    loc = location_of(andorra, move_points, 0)
    refused(c.put("/subscriptions/987654/location", json=loc), 404, "987654")
    refused(c.put("/subscriptions/1/location", json={**loc, "id": 2}), 422, "'id'", "2")
    refused(c.put("/subscriptions/1/location", json=[loc]), 400, "one location")
    refused(c.put("/subscriptions/1/location", json={"lon": "east", "lat": 1}), 422,
            "'lon'", "'east'")
    # a batch of moves with one unknown id moves nothing
    before = c.get("/subscriptions/3").json()
    refused(c.post("/subscriptions/moves", json=[{"id": 3, **loc}, {"id": 987654, **loc}]),
            404, "987654")
    assert c.get("/subscriptions/3").json() == before
    # messages
    refused(c.post("/messages", json={**msgs[0], "keywords": "delay"}), 422, "'keywords'",
            "'delay'")
    refused(c.post("/messages", json={**msgs[0], "time": "noon"}), 422, "'time'", "'noon'")
    refused(c.post("/messages", json={**msgs[0], "alpha": 0.5}), 422, "'alpha'")
    refused(c.post("/messages", json=[msgs[0], msgs[0]]), 422, "duplicate ids")
    refused(c.get("/messages/123456789"), 404, "123456789")
    refused(c.get("/messages/x1"), 400, "'x1'")
    refused(c.get("/subscriptions", params={"limit": 0}), 400, "'limit'")
    # a WebSocket asking for a malformed subscription id is closed at once (policy)
    with websockets_sync.connect(base.replace("http", "ws") + "/deliveries?subscription=a",
                                 open_timeout=10) as ws, pytest.raises(ConnectionClosed):
        ws.recv(timeout=5)
    assert ws.close_code == 1008
    assert c.get("/health").json()["subscriptions"] == 100


def test_expiry_is_exact_and_survives_restarts(serve: Any, workload: Workload,
                                               andorra: RoadNetwork, andorra_path: Path,
                                               tweets: list[list[str]], tmp_path: Path
                                               ) -> None:
    """A subscription stops matching messages whose time is >= its expires_at, and the
    server's clock purges it (a past expires_at: gone at the next publish); the rule (and
    the expiry table) survive a snapshot and a kill -9."""
    server = serve("--snapshot-every", "3")
    c = server.client()
    subs = subscription_rows(workload, andorra)[:600]
    base = float(int(time.time()) + 10**7)  # far beyond the server's clock: no purge
    expiring = np.random.default_rng(3).choice([None, 1000.0, base + 1000, base + 2000,
                                                base + 5000], len(subs))
    subs = [{**s, "expires_at": e} for s, e in zip(subs, expiring.tolist(), strict=True)]
    oracle = Oracle(andorra, tweet_weights(tweets), dmax_m=DMAX_M)
    assert c.post("/subscriptions", json=subs).status_code == 201
    oracle.apply("subscribe", subs)
    msgs = message_rows(workload, andorra)
    # one batch with several times (matched in time order), then single messages
    batch = [{**m, "time": base + t} for m, t in zip(
        msgs[:8], [2500.0, 500, 1500, 500, 999.5, 1000, 2000, 4000], strict=True)]
    seen = as_deliveries(c.post("/messages", json=batch).json()["deliveries"])
    oracle.apply("publish", batch)
    for m in msgs[8:20]:
        m = {**m, "time": base + 4500}
        seen = Deliveries.concat([seen, as_deliveries(c.post("/messages", json=m).json()[
            "deliveries"])])
        oracle.apply("publish", [m])
    want = Deliveries.concat([oracle.deliveries[m["id"]] for m in msgs[:20]])
    assert_same(seen, want, "expiry")
    # the batch CLI applies the same rule to the same columns
    (tmp_path / "subs.json").write_text(json.dumps(subs))
    (tmp_path / "msgs.json").write_text(json.dumps(
        batch + [{**m, "time": base + 4500} for m in msgs[8:20]]))
    weights_file = write_weights(tweet_weights(tweets), tmp_path / "w.parquet")
    assert main(["match", "--network", str(andorra_path), "--subscriptions",
                 str(tmp_path / "subs.json"), "--messages", str(tmp_path / "msgs.json"),
                 "--weights", str(weights_file), "--dmax", str(DMAX_M), "--quiet",
                 "--out", str(tmp_path / "d.parquet")]) == 0
    assert_same(Deliveries(**read_deliveries(tmp_path / "d.parquet")), seen, "CLI expiry")
    gone = next(s["id"] for s in subs if s["expires_at"] == 1000.0)
    kept = next(s["id"] for s in subs if s["expires_at"] == base + 1000)
    assert c.get(f"/subscriptions/{gone}").status_code == 404  # purged by the clock
    # past its expiry for the messages' times, not for the server's clock: still live
    assert c.get(f"/subscriptions/{kept}").json()["expires_at"] == base + 1000
    server.kill()
    server.start()
    late = [{**m, "time": base + 6000} for m in msgs[20:40]]
    got = as_deliveries(c.post("/messages", json=late).json()["deliveries"])
    oracle.apply("publish", late)
    assert_same(got, Deliveries.concat([oracle.deliveries[m["id"]] for m in late]),
                "expiry after a restart")
    assert not set(got.subscription_id.tolist()) & {s["id"] for s in subs if s["expires_at"]}
    c.close()
