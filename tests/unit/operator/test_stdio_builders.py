"""The children of a hosted stdio server: golden, and what must hold whatever the golden says."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

import pytest

from pallas_api import conditions, names
from pallas_api.render import RenderError, bridge_token_binding, render_agent
from pallas_api.spec import PallasAgentSpec, PallasDeploymentSpec
from pallas_api.status import PallasDeploymentStatus
from pallas_operator.builders import Owner, stdio_children
from pallas_operator.builders.network import agents_selector, bridges_network_policy
from pallas_operator.builders.pod import secret_volume
from pallas_operator.builders.stdio import (
    BRIDGE_TOKEN_DIR,
    BRIDGE_TOKEN_VOLUME,
    EXPORT_SECRETS,
    SERVER_SHELL,
    bridge_token_secret,
    stdio_labels,
)
from pallas_operator.status import DeploymentObservation, HostedServer, Workload, deployment_status
from pallas_runtime.commands.bridge import BridgeCommand
from tests.support.operator import agent, at, deployment, spec
from tests.unit.operator.test_builders import _golden

OWNER = Owner(names.DEPLOYMENT_KIND, "ouranos", "agents", "uid-deployment")
FS = {
    "stdio": {
        "command": "npx",
        "args": ["-y", "@modelcontextprotocol/server-filesystem", "/data"],
        "image": "node:22",
        "env": [
            {"name": "LOG", "value": "debug"},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "fs-token", "key": "token"}}},
        ],
        "resources": {"limits": {"memory": "512Mi"}},
    }
}


def _spec(*mods: Any) -> PallasDeploymentSpec:
    return PallasDeploymentSpec.model_validate(
        deployment("ouranos", at("spec.mcpServers.fs", FS), *mods)["spec"]
    )


def _pod(children: list[dict[str, Any]]) -> dict[str, Any]:
    (workload,) = [c for c in children if c["kind"] == "Deployment"]
    return dict(workload["spec"]["template"]["spec"])


def test_stdio_children_golden() -> None:
    _golden("stdio", stdio_children(OWNER, _spec(), "pallas:test"))


def test_the_server_runs_its_command_on_the_fifos_the_bridge_reads() -> None:
    pod = _pod(stdio_children(OWNER, _spec(), "pallas:test"))
    bridge, server = pod["containers"]
    assert server["image"] == "node:22"
    shell = EXPORT_SECRETS.format(secrets=names.SECRETS_DIR) + SERVER_SHELL.format(fifos="/stdio")
    assert server["command"] == [
        "/bin/sh", "-c", shell, "npx", "-y", "@modelcontextprotocol/server-filesystem", "/data",
    ]  # fmt: skip
    # `$0 $@` carries the command and its arguments unquoted by us: nothing of them is shell text.
    assert shlex.split(SERVER_SHELL.format(fifos="/stdio")) == [
        "exec",
        "$0",
        "$@",
        ">/stdio/out",
        "</stdio/in",
    ]
    # No secret is an env var (the operator reads no Secret): the server reads the volume's files.
    assert server["env"] == [{"name": "LOG", "value": "debug"}]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "secrets"]
    assert volume["projected"]["sources"] == [
        {"secret": {"name": "fs-token", "items": [{"key": "token", "path": "TOKEN"}], "optional": True}}
    ]
    mounted = {"name": "secrets", "mountPath": names.SECRETS_DIR, "readOnly": True}
    assert mounted in server["volumeMounts"]
    assert mounted in bridge["volumeMounts"]
    assert server["resources"] == {"limits": {"memory": "512Mi"}}
    assert bridge["image"] == pod["initContainers"][0]["image"] == "pallas:test"
    assert bridge["securityContext"]["runAsUser"] == 65532
    assert pod["automountServiceAccountToken"] is False
    # The flags the operator writes are the ones `pallas bridge` takes.
    parser = argparse.ArgumentParser()
    BridgeCommand().configure(parser)
    parsed = parser.parse_args(bridge["command"][2:])
    assert (parsed.name, parsed.fifos, parsed.port) == ("fs", "/stdio", names.STDIO_BRIDGE_PORT)
    assert parsed.secrets_dir == names.SECRETS_DIR
    assert parser.parse_args(pod["initContainers"][0]["command"][2:]).make_fifos == "/stdio"


def test_a_rotated_secret_rolls_no_pod_and_an_edit_does() -> None:
    def template_hash(*mods: Any) -> str:
        (workload,) = [
            c for c in stdio_children(OWNER, _spec(*mods), "pallas:test") if c["kind"] == "Deployment"
        ]
        return str(workload["spec"]["template"]["metadata"]["annotations"][names.ANNOTATION_CONFIG_HASH])

    # The hash is the spec's alone (a rotation reaches the server through its bridge, no new pod).
    assert template_hash() == template_hash()
    assert template_hash(at("spec.mcpServers.fs.stdio.args", ["/other"])) != template_hash()


def test_a_server_without_secrets_mounts_no_volume() -> None:
    pod = _pod(stdio_children(OWNER, _spec(at("spec.mcpServers.fs.stdio.env", [])), "pallas:test"))
    bridge, server = pod["containers"]
    assert server["command"][2] == SERVER_SHELL.format(fifos="/stdio")
    assert "--secrets-dir" not in bridge["command"]
    assert [v["name"] for v in pod["volumes"]] == ["stdio", "tmp", BRIDGE_TOKEN_VOLUME]


def test_url_servers_and_stateful_stdio_servers_are_not_hosted() -> None:
    stateful = _spec(at("spec.mcpServers.fs.stateful", True))
    assert stdio_children(OWNER, stateful, "pallas:test") == []
    assert [c["kind"] for c in stdio_children(OWNER, _spec(), "pallas:test")] == ["Service", "Deployment"]


def test_agents_reach_a_hosted_server_at_its_service_and_a_stateful_one_is_refused() -> None:
    agent_spec = PallasAgentSpec.model_validate(agent("research", spec(servers=["fs"]))["spec"])
    rendered = render_agent("research", agent_spec, _spec(), {}, namespace="agents")
    assert rendered.config.servers[0].url == "http://ouranos-mcp-fs.agents.svc.cluster.local:8000/mcp"
    local = render_agent(
        "research", agent_spec, _spec(), {}, local=True, stdio_urls={"fs": "http://127.0.0.1:9/mcp"}
    )
    assert local.config.servers[0].url == "http://127.0.0.1:9/mcp"
    with pytest.raises(RenderError) as refused:
        render_agent("research", agent_spec, _spec(at("spec.mcpServers.fs.stateful", True)), {})
    assert refused.value.reason == conditions.STDIO_NOT_HOSTABLE
    assert "only `pallas run` hosts" in str(refused.value)


def _observed(*servers: HostedServer) -> PallasDeploymentStatus:
    obs = DeploymentObservation(1, (), False, None, None, False, False, servers=servers)
    return deployment_status(obs, PallasDeploymentStatus(), "2026-11-21T10:00:00Z")


def _servers_condition(status: PallasDeploymentStatus) -> tuple[str, str, str]:
    (cond,) = [c for c in status.conditions if c.type == conditions.SERVERS_AVAILABLE]
    return cond.status, cond.reason, cond.message


def test_servers_available_says_which_server_is_not() -> None:
    up = Workload(1, 1, True, True, "1/1 pods ready")
    down = Workload(1, 0, False, False, "0/1 pods ready")
    assert conditions.SERVERS_AVAILABLE not in {c.type for c in _observed().conditions}
    assert _servers_condition(_observed(HostedServer("fs", up))) == (
        "True",
        "ServersAvailable",
        "1 stdio servers ready",
    )
    status, reason, message = _servers_condition(
        _observed(
            HostedServer("fs", down), HostedServer("git", None), HostedServer("shell", None, hostable=False)
        )
    )
    assert (status, reason) == ("False", "ServersUnavailable")
    assert message == (
        "fs: 0/1 pods ready; git: its Deployment does not exist yet; "
        "shell: stateful stdio servers run only under pallas run (not hosted)"
    )
    # Advice only: the deployment stays Ready.
    ready = [c for c in _observed(HostedServer("fs", down)).conditions if c.type == conditions.READY]
    assert ready[0].status == "True"


def test_the_bridge_reads_the_deployments_credential_and_its_server_never_sees_it() -> None:
    pod = _pod(stdio_children(OWNER, _spec(), "pallas:test"))
    bridge, server = pod["containers"]
    parser = argparse.ArgumentParser()
    BridgeCommand().configure(parser)
    token_file = parser.parse_args(bridge["command"][2:]).token_file
    assert token_file == f"{BRIDGE_TOKEN_DIR}/{names.BRIDGE_TOKEN_KEY}"
    (volume,) = [v for v in pod["volumes"] if v["name"] == BRIDGE_TOKEN_VOLUME]
    # Not optional: without its credential the bridge must not serve (nor would any agent pass).
    assert volume["secret"] == {
        "secretName": "ouranos-bridge-token",
        "items": [{"key": "token", "path": "token"}],
        "defaultMode": 0o444,
    }
    assert {"name": BRIDGE_TOKEN_VOLUME, "mountPath": BRIDGE_TOKEN_DIR, "readOnly": True} in bridge[
        "volumeMounts"
    ]
    # The server's container mounts neither it nor a Secret volume carrying it (it exports every file).
    assert BRIDGE_TOKEN_VOLUME not in {m["name"] for m in server["volumeMounts"]}
    (secrets,) = [v for v in pod["volumes"] if v["name"] == "secrets"]
    assert "ouranos-bridge-token" not in str(secrets)
    assert not any("BRIDGE" in e["name"] for e in server["env"])


def test_the_bridge_credential_secret_is_owned_and_holds_the_value_given() -> None:
    secret = bridge_token_secret(OWNER, "s3cr3t-value")
    assert secret["kind"] == "Secret"
    assert secret["metadata"]["name"] == names.bridge_token_secret_name("ouranos") == "ouranos-bridge-token"
    assert secret["metadata"]["namespace"] == "agents"
    (owner,) = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        names.DEPLOYMENT_KIND,
        "ouranos",
        "uid-deployment",
    )
    assert secret["stringData"] == {"token": "s3cr3t-value"}


def test_agents_send_the_credential_to_their_deployments_hosted_servers_only() -> None:
    remote = {"url": "https://tools.example.com/mcp"}
    deployment_spec = _spec(at("spec.mcpServers.remote", remote))
    agent_spec = PallasAgentSpec.model_validate(agent("research", spec(servers=["fs", "remote"]))["spec"])
    rendered = render_agent("research", agent_spec, deployment_spec, {}, namespace="agents")
    fs, other = rendered.config.servers
    (header,) = [h for h in fs.headers if h.name == names.BRIDGE_TOKEN_HEADER]
    assert header.value is None
    assert header.value_from_env == names.BRIDGE_TOKEN_ENV
    assert header.value_source == "Secret ouranos-bridge-token key token"
    assert names.BRIDGE_TOKEN_HEADER not in {h.name for h in other.headers}
    binding = bridge_token_binding("ouranos")
    assert binding in rendered.secrets
    assert (binding.ref.name, binding.ref.key) == ("ouranos-bridge-token", "token")
    # The agent pod reads it as it reads every secret: a file of its Secret volume.
    volume = secret_volume(rendered.secrets)
    assert volume is not None
    assert {
        "secret": {
            "name": "ouranos-bridge-token",
            "items": [{"key": "token", "path": names.BRIDGE_TOKEN_ENV}],
            "optional": True,
        }
    } in volume["projected"]["sources"]
    # An agent using no hosted server carries no credential.
    remote_only = PallasAgentSpec.model_validate(agent("web", spec(servers=["remote"]))["spec"])
    assert binding not in render_agent("web", remote_only, deployment_spec, {}, namespace="agents").secrets


def test_the_network_policy_guards_the_bridges_from_all_but_the_agents() -> None:
    policy = bridges_network_policy(OWNER)
    assert policy["metadata"]["name"] == "ouranos-mcp-servers"
    assert policy["spec"]["podSelector"] == {
        "matchLabels": {names.LABEL_DEPLOYMENT: "ouranos", names.LABEL_COMPONENT: names.STDIO_COMPONENT}
    }
    # It selects the bridges' pods (their labels) and admits the deployment's agents only.
    pod_labels = stdio_labels("ouranos", "fs")
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [
        {"from": [{"podSelector": {"matchLabels": agents_selector("ouranos")}}]}
    ]
