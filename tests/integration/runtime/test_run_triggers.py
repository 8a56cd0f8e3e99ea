"""`pallas run` runs PallasTriggers: a schedule fires, webhooks signed as GitHub and Slack sign
theirs start runs, and a bad signature, an oversized body or a template that does not render
runs nothing (or records the failure)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import signal
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx2
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.integration.runtime.test_run_command import pallas_run
from tests.support.fake_llm import FakeOpenAI, Text
from tests.support.local_manifests import fake_llm_deployment
from tests.support.mcp_peers import free_ports
from tests.support.mcp_servers import serve_app

API_KEY = "sk-test-secret-0123456789"
GITHUB_SECRET = "gh-webhook-secret-42"
SLACK_SECRET = "slack-signing-secret-43"


def _trigger(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "pallas.dev/v1alpha1",
        "kind": "PallasTrigger",
        "metadata": {"name": name},
        "spec": spec,
    }


def _secret(name: str, key: str, value: str) -> dict[str, Any]:
    encoded = base64.b64encode(value.encode()).decode()
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": {key: encoded}}


def manifests(llm: FakeOpenAI, *triggers: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        *fake_llm_deployment(llm, "local", API_KEY),
        *(
            {
                "apiVersion": "pallas.dev/v1alpha1",
                "kind": "PallasAgent",
                "metadata": {"name": name},
                "spec": {"deployment": "local", "instruction": name},
            }
            for name in ("triage", "reporter")  # two: `pallas_run` waits for two agents
        ),
        _secret("gh", "secret", GITHUB_SECRET),
        _secret("slack", "signing", SLACK_SECRET),
        *triggers,
    ]


QUIET = {"PALLAS_LOG_LEVEL": "INFO"}
"""Not DEBUG: the run's stderr is a pipe read only at the end."""


def ports() -> int:
    """A base port whose predecessor, the default --triggers-port, is free too."""
    return free_ports(4) + 1


async def listening(port: int) -> None:
    """Until something answers HTTP on the port (the triggers' endpoint starts after the registry)."""
    async with httpx2.AsyncClient() as http:
        for _ in range(200):
            with contextlib.suppress(httpx2.HTTPError):
                await http.get(f"http://127.0.0.1:{port}/")
                return
            await asyncio.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}")


def user_messages(llm: FakeOpenAI) -> list[str]:
    return [r.json["messages"][-1]["content"] for r in llm.completions if r.json]


