"""``roadpubsub token``: create, list, revoke; only hashes on disk, the secret printed once."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from roadpubsub.cli import main
from roadpubsub.service.access import TokenStore


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "roadpubsub", "token", *args],
                          capture_output=True, text=True, timeout=120, env={**os.environ})


def test_create_list_revoke(tmp_path: Path) -> None:
    out = _run("create", "--state", str(tmp_path), "--role", "subscriber",
               "--subscription", "7", "--subscription", "8")
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip().splitlines()[-1]
    assert token.startswith("rps_") and len(token) >= 40
    path = tmp_path / "tokens.json"
    assert path.stat().st_mode & 0o777 == 0o600
    text = path.read_text()
    assert token not in text  # only the hash is stored
    doc = json.loads(text)
    (rec,) = doc["tokens"]
    assert rec["sha256"] == hashlib.sha256(token.encode()).hexdigest()
    assert rec["role"] == "subscriber" and rec["subscriptions"] == [7, 8]
    store = TokenStore(tmp_path)
    principal = store.authenticate(token.encode())
    assert principal.role == "subscriber" and principal.bound == {7, 8}

    listed = _run("list", "--state", str(tmp_path))
    assert listed.returncode == 0
    assert rec["id"] in listed.stdout and "7,8" in listed.stdout
    assert token not in listed.stdout and rec["sha256"] not in listed.stdout

    revoked = _run("revoke", "--state", str(tmp_path), rec["id"])
    assert revoked.returncode == 0, revoked.stderr
    assert json.loads(path.read_text())["tokens"][0]["revoked"]
    with pytest.raises(Exception, match="unknown or revoked"):
        TokenStore(tmp_path).authenticate(token.encode())
    assert rec["id"] in _run("list", "--state", str(tmp_path)).stdout
    assert not list(tmp_path.glob(".tokens.json.*.tmp"))  # no temporary left behind


def test_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["token", "create", "--state", str(tmp_path / "nope"), "--role", "admin"]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert main(["token", "create", "--state", str(tmp_path), "--role", "admin",
                 "--subscription", "3"]) == 2
    assert "subscriber token only" in capsys.readouterr().err
    assert main(["token", "create", "--state", str(tmp_path), "--role", "subscriber",
                 "--subscription", "3"]) == 0
    capsys.readouterr()
    assert main(["token", "create", "--state", str(tmp_path), "--role", "subscriber",
                 "--subscription", "3"]) == 2
    assert "already bound" in capsys.readouterr().err
    assert main(["token", "revoke", "--state", str(tmp_path), "deadbeef"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no token 'deadbeef'" in err
    with pytest.raises(SystemExit):
        main(["token", "create", "--state", str(tmp_path), "--role", "root"])


def test_concurrent_creates_lose_none(tmp_path: Path) -> None:
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda _: _run("create", "--state", str(tmp_path), "--role",
                                            "publisher"), range(8)))
    assert all(o.returncode == 0 for o in outs)
    tokens = [o.stdout.strip().splitlines()[-1] for o in outs]
    store = TokenStore(tmp_path)
    assert len(store.records) == 8
    assert {store.authenticate(t.encode()).token_id for t in tokens} == {
        r.id for r in store.records}


def test_mqtt_password_never_from_argv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The broker password comes from a file or the environment; serve has no flag for
    the password itself."""
    from roadpubsub.cli import build_parser
    from roadpubsub.cli.serve import _mqtt_options

    parser = build_parser()
    base = ["serve", "--state", str(tmp_path), "--mqtt", "127.0.0.1:1883"]
    for flag in ("--mqtt-password", "--mqtt-pass"):
        with pytest.raises(SystemExit):
            parser.parse_args([*base, flag, "s3cret"])
        assert "s3cret" not in capsys.readouterr().err
    monkeypatch.setenv("ROADPUBSUB_MQTT_PASSWORD", "from-env")
    args = parser.parse_args([*base, "--mqtt-user", "svc"])
    assert _mqtt_options(args) == {"username": "svc", "password": "from-env", "tls_ca": None,
                                  "push": "all"}
    secret = tmp_path / "pw"
    secret.write_text("from-file\n")
    args = parser.parse_args([*base, "--mqtt-user", "svc", "--mqtt-password-file", str(secret)])
    assert _mqtt_options(args)["password"] == "from-file"
    monkeypatch.delenv("ROADPUBSUB_MQTT_PASSWORD")
    args = parser.parse_args([*base, "--mqtt-password-file", str(secret)])
    with pytest.raises(Exception, match="needs --mqtt-user"):
        _mqtt_options(args)
