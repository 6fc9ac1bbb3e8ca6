"""The three-level posting layout: grouping, value order, and the DNUB order of edge groups."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from roadpubsub.index.postings import PostingLayout, build_posting_layout, edge_groups_by_value


@st.composite
def postings(draw: st.DrawFn) -> dict[str, np.ndarray]:
    n_slots = draw(st.integers(1, 30))
    n = draw(st.integers(0, 80))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    # Few distinct values, so that ties between postings and edge groups are common.
    values = rng.choice(np.array([0.0, 150.0, 150.0, 900.5, 2500.0, 4000.0]), n)
    cells = rng.integers(0, 3, n_slots)
    edges = rng.integers(0, 6, n_slots)
    if draw(st.booleans()):
        # Ids too large to pack (term slot, cell, edge) into one int64 sort key.
        cells, edges = 2**31 - 1 - cells, 2**31 - 1 - edges
    return {
        "post_slot": rng.integers(0, n_slots, n),
        "post_term_slot": rng.integers(0, 4, n),
        "post_value": values,
        "slot_cell": cells.astype(np.int32),
        "slot_edge": edges.astype(np.int32),
    }


def _rows(layout: PostingLayout) -> list[tuple[int, int, int, int, float]]:
    """(term slot, cell, edge, slot, value) of every posting, sorted."""
    rows = []
    for k in range(layout.term_ptr.size - 1):
        for g in range(layout.term_ptr[k], layout.term_ptr[k + 1]):
            for eg in range(layout.grp_start[g], layout.grp_start[g + 1]):
                for p in range(layout.eg_start[eg], layout.eg_start[eg + 1]):
                    rows.append((k, int(layout.grp_cell[g]), int(layout.eg_edge[eg]),
                                 int(layout.post_slot[p]), float(layout.post_value[p])))
    return sorted(rows)


def _check_levels(layout: PostingLayout) -> None:
    """Each level's value is the largest below it; postings descend within an edge group;
    a term's groups come by cell."""
    for k in range(layout.term_ptr.size - 1):
        assert np.all(np.diff(layout.grp_cell[layout.term_ptr[k]:layout.term_ptr[k + 1]]) > 0)
    for g in range(layout.grp_cell.size):
        egs = range(layout.grp_start[g], layout.grp_start[g + 1])
        assert len(egs) > 0
        assert layout.grp_value[g] == max(layout.eg_value[eg] for eg in egs)
        edges = [int(layout.eg_edge[eg]) for eg in egs]
        assert len(set(edges)) == len(edges)  # one edge group per edge
    for eg in range(layout.eg_edge.size):
        vals = layout.post_value[layout.eg_start[eg]:layout.eg_start[eg + 1]]
        assert vals.size > 0 and layout.eg_value[eg] == vals[0]
        assert np.all(np.diff(vals) <= 0)


@settings(max_examples=150, deadline=None)
@given(data=postings())
def test_edges_by_value_reorders_edge_groups_only(data: dict[str, np.ndarray]) -> None:
    by_edge = build_posting_layout(**data, n_term_slots=4)
    by_value = build_posting_layout(**data, n_term_slots=4, edges_by_value=True)
    for layout in (by_edge, by_value):
        _check_levels(layout)
        assert layout.n_postings == data["post_slot"].size
    # The same postings under the same terms, cells and edges, and the same groups.
    assert _rows(by_value) == _rows(by_edge)
    np.testing.assert_array_equal(by_value.term_ptr, by_edge.term_ptr)
    np.testing.assert_array_equal(by_value.grp_cell, by_edge.grp_cell)
    np.testing.assert_array_equal(by_value.grp_value, by_edge.grp_value)
    assert edge_groups_by_value(by_value)
    for g in range(by_value.grp_cell.size):
        a, b = by_value.grp_start[g], by_value.grp_start[g + 1]
        # Edge order within a group of by_edge; DNUB order (ties by edge) within by_value.
        assert np.all(np.diff(by_edge.eg_edge[a:b]) > 0)
        key = list(zip(-by_value.eg_value[a:b], by_value.eg_edge[a:b], strict=True))
        assert key == sorted(key)


