"""Benchmarks: the paper's Sec. VII sweeps (Figs. 5-9) and a headline throughput suite.

Figures suite (:func:`run_figures`, module :mod:`roadpubsub.bench.figures`)
    For each sweep point, EIA, BIA and the brute-force reference matcher run on one
    workload: EIA and BIA on all messages (median of ``repeats`` timed runs), brute force on
    the first ``n_brute`` of the *same* messages (one run). The three are checked to deliver
    the same pairs on those messages. Sweeps, as in the paper:

    ===============  ====================================  ========
    sweep            x                                     figure
    ===============  ====================================  ========
    subscriptions    number of subscriptions               Fig. 5
    sub_keywords     keywords per subscription, |s.key|    Fig. 6
    msg_keywords     keywords per message, |m.key|         Fig. 7
    alpha            s.alpha (same for every subscription) Fig. 8
    tau              s.tau (same for every subscription)   Fig. 9
    ===============  ====================================  ========

    Parameters not swept keep the generator's paper-like defaults: 1-5 keywords per
    subscription, 5-25 per message, alpha uniform in 0.5 +- 0.1, tau in 0.7 +- 0.1.

Throughput suite (:func:`run_throughput`, module :mod:`roadpubsub.bench.throughput`)
    One large workload (default: Rome, 1,000,000 subscriptions): build times of the cells
    and bounds and of each architecture, peak memory, index bytes per subscription, and
    messages per second of EIA, BIA and brute force (brute on a prefix of the same
    messages), with the ratios EIA/BIA and EIA/brute; further workloads are the entries
    of :data:`~roadpubsub.bench.throughput.SECTIONS`.

Controlling |s.key| and |m.key| (module :mod:`roadpubsub.bench.workloads`)
    :func:`roadpubsub.index.workload.generate_workload` draws 1-5 and 5-25 keywords per row and has
    no option to fix the count, so the sweeps post-process generated rows: they generate
    pools, keep the rows holding at least the sweep's largest count (e.g. subscriptions
    with 5 keywords of their tweet, messages with 25), and keep a random subset of k of
    each row's keywords (:func:`subsample_keywords`). The subsets are nested (a row's 2
    keywords are among its 3), so locations, alpha and tau are the same at every point and
    only |s.key| (|m.key|) changes. If too few rows are that long (short POI
    descriptions), rows are drawn again with replacement; ``distinct_rows`` in the JSON
    says how many distinct ones there were.

Every method's figures are one :class:`~roadpubsub.records.MethodResult` and every
comparison one :func:`~roadpubsub.records.deliveries_agree`. Times are wall-clock seconds
of the matching call (index build excluded, kernels warmed up). Memory is in MiB unless a
key says otherwise. The machine is described by :func:`machine_info`.
"""

import importlib
from types import ModuleType
from typing import Any

from roadpubsub.bench import config as _config
from roadpubsub.bench import figures as _figures
from roadpubsub.bench import machine as _machine
from roadpubsub.bench import measure as _measure
from roadpubsub.bench import plots as _plots
from roadpubsub.bench import throughput as _throughput
from roadpubsub.bench import workloads as _workloads
from roadpubsub.bench.config import *  # noqa: F403
from roadpubsub.bench.figures import *  # noqa: F403
from roadpubsub.bench.machine import *  # noqa: F403
from roadpubsub.bench.measure import *  # noqa: F403
from roadpubsub.bench.plots import *  # noqa: F403
from roadpubsub.bench.throughput import *  # noqa: F403
from roadpubsub.bench.workloads import *  # noqa: F403

_EAGER = (_config, _workloads, _machine, _measure, _figures, _plots, _throughput)
#: API modules imported on first use of one of their names: ``live``, ``fleet`` and ``push``
#: run as ``python -m roadpubsub.bench.live`` (and so on), which must not find them
#: imported here.
_LAZY = ("live", "fleet", "push", "sets", "floor", "set_changes")


def _api_modules() -> tuple[ModuleType, ...]:
    return _EAGER + tuple(importlib.import_module(f"{__name__}.{m}") for m in _LAZY)


def __getattr__(name: str) -> Any:
    """``API_MODULES`` (the modules whose ``__all__`` make the package's API),
    ``__all__``, and the names of the lazy modules."""
    if name == "API_MODULES":
        return _api_modules()
    if name == "__all__":
        return sorted({n for module in _api_modules() for n in module.__all__})
    if not name.startswith("__"):
        for m in _LAZY:
            module = importlib.import_module(f"{__name__}.{m}")
            if name in module.__all__:
                return getattr(module, name)
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
