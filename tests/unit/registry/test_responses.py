"""The registry's response cache: bounded, least recently used dropped first."""

from __future__ import annotations

from pallas_registry.responses import Rendered, ResponseCache


def test_the_least_recently_used_body_goes_first() -> None:
    cache = ResponseCache(size=2)
    first, second, third = (Rendered.of(body) for body in (b"1", b"2", b"3"))
    cache.put(("v1", "a"), first)
    cache.put(("v1", "b"), second)
    assert cache.get(("v1", "a")) == first  # now the most recently used
    cache.put(("v1", "c"), third)
    assert cache.get(("v1", "b")) is None
    assert cache.get(("v1", "a")) == first
    assert cache.get(("v1", "c")) == third


def test_an_etag_is_the_bodys_not_the_versions() -> None:
    assert Rendered.of(b"{}").etag == Rendered.of(b"{}").etag != Rendered.of(b"[]").etag
