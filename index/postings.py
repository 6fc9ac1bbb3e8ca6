"""Columnar posting layout shared by the basic and enhanced architectures.

Postings are grouped three levels deep, as in the paper's Figs. 2(e) and 3(b):

* by *term slot* (slot 0 is the wildcard ``*``; term id t has slot t + 1), through the CSR
  ``term_ptr`` into the groups;
* by cell within a term (a group = a sub inverted list IL(ci|t));
* by edge within a group (an edge group), each holding its postings sorted by value,
  descending, for early termination. The enhanced architecture also orders a group's edge
  groups by their largest value, descending, so that a scan stops at the first edge group
  below the bound (:func:`edge_groups_by_value` checks that order).

Each level keeps the largest posting value below it (DNUB for the enhanced architecture,
normalised keyword weight for the basic one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["PostingLayout", "TermCellGroups", "build_posting_layout", "edge_groups_by_value",
           "group_by_term_cell"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class PostingLayout:
    """Three-level posting lists as flat arrays (all ``*_start`` arrays end with a sentinel).

    Attributes
    ----------
    term_ptr
        Groups of term slot k: ``term_ptr[k]:term_ptr[k + 1]``.
    grp_cell, grp_value, grp_start
        Per group: its cell, largest value, first edge group.
    eg_edge, eg_value, eg_start
        Per edge group: its edge, largest value, first posting.
    post_slot, post_value
        Per posting: subscription slot and value.
    """

    term_ptr: IntArray
    grp_cell: npt.NDArray[np.int32]
    grp_value: FloatArray
    grp_start: IntArray
    eg_edge: npt.NDArray[np.int32]
    eg_value: FloatArray
    eg_start: IntArray
    post_slot: npt.NDArray[np.int32]
    post_value: FloatArray

    @property
    def n_postings(self) -> int:
        """Number of postings."""
        return int(self.post_slot.size)

    def nbytes(self) -> int:
        """Memory held by the arrays, in bytes."""
        return sum(int(a.nbytes) for a in self.to_arrays().values())

    def to_arrays(self) -> dict[str, npt.NDArray[np.generic]]:
        """Named arrays (for saving)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_arrays(cls, arrays: dict[str, npt.NDArray[np.generic]], prefix: str = ""
                    ) -> PostingLayout:
        """Inverse of :meth:`to_arrays` (keys may carry a prefix)."""
        return cls(**{k: np.asarray(arrays[prefix + k]) for k in cls.__dataclass_fields__})


@dataclass(frozen=True, eq=False)
class TermCellGroups:
    """Entries grouped by (term, cell), the layout of the boolean and top-k indexes.

    Attributes
    ----------
    order
        Entry positions sorted by term, then cell, then the caller's keys.
    start
        Group g holds ``order[start[g]:start[g + 1]]`` (ends with a sentinel).
    cell
        Cell of each group.
    term_ptr
        Groups of term t: ``term_ptr[t]:term_ptr[t + 1]``.
    """

    order: IntArray
    start: IntArray
    cell: npt.NDArray[np.int32]
    term_ptr: IntArray


def group_by_term_cell(term: npt.ArrayLike, cell: npt.ArrayLike, n_terms: int, *,
                       within: tuple[npt.ArrayLike, ...] = ()) -> TermCellGroups:
    """Group entries by (term, cell); ``within`` orders a group's entries (least
    significant key first, as :func:`numpy.lexsort`; ties keep entry order).

    Terms must lie in [0, n_terms).

    Examples
    --------
    >>> g = group_by_term_cell([1, 0, 1, 1], [5, 2, 5, 3], 2)
    >>> g.order.tolist(), g.start.tolist(), g.cell.tolist(), g.term_ptr.tolist()
    ([1, 3, 0, 2], [0, 1, 2, 4], [2, 3, 5], [0, 1, 3])
    """
    t = np.asarray(term, dtype=np.int64)
    c = np.asarray(cell, dtype=np.int64)
    n = t.size
    keys = [np.arange(n), *(np.asarray(k) for k in within), c, t]
    order = np.lexsort(keys).astype(np.int64)
    t_sorted, c_sorted = t[order], c[order]
    new_group = np.ones(n, dtype=bool)
    new_group[1:] = (t_sorted[1:] != t_sorted[:-1]) | (c_sorted[1:] != c_sorted[:-1])
    starts = np.flatnonzero(new_group)
    term_ptr = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(np.bincount(t_sorted[starts], minlength=n_terms), out=term_ptr[1:])
    return TermCellGroups(order=order, start=np.append(starts, n).astype(np.int64),
                          cell=c_sorted[starts].astype(np.int32), term_ptr=term_ptr)


def build_posting_layout(
    *,
    post_slot: npt.NDArray[np.integer[Any]],
    post_term_slot: npt.NDArray[np.integer[Any]],
    post_value: FloatArray,
    slot_cell: npt.NDArray[np.int32],
    slot_edge: npt.NDArray[np.int32],
    n_term_slots: int,
    edges_by_value: bool = False,
) -> PostingLayout:
    """Group postings by (term slot, cell, edge), values descending within an edge group.

    Parameters
    ----------
    post_slot, post_term_slot, post_value
        One entry per posting.
    slot_cell, slot_edge
        Cell and edge of each subscription slot.
    n_term_slots
        Number of term slots (vocabulary size + 1 for the wildcard).
    edges_by_value
        Order the edge groups of a group by their largest value, descending (ties by edge),
        instead of by edge. A scan that needs a value of at least some bound can then stop
        at the first edge group below it.
    """
    from roadpubsub.index.build_kernels import layout_kernel

    # Both architectures hand over slots sorted by (cell, edge) and each term's postings
    # in slot order: the compiled kernel then needs a counting sort and short per-edge
    # sorts instead of sorting every posting by four keys (and their temporaries).
    ok, *parts = layout_kernel(np.asarray(post_slot), np.asarray(post_term_slot),
                               np.asarray(post_value, dtype=np.float64),
                               np.asarray(slot_cell), np.asarray(slot_edge),
                               int(n_term_slots), bool(edges_by_value))
    if ok:
        return PostingLayout(*parts)
    return _build_posting_layout_sorted(
        post_slot=post_slot, post_term_slot=post_term_slot, post_value=post_value,
        slot_cell=slot_cell, slot_edge=slot_edge, n_term_slots=n_term_slots,
        edges_by_value=edges_by_value)


