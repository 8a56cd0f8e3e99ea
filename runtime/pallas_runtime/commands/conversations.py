"""`pallas conversations purge`: forget a deleted agent's conversations in a database store.

    pallas conversations purge --identity ID (--dsn-env NAME | --sqlite PATH) [--after SECONDS]

What the operator's finalizer runs in a one-shot Job when a PallasAgent is deleted
(docs/operator.md "Deleting an agent"), with the deployment's DSN in `$NAME` from its Secret.
`ID` is the agent's identity (`<namespace>/<deployment>/<name>/<uid>`). `--after 0` (the default)
deletes its conversations, messages and spend at once; a positive value marks them to go that many
seconds later, which every agent's housekeeping on the database carries out. Exit 0 done, 1 the
store could not be used (the reason on stderr, never the DSN), 2 bad flags.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from pallas_api.config import MAX_AGENT_IDENTITY
from pallas_io.commands import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from pallas_runtime.conversations.model import StoreUnavailable

DEFAULT_DSN_ENV = "PALLAS_CONVERSATIONS_DSN"


def _seconds(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seconds") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative: 0 deletes at once")
    return value


class ConversationsCommand:
    """The `pallas conversations` subcommand (a `pallas.commands` entry point)."""

    help = "housekeeping of a database conversation store (purge a deleted agent's conversations)"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """Add the `purge` action and its flags."""
        actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
        purge = actions.add_parser("purge", help="delete one agent identity's conversations")
        purge.add_argument(
            "--identity", required=True, help="the agent's identity, <namespace>/<deployment>/<name>/<uid>"
        )
        where = purge.add_mutually_exclusive_group(required=True)
        where.add_argument(
            "--dsn-env",
            metavar="NAME",
            help=f"the variable holding the PostgreSQL DSN (e.g. {DEFAULT_DSN_ENV})",
        )
        where.add_argument("--sqlite", metavar="PATH", help="a SQLite store's file")
        purge.add_argument(
            "--after", type=_seconds, default=0, metavar="SECONDS",
            help="keep them this long, then every agent on the database deletes them (default 0: now)",
        )  # fmt: skip

    def run(self, args: argparse.Namespace) -> int:
        """Purge, print what was done; exit 1 when the store cannot be used."""
        identity: str = args.identity
        if not identity or len(identity) > MAX_AGENT_IDENTITY or identity.count("/") not in (2, 3):
            print(
                f"pallas conversations purge: --identity {identity!r} is not an agent identity "
                "(<namespace>/<deployment>/<name>/<uid>)",
                file=sys.stderr,
            )
            return EXIT_USAGE
        if args.dsn_env is not None and not os.environ.get(args.dsn_env):
            print(
                f"pallas conversations purge: ${args.dsn_env} is not set (the PostgreSQL DSN)",
                file=sys.stderr,
            )
            return EXIT_USAGE
        try:
            removed = asyncio.run(_purge(args.dsn_env, args.sqlite, identity, args.after))
        except (StoreUnavailable, ValueError) as exc:
            print(f"pallas conversations purge: {exc}", file=sys.stderr)
            return EXIT_FAILURE
        if args.after:
            print(f"conversations of {identity} marked to be deleted in {args.after}s")
        else:
            print(f"deleted {removed} conversations of {identity}")
        return EXIT_OK


async def _purge(dsn_env: str | None, sqlite: str | None, identity: str, after: int) -> int:
    """Open the store (migrating it), purge, close."""
    from sqlalchemy.engine import make_url

    from pallas_runtime.conversations.sql import SqlStore, engine_url

    if sqlite is not None:
        store = SqlStore("sqlite", engine_url("sqlite", sqlite), max_messages=1)
    else:
        dsn = os.environ[dsn_env or DEFAULT_DSN_ENV]
        store = SqlStore(
            "postgres",
            engine_url("postgres", dsn),
            max_messages=1,
            secret=make_url(dsn).password,
            max_connections=1,
        )
    await store.start()
    try:
        return await store.purge(identity, after)
    finally:
        await store.aclose()
