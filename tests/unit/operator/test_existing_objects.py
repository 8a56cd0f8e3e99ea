"""The start-up barrier's listing: every watched object, selected as the watches select them."""

from __future__ import annotations

from typing import Any

from pallas_api import names
from pallas_operator.wiring import existing_objects
from tests.support.fake_cluster import operator_with
from tests.support.operator import agent, deployment, in_namespace


def config_map(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
    }


async def test_the_listing_holds_what_the_watches_will_show_and_nothing_else() -> None:
    managed = {names.LABEL_MANAGED_BY: names.MANAGED_BY}
    op, _ = operator_with(
        deployment(),
        agent(),
        agent("elsewhere", in_namespace("other")),  # not a watched namespace
        config_map("research-config", managed),
        config_map("hand-made", {}),  # the child watches select the operator's label
    )

    assert await existing_objects(op) == {
        (names.DEPLOYMENT_KIND, "default", "ouranos"),
        (names.AGENT_KIND, "default", "research"),
        ("ConfigMap", "default", "research-config"),
    }
