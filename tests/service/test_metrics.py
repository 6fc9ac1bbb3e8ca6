"""The service-wide figures of :mod:`roadpubsub.service.metrics`: the garbage collector's
pauses, counted for every service (HTTP only too), and no callback left behind."""

from __future__ import annotations

import gc
from typing import Any

from live import subscription_rows

from roadpubsub.bench.fleet import _metrics
from roadpubsub.index.workload import Workload
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.service.metrics import GcPauses


def test_gc_pauses_count_while_installed_and_leave_no_callback() -> None:
    before = list(gc.callbacks)
    pauses = GcPauses()
    pauses.install()
    pauses.install()  # a second install adds nothing
    assert gc.callbacks.count(pauses) == 1
    gc.collect()
    assert pauses.count[2] >= 1 and pauses.seconds[2] > 0
    assert pauses.longest[2] <= pauses.seconds[2]
    pauses.remove()
    pauses.remove()  # nor does a second remove fail
    assert gc.callbacks == before
    counted = pauses.count[2]
    gc.collect()
    assert pauses.count[2] == counted  # removed: no longer counting, the figures kept
    text = "\n".join(pauses.lines())
    assert f'roadpubsub_gc_collections_total{{generation="2"}} {counted}' in text


def test_an_http_only_service_shows_its_collections(serve: Any, workload: Workload,
                                                    andorra: RoadNetwork) -> None:
    # the lowest young threshold allowed: a batch of rows parsed is many collections
    server = serve("--gc-threshold", "700")
    with server.client() as c:
        r = c.post("/subscriptions", json=subscription_rows(workload, andorra)[:500])
        assert r.status_code == 201, r.text
        m = _metrics(server.url)
    assert m['roadpubsub_gc_collections_total{generation="0"}'] > 0
    assert m['roadpubsub_gc_pause_seconds_total{generation="0"}'] > 0
    assert 'roadpubsub_gc_longest_pause_seconds{generation="2"}' in m
    assert m['roadpubsub_gc_threshold{generation="0"}'] == 700
