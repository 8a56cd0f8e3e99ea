"""The PallasTrigger kind: its spec's rules, its CRD, and what `pallas validate` says of it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pallas_api import crds
from pallas_api.checks import Document, Report, check_documents
from pallas_api.spec import PallasTriggerSpec
from tests.support.operator import Manifest, agent, at, deployment, spec, trigger

WEBHOOK = {"signature": "github", "secretRef": {"name": "gh", "key": "secret"}}


def _check(*manifests: Manifest) -> Report:
    return check_documents([Document(f"m.yaml:{i}", m) for i, m in enumerate(manifests, start=1)])


def test_defaults() -> None:
    parsed = PallasTriggerSpec.model_validate(trigger()["spec"])
    assert parsed.concurrency_policy == "Forbid"
    assert parsed.max_runs_per_minute == 10
    assert (parsed.history_limit.succeeded, parsed.history_limit.failed) == (10, 5)
    assert parsed.conversation.mode == "new"
    assert parsed.source() == "schedule"


@pytest.mark.parametrize(
    ("mods", "says"),
    [
        ((spec(schedule=None),), "exactly one of schedule, webhook, event"),
        ((spec(webhook=WEBHOOK),), "exactly one of schedule, webhook, event"),
        ((at("spec.schedule.cron", "0 7 * *"),), "five fields"),
        ((at("spec.schedule.timeZone", "Europe/Atlantis"),), "not an IANA time zone"),
        ((spec(message="Pod {{ .object.metadata.name }}"),), ".object.metadata.name: no such variable"),
        ((spec(message="{{ .trigger.name | upper }}"),), "a template action is a dotted path"),
        ((spec(conversation={"id": "x"}),), "only used with mode continue"),
        ((spec(maxRunsPerMinute=0),), "greater than or equal to 1"),
        (
            (spec(schedule=None, event={"apiVersion": "v1", "kind": "Pod", "when": "object.status.("}),),
            "when: not CEL: line 1, column 15",
        ),
        (
            (spec(schedule=None, event={"apiVersion": "v1", "kind": "Pod", "when": "pod.x == 1"}),),
            "'pod' is not a variable here",
        ),
    ],
)
def test_bad_specs_say_what_is_wrong(mods: tuple[object, ...], says: str) -> None:
    manifest = trigger()
    for mod in mods:
        mod(manifest)  # type: ignore[operator]
    manifest["spec"] = {k: v for k, v in manifest["spec"].items() if v is not None}
    with pytest.raises(ValidationError, match=says):
        PallasTriggerSpec.model_validate(manifest["spec"])


def test_each_source_offers_its_variables() -> None:
    event = {"apiVersion": "v1", "kind": "Pod", "when": "object.status.phase == 'Failed'"}
    parsed = PallasTriggerSpec.model_validate(
        {"agent": "triage", "message": "{{ .type }} {{ .object.metadata.name }}", "event": event}
    )
    assert parsed.event is not None
    assert parsed.event.types == ["ADDED", "MODIFIED"]
    webhook = {"agent": "triage", "message": "{{ .body.number }}", "webhook": WEBHOOK}
    assert PallasTriggerSpec.model_validate(webhook).webhook is not None


def test_the_crd_has_its_names_columns_and_rules() -> None:
    crd = crds.trigger_crd()
    names = crd["spec"]["names"]
    assert (names["kind"], names["plural"], names["shortNames"], names["categories"]) == (
        "PallasTrigger",
        "pallastriggers",
        ["pt"],
        ["pallas"],
    )
    version = crd["spec"]["versions"][0]
    assert [c["name"] for c in version["additionalPrinterColumns"]][:5] == [
        "Agent",
        "Schedule",
        "Suspend",
        "Ready",
        "Last Run",
    ]
    spec_schema = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec_schema["x-kubernetes-validations"][0]["message"].startswith("a trigger needs exactly one")
    assert "pallas.dev_pallastriggers.yaml" in crds.crd_manifests()


def test_validate_wants_the_agent_among_the_files() -> None:
    report = _check(deployment(), trigger())
    assert [str(p) for p in report.problems] == [
        "m.yaml:2: PallasTrigger/nightly: spec.agent: no PallasAgent 'research' in namespace 'default' "
        "of the files"
    ]
    assert not _check(deployment(), agent(), trigger()).problems


def test_validate_warns_that_event_triggers_are_not_run_yet() -> None:
    event = trigger("crashes", spec(schedule=None))
    event["spec"] = {
        **{k: v for k, v in event["spec"].items() if v is not None},
        "message": "{{ .object.metadata.name }} crashed",
        "event": {"apiVersion": "v1", "kind": "Pod"},
    }
    report = _check(deployment(), agent(), event)
    assert not report.problems
    assert [w.field for w in report.warnings] == ["spec.event"]


def test_validate_names_a_when_that_is_not_cel() -> None:
    event = trigger("crashes", spec(schedule=None))
    event["spec"] = {
        **{k: v for k, v in event["spec"].items() if v is not None},
        "message": "{{ .object.metadata.name }} is {{ .reason }}",
        "event": {
            "apiVersion": "v1",
            "kind": "Pod",
            "when": "object.status.containerStatuses.exists(c, c.restartCount >)",
        },
    }
    problems = [str(p) for p in _check(deployment(), agent(), event).problems]
    assert len(problems) == 1
    assert "PallasTrigger/crashes" in problems[0]
    assert "when: not CEL: line 1" in problems[0]
