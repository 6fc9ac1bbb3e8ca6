"""Boolean range matching over :class:`~roadpubsub.index.boolean.BooleanIndex`: prune, then verify.

For a message m, for each keyword t of m and each group (cell ci, largest radius R) filed
under t:

1. the group is skipped when dNmin(ci, m) > R (Eq. 5 and the border bound, the cell lower
   bounds of Algorithm 1, :func:`roadpubsub.pruning.algorithm1.cell_lower_bounds`), and left at the
   first subscription (radius descending) whose radius is below dNmin(ci, m);
2. a subscription s of the group is skipped unless m holds all its keywords (those
   besides t, stored with its posting rarest first, so a missing one is met early);
3. and unless its own lower bound is within its radius: kappa * dE(s, m) in m's cell,
   else max(eta-(ci, cm) * dE(s, m), din_out(s) + D(ci, cm) + din_in(m));
4. survivors get their exact dN from one bounded search (Algorithm 2's
   :func:`~roadpubsub.pruning.algorithm2.verify_candidates`, each candidate limited by its radius,
   so the search ends once every candidate is settled or past its radius, never beyond
   the largest candidate radius): delivered iff dN <= radius.

Steps 1-3 read each group's postings in order, with every fact they need copied in
posting order (:class:`~roadpubsub.index.boolean.BooleanIndex`), so they cost little beside step 4,
the one search per message that exact distances need anyway
(:meth:`BooleanIndexMatcher.verification_floor` measures what it would cost if the
deliveries were known). Messages are taken in Hilbert order, in runs shared by the
threads; each message's deliveries are sorted by subscription id in the kernel, and the
messages' blocks are placed in message id order, so the output is never sorted as a whole.

Rounding: every comparison of a lower bound with a radius goes through Algorithm 1's rule,
keeping the pair when lb <= r + slack_abs + slack_rel * r (1 um and 1e-9 by default). The
bounds are sums and products of at most four rounded terms of lengths below 2^27 m, so
each is within a few ulps (< 2^-25 m, and relatively < 2^-50) of its exact value, which is
itself <= dN: the slack absorbs this, so no delivered pair is pruned. Step 4 decides on
the exact distance alone (grid lengths, :mod:`roadpubsub.roadnet.lengths`), the reference's
decision.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import numba
import numpy as np
import numpy.typing as npt

from roadpubsub.index.boolean import BooleanIndex
from roadpubsub.index.kinds import BooleanSubscriptions
from roadpubsub.index.model import Messages
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.pruning.algorithm1 import cell_lower_bounds
from roadpubsub.pruning.algorithm2 import VerifySearch, verify_candidates, verify_known
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.indexed import default_threads
from roadpubsub.pruning.kernel_args import GraphArrays, MessageArrays
from roadpubsub.roadnet.dijkstra_kernels import BucketQueue
from roadpubsub.roadnet.distance import NodeSearch, dead_ends
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.locations import point_xy
from roadpubsub.roadnet.network import RoadNetwork, spatial_order
from roadpubsub.roadnet.settings import DEFAULTS

__all__ = ["BooleanIndexMatcher", "BooleanOutput", "BooleanPostingArrays",
           "CellBoundArrays", "VerifyScratch", "cell_bound_arrays",
           "message_arrays", "verification_graph", "verify_scratch"]

F = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]


class CellBoundArrays(NamedTuple):
    """Cell bounds: kappa, D and eta- by message cell (rows), cell boxes (m), slack."""

    kappa: float
    D_t: F
    eta_t: F
    cell_bbox: F
    slack_abs: float
    slack_rel: float


class BooleanPostingArrays(NamedTuple):
    """The layout of :class:`~roadpubsub.index.boolean.BooleanIndex`, facts in posting order."""

    term_ptr: I64
    grp_cell: I32
    grp_radius: F
    grp_start: I64
    post_id: I64
    post_radius: F
    post_x: F
    post_y: F
    post_din_out: F
    post_chain: I32
    post_chain_offset: F
    post_kw_ptr: I64
    post_kw_terms: I32


class BooleanOutput(NamedTuple):
    """One lane's output: deliveries per message (by position in the batch, written by
    the lane that matched it), subscription ids and distances (m) sorted by id within
    each message, and work counters (candidates, junctions settled, postings read)."""

    msg_count: I64
    out_id: I64
    out_dist: F
    stats: I64


class VerifyScratch(NamedTuple):
    """Reused buffers: cell bounds, term marks, candidates, search targets and buckets."""

    cell_lb: F
    term_mark: I64
    cand_row: I64
    cand_edge: I32
    cand_offset: F
    cand_limit: F
    cand_dist: F
    t_nodes: I64
    t_limits: F


@numba.njit(cache=True, inline="always")
def _keep(lb: float, limit: float, slack_abs: float, slack_rel: float
          ) -> bool:  # pragma: no cover - compiled
    return lb <= limit + slack_abs + slack_rel * abs(limit)


@numba.njit(cache=True, nogil=True, inline="always")
def _holds_others(kw_ptr: I64, kw_terms: I32, p: int, term_mark: I64,
                  stamp: int) -> bool:  # pragma: no cover - compiled
    """Whether the message holds posting p's other keywords (see :func:`_collect`)."""
    held = 2 * stamp + 1
    for j in range(kw_ptr[p], kw_ptr[p + 1]):  # noqa: SIM110 - numba compiles no all()
        if (term_mark[kw_terms[j]] | 1) != held:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _collect(  # pragma: no cover - compiled
    i: int, msg: MessageArrays, cb: CellBoundArrays, lay: BooleanPostingArrays,
    sc: VerifyScratch, stats: I64,
) -> int:
    """Steps 1-3 for message i: the candidates' postings, chain points and radii into
    ``sc``; returns how many.

    The message's terms are marked 2 * (i + 1) in ``sc.term_mark``; a term whose lists
    are read becomes 2 * (i + 1) + 1, so a term repeated in the message (a hand-built
    batch) is read once and no subscription becomes a candidate twice.
    """
    mc = msg.cell[i]
    mx, my, m_din = msg.x[i], msg.y[i], msg.din_in[i]
    stamp = i + 1
    n_terms = lay.term_ptr.size - 1
    n_cand = 0
    n_read = 0
    for q in range(msg.kw_ptr[i], msg.kw_ptr[i + 1]):
        t = msg.kw_terms[q]
        if t < 0 or t >= n_terms or sc.term_mark[t] != 2 * stamp:
            continue
        sc.term_mark[t] = 2 * stamp + 1
        for g in range(lay.term_ptr[t], lay.term_ptr[t + 1]):
            c = lay.grp_cell[g]
            cell_lb = sc.cell_lb[c]
            if not _keep(cell_lb, lay.grp_radius[g], cb.slack_abs, cb.slack_rel):
                continue
            same = c == mc
            eta = cb.eta_t[mc, c]
            border = cb.D_t[mc, c] + m_din
            for p in range(lay.grp_start[g], lay.grp_start[g + 1]):
                rad = lay.post_radius[p]
                if not _keep(cell_lb, rad, cb.slack_abs, cb.slack_rel):
                    break  # radii descend: no later one reaches the cell's bound
                n_read += 1
                if not _holds_others(lay.post_kw_ptr, lay.post_kw_terms, p, sc.term_mark,
                                     stamp):
                    continue
                dx = lay.post_x[p] - mx
                dy = lay.post_y[p] - my
                de = np.sqrt(dx * dx + dy * dy)
                lb = (cb.kappa * de if same
                      else max(eta * de, lay.post_din_out[p] + border))
                if not _keep(lb, rad, cb.slack_abs, cb.slack_rel):
                    continue
                sc.cand_row[n_cand] = p
                sc.cand_edge[n_cand] = lay.post_chain[p]
                sc.cand_offset[n_cand] = lay.post_chain_offset[p]
                sc.cand_limit[n_cand] = rad
                n_cand += 1
    stats[0] += n_cand
    stats[2] += n_read
    return n_cand


