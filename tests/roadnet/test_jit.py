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
    _write(tmp_path, "roadnet/__init__.py", "")
    _write(tmp_path, "roadnet/kern.py", """
        import numba
        from roadpubsub.roadnet.consts import LIMIT
        from roadpubsub.index import helpers
        """)
    _write(tmp_path, "roadnet/consts.py", "from roadpubsub.roadnet.deeper import X\nLIMIT = 3\n")
    _write(tmp_path, "roadnet/deeper.py", "X = 1\n")
    _write(tmp_path, "index/__init__.py", "")
    _write(tmp_path, "index/helpers.py", "def lazy():\n    from roadpubsub.pruning.late import Y\n")
    _write(tmp_path, "pruning/__init__.py", "")
    _write(tmp_path, "pruning/late.py", "Y = 2\n")
    _write(tmp_path, "pruning/unrelated.py", "Z = 3\n")
    _write(tmp_path, "roadpubsub/service/__init__.py", "")
    _write(tmp_path, "roadpubsub/service/mqtt.py", "import json\nfrom roadnet import kern\n")
    got = set(_kernel_sources(tmp_path))
    # the kernel module, what it takes names from (transitively, modules or packages,
    # in functions too); not the modules that only use kernels, nor unrelated ones
    assert got == {"roadnet/kern.py", "roadnet/consts.py", "roadnet/deeper.py",
                   "index/__init__.py", "index/helpers.py", "pruning/late.py"}


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
    first = "import roadnet, roadnet_probe_kernels as p; print(p.twice(2.0), p.twice(3))"
    assert subprocess.run([sys.executable, "-c", first], env=env, check=True,
                          capture_output=True, text=True).stdout.split() == ["4.0", "6"]
    second = textwrap.dedent("""
        import json, roadnet, roadnet_probe_kernels as p
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
