"""The one projection of `spec.auth`: what the registry publishes and the operator probes with."""

from __future__ import annotations

from pallas_api.spec import AuthSpec, CallerAuth


def auth(**fields: object) -> AuthSpec:
    return AuthSpec.model_validate(fields)


def test_none_mode_asks_nothing() -> None:
    assert CallerAuth.of(auth()) == CallerAuth() == CallerAuth("none")
    # The other mode's settings never leak into the projection.
    assert CallerAuth.of(auth(mode="none", kubernetes={"audiences": ["pallas.dev"]})) == CallerAuth()


def test_kubernetes_mode_keeps_the_audiences() -> None:
    projected = CallerAuth.of(auth(mode="kubernetes", kubernetes={"audiences": ["pallas.dev", "other"]}))
    assert projected == CallerAuth("kubernetes", audiences=("pallas.dev", "other"))
    assert CallerAuth.of(auth(mode="kubernetes")) == CallerAuth("kubernetes")


def test_oidc_mode_keeps_issuer_and_audience_only() -> None:
    spec = auth(
        mode="oidc",
        oidc={"issuer": "https://id.example/realms/a", "audience": "agents", "subjectClaim": "email"},
        kubernetes={"audiences": ["pallas.dev"]},
    )
    assert CallerAuth.of(spec) == CallerAuth("oidc", issuer="https://id.example/realms/a", audience="agents")


def test_it_compares_and_hashes_by_value() -> None:
    """Prober targets and registry states are compared to see a change; equal specs must match."""
    first = CallerAuth.of(auth(mode="kubernetes", kubernetes={"audiences": ["pallas.dev"]}))
    again = CallerAuth.of(auth(mode="kubernetes", kubernetes={"audiences": ["pallas.dev"]}))
    assert first == again
    assert hash(first) == hash(again)
