"""`reconcile_agent` on the in-memory world and cluster: what it writes, and when it writes nothing.

The API server's own part (server-side apply's merge, CEL, RBAC, the watches) is the integration
tier's (tests/integration/operator); here the watch is `FakeCluster.watch`.
"""

from __future__ import annotations

from pallas_api import conditions, names
from pallas_operator.builders.meta import agent_selector
from pallas_operator.reconcile.agent import reconcile_agent
from tests.support.fake_cluster import condition, operator_with
from tests.support.operator import agent, at, deployment, spec, unchecked

NS = "default"


async def test_an_accepted_agent_gets_its_children_owned_and_labelled() -> None:
    op, cluster = operator_with(deployment(), agent())

    assert await reconcile_agent(op, NS, "research") is None

    applied = {(m["kind"], m["metadata"]["name"]): m for m in cluster.applied}
    assert set(applied) == {
        ("ConfigMap", names.config_map_name("research")),
        ("Service", "research"),
        ("Deployment", "research"),
    }
    for manifest in applied.values():
        meta = manifest["metadata"]
        assert meta["namespace"] == NS
        assert meta["labels"][names.LABEL_AGENT] == "research"
        assert meta["labels"][names.LABEL_MANAGED_BY] == names.MANAGED_BY
        (owner,) = meta["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == (
            names.AGENT_KIND,
            "research",
            "uid-PallasAgent-research",
        )
        assert owner["controller"] is True
    assert applied[("Deployment", "research")]["spec"]["selector"]["matchLabels"] == agent_selector(
        "research"
    )
    ((key, status),) = cluster.statuses
    assert key == (names.AGENT_KIND, NS, "research")
    assert condition(status, conditions.ACCEPTED)["status"] == "True"
    assert condition(status, conditions.READY)["status"] == "False"  # no pod runs yet
    assert status["observedGeneration"] == 1
    # Nothing to report, and no pods to refresh: none could run before this first apply.
    assert (cluster.events, cluster.synced) == ([], [])


async def test_a_second_reconcile_of_an_unchanged_agent_writes_nothing() -> None:
    op, cluster = operator_with(deployment(), agent())
    await reconcile_agent(op, NS, "research")
    cluster.watch(op.world)  # the children and the status as written
    writes = cluster.writes()

    await reconcile_agent(op, NS, "research")

    assert cluster.writes() == writes


async def test_an_agent_of_a_missing_deployment_is_not_accepted_and_an_event_says_why() -> None:
    op, cluster = operator_with(agent())

    await reconcile_agent(op, NS, "research")

    assert cluster.applied == []
    ((_, status),) = cluster.statuses
    accepted = condition(status, conditions.ACCEPTED)
    assert (accepted["status"], accepted["reason"]) == ("False", conditions.DEPLOYMENT_NOT_FOUND)
    (event,) = cluster.events
    assert (event.kind, event.name, event.uid) == (names.AGENT_KIND, "research", "uid-PallasAgent-research")
    assert (event.reason, event.warning) == (conditions.DEPLOYMENT_NOT_FOUND, True)
    assert event.message == accepted["message"]

    cluster.watch(op.world)  # the status written is seen: the same reason is not posted again
    await reconcile_agent(op, NS, "research")
    assert (len(cluster.events), len(cluster.statuses)) == (1, 1)


async def test_an_agent_naming_an_undefined_server_runs_on_the_rest_and_a_warning_says_which() -> None:
    """The gateway seed: a reference to an undefined server is a warning, not a refusal."""
    op, cluster = operator_with(deployment(), agent("research", spec(servers=["argos", "nope"])))

    await reconcile_agent(op, NS, "research")

    kinds = {m["kind"] for m in cluster.applied}
    assert {"ConfigMap", "Service", "Deployment"} <= kinds  # it runs
    config = next(m for m in cluster.applied if m["kind"] == "ConfigMap")
    assert "nope" in next(iter(config["data"].values()))  # missingServers: get_health says it too
    ((_, status),) = cluster.statuses
    accepted = condition(status, conditions.ACCEPTED)
    message = "mcpServers nope not defined by the deployment: the agent runs without them"
    assert (accepted["status"], accepted["reason"], accepted["message"]) == (
        "True", conditions.SERVER_NOT_FOUND, message
    )  # fmt: skip
    (event,) = cluster.events
    assert (event.reason, event.warning, event.message) == (conditions.SERVER_NOT_FOUND, True, message)

    cluster.watch(op.world)  # the same warning is not posted again
    await reconcile_agent(op, NS, "research")
    assert len(cluster.events) == 1


async def test_an_edit_reaches_the_running_pods_at_once() -> None:
    op, cluster = operator_with(deployment(), agent())
    await reconcile_agent(op, NS, "research")
    cluster.watch(op.world)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "research-1", "namespace": NS, "labels": agent_selector("research")},
    }
    edited = agent("research", at("spec.instruction", "You research harder."))
    cluster.load(pod, edited)
    cluster.watch(op.world)

    await reconcile_agent(op, NS, "research")

    assert [m["kind"] for m in cluster.applied[3:]] == ["ConfigMap"]  # the pod template is unchanged
    ((namespace, labels, config_hash),) = cluster.synced
    assert (namespace, labels) == (NS, agent_selector("research"))
    assert cluster.objects[("Pod", NS, "research-1")]["metadata"]["annotations"] == {
        names.ANNOTATION_CONFIG_SYNC: config_hash
    }
    assert condition(cluster.statuses[-1][1], conditions.ACCEPTED)["status"] == "True"


