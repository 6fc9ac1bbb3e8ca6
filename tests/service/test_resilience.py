"""The live service on a failing disk, failing snapshots and a full log: it refuses what
it cannot make durable (503, nothing answered is lost), says why in /health and /metrics,
and recovers by itself once the cause is gone, without a restart.

* a real full disk: the state folder on a small tmpfs this test mounts (root only; else
  skipped with the reason), filled until the log's write fails;
* a snapshot that fails: the folder's ``snapshots`` directory replaced by a file, so the
  forked writer fails, then put back;
* the log's size limit (``--max-log-bytes``), with snapshots failing so that it stays full.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from live import DMAX_M, Server, message_rows, subscription_rows, tweet_weights
from oracle import Oracle, as_deliveries, assert_same

from roadpubsub.index.workload import Workload
from roadpubsub.roadnet.network import RoadNetwork

Event = tuple[str, list[dict[str, Any]]]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 8 MiB tmpfs mounted for the test (skips when it cannot be mounted)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (the full-disk test runs as root)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip() or done.returncode}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(path: Path) -> None:
    """Write ``path`` until the disk refuses even one byte."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for size in (1 << 16, 1 << 12, 1 << 8, 1):
            while True:
                try:
                    if os.write(fd, b"\xff" * size) < size:
                        break
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
    finally:
        os.close(fd)


