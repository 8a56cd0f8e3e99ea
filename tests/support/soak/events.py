"""The changes and crashes of the soak, each done the way an operator of a real fleet does it.

An event acts, then waits until its change has taken effect (as the fake LLM or the cluster
shows it, so the same event works whether the product rolls pods or applies a change in place)
and the cluster has settled (`SoakWorld.settled`). Graceful events are the ones a platform team
makes every day; crashes are what happens to them anyway. The targets of issue 26: graceful
events lose nothing and fail nothing; crashes lose no acknowledged turn, leak nothing, fail
sends only with retryable codes and recover within 30 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import secrets
import subprocess
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tests.support.cluster import HACK_CLUSTER, REPO
from tests.support.e2e import install_operator
from tests.support.soak.script import ORCHESTRATOR, instruction
from tests.support.soak.world import AGENTS, LLM_SECRET, OPERATOR_LABELS, NotSettled, SoakWorld

HACK_IMAGE = REPO / "hack" / "build" / "image"
GRACEFUL, CRASH = "graceful", "crash"
SCALED_AGENT = ORCHESTRATOR
"""Scaled 1→3→1 and deleted with grace 0: the agent the clients hold sessions with."""


@dataclass(frozen=True)
class Event:
    name: str
    kind: str
    """`graceful` or `crash`."""
    what: str
    act: Callable[[SoakWorld, float], Awaitable[None]]
    """Make the change and wait (at most the given seconds) until it took effect and settled."""
    prepare: Callable[[SoakWorld], Awaitable[None]] | None = None
    """Work done before the traffic starts (building an image), so the event itself is quick."""


def _merge_patch(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


async def _settled_after(world: SoakWorld, within: float, *changes: tuple[str, Callable[[], object]]) -> None:
    """Wait for each change to show, then for the cluster to settle, all within `within`."""
    deadline = asyncio.get_running_loop().time() + within
    for what, probe in changes:
        await world.until(what, probe, deadline - asyncio.get_running_loop().time())
    await world.until_settled(max(1.0, deadline - asyncio.get_running_loop().time()))


async def edit(world: SoakWorld, within: float) -> None:
    """`kubectl patch` of the orchestrator's instruction (a new revision)."""
    revision = world.revisions[ORCHESTRATOR] + 1
    patch = {"spec": {"instruction": instruction(ORCHESTRATOR, revision)}}
    await world.kubectl("patch", "pallasagent", ORCHESTRATOR, "--type=merge", "-p", _merge_patch(patch))
    world.revisions[ORCHESTRATOR] = revision
    await _settled_after(
        world,
        within,
        (
            f"the orchestrator's model requests carrying revision {revision}",
            lambda: world.sightings.uses_revision(ORCHESTRATOR, revision),
        ),
    )


async def rotate(world: SoakWorld, within: float) -> None:
    """A new provider key in the Secret, as a rotation job writes it."""
    key = f"sk-soak-{secrets.token_hex(4)}"
    patch = {"stringData": {"OPENAI_API_KEY": key}}
    await world.kubectl("patch", "secret", LLM_SECRET, "--type=merge", "-p", _merge_patch(patch))
    world.key = key
    await _settled_after(
        world,
        within,
        *(
            (
                f"the {role}'s model requests carrying the new key",
                lambda r=role: world.sightings.uses_key(r, key),
            )
            for role in AGENTS
        ),
    )


async def rollout(world: SoakWorld, within: float) -> None:
    """`kubectl rollout restart` of both agents' Deployments."""
    await world.kubectl("rollout", "restart", *(f"deployment/{agent}" for agent in AGENTS))
    await _settled_after(world, within)


async def prepare_upgrade(world: SoakWorld) -> None:
    suffix = f"soak-{secrets.token_hex(3)}"
    proc = await asyncio.create_subprocess_exec(
        str(HACK_IMAGE), "variant", suffix, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 1800)
    if proc.returncode != 0:
        raise RuntimeError(f"hack/build/image variant failed: {err.decode()[-2000:]}")
    world.upgrade_image = out.decode().strip()


async def upgrade(world: SoakWorld, within: float) -> None:
    """`helm upgrade` of the operator to an image of a changed tree: every pod moves to it."""
    image = world.upgrade_image
    if not image:
        raise RuntimeError("the upgrade's image was not prepared")
    await asyncio.to_thread(install_operator, world.cluster, world.namespace, image)
    world.image = image

    async def agents_on_new_image() -> bool:
        for agent in AGENTS:
            dep = await world.deployment(agent)
            pod = dep.spec.template.spec if dep.spec else None
            if pod is None or pod.containers[0].image != image:
                return False
        return True

    await _settled_after(world, within, (f"the agents' Deployments on {image}", agents_on_new_image))


