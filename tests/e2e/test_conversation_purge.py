"""A deleted agent's conversations go with it: the finalizer, the purge Job, PostgreSQL (seed M37).

An agent of a deployment keeping conversations in PostgreSQL (a throw-away server on the node's
bridge address) answers one turn; deleting the agent stops its pods, the operator's Job runs
`pallas conversations purge` with the deployment's DSN Secret, and the agent goes once its rows
are gone. Another agent of the deployment keeps its own.

Run alone (it starts the real node):
`flock /work/node.lock .venv/bin/pytest tests/e2e/test_conversation_purge.py`.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest
from fastmcp import Client
from lightkube import Client as KubeClient
from lightkube.resources.batch_v1 import Job

from pallas_api import names
from pallas_io.kube import PallasAgent
from tests.support import e2e
from tests.support.cluster import LocalCluster
from tests.support.fake_llm import FakeOpenAI, Text
from tests.support.operator import condition, kubectl_apply
from tests.support.postgres import Postgres, running_postgres

MODEL = "fake-model"
DEPLOYMENT = "keepers"
GOING, STAYING = "going", "staying"
DB_SECRET = "conversations-db"
READY_WITHIN = 120
PURGED_WITHIN = 180


@dataclass
class Purging:
    """The namespace under test, its PostgreSQL, and the clients to look at both."""

    postgres: Postgres
    kube: KubeClient
    cluster: LocalCluster
    namespace: str

    def url(self, agent: str) -> str:
        return names.agent_url(agent, self.namespace, 8000)

    def ready(self, agent: str) -> bool:
        obj = self.kube.get(PallasAgent, agent, namespace=self.namespace).to_dict()
        return condition(obj, "Ready") == ("True", "AgentReady")

    def agent(self, agent: str) -> dict[str, Any] | None:
        """The PallasAgent as the API server has it (still `Terminating`, say); None once gone."""
        found = self.kube.list(PallasAgent, namespace=self.namespace, fields={"metadata.name": agent})
        return next((obj.to_dict() for obj in found), None)

    def diagnose(self) -> str:
        return self.cluster.kubectl(
            "get", "pods,jobs,events,pallasagents", "-n", self.namespace, "-o", "wide", check=False
        ).stdout

    async def rows_of(self, agent_prefix: str) -> int:
        connection = await asyncpg.connect(self.postgres.dsn.replace(self.postgres.host, "127.0.0.1"))
        try:
            found = await connection.fetchval(
                "SELECT count(*) FROM pallas_conversations WHERE agent LIKE $1", f"{agent_prefix}%"
            )
        finally:
            await connection.close()
        return int(found or 0)


def manifests(
    namespace: str, node: e2e.LocalNode, llm: FakeOpenAI, postgres: Postgres
) -> list[dict[str, Any]]:
    meta = {"namespace": namespace}
    conversations = {
        "store": "postgres",
        "postgres": {"dsn": {"secretKeyRef": {"name": DB_SECRET, "key": "dsn"}}, "maxConnections": 2},
        "retainAfterDeleteSeconds": 0,
    }
    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": DB_SECRET, **meta},
         "stringData": {"dsn": postgres.dsn}},
        *e2e.quiet_deployment(namespace, DEPLOYMENT, llm.base_url, MODEL, conversations=conversations),
        *(
            {
                "apiVersion": "pallas.dev/v1alpha1",
                "kind": "PallasAgent",
                "metadata": {"name": agent, **meta},
                "spec": {
                    "deployment": DEPLOYMENT,
                    "instruction": "Answer briefly.",
                    "pod": {"nodeSelector": {"kubernetes.io/hostname": node.name}},
                },
            }
            for agent in (GOING, STAYING)
        ),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def purging(pallas_crds: LocalCluster) -> Iterator[Purging]:
    node = e2e.local_node()
    namespace = f"t-e2e-purge-{secrets.token_hex(3)}"
    e2e.create_namespace(pallas_crds, namespace)
    loop = e2e.LoopThread()
    operator: e2e.OperatorRelease | None = None
    kube = KubeClient(config=pallas_crds.config(), field_manager="pallas-tests")
    try:
        with running_postgres(host=node.ip, clients=node.cluster_cidr) as postgres:
            llm = loop.enter(FakeOpenAI(default=lambda _: Text("noted"), models=[MODEL], host=node.ip))
            operator = e2e.install_operator(pallas_crds, namespace, node.image)
            kubectl_apply(pallas_crds, *manifests(namespace, node, llm, postgres))
            try:
                yield Purging(postgres, kube, pallas_crds, namespace)
            finally:
                # The agents left carry the finalizer: they must go while the operator that removes
                # it (and the store it purges) still run, or the namespace would wait for them
                # forever (docs/operator.md, "Deleting an agent": delete agents before the chart).
                pallas_crds.kubectl(
                    "delete", "pallasagents", "--all", "-n", namespace, "--timeout=110s", check=False
                )
    finally:
        kube.close()
        if operator is not None:
            operator.uninstall()
        e2e.delete_namespace(pallas_crds, namespace)
        loop.close()


async def say(purging: Purging, agent: str) -> None:
    async with Client(purging.url(agent), timeout=60) as client:
        await client.call_tool("send_message", {"message": "remember this", "conversation_id": "kept"})


async def test_a_deleted_agents_conversations_are_purged_before_it_goes(purging: Purging) -> None:
    for agent in (GOING, STAYING):
        await e2e.until(
            f"{agent} Ready", lambda a=agent: purging.ready(a), READY_WITHIN, diagnose=purging.diagnose
        )
        await say(purging, agent)
    going = purging.agent(GOING)
    assert going is not None
    assert names.CONVERSATIONS_FINALIZER in going["metadata"]["finalizers"]
    uid = going["metadata"]["uid"]
    identity = f"{purging.namespace}/{DEPLOYMENT}/{GOING}/{uid}"
    assert await purging.rows_of(identity) == 1

    purging.cluster.kubectl("delete", "pallasagent", GOING, "-n", purging.namespace, "--wait=false")
    await e2e.until(
        "the agent gone", lambda: purging.agent(GOING) is None, PURGED_WITHIN, diagnose=purging.diagnose
    )

    assert await purging.rows_of(identity) == 0
    assert await purging.rows_of(f"{purging.namespace}/{DEPLOYMENT}/{STAYING}/") == 1
    jobs = purging.kube.list(Job, namespace=purging.namespace, labels={names.LABEL_AGENT: GOING})
    (job,) = list(jobs)
    assert job.status is not None
    assert job.status.succeeded == 1
    events = purging.cluster.kubectl(
        "get", "events", "-n", purging.namespace, "--field-selector", f"involvedObject.name={GOING}",
        "-o", "jsonpath={.items[*].reason}", check=False,
    ).stdout  # fmt: skip
    assert "PurgingConversations" in events
    assert "ConversationsPurged" in events
