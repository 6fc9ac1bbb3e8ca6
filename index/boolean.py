"""The boolean range index: subscriptions grouped per cell under their rarest keyword.

As in the AP-tree's keyword partitions, a boolean subscription can only be delivered a
message holding *all* its keywords, so it is filed under one of them, its rarest (fewest
boolean subscriptions hold it; ties by term id), and a message visits only the lists of
its own keywords. Within a keyword's list the subscriptions are grouped by cell (the PMR
cells of :class:`~roadpubsub.index.spatial.SpatialIndex`), each group with the largest radius of its
subscriptions, so a whole group is skipped when the cell's distance lower bound exceeds
that radius.

Layout (CSR, three levels)::

    term t -> groups term_ptr[t]:term_ptr[t + 1]
    group g -> cell grp_cell[g], largest radius grp_radius[g] (metres),
               postings grp_start[g]:grp_start[g + 1], radius descending
    posting p -> row post_row[p], and the row's facts copied in posting order:
               id post_id, radius post_radius, position post_x/post_y, din_out
               post_din_out, chain point post_chain/post_chain_offset, and its other
               keywords post_kw_terms[post_kw_ptr[p]:post_kw_ptr[p + 1]], rarest first

The copies in posting order make a message's scan of a group one sequential read instead
of one random read per fact per subscription (a million subscriptions' facts are far
larger than the caches; figures in BENCHMARKS.md, issue 21).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from roadpubsub.index.kinds import BooleanSubscriptions
from roadpubsub.index.postings import group_by_term_cell
from roadpubsub.index.spatial import PointFacts, SpatialIndex
from roadpubsub.index.terms import TermWeights
from roadpubsub.roadnet.errors import InputError
from roadpubsub.roadnet.lengths import check_dmax

__all__ = ["BooleanIndex", "rarest_keywords"]

IntArray = npt.NDArray[np.int64]


def rarest_keywords(kw_ptr: IntArray, kw_terms: npt.NDArray[np.int32], n_terms: int
                    ) -> npt.NDArray[np.int32]:
    """Per row, its keyword held by the fewest rows (ties: the smaller term id).

    Every row must have at least one keyword.
    """
    lengths = np.diff(kw_ptr)
    if np.any(lengths == 0):
        msg = "every boolean subscription needs a keyword"
        raise InputError(msg)
    df = np.bincount(kw_terms, minlength=n_terms).astype(np.int64)
    # One key per (row, keyword): frequency first, then term id; the row's minimum wins.
    key = df[kw_terms] * np.int64(n_terms + 1) + kw_terms.astype(np.int64)
    best = np.minimum.reduceat(key, kw_ptr[:-1])
    return (best % np.int64(n_terms + 1)).astype(np.int32)


@dataclass(frozen=True, eq=False)
class BooleanIndex:
    """Boolean subscriptions filed by (rarest keyword, cell); see the module docstring.

    Attributes
    ----------
    spatial
        Cells and cell-pair bounds (shared with the threshold indexes).
    subs
        The subscriptions (rows are the postings' values).
    weights
        The vocabulary their keyword ids refer to.
    dmax_m
        Dmax in metres (every radius is at most this).
    facts
        Position, cell, border distances and chain-graph point of each subscription.
    term_ptr, grp_cell, grp_radius, grp_start, post_row
        The three-level layout.
    post_id, post_radius, post_x, post_y, post_din_out, post_chain, post_chain_offset
        Each posting's subscription facts, in posting order.
    post_kw_ptr, post_kw_terms
        Each posting's keywords other than the one it is filed under (CSR), rarest first,
        so a missing one is found early.
    """

    spatial: SpatialIndex
    subs: BooleanSubscriptions
    weights: TermWeights
    dmax_m: float
    facts: PointFacts
    term_ptr: IntArray
    grp_cell: npt.NDArray[np.int32]
    grp_radius: npt.NDArray[np.float64]
    grp_start: IntArray
    post_row: IntArray
    post_id: IntArray
    post_radius: npt.NDArray[np.float64]
    post_x: npt.NDArray[np.float64]
    post_y: npt.NDArray[np.float64]
    post_din_out: npt.NDArray[np.float64]
    post_chain: npt.NDArray[np.int32]
    post_chain_offset: npt.NDArray[np.float64]
    post_kw_ptr: IntArray
    post_kw_terms: npt.NDArray[np.int32]

    def __len__(self) -> int:
        return len(self.subs)

    @classmethod
    def build(cls, spatial: SpatialIndex, subs: BooleanSubscriptions, weights: TermWeights,
              *, dmax_m: float) -> BooleanIndex:
        """File every subscription under its rarest keyword and its cell.

        Raises
        ------
        InputError
            A radius above Dmax, or keyword ids outside the vocabulary.
        """
        dmax = check_dmax(dmax_m)
        if np.any(subs.radius > dmax):
            msg = f"boolean radii must be at most Dmax = {dmax:g} m"
            raise InputError(msg)
        n_terms = len(weights)
        if subs.kw_terms.size and int(subs.kw_terms.max()) >= n_terms:
            msg = "boolean subscriptions hold keyword ids outside the weights' vocabulary"
            raise InputError(msg)
        facts = spatial.facts(subs.points)
        n = len(subs)
        key_term = rarest_keywords(subs.kw_ptr, subs.kw_terms, n_terms) if n else \
            np.empty(0, np.int32)
        # Within a group, largest radius first: the matcher leaves a group at the first
        # subscription whose radius is below the cell's distance bound.
        groups = group_by_term_cell(key_term, facts.cell, n_terms, within=(-subs.radius,))
        order = groups.order
        radius = subs.radius[order]
        grp_radius = (np.maximum.reduceat(radius, groups.start[:-1]) if n else np.empty(0))
        kw_ptr, kw_terms = _other_keywords(subs.kw_ptr, subs.kw_terms, order, key_term,
                                           n_terms)
        return cls(spatial=spatial, subs=subs, weights=weights, dmax_m=dmax, facts=facts,
                   term_ptr=groups.term_ptr, grp_cell=groups.cell, grp_radius=grp_radius,
                   grp_start=groups.start, post_row=order,
                   post_id=subs.ids[order].astype(np.int64), post_radius=radius,
                   post_x=facts.x[order], post_y=facts.y[order],
                   post_din_out=facts.din_out[order], post_chain=facts.chain[order],
                   post_chain_offset=facts.chain_offset[order], post_kw_ptr=kw_ptr,
                   post_kw_terms=kw_terms)


def _other_keywords(kw_ptr: IntArray, kw_terms: npt.NDArray[np.int32], order: IntArray,
                    key_term: npt.NDArray[np.int32], n_terms: int
                    ) -> tuple[IntArray, npt.NDArray[np.int32]]:
    """Per posting (rows in ``order``), the row's keywords except its key term, rarest
    first (fewest rows hold it; ties by term id); duplicates of a term are kept (harmless)."""
    n = order.size
    lens = np.diff(kw_ptr)[order]
    total = int(lens.sum())
    post = np.repeat(np.arange(n, dtype=np.int64), lens)
    first = np.repeat(kw_ptr[:-1][order] - (np.cumsum(lens) - lens), lens)
    terms = kw_terms[first + np.arange(total, dtype=np.int64)]
    other = terms != np.repeat(key_term[order], lens)
    post, terms = post[other], terms[other]
    df = np.bincount(kw_terms, minlength=n_terms).astype(np.int64)
    rank = np.lexsort((terms, df[terms], post))
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(post, minlength=n), out=ptr[1:])
    return ptr, terms[rank].astype(np.int32)
