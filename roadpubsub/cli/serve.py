"""``roadpubsub serve``: the durable live matching service over HTTP and WebSocket."""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import signal
import struct
import sys
import time
from pathlib import Path
from typing import Any

from roadpubsub.cli.sources import add_source_arguments, check_dmax
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.settings import DEFAULTS
from roadpubsub.service.limits import add_limit_arguments
from roadpubsub.service.mqtt_choice import MQTT_PUSH_MODES

__all__ = ["register", "run"]

_EXAMPLE = """\
example:
  roadpubsub serve --state work/live --network ../shared/data/osm/andorra-latest.osm.pbf \\
      --dmax 5000                      # creates work/live, then serves on 127.0.0.1:8000
  roadpubsub serve --state work/live   # reopens it (after a crash too) and serves
  TOKEN=$(roadpubsub token create --state work/live --role admin | tail -n 1)
  curl -s localhost:8000/subscriptions -H "Authorization: Bearer $TOKEN"
  roadpubsub serve --state work/live --host 0.0.0.0 --tls-cert cert.pem --tls-key key.pem

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
                       window (GET /subscriptions/ID shows it under "topk"); once the
                       server's clock passes its expires_at, the next publish removes
                       it and evicts its top-k; a delete or move emits no event

Expiry follows the server's clock: a publish first removes every subscription whose
expires_at the clock has passed; a message's own "time" only decides whether it is
delivered to a subscription (not at or after its expires_at). Times (time, expires_at)
lie in [0, 253402300799] epoch seconds; other limits on bodies are flags below.
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
    p.add_argument("--host", default=DEFAULTS.serve_host, help="address to listen on (default "
                   "127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULTS.serve_port, help="port (default 8000)")
    p.add_argument("--snapshot-every", type=int, default=DEFAULTS.snapshot_every, metavar="N",
                   help="events between background snapshots (default 20000; a batch of "
                        "n rows counts 1 + n/25): a restart replays at most about this many")
    p.add_argument("--flush-every", type=int, default=DEFAULTS.flush_every, metavar="N",
                   help="published messages between deliveries-log segments (default 2000)")
    p.add_argument("--group-max", type=int, default=DEFAULTS.group_max, metavar="N",
                   help="most queued move or publish requests applied together as one "
                        "index update or matcher call and one log record (default "
                        "%(default)s; 1: one by one)")
    p.add_argument("--group-wait", type=float, default=DEFAULTS.group_wait_ms,
                   metavar="MS", help="longest time a group started by an MQTT move or message "
                   "waits for more while events keep arriving, milliseconds (default "
                   "%(default)s; 0: never)")
    p.add_argument("--gc-threshold", type=int, default=DEFAULTS.gc_young_threshold,
                   metavar="N", help="the youngest generation's garbage-collection "
                   "threshold while serving (default %(default)s; Python's own is 700)")
    p.add_argument("--switch-interval", type=float, default=DEFAULTS.switch_interval_ms,
                   metavar="MS",
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
    p.add_argument("--mqtt-prefix", default=DEFAULTS.mqtt_prefix, metavar="TOPIC",
                   help="topic prefix of the MQTT connector (default roadpubsub)")
    p.add_argument("--mqtt-push", default=DEFAULTS.mqtt_push, choices=MQTT_PUSH_MODES,
                   help="whose deliveries the MQTT connector publishes: all (every "
                        "subscription but those saying \"mqtt\": false; default) or "
                        "chosen (only those saying \"mqtt\": true); the others are "
                        "recorded all the same")
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
    add_limit_arguments(p)  # --max-body-bytes, --rate-limit, ... (transport limits)
    _add_body_limit_arguments(p)
    _add_access_arguments(p)
    # --- runtime resilience ---
    p.add_argument("--max-log-bytes", type=int, default=DEFAULTS.service_max_log_bytes,
                   metavar="N", help="largest write-ahead log, bytes: past it events are "
                   "refused (503) until a snapshot lets older segments be dropped "
                   f"(default {DEFAULTS.service_max_log_bytes:,})")
    _add_push_arguments(p)
    p.set_defaults(func=run)

    g = subparsers.add_parser(
        "loadgen",
        help="drive a running 'roadpubsub serve' with a bounded mixed stream (loopback only)",
        description="Replay a mixed stream (80%% moves, 15%% publishes of 5-25 real tweet "
                    "keywords, 5%% subscribes/unsubscribes) of single requests from "
                    "concurrent connections, or batches of moves, and report rates and "
                    "latency percentiles.",
        epilog=_LOAD_EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    g.add_argument("--url", default=f"http://{DEFAULTS.serve_host}:{DEFAULTS.serve_port}",
                   help="the service (loopback only; default http://127.0.0.1:8000)")
    g.add_argument("--network", required=True, metavar="PATH",
                   help="the service's road network file (locations are built on it)")
    g.add_argument("--existing", type=int, required=True, metavar="N",
                   help="subscriptions 0 .. N-1 exist in the service (moves pick among them)")
    g.add_argument("--clients", type=int, default=DEFAULTS.loadgen_clients,
                   help="concurrent connections (default 8)")
    g.add_argument("--batch", type=int, default=1, metavar="N",
                   help="moves per request; > 1 sends batches of moves only (default 1)")
    g.add_argument("--events", type=int, default=DEFAULTS.loadgen_events, metavar="N",
                   help="most events to send (default 20000)")
    g.add_argument("--seconds", type=float, default=DEFAULTS.loadgen_seconds,
                   help="most seconds to run (default 60)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--token-file", metavar="FILE", default=None,
                   help="a file holding an admin token sent with every request (default: "
                        "$ROADPUBSUB_TOKEN, else none)")
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

    from roadpubsub.roadnet.io import load_network
    from roadpubsub.service.loadgen import build_stream, get_health, run_load

    if args.existing < 1:
        msg = "--existing must be >= 1"
        raise InputError(msg)
    before = get_health(args.url)  # one line when no service answers
    network = load_network(args.network)
    # New ids (subscriptions and messages) from the clock: a second run must not repeat
    # the first one's ids (repeated messages are answered from the record, not matched).
    first = int(time.time() * 1000) * 1000
    stream = build_stream(network, n_points=20_000, n_messages=2_000,
                          first_new_id=first, seed=args.seed)
    report = run_load(args.url, stream, existing=args.existing, clients=args.clients,
                      batch=args.batch, events=args.events, seconds=args.seconds,
                      seed=args.seed, first_message_id=first, token=_loadgen_token(args))
    after = get_health(args.url)
    out = {**report.summary(), "clients": args.clients,
           "batch": args.batch, "server_before": before, "server_after": after}
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


def _loadgen_token(args: argparse.Namespace) -> str | None:
    """The admin token of ``loadgen --token-file`` (else ``ROADPUBSUB_TOKEN``; never argv,
    where other users of the machine can read it)."""
    if args.token_file is None:
        return os.environ.get("ROADPUBSUB_TOKEN") or None
    try:
        token = Path(args.token_file).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeError) as exc:
        msg = f"{args.token_file}: cannot read the token: {exc}"
        raise InputError(msg) from exc
    if not token:
        msg = f"{args.token_file}: the file holds no token"
        raise InputError(msg)
    return token


#: The body limits' flags: Settings field -> (flag, metavar, help); int-valued, defaults
#: from ``DEFAULTS`` (the fields of :class:`~roadpubsub.service.options.ServiceOptions`).
_BODY_LIMITS = {
    "max_keywords": ("--max-keywords", "N", "most keywords per subscription or message"),
    "max_keyword_bytes": ("--max-keyword-bytes", "N",
                          "longest keyword in UTF-8 bytes after normalisation"),
    "max_batch_rows": ("--max-batch-rows", "N", "most rows per request body"),
    "max_json_depth": ("--max-json-depth", "N", "deepest nesting of a request body"),
    "decode_thread_bytes": ("--decode-thread-bytes", "BYTES",
                            "decode larger request bodies on a worker thread"),
}


#: The route and area limits' flags (issue 32): ServiceOptions field -> (Settings field,
#: flag, help); positive integers, checked when parsed.
_SET_LIMITS = {
    "set_max_points": ("service_set_max_points", "--set-max-points",
                       "most positions in one route or area geometry"),
    "set_max_pieces": ("service_set_max_pieces", "--set-max-pieces",
                       "most road pieces a route or area resolves to"),
    "set_batch_points": ("service_set_batch_points", "--set-batch-points",
                         "most geometry positions in one request body"),
}


def _positive_int(text: str) -> int:
    """An integer >= 1 (argparse type: one clear error otherwise)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        msg = f"must be a positive integer, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _add_body_limit_arguments(p: argparse.ArgumentParser) -> None:
    v = p.add_argument_group("limits on request bodies")
    for name, (flag, metavar, text) in _BODY_LIMITS.items():
        default = getattr(DEFAULTS, name)
        v.add_argument(flag, dest=name, type=int, default=default, metavar=metavar,
                       help=f"{text} (default {default:,})")
    for name, (field, flag, text) in _SET_LIMITS.items():
        default = getattr(DEFAULTS, field)
        v.add_argument(flag, dest=name, type=_positive_int, default=default, metavar="N",
                       help=f"{text} (default {default:,})")


