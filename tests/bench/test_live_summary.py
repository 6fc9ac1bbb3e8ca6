"""The live benchmark's summary: the ratios it reports between its arms."""

from __future__ import annotations

from typing import Any

from roadpubsub.bench.live import _summary


def _run(eps: float, cpu: float) -> dict[str, Any]:
    return {"events_per_second": eps, "server_cpu_us_per_request": cpu}


def test_trees_compared_when_every_arm_authenticates() -> None:
    """``--auth-only`` with ``--server-pythonpath``: the new tree's arm has its ratios to
    the old tree's (no arm without tokens to compare with)."""
    rows = _summary({("/old", True): [_run(100, 800), _run(110, 820)],
                     (None, True): [_run(120, 700), _run(121, 705)]})
    assert "events_per_second_ratio" not in rows[0]
    assert rows[1]["server"] == "this tree"
    assert rows[1]["events_per_second_ratio"] == round(120.5 / 105, 3)
    assert rows[1]["server_cpu_us_per_request_ratio_of_pairs"] == round(
        (700 / 800 + 705 / 820) / 2, 3)


def test_authentication_compared_within_a_tree() -> None:
    """``--auth``: the authenticated arm against the same tree's arm without tokens; an
    arm without tokens against the first tree's."""
    rows = _summary({("/old", False): [_run(100, 800)], ("/old", True): [_run(90, 880)],
                     (None, False): [_run(200, 400)], (None, True): [_run(150, 500)]})
    assert rows[1]["events_per_second_ratio"] == 0.9
    assert rows[3]["events_per_second_ratio"] == 0.75
    assert rows[2]["events_per_second_ratio"] == 2.0  # without tokens: to the first tree
