"""The README's route and area blocks ("Run it live"), run as written against a real
service on Andorra with an admin token: the curl block with bash (``localhost:8000``
pointed at the test's server), the Python block as its own subprocess."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_readme_live import README, readme_blocks

from roadpubsub.service.access import TokenStore

pytestmark = pytest.mark.slow

_CURL = re.compile(r"<!-- tested: route_curl [^\n]*-->\n```bash\n(.*?)```", re.S)


def _json_docs(text: str) -> list[Any]:
    """The JSON documents curl printed one after another."""
    dec, out, i = json.JSONDecoder(), [], 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        doc, i = dec.raw_decode(text, i)
        out.append(doc)
    return out


def test_readme_route_blocks(serve: Any, service_dir: Path, tmp_path: Path) -> None:
    _, token = TokenStore(service_dir).create("admin")
    server = serve()
    host = server.url.removeprefix("http://")
    curl = _CURL.findall(README.read_text(encoding="utf-8"))
    assert len(curl) == 1
    script = tmp_path / "route.sh"
    script.write_text(curl[0].replace("localhost:8000", host), encoding="utf-8")
    done = subprocess.run(["bash", "-e", str(script)], capture_output=True, text=True,
                          env={**os.environ, "TOKEN": token}, timeout=120, check=True)
    subscribed, shown, moved, published = _json_docs(done.stdout)
    assert subscribed["subscribed"] == 2, done.stdout
    assert shown["geometry"]["kind"] == "route" and shown["geometry"]["node_paths"]
    assert moved["moved"] == 1
    assert {d["subscription_id"] for d in published["deliveries"]} == {4, 5}, published
    auth = {"Authorization": f"Bearer {token}"}
    with server.client() as c:
        after = c.get("/subscriptions/4", headers=auth).json()["geometry"]
        assert len(after["node_paths"]) == 1 and after != shown["geometry"]
        assert c.get("/subscriptions/5", headers=auth).json()["geometry"]["kind"] == "area"

    py = tmp_path / "route.py"
    py.write_text(readme_blocks()["route"], encoding="utf-8")
    done = subprocess.run([sys.executable, str(py)], capture_output=True, text=True,
                          env={**os.environ, "TOKEN": token, "ROADPUBSUB_URL": server.url},
                          timeout=120, check=True)
    route, deliveries = (ast.literal_eval(line) for line in done.stdout.splitlines())
    assert route["kind"] == "route" and len(route["nodes"]) >= 2
    assert {"edge", "u", "v", "start_m", "end_m"} <= set(route["first"])
    assert [(d["message_id"], d["subscription_id"]) for d in deliveries
            if d["subscription_id"] == 6] == [(60, 6)]
    with server.client() as c:
        shown = c.get("/subscriptions/6", headers=auth).json()["geometry"]
    assert shown["node_paths"][0] == route["nodes"] and shown["segments"][0] == route["first"]
