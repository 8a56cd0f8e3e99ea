"""Our validation path: the official schemas, with the formats they name actually checked.

`validate_server` checks a `server` object against the 2025-12-11 `server.json` schema (a
JSON Schema draft-07 document, shipped unchanged as package data in `data/`; the validator class
follows its `$schema`); `validate_response` also checks
the registry envelope (`ServerResponse` of the MCP registry OpenAPI document: `server` plus the
`io.modelcontextprotocol.registry/official` metadata, whose fields are closed). The builder runs
both on every entry it makes, and the tests run them on everything the registry emits.

`jsonschema` only checks `format` when asked to, and its `uri` and `date-time` checkers need the
rfc3986-validator and rfc3339-validator packages, which the project installs (not the
`format-nongpl` extra: its rfc3987-syntax costs seconds at import):
without them `format: uri` would silently pass anything.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from importlib.resources import files
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker, validators

SCHEMA_URL = "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json"
OFFICIAL_META = "io.modelcontextprotocol.registry/official"
STATUSES = ("active", "deprecated", "deleted")

SCHEMA_FILE = "server.schema.2025-12-11.json"
_FORMATS = FormatChecker()
if not {"uri", "date-time"} <= set(_FORMATS.checkers):  # both validators are dependencies
    raise ImportError(
        "jsonschema cannot check uri and date-time: install rfc3986-validator and rfc3339-validator"
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
    return _FORMATS.conforms(value, "uri")


def is_date_time(value: object) -> bool:
    """Whether `value` is an RFC 3339 date-time with an explicit offset."""
    return _FORMATS.conforms(value, "date-time")


@cache
def server_schema() -> dict[str, Any]:
    """The 2025-12-11 `server.json` schema as a dict (parsed once)."""
    text = files("pallas_registry").joinpath("data", SCHEMA_FILE).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def _server_validator() -> Any:
    schema = server_schema()
    # The file declares draft-07 in `$schema`; let that pick the validator rather than assume.
    cls = validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=_FORMATS)


@cache
def _envelope_validator() -> Any:
    return Draft202012Validator(_ENVELOPE_SCHEMA, format_checker=_FORMATS)


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
