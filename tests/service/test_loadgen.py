"""The load generator against a real server: bounded, loopback only, every request answered."""

from __future__ import annotations

from typing import Any

import pytest
from live import subscription_rows

from roadpubsub.index.workload import Workload
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.service.loadgen import build_stream, check_loopback, run_load


def test_mixed_stream_and_batches(serve: Any, workload: Workload,
                                  andorra: RoadNetwork) -> None:
    server = serve()
    with server.client() as c:
        assert c.post("/subscriptions", json=subscription_rows(workload, andorra)[:200]
                      ).status_code == 201
    stream = build_stream(andorra, n_points=500, n_messages=50, first_new_id=10**9, seed=1)
    assert all(5 <= len(m["keywords"]) <= 25 for m in stream.messages)
    report = run_load(server.url, stream, existing=200, clients=4, events=400, seconds=60)
    s = report.summary()
    assert s["requests"] == 400 and s["errors"] == {}
    assert {"move", "publish"} <= set(s["latency_ms"])
    assert s["latency_ms"]["move"]["n"] > s["latency_ms"]["publish"]["n"]  # 80% vs 15%
    batches = run_load(server.url, stream, existing=200, batch=50, events=1000, seconds=60)
    assert batches.summary()["events"] == 1000 and batches.requests == 20
    with server.client() as c:
        health = c.get("/health").json()
    # every request was logged; queued moves and publishes may share a record
    assert 20 < health["seq"] <= 1 + 400 + 20
    assert health["seq"] + health["grouped_requests"] - health["groups"] == 1 + 400 + 20
    # bounded in time as well as in count
    short = run_load(server.url, stream, existing=200, clients=2, events=10**9, seconds=1.0)
    assert short.seconds < 10 and short.requests < 10**9


@pytest.mark.parametrize("url", ["http://10.1.2.3:8000", "https://127.0.0.1:8000",
                                 "http://example.org"])
def test_only_loopback(url: str) -> None:
    with pytest.raises(ValueError, match="loopback"):
        check_loopback(url)


def test_the_cli_runs_without_httpx(serve: Any, workload: Workload, andorra: RoadNetwork,
                                    andorra_path: Any) -> None:
    """``roadpubsub loadgen`` after a plain install (no httpx) reports its JSON."""
    import json

    from plain_install import run_without_httpx

    server = serve()
    with server.client() as c:
        assert c.post("/subscriptions", json=subscription_rows(workload, andorra)[:50]
                      ).status_code == 201
    done = run_without_httpx("loadgen", "--url", server.url, "--network", str(andorra_path),
                             "--existing", "50", "--clients", "2", "--events", "60",
                             timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["requests"] == 60 and out["errors"] == {}
    assert out["server_after"]["seq"] > out["server_before"]["seq"]


def test_a_token_goes_with_every_request(serve: Any, workload: Workload,
                                         andorra: RoadNetwork, andorra_path: Any,
                                         service_dir: Any, tmp_path: Any) -> None:
    """Against a service with tokens, loadgen's requests carry ``--token-file``'s token
    (the authenticated figure of bench.live --auth); without it every request is 401."""
    import json
    import subprocess
    import sys

    from roadpubsub.service.access import ADMIN, TokenStore

    _, token = TokenStore(service_dir).create(ADMIN)
    server = serve()
    with server.client() as c:
        rows = subscription_rows(workload, andorra)[:50]
        assert c.post("/subscriptions", json=rows,
                      headers={"Authorization": f"Bearer {token}"}).status_code == 201
    stream = build_stream(andorra, n_points=200, n_messages=20, first_new_id=10**9, seed=2)
    refused = run_load(server.url, stream, existing=50, clients=2, events=40, seconds=60)
    assert refused.summary()["errors"] == {401: 40}
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    done = subprocess.run([sys.executable, "-m", "roadpubsub", "loadgen", "--url",
                           server.url, "--network", str(andorra_path),
                           "--existing", "50", "--clients", "2", "--events", "60",
                           "--token-file", str(token_file)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["requests"] == 60 and out["errors"] == {}
