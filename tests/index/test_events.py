"""The body parser (roadpubsub.index.events) checks everything that reaches the log (issue 29): text
that encodes as UTF-8, keyword counts and lengths after normalisation, number and time
ranges, row counts; errors name the row and the field and quote values shortened."""

from __future__ import annotations

from typing import Any

import pytest

from roadpubsub.index.events import BodyParser, RequestError
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.roadnet.settings import DEFAULTS


@pytest.fixture(scope="module")
def parser(tiny: RoadNetwork) -> BodyParser:
    return BodyParser(tiny, max_snap_m=250.0, kinds=True, dmax_m=1000.0)


def _sub(**fields: Any) -> dict[str, Any]:
    return {"id": 1, "keywords": ["delayed"], "alpha": 0.5, "tau": 0.2, "u": 10, "v": 20,
            "offset": 5.0, **fields}


def _msg(**fields: Any) -> dict[str, Any]:
    return {"id": 1, "keywords": ["delayed"], "u": 10, "v": 20, "offset": 5.0, **fields}


def test_the_mqtt_choice_is_kept_per_row(parser: BodyParser) -> None:
    batch = parser.subscriptions([_sub(id=1, mqtt=True), _sub(id=2, mqtt=False), _sub(id=3),
                                  _sub(id=4, mqtt=None)])
    assert batch.mqtt is not None and batch.mqtt.tolist() == [1, 0, -1, -1]
    assert parser.subscriptions([_sub(), _sub(id=2, mqtt=None)]).mqtt is None


def test_valid_bodies_pass(parser: BodyParser) -> None:
    long = "\u00e9" * 128  # 256 UTF-8 bytes: at the limit
    batch = parser.subscriptions([_sub(keywords=[long] * DEFAULTS.max_keywords),
                                  _sub(id=2, expires_at=DEFAULTS.time_max)])
    assert len(batch) == 2 and batch.keywords[0][0] == long
    assert parser.messages(_msg(time=0.0)).time[0] == 0.0


@pytest.mark.parametrize(("body", "says"), [
    (_sub(keywords=["\ud800"]), "field 'keywords': keyword '\\ud800' is not valid Unicode"),
    (_sub(keywords=["ok", "a\udfffb"]), "not valid Unicode"),
    (_sub(keywords=["k" * 257]), "257 UTF-8 bytes long, more than the limit of 256"),
    (_sub(keywords=["\u0130" * 100]), "300 UTF-8 bytes long"),  # 200 bytes, 300 folded
    (_sub(keywords=[f"w{i}" for i in range(65)]), "at most 64 keywords, got 65"),
    (_sub(keywords=[["nested"]]), "non-empty list of non-empty strings"),
    (_sub(expires_at=1e308), "field 'expires_at' must lie in [0, 253402300799]"),
    (_sub(expires_at=-1), "field 'expires_at' must lie in"),
    (_sub(id=2**63), "field 'id' must be a 64-bit integer"),
    (_sub(u=10**400), "fields 'u', 'v' must be node ids"),
    (_sub(offset=10**400), "'offset' a finite number"),
    (_sub(alpha=float("nan")), "field 'alpha' must be a finite number"),
    (_sub(kind="topk", tau=None, k=1e300), "field 'k' of a topk subscription"),
    (_sub(kind="boolean", alpha=None, tau=None, radius=1e308), "field 'radius'"),
    (_sub(**{"\ud800": 1}), "unknown field(s) '\\ud800'"),
    (_sub(mqtt="yes"), "field 'mqtt' must be true or false, got 'yes'"),
    (_sub(mqtt=1), "field 'mqtt' must be true or false, got 1"),
    (_sub(mqtt=[True]), "field 'mqtt' must be true or false"),
])
def test_bad_subscriptions_name_the_field(parser: BodyParser, body: dict[str, Any],
                                          says: str) -> None:
    with pytest.raises(RequestError) as err:
        parser.subscriptions(body)
    assert err.value.status == 422
    assert "row 0 (id " in str(err.value) and says in str(err.value), str(err.value)