@numba.njit(cache=True, nogil=True)
def _match_boolean(  # pragma: no cover - compiled
    start: int, stop: int, msg: MessageArrays, cb: CellBoundArrays,
    lay: BooleanPostingArrays, search: VerifySearch, sc: VerifyScratch, out: BooleanOutput,
    n_out: int,
) -> tuple[int, int]:
    """Match messages ``start`` .. ``stop - 1`` into ``out`` from ``n_out`` on, while the
    output has room for every candidate; returns (next message, new end of the output)."""
    n_msg = min(stop, msg.kw_ptr.size - 1)
    cap = out.out_id.size
    i = start
    while i < n_msg:
        cell_lower_bounds(msg.cell[i], msg.x[i], msg.y[i], msg.din_in[i], cb.kappa,
                          cb.D_t[msg.cell[i]], cb.eta_t[msg.cell[i]], cb.cell_bbox,
                          sc.cell_lb)
        for q in range(msg.kw_ptr[i], msg.kw_ptr[i + 1]):
            t = msg.kw_terms[q]
            if 0 <= t < sc.term_mark.size:
                sc.term_mark[t] = 2 * (i + 1)
        n_cand = _collect(i, msg, cb, lay, sc, out.stats)
        for q in range(msg.kw_ptr[i], msg.kw_ptr[i + 1]):
            t = msg.kw_terms[q]
            if 0 <= t < sc.term_mark.size:
                sc.term_mark[t] = 0
        if n_out + n_cand > cap:
            out.stats[0] -= n_cand  # redone by the next call, counted there
            break
        n_found = 0
        if n_cand > 0:
            out.stats[1] += verify_candidates(
                search, msg.chain[i], msg.chain_offset[i], sc.cand_edge, sc.cand_offset,
                sc.cand_limit, n_cand, sc.cand_dist)
            for j in range(n_cand):
                d = sc.cand_dist[j]
                if d <= sc.cand_limit[j]:
                    out.out_id[n_out + n_found] = lay.post_id[sc.cand_row[j]]
                    out.out_dist[n_out + n_found] = d
                    n_found += 1
            if n_found > 1:  # the output's order within a message: subscription id
                ids = out.out_id[n_out:n_out + n_found]
                dist = out.out_dist[n_out:n_out + n_found]
                by_id = np.argsort(ids)
                ids[:] = ids[by_id]
                dist[:] = dist[by_id]
        out.msg_count[i] = n_found
        n_out += n_found
        i += 1
    return i, n_out


