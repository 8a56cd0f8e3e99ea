"""The dev kubelet's small API-server client: raw JSON over the kubeconfig's connection.

lightkube decodes every object into typed models; the kubelet work here reads pod specs generically
and writes strategic-merge status patches and delete preconditions, which lightkube's typed calls
do not expose. So the connection (TLS, client certificate, token) comes from lightkube's kubeconfig
support and everything above it is plain dictionaries shaped exactly like the API documents them.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2
from lightkube import KubeConfig
from lightkube.config.client_adapter import AsyncClient as adapter_client
from lightkube.config.client_adapter import ConnectionParams

Obj = dict[str, Any]
"""A Kubernetes object (or any JSON object) as the API server sends it."""

log = logging.getLogger("dev-kubelet")

STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"


class ApiError(Exception):
    """A non-2xx answer from the API server."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class ApiUnreachable(ConnectionError):
    """The API server could not be reached (an OSError, so callers treat it like any I/O failure)."""


class WatchExpired(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


def now() -> str:
    """A metav1.Time: RFC 3339 with second precision, UTC."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    """A metav1.MicroTime, used by Lease renewals."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def meta(obj: Obj) -> Obj:
    """The object's metadata (an empty dict if it has none)."""
    value = obj.get("metadata") or {}
    assert isinstance(value, dict)
    return value


class Kube:
    """An async JSON client for the paths the dev kubelet uses."""

    def __init__(self, kubeconfig: Path, timeout: float = 10.0) -> None:
        config = KubeConfig.from_file(kubeconfig).get()
        if config is None:
            raise ValueError(f"{kubeconfig} has no current context")
        self.server: str = config.cluster.server
        # trust_env off: a developer's HTTPS_PROXY must not capture loopback API traffic.
        params = ConnectionParams(timeout=httpx2.Timeout(timeout), trust_env=False)
        self._http: httpx2.AsyncClient = adapter_client(config, params)

    @property
    def host_port(self) -> tuple[str, int]:
        """Where the API server listens, for KUBERNETES_SERVICE_HOST/PORT in pods."""
        url = urlsplit(self.server)
        return url.hostname or "127.0.0.1", url.port or 443

    async def close(self) -> None:
        await self._http.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Obj | None = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
        request_timeout: float | None = None,
    ) -> Obj:
        """One request; the decoded JSON answer, or ApiError for a non-2xx status."""
        headers = {"Accept": "application/json"}
        content = None
        if body is not None:
            headers["Content-Type"] = content_type
            content = json.dumps(body).encode()
        timeout = httpx2.USE_CLIENT_DEFAULT if request_timeout is None else httpx2.Timeout(request_timeout)
        try:
            resp = await self._http.request(
                method, path, content=content, params=params, headers=headers, timeout=timeout
            )
        except httpx2.HTTPError as e:
            raise ApiUnreachable(f"{method} {path}: {e or type(e).__name__}") from e
        if resp.status_code >= 300:
            raise ApiError(resp.status_code, _error_message(resp.text))
        if not resp.content:
            return {}
        data = resp.json()
        assert isinstance(data, dict)
        return data

    async def get(self, path: str) -> Obj | None:
        """The object at path, or None if it does not exist."""
        try:
            return await self.request("GET", path)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    async def list(self, path: str, params: dict[str, str] | None = None) -> tuple[list[Obj], str]:
        """All items of a collection and the resourceVersion to watch from."""
        data = await self.request("GET", path, params=params)
        items = data.get("items") or []
        return list(items), str(meta(data).get("resourceVersion", ""))

    async def watch(
        self, path: str, resource_version: str, params: dict[str, str] | None = None
    ) -> AsyncIterator[tuple[str, Obj]]:
        """Events (type, object) from resource_version until the server closes the stream.

        Raises WatchExpired on 410 Gone so the caller lists again.
        """
        query = {
            **(params or {}),
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "300",
        }
        # No read timeout: a quiet watch is normal; the server ends it after timeoutSeconds.
        timeout = httpx2.Timeout(10.0, read=None)
        try:
            async with self._http.stream("GET", path, params=query, timeout=timeout) as resp:
                if resp.status_code == 410:
                    raise WatchExpired(path)
                if resp.status_code >= 300:
                    raise ApiError(resp.status_code, _error_message((await resp.aread()).decode()))
                async for line in resp.aiter_lines():
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    kind, obj = str(event.get("type", "")), event.get("object") or {}
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            raise WatchExpired(path)
                        raise ApiError(int(obj.get("code", 500)), str(obj.get("message", "watch error")))
                    yield kind, obj
        except httpx2.HTTPError as e:
            raise ApiUnreachable(f"watch {path}: {e or type(e).__name__}") from e


def _error_message(text: str) -> str:
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip()[:300]
    return str(data.get("message", text))[:300] if isinstance(data, dict) else text[:300]


async def informer(
    kube: Kube,
    path: str,
    params: dict[str, str] | None,
    on_sync: Callable[[list[Obj]], Awaitable[None]],
    on_event: Callable[[str, Obj], Awaitable[None]],
    what: str,
) -> None:
    """List-then-watch forever: on_sync gets the full set after every (re)list, on_event each change.

    A relist after any watch failure means a DELETED event missed while disconnected still shows up
    (the object is simply absent from the next on_sync).
    """
    delay = 0.5
    while True:
        try:
            items, rv = await kube.list(path, params)
            await on_sync(items)
            delay = 0.5
            while True:
                async for kind, obj in kube.watch(path, rv, params):
                    if kind == "BOOKMARK":
                        rv = str(meta(obj).get("resourceVersion", rv))
                        continue
                    rv = str(meta(obj).get("resourceVersion", rv))
                    await on_event(kind, obj)
        except WatchExpired:
            continue
        except (ApiError, OSError, ValueError) as e:
            log.warning("watch %s failed (%s); retrying in %.1fs", what, e, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