def _build_posting_layout_sorted(
    *,
    post_slot: npt.NDArray[np.integer[Any]],
    post_term_slot: npt.NDArray[np.integer[Any]],
    post_value: FloatArray,
    slot_cell: npt.NDArray[np.int32],
    slot_edge: npt.NDArray[np.int32],
    n_term_slots: int,
    edges_by_value: bool = False,
) -> PostingLayout:
    """:func:`build_posting_layout` for postings in any order: one sort of all of them."""
    term_slot: IntArray = np.asarray(post_term_slot, dtype=np.int64)
    cell = slot_cell[post_slot].astype(np.int64)
    edge = slot_edge[post_slot].astype(np.int64)
    order = _posting_order(term_slot, cell, edge, post_value)
    ts = term_slot[order]
    cell = cell[order]
    edge = edge[order]
    value = post_value[order]
    slot = post_slot[order].astype(np.int32)
    new_grp, new_eg = _group_starts(ts, cell, edge)
    if edges_by_value and value.size:
        # Sort the edge groups (not the postings) by (group, largest value descending);
        # lexsort is stable, so ties keep the edge order. Then move their postings.
        eg_first = np.flatnonzero(new_eg)
        eg_size = np.diff(np.append(eg_first, value.size))
        eg_order = np.lexsort((-value[eg_first], np.cumsum(new_grp)[eg_first]))
        size = eg_size[eg_order]
        start = np.cumsum(size) - size
        moved = np.repeat(eg_first[eg_order] - start, size) + np.arange(value.size)
        ts, cell, edge, value, slot = ts[moved], cell[moved], edge[moved], value[moved], \
            slot[moved]
        new_eg = np.zeros(value.size, dtype=bool)  # the groups keep their places
        new_eg[start] = True
    n = ts.size
    eg_first = np.flatnonzero(new_eg)
    grp_first = np.flatnonzero(new_grp)
    eg_of_grp_first = np.cumsum(new_eg)[grp_first] - 1
    grp_ts = ts[grp_first]
    term_ptr = np.zeros(n_term_slots + 1, dtype=np.int64)
    np.cumsum(np.bincount(grp_ts, minlength=n_term_slots)[:n_term_slots], out=term_ptr[1:])
    grp_value = np.maximum.reduceat(value, grp_first) if n else np.empty(0)
    return PostingLayout(
        term_ptr=term_ptr,
        grp_cell=cell[grp_first].astype(np.int32),
        grp_value=np.asarray(grp_value, dtype=np.float64),
        grp_start=np.append(eg_of_grp_first, eg_first.size).astype(np.int64),
        eg_edge=edge[eg_first].astype(np.int32),
        eg_value=value[eg_first],
        eg_start=np.append(eg_first, n).astype(np.int64),
        post_slot=slot,
        post_value=value,
    )


def _posting_order(term_slot: IntArray, cell: IntArray, edge: IntArray, value: FloatArray
                   ) -> IntArray:
    """Order of the postings by (term slot, cell, edge, value descending)."""
    if term_slot.size == 0:
        return np.empty(0, dtype=np.int64)
    cell_bits = int(cell.max()).bit_length()
    edge_bits = int(edge.max()).bit_length()
    if int(term_slot.max()).bit_length() + cell_bits + edge_bits <= 62:
        # One int64 key instead of three: lexsort sorts once per key, and at 12M
        # subscriptions the four-key sort took most of the build.
        key = (term_slot.astype(np.int64) << (cell_bits + edge_bits)) \
            | (cell << edge_bits) | edge
        return np.lexsort((-value, key))
    return np.lexsort((-value, edge, cell, term_slot))


def _group_starts(ts: IntArray, cell: IntArray, edge: IntArray
                  ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Where a new group (term slot, cell) and a new edge group begin, in sorted postings."""
    n = ts.size
    new_grp = np.ones(n, dtype=bool)
    new_eg = np.ones(n, dtype=bool)
    if n:
        same_grp = (ts[1:] == ts[:-1]) & (cell[1:] == cell[:-1])
        new_grp[1:] = ~same_grp
        new_eg[1:] = ~(same_grp & (edge[1:] == edge[:-1]))
    return new_grp, new_eg


def edge_groups_by_value(layout: PostingLayout) -> bool:
    """Whether every group's edge groups come in descending order of their largest value.

    That is the order ``build_posting_layout(..., edges_by_value=True)`` gives, and the one
    :func:`roadpubsub.pruning.algorithm1.eia_candidates` relies on to stop scanning a group early.
    """
    value = layout.eg_value
    if value.size < 2:
        return True
    rises = value[1:] > value[:-1]
    # Pairs that straddle two groups may rise: the next group starts over.
    straddles = layout.grp_start[1:-1] - 1
    rises[straddles[(straddles >= 0) & (straddles < rises.size)]] = False
    return not bool(rises.any())
