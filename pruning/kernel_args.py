"""What the compiled batch matcher (:func:`roadpubsub.pruning.indexed._match_batch`) is given, by
name.

Each NamedTuple groups the arrays of one subject; numba compiles them as heterogeneous
named tuples, so the kernel reads ``msg.chain`` or ``slots.alpha`` rather than the tenth
element of an anonymous tuple, and a new array is added in one place.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

__all__ = ["BiaCellArrays", "BoundArrays", "DeltaArrays", "EdgeArrays", "EiaCellArrays",
           "GraphArrays", "IndexArrays", "LaneArrays", "LayoutArrays", "MatchLimits",
           "MessageArrays", "MessageProbe", "OutputArrays", "QueueArrays", "ScratchArrays",
           "SlotArrays"]

F = npt.NDArray[np.float64]
F2 = npt.NDArray[np.float64]  # 2-d, C order
I32_2 = npt.NDArray[np.int32]  # 2-d, C order
I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
I8 = npt.NDArray[np.int8]
B = npt.NDArray[np.bool_]


class MessageArrays(NamedTuple):
    """The batch's messages: chain-graph point, position (m), cell, din, keyword CSR."""

    chain: I32
    chain_offset: F
    x: F
    y: F
    cell: I32
    din_in: F
    kw_ptr: I64
    kw_terms: I32


class MessageProbe(NamedTuple):
    """One message as Algorithm 1 sees it: its cell, position (m), din_in (m) and term
    slots (0 the wildcard, t + 1 for term t)."""

    cell: int
    x: float
    y: float
    din_in: float
    term_slots: I64


class MatchLimits(NamedTuple):
    """Dmax (m), the delivery rule's tolerance on tau, the rounding slack of the bound
    comparisons (metres and fraction of the limit), and how far a call takes each message
    (3: to its deliveries; 1 or 2: stopped after its candidates or their limits, for
    :meth:`~roadpubsub.pruning.indexed.IndexMatcher.phase_seconds`)."""

    dmax: float
    tolerance: float
    slack_abs: float
    slack_rel: float
    phases: int = 3


class BoundArrays(NamedTuple):
    """Cell bounds: kappa, D and eta- by message cell (rows), cell boxes (m)."""

    kappa: float
    D_t: F
    eta_t: F
    cell_bbox: F


class EdgeArrays(NamedTuple):
    """Per edge: box (m), din_out lower bound (m), the subscriptions' alpha range, min tau_e;
    and (EIA) the same edge's box, din_out and similarity limit in one 64-byte row
    (:func:`roadpubsub.pruning.algorithm1.edge_record`; empty for BIA)."""

    bbox: F
    din_out: F
    min_alpha: F
    max_alpha: F
    min_tau_e: F
    record: F2


class LayoutArrays(NamedTuple):
    """The three-level posting lists (see :class:`roadpubsub.index.postings.PostingLayout`)."""

    term_ptr: I64
    grp_cell: I32
    grp_value: F
    grp_start: I64
    eg_edge: I32
    eg_value: F
    eg_start: I64
    post_slot: I32
    post_value: F


class EiaCellArrays(NamedTuple):
    """EIA per cell: DNlimit(ci) (Lemma 2)."""

    dn_limit: F


class BiaCellArrays(NamedTuple):
    """BIA per cell: the subscriptions' alpha range and min tau_e."""

    min_alpha: F
    max_alpha: F
    min_tau_e: F


class SlotArrays(NamedTuple):
    """The indexed subscriptions (slots): their record (:mod:`roadpubsub.index.slot_record`) as
    float64 rows and as int32 rows (for the chain), active flags, keyword CSR."""

    record: F2
    record_int: I32_2
    active: B
    kw_ptr: I64
    kw_terms: I32


class DeltaArrays(NamedTuple):
    """Subscriptions added since the build, with their DNlimit and wildcard flags."""

    x: F
    y: F
    cell: I32
    din_out: F
    dn_limit: F
    wildcard: B
    chain: I32
    chain_offset: F
    alpha: F
    tau: F
    kw_ptr: I64
    kw_terms: I32


class GraphArrays(NamedTuple):
    """The verification graph: reverse adjacency, chain edges, dead ends."""

    indptr: I64
    indices: I32
    weights: F
    edge_u: I32
    edge_v: I32
    edge_length: F
    edge_twoway: B
    dead_end_to: I32


class ScratchArrays(NamedTuple):
    """One thread's scratch of Algorithm 1 and the delta scan (reused between calls)."""

    cell_lb: F
    cell_state: I8
    cell_tsum: F
    edge_tsum: F
    edge_stamp: I64
    mark: I64
    cand: I32
    cand_dnub: F
    cand_lb: F
    term_mark: I64
    term_slots: I64
    d_rows: I64
    d_lim: F
    t_nodes: I64
    t_limits: F
    pass_eg: I64
    pass_cell: I64
    pass_lb: F


class QueueArrays(NamedTuple):
    """One thread's verification queue of a chunk: per message a run of candidates."""

    ptr: I64
    row: I64
    src: I8
    edge: I32
    offset: F
    limit: F
    alpha: F
    tau: F
    tsim: F
    dist: F


class OutputArrays(NamedTuple):
    """Deliveries found: message (input index), slot (0) or delta (1) row, distance, score."""

    msg: I64
    src: I8
    row: I64
    dist: F
    score: F


class IndexArrays(NamedTuple):
    """Everything of the index a batch is matched against (one kind's cell arrays are
    empty: EIA reads ``eia_cells``, BIA ``bia_cells``)."""

    bounds: BoundArrays
    edges: EdgeArrays
    layout: LayoutArrays
    eia_cells: EiaCellArrays
    bia_cells: BiaCellArrays
    slots: SlotArrays
    delta: DeltaArrays


class LaneArrays(NamedTuple):
    """What one matching thread writes: its scratch, verification queue and output, and
    the per-message statistics (rows of other lanes' messages are left alone)."""

    scratch: ScratchArrays
    queue: QueueArrays
    out: OutputArrays
    stats: I64
