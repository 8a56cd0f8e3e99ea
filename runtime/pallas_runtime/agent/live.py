"""The agent's config and secrets as they are now, and what is built from them, swapped between turns.

A `Generation` is one version of the agent: its config, the secret values it needs, the LLM
provider, the tool sources and the loop built from them. `LiveAgent` keeps the current one and
makes a new one when the config or a secret value changes; a turn holds the generation it
started with (`hold`) to its end, so a turn in flight finishes on the old config and the old
clients while new turns take the new ones (seed 003: "in-flight operations complete with old
config").

Changes are found where they are used, not by a watcher: every `hold` (each `send_message`, each
`get_health`) first asks the config source whether its file changed (one `stat`) and reads the
secrets the config names (a few small files, `pallas_io.secrets`). `pallas run --reload` hands
a new config and environment over with `apply`.

Parts are shared between generations while their inputs are equal: a new instruction keeps the
provider's connections and every downstream session and tool cache; a rotated key makes a new
provider, a rotated header a new session of that one server. A part leaves when no generation
holds it any more: the current one, or an old one a turn still runs on; it is closed then.

What a new process must take (`pallas_api.live.process_settings`) is not applied: the process
keeps its config, says so once, and reports the hash it serves, so the operator's status shows
the pod has not taken the edit (the operator rolls pods for such edits anyway).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from pallas_api.config import AgentConfig
from pallas_api.health import RELOAD_OUTCOMES
from pallas_api.live import config_hash, needs_new_process
from pallas_io.logs import SecretValues
from pallas_runtime.agent.latency import Latencies
from pallas_runtime.agent.loop import AgentLoop
from pallas_runtime.downstream.mcp_server import McpServerSource
from pallas_runtime.downstream.peer_agent import PeerAgentSource
from pallas_runtime.downstream.source import ToolSource
from pallas_runtime.llm.factory import deferred_provider
from pallas_runtime.llm.provider import LLMProvider
from pallas_runtime.metrics import RuntimeMetrics

log = logging.getLogger("pallas.agent")
T = TypeVar("T")


class Closable(Protocol):
    """A part that holds connections."""

    async def aclose(self) -> None:
        """Release them."""


@dataclass(frozen=True, slots=True)
class Part(Generic[T]):
    """One piece of a generation: equal keys share one object, `build` makes it."""

    key: Hashable
    build: Callable[[], T]


@dataclass(frozen=True, slots=True)
class PartsPlan:
    """The parts a config and its secret values need."""

    provider: Part[LLMProvider]
    sources: tuple[Part[ToolSource], ...]


PartsFactory = Callable[[AgentConfig, Mapping[str, str]], PartsPlan]
"""The parts of a config, given the values of the secrets it names."""


def secret_names(config: AgentConfig) -> list[str]:
    """The names of the secrets `config` reads (API key, header values), in a stable order."""
    names = [config.provider.api_key_env] if config.provider.api_key_env else []
    # Other providers' keys, for the calls that pick their models (`params.model`).
    names += [o.provider.api_key_env for o in config.models if o.provider and o.provider.api_key_env]
    names += [h.value_from_env for s in config.servers for h in s.headers if h.value_from_env]
    names += [h.value_from_env for a in config.a2a_agents for h in a.headers if h.value_from_env]
    return list(dict.fromkeys(names))


def missing_secrets(config: AgentConfig, values: Mapping[str, str]) -> list[str]:
    """Where each secret `config` names but `values` lacks comes from, in the user's words."""
    missing = []
    if config.provider.api_key_env and config.provider.api_key_env not in values:
        missing.append(config.provider.api_key_origin())
    headers = [h for s in config.servers for h in s.headers]
    headers += [h for a in config.a2a_agents for h in a.headers]
    for header in headers:
        if header.value_from_env and header.value_from_env not in values:
            missing.append(header.value_origin())
    return list(dict.fromkeys(missing))


def _provider_inputs(config: AgentConfig) -> str:
    # What an SdkProvider is built from (adapter.SdkProvider.__init__), as one comparable text.
    return config.model_dump_json(include={"provider", "model", "capabilities", "request_params"})


