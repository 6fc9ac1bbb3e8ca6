"""A real service folder with two snapshots, a log of ~400 records in two segments,
deliveries and top-k segments, made by a real server (shared by the integrity tests)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from live import Server, message_rows, subscription_rows

from roadpubsub.index.workload import Workload
from roadpubsub.roadnet.network import RoadNetwork

#: Records of the first server run (then a clean stop: the snapshot of seq FIRST_RUN).
FIRST_RUN = 300
#: Records of the second run (then SIGKILL: they stay in the newest log segment).
SECOND_RUN = 100


def make_folder(template: Path, target: Path, workload: Workload, network: RoadNetwork
                ) -> dict[str, Any]:
    """Copy ``template`` to ``target`` and fill it; returns what was acknowledged
    (``acked``: seq -> (kind, message id or subscription id))."""
    shutil.copytree(template, target)
    subs = subscription_rows(workload, network)
    msgs = message_rows(workload, network)
    acked: dict[int, tuple[str, int]] = {}
    k_sub = k_msg = 0

    def run(n: int, server: Server) -> None:
        nonlocal k_sub, k_msg
        with server.client() as c:
            for i in range(n):
                if i % 3 == 0:
                    row = dict(subs[k_sub])
                    if k_sub % 10 == 0:  # a few top-k subscriptions: top-k segments too
                        row.update(kind="topk", k=3, tau=None)
                    k_sub += 1
                    r = c.post("/subscriptions", json=row)
                    assert r.status_code in (200, 201), r.text
                    acked[r.json()["seq"]] = ("subscribe", row["id"])
                else:
                    row = msgs[k_msg]
                    k_msg += 1
                    r = c.post("/messages", json=row)
                    assert r.status_code in (200, 201), r.text
                    acked[r.json()["seq"]] = ("publish", row["id"])

    first = Server(target, "--flush-every", "15", "--snapshot-every", "100000")
    first.start()
    try:
        run(FIRST_RUN, first)
    finally:
        first.stop()
    second = Server(target, "--flush-every", "15", "--snapshot-every", "100000")
    second.start()
    try:
        run(SECOND_RUN, second)
    finally:
        second.kill()
    return {"acked": acked}
