"""Deliveries of the service state: their seqs, the messages' recorded deliveries, the
journal of resumable streams and the deliveries and top-k logs."""

from __future__ import annotations

import functools

import numpy as np

from roadpubsub.pruning.deliveries import Deliveries, sort_order
from roadpubsub.service.deliveries_log import DeliveriesLog, Published, TopkLog
from roadpubsub.service.integrity import StateDamageError
from roadpubsub.service.journal import Chunk
from roadpubsub.service.state_core import FloatArray, IntArray, Pending, StateCore
from roadpubsub.service.topk_found import TopkFound
from roadpubsub.service.wal import WriteAheadLog

__all__ = ["StateRecording", "check_same", "check_same_topk"]


def check_same_topk(message_id: int, a: TopkFound | None, b: TopkFound) -> None:
    """A replayed message's top-k events are the logged ones."""
    if a is None:
        a = TopkFound.empty()
    same = len(a) == len(b) and all(
        np.array_equal(getattr(a.events, f), getattr(b.events, f))
        for f in ("event", "message_id", "subscription_id", "rank", "score", "distance"))
    if not same:
        msg = (f"replaying message {message_id} gave other top-k events than the top-k "
               f"log holds ({len(b)} vs {len(a)})")
        raise RuntimeError(msg)


def check_same(message_id: int, a: Deliveries, b: Deliveries) -> None:
    """A replayed message's deliveries are the logged ones."""
    same = (len(a) == len(b) and np.array_equal(a.subscription_id, b.subscription_id)
            and np.array_equal(a.distance, b.distance) and np.array_equal(a.score, b.score))
    if not same:
        msg = (f"replaying message {message_id} gave other deliveries than the deliveries "
               f"log holds ({len(b)} vs {len(a)})")
        raise RuntimeError(msg)


