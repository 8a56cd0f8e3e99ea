"""`pallas chat`: talk to an agent from a terminal, as a REPL or one message at a time.

    pallas chat URL                         # REPL against an agent's MCP endpoint (.../mcp)
    pallas chat -m "Who wrote it?" URL      # one message, the answer on stdout
    pallas chat --registry REGISTRY_URL NAME   # the agent's URL from the registry catalogue
    pallas chat --as-serviceaccount agents/alice URL   # as a ServiceAccount (auth.mode kubernetes)

One stateful (legacy-mode) MCP session carries a generated `conversation_id`, so the agent
keeps the history; every `send_message` carries a progress token and the progress lines go to
stderr while the agent works (rewritten in place on a terminal, one line each otherwise). The
answer goes to stdout. REPL commands: `/history` (the agent's `<agent>_history` prompt for this
conversation), `/threads` (your conversations with the agent), `/resume ID` (continue one),
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
import contextlib
import json
import logging
import os
import shutil
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import httpx2
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from mcp import MCPError

from pallas_api.probe import probe
from pallas_runtime.commands.credentials import CredentialsError, add_token_arguments, bearer_token

SERVER_JSON_PATH = "/.well-known/mcp/server.json"
REPL_HELP = "commands: /history, /threads, /resume ID, /delete [ID], /clear, /quit (or Ctrl-D)"
# Exit codes: 1 for an error talking to the agent, 2 for bad arguments (argparse's convention).
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class ChatError(Exception):
    """A failure worth one clear line to the user."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


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


# --- progress -----------------------------------------------------------------------------------


class ProgressLine:
    """Progress messages on a stream: one line rewritten in place on a terminal, else plain lines."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._shown = False

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        """A fastmcp progress handler."""
        text = f"… {message or f'{progress:g}' + (f'/{total:g}' if total else '')}"
        if self._tty:
            width = shutil.get_terminal_size().columns - 1
            self._stream.write(f"\r\x1b[2K{text[:width]}")
            self._shown = True
        else:
            self._stream.write(text + "\n")
        self._stream.flush()

    def clear(self) -> None:
        """Remove the in-place line (a no-op when nothing is shown or the stream is not a terminal)."""
        if self._shown:
            self._stream.write("\r\x1b[2K")
            self._stream.flush()
            self._shown = False


# --- the session --------------------------------------------------------------------------------


def _text_of(content: Sequence[Any]) -> str:
    parts = []
    for block in content:
        text = getattr(block, "text", None)
        if text is not None:
            parts.append(str(text))
        elif (mime := getattr(block, "mime_type", None)) is not None:
            parts.append(f"[{getattr(block, 'type', 'binary')} {mime}]")
    return "\n".join(parts)


@dataclass
class ChatSession:
    """One MCP session with an agent and the conversation being had over it."""

    client: Client[Any]
    agent: str
    """The agent's name from `serverInfo` (its history prompt is `<agent>_history`)."""
    progress: ProgressLine
    timeout: float
    conversation_id: str

    async def send(self, message: str) -> str:
        """The agent's answer to `message`.

        Raises:
            ChatError: the call failed or the agent answered with a tool error.
        """
        try:
            result = await self.client.call_tool(
                "send_message",
                {"message": message, "conversation_id": self.conversation_id},
                progress_handler=self.progress,
                timeout=self.timeout,
                raise_on_error=False,
            )
        except MCPError as exc:
            raise ChatError(f"send_message failed: {exc.error.message}") from None
        except (RuntimeError, httpx2.HTTPError, OSError) as exc:
            raise ChatError(f"lost the connection to {self.agent}: {_reason(exc)}") from None
        finally:
            self.progress.clear()
        text = _text_of(result.content)
        if result.is_error:
            raise ChatError(f"the agent answered with an error: {text or '(no message)'}")
        return text

    async def history(self) -> list[str]:
        """This conversation as `role: text` lines (empty before the first answer)."""
        try:
            prompt = await self.client.get_prompt(
                f"{self.agent}_history", {"conversation_id": self.conversation_id}
            )
        except MCPError as exc:
            if "no stored conversation" in exc.error.message:
                return []
            raise ChatError(f"{self.agent}_history failed: {exc.error.message}") from None
        return [f"{m.role}: {_text_of([m.content])}" for m in prompt.messages]

    def clear(self) -> None:
        """Start a new conversation (the agent keeps the old one; `/threads` lists it)."""
        self.conversation_id = new_conversation_id()

    async def _call(self, tool: str, arguments: dict[str, Any]) -> str:
        try:
            result = await self.client.call_tool(tool, arguments, timeout=self.timeout, raise_on_error=False)
        except MCPError as exc:
            raise ChatError(f"{tool} failed: {exc.error.message}") from None
        except (RuntimeError, httpx2.HTTPError, OSError) as exc:
            raise ChatError(f"lost the connection to {self.agent}: {_reason(exc)}") from None
        text = _text_of(result.content)
        if result.is_error:
            raise ChatError(text or f"{tool} failed")
        return text

    async def threads(self) -> list[str]:
        """Your conversations with the agent, one line each, this one marked with `*`."""
        try:
            listing = json.loads(await self._call("list_conversations", {}))["conversations"]
        except (ValueError, KeyError, TypeError):
            raise ChatError("list_conversations did not answer a conversation list") from None
        return [
            f"{'*' if t['id'] == self.conversation_id else ' '} {t['id']}  {t['updatedAt']}  "
            f"{t['messageCount']:>4} messages  {t['title']}"
            for t in listing
        ]

    def resume(self, conversation_id: str) -> None:
        """Continue an earlier conversation (its id from `/threads`)."""
        self.conversation_id = conversation_id

    async def delete(self, conversation_id: str | None) -> str:
        """Delete a conversation (this one by default, then start a new one)."""
        target = conversation_id or self.conversation_id
        await self._call("delete_conversation", {"conversation_id": target})
        if target == self.conversation_id:
            self.clear()
        return target


