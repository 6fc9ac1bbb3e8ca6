"""The ``roadpubsub`` command line.

Each subcommand lives in its own module of this package and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a callable taking the
parsed arguments and returning an exit code. Errors a user can fix (bad input, missing
files, missing Java) are printed as one line with a hint and exit with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from roadnet.errors import RoadPubSubError, format_error

__all__ = ["COMMAND_MODULES", "build_parser", "main"]

#: Subcommand modules, in the order ``--help`` lists them.
COMMAND_MODULES = ("demo", "network", "generate", "index", "match", "serve", "bench", "spark")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every available subcommand."""
    parser = argparse.ArgumentParser(
        prog="roadpubsub",
        description="Spatio-textual publish/subscribe on road networks (PSTPSN).",
        epilog="Run 'roadpubsub COMMAND --help' for a command's options and an example.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"roadpubsub.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"roadpubsub.cli.{name}":
                continue  # not built yet
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("roadpubsub: interrupted", file=sys.stderr)
        return 130
    except (RoadPubSubError, ValueError, OSError, RuntimeError) as exc:
        print(f"roadpubsub {args.command}: error: {format_error(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