def default_parts(config: AgentConfig, values: Mapping[str, str]) -> PartsPlan:
    """The real parts: the provider adapter and one source per server, peer agent and A2A agent."""
    key = values.get(config.provider.api_key_env or "")
    provider: Part[LLMProvider] = Part(
        ("provider", _provider_inputs(config), key), functools.partial(deferred_provider, config, values)
    )
    timeout = config.health.probe_timeout_seconds
    sources: list[Part[ToolSource]] = []
    for server in config.servers:
        headers = tuple(values.get(h.value_from_env or "") for h in server.headers)
        build = functools.partial(McpServerSource, server, probe_timeout=timeout, environ=values)
        sources.append(Part(("server", server.model_dump_json(), timeout, headers), build))
    for peer in config.agents:
        build_peer = functools.partial(PeerAgentSource, peer, probe_timeout=timeout)
        sources.append(Part(("peer", peer.model_dump_json(), timeout), build_peer))
    if config.a2a_agents:  # the a2a-sdk's client is imported only by an agent that calls one
        from pallas_runtime.downstream.a2a_peer import A2APeerSource
    for external in config.a2a_agents:
        headers = tuple(values.get(h.value_from_env or "") for h in external.headers)
        build_a2a = functools.partial(A2APeerSource, external, probe_timeout=timeout, environ=values)
        sources.append(Part(("a2a", external.model_dump_json(), timeout, headers), build_a2a))
    return PartsPlan(provider, tuple(sources))


def _given(value: T) -> Part[T]:
    """A part that is `value` whatever the config: one object, one key."""

    def build() -> T:
        return value

    return Part(("given", id(value)), build)


def given_parts(provider: LLMProvider | None, sources: Sequence[ToolSource] | None) -> PartsFactory:
    """Parts made by `default_parts` except those given, which stay whatever the config says.

    How tests and benchmarks put fakes in place (`build_server(provider=…, sources=…)`).
    """

    def parts(config: AgentConfig, values: Mapping[str, str]) -> PartsPlan:
        plan = default_parts(config, values)
        if provider is not None:
            plan = PartsPlan(_given(provider), plan.sources)
        if sources is not None:
            plan = PartsPlan(plan.provider, tuple(_given(s) for s in sources))
        return plan

    return parts


@dataclass(eq=False)
class Generation:
    """One version of the agent: what a turn runs with from its start to its end."""

    config: AgentConfig
    config_hash: str
    """sha256 of the config's text (`pallas_api.live.config_digest`), reported by get_health."""
    secrets: Mapping[str, str]
    """The values of the secrets the config names, as read when the generation was made."""
    provider: LLMProvider
    sources: tuple[ToolSource, ...]
    loop: AgentLoop
    keys: tuple[Hashable, ...] = ()
    users: int = 0
    retired: bool = False

    @property
    def missing_secrets(self) -> list[str]:
        """The secrets the config names that have no value, in the user's words."""
        return missing_secrets(self.config, self.secrets)


class ConfigSource(Protocol):
    """Where a newer config may come from (the pod's ConfigMap file)."""

    rejected: int
    """How many new versions were not valid (not returned; `pallas_config_reloads_total`)."""

    def changed(self) -> tuple[AgentConfig, str] | None:
        """A config that differs from the last one returned, and its hash; None when none."""


@dataclass
class _Held:
    value: Any
    refs: int = 0


@dataclass
class _Parts:
    """The parts alive now, by key, with how many generations hold each."""

    held: dict[Hashable, _Held] = field(default_factory=dict)

    def take(self, part: Part[T]) -> T:
        entry = self.held.get(part.key)
        if entry is None:
            entry = self.held[part.key] = _Held(part.build())
        entry.refs += 1
        value: T = entry.value
        return value

    def release(self, key: Hashable) -> Any | None:
        """Drop one hold; the part when nobody holds it any more (to be closed)."""
        entry = self.held[key]
        entry.refs -= 1
        if entry.refs:
            return None
        del self.held[key]
        return entry.value


Listener = Callable[[Generation, Generation], None]
"""Called with (old, new) when a new generation becomes current."""