async def test_a_disruption_budget_no_longer_wanted_is_deleted() -> None:
    op, cluster = operator_with(deployment(), agent("research", at("spec.replicas", 2)))
    await reconcile_agent(op, NS, "research")
    assert ("PodDisruptionBudget", NS, "research") in cluster.objects
    cluster.watch(op.world)
    cluster.load(agent("research", at("spec.replicas", 1)))
    cluster.watch(op.world)

    await reconcile_agent(op, NS, "research")

    assert cluster.deleted == [("PodDisruptionBudget", NS, "research")]


async def test_a_deleted_agent_is_forgotten_without_a_request() -> None:
    op, cluster = operator_with(deployment())

    assert await reconcile_agent(op, NS, "research") is None

    assert cluster.writes() == 0


async def test_an_agent_waits_for_its_dependencies_before_its_pods_start() -> None:
    op, cluster = operator_with(deployment(), agent("helper"), agent("research", spec(dependsOn=["helper"])))

    await reconcile_agent(op, NS, "research")

    assert {m["kind"] for m in cluster.applied} == {"ConfigMap", "Service"}  # no Deployment yet
    ((_, status),) = cluster.statuses
    waiting = condition(status, conditions.DEPENDENCIES_READY)
    assert (waiting["status"], waiting["reason"]) == ("False", conditions.DEPENDENCIES_NOT_READY)
    assert "helper" in waiting["message"]


async def test_an_agent_spec_the_operator_cannot_read_is_refused_with_an_event() -> None:
    # Only a CRD older than the operator lets such a spec through (the schema would prune it).
    op, cluster = operator_with(deployment(), agent("research", at("spec.retired", True), unchecked))

    await reconcile_agent(op, NS, "research")

    assert cluster.applied == []
    accepted = condition(cluster.statuses[-1][1], conditions.ACCEPTED)
    assert (accepted["status"], accepted["reason"]) == ("False", conditions.INVALID_SPEC)
    assert [e.reason for e in cluster.events] == [conditions.INVALID_SPEC]


async def test_a_reconcile_between_the_children_watch_events_writes_nothing() -> None:
    op, cluster = operator_with(deployment(), agent())
    await reconcile_agent(op, NS, "research")
    # The ConfigMap's watch event comes before the Deployment's and asks for its owner's reconcile.
    op.world.record("ConfigMap", cluster.objects[("ConfigMap", NS, names.config_map_name("research"))])
    writes = cluster.writes()

    await reconcile_agent(op, NS, "research")

    assert cluster.writes() == writes


async def test_a_workflow_agent_is_reconciled_again_when_its_steps_come() -> None:
    # Applied before its steps (kubectl apply of one file may send them in any order), the
    # workflow agent must hear of them: its steps are implied dependencies, so the operator's
    # index files it as their dependent, as it does an agent that lists them in `agents`.
    chain = spec(workflow={"chain": {"steps": ["research", "write"]}})
    routed = spec(workflow={"router": {"routes": ["research", "outside"]}}, a2aAgents=["outside"])
    op, _ = operator_with(deployment(), agent("article", chain), agent("desk", routed))

    assert op.world.dependents_of(NS, "research") == {"article", "desk"}
    assert op.world.dependents_of(NS, "write") == {"article"}
    assert op.world.dependents_of(NS, "outside") == set()  # an A2A agent is not a PallasAgent


async def test_a_workflow_agent_waits_for_its_steps_before_its_pods_start() -> None:
    chain = spec(workflow={"chain": {"steps": ["research", "write"]}})
    op, cluster = operator_with(deployment(), agent("research"), agent("write"), agent("article", chain))

    await reconcile_agent(op, NS, "article")

    assert {m["kind"] for m in cluster.applied} == {"ConfigMap", "Service"}  # no Deployment yet
    waiting = condition(cluster.statuses[-1][1], conditions.DEPENDENCIES_READY)
    assert (waiting["status"], waiting["reason"]) == ("False", conditions.DEPENDENCIES_NOT_READY)
    # `kubectl get pa -o wide` shows the shape in one word; an ordinary agent shows none.
    assert cluster.statuses[-1][1]["workflow"] == "chain"
    await reconcile_agent(op, NS, "research")
    assert "workflow" not in cluster.statuses[-1][1]


async def test_a_workflow_step_of_another_deployment_is_not_accepted() -> None:
    chain = spec(workflow={"chain": {"steps": ["far"]}})
    far = agent("far", spec(deployment="elsewhere"))
    op, cluster = operator_with(deployment(), deployment("elsewhere"), far, agent("flow", chain))

    await reconcile_agent(op, NS, "flow")

    accepted = condition(cluster.statuses[-1][1], conditions.ACCEPTED)
    assert (accepted["status"], accepted["reason"]) == ("False", conditions.STEP_OUTSIDE_DEPLOYMENT)
    assert "step 'far' is an agent of deployment 'elsewhere'" in accepted["message"]