class StateRecording(StateCore):
    """Records what publishes delivered (see the module docstring)."""

    def _hooks(self, sid: IntArray) -> tuple[IntArray, list[str]] | None:
        """The rows of deliveries to subscriptions with a webhook, and the URLs."""
        if not self.webhook_of or not sid.size:
            return None
        hooks = self.webhook_of
        urls = [hooks.get(s) for s in sid.tolist()]
        rows = [i for i, u in enumerate(urls) if u is not None]
        if not rows:
            return None
        return np.asarray(rows, dtype=np.int64), [u for u in urls if u is not None]

    def delivery_seqs(self, d: Deliveries) -> IntArray:
        """The seq of each delivery of ``d`` (recorded ones; sorted by message id, then
        subscription id, as every Deliveries is)."""
        mids = d.message_id
        if not mids.size:
            return np.empty(0, np.int64)
        if mids[0] == mids[-1] and bool((mids == mids[0]).all()):
            # one message (a single publish): one block, without the general path's
            # dozen array calls (60 µs of a publish's 1 ms in the service)
            first_seq = self.dseq_of[int(mids[0])]
            return np.arange(first_seq, first_seq + mids.size, dtype=np.int64)
        heads = np.flatnonzero(np.r_[True, mids[1:] != mids[:-1]])
        first = np.fromiter((self.dseq_of[m] for m in mids[heads].tolist()), np.int64,
                            count=heads.size)
        block = np.repeat(np.arange(heads.size), np.diff(np.r_[heads, mids.size]))
        return first[block] + np.arange(mids.size) - heads[block]

    def _load_delivery_seqs(self, d: Deliveries, dseq: IntArray) -> None:
        """The seqs of the logged deliveries (``d``'s rows): each message's first one, and
        the journal's first chunk, the last ``stream_retention`` of them."""
        order = np.argsort(dseq, kind="stable")
        if not np.array_equal(dseq[order], np.arange(1, dseq.size + 1)):
            msg = (f"{self.dlog.dir}: the delivery seqs of the deliveries log are not "
                   f"1..{dseq.size} without gap")
            raise StateDamageError(msg, path=self.dlog.dir)
        if dseq.size:
            mids = d.message_id
            heads = np.flatnonzero(np.r_[True, mids[1:] != mids[:-1]])
            self.dseq_of.update(zip(mids[heads].tolist(), dseq[heads].tolist(), strict=True))
        keep = order[max(0, order.size - self.journal.retain):]
        self.journal = self.journal.renewed(next_seq=int(dseq[keep[0]]) if keep.size else 1)
        if keep.size:
            sid = d.subscription_id[keep]
            self.journal.append(Chunk(int(dseq[keep[0]]), self.flushed_through,
                                      d.message_id[keep], sid, d.distance[keep],
                                      d.score[keep], self._hooks(sid)))

    def _load_messages(self, published: Published, deliveries: Deliveries) -> None:
        mids = deliveries.message_id
        starts = np.searchsorted(mids, published.message_id, side="left")
        stops = np.searchsorted(mids, published.message_id, side="right")
        for k, (m, s, t) in enumerate(zip(published.message_id.tolist(),
                                          published.seq.tolist(), published.time.tolist(),
                                          strict=True)):
            a, b = int(starts[k]), int(stops[k])
            self.messages[m] = (s, t, Deliveries(mids[a:b], deliveries.subscription_id[a:b],
                                                 deliveries.distance[a:b],
                                                 deliveries.score[a:b]))

    def _record(self, seq: int, ids: IntArray, times: FloatArray, found: Deliveries,
                top: TopkFound, *, replay: bool) -> None:
        """Remember the deliveries of each message (for repeats and the deliveries log),
        and number them (their seqs follow the last delivery's, in ``found``'s order)."""
        base = self.journal.next_seq
        one = ids.size == 1  # every delivery is the message's own: nothing to split
        if not one:
            mids = found.message_id
            order = np.argsort(mids, kind="stable")  # already sorted; kept cheap and safe
            mids = mids[order]
            starts = np.searchsorted(mids, ids, side="left")
            stops = np.searchsorted(mids, ids, side="right")
        for k, (m, t) in enumerate(zip(ids.tolist(), times.tolist(), strict=True)):
            if one:
                mine = found
            else:
                rows = order[int(starts[k]):int(stops[k])]
                mine = found.take(rows)
            known = self.messages.get(m)
            if known is not None:
                if replay and known[0] == seq:
                    check_same(m, known[2], mine)
                    check_same_topk(m, self.topk_of.get(m), top.only([m]))
                    continue
                msg = f"message {m} is logged twice (seq {known[0]} and {seq})"
                raise RuntimeError(msg)
            self.messages[m] = (seq, t, mine)
            if len(mine):
                self.dseq_of[m] = base + (0 if one else int(starts[k]))
        if len(found):
            self.journal.append(Chunk(base, seq, found.message_id, found.subscription_id,
                                      found.distance, found.score,
                                      self._hooks(found.subscription_id)))
        if len(top):
            for m, part in top.by_arrival():
                if self.messages[m][0] == seq and m not in self.topk_of:
                    self.topk_of[m] = part
        if seq > self.flushed_through:
            self._pending.append((seq, ids, times, found, base))
            self._pending_topk.append(top)
            self._pending_messages += ids.size

    def flush_deliveries(self, *, wait: bool = True) -> None:
        """Write the deliveries of messages not yet in a segment (one new segment) on the
        segment writer's thread (:class:`~roadpubsub.service.deliveries_log.SegmentWriter`).

        ``wait``: return once it and every segment before it is written (a snapshot, a
        stop, a start); else at once: the apply thread goes on, and a crash before the
        segment is written replays its records from the log (which keeps them until a
        snapshot covers them, and a snapshot waits for this).

        Raises
        ------
        OSError
            With ``wait``: a segment could not be written (this one or an earlier one).
        """
        if self._pending:
            first, last = self.flushed_through, self._pending[-1][0]
            self.writer.submit(functools.partial(
                _write_segment, self.wal, self.dlog, self.tlog, first, last,
                self._pending, self._pending_topk))
            self.flushed_through = last  # handed over: later records are not its
            self._pending = []
            self._pending_topk = []
            self._pending_messages = 0
        if wait:
            self.writer.drain()


def _write_segment(wal: WriteAheadLog, dlog: DeliveriesLog, tlog: TopkLog, first: int,
                   last: int, pending: Pending, pending_topk: list[TopkFound]) -> None:
    """The segment of ``(first, last]``: the top-k events, then the deliveries and the
    messages of the records in ``pending`` (``(seq, message ids, times, deliveries, first
    delivery seq)`` each), in one file each."""
    ids = np.concatenate([p[1] for p in pending])
    seqs = np.concatenate([np.full(p[1].size, p[0], dtype=np.int64) for p in pending])
    times = np.concatenate([p[2] for p in pending])
    parts = [p[3] for p in pending]
    mid = np.concatenate([p.message_id for p in parts])
    sid = np.concatenate([p.subscription_id for p in parts])
    dseq = np.concatenate([p[4] + np.arange(len(p[3]), dtype=np.int64) for p in pending])
    order = sort_order(mid, sid)  # a segment's rows by message id (its seqs with them)
    found = Deliveries(mid[order], sid[order],
                       np.concatenate([p.distance for p in parts])[order],
                       np.concatenate([p.score for p in parts])[order])
    top = TopkFound.concat(pending_topk)
    # a segment never covers records the log could still lose in a crash (a restart
    # would give their seqs to other records)
    wal.sync()
    if wal.fsync_error is not None:
        msg = (f"the deliveries of seq {first + 1}-{last} are not written: the log failed "
               f"to make them durable ({wal.fsync_error})")
        raise OSError(msg) from wal.fsync_error
    if len(top):  # before the deliveries segment, which makes both count
        tlog.write(first, last, top.columns())
    dlog.write(first, last, Published(ids, seqs, times), found, dseq[order])
