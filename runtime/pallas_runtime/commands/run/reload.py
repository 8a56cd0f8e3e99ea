"""`pallas run --reload`: apply edits of the manifests to the running agents.

The manifest files are watched (watchfiles: their folders, so an editor's write-and-rename is
seen; changes within 50 ms are taken together). An edit is checked with `pallas validate`'s checks
and planned as at start-up; a bad edit prints its problems (`FILE:LINE: Kind/name: field:
problem`) and changes nothing. A good one is applied to each agent whose rendered config or
environment changed: in place when the running process can take it (the instruction, model,
parameters, tools, servers, peers, a secret's value: `pallas_api.live`), so its turns in flight
finish on the old config and the next ones use the new; otherwise (its port, the conversation
store, sessions, HTTP limits, how callers are checked) by a restart on the port it had, peers
before the agents that call them: the new server takes over the port at once and the old one
drains beside it (`LocalRun.restart_agent`), its turns in flight finishing on the old config.
Agents added to the files start (on the next free port after the base), agents removed stop,
and the registry lists what changed in place (its fleet sessions go on and are told), restarting
only when its port or listener limits change. Conversations kept in SQLite (`pallas
run`'s default) or PostgreSQL outlive a restart.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from watchfiles import Change, awatch

from pallas_api.checks import check_documents
from pallas_api.live import needs_new_process
from pallas_io.logs import Redactor
from pallas_runtime.commands.run.env_files import with_openai_base_url
from pallas_runtime.commands.run.hosted import LocalRun, StartFailed
from pallas_runtime.commands.run.manifests import (
    AgentKey,
    BridgeKey,
    LocalPlan,
    ManifestError,
    Manifests,
    PlannedAgent,
    load_manifests,
    plan_local,
)
from pallas_runtime.commands.run.triggers import TriggerReload
from pallas_runtime.commands.validate import UnreadableError, read_documents

log = logging.getLogger("pallas.run")


class ReloadRefused(Exception):
    """An edit that cannot run; `problems` are one line each, naming file, object and field."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = list(problems)


@dataclass(frozen=True)
class Reload:
    """What `--reload` reads again: the files, and how they were planned at start-up."""

    files: Sequence[str]
    base_port: int
    only_agent: str | None
    environ: Mapping[str, str]
    """The environment the first plan was made from. The process's own `os.environ` is not used
    again: libraries write to it once they are imported (py-key-value's switch, set by the
    runtime's warm-up), and every agent would look changed by an edit that changed nothing."""


@dataclass(frozen=True)
class Changes:
    """What a new plan changes in a running one."""

    stopped: tuple[AgentKey, ...]
    """Agents gone from the manifests."""
    started: tuple[AgentKey, ...]
    """Agents new or changed so that they restart, in start order (every agent after the agents
    it calls)."""
    applied: tuple[AgentKey, ...]
    """Agents changed in what a running process takes in place."""
    unchanged: tuple[AgentKey, ...]
    registry: bool
    """Whether what the registry lists changed."""
    servers: tuple[str, ...] = ()
    """What happened to the stdio servers' bridges, in words (`restarted stdio server fs`)."""


def agent_key(agent: PlannedAgent) -> AgentKey:
    """The agent's (namespace, name)."""
    return agent.manifest.namespace, agent.manifest.name


def _runs_differently(old: PlannedAgent, new: PlannedAgent) -> bool:
    return (old.rendered.config, old.environ, old.port) != (new.rendered.config, new.environ, new.port)


def _needs_restart(old: PlannedAgent, new: PlannedAgent) -> bool:
    """Whether the running agent cannot take `new` in place (`pallas_api.live`)."""
    return (
        old.port != new.port
        or old.deployment.name != new.deployment.name
        or needs_new_process(old.rendered.config, new.rendered.config)
    )


def _listing(plan: LocalPlan) -> object:
    listed = [
        (agent_key(a), a.manifest.spec, a.deployment.name, a.deployment.spec, a.url) for a in plan.agents
    ]
    return listed, plan.registry_port


