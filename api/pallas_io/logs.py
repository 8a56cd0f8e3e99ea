"""One logging setup for every Pallas process (operator, agents, registry, `pallas run`).

Where the lines go and how they look (environment; the original Pallas knobs, docs/api.md §2):

- `PALLAS_LOG_LEVEL` (default INFO): every Pallas logger (`PALLAS_LOGGERS`) and so the file.
- `PALLAS_ROOT_LOG_LEVEL` (default: the higher of PALLAS_LOG_LEVEL and INFO): everything else.
- `PALLAS_LOG_FILE` (unset): also write JSON lines to this file, rotated at 10 MB, 5 files kept.
- `PALLAS_LOG_STDERR` (default on): `0`/`false`/`no`/`off` writes nothing to stderr; the lines
  then go to `PALLAS_LOG_FILE`, else to the seed's file, `~/.local/state/pallas/pallas.log`.
- `PALLAS_LOG_FORMAT` (default `auto`): stderr gets `console` lines (coloured, aligned, by
  rich) when it is a terminal, else `json` lines; `json` or `console` forces one. Files are
  always JSON. The operator sets `json` in every pod it renders, so a pod with a tty stays JSON.

Chatty libraries (HTTP clients, SDKs, MCP) stay at WARNING whatever the root level, so a debug
session of Pallas does not drown in their output; uvicorn's error and access lines stay at
WARNING unless `PALLAS_ROOT_LOG_LEVEL` is set. Every record passes a redaction filter on every
handler, so both formats are covered: query-string values, `user:password@` in URLs, `Bearer …`
credentials (URL-encoded too), anything shaped like a JWT (glued to other text too) and the
values of secret environment variables the process was given never reach a log line, uvicorn's
access and error lines included.

Records carry the `agent`, `deployment` and `namespace` they concern: fields given to
`setup_logging`, those bound for a piece of work with `log_fields`/`fields_context` (each agent
of `pallas run`, each reconcile of the operator), and kopf's object reference.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import logging.handlers
import os
import re
import sys
import traceback
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TextIO

from pythonjsonlogger.json import JsonFormatter

from pallas_io.paths import state_dir

PALLAS_LOGGERS = ("pallas", "pallas_api", "pallas_io", "pallas_operator", "pallas_runtime")
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
    "docket",
    "kopf.objects",
    "aiohttp.access",
    "sqlalchemy",
    "alembic",
    "asyncpg",
    # The a2a-sdk: ~150 lines of tracing set-up at import and a line per task event at DEBUG.
    "a2a",
)
UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")
"""Quiet unless PALLAS_ROOT_LOG_LEVEL asks for them: start-up chatter and one line per request."""
FIELDS = ("agent", "deployment", "namespace")
"""What a record is about; set from the context (see the module notes)."""
LogFormat = Literal["json", "console"]
FORMATS: tuple[LogFormat, ...] = ("json", "console")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
FILE_NAME = "pallas.log"
_ON = frozenset({"1", "true", "yes", "on"})
_OFF = frozenset({"0", "false", "no", "off"})
_QUERY = re.compile(r"(?<=\S)\?([^\s\"'<>#]+)")
"""A URL's query string (a `?` glued to a path or URL): values there are credentials as often
as not (`?token=`, `?access_token=`, `?authorization=Bearer%20…`, signed URLs), so none is kept."""
_PARAMETER = re.compile(r"([^&;=]*=)?[^&;]+")
_USERINFO = re.compile(r"(?<=://)[^/\s@:]+:[^/\s@]*@")
"""`user:password@` in a URL."""
_BEARER = re.compile(r"(?i)(bearer)(?:\s|%20|\+)+[A-Za-z0-9._~+/=%-]+")
"""A bearer credential, also URL-encoded (`Bearer%20…`, `Bearer+…`) or glued to a word."""
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]{8,}(?:\.[A-Za-z0-9_-]*)*")
"""A JWT anywhere (callers' OIDC and ServiceAccount tokens), even without a `Bearer` before it,
glued to other letters, or cut short: its base64url JSON header always starts `eyJ`."""
_KOPF_ATTRS = ("settings", "k8s_skip", "k8s_ref")
"""What kopf's per-object logger adds to a record; its reference becomes our fields."""
_FIELDS: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar("pallas_log_fields")


REDACTED = "[redacted]"
MIN_SECRET_LENGTH = 6
"""Shorter values would blank out ordinary words, so they are not treated as secrets."""


class SecretValues:
    """Known secret values (API keys, header values from Secrets), replaced wherever they appear.

    What the log filter removes from every line, and what an agent removes from tool results
    before its model and its caller see them (`pallas_runtime.agent.loop`).
    """

    def __init__(self, values: Iterable[str] = ()) -> None:
        # Longest first, so a secret containing another is replaced whole.
        self._values = sorted({v for v in values if len(v) >= MIN_SECRET_LENGTH}, key=len, reverse=True)

    def __bool__(self) -> bool:
        return bool(self._values)

    def including(self, values: Iterable[str]) -> SecretValues:
        """These values and `values` besides (e.g. one request's caller credential)."""
        more = [v for v in values if len(v) >= MIN_SECRET_LENGTH]
        return SecretValues([*self._values, *more]) if more else self

    def scrub(self, text: str) -> str:
        """The text with every known value replaced by `[redacted]`."""
        for value in self._values:
            text = text.replace(value, REDACTED)
        return text


class Redactor(logging.Filter):
    """Replaces bearer credentials and known secret values in every record."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self._known: set[str] = set(secrets)
        self._secrets = SecretValues(self._known)

    def add(self, secrets: Iterable[str]) -> None:
        """Redact these values too (a rotated key), keeping the ones known before."""
        new = set(secrets) - self._known
        if new:
            self._known |= new
            self._secrets = SecretValues(self._known)

    def redact(self, text: str) -> str:
        """The text with its credentials replaced.

        They are query-string values, `user:password@` in URLs, bearer credentials, JWTs and
        the known secret values.
        """
        text = _QUERY.sub(_redacted_query, text)
        text = _USERINFO.sub(f"{REDACTED}@", text)
        text = _BEARER.sub(rf"\1 {REDACTED}", text)
        text = _JWT.sub("[redacted-jwt]", text)
        return self._secrets.scrub(text)

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact the record in place (its traceback folded into the message); never drops it."""
        message = record.getMessage()
        cleaned = self.redact(message)
        if record.exc_info:
            trace = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
            cleaned += "\n" + self.redact(trace)
            record.exc_info = None
            record.exc_text = None
        record.msg, record.args = cleaned, None
        return True


def _redacted_query(match: re.Match[str]) -> str:
    """`?a=1&b` → `?a=[redacted]&b=[redacted]`: each parameter keeps its name, never its value."""
    return "?" + _PARAMETER.sub(lambda parameter: f"{parameter[1] or ''}{REDACTED}", match[1])


class ContextFields(logging.Filter):
    """Adds `agent`/`deployment`/`namespace` to every record; a field given with `extra=` wins."""

    def __init__(self, fields: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self._fields = {k: v for k, v in (fields or {}).items() if v}

    def filter(self, record: logging.LogRecord) -> bool:
        """Set the fields the record does not carry yet; never drops it."""
        for key, value in {**self._fields, **_FIELDS.get({}), **_kopf_fields(record)}.items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


def _kopf_fields(record: logging.LogRecord) -> dict[str, str]:
    ref = getattr(record, "k8s_ref", None)
    if not isinstance(ref, dict):
        return {}
    fields = {"namespace": ref.get("namespace") or ""}
    kind = {"PallasAgent": "agent", "PallasDeployment": "deployment"}.get(ref.get("kind") or "")
    if kind is not None:
        fields[kind] = ref.get("name") or ""
    return {k: v for k, v in fields.items() if v}


@contextlib.contextmanager
def log_fields(**fields: str) -> Iterator[None]:
    """Within the block (and the tasks started in it), records carry these fields."""
    token = _FIELDS.set({**_FIELDS.get({}), **fields})
    try:
        yield
    finally:
        _FIELDS.reset(token)


def fields_context(**fields: str) -> contextvars.Context:
    """A copy of the current context whose records carry these fields (`create_task(context=)`)."""
    context = contextvars.copy_context()
    context.run(_FIELDS.set, {**_FIELDS.get({}), **fields})
    return context


def json_formatter() -> logging.Formatter:
    """One JSON object per line: level, logger, message, any `extra=` fields and the time (UTC)."""
    return JsonFormatter(
        "{levelname}{name}{message}",
        style="{",
        rename_fields={"levelname": "level", "name": "logger"},
        timestamp="time",
        json_ensure_ascii=False,
        # uvicorn adds an ANSI-coloured copy of each message; JSON lines want the plain one only.
        reserved_attrs=[*logging.makeLogRecord({}).__dict__, "color_message", *_KOPF_ATTRS],
    )


def _level(variable: str, value: str | None, default: int) -> int:
    if not value or not value.strip():
        return default
    level = logging.getLevelName(value.strip().upper())
    if not isinstance(level, int):
        raise ValueError(f"{variable} {value!r} is not one of {', '.join(LEVELS)} (any case)")
    return level


def _switch(variable: str, value: str | None, default: bool) -> bool:
    if value is None or not value.strip():
        return default
    word = value.strip().lower()
    if word in _ON | _OFF:
        return word in _ON
    raise ValueError(f"{variable} {value!r} is not one of 1, true, yes, on, 0, false, no, off")


def _isatty(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except ValueError:  # a closed stream
        return False


@dataclass(frozen=True, slots=True)
class LogSettings:
    """The logging knobs of one process, read from its environment."""

    level: int
    """Of the Pallas loggers."""
    root_level: int
    """Of every other logger."""
    root_level_set: bool
    """Whether PALLAS_ROOT_LOG_LEVEL was given (then uvicorn follows it)."""
    format: LogFormat
    """Of the stderr lines."""
    stderr: bool
    file: Path | None

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str], stream: object = None, *, file_by_default: bool = False
    ) -> LogSettings:
        """The settings `environ` asks for; `stream` (stderr) decides the `auto` format.

        With `file_by_default` (`pallas run`, on a workstation: the original's always-on file),
        the rotating file is written unless `PALLAS_LOG_FILE` is `off`; elsewhere (pods, whose
        root file systems are read-only) only when it names a file or stderr is off.

        Raises:
            ValueError: a knob with a value it does not take; the message names the variable.
        """
        level = _level("PALLAS_LOG_LEVEL", environ.get("PALLAS_LOG_LEVEL"), logging.INFO)
        root = environ.get("PALLAS_ROOT_LOG_LEVEL")
        root_level = _level("PALLAS_ROOT_LOG_LEVEL", root, max(level, logging.INFO))
        fmt = (environ.get("PALLAS_LOG_FORMAT") or "auto").strip().lower()
        if fmt == "auto":
            fmt = "console" if _isatty(sys.stderr if stream is None else stream) else "json"
        if fmt not in FORMATS:
            raise ValueError(
                f"PALLAS_LOG_FORMAT {environ['PALLAS_LOG_FORMAT']!r} is not one of auto, json, console"
            )
        stderr = _switch("PALLAS_LOG_STDERR", environ.get("PALLAS_LOG_STDERR"), True)
        named = (environ.get("PALLAS_LOG_FILE") or "").strip()
        file_off = named.lower() in _OFF
        file = Path(named) if named and not file_off else None
        if file is None and (not stderr or (file_by_default and not file_off)):
            file = state_dir(environ) / FILE_NAME  # never nowhere: the original's always-on file
        return cls(level, root_level, bool(root and root.strip()), fmt, stderr, file)


def _file_handler(path: Path) -> logging.Handler:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return logging.handlers.RotatingFileHandler(path, maxBytes=10 * 2**20, backupCount=5)
    except OSError as exc:
        raise ValueError(f"PALLAS_LOG_FILE: cannot write {path}: {exc.strerror}") from None


def _stderr_handler(settings: LogSettings, stream: TextIO, fields: Mapping[str, str]) -> logging.Handler:
    if settings.format == "console":
        from pallas_io.console import console_handler  # rich: imported only for a terminal

        return console_handler(stream, fields)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(json_formatter())
    return handler


def setup_logging(
    environ: Mapping[str, str] | None = None,
    *,
    secret_env: Iterable[str] = (),
    stream: TextIO | None = None,
    fields: Mapping[str, str] | None = None,
    file_by_default: bool = False,
) -> Redactor:
    """Configure logging for a Pallas process; returns the redactor (to add secrets later).

    Args:
        environ: Where the knobs are read; the process environment by default.
        secret_env: Names of environment variables holding secrets; their values are redacted.
        stream: Where stderr lines go; stderr by default.
        fields: `agent`/`deployment`/`namespace` of every record of the process; by default
            `namespace` and `deployment` from `$PALLAS_NAMESPACE` and `$PALLAS_DEPLOYMENT`.
        file_by_default: Write the rotating state file unless `PALLAS_LOG_FILE=off`
            (`LogSettings.from_env`).

    Raises:
        ValueError: a knob with a value it does not take, or a log file that cannot be written.
    """
    env = os.environ if environ is None else environ
    out = stream or sys.stderr
    settings = LogSettings.from_env(env, out, file_by_default=file_by_default)
    redactor = Redactor(env[name] for name in secret_env if env.get(name))
    given = {"namespace": env.get("PALLAS_NAMESPACE", ""), "deployment": env.get("PALLAS_DEPLOYMENT", "")}
    given.update({k: v for k, v in (fields or {}).items() if v})
    context = ContextFields(given)

    handlers: list[logging.Handler] = []
    if settings.stderr:
        handlers.append(_stderr_handler(settings, out, given))
    if settings.file is not None:
        handlers.append(_file_handler(settings.file))
        handlers[-1].setFormatter(json_formatter())
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        handler.addFilter(context)
        handler.addFilter(redactor)
        root.addHandler(handler)
    root.setLevel(settings.root_level)
    for name in PALLAS_LOGGERS:
        logging.getLogger(name).setLevel(settings.level)
    # fastmcp and uvicorn attach their own (rich, plain-text) handlers; route them through ours.
    for name in ("fastmcp", *UVICORN_LOGGERS):
        lib = logging.getLogger(name)
        lib.handlers.clear()
        lib.propagate = True
    quiet = max(logging.WARNING, settings.root_level)
    for name in UVICORN_LOGGERS:
        logging.getLogger(name).setLevel(settings.root_level if settings.root_level_set else quiet)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(quiet)
    return redactor


def log_format(environ: Mapping[str, str] | None = None, stream: object = None) -> LogFormat:
    """The format stderr lines have (or would have) under `environ`; json for a bad knob."""
    try:
        return LogSettings.from_env(os.environ if environ is None else environ, stream).format
    except ValueError:
        return "json"
