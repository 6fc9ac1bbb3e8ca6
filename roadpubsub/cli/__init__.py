"""The ``roadpubsub`` command line.

Each subcommand lives in its own module of this package and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a callable taking the
parsed arguments and returning an exit code. Errors a user can fix (bad input, missing
files, missing Java) are printed as one line with a hint and exit with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from collections.abc import Sequence

from roadpubsub.roadnet.errors import RoadPubSubError, format_error
from roadpubsub.roadnet.files import release_output_locks

__all__ = ["COMMAND_MODULES", "build_parser", "main"]

#: Subcommand modules, in the order ``--help`` lists them.
COMMAND_MODULES = ("demo", "network", "generate", "index", "match", "serve", "bench", "spark",
                   "token", "state")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every available subcommand."""
    parser = argparse.ArgumentParser(
        prog="roadpubsub",
        description="Spatio-textual publish/subscribe on road networks (PSTPSN).",
        epilog="Run 'roadpubsub COMMAND --help' for a command's options and an example.",
    )
    from roadpubsub import __version__

    parser.add_argument("--version", action="version", version=f"roadpubsub {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f"roadpubsub.cli.{name}").register(sub)
    return parser


class Terminated(BaseException):
    """SIGTERM arrived: unwinds like Ctrl-C, so temporaries are removed on the way out."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script.

    Exit codes: 0 done, 2 an error a user can fix (one line on stderr), 130 Ctrl-C, 143
    SIGTERM. Interrupted runs leave no output and no temporary file.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("roadpubsub: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("roadpubsub: terminated", file=sys.stderr)
        return 143
    except MemoryError as exc:
        print(f"roadpubsub {args.command}: error: out of memory ({exc or 'no detail'}) "
              "(hint: use fewer subscriptions or messages, a smaller --batch, or a machine "
              "with more memory)", file=sys.stderr)
        return 2
    except (RoadPubSubError, OSError) as exc:
        # Only errors a user can fix are one line; anything else is a bug and keeps its
        # traceback. The readers turn a library's errors about a file into InputError.
        print(f"roadpubsub {args.command}: error: {format_error(exc)}", file=sys.stderr)
        return 2
    finally:
        signal.signal(signal.SIGTERM, previous)
        release_output_locks()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