def _add_access_arguments(p: argparse.ArgumentParser) -> None:
    a = p.add_argument_group(
        "access", "Once DIR holds a token ('roadpubsub token create'), every request needs "
        "'Authorization: Bearer TOKEN' (WebSocket: that header, or the subprotocols "
        "'bearer' and TOKEN); without one the service is unauthenticated and serves "
        "loopback only.")
    a.add_argument("--tls-cert", metavar="FILE", default=None,
                   help="serve HTTPS and WSS with this certificate (PEM; with --tls-key)")
    a.add_argument("--tls-key", metavar="FILE", default=None,
                   help="the certificate's private key (PEM)")
    a.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                   help="a browser origin (scheme://host:port) allowed to call the API "
                        "(CORS) and open WebSockets, besides the service's own; repeatable")
    a.add_argument("--metrics-open", action="store_true",
                   help="GET /metrics without a token (default: admin tokens only)")
    a.add_argument("--mqtt-user", default=None, metavar="NAME",
                   help="the service's user name at the MQTT broker")
    a.add_argument("--mqtt-password-file", default=None, metavar="FILE",
                   help="a file holding the broker password (else the environment variable "
                        "ROADPUBSUB_MQTT_PASSWORD; never on the command line)")
    a.add_argument("--mqtt-password", nargs="?", action=_RefusePassword, help=argparse.SUPPRESS)
    a.add_argument("--mqtt-tls-ca", default=None, metavar="FILE",
                   help="connect to the broker over TLS, checking its certificate "
                        "against this CA file")


