"""One end-to-end measurement of the live service: serve a fresh copy of a service folder,
drive it with ``roadpubsub loadgen``, and report the server's CPU per request.

The server's CPU (utime + stime of its process, from ``/proc``) over the load generator's
run is the figure that does not depend on what else the machine runs; events per second
and latencies do, so the load average is reported with them. Run it as::

    python -m roadpubsub.bench.live --template DIR --network ../shared/data/dimacs/rome.gr.gz

where ``DIR`` is a service folder (made once, e.g. with ``--index-file`` from
``roadpubsub index build`` output: ``--make-template`` does that) that every run copies.
With ``--auth`` (and/or ``--server-pythonpath``) the arms alternate in A B, B A order
after an unreported warm-up run, and a last ``summary`` line gives each arm's medians and
their ratios to the first arm's.

A run that cannot finish (the server exits or does not answer, the load generator fails,
a folder is missing) ends the command with one line on stderr naming what failed (and the
server's log, kept, when the server died) and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from roadpubsub.roadnet.errors import RoadPubSubError, format_error

__all__ = ["LiveRunError", "process_cpu_seconds", "run_bursts", "run_live", "stop_servers"]

PROG = "python -m roadpubsub.bench.live"


class LiveRunError(RoadPubSubError, RuntimeError):
    """A live measurement that could not finish: the server exited or did not answer,
    or the load generator failed.

    Parameters
    ----------
    message
        What failed (one line).
    server_log
        The server's log when the server died (named after the message).
    """

    def __init__(self, message: str, *, server_log: Path | None = None) -> None:
        super().__init__(message)
        self.server_log = server_log

    def __str__(self) -> str:
        text = super().__str__()
        return text if self.server_log is None else f"{text} (server log: {self.server_log})"

    def keep_log(self) -> None:
        """Copy the server's log out of the run's temporary folder, which is removed on
        the way out, and name the copy instead."""
        if self.server_log is None or not self.server_log.is_file():
            return
        fd, name = tempfile.mkstemp(prefix="roadpubsub-live-", suffix="-serve.log")
        with os.fdopen(fd, "wb") as out, self.server_log.open("rb") as src:
            shutil.copyfileobj(src, out)
        self.server_log = Path(name)


def _last_line(text: bytes) -> str:
    """The last non-empty line of a process's output (its error, as a rule), shortened."""
    lines = [ln.strip() for ln in text.decode(errors="replace").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no output"


def _server_died(proc: subprocess.Popen[bytes], log: Path, when: str) -> LiveRunError:
    """The error of a server that exited, with its log's last line (its own error)."""
    try:
        last = _last_line(log.read_bytes())
    except OSError:
        last = "no log"
    msg = f"the server exited with status {proc.returncode} {when}: {last}"
    return LiveRunError(msg, server_log=log)


def process_cpu_seconds(pid: int, tid: int | None = None) -> float:
    """utime + stime of process ``pid`` (of its thread ``tid``: ``pid`` is the main
    thread's) (Linux /proc), seconds."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop_servers(*procs: subprocess.Popen[bytes], grace_s: float = 180.0) -> None:
    """Stop service processes as a supervisor does: SIGTERM to all, then wait for each
    (``grace_s`` seconds, a snapshot on the way out included) and kill what is left."""
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path,
                timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise _server_died(proc, log, "before it answered")
        try:
            urllib.request.urlopen(url + "/health", timeout=2)
            return
        except OSError:
            time.sleep(0.3)
    msg = f"the server at {url} did not answer within {timeout:g} s"
    raise LiveRunError(msg, server_log=log)


def run_live(*, template: Path, network: str, serve_args: list[str], load_args: list[str],
             port: int, work: Path, server_path: str | None = None, auth: bool = False
             ) -> dict[str, Any]:
    """Serve a copy of ``template``, run the load generator against it, stop the server.

    ``auth``: the copy gets an admin token (so the server authenticates every request) and
    the load generator sends it; otherwise the copy has no token (loopback, open)."""
    state = work / "state"
    shutil.rmtree(state, ignore_errors=True)
    shutil.copytree(template, state, ignore=shutil.ignore_patterns("tokens.json*"))
    env = {**os.environ}
    env.pop("ROADPUBSUB_TOKEN", None)
    if auth:
        from roadpubsub.service.access import ADMIN, TokenStore

        _, token = TokenStore(state).create(ADMIN)
        token_file = work / "token"
        token_file.write_text(token, encoding="utf-8")
        token_file.chmod(0o600)
        load_args = [*load_args, "--token-file", str(token_file)]
    url = f"http://127.0.0.1:{port}"
    log_path = work / "serve.log"
    with log_path.open("wb") as log:
        srv_env = env if server_path is None else {**env, "PYTHONPATH": server_path}
        # ``python -m`` puts the working directory first on sys.path: run another tree's
        # server from inside that tree, or a checkout's own package shadows it
        srv = subprocess.Popen([sys.executable, "-m", "roadpubsub", "serve", "--state",
                                str(state.resolve()), "--port", str(port), *serve_args],
                               env=srv_env, stderr=log, cwd=server_path)
    try:
        _wait_ready(url, srv, log_path)
        load0 = os.getloadavg()
        c0 = process_cpu_seconds(srv.pid)
        # its stderr taken, to name its error in one line (and passed on when it succeeds)
        lg = subprocess.Popen([sys.executable, "-m", "roadpubsub", "loadgen", "--url", url,
                               "--network", network, *load_args], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = lg.communicate()
        c1 = process_cpu_seconds(srv.pid)
        if lg.returncode != 0:
            if srv.poll() is not None:
                raise _server_died(srv, log_path, "during the load")
            msg = f"the load generator exited with status {lg.returncode}: {_last_line(err)}"
            raise LiveRunError(msg)
        sys.stderr.write(err.decode(errors="replace"))
        try:
            rep = json.loads(out)
        except ValueError as exc:
            msg = f"the load generator's report is not JSON: {exc}"
            raise LiveRunError(msg) from exc
        load1 = os.getloadavg()
    finally:
        stop_servers(srv)
    requests = max(int(rep["requests"]), 1)
    split = _cpu_split(rep.get("server_before", {}), rep.get("server_after", {}), requests)
    return {"load_before": [round(x, 2) for x in load0],
            "load_after": [round(x, 2) for x in load1],
            "server_cpu_s": round(c1 - c0, 2),
            "server_cpu_us_per_request": round((c1 - c0) / requests * 1e6, 1),
            **{k: rep[k] for k in ("seconds", "requests", "events", "events_per_second",
                                   "errors", "latency_ms") if k in rep},
            "loadgen_cpu_s": rep.get("client_cpu_s"),
            "loadgen_cpu_us_per_request": round(float(rep.get("client_cpu_s") or 0.0)
                                                / requests * 1e6, 1),
            **split,
            "server_after": {k: rep["server_after"].get(k) for k in (
                "rss_bytes", "compactions", "snapshots", "groups", "grouped_requests",
                "delta_rows")}}


def run_bursts(*, template: Path, network: str, serve_args: list[str],
               load_args: list[str], port: int, work: Path,
               arms: list[tuple[str | None, bool]], rounds: int, burst: float,
               warmup: int = 1) -> dict[tuple[str | None, bool], list[dict[str, Any]]]:
    """Serve every arm (tree, authentication) at once, each a copy of ``template`` on
    ports ``port``, ``port + 1`` ..., and load them in turn with bursts of ``burst``
    seconds, A B, B A, A B ... for ``rounds`` rounds (after ``warmup`` unreported ones):
    the arms meet the machine's other load in the same seconds, minutes apart at most
    instead of a run's length. Per burst: the server's CPU (and its event loop's, the main
    thread's) over the burst, per request."""
    from roadpubsub.roadnet.io import load_network
    from roadpubsub.service.access import ADMIN, TokenStore
    from roadpubsub.service.loadgen import Stream, build_stream, run_load

    opts = argparse.ArgumentParser(add_help=False)
    opts.add_argument("--existing", type=int, default=1_000_000)
    opts.add_argument("--clients", type=int, default=8)
    opts.add_argument("--seed", type=int, default=0)
    load, _ = opts.parse_known_args(load_args)
    servers: list[tuple[subprocess.Popen[bytes], str, str | None, Path]] = []
    env = {**os.environ}
    env.pop("ROADPUBSUB_TOKEN", None)
    try:
        for k, (tree, auth) in enumerate(arms):
            state = work / f"arm{k}" / "state"
            shutil.rmtree(state.parent, ignore_errors=True)
            shutil.copytree(template, state, ignore=shutil.ignore_patterns("tokens.json*"))
            token = TokenStore(state).create(ADMIN)[1] if auth else None
            url = f"http://127.0.0.1:{port + k}"
            log_path = state.parent / "serve.log"
            with log_path.open("wb") as log:
                srv = subprocess.Popen(
                    [sys.executable, "-m", "roadpubsub", "serve", "--state",
                     str(state.resolve()), "--port", str(port + k), *serve_args],
                    env=env if tree is None else {**env, "PYTHONPATH": tree},
                    stderr=log, cwd=tree)
            servers.append((srv, url, token, log_path))
        for srv, url, _, log_path in servers:
            _wait_ready(url, srv, log_path)
        first = int(time.time() * 1000) * 1000
        total = rounds + warmup
        stream = build_stream(load_network(network), n_points=40_000, n_messages=2_000,
                              first_new_id=first, seed=load.seed)
        share = len(stream.subscriptions) // total  # new ids: each burst its own
        out: dict[tuple[str | None, bool], list[dict[str, Any]]] = {a: [] for a in arms}
        for r in range(total):
            subs = stream.subscriptions[r * share:(r + 1) * share]
            order = list(range(len(arms)))
            for k in (order if r % 2 == 0 else order[::-1]):
                srv, url, token, log_path = servers[k]
                c0, m0 = process_cpu_seconds(srv.pid), process_cpu_seconds(srv.pid, srv.pid)
                try:
                    rep = run_load(url, Stream(stream.moves, stream.messages, subs),
                                   existing=load.existing, clients=load.clients,
                                   events=10**9, seconds=burst, seed=load.seed + r,
                                   first_message_id=first + r * 10**7, token=token)
                except (RoadPubSubError, OSError) as exc:
                    if srv.poll() is None:
                        raise
                    raise _server_died(srv, log_path, "during a burst") from exc
                c1, m1 = process_cpu_seconds(srv.pid), process_cpu_seconds(srv.pid, srv.pid)
                if r < warmup:
                    continue
                n = max(rep.requests, 1)
                out[arms[k]].append({
                    "round": r - warmup, "requests": rep.requests,
                    "events_per_second": round(rep.events / rep.seconds, 1),
                    "errors": rep.errors, "server_cpu_s": round(c1 - c0, 2),
                    "server_cpu_us_per_request": round((c1 - c0) / n * 1e6, 1),
                    "thread_cpu_us_per_request": {
                        "MainThread": round((m1 - m0) / n * 1e6, 1)}})
    finally:
        stop_servers(*(srv for srv, _, _, _ in servers))
    return out


def _cpu_split(before: dict[str, Any], after: dict[str, Any], requests: int
               ) -> dict[str, Any]:
    """Where the server's CPU went, per request of the run: by thread (event loop, apply,
    fsync), and the apply thread's by kind of request (servers that report them)."""
    out: dict[str, Any] = {}
    t0, t1 = before.get("thread_cpu_seconds"), after.get("thread_cpu_seconds")
    if t0 is not None and t1 is not None:
        out["thread_cpu_us_per_request"] = {
            name: round((t1[name] - t0.get(name, 0.0)) / requests * 1e6, 1) for name in t1}
    a0, a1 = before.get("apply_cpu_seconds"), after.get("apply_cpu_seconds")
    n0, n1 = before.get("apply_requests", {}), after.get("apply_requests", {})
    if a0 is not None and a1 is not None:
        out["apply_cpu_us"] = {
            kind: {"per_request": round((a1[kind] - a0.get(kind, 0.0)) / requests * 1e6, 1),
                   "per_request_of_kind": round((a1[kind] - a0.get(kind, 0.0))
                                                / max(n1.get(kind, 0) - n0.get(kind, 0), 1)
                                                * 1e6, 1)}
            for kind in a1}
    if "fsyncs" in after and "fsyncs" in before:
        out["fsyncs_per_request"] = round((after["fsyncs"] - before["fsyncs"]) / requests, 3)
    return out


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 1) if values else float("nan")


def _summary(results: dict[tuple[str | None, bool], list[dict[str, Any]]]
             ) -> list[dict[str, Any]]:
    """Per arm (tree, authentication): the medians over its runs; an arm with
    authentication also has its ratios to the same tree's arm without (when there is
    none, e.g. ``--auth-only``, a later tree's arm has them to the first tree's; events per second;
    server CPU per request, the figure the machine's other load moves least), of the
    medians and the median of the runs' pairs (the n-th run of each, next to each other)."""
    out: list[dict[str, Any]] = []
    for (tree, auth), runs in results.items():
        loop = [r.get("thread_cpu_us_per_request", {}).get("MainThread") for r in runs]
        row: dict[str, Any] = {
            "server": tree or "this tree", "auth": auth, "runs": len(runs),
            "events_per_second": _median([r["events_per_second"] for r in runs]),
            "server_cpu_us_per_request": _median(
                [r["server_cpu_us_per_request"] for r in runs]),
            "event_loop_us_per_request": _median([x for x in loop if x is not None])}
        base = results.get((tree, False))
        key0 = (tree or "this tree", False)
        if not (auth and base):  # no arm without tokens: against the first tree's arm
            first = next(iter(results))[0]
            base = results.get((first, auth)) if first != tree else None
            key0 = (first or "this tree", auth)
        if base:
            off = out[[(o["server"], o["auth"]) for o in out].index(key0)]
            for key in ("events_per_second", "server_cpu_us_per_request"):
                row[f"{key}_ratio"] = round(row[key] / off[key], 3)
                row[f"{key}_ratio_of_pairs"] = round(statistics.median(
                    a[key] / b[key] for a, b in zip(runs, base, strict=False)), 3)
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    """The command: print each run's figures (JSON lines), then a summary.

    Returns
    -------
    int
        0 done; 1 after one line on stderr naming what failed (a run, a folder, the
        server, with its log kept when it died), as the command line prints its errors.
    """
    args = _parser().parse_args(argv)
    try:
        return _measure(args)
    except (RoadPubSubError, OSError) as exc:
        # a failed run is not a bug of the bench: one line, no traceback
        print(f"{PROG}: error: {format_error(exc)}", file=sys.stderr, flush=True)
        return 1


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--template", required=True, type=Path,
                   help="service folder copied for each run")
    p.add_argument("--make-template", metavar="INDEX_FILE", default=None,
                   help="create --template first from this built EIA index")
    p.add_argument("--network", required=True)
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--server-pythonpath", default=None, metavar="DIR",
                   help="run the server from another source tree (e.g. an export of an "
                        "older commit), alternating with this one: old, new, old, new...")
    p.add_argument("--auth", action="store_true",
                   help="alternate runs without tokens and with an admin token (every "
                        "request authenticated): off, on, on, off, off, on...")
    p.add_argument("--auth-only", action="store_true",
                   help="every arm with an admin token (every request authenticated; "
                        "with --server-pythonpath: old against new, both authenticated)")
    p.add_argument("--warmup", type=int, default=1, metavar="N",
                   help="unreported runs first (the first run after a change of the "
                        "sources compiles the kernels; default 1)")
    p.add_argument("--burst", type=float, default=None, metavar="S",
                   help="serve every arm at once and alternate bursts of S seconds of "
                        "load between them, --runs rounds (for a machine other work "
                        "shares: the arms' figures are then taken in the same minutes)")
    p.add_argument("--serve-args", default="", help="extra 'serve' arguments")
    p.add_argument("--load-args", default="--existing 1000000 --clients 8 --events 60000 "
                   "--seconds 30", help="'loadgen' arguments")
    return p


