"""The command line as after a plain ``pip install .``: without the test extra's httpx."""

from __future__ import annotations

import subprocess
import sys

__all__ = ["WITHOUT_HTTPX", "run_without_httpx"]

#: Runs the CLI with httpx unimportable, as after ``pip install .`` without extras.
WITHOUT_HTTPX = """
import sys
class _NoHttpx:
    def find_spec(self, name, path=None, target=None):
        if name == "httpx" or name.startswith("httpx."):
            raise ModuleNotFoundError("No module named 'httpx'", name=name)
        return None
sys.meta_path.insert(0, _NoHttpx())
for name in [m for m in sys.modules if m == "httpx" or m.startswith("httpx.")]:
    del sys.modules[name]
from roadpubsub.cli import main
sys.exit(main(sys.argv[1:]))
"""


def run_without_httpx(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The command line in a child process where ``import httpx`` fails."""
    return subprocess.run([sys.executable, "-c", WITHOUT_HTTPX, *argv], capture_output=True,
                          text=True, timeout=timeout, check=False)
