"""Container environment, resolved the way the kubelet does it.

Order and precedence follow kubelet's makeEnvironmentVariables: `envFrom` sources first (later
sources override earlier ones), then `env` entries in order, each literal `value` expanded with
`$(VAR)` against the variables declared so far and the service variables; `valueFrom` values are
never expanded. Command and args are expanded against the final environment. `$$` escapes `$`,
and a reference to an undefined variable is left as written.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol

from devkubelet.kube import Obj, meta


class ConfigError(Exception):
    """The container cannot be configured yet (the kubelet's CreateContainerConfigError)."""


class ObjectSource(Protocol):
    """Reads the ConfigMaps and Secrets a pod refers to (None when absent)."""

    async def config_map(self, namespace: str, name: str) -> Obj | None: ...

    async def secret(self, namespace: str, name: str) -> Obj | None: ...


@dataclass(frozen=True)
class PodContext:
    """What fieldRef and resourceFieldRef can see besides the pod object."""

    pod: Obj
    pod_ip: str
    host_ip: str
    node_allocatable: Mapping[str, str]


def expand(text: str, mapping: Callable[[str], str]) -> str:
    """Kubernetes `$(VAR)` expansion (k8s.io/kubernetes/third_party/forked/golang/expansion)."""
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            read, is_var, advance = _read_variable_name(text[cursor + 1 :])
            out.append(mapping(read) if is_var else read)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + text[checkpoint:]


def _read_variable_name(rest: str) -> tuple[str, bool, int]:
    if rest[0] == "$":  # `$$` is an escaped `$`
        return "$", False, 1
    if rest[0] == "(":
        end = rest.find(")", 1)
        if end != -1:
            return rest[1:end], True, end + 1
        return "$(", False, 1  # unterminated: kept as written
    return "$" + rest[0], False, 1


def mapping_for(*contexts: Mapping[str, str]) -> Callable[[str], str]:
    """A lookup over contexts in order; an unknown name expands to itself, `$(NAME)`."""

    def lookup(name: str) -> str:
        for context in contexts:
            if name in context:
                return context[name]
        return f"$({name})"

    return lookup


def _decode_secret(obj: Obj) -> dict[str, str]:
    return {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in (obj.get("data") or {}).items()}


def _config_map_data(obj: Obj) -> dict[str, str]:
    data = {str(k): str(v) for k, v in (obj.get("data") or {}).items()}
    for k, v in (obj.get("binaryData") or {}).items():
        data[str(k)] = base64.b64decode(v).decode("utf-8", "replace")
    return data


async def container_env(
    container: Obj, ctx: PodContext, objects: ObjectSource, service_env: Mapping[str, str]
) -> dict[str, str]:
    """The container's declared environment plus the service variables it did not override."""
    namespace = str(meta(ctx.pod).get("namespace", "default"))
    declared: dict[str, str] = {}

    for source in container.get("envFrom") or []:
        prefix = str(source.get("prefix", ""))
        if "configMapRef" in source:
            ref, kind = source["configMapRef"], "configmap"
            found = await objects.config_map(namespace, ref["name"])
            values = None if found is None else _config_map_data(found)
        elif "secretRef" in source:
            ref, kind = source["secretRef"], "secret"
            found = await objects.secret(namespace, ref["name"])
            values = None if found is None else _decode_secret(found)
        else:
            raise ConfigError(f"envFrom entry {source} is not supported by the dev kubelet")
        if values is None:
            if ref.get("optional"):
                continue
            raise ConfigError(f'{kind} "{ref["name"]}" not found')
        for key, value in values.items():
            if "=" not in key:  # the only key the kubelet refuses outright
                declared[prefix + key] = value

    for entry in container.get("env") or []:
        name = str(entry["name"])
        if entry.get("value"):
            declared[name] = expand(str(entry["value"]), mapping_for(declared, service_env))
        elif "valueFrom" in entry:
            resolved = await _value_from(entry["valueFrom"], container, ctx, objects, namespace)
            if resolved is None:
                continue  # an optional reference that does not resolve leaves the variable unset
            declared[name] = resolved
        else:
            declared[name] = ""
    return {**{k: v for k, v in service_env.items() if k not in declared}, **declared}


async def _value_from(
    source: Obj, container: Obj, ctx: PodContext, objects: ObjectSource, namespace: str
) -> str | None:
    if "fieldRef" in source:
        return field_value(ctx, str(source["fieldRef"]["fieldPath"]), for_volume=False)
    if "resourceFieldRef" in source:
        return resource_value(ctx, container, source["resourceFieldRef"])
    for key, kind in (("secretKeyRef", "secret"), ("configMapKeyRef", "configmap")):
        if key not in source:
            continue
        ref = source[key]
        optional = bool(ref.get("optional"))
        if kind == "secret":
            found = await objects.secret(namespace, ref["name"])
            data = None if found is None else _decode_secret(found)
        else:
            found = await objects.config_map(namespace, ref["name"])
            data = None if found is None else _config_map_data(found)
        if data is None:
            if optional:
                return None
            raise ConfigError(f'{kind} "{ref["name"]}" not found')
        if ref["key"] not in data:
            if optional:
                return None
            raise ConfigError(
                f"couldn't find key {ref['key']} in {kind.capitalize()} {namespace}/{ref['name']}"
            )
        return data[ref["key"]]
    raise ConfigError(f"valueFrom {source} is not supported by the dev kubelet")


_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def field_value(ctx: PodContext, path: str, *, for_volume: bool) -> str:
    """A downward-API field; whole label/annotation maps only for volumes, as in Kubernetes."""
    pod_meta = meta(ctx.pod)
    spec: Obj = ctx.pod.get("spec") or {}
    simple: dict[str, Any] = {
        "metadata.name": pod_meta.get("name", ""),
        "metadata.namespace": pod_meta.get("namespace", ""),
        "metadata.uid": pod_meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": ctx.pod_ip,
        "status.podIPs": ctx.pod_ip,
        "status.hostIP": ctx.host_ip,
        "status.hostIPs": ctx.host_ip,
    }
    if path in simple:
        return str(simple[path])
    match = _SUBSCRIPT.match(path)
    if match:
        return str((pod_meta.get(match.group(1)) or {}).get(match.group(2), ""))
    if for_volume and path in ("metadata.labels", "metadata.annotations"):
        values = pod_meta.get(path.split(".", 1)[1]) or {}
        return "".join(f"{k}={_go_quote(str(v))}\n" for k, v in sorted(values.items()))
    raise ConfigError(f"fieldRef {path!r} is not supported")


def _go_quote(value: str) -> str:
    """Go's strconv.Quote for the characters labels and annotations realistically hold."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'


_SUFFIXES = {
    "Ki": Decimal(1024),
    "Mi": Decimal(1024**2),
    "Gi": Decimal(1024**3),
    "Ti": Decimal(1024**4),
    "Pi": Decimal(1024**5),
    "Ei": Decimal(1024**6),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}


def quantity(text: str) -> Decimal:
    """A resource.Quantity as a number ("100m" → 0.1, "1Gi" → 1073741824)."""
    text = text.strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix) and suffix != text:
            number = text[: -len(suffix)]
            try:
                return Decimal(number) * _SUFFIXES[suffix]
            except InvalidOperation:
                break
    try:
        return Decimal(text)
    except InvalidOperation:
        raise ConfigError(f"invalid quantity {text!r}") from None


def resource_value(ctx: PodContext, container: Obj, ref: Obj) -> str:
    """resourceFieldRef: the container's limit (node allocatable when unset) or request, ceil'd."""
    resource = str(ref["resource"])
    kind, _, name = resource.partition(".")
    if kind not in ("limits", "requests") or name not in ("cpu", "memory", "ephemeral-storage"):
        raise ConfigError(f"resourceFieldRef {resource!r} is not supported")
    declared = ((container.get("resources") or {}).get(kind) or {}).get(name)
    if declared is None and kind == "limits":
        declared = ctx.node_allocatable.get(name, "0")
    value = quantity(str(declared or "0"))
    divisor = quantity(str(ref.get("divisor") or "1"))
    return str(math.ceil(value / divisor))
