"""Paper-style figures of a figures-suite JSON: one panel per sweep, y on a log scale."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roadpubsub.bench.config import METHODS
from roadpubsub.outputs import save_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["figures_grid", "plot_figures", "plot_sweep"]

PathLike = str | os.PathLike[str]
_STYLE = {"eia": ("#1f77b4", "o", "EIA (enhanced)"), "bia": ("#ff7f0e", "s", "BIA (basic)"),
          "brute": ("#7f7f7f", "^", "brute force")}



def plot_sweep(sweep: dict[str, Any], ax: Axes, *, metric: str = "ms_per_message") -> None:
    """One paper-style panel: x = the swept parameter, y (log) = ``metric`` per method.

    Parameters
    ----------
    sweep
        One entry of the JSON's ``sweeps``.
    ax
        Axes to draw on.
    metric
        A per-method key: ``"ms_per_message"`` (default), ``"seconds"``,
        ``"messages_per_second"`` or ``"candidates_per_message"``.
    """
    points = sweep["points"]
    xs = [p["value"] for p in points]
    for method in METHODS:
        ys = [p["methods"].get(method, {}).get(metric) for p in points]
        pairs = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None and y > 0]
        if not pairs:
            continue
        colour, marker, label = _STYLE[method]
        if method == "brute" and points[0]["methods"].get("brute"):
            label += f" ({points[0]['methods']['brute']['messages']} msgs)"
        ax.plot([p[0] for p in pairs], [p[1] for p in pairs], marker=marker, color=colour,
                label=label, linewidth=1.5, markersize=6)
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(sweep["label"])
    if sweep["label"].startswith("number of subscriptions"):
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(_count_formatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
    ylabels = {"ms_per_message": "time per message (ms, log)",
               "seconds": "running time (s, log)",
               "messages_per_second": "messages per second (log)",
               "candidates_per_message": "candidates per message (log)"}
    ax.set_ylabel(ylabels.get(metric, metric))
    ax.set_xticks(xs)
    ax.set_title(f"{sweep['figure']}: effect of {sweep['label']}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


def _count_formatter() -> Any:
    from matplotlib.ticker import FuncFormatter

    def fmt(x: float, _pos: int) -> str:
        if x >= 1e6:
            return f"{x / 1e6:g}M"
        if x >= 1e3:
            return f"{x / 1e3:g}K"
        return f"{x:g}"
    return FuncFormatter(fmt)


def _caption(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    net = doc["network"]
    return (f"{net['name']} ({net['nodes']:,} nodes, {net['edges']:,} edges), "
            f"Dmax {doc['dmax_m']:g} m, {doc['workload']['keywords_from']}; "
            f"{m.get('cpu_model') or 'unknown CPU'}, {m.get('usable_cores')} cores")


def plot_figures(doc: dict[str, Any], out_dir: PathLike, *,
                 metric: str = "ms_per_message") -> dict[str, Path]:
    """Write one PNG per sweep (``fig5_subscriptions.png`` ...) and ``figures.png`` (all).

    Returns the paths by sweep name (and ``"all"``).
    """
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    paths: dict[str, Path] = {}
    sweeps = doc["sweeps"]
    for name, sweep in sweeps.items():
        fig, ax = plt.subplots(figsize=(6, 4.2))
        plot_sweep(sweep, ax, metric=metric)
        fig.tight_layout(rect=(0.0, 0.045, 1.0, 1.0))
        fig.text(0.01, 0.01, _caption(doc), fontsize=6, color="#555555")
        number = sweep["figure"].split()[-1]
        paths[name] = save_figure(fig, out / f"fig{number}_{name}.png")
        plt.close(fig)
    if sweeps:
        fig = figures_grid(doc, metric=metric)
        paths["all"] = save_figure(fig, out / "figures.png")
        plt.close(fig)
    return paths


def figures_grid(doc: dict[str, Any], *, metric: str = "ms_per_message") -> Figure:
    """All sweeps of a figures-suite JSON as panels of one figure."""
    import matplotlib.pyplot as plt

    sweeps = doc["sweeps"]
    n = len(sweeps)
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.9 * rows), squeeze=False)
    for ax, sweep in zip(axes.flat, sweeps.values(), strict=False):
        plot_sweep(sweep, ax, metric=metric)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    fig.suptitle("PSTPSN Sec. VII reproduced: EIA vs BIA vs brute force\n" + _caption(doc),
                 fontsize=10)
    fig.tight_layout()
    return fig
