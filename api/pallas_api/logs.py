"""One logging setup for every Pallas process (operator, agents, registry).

JSON lines to stderr, with the original Pallas level knobs and secrets redacted.

Knobs (environment):
- `PALLAS_LOG_LEVEL` (default INFO): every Pallas logger (`PALLAS_LOGGERS`).
- `PALLAS_ROOT_LOG_LEVEL` (default: the higher of PALLAS_LOG_LEVEL and INFO): everything else.
- `PALLAS_LOG_FILE` (unset): also write the same JSON lines to this file, rotated at 10 MB, 5 files kept.

Chatty libraries (HTTP clients, SDKs, MCP, uvicorn access lines) stay at WARNING whatever the
root level, so a debug session of Pallas does not drown in their output. JSON is written by
python-json-logger (already installed with kopf).
Every record passes a redaction filter: `Bearer …` credentials, anything shaped like a JWT, and
the values of secret environment variables the process was given never reach a log line.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import re
import sys
import traceback
from collections.abc import Iterable, Mapping

from pythonjsonlogger.json import JsonFormatter

PALLAS_LOGGERS = ("pallas", "pallas_api", "pallas_operator", "pallas_runtime")
"""Roots of every Pallas logger: modules log under their own name, commands under `pallas.<command>`."""
QUIET_LOGGERS = (
    "openai",
    "openai._base_client",
    "anthropic",
    "anthropic._base_client",
    "httpx",
    "httpx2",
    "httpcore",
    "httpcore2",
    "mcp",
    "mcp.client",
    "mcp.server",
    "sse_starlette",
    "sse_starlette.sse",
    "fastmcp",
    "uvicorn.access",
    "docket",
    "kopf.objects",
    "aiohttp.access",
    "aiosqlite",
    "sqlalchemy",
    "alembic",
    "asyncpg",
)
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]+")
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
"""A JWT anywhere (callers' OIDC and ServiceAccount tokens), even without a `Bearer` before it."""


class Redactor(logging.Filter):
    """Replaces bearer credentials and known secret values in every record."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        # Longest first, so a secret containing another is replaced whole; short values would
        # blank out ordinary words, so they are not treated as secrets.
        self._secrets = sorted({s for s in secrets if len(s) >= 6}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        """The text with bearer credentials and known secret values replaced."""
        text = _BEARER.sub(r"\1 [redacted]", text)
        text = _JWT.sub("[redacted-jwt]", text)
        for secret in self._secrets:
            text = text.replace(secret, "[redacted]")
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact the record in place (its traceback folded into the message); never drops it."""
        message = record.getMessage()
        cleaned = self.redact(message)
        if record.exc_info:
            cleaned += "\n" + self.redact("".join(traceback.format_exception(*record.exc_info)))
            record.exc_info = None
            record.exc_text = None
        record.msg, record.args = cleaned, None
        return True


def json_formatter() -> logging.Formatter:
    """One JSON object per line: level, logger, message, any `extra=` fields and the time (UTC)."""
    return JsonFormatter(
        "{levelname}{name}{message}",
        style="{",
        rename_fields={"levelname": "level", "name": "logger"},
        timestamp="time",
        json_ensure_ascii=False,
        # uvicorn adds an ANSI-coloured copy of each message; JSON lines want the plain one only.
        reserved_attrs=[*logging.makeLogRecord({}).__dict__, "color_message"],
    )


def _level(name: str | None, default: int) -> int:
    if not name:
        return default
    level = logging.getLevelName(name.strip().upper())
    if not isinstance(level, int):
        raise ValueError(f"log level {name!r} is not one of DEBUG, INFO, WARNING, ERROR, CRITICAL")
    return level


def setup_logging(
    environ: Mapping[str, str] | None = None, *, secret_env: Iterable[str] = (), stream: object = None
) -> Redactor:
    """Configure logging for a Pallas process; returns the redactor (to add secrets later).

    Args:
        environ: Where the knobs are read; the process environment by default.
        secret_env: Names of environment variables holding secrets; their values are redacted.
        stream: Where JSON lines go; stderr by default.
    """
    env = os.environ if environ is None else environ
    pallas_level = _level(env.get("PALLAS_LOG_LEVEL"), logging.INFO)
    root_level = _level(env.get("PALLAS_ROOT_LOG_LEVEL"), max(pallas_level, logging.INFO))
    redactor = Redactor(env[name] for name in secret_env if env.get(name))

    handlers: list[logging.Handler] = [logging.StreamHandler(stream or sys.stderr)]  # type: ignore[arg-type]
    if env.get("PALLAS_LOG_FILE"):
        handlers.append(
            logging.handlers.RotatingFileHandler(env["PALLAS_LOG_FILE"], maxBytes=10 * 2**20, backupCount=5)
        )
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        handler.setFormatter(json_formatter())
        handler.addFilter(redactor)
        root.addHandler(handler)
    root.setLevel(root_level)
    for name in PALLAS_LOGGERS:
        logging.getLogger(name).setLevel(pallas_level)
    # fastmcp and uvicorn attach their own (rich, plain-text) handlers; route them through ours.
    for name in ("fastmcp", "uvicorn", "uvicorn.error", "uvicorn.access"):
        lib = logging.getLogger(name)
        lib.handlers.clear()
        lib.propagate = True
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, root_level))
    return redactor
