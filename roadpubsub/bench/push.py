"""Webhook throughput and stream resume latency of the live service (issue 30).

Serves a fresh copy of a service folder with webhooks allowed on loopback, subscribes
``--hooked`` subscriptions (real tweet keywords, placed by
:func:`roadpubsub.index.workload.generate_workload` on the folder's network) whose ``webhook`` is a
receiver started here, publishes ``--messages`` messages in batches, and reports:

* webhook deliveries per second: from the first publish until the receiver has every
  delivery the answers listed (deduplicated on the seq), with the batch size used;
* resume latency: a WebSocket ``/deliveries?after=SEQ`` opened ``--resume-back``
  deliveries behind the head, to its first delivery and to the head.

Run it as (small scale; the template holds the subscriptions that are not hooked)::

    python -m roadpubsub.bench.push --template DIR --hooked 2000 --messages 2000

The load average is printed with the figures (they depend on what else the machine runs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["main", "run_push"]


class _Sink:
    """A loopback webhook receiver counting distinct seqs."""

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self.posts = 0
        self.lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                ids = [int(x) for x in self.headers["RoadPubSub-Delivery-Id"].split(",")]
                with sink.lock:
                    sink.seen.update(ids)
                    sink.posts += 1
                del body
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"


def run_push(template: Path, *, hooked: int, messages: int, batch: int, resume_back: int,
             seed: int = 0, tweets: Path | None = None) -> dict[str, Any]:
    """One run (see the module docstring); returns the figures."""
    import httpx
    import websockets.sync.client as ws_client

    from roadpubsub.index.io import messages_table, subscriptions_table
    from roadpubsub.index.store import load_index
    from roadpubsub.index.text import read_tweet_tokens
    from roadpubsub.index.workload import generate_workload
    from roadpubsub.roadnet.settings import shared_data_dir
    from roadpubsub.service.snapshot import read_manifest, snapshot_paths

    manifest = read_manifest(template)
    assert manifest is not None, f"{template} holds no service"
    index = load_index(snapshot_paths(template, int(manifest["seq"]))[0])
    words = read_tweet_tokens(tweets or shared_data_dir() / "text/airline_tweets.csv")
    wl = generate_workload(index.network, n_subscriptions=hooked, n_messages=messages,
                           seed=seed, tweets=words)
    subs = subscriptions_table(wl.subscriptions, network=index.network,
                               weights=wl.weights).to_pylist()
    msgs = messages_table(wl.messages, network=index.network,
                          weights=wl.weights).to_pylist()
    sink = _Sink()
    for row in subs:
        row["id"] += 10**12  # beside the template's own ids
        row["webhook"] = sink.url
    for row in msgs:
        row["id"] += 10**12
    work = Path(tempfile.mkdtemp(prefix="push-bench-"))
    folder = work / "svc"
    shutil.copytree(template, folder)
    (folder / "tokens.json").unlink(missing_ok=True)  # loopback, unauthenticated
    port = 18000 + os.getpid() % 1000
    log = (work / "server.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "roadpubsub", "serve", "--state",
                             str(folder), "--port", str(port), "--quiet",
                             "--webhook-allow-private"], stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, timeout=600) as c:
            deadline = time.monotonic() + 600
            while True:
                try:
                    if c.get("/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline and proc.poll() is None, "no start"
                time.sleep(0.2)
            for k in range(0, len(subs), 5000):
                assert c.post("/subscriptions", json=subs[k:k + 5000]).status_code == 201
            t0 = time.perf_counter()
            want: set[int] = set()
            for k in range(0, len(msgs), batch):
                r = c.post("/messages", json=msgs[k:k + batch])
                assert r.status_code == 200, r.text
                want.update(d["seq"] for d in r.json()["deliveries"]
                            if d["subscription_id"] >= 10**12)
            published = time.perf_counter() - t0
            while len(want - sink.seen) and time.perf_counter() - t0 < 600:
                time.sleep(0.01)
            sent_s = time.perf_counter() - t0
            head = max(want) if want else 0
            after = max(0, head - resume_back)
            r0 = time.perf_counter()
            with ws_client.connect(url.replace("http", "ws") + f"/deliveries?after={after}",
                                   close_timeout=0.1) as conn:
                first = json.loads(conn.recv(timeout=60))["seq"]
                to_first = time.perf_counter() - r0
                last = first
                while last < head:
                    last = json.loads(conn.recv(timeout=60))["seq"]
                to_head = time.perf_counter() - r0
        return {"hooked": hooked, "messages": messages, "publish_batch": batch,
                "webhook_deliveries": len(want), "received": len(want & sink.seen),
                "posts": sink.posts, "publish_s": round(published, 3),
                "all_received_s": round(sent_s, 3),
                "webhook_deliveries_per_s": round(len(want) / sent_s, 1) if sent_s else None,
                "resume_back": head - after, "resume_first_s": round(to_first, 4),
                "resume_to_head_s": round(to_head, 4), "load_average": os.getloadavg()}
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        sink.server.shutdown()
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m roadpubsub.bench.push", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--template", required=True, type=Path, metavar="DIR",
                   help="a service folder (copied; never changed)")
    p.add_argument("--hooked", type=int, default=2000, help="subscriptions with a webhook")
    p.add_argument("--messages", type=int, default=2000, help="messages published")
    p.add_argument("--batch", type=int, default=10, help="messages per publish request")
    p.add_argument("--resume-back", type=int, default=10_000,
                   help="deliveries behind the head the resumed stream starts")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    print(json.dumps(run_push(a.template, hooked=a.hooked, messages=a.messages,
                              batch=a.batch, resume_back=a.resume_back, seed=a.seed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
