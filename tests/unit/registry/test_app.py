"""The registry HTTP app, in process (ASGI transport, no sockets)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import string
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest

from pallas_registry import MemorySource, build_app
from pallas_registry import app as app_module
from pallas_registry.builder import VENDOR_META
from pallas_registry.metrics import RegistryMetrics
from pallas_registry.query import KNOWN
from pallas_registry.schema import OFFICIAL_META
from pallas_registry.source import CatalogueSource
from tests.support.registry import assert_valid_catalogue, assert_valid_entry, state

WELL_KNOWN = "/.well-known/mcp/server.json"
RESEARCH = "local.cluster.svc.agents/research"


def catalogue_states() -> list[Any]:
    return [
        state("research"),
        state("coder", title="Code Helper", tags=("code",), health=None),
        state("waiting", ready=False, phase="Waiting", status_message="dependency research not Ready"),
        state("leaving", deleting=True),
        state("nostatus", url="not a url"),
    ]


@pytest.fixture
def source() -> MemorySource:
    return MemorySource(catalogue_states())


@pytest.fixture
async def client(source: MemorySource) -> AsyncIterator[httpx2.AsyncClient]:
    app = build_app(source, metrics=RegistryMetrics(source, process_collectors=False), start_source=False)
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://registry") as c:
        yield c


def names(document: dict[str, Any]) -> list[str]:
    return [entry["server"]["name"].rpartition("/")[2] for entry in document["servers"]]


async def test_well_known_document(client: httpx2.AsyncClient) -> None:
    response = await client.get(WELL_KNOWN)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    document = response.json()
    assert_valid_catalogue(document)
    # Every accepted agent, ready or not: clients attach them all and let health block sending.
    assert names(document) == ["coder", "research", "waiting"]
    first = document["servers"][0]
    assert first["server"]["remotes"] == [
        {"type": "streamable-http", "url": "http://coder.agents.svc.cluster.local:8000/mcp"}
    ]
    assert first["_meta"][OFFICIAL_META]["status"] == "active"


async def test_well_known_filters(client: httpx2.AsyncClient) -> None:
    everything = names((await client.get(WELL_KNOWN)).json())
    assert names((await client.get(WELL_KNOWN, params={"include": "all"})).json()) == everything
    assert names((await client.get(WELL_KNOWN, params={"ready": "true"})).json()) == ["coder", "research"]
    assert names((await client.get(WELL_KNOWN, params={"include": "ready"})).json()) == ["coder", "research"]
    assert names((await client.get(WELL_KNOWN, params={"ready": "false"})).json()) == everything
    assert names((await client.get(WELL_KNOWN, params={"capability": "code"})).json()) == ["coder"]
    waiting = (await client.get(WELL_KNOWN, params={"search": "wait"})).json()["servers"][0]
    assert waiting["_meta"][OFFICIAL_META]["status"] == "deprecated"
    assert waiting["_meta"][VENDOR_META]["phase"] == "Waiting"


async def test_server_list_pages_through_everything(client: httpx2.AsyncClient) -> None:
    seen, cursor, pages = [], None, 0
    while True:
        params = {"limit": "1"} | ({"cursor": cursor} if cursor else {})
        document = (await client.get("/v0.1/servers", params=params)).json()
        assert_valid_catalogue(document, paged=True)
        assert document["metadata"]["count"] == len(document["servers"]) == 1
        seen += names(document)
        pages += 1
        cursor = document["metadata"].get("nextCursor")
        if cursor is None:
            break
    assert (seen, pages) == (["coder", "research", "waiting"], 3)


async def test_server_list_default_page(client: httpx2.AsyncClient) -> None:
    document = (await client.get("/v0.1/servers")).json()
    assert document["metadata"] == {"count": 3}


@pytest.mark.parametrize("path", ["/v0.1/servers", WELL_KNOWN])
async def test_a_capability_no_agent_declares_is_an_empty_list(client: httpx2.AsyncClient, path: str) -> None:
    response = await client.get(path, params={"capability": "graph"})
    assert response.status_code == 200
    assert response.json()["servers"] == []


async def test_include_deleted_and_updated_since(client: httpx2.AsyncClient) -> None:
    deleted = (await client.get("/v0.1/servers", params={"include_deleted": "true"})).json()
    assert names(deleted) == ["coder", "leaving", "research", "waiting"]
    synced = (await client.get("/v0.1/servers", params={"updated_since": "2026-01-01T00:00:00Z"})).json()
    assert names(synced) == ["coder", "leaving", "research", "waiting"]
    future = (await client.get("/v0.1/servers", params={"updated_since": "2030-01-01T00:00:00Z"})).json()
    assert future == {"servers": [], "metadata": {"count": 0}}


@pytest.mark.parametrize(
    "path",
    [
        f"/v0.1/servers/{urllib.parse.quote(RESEARCH, safe='')}/versions/latest",
        f"/v0.1/servers/{RESEARCH}/versions/latest",
        f"/v0.1/servers/{urllib.parse.quote(RESEARCH, safe='')}/versions/1.0.0",
        "/v0.1/servers/local.cluster.svc.agents%2fresearch/versions/latest",
    ],
)
async def test_server_version(client: httpx2.AsyncClient, path: str) -> None:
    response = await client.get(path)
    assert response.status_code == 200
    assert_valid_entry(response.json())
    assert response.json()["server"]["name"] == RESEARCH


async def test_server_versions_list(client: httpx2.AsyncClient) -> None:
    document = (await client.get(f"/v0.1/servers/{urllib.parse.quote(RESEARCH, safe='')}/versions")).json()
    assert_valid_catalogue(document, paged=True)
    assert document["metadata"] == {"count": 1}


async def test_not_ready_agents_can_be_looked_up_deleted_ones_on_request(client: httpx2.AsyncClient) -> None:
    assert (
        await client.get("/v0.1/servers/local.cluster.svc.agents%2Fwaiting/versions/latest")
    ).status_code == 200
    leaving = "/v0.1/servers/local.cluster.svc.agents%2Fleaving/versions/latest"
    assert (await client.get(leaving)).status_code == 404
    assert (await client.get(leaving, params={"include_deleted": "true"})).status_code == 200


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        ("/v0.1/servers/local.cluster.svc.agents%2Fghost/versions/latest", 404, "Server not found"),
        (
            f"/v0.1/servers/{urllib.parse.quote(RESEARCH, safe='')}/versions/9.9.9",
            404,
            "Server version not found",
        ),
        ("/v0.1/servers/research/versions/latest", 400, "'serverName'"),
        ("/v0.1/servers/a%2Fb%2Fc/versions/latest", 400, "'serverName'"),
        ("/v0.1/servers/%E2%82%AC%2Fx/versions/latest", 400, "'serverName'"),
        ("/v0.1/servers/%FF%FE%2Fx/versions/latest", 400, "not valid UTF-8"),
        ("/v0.1/servers/a%00b%2Fc/versions/latest", 400, "'serverName'"),
        ("/v0.1/servers/..%2F..%2Fetc/versions/latest", 400, "'serverName'"),
        ("/v0.1/servers/" + "a" * 300 + "%2Fb/versions/latest", 400, "'serverName'"),
        ("/v0.1/servers/x%2Fy", 404, "no such path"),
        ("/v0.1/servers/", 404, "no such path"),
        ("/v0.2/servers", 404, "no such path"),
        ("/", 404, "no such path"),
        ("/v0.1/servers?limit=500", 400, "'limit'"),
        ("/v0.1/servers?limit=abc", 400, "'limit'"),
        ("/v0.1/servers?cursor=%F0%9F%98%80", 400, "'cursor'"),
        ("/v0.1/servers?capability=NOT%20A%20TAG", 400, "'capability'"),
        (WELL_KNOWN + "?capability=-x", 400, "'capability'"),
        (WELL_KNOWN + "?ready=maybe", 400, "'ready'"),
        (WELL_KNOWN + "?include=most", 400, "'include'"),
        ("/v0.1/servers?updated_since=last+week", 400, "'updated_since'"),
        ("/v0.1/servers?search=" + "x" * 600, 400, "'search'"),
        ("/v0.1/servers?search=" + "x" * 5000, 414, "query string longer"),
        ("/" + "p" * 3000, 414, "request path longer"),
        (
            "/v0.1/servers/local.cluster.svc.agents%2Fresearch/versions/latest?include_deleted=maybe",
            400,
            "'include_",
        ),
    ],
)
async def test_bad_requests_are_json_4xx(
    client: httpx2.AsyncClient, path: str, status: int, message: str
) -> None:
    response = await client.get(path)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    assert message in response.json()["error"]
    # Coded, with seed 004's category: what is not there is upstream, a bad request the request's.
    expected = ("NOT_FOUND", "upstream") if status == 404 else ("INVALID_ARGUMENTS", "request")
    assert (response.json()["code"], response.json()["category"]) == expected


async def test_bad_parameter_errors_name_the_parameter(client: httpx2.AsyncClient) -> None:
    body = (await client.get("/v0.1/servers", params={"limit": "0"})).json()
    assert body == {
        "error": "invalid parameter 'limit': must be an integer from 1 to 100",
        "code": "INVALID_ARGUMENTS",
        "category": "request",
        "parameter": "limit",
    }


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
async def test_the_registry_is_read_only(client: httpx2.AsyncClient, method: str) -> None:
    response = await client.request(method, "/v0.1/servers")
    assert response.status_code == 405
    assert "GET" in response.headers["allow"]
    assert "read-only" in response.json()["error"]


async def test_head_works(client: httpx2.AsyncClient) -> None:
    assert (await client.head(WELL_KNOWN)).status_code == 200


async def test_etag_and_if_none_match(client: httpx2.AsyncClient, source: MemorySource) -> None:
    first = await client.get(WELL_KNOWN)
    etag = first.headers["etag"]
    assert first.headers["cache-control"] == "no-cache"
    for header in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        again = await client.get(WELL_KNOWN, headers={"if-none-match": header})
        assert again.status_code == 304
        assert again.content == b""
        assert again.headers["etag"] == etag
    assert (await client.get(WELL_KNOWN, headers={"if-none-match": '"other"'})).status_code == 200
    # A change nobody sees in this document keeps the ETag (a not-ready agent changing phase is
    # not in the ready-only list); a visible one changes it.
    ready_only = {"ready": "true"}
    ready_etag = (await client.get(WELL_KNOWN, params=ready_only)).headers["etag"]
    source.store.upsert(state("waiting", ready=False, phase="Progressing"))
    unchanged = await client.get(WELL_KNOWN, params=ready_only, headers={"if-none-match": ready_etag})
    assert unchanged.status_code == 304
    assert (await client.get(WELL_KNOWN, headers={"if-none-match": etag})).status_code == 200
    etag = (await client.get(WELL_KNOWN)).headers["etag"]
    source.store.upsert(state("research", tools=("send_message",)))
    changed = await client.get(WELL_KNOWN, headers={"if-none-match": etag})
    assert changed.status_code == 200
    assert changed.headers["etag"] != etag


async def test_detail_etag(client: httpx2.AsyncClient) -> None:
    path = f"/v0.1/servers/{urllib.parse.quote(RESEARCH, safe='')}/versions/latest"
    etag = (await client.get(path)).headers["etag"]
    assert (await client.get(path, headers={"if-none-match": etag})).status_code == 304


async def test_changes_show_on_the_next_request(client: httpx2.AsyncClient, source: MemorySource) -> None:
    source.store.upsert(state("fresh"))
    assert "fresh" in names((await client.get(WELL_KNOWN)).json())
    source.store.remove(("agents", "fresh"))
    assert "fresh" not in names((await client.get(WELL_KNOWN)).json())


async def test_health_and_metrics(client: httpx2.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok", "providers": []}
    assert (await client.get("/readyz")).json() == {"status": "ready"}
    await client.get(WELL_KNOWN)
    await client.get("/v0.1/servers?limit=0")
    await client.get("/nowhere")
    text = (await client.get("/metrics")).text
    for line in [
        "pallas_up 1.0",
        'pallas_registry_requests_total{code="200",route="well_known"} 1.0',
        'pallas_registry_requests_total{code="400",route="servers"} 1.0',
        'pallas_registry_requests_total{code="404",route="other"} 1.0',
        'pallas_registry_servers{status="active"} 2.0',
        'pallas_registry_servers{status="deprecated"} 1.0',
        'pallas_registry_servers{status="deleted"} 1.0',
        "pallas_registry_agents_left_out 1.0",
        "pallas_registry_source_ready 1.0",
        'pallas_registry_request_duration_seconds_count{route="well_known"} 1.0',
    ]:
        assert line in text.splitlines(), line


class NeverReady(CatalogueSource):
    async def run(self) -> None:
        raise AssertionError("not started in these tests")


async def test_not_ready_until_the_first_full_list() -> None:
    app = build_app(NeverReady(), start_source=False)
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://r") as c:
        assert (await c.get("/readyz")).status_code == 503
        assert (await c.get("/healthz")).status_code == 200
        for path in (WELL_KNOWN, "/v0.1/servers", f"/v0.1/servers/{RESEARCH}/versions/latest"):
            response = await c.get(path)
            assert response.status_code == 503, path
            assert response.headers["retry-after"] == "1"


async def test_random_requests_never_get_a_500(client: httpx2.AsyncClient) -> None:
    rng = random.Random(3)
    alphabet = string.printable + "%/?&=€😀\x00"
    keys = [*KNOWN, "x"]
    bases = [WELL_KNOWN, "/v0.1/servers", f"/v0.1/servers/{RESEARCH}/versions/"]
    for _ in range(300):
        junk = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        query = urllib.parse.urlencode([(rng.choice(keys), junk) for _ in range(rng.randint(0, 3))])
        path = rng.choice(bases) + (urllib.parse.quote(junk) if rng.random() < 0.3 else "")
        response = await client.get(f"{path}?{query}")
        assert response.status_code < 500, (path, query, response.text)
        assert response.headers["content-type"] == "application/json"


class BrokenStore:
    def snapshot(self) -> Any:
        raise RuntimeError("boom")


async def test_an_unexpected_error_is_a_json_500(caplog: pytest.LogCaptureFixture) -> None:
    source = MemorySource([state()])
    source.store = BrokenStore()  # type: ignore[assignment]
    app = build_app(source, metrics=RegistryMetrics(source, process_collectors=False), start_source=False)
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://r") as c:
        response = await c.get(WELL_KNOWN)
    assert response.status_code == 500
    assert response.json() == {"error": "internal error", "code": "INTERNAL", "category": "internal"}
    assert "unhandled error serving /.well-known/mcp/server.json" in caplog.text


class FailsOnce(CatalogueSource):
    def __init__(self) -> None:
        super().__init__()
        self.runs = 0

    async def run(self) -> None:
        self.runs += 1
        if self.runs == 1:
            raise RuntimeError("first run fails")
        self.mark_ready()
        await asyncio.Event().wait()


@pytest.mark.looptime
async def test_a_failing_source_is_restarted_after_a_pause(looptime: float) -> None:
    source = FailsOnce()
    task = asyncio.create_task(app_module._supervise(source))
    await asyncio.wait_for(source.wait_ready(), 5)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert source.restarts == {"crash": 1}
    assert looptime == 1.0  # the supervisor's pause before the second run, on the fake loop clock


async def test_paging_over_http_sees_every_stable_agent_once_while_the_catalogue_changes() -> None:
    rng = random.Random(5)
    stable = [state(f"s{i:02d}") for i in range(60)]
    source = MemorySource(stable)
    app = build_app(source, metrics=RegistryMetrics(source, process_collectors=False), start_source=False)
    seen: list[str] = []
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://r") as c:
        cursor = None
        while True:
            params = {"limit": "7"} | ({"cursor": cursor} if cursor else {})
            document = (await c.get("/v0.1/servers", params=params)).json()
            seen += names(document)
            for _ in range(4):
                churn = f"c{rng.randint(0, 30):02d}"
                if rng.random() < 0.5:
                    source.store.upsert(state(churn))
                else:
                    source.store.remove(("agents", churn))
            cursor = document["metadata"].get("nextCursor")
            if cursor is None:
                break
    assert len(seen) == len(set(seen))
    assert {s.name for s in stable} <= set(seen)


async def test_undecodable_version_names_the_version(client: httpx2.AsyncClient) -> None:
    response = await client.get(f"/v0.1/servers/{urllib.parse.quote(RESEARCH, safe='')}/versions/%FF")
    assert response.status_code == 400
    assert response.json()["parameter"] == "version"
