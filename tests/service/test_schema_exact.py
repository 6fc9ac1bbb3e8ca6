"""The published schema and the server agree, case by case (the differences found before,
as regression tests): each body or id is valid under ``/openapi.json`` exactly when the
server takes it, and every status seen is one the schema declares for its route."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator
from live import Server, location_of, subscription_rows

from roadpubsub.index.workload import Workload
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork

INT64_TOO_BIG = "364965788647793491741507584"


class Spec:
    """The served document, with its schemas and declared statuses at hand."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc

    def valid(self, schema: dict[str, Any], value: Any) -> bool:
        root = {**schema, "components": self.doc["components"]}
        return Draft202012Validator(root).is_valid(value)

    def body_valid(self, name: str, value: Any) -> bool:
        return self.valid({"$ref": f"#/components/schemas/{name}"}, value)

    def param(self, path: str, method: str, name: str) -> dict[str, Any]:
        item = self.doc["paths"][path]
        for p in [*item.get("parameters", []), *item[method].get("parameters", [])]:
            if p["name"] == name:
                schema: dict[str, Any] = p["schema"]
                return schema
        raise KeyError(name)

    def declares(self, path: str, method: str, status: int) -> bool:
        return str(status) in self.doc["paths"][path][method]["responses"]


@pytest.fixture
def live(serve: Any, workload: Workload, andorra: RoadNetwork
         ) -> tuple[Server, httpx.Client, Spec]:
    server: Server = serve()
    c = httpx.Client(base_url=server.url, timeout=600)
    rows = subscription_rows(workload, andorra)[:2]
    rows[0]["id"], rows[1]["id"] = 7, 10
    assert c.post("/subscriptions", json=rows).status_code == 201
    return server, c, Spec(c.get("/openapi.json").json())


def check(spec: Spec, r: httpx.Response, path: str, method: str, status: int) -> None:
    assert r.status_code == status, r.text
    assert spec.declares(path, method, status), (path, method, status)
    if status >= 400:
        assert r.headers["content-type"].startswith("application/json")
        assert r.json()["error"]


def test_path_ids_are_canonical_int64(live: tuple[Server, httpx.Client, Spec],
                                      andorra: RoadNetwork, move_points: EdgePoints) -> None:
    _, c, spec = live
    sid = spec.param("/subscriptions/{sid}", "get", "sid")
    assert spec.valid(sid, 2**63 - 1) and not spec.valid(sid, int(INT64_TOO_BIG))
    assert spec.param("/messages/{mid}", "get", "mid") == sid
    loc = location_of(andorra, move_points, 0)
    loose = [INT64_TOO_BIG, "9223372036854775808", "1_0", "%207%20", "+7", "007", "-0",
             "7.0", "0x7", "%D9%A7"]  # the last: Arabic-indic seven
    for text in loose:
        check(spec, c.get(f"/subscriptions/{text}"), "/subscriptions/{sid}", "get", 400)
        check(spec, c.delete(f"/subscriptions/{text}"), "/subscriptions/{sid}", "delete", 400)
        check(spec, c.put(f"/subscriptions/{text}/location", json=loc),
              "/subscriptions/{sid}/location", "put", 400)
        check(spec, c.get(f"/messages/{text}"), "/messages/{mid}", "get", 400)
    # none of them reached subscription 7 or 10
    for s in (7, 10):
        check(spec, c.get(f"/subscriptions/{s}"), "/subscriptions/{sid}", "get", 200)
    check(spec, c.get("/subscriptions/8"), "/subscriptions/{sid}", "get", 404)
    check(spec, c.get(f"/subscriptions/{-2**63}"), "/subscriptions/{sid}", "get", 404)


def test_location_bodies(live: tuple[Server, httpx.Client, Spec], andorra: RoadNetwork,
                         move_points: EdgePoints) -> None:
    _, c, spec = live
    uv = location_of(andorra, move_points, 3)
    refused: list[dict[str, Any]] = [
        {}, {"u": uv["u"]}, {"u": uv["u"], "v": uv["v"]}, {"lon": 1.5}, {"lat": None},
        {"u": None, "v": None, "offset": None}, {**uv, "lon": 1.5},
        {**uv, "id": 10}, {"lon": 1.5, "lat": 42.5, "offset": 3.0}, {**uv, "colour": 1}]
    for body in refused:
        expect_schema = body == {**uv, "id": 10}  # the schema cannot tie id to the path
        assert spec.body_valid("Location", body) is expect_schema, body
        r = c.put("/subscriptions/7/location", json=body)
        check(spec, r, "/subscriptions/{sid}/location", "put", 422)
    for body in (uv, {**uv, "id": 7}, {**uv, "lon": None, "lat": None}):
        assert spec.body_valid("Location", body), body
        check(spec, c.put("/subscriptions/7/location", json=body),
              "/subscriptions/{sid}/location", "put", 200)
    assert spec.body_valid("Move", {"id": 7, **uv})
    assert not spec.body_valid("Move", {"id": 7})


