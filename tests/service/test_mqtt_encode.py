"""The connector's bulk encoding of deliveries equals encoding them one by one."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.service.mqtt import delivery_payloads
from roadpubsub.service.mqtt_wire import publish1, publish_packet, split_packets
from roadpubsub.service.results import deliveries_json


def _deliveries(n: int, seed: int) -> Deliveries:
    rng = np.random.default_rng(seed)
    tricky = np.array([0.0, -0.0, 0.1 + 0.2, 1e-7, 1e22, 123456789.125, 5e-324,
                       1.7976931348623157e308, 2.0 / 3.0, 1e16])
    dist = np.concatenate([tricky, rng.random(n) * 10.0 ** rng.integers(-8, 9, n)])
    score = np.concatenate([tricky[::-1], rng.standard_normal(n)])
    m = dist.size
    return Deliveries(np.sort(rng.integers(-2**63, 2**63 - 1, m, dtype=np.int64)),
                      rng.integers(-2**63, 2**63 - 1, m, dtype=np.int64), dist, score)


@pytest.mark.parametrize("with_seq", [True, False])
def test_delivery_payloads_equal_one_dumps_each(with_seq: bool) -> None:
    d = _deliveries(2000, 7)
    seq = np.arange(10**12, 10**12 + len(d), dtype=np.int64) if with_seq else None
    got = delivery_payloads(d, seq, b"roadpubsub/deliveries/")
    want = [(b"roadpubsub/deliveries/%d" % r["subscription_id"], orjson.dumps(r))
            for r in deliveries_json(d, seq)]
    assert got == want
    assert delivery_payloads(Deliveries.empty(), None, b"x/") == []


def test_publish1_equals_publish_packet() -> None:
    for size in (0, 1, 100, 121, 122, 123, 127, 128, 16379, 16380, 16384, 70000, 3_000_000):
        topic, payload = b"roadpubsub/deliveries/42", b"x" * size
        for pid in (1, 255, 256, 65535):
            pkt = publish1(topic, payload, pid)
            assert pkt == publish_packet(topic, payload, pid)
            (first, body), = split_packets(bytearray(pkt))[0]
            assert first == 0x32 and body.endswith(payload)
