"""The day-2 soak's instrument against a real agent process (no cluster): its callers resume a
lost session, and its verdicts and history reads see a continued conversation as whole and a
lost one as lost.

An `orchestrator` agent process with OIDC callers and conversations in SQLite, answered by the
soak's scripted fake LLM, is replaced by a new one on the same port (a pod replaced behind its
Service), first on the same database, then on an empty one.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest

from pallas_api.config import AgentConfig
from tests.support.agents import AgentProcess, agent_config, run_agent_process
from tests.support.fake_llm import FakeOpenAI
from tests.support.mcp_peers import free_port
from tests.support.oidc import AUDIENCE, Issuer, oidc_issuer
from tests.support.soak.clients import Caller, Send
from tests.support.soak.script import ORCHESTRATOR, instruction, llm_script, secret_for

pytestmark = pytest.mark.timeout(120)


def orchestrator(llm: FakeOpenAI, issuer: Issuer, database: Path, port: int) -> AgentConfig:
    return agent_config(
        llm.base_url,
        name=ORCHESTRATOR,
        instruction=instruction(ORCHESTRATOR, 1),
        conversations={"type": "sqlite", "sqlitePath": str(database)},
        auth={
            "mode": "oidc",
            "namespace": "soak",
            "resource": f"http://127.0.0.1:{port}/mcp",
            "oidc": {"issuer": issuer.url, "audience": AUDIENCE, "jwksRefreshSeconds": 0},
        },
    )


@contextlib.asynccontextmanager
async def agent(llm: FakeOpenAI, issuer: Issuer, database: Path, port: int) -> AsyncIterator[AgentProcess]:
    async with run_agent_process(orchestrator(llm, issuer, database, port), port=port) as proc:
        yield proc


async def end_session(url: str, talker: Caller, issuer: Issuer) -> None:
    """Close the caller's MCP session on the agent (a DELETE with the caller's own credential)."""
    assert talker._session is not None
    session = talker._session.transport.get_session_id()  # type: ignore[attr-defined]
    assert session is not None
    headers = {"mcp-session-id": session, "Authorization": f"Bearer {issuer.token(sub='soak-c01')}"}
    async with httpx2.AsyncClient(timeout=10) as http:
        # The process never had it: the first request takes it on, the DELETE then ends it.
        ping = {"jsonrpc": "2.0", "id": "end-session", "method": "ping"}
        accept = {"Accept": "application/json, text/event-stream"}
        assert (await http.post(url, json=ping, headers={**headers, **accept})).status_code == 200
        assert (await http.delete(url, headers=headers)).status_code == 200


def caller(url: str, issuer: Issuer, sends: list[Send]) -> Caller:
    return Caller(
        "c01",
        url,
        lambda: issuer.token(sub="soak-c01"),
        run_id="t",
        delegate=False,
        turns=10,
        timeout=20,
        record=sends.append,
        secret=secret_for("c01"),
    )


async def test_callers_resume_lost_sessions_and_tell_a_continued_conversation_from_a_lost_one(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.default = llm_script(0.0)
    port, sends = free_port(), []
    async with oidc_issuer() as issuer:
        async with agent(fake_openai, issuer, tmp_path / "c.db", port) as proc:
            talker = caller(proc.url, issuer, sends)
            assert (await talker.send_one()).ok
            assert (await talker.send_one()).ok
        # The same conversation store behind the same address: a pod replaced by its Deployment.
        async with agent(fake_openai, issuer, tmp_path / "c.db", port):
            third = await talker.send_one()
            kept = await talker.check_histories(talker.conversations)
        # A new process on an empty store: every turn so far is lost.
        async with agent(fake_openai, issuer, tmp_path / "empty.db", port) as proc:
            await end_session(proc.url, talker, issuer)  # as an idle timeout would
            fourth = await talker.send_one()
            lost = await talker.check_histories(talker.conversations)
        await talker.disconnect()

    assert third.ok, third
    assert not third.resumed, "the new process took the session on: the caller kept it"
    assert third.verdict is not None
    assert not third.verdict.context_lost, third.verdict
    assert (kept.lost, kept.leaks, kept.unverified) == ([], [], [])

    assert fourth.ok, fourth
    assert fourth.resumed, "the session was closed (404): the caller started a new one and sent again"
    assert fourth.verdict is not None
    assert fourth.verdict.missing == (1, 2, 3)
    assert sorted(loss.turn for loss in lost.lost) == [1, 2, 3]
    assert talker.sessions_opened == 2
    assert [s.turn for s in sends] == [1, 2, 3, 4]
