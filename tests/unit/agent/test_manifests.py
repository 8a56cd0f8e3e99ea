"""pallas run's manifest reading and local planning: ports, order, secrets, clear errors."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from pallas_runtime.commands.run.command import with_log_level
from pallas_runtime.commands.run.manifests import ManifestError, load_manifests, plan_local
from pallas_runtime.llm.provider import missing_key_message

REPO = Path(__file__).resolve().parents[3]

DEPLOYMENT = {
    "apiVersion": "pallas.dev/v1alpha1",
    "kind": "PallasDeployment",
    "metadata": {"name": "d"},
    "spec": {
        "model": {"default": "p.m"},
        "providers": {"p": {"type": "openai", "apiKey": {"secretKeyRef": {"name": "llm", "key": "P_KEY"}}}},
        "mcpServers": {
            "tools": {
                "url": "http://127.0.0.1:9/mcp",
                "headers": [{"name": "X-Key", "valueFrom": {"secretKeyRef": {"name": "t", "key": "T_KEY"}}}],
            }
        },
    },
}


def agent(name: str, **spec: object) -> dict[str, object]:
    return {
        "apiVersion": "pallas.dev/v1alpha1",
        "kind": "PallasAgent",
        "metadata": {"name": name},
        "spec": {"deployment": "d", **spec},
    }


def write(tmp_path: Path, *docs: object) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def test_ports_order_and_urls(tmp_path: Path) -> None:
    path = write(tmp_path, DEPLOYMENT, agent("boss", agents=["worker"]), agent("worker"))
    plan = plan_local(load_manifests([path]), 25000, environ={})
    assert plan.registry_port == 25000
    assert [(a.manifest.name, a.port) for a in plan.agents] == [("worker", 25002), ("boss", 25001)]
    boss = plan.agents[1]
    assert boss.url == "http://127.0.0.1:25001/mcp"
    assert boss.rendered.config.agents[0].url == "http://127.0.0.1:25002/mcp"


def test_secrets_come_from_secret_manifests_else_the_environment(tmp_path: Path) -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "llm"},
        "data": {"P_KEY": base64.b64encode(b"from-manifest").decode()},
    }
    path = write(tmp_path, DEPLOYMENT, secret, agent("a", servers=["tools"]))
    [local] = plan_local(
        load_manifests([path]), 25000, environ={"T_KEY": "from-env", "P_KEY": "ignored"}
    ).agents
    assert local.environ["PALLAS_PROVIDER_P_API_KEY"] == "from-manifest"
    assert local.environ["PALLAS_SERVER_TOOLS_HEADER_0"] == "from-env"


def test_the_registry_gets_the_key_of_every_provider_even_unused_ones(tmp_path: Path) -> None:
    deployment = {**DEPLOYMENT, "spec": {**DEPLOYMENT["spec"]}}  # type: ignore[dict-item]
    deployment["spec"]["providers"] = {
        **DEPLOYMENT["spec"]["providers"],  # type: ignore[index]
        "spare": {"type": "anthropic", "apiKey": {"secretKeyRef": {"name": "llm", "key": "SPARE_KEY"}}},
        "unset": {"type": "anthropic", "apiKey": {"secretKeyRef": {"name": "llm", "key": "UNSET_KEY"}}},
        "local": {"type": "openai", "baseURL": "http://127.0.0.1:9/v1"},
    }
    path = write(tmp_path, deployment, agent("a"))
    plan = plan_local(load_manifests([path]), 25000, environ={"P_KEY": "k-p", "SPARE_KEY": "k-spare"})
    assert plan.provider_keys == {("default", "d", "p"): "k-p", ("default", "d", "spare"): "k-spare"}


def test_only_one_agent_runs_without_a_registry(tmp_path: Path) -> None:
    path = write(tmp_path, DEPLOYMENT, agent("a"), agent("b"))
    plan = plan_local(load_manifests([path]), 25000, only_agent="b", environ={})
    assert ([a.manifest.name for a in plan.agents], plan.registry_port) == (["b"], None)
    with pytest.raises(ManifestError, match=r"--agent c: no such PallasAgent \(have: a, b\)"):
        plan_local(load_manifests([path]), 25000, only_agent="c", environ={})


@pytest.mark.parametrize(
    ("docs", "error"),
    [
        (
            [DEPLOYMENT, agent("a", description="x" * 101)],
            r"m\.yaml#2: PallasAgent/a: spec\.description: String should have at most 100 characters",
        ),
        (
            [DEPLOYMENT, agent("a", model="no-dot")],
            r"PallasAgent/a: spec\.model: String should match pattern",
        ),
        (
            [DEPLOYMENT, {**agent("a"), "apiVersion": "pallas.dev/v1"}],
            r"apiVersion must be pallas\.dev/v1alpha1",
        ),
        ([agent("a")], r"spec\.deployment: PallasDeployment 'd' not found in namespace 'default'"),
        (
            [DEPLOYMENT, agent("a", agents=["ghost"])],
            r"PallasAgent/a: spec\.agents/dependsOn: PallasAgents not found in namespace 'default' of the "
            r"files: ghost",
        ),
        (
            [DEPLOYMENT, agent("a", dependsOn=["b"]), agent("b", dependsOn=["a"])],
            r"PallasAgent/a: spec\.agents/dependsOn: agents and dependsOn form a cycle: a -> b -> a",
        ),
        (
            [DEPLOYMENT, agent("d-registry")],
            r"metadata\.name: the name 'd-registry' is taken by the registry",
        ),
        ([DEPLOYMENT, agent("a"), agent("a")], r"PallasAgent/a: defined twice"),
        ([DEPLOYMENT, ["not", "a", "mapping"]], r"a manifest must be a mapping"),
        ([DEPLOYMENT], r"no PallasAgent to run"),
    ],
)
def test_errors_name_file_object_and_field(tmp_path: Path, docs: list[object], error: str) -> None:
    with pytest.raises(ManifestError, match=error):
        plan_local(load_manifests([write(tmp_path, *docs)]), 25000, environ={})


def test_unreadable_and_invalid_yaml(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"nope\.yaml: cannot read"):
        load_manifests([tmp_path / "nope.yaml"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [")
    with pytest.raises(ManifestError, match=r"bad\.yaml: not valid YAML"):
        load_manifests([bad])


def test_other_kinds_are_listed_as_ignored(tmp_path: Path) -> None:
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "agents"}}
    manifests = load_manifests([write(tmp_path, namespace, DEPLOYMENT, agent("a"))])
    assert manifests.ignored == [f"{tmp_path / 'm.yaml'}#1: Namespace/agents"]


def test_the_shipped_examples_plan_cleanly() -> None:
    for example in sorted((REPO / "examples").glob("*.yaml")):
        plan = plan_local(load_manifests([example]), 24200, environ={})
        assert plan.agents, example


def test_unresolved_secrets_are_reported(tmp_path: Path) -> None:
    path = write(tmp_path, DEPLOYMENT, agent("a"))
    [local] = plan_local(load_manifests([path]), 25000, environ={}).agents
    assert local.unresolved == ("secretKeyRef llm/P_KEY",)
    assert "PALLAS_PROVIDER_P_API_KEY" not in local.environ


def test_messages_about_a_missing_secret_name_the_variable_the_user_exports(tmp_path: Path) -> None:
    """Not PALLAS_PROVIDER_P_API_KEY, which the user never wrote: the secretKeyRef's key."""
    path = write(tmp_path, DEPLOYMENT, agent("a", servers=["tools"]))
    config = plan_local(load_manifests([path]), 25000, environ={}).agents[0].rendered.config
    assert missing_key_message(config.provider) == (
        "openai provider 'p': no API key: environment variable P_KEY (secretKeyRef llm/P_KEY) is not set"
    )
    assert config.servers[0].headers[0].value_origin() == "environment variable T_KEY (secretKeyRef t/T_KEY)"


def test_pallas_run_logs_at_the_most_verbose_log_level_of_its_agents_unless_told(tmp_path: Path) -> None:
    deployment = {**DEPLOYMENT, "spec": {**DEPLOYMENT["spec"], "logLevel": "warning"}}
    path = write(tmp_path, deployment, agent("quiet"), agent("chatty", logLevel="debug"))
    plan = plan_local(load_manifests([path]), 25000, environ={})
    assert with_log_level(plan, {})["PALLAS_LOG_LEVEL"] == "DEBUG"
    assert with_log_level(plan, {"PALLAS_LOG_LEVEL": "error"})["PALLAS_LOG_LEVEL"] == "error"
    only_quiet = plan_local(load_manifests([path]), 25000, "quiet", environ={})
    assert with_log_level(only_quiet, {})["PALLAS_LOG_LEVEL"] == "WARNING"
