"""`pallas run -f`: manifests run locally, agents call agents, errors are one line, no secret leaks."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from prometheus_client.parser import text_string_to_metric_families

from pallas_registry.schema import OFFICIAL_META
from tests.support.fake_llm import Call, FakeOpenAI, Hold, Text, ToolCalls
from tests.support.local_manifests import fake_llm_deployment
from tests.support.mcp_peers import free_ports
from tests.support.oidc import AUDIENCE, oidc_issuer

PALLAS = [sys.executable, "-m", "pallas_runtime.cli"]


API_KEY = "sk-test-secret-0123456789"


def manifests(llm: FakeOpenAI) -> list[dict[str, Any]]:
    return [
        *fake_llm_deployment(llm, "local", API_KEY),
        {
            "apiVersion": "pallas.dev/v1alpha1",
            "kind": "PallasAgent",
            "metadata": {"name": "boss"},
            "spec": {"deployment": "local", "instruction": "boss", "agents": ["worker"]},
        },
        {
            "apiVersion": "pallas.dev/v1alpha1",
            "kind": "PallasAgent",
            "metadata": {"name": "worker"},
            "spec": {"deployment": "local", "instruction": "worker"},
        },
    ]


@contextlib.asynccontextmanager
async def pallas_run(
    path: Path | None,
    base_port: int,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    log: Path | None = None,
) -> AsyncIterator[subprocess.Popen[str]]:
    """`pallas run -f path` (no `-f` when `path` is None) until the first two agents are ready.

    Its output goes to pipes the caller reads when the run is over; a long run (a benchmark)
    passes `log`, a file, instead: its DEBUG log fills a pipe's 64 KiB that nobody reads during
    the run, and then `pallas run` blocks on its next log line and answers nothing more.
    """
    env = {**os.environ, "PALLAS_LOG_LEVEL": "DEBUG", "PALLAS_ROOT_LOG_LEVEL": "DEBUG", **(env or {})}
    files = ["-f", str(path)] if path is not None else []
    output = log.open("w") if log is not None else None
    proc = subprocess.Popen(
        [*PALLAS, "run", *files, "--base-port", str(base_port)],
        stdout=output or subprocess.PIPE,
        stderr=output or subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
    )
    try:
        async with httpx2.AsyncClient() as http:
            for port in (base_port + 1, base_port + 2):
                for _ in range(300):
                    assert proc.poll() is None, proc.communicate()[1]
                    with contextlib.suppress(httpx2.HTTPError):
                        if (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200:
                            break
                    await asyncio.sleep(0.05)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(15)
        if output is not None:
            output.close()


async def test_agents_call_agents_and_nothing_secret_is_logged(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    def step(request_json: dict[str, Any]) -> Any:
        role, system = request_json["messages"][-1]["role"], request_json["messages"][0]["content"]
        if role == "tool":
            return Text(f"boss heard: {request_json['messages'][-1]['content']}")
        if system == "boss":
            return ToolCalls([Call("worker__send_message", {"message": "what is 6*7?"})])
        return Text("42")

    fake_openai.default = step
    path = tmp_path / "agents.yaml"
    path.write_text(yaml.safe_dump_all(manifests(fake_openai)))
    base = free_ports(3)
    state = tmp_path / "state"
    async with pallas_run(path, base, env={"XDG_STATE_HOME": str(state)}) as proc:
        transport = StreamableHttpTransport(
            f"http://127.0.0.1:{base + 1}/mcp", headers={"Authorization": "Bearer caller-jwt-abc"}
        )
        async with Client(transport, mode="legacy") as client:
            result = await client.call_tool("send_message", {"message": "ask the worker"})
        assert result.content[0].text == "boss heard: 42"
        catalogue = await registry_listing(base)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0
    # Ports in manifest order: boss on base+1, worker on base+2, started worker first.
    assert out.splitlines() == [
        f"agent worker{' ' * 18} http://127.0.0.1:{base + 2}/mcp",
        f"agent boss{' ' * 20} http://127.0.0.1:{base + 1}/mcp",
        f"registry{' ' * 22} http://127.0.0.1:{base}/.well-known/mcp/server.json",
    ]
    assert catalogue == {
        "boss": f"http://127.0.0.1:{base + 1}/mcp",
        "worker": f"http://127.0.0.1:{base + 2}/mcp",
    }
    assert all(r.headers["authorization"] == f"Bearer {API_KEY}" for r in fake_openai.completions)
    for line in err.splitlines():
        json.loads(line)  # every log line is JSON
    assert API_KEY not in err
    assert "caller-jwt-abc" not in err
    # The original's rotating file is on by default under `pallas run`: the same lines, redacted.
    filed = (state / "pallas" / "pallas.log").read_text()
    assert [json.loads(line)["message"] for line in filed.splitlines()][:3] == [
        json.loads(line)["message"] for line in err.splitlines()
    ][:3]
    assert API_KEY not in filed
    assert "caller-jwt-abc" not in filed


async def test_dotenv_agents_config_and_openai_base_url_as_the_original(
    fake_openai: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No -f, no baseURL: the manifests come from $PALLAS_AGENTS_CONFIG, the LLM URL from .env."""
    for name in ("OPENAI_BASE_URL", "KEY"):
        monkeypatch.delenv(name, raising=False)
    docs = manifests(fake_openai)
    del docs[1]["spec"]["providers"]["fake"]["baseURL"]
    docs[0]["data"] = {}  # the key comes from .env too (a secretKeyRef falls back to $KEY)
    (tmp_path / "m.yaml").write_text(yaml.safe_dump_all(docs))
    # The environment wins over .env: the run keeps the DEBUG level pallas_run sets.
    (tmp_path / ".env").write_text(
        f"OPENAI_BASE_URL={fake_openai.base_url}\nKEY={API_KEY}\nPALLAS_LOG_LEVEL=ERROR\n"
    )
    fake_openai.script(Text("from the fake"))
    base = free_ports(3)
    async with pallas_run(None, base, env={"PALLAS_AGENTS_CONFIG": "m.yaml"}, cwd=tmp_path) as proc:
        async with Client(f"http://127.0.0.1:{base + 2}/mcp") as client:
            reply = await client.call_tool("send_message", {"message": "hi"})
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    assert reply.content[0].text == "from the fake"
    (request,) = fake_openai.completions
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert any(json.loads(line).get("level") == "DEBUG" for line in err.splitlines()), err[-2000:]


