"""charts/pallas rendered by `helm template` with various values: what objects come out, and how.

One `helm template` per case (about 0.1 s each). The helm binary is the one hack/build/k8s-bins.sh
builds (`make k8s-bins`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from pallas_operator.cli import OperatorCommand, default_telemetry
from pallas_operator.operator_rbac import CLUSTER_RULES, LEASE_RULES, USER_EDIT_RULES, USER_VIEW_RULES
from tests.support.cluster import REPO

CHART = REPO / "charts" / "pallas"
NAMESPACE = "pallas-system"
RELEASE = "pallas"
OPERATOR = "pallas-operator"
KUBE_VERSION = "1.34.0"
CRD_NAMES = {"pallasagents.pallas.dev", "pallasdeployments.pallas.dev", "pallastriggers.pallas.dev"}
NAMESPACES_RULE = {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]}
CRD_RULE = {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"]}
AUTH_RESOURCES = {"tokenreviews", "subjectaccessreviews", "clusterrolebindings"}
POD_ARGS = [
    f"--pod-namespace={NAMESPACE}",
    "--pod-labels=app.kubernetes.io/component=operator,app.kubernetes.io/instance=pallas,"
    "app.kubernetes.io/name=pallas",
]
Doc = dict[str, Any]
NODE_FAILURE = [
    {"key": taint, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}
    for taint in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
]
OPERATOR_SELECTOR = {
    "app.kubernetes.io/name": "pallas",
    "app.kubernetes.io/instance": RELEASE,
    "app.kubernetes.io/component": "operator",
}


@pytest.fixture(scope="module")
def helm() -> str:
    out = subprocess.run(
        [str(REPO / "hack" / "build" / "k8s-bins.sh"), "--print-dir"],
        capture_output=True,
        text=True,
        check=True,
    )
    binary = Path(out.stdout.strip()) / "helm"
    if not binary.is_file():
        pytest.fail(f"{binary} is missing: run `make k8s-bins` (hack/build/k8s-bins.sh)")
    return str(binary)


@pytest.fixture
def helm_home(tmp_path: Path) -> dict[str, str]:
    return {
        "HELM_CACHE_HOME": str(tmp_path / "cache"),
        "HELM_CONFIG_HOME": str(tmp_path / "config"),
        "HELM_DATA_HOME": str(tmp_path / "data"),
        "PATH": "/usr/bin:/bin",
    }


Render = Callable[..., list[Doc]]


@pytest.fixture
def render(helm: str, helm_home: dict[str, str], tmp_path: Path) -> Render:
    """`render(values)`: the objects `helm template` makes with these values (JSON is YAML)."""

    def run(values: dict[str, Any] | None = None) -> list[Doc]:
        path = tmp_path / "values.yaml"
        path.write_text(json.dumps(values or {}))
        res = subprocess.run(
            [helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
             "--kube-version", KUBE_VERSION, "--values", str(path)],
            capture_output=True, text=True, env=helm_home, timeout=60,
        )  # fmt: skip
        if res.returncode != 0:
            raise AssertionError(f"helm template failed: {res.stderr.strip()}")
        return [doc for doc in yaml.safe_load_all(res.stdout) if doc]

    return run


@pytest.fixture
def render_error(helm: str, helm_home: dict[str, str], tmp_path: Path) -> Callable[[dict[str, Any]], str]:
    """`render_error(values)`: helm's message when it refuses these values."""

    def run(values: dict[str, Any]) -> str:
        path = tmp_path / "values.yaml"
        path.write_text(json.dumps(values))
        res = subprocess.run(
            [helm, "template", RELEASE, str(CHART), "--kube-version", KUBE_VERSION, "--values", str(path)],
            capture_output=True, text=True, env=helm_home, timeout=60,
        )  # fmt: skip
        assert res.returncode != 0, f"helm accepted {values}"
        return res.stderr

    return run


def kinds(docs: list[Doc]) -> list[tuple[str, str]]:
    return sorted((d["kind"], d["metadata"]["name"]) for d in docs)


def one(docs: list[Doc], kind: str, name: str | None = None, namespace: str | None = None) -> Doc:
    found = [
        d
        for d in docs
        if d["kind"] == kind
        and (name is None or d["metadata"]["name"] == name)
        and (namespace is None or d["metadata"].get("namespace") == namespace)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''} {namespace or ''}, got {kinds(found)}"
    return found[0]


def none_of(docs: list[Doc], kind: str) -> None:
    assert [d for d in docs if d["kind"] == kind] == [], f"unexpected {kind}"


