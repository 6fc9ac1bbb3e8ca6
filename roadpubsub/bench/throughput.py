"""The throughput suite: one large workload, messages per second of EIA, BIA and brute force.

The run is a fixed sequence of steps (workload, index builds, timing, latency, updates,
memory) plus the further workloads of :data:`SECTIONS`, each reported under its own JSON
key; to time another workload, append a :class:`Section` to that list.
"""

from __future__ import annotations

import os
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from roadpubsub.bench.config import ThroughputConfig
from roadpubsub.bench.machine import machine_info, max_rss_mib
from roadpubsub.bench.measure import (
    single_message_latency,
    update_latency,
    warm_up,
)
from roadpubsub.bench.workloads import Prepared, prepare
from roadpubsub.networks import describe_network
from roadpubsub.outputs import write_json
from roadpubsub.progress import Steps
from roadpubsub.records import (
    Matched,
    MethodResult,
    TimedMethod,
    brute_method,
    deliveries_agree,
    index_method,
    time_in_turns,
    timing_summary,
)
from roadpubsub.roadnet.errors import InputError

if TYPE_CHECKING:
    from roadpubsub.index.base import SubscriptionIndex
    from roadpubsub.index.model import Messages, Subscriptions
    from roadpubsub.index.spatial import SpatialIndex
    from roadpubsub.index.terms import TermWeights
    from roadpubsub.pruning.indexed import IndexMatcher

__all__ = ["SECTIONS", "Section", "Suite", "dense_workload", "ratio", "run_throughput",
           "threads_figures", "threads_line", "warm_lanes"]

PathLike = str | os.PathLike[str]
_MIB = 1024 * 1024


@dataclass
class Suite:
    """What the steps of one throughput run share.

    Attributes
    ----------
    config
        The run's parameters.
    prepared
        Network, cells and bounds, keyword source, Dmax.
    subscriptions, messages, weights
        The main workload.
    """

    config: ThroughputConfig
    prepared: Prepared
    subscriptions: Subscriptions
    messages: Messages
    weights: TermWeights
    steps: Steps
    rss: dict[str, float] = field(default_factory=dict)
    indexes: dict[str, SubscriptionIndex] = field(default_factory=dict)


@dataclass(frozen=True)
class Section:
    """A further workload of the suite, timed after the main one.

    Attributes
    ----------
    key
        Its key in the JSON (None there when the section is off).
    title
        Its progress line.
    enabled
        Whether a configuration runs it.
    run
        Runs it and returns its JSON section.
    note
        One line of its result for the progress output.
    """

    key: str
    title: str
    enabled: Callable[[ThroughputConfig], bool]
    run: Callable[[Suite], dict[str, Any]]
    note: Callable[[dict[str, Any]], str]


def ratio(results: dict[str, MethodResult], a: str, b: str) -> float | None:
    """Throughput of ``a`` over that of ``b`` (None unless both ran)."""
    if a in results and b in results:
        return round(results[a].messages_per_second / results[b].messages_per_second, 3)
    return None


def warm_lanes(matcher: IndexMatcher, messages: Messages) -> None:
    """Match enough of ``messages`` that every thread of ``matcher`` takes part, so that
    each thread's scratch arrays exist before any timing (one message uses one thread;
    a thread's first batch also pays the first touch of its arrays)."""
    matcher.match(messages.take(np.arange(min(len(messages), 16 * matcher.threads + 1))))


