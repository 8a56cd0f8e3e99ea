"""What `pallas run` takes from its working directory: .env, the default manifests, OPENAI_BASE_URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from pallas_runtime.commands.run.env_files import load_dotenv_file, manifest_files, with_openai_base_url
from pallas_runtime.commands.run.manifests import ManifestError, load_manifests, plan_local
from tests.unit.agent.test_manifests import DEPLOYMENT, agent, write


def test_dotenv_adds_only_what_the_environment_lacks(tmp_path: Path) -> None:
    dotenv = tmp_path / ".env"
    dotenv.write_text('# keys\nOPENAI_API_KEY=sk-file\nexport OPENAI_BASE_URL="http://llm:8080/v1"\nBARE\n')
    environ = {"OPENAI_API_KEY": "sk-shell"}
    assert load_dotenv_file(dotenv, environ) == ["OPENAI_BASE_URL"]
    assert environ == {"OPENAI_API_KEY": "sk-shell", "OPENAI_BASE_URL": "http://llm:8080/v1"}
    assert load_dotenv_file(tmp_path / "missing", environ) == []


def test_manifests_from_flags_else_the_variable_else_agents_yaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert manifest_files(["a.yaml"], {"PALLAS_AGENTS_CONFIG": "b.yaml"}) == ["a.yaml"]
    assert manifest_files(None, {"PALLAS_AGENTS_CONFIG": "b.yaml"}) == ["b.yaml"]
    with pytest.raises(ManifestError, match=r"pass -f FILE or set \$PALLAS_AGENTS_CONFIG"):
        manifest_files(None, {})
    (tmp_path / "agents.yaml").write_text("")
    assert manifest_files(None, {}) == ["agents.yaml"]


def test_openai_base_url_fills_only_openai_providers_without_one(tmp_path: Path) -> None:
    deployment = {
        **DEPLOYMENT,
        "spec": {
            "model": {"default": "p.m"},
            "providers": {
                "p": {"type": "openai"},
                "set": {"type": "openai", "baseURL": "http://vllm:8000/v1"},
                "claude": {"type": "anthropic"},
            },
        },
    }
    path = write(tmp_path, deployment, agent("a"), agent("b", model="set.m"), agent("c", model="claude.m"))
    plan = plan_local(load_manifests([path]), 25000, environ={})
    assert with_openai_base_url(plan, {}) is plan
    filled = with_openai_base_url(plan, {"OPENAI_BASE_URL": "http://127.0.0.1:8080/v1"})
    urls = {a.manifest.name: a.rendered.config.provider.base_url for a in filled.agents}
    assert urls == {"a": "http://127.0.0.1:8080/v1", "b": "http://vllm:8000/v1", "c": None}
    assert filled.openai_base_url == "http://127.0.0.1:8080/v1"  # for the registry's provider checks
    with pytest.raises(ManifestError, match=r"\$OPENAI_BASE_URL: "):
        with_openai_base_url(plan, {"OPENAI_BASE_URL": "llm:8080"})
