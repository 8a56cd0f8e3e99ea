"""Golden tests of every builder, plus the properties that must hold whatever the golden says.

The golden files under golden/ are the reviewed output; `PALLAS_UPDATE_GOLDEN=1 pytest ...`
rewrites them after an intended change (then read the diff before committing).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from pallas_api import names
from pallas_api.config import parse_config, render_config
from pallas_api.live import process_digest
from pallas_api.render import render_agent
from pallas_api.spec import PallasAgentSpec, PallasDeploymentSpec
from pallas_operator.builders import (
    AgentWorkload,
    Owner,
    agent_config_map,
    agent_deployment,
    agent_disruption_budget,
    agent_service,
    registry_children,
    service_monitors,
)
from tests.support.operator import agent, at, deployment, spec

GOLDEN = Path(__file__).parent / "golden"
AGENT_OWNER = Owner(names.AGENT_KIND, "research", "agents", "uid-agent")
DEPLOYMENT_OWNER = Owner(names.DEPLOYMENT_KIND, "ouranos", "agents", "uid-deployment")


def _deployment_spec(*mods: Any) -> PallasDeploymentSpec:
    manifest = deployment(
        "ouranos",
        at("spec.mcpServers.mnemosyne", {
            "url": "https://mnemosyne.example/mcp/",
            "headers": [{"name": "X-Api-Key", "valueFrom": {"secretKeyRef": {"name": "mn", "key": "key"}}}],
        }),
        *mods,
    )  # fmt: skip
    return PallasDeploymentSpec.model_validate(manifest["spec"])


def _agent_spec(*mods: Any) -> PallasAgentSpec:
    manifest = agent("research", spec(servers=["argos", "mnemosyne"]), *mods)
    return PallasAgentSpec.model_validate(manifest["spec"])


def _workload(
    agent_spec: PallasAgentSpec | None = None, dep: PallasDeploymentSpec | None = None
) -> AgentWorkload:
    agent_spec = agent_spec or _agent_spec()
    dep = dep or _deployment_spec()
    rendered = render_agent("research", agent_spec, dep, {})
    digest = process_digest(rendered.config)
    return AgentWorkload(AGENT_OWNER, "ouranos", agent_spec, dep, rendered.secrets, digest, "pallas:test")


def _golden(name: str, objects: Any) -> None:
    path = GOLDEN / f"{name}.yaml"
    text = yaml.safe_dump(objects, sort_keys=False, width=100)
    if os.environ.get("PALLAS_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"{path} missing: run with PALLAS_UPDATE_GOLDEN=1 and review it"
    assert yaml.safe_load(path.read_text()) == objects, f"{name} differs from {path}"


def test_agent_children_golden() -> None:
    w = _workload()
    rendered = render_agent("research", w.agent, w.deployment, {})
    _golden(
        "agent",
        [
            agent_config_map(AGENT_OWNER, "ouranos", render_config(rendered.config)),
            agent_deployment(w),
            agent_service(AGENT_OWNER, "ouranos", w.agent),
        ],
    )


def test_agent_with_replicas_and_no_affinity_golden() -> None:
    agent_spec = _agent_spec(spec(replicas=3), at("spec.service.sessionAffinity", "None"))
    _golden(
        "agent-replicas",
        [
            agent_service(AGENT_OWNER, "ouranos", agent_spec),
            agent_disruption_budget(AGENT_OWNER, "ouranos", agent_spec),
        ],
    )


def test_registry_children_golden() -> None:
    _golden("registry", registry_children(DEPLOYMENT_OWNER, _deployment_spec(), "pallas:test"))


def _pod(manifest: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = manifest["spec"]["template"]["spec"]
    return pod


def _secret_sources(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The Secret sources of a pod's Secret volume, after checking how it is mounted."""
    pod = _pod(manifest)
    (volume,) = [v for v in pod["volumes"] if v["name"] == "secrets"]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "secrets"]
    # Mounted whole (a subPath mount is never updated by the kubelet), read-only, where the
    # process looks (--secrets-dir); files readable by the pod's group only.
    assert mount == {"name": "secrets", "mountPath": names.SECRETS_DIR, "readOnly": True}
    command = pod["containers"][0]["command"]
    assert command[command.index("--secrets-dir") + 1] == names.SECRETS_DIR
    assert volume["projected"]["defaultMode"] == 0o440
    assert pod["securityContext"]["fsGroup"] == 65532
    return [source["secret"] for source in volume["projected"]["sources"]]


