"""Output paths: checked before a long job starts, written atomically at its end."""

from __future__ import annotations

from pathlib import Path

import pytest

from roadnet.files import check_output_path


def test_usable_paths_pass(tmp_path: Path) -> None:
    assert check_output_path(tmp_path / "d.parquet") == tmp_path / "d.parquet"
    assert check_output_path(tmp_path / "new" / "deeper" / "d.parquet")  # folders get made
    (tmp_path / "old.parquet").write_text("replaced later")
    assert check_output_path(tmp_path / "old.parquet")
    assert check_output_path(tmp_path / "out", folder=True)
    assert check_output_path(tmp_path, folder=True)
    assert list(tmp_path.iterdir()) == [tmp_path / "old.parquet"]  # nothing created


def test_a_folder_where_a_file_goes_and_back(tmp_path: Path) -> None:
    (tmp_path / "d.parquet").mkdir()
    with pytest.raises(IsADirectoryError, match=r"--out .*d.parquet: is a folder; expected"):
        check_output_path(tmp_path / "d.parquet", what="--out")
    (tmp_path / "plain").write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file; expected a folder"):
        check_output_path(tmp_path / "plain", folder=True)


def test_a_file_in_the_way_of_a_missing_folder(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("x")
    with pytest.raises(NotADirectoryError, match="plain is a file, so no folder can be made"):
        check_output_path(tmp_path / "plain" / "a" / "d.parquet")
    with pytest.raises(NotADirectoryError, match="plain is a file, so no folder can be made"):
        check_output_path(tmp_path / "plain" / "a", folder=True)
