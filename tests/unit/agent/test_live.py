"""The agent's generations: what a change makes anew, what it keeps, when an old part closes."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pallas_api.config import AgentConfig, parse_config, render_config
from pallas_api.live import config_digest, config_hash, needs_new_process, process_digest
from pallas_io.secrets import SecretFiles
from pallas_runtime.agent.config_file import ConfigFile
from pallas_runtime.agent.live import LiveAgent, Part, PartsPlan, default_parts
from pallas_runtime.downstream.mcp_server import McpServerSource
from pallas_runtime.metrics import RuntimeMetrics
from tests.support.volumes import KubeletVolume

KEY = "PALLAS_PROVIDER_P_API_KEY"
HEADER = "PALLAS_SERVER_S_HEADER_0"


def config(**fields: Any) -> AgentConfig:
    return parse_config(
        {
            "name": "solo",
            "model": "m",
            "provider": {"name": "p", "type": "openai", "apiKeyEnv": KEY},
            "servers": [
                {
                    "name": "s",
                    "url": "http://127.0.0.1:9/mcp",
                    "headers": [{"name": "X", "valueFromEnv": HEADER}],
                }
            ],
            **fields,
        }
    )


@dataclass(eq=False)
class Piece:
    """A part that says what it was built from and whether it was closed."""

    made_from: Any
    closed: bool = False

    async def aclose(self) -> None:
        self.closed = True


class Pieces:
    """A parts factory keyed like the real one: the provider by model and key, the server by header."""

    def __init__(self) -> None:
        self.built: list[Piece] = []

    def _part(self, key: Any) -> Part[Any]:
        def build() -> Piece:
            piece = Piece(key)
            self.built.append(piece)
            return piece

        return Part(key, build)

    def __call__(self, cfg: AgentConfig, values: Mapping[str, str]) -> PartsPlan:
        provider = self._part(("provider", cfg.model, values.get(KEY)))
        return PartsPlan(provider, (self._part(("server", values.get(HEADER))),))


def live_agent(secrets: dict[str, str], pieces: Pieces, cfg: AgentConfig | None = None) -> LiveAgent:
    return LiveAgent(
        cfg or config(), metrics=RuntimeMetrics(process_collectors=False), secrets=secrets, parts=pieces
    )


async def test_an_instruction_edit_keeps_every_part_and_a_held_turn_keeps_its_config() -> None:
    pieces = Pieces()
    live = live_agent({KEY: "k1", HEADER: "h1"}, pieces)
    with live.hold() as turn:
        assert live.apply(config(instruction="new"))
        assert turn.config.instruction == ""  # the turn in flight runs on what it started with
        assert live.config.instruction == "new"
        assert live.generation.provider is turn.provider
        assert live.generation.sources == turn.sources
    assert len(pieces.built) == 2
    await asyncio.sleep(0)
    assert not any(p.closed for p in pieces.built)


async def test_a_rotated_key_makes_a_provider_for_new_turns_and_closes_the_old_when_its_turn_ends() -> None:
    pieces = Pieces()
    secrets = {KEY: "k1", HEADER: "h1"}
    live = live_agent(secrets, pieces)
    with live.hold() as first:
        secrets[KEY] = "k2"
        with live.hold() as second:
            assert second.provider is not first.provider
            assert second.sources == first.sources  # the server's header did not change
            assert second.secrets[KEY] == "k2"
        await asyncio.sleep(0)
        assert not first.provider.closed  # type: ignore[attr-defined]
    await asyncio.sleep(0)  # the closing runs as a task
    assert first.provider.closed  # type: ignore[attr-defined]
    assert not live.generation.provider.closed  # type: ignore[attr-defined]
    await live.aclose()
    assert all(p.closed for p in pieces.built)


async def test_what_needs_a_new_process_is_refused_whole_and_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pieces = Pieces()
    live = live_agent({KEY: "k"}, pieces)
    before = live.generation
    for _ in range(2):
        assert not live.apply(config(instruction="x", history={"maxMessages": 3}))
    assert live.generation is before
    assert sum("needs a new process" in r.getMessage() for r in caplog.records) == 1
    assert live.apply(config(title="Solo", auth={"access": {"subjects": ["alice"]}}))


def test_the_process_part_is_what_the_pod_template_hashes() -> None:
    base = config()
    live_edits = [
        config(instruction="other"),
        config(model="n", requestParams={"temperature": 0.2}, maxIterations=2),
        config(tools={"deny": ["s__*"]}, title="T", description="D", busyAt=3),
        config(auth={"access": {"groups": ["g"]}}),
    ]
    for edited in live_edits:
        assert not needs_new_process(base, edited)
        assert process_digest(edited) == process_digest(base)
        assert config_hash(edited) != config_hash(base)
    for restart in (config(version="2"), config(history={"maxMessages": 9}), config(http={"maxHeaders": 50})):
        assert needs_new_process(base, restart)
        assert process_digest(restart) != process_digest(base)


async def test_missing_secrets_are_named_in_the_users_words() -> None:
    cfg = config(
        provider={"name": "p", "type": "openai", "apiKeyEnv": KEY, "apiKeySource": "Secret llm key K"}
    )
    live = live_agent({}, Pieces(), cfg)
    assert live.generation.missing_secrets == ["Secret llm key K", f"environment variable {HEADER}"]


async def test_real_parts_share_a_server_source_until_its_header_value_changes() -> None:
    secrets = {KEY: "k1", HEADER: "h1"}
    live = LiveAgent(config(), metrics=RuntimeMetrics(process_collectors=False), secrets=secrets)
    first = live.generation
    secrets[KEY] = "k2"
    second = live.refresh()
    assert second.provider is not first.provider
    assert second.sources == first.sources
    secrets[HEADER] = "h2"
    third = live.refresh()
    assert third.sources[0] is not second.sources[0]
    assert isinstance(third.sources[0], McpServerSource)
    assert default_parts(config(), secrets).provider.key != default_parts(config(), {KEY: "k1"}).provider.key
    await live.aclose()


def test_secret_files_read_the_kubelets_volume_at_each_look_up(tmp_path: Path) -> None:
    volume = KubeletVolume(tmp_path / "secrets", {KEY: "k1", "OTHER": b"\xff"})
    seen: list[str] = []
    files = SecretFiles(volume.folder, on_read=seen.append)
    assert files[KEY] == "k1"
    assert sorted(files) == ["OTHER", KEY]  # the kubelet's `..data` and versions are not secrets
    assert files["OTHER"] == "\udcff"  # as the environment decodes bytes
    volume.write({KEY: "k2"})
    assert files.get(KEY) == "k2"
    assert "OTHER" not in files
    for name in ("..data", "../etc/passwd", "", "a/b"):
        assert name not in files
    assert SecretFiles(tmp_path / "absent").get(KEY) is None
    assert {"k1", "k2"} <= set(seen)  # what the log redaction is told


def test_the_config_file_is_read_again_only_when_the_kubelet_swapped_it(tmp_path: Path) -> None:
    first, second = render_config(config()), render_config(config(instruction="new"))
    volume = KubeletVolume(tmp_path / "config", {"agent.yaml": first})
    source = ConfigFile(volume.folder / "agent.yaml")
    loaded, digest = source.load()
    assert (loaded, digest) == (config(), config_digest(first))
    assert source.changed() is None
    volume.write({"agent.yaml": first})  # a new version with the same text: nothing to apply
    assert source.changed() is None
    volume.write({"agent.yaml": second})
    changed = source.changed()
    assert changed is not None
    assert (changed[0].instruction, changed[1]) == ("new", config_digest(second))
    assert source.changed() is None


def test_a_config_that_does_not_parse_is_refused_with_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    volume = KubeletVolume(tmp_path / "config", {"agent.yaml": render_config(config())})
    source = ConfigFile(volume.folder / "agent.yaml")
    source.load()
    volume.write({"agent.yaml": "name: solo\nmodel: m\n"})  # no provider
    assert source.changed() is None
    assert source.changed() is None
    assert [r.levelname for r in caplog.records] == ["ERROR"]
    assert "is not applied" in caplog.records[0].getMessage()


async def test_config_reloads_are_counted_by_outcome(tmp_path: Path) -> None:
    """`pallas_config_reloads_total{outcome}`: applied, refused (needs a new process), invalid."""
    volume = KubeletVolume(tmp_path / "config", {"agent.yaml": render_config(config())})
    source = ConfigFile(volume.folder / "agent.yaml")
    first, digest = source.load()
    metrics = RuntimeMetrics(process_collectors=False)
    secrets = {KEY: "k1", HEADER: "h1"}
    live = LiveAgent(
        first, metrics=metrics, secrets=secrets, parts=Pieces(), config_hash=digest, source=source
    )

    def count(outcome: str) -> float | None:
        return metrics.registry.get_sample_value(
            "pallas_config_reloads_total", {"agent": first.name, "outcome": outcome}
        )

    volume.write({"agent.yaml": render_config(config(instruction="new"))})
    live.refresh()
    volume.write({"agent.yaml": render_config(config(instruction="new", version="2.0.0"))})
    live.refresh()
    live.refresh()  # the same refused version: counted once
    volume.write({"agent.yaml": "name: solo\nmodel: m\n"})
    live.refresh()
    secrets[KEY] = "k2"  # a rotated secret is not a new config
    live.refresh()
    assert (count("applied"), count("refused"), count("invalid")) == (1, 1, 1)
    await live.aclose()
