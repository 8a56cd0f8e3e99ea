"""The catalogue store: versions, snapshots, left-out agents and tombstones."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

import pytest

from pallas_registry.catalogue import CatalogueStore
from tests.support.registry import assert_valid_entry, state

NOW = datetime(2026, 11, 22, 9, 0, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def new_store(clock: Clock | None = None, ttl: float = 60.0) -> CatalogueStore:
    return CatalogueStore(tombstone_ttl=ttl, clock=lambda: NOW, monotonic=clock or Clock())


def names(store: CatalogueStore) -> list[str]:
    return [entry.name for entry in store.snapshot().entries]


def test_entries_are_sorted_by_server_name_and_pre_encoded() -> None:
    store = new_store()
    store.replace([state("zeta"), state("alpha"), state("mid")])
    snapshot = store.snapshot()
    assert names(store) == [f"local.cluster.svc.agents/{n}" for n in ("alpha", "mid", "zeta")]
    for entry in snapshot.entries:
        assert json.loads(entry.body) == entry.document
        assert_valid_entry(entry.document)


def test_version_moves_only_on_visible_change() -> None:
    store = new_store()
    store.upsert(state("a"))
    first = store.snapshot()
    store.upsert(state("a"))
    assert store.snapshot() is first
    store.upsert(state("a", tools=("send_message",)))
    assert store.snapshot().version == first.version + 1


def test_snapshots_are_immutable_views() -> None:
    store = new_store()
    store.upsert(state("a"))
    before = store.snapshot()
    store.upsert(state("b"))
    assert len(before.entries) == 1
    assert len(store.snapshot().entries) == 2


def test_invalid_agents_are_left_out_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    store = new_store()
    store.upsert(state("good"))
    with caplog.at_level(logging.WARNING, "pallas.registry"):
        store.upsert(state("bad", url="nope"))
        store.upsert(state("bad", url="nope", tools=()))
    assert len([r for r in caplog.records if "leaving out agent agents/bad" in r.message]) == 1
    snapshot = store.snapshot()
    assert [e.key for e in snapshot.entries] == [("agents", "good")]
    assert snapshot.left_out == 1


def test_an_agent_that_becomes_invalid_disappears_without_tombstone() -> None:
    store = new_store()
    store.upsert(state("a"))
    store.leave_out(("agents", "a"), "no status yet")
    assert store.snapshot().entries == ()


def test_removed_agents_become_deleted_tombstones_until_the_ttl() -> None:
    clock = Clock()
    store = new_store(clock, ttl=60)
    store.replace([state("a"), state("b")])
    store.remove(("agents", "a"))
    tomb = store.snapshot().by_name["local.cluster.svc.agents/a"]
    assert tomb.status == "deleted"
    assert not tomb.ready
    assert tomb.updated == NOW
    assert_valid_entry(tomb.document)
    clock.now = 61
    assert names(store) == ["local.cluster.svc.agents/b"]


def test_removing_an_unknown_agent_changes_nothing() -> None:
    store = new_store()
    store.upsert(state("a"))
    version = store.version
    store.remove(("agents", "ghost"))
    assert store.version == version


def test_a_returning_agent_replaces_its_tombstone() -> None:
    store = new_store()
    store.upsert(state("a"))
    store.remove(("agents", "a"))
    store.upsert(state("a"))
    assert [e.status for e in store.snapshot().entries] == ["active"]


def test_replace_swaps_the_whole_view_at_once() -> None:
    store = new_store()
    store.replace([state("a"), state("b")])
    store.replace([state("b"), state("c")], left_out={("agents", "d"): "no status yet"})
    snapshot = store.snapshot()
    assert {e.key[1]: e.status for e in snapshot.entries} == {"a": "deleted", "b": "active", "c": "active"}
    assert snapshot.left_out == 1
    store.replace([state("b"), state("c")])
    assert store.snapshot().left_out == 0


def test_two_agents_with_one_server_name_keep_the_first(caplog: pytest.LogCaptureFixture) -> None:
    store = new_store()
    with caplog.at_level(logging.WARNING, "pallas.registry"):
        store.replace(
            [state("a", namespace="x", name_prefix="p.q"), state("a", namespace="y", name_prefix="p.q")]
        )
        snapshot = store.snapshot()
    assert [e.key for e in snapshot.entries] == [("x", "a")]
    assert "share server name p.q/a" in caplog.text


def test_counts_by_status() -> None:
    store = new_store()
    store.replace([state("a"), state("b", ready=False, phase="Pending"), state("c", deleting=True)])
    snapshot = store.snapshot()
    assert (snapshot.count("active"), snapshot.count("deprecated"), snapshot.count("deleted")) == (1, 1, 1)