async def test_the_registry_port_is_the_one_scrape_target_of_the_run(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    """As the original: the registry's /metrics carries every agent's series (and its own)."""
    fake_openai.default = Text("hello")
    docs = manifests(fake_openai)
    # A provider no agent uses, keyed by the same Secret: the registry checks it all the same.
    docs[1]["spec"]["providers"]["spare"] = {**docs[1]["spec"]["providers"]["fake"]}
    path = tmp_path / "agents.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    base = free_ports(3)
    async with pallas_run(path, base):
        async with Client(f"http://127.0.0.1:{base + 2}/mcp") as client:
            await client.call_tool("send_message", {"message": "hi"})
        await registry_listing(base)
        async with httpx2.AsyncClient() as http:
            for _ in range(100):
                providers = (await http.get(f"http://127.0.0.1:{base}/healthz")).json()["providers"]
                if len(providers) == 2:
                    break
                await asyncio.sleep(0.1)
            registry = (await http.get(f"http://127.0.0.1:{base}/metrics")).text
            agent = (await http.get(f"http://127.0.0.1:{base + 1}/metrics")).text
    assert {(p["name"], p["status"], tuple(p["models"])) for p in providers} == {
        ("fake", "ok", (fake_openai.models[0],)),
        ("spare", "ok", ()),
    }
    families = {f.name: f for f in text_string_to_metric_families(registry)}
    # One exposition: each family once (one `pallas_up`, one set of process metrics).
    assert registry.count("# TYPE pallas_up gauge") == 1
    assert registry.count("# TYPE process_cpu_seconds_total counter") == 1
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples
    }
    assert samples[("pallas_send_message_total", (("agent", "worker"), ("outcome", "ok")))] == 1
    boss = (("agent", "boss"), ("model", fake_openai.models[0]), ("port", str(base + 1)))
    assert ("pallas_agent_info", boss) in samples  # the port it listens on (seed R's label)
    assert samples[("pallas_up", ())] == 1
    assert samples[("pallas_registry_servers", (("status", "active"),))] == 2
    assert any(name == "pallas_registry_requests_total" for name, _ in samples)
    # Every agent port serves the same families (the original's "same snapshot").
    assert {f.name for f in text_string_to_metric_families(agent)} == set(families)


