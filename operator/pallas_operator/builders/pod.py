"""What every Pallas pod shares: hardening, probes, stopping, rollouts, resources and environment."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pallas_api import names
from pallas_api.pod_memory import memory_quantity
from pallas_api.render import SecretBinding, log_environment, telemetry_environment
from pallas_api.spec import LogLevel, ResourceRequirements, TelemetrySpec

RUN_AS = 65532
"""A fixed non-root uid (distroless `nonroot`), so pods run unprivileged whatever the image says."""
DEFAULT_REQUESTS: dict[str, str] = {"cpu": "100m", "memory": "256Mi"}
"""What an agent pod requests when its spec sets no resources (its limit: `agent_resources`)."""
ENDPOINTS_PAUSE_SECONDS = 5
"""The preStop pause before a stopping pod is signalled. A terminating pod leaves its Service's
endpoints at once, but every node's kube-proxy takes a moment to stop routing new connections
to it (its rule syncs are at least a second apart; measured in docs/operator.md): until the
pause ends, the pod serves as before, so no connection meets a closing listener."""
AFTER_DRAIN_SECONDS = 25
"""What a pod may still need once its drain ran out: interrupted turns kept as failed and
answered (10 s), its sessions closed (5 s), requests still open ending (5 s), and slack."""
REGISTRY_STOP_SECONDS = 10
"""The registry answers short requests only: it stops within a few seconds of its signal."""
REGISTRY_RESOURCES: dict[str, dict[str, str]] = {
    "requests": {"cpu": "50m", "memory": "128Mi"},
    "limits": {"memory": "256Mi"},
}


def pod_security() -> dict[str, Any]:
    """Pod-level security context (restricted Pod Security Standard)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS,
        "runAsGroup": RUN_AS,
        "fsGroup": RUN_AS,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security() -> dict[str, Any]:
    """Container-level security context (restricted Pod Security Standard)."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }


def probes() -> dict[str, Any]:
    """Readiness on /readyz, liveness on /healthz, both on the named HTTP port."""
    port = names.METRICS_PORT_NAME
    return {
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": port},
            "periodSeconds": 5,
            "timeoutSeconds": 3,
            "failureThreshold": 3,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": port},
            "initialDelaySeconds": 5,
            "periodSeconds": 10,
            "timeoutSeconds": 3,
            "failureThreshold": 6,
        },
    }


def rolling_update() -> dict[str, Any]:
    """Rollouts surge before they take a pod away: a new pod is ready before an old one stops."""
    return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


def pre_stop() -> dict[str, Any]:
    """The container's preStop: the kubelet's own sleep action.

    No shell or `sleep` binary in the image is needed, nor a process started in the container;
    the action is on by default since Kubernetes 1.30 (the chart's minimum) and GA in 1.34.
    """
    return {"preStop": {"sleep": {"seconds": ENDPOINTS_PAUSE_SECONDS}}}


def grace_seconds(stop_seconds: int) -> int:
    """`terminationGracePeriodSeconds`: the preStop pause, then what stopping may take."""
    return ENDPOINTS_PAUSE_SECONDS + stop_seconds


def agent_resources(memory_limit: int) -> dict[str, dict[str, str]]:
    """An agent pod's resources when its spec sets none: requests, and a memory limit in bytes.

    No CPU limit: throttling an LLM tool loop helps nobody; memory is the resource that kills,
    and its limit follows the bounds the agent sets on what it keeps (`pallas_api.pod_memory`).
    """
    return {"requests": dict(DEFAULT_REQUESTS), "limits": {"memory": memory_quantity(memory_limit)}}


def resources(
    *choices: ResourceRequirements | None, default: Mapping[str, Mapping[str, str]]
) -> dict[str, dict[str, str]]:
    """The first resources given (agent over deployment), else the defaults."""
    for choice in choices:
        if choice is not None:
            out = {"requests": dict(choice.requests), "limits": dict(choice.limits)}
            return {k: v for k, v in out.items() if v}
    return {kind: dict(values) for kind, values in default.items()}


def log_env(level: LogLevel, *, namespace: str, deployment: str) -> list[dict[str, Any]]:
    """The logging knobs of a Pallas pod as EnvVars (a user's env entry of the same name wins)."""
    values = log_environment(level, namespace=namespace, deployment=deployment)
    return [{"name": name, "value": value} for name, value in values.items()]


def telemetry_env(
    telemetry: TelemetrySpec, *, service: str, namespace: str, deployment: str
) -> list[dict[str, Any]]:
    """`spec.telemetry` as the `OTEL_*` EnvVars of a pod (none without an endpoint)."""
    values = telemetry_environment(telemetry, service=service, namespace=namespace, deployment=deployment)
    return [{"name": name, "value": value} for name, value in values.items()]


def environment(user: Iterable[Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Env lists, later ones overriding earlier by name (ours, then the user's).

    Names are unique in the result: the API server treats `env` as a map keyed by name. No
    secret is an env var: secrets are files of the pod's Secret volume (`secret_volume`).
    """
    merged: dict[str, dict[str, Any]] = {}
    for env_list in user:
        for entry in env_list:
            merged[str(entry["name"])] = dict(entry)
    return list(merged.values())


SECRET_FILE_MODE = 0o440
"""Readable by the owner (root) and the pod's group (`fsGroup`, the uid the process runs as)."""
SECRET_VOLUME = "secrets"


def secret_volume(bindings: Iterable[SecretBinding], mode: int = 0) -> dict[str, Any] | None:
    """The pod's Secret volume: one file per binding, named `binding.env`, holding `binding.ref`.

    A projected volume with one source per Secret and only the keys the process reads, so a
    pod sees no other key of those Secrets. Every source is `optional`: a Secret or key that
    does not exist leaves its file out, the pod starts, and the process reports what is missing
    (`get_health`'s `missingSecrets`) instead of the pod hanging in ContainerCreating. The
    kubelet refreshes the files when a Secret changes (it would not under a subPath mount), and
    the process reads them at each use (`pallas_io.secrets`): a rotation needs no new pod.
    None when the process reads no secret. `mode` replaces the files' mode (`SECRET_FILE_MODE`).
    """
    items: dict[str, list[dict[str, str]]] = {}
    for binding in bindings:
        entry = {"key": binding.ref.key, "path": binding.env}
        if entry not in items.setdefault(binding.ref.name, []):
            items[binding.ref.name].append(entry)
    if not items:
        return None
    sources = [
        {"secret": {"name": name, "items": entries, "optional": True}}
        for name, entries in sorted(items.items())
    ]
    return {"name": SECRET_VOLUME, "projected": {"defaultMode": mode or SECRET_FILE_MODE, "sources": sources}}


def secret_mount() -> dict[str, Any]:
    """Where the Secret volume is mounted: `--secrets-dir` of `pallas agent` and `pallas registry`."""
    return {"name": SECRET_VOLUME, "mountPath": names.SECRETS_DIR, "readOnly": True}
