"""`pallas agent --config FILE [--port N] [--secrets-dir DIR]`: run one agent, as an agent pod does.

The config file is read again when it changes and applied in place (`agent.config_file`,
`agent.live`); secrets are looked up at each turn in `--secrets-dir` (a pod's Secret volume,
one file per name) and then the environment.

SIGTERM (or Ctrl-C) drains it: not ready, new sessions refused, turns in flight finishing for up
to its `drainSeconds`, the rest interrupted and kept as failed (`AgentServer.drain`); a second
signal interrupts them at once.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections import ChainMap
from collections.abc import Mapping

from pallas_api.config import ConfigError
from pallas_io.commands import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, add_listener_flags
from pallas_io.logs import setup_logging
from pallas_io.secrets import SecretFiles
from pallas_io.serving import bound_port, leave, listen, run_server_loop, serve, until_signalled
from pallas_io.tracing import setup_tracing
from pallas_runtime.agent.config_file import ConfigFile
from pallas_runtime.server import agent_app, build_server

log = logging.getLogger("pallas.agent")
AFTER_DRAIN_GRACE = 5
"""Seconds requests still open after the drain get (answers being written; other streams end)."""


class AgentCommand:
    """The `pallas agent` subcommand (a `pallas.commands` entry point)."""

    help = "run one agent (what an agent pod runs)"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        """Add the command's flags."""
        parser.add_argument("--config", required=True, metavar="FILE", help="agent config (YAML or JSON)")
        add_listener_flags(parser, default_port=8000)
        parser.add_argument(
            "--secrets-dir",
            default=os.environ.get("PALLAS_SECRETS_DIR"),
            metavar="DIR",
            help="look secrets up as files of DIR first, read at each use (a pod's Secret volume; "
            "default $PALLAS_SECRETS_DIR), then in the environment",
        )
        parser.add_argument(
            "--allowed-host",
            action="append",
            default=[],
            metavar="HOST",
            help="a Host header value to accept (repeatable); turns on DNS-rebinding protection",
        )

    def run(self, args: argparse.Namespace) -> int:
        """Serve until SIGTERM/SIGINT."""
        config_file = ConfigFile(args.config)
        try:
            config, digest = config_file.load()
        except ConfigError as exc:
            print(f"pallas agent: {exc}", file=sys.stderr)
            return EXIT_USAGE
        try:
            redactor = setup_logging(fields={"agent": config.name})
            setup_tracing(config.name)
        except ValueError as exc:
            print(f"pallas agent: {exc}", file=sys.stderr)
            return EXIT_USAGE
        secrets: Mapping[str, str] = os.environ
        if args.secrets_dir:
            secrets = ChainMap(SecretFiles(args.secrets_dir), os.environ)  # type: ignore[arg-type]
        try:
            sock = listen(args.host, args.port)
        except OSError as exc:
            print(f"pallas agent: cannot listen on {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
            return EXIT_FAILURE
        server = build_server(
            config,
            environ=secrets,
            config_file=config_file,
            config_hash=digest,
            on_secrets=redactor.add,
            port=bound_port(sock),
        )
        app = agent_app(server, args.allowed_host)
        log.info(
            "agent %s serving on http://%s:%d/mcp (model %s, config %s)",
            config.name,
            args.host,
            bound_port(sock),
            config.model,
            digest[:12],
        )
        try:
            with sock:
                run_server_loop(
                    until_signalled(
                        serve(
                            app,
                            sock,
                            graceful_timeout=AFTER_DRAIN_GRACE,
                            drain=server.drain,
                            limits=config.http,
                            refused=server.refused,
                        ),
                        on_repeat=server.hurry,
                    )
                )
        except OSError as exc:
            print(f"pallas agent: {exc}", file=sys.stderr)
            return EXIT_FAILURE
        return leave(EXIT_OK)
