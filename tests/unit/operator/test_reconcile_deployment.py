"""`reconcile_deployment` on the in-memory world and cluster: registry, identity, monitoring, status."""

from __future__ import annotations

from pallas_api import conditions, names
from pallas_operator.reconcile.deployment import reconcile_deployment
from tests.support.fake_cluster import FakeCluster, condition, in_memory_operator, operator_with
from tests.support.operator import agent, at, deployment, unchecked

NS = "default"
REGISTRY = names.registry_name("ouranos")
BINDING = names.auth_delegation_binding(NS, "ouranos")
KUBERNETES_AUTH = at("spec.auth", {"mode": "kubernetes"})
SPARE_PROVIDER = at(
    "spec.providers.spare",
    {
        "type": "openai",
        "baseURL": "http://spare.llm.svc:8000/v1",
        "apiKey": {"secretKeyRef": {"name": "llm", "key": "SPARE"}},
    },
)


async def test_a_deployment_gets_its_registry_owned_and_a_status() -> None:
    op, cluster = operator_with(deployment(), agent())

    assert await reconcile_deployment(op, NS, "ouranos") is None

    applied = {(m["kind"], m["metadata"]["name"]) for m in cluster.applied}
    assert {("Deployment", REGISTRY), ("Service", REGISTRY)} <= applied
    for manifest in cluster.applied:
        (owner,) = manifest["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"]) == (names.DEPLOYMENT_KIND, "ouranos")
        assert manifest["metadata"]["labels"][names.LABEL_DEPLOYMENT] == "ouranos"
    ((key, status),) = cluster.statuses
    assert key == (names.DEPLOYMENT_KIND, NS, "ouranos")
    registry = condition(status, conditions.REGISTRY_AVAILABLE)
    assert (registry["status"], registry["reason"]) == ("False", conditions.REGISTRY_UNAVAILABLE)
    assert cluster.events == []


async def test_a_second_reconcile_of_an_unchanged_deployment_writes_nothing() -> None:
    op, cluster = operator_with(deployment("ouranos", KUBERNETES_AUTH), agent())
    await reconcile_deployment(op, NS, "ouranos")
    writes = cluster.writes()

    cluster.watch(op.world)
    await reconcile_deployment(op, NS, "ouranos")

    assert cluster.writes() == writes


async def test_kubernetes_auth_binds_the_agents_identity_and_unbinds_it_when_left() -> None:
    op, cluster = operator_with(deployment("ouranos", KUBERNETES_AUTH), agent())
    await reconcile_deployment(op, NS, "ouranos")
    binding = cluster.objects[("ClusterRoleBinding", "", BINDING)]
    assert binding["metadata"]["labels"][names.LABEL_NAMESPACE] == NS
    assert ("ServiceAccount", NS, names.agents_service_account("ouranos")) in cluster.objects
    authenticated = condition(cluster.statuses[-1][1], conditions.AUTHENTICATED)
    assert authenticated["status"] == "True"

    cluster.watch(op.world)
    cluster.load(deployment())  # back to auth.mode none
    cluster.watch(op.world)
    await reconcile_deployment(op, NS, "ouranos")

    assert ("ClusterRoleBinding", "", BINDING) in cluster.deleted
    assert ("ServiceAccount", NS, names.agents_service_account("ouranos")) in cluster.deleted


async def test_a_deleted_deployment_loses_its_binding_known_or_read() -> None:
    op, cluster = operator_with(deployment("ouranos", KUBERNETES_AUTH))
    await reconcile_deployment(op, NS, "ouranos")
    op.world.record(
        names.DEPLOYMENT_KIND, cluster.objects[(names.DEPLOYMENT_KIND, NS, "ouranos")], deleted=True
    )

    assert await reconcile_deployment(op, NS, "ouranos") is None
    assert cluster.deleted == [("ClusterRoleBinding", "", BINDING)]

    # A restarted operator does not know the binding: it reads it (here: gone) and deletes nothing.
    restarted = in_memory_operator(cluster)
    await reconcile_deployment(restarted, NS, "ouranos")
    assert cluster.deleted == [("ClusterRoleBinding", "", BINDING)]


async def test_agents_reachable_unauthenticated_at_a_public_url_are_warned_of_once() -> None:
    public = at("spec.registry.publicURLTemplate", "https://{agent}.example.com/mcp")
    op, cluster = operator_with(deployment("ouranos", public))

    await reconcile_deployment(op, NS, "ouranos")
    await reconcile_deployment(op, NS, "ouranos")  # the watch has not shown the status yet

    (event,) = cluster.events
    assert (event.kind, event.reason) == (names.DEPLOYMENT_KIND, conditions.UNAUTHENTICATED)


async def test_service_monitors_without_their_crd_are_asked_for_again_later() -> None:
    cluster = FakeCluster(service_monitor_crd=False)
    cluster.load(deployment("ouranos", at("spec.monitoring", {"serviceMonitor": {"enabled": True}})))
    op = in_memory_operator(cluster, monitoring_recheck=42.0)
    cluster.watch(op.world)

    assert await reconcile_deployment(op, NS, "ouranos") == 42.0

    assert not any(m["kind"] == "ServiceMonitor" for m in cluster.applied)
    monitoring = condition(cluster.statuses[-1][1], conditions.MONITORING_READY)
    assert monitoring["status"] == "False"


