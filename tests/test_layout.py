"""The README's layout table lists what is in the tree, and only that.

Each row names a package folder (first cell, e.g. ``roadpubsub/service/``) and, in
backticks, its modules (``app.py``, or a pattern such as ``*_kernels.py``) and its
subpackages (``service/``), relative to that folder. Every module and subpackage of the
checked packages must be named in its package's row, and every name must exist.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

#: The packages whose modules the table must name (their subpackages get rows too).
PACKAGES = ("roadnet", "index", "pruning", "spark_jobs", "roadpubsub")

#: Modules other branches add while this test is written: named in the table already,
#: absent from this tree until they are merged. Nothing else may be missing.
PENDING = {
    "roadpubsub/service/access.py",
    "roadpubsub/service/limits.py",
    "roadpubsub/service/integrity.py",
    "roadpubsub/cli/token.py",
    "roadpubsub/cli/state.py",
}

_NAME = re.compile(r"`([\w*.\-]+(?:\.py|/))`")


def layout_rows(text: str) -> dict[str, list[str]]:
    """``{package folder: names in its row}`` of the table under ``## Layout``."""
    section = text.split("\n## Layout", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not re.fullmatch(r"`[\w/]+/`", cells[0]):
            continue
        rows[cells[0].strip("`").rstrip("/")] = _NAME.findall(" | ".join(cells[1:]))
    return rows


#: The links that put the top-level folders under the one import name (roadpubsub.index).
LINKED = ("roadnet", "index", "pruning", "spark_jobs")


def package_folders() -> list[str]:
    """The checked packages and every subpackage below them (folders with __init__.py);
    a folder reached through a link (``roadpubsub/index``) has its row under its own name."""
    found = []
    for name in PACKAGES:
        found.append(name)
        found += sorted(str(init.parent.relative_to(ROOT))
                        for init in (ROOT / name).glob("*/**/__init__.py")
                        if not any((ROOT / name / p).is_symlink()
                                   for p in init.relative_to(ROOT / name).parents))
    return found


def members(folder: str) -> list[str]:
    """Modules (``x.py``, dunder files left out) and subpackages (``x/``) of a folder."""
    here = ROOT / folder
    mods = [p.name for p in sorted(here.glob("*.py")) if not p.name.startswith("__")]
    subs = [f"{p.parent.name}/" for p in sorted(here.glob("*/__init__.py"))]
    return mods + subs


def named(member: str, names: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(member, n) for n in names)


def problems(rows: dict[str, list[str]]) -> list[str]:
    found = []
    for folder in package_folders():
        if folder not in rows:
            found.append(f"{folder}/: no row in the table")
            continue
        for member in members(folder):
            if not named(member, rows[folder]):
                found.append(f"{folder}/{member}: not named in the row of {folder}/")
    for folder, names in rows.items():
        if folder.split("/")[0] not in PACKAGES:
            continue
        present = members(folder) if (ROOT / folder).is_dir() else []
        for name in names:
            if f"{folder}/{name}" in PENDING:
                continue
            if not any(fnmatch.fnmatchcase(m, name) for m in present):
                found.append(f"{folder}/{name}: named in the table, absent from the tree")
    return found


def test_layout_table_matches_the_tree() -> None:
    rows = layout_rows(README.read_text(encoding="utf-8"))
    assert rows, "README.md lost its layout table"
    assert problems(rows) == []


def test_the_check_sees_a_missing_and_an_extra_name() -> None:
    rows = layout_rows(README.read_text(encoding="utf-8"))
    rows["pruning"] = [n for n in rows["pruning"] if n != "routing.py"] + ["gone.py"]
    rows["roadpubsub"] = [n for n in rows["roadpubsub"] if n != "service/"]
    assert problems(rows) == ["pruning/routing.py: not named in the row of pruning/",
                              "roadpubsub/service/: not named in the row of roadpubsub/",
                              "pruning/gone.py: named in the table, absent from the tree"]


def test_patterns_count_as_names() -> None:
    assert named("dijkstra_kernels.py", ["*_kernels.py"])
    assert not named("distance.py", ["*_kernels.py"])


def test_top_level_folders_are_linked_under_roadpubsub() -> None:
    """``roadpubsub/<name>`` is a relative link to ``<name>/``: the one import name."""
    import os

    for name in LINKED:
        link = ROOT / "roadpubsub" / name
        assert link.is_symlink() and os.readlink(link) == f"../{name}", link
        assert (link / "__init__.py").samefile(ROOT / name / "__init__.py")
