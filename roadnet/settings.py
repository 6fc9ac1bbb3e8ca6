"""Every tunable default of roadpubsub, in one typed place.

Functions take keyword-only options whose defaults come from :data:`DEFAULTS`; pass a
value to override one call, or build another :class:`Settings` with
``dataclasses.replace(DEFAULTS, ...)`` for a whole run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DEFAULTS", "Settings", "shared_data_candidates", "shared_data_dir",
           "shared_data_hint"]


@dataclass(frozen=True, slots=True)
class Settings:
    """Defaults used across the layers.

    Attributes
    ----------
    snap_distance_m
        Largest distance, in metres, between a lon/lat point and the road it is snapped to;
        a point farther than this from every road is an input error.
    locate_piece_m
        Length, in metres, of the pieces that long edge segments are cut into for the
        nearest-edge search tree. Smaller is faster per query, larger is a smaller tree.
    cell_capacity
        PMR quadtree split threshold: a leaf holding more edges than this is split in four.
        2,400 gives about 256 leaf cells on Rome (258K edges), the paper's setting.
    cell_max_depth
        Deepest quadtree level; stops splitting on piles of coincident edges.
    score_tolerance
        A message is delivered when SIM >= tau - score_tolerance (absorbs rounding).
    bound_slack_m
        Absolute slack, in metres, added in favour of keeping a candidate whenever a
        distance lower bound is compared with a distance limit; bounds are sums of
        floating-point lengths, so this keeps pruning safe under rounding.
    bound_slack_rel
        Relative slack of the same comparisons.
    dmax_m
        Default Dmax, the largest tolerated network distance, in metres.
    bucket_width_m
        Width, in metres, of the buckets of the verification search's bucket queue (> 0).
        Narrower buckets rescan fewer junctions, wider ones cost fewer empty buckets; on
        Rome 5-50 m gave the same speed.
    delta_compaction_min
        Subscriptions added since the last build that trigger an automatic compaction of an
        index's delta buffer (together with ``delta_compaction_ratio``).
    delta_compaction_ratio
        Compact when the delta buffer exceeds this fraction of the indexed subscriptions.
    topk_window
        W of top-k sliding-window subscriptions: their results come from the last W
        messages (``roadpubsub match --window``, ``roadpubsub spark batch-match --window``).
    normalize_keywords
        Compare keywords after Unicode NFC, case folding and stripping white space
        ("DELAYED" matches "delayed"); False compares them as exact strings.
    live_topk_window
        W of top-k subscriptions of a live service (``roadpubsub serve --window``), set
        when its folder is created, and of a folder whose manifest names none. Smaller
        than ``topk_window`` on purpose: a live service holds the window in memory, saves
        it in every snapshot and feeds it to every top-k subscribe, move and restart (a
        restart rebuilt 10,000 top-k subscriptions over W = 1,000 in about 8 s), while a
        batch ``match`` reads the stream once. Messages, >= 1.
    generate_subscriptions, generate_messages
        Sizes of a workload of ``roadpubsub generate`` (rows, >= 0 and >= 1).
    generate_alpha, generate_alpha_spread
        Centre and half-width of the uniform alpha of generated subscriptions (the paper's
        0.5 +- 0.1); both in [0, 1].
    generate_tau, generate_tau_spread
        Centre and half-width of the uniform tau of generated subscriptions (the paper's
        0.7 +- 0.1); tau in (0, 1].
    match_batch
        Messages per compiled matcher call of ``roadpubsub match --batch`` (>= 1); progress
        is reported per batch, the result does not depend on it.
    demo_subscriptions, demo_messages
        Workload sizes of ``roadpubsub demo`` (>= 0 subscriptions, >= 1 message).
    demo_brute_messages
        Messages (the first ones) the demo's brute-force reference matches (>= 0; 0 skips
        it).
    serve_host, serve_port
        Address ``roadpubsub serve`` listens on (loopback by default) and its TCP port
        (1-65535).
    snapshot_every
        Replay cost, in single-row events, between a live service's background snapshots
        (>= 1; a batch of n rows counts 1 + n // 25): a restart replays at most about this
        many.
    flush_every
        Published messages between segments of a live service's deliveries log (>= 1).
    flush_queue
        Deliveries segments waiting for their write on the writer's thread, at most
        (>= 1); past it the events wait for the disk (memory stays bounded).
    group_max
        Most queued move or publish requests a live service applies together as one
        index update or matcher call and one log record (>= 1; 1: one by one). A fleet
        over MQTT (10,000 moves/s) needs groups of hundreds: a group's fixed part (the
        index update, the log record) is paid once for all its requests.
    group_wait_ms
        Longest time, milliseconds (>= 0; 0: never), a live service's group started by a
        pipelined event (an MQTT move or message: its sender does not wait for the answer)
        waits for more while events keep arriving (an idle service applies each at once;
        HTTP requests never start a wait): on Rome at 1M subscriptions, matching 3 messages together
        cost 0.9 ms a message and 10 together 0.6 ms, and a run of moves pays about
        0.3 ms whatever its size.
    switch_interval_ms
        The interpreter's thread switch interval while serving, milliseconds (> 0; 5 is
        Python's own).
    mqtt_prefix
        Topic prefix of the live service's MQTT connector.
    mqtt_push
        Whose deliveries the MQTT connector publishes: ``"all"`` (every subscription but
        those that said ``"mqtt": false``) or ``"chosen"`` (only those that said
        ``"mqtt": true``).
    loadgen_clients
        Concurrent connections of ``roadpubsub loadgen`` (>= 1).
    loadgen_events
        Most events ``roadpubsub loadgen`` sends (>= 1).
    loadgen_seconds
        Most seconds ``roadpubsub loadgen`` runs (> 0).
    stream_max_files_per_trigger
        Message files per micro-batch of ``roadpubsub spark stream``, at most (>= 1).
    stream_trigger_seconds
        Micro-batch interval of ``roadpubsub spark stream``, seconds (>= 0; 0: as soon as
        the previous one is done and files are there).
    stream_rebase_rows
        Change rows after which the stream job's executors get a new base index instead of
        a longer delta (>= 1).
    stream_kafka_topic
        Kafka topic ``roadpubsub spark stream --kafka-bootstrap`` reads messages from.
    bounds_batch_cells
        Source cells per Pregel run of the ``graphframes`` bound engine, at most (>= 1): at
        267 (Rome in one batch) Spark's Java code generator failed on the first superstep.
    max_body_bytes
        Largest request body, bytes (>= 1): a longer ``Content-Length`` is answered 413
        before the body is read; a chunked body is cut off with 413 once past it.
    max_header_bytes
        Largest request head (request line and headers), bytes (>= 1024): 431 past it.
    body_timeout_s
        Seconds (> 0) a request's head and body may take to arrive in full; a slower or
        incomplete one is answered 408 and its connection closed.
    ws_max_per_client
        Open WebSocket connections of one client (>= 1): one ``Authorization`` value, or
        one peer address when it sends none; refused with 429 past it.
    ws_max_total
        Open WebSocket connections in all (>= 1); refused with 503 past it.
    ws_buffer_deliveries
        Deliveries (>= 1) waiting to be sent to one WebSocket client; a client further
        behind is closed with code 1013 (try again later: reconnect).
    ws_buffer_bytes
        Bytes (>= 1) of JSON waiting to be sent to one WebSocket client (same rule).
    ws_max_message_bytes
        Largest WebSocket message a client may send, bytes (>= 1).
    rate_limit_per_s
        Requests per second (>= 0; 0: no limit) one client (as for ``ws_max_per_client``)
        may make on average; past it, 429 with ``Retry-After``. ``/health`` is exempt.
    rate_limit_burst
        Requests (>= 1) a client may make at once before the rate applies (the bucket).
    max_connections
        Connections and requests in flight in all (>= 1): the server answers 503 past it.
    listen_backlog
        Connections the kernel queues before they are accepted (>= 1).
    keep_alive_timeout_s
        Seconds (> 0) an idle keep-alive connection is held open.
    max_keywords
        Most keywords one subscription or message may carry (>= 1); a longer list is
        refused with the row and the field named.
    max_keyword_bytes
        Longest keyword, in UTF-8 bytes after normalisation (NFC, case folding), >= 1.
        Bounds what a request adds to the vocabulary, the log and every snapshot.
    max_batch_rows
        Most rows (subscriptions, moves or messages) one request body may carry (>= 1).
    max_json_depth
        Deepest nesting of arrays and objects a request body may hold (>= 3; a batch of
        subscriptions nests 3 deep). Checked without recursion before the body is decoded.
    decode_thread_bytes
        Request bodies larger than this, in bytes, are decoded on a worker thread so a
        large body never stalls the event loop; smaller ones are decoded in line.
    time_min, time_max
        Range of accepted times (a message's ``time``, a subscription's ``expires_at``),
        epoch seconds: 0 (1970-01-01) to 253,402,300,799 (9999-12-31T23:59:59Z).
    token_reload_s
        Seconds (> 0) between two looks of a running service at its token file
        (``roadpubsub token revoke`` takes effect within this time).
    service_max_log_bytes
        Largest size, in bytes, of the live service's write-ahead log (>= 1; ``roadpubsub
        serve --max-log-bytes``). Past it events are refused with 503 until a snapshot lets
        the covered segments be dropped (snapshots keep the log far below it; the limit
        bites when snapshots keep failing). Default 2 GiB.
    service_snapshot_retry_s
        Seconds before a failed background snapshot of the service is retried (> 0); the
        wait doubles after each further failure in a row.
    service_snapshot_retry_max_s
        Longest wait, in seconds, between snapshot retries (>= service_snapshot_retry_s).
    service_probe_interval_s
        Seconds between the failed service's probes of its disk (a small file written and
        fsynced in the state folder); the first probe that succeeds reloads the state.
    webhook_batch_max
        Deliveries per webhook POST, at most (>= 1).
    webhook_timeout_s
        Seconds a webhook POST may take, connecting included, before it counts as failed (> 0).
    webhook_max_attempts
        Attempts of a webhook batch before its deliveries go to the dead-letter record (>= 1).
    webhook_max_age_s
        Seconds a webhook delivery may stay queued; a failed attempt after that moves it to
        the dead-letter record (> 0; 86400 is one day).
    webhook_backoff_base_s
        First retry's backoff ceiling, seconds; doubles per attempt (full jitter: the wait is
        uniform between 0 and the ceiling) (> 0).
    webhook_backoff_cap_s
        Largest backoff ceiling, and largest ``Retry-After`` honoured, seconds (> 0).
    webhook_memory_per_endpoint
        Pending webhook deliveries per endpoint kept in memory; the rest are read back from
        the outbox files (>= 1).
    webhook_segment_bytes
        Size in bytes after which the webhook outbox starts a new segment file; fully
        acknowledged segments are deleted (>= 1).
    webhook_allow_private
        Whether webhook URLs may resolve to loopback and private addresses (link-local,
        including the cloud metadata address, is refused anyway).
    stream_retention_deliveries
        Deliveries the live service holds in memory for resumable streams (``WS
        /deliveries?after=SEQ``, ``GET /deliveries/stream``), at least (>= 1; ``roadpubsub
        serve --stream-retention``): a stream resumes after any seq among the last this
        many; older ones answer 410 naming the oldest seq still held (they stay readable
        with ``GET /messages/{id}``). About 100 bytes each; default 1,000,000.
    stream_retention_s
        Seconds a delivery stays held for resumable streams, at most (>= 0; 0: no age bound;
        ``roadpubsub serve --stream-retention-seconds``), together with
        ``stream_retention_deliveries``: a delivery is held while it is among the last that
        many and younger than this (counted from when the service applied it, or from the
        start for those read back at a start); older ones answer 410 like the others.
        Default 0.
    stream_batch
        Deliveries a resumable stream reads from the journal at a time (>= 1): its memory
        per reader, and the slice a reader catching up sends before others get a turn.
    stream_keepalive_s
        Seconds of silence after which a Server-Sent Events stream sends a comment line,
        so proxies keep it open (> 0).
    generate_routes
        Generated subscriptions ``roadpubsub generate --routes`` turns into routes (>= 0).
    generate_route_min_m, generate_route_max_m
        Length range in metres of the routes ``roadpubsub generate --routes`` draws
        (shortest paths between random places, as trips run); 0 < min <= max.
    service_set_max_points
        Most waypoints (LineString), polygon vertices (Polygon, MultiPolygon, every ring)
        or nodes (NodePath) one ``geometry`` of a live subscription or move may carry
        (>= 2); more is refused before anything is resolved.
    service_set_max_pieces
        Most road-segment pieces one resolved route or area of the live service may hold
        (>= 1); a larger one is refused naming the row (an area over a whole city).
    service_set_batch_points
        Most waypoints, vertices and nodes all the ``geometry`` fields of one request may
        carry together (>= 2): bounds the shortest-path searches one request costs.
    service_set_sync_pieces
        The live service rebuilds its route and area matchers whole after a change while
        they hold at most this many pieces (>= 0); beyond, changed rows go to a delta
        matcher and the whole is rebuilt on a worker thread
        (:class:`~roadpubsub.service.live_sets.LiveSets`).
    service_set_delta_share
        A new whole set matcher is built once the delta holds more than this share of its
        pieces (and more than ``service_set_sync_pieces``), >= 0.
    webhook_recover_batch
        Webhook deliveries queued in the outbox per write when a start or a reload queues
        the logged ones the outbox lacks, read back from the deliveries log one segment at
        a time (>= 1): bounds the memory of that catch-up.
    gc_young_threshold
        The interpreter's youngest-generation collection threshold while serving (tracked
        objects allocated net of those freed between two collections; 700 is Python's
        own, range 700-10,000,000). A fleet allocates about ten per event: at 700 the
        service collected 17-30 times a second and promoted events still in flight to
        the older generations, whose full collections stop every thread.
    """

    snap_distance_m: float = 250.0
    locate_piece_m: float = 50.0
    cell_capacity: int = 2400
    cell_max_depth: int = 16
    score_tolerance: float = 1e-9
    bound_slack_m: float = 1e-6
    bound_slack_rel: float = 1e-9
    dmax_m: float = 5000.0
    bucket_width_m: float = 10.0
    delta_compaction_min: int = 20_000
    delta_compaction_ratio: float = 0.05
    topk_window: int = 10_000
    normalize_keywords: bool = True
    # --- defaults of the commands (issue 31: one settings source) ---
    live_topk_window: int = 1000
    generate_subscriptions: int = 10_000
    generate_messages: int = 1_000
    generate_alpha: float = 0.5
    generate_alpha_spread: float = 0.1
    generate_tau: float = 0.7
    generate_tau_spread: float = 0.1
    match_batch: int = 256
    demo_subscriptions: int = 20_000
    demo_messages: int = 500
    demo_brute_messages: int = 100
    serve_host: str = "127.0.0.1"
    serve_port: int = 8000
    snapshot_every: int = 20_000
    flush_every: int = 2_000
    flush_queue: int = 4
    group_max: int = 1024
    group_wait_ms: float = 10.0
    switch_interval_ms: float = 5.0
    mqtt_prefix: str = "roadpubsub"
    mqtt_push: str = "all"
    loadgen_clients: int = 8
    loadgen_events: int = 20_000
    loadgen_seconds: float = 60.0
    stream_max_files_per_trigger: int = 8
    stream_trigger_seconds: float = 0.0
    stream_rebase_rows: int = 200_000
    stream_kafka_topic: str = "messages"
    bounds_batch_cells: int = 32
    # --- transport limits (roadpubsub serve) ---
    max_body_bytes: int = 16 * 2**20
    max_header_bytes: int = 16 * 2**10
    body_timeout_s: float = 30.0
    ws_max_per_client: int = 16
    ws_max_total: int = 1024
    ws_buffer_deliveries: int = 10_000
    ws_buffer_bytes: int = 8 * 2**20
    ws_max_message_bytes: int = 64 * 2**10
    rate_limit_per_s: float = 5000.0
    rate_limit_burst: int = 10_000
    max_connections: int = 2048
    listen_backlog: int = 2048
    keep_alive_timeout_s: float = 5.0
    # --- validation ---
    max_keywords: int = 64
    max_keyword_bytes: int = 256
    max_batch_rows: int = 1_000_000
    max_json_depth: int = 32
    decode_thread_bytes: int = 65_536
    time_min: float = 0.0
    time_max: float = 253_402_300_799.0
    # --- access ---
    token_reload_s: float = 1.0
    # --- runtime resilience ---
    service_max_log_bytes: int = 2 * 1024**3
    service_snapshot_retry_s: float = 1.0
    service_snapshot_retry_max_s: float = 60.0
    service_probe_interval_s: float = 1.0
    # --- webhooks (issue 30) ---
    webhook_batch_max: int = 100
    webhook_timeout_s: float = 10.0
    webhook_max_attempts: int = 12
    webhook_max_age_s: float = 86_400.0
    webhook_backoff_base_s: float = 0.5
    webhook_backoff_cap_s: float = 300.0
    webhook_memory_per_endpoint: int = 1_000
    webhook_segment_bytes: int = 16 * 1024 * 1024
    webhook_allow_private: bool = False
    # --- push (issue 30: resumable streams) ---
    stream_retention_deliveries: int = 1_000_000
    stream_batch: int = 1_000
    stream_keepalive_s: float = 15.0
    stream_retention_s: float = 0.0
    # --- routes and areas (issue 32) ---
    generate_routes: int = 0
    generate_route_min_m: float = 2_000.0
    generate_route_max_m: float = 20_000.0
    # --- live route and area subscriptions (issue 32, service) ---
    service_set_max_points: int = 1_000
    service_set_max_pieces: int = 50_000
    service_set_batch_points: int = 20_000
    # --- live route and area matchers under changes (issue 32, service) ---
    service_set_sync_pieces: int = 20_000
    service_set_delta_share: float = 0.1
    # --- webhook recovery (issue 30 follow-up) ---
    webhook_recover_batch: int = 10_000
    # --- fleetlat ---
    gc_young_threshold: int = 20_000


DEFAULTS = Settings()


def shared_data_candidates() -> list[Path]:
    """Folders searched, in order, for the real data sets.

    ``ROADPUBSUB_SHARED_DATA`` when set; else ``shared/data`` and ``../shared/data`` below
    the current directory, then ``../shared/data`` beside the source checkout (an editable
    install). A non-editable install lives in site-packages, so the working directory is
    what finds the data there.
    """
    env = os.environ.get("ROADPUBSUB_SHARED_DATA")
    if env:
        return [Path(env)]
    cwd = Path.cwd()
    checkout = Path(__file__).resolve().parent.parent
    found: list[Path] = []
    for folder in (cwd / "shared" / "data", cwd.parent / "shared" / "data",
                   checkout.parent / "shared" / "data"):
        if folder not in found:
            found.append(folder)
    return found


def shared_data_dir() -> Path:
    """Folder of the real data sets: the first of :func:`shared_data_candidates` that exists.

    When none exists, the first candidate is returned; callers check and name
    :func:`shared_data_candidates` in their message.
    """
    candidates = shared_data_candidates()
    for folder in candidates:
        if folder.is_dir():
            return folder
    return candidates[0]


def shared_data_hint() -> str:
    """Where the shared data was looked for, and how to point at it (for error hints)."""
    looked = ", ".join(str(p) for p in shared_data_candidates())
    return (f"looked in {looked}; set ROADPUBSUB_SHARED_DATA to the folder holding text/ "
            "and dimacs/, or run from the folder beside it")
