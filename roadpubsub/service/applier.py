"""The one thread that applies events, in arrival order, grouping what it can.

Requests queue up while the previous ones are applied. The thread takes everything queued
(up to ``group_max`` requests) and applies runs of consecutive moves, or of consecutive
publishes, as one index update or one matcher call and one log record: the apply stage's
counterpart of the log's group commit. Each request is still checked on its own (a bad one
is refused alone) and answered with its own part of the result.

A run applied together equals the same requests applied one by one in arrival order:

* moves: each subscription ends where the last move of the run put it, and no message is
  matched in between;
* publishes: messages do not change the subscriptions, except through expiry, which the
  service applies in ascending time; so a run only continues while the requests' times do
  not decrease and no message id repeats one of the run.

Requests that are concurrent (``concurrent=True``: the HTTP layer's, which answers each
connection's requests one at a time) are first ordered by kind within the group: moves,
then publishes, then the rest, each kind in arrival order. None of them has been answered
when the group is taken, so no client can have seen one take effect before another: any
order of them is an order in which they could have arrived, and the log records the
order applied (its records replay to the same state and deliveries). One run of moves per
group instead of several (a publish between two moves split them) pays the fixed part of
a move once. Requests that must keep their place are not concurrent: they stay in place
and nothing is moved across them (MQTT's subscriptions and unsubscriptions; MQTT's moves
and messages are concurrent, as MQTT orders one client's messages on one topic only, and
moves and messages travel on different topics: :mod:`roadpubsub.service.mqtt`).

A group's fixed part (a run of moves pays about 0.3 ms whatever its size; matching 3
messages together cost 0.9 ms a message on Rome at 1M subscriptions, 10 together 0.6 ms)
is what a busy thread spends its time on when its groups are small. So while events keep
arriving (some came while the last group was applied), a group that starts with a
*pipelined* event (its sender goes on without waiting for the answer: MQTT's moves and
messages) takes what arrives for up to ``wait_ms`` before it is applied: with 10 ms, a
fleet at 10,000 moves/s and 500 messages/s went from about 14,000 groups a minute to
5,000, the apply thread's CPU per event from 61 to 46-50 us and its p99 from 314-682 ms
to 72-110 ms (BENCHMARKS.md). Nothing else starts a wait: an idle thread applies each
group at once, and a closed-loop client's request (HTTP's, which waits for its answer
before the next) never starts a waiting group (one that arrives during a wait joins the
group, at most ``wait_ms`` late); a request that keeps its place ends the wait.
"""

from __future__ import annotations

import functools
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from roadpubsub.index.events import BodyParser, MessageBatch, MoveBatch, RequestError
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.settings import DEFAULTS
from roadpubsub.service.answers import DeliveryList
from roadpubsub.service.results import Applied
from roadpubsub.service.state import ServiceState
from roadpubsub.service.topk_found import TopkFound, topk_json

__all__ = ["Applier", "MoveBundle"]


class MoveBundle:
    """Many one-row move events that arrived together (a transport's read), queued as one
    request: one queue item, one reply, one answer object for all of them.

    Parameters
    ----------
    rows
        One move object per event, each with its subscription's ``"id"``; no id twice.
    replies
        Each event's own reply (``set_result``, ``set_exception``, ``done``): used only
        when the bundle cannot be applied as a whole (a bad row, an unknown id), so that
        each event gets its own answer, as if it had been queued alone.
    reply
        The bundle's reply: ``set_result`` gets one :class:`Applied` for every event.
    """

    __slots__ = ("replies", "reply", "rows")

    def __init__(self, rows: list[dict[str, Any]], replies: list[Any], reply: Any) -> None:
        self.rows = rows
        self.replies = replies
        self.reply = reply

    def ids(self) -> list[Any]:
        """The rows' ids."""
        return [r["id"] for r in self.rows]