def container(docs: list[Doc]) -> Doc:
    (c,) = one(docs, "Deployment", OPERATOR)["spec"]["template"]["spec"]["containers"]
    return dict(c)


def namespaced_rules() -> list[Doc]:
    """The operator's rules from pallas_operator.operator_rbac that a Role can grant."""
    cluster_scoped = {"namespaces", "customresourcedefinitions", *AUTH_RESOURCES}
    return [r for r in CLUSTER_RULES if not cluster_scoped & set(r["resources"])]


def auth_rules() -> list[Doc]:
    """The cluster-scoped rules behind auth.mode kubernetes (granted in either scope)."""
    return [r for r in CLUSTER_RULES if AUTH_RESOURCES & set(r["resources"])]


# --- what a default install makes ------------------------------------------------------------


def test_defaults_make_the_operator_its_rbac_the_crds_and_the_metrics_service(render: Render) -> None:
    docs = render()
    assert kinds(docs) == sorted(
        [
            ("ClusterRole", OPERATOR),
            ("ClusterRole", "pallas-edit"),
            ("ClusterRole", "pallas-view"),
            ("ClusterRoleBinding", OPERATOR),
            ("CustomResourceDefinition", "pallasagents.pallas.dev"),
            ("CustomResourceDefinition", "pallasdeployments.pallas.dev"),
            ("CustomResourceDefinition", "pallastriggers.pallas.dev"),
            ("Deployment", OPERATOR),
            ("Role", f"{OPERATOR}-leader-election"),
            ("RoleBinding", f"{OPERATOR}-leader-election"),
            ("Service", f"{OPERATOR}-metrics"),
            ("ServiceAccount", OPERATOR),
            ("ValidatingAdmissionPolicy", "pallas-in-use"),
            ("ValidatingAdmissionPolicyBinding", "pallas-in-use"),
        ]
    )
    cluster_scoped = (
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
    )
    for doc in docs:
        if doc["kind"] not in (*cluster_scoped, "ValidatingAdmissionPolicyBinding"):
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["kind"]


