"""The command-line conventions every `pallas` command follows (docs/api.md §2).

- Exit codes: 0 done (or stopped by SIGTERM/SIGINT); 1 a failure at run time (cannot listen, no
  credentials, lost leadership); 2 a usage or configuration error (bad flags, bad files).
- Ports: `--port`-like flags take 0-65535 through `port_number`, 0 meaning "any free port"
  (the chosen one is logged); anything else is argparse's usage error, exit 2.
- A command is a class registered in the `pallas.commands` entry-point group (`Command`), so the
  operator adds `pallas operator` without the runtime importing it.
"""

from __future__ import annotations

import argparse
from typing import Final, Protocol

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2


class Command(Protocol):
    """What a `pallas.commands` entry point provides."""

    help: str

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """Add this command's arguments to its sub-parser."""

    def run(self, args: argparse.Namespace) -> int:
        """Run the command and return the process exit code."""


def port_number(text: str) -> int:
    """An argparse `type=` for TCP ports: 0-65535, 0 meaning any free port."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port number (0-65535)") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a TCP port number (0-65535)")
    return port
