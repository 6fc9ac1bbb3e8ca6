"""The live service's state: the index, its log, its snapshots, its deliveries.

Every event goes through one thread, in order: it is checked against the current state
(a batch is refused whole), applied with the index's own ``subscribe``/``unsubscribe``/
``move`` or matched with :class:`~roadpubsub.pruning.indexed.IndexMatcher`, then appended to the
write-ahead log (:mod:`roadpubsub.service.wal`). The HTTP layer answers once an fsync has
covered the record. Restarting replays the log after the last snapshot through the same
functions, so the recovered state, and every delivery, equals the original.

Expiry rule (exact and replayable): the SERVER's clock purges. Before a publish request is
matched, every subscription with ``expires_at <=`` the server's clock at that moment is
unsubscribed; that clock reading is logged with the publish (``now``), so a replay purges
exactly the same. A message's own ``time`` (or the server's clock when absent) only decides
whether that message is delivered to a subscription: not when ``time >= expires_at`` (the
rule of ``roadpubsub match``), so a message from the far future delivers to no expiring
subscription but removes none. Messages of one batch are matched in ascending order of
their time. An expired subscription is gone for good, and the index purges it at its next
compaction. (Log records written before ``now`` was logged replay the former rule: purge at
the message's time.) Top-k subscriptions take every message into their window whatever its
time; only the purge ends them.
The rule is :mod:`roadpubsub.pruning.expiry`'s, applied with every kind's matching by
:class:`roadpubsub.pruning.mixed.MixedMatcher`.

Idempotent publishing: a message whose id was published before is not matched again; its
recorded deliveries are returned (``"duplicate": true``).

Kinds (issue 21): boolean range and top-k subscriptions live beside the threshold index in
:class:`~roadpubsub.pruning.live_kinds.LiveBoolean` and
:class:`~roadpubsub.pruning.live_kinds.LiveTopk` (the
kinds' own indexed matchers). Subscribe, unsubscribe, move and expiry reach whichever kind
holds an id (ids are unique across kinds). Each message is matched by the threshold index,
then the boolean matcher (deliveries with score 1.0), then pushed into the top-k window of
the last W messages (W fixed when DIR is created, ``manifest["window"]``); its top-k
insertions and evictions are answered, logged (:class:`~roadpubsub.service.deliveries_log.
TopkLog`) and repeated for a re-sent id like its deliveries. An expired top-k
subscription's results are evicted (bottom rank first) among the events of the first
message of the first publish after the server's clock reaches its ``expires_at`` (the
purge); a delete or move of one emits no event
(its top-k, for a move the one at its new place, is read with GET). Every message enters the window,
including while no top-k subscription exists, and a replayed one too (even when its answer
is already in the deliveries log), so the window after a restart is the acknowledged one.
Snapshots hold the boolean and top-k subscriptions and the window (``<seq>.kinds.npz``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from roadpubsub.index.base import SubscriptionIndex
from roadpubsub.index.events import MessageBatch, MoveBatch, RequestError, SubscriptionBatch
from roadpubsub.index.kinds import (
    SUBSCRIPTION_KIND_NAMES,
    BooleanSubscriptions,
    TopkSubscriptions,
)
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.kinds_reference import check_window
from roadpubsub.pruning.live_kinds import LiveBoolean
from roadpubsub.pruning.live_topk import LiveTopk
from roadpubsub.roadnet.errors import InputError, describe_rows, format_error
from roadpubsub.roadnet.segment_sets import SegmentSet
from roadpubsub.service.answers import DeliveryList
from roadpubsub.service.live_sets import set_record
from roadpubsub.service.options import DEFAULT_WINDOW
from roadpubsub.service.results import Applied
from roadpubsub.service.snapshot import (
    read_manifest,
    write_manifest,
    write_snapshot,
)
from roadpubsub.service.state_core import IntArray
from roadpubsub.service.state_open import StateOpening
from roadpubsub.service.topk_found import TopkFound, topk_json
from roadpubsub.service.wal import (
    create_segment,
    unavailable,
)

__all__ = ["ServiceState", "create_state"]


def _tolist(a: npt.NDArray[Any]) -> list[Any]:
    return [None if x != x else x for x in a.tolist()]  # NaN -> null


class ServiceState(StateOpening):
    """A service folder opened for events (use :meth:`open`): checked, applied, logged
    (the layers below: :mod:`~roadpubsub.service.state_core`)."""

    def _log(self, record: dict[str, Any]) -> int:
        try:
            return self.wal.append(record)
        except OSError as exc:
            # The event is applied but not logged: refuse everything until the state is
            # reloaded from the log (recover, once the disk takes writes again), so no
            # answer reflects a state the log cannot rebuild.
            self.failed = exc
            raise unavailable(exc) from exc
        except Exception as exc:
            # Not an I/O error: the record could not be encoded, nothing was written and
            # the disk is fine. The event is applied in memory only, so the state is
            # reloaded from the log at once (this is the apply thread) and the request
            # alone fails; the service does not enter the failed state.
            self.failed = exc
            try:
                self.recover()
            except Exception as again:  # e.g. the disk failed meanwhile: the watchman
                self.failed = again     # retries the reload
                raise unavailable(again) from exc
            msg = f"not applied: the event cannot be logged ({format_error(exc)})"
            raise RequestError(msg, status=422) from exc

    def subscribe(self, batch: SubscriptionBatch, *, owner: str = "") -> Applied:
        """Add a batch of subscriptions (their ids must be new); ``owner``: the token
        id owning them (kept in the log record and the snapshots)."""
        self._check_alive()
        clash = self.contains(batch.ids)
        if clash.any():
            taken = batch.ids[clash]
            msg = ("subscription ids already exist: "
                   f"{describe_rows(taken[:10].tolist(), total=taken.size)}")
            raise RequestError(msg, status=409)
        kinds = batch.kind is not None and bool(batch.kind.any())
        hooks = getattr(batch, "webhook", None)
        if hooks is not None and any(u is not None for u in hooks):
            hooks = self._checked_webhooks(hooks)
        else:
            hooks = None
        sets = getattr(batch, "sets", None)
        self._subscribe(batch.ids, batch.points, batch.keywords, batch.alpha, batch.tau,
                        batch.expires_at, batch.kind if kinds else None, batch.radius,
                        batch.k, sets)
        record = {"op": "subscribe", "id": batch.ids.tolist(),
                  "edge": batch.points.edge.tolist(), "offset": batch.points.offset.tolist(),
                  "alpha": _tolist(batch.alpha), "tau": _tolist(batch.tau),
                  "keywords": batch.keywords, "expires_at": _tolist(batch.expires_at)}
        if sets is not None:  # routes and areas: the resolved sets, exact (issue 32)
            record["sets"] = [None if x is None else set_record(x) for x in sets]
        if kinds:
            assert batch.kind is not None and batch.radius is not None and batch.k is not None
            record.update(kind=[SUBSCRIPTION_KIND_NAMES[c] for c in batch.kind.tolist()],
                          radius=_tolist(batch.radius), k=_tolist(batch.k))
        if hooks is not None:
            record["webhook"] = hooks
            self._set_webhooks(batch.ids, hooks)
        said = getattr(batch, "mqtt", None)
        if said is not None:
            record["mqtt"] = [None if x < 0 else bool(x) for x in said.tolist()]
            self._set_mqtt(batch.ids, said)
        if owner:
            record["owner"] = owner
            self._own("subscribe", batch.ids, owner)
        seq = self._log(record)
        return self._after(Applied(seq, {"subscribed": len(batch), "seq": seq}), len(batch))

    def _checked_webhooks(self, urls: list[str | None]) -> list[str | None]:
        """The webhook URLs of a batch, each checked (422 naming the row otherwise)."""
        check = self.check_webhook
        if check is None:
            msg = "field 'webhook': webhooks are not enabled on this service"
            raise RequestError(msg, status=400)
        out: list[str | None] = []
        for row, url in enumerate(urls):
            if url is None:
                out.append(None)
                continue
            try:
                out.append(check(url))
            except InputError as exc:
                msg = f"subscriptions: row {row}: field 'webhook': {exc}"
                raise RequestError(msg, status=422) from exc
        return out

    def unsubscribe(self, ids: IntArray) -> Applied:
        """Remove live subscriptions."""
        self._check_alive()
        self.require_live(ids)
        self._unsubscribe(ids)
        seq = self._log({"op": "unsubscribe", "id": ids.tolist()})
        return self._after(Applied(seq, {"unsubscribed": int(ids.size), "seq": seq}))

    def move(self, batch: MoveBatch) -> Applied:
        """Give live subscriptions new locations (one vectorised index update); rows with
        a ``geometry`` replace a route or area subscription's set. A point stays a point
        and a set a set: a move that would turn one into the other is refused whole (422)."""
        self._check_alive()
        sets = getattr(batch, "sets", None)
        if sets is not None or len(self.sets):
            return self._move_with_sets(batch, sets)
        if self._kinds_live():
            # the threshold index's ids once: when it holds them all (the usual case),
            # they are live and _move needs no other kind
            thr = self.index.contains(batch.ids)
            if not thr.all():
                self.require_live(batch.ids)
            self._move(batch.ids, batch.points, thr=thr)
        else:
            try:  # a move looks every id up before it changes anything
                self._move(batch.ids, batch.points)
            except InputError:
                self.require_live(batch.ids)  # unknown ids: the service's 404 answer
                raise
        # arrays go to the log's encoder as they are (no list of Python numbers)
        seq = self._log({"op": "move", "id": np.ascontiguousarray(batch.ids, np.int64),
                         "edge": np.ascontiguousarray(batch.points.edge, np.int64),
                         "offset": np.ascontiguousarray(batch.points.offset, np.float64)})
        return self._after(Applied(seq, {"moved": len(batch), "seq": seq}), len(batch))

    def _move_with_sets(self, batch: MoveBatch, sets: tuple[SegmentSet | None, ...] | None
                        ) -> Applied:
        """A move batch while set subscriptions exist or the batch gives geometries."""
        self.require_live(batch.ids)
        want = np.zeros(len(batch), bool) if sets is None else \
            np.fromiter((x is not None for x in sets), dtype=bool, count=len(batch))
        have = self.sets.contains(batch.ids)
        wrong = np.flatnonzero(want != have)
        if wrong.size:
            r = int(wrong[0])
            sid = int(batch.ids[r])
            msg = (f"invalid moves: row {r} (id {sid}): field 'geometry': subscription {sid} "
                   + ("is a point: move it with 'u', 'v', 'offset' or 'lon', 'lat' (a point "
                      "does not become a route or area; delete and subscribe again)"
                      if want[r] else
                      "lies on a route or area: move it with a 'geometry' (it does not "
                      "become a point; delete and subscribe again)"))
            raise RequestError(msg, status=422)
        pr, sr = np.flatnonzero(~want), np.flatnonzero(want)
        if pr.size:
            self._move(batch.ids[pr], batch.points[pr])
        record: dict[str, Any] = {
            "op": "move", "id": np.ascontiguousarray(batch.ids[pr], np.int64),
            "edge": np.ascontiguousarray(batch.points.edge[pr], np.int64),
            "offset": np.ascontiguousarray(batch.points.offset[pr], np.float64)}
        if sr.size:
            assert sets is not None
            new = [sets[i] for i in sr.tolist()]
            self._move_sets(batch.ids[sr], new)  # type: ignore[arg-type]
            record["set_id"] = batch.ids[sr].tolist()
            record["sets"] = [set_record(x) for x in new if x is not None]
        seq = self._log(record)
        return self._after(Applied(seq, {"moved": len(batch), "seq": seq}), len(batch))

    def publish(self, batch: MessageBatch, *, now: float | None = None, owner: str = ""
                ) -> Applied:
        """Match new messages; repeated ids get their recorded deliveries. ``now``: the
        server's clock (epoch seconds; default ``time.time()``), which purges expired
        subscriptions and stands in for absent message times; ``owner``: the token id
        owning the new ones (kept in the log record and the snapshots)."""
        self._check_alive()
        seen = np.fromiter((m in self.messages for m in batch.ids.tolist()), dtype=bool,
                           count=len(batch))
        every = not seen.any()  # all new (a single new message): no selection to make
        new = np.arange(len(batch)) if every else np.flatnonzero(~seen)
        seq = self.wal.next_seq - 1  # a batch of repeats waits for what is logged so far
        fresh = Deliveries.empty()
        if new.size:
            ids = batch.ids if every else batch.ids[new]
            times = batch.time if every else batch.time[new]
            clock = time.time() if now is None else float(now)
            times = np.where(np.isnan(times), clock, times)
            keywords = batch.keywords if every else [batch.keywords[i] for i in new.tolist()]
            points = batch.points if every else batch.points[new]
            fresh, top = self._publish(ids, points, keywords, times, purge_at=clock)
            record = {"op": "publish", "id": ids.tolist(), "edge": points.edge.tolist(),
                      "offset": points.offset.tolist(), "keywords": keywords,
                      "time": times.tolist(), "now": clock}
            if owner:
                record["owner"] = owner
                self._own("publish", ids, owner)
            seq = self._log(record)
            self._record(seq, ids, times, fresh, top, replay=False)
        else:
            top = TopkFound.empty()
        # only new messages: the answer is their deliveries, already in order
        everything = fresh if every else Deliveries.concat(
            [fresh] + [self.messages[m][2] for m in batch.ids[seen].tolist()])
        dseq = self.delivery_seqs(everything)
        body: dict[str, Any] = {"deliveries": DeliveryList(everything, seq=dseq), "seq": seq}
        repeated = [] if every else \
            [self.topk_of[m] for m in batch.ids[seen].tolist() if m in self.topk_of]
        top_all = TopkFound.concat([top, *repeated])
        if len(top_all):
            body["topk"] = topk_json(top_all)
        if not every:
            body["duplicates"] = batch.ids[seen].tolist()
        located = (ids, points) if new.size else None
        return self._after(Applied(seq, body, fresh, everything, located,
                                   top if len(top) else None, top_all,
                                   dseq if every else self.delivery_seqs(fresh),
                                   self.mqtt_choices()),
                           max(int(new.size), 1))

    def _after(self, applied: Applied, rows: int = 1) -> Applied:
        # What a restart would replay, in units of one single-row event: a record costs
        # about a millisecond to replay, a row of a large batch about 1/25 of that (511,000
        # moved rows in 10,700 records replayed in 8.7 s on Rome at 1M subscriptions).
        self.events_since_snapshot += 1 + rows // 25
        try:
            if self._pending_messages >= self.options.flush_every:
                self.flush_deliveries(wait=False)
            if self.compactor.step():
                self.compactions += 1
            # A snapshot waits for a running compaction (both would share the CPU, and the
            # snapshot child compacts too), unless the log has grown to twice its due size.
            if self.events_since_snapshot >= self.options.snapshot_every * (
                    2 if self.compactor.running else 1):
                self.start_snapshot()
            else:
                self.maintain()
        except OSError as exc:
            # The event is logged (its answer waits for its fsync as usual); what failed
            # is derived from the log, which a reload rebuilds (see recover).
            self.failed = exc
        return applied


def create_state(state_dir: str | Path, index: SubscriptionIndex, *,
                 about: dict[str, Any] | None = None, window: int = DEFAULT_WINDOW,
                 boolean: BooleanSubscriptions | None = None,
                 topk: TopkSubscriptions | None = None) -> Path:
    """Make a new service folder around ``index`` (its network, weights and Dmax are fixed
    from now on), with the top-k window ``window`` (messages, >= 1; fixed too) and
    optionally boolean and top-k subscriptions to start with (keyword ids of the index's
    weights).

    Raises
    ------
    FileExistsError
        The folder already holds a service.
    """
    folder = Path(state_dir)
    if read_manifest(folder) is not None:
        msg = f"{folder} already holds a roadpubsub service"
        raise FileExistsError(msg)
    folder.mkdir(parents=True, exist_ok=True)
    for sub in ("snapshots", "wal", "deliveries", "topk"):
        (folder / sub).mkdir(exist_ok=True)
    create_segment(folder / "wal", 1)  # the manifest names it: a deleted log is damage
    w = check_window(window)
    b = LiveBoolean(index.spatial, index.weights, dmax_m=index.dmax_m, subs=boolean)
    t = LiveTopk(index.spatial, index.weights, dmax_m=index.dmax_m, window=w, subs=topk)
    write_snapshot(folder, 0, index, (np.empty(0, np.int64), np.empty(0)), lambda: {
        **{"b_" + k: v for k, v in b.arrays().items()},
        **{"t_" + k: v for k, v in t.arrays().items()}})
    net = index.network
    write_manifest(folder, {"seq": 0, "kind": index.kind, "dmax_m": index.dmax_m,
                            "window": w,
                            "network": {"name": net.name, "directed": net.directed,
                                        "nodes": net.n_nodes, "edges": net.n_edges},
                            **(about or {})})
    return folder