def _measure(args: argparse.Namespace) -> int:
    if args.make_template and not (args.template / "manifest.json").exists():
        from roadpubsub.index.store import load_index
        from roadpubsub.service.state import create_state

        create_state(args.template, load_index(args.make_template),
                     about={"source": str(args.make_template)})
    with tempfile.TemporaryDirectory(prefix="roadpubsub-live-") as tmp:
        try:
            return _arms(args, Path(tmp))
        except LiveRunError as exc:
            exc.keep_log()  # the folder goes at the end of this block, the log stays
            raise


def _arms(args: argparse.Namespace, tmp: Path) -> int:
    """Every arm's runs (or bursts) in the folder ``tmp``, printed as they finish."""
    trees: list[str | None] = [None] if args.server_pythonpath is None \
        else [args.server_pythonpath, None]
    modes = [True] if args.auth_only else [False, True] if args.auth else [False]
    arms = [(tree, auth) for tree in trees for auth in modes]

    def run(tree: str | None, auth: bool) -> dict[str, Any]:
        return run_live(template=args.template, network=args.network,
                        serve_args=args.serve_args.split(),
                        load_args=args.load_args.split(), port=args.port,
                        work=tmp, server_path=tree, auth=auth)

    if args.burst is not None:
        bursts = run_bursts(template=args.template, network=args.network,
                            serve_args=args.serve_args.split(),
                            load_args=args.load_args.split(), port=args.port,
                            work=tmp, arms=arms, rounds=args.runs,
                            burst=args.burst, warmup=args.warmup)
        for (tree, auth), rows in bursts.items():
            for row in rows:
                print(json.dumps({"server": tree or "this tree", "auth": auth, **row}))
        print(json.dumps({"summary": _summary(bursts)}), flush=True)
        return 0
    for _ in range(args.warmup):
        for tree in trees:
            run(tree, modes[0])
    results: dict[tuple[str | None, bool], list[dict[str, Any]]] = {a: [] for a in arms}
    for n in range(args.runs):
        # A B, B A, A B ...: a drift of the machine over the command weighs on both
        for tree, auth in (arms if n % 2 == 0 else arms[::-1]):
            res = run(tree, auth)
            results[(tree, auth)].append(res)
            print(json.dumps({"server": tree or "this tree", "auth": auth, **res}),
                  flush=True)
    print(json.dumps({"summary": _summary(results)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
