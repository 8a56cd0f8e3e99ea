"""The bounded in-process maps on cachetools keep the order and bounds their OrderedDicts had."""

from __future__ import annotations

from pallas_runtime.conversations.scope import SessionLedger
from pallas_runtime.edge.session_adoption import EndedSessions


def test_a_ledger_lists_ids_oldest_first_a_named_again_one_last() -> None:
    ledger = SessionLedger(sessions=2, ids=3)
    for conversation in ("a", "b", "c", "a"):
        ledger.note("s1", conversation)
    assert ledger.ids("s1") == ["b", "c", "a"]
    ledger.note("s1", "d")  # past the bound: the oldest id goes
    assert ledger.ids("s1") == ["c", "a", "d"]
    assert not ledger.knows("s1", "b")
    ledger.forget("s1", "a")
    assert ledger.ids("s1") == ["c", "d"]


def test_a_ledger_forgets_the_session_noted_longest_ago_whatever_was_read() -> None:
    ledger = SessionLedger(sessions=2)
    ledger.note("s1", "a")
    ledger.note("s2", "b")
    assert ledger.ids("s1") == ["a"]  # reading does not make s1 newer
    assert ledger.knows("s1", "a")
    ledger.note("s3", "c")
    assert ledger.ids("s1") == []
    assert ledger.ids("s2") == ["b"]
    assert ledger.ids("s3") == ["c"]
    assert ledger.ids(None) == []


def test_a_ledger_keeps_a_session_noted_again() -> None:
    ledger = SessionLedger(sessions=2)
    ledger.note("s1", "a")
    ledger.note("s2", "b")
    ledger.note("s1", "c")  # s1 is now the newest
    ledger.note("s3", "d")
    assert ledger.ids("s1") == ["a", "c"]
    assert ledger.ids("s2") == []


def test_ended_sessions_forget_the_oldest_past_the_bound() -> None:
    ended = EndedSessions(size=2)
    ended.add("a")
    ended.add("b")
    assert "a" in ended  # asking does not make it newer
    ended.add("a")  # adding again does
    ended.add("c")
    assert "a" in ended
    assert "b" not in ended
    assert "c" in ended
