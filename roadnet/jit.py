"""Numba cache hygiene.

Numba caches a compiled kernel keyed on the source file that defines it, so a kernel that
calls kernels of *other* files keeps running stale inlined code after those files change.
:func:`refresh_kernel_caches` fingerprints every source file of the kernel packages and
drops all cached kernels when the fingerprint changes; ``roadnet`` calls it on import, so
it runs before any kernel is loaded.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = ["KERNEL_PACKAGES", "refresh_kernel_caches"]

#: Packages whose modules define or call numba kernels.
KERNEL_PACKAGES = ("roadnet", "index", "pruning")

_STAMP = "kernels.sha256"


def refresh_kernel_caches() -> bool:
    """Delete every cached kernel if any kernel package's source changed.

    Returns True when caches were dropped. Read-only installs are left alone.
    """
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for package in KERNEL_PACKAGES:
        for source in sorted((root / package).glob("*.py")):
            digest.update(source.name.encode())
            digest.update(source.read_bytes())
    fingerprint = digest.hexdigest()
    stamp = root / "roadnet" / "__pycache__" / _STAMP
    try:
        if stamp.exists() and stamp.read_text() == fingerprint:
            return False
        for package in KERNEL_PACKAGES:
            for cached in (root / package / "__pycache__").glob("*.nb[ic]"):
                cached.unlink(missing_ok=True)
        stamp.parent.mkdir(exist_ok=True)
        tmp = stamp.with_name(f"{_STAMP}.{os.getpid()}")
        tmp.write_text(fingerprint)
        os.replace(tmp, stamp)
    except OSError:
        return False
    return True
