"""Malformed A2A params: a JSON-RPC invalid-params error (-32602) saying what is wrong, no traceback.

The a2a-sdk's dispatcher logged every malformed request as an ERROR with a traceback (`Failed
to parse request params`, `Failed to validate base JSON-RPC request`), so any client could fill
an agent's log with them, and it answered some as an invalid request (-32600) or an internal
error (-32603: a v0.3 file part that is not base64 failed in the SDK's conversion). Now the
params are checked before the SDK sees them, with the SDK's own models, for A2A 1.0 and 0.3.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest

from tests.support.agents import agent_config, serve_agent
from tests.support.fake_llm import FakeOpenAI, Text

V1 = {"A2A-Version": "1.0"}
V03: dict[str, str] = {}
MESSAGE = {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}


def v03_message(role: str, part: dict[str, Any]) -> dict[str, Any]:
    return {"message": {"kind": "message", "messageId": "m", "role": role, "parts": [part]}}


NOT_BASE64 = {"kind": "file", "file": {"bytes": "!!notb64", "mimeType": "image/png"}}
MALFORMED: list[tuple[str, dict[str, str], str, Any, str]] = [
    # (case, headers, method, params, what the error message must name)
    ("params not an object", V1, "SendMessage", "x", "params must be an object"),
    ("params a list", V1, "SendMessage", [1], "params must be an object"),
    ("params of an unknown method", V1, "Nope", "x", "params must be an object"),
    ("parts not a list", V1, "SendMessage", {"message": {**MESSAGE, "parts": "x"}}, "parts"),
    ("id not a string", V1, "GetTask", {"id": {"a": 1}}, "id"),
    ("metadata not an object", V1, "SendMessage", {"message": MESSAGE, "metadata": "x"}, "metadata"),
    ("v0.3 role unknown", V03, "message/send", v03_message("robot", {"kind": "text", "text": "hi"}), "role"),
    ("v0.3 id missing", V03, "tasks/get", {}, "id"),
    ("v0.3 file not base64", V03, "message/send", v03_message("user", NOT_BASE64), "base64"),
]


async def test_malformed_params_get_invalid_params_and_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with (
        FakeOpenAI(default=Text("fine")) as llm,
        serve_agent(agent_config(llm.base_url)) as agent,
        httpx.AsyncClient(timeout=20) as http,
    ):
        answers = {}
        for case, headers, method, params, _ in MALFORMED:
            body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
            response = await http.post(f"{agent.base_url}/a2a", json=body, headers=headers)
            answers[case] = (response.status_code, response.json())
        # A well-formed request on each version is served as before.
        good = {"jsonrpc": "2.0", "id": 8, "method": "SendMessage", "params": {"message": MESSAGE}}
        served = (await http.post(f"{agent.base_url}/a2a", json=good, headers=V1)).json()
    for case, _, _, _, named in MALFORMED:
        status, answer = answers[case]
        assert status == 200, (case, answer)
        assert answer["id"] == 7, (case, answer)
        error = answer["error"]
        assert error["code"] == -32602, (case, answer)
        assert named in error["message"], (case, answer)
    assert served["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", served
    loud = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert loud == [], [f"{r.name}: {r.getMessage()}" for r in loud]