async def until(condition: Any, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


def github_headers(body: bytes, secret: str = GITHUB_SECRET) -> dict[str, str]:
    """As GitHub signs a delivery: HMAC-SHA256 of the body, `sha256=<hex>`."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {
        "Content-Type": "application/json",
        "X-GitHub-Event": "pull_request",
        "X-Hub-Signature-256": f"sha256={digest}",
    }


def slack_headers(body: bytes, secret: str = SLACK_SECRET) -> dict[str, str]:
    """As Slack signs a request: v0 HMAC-SHA256 of `v0:<timestamp>:<body>`."""
    stamp = str(int(time.time()))
    digest = hmac.new(secret.encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256).hexdigest()
    return {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": f"v0={digest}",
    }


async def test_a_schedule_fires_within_seconds_and_delivers_signed_answers(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.default = Text("report written")
    delivered: list[tuple[bytes, str]] = []

    async def receive(request: Request) -> Response:
        delivered.append((await request.body(), request.headers.get("x-pallas-signature-256", "")))
        return Response(status_code=204)

    receiver = Starlette(routes=[Route("/hook", receive, methods=["POST"])])
    trigger = _trigger(
        "nightly",
        {
            "agent": "triage",
            "message": "Report for {{ .trigger.namespace }}/{{ .trigger.name }}, run {{ .run.id }}",
            "schedule": {"cron": "@every 1s"},
            "concurrencyPolicy": "Allow",
        },
    )
    path = tmp_path / "agents.yaml"
    base = ports()
    async with serve_app(receiver, path="/hook") as hook:
        trigger["spec"]["deliver"] = {
            "webhook": {"url": hook.url, "secretRef": {"name": "gh", "key": "secret"}}
        }
        path.write_text(yaml.safe_dump_all(manifests(fake_openai, trigger)))
        async with pallas_run(path, base, env=QUIET) as proc:
            ready = time.monotonic()
            await until(lambda: len(user_messages(fake_openai)) >= 1, 10)
            first = time.monotonic() - ready
            await until(lambda: len(user_messages(fake_openai)) >= 2, 10)
            await until(lambda: len(delivered) >= 1, 10)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=15)
        body, signature = delivered[0]
        assert signature == "sha256=" + hmac.new(GITHUB_SECRET.encode(), body, hashlib.sha256).hexdigest()
        answer = json.loads(body)
        assert (answer["trigger"], answer["outcome"], answer["answer"]) == (
            "default/nightly",
            "Succeeded",
            "report written",
        )
        assert answer["conversationId"] == f"trigger-nightly-{answer['run']}"
        assert all(m.startswith("Report for default/nightly, run ") for m in user_messages(fake_openai))
        # Every second from the start, which came before the registry was ready; generous for a
        # loaded machine (the run's process, its agent and the fake LLM share two cores).
        assert first < 10
        runs = [json.loads(line) for line in err.splitlines() if "trigger default/nightly: run" in line]
        assert any(line["message"].endswith("succeeded") for line in runs), err
        assert API_KEY not in err


async def test_webhooks_signed_as_github_and_slack_sign_theirs(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.default = Text("looked into it")
    github = _trigger(
        "pull-requests",
        {
            "agent": "triage",
            "message": "Review PR #{{ .body.number }}: {{ .body.pull_request.title }}",
            "webhook": {
                "signature": "github",
                "secretRef": {"name": "gh", "key": "secret"},
                "maxBodyBytes": 4096,
            },
        },
    )
    slack = _trigger(
        "slash",
        {
            "agent": "triage",
            "message": "{{ .body.user_name }} asks: {{ .body.text }}",
            "webhook": {"signature": "slack", "secretRef": {"name": "slack", "key": "signing"}},
        },
    )
    broken = _trigger(
        "broken",
        {
            "agent": "triage",
            "message": "Pod {{ .body.object.metadata.name }}",
            "webhook": {"signature": "github", "secretRef": {"name": "gh", "key": "secret"}},
        },
    )
    path = tmp_path / "agents.yaml"
    path.write_text(yaml.safe_dump_all(manifests(fake_openai, github, slack, broken)))
    base = ports()
    hooks = f"http://127.0.0.1:{base - 1}/triggers/default"
    async with pallas_run(path, base, env=QUIET) as proc, httpx2.AsyncClient() as http:
        await listening(base - 1)
        body = json.dumps({"number": 7, "pull_request": {"title": "Fix the flaky test"}}).encode()
        answer = await http.post(f"{hooks}/pull-requests", content=body, headers=github_headers(body))
        assert answer.status_code == 202, answer.text
        assert answer.json()["outcome"] == "Running"

        form = urlencode({"user_name": "ada", "text": "why is staging slow?"}).encode()
        answer = await http.post(f"{hooks}/slash", content=form, headers=slack_headers(form))
        assert answer.status_code == 202, answer.text
        await until(lambda: len(user_messages(fake_openai)) >= 2, 10)
        assert sorted(user_messages(fake_openai)) == [
            "Review PR #7: Fix the flaky test",
            "ada asks: why is staging slow?",
        ]

        # A wrong secret, a tampered body, a Slack signature on a GitHub trigger: 401, no run.
        forged = await http.post(
            f"{hooks}/pull-requests", content=body, headers=github_headers(body, "guess")
        )
        tampered = await http.post(
            f"{hooks}/pull-requests", content=body + b" ", headers=github_headers(body)
        )
        wrong_kind = await http.post(f"{hooks}/pull-requests", content=body, headers=slack_headers(body))
        assert [r.status_code for r in (forged, tampered, wrong_kind)] == [401, 401, 401]
        assert "X-Hub-Signature-256" in forged.json()["error"]
        assert GITHUB_SECRET not in forged.text

        # Too large: refused on its Content-Length, before the signature or the body is read.
        big = b'{"pad": "' + b"x" * 5000 + b'"}'
        too_large = await http.post(f"{hooks}/pull-requests", content=big, headers=github_headers(big))
        assert too_large.status_code == 413

        # Signed but not JSON: 400, no run.
        junk = b"{not json"
        malformed = await http.post(f"{hooks}/pull-requests", content=junk, headers=github_headers(junk))
        assert malformed.status_code == 400

        # Signed, valid, but the template's path is not in the body: a failed run naming it.
        empty = b"{}"
        failed = await http.post(f"{hooks}/broken", content=empty, headers=github_headers(empty))
        assert failed.status_code == 422
        assert failed.json()["error"].startswith(".body.object.metadata.name: .body.object is not there")

        unknown = await http.post(f"{hooks}/nobody", content=empty, headers=github_headers(empty))
        assert unknown.status_code == 404

        await asyncio.sleep(0.5)  # a run started by any of the refused requests would reach the LLM
        assert len(user_messages(fake_openai)) == 2
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    assert GITHUB_SECRET not in err
    assert SLACK_SECRET not in err
