"""Keyword weights files: the weights column and the default weight in the metadata are
checked alike, each error naming the file (issue 14, item 4)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from roadpubsub.index.io import DEFAULT_WEIGHT_KEY, read_weights
from roadpubsub.index.terms import MAX_WEIGHT, MIN_WEIGHT, InvalidWeightsError, TermWeights


def weights_file(tmp_path: Path, default: bytes | None, weights=(1.0, 2.0)) -> Path:
    table = pa.table({"term": ["delayed", "flight"][:len(weights)],
                      "weight": pa.array(weights, pa.float64())})
    if default is not None:
        table = table.replace_schema_metadata({DEFAULT_WEIGHT_KEY: default})
    path = tmp_path / "weights.parquet"
    pq.write_table(table, path)
    return path


@pytest.mark.parametrize("default", [b"-3", b"0", b"0.0", b"inf", b"nan", b"-inf",
                                     b"abc", b"", b"1e300", b"1e-300", b"\xff\xfe"])
def test_bad_default_weight_is_refused_naming_the_file(tmp_path, default) -> None:
    path = weights_file(tmp_path, default)
    with pytest.raises(InvalidWeightsError, match=r"weights\.parquet") as info:
        read_weights(path)
    assert "default_weight" in str(info.value)


def test_good_default_weight_is_kept(tmp_path) -> None:
    assert read_weights(weights_file(tmp_path, b"7.5")).default_weight == 7.5
    assert read_weights(weights_file(tmp_path, None)).default_weight == 2.0


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan"), 1e300, 1e-300])
def test_bad_weight_column_is_refused_naming_the_file(tmp_path, bad) -> None:
    with pytest.raises(InvalidWeightsError, match=r"weights\.parquet.*flight"):
        read_weights(weights_file(tmp_path, None, weights=(1.0, bad)))


@pytest.mark.parametrize("default", [0, -3, float("inf"), float("nan"), "2", True,
                                     MAX_WEIGHT * 10, MIN_WEIGHT / 10])
def test_term_weights_refuses_a_bad_default(default) -> None:
    with pytest.raises(InvalidWeightsError, match="default weight"):
        TermWeights({"a": 1.0}, default_weight=default)


def test_weights_at_the_ends_of_the_range_are_accepted() -> None:
    w = TermWeights({"a": MIN_WEIGHT, "b": MAX_WEIGHT}, default_weight=MAX_WEIGHT)
    assert w.weights.tolist() == [MIN_WEIGHT, MAX_WEIGHT]
