"""The published schema against the running service: schemathesis, stateless, on every
operation of ``/openapi.json``, valid and invalid inputs, a bounded number of examples.

No answer may be a 5xx, carry a status the schema does not declare for its route, a
content type it does not declare, or a body its schema does not allow.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from live import Server, message_rows, subscription_rows

from roadpubsub.index.workload import Workload
from roadpubsub.roadnet.network import RoadNetwork

CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,"
          "response_schema_conformance")


def admin_headers(state_dir: Path) -> dict[str, str]:
    """``Authorization`` of a new admin token when this tree has ``roadpubsub token``
    (the access layer), else none (the service is then open on loopback)."""
    cmd = [sys.executable, "-m", "roadpubsub", "token"]
    if subprocess.run([*cmd, "--help"], capture_output=True).returncode != 0:
        return {}
    made = subprocess.run([*cmd, "create", "--state", str(state_dir), "--role", "admin"],
                          capture_output=True, text=True, check=True)
    return {"Authorization": f"Bearer {made.stdout.strip().splitlines()[-1]}"}


def _seed(server: Server, headers: dict[str, str], workload: Workload,
          network: RoadNetwork) -> None:
    """Subscriptions 1 (threshold), 2 (boolean) and 3 (top-k) and message 1: the ids of
    the schema's examples, so that their 200 answers are checked too."""
    rows = subscription_rows(workload, network)[:3]
    for sid, row in enumerate(rows, start=1):
        row["id"] = sid
    rows[1].update(kind="boolean", radius=500.0, alpha=None, tau=None)
    rows[2].update(kind="topk", k=3, tau=None)
    msg = {**message_rows(workload, network)[0], "id": 1}
    # a long timeout: the first publish of a kind compiles its kernels on a cold cache
    with httpx.Client(base_url=server.url, timeout=600) as c:
        assert c.post("/subscriptions", json=rows, headers=headers).status_code == 201
        assert c.post("/messages", json=msg, headers=headers).status_code == 200


def test_schema_fuzz(serve: Any, service_dir: Path, workload: Workload,
                     andorra: RoadNetwork, tmp_path: Path) -> None:
    headers = admin_headers(service_dir)
    server = serve()
    _seed(server, headers, workload, andorra)
    st = shutil.which("st")
    cmd = [st] if st else [sys.executable, "-m", "schemathesis.cli"]
    cmd += ["run", f"{server.url}/openapi.json", "--checks", CHECKS, "--mode", "all",
            "--phases", "examples,coverage,fuzzing", "--max-examples", "25", "--seed", "0",
            "--workers", "1", "--request-timeout", "30", "--no-color",
            "--report-dir", str(tmp_path / "report"),
            # a 200 there is an endless event stream (test_streams.py checks that route)
            "--exclude-path", "/deliveries/stream"]
    for name, value in headers.items():
        cmd += ["--header", f"{name}: {value}"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-6000:]
    assert " passed" in out and "generated" in out, out[-3000:]
    with server.client() as c:
        assert c.get("/health").json()["status"] == "ok"
    log = server.log.read_text()
    assert "Traceback" not in log and "Exception in ASGI" not in log, log[-3000:]
