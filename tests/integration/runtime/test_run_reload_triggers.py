"""`pallas run --reload` moves the PallasTriggers with the files: a changed schedule runs on its new
spec from the edit on, a new webhook trigger is served (its listener started then), a removed
schedule stops, and an edit naming an agent the files lack is refused with the triggers as they
were."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx2
import yaml

from tests.integration.runtime.test_run_reload import pallas_run_reload
from tests.integration.runtime.test_run_triggers import (
    _trigger,
    github_headers,
    listening,
    manifests,
    ports,
    until,
    user_messages,
)
from tests.support.fake_llm import FakeOpenAI, Text


def ticker(message: str) -> dict[str, Any]:
    return _trigger(
        "ticker",
        {
            "agent": "triage",
            "message": message,
            "schedule": {"cron": "@every 1s"},
            "concurrencyPolicy": "Allow",
        },
    )


HOOK = _trigger(
    "hook",
    {
        "agent": "reporter",
        "message": "Deploy {{ .body.version }}",
        "webhook": {"signature": "github", "secretRef": {"name": "gh", "key": "secret"}},
    },
)


def count(llm: FakeOpenAI, message: str) -> int:
    return sum(1 for m in user_messages(llm) if m == message)


async def test_an_edit_moves_the_triggers_changed_added_and_removed(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.default = Text("done")
    path = tmp_path / "agents.yaml"
    path.write_text(yaml.safe_dump_all(manifests(fake_openai, ticker("tick v1"))))
    base = ports()
    async with pallas_run_reload(path, base) as run, httpx2.AsyncClient() as http:
        await until(lambda: count(fake_openai, "tick v1") >= 1, 15)

        # Changed and added at once: the ticker's new message from now on, a webhook served.
        after = len(run.out)
        path.write_text(yaml.safe_dump_all(manifests(fake_openai, ticker("tick v2"), HOOK)))
        line = await run.line("out", "reloaded:", after)
        assert line.endswith("triggers added default/hook; changed default/ticker"), line
        await until(lambda: count(fake_openai, "tick v2") >= 2, 15)
        v1 = count(fake_openai, "tick v1")
        await asyncio.sleep(2.5)
        assert count(fake_openai, "tick v1") == v1, "the old spec's loop stopped"
        await listening(base - 1)
        body = json.dumps({"version": "1.2.3"}).encode()
        answer = await http.post(
            f"http://127.0.0.1:{base - 1}/triggers/default/hook", content=body, headers=github_headers(body)
        )
        assert answer.status_code == 202, answer.text
        await until(lambda: count(fake_openai, "Deploy 1.2.3") == 1, 15)

        # An edit the triggers cannot take (no such agent) is refused whole: the ticker goes on.
        broken = _trigger("orphan", {"agent": "nobody", "message": "x", "schedule": {"cron": "@every 1s"}})
        after = len(run.err)
        path.write_text(yaml.safe_dump_all(manifests(fake_openai, ticker("tick v2"), HOOK, broken)))
        refusal = await run.line("err", "pallas run: reload: ", after)
        assert "spec.agent: no PallasAgent 'nobody'" in refusal, refusal
        v2 = count(fake_openai, "tick v2")
        await until(lambda: count(fake_openai, "tick v2") > v2, 15)

        # Removed: the ticker stops; the webhook, unchanged, keeps its engine and its route.
        after = len(run.out)
        path.write_text(yaml.safe_dump_all(manifests(fake_openai, HOOK)))
        line = await run.line("out", "reloaded:", after)
        assert line.endswith("triggers removed default/ticker"), line
        await asyncio.sleep(1.5)  # a run the removed loop started just before is let reach the LLM
        v2 = count(fake_openai, "tick v2")
        await asyncio.sleep(2.5)
        assert count(fake_openai, "tick v2") == v2, "the removed trigger no longer fires"
        body = json.dumps({"version": "1.2.4"}).encode()
        answer = await http.post(
            f"http://127.0.0.1:{base - 1}/triggers/default/hook", content=body, headers=github_headers(body)
        )
        assert answer.status_code == 202, answer.text
        await until(lambda: count(fake_openai, "Deploy 1.2.4") == 1, 15)