def threads_figures(results: dict[str, MethodResult], many: str = "eia",
                    one: str = "eia_1thread") -> dict[str, Any] | None:
    """How the threads of ``many`` did against one thread (``one``), from the runs'
    timings (medians): the speed-up; the serial part of a one-thread call and the
    speed-up it allows (Amdahl); the CPU time the threads took together over one
    thread's (above 1: they slow each other down, sharing caches and memory); the share
    of the parallel part the threads were busy (below 1: one waited for the other).
    None unless both ran with timings."""
    if many not in results or one not in results:
        return None
    t_many, t_one = results[many].extra.get("timing"), results[one].extra.get("timing")
    if not t_many or not t_one or t_one["wall_ms"] <= 0:
        return None
    n = len(t_many["lane_busy_ms"])
    serial = t_one["serial_ms"] / t_one["wall_ms"]
    parallel = t_many["wall_ms"] - t_many["serial_ms"]
    cpu_one = sum(t_one["lane_cpu_ms"])
    busy_many = sum(t_many["lane_busy_ms"])
    slowest = max(t_many["lane_cpu_ms"]) + t_many["serial_ms"]
    return {"threads": n, "speedup": ratio(results, many, one),
            "serial_share_1thread": round(serial, 4),
            "amdahl_bound": round(1.0 / (serial + (1.0 - serial) / n), 3),
            "serial_ms": t_many["serial_ms"],
            "lanes_cpu_over_1thread": (round(sum(t_many["lane_cpu_ms"]) / cpu_one, 3)
                                       if cpu_one > 0 else None),
            "lanes_busy_share": (round(busy_many / (n * parallel), 3)
                                 if parallel > 0 else None),
            "lanes_on_cpu_share": (round(sum(t_many["lane_cpu_ms"]) / busy_many, 3)
                                   if busy_many > 0 else None),
            "speedup_from_cpu_times": (round((cpu_one + t_one["serial_ms"]) / slowest, 3)
                                       if slowest > 0 else None)}


def threads_line(figures: dict[str, Any] | None, label: str = "EIA") -> str:
    """One line of :func:`threads_figures` for the progress and summary output."""
    if figures is None:
        return f"{label} threads: -"
    def pct(v: float | None) -> str:
        return f"{100 * v:.0f}%" if v is not None else "-"

    cpu = figures["lanes_cpu_over_1thread"]
    by_cpu = figures["speedup_from_cpu_times"]
    return (f"{label} {figures['threads']} threads / 1 thread {figures['speedup']:.2f}x, "
            + (f"{by_cpu:.2f}x" if by_cpu is not None else "-") + " from CPU times "
            f"(serial {100 * figures['serial_share_1thread']:.1f}% of a one-thread call: "
            f"bound {figures['amdahl_bound']:.2f}x; threads' CPU "
            + (f"{cpu:.2f}x" if cpu is not None else "-") + " one thread's; busy "
            + pct(figures["lanes_busy_share"]) + " of the parallel part, on a core "
            + pct(figures["lanes_on_cpu_share"]) + " of that)")


def _throughputs(results: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v['messages_per_second']:,.1f} msg/s" for k, v in results.items())


def _dense_section(suite: Suite) -> dict[str, Any]:
    return dense_workload(suite.prepared.spatial, suite.subscriptions, suite.messages,
                          suite.weights, suite.prepared.dmax_m, suite.config)


def _hotspots_section(suite: Suite) -> dict[str, Any]:
    return dense_workload(suite.prepared.spatial, suite.subscriptions, suite.messages,
                          suite.weights, suite.prepared.dmax_m, suite.config,
                          shape="hotspots")


def _ratio_point_section(suite: Suite) -> dict[str, Any]:
    """EIA and BIA on ``ratio_point`` subscriptions of the same workload, in turns."""
    from roadpubsub.index.bia import BasicIndex
    from roadpubsub.index.eia import EnhancedIndex
    from roadpubsub.pruning.indexed import IndexMatcher

    config = suite.config
    subs, _, weights = suite.prepared.source.generate(
        suite.prepared.network, n_subscriptions=config.ratio_point, n_messages=0,
        seed=config.seed, alpha=config.alpha, alpha_spread=config.alpha_spread,
        tau=config.tau, tau_spread=config.tau_spread)
    # The messages' keyword ids are the main workload's: the same corpus and seed give
    # the same vocabulary, which this checks.
    if weights.terms != suite.weights.terms:
        msg = "ratio point: the workload's vocabulary differs from the main one"
        raise InputError(msg)
    built: dict[str, dict[str, float]] = {}
    methods = []
    for cls in (EnhancedIndex, BasicIndex):
        t0 = time.perf_counter()
        index = cls(suite.prepared.spatial, subs, weights, dmax_m=suite.prepared.dmax_m)
        built[cls.kind] = {"seconds": round(time.perf_counter() - t0, 3),
                           "bytes_per_subscription": round(index.nbytes_per_subscription(),
                                                           1)}
        matcher = IndexMatcher(index, hilbert_order=config.hilbert_order,
                               threads=config.threads)
        warm_lanes(matcher, suite.messages)
        methods.append(index_method(cls.kind, matcher, suite.messages))
    results, last = time_in_turns(methods, config.repeats)
    n = len(suite.messages)
    return {"subscriptions": config.ratio_point, "messages": n, "build": built,
            "methods": {k: r.to_dict() for k, r in results.items()},
            "deliveries_per_message": round(len(last["eia"].deliveries) / n, 2),
            "ratios": {"eia_over_bia": ratio(results, "eia", "bia")},
            "agree": bool(deliveries_agree(last["eia"].deliveries,
                                           [last["bia"].deliveries]))}


