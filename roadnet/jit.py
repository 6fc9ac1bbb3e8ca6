"""Where compiled kernels are cached: a user cache folder, never the installed package.

Numba caches a compiled kernel next to its source file by default. For an install that is
wrong twice over: a read-only install (a container, a system package) compiles again at
every start, and a writable one gets ``__pycache__`` folders of numba files that pip does
not know, so after ``pip uninstall`` (or an editable install over a plain one) the left-over
``site-packages/index`` folder imports as an empty namespace package and shadows the real
one. :func:`use_kernel_cache` points numba at a folder of its own instead:

* ``NUMBA_CACHE_DIR``, when the user set it, is left as numba read it;
* else ``ROADPUBSUB_CACHE_DIR`` (default ``$XDG_CACHE_HOME/roadpubsub``, else
  ``~/.cache/roadpubsub``), and the system's temporary folder when that is not writable;

below it, ``kernels/<fingerprint>``: numba keys a cached kernel on the file that defines
it, so a kernel that calls kernels of *other* files would run stale inlined code after
those files change. The fingerprint covers every source file that can reach a compiled
kernel (the kernel packages' modules that use numba, and the project modules they import,
transitively), so any change of them starts a fresh folder, while an edit elsewhere (the
service's HTTP or MQTT layers) keeps the compiled kernels; folders of other fingerprints unused for
:data:`STALE_DAYS` days are removed. ``roadnet`` calls it on import, before any kernel
module is loaded (a module's package ``__init__`` runs before the module, and every
kernel module lives in, or imports, ``roadnet``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["KERNEL_PACKAGES", "STALE_DAYS", "kernel_cache_root", "preload_in_background",
           "preload_kernels", "use_kernel_cache"]

#: Packages whose modules define or call numba kernels (folders below the one that holds
#: the ``roadpubsub`` package).
KERNEL_PACKAGES = ("roadpubsub/roadnet", "roadpubsub/index", "roadpubsub/pruning",
                   "roadpubsub/service")

#: Cache folders of other source versions unused this many days are removed.
STALE_DAYS = 30


_IMPORT = re.compile(rb"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+import[ \t]+([\w, \t()]+)"
                     rb"|import[ \t]+([\w.]+))", re.MULTILINE)


def _kernel_sources(root: Path) -> dict[str, bytes]:
    """The sources whose code or constants can end up in a compiled kernel: every module
    of :data:`KERNEL_PACKAGES` that mentions numba, and what they import from the project
    (transitively; imports inside functions included). A module nothing compiled reaches
    (the service's HTTP or MQTT layers, say) is left out, so editing it keeps the cache."""
    texts = {f"{package}/{source.name}": source.read_bytes()
             for package in KERNEL_PACKAGES for source in sorted((root / package).glob("*.py"))}
    todo = [name for name, text in texts.items() if b"numba" in text]
    seen: dict[str, bytes] = {}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        text = texts.get(name)
        if text is None:
            path = root / name
            if not path.is_file():
                continue
            text = path.read_bytes()
        if name == "roadpubsub/roadnet/jit.py":
            continue  # this module holds no kernel: editing it keeps the cache
        seen[name] = text
        for base, names, plain in _IMPORT.findall(text):
            module = (base or plain).decode()
            if module.startswith("."):
                continue  # the project imports absolutely
            parts = module.split(".")
            if parts[0] != "roadpubsub":
                continue  # not the project's (beside it in an install: numpy, numba, ...)
            stem = "/".join(parts)
            todo += [f"{stem}.py", f"{stem}/__init__.py"]
            for sub in names.replace(b"(", b" ").replace(b")", b" ").split(b","):
                word = sub.split()[0].decode() if sub.split() else ""
                if word:
                    todo.append(f"{stem}/{word}.py")  # a submodule imported by name
    return seen


def _fingerprint() -> str:
    # The folder holding the roadpubsub package as imported: not resolved, since in a
    # checkout this file is reached through the link roadpubsub/roadnet.
    root = Path(__file__).absolute().parents[2]
    digest = hashlib.sha256()
    for name, text in sorted(_kernel_sources(root).items()):
        digest.update(name.encode())
        digest.update(text)
    return digest.hexdigest()[:20]


def kernel_cache_root() -> Path:
    """The folder below which kernels are cached (see the module docstring)."""
    chosen = os.environ.get("ROADPUBSUB_CACHE_DIR")
    if chosen:
        return Path(chosen).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "roadpubsub"


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError:
        return False
    return True


def _drop_stale(kernels: Path, keep: str) -> None:
    cutoff = time.time() - STALE_DAYS * 86400
    with contextlib.suppress(OSError):
        for entry in kernels.iterdir():
            with contextlib.suppress(OSError):
                if entry.name != keep and entry.stat().st_mtime < cutoff:
                    shutil.rmtree(entry, ignore_errors=True)


def use_kernel_cache() -> Path | None:
    """Point numba's kernel cache at this source version's user cache folder.

    Returns
    -------
    pathlib.Path or None
        The folder used, or None when ``NUMBA_CACHE_DIR`` was set by the user (numba then
        caches there) or no candidate is writable (numba's own fallback applies).
    """
    from numba.core import config

    if os.environ.get("NUMBA_CACHE_DIR"):
        return None
    fingerprint = _fingerprint()
    uid = os.getuid() if hasattr(os, "getuid") else 0
    for root in (kernel_cache_root(), Path(tempfile.gettempdir()) / f"roadpubsub-{uid}"):
        folder = root / "kernels" / fingerprint
        if _writable(folder):
            with contextlib.suppress(OSError):
                os.utime(folder)  # in use: not stale
            _drop_stale(folder.parent, fingerprint)
            config.CACHE_DIR = str(folder)  # type: ignore[attr-defined]
            return folder
    return None


def preload_kernels() -> int:
    """Load now every compiled kernel the cache holds for the kernel modules imported so
    far, instead of at each kernel's first call (about 0.7 s in all, paid inside the
    first match or the first request otherwise).

    Only overloads whose cache entry matches the current source and machine are loaded,
    so nothing is compiled here. Safe to run in a thread: numba's compiler lock orders it
    with a kernel's first call on another thread.

    Returns
    -------
    int
        The overloads loaded.
    """
    from numba.core import sigutils
    from numba.core.dispatcher import Dispatcher

    prefixes = tuple(p.replace("/", ".") for p in KERNEL_PACKAGES)
    loaded = 0
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(prefixes):
            continue
        for value in list(vars(module).values()):
            if not isinstance(value, Dispatcher) or \
                    getattr(value.py_func, "__module__", None) != name:
                continue
            cache: Any = getattr(value, "_cache", None)
            files = getattr(cache, "_cache_file", None)
            if files is None:
                continue  # not cached
            try:
                index = files._load_index()
                codegen = value.targetctx.codegen()  # type: ignore[attr-defined]
                for key in index:
                    sig = key[0]
                    if cache._index_key(sig, codegen) != key:
                        continue  # another source or machine: would compile
                    args, _ = sigutils.normalize_signature(sig)
                    if tuple(args) not in value.overloads:
                        value.compile(sig)
                        loaded += 1
            except Exception:  # a cache problem: the first call compiles
                continue
    return loaded


def preload_in_background() -> threading.Thread:
    """:func:`preload_kernels` on a daemon thread (join it before the first kernel call
    that should find everything loaded)."""
    t = threading.Thread(target=preload_kernels, name="kernel-preload", daemon=True)
    t.start()
    return t
