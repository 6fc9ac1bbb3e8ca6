"""``python -m roadpubsub.bench_kinds``' boolean part, tiny, on Andorra: the interleaved
rounds cover every message, and the index agrees with the reference (not timed)."""

from __future__ import annotations

from roadpubsub.bench_kinds import boolean_benchmark
from roadpubsub.index.spatial import SpatialIndex


def test_boolean_benchmark_agrees_with_the_reference(andorra) -> None:
    out = boolean_benchmark(andorra, SpatialIndex.build(andorra), n_subs=3000, n_messages=30,
                            n_reference=9, dmax_m=5000.0, rounds=3)
    assert out["identical"] is True
    assert out["deliveries_per_message"] > 1
    assert len(out["speedup_rounds"]) == 3
    assert out["index_msg_per_s"] > 0 and out["reference_msg_per_s"] > 0
    assert 0 < out["floor_settled_per_message"] <= out["index_settled_per_message"]
