"""Kubernetes identities for access-control tests: ServiceAccounts, RBAC, tokens, kubeconfigs.

    world = KubeAccess(cluster, namespace)
    world.service_account("alice")
    world.allow("alice", "research")                 # RBAC verb invoke on pallasagents/research
    token = world.token("alice")                     # kubectl create token (the TokenRequest API)
    world.delegate("agents")                         # system:auth-delegator for an agent's identity
    kubeconfig = world.kubeconfig("agents", tmp_path) # that identity's credentials for a process

Cluster-scoped objects made here (the auth-delegator bindings) are deleted by `cleanup()`.
`expired_copy(token)` re-signs a real ServiceAccount token with the local control plane's
signing key, unchanged but for its times, so a test can show that only expiry makes it fail.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from joserfc import jwt
from joserfc.jwk import RSAKey

from tests.support.cluster import LocalCluster

RBAC = "rbac.authorization.k8s.io"


def _decode(part: str) -> dict[str, Any]:
    return dict(json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))))


@dataclass
class KubeAccess:
    """ServiceAccounts and RBAC in one test namespace."""

    cluster: LocalCluster
    namespace: str
    _cluster_objects: list[str] = field(default_factory=list)

    def apply(self, *manifests: dict[str, Any]) -> None:
        self.cluster.kubectl("apply", "-f", "-", stdin="\n---\n".join(json.dumps(m) for m in manifests))

    def service_account(self, *names: str) -> None:
        self.apply(
            *(
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": n, "namespace": self.namespace},
                }
                for n in names
            )
        )

    def allow(self, who: str, *agents: str) -> None:
        """A Role with verb invoke on exactly these PallasAgents, bound to ServiceAccount `who`."""
        name = f"talk-{who}"
        meta = {"name": name, "namespace": self.namespace}
        rule = {"apiGroups": ["pallas.dev"], "resources": ["pallasagents"], "resourceNames": list(agents),
                "verbs": ["invoke"]}  # fmt: skip
        self.apply(
            {"apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": meta, "rules": [rule]},
            {"apiVersion": f"{RBAC}/v1", "kind": "RoleBinding", "metadata": meta,
             "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": name},
             "subjects": [{"kind": "ServiceAccount", "name": who, "namespace": self.namespace}]},
        )  # fmt: skip

    def delegate(self, who: str) -> None:
        """Bind system:auth-delegator (TokenReview, SubjectAccessReview) to ServiceAccount `who`."""
        name = f"pallas-test-{self.namespace}-{who}-{secrets.token_hex(2)}"
        self.apply(
            {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
             "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "system:auth-delegator"},
             "subjects": [{"kind": "ServiceAccount", "name": who, "namespace": self.namespace}]}
        )  # fmt: skip
        self._cluster_objects.append(f"clusterrolebinding/{name}")

    def token(self, who: str, *, audience: str | None = None, duration: str = "1h") -> str:
        args = ["create", "token", who, "-n", self.namespace, f"--duration={duration}"]
        if audience is not None:
            args.append(f"--audience={audience}")
        return self.cluster.kubectl(*args).stdout.strip()

    def kubeconfig(self, who: str, directory: Path) -> Path:
        """A kubeconfig authenticating as ServiceAccount `who` (what its pod would mount)."""
        admin = yaml.safe_load(self.cluster.kubeconfig.read_text())
        cluster = admin["clusters"][0]
        path = directory / f"kubeconfig-{who}"
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [cluster],
                    "users": [{"name": who, "user": {"token": self.token(who)}}],
                    "contexts": [{"name": who, "context": {"cluster": cluster["name"], "user": who}}],
                    "current-context": who,
                }
            )
        )
        return path

    def signing_key(self) -> RSAKey | None:
        """The local control plane's ServiceAccount signing key (None for an external cluster)."""
        path = self.cluster.kubeconfig.parent / "pki" / "sa.key"
        return RSAKey.import_key(path.read_bytes()) if path.exists() else None

    def resigned(self, token: str, key: RSAKey, **times: int) -> str:
        """`token` with the same header and claims but `times` (exp, iat, nbf), signed with `key`."""
        header_part, payload_part, _ = token.split(".")
        header, claims = _decode(header_part), _decode(payload_part)
        claims.update(times)
        return jwt.encode(header, claims, key, algorithms=[header["alg"]])

    def expired_copy(self, token: str, key: RSAKey) -> str:
        now = int(time.time())
        return self.resigned(token, key, iat=now - 7200, nbf=now - 7200, exp=now - 3600)

    def cleanup(self) -> None:
        for obj in self._cluster_objects:
            self.cluster.kubectl("delete", obj, "--ignore-not-found")


@dataclass
class TcpProxy:
    """A loopback TCP relay to another address; `cut()` drops it (an outage), `port` stays."""

    target: tuple[str, int]
    port: int = 0
    _server: asyncio.base_events.Server | None = None
    _links: set[asyncio.StreamWriter] = field(default_factory=set)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._links |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, ConnectionError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def cut(self) -> None:
        """Stop accepting and close every relayed connection."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for link in self._links:
            link.close()
        self._links.clear()
        if server is not None:
            await server.wait_closed()


@contextlib.asynccontextmanager
async def tcp_proxy(host: str, port: int) -> AsyncIterator[TcpProxy]:
    proxy = TcpProxy((host, port))
    proxy._server = await asyncio.start_server(proxy._relay, "127.0.0.1", 0)
    proxy.port = proxy._server.sockets[0].getsockname()[1]
    try:
        yield proxy
    finally:
        await proxy.cut()