def test_in_use_protection_binds_where_the_operator_watches_and_can_be_left_out(render: Render) -> None:
    (everywhere,) = [d for d in render() if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert "matchResources" not in everywhere["spec"]
    (watched,) = [
        d for d in render({"watchNamespaces": ["a", "b"]}) if d["kind"] == "ValidatingAdmissionPolicyBinding"
    ]
    (selector,) = watched["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert selector == {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["a", "b"]}
    assert not [d for d in render({"inUseProtection": {"enabled": False}}) if "Admission" in d["kind"]]


def test_the_operator_runs_the_charts_image_on_all_namespaces_with_its_lease_here(render: Render) -> None:
    c = container(render())
    assert c["image"] == "pallas:0.1.0"
    assert c["args"] == [
        "operator",
        "--all-namespaces",
        "--runtime-image=pallas:0.1.0",
        "--http-port=8080",
        "--max-head-bytes=16384",
        "--max-headers=100",
        "--head-timeout=10",
        "--keep-alive=5",
        f"--lease-namespace={NAMESPACE}",
        "--node-failure-toleration-seconds=30",
        *POD_ARGS,
    ]
    assert c["ports"] == [{"name": "http-metrics", "containerPort": 8080, "protocol": "TCP"}]
    for probe in ("livenessProbe", "readinessProbe"):
        # /readyz is 503 on standbys: as a readiness gate it would stall every rolling update.
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "http-metrics"}


def test_operator_flags_follow_the_values(render: Render) -> None:
    c = container(
        render(
            {
                "watchNamespaces": ["agents", "team-b"],
                "runtimeImage": "registry.example/pallas-runtime:2",
                "logLevel": "debug",
                "metrics": {"port": 9090, "limits": {"maxHeadBytes": 1048576, "headTimeoutSeconds": 2.5}},
                "leaderElection": {"namespace": "elections"},
                "extraArgs": ["--service-host-map=/etc/hosts-map"],
                "extraEnv": [{"name": "PALLAS_LOG_LEVEL", "value": "debug"}],
            }
        )
    )
    assert c["args"] == [
        "operator",
        "--namespace=agents",
        "--namespace=team-b",
        "--runtime-image=registry.example/pallas-runtime:2",
        "--http-port=9090",
        "--max-head-bytes=1048576",
        "--max-headers=100",
        "--head-timeout=2.5",
        "--keep-alive=5",
        "--lease-namespace=elections",
        "--node-failure-toleration-seconds=30",
        *POD_ARGS,
        "--verbose",
        "--service-host-map=/etc/hosts-map",
    ]
    assert c["env"] == [
        {"name": "PALLAS_LOG_FORMAT", "value": "json"},  # a tty attached to the pod changes nothing
        {"name": "PALLAS_LOG_LEVEL", "value": "debug"},
    ]
    assert c["ports"][0]["containerPort"] == 9090


def test_telemetry_values_point_the_operator_and_the_default_deployment_at_a_collector(
    render: Render,
) -> None:
    telemetry = {"endpoint": "http://otel-collector.observability:4318", "sampleRatio": 0.25}
    c = container(render({"telemetry": telemetry}))
    [flag] = [a for a in c["args"] if a.startswith("--default-telemetry=")]
    assert json.loads(flag.split("=", 1)[1]) == {**telemetry, "captureContent": False}
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == telemetry["endpoint"]
    assert env["OTEL_SERVICE_NAME"] == "pallas-operator"
    assert (env["OTEL_TRACES_SAMPLER"], env["OTEL_TRACES_SAMPLER_ARG"]) == (
        "parentbased_traceidratio",
        "0.25",
    )
    # The flag is one the operator takes.

    assert default_telemetry(flag.split("=", 1)[1]).sample_ratio == 0.25


def test_without_a_telemetry_endpoint_nothing_is_traced(render: Render) -> None:
    c = container(render({}))
    assert not [a for a in c["args"] if "telemetry" in a]
    assert not [e for e in c["env"] if e["name"].startswith("OTEL_")]


@pytest.mark.parametrize(
    ("level", "verbose", "env"),
    [
        ("info", False, []),
        ("debug", True, []),
        ("warning", False, [{"name": "PALLAS_LOG_LEVEL", "value": "WARNING"}]),
        ("error", False, [{"name": "PALLAS_LOG_LEVEL", "value": "ERROR"}]),
        ("critical", False, [{"name": "PALLAS_LOG_LEVEL", "value": "CRITICAL"}]),
    ],
)
def test_every_log_level_reaches_the_operator(
    render: Render, level: str, verbose: bool, env: list[dict[str, str]]
) -> None:
    c = container(render({"logLevel": level}))
    assert ("--verbose" in c["args"]) is verbose
    assert c["env"] == [{"name": "PALLAS_LOG_FORMAT", "value": "json"}, *env]


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ({"tag": "0.2.0"}, "pallas:0.2.0"),
        ({"repository": "registry.example/ai/pallas"}, "registry.example/ai/pallas:0.1.0"),
        ({"digest": "sha256:" + "ab" * 32}, "pallas:0.1.0@sha256:" + "ab" * 32),
    ],
    ids=["tag", "repository", "digest"],
)
def test_image_reference_and_the_runtime_image_default_to_the_same(
    render: Render, image: dict[str, str], expected: str
) -> None:
    c = container(render({"image": image}))
    assert c["image"] == expected
    assert f"--runtime-image={expected}" in c["args"]


def test_image_pull_policy_and_secrets(render: Render) -> None:
    docs = render({"image": {"pullPolicy": "Always"}, "imagePullSecrets": [{"name": "regcred"}]})
    pod = one(docs, "Deployment", OPERATOR)["spec"]["template"]["spec"]
    assert pod["containers"][0]["imagePullPolicy"] == "Always"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]


