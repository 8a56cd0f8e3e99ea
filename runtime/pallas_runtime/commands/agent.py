"""`pallas agent --config FILE [--port N]`: run one agent, as an agent pod does."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from pallas_runtime.commands.serving import agent_app, listen, secret_env_names, uvicorn_server
from pallas_runtime.config import ConfigError, load_config
from pallas_runtime.log import setup_logging
from pallas_runtime.server import build_server

log = logging.getLogger("pallas.agent")


class AgentCommand:
    help = "run one agent (what an agent pod runs)"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--config", required=True, metavar="FILE", help="agent config (YAML or JSON)")
        parser.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000)")
        parser.add_argument(
            "--host",
            default=os.environ.get("PALLAS_BIND_HOST", "0.0.0.0"),
            help="bind address (default $PALLAS_BIND_HOST, else 0.0.0.0)",
        )
        parser.add_argument(
            "--allowed-host",
            action="append",
            default=[],
            metavar="HOST",
            help="a Host header value to accept (repeatable); turns on DNS-rebinding protection",
        )

    def run(self, args: argparse.Namespace) -> int:
        try:
            config = load_config(args.config)
        except ConfigError as exc:
            print(f"pallas agent: {exc}", file=sys.stderr)
            return 2
        if not 0 < args.port < 65536:
            print(f"pallas agent: --port {args.port} is not a TCP port number", file=sys.stderr)
            return 2
        try:
            setup_logging(secret_env=secret_env_names(config))
        except ValueError as exc:
            print(f"pallas agent: {exc}", file=sys.stderr)
            return 2
        try:
            sock = listen(args.host, args.port)
        except OSError as exc:
            print(f"pallas agent: cannot listen on {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
            return 1
        app = agent_app(build_server(config), args.allowed_host)
        server = uvicorn_server(app, args.host, args.port)
        log.info(
            "agent %s serving on http://%s:%d/mcp (model %s)", config.name, args.host, args.port, config.model
        )
        asyncio.run(server.serve(sockets=[sock]))
        return 0 if server.started else 1
