"""`pallas run --reload`'s planning: who keeps a port, what restarts, what a bad edit says."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pallas_runtime.commands.run.manifests import load_manifests, plan_local
from pallas_runtime.commands.run.reload import ReloadRefused, checked_run, plan_changes
from tests.unit.agent.test_manifests import DEPLOYMENT, agent

BASE = 25000


def plan_of(tmp_path: Path, *docs: object, keep: dict[tuple[str, str], int] | None = None):
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return plan_local(load_manifests([path]), BASE, environ={}, keep_ports=keep)


def test_running_agents_keep_their_ports_and_new_ones_take_the_next_free(tmp_path: Path) -> None:
    before = plan_of(tmp_path, DEPLOYMENT, agent("a"), agent("b"), agent("c"))
    keep = {("default", a.manifest.name): a.port for a in before.agents}
    # "a" removed, "new" inserted first: the others keep theirs, "new" takes the freed base+1.
    after = plan_of(tmp_path, DEPLOYMENT, agent("new"), agent("b"), agent("c"), keep=keep)
    assert {a.manifest.name: a.port for a in after.agents} == {"new": 25001, "b": 25002, "c": 25003}
    grown = plan_of(tmp_path, DEPLOYMENT, agent("x"), agent("a"), agent("b"), agent("c"), keep=keep)
    assert {a.manifest.name: a.port for a in grown.agents}["x"] == 25004


def test_changes_restart_changed_agents_in_dependency_order(tmp_path: Path) -> None:
    old = plan_of(tmp_path, DEPLOYMENT, agent("boss", agents=["worker"]), agent("worker"), agent("gone"))
    keep = {("default", a.manifest.name): a.port for a in old.agents}
    new = plan_of(
        tmp_path,
        DEPLOYMENT,
        agent("boss", agents=["worker"], history={"maxMessages": 10}),
        agent("worker", history={"maxMessages": 20}),
        agent("added"),
        keep=keep,
    )
    changes = plan_changes(old, new)
    assert changes.stopped == (("default", "gone"),)
    started = [name for _, name in changes.started]
    assert started.index("worker") < started.index("boss")  # peers first
    assert set(started) == {"boss", "worker", "added"}
    assert changes.applied == changes.unchanged == ()
    assert changes.registry


def test_what_a_running_agent_takes_in_place_is_applied_not_restarted(tmp_path: Path) -> None:
    old = plan_of(tmp_path, DEPLOYMENT, agent("boss", agents=["worker"]), agent("worker"), agent("calm"))
    keep = {("default", a.manifest.name): a.port for a in old.agents}
    new = plan_of(
        tmp_path,
        DEPLOYMENT,
        agent("boss", agents=["worker"], instruction="new", tools={"deny": ["x__*"]}),
        agent("worker", requestParams={"temperature": 0.1}, maxIterations=3),
        agent("calm"),
        keep=keep,
    )
    changes = plan_changes(old, new)
    assert changes.started == changes.stopped == ()
    assert {name for _, name in changes.applied} == {"boss", "worker"}
    assert changes.unchanged == (("default", "calm"),)


def test_an_edit_outside_the_config_leaves_agents_running(tmp_path: Path) -> None:
    old = plan_of(tmp_path, DEPLOYMENT, agent("a"), agent("b"))
    keep = {("default", a.manifest.name): a.port for a in old.agents}
    same = plan_of(tmp_path, DEPLOYMENT, agent("a"), agent("b"), keep=keep)
    assert plan_changes(old, same).started == ()
    assert not plan_changes(old, same).registry
    tagged = plan_of(tmp_path, DEPLOYMENT, agent("a", capabilities=["search"]), agent("b"), keep=keep)
    changes = plan_changes(old, tagged)
    assert (changes.started, changes.registry) == ((), True)  # only the registry lists tags


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        ("spec:\n  deployment: d\n  maxIterations: 0\n", "PallasAgent/a: spec.maxIterations: "),
        ("spec: [unclosed\n", "not valid YAML"),
        ("spec:\n  deployment: nowhere\n", "PallasAgent/a: spec.deployment: "),
    ],
)
def test_a_bad_edit_is_refused_naming_file_object_and_field(tmp_path: Path, edit: str, problem: str) -> None:
    path = tmp_path / "m.yaml"
    head = "apiVersion: pallas.dev/v1alpha1\nkind: PallasAgent\nmetadata:\n  name: a\n"
    path.write_text(yaml.safe_dump(DEPLOYMENT) + "---\n" + head + edit)
    with pytest.raises(ReloadRefused) as refused:
        checked_run([str(path)], BASE, None, {})
    assert any(line.startswith(str(path)) and problem in line for line in refused.value.problems), (
        refused.value.problems
    )
