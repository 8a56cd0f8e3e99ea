"""Day-2 soak on the local node: what callers see while the cluster changes; prints figures.

    flock /work/node.lock .venv/bin/python bench/soak.py [--clients 8] [--rate 1] [--llm-latency 2]
        [--turns 4] [--warmup 20] [--settle 20] [--events edit,rotate,...] [--max-sends 5000]
        [--event-timeout 240] [--nodes 1] [--replicas 1] [--json FILE] [--keep-cluster]

Needs root (the node). Starts the local cluster with its node if none runs (and stops it at the
end; `--keep-cluster` leaves it), builds and loads the project's image (`hack/build/image load`),
installs the CRDs, then (tests/support/soak): a fake LLM, an OIDC issuer and PostgreSQL on the
node's bridge address, a namespace with the operator (`helm install`), a PallasDeployment
(OIDC callers, conversations in PostgreSQL) and two agents, `orchestrator` delegating to
`researcher`. N callers, each an OIDC subject of its own, hold conversations with the
orchestrator at `--rate` messages per second in all (every other caller's turns delegate), while
these events happen one after another, each followed by `--settle` seconds of steady traffic:

  edit        kubectl patch of the orchestrator's instruction
  rotate      the provider key rotated in its Secret
  rollout     kubectl rollout restart of both agents
  upgrade     helm upgrade to an image of a changed tree (hack/build/image variant)
  operator    the operator's pod killed (grace 0)
  pod-delete  the orchestrator's pod deleted with grace 0
  scale       the orchestrator scaled 1 -> 3 -> 1
  postgres    PostgreSQL stopped (immediate) and started 5 s later
  containerd  the node's containerd restarted (hack/local/cluster restart containerd)
  kubelet     the node's kubelet restarted
  drain       kubectl drain of the second node, uncordon, replicas spread again   (--nodes 2)
  node-crash  the second node killed as a power cut would (hack/local/cluster kill-node), its
              pods replaced on the first node; then started again                 (--nodes 2)

The default is every event the cluster's nodes allow. For the two-node events give both agents
two replicas (`--replicas 2`): the operator spreads them over the nodes.

Per event: sends attempted and failed (by code), acknowledged turns missing from the history,
context losses (a model not sent an earlier turn), cross-caller leaks, P50/P99 latency before
and during, recovery time, time to settle, and whether issue 26's target for its kind was met.
Bounded: at most --max-sends messages, each event at most --event-timeout seconds.
Not a timed test; docs/operations.md has the figures measured here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "hack" / "local")]

from tests.support.cluster import HACK_CLUSTER, LocalCluster  # noqa: E402
from tests.support.e2e import local_node  # noqa: E402
from tests.support.operator import install_crds  # noqa: E402
from tests.support.soak.events import EVENTS  # noqa: E402
from tests.support.soak.run import Plan, run_soak  # noqa: E402
from tests.support.soak.world import soak_world  # noqa: E402


def hack_cluster(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HACK_CLUSTER), *args], capture_output=True, text=True, timeout=900, check=False
    )


def event_list(raw: str) -> list[str]:
    names = [n.strip() for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in EVENTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown event(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(EVENTS)}"
        )
    return names


async def soak(cluster: LocalCluster, args: argparse.Namespace, plan: Plan) -> int:
    node = await asyncio.to_thread(local_node)
    install_crds(cluster, *sorted((REPO / "crds").glob("*.yaml")))
    events = [EVENTS[name] for name in args.events]
    async with soak_world(cluster, node, llm_latency=plan.llm_latency, replicas=args.replicas) as world:
        result = await run_soak(world, plan, events)
        notes = world.notes
    total = result.total
    print(
        f"\n{plan.clients} callers, {plan.rate:g} messages/s, model calls {plan.llm_latency:g} s, "
        f"{plan.turns} turns per conversation, settle {plan.settle:g} s; "
        f"{total.sends} sends in {result.elapsed:.0f} s, {result.sessions_opened} MCP sessions opened\n"
    )
    print(result.table())
    for note in [*result.notes, *notes]:
        print(f"- {note}")
    if args.json is not None:
        args.json.write_text(json.dumps(result.raw(), indent=1) + "\n")
        print(f"every send, window and loss: {args.json}")
    missed = [r.event for r in result.rows[1:-1] if not r.meets_target]
    print(f"\ntargets met by {len(result.rows) - 2 - len(missed)} of {len(result.rows) - 2} events" +
          (f"; missed: {', '.join(missed)}" if missed else ""))  # fmt: skip
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8, help="callers, each an identity of its own")
    parser.add_argument("--rate", type=float, default=1.0, help="messages per second, all callers together")
    parser.add_argument("--llm-latency", type=float, default=2.0, help="seconds per model call")
    parser.add_argument("--turns", type=int, default=4, help="messages per conversation")
    parser.add_argument(
        "--settle", type=float, default=20.0, help="seconds of traffic after each event settled"
    )
    parser.add_argument(
        "--warmup", type=float, default=20.0, help="seconds of traffic before the first event"
    )
    parser.add_argument(
        "--events", type=event_list, help="a comma-separated subset, in order (default: all the nodes allow)"
    )
    parser.add_argument(
        "--nodes", type=int, default=1, help="nodes of the cluster (hack/local/cluster --nodes)"
    )
    parser.add_argument("--replicas", type=int, default=1, help="replicas of each agent")
    parser.add_argument(
        "--max-sends", type=int, default=5000, help="stop the traffic after this many messages"
    )
    parser.add_argument(
        "--event-timeout", type=float, default=240.0, help="seconds an event may take to settle"
    )
    parser.add_argument("--json", type=Path, help="also write every send, window and loss to this file")
    parser.add_argument(
        "--keep-cluster", action="store_true", help="leave a cluster this run started running"
    )
    args = parser.parse_args()
    # A caller closing a session whose pod is gone is told 404; expected here, and not a figure.
    logging.getLogger("mcp.client.streamable_http").setLevel(logging.ERROR)
    plan = Plan(
        clients=args.clients,
        rate=args.rate,
        llm_latency=args.llm_latency,
        turns=args.turns,
        settle=args.settle,
        warmup=args.warmup,
        event_timeout=args.event_timeout,
        max_sends=args.max_sends,
    )
    try:
        plan.check()
    except ValueError as exc:
        parser.error(str(exc))
    if args.events is None:
        args.events = [name for name, event in EVENTS.items() if event.nodes <= args.nodes]
    wanting = [name for name in args.events if EVENTS[name].nodes > args.nodes]
    if wanting:
        parser.error(f"{', '.join(wanting)} need(s) --nodes 2 or more")
    if args.replicas < 1:
        parser.error("--replicas must be at least 1")
    was_running = hack_cluster("status").returncode == 0
    t0 = time.monotonic()
    up = hack_cluster("up", "--nodes", str(args.nodes))
    if up.returncode != 0:
        sys.exit(f"hack/local/cluster up failed: {up.stderr.strip()}")
    try:
        env = json.loads(hack_cluster("env", "--json").stdout)
        if not env.get("node"):
            sys.exit("the soak needs the local node: a cluster without one runs (PALLAS_NODE=0?)")
        cluster = LocalCluster(Path(env["kubeconfig"]), str(Path(env["bin_dir"]) / "kubectl"))
        print(f"soak: cluster up in {time.monotonic() - t0:.0f}s", file=sys.stderr)
        return asyncio.run(soak(cluster, args, plan))
    finally:
        if not was_running and not args.keep_cluster:
            hack_cluster("down")


if __name__ == "__main__":
    sys.exit(main())
