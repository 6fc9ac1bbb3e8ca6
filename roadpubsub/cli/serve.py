"""``roadpubsub serve``: the durable live matching service over HTTP and WebSocket."""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import struct
import sys
import time
from pathlib import Path
from typing import Any

from roadnet.errors import InputError
from roadnet.settings import DEFAULTS
from roadpubsub.cli.sources import add_source_arguments, check_dmax

__all__ = ["register", "run"]

_EXAMPLE = """\
example:
  roadpubsub serve --state work/live --network ../shared/data/osm/andorra-latest.osm.pbf \\
      --dmax 5000                      # creates work/live, then serves on 127.0.0.1:8000
  roadpubsub serve --state work/live   # reopens it (after a crash too) and serves
  curl -s localhost:8000/health

Reopening with the creating command line works too (what a supervisor does): every
creation flag given must equal what DIR holds (file flags by content, sha256), else one
line per differing flag and exit 2. SIGTERM or Ctrl-C: in-flight requests are answered,
a snapshot is written, exit 0.

Resilience: when a log write or fsync fails (a full disk), events get 503 and /health
says "failed" (503); the disk is probed every second and, once it takes writes again, the
state is reloaded from DIR in-process and events resume. A failed snapshot turns /health
to "degraded" (200, with the reason) and is retried with backoff. Past --max-log-bytes
events get 503 until a snapshot lets older log segments be dropped.

The network, keyword weights (--weights, or idf over --corpus), Dmax, --directed and the
top-k --window are fixed when DIR is created (or taken from --index-file, an index built
by 'roadpubsub index build', or --subscriptions to start with; a file with a 'kind' column
may hold boolean and top-k rows). Every event is logged and fsynced before its answer;
snapshots are written in the background every --snapshot-every events. See
GET /openapi.json for the API.

Subscription kinds (POST /subscriptions, field 'kind'; unused fields null or absent):
  threshold (default)  alpha, tau: delivered when SIM >= tau (PSTPSN)
  boolean              radius (m, <= Dmax): delivered when the message holds every
                       keyword and dN <= radius; a delivery's score is 1.0
  topk                 alpha, k: the k best messages (SIM, newer wins ties) of the last
                       --window messages; POST /messages answers and the WebSocket carry
                       {"event": "insert"|"evict", "message_id", "subscription_id",
                       "rank", "score", "distance", "arrival_id"}; a top-k subscription
                       that joins or moves mid-stream gets the top-k of the current
                       window (GET /subscriptions/ID shows it under "topk"); at its
                       expires_at its top-k is evicted (events of the message whose
                       time reaches it); a delete or move emits no event
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``serve`` subcommand."""
    p = subparsers.add_parser(
        "serve",
        help="run the durable live pub/sub service (HTTP JSON API + WebSocket)",
        description="Create or reopen a service folder and serve subscribe, unsubscribe, "
                    "move and publish events, each durable before it is answered.",
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--state", required=True, metavar="DIR",
                   help="the service's folder: created when it holds no service yet")
    add_source_arguments(p, required=False, dmax_default=None)
    p.add_argument("--index-file", metavar="FILE", default=None,
                   help="create DIR from an index built by 'roadpubsub index build' instead "
                        "of --network, --subscriptions, --weights/--corpus, --dmax, --directed")
    p.add_argument("--window", type=int, default=None, metavar="W",
                   help="top-k subscriptions keep the best k of the last W messages (set "
                        "when DIR is created, then fixed; default 1000)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default "
                   "127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--snapshot-every", type=int, default=20_000, metavar="N",
                   help="events between background snapshots (default 20000; a batch of "
                        "n rows counts 1 + n/25): a restart replays at most about this many")
    p.add_argument("--flush-every", type=int, default=2_000, metavar="N",
                   help="published messages between deliveries-log segments (default 2000)")
    p.add_argument("--group-max", type=int, default=64, metavar="N",
                   help="most queued move or publish requests applied together as one "
                        "index update or matcher call and one log record (default 64; 1: "
                        "one by one)")
    p.add_argument("--switch-interval", type=float, default=5.0, metavar="MS",
                   help="the interpreter's thread switch interval, milliseconds (default "
                        "5, Python's own; a request crosses the event loop, apply and fsync "
                        "threads, and a thread waiting for the GIL waits up to this long)")
    p.add_argument("--cpu-latency-qos", action="store_true",
                   help="hold a Linux PM QoS request for no CPU wake-up latency while "
                        "serving (/dev/cpu_dma_latency, needs root): idle cores poll "
                        "instead of sleeping, so an fsync's completion is seen at once "
                        "(on a VM that sleeps to its next 4 ms tick, the log's fsyncs "
                        "took 4 ms instead of 0.1 ms); costs power and host CPU")
    p.add_argument("--mqtt", metavar="HOST:PORT", default=None,
                   help="also take events from an MQTT broker's topics and publish each "
                        "delivery on roadpubsub/deliveries/<subscription id>")
    p.add_argument("--mqtt-prefix", default="roadpubsub", metavar="TOPIC",
                   help="topic prefix of the MQTT connector (default roadpubsub)")
    p.add_argument("--no-fsync", action="store_true",
                   help="do not fsync the log before answering (measurements only: a "
                        "power loss can then lose acknowledged events)")
    p.add_argument("--inline-compaction", action="store_true",
                   help="compact the index on the apply thread, pausing events (default: "
                        "in the background while events go on)")
    p.add_argument("--compact-delta", type=int, default=None, metavar="N",
                   help="compact the index once its delta holds more than N subscriptions "
                        "(default: 20,000 or 5%% of the indexed ones, whichever is more)")
    p.add_argument("--quiet", action="store_true", help="no start-up lines")
    # --- runtime resilience ---
    p.add_argument("--max-log-bytes", type=int, default=DEFAULTS.service_max_log_bytes,
                   metavar="N", help="largest write-ahead log, bytes: past it events are "
                   "refused (503) until a snapshot lets older segments be dropped "
                   f"(default {DEFAULTS.service_max_log_bytes:,})")
    p.set_defaults(func=run)

    g = subparsers.add_parser(
        "loadgen",
        help="drive a running 'roadpubsub serve' with a bounded mixed stream (loopback only)",
        description="Replay a mixed stream (80%% moves, 15%% publishes of 5-25 real tweet "
                    "keywords, 5%% subscribes/unsubscribes) of single requests from "
                    "concurrent connections, or batches of moves, and report rates and "
                    "latency percentiles.",
        epilog=_LOAD_EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    g.add_argument("--url", default="http://127.0.0.1:8000",
                   help="the service (loopback only; default http://127.0.0.1:8000)")
    g.add_argument("--network", required=True, metavar="PATH",
                   help="the service's road network file (locations are built on it)")
    g.add_argument("--existing", type=int, required=True, metavar="N",
                   help="subscriptions 0 .. N-1 exist in the service (moves pick among them)")
    g.add_argument("--clients", type=int, default=8, help="concurrent connections (default 8)")
    g.add_argument("--batch", type=int, default=1, metavar="N",
                   help="moves per request; > 1 sends batches of moves only (default 1)")
    g.add_argument("--events", type=int, default=20_000, metavar="N",
                   help="most events to send (default 20000)")
    g.add_argument("--seconds", type=float, default=60.0,
                   help="most seconds to run (default 60)")
    g.add_argument("--seed", type=int, default=0)
    g.set_defaults(func=run_loadgen)


_LOAD_EXAMPLE = """\
example:
  roadpubsub generate --network ../shared/data/dimacs/rome.gr.gz --out-dir work/rome \\
      --subscriptions 1000000 --messages 1000
  roadpubsub serve --state work/rome-live --network ../shared/data/dimacs/rome.gr.gz \\
      --subscriptions work/rome/subscriptions.parquet --weights work/rome/weights.parquet &
  roadpubsub loadgen --network ../shared/data/dimacs/rome.gr.gz --existing 1000000 \\
      --clients 8 --events 20000
  roadpubsub loadgen --network ../shared/data/dimacs/rome.gr.gz --existing 1000000 \\
      --batch 10000 --events 500000
"""


def run_loadgen(args: argparse.Namespace) -> int:
    """Run the load generator and print its JSON report."""
    import json

    import httpx

    from roadnet.io import load_network
    from roadpubsub.service.loadgen import build_stream, check_loopback, run_load

    check_loopback(args.url)
    if args.existing < 1:
        msg = "--existing must be >= 1"
        raise InputError(msg)
    network = load_network(args.network)
    # New ids (subscriptions and messages) from the clock: a second run must not repeat
    # the first one's ids (repeated messages are answered from the record, not matched).
    first = int(time.time() * 1000) * 1000
    stream = build_stream(network, n_points=20_000, n_messages=2_000,
                          first_new_id=first, seed=args.seed)
    before = httpx.get(args.url + "/health", timeout=30).json()
    report = run_load(args.url, stream, existing=args.existing, clients=args.clients,
                      batch=args.batch, events=args.events, seconds=args.seconds,
                      seed=args.seed, first_message_id=first)
    after = httpx.get(args.url + "/health", timeout=30).json()
    out = {**report.summary(), "clients": args.clients,
           "batch": args.batch, "server_before": before, "server_after": after}
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


def _creation_flags(args: argparse.Namespace) -> list[str]:
    return [flag for flag, value in (
        ("--network", args.network), ("--subscriptions", args.subscriptions),
        ("--weights", args.weights), ("--corpus", args.corpus), ("--dmax", args.dmax),
        ("--index-file", args.index_file), ("--directed", args.directed or None),
        ("--window", args.window))
        if value is not None]


_FILE_FLAGS = ("--network", "--subscriptions", "--weights", "--corpus", "--index-file")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _file_record(value: str | None) -> dict[str, str] | None:
    """A creation file's path and content hash (a folder: its path only)."""
    if value is None:
        return None
    path = Path(value)
    out = {"path": str(path.resolve())}
    if path.is_file():
        out["sha256"] = _sha256(path)
    return out


def _created_with(args: argparse.Namespace, *, dmax: float | None, window: int
                  ) -> dict[str, Any]:
    """What the creating flags were, for the reopening comparison (manifest
    ``created_with``)."""
    out: dict[str, Any] = {f: _file_record(getattr(args, f[2:].replace("-", "_")))
                           for f in _FILE_FLAGS}
    out.update({"--dmax": dmax, "--directed": bool(args.directed), "--window": window,
                "--exact-keywords": bool(args.exact_keywords)})
    return out


def _differences(args: argparse.Namespace, manifest: dict[str, Any]) -> list[str]:
    """One line per creation flag given that differs from what the folder holds."""
    held = manifest.get("created_with")
    out: list[str] = []
    for flag in _creation_flags(args):
        value = getattr(args, flag[2:].replace("-", "_"))
        if flag == "--dmax":
            if float(value) != float(manifest["dmax_m"]):
                out.append(f"--dmax {value:g}: DIR holds Dmax {manifest['dmax_m']:g} m")
        elif flag == "--directed":
            if not manifest.get("network", {}).get("directed", False):
                out.append("--directed: DIR was created without --directed")
        elif flag == "--window":
            if int(value) != int(manifest.get("window", 0)):
                out.append(f"--window {value}: DIR holds window {manifest.get('window')}")
        elif held is None:  # a folder made before the creation record: its source path
            if flag not in ("--network", "--index-file") or not manifest.get("source") or \
                    Path(manifest["source"]).resolve() != Path(value).resolve():
                out.append(f"{flag} {value}: DIR does not record this flag's file (made by "
                           "an older version)")
        else:
            out.extend(_file_difference(flag, value, held.get(flag)))
    if args.exact_keywords and held is not None and not held.get("--exact-keywords"):
        out.append("--exact-keywords: DIR was created without --exact-keywords")
    return out


def _file_difference(flag: str, value: str, held: dict[str, str] | None) -> list[str]:
    if held is None:
        return [f"{flag} {value}: DIR was created without {flag}"]
    path = Path(value)
    if "sha256" not in held or not path.is_file():
        if not path.exists():
            return [f"{flag} {value}: no such file (DIR was created from {held['path']})"]
        same = str(path.resolve()) == held["path"]
        return [] if same else [f"{flag} {value}: DIR was created from {held['path']}"]
    digest = _sha256(path)
    if digest != held["sha256"]:
        return [f"{flag} {value}: its content (sha256 {digest[:12]}...) differs from the "
                f"file DIR was created from ({held['path']}, sha256 {held['sha256'][:12]}...)"]
    return []


def _create(args: argparse.Namespace, folder: Path) -> None:
    import numpy as np

    from index.eia import EnhancedIndex
    from index.io import read_subscriptions
    from index.kinds_io import read_subscription_set
    from index.model import Subscriptions
    from index.spatial import SpatialIndex
    from index.store import load_index
    from pruning.kinds_reference import check_window
    from roadnet.io import load_network
    from roadnet.locations import EdgePoints
    from roadpubsub.cli.match_kinds import has_kind_column
    from roadpubsub.cli.sources import read_weights_option
    from roadpubsub.service.state import DEFAULT_WINDOW, create_state

    boolean = topk = None
    if args.index_file:
        others = [f for f in _creation_flags(args) if f not in ("--index-file", "--window")]
        if others:
            msg = f"--index-file already holds everything; drop {', '.join(others)}"
            raise InputError(msg)
        index = load_index(args.index_file)
        if not isinstance(index, EnhancedIndex):
            msg = f"--index-file {args.index_file}: the service needs an EIA index"
            raise InputError(msg)
        about = {"source": str(args.index_file),
                 "created_with": _created_with(args, dmax=None, window=DEFAULT_WINDOW
                                               if args.window is None else args.window)}
    else:
        if not args.network:
            msg = f"{folder} holds no service yet: give --network (or --index-file) to create it"
            raise InputError(msg)
        dmax = check_dmax(DEFAULTS.dmax_m if args.dmax is None else args.dmax)
        network = load_network(args.network, directed=args.directed)
        weights = read_weights_option(args)
        if args.subscriptions and has_kind_column(args.subscriptions):
            kinds = read_subscription_set(args.subscriptions, network, weights, dmax_m=dmax,
                                          max_snap_m=args.max_snap)
            subs, boolean, topk = kinds.threshold, kinds.boolean, kinds.topk
        elif args.subscriptions:
            subs = read_subscriptions(args.subscriptions, network, weights,
                                      max_snap_m=args.max_snap)
        else:
            subs = Subscriptions(np.empty(0, np.int64), EdgePoints.of([], []), np.empty(0),
                                 np.empty(0), np.zeros(1, np.int64), np.empty(0, np.int32))
        index = EnhancedIndex(SpatialIndex.build(network), subs, weights, dmax_m=dmax)
        about = {"source": str(args.network),
                 "created_with": _created_with(args, dmax=dmax, window=DEFAULT_WINDOW
                                               if args.window is None else args.window)}
    create_state(folder, index, about=about, boolean=boolean, topk=topk,
                 window=DEFAULT_WINDOW if args.window is None else check_window(args.window))


def run(args: argparse.Namespace) -> int:
    """Create or open the service folder, then serve until interrupted."""
    import uvicorn

    from roadpubsub.service.app import build_app
    from roadpubsub.service.snapshot import read_manifest
    from roadpubsub.service.state import ServiceOptions, ServiceState

    for name in ("snapshot_every", "flush_every", "group_max"):
        if getattr(args, name) < 1:
            msg = f"--{name.replace('_', '-')} must be >= 1"
            raise InputError(msg)
    if not 0.01 <= args.switch_interval <= 100:
        msg = f"--switch-interval must lie in [0.01, 100] ms, got {args.switch_interval:g}"
        raise InputError(msg)
    if args.max_log_bytes < 1:
        msg = f"--max-log-bytes must be >= 1, got {args.max_log_bytes}"
        raise InputError(msg)
    if args.compact_delta is not None and args.compact_delta < 1:
        msg = f"--compact-delta must be >= 1, got {args.compact_delta}"
        raise InputError(msg)
    if not 0 <= args.port < 65536:
        msg = f"--port must lie in [0, 65535], got {args.port}"
        raise InputError(msg)
    mqtt = None
    if args.mqtt:
        from roadpubsub.service.mqtt import parse_broker

        mqtt = parse_broker(args.mqtt)
    folder = Path(args.state)
    t0 = time.perf_counter()
    manifest = read_manifest(folder)
    if manifest is None:
        _create(args, folder)
    else:  # a supervisor reruns the creating command line: fine if nothing differs
        differ = _differences(args, manifest)
        if differ:
            msg = (f"{folder} already holds a service created with other settings; drop "
                   "these flags or give another --state:\n  " + "\n  ".join(
                       d.replace("DIR", str(folder)) for d in differ))
            raise InputError(msg)
    options = ServiceOptions(snapshot_every=args.snapshot_every, flush_every=args.flush_every,
                             fsync=not args.no_fsync, max_snap_m=args.max_snap,
                             background_compaction=not args.inline_compaction,
                             compact_delta=args.compact_delta,
                             max_log_bytes=args.max_log_bytes)
    state = ServiceState.open(folder, options)  # a busy folder: ServiceBusyError
    if not args.quiet:
        print(f"serve: {len(state.index):,} subscriptions, log at seq {state.wal.next_seq - 1} "
              f"(ready in {time.perf_counter() - t0:.1f} s, recovery "
              f"{state.recovery_seconds:.1f} s); http://{args.host}:{args.port}",
              file=sys.stderr, flush=True)
    # A request crosses three threads that share the GIL (event loop, apply, fsync); a
    # thread that wants it waits until the holder's switch interval runs out. 0.5 ms
    # helped in one loaded pair of runs and tied (at 10% more CPU) in later ones
    # (BENCHMARKS.md, single-event requests), so Python's 5 ms stays the default.
    sys.setswitchinterval(args.switch_interval / 1000.0)
    qos = _cpu_latency_qos() if args.cpu_latency_qos else None  # held while serving
    app = build_app(state, group_max=args.group_max, mqtt=mqtt, mqtt_prefix=args.mqtt_prefix)
    # uvicorn drains in-flight requests on SIGTERM/SIGINT (the app's shutdown then writes
    # a snapshot), restores the handlers it found and raises the signal again: these
    # handlers note it, so that a stop a supervisor asked for exits 0, not 143 or 130.
    stopped_by: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _f: stopped_by.append(signum))
                for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        # no proxy-headers middleware (a loopback service; the app reads no client
        # address) and no "server" header: less of the event loop's time per request
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning",
                    access_log=False, timeout_graceful_shutdown=10, proxy_headers=False,
                    server_header=False)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if qos is not None:
            os.close(qos)  # the request ends with its descriptor
    if not args.quiet or stopped_by:
        how = f" on {signal.Signals(stopped_by[0]).name}" if stopped_by else ""
        print(f"serve: stopped{how}; log at seq {state.wal.next_seq - 1}, snapshot at seq "
              f"{state.snapshot_seq}", file=sys.stderr, flush=True)
    return 0


def _cpu_latency_qos() -> int:
    """Open a PM QoS request for zero CPU wake-up latency; the descriptor holds it."""
    path = "/dev/cpu_dma_latency"
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError as exc:
        msg = f"--cpu-latency-qos: cannot open {path} ({exc.strerror}; it needs root on Linux)"
        raise InputError(msg) from exc
    os.write(fd, struct.pack("i", 0))
    return fd
