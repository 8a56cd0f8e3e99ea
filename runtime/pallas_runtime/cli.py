"""The `pallas` command.

Subcommands are discovered through the ``pallas.commands`` entry-point group, so the operator
package can add ``pallas operator`` without the runtime ever importing the operator (the layering
rule in docs/architecture.md).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import NoReturn

from pallas_io.commands import EXIT_USAGE, Command
from pallas_runtime import __version__


def _instantiate(entry_point: EntryPoint) -> Callable[[], Command]:
    def make() -> Command:
        command: Command = entry_point.load()()
        return command

    return make


def _discovered_commands() -> dict[str, Callable[[], Command]]:
    """Command factories by name; an entry point names a class whose instances are commands."""
    return {ep.name: _instantiate(ep) for ep in entry_points(group="pallas.commands")}


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors in one line (`pallas run: argument --port: …`), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser(commands: dict[str, Command]) -> argparse.ArgumentParser:
    """Build the top-level parser with one sub-parser per command."""
    parser = _Parser(prog="pallas", description="Run LLM agents as MCP servers, locally or on Kubernetes.")
    parser.add_argument("--version", action="version", version=f"pallas {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in sorted(commands.items()):
        command.configure(sub.add_parser(name, help=command.help, description=command.help))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pallas`` program."""
    factories = _discovered_commands()
    argv = list(sys.argv[1:] if argv is None else argv)
    # Importing a command can take seconds (kopf, the LLM SDKs); load only the one asked for,
    # and all of them just for the top-level help.
    chosen = next((arg for arg in argv if not arg.startswith("-")), None)
    wanted = [chosen] if chosen in factories else list(factories)
    commands = {name: factories[name]() for name in wanted}
    parser = build_parser(commands)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    return commands[args.command].run(args)


if __name__ == "__main__":
    raise SystemExit(main())