async def test_an_agent_at_its_busy_at_says_so_in_get_health_and_the_registry(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    release = asyncio.Event()
    fake_openai.default = Hold(release, Text("done"))
    docs = manifests(fake_openai)
    docs[3]["spec"]["busyAt"] = 2
    path = tmp_path / "agents.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    base = free_ports(3)
    worker = f"http://127.0.0.1:{base + 2}/mcp"
    async with pallas_run(path, base), Client(worker) as a, Client(worker) as b, Client(worker) as c:
        await registry_listing(base)
        calls = [asyncio.create_task(x.call_tool("send_message", {"message": "wait"})) for x in (a, b)]
        await fake_openai.holding_at_least(2)
        health = json.loads((await c.call_tool("get_health", {})).content[0].text)
        assert (health["status"], health["busy"], health["inFlight"]) == ("ok", True, 2)
        assert await agent_status(base, "worker", "busy")
        release.set()
        await asyncio.gather(*calls)
        health = json.loads((await c.call_tool("get_health", {})).content[0].text)
        assert (health["busy"], health["inFlight"]) == (False, 0)
        assert await agent_status(base, "worker", "ready")
        async with httpx2.AsyncClient() as http:
            exposition = (await http.get(f"http://127.0.0.1:{base}/metrics")).text
    assert 'pallas_send_message_in_flight{agent="worker"} 0.0' in exposition


async def test_an_agent_naming_an_undefined_server_runs_on_the_rest_and_says_which(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    """The gateway seed: a reference to an undefined server is a warning; the agent runs."""
    fake_openai.default = Text("done without it")
    docs = manifests(fake_openai)
    docs[3]["spec"]["servers"] = ["nope"]
    path = tmp_path / "agents.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    base = free_ports(3)
    async with pallas_run(path, base) as proc, Client(f"http://127.0.0.1:{base + 2}/mcp") as worker:
        answer = await worker.call_tool("send_message", {"message": "hi"})
        health = json.loads((await worker.call_tool("get_health", {})).content[0].text)
    _, err = proc.communicate()
    warning = "mcpServers nope not defined by the deployment: the agent runs without them"
    assert answer.content[0].text == "done without it"
    assert (health["status"], health["message"]) == ("degraded", f"Servers: {warning}")
    records = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    said = [(r["level"], r.get("agent")) for r in records if r["message"] == warning]
    assert said == [("WARNING", "worker")]


async def agent_status(base: int, agent: str, wanted: str) -> bool:
    """Whether the registry's `_meta` status of `agent` becomes `wanted` (it polls every 5 s)."""
    async with httpx2.AsyncClient() as http:
        for _ in range(150):
            response = await http.get(f"http://127.0.0.1:{base}/.well-known/mcp/server.json")
            entries = response.json()["servers"] if response.status_code == 200 else []
            statuses = {e["server"]["name"]: e["_meta"]["dev.pallas/agent"]["status"] for e in entries}
            if any(name.endswith("/" + agent) and status == wanted for name, status in statuses.items()):
                return True
            await asyncio.sleep(0.1)
    return False


async def registry_up(base: int) -> None:
    """Wait for the registry's port to answer (`pallas run` waits for its agents only)."""
    async with asyncio.timeout(90), httpx2.AsyncClient() as http:  # a loaded CI machine is slow
        while True:
            with contextlib.suppress(httpx2.HTTPError):
                if (await http.get(f"http://127.0.0.1:{base}/readyz")).status_code == 200:
                    return
            await asyncio.sleep(0.05)


async def registry_listing(base: int) -> dict[str, str]:
    """Agent name -> URL from the registry on the base port, once it lists both as active."""
    async with httpx2.AsyncClient() as http:
        for _ in range(200):
            response = await http.get(f"http://127.0.0.1:{base}/.well-known/mcp/server.json")
            entries = response.json()["servers"] if response.status_code == 200 else []
            # Every agent is listed from the start (Pending); wait until both are ready.
            if len(entries) == 2 and all(e["_meta"][OFFICIAL_META]["status"] == "active" for e in entries):
                return {
                    e["server"]["name"].rsplit("/", 1)[1]: e["server"]["remotes"][0]["url"] for e in entries
                }
            await asyncio.sleep(0.1)
    raise AssertionError("the registry never listed both agents as active")


def test_bad_manifests_and_flags_fail_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "pallas.dev/v1alpha1",
                "kind": "PallasAgent",
                "metadata": {"name": "a"},
                "spec": {"deployment": "d", "maxIterations": -1},
            }
        )
    )
    cases = [
        (
            ["run", "-f", str(bad)],
            f"pallas run: {bad}: PallasAgent/a: spec.maxIterations: Input should be greater than 0",
        ),
        (
            ["run", "-f", str(tmp_path / "missing.yaml")],
            f"pallas run: {tmp_path / 'missing.yaml'}: cannot read",
        ),
        (
            ["run", "-f", str(bad), "--base-port", "70000"],
            "pallas run: argument --base-port: 70000 is not a TCP port number (0-65535)",
        ),
    ]
    for args, message in cases:
        res = subprocess.run([*PALLAS, *args], capture_output=True, text=True, timeout=60)
        assert res.returncode == 2, res.stderr
        assert res.stderr.strip().startswith(message), res.stderr
        assert len(res.stderr.strip().splitlines()) == 1


