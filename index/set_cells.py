"""Segment sets (routes, areas) filed by cell, and their lower bound to a message (issue 32).

A subscription located on a :class:`~roadpubsub.roadnet.segment_sets.SegmentSet` is filed in every
cell its pieces lie in (a piece lies in its edge's cell, ``Cells.edge_cell``, as a point
subscription does). For a message m, the point index's cell bound dNmin(c, m) (Algorithm
1: kappa * dE(m, region of c) in m's own cell, else max(eta_minus(c, cm) * dE, D[c, cm] +
din_in(m)); :func:`roadpubsub.pruning.algorithm1.cell_lower_bounds`, computed by the caller) bounds
dN(p, m) from below for every point p of an edge in cell c. Every point of the set lies
in one of its cells, so

    LB(S, m) = min over the set's cells c of dNmin(c, m)

is a lower bound of dN(S, m) = min over p of dN(p, m): a set whose bound exceeds a limit
cannot lie within it, and the pruning stays provably safe. :func:`set_candidates` lists,
for one message, each set with LB within a limit exactly once (with its LB), by walking
the cells that hold any set (the cell -> sets postings).

**By keyword** (:meth:`SetCellIndex.term_postings`, :func:`set_term_candidates`): the
matchers file each set under a few of its keywords (the caller decides which: those a
message must share with the set for it to be deliverable at all, argued there) and, when
a set could be delivered sharing no keyword, in its cells' *always* lists. A message then
walks only the postings of its own terms and the always lists, in the cells within the
limit; the minimum over those cells is still LB(S, m) (a set is filed under a term in
every one of its cells), so a set it lists carries the same bound as above.

Columnar: a CSR of set -> cells and its inverse, cell -> sets; no object per set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numba
import numpy as np
import numpy.typing as npt

from roadpubsub.roadnet.cells import Cells
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.segment_sets import SegmentSets

__all__ = ["CandidateWork", "SetCellIndex", "SetPostings", "SetTermPostings", "set_candidates",
           "set_term_candidates"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

#: Slack (metres) taken off every lower bound before comparing it with a limit: bounds and
#: distances are exact sums on the length grid, the slack only adds candidates.
BOUND_SLACK_M = 1e-6


@dataclass(frozen=True, eq=False)
class SetCellIndex:
    """Which cells each segment set touches, and which sets each cell holds.

    Attributes
    ----------
    set_ptr, set_cell
        Set i lies in cells ``set_cell[set_ptr[i]:set_ptr[i + 1]]`` (sorted, unique).
    cell_ptr, cell_set
        Cell c holds sets ``cell_set[cell_ptr[c]:cell_ptr[c + 1]]`` (sorted, unique).
    occupied
        The cells holding at least one set, ascending (int64).
    """

    set_ptr: IntArray
    set_cell: IntArray
    cell_ptr: IntArray
    cell_set: IntArray
    occupied: IntArray

    @classmethod
    def build(cls, cells: Cells, sets: SegmentSets) -> SetCellIndex:
        """File every set in the cells of its pieces' edges."""
        n_sets, n_cells = len(sets), cells.n_cells
        piece_cell = cells.edge_cell[sets.edge].astype(np.int64)
        # Unique (set, cell) pairs, sorted by set then cell.
        key = np.unique(sets.owner * n_cells + piece_cell)
        owner, cell = key // n_cells, key % n_cells
        set_ptr = np.zeros(n_sets + 1, dtype=np.int64)
        np.cumsum(np.bincount(owner, minlength=n_sets), out=set_ptr[1:])
        order = np.argsort(cell, kind="stable")  # by cell, then set (stable)
        cell_ptr = np.zeros(n_cells + 1, dtype=np.int64)
        np.cumsum(np.bincount(cell, minlength=n_cells), out=cell_ptr[1:])
        occupied = np.flatnonzero(np.diff(cell_ptr) > 0).astype(np.int64)
        return cls(set_ptr, cell.astype(np.int64), cell_ptr, owner[order].astype(np.int64),
                   occupied)

    @property
    def n_sets(self) -> int:
        """Number of sets filed."""
        return int(self.set_ptr.size - 1)

    @property
    def nbytes(self) -> int:
        """Memory of the index's arrays in bytes."""
        return sum(int(a.nbytes) for a in (self.set_ptr, self.set_cell, self.cell_ptr,
                                          self.cell_set, self.occupied))

    def postings(self) -> SetPostings:
        """The arrays :func:`set_candidates` reads."""
        return SetPostings(self.cell_ptr, self.cell_set, self.occupied)

    def term_postings(self, term_ptr: IntArray, term_set: IntArray, always: npt.NDArray[np.bool_],
                      n_terms: int) -> SetTermPostings:
        """The postings :func:`set_term_candidates` reads: set s filed under each term of
        ``term_set[term_ptr[s]:term_ptr[s + 1]]`` (term ids below ``n_terms``, one entry
        per (term, cell, set) even when a term repeats) in every cell of s, and in the
        always lists of its cells where ``always[s]``; a set with neither is filed nowhere.

        Raises
        ------
        InputError
            Arrays of the wrong shape, or a term id outside ``[0, n_terms)``.
        """
        n_sets, n_cells = self.n_sets, int(self.cell_ptr.size - 1)
        term_ptr = np.asarray(term_ptr, dtype=np.int64)
        term_set = np.asarray(term_set, dtype=np.int64)
        always = np.asarray(always, dtype=bool)
        if (term_ptr.shape != (n_sets + 1,) or always.shape != (n_sets,) or term_ptr[0] != 0
                or term_ptr[-1] != term_set.size or np.any(np.diff(term_ptr) < 0)
                or (term_set.size and not (term_set.min() >= 0
                                           and term_set.max() < n_terms))):
            msg = f"set terms must be a CSR of {n_sets} sets of term ids below {n_terms}"
            raise InputError(msg)
        # Unique (set, term) pairs, then one (term, cell, set) entry per cell of the set.
        owner = np.repeat(np.arange(n_sets, dtype=np.int64), np.diff(term_ptr))
        key = np.unique(owner * max(n_terms, 1) + term_set)
        owner, term = key // max(n_terms, 1), key % max(n_terms, 1)
        per = np.diff(self.set_ptr)[owner]
        start = np.repeat(self.set_ptr[owner] - np.r_[0, np.cumsum(per)[:-1]], per)
        cell = self.set_cell[np.arange(int(per.sum()), dtype=np.int64) + start]
        term, owner = np.repeat(term, per), np.repeat(owner, per)
        order = np.argsort(term * n_cells + cell, kind="stable")  # sets stay ascending
        term, cell, owner = term[order], cell[order], owner[order]
        head = np.ones(term.size, dtype=bool)
        head[1:] = (term[1:] != term[:-1]) | (cell[1:] != cell[:-1])
        first = np.flatnonzero(head)
        ent_ptr = np.r_[first, term.size].astype(np.int64)
        tptr = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(np.bincount(term[first], minlength=n_terms), out=tptr[1:])
        # The always lists: the cell -> sets postings of the always sets.
        keep = always[self.cell_set]
        cell_of = np.repeat(np.arange(n_cells, dtype=np.int64), np.diff(self.cell_ptr))
        zptr = np.zeros(n_cells + 1, dtype=np.int64)
        np.cumsum(np.bincount(cell_of[keep], minlength=n_cells), out=zptr[1:])
        return SetTermPostings(tptr, cell[first].astype(np.int64), ent_ptr, owner,
                               zptr, self.cell_set[keep].copy(),
                               np.flatnonzero(np.diff(zptr) > 0).astype(np.int64))

    def lower_bounds(self, cell_bound: FloatArray) -> FloatArray:
        """LB(S, m) of every set, given every cell's bound to the message (the module
        docstring's bound; a plain reference of what :func:`set_candidates` computes)."""
        per = cell_bound[self.set_cell]
        return np.minimum.reduceat(per, self.set_ptr[:-1]) if per.size else per


