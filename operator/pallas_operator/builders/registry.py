"""A deployment's registry: the catalogue Deployment and Service, and its read-only RBAC."""

from __future__ import annotations

from pallas_api import names
from pallas_api.config import HTTP_LIMIT_FLAGS
from pallas_api.render import log_level, provider_key_bindings
from pallas_api.spec import DEFAULT_NODE_FAILURE_SECONDS, PallasDeploymentSpec
from pallas_operator.builders.meta import Manifest, Owner, metadata, registry_labels, registry_selector
from pallas_operator.builders.pod import (
    REGISTRY_RESOURCES,
    REGISTRY_STOP_SECONDS,
    container_security,
    environment,
    grace_seconds,
    log_env,
    pod_security,
    pre_stop,
    probes,
    resources,
    rolling_update,
    secret_mount,
    secret_volume,
    telemetry_env,
)
from pallas_operator.builders.scheduling import spread_constraints, tolerations

REGISTRY_REPLICAS = 1
"""The registry runs one pod, which its Deployment replaces (after
`runtime.nodeFailureTolerationSeconds` when its node fails); with more, `spread_constraints`
would spread them over nodes as an agent's."""


def registry_deployment(
    owner: Owner,
    spec: PallasDeploymentSpec,
    default_image: str,
    node_failure_seconds: int = DEFAULT_NODE_FAILURE_SECONDS,
) -> Manifest:
    """The Deployment running `pallas registry` for this PallasDeployment's namespace.

    It rolls out surging first and stops after the preStop pause, like an agent. Its pod gets
    every provider key as a file of its Secret volume, for the registry's provider checks
    (optional sources: a missing Secret must not keep the catalogue down; the check then says
    the key is not set). The registry reads the files at every check, so a rotated key is
    checked without a restart.

    It tolerates a failed node as long as the agents do (the deployment's
    `runtime.nodeFailureTolerationSeconds`, else `node_failure_seconds`).
    """
    keys = provider_key_bindings(spec)
    name = names.registry_name(owner.name)
    labels = registry_labels(owner.name)
    port = spec.registry.port
    mounts: list[dict[str, object]] = [{"name": "tmp", "mountPath": "/tmp"}]
    volumes: list[dict[str, object]] = [{"name": "tmp", "emptyDir": {}}]
    if (secrets := secret_volume(keys)) is not None:
        mounts.append(secret_mount())
        volumes.append(secrets)
    container = {
        "name": "registry",
        "image": spec.runtime.image or default_image,
        "command": [
            "pallas",
            "registry",
            "--namespace",
            owner.namespace,
            "--deployment",
            owner.name,
            "--port",
            str(port),
            "--secrets-dir",
            names.SECRETS_DIR,
            *http_limit_args(spec),
        ],
        "ports": [{"name": names.METRICS_PORT_NAME, "containerPort": port, "protocol": "TCP"}],
        "env": environment(
            [
                log_env(log_level(spec), namespace=owner.namespace, deployment=owner.name),
                telemetry_env(spec.telemetry, service=name, namespace=owner.namespace, deployment=owner.name),
            ]
        ),
        "resources": resources(default=REGISTRY_RESOURCES),
        "securityContext": container_security(),
        "volumeMounts": mounts,
        "lifecycle": pre_stop(),
        **probes(),
    }
    chosen = spec.runtime.node_failure_toleration_seconds
    pod_spec: dict[str, object] = {
        "serviceAccountName": name,
        "securityContext": pod_security(),
        "terminationGracePeriodSeconds": grace_seconds(REGISTRY_STOP_SECONDS),
        "containers": [container],
        "volumes": volumes,
        "tolerations": tolerations([], node_failure_seconds if chosen is None else chosen),
    }
    if spread := spread_constraints(None, REGISTRY_REPLICAS, registry_selector(owner.name)):
        pod_spec["topologySpreadConstraints"] = spread
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(name, owner, labels),
        "spec": {
            "replicas": REGISTRY_REPLICAS,
            "revisionHistoryLimit": 3,
            "strategy": rolling_update(),
            "selector": {"matchLabels": registry_selector(owner.name)},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def http_limit_args(spec: PallasDeploymentSpec) -> list[str]:
    """`pallas registry` flags setting its listener's limits to the deployment's `spec.http`."""
    limits = spec.http
    return [f"{HTTP_LIMIT_FLAGS[field][0]}={getattr(limits, field):g}" for field in HTTP_LIMIT_FLAGS]


def registry_service(owner: Owner, spec: PallasDeploymentSpec) -> Manifest:
    """The Service clients find the catalogue at."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(names.registry_name(owner.name), owner, registry_labels(owner.name)),
        "spec": {
            "type": "ClusterIP",
            "selector": registry_selector(owner.name),
            "ports": [
                {
                    "name": names.METRICS_PORT_NAME,
                    "port": spec.registry.port,
                    "targetPort": names.METRICS_PORT_NAME,
                    "protocol": "TCP",
                }
            ],
        },
    }


def registry_service_account(owner: Owner) -> Manifest:
    """The identity of the registry pods."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(names.registry_name(owner.name), owner, registry_labels(owner.name)),
    }


def registry_role(owner: Owner) -> Manifest:
    """Read-only access to the PallasAgents (and PallasDeployments) of this namespace, nothing else.

    The registry builds its catalogue from agent status and publishes the deployment's version,
    name prefix and model capabilities, so it reads both kinds; never Secrets, never writes.
    """
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(names.registry_name(owner.name), owner, registry_labels(owner.name)),
        "rules": [
            {
                "apiGroups": [names.GROUP],
                "resources": [names.AGENT_PLURAL, names.DEPLOYMENT_PLURAL],
                "verbs": ["get", "list", "watch"],
            }
        ],
    }


def registry_role_binding(owner: Owner) -> Manifest:
    """Binds the registry's Role to its ServiceAccount."""
    name = names.registry_name(owner.name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(name, owner, registry_labels(owner.name)),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": owner.namespace}],
    }


def registry_children(
    owner: Owner,
    spec: PallasDeploymentSpec,
    default_image: str,
    node_failure_seconds: int = DEFAULT_NODE_FAILURE_SECONDS,
) -> list[Manifest]:
    """Every registry object, in an order that lets each find what it needs already there."""
    return [
        registry_service_account(owner),
        registry_role(owner),
        registry_role_binding(owner),
        registry_service(owner, spec),
        registry_deployment(owner, spec, default_image, node_failure_seconds),
    ]
