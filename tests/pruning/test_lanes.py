"""How :class:`~roadpubsub.pruning.indexed.IndexMatcher` shares a batch among threads: the runs the
threads take, where each message's deliveries go, and the compiled assembly that puts
every thread's blocks in (message id, subscription id) order without a global sort.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import assert_same

from roadpubsub.index.bia import BasicIndex
from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.model import Messages, Subscriptions
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.workload import generate_workload
from roadpubsub.pruning.brute import match_brute
from roadpubsub.pruning.deliveries import sort_order
from roadpubsub.pruning.indexed import IndexMatcher
from roadpubsub.pruning.kernel_args import OutputArrays
from roadpubsub.pruning.lanes import assemble_kernel, delivery_starts, guided_runs


@settings(max_examples=300, deadline=None)
@given(n=st.integers(0, 3000), lanes=st.integers(1, 16), smallest=st.integers(1, 40),
       extra=st.integers(0, 300))
def test_guided_runs_cover_the_batch_in_order(n, lanes, smallest, extra) -> None:
    largest = smallest + extra
    runs = guided_runs(n, lanes, largest=largest, smallest=smallest)
    assert [p for a, b in runs for p in range(a, b)] == list(range(n))
    sizes = [b - a for a, b in runs]
    assert all(0 < s <= largest for s in sizes)
    assert all(s >= smallest for s in sizes[:-1])
    assert sizes == sorted(sizes, reverse=True) or sizes[-1] < smallest


def test_guided_runs_reject_bad_bounds() -> None:
    for lanes, smallest, largest in ((0, 1, 1), (1, 0, 1), (1, 5, 4)):
        with pytest.raises(ValueError, match="guided_runs"):
            guided_runs(10, lanes, largest=largest, smallest=smallest)


@settings(max_examples=200, deadline=None)
@given(counts=st.lists(st.integers(0, 5), max_size=30), seed=st.integers(0, 2**32 - 1))
def test_delivery_starts_lay_blocks_out_in_id_order(counts, seed) -> None:
    rng = np.random.default_rng(seed)
    c = np.array(counts, dtype=np.int64)
    ids = rng.choice(10 * c.size + 1, size=c.size, replace=False).astype(np.int64)
    starts, total = delivery_starts(ids, c)
    assert total == c.sum()
    # The rows the blocks cover, listed in id order, are 0 .. total - 1 in turn.
    rows = [r for i in np.argsort(ids) for r in range(starts[i], starts[i] + c[i])]
    assert rows == list(range(total))


def _lane_rows(rng, blocks):
    """A lane's output: blocks (message index, [(src, row), ...]) in the given order."""
    msg = np.array([i for i, rows in blocks for _ in rows], dtype=np.int64)
    src = np.array([s for _, rows in blocks for s, _ in rows], dtype=np.int8)
    row = np.array([r for _, rows in blocks for _, r in rows], dtype=np.int64)
    dist, score = rng.random(msg.size), rng.random(msg.size)
    pad = 3  # buffers are longer than the rows written
    return OutputArrays(*(np.concatenate([a, np.zeros(pad, a.dtype)])
                          for a in (msg, src, row, dist, score))), msg.size


#: Id ranges of the assembly test: small (one radix pass), 24 and 32 bits (3-4 passes),
#: spans past 32 bits or past int64 (the fallback sort), negative ids.
ID_SCALES = (1000, 1 << 24, (1 << 32) - 1, 1 << 40, 1 << 62)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_msg=st.integers(1, 12), lanes=st.integers(1, 4),
       scale=st.sampled_from(ID_SCALES), negative=st.booleans())
