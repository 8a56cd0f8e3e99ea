"""Pydantic JSON Schema → Kubernetes structural OpenAPI v3 schema.

Kubernetes accepts a subset of JSON Schema, and insists on it being *structural*: every node has
a type, no `$ref`, no `anyOf` at the type level, `additionalProperties` only as a schema for maps.
Pydantic emits JSON Schema 2020-12 with `$defs`, `anyOf: [X, null]` for optionals and numeric
`exclusiveMinimum`. This module rewrites one into the other and refuses what it cannot express,
so a model change that the CRD could not carry fails the generator instead of the cluster.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

# The formats the API server knows (k8s.io/kube-openapi `strfmt` defaults); others are dropped.
_KNOWN_FORMATS = frozenset(
    {"int32", "int64", "float", "double", "byte", "date", "date-time", "password", "uri", "email",
     "hostname", "ipv4", "ipv6", "cidr", "mac", "uuid", "duration"}
)  # fmt: skip
# Keywords copied as they are.
_KEPT = (
    "type", "description", "enum", "pattern", "maxLength", "minLength", "maximum", "minimum",
    "maxItems", "minItems", "maxProperties", "minProperties", "required", "nullable",
    "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-validations",
    "x-kubernetes-preserve-unknown-fields", "x-kubernetes-map-type",
)  # fmt: skip
_IGNORED = frozenset({"title", "additionalProperties", "properties", "items", "default", "format"})
_IGNORED |= {"anyOf", "$ref", "exclusiveMinimum", "exclusiveMaximum", "const", "$defs"}


class SchemaError(ValueError):
    """A model uses something a structural schema cannot express."""


def structural_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of `model` (camelCase names, as users write them)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return _convert(raw, raw.get("$defs", {}), model.__name__)


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Inline a `$ref` (and unwrap `anyOf: [X, null]`), keeping the referring node's own keywords."""
    node = dict(node)
    if "$ref" in node:
        target = defs[node.pop("$ref").rsplit("/", 1)[-1]]
        node = {**_resolve(target, defs), **node}
    if "anyOf" in node:
        options = node.pop("anyOf")
        real = [o for o in options if o != {"type": "null"}]
        if len(real) != 1:
            raise SchemaError(f"anyOf with {len(real)} non-null alternatives cannot be structural")
        inner = _resolve(real[0], defs)
        node = {**inner, **node, "nullable": True} if len(real) < len(options) else {**inner, **node}
    return node


def _convert(node: dict[str, Any], defs: dict[str, Any], where: str) -> dict[str, Any]:
    node = _resolve(node, defs)
    unknown = set(node) - _IGNORED - set(_KEPT)
    if unknown:
        raise SchemaError(f"{where}: unsupported JSON Schema keywords {sorted(unknown)}")
    if "type" not in node and "const" not in node:
        raise SchemaError(f"{where}: no type")
    out = {key: node[key] for key in _KEPT if key in node}
    if "const" in node:
        out.setdefault("type", "string")
        out["enum"] = [node["const"]]
    if node.get("format") in _KNOWN_FORMATS:
        out["format"] = node["format"]
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if bound in node:
            out[limit] = node[bound]
            out[bound] = True
    if "properties" in node:
        out["properties"] = {
            name: _convert(child, defs, f"{where}.{name}") for name, child in node["properties"].items()
        }
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        out["additionalProperties"] = _convert(extra, defs, f"{where}.*")
    elif extra is True and not out.get("x-kubernetes-preserve-unknown-fields"):
        raise SchemaError(f"{where}: free-form objects need x-kubernetes-preserve-unknown-fields")
    if "items" in node:
        out["items"] = _convert(node["items"], defs, f"{where}[]")
    if "default" in node:
        default = _default(node["default"], out)
        if default is not None:
            out["default"] = default
    return out


def _default(value: Any, schema: dict[str, Any]) -> Any:
    """The default the API server should apply, or None for none.

    Nested objects default to `{}`: the API server then applies each field's own default, which
    is what the model's default instance holds (checked by the CRD tests). Empty lists and maps
    are left out: absent and empty mean the same, and stored objects stay short.
    """
    if value is None:
        return None
    if schema.get("type") == "object" and "properties" in schema:
        return {}
    if value in ([], {}):
        return None
    return value
