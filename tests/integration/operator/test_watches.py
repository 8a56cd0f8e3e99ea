"""The event triggers' watch on a real lightkube client, against a stand-in API server on 127.0.0.1.

The stand-in answers a Pod list and watch as the API server does (a list with its
resourceVersion, watch events as JSON lines, a 410 Gone as an ERROR event); the test checks
what `k8s.watches.watch_objects` asks and yields: a list first, the watch from the list's
version, and after a 410 a list again (LISTED, not ADDED) and a watch from the new version.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from lightkube import AsyncClient, KubeConfig
from lightkube.config.models import Cluster, User
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from pallas_operator.k8s.cluster import WatchedKind, WatchEvent
from pallas_operator.k8s.watches import watch_objects
from tests.support.mcp_servers import serve_app

PODS = WatchedKind("", "v1", "Pod", "pods")


def pod(name: str, version: str) -> dict[str, Any]:
    meta = {"name": name, "namespace": "default", "resourceVersion": version}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta}


class ApiServer:
    """Two lists and two watches: the first watch ends with 410 Gone, the second stays open."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str | None]] = []
        self.lists = [([pod("a", "9")], "10"), ([pod("a", "11"), pod("b", "15")], "20")]
        self.watches = [
            [{"type": "MODIFIED", "object": pod("a", "11")},
             {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "code": 410,
                                          "reason": "Expired", "message": "too old resource version"}}],
            [{"type": "BOOKMARK", "object": pod("a", "21")}, {"type": "ADDED", "object": pod("c", "22")}],
        ]  # fmt: skip

    async def pods(self, request: Request) -> Response:
        version = request.query_params.get("resourceVersion")
        if request.query_params.get("watch") != "true":
            self.asked.append(("list", version))
            items, at = self.lists.pop(0)
            return JSONResponse({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": at},
                                 "items": items})  # fmt: skip
        self.asked.append(("watch", version))
        events = self.watches.pop(0)
        last = not self.watches

        async def lines() -> AsyncIterator[str]:
            for event in events:
                yield json.dumps(event) + "\n"
            if last:  # stays open, as a watch does, until the client goes
                await asyncio.Event().wait()

        return StreamingResponse(lines(), media_type="application/json")


async def test_a_watch_lists_first_watches_from_the_lists_version_and_lists_again_after_410() -> None:
    server = ApiServer()
    app = Starlette(routes=[Route("/api/v1/namespaces/default/pods", server.pods)])
    async with serve_app(app, path="") as running:
        config = KubeConfig.from_one(cluster=Cluster(server=running.url), user=User(token="t"))
        client = AsyncClient(config=config, field_manager="pallas-tests")
        seen: list[WatchEvent] = []
        stream = watch_objects(client, PODS, "default")
        try:
            async with asyncio.timeout(10):
                async for event in stream:
                    seen.append(event)
                    if len(seen) == 5:
                        break
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
            await client.close()
    assert [(e.type, e.object["metadata"]["name"]) for e in seen] == [
        ("LISTED", "a"),
        ("MODIFIED", "a"),
        ("LISTED", "a"),  # after the 410: listed again, not replayed as ADDED
        ("LISTED", "b"),
        ("ADDED", "c"),  # the BOOKMARK before it carries no change
    ]
    assert server.asked == [("list", None), ("watch", "10"), ("list", None), ("watch", "20")]
