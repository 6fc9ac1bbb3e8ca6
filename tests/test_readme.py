"""The README's Python blocks run as written, from the checkout, after the install."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from roadnet.settings import shared_data_dir

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_has_python_blocks() -> None:
    assert python_blocks(), "README.md lost its Python example"


@pytest.mark.slow
@pytest.mark.parametrize("number", range(len(python_blocks())))
def test_python_block_runs(number: int, tmp_path: Path) -> None:
    if not (shared_data_dir() / "dimacs" / "rome.gr.gz").is_file():
        pytest.skip(f"the README's example reads Rome from {shared_data_dir()}, absent here")
    script = tmp_path / f"readme_block_{number}.py"
    script.write_text(python_blocks()[number], encoding="utf-8")
    # From the checkout, as the README says; the script's own folder is not the package's.
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