@numba.njit(cache=True, nogil=True)
def _place(  # pragma: no cover - compiled
    first: int, last: int, msg_count: I64, dest: I64, part_id: I64, part_dist: F,
    out_id: I64, out_dist: F,
) -> None:
    """Copy the deliveries of messages first .. last - 1 (consecutive in ``part_*``) to
    their places ``dest[i]`` in the output."""
    k = 0
    for i in range(first, last):
        d = dest[i]
        for j in range(msg_count[i]):
            out_id[d + j] = part_id[k]
            out_dist[d + j] = part_dist[k]
            k += 1


def verification_graph(spatial: SpatialIndex, *, dmax_m: float,
                       bucket_width_m: float = DEFAULTS.bucket_width_m
                       ) -> tuple[NodeSearch, GraphArrays, BucketQueue]:
    """A reverse search on the spatial index's chain graph, its arrays and bucket queue."""
    search = NodeSearch(spatial.graph, reverse=True)
    adj = search.adjacency
    g = spatial.graph
    net = GraphArrays(adj.indptr, adj.indices, adj.weights, g.edge_u, g.edge_v, g.edge_length,
                      g.edge_twoway, dead_ends(adj))
    n_buckets = min(int(dmax_m / bucket_width_m) + 3, 1 << 22)
    buckets = BucketQueue(np.empty(n_buckets, dtype=np.int64),
                          np.empty(search.workspace().heap_d.size, dtype=np.int64),
                          float(bucket_width_m))
    return search, net, buckets


