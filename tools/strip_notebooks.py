"""Strip outputs from notebooks, or check that they hold none (for git and CI).

Usage::

    python tools/strip_notebooks.py                 # strip every notebooks/*.ipynb in place
    python tools/strip_notebooks.py --check         # exit 1 and list notebooks with outputs
    python tools/strip_notebooks.py path/a.ipynb    # only these files

Stripping removes code cells' outputs and execution counts and the notebook-level
``widgets`` metadata; sources, tags and the kernelspec stay. Files are rewritten atomically
(temporary name, then rename) and only when something changed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["has_outputs", "main", "strip"]

_ROOT = Path(__file__).resolve().parent.parent


def has_outputs(notebook: dict[str, Any]) -> list[int]:
    """Indices of code cells that hold outputs or an execution count."""
    return [i for i, cell in enumerate(notebook.get("cells", []))
            if cell.get("cell_type") == "code"
            and (cell.get("outputs") or cell.get("execution_count") is not None)]


def strip(notebook: dict[str, Any]) -> dict[str, Any]:
    """The notebook without outputs, execution counts or widget state (modified in place)."""
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        cell.get("metadata", {}).pop("execution", None)
    notebook.get("metadata", {}).pop("widgets", None)
    return notebook


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit code."""
    parser = argparse.ArgumentParser(
        description="Strip outputs from Jupyter notebooks (or check that none are left).",
        epilog="example: python tools/strip_notebooks.py --check",
    )
    parser.add_argument("paths", nargs="*", type=Path,
                        help="notebooks (default: notebooks/*.ipynb of the repository)")
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a notebook holds outputs")
    args = parser.parse_args(argv)
    paths = args.paths or sorted((_ROOT / "notebooks").glob("*.ipynb"))
    dirty = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
            notebook = json.loads(text)
        except (OSError, json.JSONDecodeError) as exc:
            print(f"strip_notebooks: error: cannot read {path}: {exc}", file=sys.stderr)
            return 2
        cells = has_outputs(notebook)
        if args.check:
            if cells:
                dirty.append(path)
                print(f"{path}: outputs in code cells {cells}", file=sys.stderr)
            continue
        new = json.dumps(strip(notebook), indent=1, ensure_ascii=False) + "\n"
        if new != text:
            _write_atomic(path, new)
            print(f"stripped {path}")
    if dirty:
        print("strip_notebooks: error: notebooks hold outputs (hint: run "
              "'python tools/strip_notebooks.py' before committing)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
