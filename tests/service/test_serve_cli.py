"""``roadpubsub serve`` on the command line: creating a folder from an index file, and the
clear errors of wrong combinations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from live import Server, message_rows, subscription_rows

from index.workload import Workload
from roadnet.network import RoadNetwork
from roadpubsub.cli import main


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
