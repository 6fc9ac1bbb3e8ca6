"""Answers written from the delivery columns equal the objects they stand for."""

from __future__ import annotations

import json

import numpy as np
import orjson
import pytest

from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.service.answers import DeliveryList, deliveries_bytes, dumps


def _objects(d: Deliveries) -> list[dict[str, object]]:
    return [{"message_id": m, "subscription_id": s, "distance": x, "score": y}
            for m, s, x, y in zip(d.message_id.tolist(), d.subscription_id.tolist(),
                                  d.distance.tolist(), d.score.tolist(), strict=True)]


@pytest.mark.parametrize("n", [0, 1, 2, 7, 1000])
def test_bytes_read_back_as_the_objects(n: int) -> None:
    rng = np.random.default_rng(n)
    extremes = np.array([0.0, 5e-324, 1e-300, 0.1, 1 / 3, 1e16, 1.7976931348623157e308,
                         2.5, 123456789.123456789])
    d = Deliveries(rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64),
                   rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64),
                   rng.choice(extremes, n) * rng.random(n) if n else np.empty(0),
                   rng.choice(extremes, n) if n else np.empty(0))
    got = json.loads(dumps({"deliveries": DeliveryList(d), "seq": 5, "duplicates": [1]}))
    assert got == {"deliveries": _objects(d), "seq": 5, "duplicates": [1]}
    # bit-identical doubles, not only equal ones
    back = np.array([r["distance"] for r in got["deliveries"]], dtype=np.float64)
    assert back.tobytes() == d.distance.astype(np.float64).tobytes()
    # the bytes orjson writes for the objects, with and without sequence numbers
    assert deliveries_bytes(d) == orjson.dumps(_objects(d))
    seq = rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64)
    if n:
        seq[:2] = [-2**63, 2**63 - 1][:n]
    assert deliveries_bytes(d, seq) == orjson.dumps(
        [{"seq": q, **o} for q, o in zip(seq.tolist(), _objects(d), strict=True)])


def test_delivery_list_is_the_objects_to_python() -> None:
    d = Deliveries(np.array([3, 3]), np.array([10, 11]), np.array([1.5, 2.0]),
                   np.array([0.75, 0.5]))
    lst = DeliveryList(d)
    assert len(lst) == 2 and lst[1]["subscription_id"] == 11
    assert lst == _objects(d) and list(lst) == _objects(d)
    with pytest.raises(TypeError, match="not JSON serializable"):
        dumps({"x": object()})
