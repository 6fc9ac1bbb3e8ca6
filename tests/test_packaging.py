"""The wheel that ``pip install .`` builds holds every module of the source tree.

An editable install reads the checkout, so only a built wheel shows a package that the
project's configuration leaves out (``roadpubsub.demo`` once was, and ``roadpubsub demo``
failed after a plain ``pip install .``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP_LEVEL = ("roadnet", "index", "pruning", "spark_jobs", "roadpubsub")


@pytest.mark.slow
def test_wheel_holds_every_module_and_static_file(tmp_path: Path) -> None:
    src = tmp_path / "src"  # a copy, so the build leaves nothing in the checkout
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc")
    for top in TOP_LEVEL:
        shutil.copytree(ROOT / top, src / top, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path),
           str(src)]
    subprocess.run(cmd, check=True, cwd=tmp_path, timeout=600)
    (wheel,) = tmp_path.glob("roadpubsub-*.whl")
    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    on_disk = {str(p.relative_to(ROOT)) for top in TOP_LEVEL for p in (ROOT / top).rglob("*")
               if p.is_file() and "__pycache__" not in p.parts
               and p.suffix not in (".pyc", ".nbi", ".nbc")}
    missing = sorted(on_disk - in_wheel)
    assert not missing, f"left out of the wheel: {missing}"
