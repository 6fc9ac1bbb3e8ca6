"""Algorithm 1, the pruning phase: cells, then edges, then subscriptions (paper Sec. VI-A).

The per-message loops run compiled (numba) over the index's flat arrays. Every lower bound
on dN(s, m) used here is provably safe (see :mod:`roadpubsub.roadnet.cell_bounds`):

* same cell: kappa * dE, with kappa the network's safe Euclidean factor;
* different cells ci (subscription side) and cm (message side):
  max(eta_minus(ci, cm) * dE_min, din_out + D(ci, cm) + din_in(m)), Eq. 5 and the
  border-vertex bound, with dE_min taken to the cell region, the edge region or the point.

A bound is compared with a limit through :func:`_keep`, which adds ``slack_abs`` metres and
``slack_rel`` of the limit in favour of keeping, so rounding in either sum cannot prune a
pair the reference matcher delivers.

Counters (per message, in this order, see :data:`COUNTER_NAMES`).
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

from roadpubsub.index.limits import SIMILARITY_SLACK, TEXT_BOUND_INFLATION
from roadpubsub.index.slot_record import RECORD_WIDTH, aligned_rows
from roadpubsub.pruning.kernel_args import (
    BiaCellArrays,
    BoundArrays,
    EdgeArrays,
    EiaCellArrays,
    LayoutArrays,
    MatchLimits,
    MessageProbe,
    ScratchArrays,
    SlotArrays,
)
from roadpubsub.roadnet._prefetch import prefetch

__all__ = ["COUNTER_NAMES", "EDGE_RECORD_WIDTH", "MARK_SHIFT", "MAX_STAMP", "bia_candidates",
           "cell_lower_bounds", "edge_record", "eia_candidates", "mark_tag",
           "network_lower_bound", "similarity_prunes"]

#: Names of the per-message counters the kernels fill, by index.
COUNTER_NAMES = (
    "cells_pruned_lemma2",   # dN lower bound > DNlimit(ci) (BIA: > Dmax)
    "cells_pruned_lemma4",   # no keyword of m in LAP(ci) (BIA: no keyword of m in ci)
    "cells_pruned_lemma8",   # no shared keyword t with dN lower bound <= DNUB(ci|t)
                             # (BIA: max SIM of the cell < its min tau)
    "edges_skipped_distance",
    "edges_skipped_similarity",
    "postings_scanned",
    "postings_pruned_lemma6",
    "candidates",
)

#: How many edges ahead the EIA scan prefetches their rows.
_AHEAD = 8
#: How many passing edge groups ahead it prefetches their first posting's slot row.
_AHEAD_POSTINGS = 8

# Their positions, by name (numba reads module-level ints as constants).
CELLS_PRUNED_LEMMA2 = 0
CELLS_PRUNED_LEMMA4 = 1
CELLS_PRUNED_LEMMA8 = 2
EDGES_SKIPPED_DISTANCE = 3
EDGES_SKIPPED_SIMILARITY = 4
POSTINGS_SCANNED = 5
POSTINGS_PRUNED_LEMMA6 = 6
CANDIDATES = 7

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: ``scratch.mark[s]`` holds ``stamp << MARK_SHIFT`` plus the slot's candidate position
#: for the message of that stamp: one read tells whether s is taken and where its
#: DNUB sits, so ``cand_dnub`` is indexed by position (read in order by the limits loop)
#: rather than by slot (a cache miss per candidate). Positions are below 2**31 (``cand``
#: is int32) and stamps below :data:`MAX_STAMP`, so a mark never overflows int64 and a
#: mark of an earlier stamp is always below the current tag.
MARK_SHIFT = 31
#: Stamps must stay below this (the matcher resets its marks before reaching it).
MAX_STAMP = 1 << 31


@numba.njit(cache=True, inline="always")
def mark_tag(stamp: int) -> int:  # pragma: no cover - compiled
    """The smallest mark of a slot taken for the message of ``stamp``."""
    return stamp << MARK_SHIFT


@numba.njit(cache=True, inline="always")
def _keep(lower_bound: float, limit: float, slack_abs: float, slack_rel: float
          ) -> bool:  # pragma: no cover - compiled
    return lower_bound <= limit + slack_abs + slack_rel * abs(limit)


@numba.njit(cache=True, inline="always")
def _box_distance(x: float, y: float, box: FloatArray, i: int) -> float:  # pragma: no cover
    dx = max(box[i, 0] - x, 0.0, x - box[i, 2])
    dy = max(box[i, 1] - y, 0.0, y - box[i, 3])
    return float(np.sqrt(dx * dx + dy * dy))


@numba.njit(cache=True, inline="always")
def network_lower_bound(de: float, same_cell: bool, kappa: float, eta: float,
                        din_out: float, D: float, din_in: float
                        ) -> float:  # pragma: no cover - compiled
    """A lower bound on dN(s, m) in metres from the Euclidean distance ``de`` (m).

    kappa * dE when s lies in the message's cell, else
    max(eta_minus(cs, cm) * dE, din_out(s) + D(cs, cm) + din_in(m)) (Eq. 5 and the
    border-vertex bound, :mod:`roadpubsub.roadnet.cell_bounds`). For a region (a cell, an edge) pass
    its least ``de`` and ``din_out``.
    """
    if same_cell:
        return kappa * de
    return max(eta * de, din_out + D + din_in)


@numba.njit(cache=True)
def cell_lower_bounds(  # pragma: no cover - compiled
    m_cell: int, m_x: float, m_y: float, m_din_in: float, kappa: float,
    D_col: FloatArray, eta_col: FloatArray, cell_bbox: FloatArray, out: FloatArray,
) -> None:
    """dNmin(ci, m) for every cell ci (Eq. 5 and the border bound; kappa * dE in cm)."""
    for c in range(cell_bbox.shape[0]):
        de = _box_distance(m_x, m_y, cell_bbox, c)
        out[c] = network_lower_bound(de, c == m_cell, kappa, eta_col[c], 0.0, D_col[c],
                                     m_din_in)


@numba.njit(cache=True, inline="always")
def _edge_lower_bound(  # pragma: no cover - compiled
    e: int, same_cell: bool, c: int, m_x: float, m_y: float, m_din_in: float, kappa: float,
    D_col: FloatArray, eta_col: FloatArray, edge_bbox: FloatArray, edge_din_out: FloatArray,
) -> float:
    de = _box_distance(m_x, m_y, edge_bbox, e)
    return network_lower_bound(de, same_cell, kappa, eta_col[c], edge_din_out[e], D_col[c],
                               m_din_in)


@numba.njit(cache=True, inline="always")
def _max_similarity(lower_bound: float, dmax: float, tsim_ub: float, a_min: float,
                    a_max: float) -> float:  # pragma: no cover - compiled
    # SIM is linear in alpha, so its maximum over [a_min, a_max] is at an end.
    spro = 1.0 - lower_bound / dmax
    return max(a_min * spro + (1.0 - a_min) * tsim_ub, a_max * spro + (1.0 - a_max) * tsim_ub)


@numba.njit(cache=True, inline="always")
def similarity_prunes(lower_bound: float, dmax: float, a_min: float, a_max: float,
                      min_tau_e: float) -> bool:  # pragma: no cover - compiled
    """Paper Alg. 1 lines 14-17: no subscription of an edge whose alpha lie in
    [a_min, a_max] and whose tau_e are at least ``min_tau_e`` reaches its tau_e at a
    distance of at least ``lower_bound`` (m), whatever its text."""
    return _max_similarity(lower_bound, dmax, 1.0, a_min, a_max) + SIMILARITY_SLACK \
        < min_tau_e


#: Float64 columns of :func:`edge_record`'s rows (64 bytes).
EDGE_RECORD_WIDTH = 8
# Its columns: the box (0-3), din_out (4), the similarity limit (5).
_E_DIN_OUT = 4
_E_SIM_LIMIT = 5


@numba.njit(cache=True, nogil=True)
def _similarity_limit(dmax: float, a_min: float, a_max: float,
                      min_tau_e: float) -> float:  # pragma: no cover - compiled
    """A distance (m) above which :func:`similarity_prunes` holds, or inf.

    Why one number per edge can stand for the test: for alpha in [0, 1] and Dmax > 0 the
    test's left side is non-increasing in the bound, also as evaluated in float64 (each
    operation on the bound, a division by Dmax > 0, 1 - x, a product with alpha >= 0, a
    sum, a max, is correctly rounded and so monotone). So once the test holds at x it
    holds at every y >= x. The candidate x is the exact root Dmax (1 - tau_e + slack) /
    a_min, moved up until this very test (the same compiled code the kernel once ran per
    edge) holds there; no x found in 64 steps gives inf (never pruned here, as for an
    edge of alpha 0). -1 when the test holds at 0 (every bound is >= 0)."""
    if not (np.isfinite(a_min) and np.isfinite(a_max) and np.isfinite(min_tau_e)) \
            or a_min < 0.0 or a_max < 0.0 or not dmax > 0.0:
        return np.inf
    if similarity_prunes(0.0, dmax, a_min, a_max, min_tau_e):
        return -1.0
    if a_min <= 0.0:
        return np.inf
    x = dmax * (1.0 - min_tau_e + SIMILARITY_SLACK) / a_min
    if not np.isfinite(x):
        return np.inf
    x = max(x, 0.0)
    for _ in range(64):
        if similarity_prunes(x, dmax, a_min, a_max, min_tau_e):
            return x
        x = x + max(abs(x) * 2.0 ** -40, 1e-6)
    return np.inf


@numba.njit(cache=True, nogil=True)
def _fill_edge_record(out: FloatArray, bbox: FloatArray, din_out: FloatArray,
                      min_alpha: FloatArray, max_alpha: FloatArray, min_tau_e: FloatArray,
                      dmax: float) -> None:  # pragma: no cover - compiled
    for e in range(out.shape[0]):
        for k in range(4):
            out[e, k] = bbox[e, k]
        out[e, _E_DIN_OUT] = din_out[e]
        out[e, _E_SIM_LIMIT] = _similarity_limit(dmax, min_alpha[e], max_alpha[e],
                                                 min_tau_e[e])
        out[e, 6] = 0.0
        out[e, 7] = 0.0


def edge_record(bbox: FloatArray, din_out: FloatArray, min_alpha: FloatArray,
                max_alpha: FloatArray, min_tau_e: FloatArray, dmax: float) -> FloatArray:
    """What the EIA's edge loop reads of an edge, in one 64-byte row per edge.

    Columns: the edge's box (x0, y0, x1, y1, m), its din_out (m), and its similarity
    limit (m): a distance above which no subscription of the edge can reach its tau_e
    (:func:`similarity_prunes` holds; see :func:`_similarity_limit`), so that the paper's
    per-edge SIM test (Alg. 1 lines 14-17) costs one comparison on the row already loaded
    instead of three loads from three arrays (cache misses at millions of
    subscriptions). Built from the spatial index's boxes and border distances and the
    index's edge statistics, which change only when the postings are rebuilt.

    Examples
    --------
    >>> import numpy as np
    >>> rec = edge_record(np.array([[0.0, 0.0, 10.0, 5.0]]), np.array([3.0]),
    ...                   np.array([0.5]), np.array([0.6]), np.array([0.7]), 5000.0)
    >>> rec.shape, float(rec[0, 4])
    ((1, 8), 3.0)
    >>> bool(similarity_prunes(rec[0, 5] + 1.0, 5000.0, 0.5, 0.6, 0.7))
    True
    """
    n = bbox.shape[0]
    out = aligned_rows(n, EDGE_RECORD_WIDTH)
    _fill_edge_record(out, np.ascontiguousarray(bbox, dtype=np.float64),
                      np.asarray(din_out, dtype=np.float64),
                      np.asarray(min_alpha, dtype=np.float64),
                      np.asarray(max_alpha, dtype=np.float64),
                      np.asarray(min_tau_e, dtype=np.float64), float(dmax))
    return out


@numba.njit(cache=True, nogil=True)
def _scan_postings(  # pragma: no cover - compiled
    n_pass: int, n: int, probe: MessageProbe, bounds: BoundArrays, layout: LayoutArrays,
    slots: SlotArrays, limits: MatchLimits, scratch: ScratchArrays, tag: int,
    counters: IntArray,
) -> int:
    """Lemma 6 over the postings of the first ``n_pass`` passing edge groups of
    :func:`eia_candidates` (``scratch.pass_eg``, their cells and edge bounds), in order;
    returns the new candidate count."""
    m_cell, m_x, m_y, m_din_in = probe.cell, probe.x, probe.y, probe.din_in
    kappa, D_col, eta_col = bounds.kappa, bounds.D_t[m_cell], bounds.eta_t[m_cell]
    slack_abs, slack_rel = limits.slack_abs, limits.slack_rel
    eg_start, post_slot, post_value = layout.eg_start, layout.post_slot, layout.post_value
    slot_point, slot_active = slots.record, slots.active
    pass_eg, pass_cell, pass_lb = scratch.pass_eg, scratch.pass_cell, scratch.pass_lb
    mark, cand_out, cand_dnub, cand_lb = (scratch.mark, scratch.cand, scratch.cand_dnub,
                                          scratch.cand_lb)
    for j in range(n_pass):
        if j + _AHEAD_POSTINGS < n_pass:
            # The first (mostly the only) posting of a passing edge group further on: its
            # slot's x, y and din_out share one 64-byte row of the slot record
            # (index.slot_record), one line, not three.
            s_next = post_slot[eg_start[pass_eg[j + _AHEAD_POSTINGS]]]
            prefetch(slot_point, RECORD_WIDTH * s_next)
            prefetch(slot_active, s_next)
            prefetch(mark, s_next)
        eg = pass_eg[j]
        c = pass_cell[j]
        lbe = pass_lb[j]
        same = c == m_cell
        eta_c, D_c = eta_col[c], D_col[c]
        for p in range(eg_start[eg], eg_start[eg + 1]):
            v = post_value[p]
            if not _keep(lbe, v, slack_abs, slack_rel):
                break  # DNUB-descending: no later posting can pass
            counters[POSTINGS_SCANNED] += 1
            s = post_slot[p]
            if not slot_active[s]:
                continue
            dx = slot_point[s, 0] - m_x
            dy = slot_point[s, 1] - m_y
            de = np.sqrt(dx * dx + dy * dy)
            lb = network_lower_bound(de, same, kappa, eta_c, slot_point[s, 2], D_c, m_din_in)
            if not _keep(lb, v, slack_abs, slack_rel):
                counters[POSTINGS_PRUNED_LEMMA6] += 1
                continue
            taken = mark[s] - tag
            if taken < 0:  # a mark of an earlier message: s is new here
                mark[s] = tag + n
                cand_out[n] = s
                cand_lb[n] = lb
                cand_dnub[n] = v
                n += 1
            elif v > cand_dnub[taken]:
                cand_dnub[taken] = v
    return n


@numba.njit(cache=True)
def eia_candidates(  # pragma: no cover - compiled
    probe: MessageProbe, bounds: BoundArrays, cells: EiaCellArrays, edges: EdgeArrays,
    layout: LayoutArrays, slots: SlotArrays, limits: MatchLimits, scratch: ScratchArrays,
    stamp: int, counters: IntArray,
) -> int:
    """EIA pruning for one message; returns the number of candidates in ``scratch.cand``.

    The message is ``probe`` (its cell, position, din_in and term slots).
    ``scratch.cand_dnub[j]`` receives the largest DNUB(s|t) of candidate j over the shared
    prefix keywords t that passed (Lemma 6), which bounds the verification search. The edge
    groups of each IL(ci|t) must come DNUB-descending
    (``build_posting_layout(..., edges_by_value=True)``): the scan of a list stops at the
    first one below dNmin(ci, m). ``scratch.mark[s]`` at least ``stamp << MARK_SHIFT``
    marks a slot already taken for this message, and its low bits give its candidate
    position (:func:`mark_tag`). ``scratch.cand_lb[j]`` receives the lower bound on dN of
    candidate j (``scratch.cand[j]``; the same for every posting of its slot), so that
    verification can drop a candidate whose exact distance limit lies below it.
    """
    m_cell, m_x, m_y, m_din_in, m_term_slots = (probe.cell, probe.x, probe.y, probe.din_in,
                                                probe.term_slots)
    slack_abs, slack_rel = limits.slack_abs, limits.slack_rel
    kappa, cell_bbox = bounds.kappa, bounds.cell_bbox
    D_col, eta_col = bounds.D_t[m_cell], bounds.eta_t[m_cell]
    cell_dn_limit = cells.dn_limit
    edge_rec = edges.record
    term_ptr, grp_cell, grp_value, grp_start = (layout.term_ptr, layout.grp_cell,
                                                layout.grp_value, layout.grp_start)
    eg_edge, eg_value = layout.eg_edge, layout.eg_value
    cell_lb, cell_state = scratch.cell_lb, scratch.cell_state
    pass_eg, pass_cell, pass_lb = scratch.pass_eg, scratch.pass_cell, scratch.pass_lb
    n_cells = cell_bbox.shape[0]
    tag = mark_tag(stamp)
    cell_lower_bounds(m_cell, m_x, m_y, m_din_in, kappa, D_col, eta_col, cell_bbox, cell_lb)
    # cell_state: 0 empty, 1 pruned by Lemma 2, 2 alive, 3 holds a keyword of m, 4 passed.
    for c in range(n_cells):
        if cell_dn_limit[c] < 0.0:
            cell_state[c] = 0
        elif not _keep(cell_lb[c], cell_dn_limit[c], slack_abs, slack_rel):
            cell_state[c] = 1
            counters[CELLS_PRUNED_LEMMA2] += 1
        else:
            cell_state[c] = 2
    n = 0
    n_pass = 0
    n_slots_terms = term_ptr.size - 1
    for k in m_term_slots:
        if k >= n_slots_terms:
            continue
        for g in range(term_ptr[k], term_ptr[k + 1]):
            c = grp_cell[g]
            if cell_state[c] < 2:
                continue
            if cell_state[c] == 2:
                cell_state[c] = 3
            if not _keep(cell_lb[c], grp_value[g], slack_abs, slack_rel):
                continue  # Lemma 7 for this keyword
            cell_state[c] = 4
            same = c == m_cell
            lbc = cell_lb[c]
            eta_c, D_c = eta_col[c], D_col[c]
            g_end = grp_start[g + 1]
            for eg in range(grp_start[g], g_end):
                # The rows of later edges and the postings' slot rows are cache misses:
                # start loading them a few edges and postings ahead (roadnet._prefetch).
                # The edge's row is read inline, not through a helper taking the array
                # (numba's inlining takes a reference per call: atomic operations that two
                # threads reading the same array make contend).
                if eg + _AHEAD < g_end:
                    prefetch(edge_rec, EDGE_RECORD_WIDTH * eg_edge[eg + _AHEAD])
                if not _keep(lbc, eg_value[eg], slack_abs, slack_rel):
                    # dNmin(c, m) bounds dN for every subscription in c, so a posting
                    # whose DNUB is below it fails Lemma 6 on any edge; the edge groups are
                    # DNUB-descending, so no later one of IL(c|t) can pass either.
                    counters[EDGES_SKIPPED_DISTANCE] += g_end - eg
                    break
                e = eg_edge[eg]
                dx = max(edge_rec[e, 0] - m_x, 0.0, m_x - edge_rec[e, 2])
                dy = max(edge_rec[e, 1] - m_y, 0.0, m_y - edge_rec[e, 3])
                lbe = network_lower_bound(np.sqrt(dx * dx + dy * dy), same, kappa, eta_c,
                                          edge_rec[e, _E_DIN_OUT], D_c, m_din_in)
                if not _keep(lbe, eg_value[eg], slack_abs, slack_rel):
                    counters[EDGES_SKIPPED_DISTANCE] += 1
                    continue
                # Paper Alg. 1 lines 14-17, the best SIM any subscription on e could reach
                # against their least tau_e, as the distance above which it falls short
                # (edge_record: exactly the cases the SIM test prunes, or fewer).
                if lbe > edge_rec[e, _E_SIM_LIMIT]:
                    counters[EDGES_SKIPPED_SIMILARITY] += 1
                    continue
                # The edge passed: its postings are scanned once a batch of passing edges
                # is known, in the same order, so that the slot rows they read can be
                # prefetched for the postings actually scanned (prefetching in posting
                # order fetched many of edges that then failed).
                pass_eg[n_pass] = eg
                pass_cell[n_pass] = c
                pass_lb[n_pass] = lbe
                n_pass += 1
                if n_pass == pass_eg.size:
                    n = _scan_postings(n_pass, n, probe, bounds, layout, slots, limits,
                                       scratch, tag, counters)
                    n_pass = 0
    if n_pass > 0:
        n = _scan_postings(n_pass, n, probe, bounds, layout, slots, limits, scratch, tag,
                           counters)
    for c in range(n_cells):
        if cell_state[c] == 2:
            counters[CELLS_PRUNED_LEMMA4] += 1
        elif cell_state[c] == 3:
            counters[CELLS_PRUNED_LEMMA8] += 1
    counters[CANDIDATES] += n
    return n


@numba.njit(cache=True)
def bia_candidates(  # pragma: no cover - compiled
    probe: MessageProbe, bounds: BoundArrays, cells: BiaCellArrays, edges: EdgeArrays,
    layout: LayoutArrays, slots: SlotArrays, limits: MatchLimits, scratch: ScratchArrays,
    stamp: int, counters: IntArray,
) -> int:
    """BIAB pruning for one message; returns the number of candidates in ``scratch.cand``.

    Cells: distance bound > Dmax, then max SIM from the cell's distance bound and the sum
    of its maximum normalised weights of m's keywords against its min tau. Edges: the same
    test with the edge's bound and statistics. Every posting of a surviving edge group is a
    candidate (BIA keeps no per-subscription bound). The message is given as to
    :func:`eia_candidates`.
    """
    m_cell, m_x, m_y, m_din_in, m_term_slots = (probe.cell, probe.x, probe.y, probe.din_in,
                                                probe.term_slots)
    dmax, slack_abs, slack_rel = limits.dmax, limits.slack_abs, limits.slack_rel
    kappa, cell_bbox = bounds.kappa, bounds.cell_bbox
    D_col, eta_col = bounds.D_t[m_cell], bounds.eta_t[m_cell]
    cell_min_alpha, cell_max_alpha, cell_min_tau_e = (cells.min_alpha, cells.max_alpha,
                                                      cells.min_tau_e)
    edge_bbox, edge_din_out = edges.bbox, edges.din_out
    edge_min_alpha, edge_max_alpha, edge_min_tau_e = (edges.min_alpha, edges.max_alpha,
                                                      edges.min_tau_e)
    term_ptr, grp_cell, grp_value, grp_start = (layout.term_ptr, layout.grp_cell,
                                                layout.grp_value, layout.grp_start)
    eg_edge, eg_value, eg_start = layout.eg_edge, layout.eg_value, layout.eg_start
    post_slot, slot_active = layout.post_slot, slots.active
    cell_lb, cell_state, cell_tsum = scratch.cell_lb, scratch.cell_state, scratch.cell_tsum
    edge_tsum, edge_stamp, mark = scratch.edge_tsum, scratch.edge_stamp, scratch.mark
    cand_out = scratch.cand
    n_cells = cell_bbox.shape[0]
    tag = mark_tag(stamp)
    cell_lower_bounds(m_cell, m_x, m_y, m_din_in, kappa, D_col, eta_col, cell_bbox, cell_lb)
    for c in range(n_cells):
        cell_tsum[c] = 0.0
        if cell_min_tau_e[c] == np.inf:
            cell_state[c] = 0
        elif not _keep(cell_lb[c], dmax, slack_abs, slack_rel):
            cell_state[c] = 1
            counters[CELLS_PRUNED_LEMMA2] += 1
        else:
            cell_state[c] = 2
    n_slots_terms = term_ptr.size - 1
    for k in m_term_slots:
        if k >= n_slots_terms:
            continue
        for g in range(term_ptr[k], term_ptr[k + 1]):
            c = grp_cell[g]
            if cell_state[c] >= 2:
                cell_state[c] = 3
                cell_tsum[c] += grp_value[g]
    for c in range(n_cells):
        if cell_state[c] == 2:
            counters[CELLS_PRUNED_LEMMA4] += 1
        elif cell_state[c] == 3:
            sim = _max_similarity(cell_lb[c], dmax,
                                  min(1.0, cell_tsum[c] + TEXT_BOUND_INFLATION),
                                  cell_min_alpha[c], cell_max_alpha[c])
            if sim + SIMILARITY_SLACK < cell_min_tau_e[c]:
                counters[CELLS_PRUNED_LEMMA8] += 1
            else:
                cell_state[c] = 4
    # Per-edge text bound: sum over m's keywords of the edge group's max normalised weight.
    for k in m_term_slots:
        if k >= n_slots_terms:
            continue
        for g in range(term_ptr[k], term_ptr[k + 1]):
            if cell_state[grp_cell[g]] != 4:
                continue
            for eg in range(grp_start[g], grp_start[g + 1]):
                e = eg_edge[eg]
                if edge_stamp[e] != stamp:
                    edge_stamp[e] = stamp
                    edge_tsum[e] = 0.0
                edge_tsum[e] += eg_value[eg]
    n = 0
    for k in m_term_slots:
        if k >= n_slots_terms:
            continue
        for g in range(term_ptr[k], term_ptr[k + 1]):
            c = grp_cell[g]
            if cell_state[c] != 4:
                continue
            same = c == m_cell
            for eg in range(grp_start[g], grp_start[g + 1]):
                e = eg_edge[eg]
                lbe = _edge_lower_bound(e, same, c, m_x, m_y, m_din_in, kappa, D_col, eta_col,
                                        edge_bbox, edge_din_out)
                if not _keep(lbe, dmax, slack_abs, slack_rel):
                    counters[EDGES_SKIPPED_DISTANCE] += 1
                    continue
                sim = _max_similarity(lbe, dmax, min(1.0, edge_tsum[e] + TEXT_BOUND_INFLATION),
                                      edge_min_alpha[e], edge_max_alpha[e])
                if sim + SIMILARITY_SLACK < edge_min_tau_e[e]:
                    counters[EDGES_SKIPPED_SIMILARITY] += 1
                    continue
                for p in range(eg_start[eg], eg_start[eg + 1]):
                    counters[POSTINGS_SCANNED] += 1
                    s = post_slot[p]
                    if slot_active[s] and mark[s] < tag:
                        mark[s] = tag + n
                        cand_out[n] = s
                        n += 1
    counters[CANDIDATES] += n
    return n