_LOAD_CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
from roadpubsub.index.store import load_index
index = load_index(sys.argv[1])
seconds = time.perf_counter() - t0
# VmHWM, not ru_maxrss: a child forked from a large process inherits the parent's maxrss.
with open("/proc/self/status") as fh:
    hwm = [int(line.split()[1]) for line in fh if line.startswith("VmHWM")]
peak = hwm[0] / 1024 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "subscriptions": len(index.subs), "peak_rss_mib": peak}))
"""


def _save_load_section(suite: Suite) -> dict[str, Any]:
    """Save EIA, then load it in a fresh process (imports and kernel cache included)."""
    import json
    import subprocess
    import sys
    import tempfile

    index = suite.indexes["eia"]
    with tempfile.TemporaryDirectory(prefix="roadpubsub-bench-") as folder:
        path = Path(folder) / "eia.npz"
        t0 = time.perf_counter()
        index.save(path)
        saved = time.perf_counter() - t0
        size = path.stat().st_size
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", _LOAD_CHILD, str(path)],
                              capture_output=True, text=True, check=False, timeout=3600)
        wall = time.perf_counter() - t0
        if done.returncode != 0:
            msg = f"loading the saved index failed: {done.stderr.strip()[-500:]}"
            raise InputError(msg)
        child = json.loads(done.stdout.strip().splitlines()[-1])
    n = len(index.subs)
    return {"subscriptions": n, "save_seconds": round(saved, 3),
            "file_bytes": size, "file_bytes_per_subscription": round(size / n, 1),
            "load_seconds": round(child["seconds"], 3),
            "load_process_seconds": round(wall, 3),
            "load_peak_rss_mib": round(child["peak_rss_mib"], 1),
            "notes": ("load_seconds: load_index in a fresh process, from imports to the "
                      "index (file in the page cache, large arrays mapped copy-on-write, "
                      "every array checked); load_process_seconds: the whole child")}


#: The further workloads, in the order they run (each after the main timing).
SECTIONS: list[Section] = [
    Section("dense", "the dense workload (messages among crowds of subscribers)",
            lambda config: config.dense, _dense_section,
            lambda doc: _throughputs(doc["methods"])),
    Section("hotspots", "the hot-spots workload (tight crowds, alpha and tau over [0, 1])",
            lambda config: config.hotspots, _hotspots_section,
            lambda doc: _throughputs(doc["methods"])),
    Section("ratio_point", "EIA and BIA at the ratio point",
            lambda config: config.ratio_point > 0, _ratio_point_section,
            lambda doc: (f"{doc['subscriptions']:,} subscriptions: "
                         + _throughputs(doc["methods"])
                         + f"; EIA/BIA {doc['ratios']['eia_over_bia']}")),
    Section("save_load", "saving EIA and loading it in a fresh process",
            lambda config: config.save_load, _save_load_section,
            lambda doc: (f"save {doc['save_seconds']:.1f} s, "
                         f"{doc['file_bytes_per_subscription']:.0f} B/subscription, "
                         f"load {doc['load_seconds']:.1f} s")),
]


def run_throughput(
    config: ThroughputConfig,
    *,
    out_dir: PathLike | None = "roadpubsub-bench",
    quiet: bool = False,
) -> dict[str, Any]:
    """The headline benchmark: one big workload, messages/s of EIA, BIA and brute force.

    Writes ``throughput.json`` to ``out_dir`` (unless None) and returns its content: the
    machine, build times (cells, bounds, each architecture), peak RSS after each phase,
    traced build memory (``trace_memory``), index bytes per subscription, per-method
    throughput (median of ``repeats`` rounds in which the methods take turns), the
    latency of one-subscription updates (``update_ms``), the ratios ``eia_over_bia``,
    ``eia_over_brute``, and one key per :data:`SECTIONS` entry.
    """
    from roadpubsub.index.bia import BasicIndex
    from roadpubsub.index.eia import EnhancedIndex
    from roadpubsub.index.workload import keyword_histogram
    from roadpubsub.pruning.brute import BruteMatcher
    from roadpubsub.pruning.indexed import IndexMatcher

    if config.n_subscriptions < 1 or config.n_messages < 1 or config.n_brute < 0 \
            or config.repeats < 1:
        msg = "need n_subscriptions >= 1, n_messages >= 1, n_brute >= 0 and repeats >= 1"
        raise InputError(msg)
    t_start = time.perf_counter()
    steps = Steps(9 + len(SECTIONS), quiet=quiet)
    prep = prepare(config.network, config.keywords_from, config.tweets, config.cell_capacity,
                   config.dmax_m, steps)
    network, spatial, dmax = prep.network, prep.spatial, prep.dmax_m
    rss = {"after_spatial": max_rss_mib()}
    with steps.step("workload", f"generating {config.n_subscriptions:,} subscriptions and "
                                f"{config.n_messages:,} messages") as info:
        subs, msgs, weights = prep.source.generate(
            network, n_subscriptions=config.n_subscriptions, n_messages=config.n_messages,
            seed=config.seed, alpha=config.alpha, alpha_spread=config.alpha_spread,
            tau=config.tau, tau_spread=config.tau_spread)
        info["note"] = f"{len(weights):,} terms"
    rss["after_workload"] = max_rss_mib()
    suite = Suite(config, prep, subs, msgs, weights, steps, rss)

    builds: dict[str, dict[str, Any]] = {}
    brute_ids = msgs.ids[:min(config.n_brute, len(msgs))]
    indexes: dict[str, SubscriptionIndex] = {}
    matchers: dict[str, IndexMatcher] = {}
    brute: BruteMatcher | None = None
    with steps.step("indexes", "building EIA, BIA and the brute-force matcher") as info:
        warm = warm_up(spatial, subs, msgs, weights, dmax)
        for cls in (EnhancedIndex, BasicIndex):
            t0 = time.perf_counter()
            index = cls(spatial, subs, weights, dmax_m=dmax)
            build = time.perf_counter() - t0
            rss[f"after_{cls.kind}_build"] = max_rss_mib()
            builds[cls.kind] = {"seconds": round(build, 3),
                                "bytes_per_subscription":
                                    round(index.nbytes_per_subscription(), 1)}
            indexes[cls.kind] = index
            suite.indexes[cls.kind] = index
            matchers[cls.kind] = IndexMatcher(index, hilbert_order=config.hilbert_order,
                                              threads=config.threads)
            warm_lanes(matchers[cls.kind], msgs)
        matchers["eia_1thread"] = IndexMatcher(indexes["eia"],
                                               hilbert_order=config.hilbert_order, threads=1)
        warm_lanes(matchers["eia_1thread"], msgs)
        if brute_ids.size:
            t0 = time.perf_counter()
            brute = BruteMatcher(network, subs, weights, dmax_m=dmax)
            builds["brute"] = {"seconds": round(time.perf_counter() - t0, 3)}
        info["note"] = (f"warm-up {warm:.1f} s; " + ", ".join(
            f"{k} {v['seconds']:.1f} s" for k, v in builds.items()))

    methods: list[TimedMethod] = [index_method(k, m, msgs) for k, m in matchers.items()]
    if brute is not None:
        methods.append(brute_method(brute, msgs.take(np.arange(brute_ids.size)), chunk=5))
    agree: bool | None = None
    with steps.step("timing", f"{config.repeats} rounds of EIA, BIA ({len(msgs):,} messages) "
                              f"and brute force (the first {brute_ids.size})") as info:
        total = config.repeats * sum(m.messages for m in methods)
        with steps.bar(total, "match", unit="msg") as bar:
            results, last = time_in_turns(methods, config.repeats, progress=bar.update)
        if brute is not None:
            agree = deliveries_agree(last["brute"].deliveries,
                                     [last[k].deliveries for k in matchers],
                                     message_ids=brute_ids)
        info["note"] = _throughputs({k: r.to_dict() for k, r in results.items()})
        info["note"] += "; " + threads_line(threads_figures(results))
        if agree is not None:
            info["note"] += "; " + ("EIA, BIA and brute agree" if agree else "MISMATCH")
    del last
    rss["after_timing"] = max_rss_mib()

    with steps.step("latency", f"{min(config.latency_messages, len(msgs)):,} one-message "
                               "EIA calls") as info:
        if config.latency_messages > 0:
            lat = single_message_latency(matchers["eia_1thread"], msgs,
                                         config.latency_messages)
            results["eia"].extra["latency_ms"] = lat
            info["note"] = f"p50 {lat['p50']:.3f} ms, p99 {lat['p99']:.3f} ms"
        else:
            info["note"] = "skipped"
    del matchers["eia_1thread"]
    sections: dict[str, Any] = {}
    for section in SECTIONS:
        with steps.step(section.key, section.title) as info:
            sections[section.key] = None
            if section.enabled(config):
                sections[section.key] = section.run(suite)
                info["note"] = section.note(sections[section.key])
            else:
                info["note"] = f"skipped (--{section.key.replace('_', '-')} runs it)"
    with steps.step("updates", "one-subscription updates on each index") as info:
        for kind in matchers:
            results[kind].extra["update_ms"] = update_latency(indexes[kind], matchers[kind],
                                                              subs, msgs)
        info["note"] = ", ".join(
            f"{k} move {results[k].extra['update_ms'].get('move', 0):.2f} ms"
            for k in matchers)
    del indexes, matchers
    suite.indexes.clear()
    # Traced builds come after every timing: one leaves the heap fragmented, and matching
    # (indexes and brute force alike) measured up to 30% slower after it (the arrays then
    # get fewer huge pages).
    with steps.step("memory", "tracing the memory of each index build") as info:
        if config.trace_memory:
            for cls in (EnhancedIndex, BasicIndex):
                tracemalloc.start()
                traced = cls(spatial, subs, weights, dmax_m=dmax)
                current, peak = tracemalloc.get_traced_memory()
                tracemalloc.stop()
                del traced
                builds[cls.kind]["traced_peak_mib"] = round(peak / _MIB, 1)
                builds[cls.kind]["traced_retained_mib"] = round(current / _MIB, 1)
            info["note"] = ", ".join(f"{k} peak {builds[k]['traced_peak_mib']:,.0f} MiB"
                                     for k in ("eia", "bia"))
        else:
            info["note"] = "skipped"

    doc: dict[str, Any] = {
        "suite": "throughput",
        "config": asdict(config),
        "machine": machine_info(),
        "network": describe_network(network, prep.path),
        "cells": prep.cells,
        "dmax_m": dmax,
        "workload": {**prep.source.description, "subscriptions": len(subs),
                     "messages": len(msgs), "vocabulary": len(weights),
                     "subscription_keywords": keyword_histogram(subs.kw_ptr),
                     "message_keywords": keyword_histogram(msgs.kw_ptr),
                     "alpha": f"{config.alpha} +- {config.alpha_spread}",
                     "tau": f"{config.tau} +- {config.tau_spread}"},
        "build": {"cells_seconds": prep.cells["cells_seconds"],
                  "bounds_seconds": prep.cells["bounds_seconds"], **builds},
        "methods": {name: r.to_dict() for name, r in results.items()},
        "ratios": {"eia_over_bia": ratio(results, "eia", "bia"),
                   "eia_over_brute": ratio(results, "eia", "brute"),
                   "bia_over_brute": ratio(results, "bia", "brute"),
                   "eia_threads_over_1thread": ratio(results, "eia", "eia_1thread")},
        "threads": threads_figures(results),
        "agree": agree,
        **sections,
        "memory": {"max_rss_mib": max_rss_mib(), "max_rss_mib_after_phase": rss},
        "timing_notes": ("messages_per_second: median of `repeats` rounds; each round times "
                         "one matching call over all messages for eia and for bia, then "
                         "brute over the first n_brute messages, so the methods take turns; "
                         "eia and bia take the batch in Hilbert order of the messages' "
                         "locations unless config.hilbert_order is false, brute one message "
                         "at a time (its time does not depend on the order); kernels warmed "
                         "up, index build excluded"),
        "seconds": steps.rounded(t_start),
        "files": {},
    }
    if out_dir is not None:
        target = Path(out_dir) / "throughput.json"
        doc["files"] = {"json": str(target)}
        write_json(target, doc)
    return doc


def dense_workload(spatial: SpatialIndex, subs: Subscriptions, msgs: Messages,
                   weights: TermWeights, dmax: float, config: ThroughputConfig, *,
                   shape: str = "centre") -> dict[str, Any]:
    """EIA (all threads and one), BIA and brute force on a dense form of the workload,
    with the verification floor; medians of ``config.repeats`` rounds. ``shape``:
    ``"centre"`` (:func:`roadpubsub.index.workload.hotspot`, one wide crowd) or ``"hotspots"``
    (:func:`roadpubsub.index.workload.hotspots`, tight crowds with alpha and tau over [0, 1])."""
    from roadpubsub.index.bia import BasicIndex
    from roadpubsub.index.eia import EnhancedIndex
    from roadpubsub.index.workload import Workload, hotspot, hotspots
    from roadpubsub.pruning.brute import BruteMatcher
    from roadpubsub.pruning.indexed import IndexMatcher

    k = min(config.dense_messages, len(msgs))
    base = Workload(subs, msgs.take(np.arange(k)), weights)
    shaped: dict[str, Any]
    if shape == "centre":
        wl = hotspot(base, spatial.network, share=0.5, radius_m=3000.0, seed=config.seed)
        shaped = {"share_in_hotspot": 0.5, "radius_m": 3000.0}
    elif shape == "hotspots":
        wl = hotspots(base, spatial.network, seed=config.seed)
        shaped = {"shape": "hotspots (index.workload.hotspots defaults)"}
    else:
        msg = f"unknown dense shape {shape!r}"
        raise InputError(msg)
    built: dict[str, float] = {}
    matchers: dict[str, IndexMatcher] = {}
    for cls in (EnhancedIndex, BasicIndex):
        t0 = time.perf_counter()
        index = cls(spatial, wl.subscriptions, weights, dmax_m=dmax)
        built[cls.kind] = round(time.perf_counter() - t0, 3)
        matchers[cls.kind] = IndexMatcher(index, threads=config.threads)
        if cls is EnhancedIndex:
            matchers["eia_1thread"] = IndexMatcher(index, threads=1)
    for matcher in matchers.values():
        warm_lanes(matcher, wl.messages)
    n_brute = max(1, k // 10)
    brute = BruteMatcher(spatial.network, wl.subscriptions, weights, dmax_m=dmax)
    sample = wl.messages.take(np.arange(n_brute))
    methods = [index_method(name, m, wl.messages) for name, m in matchers.items()]
    methods.append(brute_method(brute, sample, chunk=n_brute))
    floor: list[float] = []
    rounds: dict[str, Matched] = {}
    results: dict[str, MethodResult] = {}
    for _ in range(config.repeats):
        one, rounds = time_in_turns(methods, 1)
        for name, r in one.items():
            if name in results:
                results[name].seconds_all += r.seconds_all
            else:
                results[name] = r
        # The floor knows the deliveries in advance: EIA's of this round. Compiled, one
        # thread, the matcher's own search kernel (IndexMatcher.verification_floor).
        if not floor:  # compile the floor's kernel outside the timing
            matchers["eia_1thread"].verification_floor(wl.messages, rounds["eia"].deliveries)
        seconds, floor_settled = matchers["eia_1thread"].verification_floor(
            wl.messages, rounds["eia"].deliveries)
        floor.append(seconds)
    for method in methods:
        if method.timings:
            results[method.name].extra["timing"] = timing_summary(method.timings)
    results["floor"] = MethodResult("floor", k, floor)
    eia = rounds["eia"]
    totals = eia.counters
    agree = (deliveries_agree(rounds["brute"].deliveries, [eia.deliveries],
                              message_ids=sample.ids)
             and deliveries_agree(eia.deliveries, [rounds[n].deliveries
                                                   for n in ("bia", "eia_1thread")]))
    docs = {name: r.to_dict() for name, r in results.items()}
    return {
        "workload": {**shaped, "messages": k, "subscriptions": len(wl.subscriptions)},
        "build_seconds": built,
        "deliveries_per_message": round(len(eia.deliveries) / k, 2),
        "candidates_per_message": round(totals["candidates"] / k, 2),
        "candidates_verified_per_message": round(totals["candidates_verified"] / k, 2),
        "vertices_settled_per_message": round(totals["vertices_settled"] / k, 2),
        "floor_vertices_settled_per_message": round(floor_settled / k, 2),
        "methods": docs,
        "ratios": {"eia_over_bia": ratio(results, "eia", "bia"),
                   "eia_over_brute": ratio(results, "eia", "brute"),
                   "eia_1thread_over_floor": round(results["eia_1thread"].seconds
                                                   / results["floor"].seconds, 3)},
        "threads": threads_figures(results),
        "agree": bool(agree),
    }