def test_pod_and_container_security_context_meet_the_restricted_standard(render: Render) -> None:
    pod = one(render(), "Deployment", OPERATOR)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = pod["containers"][0]["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    # The image's HOME and working directory stay writable.
    assert pod["containers"][0]["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert pod["volumes"][0]["name"] == "tmp"
    assert "emptyDir" in pod["volumes"][0]
    assert pod["serviceAccountName"] == OPERATOR
    assert pod["enableServiceLinks"] is False


def test_scheduling_values_reach_the_pod(render: Render) -> None:
    toleration = {"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["ops"]}]}]}}}  # fmt: skip
    pod = one(
        render(
            {
                "nodeSelector": {"pool": "ops"},
                "tolerations": [toleration],
                "affinity": affinity,
                "resources": {"requests": {"cpu": "1"}},
                "priorityClassName": "system-cluster-critical",
            }
        ),
        "Deployment",
        OPERATOR,
    )["spec"]["template"]["spec"]
    # Helm merges maps with the defaults (a key set to null removes a default).
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux", "pool": "ops"}
    assert pod["tolerations"] == [toleration, *NODE_FAILURE]
    assert pod["affinity"] == affinity
    assert pod["containers"][0]["resources"] == {"requests": {"cpu": "1", "memory": "256Mi"},
                                                 "limits": {"memory": "512Mi"}}  # fmt: skip
    assert pod["priorityClassName"] == "system-cluster-critical"


def test_selectors_of_deployment_service_and_pdb_match_the_pod_labels(render: Render) -> None:
    docs = render({"replicaCount": 2, "podLabels": {"team": "ml"}})
    deployment = one(docs, "Deployment", OPERATOR)
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pod_labels["team"] == "ml"
    selectors = [
        deployment["spec"]["selector"]["matchLabels"],
        one(docs, "Service")["spec"]["selector"],
        one(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
    ]
    for selector in selectors:
        assert selector == {
            "app.kubernetes.io/name": "pallas",
            "app.kubernetes.io/instance": RELEASE,
            "app.kubernetes.io/component": "operator",
        }
        assert selector.items() <= pod_labels.items()
    assert one(docs, "Service")["spec"]["ports"][0]["targetPort"] == "http-metrics"


def test_names_follow_fullname_override_and_the_service_account_values(render: Render) -> None:
    docs = render({"fullnameOverride": "ai", "serviceAccount": {"create": False, "name": "existing"}})
    none_of(docs, "ServiceAccount")
    assert one(docs, "Deployment")["metadata"]["name"] == "ai-operator"
    assert one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "existing"
    for binding in ("ClusterRoleBinding", "RoleBinding"):
        assert one(docs, binding)["subjects"] == [
            {"kind": "ServiceAccount", "name": "existing", "namespace": NAMESPACE}
        ]


# --- CRDs ------------------------------------------------------------------------------------


def test_crds_are_the_generated_ones_and_kept_on_uninstall_by_default(render: Render) -> None:
    crds = {d["metadata"]["name"]: d for d in render() if d["kind"] == "CustomResourceDefinition"}
    assert set(crds) == CRD_NAMES
    source = {
        d["metadata"]["name"]: d
        for d in (yaml.safe_load(p.read_text()) for p in (REPO / "crds").glob("*.yaml"))
    }
    for name, crd in crds.items():
        assert crd["spec"] == source[name]["spec"], (
            f"templates/crds/ is stale: run hack/generate/chart ({name})"
        )
        assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert crd["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE


def test_crds_keep_false_drops_the_annotation(render: Render) -> None:
    crds = [d for d in render({"crds": {"keep": False}}) if d["kind"] == "CustomResourceDefinition"]
    assert len(crds) == len(CRD_NAMES)
    assert all("annotations" not in d["metadata"] for d in crds)


def test_crds_enabled_false_leaves_them_out(render: Render) -> None:
    docs = render({"crds": {"enabled": False}})
    none_of(docs, "CustomResourceDefinition")
    one(docs, "Deployment", OPERATOR)


# --- RBAC ------------------------------------------------------------------------------------


def test_cluster_scope_grants_the_operators_rules_cluster_wide(render: Render) -> None:
    docs = render()
    role = one(docs, "ClusterRole", OPERATOR)
    assert role["rules"] == [*namespaced_rules(), {**CRD_RULE, "verbs": ["list", "watch"]}, *auth_rules()]
    # The operator watches every namespace, so kopf never lists them.
    assert NAMESPACES_RULE not in role["rules"]
    binding = one(docs, "ClusterRoleBinding", OPERATOR)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": OPERATOR,
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": OPERATOR, "namespace": NAMESPACE}]
    none_of([d for d in docs if d["metadata"]["name"] == OPERATOR], "Role")


def test_cluster_scope_with_named_namespaces_adds_reading_namespaces(render: Render) -> None:
    role = one(render({"watchNamespaces": ["agents"]}), "ClusterRole", OPERATOR)
    assert role["rules"][-1] == NAMESPACES_RULE


def test_namespace_scope_grants_a_role_in_each_watched_namespace_only(render: Render) -> None:
    docs = render({"rbac": {"scope": "namespace"}, "watchNamespaces": ["agents", "team-b"]})
    for ns in ("agents", "team-b"):
        assert one(docs, "Role", OPERATOR, ns)["rules"] == namespaced_rules()
        binding = one(docs, "RoleBinding", OPERATOR, ns)
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": OPERATOR,
        }
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": OPERATOR, "namespace": NAMESPACE}]
    # The cluster-wide grants: reading Namespace objects, which kopf lists for named namespaces,
    # and the reviews (and their bindings) behind auth.mode kubernetes.
    assert one(docs, "ClusterRole", f"{OPERATOR}-namespaces")["rules"] == [NAMESPACES_RULE, *auth_rules()]
    assert one(docs, "ClusterRoleBinding")["roleRef"]["name"] == f"{OPERATOR}-namespaces"
    assert [a for a in container(docs)["args"] if a.startswith("--namespace")] == [
        "--namespace=agents",
        "--namespace=team-b",
    ]
    assert "--all-namespaces" not in container(docs)["args"]


def test_event_kinds_grant_list_and_watch_and_reach_the_operators_flags(render: Render) -> None:
    kinds_ = {
        "triggers": {"eventKinds": [{"resource": "pods"}, {"apiGroup": "apps", "resource": "deployments"}]}
    }
    wanted = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "watch"]},
    ]
    docs = render(kinds_)
    assert one(docs, "ClusterRole", OPERATOR)["rules"][len(namespaced_rules()) :][:2] == wanted
    assert [a for a in container(docs)["args"] if a.startswith("--event-kind")] == [
        "--event-kind=pods",
        "--event-kind=apps/deployments",
    ]
    scoped = render({**kinds_, "rbac": {"scope": "namespace"}, "watchNamespaces": ["agents"]})
    assert one(scoped, "Role", OPERATOR, "agents")["rules"] == [*namespaced_rules(), *wanted]
    # None by default: the operator lists and watches nothing more.
    assert not [a for a in container(render())["args"] if a.startswith("--event-kind")]


def test_rules_grant_nothing_on_secrets_and_allow_the_registry_role_without_escalate(render: Render) -> None:
    rules = one(render(), "ClusterRole", OPERATOR)["rules"]
    for rule in rules:
        # The pods read their Secrets as volumes; the operator reads none (docs/operator.md). It
        # only creates each deployment's bridge credential, once (answered 409 when it exists).
        if "secrets" in rule["resources"]:
            assert (rule["resources"], rule["verbs"]) == (["secrets"], ["create"])
        assert "*" not in rule["verbs"]
        assert "*" not in rule["resources"]
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
    # The registry Role the operator creates grants get/list/watch on the kinds: RBAC lets it
    # only because the operator holds those itself.
    pallas = next(r for r in rules if {"pallasagents", "pallasdeployments"} <= set(r["resources"]))
    assert {"get", "list", "watch"} <= set(pallas["verbs"])


def test_leader_election_role_holds_one_lease_by_name(render: Render) -> None:
    docs = render({"leaderElection": {"namespace": "elections"}})
    role = one(docs, "Role", f"{OPERATOR}-leader-election", "elections")
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["pallas-operator"],
         "verbs": ["get", "update"]},
    ]  # fmt: skip
    assert {v for r in role["rules"] for v in r["verbs"]} == {v for r in LEASE_RULES for v in r["verbs"]}
    one(docs, "RoleBinding", f"{OPERATOR}-leader-election", "elections")


