"""List parameters, filters and keyset pagination."""

from __future__ import annotations

import base64
import random
from datetime import UTC, datetime, timedelta

import pytest

from pallas_registry.catalogue import CatalogueStore
from pallas_registry.query import (
    DEFAULT_LIMIT,
    BadParameter,
    Query,
    decode_cursor,
    encode_cursor,
    page,
    parse_query,
    select,
)
from tests.support.registry import T0, state


def parse(**params: str) -> Query:
    return parse_query(params.items())


def test_defaults() -> None:
    assert parse() == Query(limit=DEFAULT_LIMIT)


def test_cursor_round_trip() -> None:
    name = "local.cluster.svc.agents/research_1.x"
    assert decode_cursor(encode_cursor(name)) == name
    assert parse(cursor=encode_cursor(name)).after == name


@pytest.mark.parametrize(
    "cursor",
    [
        "!!!",
        "abc=",
        "a",
        base64.urlsafe_b64encode(b"2:ns/name").decode(),
        base64.urlsafe_b64encode(b"1:no-slash").decode(),
        base64.urlsafe_b64encode(b"1:a/b/c").decode(),
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
        base64.urlsafe_b64encode("1:ä/b".encode()).decode(),
    ],
)
def test_malformed_cursors_are_bad_parameters(cursor: str) -> None:
    with pytest.raises(BadParameter, match="'cursor': malformed") as info:
        parse(cursor=cursor)
    assert info.value.parameter == "cursor"


@pytest.mark.parametrize(
    "limit", ["0", "101", "-1", "1.5", "ten", "", "\u0661\u0660", "99999999999999999999"]
)
def test_limit_out_of_range(limit: str) -> None:
    with pytest.raises(BadParameter, match="'limit': must be an integer from 1 to 100"):
        parse(limit=limit)


@pytest.mark.parametrize("limit", ["1", "100", "042"])
def test_limit_in_range(limit: str) -> None:
    assert parse(limit=limit).limit == int(limit)


def test_repeated_parameter() -> None:
    with pytest.raises(BadParameter, match="'search': given more than once"):
        parse_query([("search", "a"), ("search", "b")])


def test_over_long_value() -> None:
    with pytest.raises(BadParameter, match="'search': longer than 512"):
        parse(search="x" * 513)


def test_unknown_parameters_are_ignored() -> None:
    assert parse(foo="bar", include_deleted_typo="x") == parse()


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("1", True), ("FALSE", False), ("0", False)])
def test_include_deleted_flag(value: str, expected: bool) -> None:
    assert parse(include_deleted=value).include_deleted is expected


def test_bad_flag() -> None:
    with pytest.raises(BadParameter, match="'include_deleted': must be true or false"):
        parse(include_deleted="yes please")


def test_ready_and_the_old_include() -> None:
    assert not parse().ready_only
    assert parse(include="all") == parse()  # what old clients send: a no-op
    assert parse(include="ready").ready_only
    assert parse(ready="true").ready_only
    assert not parse(include="ready", ready="false").ready_only  # the newer parameter wins
    with pytest.raises(BadParameter, match="'include'"):
        parse(include="everything")
    with pytest.raises(BadParameter, match="'ready'"):
        parse(ready="soon")


@pytest.mark.parametrize("tag", ["Web", "web search", "-x", "x" * 64, "a_b", "ü"])
def test_malformed_capability(tag: str) -> None:
    with pytest.raises(BadParameter, match="'capability'"):
        parse(capability=tag)


def test_updated_since_is_parsed_and_implies_deleted_entries() -> None:
    query = parse(updated_since="2026-11-21T11:00:00+01:00")
    assert query.updated_since == datetime(2026, 11, 21, 10, tzinfo=UTC)
    assert not query.ready_only
    assert query.include_deleted


@pytest.mark.parametrize("value", ["yesterday", "2026-11-21", "2026-11-21T10:00:00", "2026-02-30T00:00:00Z"])
def test_bad_updated_since(value: str) -> None:
    with pytest.raises(BadParameter, match="'updated_since': must be an RFC 3339"):
        parse(updated_since=value)


def test_version_latest_means_no_filter() -> None:
    assert parse(version="latest").version is None
    assert parse(version="1.2.3").version == "1.2.3"


