"""Which objects an event trigger looks at, and which kinds the operator may watch (pure)."""

from __future__ import annotations

import pytest

from pallas_api.spec.common import LabelSelector
from pallas_api.triggers.event import EventKind, in_scope, kind_resource, selects


@pytest.mark.parametrize(
    ("kind", "resource"),
    [("Pod", "pods"), ("Ingress", "ingresses"), ("NetworkPolicy", "networkpolicies"),
     ("Deployment", "deployments"), ("Gateway", "gateways"), ("Endpoints", "endpointses")],
)  # fmt: skip
def test_a_kind_s_resource_is_guessed_as_the_api_machinery_guesses(kind: str, resource: str) -> None:
    assert kind_resource(kind) == resource


def test_a_triggers_kind_is_named_by_group_and_resource() -> None:
    allowed = {EventKind("", "pods"), EventKind("apps", "deployments")}
    assert EventKind.of("v1", "Pod") == EventKind("", "pods")
    assert EventKind.of("apps/v1", "Deployment") in allowed
    assert EventKind.of("batch/v1", "Job") not in allowed
    assert EventKind.of("apps/v1", "Pod") not in allowed  # the group counts


def test_event_kinds_parse_as_the_flag_takes_them_and_refuse_others() -> None:
    assert EventKind.parse("pods") == EventKind("", "pods")
    assert str(EventKind.parse("apps/deployments")) == "apps/deployments"
    assert EventKind("", "pods").value() == '{apiGroup: "", resource: pods}'
    with pytest.raises(ValueError, match="Pods"):
        EventKind.parse("Pods")
    with pytest.raises(ValueError, match="Secrets cannot be watched"):
        EventKind.parse("secrets")


def test_label_selectors_hold_as_kubernetes_reads_them() -> None:
    selector = LabelSelector.model_validate(
        {"matchLabels": {"tier": "web"}, "matchExpressions": [
            {"key": "env", "operator": "In", "values": ["prod", "staging"]},
            {"key": "canary", "operator": "DoesNotExist"},
        ]}
    )  # fmt: skip
    assert selects(selector, {"tier": "web", "env": "prod"})
    assert not selects(selector, {"tier": "web", "env": "dev"})
    assert not selects(selector, {"tier": "web", "env": "prod", "canary": "1"})
    assert not selects(selector, {"env": "prod"})
    assert selects(None, {})
    not_in = LabelSelector.model_validate(
        {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["x"]}]}
    )
    assert selects(not_in, {})
    assert not selects(not_in, {"a": "x"})


def test_in_scope_checks_the_namespace_then_the_labels() -> None:
    pod = {"metadata": {"namespace": "team-a", "labels": {"app": "web"}}}
    web = LabelSelector.model_validate({"matchLabels": {"app": "web"}})
    assert in_scope("team-a", web, pod)
    assert not in_scope("team-b", web, pod)
    assert in_scope(None, None, pod)
    assert not in_scope("team-a", LabelSelector.model_validate({"matchLabels": {"app": "db"}}), pod)
