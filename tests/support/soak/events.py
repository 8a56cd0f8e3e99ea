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
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

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
    nodes: int = 1
    """Nodes the cluster needs for it (a drain or a lost node needs a second one)."""


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
        await _hack(HACK_CLUSTER, "restart", component, within=within)
        if component == "kubelet":
            with contextlib.suppress(NotSettled):
                await world.until(
                    "the kubelet re-probing the agents' pods",
                    lambda: _reprobed_since(world, since),
                    KUBELET_REPROBE_WITHIN,
                )
        await _settled_after(world, within)

    return act


def _second_node(world: SoakWorld) -> str:
    names = [n["node_name"] for n in world.node.nodes[1:]]
    if not names:
        raise RuntimeError("this event needs a second node (hack/local/cluster up --nodes 2)")
    return names[0]


async def _agent_pods_by_node(world: SoakWorld) -> dict[str, set[str]]:
    """Which node runs each agent pod that is not being deleted (node name → pod names)."""
    found: dict[str, set[str]] = {}
    for agent in AGENTS:
        for pod in await world.pods({"pallas.dev/agent": agent}):
            if pod.metadata and pod.metadata.deletionTimestamp is None and pod.spec and pod.spec.nodeName:
                found.setdefault(pod.spec.nodeName, set()).add(str(pod.metadata.name))
    return found


async def _spread_again(world: SoakWorld, within: float) -> None:
    """A rollout restart, so the agents' replicas spread over every node again (after a drain
    or a failover left them all on one), and a wait until they settled."""
    await world.kubectl("rollout", "restart", *(f"deployment/{agent}" for agent in AGENTS))
    await _settled_after(world, within)


async def drain(world: SoakWorld, within: float) -> None:
    """`kubectl drain` of the second node (PodDisruptionBudgets respected: one agent pod at a time
    goes, and only once its successor elsewhere is Ready), then uncordon and a rollout restart
    that spreads the replicas over both nodes again."""
    node = _second_node(world)
    deadline = asyncio.get_running_loop().time() + within
    before = (await _agent_pods_by_node(world)).get(node, set())
    world.notes.append(f"drain: {len(before)} agent pod(s) on {node} before")
    try:
        await world.kubectl(
            "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", f"--timeout={int(within)}s",
            namespaced=False,
        )  # fmt: skip
    except RuntimeError:
        # A drain that cannot finish leaves the node cordoned: take it back before failing, so
        # the soak's next events run on the cluster they expect.
        await world.kubectl("uncordon", node, namespaced=False)
        raise

    async def moved() -> bool:
        return not (await _agent_pods_by_node(world)).get(node)

    # `kubectl drain` returns once every pod it evicted is gone; their successors run elsewhere.
    await world.until(f"no agent pod on {node}", moved, deadline - asyncio.get_running_loop().time())
    # Maintenance done: the node takes pods again (a cordoned node never counts as settled).
    await world.kubectl("uncordon", node, namespaced=False)
    await _settled_after(world, max(1.0, deadline - asyncio.get_running_loop().time()))
    await _spread_again(world, max(1.0, deadline - asyncio.get_running_loop().time()))


FAILOVER_WITHIN = 150.0
"""A dead node's pods replaced on the others: the node monitor's grace (30 s), the agents'
`node.kubernetes.io/unreachable` toleration (30 s by default), then a new pod's start (seconds)."""


async def crash_node(world: SoakWorld, within: float) -> None:
    """The second node killed as a power cut would (`hack/local/cluster kill-node`); its agent
    pods must be replaced on the first node, the conversations go on from PostgreSQL. Then the
    node is started again (`up`, the image imported into its new containerd)."""
    node = _second_node(world)
    deadline = asyncio.get_running_loop().time() + within
    victims = (await _agent_pods_by_node(world)).get(node, set())
    world.notes.append(f"node-crash: {len(victims)} agent pod(s) on {node}: {sorted(victims)}")
    started = time.monotonic()
    await _hack(HACK_CLUSTER, "kill-node", node, within=60)

    async def replaced() -> bool:
        by_node = await _agent_pods_by_node(world)
        for agent in AGENTS:
            dep = await world.deployment(agent)
            wanted = dep.spec.replicas if dep.spec and dep.spec.replicas is not None else 1
            ready = [
                p
                for p in await world.pods({"pallas.dev/agent": agent})
                if p.metadata and p.spec and p.spec.nodeName != node and p.metadata.deletionTimestamp is None
                and _ready(p)
            ]  # fmt: skip
            if len(ready) < wanted:
                return False
        return not by_node.get(node) or not victims

    await world.until(f"every agent's replicas Ready off {node}", replaced, FAILOVER_WITHIN)
    world.failover_seconds = time.monotonic() - started
    world.notes.append(f"node-crash: replicas Ready off {node} {world.failover_seconds:.1f}s after the kill")
    await _hack(HACK_CLUSTER, "up", "--nodes", str(len(world.node.nodes)), within=300)
    await _hack(HACK_IMAGE, "load", within=600)
    # The node is back; the replicas stay where the failover put them (a rollout would be an
    # event of its own, with its own target).
    await _settled_after(world, max(1.0, deadline - asyncio.get_running_loop().time()))


def _ready(pod: Any) -> bool:
    return bool(
        pod.status and any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
    )


async def _hack(script: object, *args: str, within: float) -> str:
    res = await asyncio.to_thread(
        subprocess.run, [str(script), *args], capture_output=True, text=True, timeout=within
    )
    if res.returncode != 0:
        raise RuntimeError(f"{script} {' '.join(args)} failed: {res.stderr.strip()[-2000:]}")
    return res.stdout


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
        Event(
            "drain",
            GRACEFUL,
            "kubectl drain of the second node, uncordoned, replicas spread again",
            drain,
            nodes=2,
        ),
        Event(
            "node-crash", CRASH, "the second node killed (power cut), then started again", crash_node, nodes=2
        ),
    )
}
"""Every event, in the order the soak performs them."""
