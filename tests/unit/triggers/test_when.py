"""An event trigger's `when` (CEL) and the decision a watch event gets: fire, or why not."""

from __future__ import annotations

import re

import pytest

from pallas_api.triggers.event import decide, event_reason
from pallas_api.triggers.when import ConditionError, compile_condition

RESTARTS = "object.status.containerStatuses.exists(c, c.restartCount > 3)"


def pod(restarts: int, waiting: str | None = None) -> dict[str, object]:
    state: dict[str, object] = {"waiting": {"reason": waiting}} if waiting else {"running": {}}
    return {
        "metadata": {"name": "web-1", "namespace": "shop"},
        "status": {"containerStatuses": [{"name": "web", "restartCount": restarts, "state": state}]},
    }


def test_the_issues_expression_decides_on_the_object() -> None:
    condition = compile_condition(RESTARTS)
    assert condition.holds({"object": pod(5), "oldObject": None, "type": "MODIFIED"})
    assert not condition.holds({"object": pod(1), "oldObject": None, "type": "MODIFIED"})


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("object.status.(", "when: not CEL: line 1, column 15"),
        ("object.status.phase = 'Failed'", "when: not CEL"),
        (
            "pod.status.phase == 'Failed'",
            "'pod' is not a variable here (a when reads object, oldObject, type)",
        ),
        ("object.spec.containers.all(c, c.image != '') && x", "'x' is not a variable here"),
    ],
)
def test_a_bad_when_is_named_at_compile_time(source: str, says: str) -> None:
    with pytest.raises(ConditionError, match=re.escape(says)):
        compile_condition(source)


def test_a_failure_on_an_object_names_the_cause_not_the_object() -> None:
    secret_pod = {"metadata": {"name": "web-1", "annotations": {"token": "hunter2"}}}
    with pytest.raises(ConditionError, match="no such member in mapping: 'status'") as caught:
        compile_condition(RESTARTS).holds({"object": secret_pod, "oldObject": None, "type": "ADDED"})
    assert "hunter2" not in str(caught.value)
    with pytest.raises(ConditionError, match="gives int, not bool"):
        compile_condition("size(object.metadata.name)").holds(
            {"object": pod(0), "oldObject": None, "type": "ADDED"}
        )


def test_old_object_and_type_are_readable() -> None:
    condition = compile_condition(
        "type == 'MODIFIED' && oldObject.status.containerStatuses[0].restartCount < 4"
    )
    assert condition.holds({"object": pod(4), "oldObject": pod(3), "type": "MODIFIED"})
    assert not condition.holds({"object": pod(4), "oldObject": pod(3), "type": "ADDED"})


def test_a_matching_event_fires_with_the_template_variables() -> None:
    decision = decide(
        ["ADDED", "MODIFIED"], compile_condition(RESTARTS), "MODIFIED", pod(5, "CrashLoopBackOff")
    )
    assert decision.fire
    assert decision.values["type"] == "MODIFIED"
    assert decision.values["reason"] == "CrashLoopBackOff"
    assert decision.values["object"] == pod(5, "CrashLoopBackOff")


def test_an_event_that_does_not_match_says_why() -> None:
    condition = compile_condition(RESTARTS)
    assert (
        decide(["ADDED"], condition, "MODIFIED", pod(5)).why_not
        == "MODIFIED is not among the trigger's types"
    )
    assert decide(["MODIFIED"], condition, "MODIFIED", pod(1)).why_not == "when is false"
    # A Pod not yet scheduled has no containerStatuses: no run, and no failed run either.
    unscheduled = decide(
        ["ADDED"], condition, "ADDED", {"metadata": {"name": "web-1"}, "status": {"phase": "Pending"}}
    )
    assert not unscheduled.fire
    assert "no such member in mapping: 'containerStatuses'" in unscheduled.why_not
    assert decide(["DELETED"], None, "DELETED", pod(0)).fire


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (
            {
                "containerStatuses": [
                    {"state": {"running": {}}},
                    {"state": {"waiting": {"reason": "ImagePullBackOff"}}},
                ]
            },
            "ImagePullBackOff",
        ),
        ({"containerStatuses": [{"state": {"terminated": {"reason": "OOMKilled"}}}]}, "OOMKilled"),
        ({"phase": "Failed", "reason": "Evicted"}, "Evicted"),
        (
            {
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"},
                ]
            },
            "MinimumReplicasUnavailable",
        ),
        ({"phase": "Running"}, "ADDED"),
    ],
)
def test_the_reason_is_the_most_telling_one_the_object_states(status: dict[str, object], reason: str) -> None:
    assert event_reason("ADDED", {"status": status}) == reason
    assert event_reason("DELETED", {"metadata": {}}) == "DELETED"
