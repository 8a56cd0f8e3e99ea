"""When the applier writes a child, and when it knows the child is already what it wants."""

from __future__ import annotations

from typing import Any

from pallas_api import names
from pallas_operator.k8s.apply import Applier, Seen, seen
from tests.support.fake_cluster import FakeCluster


def config_map(value: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "research-config", "namespace": "agents"},
        "data": {"agent.yaml": value},
    }


def applier() -> tuple[Applier, FakeCluster]:
    cluster = FakeCluster()  # answers applies as the API server does: with our managedFields entry
    return Applier(cluster), cluster


async def test_every_apply_carries_the_digest_of_its_manifest() -> None:
    apply, client = applier()
    applied = await apply.apply(config_map(), None)
    assert applied is not None
    digest = client.applied[0]["metadata"]["annotations"][names.ANNOTATION_APPLIED_HASH]
    assert len(digest) == 64
    assert seen(applied) == Seen(seen(applied).fingerprint, digest)


async def test_a_restarted_operator_writes_nothing_to_a_child_that_is_current() -> None:
    first, _ = applier()
    applied = await first.apply(config_map(), None)
    assert applied is not None
    restarted, fresh_client = applier()
    assert await restarted.apply(config_map(), seen(applied)) is None
    assert fresh_client.applied == []
    # ... but a changed spec is applied, and so is a child written by an older operator.
    assert await restarted.apply(config_map("2"), seen(applied)) is not None
    legacy = Seen(fingerprint=seen(applied).fingerprint, applied_hash="")
    assert await applier()[0].apply(config_map(), legacy) is not None


async def test_drift_after_the_first_sight_is_repaired() -> None:
    first, _ = applier()
    applied = await first.apply(config_map(), None)
    assert applied is not None
    restarted, client = applier()
    baseline = seen(applied)
    assert await restarted.apply(config_map(), baseline) is None
    # Someone took a field over (kubectl edit): our managedFields entry changed.
    drifted = Seen(fingerprint="another", applied_hash=baseline.applied_hash)
    assert await restarted.apply(config_map(), drifted) is not None
    assert len(client.applied) == 1


async def test_a_child_created_but_not_yet_seen_is_not_applied_twice() -> None:
    apply, client = applier()
    await apply.apply(config_map(), None)
    assert await apply.apply(config_map(), None) is None
    apply.forget(("agents", "ConfigMap", "research-config"))  # deleted: apply again
    assert await apply.apply(config_map(), None) is not None
    assert len(client.applied) == 2


async def test_a_child_without_our_fields_is_applied_even_with_the_right_digest() -> None:
    apply, _ = applier()
    applied = await apply.apply(config_map(), None)
    assert applied is not None
    replaced = Seen(fingerprint="", applied_hash=seen(applied).applied_hash)  # kubectl replace
    assert await applier()[0].apply(config_map(), replaced) is not None


async def test_a_status_is_written_only_when_it_differs_from_what_the_owner_has() -> None:
    apply, cluster = applier()
    ready, pending = {"phase": "Ready"}, {"phase": "Pending"}
    key = ("PallasAgent", "agents", "research")

    assert not await apply.write_status(*key, ready, ready, "5")  # the watch shows it already
    assert await apply.write_status(*key, ready, pending, "5")
    assert cluster.statuses == [(key, ready)]


async def test_a_status_just_written_is_not_written_again_while_the_watch_lags() -> None:
    apply, cluster = applier()
    key = ("PallasAgent", "agents", "research")
    cluster.load({"kind": key[0], "metadata": {"namespace": key[1], "name": key[2]}})
    before = cluster.objects[key]["metadata"]["resourceVersion"]
    assert await apply.write_status(*key, {"phase": "Ready"}, {"phase": "Pending"}, before)

    # The watch still shows the version from before our write: what we wrote counts.
    assert not await apply.write_status(*key, {"phase": "Ready"}, {"phase": "Pending"}, before)
    # A newer version than ours: someone else wrote, and the watch is right.
    assert await apply.write_status(*key, {"phase": "Ready"}, {"phase": "Pending"}, "999")
    # An owner deleted and created again starts from nothing remembered.
    apply.forget_owner("agents", "PallasAgent", "research")
    assert await apply.write_status(*key, {"phase": "Ready"}, {"phase": "Pending"}, before)
    assert len(cluster.statuses) == 3


def owned(kind: str, name: str, owner: str) -> dict[str, Any]:
    """A child of the PallasAgent `owner`, as the builders make it (a controller reference)."""
    reference = {"apiVersion": "pallas.dev/v1alpha1", "kind": names.AGENT_KIND, "name": owner}
    meta = {"name": name, "namespace": "agents", "ownerReferences": [{**reference, "controller": True}]}
    return {"apiVersion": "v1", "kind": kind, "metadata": meta}


async def test_a_deleted_agent_takes_what_was_remembered_of_its_children_with_it() -> None:
    apply, _ = applier()
    for n in range(50):  # agents created and deleted before the watch showed their children
        await apply.apply(owned("Deployment", f"a{n}", owner=f"a{n}"), None)
        await apply.apply(owned("ServiceAccount", f"a{n}", owner=f"a{n}"), None)
        apply.forget_owner("agents", names.AGENT_KIND, f"a{n}")
    for n in range(50):
        for kind in ("Deployment", "ServiceAccount"):
            assert apply.unseen(("agents", kind, f"a{n}")) is None
            assert not apply.applied(("agents", kind, f"a{n}"))


async def test_forgetting_an_owner_leaves_the_other_owners_children() -> None:
    apply, client = applier()
    await apply.apply(owned("Deployment", "kept", owner="kept"), None)
    await apply.apply(owned("Deployment", "gone", owner="gone"), None)
    apply.forget_owner("agents", names.AGENT_KIND, "gone")
    assert apply.unseen(("agents", "Deployment", "kept")) is not None
    assert apply.unseen(("agents", "Deployment", "gone")) is None
    # The kept child is still known as applied (no second write); the gone one is written anew.
    assert await apply.apply(owned("Deployment", "kept", owner="kept"), None) is None
    assert await apply.apply(owned("Deployment", "gone", owner="gone"), None) is not None
    assert len(client.applied) == 3
