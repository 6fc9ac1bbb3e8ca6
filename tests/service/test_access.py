"""Authentication and authorization of ``roadpubsub serve``: the access matrix.

Every route and the WebSocket streams, for each caller (admin, publisher, subscriber A,
no token, an unknown token, a token revoked while the server runs), on own, foreign
(subscriber B's), admin-made and absent ids, against a real server on loopback. A
refusal of a foreign id and of an absent one must be the same answer (403): neither
tells whether the id exists. The rows must cover the app's route table
(:data:`roadpubsub.service.app.ROUTES`, each path's methods as the server names them in
``Allow``): a route added without a row fails the matrix.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets.sync.client as websockets_sync
from live import location_of, message_rows, subscription_rows
from starlette.routing import Route, WebSocketRoute
from websockets.exceptions import InvalidStatus

from roadpubsub.index.workload import Workload
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.service.access import TokenStore
from roadpubsub.service.app import ROUTES

# ids of the scene: A's bound id and the one A creates, B's, the admin's, an absent one
A_BOUND, A_MADE, A_NEW, B_MADE, ADMIN_MADE, ABSENT = 101, 102, 103, 201, 301, 999_999


def _sub(workload: Workload, andorra: RoadNetwork, sid: int, i: int = 0) -> dict[str, Any]:
    return {**subscription_rows(workload, andorra)[i], "id": sid}


def _h(token: str | None) -> dict[str, str]:
    return {} if token is None else {"Authorization": f"Bearer {token}"}


@pytest.fixture
def scene(serve: Any, service_dir: Path, workload: Workload, andorra: RoadNetwork
          ) -> dict[str, Any]:
    """A server with tokens of each role and subscriptions owned by A, B and the admin."""
    store = TokenStore(service_dir)
    tokens: dict[str, str | None] = {"none": None, "unknown": "rps_" + "x" * 43}
    ids: dict[str, str] = {}
    for name, role, bound in (("admin", "admin", ()), ("publisher", "publisher", ()),
                              ("a", "subscriber", (A_BOUND,)), ("b", "subscriber", ()),
                              ("revoked", "admin", ())):
        ids[name], tokens[name] = store.create(role, subscriptions=bound)
    server = serve()
    with server.client() as c:
        for who, sid, i in (("a", A_BOUND, 0), ("a", A_MADE, 1), ("b", B_MADE, 2),
                            ("admin", ADMIN_MADE, 3)):
            r = c.post("/subscriptions", json=_sub(workload, andorra, sid, i),
                       headers=_h(tokens[who]))
            assert r.status_code == 201, (who, sid, r.text)
        r = c.get("/health", headers=_h(tokens["revoked"]))
        assert r.status_code == 200
        store.revoke(ids["revoked"])  # while the server runs
        deadline = time.monotonic() + 10
        while c.get("/metrics", headers=_h(tokens["revoked"])).status_code != 401:
            assert time.monotonic() < deadline, "the revocation never took effect"
            time.sleep(0.2)
    return {"server": server, "tokens": tokens, "ids": ids, "store": store}


CALLERS = ("admin", "publisher", "a", "none", "unknown", "revoked")


def _row(admin: int, publisher: int, a: int) -> dict[str, int]:
    """Expected statuses: no, unknown and revoked tokens always get 401."""
    return {"admin": admin, "publisher": publisher, "a": a, "none": 401, "unknown": 401,
            "revoked": 401}


def _open_row() -> dict[str, int]:
    """An open route (the map's page and script): every caller, any token, is answered."""
    return dict.fromkeys(CALLERS, 200)


def _template(path: str, kind: type[Route] | type[WebSocketRoute]) -> str:
    """The route of the app's table that serves ``path`` (its query left out), as the
    router picks it: the first that matches."""
    bare = path.partition("?")[0]
    for route in ROUTES:
        if isinstance(route, kind) and route.path_regex.match(bare):
            return route.path
    raise AssertionError(f"{path} is served by no route of the app's table")


def _route_table(c: httpx.Client, token: str | None) -> set[tuple[str, str]]:
    """(method, path) of every route of the app's table: HTTP methods as the server
    names them in ``Allow`` (HEAD and OPTIONS aside: every GET has them, see
    test_access_head.py), WebSocket routes as "WS"."""
    table = set()
    for route in ROUTES:
        if isinstance(route, WebSocketRoute):
            table.add(("WS", route.path))
            continue
        assert isinstance(route, Route), route
        concrete = re.sub(r"\{[^}]+\}", "1", route.path)
        allow = c.options(concrete, headers=_h(token)).headers["allow"]
        table |= {(m.strip(), route.path) for m in allow.split(",")
                  if m.strip() not in ("HEAD", "OPTIONS")}
    return table


#: Routes whose 200 is an endless stream: its body is never read by the matrix.
_STREAMS = {"/deliveries/stream"}


def test_http_access_matrix(scene: dict[str, Any], workload: Workload, andorra: RoadNetwork,
                            move_points: EdgePoints) -> None:
    server, tokens = scene["server"], scene["tokens"]
    move = location_of(andorra, move_points, 5)
    msgs = message_rows(workload, andorra)
    # (method, path, body, expected per caller); bodies use fresh ids per caller below
    cells: list[tuple[str, str, Any, dict[str, int]]] = [
        ("GET", "/metrics", None, _row(200, 403, 403)),
        ("GET", "/openapi.json", None, _row(200, 200, 200)),
        ("GET", "/network.geojson", None, _row(200, 200, 200)),
        ("GET", "/subscriptions", None, _row(200, 403, 200)),
        ("GET", f"/subscriptions/{A_BOUND}", None, _row(200, 403, 200)),
        ("GET", f"/subscriptions/{A_MADE}", None, _row(200, 403, 200)),
        ("GET", f"/subscriptions/{B_MADE}", None, _row(200, 403, 403)),
        ("GET", f"/subscriptions/{ADMIN_MADE}", None, _row(200, 403, 403)),
        ("GET", f"/subscriptions/{ABSENT}", None, _row(404, 403, 403)),
        ("PUT", f"/subscriptions/{A_MADE}/location", move, _row(200, 403, 200)),
        ("PUT", f"/subscriptions/{B_MADE}/location", move, _row(200, 403, 403)),
        ("PUT", f"/subscriptions/{ADMIN_MADE}/location", move, _row(200, 403, 403)),
        ("PUT", f"/subscriptions/{ABSENT}/location", move, _row(404, 403, 403)),
        ("POST", "/subscriptions/moves", [{**move, "id": A_BOUND}], _row(200, 403, 200)),
        ("POST", "/subscriptions/moves", [{**move, "id": A_BOUND}, {**move, "id": B_MADE}],
         _row(200, 403, 403)),
        ("POST", "/subscriptions/moves", [{**move, "id": ABSENT}], _row(404, 403, 403)),
        # creating: an id of B, one the admin made, an absent id bound to nobody
        ("POST", "/subscriptions", _sub(workload, andorra, B_MADE, 9), _row(409, 403, 403)),
        ("POST", "/subscriptions", _sub(workload, andorra, ADMIN_MADE, 9),
         _row(409, 403, 403)),
        ("POST", "/subscriptions", _sub(workload, andorra, A_BOUND, 9), _row(409, 403, 409)),
        ("DELETE", f"/subscriptions/{B_MADE}", None, _row(200, 403, 403)),
        ("DELETE", f"/subscriptions/{ABSENT}", None, _row(404, 403, 403)),
        ("POST", "/messages", msgs[0], _row(200, 200, 403)),
        ("GET", f"/messages/{msgs[0]['id']}", None, _row(200, 200, 403)),
        # resumable streams (SSE): a subscriber reads its own ids only, as WS /deliveries
        ("GET", "/deliveries/stream?after=0", None, _row(200, 403, 200)),
        ("GET", f"/deliveries/stream?after=0&subscription={A_BOUND}", None,
         _row(200, 403, 200)),
        ("GET", f"/deliveries/stream?subscription={B_MADE}", None, _row(200, 403, 403)),
        ("GET", f"/deliveries/stream?after=0&subscription={ABSENT}", None,
         _row(200, 403, 403)),
        # the WebSocket paths asked in plain HTTP: refused after the token check
        ("GET", "/deliveries", None, _row(426, 426, 426)),
        ("GET", "/events", None, _row(426, 426, 426)),
        # the dead letters: the admin's alone
        ("GET", "/webhooks/dead", None, _row(200, 403, 403)),
        ("POST", "/webhooks/replay", {"ids": [1]}, _row(200, 403, 403)),
        ("GET", "/", None, _open_row()),
        ("GET", "/static/map.js", None, _open_row()),
        ("GET", "/health", None, _open_row()),
    ]
    failures = []
    with server.client() as c:
        for caller in CALLERS:
            for method, path, body, want in cells:
                if caller == "admin" and method == "DELETE" and path.endswith(str(B_MADE)):
                    continue  # the admin's delete of B's id is checked last
                if caller == "publisher" and path.startswith("/messages"):
                    continue  # the publisher's own messages: below
                with c.stream(method, path, json=body, headers=_h(tokens[caller])) as got:
                    if got.status_code != 200 or _template(path, Route) not in _STREAMS:
                        got.read()
                if got.status_code != want[caller]:
                    failures.append((caller, method, path, want[caller], got.status_code,
                                     got.text[:200] if got.is_stream_consumed else ""))
                if got.status_code == 401:
                    assert got.headers["www-authenticate"] == "Bearer"
                if got.status_code in (401, 403):  # never names whether the id exists
                    assert "unknown" not in got.json()["error"] or caller in (
                        "none", "unknown", "revoked")
        assert not failures, "\n".join(map(str, failures))
        # every route of the app's table has its rows here (or, WebSocket, below)
        covered = {(method, _template(path, Route)) for method, path, _, _ in cells}
        covered |= {("WS", _template(path, WebSocketRoute)) for path, _ in WS_CELLS}
        missing = _route_table(c, tokens["admin"]) - covered
        assert not missing, f"routes without a row in the access matrix: {sorted(missing)}"

        # A creates a new id of its own; B's ids and A's stay apart in the listing
        assert c.post("/subscriptions", json=_sub(workload, andorra, A_NEW, 4),
                      headers=_h(tokens["a"])).status_code == 201
        listed = c.get("/subscriptions", headers=_h(tokens["a"])).json()["subscriptions"]
        assert sorted(r["id"] for r in listed) == [A_BOUND, A_MADE, A_NEW]
        everyone = c.get("/subscriptions", headers=_h(tokens["admin"])).json()
        assert {A_BOUND, A_MADE, A_NEW, B_MADE, ADMIN_MADE} <= {
            r["id"] for r in everyone["subscriptions"]}

        # the publisher: its own messages only; another's id is refused, not answered
        mine, theirs = msgs[1], msgs[0]
        pub = _h(tokens["publisher"])
        assert c.post("/messages", json=mine, headers=pub).status_code == 200
        assert c.get(f"/messages/{mine['id']}", headers=pub).status_code == 200
        assert c.get(f"/messages/{theirs['id']}", headers=pub).status_code == 403
        assert c.get(f"/messages/{ABSENT}", headers=pub).status_code == 403
        assert c.post("/messages", json=theirs, headers=pub).status_code == 403
        assert c.post("/messages", json=mine, headers=pub).status_code == 200  # a repeat
        assert c.get(f"/messages/{mine['id']}", headers=_h(tokens["admin"])
                     ).status_code == 200

        # A deletes its own; then B's id, deleted by the admin, stays B's
        assert c.delete(f"/subscriptions/{A_MADE}", headers=_h(tokens["a"])).status_code == 200
        assert c.get(f"/subscriptions/{A_MADE}", headers=_h(tokens["a"])).status_code == 404
        assert c.delete(f"/subscriptions/{B_MADE}", headers=_h(tokens["admin"])
                        ).status_code == 200
        assert c.post("/subscriptions", json=_sub(workload, andorra, B_MADE, 9),
                      headers=_h(tokens["a"])).status_code == 403
        assert c.post("/subscriptions", json=_sub(workload, andorra, B_MADE, 9),
                      headers=_h(tokens["b"])).status_code == 201

        # /health stays open
        for caller in CALLERS:
            assert c.get("/health", headers=_h(tokens[caller])).status_code == 200


def test_browser_rules(scene: dict[str, Any], workload: Workload, andorra: RoadNetwork
                       ) -> None:
    server, tokens = scene["server"], scene["tokens"]
    admin = _h(tokens["admin"])
    row = _sub(workload, andorra, 555, 5)
    import json

    with server.client() as c:
        # a cross-site form post (text/plain), even with a good token
        r = c.post("/subscriptions", content=json.dumps(row),
                   headers={**admin, "Content-Type": "text/plain"})
        assert r.status_code == 415, r.text
        r = c.post("/subscriptions", json=row, headers={**admin, "Origin": "http://evil.example"})
        assert r.status_code == 403
        assert c.get("/subscriptions/555", headers=admin).status_code == 404
        # CORS: preflights of a foreign origin are refused, the service's own are answered
        r = c.options("/subscriptions", headers={"Origin": "http://evil.example",
                                                 "Access-Control-Request-Method": "POST"})
        assert r.status_code == 403
        assert "access-control-allow-origin" not in r.headers
        own = server.url
        r = c.options("/subscriptions", headers={"Origin": own,
                                                 "Access-Control-Request-Method": "POST"})
        assert r.status_code == 204
        assert r.headers["access-control-allow-origin"] == own
        assert "authorization" in r.headers["access-control-allow-headers"]
        r = c.get("/subscriptions", headers={**admin, "Origin": own})
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == own
        r = c.get("/subscriptions", headers={**admin, "Origin": "http://evil.example"})
        assert "access-control-allow-origin" not in r.headers
    ws = server.url.replace("http", "ws")
    with pytest.raises(InvalidStatus) as refused:
        websockets_sync.connect(ws + "/deliveries", open_timeout=30, origin="http://evil.example",
                                additional_headers=admin)
    assert refused.value.response.status_code == 403


def _ws_status(url: str, token: str | None, *, subprotocol: bool = False) -> int:
    headers = {} if token is None or subprotocol else _h(token)
    protocols = ["bearer", token] if subprotocol and token is not None else None
    try:
        with websockets_sync.connect(url, open_timeout=30, additional_headers=headers,
                                     subprotocols=protocols) as ws:  # type: ignore[arg-type]
            if subprotocol:
                assert ws.subprotocol == "bearer"
            return 101
    except InvalidStatus as exc:
        return int(exc.response.status_code)


#: The WebSocket routes' rows: live, and resumed from a seq (``after``).
WS_CELLS = [
    ("/deliveries", _row(101, 403, 101)),
    (f"/deliveries?subscription={A_BOUND}", _row(101, 403, 101)),
    (f"/deliveries?subscription={B_MADE}", _row(101, 403, 403)),
    (f"/deliveries?subscription={ABSENT}", _row(101, 403, 403)),
    ("/deliveries?after=0", _row(101, 403, 101)),
    (f"/deliveries?after=0&subscription={A_BOUND}", _row(101, 403, 101)),
    (f"/deliveries?after=0&subscription={B_MADE}", _row(101, 403, 403)),
    (f"/deliveries?after=0&subscription={ABSENT}", _row(101, 403, 403)),
    ("/events", _row(101, 403, 403)),
]


def test_websocket_access_matrix(scene: dict[str, Any], workload: Workload,
                                 andorra: RoadNetwork) -> None:
    server, tokens = scene["server"], scene["tokens"]
    ws = server.url.replace("http", "ws")
    failures = []
    for caller in CALLERS:
        for path, want in WS_CELLS:
            for sub in (False, True):
                got = _ws_status(ws + path, tokens[caller], subprotocol=sub)
                if got != want[caller]:
                    failures.append((caller, path, sub, want[caller], got))
    assert not failures, "\n".join(map(str, failures))

    # A's stream carries A's deliveries only; the admin's, everyone's
    rows = subscription_rows(workload, andorra)
    msgs = message_rows(workload, andorra)
    with server.client() as c, \
            websockets_sync.connect(ws + "/deliveries", open_timeout=30,
                                    subprotocols=["bearer", tokens["a"]]  # type: ignore[list-item]
                                    ) as mine, \
            websockets_sync.connect(ws + "/deliveries", open_timeout=30,
                                    additional_headers=_h(tokens["admin"])) as every:
        # many subscriptions of the admin beside A's two: deliveries to both kinds
        assert c.post("/subscriptions", json=[{**r, "id": 10_000 + k}
                                              for k, r in enumerate(rows[10:800])],
                      headers=_h(tokens["admin"])).status_code == 201
        assert c.post("/subscriptions", json=[{**r, "id": 20_000 + k}
                                              for k, r in enumerate(rows[10:800])],
                      headers=_h(tokens["a"])).status_code == 201
        sent: list[dict[str, Any]] = []
        for m in msgs[:40]:
            r = c.post("/messages", json=m, headers=_h(tokens["publisher"]))
            assert r.status_code == 200
            sent += r.json()["deliveries"]
        expect_a = [d for d in sent if d["subscription_id"] >= 20_000
                    or d["subscription_id"] in (A_BOUND, A_MADE)]
        assert expect_a and len(expect_a) < len(sent)
        got_all = [every.recv(timeout=30) for _ in sent]
        got_a = [mine.recv(timeout=30) for _ in expect_a]
        import json

        assert len(got_all) == len(sent)
        assert sorted(json.loads(x)["subscription_id"] for x in got_a) == sorted(
            d["subscription_id"] for d in expect_a)
        with pytest.raises(TimeoutError):
            mine.recv(timeout=1)  # nothing of anyone else's follows


def test_ownership_survives_a_crash_and_a_snapshot(scene: dict[str, Any], workload: Workload,
                                                   andorra: RoadNetwork) -> None:
    server, tokens = scene["server"], scene["tokens"]
    msg = message_rows(workload, andorra)[2]
    with server.client() as c:
        assert c.post("/messages", json=msg, headers=_h(tokens["publisher"])
                      ).status_code == 200
    for restart in ("kill", "stop"):  # log replay, then a snapshot written at the stop
        server.kill() if restart == "kill" else server.stop()
        server.start()
        with server.client() as c:
            a, b = _h(tokens["a"]), _h(tokens["b"])
            assert c.get(f"/subscriptions/{A_MADE}", headers=a).status_code == 200, restart
            assert c.get(f"/subscriptions/{B_MADE}", headers=a).status_code == 403
            assert c.get(f"/subscriptions/{B_MADE}", headers=b).status_code == 200
            assert c.get(f"/messages/{msg['id']}", headers=_h(tokens["publisher"])
                         ).status_code == 200
            assert c.get("/metrics", headers=_h(tokens["revoked"])).status_code == 401
    assert (server.state_dir / "tokens.json").stat().st_mode & 0o777 == 0o600


def test_protected_mode(service_dir: Path, serve: Any) -> None:
    """No token: loopback only, said at start; a public --host is refused in one line."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "roadpubsub", "serve", "--state",
                          str(service_dir), "--host", "0.0.0.0", "--port", "1"],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ})
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "roadpubsub token create" in lines[0], out.stderr
    server = serve()
    assert "UNAUTHENTICATED" in server.log.read_text()
    with server.client() as c:
        assert c.get("/subscriptions").status_code == 200
    TokenStore(service_dir).create("admin")  # a token appears: from now on, asked for
    deadline = time.monotonic() + 10
    with server.client() as c:
        while c.get("/subscriptions").status_code != 401:
            assert time.monotonic() < deadline
            time.sleep(0.2)


def test_tls(service_dir: Path, serve: Any, tmp_path: Path) -> None:
    """HTTPS and WSS with a certificate made here (cryptography)."""
    cert_file, key_file = _self_signed(tmp_path)
    _, token = TokenStore(service_dir).create("admin")
    import ssl

    from live import Server

    server = Server(service_dir, "--tls-cert", str(cert_file), "--tls-key", str(key_file))
    server.url = server.url.replace("http://", "https://")
    _start_tls(server, str(cert_file))
    try:
        with httpx.Client(base_url=server.url, verify=ssl.create_default_context(
                cafile=str(cert_file)), timeout=60) as c:
            assert c.get("/subscriptions").status_code == 401
            assert c.get("/subscriptions", headers=_h(token)).status_code == 200
        with pytest.raises(httpx.HTTPError):
            httpx.get(server.url.replace("https://", "http://") + "/health", timeout=5)
        ctx = ssl.create_default_context(cafile=str(cert_file))
        with websockets_sync.connect(server.url.replace("https", "wss") + "/deliveries",
                                     ssl=ctx, additional_headers=_h(token),
                                     open_timeout=30):
            pass
    finally:
        server.stop()


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (its own CA) and its key, PEM files in ``folder``."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


def _start_tls(server: Any, ca: str) -> None:
    import ssl
    import subprocess
    import sys

    with server.log.open("ab") as log:
        server.proc = subprocess.Popen(
            [sys.executable, "-m", "roadpubsub", "serve", "--state", str(server.state_dir),
             "--port", str(server.port), "--quiet", *server.extra], stdout=log, stderr=log)
    ctx = ssl.create_default_context(cafile=ca)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert server.proc.poll() is None, server.log.read_text()[-3000:]
        try:
            if httpx.get(server.url + "/health", verify=ctx, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise AssertionError(server.log.read_text()[-3000:])


# ---------------------------------------------------------------------- MQTT
MOSQUITTO_ACL = """\
# the service: every topic under its prefix
user roadpubsub
topic readwrite roadpubsub/#

# each vehicle (its user name is its subscription id): its own moves and deliveries only
pattern write roadpubsub/moves/%u
pattern read roadpubsub/deliveries/%u
"""


def _mqtt_client(port: int, user: str | None, password: str | None) -> Any:
    import paho.mqtt.client as mqtt

    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"test-{user}")
    if user is not None:
        client.username_pw_set(user, password)
    client.connect("127.0.0.1", port)
    client.loop_start()
    return client


def test_mqtt_access_with_a_real_mosquitto(service_dir: Path, serve: Any, tmp_path: Path,
                                           workload: Workload, andorra: RoadNetwork,
                                           move_points: EdgePoints) -> None:
    """Mosquitto with password_file and acl_file (README): a vehicle publishes only its own
    moves and reads only its own deliveries; the service connects with its credentials."""
    import getpass
    import json
    import shutil
    import subprocess
    import threading

    from ports import free_port

    mqtt = pytest.importorskip("paho.mqtt.client")
    binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    passwd_tool = shutil.which("mosquitto_passwd")
    if not Path(binary).exists() or passwd_tool is None:
        pytest.skip("needs mosquitto and mosquitto_passwd")
    passwords = tmp_path / "passwd"
    users = {"roadpubsub": "service-secret", "50101": "vehicle-1", "50201": "vehicle-2"}
    passwords.touch()
    for user, pw in users.items():
        subprocess.run([passwd_tool, "-b", str(passwords), user, pw], check=True)
    acl = tmp_path / "acl"
    acl.write_text(MOSQUITTO_ACL)
    port = free_port()
    conf = tmp_path / "mosquitto.conf"
    # user: run as the test's user (as root, mosquitto would switch to its own user,
    # which cannot read the test's private folder)
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous false\n"
                    f"password_file {passwords}\nacl_file {acl}\n"
                    f"user {getpass.getuser()}\n")
    log = (tmp_path / "mosquitto.log").open("wb")
    broker = subprocess.Popen([binary, "-c", str(conf)], stdout=log, stderr=log)
    clients: list[Any] = []
    try:
        deadline = time.monotonic() + 20
        while True:  # the broker listens
            probe = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
            try:
                probe.connect("127.0.0.1", port)
                probe.disconnect()
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "mosquitto.log").read_text()
                time.sleep(0.1)
        _, admin = TokenStore(service_dir).create("admin")
        # without its credentials the service is refused, at once, in one line
        refused = subprocess.run(
            [sys_executable(), "-m", "roadpubsub", "serve", "--state", str(service_dir),
             "--port", str(free_port()), "--quiet", "--mqtt", f"127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=120)
        assert refused.returncode != 0 and "refused" in refused.stderr, refused.stderr
        pw_file = tmp_path / "service-password"
        pw_file.write_text(users["roadpubsub"] + "\n")
        server = serve("--mqtt", f"127.0.0.1:{port}", "--mqtt-user", "roadpubsub",
                       "--mqtt-password-file", str(pw_file))
        assert "service-secret" not in " ".join(server.extra)  # never in argv

        # 50101 and 50201 at the same place with the same keywords: each message hits both
        rows = subscription_rows(workload, andorra)
        msgs = message_rows(workload, andorra)
        with server.client() as c:
            h = _h(admin)
            assert c.post("/subscriptions", json=rows[:1500], headers=h).status_code == 201
            hit = None
            for m in msgs[:200]:
                found = c.post("/messages", json=m, headers=h).json()["deliveries"]
                if found:
                    hit = (m, found[0]["subscription_id"])
                    break
            assert hit is not None
            m, sid = hit
            template = next(r for r in rows if r["id"] == sid)
            for vid in (50101, 50201):
                assert c.post("/subscriptions", json={**template, "id": vid},
                              headers=h).status_code == 201
            before = c.get("/subscriptions/50201", headers=h).json()

        got: dict[str, list[str]] = {"50101": [], "50201": []}
        subscribed = {"50101": threading.Event(), "50201": threading.Event()}
        for vid in ("50101", "50201"):
            client = _mqtt_client(port, vid, users[vid])
            clients.append(client)

            def on_message(c: Any, userdata: Any, msg: Any, vid: str = vid) -> None:
                got[vid].append(msg.topic)

            client.on_message = on_message
            client.on_subscribe = lambda *_, vid=vid: subscribed[vid].set()
            client.subscribe([("roadpubsub/deliveries/50101", 1),
                              ("roadpubsub/deliveries/50201", 1), ("roadpubsub/#", 1)])
            assert subscribed[vid].wait(20)
        anonymous = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
        connected: list[Any] = []
        anonymous.on_connect = lambda c, u, f, reason, p: connected.append(reason)
        anonymous.connect("127.0.0.1", port)
        anonymous.loop_start()
        deadline = time.monotonic() + 20
        while not connected and time.monotonic() < deadline:
            time.sleep(0.05)
        anonymous.loop_stop()
        assert connected and connected[0].is_failure  # no anonymous client

        # a message at their place: each vehicle reads its own delivery, not the other's
        with server.client() as c:
            found = c.post("/messages", json={**m, "id": 90_000}, headers=h).json()
            assert {50101, 50201} <= {d["subscription_id"] for d in found["deliveries"]}
        deadline = time.monotonic() + 20
        while not (got["50101"] and got["50201"]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert got["50101"] == ["roadpubsub/deliveries/50101"], got
        assert got["50201"] == ["roadpubsub/deliveries/50201"], got

        # vehicle 50101 tries to move 50201: on 50201's topic, on the shared topic, and with
        # 50201's id on its own topic; then it moves itself
        vehicle = clients[0]
        to = location_of(andorra, move_points, 7)
        for topic, body in (("roadpubsub/moves/50201", {**to, "id": 50201}),
                            ("roadpubsub/moves", {**to, "id": 50201}),
                            ("roadpubsub/subscriptions", {**template, "id": 60777}),
                            ("roadpubsub/unsubscriptions", {"id": 50201}),
                            ("roadpubsub/messages", {**m, "id": 60778}),
                            ("roadpubsub/moves/50101", {**to, "id": 50201}),
                            ("roadpubsub/moves/50101", to)):
            vehicle.publish(topic, json.dumps(body), qos=1).wait_for_publish(20)
        with server.client() as c:
            deadline = time.monotonic() + 30
            while c.get("/subscriptions/50101", headers=h).json()["u"] != to["u"] or \
                    c.get("/subscriptions/50101", headers=h).json()["offset"] != to["offset"]:
                assert time.monotonic() < deadline, "the vehicle's own move never arrived"
                time.sleep(0.1)
            after = c.get("/subscriptions/50201", headers=h).json()
            assert (after["u"], after["v"], after["offset"]) == (
                before["u"], before["v"], before["offset"])
            assert c.get("/subscriptions/60777", headers=h).status_code == 404
            assert c.get("/messages/60778", headers=h).status_code == 404
            # 50201 did not move: a message at its place still reaches it
            found = c.post("/messages", json={**m, "id": 90_001}, headers=h).json()
            assert 50201 in {d["subscription_id"] for d in found["deliveries"]}
        deadline = time.monotonic() + 20
        while len(got["50201"]) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        assert len(got["50201"]) == 2 and set(got["50201"]) == {"roadpubsub/deliveries/50201"}
        assert "roadpubsub/deliveries/50201" not in got["50101"]
        assert set(got["50101"]) <= {"roadpubsub/deliveries/50101"}
    finally:
        for client in clients:
            client.loop_stop()
            client.disconnect()
        broker.terminate()
        broker.wait(10)


def sys_executable() -> str:
    import sys

    return sys.executable


def test_the_map_takes_a_token_in_chromium(service_dir: Path, serve: Any,
                                           workload: Workload, andorra: RoadNetwork) -> None:
    """The page holds no token; given one in the URL fragment (never sent to the server)
    it reads the API and the /events stream with it; without one it asks for it."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    from test_map import _browser

    _, admin = TokenStore(service_dir).create("admin")
    server = serve()
    with server.client() as c:
        page = c.get("/")
        assert page.status_code == 200 and admin not in page.text
        assert c.get("/static/map.js").status_code == 200
        assert c.post("/subscriptions", json=subscription_rows(workload, andorra)[:300],
                      headers=_h(admin)).status_code == 201
        browser = _browser()
        try:
            browser.get(server.url + "/")  # no token: the form
            WebDriverWait(browser, 60).until(
                lambda b: b.find_element(By.ID, "login").is_displayed())
            assert "token" in browser.find_element(By.ID, "status").text
            browser.get(server.url + "/#token=" + admin)
            WebDriverWait(browser, 60).until(
                lambda b: b.find_element(By.ID, "status").text.startswith("live"))
            assert "300 subscriptions" in browser.find_element(By.ID, "status").text
            assert "token" not in browser.current_url  # out of the address bar at once
            m = message_rows(workload, andorra)[0]
            n = len(c.post("/messages", json=m, headers=_h(admin)).json()["deliveries"])
            li = WebDriverWait(browser, 30).until(lambda b: b.find_element(
                By.CSS_SELECTOR, f'li.message[data-id="{m["id"]}"]'))
            assert li.get_attribute("data-deliveries") == str(n)
            # a token pasted in the form works the same (sessionStorage, this tab only)
            browser.execute_script("sessionStorage.clear()")
            browser.get(server.url + "/")
            WebDriverWait(browser, 60).until(
                lambda b: b.find_element(By.ID, "login").is_displayed())
            browser.find_element(By.ID, "token").send_keys(admin)
            browser.find_element(By.CSS_SELECTOR, "#login button").click()
            WebDriverWait(browser, 60).until(
                lambda b: b.find_element(By.ID, "status").text.startswith("live"))
        finally:
            browser.quit()
    assert admin not in server.log.read_text()


def test_a_revoked_token_loses_its_open_stream(scene: dict[str, Any], workload: Workload,
                                               andorra: RoadNetwork) -> None:
    from websockets.exceptions import ConnectionClosed

    server, tokens, store = scene["server"], scene["tokens"], scene["store"]
    _, doomed = store.create("admin")
    doomed_id = next(r.id for r in TokenStore(server.state_dir).records
                     if r.id not in scene["ids"].values())
    ws = server.url.replace("http", "ws") + "/deliveries"
    rows = subscription_rows(workload, andorra)
    msgs = message_rows(workload, andorra)
    h = _h(tokens["admin"])
    with server.client() as c:  # the running service sees the new token within a second
        deadline = time.monotonic() + 10
        while c.get("/metrics", headers=_h(doomed)).status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    with server.client() as c, websockets_sync.connect(
            ws, open_timeout=30, additional_headers=_h(doomed)) as stream:
        assert c.post("/subscriptions", json=[{**r, "id": 30_000 + k}
                                              for k, r in enumerate(rows[10:800])],
                      headers=h).status_code == 201
        sent = 0
        k = 0
        while not sent:  # until a message is delivered: the stream works
            sent = len(c.post("/messages", json=msgs[k], headers=h).json()["deliveries"])
            k += 1
        for _ in range(sent):
            stream.recv(timeout=30)
        store.revoke(doomed_id)
        time.sleep(1.5)  # the service looks at the file at most once a second
        for m in msgs[k:k + 50]:
            c.post("/messages", json=m, headers=h)
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                stream.recv(timeout=30)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


def test_allowed_origins_and_open_metrics(service_dir: Path, serve: Any) -> None:
    _, admin = TokenStore(service_dir).create("admin")
    app = "https://app.example:8443"
    server = serve("--allow-origin", app, "--metrics-open")
    with server.client() as c:
        assert c.get("/metrics").status_code == 200  # --metrics-open
        assert c.get("/subscriptions").status_code == 401
        r = c.options("/messages", headers={"Origin": app,
                                            "Access-Control-Request-Method": "POST"})
        assert r.status_code == 204 and r.headers["access-control-allow-origin"] == app
        r = c.get("/subscriptions", headers={**_h(admin), "Origin": app})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == app
        r = c.get("/subscriptions", headers={**_h(admin), "Origin": "https://other.example"})
        assert "access-control-allow-origin" not in r.headers
    ws = server.url.replace("http", "ws") + "/deliveries"
    with websockets_sync.connect(ws, origin=app, additional_headers=_h(admin),  # type: ignore[arg-type]
                                 open_timeout=30):
        pass
    with pytest.raises(InvalidStatus) as refused:
        websockets_sync.connect(ws, origin="https://other.example",  # type: ignore[arg-type]
                                additional_headers=_h(admin), open_timeout=30)
    assert refused.value.response.status_code == 403


def test_mqtt_over_tls_with_credentials(service_dir: Path, serve: Any, tmp_path: Path,
                                        workload: Workload, andorra: RoadNetwork,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """--mqtt-tls-ca: the service reaches a Mosquitto TLS listener (the broker's
    certificate checked) with its user and password; deliveries come out over TLS."""
    import getpass
    import json
    import shutil
    import subprocess
    import threading

    from ports import free_port

    mqtt = pytest.importorskip("paho.mqtt.client")
    binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    passwd_tool = shutil.which("mosquitto_passwd")
    if not Path(binary).exists() or passwd_tool is None:
        pytest.skip("needs mosquitto and mosquitto_passwd")
    cert, key = _self_signed(tmp_path)
    passwords = tmp_path / "passwd"
    passwords.touch()
    for user, pw in (("roadpubsub", "svc-pw"), ("reader", "reader-pw")):
        subprocess.run([passwd_tool, "-b", str(passwords), user, pw], check=True)
    port = free_port()
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\ncafile {cert}\ncertfile {cert}\n"
                    f"keyfile {key}\nallow_anonymous false\npassword_file {passwords}\n"
                    f"user {getpass.getuser()}\n")
    log = (tmp_path / "mosquitto.log").open("wb")
    broker = subprocess.Popen([binary, "-c", str(conf)], stdout=log, stderr=log)
    reader = None
    try:
        deadline = time.monotonic() + 20
        while True:
            probe = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
            probe.tls_set(ca_certs=str(cert))
            probe.username_pw_set("reader", "reader-pw")
            try:
                probe.connect("127.0.0.1", port)
                probe.disconnect()
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "mosquitto.log").read_text()
                time.sleep(0.1)
        _, admin = TokenStore(service_dir).create("admin")
        plain = subprocess.run(  # TLS listener, plain client: refused
            [sys_executable(), "-m", "roadpubsub", "serve", "--state", str(service_dir),
             "--port", str(free_port()), "--quiet", "--mqtt", f"127.0.0.1:{port}",
             "--mqtt-user", "roadpubsub"], capture_output=True, text=True, timeout=120,
            env={**os.environ, "ROADPUBSUB_MQTT_PASSWORD": "svc-pw"})
        assert plain.returncode != 0
        monkeypatch.setenv("ROADPUBSUB_MQTT_PASSWORD", "svc-pw")  # the server inherits it
        server = serve("--mqtt", f"127.0.0.1:{port}", "--mqtt-user", "roadpubsub",
                       "--mqtt-tls-ca", str(cert))
        assert server.proc is not None and "svc-pw" not in " ".join(server.extra)
        got: list[dict[str, Any]] = []
        ready = threading.Event()
        reader = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="tls-reader")
        reader.tls_set(ca_certs=str(cert))
        reader.username_pw_set("reader", "reader-pw")
        reader.on_subscribe = lambda *_: ready.set()
        reader.on_message = lambda c, u, msg: got.append(json.loads(msg.payload))
        reader.connect("127.0.0.1", port)
        reader.loop_start()
        reader.subscribe("roadpubsub/deliveries/#", qos=1)
        assert ready.wait(20)
        with server.client() as c:
            h = _h(admin)
            assert c.post("/subscriptions", json=subscription_rows(workload, andorra)[:800],
                          headers=h).status_code == 201
            sent = [d for m in message_rows(workload, andorra)[:30]
                    for d in c.post("/messages", json=m, headers=h).json()["deliveries"]]
        assert sent
        deadline = time.monotonic() + 30
        while len(got) < len(sent) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sorted(d["subscription_id"] for d in got) == sorted(
            d["subscription_id"] for d in sent)
    finally:
        if reader is not None:
            reader.loop_stop()
            reader.disconnect()
        broker.terminate()
        broker.wait(10)
