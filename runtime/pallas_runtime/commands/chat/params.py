"""`/set KEY VALUE` of `pallas chat`: per-call LLM parameters, checked here before they are sent.

The keys and their bounds are `pallas_api.config.RequestParams` (the manifests' `requestParams`),
so a bad key or value is refused at once, naming it. A value is read as JSON when it parses
(`0.2`, `["END"]`, `null`), else taken as a string; `null` unsets the key. The parameters travel
as `send_message`'s `params` argument, under the names the agent's tool schema uses, and only
when the schema has that argument: an agent without it is told nothing, and `/set` says so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from pallas_api.config import RequestParams
from pallas_api.validation import describe

PARAMS_ARGUMENT = "params"


class ParamsError(ValueError):
    """A key or value `/set` refuses; the text names it."""


def _field_names() -> dict[str, str]:
    """Every accepted spelling (snake_case field, camelCase alias) -> the field name."""
    names = {}
    for name, info in RequestParams.model_fields.items():
        names[name] = name
        if info.alias:
            names[info.alias] = name
    return names


def known_keys() -> list[str]:
    """The parameter names `/set` takes (snake_case)."""
    return list(RequestParams.model_fields)


def parse_value(raw: str) -> Any:
    """`raw` as JSON when it parses, else the string itself."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def checked(key: str, raw: str) -> tuple[str, Any]:
    """The field name and the validated value of `/set key raw` (None: unset the key).

    Raises:
        ParamsError: an unknown key or a value out of bounds (the text names the key).
    """
    name = _field_names().get(key)
    if name is None:
        raise ParamsError(f"unknown parameter {key!r}; the parameters are {', '.join(known_keys())}")
    value = parse_value(raw)
    if value is None:
        return name, None
    try:
        params = RequestParams.model_validate({name: value})
    except ValidationError as exc:
        raise ParamsError(describe(exc, limit=1)) from None
    return name, getattr(params, name)


def _properties(schema: Mapping[str, Any], root: Mapping[str, Any]) -> set[str]:
    """The property names of an object schema, through `$ref`s and `anyOf`/`oneOf` branches."""
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, Mapping) else {}
        return _properties(target, root) if isinstance(target, Mapping) else set()
    names = set(schema.get("properties") or {})
    for branch in [*(schema.get("anyOf") or []), *(schema.get("oneOf") or [])]:
        if isinstance(branch, Mapping):
            names |= _properties(branch, root)
    return names


def accepted_params(input_schema: Mapping[str, Any] | None) -> set[str] | None:
    """The names `send_message`'s `params` argument lists (possibly none); None: no such argument."""
    if not input_schema:
        return None
    argument = (input_schema.get("properties") or {}).get(PARAMS_ARGUMENT)
    if not isinstance(argument, Mapping):
        return None
    return _properties(argument, input_schema)


def wire_params(values: Mapping[str, Any], accepted: set[str]) -> dict[str, Any]:
    """`values` (field names) under the names the agent's schema uses.

    A parameter goes by its camelCase alias when the schema lists that spelling and not the
    field name, else by the field name.
    """
    wire = {}
    for name, value in values.items():
        alias = RequestParams.model_fields[name].alias
        wire[alias if alias and alias in accepted and name not in accepted else name] = value
    return wire