def test_rbac_create_false_makes_no_roles(render: Render) -> None:
    docs = render({"rbac": {"create": False, "aggregateRoles": False}})
    for kind in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
        none_of(docs, kind)


def test_users_get_pallas_view_and_edit_through_the_built_in_roles(render: Render) -> None:
    docs = render({"rbac": {"create": False}})
    view, edit = one(docs, "ClusterRole", "pallas-view"), one(docs, "ClusterRole", "pallas-edit")
    aggregate = "rbac.authorization.k8s.io/aggregate-to-"
    assert {k for k, v in view["metadata"]["labels"].items() if v == "true"} == {
        f"{aggregate}view",
        f"{aggregate}edit",
        f"{aggregate}admin",
    }
    assert {k for k, v in edit["metadata"]["labels"].items() if v == "true"} == {
        f"{aggregate}edit",
        f"{aggregate}admin",
    }
    assert view["rules"] == USER_VIEW_RULES
    assert edit["rules"] == USER_EDIT_RULES
    invoke = [r for r in edit["rules"] if "invoke" in r["verbs"]]
    assert invoke == [{"apiGroups": ["pallas.dev"], "resources": ["pallasagents"], "verbs": ["invoke"]}]
    assert all("invoke" not in r["verbs"] for r in view["rules"])
    without = render({"rbac": {"aggregateRoles": False}})
    assert not [d for d in without if d["metadata"]["name"] in ("pallas-view", "pallas-edit")]


