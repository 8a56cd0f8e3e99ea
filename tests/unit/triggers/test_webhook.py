"""The webhook endpoint's answers in memory: the signature before the body, then the policies.

Real GitHub and Slack signatures over a real listener are tests/integration/runtime/test_run_triggers.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any

import httpx2

from pallas_api.spec import PallasTriggerSpec
from pallas_api.triggers.signature import hmac_hex, pallas_signature
from pallas_io.triggers.call import Answer
from pallas_io.triggers.runs import TriggerEngine, TriggerTarget
from pallas_runtime.metrics import RuntimeMetrics
from pallas_runtime.triggers.webhook import WebhookEndpoint, WebhookTrigger

SECRET = b"s3cret-value-for-tests"


class Agent:
    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.messages: list[str] = []

    async def __call__(
        self, url: str, message: str, conv: str, headers: Mapping[str, str], caller: str
    ) -> Answer:
        self.messages.append(message)
        await self.release.wait()
        return Answer("ok", conv, None, None)


ENGINES: list[TriggerEngine] = []


def endpoint(agent: Agent, signature: str = "hmac-sha256", **spec: Any) -> httpx2.AsyncClient:
    hook = {"signature": signature, "secretRef": {"name": "s", "key": "k"}, "maxBodyBytes": 64}
    body = {"agent": "triage", "message": "{{ .body.text }}", "webhook": hook, **spec}
    target = TriggerTarget("ns", "hook", PallasTriggerSpec.model_validate(body), "http://agent/mcp")
    engine = TriggerEngine(target, RuntimeMetrics(process_collectors=False).triggers, call=agent)
    ENGINES.append(engine)
    app = WebhookEndpoint([(WebhookTrigger(target, SECRET), engine)]).app()
    return httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://hooks")


def signed(body: bytes, content_type: str = "application/json") -> dict[str, str]:
    return {"Content-Type": content_type, "X-Pallas-Signature-256": pallas_signature(SECRET, body)}


async def post(client: httpx2.AsyncClient, payload: object) -> httpx2.Response:
    body = json.dumps(payload).encode()
    return await client.post("/triggers/ns/hook", content=body, headers=signed(body))


async def test_forbid_answers_409_while_a_run_is_in_flight() -> None:
    agent = Agent()
    async with endpoint(agent) as client:
        assert (await post(client, {"text": "a"})).status_code == 202
        busy = await post(client, {"text": "b"})
        agent.release.set()
        await ENGINES[-1].wait_idle()
    assert busy.status_code == 409
    assert "concurrencyPolicy is Forbid" in busy.json()["error"]
    assert agent.messages == ["a"]


async def test_over_the_rate_answers_429_with_retry_after() -> None:
    agent = Agent()
    agent.release.set()
    async with endpoint(agent, concurrencyPolicy="Allow", maxRunsPerMinute=1) as client:
        first = await post(client, {"text": "a"})
        second = await post(client, {"text": "b"})
    assert (first.status_code, second.status_code) == (202, 429)
    assert second.headers["retry-after"] == "60"


async def test_suspended_answers_409_and_runs_nothing() -> None:
    agent = Agent()
    async with endpoint(agent, suspend=True) as client:
        answer = await post(client, {"text": "a"})
    assert (answer.status_code, answer.json()["error"]) == (409, "the trigger is suspended")
    assert agent.messages == []


async def test_the_body_is_checked_in_order_size_signature_type() -> None:
    agent = Agent()
    async with endpoint(agent) as client:
        big = b"x" * 65
        too_large = await client.post("/triggers/ns/hook", content=big, headers=signed(big))
        unsigned = await client.post(
            "/triggers/ns/hook", content=b"{}", headers={"Content-Type": "application/json"}
        )
        text = b"hello"
        wrong_type = await client.post("/triggers/ns/hook", content=text, headers=signed(text, "text/plain"))
    assert [r.status_code for r in (too_large, unsigned, wrong_type)] == [413, 401, 415]
    assert unsigned.json()["error"] == "signature check failed: the X-Pallas-Signature-256 header is missing"
    assert agent.messages == []


async def test_github_ping_and_slack_url_verification_are_answered_not_run() -> None:
    agent = Agent()
    body = b"{}"
    github = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "ping",
        "X-Hub-Signature-256": pallas_signature(SECRET, body),  # the same form, under GitHub's name
    }
    async with endpoint(agent, "github") as client:
        pong = await client.post("/triggers/ns/hook", content=body, headers=github)
    challenge = json.dumps({"type": "url_verification", "challenge": "c-42"}).encode()
    stamp = str(int(time.time()))
    slack = {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": "v0=" + hmac_hex(SECRET, f"v0:{stamp}:".encode() + challenge),
    }
    async with endpoint(agent, "slack") as client:
        echoed = await client.post("/triggers/ns/hook", content=challenge, headers=slack)
    assert (pong.status_code, pong.json()) == (200, {"pong": True})
    assert (echoed.status_code, echoed.json()) == (200, {"challenge": "c-42"})
    assert agent.messages == []