class _RefusePassword(argparse.Action):
    """``--mqtt-password``: refused without echoing it (argv is public: ps, /proc)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        parser.error("a password is never taken on the command line (any local user sees "
                     "it in ps); use --mqtt-password-file FILE or ROADPUBSUB_MQTT_PASSWORD")


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _access(args: argparse.Namespace, folder: Path) -> tuple[Any, dict[str, Any]]:
    """The access gate (protected mode without tokens) and the uvicorn TLS options."""
    from roadpubsub.service.access import AccessGate, TokenStore

    store = TokenStore(folder)
    if not store.enabled and not _is_loopback(args.host):
        msg = (f"--host {args.host} with no token: create one first with 'roadpubsub "
               f"token create --state {folder} --role admin' (without tokens the "
               "service serves loopback only)")
        raise InputError(msg)
    if (args.tls_cert is None) != (args.tls_key is None):
        msg = "--tls-cert and --tls-key go together"
        raise InputError(msg)
    tls: dict[str, Any] = {}
    for flag, path in (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key)):
        if path is not None and not Path(path).is_file():
            msg = f"{flag} {path}: no such file"
            raise InputError(msg)
    if args.tls_cert is not None:
        tls = {"ssl_certfile": args.tls_cert, "ssl_keyfile": args.tls_key}
    gate = AccessGate(store, allow_origins=args.allow_origin,
                      metrics_open=args.metrics_open, https=bool(tls))
    return gate, tls


def _mqtt_options(args: argparse.Namespace) -> dict[str, Any]:
    """The connector's credentials: the password from a file or the environment."""
    if args.mqtt is None:  # a broker option without a broker would be ignored silently
        given = [flag for flag, value, default in (
            ("--mqtt-prefix", args.mqtt_prefix, DEFAULTS.mqtt_prefix),
            ("--mqtt-push", args.mqtt_push, DEFAULTS.mqtt_push),
            ("--mqtt-user", args.mqtt_user, None),
            ("--mqtt-password-file", args.mqtt_password_file, None),
            ("--mqtt-tls-ca", args.mqtt_tls_ca, None)) if value != default]
        if given:
            msg = f"{', '.join(given)} {'needs' if len(given) == 1 else 'need'} " \
                  "--mqtt HOST:PORT (no broker is connected without it)"
            raise InputError(msg)
    password = os.environ.get("ROADPUBSUB_MQTT_PASSWORD")
    if args.mqtt_password_file is not None:
        try:
            password = Path(args.mqtt_password_file).read_text().rstrip("\r\n")
        except OSError as exc:
            msg = f"--mqtt-password-file {args.mqtt_password_file}: {exc.strerror}"
            raise InputError(msg) from exc
    if password is not None and args.mqtt_user is None:
        msg = "a broker password needs --mqtt-user"
        raise InputError(msg)
    if args.mqtt_tls_ca is not None and not Path(args.mqtt_tls_ca).is_file():
        msg = f"--mqtt-tls-ca {args.mqtt_tls_ca}: no such file"
        raise InputError(msg)
    return {"username": args.mqtt_user, "password": password, "tls_ca": args.mqtt_tls_ca,
            "push": args.mqtt_push}


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

    from roadpubsub.cli.match_kinds import has_kind_column
    from roadpubsub.cli.sources import read_weights_option
    from roadpubsub.index.eia import EnhancedIndex
    from roadpubsub.index.io import read_subscriptions
    from roadpubsub.index.kinds_io import read_subscription_set
    from roadpubsub.index.model import Subscriptions
    from roadpubsub.index.spatial import SpatialIndex
    from roadpubsub.index.store import load_index
    from roadpubsub.pruning.kinds_reference import check_window
    from roadpubsub.roadnet.io import load_network
    from roadpubsub.roadnet.locations import EdgePoints
    from roadpubsub.service.options import DEFAULT_WINDOW
    from roadpubsub.service.state import create_state

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