class LiveAgent:
    """The current generation of one agent, swapped between turns."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        metrics: RuntimeMetrics,
        secrets: Mapping[str, str],
        parts: PartsFactory = default_parts,
        config_hash: str | None = None,
        source: ConfigSource | None = None,
        on_secrets: Callable[[Iterable[str]], None] | None = None,
    ) -> None:
        """Build the first generation (no I/O: parts connect on first use).

        Args:
            config: The agent's config at start.
            metrics: Where the loop's series go.
            secrets: Where the secret values are looked up now and at every turn.
            parts: How the provider and sources are made from a config.
            config_hash: The hash of the config's text as read; computed from `config` if None.
            source: Where a newer config may come from; None: only `apply` changes it.
            on_secrets: Told every secret value seen (at start and when one changes), e.g. the
                log redactor's `add`.
        """
        self._metrics = metrics
        self._secrets = secrets
        self._make_parts = parts
        self._source = source
        self._on_secrets = on_secrets
        self._parts = _Parts()
        self._known: set[str] = set()
        self._listeners: list[Listener] = []
        self._closing: set[asyncio.Task[None]] = set()
        self._unclosed: list[Any] = []
        self._refused: str | None = None
        self.reloads: dict[str, int] = dict.fromkeys(RELOAD_OUTCOMES, 0)
        """New config versions seen while serving, by outcome (`pallas_config_reloads_total`)."""
        self.latencies = Latencies()
        """How long the LLM and each downstream part took lately, across generations (`get_health`)."""
        self.generation = self._build(config, config_hash or _hash(config), self._read_secrets(config))

    @property
    def config(self) -> AgentConfig:
        """The current config."""
        return self.generation.config

    def listen(self, listener: Listener) -> None:
        """Call `listener(old, new)` whenever a new generation becomes current."""
        self._listeners.append(listener)

    # changes

    def refresh(self) -> Generation:
        """The current generation, after taking a changed config file or secret value."""
        changed = None
        if self._source is not None:
            rejected = self._source.rejected
            changed = self._source.changed()
            if self._source.rejected > rejected:
                self._reloaded("invalid")
        if changed is not None and self._take(*changed, secrets=None):
            return self.generation
        config = self.generation.config
        values = self._read_secrets(config)
        if values != self.generation.secrets:
            self._swap(self._build(config, self.generation.config_hash, values))
        return self.generation

    def apply(
        self, config: AgentConfig, *, secrets: Mapping[str, str] | None = None, config_hash: str | None = None
    ) -> bool:
        """Make `config` (and `secrets`, if given) current for the next turns.

        Returns:
            False, with nothing changed, when the edit needs a new process.
        """
        return self._take(config, config_hash or _hash(config), secrets=secrets)

    def _take(self, config: AgentConfig, digest: str, *, secrets: Mapping[str, str] | None) -> bool:
        current = self.generation
        if needs_new_process(current.config, config):
            if self._refused != digest:
                self._refused = digest
                self._reloaded("refused")
                log.warning(
                    "agent %s: the new config (%s) changes what needs a new process (name, version, "
                    "conversations, history, sessions, http, auth other than access, or a2a.enabled); "
                    "serving %s until restarted",
                    current.config.name, digest[:12], current.config_hash[:12],
                )  # fmt: skip
            return False
        self._refused = None
        if secrets is not None:
            self._secrets = secrets
        values = self._read_secrets(config)
        if digest != current.config_hash or values != current.secrets:
            self._swap(self._build(config, digest, values))
            log.info("agent %s: serving config %s", config.name, digest[:12])
            if digest != current.config_hash:  # a new config, not only a rotated secret
                self._reloaded("applied")
        return True

    def _reloaded(self, outcome: str) -> None:
        """Count a new config version seen while serving (`pallas_config_reloads_total`)."""
        self.reloads[outcome] += 1
        self._metrics.config_reloads_total.labels(self.generation.config.name, outcome).inc()

    def _read_secrets(self, config: AgentConfig) -> dict[str, str]:
        values = {name: value for name in secret_names(config) if (value := self._secrets.get(name))}
        new = set(values.values()) - self._known
        if new:
            self._known |= new
            if self._on_secrets is not None:
                self._on_secrets(new)
        return values

    def _build(self, config: AgentConfig, digest: str, values: dict[str, str]) -> Generation:
        plan = self._make_parts(config, values)
        provider = self._parts.take(plan.provider)
        sources = tuple(self._parts.take(part) for part in plan.sources)
        # Tool results are scrubbed of every value this process has known: a server may echo a
        # key that was rotated away a moment ago.
        loop = AgentLoop(config, provider, sources, self._metrics, SecretValues(self._known), self.latencies)
        keys = (plan.provider.key, *(part.key for part in plan.sources))
        return Generation(config, digest, values, provider, sources, loop, keys)

    def _swap(self, new: Generation) -> None:
        old, self.generation = self.generation, new
        old.retired = True
        if old.users == 0:
            self._release(old)
        for listener in self._listeners:
            listener(old, new)

    # turns

    @contextlib.contextmanager
    def hold(self) -> Iterator[Generation]:
        """The current generation (refreshed first), kept whole until the block ends."""
        generation = self.refresh()
        generation.users += 1
        try:
            yield generation
        finally:
            generation.users -= 1
            if generation.retired and generation.users == 0:
                self._release(generation)

    def _release(self, generation: Generation) -> None:
        for key in generation.keys:
            part = self._parts.release(key)
            if part is None:
                continue
            try:
                task = asyncio.get_running_loop().create_task(_close(part))
            except RuntimeError:  # applied outside the event loop (a test): closed by aclose
                self._unclosed.append(part)
                continue
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        """Close every part still alive and wait for the closings under way."""
        parts = [entry.value for entry in self._parts.held.values()] + self._unclosed
        self._parts.held.clear()
        self._unclosed.clear()
        await asyncio.gather(*(_close(p) for p in parts), *self._closing, return_exceptions=True)


def _hash(config: AgentConfig) -> str:
    return config_hash(config)


async def _close(part: Closable) -> None:
    try:
        await part.aclose()
    except Exception:  # a part that fails to close must not take the agent with it
        log.debug("closing a retired part failed", exc_info=True)
