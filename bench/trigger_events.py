"""Event triggers in the operator: what each watch event costs, and an event's way to its run.

    .venv/bin/python bench/trigger_events.py [--events 1000]

One event trigger on Pods with the issue's `when` (a container restarted more than once), in the
operator's own event watch (`engine.event_watches`) on the in-memory cluster the unit tests use
(`tests.support.fake_cluster`): `--events` MODIFIED events of healthy Pods go through the matcher
(namespace, labels, type, then the CEL `when`, false), then one crash-looping Pod's event goes
on to the run engine. Reports the time per event and the time from that event to the agent's
call (scripted, in-process). The API server's part (the watch's delivery) is not in it: the P95
from a change on the local cluster to the run's start (issue 52: 2 s) is not measured here.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pallas_api.triggers.event import EventKind  # noqa: E402
from pallas_io.triggers.call import Answer  # noqa: E402
from pallas_operator.engine.triggers import TriggerRunners  # noqa: E402
from pallas_operator.reconcile.trigger import reconcile_trigger  # noqa: E402
from tests.support.fake_cluster import operator_with  # noqa: E402
from tests.support.operator import Manifest, agent, at, deployment, trigger  # noqa: E402
from tests.support.waiting import until  # noqa: E402

NS = "default"


class Called:
    def __init__(self) -> None:
        self.at: list[float] = []

    async def __call__(self, url: str, message: str, conversation: str, headers: Mapping[str, str],
                       caller: str) -> Answer:  # fmt: skip
        self.at.append(time.perf_counter())
        return Answer("ok", conversation, 1, 0.0)


def pod(name: str, restarts: int) -> Manifest:
    status = {"containerStatuses": [{"name": "main", "restartCount": restarts, "state": {"running": {}}}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "status": status}


async def main(events: int) -> None:
    event = {
        "apiVersion": "v1",
        "kind": "Pod",
        "when": "object.status.containerStatuses.exists(c, c.restartCount > 1)",
    }
    spec = {"agent": "research", "message": "Pod {{ .object.metadata.name }}", "event": event}
    ready = agent("research", at("status", {"url": "http://research.default.svc:8000/mcp"}))
    op, cluster = operator_with(deployment(), ready, trigger("crashes", at("spec", spec)),
                                event_kinds=(EventKind("", "pods"),))  # fmt: skip
    called = Called()
    op.triggers = TriggerRunners(cluster, op.metrics.triggers, call=called, namespaces=op.settings.namespaces)
    await reconcile_trigger(op, NS, "crashes")
    await until("the watch", cluster.watching, 10, interval=0.001)
    started = time.perf_counter()
    for i in range(events):
        cluster.emit("MODIFIED", pod(f"web-{i}", 0))
    await until("every event handled", lambda: cluster.undelivered() == 0, 600, interval=0.001)
    spent = time.perf_counter() - started
    each = spent / events * 1000
    print(f"{events} events through the matcher, none firing: {spent:.2f} s, {each:.2f} ms each")
    sent = time.perf_counter()
    cluster.emit("MODIFIED", pod("crasher", 2))
    await until("the agent's call", lambda: called.at, 10, interval=0.001)
    print(f"a firing event to the agent's call: {(called.at[0] - sent) * 1000:.1f} ms")
    await op.triggers.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1000)
    asyncio.run(main(parser.parse_args().events))