def cell_bound_arrays(spatial: SpatialIndex) -> CellBoundArrays:
    """The cell-pair bounds by message cell, with the default slack of Algorithm 1."""
    b = spatial.bounds
    return CellBoundArrays(float(b.kappa), np.ascontiguousarray(b.D.T),
                           np.ascontiguousarray(b.eta_minus.T), spatial.cells.bbox,
                           float(DEFAULTS.bound_slack_m), float(DEFAULTS.bound_slack_rel))


def message_arrays(spatial: SpatialIndex, messages: Messages) -> MessageArrays:
    """Facts of the messages for the kernels."""
    f = spatial.facts(messages.points)
    return MessageArrays(f.chain, f.chain_offset, f.x, f.y, f.cell, f.din_in,
                                messages.kw_ptr, messages.kw_terms)


def verify_scratch(n_cells: int, n_terms: int, n_subs: int) -> VerifyScratch:
    """Scratch buffers for up to ``n_subs`` candidates per message."""
    n = max(n_subs, 1)
    return VerifyScratch(np.empty(n_cells), np.zeros(n_terms + 1, np.int64),
                         np.empty(n, np.int64), np.empty(n, np.int32), np.empty(n),
                         np.empty(n), np.empty(n), np.empty(2 * n, np.int64),
                         np.empty(2 * n))


