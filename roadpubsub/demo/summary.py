"""The human-readable summary table of a demo run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["format_summary"]


def format_summary(summary: dict[str, Any]) -> str:
    """The human-readable summary table of a demo run (from :attr:`DemoResult.summary`)."""
    net = summary["network"]
    cells = summary["cells"]
    wl = summary["workload"]
    lines = [
        f"roadpubsub demo on {Path(net['path']).name}",
        f"  network      {net['nodes']:,} nodes, {net['edges']:,} edges, "
        f"{net['length_km']:,.1f} km of road ({net['crs']}, kappa {net['kappa']:.3f})",
        f"  cells        {cells['count']:,} PMR cells (capacity {cells['capacity']:,} edges), "
        f"{cells['border_vertices']:,} border vertices",
    ]
    if wl["source"] == "generated":
        src = (f"from {wl['pois']:,} real POIs (name, amenity, shop, tourism)"
               if wl["keywords_from"] == "pois" else "from real tweets, uniform locations")
        lines.append(f"  workload     {wl['subscriptions']:,} subscriptions and "
                     f"{wl['messages']:,} messages, seed {wl['seed']}, "
                     f"{wl['vocabulary']:,} terms,")
        lines.append(f"               {src}")
    else:
        lines.append(f"  workload     {wl['subscriptions']:,} subscriptions, "
                     f"{wl['messages']:,} messages read from files; "
                     f"{wl['vocabulary']:,} terms")
    auto = " (auto: a quarter of the network's diagonal, at most 5 km)" \
        if summary["dmax_auto"] else ""
    lines.append(f"  Dmax         {summary['dmax_m']:,.0f} m{auto}")
    comp = summary.get("compile")
    if comp:
        where = comp["cache"] or "numba's __pycache__ folders"
        lines.append(f"  kernels      compiled in {comp['seconds']:.1f} s before any timing "
                     f"(first run only; cached in {where})")
    lines.append("")
    head = (f"  {'method':<7}{'messages':>9}{'msg/s':>10}{'build s':>9}{'cand/msg':>10}"
            f"{'deliv/msg':>10}{'cells pruned/msg L2 L4 L8':>28}{'L6 postings/msg':>17}")
    lines += [head, "  " + "-" * (len(head) - 2)]
    subset = False
    for name, r in summary["methods"].items():
        label = name
        if r["messages"] < summary["workload"]["messages"]:
            label, subset = f"{name}*", True
        c = r.get("counters")
        n = max(r["messages"], 1)
        if c:
            cells_txt = " ".join(f"{c[f'cells_pruned_lemma{k}'] / n:6.1f}" for k in (2, 4, 8))
            l6 = f"{c['postings_pruned_lemma6'] / n:.1f}"
        else:
            cells_txt, l6 = "-", "-"
        lines.append(f"  {label:<7}{r['messages']:>9,}{r['messages_per_second']:>10,.1f}"
                     f"{r['build_seconds']:>9.2f}{r['candidates_per_message']:>10,.1f}"
                     f"{r['deliveries_per_message']:>10,.1f}{cells_txt:>28}{l6:>17}")
    if subset:
        lines.append("  * over its first messages only, so its per-message figures cover "
                     "another set of messages")
    lines.append("")
    sp = summary["speedup"]
    speed = f"  EIA is {sp['eia_over_bia']:.2f}x BIA's throughput (both warm)"
    if sp.get("eia_over_brute") is not None:
        speed += f" and {sp['eia_over_brute']:.1f}x brute force's"
    lines.append(speed)
    ag = summary["agree"]
    if ag["messages"]:
        total = summary["workload"]["messages"]
        part = "all" if ag["messages"] == total else f"the first {ag['messages']:,} of {total:,}"
        verdict = "agree" if ag["equal"] else "DISAGREE"
        lines.append(f"  exact: EIA, BIA and brute {verdict} on {part} messages "
                     f"({ag['pairs']:,} deliveries; brute ran on these only)")
    lines.append("  EIA and BIA deliver the same pairs on every message: "
                 + ("yes" if ag["eia_equals_bia_on_all_messages"] else "NO"))
    mp = summary.get("map")
    if mp and mp.get("path"):
        lines.append(f"  map          {mp['path']} (message {mp['message_id']}, "
                     f"{mp['deliveries']:,} deliveries)")
    files = summary.get("files") or {}
    if files:
        lines.append(f"  files        {files['deliveries']}, {files['summary']}")
    lines.append(f"  total time   {summary['seconds']['total']:.1f} s")
    return "\n".join(lines)