# --- monitoring ------------------------------------------------------------------------------


def test_monitoring_objects_are_off_by_default(render: Render) -> None:
    docs = render()
    for kind in ("ServiceMonitor", "PrometheusRule", "ConfigMap", "PodDisruptionBudget"):
        none_of(docs, kind)


def test_service_monitor_scrapes_the_metrics_service(render: Render) -> None:
    monitor_values = {"enabled": True, "interval": "15s", "labels": {"release": "kube-prometheus-stack"}}
    docs = render({"metrics": {"serviceMonitor": monitor_values}})
    monitor = one(docs, "ServiceMonitor", OPERATOR)
    service = one(docs, "Service", f"{OPERATOR}-metrics")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"]
    assert (endpoint["path"], endpoint["interval"]) == ("/metrics", "15s")


def test_prometheus_rule_carries_the_rule_file_untouched(render: Render) -> None:
    docs = render(
        {"prometheusRule": {"enabled": True, "namespace": "monitoring", "labels": {"release": "kps"}}}
    )
    rule = one(docs, "PrometheusRule")
    assert rule["metadata"]["namespace"] == "monitoring"
    assert rule["metadata"]["labels"]["release"] == "kps"
    source = yaml.safe_load((CHART / "files" / "rules" / "pallas-alerts.yaml").read_text())
    assert rule["spec"]["groups"] == source["groups"]
    summaries = [
        r["annotations"]["summary"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r
    ]
    # Prometheus's own templates survive: the file never went through Helm's tpl.
    assert any("{{ $labels.agent }}" in s for s in summaries)


def test_alert_for_replaces_the_for_of_the_named_alerts_only(render: Render) -> None:
    alert_for = {"PallasAgentErrorRateHigh": "0s", "PallasProcessDown": "2m30s"}
    rule = one(render({"prometheusRule": {"enabled": True, "alertFor": alert_for}}), "PrometheusRule")
    source = yaml.safe_load((CHART / "files" / "rules" / "pallas-alerts.yaml").read_text())
    rendered = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    original = {r["alert"]: r for g in source["groups"] for r in g["rules"] if "alert" in r}
    assert rendered.keys() == original.keys()
    for name, alert in rendered.items():
        assert alert["for"] == alert_for.get(name, original[name]["for"]), name
        assert {k: v for k, v in alert.items() if k != "for"} == {
            k: v for k, v in original[name].items() if k != "for"
        }


def test_alert_for_names_exactly_the_alerts_of_the_rule_file() -> None:
    source = yaml.safe_load((CHART / "files" / "rules" / "pallas-alerts.yaml").read_text())
    alerts = {r["alert"] for g in source["groups"] for r in g["rules"] if "alert" in r}
    schema = json.loads((CHART / "values.schema.json").read_text())
    rule = schema["$defs"]["PrometheusRule"]["properties"]["alertFor"]
    assert set(rule["propertyNames"]["enum"]) == alerts


def test_dashboards_config_map_is_labelled_for_the_grafana_sidecar(render: Render) -> None:
    docs = render({"dashboards": {"enabled": True}})
    config_map = one(docs, "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["namespace"] == NAMESPACE
    files = sorted((CHART / "files" / "dashboards").glob("*.json"))
    assert sorted(config_map["data"]) == [f.name for f in files]
    for f in files:
        assert json.loads(config_map["data"][f.name]) == json.loads(f.read_text())


def test_dashboards_label_annotations_and_namespace_can_be_changed(render: Render) -> None:
    values = {"enabled": True, "namespace": "grafana", "label": "dashboards", "labelValue": "pallas",
              "annotations": {"grafana_folder": "Pallas"}}  # fmt: skip
    config_map = one(render({"dashboards": values}), "ConfigMap")
    assert config_map["metadata"]["namespace"] == "grafana"
    assert config_map["metadata"]["labels"]["dashboards"] == "pallas"
    assert "grafana_dashboard" not in config_map["metadata"]["labels"]
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Pallas"}


# --- replicas and disruption ------------------------------------------------------------------


def test_more_than_one_replica_gets_a_pod_disruption_budget(render: Render) -> None:
    docs = render({"replicaCount": 3})
    assert one(docs, "Deployment")["spec"]["replicas"] == 3
    pdb = one(docs, "PodDisruptionBudget", OPERATOR)
    assert pdb["spec"]["minAvailable"] == 1
    assert "maxUnavailable" not in pdb["spec"]


def operator_pod(docs: list[Doc]) -> Doc:
    pod: Doc = one(docs, "Deployment", OPERATOR)["spec"]["template"]["spec"]
    return pod


def test_the_operator_leaves_a_failed_node_after_30_seconds(render: Render) -> None:
    # Kubernetes' DefaultTolerationSeconds would give 300 s; a standby takes the Lease within 30 s.
    assert operator_pod(render())["tolerations"] == NODE_FAILURE


@pytest.mark.parametrize(
    ("tolerations", "added"),
    [
        ([{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
           "tolerationSeconds": 600}], NODE_FAILURE[1:]),
        ([{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}], NODE_FAILURE[:1]),
        ([{"operator": "Exists"}], []),  # every taint, for ever: ours would cut it short
        ([{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}],
         NODE_FAILURE),
    ],
    ids=["unreachable", "not-ready-any-effect", "everything", "another-effect"],
)  # fmt: skip
def test_a_users_toleration_of_a_node_failure_taint_replaces_the_charts(
    render: Render, tolerations: list[Doc], added: list[Doc]
) -> None:
    assert operator_pod(render({"tolerations": tolerations}))["tolerations"] == [*tolerations, *added]


def test_node_failure_toleration_seconds_reach_the_operator_pods_and_its_flag(render: Render) -> None:
    pod = operator_pod(render({"nodeFailureTolerationSeconds": 90}))
    assert [t["tolerationSeconds"] for t in pod["tolerations"]] == [90, 90]
    [flag] = [a for a in pod["containers"][0]["args"] if a.startswith("--node-failure-toleration-seconds=")]
    assert flag == "--node-failure-toleration-seconds=90"
    parser = argparse.ArgumentParser()
    OperatorCommand().configure(parser)  # the flag is one the operator takes
    assert parser.parse_args([flag]).node_failure_toleration_seconds == 90


def test_replicas_spread_over_nodes_preferred_unless_the_values_say_how(render: Render) -> None:
    assert "topologySpreadConstraints" not in operator_pod(render())
    # ScheduleAnyway: a one-node cluster still runs every replica.
    assert operator_pod(render({"replicaCount": 2}))["topologySpreadConstraints"] == [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": OPERATOR_SELECTOR},
            "matchLabelKeys": ["pod-template-hash"],
        }
    ]
    zones = [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": OPERATOR_SELECTOR},
        }
    ]
    for replicas in (1, 3):
        pod = operator_pod(render({"replicaCount": replicas, "topologySpreadConstraints": zones}))
        assert pod["topologySpreadConstraints"] == zones


