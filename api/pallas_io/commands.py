"""The command-line conventions every `pallas` command follows (docs/api.md §2).

- Exit codes: 0 done (or stopped by SIGTERM/SIGINT); 1 a failure at run time (cannot listen, no
  credentials, lost leadership); 2 a usage or configuration error (bad flags, bad files).
- Ports: `--port`-like flags take 0-65535 through `port_number`, 0 meaning "any free port"
  (the chosen one is logged); anything else is argparse's usage error, exit 2. A serving
  command's `--port` and `--host` come from `add_listener_flags`.
- Serving commands take the flags of `add_http_limit_flags` for their listener's `HttpLimits`.
- A command is a class registered in the `pallas.commands` entry-point group (`Command`), so the
  operator adds `pallas operator` without the runtime importing it.
"""

from __future__ import annotations

import argparse
import os
from importlib.metadata import PackageNotFoundError, version
from typing import Final, Protocol

from pydantic import ValidationError

from pallas_api.config import HTTP_LIMIT_FLAGS
from pallas_api.fields import HttpLimits


def installed_version() -> str:
    """The installed `pallas` distribution's version (`pallas --version`, the default image tag)."""
    try:
        return version("pallas")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0.0.0"


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


def add_listener_flags(parser: argparse.ArgumentParser, *, default_port: int) -> None:
    """Add a serving command's `--port` and `--host` (default `$PALLAS_BIND_HOST`, else every interface)."""
    parser.add_argument(
        "--port",
        type=port_number,
        default=default_port,
        help=f"HTTP port (default {default_port}; 0: any free port)",
    )
    parser.add_argument(
        "--host",
        default=os.environ.get("PALLAS_BIND_HOST", "0.0.0.0"),
        help="bind address (default $PALLAS_BIND_HOST, else 0.0.0.0)",
    )


def add_http_limit_flags(parser: argparse.ArgumentParser) -> None:
    """Add the flags of a listener's `HttpLimits` to a serving command (their defaults as default).

    They are `--max-head-bytes`, `--max-headers`, `--head-timeout` and `--keep-alive`.
    """
    defaults = HttpLimits()
    for field, (flag, kind, meaning) in HTTP_LIMIT_FLAGS.items():
        default = getattr(defaults, field)
        parser.add_argument(
            flag, dest=field, type=kind, default=default, help=f"{meaning} (default {default:g})"
        )


def http_limits(args: argparse.Namespace) -> HttpLimits:
    """The limits the flags of `add_http_limit_flags` ask for.

    Raises:
        ValueError: a value out of range; the message names the flag.
    """
    try:
        return HttpLimits(**{field: getattr(args, field) for field in HTTP_LIMIT_FLAGS})
    except ValidationError as exc:
        problems = [
            f"{HTTP_LIMIT_FLAGS[str(err['loc'][0])][0]}: {err['msg']}"
            for err in exc.errors(include_url=False, include_input=False)
        ]
        raise ValueError("; ".join(problems)) from None
