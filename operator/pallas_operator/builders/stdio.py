"""A hosted stdio MCP server: a Deployment running its command beside `pallas bridge`, a Service.

The pod has three containers sharing an `emptyDir` at `/stdio`:

- `fifos` (init, our image): `pallas bridge --make-fifos /stdio` makes the FIFOs `in` and `out`;
- `server` (the user's `stdio.image`): `/bin/sh -c 'exec "$0" "$@" >/stdio/out </stdio/in'
  COMMAND ARGS...`: the command itself, its stdout and stdin on the FIFOs, its stderr the
  container's log; the kubelet restarts it (with back-off) when it ends. Its `env` entries
  from Secrets are files of the pod's Secret volume, exported by the shell line before the
  command starts: the operator reads no Secret (docs/operator.md, "What the operator reads");
- `bridge` (our image): `pallas bridge --fifos /stdio --token-file … --secrets-dir …` serves it
  over Streamable HTTP on port 8000; Ready only while the server has an MCP session. When a
  secret file changes it ends the server's life (its input closes), so the kubelet starts the
  server again with the new values: a rotation needs no new pod. It answers only requests
  carrying the deployment's bridge credential, from the deployment's Secret
  `<deployment>-bridge-token` (`bridge_token_secret`), mounted in the bridge container alone
  (the server never sees it) and read at each request, so a replaced Secret needs no new pod.

Why this shape (docs/operator.md, "Hosting stdio servers"): the bridge is Python and cannot be
copied into an arbitrary image as kmcp copies its static binary, and attaching to a container's
stdin through the API server (ToolHive) needs `pods/attach` and carries every message through
the API server. A shared volume with two FIFOs needs neither, only `/bin/sh` in the user's image.
"""

from __future__ import annotations

import json
from typing import Any

from pallas_api import names
from pallas_api.live import config_digest
from pallas_api.render import SecretBinding, log_level
from pallas_api.spec import McpServerSpec, PallasDeploymentSpec, StdioSpec
from pallas_operator.builders.meta import Manifest, Owner, component_labels, metadata
from pallas_operator.builders.pod import (
    REGISTRY_RESOURCES,
    RUN_AS,
    container_security,
    environment,
    log_env,
    probes,
    resources,
    secret_mount,
    secret_volume,
)

STDIO_DIR = "/stdio"
BRIDGE_TOKEN_DIR = "/etc/pallas-bridge"
"""Where the bridge container alone mounts the deployment's bridge credential."""
BRIDGE_TOKEN_VOLUME = "bridge-token"
SERVER_SHELL = 'exec "$0" "$@" >{fifos}/out <{fifos}/in'
"""The server container's shell line (its command and arguments follow as `$0 $@`): `out` is
opened before `in`, the order `FifoPair` relies on."""
EXPORT_SECRETS = (
    'for f in {secrets}/*; do [ -f "$f" ] && v="$(cat "$f"; printf x)" '
    '&& export "${{f##*/}}=${{v%x}}"; done; '
)
"""Exports each file of the Secret volume as the variable it is named after, its value exact (a
trailing newline kept: `printf x` guards it from the command substitution). A missing Secret
leaves its file out and its variable unset, as an optional `secretKeyRef` would."""
SECRET_FILE_MODE = 0o444
"""The server's image picks its own user, so the files are readable by any; only the server and
the bridge containers mount the volume."""
BRIDGE_RESOURCES = REGISTRY_RESOURCES
"""The bridge relays messages and holds sessions: the registry's small footprint fits it."""


def hosted_servers(spec: PallasDeploymentSpec) -> dict[str, McpServerSpec]:
    """The stdio servers the operator hosts, by name: every one but the stateful (not hostable)."""
    return {
        name: server
        for name, server in spec.mcp_servers.items()
        if server.stdio is not None and not server.stateful
    }


def stdio_labels(deployment: str, server: str) -> dict[str, str]:
    """Labels on a hosted server's children (`pallas.dev/agent` left out: no agent's)."""
    return component_labels(deployment, names.STDIO_COMPONENT, names.stdio_server_name(deployment, server))


def stdio_selector(deployment: str, server: str) -> dict[str, str]:
    """The pod selector of a hosted server."""
    return {
        names.LABEL_INSTANCE: names.stdio_server_name(deployment, server),
        names.LABEL_COMPONENT: names.STDIO_COMPONENT,
    }


def stdio_secret_bindings(stdio: StdioSpec) -> tuple[SecretBinding, ...]:
    """The server's env variables from Secrets, as the variables themselves."""
    return tuple(
        SecretBinding(variable.name, variable.value_from.secret_key_ref)
        for variable in stdio.env
        if variable.value_from is not None
    )


def _bridge_security() -> dict[str, Any]:
    return {**container_security(), "runAsUser": RUN_AS, "runAsGroup": RUN_AS}