def test_assemble_kernel_equals_a_sort_of_all_deliveries(seed, n_msg, lanes, scale,
                                                          negative) -> None:
    """Blocks of slot and delta rows spread over lanes (some lanes empty, some messages
    without deliveries) give what one sort of every delivery by (message, subscription)
    gives, for ids of any range."""
    rng = np.random.default_rng(seed)
    ids = np.unique(rng.integers(0, scale, size=60, dtype=np.int64))
    while ids.size < 50:
        ids = np.unique(np.concatenate([ids, rng.integers(0, scale, 60, dtype=np.int64)]))
    if negative:  # ids from near the least int64 up to near the greatest
        ids = (ids - scale // 2) * (4 if scale == 1 << 62 else 2) + 1
    ids = rng.permutation(ids)
    # Slot and delta ids interleave, so that delta rows sort between slot rows.
    slot_ids, delta_ids = ids[:40], ids[40:50]
    message_ids = rng.choice(10_000, size=n_msg, replace=False).astype(np.int64)
    owner = rng.integers(0, lanes, n_msg)
    counts = np.zeros(n_msg, dtype=np.int64)
    lane_blocks: list[list] = [[] for _ in range(lanes)]
    for i in rng.permutation(n_msg):
        k = int(rng.integers(0, 12))
        if k == 0:
            continue  # no deliveries: no block
        rows = ([(0, int(r)) for r in rng.choice(40, size=min(k, 40), replace=False)]
                + [(1, int(r)) for r in rng.choice(10, size=int(rng.integers(0, 4)),
                                                   replace=False)])
        counts[i] = len(rows)
        lane_blocks[owner[i]].append((int(i), rows))
    starts, total = delivery_starts(message_ids, counts)
    res = (np.full(total, -1, dtype=np.int64), np.full(total, -1, dtype=np.int64),
           np.full(total, np.nan), np.full(total, np.nan))
    want = ([], [], [], [])
    for blocks in lane_blocks:
        out, n_out = _lane_rows(rng, blocks)
        assemble_kernel(out, n_out, starts, message_ids, slot_ids, delta_ids, *res)
        for j in range(n_out):
            want[0].append(message_ids[out.msg[j]])
            want[1].append((slot_ids if out.src[j] == 0 else delta_ids)[out.row[j]])
            want[2].append(out.dist[j])
            want[3].append(out.score[j])
    mid, sid = np.array(want[0], dtype=np.int64), np.array(want[1], dtype=np.int64)
    order = sort_order(mid, sid)
    np.testing.assert_array_equal(res[0], mid[order])
    np.testing.assert_array_equal(res[1], sid[order])
    np.testing.assert_array_equal(res[2], np.array(want[2])[order])
    np.testing.assert_array_equal(res[3], np.array(want[3])[order])


@pytest.mark.parametrize("arch", [EnhancedIndex, BasicIndex], ids=["eia", "bia"])
def test_threads_order_results_by_ids_not_by_input_or_slot(andorra, arch) -> None:
    """Subscription ids unrelated to the slots' order, recent (delta) subscriptions whose
    ids fall between indexed ones, messages given in decreasing id order: every thread
    count, chunk and batch size (one message, none, fewer than a thread's share) gives the
    reference matcher's deliveries, sorted by (message id, subscription id)."""
    wl = generate_workload(andorra, n_subscriptions=3000, n_messages=90, seed=12,
                           alpha_spread=0.4, tau_spread=0.3)
    rng = np.random.default_rng(12)
    s = wl.subscriptions
    subs = Subscriptions(rng.permutation(10 * len(s))[:len(s)].astype(np.int64), s.points,
                         s.alpha, s.tau, s.kw_ptr, s.kw_terms)
    m = wl.messages.take(np.arange(len(wl.messages))[::-1])
    msgs = Messages(1000 - 7 * np.arange(len(m), dtype=np.int64), m.points, m.kw_ptr,
                    m.kw_terms)
    dmax = 3000.0
    later = rng.random(len(subs)) < 0.3
    index = arch(SpatialIndex.build(andorra, capacity=80), subs.take(np.flatnonzero(~later)),
                 wl.weights, dmax_m=dmax)
    index.subscribe(subs.take(np.flatnonzero(later)))
    want = match_brute(andorra, subs, msgs, wl.weights, dmax_m=dmax)
    assert len(want) > 90
    assert len(np.unique(want.message_id)) < len(msgs)  # some messages deliver nothing
    for threads, chunk in ((1, 256), (2, 1), (2, 5), (3, 16), (8, 4)):
        matcher = IndexMatcher(index, threads=threads, chunk=chunk)
        got = matcher.match(msgs)
        stats = matcher.stats
        assert_same(got, want)
        timing = matcher.last_timing  # where the call's time went, per thread
        assert timing is not None and len(timing.lanes) == min(threads, 6)  # 90 / 16 = 6
        assert 0 <= timing.serial <= timing.wall
        assert all(0 <= lane.wall <= timing.wall for lane in timing.lanes)
        np.testing.assert_array_equal(stats.column("deliveries"),
                                      [np.sum(want.message_id == i) for i in msgs.ids])
        for rows in ([5], [], np.arange(20), np.arange(40)):
            part = msgs.take(np.asarray(rows, dtype=np.int64))
            keep = np.isin(want.message_id, part.ids)
            got_part = matcher.match(part)
            np.testing.assert_array_equal(got_part.message_id, want.message_id[keep])
            np.testing.assert_array_equal(got_part.subscription_id,
                                          want.subscription_id[keep])
            np.testing.assert_array_equal(got_part.distance, want.distance[keep])


def _small_index(andorra):
    wl = generate_workload(andorra, n_subscriptions=2000, n_messages=60, seed=21)
    index = EnhancedIndex(SpatialIndex.build(andorra, capacity=80), wl.subscriptions,
                          wl.weights, dmax_m=3000.0)
    return index, wl.messages


@pytest.mark.parametrize("failing", [0, 1, 2])
def test_a_failing_lane_raises_its_error_and_no_lane_hangs(andorra, failing) -> None:
    """The calling thread is lane 0 and the others wait at a barrier: an error in any lane
    (before the barrier) reaches the caller as itself, and the next call works."""
    index, msgs = _small_index(andorra)
    matcher = IndexMatcher(index, threads=3, chunk=4)
    want = matcher.match(msgs)
    run_lane = matcher._run_lane

    def broken(k, *args):
        if k == failing:
            raise RuntimeError(f"lane {k} broke")
        return run_lane(k, *args)

    matcher._run_lane = broken
    with pytest.raises(RuntimeError, match=f"lane {failing} broke"):
        matcher.match(msgs)
    del matcher._run_lane
    assert_same(matcher.match(msgs), want)


def test_a_forked_child_matches_with_threads_of_its_own(andorra) -> None:
    """A forked child (the service's snapshot writer forks) inherits the matcher but not
    its pool's threads; it starts its own."""
    import multiprocessing

    index, msgs = _small_index(andorra)
    matcher = IndexMatcher(index, threads=2)
    want = matcher.match(msgs)  # the parent's pool now exists
    ctx = multiprocessing.get_context("fork")
    found = ctx.Queue()
    child = ctx.Process(target=lambda: found.put(len(matcher.match(msgs))))
    child.start()
    got = found.get(timeout=120)
    child.join(timeout=60)
    assert child.exitcode == 0
    assert got == len(want) > 0


@pytest.mark.parametrize("arch", [EnhancedIndex, BasicIndex], ids=["eia", "bia"])
def test_stamps_start_again_before_the_marks_overflow(andorra, arch) -> None:
    """A slot's mark holds its message's stamp in its high bits and its candidate position
    in its low bits (roadpubsub.pruning.algorithm1.MARK_SHIFT): a lane whose stamps near the limit
    clears its marks and starts again, with the same deliveries before and after."""
    from roadpubsub.pruning.algorithm1 import MAX_STAMP

    wl = generate_workload(andorra, n_subscriptions=2000, n_messages=60, seed=21)
    index = arch(SpatialIndex.build(andorra, capacity=80), wl.subscriptions, wl.weights,
                 dmax_m=3000.0)
    matcher = IndexMatcher(index, threads=1, chunk=16)
    want = matcher.match(wl.messages)
    lane = matcher._lanes[0]
    # Past the limit within this batch: without the reset, tags would overflow int64
    # (stamps beyond 2**32) and every slot would look taken.
    lane.stamp = 2 * MAX_STAMP - 20
    got = matcher.match(wl.messages)
    assert_same(got, want)
    assert lane.stamp < 100  # started again
    assert_same(matcher.match(wl.messages), want)
