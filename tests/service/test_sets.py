"""Route and area subscriptions in the live service (issue 32), through a real server.

Geometries are GeoJSON LineStrings through real Andorra lon/lat (routes along shortest
paths), NodePath objects (explicit routes) and Polygons (areas); the expected deliveries
come from the set reference matchers (:class:`~roadpubsub.pruning.brute.BruteMatcher`,
:class:`~roadpubsub.pruning.kinds_reference.BooleanBruteMatcher` with ``set_locations``),
fed the sets the service shows with ``GET /subscriptions/{id}`` (so a reference recomputes
from what the service answers). Dmax is set exactly at a set's distance to a message, taus
exactly at scores, boolean radii exactly at distances, messages on the routes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from jsonschema import Draft202012Validator
from live import Server, tweet_weights

from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.events import BodyParser
from roadpubsub.index.kinds import BooleanSubscriptions
from roadpubsub.index.model import Messages, Subscriptions, keyword_csr
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.pruning.brute import BruteMatcher
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.kinds_reference import BooleanBruteMatcher
from roadpubsub.pruning.set_locations import SetLocations
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.segment_sets import SegmentSet, segment_set_distances
from roadpubsub.service.access import TokenStore
from roadpubsub.service.state import create_state

pytestmark = pytest.mark.slow


def _folder(tmp: Path, network: RoadNetwork, tweets: list[list[str]], dmax: float) -> Path:
    folder = tmp / "svc"
    empty = Subscriptions(np.empty(0, np.int64), EdgePoints.of([], []), np.empty(0),
                          np.empty(0), np.zeros(1, np.int64), np.empty(0, np.int32))
    create_state(folder, EnhancedIndex(SpatialIndex.build(network), empty,
                                       tweet_weights(tweets), dmax_m=dmax))
    return folder


def _main_nodes(network: RoadNetwork) -> np.ndarray:
    labels = network.components()[1]
    return np.flatnonzero(labels == np.bincount(labels).argmax())


def _geometries(network: RoadNetwork, rng: np.random.Generator, n: int
                ) -> list[dict[str, Any]]:
    """Routes through 2-4 real node positions, node paths, and boxes around nodes."""
    nodes = _main_nodes(network)
    lon, lat = network.node_lon, network.node_lat
    out: list[dict[str, Any]] = []
    while len(out) < n:
        k = len(out) % 3
        if k == 0:
            way = rng.choice(nodes, int(rng.integers(2, 5)), replace=False)
            out.append({"type": "LineString",
                        "coordinates": [[float(lon[i]), float(lat[i])] for i in way]})
        elif k == 1:  # an explicit path: two neighbours along the first arc of a node
            e = int(rng.choice(np.flatnonzero(np.isin(network.edge_u, nodes))))
            u, v = int(network.edge_u[e]), int(network.edge_v[e])
            if u == v:
                continue
            length = float(network.edge_length[e])
            out.append({"type": "NodePath",
                        "nodes": [int(network.node_ids[u]), int(network.node_ids[v])],
                        "start_m": round(length / 4, 2), "end_m": round(length / 2, 2)})
        else:
            c = int(rng.choice(nodes))
            d = float(rng.uniform(0.001, 0.004))
            x, y = float(lon[c]), float(lat[c])
            out.append({"type": "Polygon", "coordinates": [[[x - d, y - d], [x + d, y - d],
                                                            [x + d, y + d], [x - d, y + d],
                                                            [x - d, y - d]]]})
    return out


def _uvo(network: RoadNetwork, edge: int, offset: float) -> dict[str, Any]:
    return {"u": int(network.node_ids[network.edge_u[edge]]),
            "v": int(network.node_ids[network.edge_v[edge]]), "offset": float(offset)}


def _deliveries(rows: list[dict[str, Any]]) -> set[tuple[int, int, float, float]]:
    return {(d["message_id"], d["subscription_id"], d["distance"], d["score"]) for d in rows}


def _expected(network: RoadNetwork, tweets: list[list[str]], subs: list[dict[str, Any]],
              sets: dict[int, SegmentSet], messages: Messages, dmax: float
              ) -> set[tuple[int, int, float, float]]:
    weights = tweet_weights(tweets)
    thr = [r for r in subs if r.get("kind", "threshold") == "threshold"]
    boo = [r for r in subs if r.get("kind") == "boolean"]
    place = EdgePoints.of([0] * len(thr), [0.0] * len(thr))  # not used by a set row
    t = Subscriptions.from_rows(ids=[r["id"] for r in thr], points=place,
                                keywords=[r["keywords"] for r in thr],
                                alpha=[r["alpha"] for r in thr], tau=[r["tau"] for r in thr],
                                weights=weights)
    found = BruteMatcher(network, t, weights, dmax_m=dmax, set_locations=SetLocations.of(
        range(len(thr)), [sets[r["id"]] for r in thr])).match(messages)
    if boo:
        ptr, terms = keyword_csr([r["keywords"] for r in boo], weights, add=True)
        b = BooleanSubscriptions(np.array([r["id"] for r in boo]),
                                 EdgePoints.of([0] * len(boo), [0.0] * len(boo)),
                                 np.array([r["radius"] for r in boo], float), ptr, terms)
        found = Deliveries.concat([found, BooleanBruteMatcher(
            network, b, weights, dmax_m=dmax, set_locations=SetLocations.of(
                range(len(boo)), [sets[r["id"]] for r in boo])).match(messages)])
    return {(int(m), int(s), float(d), float(x)) for m, s, d, x in zip(
        found.message_id, found.subscription_id, found.distance, found.score, strict=True)}


@pytest.mark.parametrize("seed", [3, 11])
def test_sets_deliver_as_the_reference(andorra: RoadNetwork, tweets: list[list[str]],
                                       tmp_path: Path, servers: list[Server],
                                       seed: int) -> None:
    """Routes, node paths and areas of threshold and boolean subscriptions, next to point
    ones, over real Andorra: every delivery to a set subscription equals the reference's
    (pairs, distances and scores bit for bit), with Dmax exactly at one set's distance to
    a message, taus exactly at scores, radii exactly at distances, messages on the sets;
    then again after the sets were moved and some deleted."""
    rng = np.random.default_rng(seed)
    net = andorra
    parser = BodyParser(net, max_snap_m=250.0, kinds=True, dmax_m=1e6)
    words = sorted({w for t in tweets[:300] for w in t})
    geoms = _geometries(net, rng, 18)
    subs: list[dict[str, Any]] = []
    for i, g in enumerate(geoms):
        kw = list(rng.choice(words, int(rng.integers(1, 3)), replace=False))
        row: dict[str, Any] = {"id": 100 + i, "keywords": kw, "geometry": g}
        if i % 4 == 3:
            row.update(kind="boolean", radius=0.0)  # radius fixed below
        else:
            row.update(alpha=float(rng.choice([0.0, 0.3, 0.7, 1.0])), tau=0.01)
        subs.append(row)
    batch = parser.subscriptions(subs)
    assert batch.sets is not None
    sets = {int(i): s for i, s in zip(batch.ids, batch.sets, strict=True) if s is not None}
    # messages: on a piece of a set, at a piece's end, and at random edges
    main = np.flatnonzero(np.isin(net.edge_u, _main_nodes(net)))
    msg_rows: list[dict[str, Any]] = []
    for j in range(40):
        s = sets[100 + int(rng.integers(0, len(geoms)))]
        p = int(rng.integers(0, len(s)))
        if j % 3 == 0:
            e, o = int(s.edge[p]), float(s.start[p] + rng.random() * (s.end[p] - s.start[p]))
        elif j % 3 == 1:
            e, o = int(s.edge[p]), float(s.end[p])
        else:
            e = int(rng.choice(main))
            o = float(rng.random() * net.edge_length[e])
        kw = [str(x) for x in rng.choice([w for r in subs for w in r["keywords"]], 3)]
        msg_rows.append({"id": 1000 + j, "keywords": kw, **_uvo(net, e, o)})
    parsed = parser.messages(msg_rows)
    points = parsed.points
    # Dmax exactly at one set's distance to a message (an exact sum on the length grid)
    d_all = {sid: segment_set_distances(net, s, points) for sid, s in sets.items()}
    alpha_of = {r["id"]: r.get("alpha") for r in subs}
    pairs = sorted((float(x), sid, j) for sid, d in d_all.items() for j, x in enumerate(d)
                   if 300 < x < 4000 and alpha_of[sid] is not None and alpha_of[sid] < 1)
    assert pairs, "no set within 4 km of a message"
    dmax, sid_at, j_at = pairs[len(pairs) // 2]
    # that message holds the subscription's keywords: delivered at Dmax on text alone
    msg_rows[j_at]["keywords"] = [str(w) for w in subs[sid_at - 100]["keywords"]]
    parsed = parser.messages(msg_rows)
    for r in subs:  # radii exactly at a distance within Dmax
        if r.get("kind") == "boolean":
            near = [float(x) for x in d_all[r["id"]] if x <= dmax]
            r["radius"] = float(rng.choice(near)) if near else dmax
    weights = tweet_weights(tweets)
    messages = Messages.from_rows(ids=parsed.ids, points=points, keywords=parsed.keywords,
                                  weights=weights)
    loose = _expected(net, tweets, subs, sets, messages, dmax)
    scores = sorted({(s, x) for _, s, _, x in loose if 0 < x < 1})
    for r in subs:  # taus exactly at one of its scores
        mine = [x for s, x in scores if s == r["id"]]
        if r.get("kind") != "boolean" and mine:
            r["tau"] = float(rng.choice(mine))
    want = _expected(net, tweets, subs, sets, messages, dmax)
    assert any(d == dmax for _, _, d, _ in loose), "no pair at Dmax"
    server = Server(_folder(tmp_path, net, tweets, dmax))
    servers.append(server.start())
    with server.client() as c:
        points_rows = [{"id": 1, "keywords": subs[0]["keywords"], "alpha": 0.5, "tau": 0.1,
                        **_uvo(net, int(main[0]), 0.0)}]
        r = c.post("/subscriptions", json=subs + points_rows)
        assert r.status_code == 201, r.text
        for sid, s in sets.items():  # the reference recomputes from what GET shows
            g = c.get(f"/subscriptions/{sid}").json()["geometry"]
            back = SegmentSet.from_json(net, g)
            assert back.edge.tolist() == s.edge.tolist()
            assert back.start.tolist() == s.start.tolist() and back.end.tolist() == \
                s.end.tolist()
        r = c.post("/messages", json=msg_rows)
        assert r.status_code == 200, r.text
        got = {d for d in _deliveries(r.json()["deliveries"]) if d[1] >= 100}
        assert got == want
        assert len(want) >= 5
        # move half the sets to other geometries, delete a few; publish again
        new_geoms = _geometries(net, rng, 6)
        moved = {100 + 3 * i: g for i, g in enumerate(new_geoms)}
        r = c.post("/subscriptions/moves",
                   json=[{"id": sid, "geometry": g} for sid, g in moved.items()])
        assert r.status_code == 200, r.text
        gone = [101, 104]
        for sid in gone:
            assert c.delete(f"/subscriptions/{sid}").status_code == 200
        for sid in moved:
            sets[sid] = SegmentSet.from_json(net, c.get(f"/subscriptions/{sid}").json()
                                             ["geometry"])
        for sid in gone:
            sets.pop(sid)
            assert c.get(f"/subscriptions/{sid}").status_code == 404
        again = [{**m, "id": m["id"] + 1000} for m in msg_rows]
        messages2 = Messages.from_rows(ids=parsed.ids + 1000, points=points,
                                       keywords=parsed.keywords, weights=weights)
        r = c.post("/messages", json=again)
        assert r.status_code == 200, r.text
        got = {d for d in _deliveries(r.json()["deliveries"]) if d[1] >= 100}
        live = [x for x in subs if x["id"] not in gone]
        assert got == _expected(net, tweets, live, sets, messages2, dmax)


@pytest.fixture
def sets_server(andorra: RoadNetwork, tweets: list[list[str]], tmp_path: Path,
                servers: list[Server]) -> Server:
    server = Server(_folder(tmp_path, andorra, tweets, 3000.0))
    servers.append(server)
    return server.start()


def _route(network: RoadNetwork, a: int, b: int) -> dict[str, Any]:
    nodes = _main_nodes(network)
    i, j = int(nodes[a]), int(nodes[b])
    return {"type": "LineString",
            "coordinates": [[float(network.node_lon[i]), float(network.node_lat[i])],
                            [float(network.node_lon[j]), float(network.node_lat[j])]]}


def test_sets_survive_kill_9_and_restarts(sets_server: Server, andorra: RoadNetwork,
                                          tweets: list[list[str]]) -> None:
    """A route, a node path and an area answered 201 are there after kill -9 (log replay)
    and after a clean stop (snapshot), with the identical path and pieces, and deliver
    the same; a moved route keeps its new path."""
    net = andorra
    word = tweets[0][0]
    rows = [{"id": 7, "keywords": [word], "alpha": 0.5, "tau": 0.2,
             "geometry": _route(net, 10, 400)},
            {"id": 8, "keywords": [word], "kind": "boolean", "radius": 800.0,
             "geometry": _geometries(net, np.random.default_rng(1), 2)[1]},
            {"id": 9, "keywords": [word], "alpha": 0.5, "tau": 0.2,
             "geometry": _geometries(net, np.random.default_rng(2), 3)[2]}]
    server = sets_server
    with server.client() as c:
        assert c.post("/subscriptions", json=rows).status_code == 201
        before = {i: c.get(f"/subscriptions/{i}").json() for i in (7, 8, 9)}
        assert before[7]["geometry"]["kind"] == "route"
        assert before[7]["geometry"]["node_paths"][0]
        assert before[9]["geometry"]["kind"] == "area"
        seg = before[7]["geometry"]["segments"][1]
        msg = {"id": 1, "keywords": [word], "u": seg["u"], "v": seg["v"],
               "offset": seg["start_m"]}
        first = c.post("/messages", json=msg).json()["deliveries"]
        assert 7 in {d["subscription_id"] for d in first}
    server.kill()
    server.start()
    with server.client() as c:
        after = {i: c.get(f"/subscriptions/{i}").json() for i in (7, 8, 9)}
        assert after == before
        again = c.post("/messages", json={**msg, "id": 2}).json()["deliveries"]
        assert [{**d, "message_id": 1, "seq": 0} for d in again] == \
            [{**d, "seq": 0} for d in first]
        r = c.put("/subscriptions/7/location", json={"geometry": _route(net, 20, 300)})
        assert r.status_code == 200, r.text
        moved = c.get("/subscriptions/7").json()
        assert moved["geometry"] != before[7]["geometry"]
    server.kill()
    server.start()
    with server.client() as c:
        assert c.get("/subscriptions/7").json() == moved
    server.stop()  # a clean stop writes a snapshot: the sets come from its columns now
    server.start()
    with server.client() as c:
        assert c.get("/subscriptions/7").json() == moved
        assert {i: c.get(f"/subscriptions/{i}").json() for i in (8, 9)} == \
            {i: before[i] for i in (8, 9)}
        listed = {r["id"]: r for r in c.get("/subscriptions").json()["subscriptions"]}
        assert listed[8] == before[8]
        assert c.delete("/subscriptions/8").status_code == 200
    server.kill()
    server.start()
    with server.client() as c:
        assert c.get("/subscriptions/8").status_code == 404
        assert c.get("/subscriptions/9").json() == before[9]


def test_sets_hostile_bodies(sets_server: Server, andorra: RoadNetwork,
                             tweets: list[list[str]]) -> None:
    """Bad geometries are refused whole with one 4xx naming the row and the field, before
    anything is applied; limits hold; a point does not become a route, nor a route a
    point; top-k on a set is refused."""
    net = andorra
    word = tweets[0][0]
    good = {"id": 50, "keywords": [word], "alpha": 0.5, "tau": 0.2,
            "geometry": _route(net, 10, 400)}
    far = {"type": "LineString", "coordinates": [[10.0, 50.0], [10.01, 50.0]]}
    box = {"type": "Polygon", "coordinates": [[[10.0, 50.0], [10.1, 50.0], [10.1, 50.1],
                                               [10.0, 50.0]]]}
    cases: list[tuple[Any, str]] = [
        ({"type": "Circle", "coordinates": [1, 2]}, "must be a GeoJSON LineString"),
        ({"type": "LineString", "coordinates": [[1.5, 42.5]]}, "at least two"),
        ({"type": "LineString", "coordinates": [[1.5, 420.0], [1.5, 42.5]]}, "coordinates"),
        ({"type": "LineString", "coordinates": [[1.5, 42.5]] * 1001}, "limit of 1,000"),
        (far, "waypoint"),
        (box, "no road"),
        ({"type": "NodePath", "nodes": [1, 2]}, "unknown node id"),
        ({"type": "NodePath", "nodes": [1]}, "'nodes'"),
        ({"type": "LineString", "coordinates": [[1.5, 42.5], [1.51, 42.5]], "x": 1},
         "unknown member"),
        ("LINESTRING(1 2, 3 4)", "must be a GeoJSON"),
    ]
    with sets_server.client() as c:
        for geometry, text in cases:
            bad = {"id": 51, "keywords": [word], "alpha": 0.5, "tau": 0.2,
                   "geometry": geometry}
            r = c.post("/subscriptions", json=[good, bad])
            assert r.status_code == 422, (geometry, r.text)
            err = r.json()["error"]
            assert "row 1 (id 51)" in err and "geometry" in err and text in err, err
            assert c.get("/subscriptions/50").status_code == 404  # nothing applied
        r = c.post("/subscriptions", json={**good, "kind": "topk", "k": 3, "tau": None})
        assert r.status_code == 422 and "topk subscription must be a point" in r.text
        r = c.post("/subscriptions", json={**good, "u": 1, "v": 2, "offset": 0.0})
        assert r.status_code == 422 and "give one location" in r.text
        many = [{**good, "id": 60 + i, "geometry": {
            "type": "LineString", "coordinates": [[1.5, 42.5 + 1e-5 * j] for j in range(900)]}}
            for i in range(23)]
        r = c.post("/subscriptions", json=many)
        assert r.status_code == 422 and "limit of 20,000" in r.text
        assert c.post("/subscriptions", json=good).status_code == 201
        point = {"id": 52, "keywords": [word], "alpha": 0.5, "tau": 0.2,
                 "lon": float(net.node_lon[0]), "lat": float(net.node_lat[0])}
        assert c.post("/subscriptions", json=point).status_code == 201
        r = c.put("/subscriptions/52/location", json={"geometry": _route(net, 1, 2)})
        assert r.status_code == 422 and "is a point" in r.text, r.text
        r = c.put("/subscriptions/50/location", json={"lon": point["lon"],
                                                      "lat": point["lat"]})
        assert r.status_code == 422 and "lies on a route or area" in r.text, r.text
        r = c.post("/subscriptions/moves", json=[
            {"id": 52, "lon": point["lon"], "lat": point["lat"]},
            {"id": 50, "geometry": {"type": "Circle"}}])
        assert r.status_code == 422 and "row 1 (id 50)" in r.text
        assert c.get("/subscriptions/50").json()["geometry"]["kind"] == "route"
        # the published schema agrees on the shapes (not on the network's content)
        doc = c.get("/openapi.json").json()

        def valid(value: Any) -> bool:
            root = {"$ref": "#/components/schemas/Subscription",
                    "components": doc["components"]}
            return Draft202012Validator(root).is_valid(value)

        assert valid(good) and valid({**good, "geometry": box})
        assert valid({**good, "geometry": {"type": "NodePath", "nodes": [1, 2]}})
        for geometry, _ in cases:
            if geometry not in (far, box) and "NodePath" not in str(geometry):
                assert not valid({**good, "geometry": geometry}), geometry
        assert not valid({**good, "u": 1, "v": 2, "offset": 0.0})
        assert not valid({**good, "kind": "topk", "k": 3, "tau": None})


def test_sets_belong_to_their_token(andorra: RoadNetwork, tweets: list[list[str]],
                                    tmp_path: Path, servers: list[Server]) -> None:
    """A route subscription is its creator's, as a point one is: another subscriber
    cannot read, move, replace or delete it (403), also after kill -9."""
    folder = _folder(tmp_path, andorra, tweets, 3000.0)
    store = TokenStore(folder)
    alice, bob = (store.create("subscriber")[1] for _ in range(2))
    server = Server(folder)
    servers.append(server.start())
    a, b = ({"Authorization": f"Bearer {t}"} for t in (alice, bob))
    row = {"id": 80, "keywords": [tweets[0][0]], "alpha": 0.5, "tau": 0.2,
           "geometry": _route(andorra, 10, 400)}
    other = {"geometry": _route(andorra, 20, 300)}
    for restart in (False, True):
        if restart:
            server.kill()
            server.start()
        with server.client() as c:
            if not restart:
                assert c.post("/subscriptions", json=row, headers=a).status_code == 201
            assert c.get("/subscriptions/80", headers=b).status_code == 403
            assert c.put("/subscriptions/80/location", json=other,
                         headers=b).status_code == 403
            assert c.post("/subscriptions/moves", json=[{"id": 80, **other}],
                          headers=b).status_code == 403
            assert c.post("/subscriptions", json=row, headers=b).status_code == 403
            assert c.delete("/subscriptions/80", headers=b).status_code == 403
            mine = c.get("/subscriptions", headers=a).json()["subscriptions"]
            assert [r["id"] for r in mine] == [80]
            assert c.get("/subscriptions", headers=b).json()["subscriptions"] == []
    with server.client() as c:
        assert c.put("/subscriptions/80/location", json=other, headers=a).status_code == 200
        assert c.delete("/subscriptions/80", headers=a).status_code == 200


def test_sets_expire_as_points_do(sets_server: Server, andorra: RoadNetwork,
                                  tweets: list[list[str]]) -> None:
    """A route subscription with ``expires_at`` gets no message whose time is at or after
    it, and the first publish after the server's clock passes it removes it."""
    import time

    word = tweets[0][0]
    expires = time.time() + 4.0
    row = {"id": 90, "keywords": [word], "alpha": 0.5, "tau": 0.2, "expires_at": expires,
           "geometry": _route(andorra, 10, 400)}
    with sets_server.client() as c:
        assert c.post("/subscriptions", json=row).status_code == 201
        seg = c.get("/subscriptions/90").json()["geometry"]["segments"][0]
        msg = {"keywords": [word], "u": seg["u"], "v": seg["v"], "offset": seg["end_m"]}
        now = c.post("/messages", json={**msg, "id": 1}).json()["deliveries"]
        assert [d["subscription_id"] for d in now] == [90]
        late = c.post("/messages", json={**msg, "id": 2, "time": expires}).json()
        assert late["deliveries"] == []
        assert c.get("/subscriptions/90").status_code == 200  # a message's time purges not
        while time.time() <= expires + 0.2:
            time.sleep(0.1)
        assert c.post("/messages", json={**msg, "id": 3}).json()["deliveries"] == []
        assert c.get("/subscriptions/90").status_code == 404


