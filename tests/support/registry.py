"""Test data and tools for the registry.

- `state(...)`: an AgentState of a Ready agent, with keyword changes.
- `ready_status(...)`: the `status` of a Ready PallasAgent as the operator writes it;
  `create_deployment`, `create_agent`, `set_status`: put them on the API server.
- `assert_valid_catalogue(doc)` / `assert_valid_entry(entry)`: check with `jsonschema` directly
  against the *upstream* files (the 2025-12-11 `server.json` schema and the registry OpenAPI
  document), independently of the registry's own validation path.
- `running_registry(source)`: the registry served by uvicorn on a free loopback port.
- `ApiProxy`: a loopback HTTP proxy in front of the real kube-apiserver that tests can take down
  (an outage: connections refused) and that can answer the next PallasAgent watch with
  `410 Gone`; it counts PallasAgent lists and all watches.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import ssl
import tempfile
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import httpx2
import yaml
from jsonschema import Draft7Validator, Draft202012Validator
from lightkube import AsyncClient, KubeConfig
from lightkube.config.models import Cluster, User
from lightkube.types import PatchType
from starlette.types import Receive, Scope, Send

from pallas_api.fields import ModelCapabilities
from pallas_api.spec import Icon
from pallas_io.kube import PallasAgent, PallasDeployment
from pallas_io.serving import bound_port, listen, serve
from pallas_registry import AgentState, CatalogueSource, HealthView, build_app
from pallas_registry.schema import server_schema
from pallas_registry.state import ProviderView
from tests.support.cluster import REPO, LocalCluster
from tests.support.mcp_servers import LOOPBACK, bound_socket, serve_app
from tests.support.operator import agent, deployment, in_namespace, spec

DATA = REPO / "tests" / "unit" / "registry" / "data"
"""Upstream files, unchanged (see UPSTREAM.md there)."""
T0 = datetime(2026, 11, 21, 10, 0, 0, tzinfo=UTC)


def state(name: str = "research", **changes: Any) -> AgentState:
    """A Ready, healthy agent of deployment `ouranos` in namespace `agents`; `changes` override."""
    base = AgentState(
        name=name,
        namespace="agents",
        deployment="ouranos",
        title="Research Agent",
        description="Web search via Argos and knowledge graph via Neo4j",
        icons=(Icon(src="https://example.com/icons/research.svg", sizes=["any"]),),
        tags=("web-search", "knowledge-graph"),
        model_ref="vllm.qwen3-8b",
        model_capabilities=ModelCapabilities(vision=False, context_window=200000, max_output_tokens=32000),
        provider=ProviderView(type="openai", display_name="vllm", json_mode=True),
        version="1.0.0",
        phase="Ready",
        ready=True,
        health=HealthView("ok", "", T0),
        tools=("send_message", "get_health"),
        url=f"http://{name}.agents.svc.cluster.local:8000/mcp",
        model="qwen3-8b",
        published_at=T0,
        updated_at=T0,
        ready_changed_at=T0,
    )
    return dataclasses.replace(base, **changes)


def ready_status(name: str, namespace: str, **changes: Any) -> dict[str, Any]:
    """A Ready PallasAgent `status` (camelCase, as on the wire); `changes` override top-level keys."""
    status: dict[str, Any] = {
        "phase": "Ready",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "AgentReady",
                "message": "",
                "lastTransitionTime": "2026-11-21T10:00:00Z",
            }
        ],
        "url": f"http://{name}.{namespace}.svc.cluster.local:8000/mcp",
        "model": "qwen3-8b",
        "health": {"status": "ok", "message": "", "checkedAt": "2026-11-21T10:00:00Z"},
        "tools": ["send_message", "get_health"],
    }
    status.update(changes)
    return status


@cache
def _server_validator() -> Draft7Validator:
    return Draft7Validator(server_schema())


@cache
def _original_validator() -> Draft7Validator:
    return Draft7Validator(json.loads((DATA / "server.schema.2025-12-11.original.json").read_text()))


@cache
def _openapi_validator(component: str) -> Draft202012Validator:
    # The OpenAPI 3.1 document is JSON Schema 2020-12; validate against one of its components
    # by pointing a `$ref` at it from the document root.
    document = yaml.safe_load((DATA / "registry-openapi.yaml").read_text())
    return Draft202012Validator({**document, "$ref": f"#/components/schemas/{component}"})


def _errors(validator: Any, document: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]


def assert_valid_entry(entry: dict[str, Any]) -> None:
    """One `ServerResponse`: its server against both schema files, the whole against the OpenAPI."""
    problems = _errors(_server_validator(), entry["server"])
    problems += _errors(_original_validator(), entry["server"])
    problems += _errors(_openapi_validator("ServerResponse"), entry)
    assert not problems, problems


def assert_valid_catalogue(document: dict[str, Any], *, paged: bool = False) -> None:
    """A well-known document or (`paged`) a `/v0.1/servers` page, entry by entry."""
    assert set(document) == ({"servers", "metadata"} if paged else {"servers"})
    if paged:
        assert not _errors(_openapi_validator("ServerList"), document)
    for entry in document["servers"]:
        assert_valid_entry(entry)


async def create_deployment(
    client: AsyncClient, namespace: str, name: str = "ouranos", **fields: Any
) -> None:
    await client.create(PallasDeployment.from_dict(deployment(name, in_namespace(namespace), spec(**fields))))


async def create_agent(
    client: AsyncClient, namespace: str, name: str, status: dict[str, Any] | None = None, **fields: Any
) -> None:
    await client.create(PallasAgent.from_dict(agent(name, in_namespace(namespace), spec(**fields))))
    if status is not None:
        await set_status(client, namespace, name, status)


async def set_status(client: AsyncClient, namespace: str, name: str, status: dict[str, Any]) -> None:
    await client.patch(
        PallasAgent.Status, name, {"status": status}, namespace=namespace, patch_type=PatchType.MERGE
    )


@contextlib.asynccontextmanager
async def running_registry(source: CatalogueSource, **app: Any) -> AsyncIterator[str]:
    """Serve `source` (`build_app(source, **app)`) on a free loopback port; yields the base URL."""
    sock = listen(LOOPBACK, 0)
    started = asyncio.Event()
    task = asyncio.create_task(serve(build_app(source, **app), sock, started=started, graceful_timeout=2))
    try:
        await asyncio.wait_for(started.wait(), 10)
        yield f"http://{LOOPBACK}:{bound_port(sock)}"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sock.close()


_GONE = {
    "type": "ERROR",
    "object": {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "too old resource version",
        "reason": "Expired",
        "code": 410,
    },
}
_HOP_BY_HOP = {b"connection", b"transfer-encoding", b"keep-alive", b"host"}


class ApiProxy:
    """A plain-HTTP loopback proxy to the cluster's API server, with the admin credentials."""

    def __init__(self, cluster: LocalCluster, workdir: Path) -> None:
        raw = yaml.safe_load(cluster.kubeconfig.read_text())
        upstream, user = raw["clusters"][0]["cluster"], raw["users"][0]["user"]
        files = {}
        for field in ("certificate-authority-data", "client-certificate-data", "client-key-data"):
            path = workdir / field
            path.write_bytes(base64.b64decode(upstream.get(field) or user[field]))
            files[field] = str(path)
        context = ssl.create_default_context(cafile=files["certificate-authority-data"])
        context.load_cert_chain(files["client-certificate-data"], files["client-key-data"])
        self._upstream = upstream["server"]
        self._client = httpx2.AsyncClient(verify=context, timeout=httpx2.Timeout(10.0, read=None))
        self._sock = bound_socket()
        self.port = self._sock.getsockname()[1]
        self._sock.close()
        self._serving: contextlib.AbstractAsyncContextManager[Any] | None = None
        self._open: set[httpx2.Response] = set()
        self.gone_next_watch = False
        self.watches = 0
        self.lists = 0

    def kubeconfig(self, namespace: str) -> KubeConfig:
        """Credentials that reach the API server through this proxy."""
        cluster = Cluster(server=f"http://{LOOPBACK}:{self.port}")
        return KubeConfig.from_one(cluster=cluster, user=User(), namespace=namespace)

    async def _app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        query = scope["query_string"].decode()
        agents = scope["path"].endswith("/pallasagents")
        if b"watch=" in scope["query_string"]:
            self.watches += 1
            if agents and self.gone_next_watch and "resourceVersion=" in query:
                self.gone_next_watch = False
                await send({"type": "http.response.start", "status": 200, "headers": []})
                await send({"type": "http.response.body", "body": json.dumps(_GONE).encode() + b"\n"})
                return
        elif agents and scope["method"] == "GET":
            self.lists += 1
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _HOP_BY_HOP]
        url = self._upstream + scope["path"] + (f"?{query}" if query else "")
        request = self._client.build_request(scope["method"], url, headers=headers, content=body)
        response = await self._client.send(request, stream=True)
        self._open.add(response)
        try:
            out = [
                (k.encode(), v.encode()) for k, v in response.headers.items() if k.encode() not in _HOP_BY_HOP
            ]
            await send({"type": "http.response.start", "status": response.status_code, "headers": out})
            with contextlib.suppress(httpx2.HTTPError):
                # `stop()` closes open upstream streams: the client then sees its stream cut.
                async for chunk in response.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            self._open.discard(response)
            await response.aclose()

    async def start(self) -> None:
        """Accept connections (again) on the same port."""
        self._serving = serve_app(self._app, port=self.port)
        await self._serving.__aenter__()

    async def stop(self) -> None:
        """Refuse connections and cut open streams: an API server outage, as clients see one."""
        if self._serving is not None:
            for response in list(self._open):
                await response.aclose()
            await self._serving.__aexit__(None, None, None)
            self._serving = None

    async def close(self) -> None:
        """Stop and release the upstream client."""
        await self.stop()
        await self._client.aclose()


@contextlib.asynccontextmanager
async def api_proxy(cluster: LocalCluster) -> AsyncIterator[ApiProxy]:
    """An `ApiProxy`, started, stopped at the end of the block."""
    with tempfile.TemporaryDirectory() as workdir:
        proxy = ApiProxy(cluster, Path(workdir))
        await proxy.start()
        try:
            yield proxy
        finally:
            await proxy.close()
