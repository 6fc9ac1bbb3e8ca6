"""Files the demo and the benchmarks write: JSON and PNG, atomically."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["atomic_write_bytes", "dumps_json", "save_figure", "write_json"]

PathLike = str | os.PathLike[str]


def atomic_write_bytes(path: PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` under a temporary name, then rename it into place."""
    from roadpubsub.roadnet.files import atomic_paths

    target = Path(path)
    with atomic_paths(target) as (tmp,):
        tmp.write_bytes(data)
    return target


def save_figure(fig: Figure, path: PathLike, *, dpi: int = 120) -> Path:
    """Save a matplotlib figure as PNG atomically (temporary name, then rename)."""
    from roadpubsub.roadnet.files import atomic_paths

    target = Path(path)
    with atomic_paths(target) as (tmp,):
        fig.savefig(tmp, format="png", dpi=dpi, bbox_inches="tight")
    return target


def _json_default(obj: object) -> object:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    msg = f"not JSON serialisable: {type(obj).__name__}"
    raise TypeError(msg)


def dumps_json(data: object) -> str:
    """JSON text of ``data`` (numpy scalars and paths allowed), indented."""
    return json.dumps(data, indent=2, default=_json_default)


def write_json(path: PathLike, data: object) -> Path:
    """:func:`dumps_json` of ``data`` written atomically to ``path``."""
    return atomic_write_bytes(path, (dumps_json(data) + "\n").encode())