async def kill_operator(world: SoakWorld, within: float) -> None:
    """The operator's pod deleted with grace 0 (its process killed); the ReplicaSet replaces it."""
    old = await world.pod_uids(OPERATOR_LABELS)
    await world.kubectl(
        "delete",
        "pod",
        "-l",
        "app.kubernetes.io/component=operator",
        "--grace-period=0",
        "--force",
        "--wait=false",
    )

    async def replaced() -> bool:
        return bool(await world.pod_uids(OPERATOR_LABELS) - old)

    await _settled_after(world, within, ("a new operator pod", replaced))


async def delete_agent_pod(world: SoakWorld, within: float) -> None:
    """The orchestrator's pod deleted with grace 0: its process killed, its sessions gone."""
    labels = {"pallas.dev/agent": SCALED_AGENT}
    old = await world.pod_uids(labels)
    await world.kubectl(
        "delete",
        "pod",
        "-l",
        f"pallas.dev/agent={SCALED_AGENT}",
        "--grace-period=0",
        "--force",
        "--wait=false",
    )

    async def replaced() -> bool:
        return bool(await world.pod_uids(labels) - old)

    await _settled_after(world, within, ("a new orchestrator pod", replaced))


async def scale(world: SoakWorld, within: float) -> None:
    """The orchestrator scaled 1 → 3 (each Ready), then back to 1."""
    deadline = asyncio.get_running_loop().time() + within
    for replicas in (3, 1):
        patch = {"spec": {"replicas": replicas}}
        await world.kubectl("patch", "pallasagent", SCALED_AGENT, "--type=merge", "-p", _merge_patch(patch))

        async def scaled(n: int = replicas) -> bool:
            dep = await world.deployment(SCALED_AGENT)
            return dep.spec.replicas == n

        await _settled_after(
            world,
            deadline - asyncio.get_running_loop().time(),
            (f"the orchestrator's Deployment at {replicas} replicas", scaled),
        )


POSTGRES_DOWN = 5.0
"""Seconds PostgreSQL stays down: a restarted database server takes seconds to accept again
(crash recovery), and an outage that short still meets every turn in flight at this rate."""


async def restart_postgres(world: SoakWorld, within: float) -> None:
    """PostgreSQL stopped at once (`pg_ctl -m immediate`, a crash), started again 5 s later."""
    await asyncio.to_thread(world.postgres.stop)
    await asyncio.sleep(POSTGRES_DOWN)
    await asyncio.to_thread(world.postgres.start)
    await _settled_after(world, within)


KUBELET_REPROBE_WITHIN = 30.0
"""How long a restarted kubelet may take to report the pods it found running. It starts with no
probe results, so it marks every container unready until its readiness probe passes again
(measured: 2-3 s after the restart); the Services drop the pods' endpoints meanwhile. A kubelet
that kept readiness across a restart would never flip them: then this is only waited out."""


async def _reprobed_since(world: SoakWorld, since: datetime.datetime) -> bool:
    """Every agent pod's readiness changed after `since`, and is true again."""
    for agent in AGENTS:
        for pod in await world.pods({"pallas.dev/agent": agent}):
            ready = (
                next((c for c in (pod.status.conditions or []) if c.type == "Ready"), None)
                if pod.status
                else None
            )
            if ready is None or ready.status != "True" or ready.lastTransitionTime is None:
                return False
            if ready.lastTransitionTime < since:
                return False
    return True


def _restart_node_component(component: str) -> Callable[[SoakWorld, float], Awaitable[None]]:
    async def act(world: SoakWorld, within: float) -> None:
        since = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        res = await asyncio.to_thread(
            subprocess.run,
            [str(HACK_CLUSTER), "restart", component],
            capture_output=True,
            text=True,
            timeout=within,
        )
        if res.returncode != 0:
            raise RuntimeError(f"hack/local/cluster restart {component} failed: {res.stderr.strip()}")
        if component == "kubelet":
            with contextlib.suppress(NotSettled):
                await world.until(
                    "the kubelet re-probing the agents' pods",
                    lambda: _reprobed_since(world, since),
                    KUBELET_REPROBE_WITHIN,
                )
        await _settled_after(world, within)

    return act


EVENTS: dict[str, Event] = {
    event.name: event
    for event in (
        Event("edit", GRACEFUL, "kubectl patch of the orchestrator's instruction", edit),
        Event("rotate", GRACEFUL, "the provider key rotated in its Secret", rotate),
        Event("rollout", GRACEFUL, "kubectl rollout restart of both agents", rollout),
        Event("upgrade", GRACEFUL, "helm upgrade to an image of a changed tree", upgrade, prepare_upgrade),
        Event("operator", GRACEFUL, "the operator's pod killed (grace 0)", kill_operator),
        Event("pod-delete", CRASH, "the orchestrator's pod deleted with grace 0", delete_agent_pod),
        Event("scale", GRACEFUL, "the orchestrator scaled 1 → 3 → 1", scale),
        Event("postgres", CRASH, "PostgreSQL stopped (immediate) and started 5 s later", restart_postgres),
        Event("containerd", CRASH, "the node's containerd restarted", _restart_node_component("containerd")),
        Event("kubelet", CRASH, "the node's kubelet restarted", _restart_node_component("kubelet")),
    )
}
"""Every event, in the order the soak performs them."""
