"""An agent's workload: its Deployment, Service and (with more than one replica) PodDisruptionBudget."""

from __future__ import annotations

from dataclasses import dataclass

from pallas_api import names
from pallas_api.pod_memory import agent_memory_bytes
from pallas_api.render import SecretBinding, drain_seconds, log_level
from pallas_api.spec import DEFAULT_NODE_FAILURE_SECONDS, PallasAgentSpec, PallasDeploymentSpec
from pallas_operator.builders.meta import Manifest, Owner, agent_labels, agent_selector, metadata
from pallas_operator.builders.pod import (
    AFTER_DRAIN_SECONDS,
    agent_resources,
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


@dataclass(frozen=True, slots=True)
class AgentWorkload:
    """Everything the agent's Deployment is built from."""

    owner: Owner
    deployment_name: str
    agent: PallasAgentSpec
    deployment: PallasDeploymentSpec
    secrets: tuple[SecretBinding, ...]
    config_hash: str
    """sha256 of the part of the config a running process cannot take
    (`pallas_api.live.process_digest`): the pods roll only when it changes."""
    default_image: str
    node_failure_seconds: int = DEFAULT_NODE_FAILURE_SECONDS
    """The operator's `--node-failure-toleration-seconds`, unless the deployment's
    `runtime.nodeFailureTolerationSeconds` says otherwise."""


def allowed_host_args(w: AgentWorkload) -> list[str]:
    """`--allowed-host` for each name clients use: the agent's Service DNS names and public host.

    The agent rejects other Host headers (DNS-rebinding protection). Addresses of the pod itself
    are always accepted, so probes and scrapes by pod IP keep working.
    """
    hosts = names.service_hosts(w.owner.name, w.owner.namespace)
    template = w.deployment.registry.public_url_template
    public = names.public_host(template, w.owner.name, w.owner.namespace, w.deployment_name)
    if public and public not in hosts:
        hosts.append(public)
    return [arg for host in hosts for arg in ("--allowed-host", host)]


def agent_log_env(w: AgentWorkload) -> list[dict[str, object]]:
    """JSON lines at the agent's `logLevel` (else the deployment's), naming agent and deployment."""
    level = log_level(w.deployment, w.agent)
    return log_env(level, namespace=w.owner.namespace, deployment=w.deployment_name)


def toleration_seconds(w: AgentWorkload) -> int:
    """How long the agent's pods stay on a node that stopped reporting: the deployment's, else ours."""
    chosen = w.deployment.runtime.node_failure_toleration_seconds
    return w.node_failure_seconds if chosen is None else chosen


def scaled(w: AgentWorkload) -> bool:
    """Whether the scaling loop sizes the agent (its `scaling` or its deployment's applies).

    Then its Deployment is applied without `replicas`: the loop's own field manager owns them
    (`names.SCALING_FIELD_MANAGER`), so the two never take the field from each other.
    """
    return w.agent.scaling_with(w.deployment.scaling) is not None


def agent_deployment(w: AgentWorkload) -> Manifest:
    """The Deployment running `pallas agent` with its ConfigMap and its Secret volume mounted.

    Both volumes are mounted whole (never by subPath), so the kubelet updates them in place and
    the agent takes a changed config or a rotated secret without a new pod (`agent.live`).

    A stopping pod drains (docs/runtime.md): after the preStop pause (kube-proxy forgets it) the
    agent gets SIGTERM, lets its turns in flight finish for `drainSeconds`, and the grace period
    covers both plus what an interrupted turn needs. Rollouts surge first.

    Under `scaling` it carries no `replicas` (`scaled`): the scaling loop sets them.

    Losing a node (`builders.scheduling`): replicas spread over nodes unless the spec says how,
    and a failed node's pods are evicted after `toleration_seconds`.
    """
    labels = agent_labels(w.owner.name, w.deployment_name)
    port = w.agent.service.port
    mounts: list[dict[str, object]] = [
        {"name": "config", "mountPath": names.CONFIG_DIR, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    volumes: list[dict[str, object]] = [
        {"name": "config", "configMap": {"name": names.config_map_name(w.owner.name)}},
        {"name": "tmp", "emptyDir": {}},
    ]
    if (secrets := secret_volume(w.secrets)) is not None:
        mounts.append(secret_mount())
        volumes.append(secrets)
    container = {
        "name": "agent",
        "image": w.deployment.runtime.image or w.default_image,
        "command": [
            "pallas",
            "agent",
            "--config",
            f"{names.CONFIG_DIR}/{names.CONFIG_FILE}",
            "--port",
            str(port),
            "--secrets-dir",
            names.SECRETS_DIR,
            *allowed_host_args(w),
        ],
        "ports": [{"name": names.METRICS_PORT_NAME, "containerPort": port, "protocol": "TCP"}],
        "env": environment(
            [
                agent_log_env(w),
                telemetry_env(
                    w.deployment.telemetry,
                    service=w.owner.name,
                    namespace=w.owner.namespace,
                    deployment=w.deployment_name,
                ),
                w.deployment.runtime.env,
                w.agent.pod.env,
            ]
        ),
        "resources": resources(
            w.agent.pod.resources,
            w.deployment.runtime.resources,
            default=agent_resources(agent_memory_bytes(w.agent)),
        ),
        "securityContext": container_security(),
        "volumeMounts": mounts,
        "lifecycle": pre_stop(),
        **probes(),
    }
    kubernetes_auth = w.deployment.auth.mode == "kubernetes"
    own_identity = kubernetes_auth or bool(w.deployment.runtime.service_account.annotations)
    pod_spec: dict[str, object] = {
        # No API credentials unless the agent checks callers (auth.mode kubernetes): then it runs
        # as the deployment's agents ServiceAccount, allowed token and access reviews only. It
        # runs as that ServiceAccount, without its token, when the account carries a cloud
        # identity (IRSA and the like inject their own credentials). The name is always set:
        # dropping it would leave the API server's deprecated alias `serviceAccount` behind, and
        # the pods on an identity that may no longer exist.
        "serviceAccountName": names.agents_service_account(w.deployment_name) if own_identity else "default",
        "automountServiceAccountToken": kubernetes_auth,
        "securityContext": pod_security(),
        "terminationGracePeriodSeconds": grace_seconds(
            drain_seconds(w.deployment, w.agent) + AFTER_DRAIN_SECONDS
        ),
        "containers": [container],
        "volumes": volumes,
    }
    if w.agent.pod.node_selector:
        pod_spec["nodeSelector"] = dict(w.agent.pod.node_selector)
    pod_spec["tolerations"] = tolerations(w.agent.pod.tolerations, toleration_seconds(w))
    if spread := spread_constraints(
        w.agent.pod.topology_spread_constraints, w.agent.fixed_replicas, agent_selector(w.owner.name)
    ):
        pod_spec["topologySpreadConstraints"] = spread
    spec: dict[str, object] = {} if scaled(w) else {"replicas": w.agent.fixed_replicas}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(w.owner.name, w.owner, labels),
        "spec": {
            **spec,
            "revisionHistoryLimit": 3,
            "strategy": rolling_update(),
            "selector": {"matchLabels": agent_selector(w.owner.name)},
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {**w.agent.pod.annotations, names.ANNOTATION_CONFIG_HASH: w.config_hash},
                },
                "spec": pod_spec,
            },
        },
    }