def _wait_health(c: httpx.Client, want: str, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        health: dict[str, Any] = c.get("/health").json()
        if health["status"] == want:
            return health
        assert time.monotonic() < deadline, f"health never became {want}: {health}"
        time.sleep(0.2)


def _all_subscriptions(c: httpx.Client) -> dict[int, dict[str, Any]]:
    rows = c.get("/subscriptions", params={"limit": 100000}).json()["subscriptions"]
    return {r["id"]: r for r in rows}


def _check_against_reference(c: httpx.Client, acked: list[Event],
                             answers: list[dict[str, Any]], refused: list[int],
                             network: RoadNetwork, tweets: list[list[str]]) -> None:
    """Every answered event is there (reference replay), no refused subscription is."""
    oracle = Oracle(network, tweet_weights(tweets), dmax_m=DMAX_M)
    for op, rows in acked:
        oracle.apply(op, rows)
    live = _all_subscriptions(c)
    assert set(live) == set(oracle.subs)
    assert not set(refused) & set(live), "a refused subscription was applied"
    for (op, rows), answer in zip(acked, answers, strict=True):
        if op == "publish":
            for row in rows:
                got = as_deliveries(c.get(f"/messages/{row['id']}").json()["deliveries"])
                mine = [d for d in answer["deliveries"] if d["message_id"] == row["id"]]
                assert_same(got, as_deliveries(mine), f"message {row['id']} vs its answer")
                assert_same(got, oracle.deliveries[row["id"]], f"message {row['id']}")


def test_a_full_disk_refuses_writes_then_resumes_without_a_restart(
        small_disk: Path, service_template: Path, servers: list[Server], tmp_path: Path,
        workload: Workload, andorra: RoadNetwork, tweets: list[list[str]]) -> None:
    folder = small_disk / "svc"
    shutil.copytree(service_template, folder)
    server = Server(folder, "--snapshot-every", "100000")
    server.log = tmp_path / "server.log"  # not on the full disk
    servers.append(server)
    server.start()
    pool = iter(subscription_rows(workload, andorra))
    messages = [{**m, "time": 1000.0 + k} for k, m in enumerate(message_rows(workload,
                                                                            andorra))]
    acked: list[Event] = []
    answers: list[dict[str, Any]] = []
    refused: list[int] = []

    def send(c: httpx.Client, event: Event) -> httpx.Response:
        op, rows = event
        r = c.post("/messages" if op == "publish" else "/subscriptions", json=rows)
        if r.status_code in (200, 201):
            acked.append(event)
            answers.append(r.json())
        elif op == "subscribe":
            refused.extend(row["id"] for row in rows)
        return r

    def subscribe(c: httpx.Client, n: int = 10) -> httpx.Response:
        return send(c, ("subscribe", [next(pool) for _ in range(n)]))

    with server.client() as c:
        for _ in range(5):
            assert subscribe(c).status_code == 201
        assert send(c, ("publish", messages[:5])).status_code == 200
        _fill(small_disk / "filler")
        for _ in range(200):  # the log's last page may still hold a few records
            r = subscribe(c)
            if r.status_code == 503:
                break
            assert r.status_code == 201, r.text
        else:
            pytest.fail("the full disk never refused a write")
        assert "not applied" in r.json()["error"]
        health = c.get("/health")
        assert health.status_code == 503 and health.json()["status"] == "failed"
        assert "could not be written" in health.json()["reason"]
        for _ in range(20):  # every write refused while the disk is full, reads answered
            r = subscribe(c)
            assert r.status_code == 503 and "not applied" in r.json()["error"], r.text
        assert c.get(f"/subscriptions/{acked[0][1][0]['id']}").status_code == 200
        assert 'roadpubsub_health{status="failed"} 1' in c.get("/metrics").text
        time.sleep(2.5)  # the probes keep failing while the disk is full
        health = c.get("/health").json()
        assert health["status"] == "failed" and health["disk_probes"] >= 2
        assert "No space left" in health["last_probe_error"]
        assert subscribe(c).status_code == 503
        (small_disk / "filler").unlink()
        health = _wait_health(c, "ok", timeout=60).copy()
        assert health["recoveries"] == 1 and health["reason"] is None
        for _ in range(3):  # writes resume without a restart
            assert subscribe(c).status_code == 201
        assert send(c, ("publish", messages[5:12])).status_code == 200
        _check_against_reference(c, acked, answers, refused, andorra, tweets)
        reloaded = _all_subscriptions(c)
    server.stop()
    assert server.proc is not None and server.proc.returncode == 0
    server.start()
    with server.client() as c:
        assert _all_subscriptions(c) == reloaded  # the reload equals a restart
        _check_against_reference(c, acked, answers, refused, andorra, tweets)


def _break_snapshots(folder: Path) -> Callable[[], None]:
    """Make the snapshot writer fail (a file where its folder is); returns the repair."""
    snaps = folder / "snapshots"
    away = folder / "snapshots.away"
    snaps.rename(away)
    snaps.write_text("not a folder")

    def repair() -> None:
        snaps.unlink()
        away.rename(snaps)
    return repair


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def test_a_failing_snapshot_degrades_health_and_is_retried(
        serve: Callable[..., Server], service_dir: Path, workload: Workload,
        andorra: RoadNetwork) -> None:
    server = serve("--snapshot-every", "5")
    rows = subscription_rows(workload, andorra)
    repair = _break_snapshots(service_dir)
    with server.client() as c:
        for k in range(8):
            assert c.post("/subscriptions", json=rows[10 * k:10 * k + 10]).status_code == 201
        r = c.get("/health")
        health = _wait_health(c, "degraded", timeout=60)
        assert r.status_code == 200
        assert "snapshot" in health["reason"] and "failed" in health["reason"]
        assert "retried" in health["reason"]
        metrics = c.get("/metrics").text
        assert _metric(metrics, "roadpubsub_snapshot_failures_total") >= 1
        assert 'roadpubsub_health{status="degraded"} 1' in metrics
        # still accepting events while degraded
        assert c.post("/subscriptions", json=rows[100:110]).status_code == 201
        time.sleep(3)  # a retry or two fail meanwhile (backoff 1 s, 2 s, ...)
        failures = c.get("/health").json()["snapshot_failures"]
        assert failures >= 2
        repair()
        health = _wait_health(c, "ok", timeout=90)
        assert health["snapshots"] >= 1 and health["snapshot_seq"] >= 8
        assert c.post("/subscriptions", json=rows[110:120]).status_code == 201


def test_the_log_size_limit_refuses_writes_until_a_snapshot_drops_segments(
        serve: Callable[..., Server], service_dir: Path, workload: Workload,
        andorra: RoadNetwork) -> None:
    server = serve("--snapshot-every", "100000", "--max-log-bytes", "4000")
    rows = iter(subscription_rows(workload, andorra))
    repair = _break_snapshots(service_dir)  # no snapshot can drop the log meanwhile
    with server.client() as c:
        for _ in range(100):
            r = c.post("/subscriptions", json=[next(rows) for _ in range(5)])
            if r.status_code == 503:
                break
            assert r.status_code == 201
        else:
            pytest.fail("the log limit never refused a write")
        assert "at its limit of 4,000 bytes" in r.json()["error"]
        health = c.get("/health")
        assert health.status_code == 200
        body = health.json()
        assert body["status"] == "degraded" and body["log_bytes"] >= 4000
        assert body["max_log_bytes"] == 4000 and "--max-log-bytes" in body["reason"]
        metrics = c.get("/metrics").text
        assert _metric(metrics, "roadpubsub_log_bytes") >= 4000
        assert _metric(metrics, "roadpubsub_log_max_bytes") == 4000
        time.sleep(2)
        assert c.post("/subscriptions", json=[next(rows)]).status_code == 503
        repair()  # the next snapshot retry succeeds and drops the covered segments
        health = _wait_health(c, "ok", timeout=90)
        assert health["log_bytes"] < 4000
        assert c.post("/subscriptions", json=[next(rows)]).status_code == 201


def test_a_stop_whose_snapshot_fails_keeps_the_log_and_exits_0(
        serve: Callable[..., Server], service_dir: Path, workload: Workload,
        andorra: RoadNetwork) -> None:
    server = serve("--snapshot-every", "100000")
    rows = subscription_rows(workload, andorra)
    repair = _break_snapshots(service_dir)
    with server.client() as c:
        for k in range(5):
            assert c.post("/subscriptions", json=rows[10 * k:10 * k + 10]).status_code == 201
    server.stop()
    assert server.proc is not None and server.proc.returncode == 0
    text = server.log.read_text()
    assert "the closing snapshot failed" in text and "Traceback" not in text
    repair()
    server.start()  # the log, kept, is replayed
    with server.client() as c:
        health = c.get("/health").json()
        assert health["subscriptions"] == 50 and health["snapshot_seq"] == 0


def test_a_failed_fsync_refuses_the_waiting_event_and_a_reload_resumes(
        service_dir: Path, workload: Workload, andorra: RoadNetwork,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An fsync error (EIO, as a failing disk gives; a tmpfs never fails one) is injected
    into the log's fsync threads: the event waiting for it is refused with 503, the state
    says failed, later events are refused, and ``recover`` reloads what the log holds."""
    import asyncio

    from roadpubsub.index.events import BodyParser
    from roadpubsub.service import wal as wal_module
    from roadpubsub.service.dispatch import durable
    from roadpubsub.service.state import ServiceState
    from roadpubsub.service.wal import LogUnavailableError

    state = ServiceState.open(service_dir)
    parser = BodyParser(state.index.network, max_snap_m=250.0, kinds=True,
                        dmax_m=state.index.dmax_m)
    rows = subscription_rows(workload, andorra)

    async def subscribe(batch: list[dict[str, Any]]) -> int:
        applied = state.subscribe(parser.subscriptions(batch))
        await durable(state.wal, applied.seq)
        return applied.seq

    try:
        assert asyncio.run(subscribe(rows[:10])) == 1
        real = os.fdatasync

        def failing(fd: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(wal_module.os, "fdatasync", failing)
        with pytest.raises(LogUnavailableError, match="may or may not") as refused:
            asyncio.run(subscribe(rows[10:20]))
        assert refused.value.status == 503
        assert state.health()[0] == "failed"
        with pytest.raises(LogUnavailableError, match="stopped accepting events"):
            asyncio.run(subscribe(rows[20:30]))
        monkeypatch.setattr(wal_module.os, "fdatasync", real)
        assert state.recover()
        assert state.health() == ("ok", None) and state.recoveries == 1
        # the refused batch's record was written: read back, it is there (in flight: it
        # was not acknowledged, and may be either); the one refused before it is not
        assert state.subscription_count()["threshold"] == 20
        assert asyncio.run(subscribe(rows[30:40])) == 3
    finally:
        state.close()
    again = ServiceState.open(service_dir)
    try:
        assert again.subscription_count()["threshold"] == 30
    finally:
        again.close()


def test_an_event_queued_behind_a_reload_is_answered_by_the_reloaded_log(
        service_dir: Path, workload: Workload, andorra: RoadNetwork) -> None:
    """A request queued while the apply thread still has a reload to do (the disk came
    back) is applied after the reload and logged in the new log: its answer waits on that
    log, not on the one the reload closed (which refuses every waiter as uncertain: a
    503 "may or may not" for an event that was applied, as a full-disk run once gave)."""
    import asyncio
    import threading

    from roadpubsub.index.events import BodyParser
    from roadpubsub.service.access import Guard
    from roadpubsub.service.applier import Applier
    from roadpubsub.service.dispatch import Dispatch
    from roadpubsub.service.dispatch import Event as DispatchEvent
    from roadpubsub.service.state import ServiceState

    state = ServiceState.open(service_dir)
    parser = BodyParser(state.index.network, max_snap_m=250.0, kinds=True,
                        dmax_m=state.index.dmax_m)
    applier = Applier(state, parser)
    dispatch = Dispatch(state, applier, Guard(state, parser, None))
    rows = subscription_rows(workload, andorra)
    hold = threading.Event()
    try:
        state.failed = OSError(errno.ENOSPC, "No space left on device")  # as a full disk
        applier.call(hold.wait)  # the apply thread is busy: what follows queues up
        reloaded = applier.call(state.recover, kind="recover")

        async def subscribe() -> Any:
            task = asyncio.ensure_future(dispatch.run(DispatchEvent("subscribe", rows[:5])))
            await asyncio.sleep(0.05)  # queued behind the reload
            hold.set()
            return await asyncio.wait_for(task, 30)

        done = asyncio.run(subscribe())
        assert reloaded.result(timeout=30) is True and state.recoveries == 1
        assert done.body["subscribed"] == 5
        assert done.seq <= state.wal.durable_seq
    finally:
        hold.set()
        applier.stop()
        state.close()
    again = ServiceState.open(service_dir)
    try:
        assert again.subscription_count()["threshold"] == 5
    finally:
        again.close()


def test_an_event_that_cannot_be_encoded_fails_alone(
        service_dir: Path, workload: Workload, andorra: RoadNetwork,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A record the log cannot encode (not an I/O error: the validation should have
    refused it) is refused alone with 422, the state is reloaded at once (the event was
    applied in memory) and the service does not enter the failed state."""
    import asyncio

    import orjson

    from roadpubsub.index.events import BodyParser, RequestError
    from roadpubsub.service import wal as wal_module
    from roadpubsub.service.dispatch import durable
    from roadpubsub.service.state import ServiceState

    state = ServiceState.open(service_dir)
    try:
        parser = BodyParser(state.index.network, max_snap_m=250.0, kinds=True,
                            dmax_m=state.index.dmax_m)
        rows = subscription_rows(workload, andorra)

        async def subscribe(batch: list[dict[str, Any]]) -> int:
            applied = state.subscribe(parser.subscriptions(batch))
            await durable(state.wal, applied.seq)
            return applied.seq

        assert asyncio.run(subscribe(rows[:10])) == 1
        real = orjson.dumps

        def refuse(*args: Any, **kwargs: Any) -> bytes:
            raise TypeError("Type is not JSON serializable: Poison")

        monkeypatch.setattr(wal_module.orjson, "dumps", refuse)
        with pytest.raises(RequestError, match="cannot be logged") as refused:
            asyncio.run(subscribe(rows[10:20]))
        assert refused.value.status == 422
        monkeypatch.setattr(wal_module.orjson, "dumps", real)
        assert state.health() == ("ok", None) and state.recoveries == 1
        assert state.subscription_count()["threshold"] == 10  # the refused ones undone
        assert asyncio.run(subscribe(rows[10:20])) == 2  # the same ids, now accepted
    finally:
        state.close()


def test_a_full_disk_under_concurrent_load_loses_and_changes_nothing(
        small_disk: Path, service_template: Path, servers: list[Server], tmp_path: Path,
        workload: Workload, andorra: RoadNetwork, move_points: Any) -> None:
    """Three clients subscribe and one moves its subscriptions while the disk fills, stays
    full and is freed: every answer is 2xx or 503; after the reload and after a restart
    every answered subscription is there, none refused is, and each moved subscription is
    where its last answered move put it (a refused move changed nothing)."""
    import threading

    from live import location_of

    folder = small_disk / "svc"
    shutil.copytree(service_template, folder)
    server = Server(folder, "--snapshot-every", "100000")
    server.log = tmp_path / "server.log"
    servers.append(server)
    server.start()
    rows = subscription_rows(workload, andorra)
    movers = rows[:20]
    with server.client() as c:
        assert c.post("/subscriptions", json=movers).status_code == 201
    acked: set[int] = {r["id"] for r in movers}
    refused: set[int] = set()
    where = {r["id"]: (r["u"], r["v"], r["offset"]) for r in movers}
    statuses: list[int] = []
    stop = threading.Event()

    def subscriber(k: int) -> None:
        with server.client() as c:
            for j in range(20 + k, len(rows), 3):
                if stop.is_set():
                    return
                r = c.post("/subscriptions", json=[rows[j]])
                statuses.append(r.status_code)
                (acked if r.status_code == 201 else refused).add(rows[j]["id"])

    def mover() -> None:
        with server.client() as c:
            n = 0
            while not stop.is_set():
                sid = movers[n % len(movers)]["id"]
                loc = location_of(andorra, move_points, n % len(move_points))
                r = c.post("/subscriptions/moves", json=[{"id": sid, **loc}])
                statuses.append(r.status_code)
                if r.status_code == 200:
                    where[sid] = (loc["u"], loc["v"], loc["offset"])
                n += 1

    threads = [threading.Thread(target=subscriber, args=(k,)) for k in range(3)]
    threads.append(threading.Thread(target=mover))
    for t in threads:
        t.start()
    try:
        time.sleep(1.0)
        _fill(small_disk / "filler")
        with server.client() as c:
            _wait_health(c, "failed", timeout=60)
            time.sleep(1.5)
            (small_disk / "filler").unlink()
            _wait_health(c, "ok", timeout=60)
        time.sleep(1.0)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
    assert set(statuses) <= {200, 201, 503}, set(statuses)
    assert 503 in statuses and statuses[-1] != 503

    def check(c: httpx.Client) -> None:
        live = _all_subscriptions(c)
        assert acked <= set(live), f"answered subscriptions lost: {sorted(acked - set(live))}"
        assert not refused & set(live), "a refused subscription was applied"
        for sid, place in where.items():
            got = live[sid]
            assert (got["u"], got["v"], got["offset"]) == place, sid

    with server.client() as c:
        check(c)
    server.stop()
    assert server.proc is not None and server.proc.returncode == 0
    server.start()
    with server.client() as c:
        check(c)
