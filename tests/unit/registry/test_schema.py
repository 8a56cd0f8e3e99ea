"""Our validation path against the upstream schema and its examples."""

from __future__ import annotations

import hashlib
import json
from importlib.resources import files
from typing import Any

import pytest

from pallas_registry.schema import (
    OFFICIAL_META,
    SCHEMA_FILE,
    SchemaError,
    _server_validator,
    is_date_time,
    is_uri,
    server_schema,
    validate_response,
    validate_server,
)
from tests.support.registry import DATA

EXAMPLES = DATA
INVALID = sorted((EXAMPLES / "invalid").glob("*.json"))
VALID = sorted((EXAMPLES / "valid").glob("*.json"))


def load(path: Any) -> Any:
    return json.loads(path.read_text())


def minimal(**changes: Any) -> dict[str, Any]:
    server = {"name": "io.github.user/weather", "description": "Weather.", "version": "1.0.0"}
    server.update(changes)
    return server


def test_packaged_schema_is_the_upstream_file_unchanged() -> None:
    packaged = files("pallas_registry").joinpath("data", SCHEMA_FILE).read_bytes()
    assert (
        hashlib.sha256(packaged).hexdigest()
        == "d4c163f299ece68b7432f4e44c4108f2fdb663d99dc088c8344142e5b0a4b520"
    )  # replace the file, never edit it
    # It is upstream's later revision of 2025-12-11 (only examples added): it keeps every rule
    # of the first publication.
    first = load(DATA / "server.schema.2025-12-11.original.json")
    assert server_schema()["$id"] == first["$id"]
    assert server_schema()["definitions"].keys() == first["definitions"].keys()


def test_the_validator_follows_the_schema_draft() -> None:
    assert server_schema()["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert type(_server_validator()).__name__ == "Draft7Validator"


def test_there_are_examples_of_both_kinds() -> None:
    assert len(INVALID) == 5
    assert len(VALID) == 3


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_valid_examples_pass(path: Any) -> None:
    validate_server(load(path))


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_invalid_examples_are_rejected(path: Any) -> None:
    with pytest.raises(SchemaError) as info:
        validate_server(load(path))
    assert info.value.problems
    assert all(problem.startswith("server/") for problem in info.value.problems)


def test_problems_name_the_field() -> None:
    with pytest.raises(SchemaError, match=r"server/description: .* is too long"):
        validate_server(minimal(description="x" * 101))


@pytest.mark.parametrize(
    "src",
    ["not a uri", "relative/icon.png", "https://exämple.com/i.png", "https://x/%zz.png", "https://x/a b"],
)
def test_icon_src_must_be_an_absolute_uri(src: str) -> None:
    # The schema says `format: uri`; jsonschema skips it unless a checker exists (see schema.py).
    with pytest.raises(SchemaError, match="icons/0/src"):
        validate_server(minimal(icons=[{"src": src}]))


@pytest.mark.parametrize(
    "value",
    [
        "https://example.com/i.png",
        "data:image/png;base64,iVBORw0KGgo=",
        "urn:isbn:0451450523",
        "http://x/%41",
    ],
)
def test_uris_accepted(value: str) -> None:
    assert is_uri(value)


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("2026-11-21T10:00:00Z", True),
        ("2026-11-21T10:00:00.123+02:00", True),
        ("2026-11-21 10:00:00Z", False),
        ("2026-11-21T10:00:00", False),
        ("2026-13-21T10:00:00Z", False),
        ("yesterday", False),
    ],
)
def test_date_time_format(value: str, ok: bool) -> None:
    assert is_date_time(value) is ok


def envelope(**official: Any) -> dict[str, Any]:
    return {"server": minimal(), "_meta": {OFFICIAL_META: {"status": "active", **official}}}


def test_envelope_accepts_the_official_fields_and_vendor_keys() -> None:
    doc = envelope(publishedAt="2026-11-21T10:00:00Z", updatedAt="2026-11-21T10:00:00Z", isLatest=True)
    doc["_meta"]["dev.pallas/agent"] = {"anything": [1, 2]}
    validate_response(doc)


@pytest.mark.parametrize(
    ("official", "where"),
    [
        ({"status": "ready"}, "status"),
        ({"updatedAt": "now"}, "updatedAt"),
        ({"phase": "Ready"}, "Additional properties"),
        ({"statusMessage": "x" * 501}, "statusMessage"),
    ],
)
def test_envelope_rejects_what_the_registry_api_does_not_define(official: dict[str, Any], where: str) -> None:
    with pytest.raises(SchemaError, match=where):
        validate_response(envelope(**official))


def test_envelope_checks_the_server_too() -> None:
    with pytest.raises(SchemaError, match="server/name"):
        validate_response({"server": minimal(name="no-slash")})
