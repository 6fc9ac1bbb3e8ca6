"""The keyword format of index files (issue 29, item 5): UTF-8 bytes and offsets, never a
fixed-width text array, whose size is the longest keyword times the number of keywords
(one 1 MB keyword made every snapshot of 11,831 keywords need 46 GiB). Files of the former
format (a fixed-width ``weights.terms``, version 1) still load and verify."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from roadpubsub.index.eia import EnhancedIndex
from roadpubsub.index.index_file import index_file_info
from roadpubsub.index.model import Subscriptions
from roadpubsub.index.spatial import SpatialIndex
from roadpubsub.index.store import load_index, verify_index
from roadpubsub.index.validate import IndexFileError, array_digest, decode_terms, encode_terms
from roadpubsub.index.workload import generate_workload
from roadpubsub.roadnet.locations import EdgePoints
from roadpubsub.roadnet.network import RoadNetwork

#: Long and non-ASCII keywords (each within the service's 256-byte limit).
LONG = ["x" * 250, "\u00fc" * 120, "\U0001f697" * 60, "strasse", "\u5730\u56f3"]


@pytest.fixture(scope="module")
def saved(andorra: RoadNetwork, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[Path, list[str]]:
    """An EIA file of Andorra whose vocabulary holds :data:`LONG`, and its keywords."""
    wl = generate_workload(andorra, n_subscriptions=400, n_messages=5, seed=7)
    index = EnhancedIndex(SpatialIndex.build(andorra, capacity=120), wl.subscriptions,
                          wl.weights, dmax_m=2000.0)
    extra = Subscriptions.from_rows(
        ids=np.arange(10**9, 10**9 + len(LONG), dtype=np.int64),
        points=EdgePoints.of([0] * len(LONG), [0.0] * len(LONG)),
        keywords=[[k, LONG[0]] for k in LONG], alpha=[0.5] * len(LONG),
        tau=[0.3] * len(LONG), weights=index.weights)
    index.subscribe(extra)
    path = index.save(tmp_path_factory.mktemp("terms") / "eia.npz")
    return path, list(index.weights.terms)


def test_encode_decode_round_trip() -> None:
    data, ptr = encode_terms([*LONG, ""])
    assert data.dtype == np.uint8 and ptr.dtype == np.int64
    assert data.size == sum(len(t.encode()) for t in LONG)  # no padding
    assert decode_terms(data, ptr) == [*LONG, ""]
    assert decode_terms(*encode_terms([])) == []


def test_long_keywords_round_trip_without_fixed_width_text(saved: tuple[Path, list[str]]
                                                           ) -> None:
    path, terms = saved
    assert set(LONG) <= set(terms)
    with np.load(path) as z:
        text = [k for k in z.files if k != "meta" and z[k].dtype.kind == "U"]
        size = z["weights.terms_utf8"].nbytes
    assert text == [], f"fixed-width text arrays: {text}"
    assert size == sum(len(t.encode()) for t in terms)
    loaded = load_index(path)
    assert list(loaded.weights.terms) == terms
    assert index_file_info(path)["terms"] == len(terms)
    assert verify_index(path)["structures"] == "ok"


def test_a_file_of_the_former_format_loads_and_verifies(saved: tuple[Path, list[str]],
                                                        tmp_path: Path) -> None:
    path, terms = saved
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files if k != "meta"}
        meta = json.loads(str(z["meta"]))
    del arrays["weights.terms_utf8"], arrays["weights.terms_ptr"]
    arrays["weights.terms"] = np.asarray(terms, dtype=str)
    meta.update(version=1, digest=array_digest(arrays))
    old = tmp_path / "v1.npz"
    np.savez(old, meta=np.array(json.dumps(meta)), **arrays)
    assert list(load_index(old).weights.terms) == terms
    assert verify_index(old)["digest"] == "ok"


@pytest.mark.parametrize(("case", "edit", "says"), [
    ("not UTF-8", lambda a: a["weights.terms_utf8"].__setitem__(0, 0xFF), "not UTF-8"),
    ("offsets past the end", lambda a: a["weights.terms_ptr"].__setitem__(-1, 10**9),
     "weights.terms_ptr"),
    ("offsets decreasing", lambda a: a["weights.terms_ptr"].__setitem__(2, 0),
     "weights.terms_ptr"),
    ("bytes as int32", lambda a: a.update(
        {"weights.terms_utf8": a["weights.terms_utf8"].astype(np.int32)}), "terms_utf8"),
    ("a repeated keyword", lambda a: a.update(zip(
        ("weights.terms_utf8", "weights.terms_ptr"),
        encode_terms([*decode_terms(a["weights.terms_utf8"], a["weights.terms_ptr"])[:-1],
                      LONG[0]]), strict=True)), "repeats keywords"),
])
def test_damaged_keyword_arrays_give_one_clear_error(saved: tuple[Path, list[str]],
                                                     tmp_path: Path, case: str, edit: object,
                                                     says: str) -> None:
    path, _ = saved
    with np.load(path) as z:
        arrays = {k: z[k].copy() for k in z.files}
    edit(arrays)  # type: ignore[operator]
    bad = tmp_path / "bad.npz"
    np.savez(bad, **arrays)
    with pytest.raises(IndexFileError) as err:
        load_index(bad)
    assert str(bad) in str(err.value) and says in str(err.value), (case, str(err.value))
