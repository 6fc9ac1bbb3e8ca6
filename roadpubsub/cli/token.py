"""``roadpubsub token``: create, list and revoke the bearer tokens of a service folder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from roadpubsub.roadnet.errors import InputError

if TYPE_CHECKING:
    from roadpubsub.service.access import TokenStore

__all__ = ["register"]

_EXAMPLE = """\
example:
  TOKEN=$(roadpubsub token create --state work/live --role admin | tail -n 1)
  roadpubsub token create --state work/live --role subscriber --subscription 7 \\
      --subscription 8                 # may only touch ids 7, 8 and those it creates
  roadpubsub token create --state work/live --role publisher
  roadpubsub token list --state work/live
  roadpubsub token revoke --state work/live 3f9a2c1b   # a running service: within 1 s

Roles: admin (everything), publisher (POST /messages, GET /messages/ID of its own),
subscriber (its own subscription ids: create, read, move, delete, list, and their
deliveries on WS /deliveries). Only the SHA-256 of a token is stored (DIR/tokens.json,
mode 0600); the token itself is printed once, alone on the last line.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``token`` subcommand."""
    p = subparsers.add_parser(
        "token", help="create, list and revoke the service's bearer tokens",
        description="Manage the bearer tokens of a 'roadpubsub serve' state folder.",
        epilog=_EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="token_command", metavar="ACTION", required=True)
    c = sub.add_parser("create", help="create a token and print it once")
    c.add_argument("--state", required=True, metavar="DIR", help="the service's folder")
    c.add_argument("--role", required=True, choices=("admin", "publisher", "subscriber"))
    c.add_argument("--subscription", type=int, action="append", default=[], metavar="ID",
                   help="a subscription id this subscriber token owns (repeatable)")
    c.set_defaults(func=run_create)
    ls = sub.add_parser("list", help="the tokens: ids, roles, bound ids, dates (no secret)")
    ls.add_argument("--state", required=True, metavar="DIR", help="the service's folder")
    ls.set_defaults(func=run_list)
    r = sub.add_parser("revoke", help="revoke a token (a running service: within a second)")
    r.add_argument("--state", required=True, metavar="DIR", help="the service's folder")
    r.add_argument("id", help="the token's id (see 'roadpubsub token list')")
    r.set_defaults(func=run_revoke)


def _store(state: str) -> TokenStore:
    from roadpubsub.service.access import TokenStore

    folder = Path(state)
    if not folder.is_dir():
        msg = f"--state {folder}: no such folder"
        raise InputError(msg)
    return TokenStore(folder)


def run_create(args: argparse.Namespace) -> int:
    """Create a token; the last line of stdout is the token alone."""
    store = _store(args.state)
    token_id, token = store.create(args.role, subscriptions=args.subscription)
    bound = f", subscriptions {sorted(set(args.subscription))}" if args.subscription else ""
    print(f"token {token_id}: role {args.role}{bound} (shown once; store it now)",
          file=sys.stderr)
    print(token, flush=True)
    return 0


def run_list(args: argparse.Namespace) -> int:
    """One line per token: id, role, created, revoked, bound ids."""
    store = _store(args.state)
    print("id        role        created               revoked               subscriptions")
    for r in store.records:
        print(f"{r.id:<9} {r.role:<11} {r.created:<21} {r.revoked or '-':<21} "
              f"{','.join(map(str, r.subscriptions)) or '-'}")
    return 0


def run_revoke(args: argparse.Namespace) -> int:
    """Revoke a token by id."""
    store = _store(args.state)
    rec = store.revoke(args.id)
    print(f"token {rec.id} revoked at {rec.revoked}")
    return 0