def stdio_deployment(
    owner: Owner,
    server: str,
    stdio: StdioSpec,
    spec: PallasDeploymentSpec,
    default_image: str,
) -> Manifest:
    """The Deployment of one hosted stdio server (see the module notes)."""
    name = names.stdio_server_name(owner.name, server)
    labels = stdio_labels(owner.name, server)
    ours = spec.runtime.image or default_image
    bindings = stdio_secret_bindings(stdio)
    literals = [{"name": v.name, "value": v.value} for v in stdio.env if v.value_from is None]
    mount = {"name": "stdio", "mountPath": STDIO_DIR}
    secrets = secret_volume(bindings, SECRET_FILE_MODE)
    shell = SERVER_SHELL.format(fifos=STDIO_DIR)
    if secrets is not None:
        shell = EXPORT_SECRETS.format(secrets=names.SECRETS_DIR) + shell
    server_container: dict[str, Any] = {
        "name": "server",
        "image": stdio.image or ours,
        "command": ["/bin/sh", "-c", shell, stdio.command, *stdio.args],
        "env": environment([literals]),
        # The image's own user (many run as root): not forced, but nothing beyond it.
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [dict(mount)] + ([secret_mount()] if secrets is not None else []),
    }
    if stdio.resources is not None:
        server_container["resources"] = resources(stdio.resources, default={})
    bridge = {
        "name": "bridge",
        "image": ours,
        "command": [
            "pallas",
            "bridge",
            "--name",
            server,
            "--fifos",
            STDIO_DIR,
            "--port",
            str(names.STDIO_BRIDGE_PORT),
            "--token-file",
            f"{BRIDGE_TOKEN_DIR}/{names.BRIDGE_TOKEN_KEY}",
            *(["--secrets-dir", names.SECRETS_DIR] if secrets is not None else []),
        ],
        "ports": [
            {"name": names.METRICS_PORT_NAME, "containerPort": names.STDIO_BRIDGE_PORT, "protocol": "TCP"}
        ],
        "env": log_env(log_level(spec), namespace=owner.namespace, deployment=owner.name),
        "resources": resources(default=BRIDGE_RESOURCES),
        "securityContext": _bridge_security(),
        "volumeMounts": [
            dict(mount),
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": BRIDGE_TOKEN_VOLUME, "mountPath": BRIDGE_TOKEN_DIR, "readOnly": True},
        ]
        + ([secret_mount()] if secrets is not None else []),
        **probes(),
    }
    fifos = {
        "name": "fifos",
        "image": ours,
        "command": ["pallas", "bridge", "--make-fifos", STDIO_DIR],
        "securityContext": _bridge_security(),
        "volumeMounts": [dict(mount)],
    }
    described = json.dumps(stdio.model_dump(mode="json", by_alias=True), sort_keys=True)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(name, owner, labels),
        "spec": {
            "replicas": 1,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": stdio_selector(owner.name, server)},
            "template": {
                "metadata": {
                    "labels": labels,
                    # The spec alone: a rotated Secret reaches the server without a new pod.
                    "annotations": {names.ANNOTATION_CONFIG_HASH: config_digest(described)},
                },
                "spec": {
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "initContainers": [fifos],
                    "containers": [bridge, server_container],
                    "volumes": [
                        {"name": "stdio", "emptyDir": {}},
                        {"name": "tmp", "emptyDir": {}},
                        _bridge_token_volume(owner.name),
                    ]
                    + ([secrets] if secrets is not None else []),
                },
            },
        },
    }


def _bridge_token_volume(deployment: str) -> dict[str, Any]:
    """The deployment's bridge credential: not optional, the bridge must not serve without it."""
    key = names.BRIDGE_TOKEN_KEY
    return {
        "name": BRIDGE_TOKEN_VOLUME,
        "secret": {
            "secretName": names.bridge_token_secret_name(deployment),
            "items": [{"key": key, "path": key}],
            "defaultMode": SECRET_FILE_MODE,
        },
    }


def bridge_token_secret(owner: Owner, token: str) -> Manifest:
    """The Secret holding a deployment's bridge credential `token`.

    Created once (`reconcile.bridge_token`), never applied again: a reconcile keeps the value
    its agents and bridges hold. Deleting it rotates the credential: the next reconcile makes a
    new one, which the agents' Secret volumes and the bridges' read without a new pod.
    """
    name = names.bridge_token_secret_name(owner.name)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(name, owner, component_labels(owner.name, names.STDIO_COMPONENT, name)),
        "type": "Opaque",
        "stringData": {names.BRIDGE_TOKEN_KEY: token},
    }


def stdio_service(owner: Owner, server: str) -> Manifest:
    """The Service agents reach a hosted stdio server's bridge at (`names.stdio_server_url`)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(
            names.stdio_server_name(owner.name, server), owner, stdio_labels(owner.name, server)
        ),
        "spec": {
            "type": "ClusterIP",
            "selector": stdio_selector(owner.name, server),
            "ports": [
                {
                    "name": names.METRICS_PORT_NAME,
                    "port": names.STDIO_BRIDGE_PORT,
                    "targetPort": names.METRICS_PORT_NAME,
                    "protocol": "TCP",
                }
            ],
        },
    }


def stdio_children(owner: Owner, spec: PallasDeploymentSpec, default_image: str) -> list[Manifest]:
    """The Service and Deployment of every hosted stdio server of the deployment."""
    out: list[Manifest] = []
    for server, hosted in sorted(hosted_servers(spec).items()):
        assert hosted.stdio is not None  # hosted_servers chose it
        out.append(stdio_service(owner, server))
        out.append(stdio_deployment(owner, server, hosted.stdio, spec, default_image))
    return out