def catalogue_of(*states):
    store = CatalogueStore()
    store.replace(states)
    return store.snapshot()


def agents(entries) -> list[str]:
    return [entry.key[1] for entry in entries]


def test_default_lists_every_agent_ready_true_only_ready_ones() -> None:
    catalogue = catalogue_of(state("a"), state("b", ready=False, phase="Degraded"), state("c", deleting=True))
    assert agents(select(catalogue, parse())) == ["a", "b"]
    assert agents(select(catalogue, parse(include="all"))) == ["a", "b"]
    assert agents(select(catalogue, parse(ready="true"))) == ["a"]
    assert agents(select(catalogue, parse(include_deleted="true"))) == ["a", "b", "c"]
    assert agents(select(catalogue, parse(include_deleted="true", ready="true"))) == ["a", "c"]


def test_capability_filter_and_unknown_capability() -> None:
    catalogue = catalogue_of(state("a", tags=("web-search",)), state("b", tags=("code",)))
    assert agents(select(catalogue, parse(capability="code"))) == ["b"]
    assert select(catalogue, parse(capability="graph")) == []


def test_search_matches_name_and_title_case_insensitively() -> None:
    catalogue = catalogue_of(state("alpha", title="Research"), state("beta", title="Code Helper"))
    assert agents(select(catalogue, parse(search="CODE"))) == ["beta"]
    assert agents(select(catalogue, parse(search="agents/alp"))) == ["alpha"]


def test_version_filter() -> None:
    catalogue = catalogue_of(state("a", version="1.0.0"), state("b", version="2.0.0"))
    assert agents(select(catalogue, parse(version="2.0.0"))) == ["b"]


def test_updated_since_includes_the_boundary() -> None:
    catalogue = catalogue_of(state("old", updated_at=T0), state("new", updated_at=T0 + timedelta(seconds=5)))
    since = (T0 + timedelta(seconds=5)).isoformat()
    assert agents(select(catalogue, parse(updated_since=since))) == ["new"]


def test_pages_and_cursor() -> None:
    catalogue = catalogue_of(*(state(f"a{i:02d}") for i in range(7)))
    entries = select(catalogue, parse())
    first, cursor = page(entries, parse(limit="3"))
    assert agents(first) == ["a00", "a01", "a02"]
    assert cursor is not None
    second, cursor = page(entries, parse(limit="3", cursor=cursor))
    third, cursor = page(entries, parse(limit="3", cursor=cursor))
    assert agents(second + third) == ["a03", "a04", "a05", "a06"]
    assert cursor is None


def test_exact_last_page_has_no_cursor() -> None:
    entries = select(catalogue_of(*(state(f"a{i}") for i in range(4))), parse())
    items, cursor = page(entries, parse(limit="4"))
    assert len(items) == 4
    assert cursor is None


def test_cursor_past_a_removed_name_resumes_after_it() -> None:
    entries = select(catalogue_of(state("a"), state("c")), parse())
    items, _ = page(entries, parse(cursor=encode_cursor("local.cluster.svc.agents/b")))
    assert agents(items) == ["c"]


@pytest.mark.parametrize("seed", range(20))
def test_every_stable_agent_is_seen_exactly_once_under_concurrent_changes(seed: int) -> None:
    rng = random.Random(seed)
    store = CatalogueStore()
    stable = {f"s{i:03d}" for i in range(rng.randint(0, 120))}
    store.replace(state(name) for name in stable)
    churn = [f"c{i:03d}" for i in range(80)]
    seen: list[str] = []
    cursor: str | None = None
    while True:
        params = {"limit": str(rng.randint(1, 17))}
        if cursor:
            params["cursor"] = cursor
        query = parse(**params)
        items, cursor = page(select(store.snapshot(), query), query)
        seen += agents(items)
        # Between pages: agents come and go, and stable ones change state (still Ready).
        for _ in range(rng.randint(0, 6)):
            name = rng.choice(churn)
            if rng.random() < 0.5:
                store.upsert(state(name))
            else:
                store.remove(("agents", name))
        for name in rng.sample(sorted(stable), min(len(stable), 3)):
            store.upsert(state(name, tools=(f"t{rng.random()}",)))
        if cursor is None:
            break
    assert len(seen) == len(set(seen)), "an agent was listed twice"
    assert stable <= set(seen), "a stable agent was missed"