async def test_service_monitors_are_applied_once_their_crd_exists() -> None:
    op, cluster = operator_with(
        deployment("ouranos", at("spec.monitoring", {"serviceMonitor": {"enabled": True}}))
    )

    assert await reconcile_deployment(op, NS, "ouranos") is None

    monitors = [m for m in cluster.applied if m["kind"] == "ServiceMonitor"]
    assert monitors
    assert all(m["metadata"]["labels"][names.LABEL_DEPLOYMENT] == "ouranos" for m in monitors)
    assert condition(cluster.statuses[-1][1], conditions.MONITORING_READY)["status"] == "True"


async def test_a_spec_the_operator_cannot_read_is_reported_and_nothing_is_applied() -> None:
    # Only a CRD older than the operator lets such a spec through (the schema would prune it).
    op, cluster = operator_with(deployment("ouranos", at("spec.registry.retired", True), unchecked))

    assert await reconcile_deployment(op, NS, "ouranos") is None

    assert (cluster.applied, cluster.deleted) == ([], [])
    ready = condition(cluster.statuses[-1][1], conditions.READY)
    assert (ready["status"], ready["reason"]) == ("False", conditions.INVALID_SPEC)
    assert "upgrade the CRDs" in ready["message"]


async def test_the_status_lists_the_providers_and_servers_the_agents_use() -> None:
    two_providers = SPARE_PROVIDER
    spare_server = at("spec.mcpServers.spare", {"url": "http://spare.tools.svc:8000/mcp"})
    op, cluster = operator_with(
        deployment("ouranos", two_providers, spare_server),
        agent("research"),  # the default model's provider (vllm) and argos
        agent("ghost", at("spec.servers", ["argos", "gone"])),  # a server the spec lacks is not listed
    )

    await reconcile_deployment(op, NS, "ouranos")

    status = cluster.statuses[-1][1]
    assert status["agents"]["total"] == 2
    assert status["inUse"] == {"providers": ["vllm"], "mcpServers": ["argos"]}


async def test_an_agent_on_another_providers_model_puts_that_provider_in_use() -> None:
    spare = SPARE_PROVIDER
    op, cluster = operator_with(
        deployment("ouranos", spare),
        agent("research", at("spec.model", "spare.small"), at("spec.servers", [])),
    )

    await reconcile_deployment(op, NS, "ouranos")

    assert cluster.statuses[-1][1]["inUse"] == {"providers": ["spare"], "mcpServers": []}


async def test_a_cloud_identity_annotates_the_agents_service_account_in_either_auth_mode() -> None:
    irsa = {"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/bedrock-agents"}
    account = ("ServiceAccount", NS, names.agents_service_account("ouranos"))
    identity = at("spec.runtime.serviceAccount.annotations", irsa)
    op, cluster = operator_with(deployment("ouranos", identity), agent())

    await reconcile_deployment(op, NS, "ouranos")

    assert irsa.items() <= cluster.objects[account]["metadata"]["annotations"].items()
    agents_rights = [
        key for key in cluster.objects if key[0] in ("Role", "RoleBinding") and key[2] == account[2]
    ]
    assert not agents_rights  # the cloud identity gives no rights in the cluster

    cluster.watch(op.world)
    cluster.load(deployment("ouranos", identity, KUBERNETES_AUTH))
    cluster.watch(op.world)
    await reconcile_deployment(op, NS, "ouranos")
    assert irsa.items() <= cluster.objects[account]["metadata"]["annotations"].items()

    cluster.watch(op.world)
    cluster.load(deployment("ouranos"))  # neither: the pods go back to `default`, the account goes
    cluster.watch(op.world)
    await reconcile_deployment(op, NS, "ouranos")
    assert account in cluster.deleted


FS_SERVER = at("spec.mcpServers.fs", {"stdio": {"command": "fs-server"}})
TOKEN_SECRET = ("Secret", NS, names.bridge_token_secret_name("ouranos"))


async def test_a_deployment_hosting_stdio_servers_gets_its_bridge_credential_once() -> None:
    op, cluster = operator_with(deployment("ouranos", FS_SERVER), agent())
    await reconcile_deployment(op, NS, "ouranos")
    made = cluster.objects[TOKEN_SECRET]
    token = made["stringData"]["token"]
    assert len(token) >= 40
    (owner,) = made["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == (names.DEPLOYMENT_KIND, "ouranos")

    cluster.watch(op.world)
    await reconcile_deployment(op, NS, "ouranos")
    assert cluster.objects[TOKEN_SECRET]["stringData"]["token"] == token  # kept, never regenerated
    assert TOKEN_SECRET not in cluster.deleted

    del cluster.objects[TOKEN_SECRET]  # rotation: the user deletes it
    await reconcile_deployment(op, NS, "ouranos")
    assert cluster.objects[TOKEN_SECRET]["stringData"]["token"] != token


async def test_a_deployment_without_hosted_servers_gets_no_bridge_credential() -> None:
    op, cluster = operator_with(deployment(), agent())
    await reconcile_deployment(op, NS, "ouranos")
    assert TOKEN_SECRET not in cluster.objects


async def test_the_network_policy_guards_the_bridges_too() -> None:
    policy_on = at("spec.network.policy", True)
    op, cluster = operator_with(deployment("ouranos", FS_SERVER, policy_on), agent())
    await reconcile_deployment(op, NS, "ouranos")
    policies = {m["metadata"]["name"] for m in cluster.applied if m["kind"] == "NetworkPolicy"}
    assert policies == {names.network_policy_name("ouranos"), names.bridges_network_policy_name("ouranos")}

    op, cluster = operator_with(deployment("ouranos", policy_on), agent())
    await reconcile_deployment(op, NS, "ouranos")
    policies = {m["metadata"]["name"] for m in cluster.applied if m["kind"] == "NetworkPolicy"}
    assert policies == {names.network_policy_name("ouranos")}