def test_set_deliveries_reach_websocket_readers(sets_server: Server, andorra: RoadNetwork,
                                                tweets: list[list[str]]) -> None:
    """A route subscription's deliveries reach a WebSocket reader of its own stream as
    they are matched (the delivery object of the publish's answer, seq included), and
    again from the durable stream after kill -9 (resumed with ``after=``)."""
    import json

    import websockets.sync.client as websockets_sync

    word = tweets[0][0]
    server = sets_server
    url = server.url.replace("http", "ws") + "/deliveries?subscription=7&after=0"
    with server.client() as c:
        row = {"id": 7, "keywords": [word], "alpha": 0.5, "tau": 0.2,
               "geometry": _route(andorra, 10, 400)}
        assert c.post("/subscriptions", json=row).status_code == 201
        # a point subscription beside it: the reader of 7 must not get its deliveries
        seg = c.get("/subscriptions/7").json()["geometry"]["segments"][1]
        point = {"id": 8, "keywords": [word], "alpha": 0.5, "tau": 0.2, "u": seg["u"],
                 "v": seg["v"], "offset": seg["start_m"]}
        assert c.post("/subscriptions", json=point).status_code == 201
        with websockets_sync.connect(url, open_timeout=30) as ws:
            msg = {"id": 1, "keywords": [word], "u": seg["u"], "v": seg["v"],
                   "offset": seg["start_m"]}
            answer = c.post("/messages", json=msg).json()["deliveries"]
            assert {d["subscription_id"] for d in answer} == {7, 8}
            mine = [d for d in answer if d["subscription_id"] == 7]
            assert json.loads(ws.recv(timeout=30)) == mine[0]
    server.kill()
    server.start()
    with websockets_sync.connect(url, open_timeout=30) as ws:
        assert json.loads(ws.recv(timeout=30)) == mine[0]
        try:
            extra = ws.recv(timeout=1)
        except TimeoutError:
            extra = None
        assert extra is None, extra


