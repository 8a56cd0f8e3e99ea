"""Our validation path: the official schemas, with the formats they name actually checked.

`validate_server` checks a `server` object against the 2025-12-11 `server.json` schema (a
JSON Schema draft-07 document, embedded in `schema_2025_12_11`; the validator class follows its
`$schema`); `validate_response` also checks
the registry envelope (`ServerResponse` of the MCP registry OpenAPI document: `server` plus the
`io.modelcontextprotocol.registry/official` metadata, whose fields are closed). The builder runs
both on every entry it makes, and the tests run them on everything the registry emits.

`jsonschema` only checks `format` when asked to, and its `uri` and `date-time` checkers need
optional packages the runtime does not install; without them `format: uri` would silently pass
anything. The checkers here follow RFC 3986 (an absolute URI, ASCII only, well-formed
%-escapes) and RFC 3339.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime
from functools import cache
from typing import Any

# jsonschema ships no type information and its stubs are not a dependency; the few calls below
# are covered by the unit tests instead.
from jsonschema import (  # type: ignore[import-untyped]
    Draft202012Validator,
    FormatChecker,
    validators,
)

from pallas_runtime.registry.schema_2025_12_11 import SERVER_SCHEMA_JSON

SCHEMA_URL = "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json"
OFFICIAL_META = "io.modelcontextprotocol.registry/official"
STATUSES = ("active", "deprecated", "deleted")

# RFC 3986: scheme ":" then only unreserved, reserved and '%' characters.
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*$")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$",
)

# The envelope of one catalogue entry, from `ServerResponse` in registry-openapi.yaml.
_ENVELOPE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["server"],
    "properties": {
        "server": {"type": "object"},
        "_meta": {
            "type": "object",
            "properties": {
                OFFICIAL_META: {
                    "type": "object",
                    "properties": {
                        "status": {"type": "string", "enum": list(STATUSES)},
                        "statusMessage": {"type": "string", "maxLength": 500},
                        "statusChangedAt": {"type": "string", "format": "date-time"},
                        "publishedAt": {"type": "string", "format": "date-time"},
                        "updatedAt": {"type": "string", "format": "date-time"},
                        "isLatest": {"type": "boolean"},
                    },
                    "additionalProperties": False,
                }
            },
            "additionalProperties": True,
        },
    },
}


class SchemaError(ValueError):
    """A document the official schema refuses; `problems` lists each violation with its path."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = tuple(problems)


def is_uri(value: object) -> bool:
    """Whether `value` is an absolute URI per RFC 3986 (non-strings pass, as JSON Schema wants)."""
    if not isinstance(value, str):
        return True
    return bool(_URI.match(value)) and not _BAD_ESCAPE.search(value)


def is_date_time(value: object) -> bool:
    """Whether `value` is an RFC 3339 date-time with an explicit offset."""
    if not isinstance(value, str):
        return True
    if not _RFC3339.match(value):
        return False
    try:
        datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _format_checker() -> FormatChecker:
    checker = FormatChecker()
    checker.checks("uri")(is_uri)
    checker.checks("date-time")(is_date_time)
    return checker


@cache
def server_schema() -> dict[str, Any]:
    """The 2025-12-11 `server.json` schema as a dict (parsed once)."""
    schema: dict[str, Any] = json.loads(SERVER_SCHEMA_JSON)
    return schema


@cache
def _server_validator() -> Any:
    schema = server_schema()
    # The file declares draft-07 in `$schema`; let that pick the validator rather than assume.
    cls = validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=_format_checker())


@cache
def _envelope_validator() -> Any:
    return Draft202012Validator(_ENVELOPE_SCHEMA, format_checker=_format_checker())


def _problems(validator: Any, document: Any, prefix: str) -> list[str]:
    found = []
    for error in sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path)):
        where = "/".join(str(p) for p in error.absolute_path)
        found.append(f"{prefix}{where or '(root)'}: {error.message}")
    return found


def server_problems(server: Any) -> list[str]:
    """Every violation of the 2025-12-11 schema in `server` (empty when it is valid)."""
    return _problems(_server_validator(), server, "server/")


def validate_server(server: Any) -> None:
    """Check a `server` object against the 2025-12-11 schema.

    Raises:
        SchemaError: naming each violation.
    """
    problems = server_problems(server)
    if problems:
        raise SchemaError(problems)


def validate_response(response: Mapping[str, Any]) -> None:
    """Check one catalogue entry: the `server` object and the registry envelope around it.

    Raises:
        SchemaError: naming each violation.
    """
    problems = _problems(_envelope_validator(), response, "")
    if isinstance(response, Mapping) and "server" in response:
        problems += server_problems(response["server"])
    if problems:
        raise SchemaError(problems)
