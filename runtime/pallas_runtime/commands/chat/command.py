"""`pallas chat`: talk to an agent from a terminal, as a REPL or one message at a time.

    pallas chat URL                         # REPL against an agent's MCP endpoint (.../mcp)
    pallas chat -m "Who wrote it?" URL      # one message, the answer on stdout
    pallas chat --registry REGISTRY_URL NAME   # the agent's URL from the registry catalogue
    pallas chat --as-serviceaccount agents/alice URL   # as a ServiceAccount (auth.mode kubernetes)
    pallas chat -m "Who wrote it?" --json URL   # the raw send_message result, one JSON document

One stateful (legacy-mode) MCP session carries a generated `conversation_id`, so the agent
keeps the history (`session`). While the agent works its progress goes to stderr: a status
line on a terminal, erased before the answer, else one flushed line per message; the turn's tool
calls follow, dimmed (`chat_display`). The answer goes to stdout. REPL commands (`chat_repl`):
`/tools`, `/system` (the agent's instruction), `/set KEY VALUE` (per-call LLM parameters,
`chat_params`), `/history` (the agent's `<agent>_history` prompt for this conversation),
`/save FILE`, `/threads` (your conversations with the agent), `/resume ID` (continue one),
`/delete [ID]` (delete one; this one by default, then start a new one), `/clear` (a new
conversation), `/quit` (or end of input). Ctrl-C stops.

Agents that check callers (docs/api.md §6) take a bearer: `--token`, `$PALLAS_TOKEN`, or one
minted for `--as-serviceaccount NS/NAME` (see `credentials`); a 401 or 403 is one line saying
which of the two it was.

Errors (unreachable URL, not an MCP server, a tool error, an agent the registry does not list)
print one line on stderr and exit non-zero; in the REPL a failed message is reported and the
session goes on.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

import httpx2

from pallas_runtime.commands.chat.repl import Repl, show_turn
from pallas_runtime.commands.chat.session import EXIT_ERROR, EXIT_USAGE, ChatError, open_session
from pallas_runtime.commands.credentials import CredentialsError, add_token_arguments, bearer_token

SERVER_JSON_PATH = "/.well-known/mcp/server.json"
EXIT_INTERRUPTED = 130


# --- arguments ----------------------------------------------------------------------------------


def parse_headers(values: Sequence[str], bearer: str | None) -> dict[str, str]:
    """`--header 'Name: value'` (repeatable) and the bearer token as one header dict.

    Raises:
        ChatError: a header without a name, or a bearer given twice.
    """
    headers: dict[str, str] = {}
    for value in values:
        name, sep, content = value.partition(":")
        if not sep or not name.strip():
            raise ChatError(f"--header {value!r}: expected 'Name: value'", EXIT_USAGE)
        headers[name.strip()] = content.strip()
    if bearer is not None:
        if any(name.lower() == "authorization" for name in headers):
            raise ChatError("give either --token or an Authorization --header, not both", EXIT_USAGE)
        if not bearer.strip():
            raise ChatError("--token: the token is empty", EXIT_USAGE)
        headers["Authorization"] = f"Bearer {bearer.strip()}"
    return headers


# --- registry -----------------------------------------------------------------------------------


def server_json_url(registry: str) -> str:
    """The catalogue URL of a registry given by its base URL or by the catalogue URL itself."""
    registry = registry.rstrip("/")
    return registry if registry.endswith(SERVER_JSON_PATH) else registry + SERVER_JSON_PATH


def find_agent_url(document: Any, name: str) -> str | None:
    """The streamable-http remote of the entry whose server name ends in `/<name>`, if any."""
    for entry in _entries(document):
        server = entry.get("server") or {}
        if str(server.get("name", "")).rsplit("/", 1)[-1] != name:
            continue
        for remote in server.get("remotes") or []:
            if isinstance(remote, dict) and remote.get("type") == "streamable-http" and remote.get("url"):
                return str(remote["url"])
    return None


def agent_names(document: Any) -> list[str]:
    """The agent names (the part after the last `/`) the catalogue lists, sorted."""
    names = {str((e.get("server") or {}).get("name", "")).rsplit("/", 1)[-1] for e in _entries(document)}
    return sorted(n for n in names if n)


def _entries(document: Any) -> list[dict[str, Any]]:
    servers = document.get("servers") if isinstance(document, dict) else None
    if not isinstance(servers, list):
        raise ChatError("the registry's answer is not a server.json catalogue (no 'servers' list)")
    return [entry for entry in servers if isinstance(entry, dict)]


async def resolve_agent(registry: str, name: str, wait: float) -> str:
    """The MCP URL of agent `name` from the registry's `/.well-known/mcp/server.json`.

    Raises:
        ChatError: the registry is unreachable, answers badly, or does not list the agent.
    """
    url = server_json_url(registry)
    try:
        async with httpx2.AsyncClient(timeout=wait) as http:
            response = await http.get(url)
    except httpx2.HTTPError as exc:
        raise ChatError(f"cannot reach the registry at {url}: {exc or type(exc).__name__}") from None
    if response.status_code != 200:
        raise ChatError(f"the registry at {url} answered HTTP {response.status_code}")
    try:
        document = response.json()
    except ValueError:
        raise ChatError(f"the registry at {url} did not answer JSON") from None
    found = find_agent_url(document, name)
    if found is None:
        available = ", ".join(agent_names(document)) or "none"
        raise ChatError(f"agent {name!r} is not in the registry at {url} (available: {available})")
    return found


# --- the command --------------------------------------------------------------------------------


async def chat(args: argparse.Namespace) -> int:
    """Resolve the target, connect, and run one message or the REPL."""
    try:
        token = await bearer_token(args, os.environ)
    except CredentialsError as exc:
        raise ChatError(str(exc), EXIT_USAGE if exc.usage else EXIT_ERROR) from None
    headers = parse_headers(args.header, token)
    if args.registry:
        url = await resolve_agent(args.registry, args.target, min(args.timeout, 30))
    elif args.target.startswith(("http://", "https://")):
        url = args.target
    else:
        raise ChatError(
            f"{args.target!r} is not an http(s) URL; to use an agent name, add --registry URL", EXIT_USAGE
        )
    async with open_session(url, headers, args.timeout, args.conversation_id) as session:
        if args.message is None:
            return await Repl(session, sys.stdout).run()
        turn = await session.send(args.message)
        if args.json:
            print(turn.document(), flush=True)
        else:
            show_turn(session, turn, sys.stdout)
        return EXIT_ERROR if turn.failed else 0


class ChatCommand:
    """`pallas chat`, registered under the `pallas.commands` entry-point group."""

    help = "talk to an agent: a REPL, or one message with -m"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """Add the command's arguments."""
        parser.add_argument(
            "target", metavar="URL|NAME", help="the agent's MCP URL, or its name with --registry"
        )
        parser.add_argument("-m", "--message", help="send this one message, print the answer and exit")
        parser.add_argument(
            "--json",
            action="store_true",
            help="with -m: print the raw send_message result (MCP's CallToolResult) as one JSON document",
        )
        parser.add_argument(
            "--registry",
            metavar="REGISTRY_URL",
            help="resolve NAME through this registry's /.well-known/mcp/server.json",
        )
        parser.add_argument(
            "--header",
            action="append",
            default=[],
            metavar="'NAME: VALUE'",
            help="an HTTP header for every request to the agent (repeatable)",
        )
        add_token_arguments(parser, what="for the agent")
        parser.add_argument(
            "--conversation-id", metavar="ID", help="continue this conversation (default: a new one)"
        )
        parser.add_argument(
            "--timeout", type=float, default=600.0, help="seconds to wait for one answer (default 600)"
        )

    def run(self, args: argparse.Namespace) -> int:
        """Run the chat; one line on stderr and a non-zero exit code on failure."""
        # Library loggers would otherwise print through logging's last-resort handler.
        if not logging.getLogger().handlers:
            logging.getLogger().addHandler(logging.NullHandler())
        if args.timeout <= 0:
            print("pallas chat: --timeout must be positive", file=sys.stderr)
            return EXIT_USAGE
        if args.json and args.message is None:
            print("pallas chat: --json needs -m MESSAGE (the REPL prints text)", file=sys.stderr)
            return EXIT_USAGE
        try:
            return asyncio.run(chat(args))
        except ChatError as exc:
            print(f"pallas chat: {exc}", file=sys.stderr)
            return exc.exit_code
        except KeyboardInterrupt:
            print(file=sys.stderr)
            return EXIT_INTERRUPTED