@pytest.mark.parametrize(("body", "says"), [
    (_msg(time=1e308), "field 'time' must lie in [0, 253402300799]"),
    (_msg(time=float("inf")), "field 'time' must be a finite number"),
    (_msg(time=-0.5), "field 'time' must lie in"),
    (_msg(time=10**400), "field 'time' must be a finite number"),
    (_msg(keywords=["\ud800"]), "not valid Unicode"),
    ({"id": 1, "keywords": ["a"], "lon": 1e308, "lat": 0.0}, "fields 'lon', 'lat'"),
])
def test_bad_messages_name_the_field(parser: BodyParser, body: dict[str, Any],
                                     says: str) -> None:
    with pytest.raises(RequestError) as err:
        parser.messages(body)
    assert says in str(err.value), str(err.value)


def test_values_are_quoted_shortened(parser: BodyParser) -> None:
    deep: Any = "x" * 10_000
    for _ in range(30):
        deep = [deep]
    with pytest.raises(RequestError) as err:
        parser.subscriptions(_sub(id=deep, keywords="k" * 100_000))
    assert len(str(err.value)) < 1000, len(str(err.value))


@pytest.mark.parametrize("body", [5, None, "text", [1, 2], [_msg(), 3]])
def test_bodies_that_are_not_objects_are_400(parser: BodyParser, body: Any) -> None:
    with pytest.raises(RequestError) as err:
        parser.messages(body)
    assert err.value.status == 400 and "must be a message object" in str(err.value)


def test_limits_are_options(tiny: RoadNetwork) -> None:
    strict = BodyParser(tiny, max_snap_m=250.0, max_keywords=2, max_keyword_bytes=4,
                        max_batch_rows=2, time_min=100.0, time_max=200.0)
    with pytest.raises(RequestError, match="at most 2 keywords"):
        strict.messages(_msg(keywords=["a", "b", "c"]))
    with pytest.raises(RequestError, match="limit of 4"):
        strict.messages(_msg(keywords=["abcde"]))
    with pytest.raises(RequestError, match="at most 2 rows") as err:
        strict.messages([_msg(id=i) for i in range(3)])
    assert err.value.status == 413
    with pytest.raises(RequestError, match=r"\[100, 200\]"):
        strict.messages(_msg(time=99.0))
    with pytest.raises(ValueError, match="max_keywords"):
        BodyParser(tiny, max_snap_m=250.0, max_keywords=0)