def new_conversation_id() -> str:
    """A fresh, unguessable conversation id."""
    return f"chat-{uuid.uuid4().hex}"


@contextlib.asynccontextmanager
async def open_session(
    url: str, headers: dict[str, str], wait: float, conversation_id: str | None
) -> AsyncIterator[ChatSession]:
    """Connect to the agent at `url` (a legacy, stateful MCP session) and yield a `ChatSession`.

    Raises:
        ChatError: the URL is unreachable or does not speak MCP.
    """
    transport = StreamableHttpTransport(url, headers=headers)
    client: Client[Any] = Client(transport, mode="legacy", timeout=wait, init_timeout=min(wait, 30))
    connection = contextlib.AsyncExitStack()
    try:
        await connection.enter_async_context(client)
    except MCPError as exc:
        refusal = await _refusal(url, headers, wait)
        raise ChatError(refusal or f"{url} is not an MCP server: {exc.error.message}") from None
    except (RuntimeError, httpx2.HTTPError, OSError) as exc:
        refusal = await _refusal(url, headers, wait)
        raise ChatError(f"cannot connect to {url}: {refusal or _reason(exc)}") from None
    try:
        info = client.initialize_result.server_info if client.initialize_result else None
        yield ChatSession(
            client=client,
            agent=info.name if info else "agent",
            progress=ProgressLine(sys.stderr),
            timeout=wait,
            conversation_id=conversation_id or new_conversation_id(),
        )
    finally:
        # Ending the session (an HTTP DELETE) is a courtesy: a failure there, say because the
        # agent went away, must not hide the outcome of the chat itself.
        with contextlib.suppress(Exception):
            await connection.aclose()


