"""``roadpubsub serve`` on the command line: creating a folder from an index file, and the
clear errors of wrong combinations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from live import Server, message_rows, subscription_rows

from roadpubsub.cli import main
from roadpubsub.index.workload import Workload
from roadpubsub.roadnet.network import RoadNetwork


def test_create_from_an_index_file(andorra_path: Path, workload: Workload,
                                   andorra: RoadNetwork, servers: list[Server],
                                   tmp_path: Path) -> None:
    subs = tmp_path / "subs.json"
    subs.write_text(json.dumps(subscription_rows(workload, andorra)[:300]))
    index_file = tmp_path / "eia.npz"
    assert main(["index", "build", "--network", str(andorra_path), "--subscriptions",
                 str(subs), "--dmax", "3000", "--quiet", "--out", str(index_file)]) == 0
    server = Server(tmp_path / "live", "--index-file", str(index_file))
    servers.append(server)
    server.start()
    with server.client() as c:
        health = c.get("/health").json()
        assert health["subscriptions"] == 300 and health["dmax_m"] == 3000
        r = c.post("/messages", json=message_rows(workload, andorra)[:20])
        assert r.status_code == 200 and len(r.json()["deliveries"]) > 0
    server.stop()
    # reopened without creation flags: the same service
    server.extra = ()
    server.start()
    with server.client() as c:
        assert c.get("/health").json()["messages"] == 20


@pytest.mark.parametrize(("argv", "fragment"), [
    (["--network", "x.pbf"], "already holds a service"),
    (["--snapshot-every", "0"], "--snapshot-every must be >= 1"),
    (["--mqtt", "nohostport"], "--mqtt must be HOST:PORT"),
])
def test_errors_on_an_existing_folder(service_dir: Path, argv: list[str], fragment: str,
                                      capsys: Any) -> None:
    assert main(["serve", "--state", str(service_dir), *argv]) == 2
    assert fragment in capsys.readouterr().err


def test_a_new_folder_needs_a_network(tmp_path: Path, capsys: Any) -> None:
    assert main(["serve", "--state", str(tmp_path / "new")]) == 2
    assert "give --network (or --index-file)" in capsys.readouterr().err


def test_loadgen_refuses_other_hosts(andorra_path: Path, capsys: Any) -> None:
    assert main(["loadgen", "--url", "http://192.0.2.1:8000", "--network", str(andorra_path),
                 "--existing", "10"]) == 2
    assert "loopback" in capsys.readouterr().err


def _serve_cli(server: Server) -> str:
    return server.log.read_text() if server.log.exists() else ""


def test_the_creating_command_line_reopens_the_folder(
        andorra_path: Path, workload: Workload, andorra: RoadNetwork,
        servers: list[Server], tmp_path: Path) -> None:
    """What a supervisor does: the same command line after a stop, a crash or a copy of
    the network elsewhere."""
    creating = ("--network", str(andorra_path), "--dmax", "3000", "--window", "50")
    server = Server(tmp_path / "live", *creating)
    servers.append(server)
    server.start()
    with server.client() as c:
        assert c.post("/subscriptions", json=subscription_rows(workload, andorra)[:40]
                      ).status_code == 201
        seq = c.get("/health").json()["seq"]
    server.stop()
    assert server.proc is not None and server.proc.returncode == 0  # not 143
    assert "stopped on SIGTERM" in _serve_cli(server)
    # the stop wrote a snapshot: a restart replays nothing
    manifest = json.loads((tmp_path / "live" / "manifest.json").read_text())
    assert manifest["seq"] == seq
    server.start()
    with server.client() as c:
        health = c.get("/health").json()
        assert health["subscriptions"] == 40 and health["snapshot_seq"] == seq
    server.kill()  # a crash, then the same command line again
    server.start()
    server.proc.send_signal(2)  # SIGINT: also a clean stop
    assert server.proc.wait(timeout=60) == 0
    copy = tmp_path / "elsewhere.osm.pbf"  # the same content under another path
    copy.write_bytes(andorra_path.read_bytes())
    server.extra = ("--network", str(copy), "--dmax", "3000", "--directed")
    with pytest.raises(RuntimeError, match="--directed: "):
        server.start()
    server.extra = ("--network", str(copy), "--dmax", "3000")
    server.start()
    with server.client() as c:
        assert c.get("/health").json()["subscriptions"] == 40


def test_other_creating_flags_are_refused_one_line_each(
        andorra_path: Path, servers: list[Server], tmp_path: Path, capsys: Any) -> None:
    server = Server(tmp_path / "live", "--network", str(andorra_path), "--dmax", "3000")
    servers.append(server)
    server.start()
    server.stop()
    other = tmp_path / "other.osm.pbf"
    other.write_bytes(andorra_path.read_bytes() + b"\0")
    assert main(["serve", "--state", str(tmp_path / "live"), "--network", str(other),
                 "--dmax", "4000", "--window", "7", "--weights", str(other)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert "already holds a service created with other settings" in err[0]
    lines = [line.strip() for line in err[1:]]
    assert len(lines) == 4, err
    assert lines[0].startswith(f"--network {other}: its content")
    # the folder names the file it was created from as resolved (a ../shared reached
    # through a link names its target)
    assert "differs from the file" in lines[0] and str(andorra_path.resolve()) in lines[0]
    assert lines[1] == f"--weights {other}: {tmp_path / 'live'} was created without --weights"
    assert lines[2] == "--dmax 4000: " + f"{tmp_path / 'live'} holds Dmax 3000 m"
    assert lines[3] == f"--window 7: {tmp_path / 'live'} holds window 1000"
    # the equal flags alone are accepted (checked without serving: a missing index file)
    assert main(["serve", "--state", str(tmp_path / "live"), "--network", str(andorra_path),
                 "--dmax", "3000", "--index-file", str(tmp_path / "none.npz")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[1].strip().startswith("--index-file")


def test_sigterm_drains_requests_in_flight_and_exits_0(
        serve: Any, workload: Workload, andorra: RoadNetwork) -> None:
    import threading

    import httpx

    server = serve()
    rows = subscription_rows(workload, andorra)
    acked: list[int] = []
    started = threading.Event()

    def client(k: int) -> None:
        with httpx.Client(base_url=server.url, timeout=60) as c:
            for j in range(k, len(rows), 4):
                try:
                    r = c.post("/subscriptions", json=[rows[j]])
                except httpx.HTTPError:
                    return  # the server stopped listening
                if r.status_code != 201:
                    return
                acked.append(rows[j]["id"])
                started.set()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    assert started.wait(60)
    server.proc.send_signal(15)
    assert server.proc.wait(timeout=60) == 0
    for t in threads:
        t.join(timeout=60)
    assert acked
    server.start()
    with server.client() as c:
        health = c.get("/health").json()
        assert health["snapshot_seq"] == health["seq"]  # the stop wrote a snapshot
        for sid in acked:
            assert c.get(f"/subscriptions/{sid}").status_code == 200, sid