class SetPostings(NamedTuple):
    """The cell -> sets postings (``SetCellIndex.postings``)."""

    cell_ptr: IntArray
    cell_set: IntArray
    occupied: IntArray


class SetTermPostings(NamedTuple):
    """Sets by keyword and cell (:meth:`SetCellIndex.term_postings`): term t's entries are
    ``term_ptr[t]:term_ptr[t + 1]``, entry e in cell ``ent_cell[e]`` holding sets
    ``ent_set[ent_ptr[e]:ent_ptr[e + 1]]``; cell c's always list is
    ``always_set[always_ptr[c]:always_ptr[c + 1]]``, ``always_occupied`` the cells with one.
    """

    term_ptr: IntArray
    ent_cell: IntArray
    ent_ptr: IntArray
    ent_set: IntArray
    always_ptr: IntArray
    always_set: IntArray
    always_occupied: IntArray

    @property
    def nbytes(self) -> int:
        """Memory of the postings in bytes."""
        return sum(int(a.nbytes) for a in self)


class CandidateWork(NamedTuple):
    """Workspaces of :func:`set_candidates`: ``best`` (n_sets, all +inf between calls)
    and the outputs ``sets``/``bound`` (n_sets each)."""

    best: FloatArray
    sets: IntArray
    bound: FloatArray

    @classmethod
    def of(cls, n_sets: int) -> CandidateWork:
        """Fresh workspaces for ``n_sets`` sets."""
        return cls(np.full(n_sets, np.inf), np.empty(n_sets, np.int64), np.empty(n_sets))