def test_serve_set_limit_flags(andorra: RoadNetwork, tweets: list[list[str]],
                               tmp_path: Path, servers: list[Server]) -> None:
    """``serve --set-max-points/--set-max-pieces/--set-batch-points`` lower the geometry
    limits of a real server: a geometry over each is refused with one 422 naming the row,
    the field and the limit, nothing applied, and one under them is taken; the served
    OpenAPI document states the lowered limit; a flag that is not a positive integer stops
    ``serve`` with one clear line (exit 2)."""
    import subprocess
    import sys

    folder = _folder(tmp_path, andorra, tweets, 3000.0)
    for flag, value in (("--set-max-points", "0"), ("--set-max-pieces", "-3"),
                        ("--set-batch-points", "many")):
        done = subprocess.run([sys.executable, "-m", "roadpubsub", "serve", "--state",
                               str(folder), "--quiet", flag, value],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert f"{flag}: must be a positive integer, got '{value}'" in done.stderr, \
            done.stderr
    server = Server(folder, "--set-max-points", "3", "--set-max-pieces", "4",
                    "--set-batch-points", "5")
    servers.append(server)
    server.start()
    net, word = andorra, tweets[0][0]
    nodes = _main_nodes(net)
    far = [[float(net.node_lon[i]), float(net.node_lat[i])] for i in nodes[[10, 400]]]
    row = {"id": 70, "keywords": [word], "alpha": 0.5, "tau": 0.2}
    three = {"type": "LineString", "coordinates": [far[0], far[0], far[1]]}
    with server.client() as c:
        r = c.post("/subscriptions", json={**row, "geometry": {
            "type": "LineString", "coordinates": [far[0]] * 3 + [far[1]]}})
        assert r.status_code == 422, r.text
        err = r.json()["error"]
        assert "id 70" in err and "field 'geometry'" in err and "limit of 3" in err, err
        r = c.post("/subscriptions", json={**row, "geometry": three})  # a long route
        assert r.status_code == 422, r.text
        err = r.json()["error"]
        assert "field 'geometry'" in err and "road pieces, more than the limit of 4" in err
        two = [{**row, "id": 71 + i, "geometry": three} for i in range(2)]  # 6 > 5
        r = c.post("/subscriptions", json=two)
        assert r.status_code == 422 and "more than the limit of 5" in r.json()["error"]
        assert c.get("/subscriptions/71").status_code == 404  # nothing applied
        e = int(np.flatnonzero(np.isin(net.edge_u, nodes) & (net.edge_u != net.edge_v))[0])
        short = {"type": "NodePath", "nodes": [int(net.node_ids[net.edge_u[e]]),
                                               int(net.node_ids[net.edge_v[e]])]}
        assert c.post("/subscriptions", json={**row, "geometry": short}).status_code == 201
        # the served description states the limit the service applies, not the default
        doc = c.get("/openapi.json").json()
        shapes = doc["components"]["schemas"]["Subscription"]["properties"]["geometry"]
        limits = [x["properties"][k]["maxItems"] for x in shapes["oneOf"][1:]
                  for k in ("coordinates", "nodes") if "maxItems" in x["properties"].get(k, {})]
        assert limits == [3, 3], limits
