"""Each agent imports only its own provider's SDK: the other one is seconds of start and MBs of RSS."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("modules", "absent"),
    [
        (["pallas_runtime.llm.openai_chat", "pallas_runtime.llm.openai_responses"], "anthropic"),
        (["pallas_runtime.llm.anthropic_messages"], "openai"),
    ],
    ids=["openai-agent", "anthropic-agent"],
)
def test_an_agent_imports_no_other_providers_sdk(modules: list[str], absent: str) -> None:
    code = (
        "import sys, pallas_runtime.commands.agent, pallas_runtime.server, pallas_runtime.llm.factory;"
        + "".join(f"import {m};" for m in modules)
        + f"print({absent!r} in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