#: Webhook tunables given on the command line: (flag, Settings field, type, metavar, help).
_WEBHOOK_FLAGS = (
    ("--webhook-batch-max", "webhook_batch_max", int, "N", "deliveries per POST, at most"),
    ("--webhook-timeout", "webhook_timeout_s", float, "S", "seconds a POST may take"),
    ("--webhook-max-attempts", "webhook_max_attempts", int, "N",
     "attempts of a batch before it goes to the dead letters"),
    ("--webhook-max-age", "webhook_max_age_s", float, "S",
     "seconds a delivery may stay queued before a failure makes it a dead letter"),
    ("--webhook-backoff-base", "webhook_backoff_base_s", float, "S",
     "first retry's backoff ceiling, doubling per attempt (full jitter)"),
    ("--webhook-backoff-cap", "webhook_backoff_cap_s", float, "S",
     "largest backoff, and largest Retry-After honoured"),
)


def _add_push_arguments(p: argparse.ArgumentParser) -> None:
    """Resumable streams and webhooks (issue 30)."""
    w = p.add_argument_group("resumable streams and webhooks")
    w.add_argument("--stream-retention", type=int,
                   default=DEFAULTS.stream_retention_deliveries, metavar="N",
                   help="deliveries held for resuming streams (WS /deliveries?after=SEQ, "
                   "GET /deliveries/stream); older ones answer 410 (default "
                   f"{DEFAULTS.stream_retention_deliveries:,})")
    w.add_argument("--stream-retention-seconds", type=float,
                   default=DEFAULTS.stream_retention_s, metavar="S",
                   help="also drop held deliveries older than S seconds (with "
                   "--stream-retention: both bounds apply); 0: no age bound (default "
                   f"{DEFAULTS.stream_retention_s:g})")
    w.add_argument("--webhook-secret-file", metavar="FILE", default=None,
                   help="the HMAC-SHA256 key signing webhook POSTs (mode 0600; created "
                   "when absent; default DIR/webhook-secret)")
    w.add_argument("--webhook-allow-private", action="store_true",
                   help="allow webhook URLs on loopback and private addresses")
    w.add_argument("--no-webhooks", action="store_true",
                   help="refuse subscriptions carrying a webhook (no outbox, no sender)")
    for flag, name, kind, metavar, text in _WEBHOOK_FLAGS:
        w.add_argument(flag, dest=name, type=kind, default=getattr(DEFAULTS, name),
                       metavar=metavar, help=f"{text} (default {getattr(DEFAULTS, name):g})")