def test_the_registry_gets_every_provider_key_as_an_optional_file_and_no_restart_hash() -> None:
    spare = {"type": "anthropic", "apiKey": {"secretKeyRef": {"name": "spare", "key": "KEY"}}}
    dep = _deployment_spec(at("spec.providers.spare", spare), at("spec.providers.local", {"type": "openai"}))
    registry = registry_children(DEPLOYMENT_OWNER, dep, "pallas:test")[-1]
    # Every provider with a key, used by an agent or not; optional: a missing Secret never keeps
    # the catalogue down (the registry's check says the key is not set).
    assert _secret_sources(registry) == [
        {
            "name": "llm",
            "items": [{"key": "VLLM_KEY", "path": "PALLAS_PROVIDER_VLLM_API_KEY"}],
            "optional": True,
        },
        {
            "name": "spare",
            "items": [{"key": "KEY", "path": "PALLAS_PROVIDER_SPARE_API_KEY"}],
            "optional": True,
        },
    ]
    assert not any("valueFrom" in e for e in _pod(registry)["containers"][0]["env"])
    # Nothing to roll on: a rotated key is read from the file at the next check.
    assert "annotations" not in registry["spec"]["template"]["metadata"]


def test_service_monitors_golden() -> None:
    dep = _deployment_spec(
        at("spec.monitoring", {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}})
    )
    _golden("service-monitors", service_monitors(DEPLOYMENT_OWNER, dep))


def test_config_map_holds_a_loadable_config_and_no_secret_values() -> None:
    rendered = render_agent("research", _agent_spec(), _deployment_spec(), {})
    cm = agent_config_map(AGENT_OWNER, "ouranos", render_config(rendered.config))
    text = cm["data"]["agent.yaml"]
    config = parse_config(yaml.safe_load(text))
    assert config.provider.api_key_env == "PALLAS_PROVIDER_VLLM_API_KEY"
    # What messages name: the Secret and key the user wrote, not the variable chosen above.
    assert config.provider.api_key_origin() == "Secret llm key VLLM_KEY"
    assert "sk-" not in text
    assert "secretKeyRef" not in text


def test_secrets_reach_the_pod_only_as_files_of_its_secret_volume() -> None:
    manifest = agent_deployment(_workload())
    assert _secret_sources(manifest) == [
        {
            "name": "llm",
            "items": [{"key": "VLLM_KEY", "path": "PALLAS_PROVIDER_VLLM_API_KEY"}],
            "optional": True,
        },
        {
            "name": "mn",
            "items": [{"key": "key", "path": "PALLAS_SERVER_MNEMOSYNE_HEADER_0"}],
            "optional": True,
        },
    ]
    env = _pod(manifest)["containers"][0]["env"]
    assert not any(
        "valueFrom" in e or e["name"].startswith(("PALLAS_PROVIDER_", "PALLAS_SERVER_")) for e in env
    )


def test_an_agent_reading_no_secret_has_no_secret_volume() -> None:
    dep = _deployment_spec(at("spec.providers.vllm.apiKey", None))
    pod = _pod(agent_deployment(_workload(_agent_spec(spec(servers=["argos"])), dep=dep)))
    assert [v["name"] for v in pod["volumes"]] == ["config", "tmp"]


def _env(manifest: dict[str, Any]) -> dict[str, str]:
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container["env"]}


def _registry_env(dep: PallasDeploymentSpec) -> dict[str, str]:
    children = registry_children(DEPLOYMENT_OWNER, dep, "pallas:test")
    [registry] = [o for o in children if o["kind"] == "Deployment"]
    return _env(registry)