def test_edge_groups_by_value_sees_a_rise_inside_a_group_only() -> None:
    # Term slot 1, cell 0: edge 0 holds 100 m, edge 1 holds 300 m (a rise in edge order);
    # term slot 2, cell 0: edge 0 holds 500 m, which may follow 300 m (a new group).
    data = {
        "post_slot": np.array([0, 1, 0]), "post_term_slot": np.array([1, 1, 2]),
        "post_value": np.array([100.0, 300.0, 500.0]),
        "slot_cell": np.array([0, 0], dtype=np.int32),
        "slot_edge": np.array([0, 1], dtype=np.int32),
    }
    by_edge = build_posting_layout(**data, n_term_slots=3)
    np.testing.assert_array_equal(by_edge.eg_value, [100.0, 300.0, 500.0])
    assert not edge_groups_by_value(by_edge)
    by_value = build_posting_layout(**data, n_term_slots=3, edges_by_value=True)
    np.testing.assert_array_equal(by_value.eg_value, [300.0, 100.0, 500.0])
    np.testing.assert_array_equal(by_value.eg_edge, [1, 0, 0])
    assert edge_groups_by_value(by_value)


@st.composite
def sorted_postings(draw: st.DrawFn) -> dict[str, np.ndarray]:
    """Postings as the architectures make them: slots sorted by (cell, edge) and each term's
    postings in slot order (the compiled layout's input), with many value ties."""
    data = draw(postings())
    order = np.lexsort((data["slot_edge"], data["slot_cell"]))
    data["slot_cell"], data["slot_edge"] = data["slot_cell"][order], data["slot_edge"][order]
    key = np.lexsort((data["post_slot"], data["post_term_slot"]))
    if draw(st.booleans()):  # interleave terms, keeping each term's slots ascending
        key = key[np.argsort(data["post_slot"][key], kind="stable")]
    for name in ("post_slot", "post_term_slot", "post_value"):
        data[name] = data[name][key]
    return data


@settings(max_examples=200, deadline=None)
@given(data=sorted_postings(), by_value=st.booleans(), narrow=st.booleans())
def test_compiled_layout_equals_the_sorted_one(data: dict[str, np.ndarray], by_value: bool,
                                               narrow: bool) -> None:
    from roadpubsub.index.build_kernels import layout_kernel
    from roadpubsub.index.postings import _build_posting_layout_sorted

    if narrow:
        data["post_slot"] = data["post_slot"].astype(np.int32)
        data["post_term_slot"] = data["post_term_slot"].astype(np.int32)
    ok, *parts = layout_kernel(data["post_slot"], data["post_term_slot"], data["post_value"],
                               data["slot_cell"], data["slot_edge"], 4, by_value)
    assert ok
    want = _build_posting_layout_sorted(**data, n_term_slots=4, edges_by_value=by_value)
    for name, got in zip(PostingLayout.__dataclass_fields__, parts, strict=True):
        expect = getattr(want, name)
        assert got.dtype == expect.dtype, name
        np.testing.assert_array_equal(got, expect, err_msg=name)


def test_compiled_layout_declines_unsorted_input() -> None:
    from roadpubsub.index.build_kernels import layout_kernel

    cell = np.array([1, 0], dtype=np.int32)
    edge = np.array([0, 0], dtype=np.int32)
    ok = layout_kernel(np.array([0, 1]), np.array([1, 1]), np.array([1.0, 2.0]), cell, edge,
                       2, False)[0]
    assert not ok  # slots not sorted by cell
    cell = np.array([0, 1], dtype=np.int32)
    ok = layout_kernel(np.array([1, 0]), np.array([1, 1]), np.array([1.0, 2.0]), cell, edge,
                       2, False)[0]
    assert not ok  # a term's postings out of slot order
    # build_posting_layout still answers, by sorting.
    layout = build_posting_layout(post_slot=np.array([1, 0]), post_term_slot=np.array([1, 1]),
                                  post_value=np.array([1.0, 2.0]), slot_cell=cell,
                                  slot_edge=edge, n_term_slots=2)
    np.testing.assert_array_equal(layout.post_slot, [0, 1])