def agent_service(owner: Owner, deployment_name: str, agent: PallasAgentSpec) -> Manifest:
    """The Service in front of the agent's pods; ClientIP affinity keeps MCP sessions on one pod."""
    spec: dict[str, object] = {
        "type": "ClusterIP",
        "selector": agent_selector(owner.name),
        "ports": [
            {
                "name": names.METRICS_PORT_NAME,
                "port": agent.service.port,
                "targetPort": names.METRICS_PORT_NAME,
                "protocol": "TCP",
            }
        ],
        "sessionAffinity": agent.service.session_affinity,
    }
    if agent.service.session_affinity == "ClientIP":
        # Set explicitly so the field is ours: switching to None then removes it (the API server
        # refuses a sessionAffinityConfig next to sessionAffinity None).
        spec["sessionAffinityConfig"] = {"clientIP": {"timeoutSeconds": 10800}}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(owner.name, owner, agent_labels(owner.name, deployment_name)),
        "spec": spec,
    }


def agent_disruption_budget(owner: Owner, deployment_name: str, agent: PallasAgentSpec) -> Manifest | None:
    """At most one pod evicted at a time, with more than one replica.

    None for a single pod: a PDB there would block node drains forever. Evictions are the one
    way a pod goes before its successor is ready (rollouts surge first, `rolling_update`); each
    evicted pod still drains.
    """
    if agent.fixed_replicas <= 1:
        return None
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(owner.name, owner, agent_labels(owner.name, deployment_name)),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": agent_selector(owner.name)}},
    }
