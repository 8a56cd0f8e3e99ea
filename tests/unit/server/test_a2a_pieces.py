"""The pure pieces of the A2A surface: the card, the message's inputs, the bounded task store."""

from __future__ import annotations

import base64

import pytest
from a2a.helpers import new_task, new_text_part
from a2a.server.context import ServerCallContext
from a2a.types import Message, Part, TaskState

from pallas_api import names
from pallas_api.config import parse_config, render_config
from pallas_runtime.conversations.caller import Caller
from pallas_runtime.server.a2a.card import agent_card, skill_description
from pallas_runtime.server.a2a.executor import BadMessage, call_params, message_inputs
from pallas_runtime.server.a2a.inbound import CallerUser
from pallas_runtime.server.a2a.tasks import BoundedTaskStore


def _config(**extra: object) -> object:
    return parse_config(
        {"name": "harper", "model": "m", "provider": {"name": "p", "type": "openai"}, **extra}
    )


def test_a2a_url_sits_beside_the_mcp_one() -> None:
    assert (
        names.a2a_url("http://r.agents.svc.cluster.local:8000/mcp")
        == "http://r.agents.svc.cluster.local:8000/a2a"
    )
    assert names.a2a_url("https://agents.example.com/r/mcp/") == "https://agents.example.com/r/a2a"
    assert (
        names.agent_card_url("https://x.example/r/mcp") == "https://x.example/r/.well-known/agent-card.json"
    )


def test_the_skill_says_what_the_agent_does_without_spilling_its_instruction() -> None:
    assert skill_description(_config(description="Finds papers.")) == "Finds papers."  # type: ignore[arg-type]
    described = skill_description(_config(instruction="\nSecret first line.\nSecond."))  # type: ignore[arg-type]
    assert "Secret" not in described
    assert described.startswith("Talk to ")


def test_the_card_names_the_security_of_the_deployments_auth_mode() -> None:
    cfg = _config(
        auth={
            "mode": "kubernetes",
            "namespace": "agents",
            "resource": "http://harper.agents.svc.cluster.local:8000/mcp",
        },
    )
    card = agent_card(cfg, "http://harper.agents.svc.cluster.local:8000/a2a")  # type: ignore[arg-type]
    scheme = card.security_schemes["bearer"].http_auth_security_scheme
    assert scheme.scheme == "Bearer"
    assert list(card.security_requirements[0].schemes) == ["bearer"]
    assert card.supported_interfaces[0].url.endswith("/a2a")


def test_message_inputs_take_text_data_and_images_and_refuse_urls() -> None:
    png = b"\x89PNG\r\n\x1a\n"
    message = Message(parts=[new_text_part("look"), Part(raw=png, media_type="image/png")], message_id="m")
    text, images = message_inputs(message)
    assert text == "look"
    assert [(i.mime_type, base64.b64decode(i.data)) for i in images] == [("image/png", png)]
    with pytest.raises(BadMessage, match="part 0 is a URL"):
        message_inputs(Message(parts=[Part(url="https://example.com/x.png")], message_id="m"))
    with pytest.raises(BadMessage, match="application/pdf"):
        message_inputs(Message(parts=[Part(raw=b"%PDF", media_type="application/pdf")], message_id="m"))


def test_params_in_metadata_are_checked() -> None:
    assert call_params({}) is None
    assert call_params({"pallas.dev/params": {"temperature": 0.2}}).temperature == 0.2  # type: ignore[union-attr]
    with pytest.raises(BadMessage, match=r"pallas\.dev/params"):
        call_params({"pallas.dev/params": {"temperature": "hot"}})


async def test_the_task_store_keeps_the_newest_and_never_a_running_task() -> None:
    store = BoundedTaskStore(limit=2)
    alice = ServerCallContext(user=CallerUser(Caller("sub:alice", "alice")))
    bob = ServerCallContext(user=CallerUser(Caller("sub:bob", "bob")))
    running = new_task(task_id="t0", context_id="c", state=TaskState.TASK_STATE_WORKING)
    await store.save(running, alice)
    for index in (1, 2, 3):
        await store.save(
            new_task(task_id=f"t{index}", context_id="c", state=TaskState.TASK_STATE_COMPLETED), alice
        )
    assert await store.get("t0", alice) is not None  # running: kept over the limit
    assert await store.get("t1", alice) is None
    assert await store.get("t2", alice) is None
    assert await store.get("t3", alice) is not None
    assert await store.get("t3", bob) is None  # a caller reads its own tasks only


def test_turning_a2a_off_needs_a_new_process_and_new_tags_do_not() -> None:
    from pallas_api.live import needs_new_process

    on = _config()
    assert needs_new_process(on, _config(a2a={"enabled": False}))  # type: ignore[arg-type]
    assert not needs_new_process(on, _config(a2a={"tags": ["search"]}))  # type: ignore[arg-type]
    assert "a2a:\n  enabled: true" in render_config(on)  # type: ignore[arg-type]
