"""serve's kernel warm-up: it runs the matcher and a move's limits once and changes
nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from live import subscription_rows

import roadpubsub.index.base as base_module
import roadpubsub.index.delta as delta_module
import roadpubsub.index.limits as limits_module
import roadpubsub.pruning.indexed as indexed_module
from roadpubsub.index.events import BodyParser
from roadpubsub.index.workload import Workload
from roadpubsub.roadnet.network import RoadNetwork
from roadpubsub.service.options import ServiceOptions
from roadpubsub.service.state import ServiceState
from roadpubsub.service.warmup import warm_kernels


def test_warm_up_matches_once_and_changes_nothing(service_dir: Path, workload: Workload,
                                                  andorra: RoadNetwork,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    limit_calls: list[int] = []
    limits = limits_module.subscription_limits

    def counted(alpha: Any, *args: Any, **kwargs: Any) -> Any:
        limit_calls.append(len(alpha))
        return limits(alpha, *args, **kwargs)

    lap_calls: list[int] = []
    lap = limits_module.location_aware_prefixes

    def counted_lap(subs: Any, *args: Any, **kwargs: Any) -> Any:
        lap_calls.append(len(subs))
        return lap(subs, *args, **kwargs)

    parser = BodyParser(andorra, max_snap_m=250.0)
    state = ServiceState.open(service_dir, ServiceOptions(fsync=False))
    try:
        state.subscribe(parser.subscriptions(subscription_rows(workload, andorra)[:300]))
        seq, counts = state.wal.next_seq, dict(state.counts)
        rows = state.subscription_rows(state.index.subscriptions().ids[:50])
        state.matcher.last_timing = None
        for module in (limits_module, base_module):
            monkeypatch.setattr(module, "subscription_limits", counted)
        monkeypatch.setattr(limits_module, "location_aware_prefixes", counted_lap)
        kernel_calls: list[str] = []
        for module, name in ((base_module, "lookup_kernel"),
                             (delta_module, "relocate_kernel")):
            real = getattr(module, name)
            monkeypatch.setattr(module, name, lambda *a, _r=real, _n=name: (
                kernel_calls.append(_n), _r(*a))[1])
        orders: list[int] = []
        order = indexed_module.spatial_order
        monkeypatch.setattr(indexed_module, "spatial_order",
                            lambda x, y: (orders.append(len(x)), order(x, y))[1])
        version, delta = state.index.version, len(state.index.delta)
        assert warm_kernels(state, parser) >= 0.0
        assert 2 in orders  # a group's Hilbert order ran (compiled on a first start)
        # a move's compiled lookup and write ran (on no row of the state: nothing moved;
        # then on the throwaway copies)
        assert kernel_calls[:2] == ["lookup_kernel", "relocate_kernel"]
        assert (state.index.version, len(state.index.delta)) == (version, delta)
        assert state.matcher.last_timing is not None  # the matcher ran
        # a move's limits on one made-up row first, then the copies' rows: never the
        # state's 300
        assert limit_calls[0] == 1 and max(limit_calls) <= 2, limit_calls
        assert lap_calls == [1]  # LAP, which a compaction's rebuild compiles otherwise
        assert (state.wal.next_seq, state.counts) == (seq, counts)
        assert state.subscription_rows(state.index.subscriptions().ids[:50]) == rows
        assert len(state.messages) == 0 and state.delivered == 0
    finally:
        state.close()


def test_warm_up_runs_every_kind_on_copies(service_dir: Path, workload: Workload,
                                           andorra: RoadNetwork,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Each kind's first subscribe, publish, move and unsubscribe compiled at that event
    on a first start (22 s for a first publish with boolean and top-k subscriptions on
    Rome): the warm-up runs them on throwaway copies, and the state's own kinds stay
    empty."""
    import roadpubsub.pruning.live_kinds as kinds_module
    import roadpubsub.pruning.live_topk as topk_module
    import roadpubsub.service.answers as answers_module

    ran: list[str] = []

    def spy(owner: Any, name: str) -> None:
        real = getattr(owner, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            ran.append(name)
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)

    parser = BodyParser(andorra, max_snap_m=250.0)
    state = ServiceState.open(service_dir, ServiceOptions(fsync=False))
    try:
        state.subscribe(parser.subscriptions(subscription_rows(workload, andorra)[:100]))
        before = (len(state.index.subscriptions()), len(state.index.delta),
                  len(state.boolean), len(state.topk), state.topk.arrivals,
                  state.wal.next_seq)
        spy(kinds_module.LiveBoolean, "match")
        spy(topk_module.LiveTopk, "push")
        spy(topk_module.LiveTopk, "withdraw")
        spy(base_module.SubscriptionIndex, "unsubscribe")
        spy(delta_module.DeltaBuffer, "drop")
        spy(answers_module, "deliveries_bytes")
        assert warm_kernels(state, parser) >= 0.0
        assert {"match", "push", "withdraw", "unsubscribe", "drop",
                "deliveries_bytes"} <= set(ran), ran
        assert (len(state.index.subscriptions()), len(state.index.delta),
                len(state.boolean), len(state.topk), state.topk.arrivals,
                state.wal.next_seq) == before
    finally:
        state.close()