def test_pods_log_json_at_the_spec_log_level_naming_their_deployment() -> None:
    default = _env(agent_deployment(_workload()))
    assert {k: default[k] for k in ("PALLAS_LOG_FORMAT", "PALLAS_LOG_LEVEL")} == {
        "PALLAS_LOG_FORMAT": "json",  # even when a tty is attached to the pod
        "PALLAS_LOG_LEVEL": "INFO",
    }
    assert (default["PALLAS_NAMESPACE"], default["PALLAS_DEPLOYMENT"]) == ("agents", "ouranos")
    dep = _deployment_spec(at("spec.logLevel", "warning"))
    assert _env(agent_deployment(_workload(dep=dep)))["PALLAS_LOG_LEVEL"] == "WARNING"
    assert _registry_env(dep)["PALLAS_LOG_LEVEL"] == "WARNING"
    assert _registry_env(dep)["PALLAS_LOG_FORMAT"] == "json"
    own = _agent_spec(at("spec.logLevel", "debug"))
    assert _env(agent_deployment(_workload(own, dep=dep)))["PALLAS_LOG_LEVEL"] == "DEBUG"
    # A user's own env entry is the last word (runtime.env, then pod.env).
    own_env = [{"name": "PALLAS_LOG_LEVEL", "value": "ERROR"}]
    mine = _agent_spec(at("spec.logLevel", "debug"), at("spec.pod.env", own_env))
    assert _env(agent_deployment(_workload(mine)))["PALLAS_LOG_LEVEL"] == "ERROR"


def test_a_log_level_outside_the_enum_is_refused() -> None:
    with pytest.raises(ValueError, match="logLevel"):
        _agent_spec(at("spec.logLevel", "loud"))


def test_user_env_of_a_secrets_name_stays_an_env_var_beside_the_secret_file() -> None:
    agent_spec = _agent_spec(at("spec.pod.env", [{"name": "PALLAS_PROVIDER_VLLM_API_KEY", "value": "x"},
                                                   {"name": "LOG_LEVEL", "value": "debug"}]))  # fmt: skip
    manifest = agent_deployment(_workload(agent_spec))
    env = _pod(manifest)["containers"][0]["env"]
    names_ = [e["name"] for e in env]
    assert len(names_) == len(set(names_))
    assert {"name": "LOG_LEVEL", "value": "debug"} in env
    # The agent looks in its Secret volume first (`--secrets-dir`), so the file still wins.
    assert _secret_sources(manifest)[0]["items"][0]["path"] == "PALLAS_PROVIDER_VLLM_API_KEY"


def test_pods_are_hardened() -> None:
    pod = agent_deployment(_workload())["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["command"][:6] == [
        "pallas",
        "agent",
        "--config",
        "/etc/pallas/agent.yaml",
        "--port",
        "8000",
    ]
    assert container["resources"]["requests"]


def test_agents_accept_only_their_service_names_and_public_host() -> None:
    command = agent_deployment(_workload())["spec"]["template"]["spec"]["containers"][0]["command"]
    allowed = command[9::2]
    assert command[8::2] == ["--allowed-host"] * 4
    assert allowed == [
        "research",
        "research.agents",
        "research.agents.svc",
        "research.agents.svc.cluster.local",
    ]