def test_plain_move_batches_equal_the_general_path(andorra: RoadNetwork) -> None:
    """A batch of plain ``{id, u, v, offset}`` rows (a fleet's reports, read a column at
    a time) gives what the rows give one by one; anything else in it takes the general
    path and is refused by name."""
    import numpy as np

    parser = BodyParser(andorra, max_snap_m=250.0)
    rng = np.random.default_rng(3)
    edges = rng.integers(0, andorra.n_edges, 300)
    nid = andorra.node_ids
    rows: list[dict[str, Any]] = []
    for k, e in enumerate(edges.tolist()):
        length = float(andorra.edge_length[e])
        off: Any = int(length // 2) if k % 7 == 0 else float(rng.random() * length)
        u, v = int(nid[andorra.edge_u[e]]), int(nid[andorra.edge_v[e]])
        if k % 3 == 0:  # named backwards: the offset counts from the other end
            u, v = v, u
        rows.append({"id": 2**62 + k if k % 5 == 0 else k, "u": u, "v": v, "offset": off})
    batch = parser.moves(rows)
    one = [parser.moves(r) for r in rows]  # an object body: the general path
    assert batch.sets is None and batch.points.edge.dtype == one[0].points.edge.dtype
    assert batch.ids.tolist() == [b.ids[0] for b in one]
    assert batch.points.edge.tolist() == [b.points.edge[0] for b in one]
    assert batch.points.offset.tolist() == [b.points.offset[0] for b in one]
    for bad, says in [({"id": True}, "field 'id'"), ({"u": 1.5}, "fields 'u', 'v'"),
                      ({"offset": float("nan")}, "offset"), ({"id": 2**63}, "field 'id'"),
                      ({"u": 1}, "u"), ({"offset": 10**400}, "offset"),
                      ({"id": rows[0]["id"]}, "duplicate ids"), ({"lon": 1.5}, "row 9")]:
        with pytest.raises(RequestError, match=says):
            parser.moves([*rows[:9], {**rows[9], **bad}, *rows[10:]])


def test_small_batches_name_their_repeated_ids(andorra: RoadNetwork) -> None:
    """A run of a few requests parsed together (the apply thread's groups) still names an
    id given twice, whichever way the repeats are looked for."""
    parser = BodyParser(andorra, max_snap_m=250.0)
    nid = andorra.node_ids
    u, v = int(nid[andorra.edge_u[0]]), int(nid[andorra.edge_v[0]])
    rows = [{"id": i, "u": u, "v": v, "offset": 0.0} for i in (5, 6, 5)]
    with pytest.raises(RequestError, match=r"duplicate ids in the batch: \[5\]"):
        parser.moves(rows)
    assert parser.moves(rows[:2]).ids.tolist() == [5, 6]
    msgs = [{"id": i, "u": u, "v": v, "offset": 0.0, "keywords": ["a"]} for i in (9, 9)]
    with pytest.raises(RequestError, match=r"duplicate ids in the batch: \[9\]"):
        parser.messages(msgs)
    assert parser.messages(msgs[:1]).ids.tolist() == [9]


def test_message_batches_locate_as_one_by_one(andorra: RoadNetwork) -> None:
    """Messages located together (every row by u, v, or some by lon/lat) get the points
    each gets alone, in their order."""
    import numpy as np

    parser = BodyParser(andorra, max_snap_m=250.0)
    nid = andorra.node_ids
    rows: list[dict[str, Any]] = []
    for k, e in enumerate([3, 40, 7, 500, 41]):
        u, v = int(nid[andorra.edge_u[e]]), int(nid[andorra.edge_v[e]])
        rows.append({"id": k, "u": v if k % 2 else u, "v": u if k % 2 else v,
                     "offset": float(andorra.edge_length[e]) / 3, "keywords": ["a"]})
    lonlat = {"id": 9, "lon": 1.5218, "lat": 42.5063, "keywords": ["b"]}
    for batch_rows in (rows, [*rows[:2], lonlat, *rows[2:]]):
        batch = parser.messages(batch_rows)
        alone = [parser.messages(r) for r in batch_rows]
        assert batch.points.edge.dtype == np.int32
        assert batch.points.edge.tolist() == [b.points.edge[0] for b in alone]
        assert batch.points.offset.tolist() == [b.points.offset[0] for b in alone]


def test_kind_rules_hold_for_one_row_and_for_batches(parser: BodyParser) -> None:
    """Good rows of every kind pass alone and together; a row breaking a rule of its kind
    is named whether it comes alone or after good rows."""
    good = [_sub(), _sub(id=2, kind="boolean", alpha=None, tau=None, radius=50.0),
            _sub(id=3, kind="topk", tau=None, k=3)]
    batch = parser.subscriptions(good)
    assert batch.kind.tolist() == [0, 1, 2] and batch.radius[1] == 50.0 and batch.k[2] == 3
    for row in good:
        assert len(parser.subscriptions(row)) == 1
    for bad, says in [(_sub(id=4, tau=None), "field 'tau' of a threshold subscription"),
                      (_sub(id=4, kind="boolean", tau=None, radius=5.0),
                       "field 'alpha' of a boolean subscription"),
                      (_sub(id=4, kind="topk", tau=None), "field 'k' of a topk")]:
        for body, row in ((bad, 0), ([*good, bad], 3)):
            with pytest.raises(RequestError, match=f"row {row} .*{says}"):
                parser.subscriptions(body)