def plan_changes(old: LocalPlan, new: LocalPlan) -> Changes:
    """What moving from `old` to `new` stops, (re)starts and leaves alone."""
    before = {agent_key(a): a for a in old.agents}
    after = {agent_key(a) for a in new.agents}
    changed = [
        (key, a)
        for a in new.agents
        if (key := agent_key(a)) not in before or _runs_differently(before[key], a)
    ]
    started = [key for key, a in changed if key not in before or _needs_restart(before[key], a)]
    applied = [key for key, _ in changed if key not in started]
    return Changes(
        stopped=tuple(key for key in before if key not in after),
        started=tuple(started),
        applied=tuple(applied),
        unchanged=tuple(k for a in new.agents if (k := agent_key(a)) not in started and k not in applied),
        registry=_listing(old) != _listing(new),
    )


def checked_run(
    files: Sequence[str],
    base_port: int,
    only_agent: str | None,
    keep_ports: dict[AgentKey, int],
    keep_bridge_ports: dict[BridgeKey, int] | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[Manifests, LocalPlan]:
    """The manifests and their plan as they are now, checked as `pallas validate` checks them.

    The files are read once: the triggers are planned from both.

    Raises:
        ReloadRefused: a file cannot be read, or the manifests have problems.
    """
    try:
        report = check_documents(read_documents(files), local=True)
    except UnreadableError as exc:
        raise ReloadRefused([str(exc)]) from None
    if report.problems:
        raise ReloadRefused([str(problem) for problem in report.problems])
    try:
        manifests = load_manifests(files)
        plan = plan_local(
            manifests,
            base_port,
            only_agent,
            keep_ports=keep_ports,
            keep_bridge_ports=keep_bridge_ports,
            environ=environ,
        )
        return manifests, with_openai_base_url(plan, os.environ if environ is None else environ)
    except ManifestError as exc:
        raise ReloadRefused([str(exc)]) from None


def _names(keys: Sequence[AgentKey]) -> str:
    return ", ".join(name for _, name in keys)


async def apply(run: LocalRun, plan: LocalPlan) -> Changes:
    """Move `run` to `plan`: stop the agents removed, (re)start the new and changed, in order."""
    changes = plan_changes(run.plan, plan)
    _redact_new_secrets(run.plan, plan)
    changes = dataclasses.replace(changes, servers=await _apply_bridges(run, plan))
    for key in changes.stopped:
        await run.stop_agent(key)
    for agent in plan.agents:
        if agent_key(agent) in changes.applied and not run.apply_agent(agent):
            changes = _restarting(changes, agent_key(agent))
        if agent_key(agent) not in changes.started:
            continue
        try:
            await run.restart_agent(agent)
        except StartFailed as exc:
            print(f"pallas run: reload: {exc}", file=sys.stderr, flush=True)
    hosted = [a for a in plan.agents if agent_key(a) in run.agents]
    same_port = plan.registry_port == run.plan.registry_port
    if (
        changes.registry
        and plan.registry_port is not None
        and not (same_port and run.update_registry(hosted, plan))
    ):
        await run.stop_registry()
        try:
            await run.start_registry(hosted, plan.registry_port, plan)
        except StartFailed as exc:
            print(f"pallas run: reload: {exc}", file=sys.stderr, flush=True)
    # What runs now: an agent that failed to start is new to the next reload, which retries it.
    run.plan = dataclasses.replace(plan, agents=hosted)
    return changes


async def _apply_bridges(run: LocalRun, plan: LocalPlan) -> tuple[str, ...]:
    """Stop the stdio servers gone or changed; start the new and changed ones (before the agents).

    Returns what happened, in words, for the summary line.
    """
    wanted = {bridge.key: bridge for bridge in plan.bridges}
    before = set(run.bridges)
    changed: list[str] = []
    for key, (running, _) in list(run.bridges.items()):
        if wanted.get(key) != running:
            await run.stop_bridge(key)
            if key not in wanted:
                changed.append(f"stopped stdio server {key[2]}")
    for bridge in plan.bridges:
        if bridge.key in run.bridges:
            continue
        try:
            await run.start_bridge(bridge)
        except StartFailed as exc:
            print(f"pallas run: reload: {exc}", file=sys.stderr, flush=True)
            continue
        changed.append(f"{'restarted' if bridge.key in before else 'started'} stdio server {bridge.name}")
    if wanted:
        redactor = Redactor(v for bridge in plan.bridges for v in bridge.secrets.values() if v)
        for handler in logging.getLogger().handlers:
            handler.addFilter(redactor)
    return tuple(changed)


def _restarting(changes: Changes, key: AgentKey) -> Changes:
    """`changes` with `key` restarted after all (its process refused the edit)."""
    applied = tuple(k for k in changes.applied if k != key)
    return dataclasses.replace(changes, applied=applied, started=(*changes.started, key))


def _redact_new_secrets(old: LocalPlan, new: LocalPlan) -> None:
    """Secret values an edit brings (a new Secret manifest key) are kept out of the logs too."""
    known = {a.environ.get(b.env) for a in old.agents for b in a.rendered.secrets}
    added = {v for a in new.agents for b in a.rendered.secrets if (v := a.environ.get(b.env)) not in known}
    if added - {None}:
        redactor = Redactor(v for v in added if v)
        for handler in logging.getLogger().handlers:
            handler.addFilter(redactor)


async def reload_once(run: LocalRun, reload: Reload, triggers: TriggerReload | None = None) -> None:
    """Apply the files as they are now, or say why not; one summary line on stdout.

    With `triggers`, the PallasTriggers of the files replace the running ones too (after the
    agents, so a new trigger's first run finds its agent).
    """
    try:
        manifests, plan = checked_run(
            reload.files,
            reload.base_port,
            reload.only_agent,
            run.ports(),
            run.bridge_ports(),
            environ=reload.environ,
        )
        try:
            planned = triggers.plan(manifests, plan.agents) if triggers is not None else None
        except ManifestError as exc:
            raise ReloadRefused([str(exc)]) from None
    except ReloadRefused as exc:
        for problem in exc.problems:
            print(f"pallas run: reload: {problem}", file=sys.stderr)
        print("pallas run: reload: the edit is not applied; the agents run as before", file=sys.stderr)
        sys.stderr.flush()
        return
    for agent in plan.agents:  # applied all the same: the agent runs on the rest
        if (warning := agent.rendered.warning) is not None:
            print(
                f"pallas run: reload: warning: PallasAgent/{agent.manifest.name}: {warning.message}",
                file=sys.stderr,
            )
    before = {agent_key(a) for a in run.plan.agents}
    changes = await apply(run, plan)
    parts = [*changes.servers] + [
        f"{what} {_names(keys)}"
        for what, keys in (
            ("applied in place", changes.applied),
            ("restarted", [k for k in changes.started if k in before]),
            ("started", [k for k in changes.started if k not in before]),
            ("stopped", changes.stopped),
            ("unchanged", changes.unchanged),
        )
        if keys
    ]
    if triggers is not None and planned is not None:
        try:
            moved = await triggers.host.update(*planned)
        except OSError as exc:
            parts.append(f"triggers: {exc}")
        else:
            if summary := moved.summary():
                parts.append(summary)
    print(f"reloaded: {'; '.join(parts) or 'nothing changed'}", flush=True)


def _resolved(files: Sequence[str]) -> set[Path]:
    return {Path(f).resolve() for f in files}


async def watch(
    run: LocalRun, reload: Reload, stop: asyncio.Event, triggers: TriggerReload | None = None
) -> None:
    """Reload on every change of the files until `stop` is set (the triggers too, when given)."""
    paths = _resolved(reload.files)

    def ours(_: Change, path: str) -> bool:
        return Path(path).resolve() in paths

    folders = sorted({str(p.parent) for p in paths})
    log.info("watching %s for changes", ", ".join(map(str, sorted(paths))))
    async for _ in awatch(*folders, watch_filter=ours, stop_event=stop, step=50):
        await reload_once(run, reload, triggers)