async def _refusal(url: str, headers: dict[str, str], wait: float) -> str | None:
    """What a 401 or 403 of an agent checking callers means, and what to do; None for others.

    The MCP client reports an HTTP error status as a bare "error response"; one plain MCP probe
    of the endpoint tells the statuses apart.
    """
    outcome = await probe(url, budget=min(wait, 10.0), headers=headers)
    sent = any(name.lower() == "authorization" for name in headers)
    if outcome.unauthorized and not sent:
        return (
            "the agent asks for a bearer token (401): pass --token, set PALLAS_TOKEN, "
            "or --as-serviceaccount NS/NAME"
        )
    if outcome.unauthorized:
        return "the agent refused the token (401): it is invalid, expired, or for another audience or issuer"
    if outcome.message.startswith("HTTP 403"):
        return (
            "the token is valid but this caller may not talk to the agent (403): it needs RBAC verb "
            "invoke on the PallasAgent (auth.mode kubernetes) or a place in its spec.access (auth.mode oidc)"
        )
    return None


def _reason(exc: BaseException) -> str:
    """The most telling text of a transport failure (fastmcp wraps the httpx2 error)."""
    cause = exc.__cause__ or exc
    return str(cause) or type(cause).__name__


# --- REPL ---------------------------------------------------------------------------------------


async def read_line(prompt: str) -> str | None:
    """One line of stdin without blocking the event loop; None at end of input.

    `input()` runs on a daemon thread so that Ctrl-C (which cancels the waiting task) never
    leaves the interpreter waiting for the thread at exit.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[str | None] = loop.create_future()

    def deliver(line: str | None) -> None:
        if not future.done():
            future.set_result(line)

    def work() -> None:
        try:
            line: str | None = input(prompt)
        except (EOFError, OSError, ValueError):
            line = None
        with contextlib.suppress(RuntimeError):  # the loop may already be closed
            loop.call_soon_threadsafe(deliver, line)

    threading.Thread(target=work, name="pallas-chat-stdin", daemon=True).start()
    return await future


async def repl(session: ChatSession, out: TextIO, err: TextIO) -> int:
    """Read messages and commands until `/quit` or end of input."""
    interactive = sys.stdin.isatty()
    if interactive:
        with contextlib.suppress(ImportError):
            import readline  # noqa: F401  (line editing and history for input())
        print(f"connected to {session.agent}; {REPL_HELP}", file=err)
    while True:
        line = await read_line("you> " if interactive else "")
        if line is None or line.strip() in {"/quit", "/exit"}:
            return 0
        line = line.strip()
        if not line:
            continue
        if line == "/history":
            try:
                lines = await session.history()
            except ChatError as exc:
                print(f"pallas chat: {exc}", file=err)
                continue
            print("\n".join(lines) if lines else "(no messages in this conversation yet)", file=out)
        elif line == "/clear":
            session.clear()
            print("(new conversation)", file=err)
        elif line == "/threads" or line.startswith(("/resume", "/delete")):
            await _thread_command(session, line, out, err)
        elif line.startswith("/"):
            print(f"unknown command {line.split()[0]}; {REPL_HELP}", file=err)
        else:
            try:
                print(await session.send(line), file=out)
            except ChatError as exc:
                print(f"pallas chat: {exc}", file=err)
        out.flush()


async def _thread_command(session: ChatSession, line: str, out: TextIO, err: TextIO) -> None:
    command, _, argument = line.partition(" ")
    argument = argument.strip()
    try:
        if command == "/threads":
            lines = await session.threads()
            print("\n".join(lines) if lines else "(no conversations yet)", file=out)
        elif command == "/resume":
            if not argument:
                print("usage: /resume ID (the ids are in /threads)", file=err)
                return
            session.resume(argument)
            print(f"(continuing conversation {argument})", file=err)
        else:
            deleted = await session.delete(argument or None)
            print(f"(deleted conversation {deleted})", file=err)
    except ChatError as exc:
        print(f"pallas chat: {exc}", file=err)


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
        if args.message is not None:
            print(await session.send(args.message))
            return 0
        return await repl(session, sys.stdout, sys.stderr)


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
        try:
            return asyncio.run(chat(args))
        except ChatError as exc:
            print(f"pallas chat: {exc}", file=sys.stderr)
            return exc.exit_code
        except KeyboardInterrupt:
            print(file=sys.stderr)
            return EXIT_INTERRUPTED
