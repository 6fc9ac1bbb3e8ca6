"""The kernel cache: which sources key it, and loading cached kernels before first use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from roadpubsub.roadnet.jit import _kernel_sources

ROOT = Path(__file__).resolve().parents[2]


def _write(root: Path, name: str, text: str) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def test_fingerprint_covers_what_reaches_a_kernel_only(tmp_path: Path) -> None:
    _write(tmp_path, "roadpubsub/roadnet/__init__.py", "")
    _write(tmp_path, "roadpubsub/roadnet/kern.py", """
        import numba
        from roadpubsub.roadnet.consts import LIMIT
        from roadpubsub.index import helpers
        """)
    _write(tmp_path, "roadpubsub/roadnet/consts.py",
           "from roadpubsub.roadnet.deeper import X\nLIMIT = 3\n")
    _write(tmp_path, "roadpubsub/roadnet/deeper.py", "X = 1\n")
    _write(tmp_path, "roadpubsub/index/__init__.py", "")
    _write(tmp_path, "roadpubsub/index/helpers.py",
           "def lazy():\n    from roadpubsub.pruning.late import Y\n")
    _write(tmp_path, "roadpubsub/pruning/__init__.py", "")
    _write(tmp_path, "roadpubsub/pruning/late.py", "Y = 2\n")
    _write(tmp_path, "roadpubsub/pruning/unrelated.py", "Z = 3\n")
    _write(tmp_path, "roadpubsub/service/__init__.py", "")
    _write(tmp_path, "roadpubsub/service/mqtt.py",
           "import json\nfrom roadpubsub.roadnet import kern\n")
    got = set(_kernel_sources(tmp_path))
    # the kernel module, what it takes names from (transitively, modules or packages,
    # in functions too); not the modules that only use kernels, nor unrelated ones
    assert got == {"roadpubsub/roadnet/kern.py", "roadpubsub/roadnet/consts.py",
                   "roadpubsub/roadnet/deeper.py", "roadpubsub/index/__init__.py",
                   "roadpubsub/index/helpers.py", "roadpubsub/pruning/late.py"}


def test_preload_loads_cached_kernels_without_compiling(tmp_path: Path) -> None:
    (tmp_path / "roadnet_probe_kernels.py").write_text(textwrap.dedent("""
        import numba

        @numba.njit(cache=True)
        def twice(x):
            return 2 * x
        """))
    env = {**os.environ, "ROADPUBSUB_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    env.pop("NUMBA_CACHE_DIR", None)
    # Loaded under a name inside roadpubsub.roadnet, where preload looks for kernels.
    load = textwrap.dedent(f"""
        import importlib.util, sys
        import roadpubsub.roadnet
        name = "roadpubsub.roadnet.probe_kernels"
        spec = importlib.util.spec_from_file_location(
            name, {str(tmp_path / "roadnet_probe_kernels.py")!r})
        p = importlib.util.module_from_spec(spec)
        sys.modules[name] = p
        spec.loader.exec_module(p)
        """)
    first = load + "print(p.twice(2.0), p.twice(3))"
    assert subprocess.run([sys.executable, "-c", first], env=env, check=True,
                          capture_output=True, text=True).stdout.split() == ["4.0", "6"]
    second = load + textwrap.dedent("""
        import json
        from roadpubsub.roadnet.jit import preload_kernels
        n = preload_kernels()
        before = len(p.twice.overloads)
        p.twice(5.0)
        print(json.dumps({"loaded": n, "before": before, "hits": sum(
            p.twice.stats.cache_hits.values()), "misses": sum(
            p.twice.stats.cache_misses.values())}))
        """)
    out = json.loads(subprocess.run([sys.executable, "-c", second], env=env, check=True,
                                    capture_output=True, text=True).stdout)
    assert out == {"loaded": 2, "before": 2, "hits": 2, "misses": 0}
