"""The runtime's `pallas` subcommands (registered as `pallas.commands` entry points)."""