@dataclass
class _Item:
    kind: str  # "move", "publish" or "call"
    payload: Any
    future: Any  # a concurrent Future, or anything with set_result/set_exception/done
    path_id: int | None = None
    label: str = ""
    concurrent: bool = False  # may be ordered with the group's other concurrent requests
    pipelined: bool = False  # its sender does not wait for its answer (see Applier._run)


class Applier:
    """Runs ``state``'s operations on one thread (see the module docstring).

    Parameters
    ----------
    state
        The service state (only this thread touches it).
    parser
        Turns bodies into batches.
    group_max
        Most requests applied together (1: one by one; default ``Settings.group_max``).
    wait_ms
        Longest time, in milliseconds (>= 0; 0: never; default ``Settings.group_wait_ms``),
        a group of concurrent requests waits for more to join it while events keep
        arriving (see the module docstring).
    """

    def __init__(self, state: ServiceState, parser: BodyParser, *,
                 group_max: int = DEFAULTS.group_max,
                 wait_ms: float = DEFAULTS.group_wait_ms) -> None:
        self.state = state
        self.parser = parser
        self.group_max = max(1, int(group_max))
        self.wait_s = max(0.0, float(wait_ms)) / 1000.0
        self.groups = 0
        self.grouped_requests = 0
        # CPU time of this thread by kind of request (parse, apply, log): where the
        # service's time goes, without a profiler
        self.cpu_seconds: dict[str, float] = {}
        self.requests: dict[str, int] = {}
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="apply", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ submitting
    # ``reply``: instead of a new Future, an object with the methods set_result,
    # set_exception and done that the apply thread calls (the HTTP layer's hand-off to its
    # event loop, without a Future's lock and condition per request).
    # ``concurrent``: the request has no order with the other concurrent requests queued
    # with it (see the module docstring); False keeps it where it arrived.
    def call(self, fn: Callable[[], Any], *, reply: Any = None, kind: str = "call",
             concurrent: bool = False) -> Future[Any]:
        """Run ``fn`` on the apply thread, in order with the events (``kind`` names it in
        :attr:`cpu_seconds`)."""
        fut: Future[Any] = Future() if reply is None else reply
        self._queue.put(_Item("call", fn, fut, label=kind, concurrent=concurrent))
        return fut

    def move(self, body: Any, *, path_id: int | None = None, reply: Any = None,
             concurrent: bool = False, pipelined: bool = False) -> Future[Applied]:
        """A move request (one or a batch)."""
        if isinstance(body, MoveBundle):  # its own reply; its rows carry their ids
            self._queue.put(_Item("move", body, body.reply, concurrent=concurrent,
                                  pipelined=pipelined))
            return body.reply  # type: ignore[no-any-return]
        fut: Future[Applied] = Future() if reply is None else reply
        self._queue.put(_Item("move", body, fut, path_id, concurrent=concurrent,
                              pipelined=pipelined))
        return fut

    def publish(self, body: Any, *, reply: Any = None, concurrent: bool = False,
                pipelined: bool = False) -> Future[Applied]:
        """A publish request (one or a batch)."""
        fut: Future[Applied] = Future() if reply is None else reply
        self._queue.put(_Item("publish", body, fut, concurrent=concurrent,
                              pipelined=pipelined))
        return fut

    def stop(self) -> None:
        """Finish what is queued, then stop the thread."""
        self._queue.put(None)
        self._thread.join(timeout=60)

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        loaded = False  # events arrived while the last group was applied
        while True:
            first = self._queue.get()
            if first is None:
                return
            items = [first]
            # Waiting for more pays a group's fixed part once for more events; only for
            # senders that do not wait for their answers (closed-loop clients would wait
            # for each other), and only while events keep coming (an idle thread applies
            # each group at once).
            due = time.monotonic() + self.wait_s \
                if loaded and first.pipelined and first.concurrent else 0.0
            stop = False
            while len(items) < self.group_max:
                left = due - time.monotonic()  # read once: a negative timeout is refused
                try:
                    nxt = self._queue.get(timeout=left) if left > 0.0 \
                        else self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                items.append(nxt)
                if not nxt.concurrent:  # it keeps its place: no waiting behind it
                    due = 0.0
            self._process(by_kind(items))
            if stop:
                return
            loaded = self.wait_s > 0.0 and not self._queue.empty()

    def _process(self, items: list[_Item]) -> None:
        i = 0
        while i < len(items):
            j = i + 1
            if items[i].kind != "call":
                while j < len(items) and items[j].kind == items[i].kind:
                    j += 1
            run = items[i:j]
            kind = run[0].label or run[0].kind
            t0 = time.thread_time()
            try:
                if run[0].kind == "move":
                    self._moves(run)
                elif run[0].kind == "publish":
                    self._publishes(run)
                else:
                    _settle(run[0].future, run[0].payload)
            except BaseException as exc:  # a failure of the run as a whole
                for it in run:
                    if not it.future.done():
                        it.future.set_exception(exc)
            self.cpu_seconds[kind] = self.cpu_seconds.get(kind, 0.0) + time.thread_time() - t0
            self.requests[kind] = self.requests.get(kind, 0) + len(run)
            i = j

    def _moves(self, run: list[_Item]) -> None:
        if not any(isinstance(it.payload, MoveBundle) for it in run):
            self._moves_run(run)
            return
        # Runs of bundles and single moves in which no id repeats (applied in order, each
        # as one batch: the same as one by one); any other request on its own run.
        seen: set[Any] = set()
        part: list[_Item] = []
        for it in run:
            ids = _move_ids(it)
            if part and (ids is None or not seen.isdisjoint(ids)):
                self._moves_run(part)
                part, seen = [], set()
            part.append(it)
            if ids is None:
                self._moves_run(part)
                part, seen = [], set()
            else:
                seen.update(ids)
        if part:
            self._moves_run(part)

    def _moves_run(self, run: list[_Item]) -> None:
        if (len(run) > 1 or isinstance(run[0].payload, MoveBundle)) \
                and self._moves_together(run):
            return
        if len(run) > 1 and isinstance(run[0].payload, MoveBundle):
            # bundles with no id in common (see _moves): each on its own, so that a bad
            # row costs its own bundle only
            run = [it for it in run if not self._moves_together([it])]
        # one by one: each event of a bundle as if it had been queued alone
        run = [one for it in run for one in _unbundled(it)]
        if not run:
            return
        batches: list[tuple[_Item, MoveBatch]] = []
        for it in run:
            try:
                batch = self.parser.moves(it.payload, id_from_path=it.path_id)
                if len(run) > 1:  # alone, state.move checks it (and refuses it whole)
                    self.state.require_live(batch.ids)
            except Exception as exc:
                it.future.set_exception(exc)
                continue
            batches.append((it, batch))
        if not batches:
            return
        if len(batches) == 1 or any(b.sets is not None for _, b in batches):
            # routes and areas (issue 32) are not merged: each request applied in order
            for it, batch in batches:
                _settle(it.future, functools.partial(self.state.move, batch))
            return
        ids = np.concatenate([b.ids for _, b in batches])
        edge = np.concatenate([b.points.edge for _, b in batches])
        offset = np.concatenate([b.points.offset for _, b in batches])
        # the last move of each subscription wins, as applied one by one
        _, first_reversed = np.unique(ids[::-1], return_index=True)
        last = np.sort(ids.size - 1 - first_reversed)
        applied = self.state.move(MoveBatch(ids[last], EdgePoints(edge[last], offset[last])))
        self._count(len(batches))
        for it, batch in batches:
            it.future.set_result(Applied(applied.seq, {"moved": len(batch),
                                                       "seq": applied.seq}))

    def _moves_together(self, run: list[_Item]) -> bool:
        """Parse, check and apply a run of moves as one batch; False (nothing done) when
        any request needs its own answer: a bad body, an unknown id, or an id that two
        requests move (the batch parser refuses repeats; the one-by-one path below orders
        them). Parsing a request costs mostly its fixed part (about 0.1 ms), which the
        run pays once here."""
        rows, sizes = _rows_of(run)
        if rows is None:
            return False
        try:
            batch = self.parser.moves(rows)
        except Exception:
            return False
        try:
            applied = self.state.move(batch)
        except RequestError:
            return False  # refused before any change (an unknown id): one by one
        except Exception as exc:
            for it in run:
                it.future.set_exception(exc)
            return True
        self._count(len(run))
        for it, n in zip(run, sizes, strict=True):
            it.future.set_result(Applied(applied.seq, {"moved": n, "seq": applied.seq}))
        return True

    def _parse_messages(self, run: list[_Item]) -> list[tuple[_Item, MessageBatch]]:
        """Each request's messages: parsed together when every body is good (one call
        for the run), else one by one so that each bad request gets its own error."""
        rows, sizes = _rows_of(run) if len(run) > 1 else (None, [])
        if rows is not None:
            try:
                b = self.parser.messages(rows)
            except Exception:
                pass
            else:
                out: list[tuple[_Item, MessageBatch]] = []
                start = 0
                for it, n in zip(run, sizes, strict=True):
                    sl = slice(start, start + n)
                    out.append((it, MessageBatch(b.ids[sl], b.points[sl], b.keywords[sl],
                                                 b.time[sl])))
                    start += n
                return out
        parsed: list[tuple[_Item, MessageBatch]] = []
        for it in run:
            try:
                parsed.append((it, self.parser.messages(it.payload)))
            except Exception as exc:
                it.future.set_exception(exc)
        return parsed

    def _publishes(self, run: list[_Item]) -> None:
        now = time.time()
        parsed: list[tuple[_Item, MessageBatch]] = []
        for it, batch in self._parse_messages(run):
            times = np.where(np.isnan(batch.time), now, batch.time)
            parsed.append((it, MessageBatch(batch.ids, batch.points, batch.keywords, times)))
        # split into runs whose times do not decrease and whose ids do not repeat
        group: list[tuple[_Item, MessageBatch]] = []
        seen: set[int] = set()
        latest = -np.inf
        for it, batch in parsed:
            ids = set(batch.ids.tolist())
            if group and (float(batch.time.min()) < latest or ids & seen):
                self._publish_group(group)
                group, seen, latest = [], set(), -np.inf
            group.append((it, batch))
            seen |= ids
            latest = max(latest, float(batch.time.max()))
        if group:
            self._publish_group(group)

    def _publish_group(self, group: list[tuple[_Item, MessageBatch]]) -> None:
        if len(group) == 1:
            it, batch = group[0]
            _settle(it.future, lambda: self.state.publish(batch))
            return
        combined = MessageBatch(
            np.concatenate([b.ids for _, b in group]),
            EdgePoints(np.concatenate([b.points.edge for _, b in group]),
                       np.concatenate([b.points.offset for _, b in group])),
            [k for _, b in group for k in b.keywords],
            np.concatenate([b.time for _, b in group]))
        try:
            applied = self.state.publish(combined)
        except Exception as exc:
            for it, _ in group:
                it.future.set_exception(exc)
            return
        self._count(len(group))
        repeats = set(applied.body.get("duplicates", []))
        top_all = applied.topk_all if applied.topk_all is not None else TopkFound.empty()
        top_new = applied.topk if applied.topk is not None else TopkFound.empty()
        # without repeats every message is new, in the combined order: a request's
        # located messages are its slice (no isin per request of a fleet's group)
        ends = np.cumsum([b.ids.size for _, b in group]) if not repeats else None
        for k, (it, batch) in enumerate(group):
            # each request's deliveries from the per-message pieces the state recorded
            # (split once there), not by selecting from the combined answer again
            ids = batch.ids.tolist()
            my_fresh = self._delivered([m for m in ids if m not in repeats])
            mine = self._delivered(ids) if repeats else my_fresh
            mine_seq = self.state.delivery_seqs(mine)
            fresh_seq = mine_seq if mine is my_fresh else self.state.delivery_seqs(my_fresh)
            body: dict[str, Any] = {"deliveries": DeliveryList(mine, seq=mine_seq),
                                    "seq": applied.seq}
            my_top = top_all.only(batch.ids) if len(top_all) else top_all
            if len(my_top):
                body["topk"] = topk_json(my_top)
            dup = [m for m in batch.ids.tolist() if m in repeats]
            if dup:
                body["duplicates"] = dup
            located = None
            if applied.messages is not None and ends is not None:
                a, b = (int(ends[k - 1]) if k else 0), int(ends[k])
                located = (applied.messages[0][a:b], applied.messages[1][a:b])
            elif applied.messages is not None:
                keep = np.isin(applied.messages[0], batch.ids)
                located = (applied.messages[0][keep], applied.messages[1][keep])
            fresh_top = top_new.only(batch.ids) if len(top_new) else top_new
            it.future.set_result(Applied(applied.seq, body, my_fresh, mine,
                                         located, fresh_top if len(fresh_top) else None,
                                         my_top, fresh_seq, applied.mqtt))

    def _delivered(self, ids: list[int]) -> Deliveries:
        """The recorded deliveries of published messages, in the answers' order
        (by message id, then subscription id: the :class:`Deliveries` invariant)."""
        pieces = [self.state.messages[m][2] for m in ids]
        return pieces[0] if len(pieces) == 1 else Deliveries.concat(pieces)

    def _count(self, n: int) -> None:
        self.groups += 1
        self.grouped_requests += n


