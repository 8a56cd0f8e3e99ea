"""`requireApproval`: which calls of a server's tools wait for the caller, and how the answer reads."""

from __future__ import annotations

import mcp_types
import pytest
from pydantic import ValidationError

from pallas_api.approval import ApprovalPolicy
from pallas_api.spec import McpServerSpec
from pallas_runtime.approval.question import Question, answer_of


def test_globs_name_tools_and_destructive_hint_is_honoured_unless_turned_off() -> None:
    policy = ApprovalPolicy.model_validate({"tools": ["delete_*", "drop"]})
    assert policy.reason("delete_file", destructive=False) == "requireApproval.tools delete_*"
    assert policy.reason("drop", destructive=False) == "requireApproval.tools drop"
    assert policy.reason("read", destructive=False) is None
    assert policy.reason("wipe", destructive=True) == "destructiveHint"
    off = ApprovalPolicy.model_validate({"destructiveHint": False})
    assert off.reason("wipe", destructive=True) is None
    assert ApprovalPolicy().timeout_seconds == 120.0


def test_the_spec_field_is_camel_case_and_checked() -> None:
    server = McpServerSpec.model_validate(
        {"url": "http://ops:8000/mcp", "requireApproval": {"tools": ["*"], "timeoutSeconds": 30}}
    )
    assert server.require_approval == ApprovalPolicy(tools=["*"], timeout_seconds=30)
    assert McpServerSpec.model_validate({"url": "http://ops:8000/mcp"}).require_approval is None
    with pytest.raises(ValidationError):
        McpServerSpec.model_validate({"url": "http://ops:8000/mcp", "requireApproval": {"timeoutSeconds": 0}})


@pytest.mark.parametrize(
    ("action", "content", "verdict", "reason"),
    [
        ("accept", {"approve": True}, "APPROVED", ""),
        ("accept", {"approve": True, "reason": " fine "}, "APPROVED", "fine"),
        ("accept", {"approve": False}, "REJECTED", "not approved"),
        ("accept", {"approve": False, "reason": "no"}, "REJECTED", "no"),
        ("accept", None, "REJECTED", "not approved"),
        ("decline", None, "REJECTED", "declined"),
        ("cancel", None, "REJECTED", "cancelled"),
    ],
)
def test_an_answer_reads_as_approved_only_when_accepted_with_approve_true(
    action: str, content: dict[str, object] | None, verdict: str, reason: str
) -> None:
    answer = answer_of(mcp_types.ElicitResult(action=action, content=content))  # type: ignore[arg-type]
    assert (answer.verdict, answer.reason) == (verdict, reason)


def test_the_question_digests_long_arguments_naming_each_and_meta_has_them_whole() -> None:
    arguments = {"text": "x" * 1000, "target": "PRODUCTION-DATABASE"}
    question = Question("worker", "ops", "write", arguments, "destructiveHint")
    form = question.form()
    assert form.message.startswith('Agent worker wants to call ops/write with {"text": "xxx')
    assert "…[942 characters]…" in form.message  # 1,002 with the quotes: 40 shown, then 20
    assert '"target": "PRODUCTION-DATABASE"}' in form.message
    assert "the full arguments are in _meta pallas.dev/approval.arguments) (destructiveHint)" in form.message
    assert len(form.message) < 400
    meta = (form.meta or {})["pallas.dev/approval"]
    assert meta["arguments"] == arguments
    assert meta["argumentsSha256"][:16] in form.message
    short = Question("worker", "ops", "write", {"path": "/tmp/x"}, "why")
    assert short.summary() == '{"path": "/tmp/x"}'


def test_globs_ignore_case_and_punctuation_of_tool_names() -> None:
    policy = ApprovalPolicy.model_validate({"tools": ["delete_*", "Drop-Table"]})
    for name in ("Delete-Record", "deleteRecord", "delete.record", "DELETE_RECORD"):
        assert policy.reason(name, destructive=False) == "requireApproval.tools delete_*", name
    assert policy.reason("drop_table", destructive=False) == "requireApproval.tools Drop-Table"
    assert policy.reason("deleted", destructive=False) is None