def test_fields_of_each_kind(live: tuple[Server, httpx.Client, Spec],
                             workload: Workload, andorra: RoadNetwork) -> None:
    _, c, spec = live
    base = subscription_rows(workload, andorra)[5]
    place = {k: base[k] for k in ("u", "v", "offset")}
    common = {**place, "keywords": base["keywords"]}
    good = [
        {"alpha": 0.5, "tau": 0.5},
        {"kind": "threshold", "alpha": 0.5, "tau": 0.5, "radius": None, "k": None},
        {"kind": "boolean", "radius": 100.0},
        {"kind": "boolean", "radius": 0, "alpha": None},
        {"kind": "topk", "k": 3, "alpha": 0.2},
    ]
    bad = [
        {"alpha": 0.5, "tau": 0.5, "radius": 100.0},  # radius on a threshold row
        {"alpha": 0.5, "tau": 0.5, "k": 3},
        {"alpha": 0.5},
        {"alpha": 0.5, "tau": 0},
        {"kind": "boolean"},
        {"kind": "boolean", "radius": 100.0, "alpha": 0.5},
        {"kind": "boolean", "radius": 1e9},  # beyond Dmax
        {"kind": "topk", "alpha": 0.2},
        {"kind": "topk", "k": 0, "alpha": 0.2},
        {"kind": "topk", "k": 3, "alpha": 0.2, "tau": 0.5},
        {"kind": "topk", "k": 2**31, "alpha": 0.2},
        {"kind": "nearest", "alpha": 0.5, "tau": 0.5},
    ]
    for i, fields in enumerate(bad):
        row = {"id": 900 + i, **common, **fields}
        assert not spec.body_valid("Subscription", row), fields
        check(spec, c.post("/subscriptions", json=row), "/subscriptions", "post", 422)
    for i, fields in enumerate(good):
        row = {"id": 800 + i, **common, **fields}
        assert spec.body_valid("Subscription", row), fields
        check(spec, c.post("/subscriptions", json=row), "/subscriptions", "post", 201)
    row = {"id": 800, **common, **good[0]}
    check(spec, c.post("/subscriptions", json=row), "/subscriptions", "post", 409)
    assert not spec.body_valid("Subscription", {**row, "id": int(INT64_TOO_BIG)})
    check(spec, c.post("/subscriptions", json={**row, "id": int(INT64_TOO_BIG)}),
          "/subscriptions", "post", 422)
    page = c.get("/subscriptions", params={"after": 799, "limit": 10}).json()
    assert [r["id"] for r in page["subscriptions"]] == [800, 801, 802, 803, 804]
    for r in page["subscriptions"]:
        assert spec.body_valid("SubscriptionRow", r)


def test_webhook_field(live: tuple[Server, httpx.Client, Spec],
                       workload: Workload, andorra: RoadNetwork) -> None:
    """The schema refuses what the body check refuses; a URL of the right form whose host
    is loopback passes the schema and is refused by the request-forgery check (422)."""
    _, c, spec = live
    base = subscription_rows(workload, andorra)[5]
    row = {k: base[k] for k in ("u", "v", "offset", "keywords")} | {"alpha": 0.5, "tau": 0.5}
    for i, bad in enumerate(["ftp://example.org/h", "", "http://caf\u00e9.example/",
                             "http://a\nb", 3, "http://" + "a" * 2048]):
        body = {"id": 700 + i, **row, "webhook": bad}
        assert not spec.body_valid("Subscription", body), bad
        check(spec, c.post("/subscriptions", json=body), "/subscriptions", "post", 422)
    body = {"id": 710, **row, "webhook": "http://127.0.0.1:9/hook"}
    assert spec.body_valid("Subscription", body)
    answer = c.post("/subscriptions", json=body)
    check(spec, answer, "/subscriptions", "post", 422)
    assert "webhook" in answer.json()["error"]
    assert c.get("/subscriptions/710").status_code == 404


def test_statuses_and_methods(live: tuple[Server, httpx.Client, Spec]) -> None:
    _, c, spec = live
    limit = spec.param("/subscriptions", "get", "limit")
    for value in (0, 100_001):
        assert not spec.valid(limit, value)
        check(spec, c.get("/subscriptions", params={"limit": value}),
              "/subscriptions", "get", 400)
    check(spec, c.get("/subscriptions", params={"after": INT64_TOO_BIG}),
          "/subscriptions", "get", 400)
    check(spec, c.get("/deliveries"), "/deliveries", "get", 426)
    check(spec, c.get("/deliveries", params={"subscription": "x"}), "/deliveries", "get", 400)
    check(spec, c.post("/messages", content=b"{not json",
                       headers={"content-type": "application/json"}), "/messages", "post", 400)
    # OPTIONS and 405 name every method of the path, as the schema lists them
    for path in spec.doc["paths"]:
        url = path.replace("{sid}", "7").replace("{mid}", "7")
        r = c.options(url)
        check(spec, r, path, "options", 204)
        allow = {m.strip() for m in r.headers["allow"].split(",")}
        methods = {m.upper() for m in spec.doc["paths"][path] if m != "parameters"}
        assert allow == methods | ({"HEAD"} if "GET" in methods else set()), path
    r = c.delete("/subscriptions/moves")
    assert r.status_code == 405 and r.headers["allow"] == "POST, OPTIONS"
    r = c.patch("/subscriptions/7")
    assert r.status_code == 405 and "DELETE" in r.headers["allow"]
