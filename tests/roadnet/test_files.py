"""Output paths: checked before a long job starts, written atomically at its end."""

from __future__ import annotations

from pathlib import Path

import pytest

from roadpubsub.roadnet.files import check_output_path


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


def test_a_link_to_nothing_on_the_way(tmp_path: Path) -> None:
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    with pytest.raises(NotADirectoryError, match="dangling is a link to nothing"):
        check_output_path(tmp_path / "dangling" / "d.parquet")


def test_relative_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert check_output_path("d.parquet") == Path("d.parquet")
    assert check_output_path("out", folder=True) == Path("out")
    Path("plain").write_text("x")
    with pytest.raises(NotADirectoryError, match="plain is a file"):
        check_output_path("plain/d.parquet")