def test_pod_disruption_budget_on_request_with_max_unavailable(render: Render) -> None:
    pdb = one(
        render({"podDisruptionBudget": {"enabled": True, "maxUnavailable": "50%"}}), "PodDisruptionBudget"
    )
    assert pdb["spec"]["maxUnavailable"] == "50%"
    assert "minAvailable" not in pdb["spec"]


# --- values.schema.json ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"replicas": 2}, "at '': additional properties 'replicas' not allowed"),
        ({"metrics": {"serviceMonitor": {"enable": True}}},
         "at '/metrics/serviceMonitor': additional properties 'enable' not allowed"),
        ({"rbac": {"scope": "namespaces"}}, "at '/rbac/scope': value must be one of 'cluster', 'namespace'"),
        ({"image": {"pullPolicy": "Sometimes"}}, "value must be one of 'Always', 'IfNotPresent', 'Never'"),
        ({"image": {"digest": "abc"}}, "at '/image/digest'"),
        ({"rbac": {"scope": "namespace"}}, "at '/watchNamespaces': minItems: got 0, want 1"),
        ({"watchNamespaces": ["Agents"]}, "at '/watchNamespaces/0'"),
        ({"replicaCount": -1}, "at '/replicaCount'"),
        ({"nodeFailureTolerationSeconds": 3601}, "at '/nodeFailureTolerationSeconds'"),
        ({"prometheusRule": {"alertFor": {"PallasDown": "1m"}}}, "invalid propertyName 'PallasDown'"),
        ({"prometheusRule": {"alertFor": {"PallasProcessDown": "soon"}}},
         "at '/prometheusRule/alertFor/PallasProcessDown'"),
        ({"triggers": {"eventKinds": [{"resource": "secrets"}]}},
         "at '/triggers/eventKinds/0': 'not' failed"),
        ({"triggers": {"eventKinds": [{"resource": "Pods"}]}},
         "at '/triggers/eventKinds/0/resource'"),
    ],
    ids=["unknown-key", "nested-typo", "bad-scope", "bad-pull-policy", "bad-digest", "namespace-scope-no-ns",
         "bad-namespace", "negative-replicas", "long-node-failure", "unknown-alert", "bad-duration",
         "event-kind-secrets", "event-kind-not-a-resource"],
)  # fmt: skip
def test_the_schema_refuses_bad_values_with_a_clear_message(
    render_error: Callable[[dict[str, Any]], str], values: dict[str, Any], message: str
) -> None:
    error = render_error(values)
    assert "values don't meet the specifications of the schema" in error
    assert message in error, error