class BooleanIndexMatcher:
    """Exact boolean range matching through :class:`~roadpubsub.index.boolean.BooleanIndex`.

    Parameters
    ----------
    network, subs, weights, dmax_m
        As for :class:`~roadpubsub.pruning.kinds_reference.BooleanBruteMatcher`.
    spatial
        Cells and bounds to reuse; built when omitted.
    threads
        Threads matching one call (default: every core this process may use); the result
        is the same for any number.

    Examples
    --------
    >>> import numpy as np
    >>> from roadpubsub.roadnet.network import RoadNetwork
    >>> from roadpubsub.roadnet.locations import EdgePoints
    >>> from roadpubsub.index.kinds import BooleanSubscriptions
    >>> from roadpubsub.index.model import Messages
    >>> from roadpubsub.index.terms import TermWeights
    >>> net = RoadNetwork.from_arrays(node_ids=[1, 2], node_lon=[0.0, 0.01],
    ...     node_lat=[0.0, 0.0], edge_u_ids=[1], edge_v_ids=[2], edge_length=[1000.0],
    ...     edge_oneway=[False], directed=False, name="x")
    >>> w = TermWeights({"a": 1.0, "b": 1.0})
    >>> subs = BooleanSubscriptions(np.array([7]), EdgePoints.of([0], [0.0]),
    ...     np.array([300.0]), np.array([0, 2]), np.array([0, 1], np.int32))
    >>> msgs = Messages.from_rows(ids=[1, 2], points=EdgePoints.of([0, 0], [250.0, 350.0]),
    ...     keywords=[["a", "b", "c"], ["a", "b"]], weights=w)
    >>> BooleanIndexMatcher(net, subs, w, dmax_m=1000).match(msgs).pairs()
    {(1, 7)}
    """

    name = "boolean"

    def __init__(self, network: RoadNetwork, subs: BooleanSubscriptions, weights: TermWeights,
                 *, dmax_m: float, spatial: SpatialIndex | None = None,
                 threads: int | None = None,
                 bucket_width_m: float = DEFAULTS.bucket_width_m) -> None:
        self.spatial = spatial or SpatialIndex.build(network)
        self.index = BooleanIndex.build(self.spatial, subs, weights, dmax_m=dmax_m)
        self.subs = subs
        self.bucket_width_m = float(bucket_width_m)
        self._search, self._net, self._buckets = verification_graph(
            self.spatial, dmax_m=self.index.dmax_m, bucket_width_m=self.bucket_width_m)
        ix = self.index
        self._lay = BooleanPostingArrays(
            ix.term_ptr, ix.grp_cell, ix.grp_radius, ix.grp_start, ix.post_id,
            ix.post_radius, ix.post_x, ix.post_y, ix.post_din_out, ix.post_chain,
            ix.post_chain_offset, ix.post_kw_ptr, ix.post_kw_terms)
        self._cb = cell_bound_arrays(self.spatial)
        self.threads = max(1, int(threads) if threads is not None else default_threads())
        self._lanes: list[tuple[Any, ...]] = []
        self._stats_lock = threading.Lock()
        #: Work since the start: candidates verified, junctions settled by the searches,
        #: postings read (those within their cell's bound).
        self.stats = {"candidates": 0, "settled": 0, "postings": 0}

    def _lane(self, k: int) -> tuple[Any, ...]:
        """Lane k's search, buckets, scratch and output buffers (made on first use)."""
        while len(self._lanes) <= k:
            if not self._lanes:
                search, buckets = self._search, self._buckets
            else:
                search, _, buckets = verification_graph(
                    self.spatial, dmax_m=self.index.dmax_m, bucket_width_m=self.bucket_width_m)
            n = max(len(self.subs), 1)
            scratch = verify_scratch(self.spatial.cells.n_cells, len(self.index.weights), n)
            # Room for every subscription: a message's candidates always fit an empty
            # output, so each call of the kernel makes progress.
            self._lanes.append((search, buckets, scratch, np.empty(n, np.int64), np.empty(n)))
        return self._lanes[k]

    def _run_lane(self, k: int, msg: MessageArrays, msg_count: I64,
                  runs: Iterator[tuple[int, int]]) -> list[tuple[int, int, I64, F]]:
        search, buckets, scratch, out_id, out_dist = self._lane(k)
        verify = VerifySearch(self._net, search.workspace(), buckets, scratch.t_nodes,
                              scratch.t_limits)
        out = BooleanOutput(msg_count, out_id, out_dist, np.zeros(3, np.int64))
        found = []
        for a, b in runs:
            start = a
            while start < b:
                stop, n_out = _match_boolean(start, b, msg, self._cb, self._lay, verify,
                                             scratch, out, 0)
                found.append((start, stop, out_id[:n_out].copy(), out_dist[:n_out].copy()))
                start = stop
        with self._stats_lock:
            for j, name in enumerate(("candidates", "settled", "postings")):
                self.stats[name] += int(out.stats[j])
        return found

    def verification_floor(self, messages: Messages, deliveries: Deliveries
                           ) -> tuple[float, int]:
        """Seconds and junctions settled by the verification of ``messages`` if the
        matcher knew their ``deliveries`` (from :meth:`match`) in advance: one search per
        message, in the order :meth:`match` takes them, with the delivered subscriptions
        as its only candidates, each limited to its own distance, on one thread
        (:func:`~roadpubsub.pruning.algorithm2.verify_known`, the kernel :meth:`match` verifies
        with). What no pruning can go below; it checks the distances it finds.

        Raises
        ------
        InputError
            A delivery names a subscription or message not given, or its distance differs
            from the one the floor's search finds.
        """
        n = len(messages)
        xy = point_xy(self.spatial.network, messages.points)
        ordered = messages.take(spatial_order(xy[:, 0], xy[:, 1]))
        first = np.searchsorted(deliveries.message_id, ordered.ids, side="left")
        end = np.searchsorted(deliveries.message_id, ordered.ids, side="right")
        if int((end - first).sum()) != len(deliveries):
            msg = "verification_floor: deliveries of messages not given"
            raise InputError(msg)
        take = (np.concatenate([np.arange(a, b) for a, b in zip(first, end, strict=True)])
                if n else np.empty(0, np.int64))
        ptr = np.zeros(n + 1, np.int64)
        np.cumsum(end - first, out=ptr[1:])
        by_id = np.argsort(self.index.post_id)
        sid = deliveries.subscription_id[take]
        at = np.minimum(np.searchsorted(self.index.post_id, sid, sorter=by_id),
                        max(by_id.size - 1, 0))
        if by_id.size == 0 or not np.array_equal(self.index.post_id[by_id[at]], sid):
            msg = "verification_floor: deliveries of subscriptions not in the index"
            raise InputError(msg)
        post = by_id[at]
        limit = np.ascontiguousarray(deliveries.distance[take], dtype=np.float64)
        mf = message_arrays(self.spatial, ordered)
        search, buckets, _, _, _ = self._lane(0)
        most = int(np.diff(ptr).max(initial=0))
        t_nodes, t_limits = np.empty(2 * most + 2, np.int64), np.empty(2 * most + 2)
        out = np.empty(limit.size)
        m_edge = mf.chain.astype(np.int64)
        c_edge, c_off = self.index.post_chain[post], self.index.post_chain_offset[post]
        verify = VerifySearch(self._net, search.workspace(), buckets, t_nodes, t_limits)
        for n_msg in (0, n):  # no message first: compiles outside the timing
            t0 = time.perf_counter()
            settled = verify_known(verify, m_edge[:n_msg], mf.chain_offset[:n_msg],
                                   ptr[:n_msg + 1], c_edge, c_off, limit, out)
        seconds = time.perf_counter() - t0
        if not np.array_equal(out, limit):
            msg = "verification_floor: a delivered distance differs from the floor's search"
            raise InputError(msg)
        return seconds, int(settled)

    def match(self, messages: Messages) -> Deliveries:
        """Deliveries sorted by (message_id, subscription_id), score 1.0."""
        n = len(messages)
        if len(self.subs) == 0 or n == 0:
            return Deliveries.empty()
        # Neighbouring messages (Hilbert order) find the postings and graph in cache.
        xy = point_xy(self.spatial.network, messages.points)
        ordered = messages.take(spatial_order(xy[:, 0], xy[:, 1]))
        msg = message_arrays(self.spatial, ordered)
        msg_count = np.zeros(n, np.int64)
        lanes = max(1, min(self.threads, math.ceil(n / 32)))
        size = max(8, math.ceil(n / (8 * lanes)))
        runs = iter([(a, min(a + size, n)) for a in range(0, n, size)])
        if lanes == 1:
            found = self._run_lane(0, msg, msg_count, runs)
        else:
            for k in range(lanes):
                self._lane(k)
            with ThreadPoolExecutor(max_workers=lanes) as pool:
                futures = [pool.submit(self._run_lane, k, msg, msg_count, runs)
                           for k in range(lanes)]
                found = [f for fut in futures for f in fut.result()]
        # Each message's deliveries are sorted by subscription id already; placing the
        # messages' blocks in message id order (ids are unique) sorts the whole output
        # without a sort of the deliveries.
        by_id = np.argsort(ordered.ids, kind="stable")
        count_by_id = msg_count[by_id]
        dest = np.empty(n, np.int64)
        dest[by_id] = np.cumsum(count_by_id) - count_by_id
        total = int(count_by_id.sum())
        out_id, out_dist = np.empty(total, np.int64), np.empty(total)
        for first, last, part_id, part_dist in found:
            _place(first, last, msg_count, dest, part_id, part_dist, out_id, out_dist)
        return Deliveries(np.repeat(ordered.ids[by_id], count_by_id), out_id, out_dist,
                          np.ones(total))