@numba.njit(cache=True, nogil=True, inline="always")
def _offer(best: FloatArray, out: IntArray, k: int, s: int,
           lb: float) -> int:  # pragma: no cover - compiled
    """Record bound ``lb`` of set s (listed once, at its first offer); returns k."""
    if best[s] == np.inf:
        out[k] = s
        k += 1
        best[s] = lb
    elif lb < best[s]:
        best[s] = lb
    return k


@numba.njit(cache=True, nogil=True, inline="always")
def _listed(work: CandidateWork, k: int) -> int:  # pragma: no cover - compiled
    """Write the k listed sets' bounds, lowered by :data:`BOUND_SLACK_M` (the slack that
    keeps the rounded cell bound below every exact distance), and restore ``work.best``."""
    for i in range(k):
        s = work.sets[i]
        work.bound[i] = max(0.0, work.best[s] - BOUND_SLACK_M)
        work.best[s] = np.inf
    return k


@numba.njit(cache=True, nogil=True)
def set_candidates(  # pragma: no cover - compiled
    post: SetPostings, cell_bound: FloatArray, limit: float, work: CandidateWork,
) -> int:
    """The sets with LB(S, m) <= limit, each once, given every cell's bound to the
    message (metres): returns k, and ``work.sets[:k]`` holds them (in the order first
    met) with their LB, lowered by :data:`BOUND_SLACK_M`, in ``work.bound[:k]``.
    ``work.best`` is restored to +inf."""
    best = work.best
    out = work.sets
    k = 0
    lim = limit + BOUND_SLACK_M
    for i in range(post.occupied.size):
        c = post.occupied[i]
        lb = cell_bound[c]
        if not lb <= lim:  # also drops NaN and +inf (unreachable)
            continue
        for j in range(post.cell_ptr[c], post.cell_ptr[c + 1]):
            k = _offer(best, out, k, post.cell_set[j], lb)
    return _listed(work, k)


@numba.njit(cache=True, nogil=True)
def set_term_candidates(  # pragma: no cover - compiled
    post: SetTermPostings, cell_bound: FloatArray, limit: float,
    msg_terms: npt.NDArray[np.int32], lo: int, hi: int, work: CandidateWork,
) -> int:
    """As :func:`set_candidates`, over the sets filed under the message's terms
    ``msg_terms[lo:hi]`` (each below ``post.term_ptr.size - 1``: the caller checks) or in
    the always lists: each such set with LB(S, m) <= limit once, with its LB lowered by
    :data:`BOUND_SLACK_M`. A repeated term only walks its postings again. ``work.best``
    is restored to +inf."""
    best = work.best
    out = work.sets
    k = 0
    lim = limit + BOUND_SLACK_M
    for i in range(post.always_occupied.size):
        c = post.always_occupied[i]
        lb = cell_bound[c]
        if not lb <= lim:  # also drops NaN and +inf (unreachable)
            continue
        for j in range(post.always_ptr[c], post.always_ptr[c + 1]):
            k = _offer(best, out, k, post.always_set[j], lb)
    for j in range(lo, hi):
        t = msg_terms[j]
        for e in range(post.term_ptr[t], post.term_ptr[t + 1]):
            lb = cell_bound[post.ent_cell[e]]
            if not lb <= lim:
                continue
            for x in range(post.ent_ptr[e], post.ent_ptr[e + 1]):
                k = _offer(best, out, k, post.ent_set[x], lb)
    return _listed(work, k)