def _webhooks(args: argparse.Namespace, folder: Path) -> Any:
    """The webhook service of ``serve`` (None with --no-webhooks)."""
    import dataclasses

    from roadpubsub.service.webhooks import WebhookService

    if args.no_webhooks:
        return None
    for _flag, name, *_ in _WEBHOOK_FLAGS:
        if not getattr(args, name) > 0:
            msg = f"{_flag} must be > 0, got {getattr(args, name)}"
            raise InputError(msg)
    settings = dataclasses.replace(DEFAULTS, **{name: getattr(args, name)
                                                for _f, name, *_ in _WEBHOOK_FLAGS})
    secret = Path(args.webhook_secret_file) if args.webhook_secret_file else None
    return WebhookService(folder, secret_file=secret,
                          allow_private=args.webhook_allow_private, settings=settings)


def run(args: argparse.Namespace) -> int:
    """Create or open the service folder, then serve until interrupted."""
    import uvicorn

    from roadpubsub.service.app import build_app
    from roadpubsub.service.options import ServiceOptions
    from roadpubsub.service.snapshot import read_manifest
    from roadpubsub.service.state import ServiceState

    for name in ("snapshot_every", "flush_every", "group_max", "max_keywords",
                 "max_keyword_bytes", "max_batch_rows", "decode_thread_bytes"):
        if getattr(args, name) < 1:
            msg = f"--{name.replace('_', '-')} must be >= 1"
            raise InputError(msg)
    if not 0 <= args.group_wait <= 1000:
        msg = f"--group-wait must lie in [0, 1000] ms, got {args.group_wait:g}"
        raise InputError(msg)
    if not 0.01 <= args.switch_interval <= 100:
        msg = f"--switch-interval must lie in [0.01, 100] ms, got {args.switch_interval:g}"
        raise InputError(msg)
    if not 700 <= args.gc_threshold <= 10_000_000:
        msg = f"--gc-threshold must lie in [700, 10000000], got {args.gc_threshold}"
        raise InputError(msg)
    if args.max_json_depth < 3:
        msg = f"--max-json-depth must be >= 3 (a batch of rows nests 3 deep), got " \
              f"{args.max_json_depth}"
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
    from roadpubsub.service.limits import (
        TransportLimitsMiddleware,
        limits_from_args,
        uvicorn_options,
    )

    limits = limits_from_args(args)
    mqtt = None
    if args.mqtt:
        from roadpubsub.service.mqtt import parse_broker

        mqtt = parse_broker(args.mqtt)
    folder = Path(args.state)
    gate, tls = _access(args, folder)  # before anything is created: refused at once
    mqtt_options = _mqtt_options(args)
    t0 = time.perf_counter()
    from roadpubsub.roadnet.jit import preload_in_background

    preload = preload_in_background()  # the cached kernels, while the state loads
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
                             **{name: getattr(args, name) for name in _BODY_LIMITS},
                             **{name: getattr(args, name) for name in _SET_LIMITS},
                             max_log_bytes=args.max_log_bytes,
                             stream_retention=args.stream_retention,
                             stream_retention_s=args.stream_retention_seconds)
    if args.stream_retention < 1:
        msg = f"--stream-retention must be >= 1, got {args.stream_retention}"
        raise InputError(msg)
    if not args.stream_retention_seconds >= 0 or args.stream_retention_seconds == float("inf"):
        msg = (f"--stream-retention-seconds must be >= 0 and finite (0: no age bound), got "
               f"{args.stream_retention_seconds}")
        raise InputError(msg)
    state = ServiceState.open(folder, options)  # a busy folder: ServiceBusyError
    preload.join()  # ready with warm kernels when it first answers
    from roadpubsub.index.events import BodyParser
    from roadpubsub.service.warmup import warm_kernels

    warm_s = warm_kernels(state, BodyParser(state.index.network, max_snap_m=args.max_snap))
    # The loaded state out of every later collection's scan: a full collection of a 1M
    # subscription state stopped every thread for about 120 ms (a fleet's p99 latency).
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(args.gc_threshold, older, oldest)  # fewer, not longer, pauses
    webhooks = _webhooks(args, folder)
    if not args.quiet:
        print(f"serve: {len(state.index):,} subscriptions, log at seq {state.wal.next_seq - 1} "
              f"(ready in {time.perf_counter() - t0:.1f} s, recovery "
              f"{state.recovery_seconds:.1f} s, kernels warmed in {warm_s:.1f} s); "
              f"{'https' if tls else 'http'}://{args.host}:{args.port}",
              file=sys.stderr, flush=True)
    # A request crosses three threads that share the GIL (event loop, apply, fsync); a
    # thread that wants it waits until the holder's switch interval runs out. 0.5 ms
    # changed nothing beyond the run-to-run spread (single requests; the fleet's p99 in
    # two alternated pairs, BENCHMARKS.md), so Python's 5 ms stays the default.
    sys.setswitchinterval(args.switch_interval / 1000.0)
    qos = _cpu_latency_qos() if args.cpu_latency_qos else None  # held while serving
    if not gate.store.enabled:  # said once the folder is open, even with --quiet
        print("serve: UNAUTHENTICATED: no token in the state folder, every loopback client "
              "may do everything (create one: roadpubsub token create --state "
              f"{folder} --role admin)", file=sys.stderr, flush=True)
    app = build_app(state, group_max=args.group_max, group_wait_ms=args.group_wait,
                    mqtt=mqtt, mqtt_prefix=args.mqtt_prefix,
                    ws_buffer_deliveries=limits.ws_buffer_deliveries,
                    ws_buffer_bytes=limits.ws_buffer_bytes, gate=gate,
                    mqtt_options=mqtt_options, webhooks=webhooks)
    served = TransportLimitsMiddleware(app, limits)  # outermost: before any route
    # uvicorn drains in-flight requests on SIGTERM/SIGINT (the app's shutdown then writes
    # a snapshot), restores the handlers it found and raises the signal again: these
    # handlers note it, so that a stop a supervisor asked for exits 0, not 143 or 130.
    stopped_by: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _f: stopped_by.append(signum))
                for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        # no proxy-headers middleware (a loopback service; the app reads no client
        # address) and no "server" header: less of the event loop's time per request
        uvicorn.run(served, host=args.host, port=args.port, log_level="warning",
                    access_log=False, timeout_graceful_shutdown=10, proxy_headers=False,
                    server_header=False, **uvicorn_options(limits), **tls)
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
