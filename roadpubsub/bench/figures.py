"""The figures suite: the sweeps of the paper's Figs. 5-9 (see :mod:`roadpubsub.bench`)."""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from roadpubsub.bench.config import SWEEPS, BenchConfig
from roadpubsub.bench.machine import machine_info, max_rss_mib
from roadpubsub.bench.measure import measure_point, warm_up
from roadpubsub.bench.plots import plot_figures
from roadpubsub.bench.workloads import (
    pool_messages,
    pool_subscriptions,
    prepare,
    subsample_keywords,
    with_keywords,
    with_params,
)
from roadpubsub.networks import describe_network
from roadpubsub.outputs import write_json
from roadpubsub.progress import Steps

if TYPE_CHECKING:
    from roadpubsub.index.model import Messages, Subscriptions

__all__ = ["run_figures"]

PathLike = str | os.PathLike[str]


@dataclass
class _Pools:
    """The workloads a sweep point draws from."""

    base_subscriptions: Subscriptions
    default_subscriptions: Subscriptions
    messages: Messages
    sub_keywords: dict[int, Subscriptions] = field(default_factory=dict)
    msg_keywords: dict[int, Messages] = field(default_factory=dict)

    def at(self, sweep: str, value: float) -> tuple[Subscriptions, Messages]:
        """Subscriptions and messages of one sweep point."""
        subs, msgs = self.default_subscriptions, self.messages
        if sweep == "subscriptions":
            subs = self.base_subscriptions.take(np.arange(int(value)))
        elif sweep == "sub_keywords":
            subs = self.sub_keywords[int(value)]
        elif sweep == "msg_keywords":
            msgs = self.msg_keywords[int(value)]
        elif sweep == "alpha":
            subs = with_params(subs, alpha=float(value))
        else:
            subs = with_params(subs, tau=float(value))
        return subs, msgs


def run_figures(
    config: BenchConfig,
    *,
    out_dir: PathLike | None = "roadpubsub-bench",
    scale: str | None = None,
    quiet: bool = False,
) -> dict[str, Any]:
    """Run the sweeps of Figs. 5-9; write ``bench.json`` and the figures to ``out_dir``.

    Parameters
    ----------
    config
        What to run (see :data:`SCALES` for presets).
    out_dir
        Output folder (None writes nothing).
    scale
        Name of the preset, recorded in the JSON.
    quiet
        No progress on stderr.

    Returns
    -------
    dict
        The JSON document (see the module docstring); ``files`` lists what was written.
    """
    config.check()
    t_start = time.perf_counter()
    points_total = sum(len(config.values(s)) for s in config.sweeps)
    steps = Steps(5, quiet=quiet)
    prep = prepare(config.network, config.keywords_from, config.tweets,
                   config.cell_capacity, config.dmax_m, steps)
    network, spatial, source, dmax = prep.network, prep.spatial, prep.source, prep.dmax_m

    rng = np.random.default_rng(config.seed)
    pool_info: dict[str, Any] = {}
    n_default = config.n_subscriptions
    with steps.step("workload", "generating the workloads") as info:
        n_base = max((*config.subscription_counts, n_default)
                     if "subscriptions" in config.sweeps else (n_default,))
        base_subs, base_msgs, weights = source.generate(
            network, n_subscriptions=n_base, n_messages=config.n_messages, seed=config.seed)
        default_subs = base_subs.take(np.arange(n_default))
        pools = _Pools(base_subs, default_subs, base_msgs)
        if "sub_keywords" in config.sweeps:
            kmax = max(config.sub_keywords)
            pool, distinct = pool_subscriptions(source, network, n_default, kmax, config.seed)
            csr = subsample_keywords(pool.kw_ptr, pool.kw_terms, config.sub_keywords, rng)
            pools.sub_keywords = {k: with_keywords(pool, c) for k, c in csr.items()}
            pool_info["sub_keywords"] = {"rows": len(pool), "distinct_rows": distinct,
                                         "min_keywords_of_source_rows": kmax}
        if "msg_keywords" in config.sweeps:
            from roadpubsub.index.model import Messages

            kmax = max(config.msg_keywords)
            mpool, distinct = pool_messages(source, network, config.n_messages, kmax,
                                             config.seed)
            csr = subsample_keywords(mpool.kw_ptr, mpool.kw_terms, config.msg_keywords, rng)
            pools.msg_keywords = {k: Messages(mpool.ids, mpool.points, c[0], c[1])
                                  for k, c in csr.items()}
            pool_info["msg_keywords"] = {"rows": len(mpool), "distinct_rows": distinct,
                                         "min_keywords_of_source_rows": kmax}
        info["note"] = f"{n_base:,} subscriptions, {config.n_messages:,} messages"

    with steps.step("sweeps", f"{points_total} sweep points x (EIA, BIA, brute)") as info:
        warm = warm_up(spatial, default_subs, base_msgs, weights, dmax)
        sweeps: dict[str, Any] = {}
        all_agree = True
        with steps.bar(points_total, "points", unit="pt") as bar:
            for sweep in config.sweeps:
                label, figure = SWEEPS[sweep]
                points = []
                for value in config.values(sweep):
                    bar.set_postfix_str(f"{sweep}={value:g}")
                    subs, msgs = pools.at(sweep, value)
                    result = measure_point(spatial, subs, msgs, weights, dmax_m=dmax,
                                           n_brute=config.n_brute, repeats=config.repeats)
                    all_agree = all_agree and result["agree"] is not False
                    points.append({
                        "value": value,
                        "subscriptions": len(subs),
                        "messages": len(msgs),
                        "mean_subscription_keywords": round(float(np.diff(subs.kw_ptr).mean()),
                                                            3),
                        "mean_message_keywords": round(float(np.diff(msgs.kw_ptr).mean()), 3),
                        **result,
                    })
                    bar.update(1)
                sweeps[sweep] = {"label": label, "figure": figure, "points": points}
        info["note"] = f"warm-up {warm:.1f} s; " + (
            "EIA, BIA and brute agree everywhere" if all_agree else "MISMATCH")

    doc: dict[str, Any] = {
        "suite": "figures",
        "scale": scale,
        "config": asdict(config),
        "machine": machine_info(),
        "network": describe_network(network, prep.path),
        "cells": prep.cells,
        "dmax_m": dmax,
        "workload": {**source.description, "alpha": "0.5 +- 0.1 unless swept",
                     "tau": "0.7 +- 0.1 unless swept", "subscription_keywords": "1-5 unless swept",
                     "message_keywords": "5-25 unless swept", "vocabulary": len(weights),
                     "pools": pool_info},
        "timing_notes": ("seconds: median of `repeats` timed runs of the matching call for "
                         "eia/bia over all messages, one run for brute over the first "
                         "n_brute messages; kernels warmed up; index build excluded"),
        "all_agree": all_agree,
        "sweeps": sweeps,
        "seconds": steps.rounded(t_start),
        "max_rss_mib": max_rss_mib(),
        "files": {},
    }
    if out_dir is not None:
        out = Path(out_dir)
        figures = plot_figures(doc, out)
        doc["files"] = {"json": str(out / "bench.json"),
                        **{k: str(v) for k, v in figures.items()}}
        write_json(out / "bench.json", doc)
    return doc