def test_an_existing_service_account_needs_its_name(render_error: Callable[[dict[str, Any]], str]) -> None:
    error = render_error({"serviceAccount": {"create": False}})
    assert "serviceAccount.name is required when serviceAccount.create is false" in error


def test_a_duplicate_watch_namespace_is_refused(render_error: Callable[[dict[str, Any]], str]) -> None:
    assert "watchNamespaces lists a namespace twice" in render_error({"watchNamespaces": ["a", "a"]})


def test_values_yaml_validates_against_the_schema_and_every_value_is_commented() -> None:
    text = (CHART / "values.yaml").read_text()
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(yaml.safe_load(text))
    lines = text.splitlines()
    where: dict[tuple[str, ...], int] = {}
    path: list[str] = []
    for index, line in enumerate(lines):
        found = re.match(r"^( *)(#\s)?([A-Za-z_][\w.-]*):", line)
        if found and not (found.group(2) and found.group(3) in where):  # `# key: example` lines count
            depth = len(found.group(1)) // 2
            path[depth:] = [found.group(3)]
            where.setdefault(tuple(path), index)

    def check(props: dict[str, Any], prefix: tuple[str, ...]) -> None:
        for key, prop in props.items():
            key_path = (*prefix, key)
            assert key_path in where, f"{'.'.join(key_path)} is missing from values.yaml"
            index, indent = where[key_path], "  " * len(prefix)
            comments = 0
            while lines[index - comments - 1].startswith(f"{indent}# ") and not lines[
                index - comments - 1
            ].startswith(f"{indent}# --"):
                comments += 1
            assert lines[index - comments - 1].startswith(f"{indent}# -- "), (
                f"{'.'.join(key_path)} has no `# --` comment in values.yaml"
            )
            target = schema["$defs"][prop["$ref"].split("/")[-1]] if "$ref" in prop else prop
            check(target.get("properties", {}), key_path)

    check(schema["properties"], ())


def test_the_generated_chart_files_are_up_to_date() -> None:
    spec = importlib.util.spec_from_file_location("chartgen", REPO / "hack" / "generate" / "chartgen.py")
    assert spec is not None
    assert spec.loader is not None
    chartgen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(chartgen)
    stale = "is stale: run hack/generate/chart"
    assert (CHART / "values.yaml").read_text() == chartgen.values_yaml(), f"values.yaml {stale}"
    assert (CHART / "values.schema.json").read_text() == chartgen.values_schema(), (
        f"values.schema.json {stale}"
    )
    assert (CHART / "templates" / "_rbac-rules.tpl").read_text() == chartgen.rbac_template(), stale
    wanted = chartgen.crd_templates()
    assert sorted(p.name for p in (CHART / "templates" / "crds").glob("*.yaml")) == sorted(wanted)
    for name, text in wanted.items():
        assert (CHART / "templates" / "crds" / name).read_text() == text, f"templates/crds/{name} {stale}"


# --- helm lint -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"rbac": {"scope": "namespace"}, "watchNamespaces": ["agents"], "replicaCount": 2,
         "metrics": {"serviceMonitor": {"enabled": True}}, "prometheusRule": {"enabled": True},
         "dashboards": {"enabled": True}},
    ],
    ids=["defaults", "everything-on"],
)  # fmt: skip
def test_helm_lint_strict_is_clean(
    helm: str, helm_home: dict[str, str], tmp_path: Path, values: dict[str, Any]
) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(json.dumps(values))
    res = subprocess.run(
        [helm, "lint", str(CHART), "--strict", "--values", str(path)],
        capture_output=True, text=True, env=helm_home, timeout=60,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert "[WARNING]" not in res.stdout, res.stdout
    assert "[ERROR]" not in res.stdout, res.stdout