_KIND_ORDER = {"move": 0, "publish": 1}


def by_kind(items: list[_Item]) -> list[_Item]:
    """The group in the order it is applied: between two requests that are not
    concurrent, the concurrent ones as moves, publishes, then the rest, each kind in
    arrival order (the module docstring says why that order is as good as arrival's)."""
    out: list[_Item] = []
    span: list[_Item] = []
    for it in items:
        if it.concurrent:
            span.append(it)
            continue
        out.extend(sorted(span, key=lambda x: _KIND_ORDER.get(x.kind, 2)))  # stable
        span = []
        out.append(it)
    out.extend(sorted(span, key=lambda x: _KIND_ORDER.get(x.kind, 2)))
    return out


def _move_ids(it: _Item) -> list[Any] | None:
    """The ids a bundle or a one-object move names (integers only), None for any other
    request (a batch, a bad body: applied on its own)."""
    body = it.payload
    if isinstance(body, MoveBundle):
        return body.ids()
    sid = it.path_id if it.path_id is not None else \
        body.get("id") if type(body) is dict else None
    return [sid] if type(sid) is int else None


def _unbundled(it: _Item) -> list[_Item]:
    """A bundle's events as their own requests (anything else: itself)."""
    bundle = it.payload
    if not isinstance(bundle, MoveBundle):
        return [it]
    return [_Item("move", row, reply, concurrent=it.concurrent)
            for row, reply in zip(bundle.rows, bundle.replies, strict=True)]


def _rows_of(run: list[_Item]) -> tuple[list[Any] | None, list[int]]:
    """The rows of a run's bodies as one batch, and each request's count; None when a
    body is not a plain object or array of objects, or a path id disagrees with the
    body's (those are answered one by one, with their own messages)."""
    rows: list[Any] = []
    sizes: list[int] = []
    for it in run:
        body = it.payload
        if isinstance(body, MoveBundle):
            rows.extend(body.rows)
            sizes.append(len(body.rows))
        elif it.path_id is not None:
            if not isinstance(body, dict) or body.get("id", it.path_id) != it.path_id:
                return None, []
            rows.append({**body, "id": it.path_id})
            sizes.append(1)
        elif isinstance(body, dict):
            rows.append(body)
            sizes.append(1)
        elif isinstance(body, list) and body and all(isinstance(r, dict) for r in body):
            rows.extend(body)
            sizes.append(len(body))
        else:
            return None, []
    return rows, sizes


def _settle(fut: Future[Any], fn: Callable[[], Any]) -> None:
    try:
        fut.set_result(fn())
    except BaseException as exc:
        fut.set_exception(exc)
