"""The `pallas.dev/conversations` finalizer on the in-memory world and cluster (docs/operator.md).

A deleted agent of a PostgreSQL-backed deployment: its pods stop, a Job purges its conversations,
then the finalizer goes; a failure or a purge that takes too long is an Event, and the agent goes
anyway. The Job itself and the finalizer on a real API server are the e2e tier's
(tests/e2e/test_conversation_purge.py).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pallas_api import names
from pallas_operator.builders.purge import DSN_ENV, purge_job_name
from pallas_operator.reconcile.agent import reconcile_agent
from pallas_operator.reconcile.conversation_purge import PURGE_BOUND, job_outcome
from tests.support.fake_cluster import FakeCluster, operator_with
from tests.support.operator import agent, at, deployment

NS = "default"
AGENT_KEY = (names.AGENT_KIND, NS, "research")
IDENTITY = f"{NS}/ouranos/research/uid-PallasAgent-research"
JOB = purge_job_name(IDENTITY)
POSTGRES = at(
    "spec.conversations",
    {"store": "postgres", "postgres": {"dsn": {"secretKeyRef": {"name": "db", "key": "DSN"}}}},
)


def delete_agent(cluster: FakeCluster, op: Any, ago: float = 0.0) -> None:
    """What `kubectl delete` does to an object with finalizers: a deletionTimestamp, nothing more."""
    when = datetime.now(UTC) - timedelta(seconds=ago)
    meta = cluster.objects[AGENT_KEY]["metadata"]
    meta["deletionTimestamp"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    meta["resourceVersion"] = cluster._version()
    cluster.watch(op.world)


def finish_job(cluster: FakeCluster, condition: str) -> None:
    job = cluster.objects[("Job", NS, JOB)]
    job["status"] = {
        "conditions": [
            {
                "type": condition,
                "status": "True",
                "reason": "BackoffLimitExceeded",
                "message": "Job has reached the specified backoff limit",
            }
        ]
    }


async def created_and_reconciled(*mods: Any) -> tuple[Any, FakeCluster]:
    op, cluster = operator_with(deployment("ouranos", *mods), agent())
    await reconcile_agent(op, NS, "research")
    cluster.watch(op.world)
    return op, cluster


async def test_an_agent_of_a_postgres_deployment_carries_the_finalizer_and_a_memory_one_does_not() -> None:
    op, cluster = await created_and_reconciled(POSTGRES)
    assert cluster.objects[AGENT_KEY]["metadata"]["finalizers"] == [names.CONVERSATIONS_FINALIZER]
    writes = cluster.writes()
    await reconcile_agent(op, NS, "research")  # steady state: no write
    assert cluster.writes() == writes

    _, memory = await created_and_reconciled()
    assert "finalizers" not in memory.objects[AGENT_KEY]["metadata"]
    assert memory.finalizer_writes == []

    # A null retention keeps the conversations: the finalizer comes off again.
    op, cluster = await created_and_reconciled(POSTGRES)
    dep = cluster.objects[(names.DEPLOYMENT_KIND, NS, "ouranos")]
    dep["spec"]["conversations"]["retainAfterDeleteSeconds"] = None
    cluster.watch(op.world)
    await reconcile_agent(op, NS, "research")
    assert cluster.objects[AGENT_KEY]["metadata"]["finalizers"] == []


async def test_a_deleted_agent_stops_its_pods_then_a_job_purges_and_the_finalizer_goes() -> None:
    op, cluster = await created_and_reconciled(
        POSTGRES, at("spec.conversations.retainAfterDeleteSeconds", 3600)
    )
    cluster.load(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "research-1",
                "namespace": NS,
                "labels": {names.LABEL_AGENT: "research", names.LABEL_COMPONENT: "agent"},
            },
        }
    )
    delete_agent(cluster, op)

    # Step 1: its Deployment goes, no Job while a pod still runs (it might write a last turn).
    assert await reconcile_agent(op, NS, "research") == 5.0
    assert ("Deployment", NS, "research") in cluster.deleted
    assert ("Job", NS, JOB) not in cluster.objects
    del cluster.objects[("Pod", NS, "research-1")]
    op.world.record(
        "Deployment", {"metadata": {"namespace": NS, "name": "research"}}, deleted=True
    )  # the watch

    # Step 2: the Job, with the deployment's Secret as the DSN and the retention.
    assert await reconcile_agent(op, NS, "research") == 5.0
    job = cluster.objects[("Job", NS, JOB)]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == [
        "pallas",
        "conversations",
        "purge",
        "--identity",
        IDENTITY,
        "--dsn-env",
        DSN_ENV,
        "--after",
        "3600",
    ]
    assert container["env"] == [
        {"name": DSN_ENV, "valueFrom": {"secretKeyRef": {"name": "db", "key": "DSN"}}}
    ]
    assert container["image"] == "pallas:test"
    (owner,) = job["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == (names.DEPLOYMENT_KIND, "ouranos", False)
    assert job["spec"]["backoffLimit"] > 0
    assert job["spec"]["activeDeadlineSeconds"] < PURGE_BOUND
    assert [e.reason for e in cluster.events] == ["PurgingConversations"]
    assert cluster.objects[AGENT_KEY]["metadata"]["finalizers"] == [names.CONVERSATIONS_FINALIZER]

    # Running: looked at again, nothing written.
    writes = cluster.writes()
    assert await reconcile_agent(op, NS, "research") == 5.0
    assert cluster.writes() == writes

    # Step 3: done; the finalizer goes and with it the agent.
    finish_job(cluster, "Complete")
    assert await reconcile_agent(op, NS, "research") is None
    assert AGENT_KEY not in cluster.objects
    assert cluster.events[-1].reason == "ConversationsPurged"
    assert not cluster.events[-1].warning
    assert "3600s from now" in cluster.events[-1].message


async def test_a_failed_or_overlong_purge_is_an_event_and_never_blocks_the_deletion() -> None:
    op, cluster = await created_and_reconciled(POSTGRES)
    delete_agent(cluster, op)
    await reconcile_agent(op, NS, "research")
    finish_job(cluster, "Failed")
    assert await reconcile_agent(op, NS, "research") is None
    assert AGENT_KEY not in cluster.objects
    warning = cluster.events[-1]
    assert (warning.reason, warning.warning) == ("ConversationsNotPurged", True)
    assert f"Job {JOB} failed" in warning.message
    assert "abandonedAfterSeconds" in warning.message
    assert "BackoffLimitExceeded" in warning.message

    # A Job that never ends (the database unreachable, the image not pulled): a bound.
    op, cluster = await created_and_reconciled(POSTGRES)
    delete_agent(cluster, op)
    await reconcile_agent(op, NS, "research")
    delete_agent(cluster, op, ago=PURGE_BOUND + 1)
    assert await reconcile_agent(op, NS, "research") is None
    assert AGENT_KEY not in cluster.objects
    assert "took longer than" in cluster.events[-1].message


async def test_a_deleted_agent_whose_deployment_went_first_is_let_go_with_a_warning() -> None:
    op, cluster = await created_and_reconciled(POSTGRES)
    del cluster.objects[(names.DEPLOYMENT_KIND, NS, "ouranos")]
    op.world.record(names.DEPLOYMENT_KIND, {"metadata": {"namespace": NS, "name": "ouranos"}}, deleted=True)
    delete_agent(cluster, op)
    assert await reconcile_agent(op, NS, "research") is None
    assert AGENT_KEY not in cluster.objects
    assert ("Job", NS, JOB) not in cluster.objects
    assert "its PallasDeployment is gone" in cluster.events[-1].message


async def test_a_stale_finalizer_write_is_tried_again_soon_not_failed() -> None:
    op, cluster = operator_with(deployment("ouranos", POSTGRES), agent())
    cluster.objects[AGENT_KEY]["metadata"]["resourceVersion"] = "changed-since"  # the watch lags
    assert await reconcile_agent(op, NS, "research") == 1.0
    assert cluster.finalizer_writes == []


def test_a_jobs_outcome_is_read_from_its_conditions() -> None:
    assert job_outcome(None) == "absent"
    assert job_outcome({"status": {"active": 1}}) == "running"
    assert job_outcome({"status": {"conditions": [{"type": "Complete", "status": "True"}]}}) == "succeeded"
    assert job_outcome({"status": {"conditions": [{"type": "Failed", "status": "True"}]}}) == "failed"
    assert (
        job_outcome({"status": {"conditions": [{"type": "Failed", "status": "False"}], "succeeded": 1}})
        == "succeeded"
    )
