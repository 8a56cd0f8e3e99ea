"""The values of the Helm chart `charts/pallas`, as pydantic models: the one source of truth.

`hack/generate/chart` writes `charts/pallas/values.yaml` (defaults, with every docstring as a
helm-docs `# --` comment) and `charts/pallas/values.schema.json` (what Helm enforces on install,
upgrade, template and lint) from these models. Edit here, run `hack/generate/chart`, commit both;
`make verify` fails when they differ.

Free-form Kubernetes objects (resources, affinity, securityContext…) are plain mappings: the API
server validates them, and copying their schemas in here would only pin one Kubernetes version.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pallas_api.fields import HttpLimits
from pallas_api.names import API_GROUP, DNS_LABEL, DNS_LABEL_FORM
from pallas_api.spec import DURATION
from pallas_api.wire import camel_config

OPTIONAL_DNS_LABEL = f"^({DNS_LABEL_FORM})?$"


class Values(BaseModel):
    """A block of values: camelCase keys, no unknown keys (a typo fails `helm install`)."""

    model_config = camel_config(extra="forbid", frozen=False)


class Crds(Values):
    enabled: bool = True
    """Install the PallasDeployment and PallasAgent CRDs with the chart. Turn off when the CRDs
    are managed elsewhere (`kubectl apply -f crds/`, another release of this chart)."""
    keep: bool = True
    """Keep the CRDs on `helm uninstall` (annotation `helm.sh/resource-policy: keep`). Deleting a
    CRD deletes every PallasDeployment and PallasAgent in the cluster, and with them every agent."""


class Image(Values):
    repository: str = Field(default="pallas", min_length=1)
    """Image repository of the `pallas` image (the repository's Dockerfile). Push it to a registry
    your nodes can pull from and set this, e.g. `registry.example.com/pallas`."""
    tag: str = ""
    """Image tag; empty means the chart's appVersion."""
    digest: str = Field(default="", pattern=r"^(sha256:[a-f0-9]{64})?$")
    """Image digest (`sha256:…`); when set it pins the image and is appended to the tag."""
    pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    """Image pull policy of the operator container."""


class LocalObjectReference(Values):
    name: str = Field(min_length=1)
    """Name of a `kubernetes.io/dockerconfigjson` Secret in the release namespace."""


class LeaderElection(Values):
    namespace: str = Field(default="", pattern=OPTIONAL_DNS_LABEL)
    """Namespace of the leader-election Lease (`pallas-operator`); empty means the release
    namespace. Only the replica holding the Lease reconciles; the others wait as standbys."""


class Rbac(Values):
    create: bool = True
    """Create the operator's Roles/ClusterRoles and bindings. Off: bind the ServiceAccount
    yourself to the rules in `templates/_rbac-rules.tpl` (docs/helm.md lists them)."""
    scope: Literal["cluster", "namespace"] = "cluster"
    """`cluster`: one ClusterRole and ClusterRoleBinding; the operator watches every namespace,
    or only `watchNamespaces` when set. `namespace`: a Role and RoleBinding in each of
    `watchNamespaces` (which must exist, and must not be empty); the one cluster-wide grant is
    reading Namespace objects, which kopf lists when it is given namespaces by name."""
    aggregate_roles: bool = True
    """Install the ClusterRoles `pallas-view` (read PallasDeployments and PallasAgents) and
    `pallas-edit` (also write them and `invoke` agents), aggregated into the built-in `view`,
    `edit` and `admin` roles. Their names are fixed: one release per cluster installs them."""


class ServiceAccount(Values):
    create: bool = True
    """Create the operator's ServiceAccount."""
    name: str = ""
    """Name of the ServiceAccount; empty means `<fullname>-operator`. With `create: false` it
    must exist already."""
    annotations: dict[str, str] = {}
    """Annotations on the ServiceAccount (e.g. a cloud IAM role binding)."""
    labels: dict[str, str] = {}
    """Extra labels on the ServiceAccount."""
    automount_service_account_token: bool = True
    """Mount the ServiceAccount token: the operator authenticates to the API server with it."""


class MetricsService(Values):
    annotations: dict[str, str] = {}
    """Annotations on the metrics Service."""


class ServiceMonitor(Values):
    enabled: bool = False
    """Create a Prometheus Operator ServiceMonitor for the operator's `/metrics` (needs the
    `monitoring.coreos.com` CRDs)."""
    interval: str = Field(default="30s", pattern=DURATION)
    """Scrape interval."""
    scrape_timeout: str = Field(default="10s", pattern=DURATION)
    """Scrape timeout; must not exceed the interval."""
    labels: dict[str, str] = {}
    """Extra labels, e.g. the `release` label your Prometheus selects ServiceMonitors by."""
    annotations: dict[str, str] = {}
    """Annotations on the ServiceMonitor."""


class Metrics(Values):
    port: int = Field(default=8080, ge=1, le=65535)
    """Port of the operator's `/healthz`, `/readyz` and `/metrics` (`--http-port`)."""
    service: MetricsService = MetricsService()
    """The ClusterIP Service in front of the metrics port (always created)."""
    service_monitor: ServiceMonitor = ServiceMonitor()
    """Prometheus Operator scraping of the operator."""
    limits: HttpLimits = HttpLimits()
    """Bounds on every request the port reads, before routing (docs/api.md §3 "Request limits";
    `--max-head-bytes`, `--max-headers`, `--head-timeout`, `--keep-alive`). These routes take no
    request body: one that announces a body gets 413."""


AlertName = Literal[
    "PallasProcessDown",
    "PallasLLMProviderUnreachable",
    "PallasDownstreamUnreachable",
    "PallasAgentErrorRateHigh",
    "PallasAgentLatencyHigh",
    "PallasTokenBurnHigh",
    "PallasTriggerFailing",
]
"""The alerts of `files/rules/pallas-alerts.yaml` (a unit test keeps the two equal)."""
PROMETHEUS_DURATION = r"^([0-9]+(ms|s|m|h|d|w|y))+$"


class PrometheusRule(Values):
    enabled: bool = False
    """Create a PrometheusRule with Pallas's recording and alerting rules
    (`files/rules/pallas-alerts.yaml`: process down, LLM provider and downstream MCP servers
    unreachable, error rate, latency, token burn, failing PallasTriggers)."""
    namespace: str = Field(default="", pattern=OPTIONAL_DNS_LABEL)
    """Namespace of the PrometheusRule; empty means the release namespace."""
    labels: dict[str, str] = {}
    """Extra labels, e.g. the `release` label your Prometheus selects rules by."""
    annotations: dict[str, str] = {}
    """Annotations on the PrometheusRule."""
    alert_for: dict[AlertName, Annotated[str, Field(pattern=PROMETHEUS_DURATION)]] = {}
    """How long an alert's condition must hold before it fires, by alert name, in place of the
    rule file's `for` (e.g. `{PallasAgentErrorRateHigh: 15m}`); `0s` fires on the first
    evaluation. Alerts not named keep the file's."""


class Dashboards(Values):
    enabled: bool = False
    """Create a ConfigMap holding the Grafana dashboards of `files/dashboards/`, labelled for
    the Grafana dashboard sidecar (kube-prometheus-stack, the grafana chart)."""
    namespace: str = Field(default="", pattern=OPTIONAL_DNS_LABEL)
    """Namespace of the ConfigMap (where the sidecar looks); empty means the release namespace."""
    label: str = Field(default="grafana_dashboard", min_length=1)
    """Label the sidecar selects dashboards by (its `sidecar.dashboards.label`)."""
    label_value: str = "1"
    """Value of that label (its `sidecar.dashboards.labelValue`)."""
    labels: dict[str, str] = {}
    """Extra labels on the ConfigMap."""
    annotations: dict[str, str] = {}
    """Annotations on the ConfigMap, e.g. `grafana_folder: Pallas` for the sidecar's folder
    annotation."""


class PodDisruptionBudget(Values):
    enabled: bool = False
    """Create a PodDisruptionBudget even with one replica (it is always created when
    `replicaCount` > 1). With one replica and `minAvailable: 1` it blocks node drains."""
    min_available: int | str | None = Field(default=1, examples=[1, "50%"])
    """Minimum available operator pods (a number or a percentage)."""
    max_unavailable: int | str | None = Field(default=None, examples=[1])
    """Maximum unavailable operator pods; when set it replaces `minAvailable`."""


class InUseProtection(Values):
    enabled: bool = True
    """Install the ValidatingAdmissionPolicy that refuses to delete a PallasDeployment its agents
    use, or to remove a provider or MCP server from it that an agent uses, unless the object is
    annotated `pallas.dev/force: "true"` (docs/operator.md, "In-use protection"). Deletions in a
    namespace being deleted always pass."""


class Probe(Values):
    enabled: bool = True
    """Define the probe."""
    initial_delay_seconds: int = Field(default=0, ge=0)
    """Seconds before the first probe."""
    period_seconds: int = Field(default=10, ge=1)
    """Seconds between probes."""
    timeout_seconds: int = Field(default=5, ge=1)
    """Seconds a probe may take."""
    failure_threshold: int = Field(default=3, ge=1)
    """Consecutive failures before the probe counts as failed."""


class EventKindValue(Values):
    # Never core Secrets: a watch would hand the operator (and a trigger's message, and so an
    # LLM) every value, where the operator holds no right on Secrets at all (docs/operator.md).
    model_config = ConfigDict(
        **Values.model_config,
        json_schema_extra={
            "not": {"properties": {"apiGroup": {"const": ""}, "resource": {"const": "secrets"}}},
        },
    )

    api_group: str = Field(default="", pattern=API_GROUP)
    """API group of the kind: `""` (the default: `--set` cannot give an empty string) for the core
    group (Pods, Services), `apps`, `batch`…"""
    resource: str = Field(pattern=DNS_LABEL)
    """The kind's resource (its plural, lower case): `pods`, `deployments`, `jobs`."""


class Triggers(Values):
    event_kinds: list[EventKindValue] = Field(
        default=[],
        examples=[[{"apiGroup": "", "resource": "pods"}, {"apiGroup": "apps", "resource": "deployments"}]],
    )
    """Kinds PallasTriggers may watch for events (`spec.event`), e.g. `[{apiGroup: "", resource:
    pods}]`; never core `secrets` (refused: a watch would hand the operator every value). Each
    entry adds `list` and `watch` on that resource to the operator's rules (its ClusterRole, or
    its Role in each of `watchNamespaces`) and `--event-kind` to its arguments; a trigger on a
    kind not listed is not accepted (`EventKindNotAllowed`, naming the entry to add). Namespaced
    kinds only. Empty: no event trigger runs, and the operator reads nothing more."""


class Telemetry(Values):
    endpoint: str = Field(
        default="", pattern=r"^(https?://[^\s@]+)?$", examples=["http://otel-collector.observability:4318"]
    )
    """OTLP/HTTP receiver (a collector, Jaeger, Tempo…) for the operator's own traces and, as the
    default `spec.telemetry`, for every PallasDeployment that names no endpoint of its own: its
    agents and registry (docs/api.md, Traces). Empty: no traces unless a deployment asks."""
    sample_ratio: float = Field(default=1.0, ge=0, le=1)
    """Share of the traces started in each process that are kept (parent-based)."""
    capture_content: bool = False
    """Prompts, answers and tool arguments on the agents' spans (the deployments defaulted here)."""


class ChartValues(Values):
    """Values of the `pallas` chart."""

    model_config = ConfigDict(
        json_schema_extra={
            "if": {
                "properties": {"rbac": {"properties": {"scope": {"const": "namespace"}}}},
                "required": ["rbac"],
            },
            "then": {"properties": {"watchNamespaces": {"minItems": 1}}},
        }
    )

    global_: dict[str, Any] = Field(default={}, alias="global")
    """Global values a parent chart passes down; unused by this chart."""
    name_override: str = ""
    """Replaces the chart name (`pallas`) in object names and the `app.kubernetes.io/name`
    label."""
    full_name_override: str = Field(default="", alias="fullnameOverride")
    """Replaces the whole `<release>-<chart>` prefix of object names."""

    crds: Crds = Crds()
    """The custom resource definitions."""

    image: Image = Image()
    """The `pallas` image the operator runs (and, by default, every agent and registry pod)."""
    image_pull_secrets: list[LocalObjectReference] = []
    """Secrets for pulling the image from a private registry, e.g. `[{name: regcred}]`."""
    runtime_image: str = ""
    """Image of agent and registry pods (`--runtime-image`) unless a PallasDeployment sets
    `spec.runtime.image`; empty means the operator's own image above."""

    replica_count: int = Field(default=1, ge=0)
    """Operator replicas. One leads (holds the Lease) and reconciles; the others are hot
    standbys that take over within the Lease duration (30 s) if the leader goes away."""
    leader_election: LeaderElection = LeaderElection()
    """Leader election on a `coordination.k8s.io` Lease (the operator always uses it)."""
    watch_namespaces: list[Annotated[str, Field(pattern=DNS_LABEL)]] = Field(
        default=[], examples=[["agents", "team-b"]]
    )
    """Namespaces whose PallasDeployments and PallasAgents the operator reconciles
    (`--namespace`, repeated); empty means every namespace (`rbac.scope: cluster` only)."""
    log_level: Literal["debug", "info", "warning", "error", "critical"] = "info"
    """Operator log level, the levels of an agent's `spec.logLevel`: `debug` adds `--verbose`;
    `warning`, `error` and `critical` set `PALLAS_LOG_LEVEL` (the operator's own loggers and, at
    that level or above, every library's)."""
    extra_args: list[str] = []
    """Extra arguments of `pallas operator`."""
    extra_env: list[dict[str, Any]] = []
    """Extra environment variables of the operator container (Kubernetes `EnvVar` objects)."""
    telemetry: Telemetry = Telemetry()
    """Traces: one collector for the operator and every deployment that names none."""
    triggers: Triggers = Triggers()
    """PallasTriggers the operator runs (docs/triggers.md)."""

    rbac: Rbac = Rbac()
    """What the operator may do: exactly what it reads and writes (docs/helm.md lists it)."""
    service_account: ServiceAccount = ServiceAccount()
    """The identity the operator runs as."""

    metrics: Metrics = Metrics()
    """The operator's probe and metrics endpoint."""
    prometheus_rule: PrometheusRule = PrometheusRule()
    """Alerting and recording rules for Pallas agents, registries and the operator."""
    dashboards: Dashboards = Dashboards()
    """Grafana dashboards."""
    pod_disruption_budget: PodDisruptionBudget = PodDisruptionBudget()
    """Voluntary disruptions of the operator pods."""
    in_use_protection: InUseProtection = InUseProtection()
    """PallasDeployments and what their agents use, kept from deletion while in use."""

    resources: dict[str, Any] = {
        "requests": {"cpu": "100m", "memory": "256Mi"},
        "limits": {"memory": "512Mi"},
    }
    """Resources of the operator container. About 200 MB RSS at 1,000 agents (bench/operator_scale.py);
    no CPU limit, so reconcile bursts are not throttled. Agent pods are not sized here: one whose
    PallasAgent and PallasDeployment set no resources gets a memory limit derived from its own
    budgets (768 MiB, twice `history.maxBytes`, 64 KiB per `sessions.maxSessions`: 960Mi by
    default; docs/api.md, Memory)."""
    pod_security_context: dict[str, Any] = {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "fsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    """Pod security context: the image's non-root user 65532, the runtime's default seccomp
    profile (meets the `restricted` Pod Security Standard)."""
    security_context: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    """Container security context. The root filesystem is read-only; `/tmp` (the image's HOME)
    is an emptyDir."""
    liveness_probe: Probe = Probe(failure_threshold=6)
    """Liveness probe on `/healthz` (the process serves)."""
    readiness_probe: Probe = Probe()
    """Readiness probe on `/healthz`. Not `/readyz`: that answers 503 on standbys, and a pod
    that never becomes ready stalls every rolling update while the old leader holds the Lease."""

    deployment_annotations: dict[str, str] = {}
    """Annotations on the operator Deployment."""
    pod_annotations: dict[str, str] = {}
    """Annotations on the operator pods."""
    pod_labels: dict[str, str] = {}
    """Extra labels on the operator pods."""
    priority_class_name: str = ""
    """PriorityClass of the operator pods."""
    termination_grace_period_seconds: int = Field(default=30, ge=0)
    """Seconds the operator gets after SIGTERM to finish reconciles and release the Lease."""
    node_selector: dict[str, str] = {"kubernetes.io/os": "linux"}
    """Node labels the operator pods must match."""
    tolerations: list[dict[str, Any]] = []
    """Tolerations of the operator pods. Beside them the pods tolerate the node-failure taints
    for `nodeFailureTolerationSeconds`, unless one of these matches the taint."""
    node_failure_toleration_seconds: int = Field(default=30, ge=0, le=3600)
    """Seconds a pod stays on a node that stopped reporting (the NoExecute taints
    `node.kubernetes.io/unreachable` and `not-ready`) before it is evicted and replaced
    elsewhere; Kubernetes' default is 300. The operator pods' own, and (as
    `--node-failure-toleration-seconds`) every agent and registry pod whose PallasDeployment
    sets no `spec.runtime.nodeFailureTolerationSeconds`."""
    affinity: dict[str, Any] = {}
    """Affinity of the operator pods, e.g. pod anti-affinity to spread replicas over nodes."""
    topology_spread_constraints: list[dict[str, Any]] = []
    """Topology spread constraints of the operator pods. Empty with `replicaCount` > 1: at most
    one pod more on one node than on another, preferred (`kubernetes.io/hostname`,
    `ScheduleAnyway`: a one-node cluster still runs every replica)."""
