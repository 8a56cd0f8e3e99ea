"""`python -m pallas_registry [flags]`: `pallas registry` without loading the other commands."""

from __future__ import annotations

import argparse
import sys

from pallas_registry.command import RegistryCommand


def main(argv: list[str] | None = None) -> int:
    """Parse the `pallas registry` flags and run it."""
    command = RegistryCommand()
    parser = argparse.ArgumentParser(prog="python -m pallas_registry", description=command.help)
    command.configure(parser)
    return command.run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
