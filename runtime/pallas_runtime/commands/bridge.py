"""`pallas bridge`: serve a stdio MCP server over Streamable HTTP, as a hosted server's pod does.

    pallas bridge --name NAME --fifos DIR --token-file FILE [--secrets-dir DIR] [--port 8000]
                  [--max-sessions N] [--idle-timeout S]
    pallas bridge --name NAME [--stateful] ... -- COMMAND [ARGS...]
    pallas bridge --make-fifos DIR

In a cluster the operator runs the first form next to the server's own container, which runs the
command with its stdout and stdin on the FIFOs `DIR/out` and `DIR/in` (made by the third form,
the pod's init container; `--secrets-dir` is the pod's Secret volume, whose change restarts the
server); the second form runs the command as a child process, as `pallas
run` does (a way to try a server's bridge by hand). Agents reach `http://HOST:PORT/mcp`,
sending the deployment's bridge credential, which the bridge reads from `--token-file` (the pod's
volume of the operator's Secret, read at each request) or `$PALLAS_BRIDGE_TOKEN`, and requires:
a request without it gets 401.
`/healthz` answers while the process serves, `/readyz` once the server has a session.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from pallas_api import names
from pallas_api.fields import SessionLimits
from pallas_io.commands import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, add_listener_flags
from pallas_io.logs import setup_logging
from pallas_io.serving import bound_port, listen, run_server_loop, serve, until_signalled
from pallas_runtime.stdio.bridge import Bridge
from pallas_runtime.stdio.credential import token_file
from pallas_runtime.stdio.links import ChildProcess, FifoPair, Link, child_environment, make_fifos

log = logging.getLogger("pallas.stdio")


class BridgeCommand:
    """The `pallas bridge` subcommand (a `pallas.commands` entry point)."""

    help = "serve a stdio MCP server over Streamable HTTP (what a hosted stdio server's pod runs)"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """Add the command's flags."""
        parser.add_argument("--name", help="the server's name (its mcpServers key), in every log line")
        parser.add_argument("--fifos", metavar="DIR", help="talk to the server through DIR/in and DIR/out")
        parser.add_argument(
            "--secrets-dir",
            metavar="DIR",
            help="with --fifos: the Secret volume the server reads at start; a change restarts the server",
        )
        parser.add_argument(
            "--token-file",
            metavar="FILE",
            help="the bridge credential agents must send, read at each request "
            f"(else ${names.BRIDGE_TOKEN_ENV})",
        )
        parser.add_argument(
            "--make-fifos",
            metavar="DIR",
            help="make the FIFOs DIR/in and DIR/out, then exit (init container)",
        )
        parser.add_argument("--stateful", action="store_true", help="a server process per MCP session")
        add_listener_flags(parser, default_port=8000)
        parser.add_argument(
            "--max-sessions", type=int, default=SessionLimits().max_sessions, help="MCP sessions kept at once"
        )
        parser.add_argument(
            "--idle-timeout",
            type=int,
            default=SessionLimits().idle_timeout_seconds,
            metavar="SECONDS",
            help="an MCP session unused this long is closed",
        )
        parser.add_argument(
            "server_command",
            nargs=argparse.REMAINDER,
            metavar="-- COMMAND [ARGS...]",
            help="run the server as a child process instead",
        )

    def run(self, args: argparse.Namespace) -> int:
        """Serve until SIGTERM/SIGINT (or make the FIFOs and exit)."""
        if args.make_fifos:
            try:
                make_fifos(Path(args.make_fifos))
            except OSError as exc:
                print(
                    f"pallas bridge: cannot make FIFOs in {args.make_fifos}: {exc.strerror}", file=sys.stderr
                )
                return EXIT_FAILURE
            return EXIT_OK
        given = args.server_command
        command = given[1:] if given[:1] == ["--"] else given
        problem = _usage_problem(args, command)
        if problem:
            print(f"pallas bridge: {problem}", file=sys.stderr)
            return EXIT_USAGE
        try:
            limits = SessionLimits(max_sessions=args.max_sessions, idle_timeout_seconds=args.idle_timeout)
            setup_logging(fields={})
        except ValueError as exc:
            print(f"pallas bridge: {exc}".splitlines()[0], file=sys.stderr)
            return EXIT_USAGE
        name = args.name
        fifos = Path(args.fifos) if args.fifos else None
        environment = child_environment({})

        def link() -> Link:
            if fifos is not None:
                return FifoPair(name, fifos)
            return ChildProcess(name, command[0], command[1:], environment)

        try:
            sock = listen(args.host, args.port)
        except OSError as exc:
            print(f"pallas bridge: cannot listen on {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
            return EXIT_FAILURE
        secrets_dir = Path(args.secrets_dir) if args.secrets_dir else None
        token = _credential(args)
        bridge = Bridge(
            name, link, token=token, stateful=args.stateful, limits=limits, secrets_dir=secrets_dir
        )
        log.info("stdio server %s: bridge serving on http://%s:%d/mcp", name, args.host, bound_port(sock))
        try:
            with sock:
                run_server_loop(until_signalled(serve(bridge.app(), sock)))
        except OSError as exc:
            print(f"pallas bridge: {exc}", file=sys.stderr)
            return EXIT_FAILURE
        return EXIT_OK


def _credential(args: argparse.Namespace) -> Callable[[], str]:
    """The bridge credential: `--token-file`'s (read at each request), else `$PALLAS_BRIDGE_TOKEN`."""
    if args.token_file:
        return token_file(Path(args.token_file))
    token = os.environ.get(names.BRIDGE_TOKEN_ENV, "")
    return lambda: token


def _usage_problem(args: argparse.Namespace, command: list[str]) -> str:
    if not args.name:
        return "--name is required"
    if bool(args.fifos) == bool(command):
        return "give exactly one of --fifos DIR or -- COMMAND [ARGS...]"
    if args.secrets_dir and not args.fifos:
        return "--secrets-dir is for a pod's server (--fifos): a child gets its environment from pallas run"
    if args.fifos and args.stateful:
        return "--stateful needs a process per session: give -- COMMAND, not --fifos"
    if not args.token_file and not os.environ.get(names.BRIDGE_TOKEN_ENV):
        return (
            f"give the deployment's bridge credential: --token-file FILE or ${names.BRIDGE_TOKEN_ENV} "
            "(the bridge serves only agents that send it)"
        )
    return ""