async def test_a_taken_port_is_reported(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    path = tmp_path / "agents.yaml"
    path.write_text(yaml.safe_dump_all(manifests(fake_openai)))
    base = free_ports(3)
    async with pallas_run(path, base):
        res = subprocess.run(
            [*PALLAS, "run", "-f", str(path), "--base-port", str(base), "--agent", "worker"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert res.returncode == 1
    assert f"pallas run: agent worker: cannot listen on 127.0.0.1:{base + 2}" in res.stderr


async def test_pallas_run_honours_oidc_auth_and_its_registry_takes_a_token(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    def step(request_json: dict[str, Any]) -> Any:
        role, system = request_json["messages"][-1]["role"], request_json["messages"][0]["content"]
        if role == "tool":
            return Text(f"boss heard: {request_json['messages'][-1]['content']}")
        if system == "boss":
            return ToolCalls([Call("worker__send_message", {"message": "what is 6*7?"})])
        return Text("42")

    fake_openai.default = step
    async with oidc_issuer() as issuer:
        docs = manifests(fake_openai)
        docs[1]["spec"]["auth"] = {"mode": "oidc", "oidc": {"issuer": issuer.url, "audience": AUDIENCE}}
        docs[3]["spec"]["access"] = {"groups": ["research"]}  # the worker: researchers only
        path = tmp_path / "agents.yaml"
        path.write_text(yaml.safe_dump_all(docs))
        base = free_ports(3)
        alice, eve = issuer.token(sub="alice"), issuer.token(sub="eve", groups=["sales"])
        # INFO: nothing reads the pipe until the end, and debug lines of the polling registry
        # would fill it and block the process (tokens in debug logs are checked elsewhere).
        quiet = {"PALLAS_LOG_LEVEL": "INFO", "PALLAS_ROOT_LOG_LEVEL": "WARNING"}
        async with pallas_run(path, base, env={"PALLAS_TOKEN": alice, **quiet}) as proc:
            boss = f"http://127.0.0.1:{base + 1}/mcp"
            async with httpx2.AsyncClient() as http:
                bare = await http.post(
                    boss, json={}, headers={"Accept": "application/json, text/event-stream"}
                )
            assert bare.status_code == 401
            assert await ask(boss, alice) == "boss heard: 42"
            assert await ask(boss, eve) == "boss heard: Error: worker: calling send_message failed: HTTP 403"
            entries = await registry_entries(base, lambda e: e["_meta"]["dev.pallas/agent"]["tools"])
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=15)
    for entry in entries:
        vendor = entry["_meta"]["dev.pallas/agent"]
        assert vendor["auth"] == {"mode": "oidc", "issuer": issuer.url, "audience": AUDIENCE}
        assert {"get_health", "send_message"} <= set(vendor["tools"])  # its token let the registry look
    assert alice not in err
    assert eve not in err


async def ask(url: str, token: str) -> str:
    transport = StreamableHttpTransport(url, headers={"Authorization": f"Bearer {token}"})
    async with Client(transport, mode="legacy") as client:
        result = await client.call_tool("send_message", {"message": "ask the worker"})
    return str(result.content[0].text)


async def registry_entries(base: int, ready: Any) -> list[dict[str, Any]]:
    """The registry's two entries once `ready(entry)` holds for both."""
    async with httpx2.AsyncClient() as http:
        for _ in range(200):
            response = await http.get(f"http://127.0.0.1:{base}/.well-known/mcp/server.json")
            entries = response.json()["servers"] if response.status_code == 200 else []
            if len(entries) == 2 and all(ready(e) for e in entries):
                return list(entries)
            await asyncio.sleep(0.1)
    raise AssertionError("the registry never showed both agents as asked")
