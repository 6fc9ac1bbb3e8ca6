"""The wheel that ``pip install .`` builds holds every module of the source tree.

An editable install reads the checkout, so only a built wheel shows a package that the
project's configuration leaves out (``roadpubsub.demo`` once was, and ``roadpubsub demo``
failed after a plain ``pip install .``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP_LEVEL = ("roadnet", "index", "pruning", "spark_jobs", "roadpubsub")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel ``pip install .`` would install, built from a copy of the checkout."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    src = tmp_path / "src"  # a copy, so the build leaves nothing in the checkout
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.nbi", "*.nbc")
    for top in TOP_LEVEL:
        shutil.copytree(ROOT / top, src / top, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path),
           str(src)]
    subprocess.run(cmd, check=True, cwd=tmp_path, timeout=600)
    (built,) = tmp_path.glob("roadpubsub-*.whl")
    return built


@pytest.mark.slow
def test_wheel_holds_every_module_and_static_file(wheel: Path) -> None:
    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    on_disk = {str(p.relative_to(ROOT)) for top in TOP_LEVEL for p in (ROOT / top).rglob("*")
               if p.is_file() and "__pycache__" not in p.parts
               and p.suffix not in (".pyc", ".nbi", ".nbc")}
    missing = sorted(on_disk - in_wheel)
    assert not missing, f"left out of the wheel: {missing}"


#: Compiles (first run) or loads (second run) kernels of ``pruning`` and of the service.
_PROBE = """
import numba
import numpy as np
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.similarity import delivered
from roadpubsub.service.answers import deliveries_bytes
delivered(np.array([0.5]), np.array([0.4]), np.array([10.0]), 100.0)
deliveries_bytes(Deliveries(np.array([1]), np.array([2]), np.array([3.0]), np.array([0.5])))
print(numba.config.CACHE_DIR)
"""


@pytest.mark.slow
def test_installed_kernels_cache_outside_the_install(wheel: Path, tmp_path: Path) -> None:
    """Kernels compiled by an installed copy are cached in the user cache folder: nothing
    is written into the install (read-only installs work, and no left-over ``index``
    folder shadows a later install as an empty namespace package)."""
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(site), str(wheel)], check=True, timeout=600)
    cache = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": str(site), "ROADPUBSUB_CACHE_DIR": str(cache)}
    env.pop("NUMBA_CACHE_DIR", None)
    for _ in range(2):  # the second run loads what the first cached
        out = subprocess.run([sys.executable, "-c", _PROBE], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().startswith(str(cache / "kernels")), out.stdout
    assert list(cache.rglob("*.nbi")), "no kernel was cached in the cache folder"
    written = sorted(str(p.relative_to(site)) for p in site.rglob("*.nb[ic]"))
    assert not written, f"kernels cached inside the install: {written[:5]}"