def test_agents_accept_the_public_host_with_the_deployment_filled_in() -> None:
    template = "https://{deployment}-{agent}.{namespace}.example.com/mcp"
    dep = _deployment_spec(at("spec.registry.publicURLTemplate", template))
    command = agent_deployment(_workload(dep=dep))["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[8::2] == ["--allowed-host"] * 5
    assert command[-1] == "ouranos-research.agents.example.com"


def test_an_unusable_public_template_adds_no_host() -> None:
    dep = _deployment_spec(at("spec.registry.publicURLTemplate", "https://{tenant}.example.com/mcp"))
    command = agent_deployment(_workload(dep=dep))["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "{" not in " ".join(command)
    assert command[8::2] == ["--allowed-host"] * 4


def test_an_instruction_edit_leaves_the_pod_template_alone_and_an_image_change_rolls_it() -> None:
    def template(agent_spec: PallasAgentSpec | None = None, dep: PallasDeploymentSpec | None = None) -> Any:
        return agent_deployment(_workload(agent_spec, dep))["spec"]["template"]

    base = template()
    assert base["metadata"]["annotations"][names.ANNOTATION_CONFIG_HASH] == _workload().config_hash
    # Applied live by the running pods: the template does not move, so nothing rolls.
    live_edits = [
        _agent_spec(spec(instruction="Something else.")),
        _agent_spec(spec(requestParams={"temperature": 0.1}, maxIterations=3)),
        _agent_spec(spec(tools={"deny": ["argos__delete_*"]})),
        _agent_spec(spec(title="Researcher", description="Finds things")),
    ]
    for edited in live_edits:
        assert template(edited) == base
    assert template(dep=_deployment_spec(at("spec.model.default", "vllm.other-model"))) == base
    # What needs a new process: the image (the template itself), and the config's process part.
    image = _deployment_spec(at("spec.runtime.image", "registry.example/pallas:9"))
    assert template(dep=image) != base
    history = template(_agent_spec(spec(history={"maxMessages": 10})))
    assert history["metadata"]["annotations"][names.ANNOTATION_CONFIG_HASH] != _workload().config_hash
    # A Secret key the pods read is a volume item: naming another one is a new pod.
    other_key = _deployment_spec(at("spec.providers.vllm.apiKey.secretKeyRef.key", "OTHER"))
    assert template(dep=other_key)["spec"]["volumes"] != base["spec"]["volumes"]


def test_image_comes_from_the_deployment_else_the_operator_default() -> None:
    w = _workload()
    assert agent_deployment(w)["spec"]["template"]["spec"]["containers"][0]["image"] == "pallas:test"
    custom = _deployment_spec(at("spec.runtime.image", "registry.example/pallas:9"))
    image = agent_deployment(dataclasses.replace(w, deployment=custom))
    assert image["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/pallas:9"
    dep = registry_children(DEPLOYMENT_OWNER, custom, "pallas:test")[-1]
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/pallas:9"


def test_single_replica_has_no_disruption_budget() -> None:
    assert agent_disruption_budget(AGENT_OWNER, "ouranos", _agent_spec()) is None


@pytest.mark.parametrize(
    "workload",
    [
        lambda: agent_deployment(_workload()),
        lambda: agent_deployment(_workload(_agent_spec(spec(replicas=4)))),
        lambda: registry_children(DEPLOYMENT_OWNER, _deployment_spec(), "pallas:test")[-1],
    ],
    ids=["agent", "agent-replicas", "registry"],
)
def test_rollouts_surge_before_they_take_a_pod_away(workload: Any) -> None:
    # Left to Kubernetes' defaults (25 % each) four replicas would lose one before a new one is up.
    assert workload()["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }


def test_an_agent_pod_pauses_then_drains_within_its_grace_period() -> None:
    def stopping(w: AgentWorkload) -> tuple[Any, int]:
        pod = agent_deployment(w)["spec"]["template"]["spec"]
        return pod["containers"][0]["lifecycle"], pod["terminationGracePeriodSeconds"]

    pause = {"preStop": {"sleep": {"seconds": 5}}}  # the kubelet's sleep: nothing runs in the container
    assert stopping(_workload()) == (pause, 5 + 120 + 25)  # pause + drainSeconds (default) + margin
    dep = _deployment_spec(at("spec.runtime.drainSeconds", 600))
    assert stopping(_workload(dep=dep)) == (pause, 5 + 600 + 25)
    own = _agent_spec(at("spec.pod.drainSeconds", 0))
    assert stopping(_workload(own, dep=dep)) == (pause, 5 + 0 + 25)  # the agent's own wins
    rendered = render_agent("research", own, dep, {}).config
    assert rendered.drain_seconds == 0  # and the process is told the same


def test_the_registry_pauses_then_stops_quickly() -> None:
    pod = registry_children(DEPLOYMENT_OWNER, _deployment_spec(), "pallas:test")[-1]["spec"]["template"][
        "spec"
    ]
    assert pod["containers"][0]["lifecycle"] == {"preStop": {"sleep": {"seconds": 5}}}
    assert pod["terminationGracePeriodSeconds"] == 15


@pytest.mark.parametrize("seconds", [-1, 3601])
def test_a_drain_outside_zero_to_an_hour_is_refused(seconds: int) -> None:
    with pytest.raises(ValueError, match="drainSeconds"):
        _agent_spec(at("spec.pod.drainSeconds", seconds))


@pytest.mark.parametrize(
    "objects",
    [
        lambda: [agent_deployment(_workload()), agent_service(AGENT_OWNER, "ouranos", _agent_spec())],
        lambda: registry_children(DEPLOYMENT_OWNER, _deployment_spec(), "pallas:test"),
    ],
    ids=["agent", "registry"],
)
def test_every_child_carries_the_contract_labels_and_an_owner(objects: Any) -> None:
    for obj in objects():
        labels = obj["metadata"]["labels"]
        for key in (names.LABEL_NAME, names.LABEL_INSTANCE, names.LABEL_COMPONENT, names.LABEL_PART_OF,
                    names.LABEL_MANAGED_BY, names.LABEL_DEPLOYMENT):  # fmt: skip
            assert labels[key], (obj["kind"], key)
        assert labels[names.LABEL_MANAGED_BY] == "pallas-operator"
        assert obj["metadata"]["ownerReferences"][0]["controller"] is True


def test_a_postgres_conversation_store_reaches_the_pod_as_a_secret_file() -> None:
    dep = _deployment_spec(
        at("spec.conversations", {
            "store": "postgres",
            "postgres": {"dsn": {"secretKeyRef": {"name": "pg", "key": "dsn"}}, "maxConnections": 3},
            "maxMessages": 50, "ttlSeconds": 86400,
        }),
    )  # fmt: skip
    rendered = render_agent("research", _agent_spec(), dep, {})
    store = rendered.config.conversations
    assert (store.type, store.dsn_env, store.ttl_seconds) == ("postgres", "PALLAS_CONVERSATIONS_DSN", 86400)
    assert store.max_connections == 3  # the one pool of each agent pod
    assert "maxConnections: 3" in render_config(rendered.config)
    assert rendered.config.history.max_messages == 50
    digest = process_digest(rendered.config)
    workload = AgentWorkload(
        AGENT_OWNER, "ouranos", _agent_spec(), dep, rendered.secrets, digest, "pallas:test"
    )
    pg = next(s for s in _secret_sources(agent_deployment(workload)) if s["name"] == "pg")
    assert pg["items"] == [{"key": "dsn", "path": "PALLAS_CONVERSATIONS_DSN"}]
    default = _deployment_spec(
        at("spec.conversations.postgres", {"dsn": {"secretKeyRef": {"name": "pg", "key": "dsn"}}})
    )
    assert default.conversations.postgres is not None
    assert default.conversations.postgres.max_connections == 5
    # The default store of a pod is memory; pallas run's is SQLite.
    assert (
        render_agent("research", _agent_spec(), _deployment_spec(), {}).config.conversations.type == "memory"
    )
    local = render_agent("research", _agent_spec(), _deployment_spec(), {}, local=True)
    assert local.config.conversations.type == "sqlite"
    # An agent's own limit wins over the deployment's.
    own = render_agent("research", _agent_spec(at("spec.history", {"maxMessages": 7})), dep, {})
    assert own.config.history.max_messages == 7


def test_an_agent_pods_default_memory_limit_follows_its_budgets() -> None:
    def limits(*mods: Any) -> dict[str, Any]:
        pod = agent_deployment(_workload(_agent_spec(*mods)))["spec"]["template"]["spec"]
        return dict(pod["containers"][0]["resources"])

    default = limits()
    # 768 MiB for the process, twice the 64 MiB of conversations, 1000 sessions of 64 KiB
    assert default["limits"] == {"memory": "960Mi"}
    assert default["requests"] == {"cpu": "100m", "memory": "256Mi"}
    assert limits(spec(history={"maxBytes": 1024**3}))["limits"] == {"memory": "2880Mi"}
    assert limits(spec(sessions={"maxSessions": 10_000}))["limits"] == {"memory": "1536Mi"}
    # A spec's own resources are taken as written.
    own = {"limits": {"memory": "300Mi"}}
    assert limits(spec(history={"maxBytes": 1024**3}, pod={"resources": own})) == own
