"""The pod-template hash: what, when changed, must roll the agent's pods."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

from pallas_api.render import SecretBinding

SecretDigests = Mapping[str, Mapping[str, str]]
"""Secret name → key → sha256 of the value. Only digests: the operator never keeps values."""


def config_hash(config_yaml: str, bindings: Iterable[SecretBinding], secrets: SecretDigests) -> str:
    """sha256 over the rendered config and the digest of every referenced Secret key.

    The config alone is not enough: rotating an API key changes no spec, yet the pods must restart
    to read it, as env vars are fixed at container start.
    """
    digest = hashlib.sha256(config_yaml.encode())
    for name, key in sorted({(b.ref.name, b.ref.key) for b in bindings}):
        value = secrets.get(name, {}).get(key, "")
        digest.update(f"\0{name}\0{key}\0{value}".encode())
    return digest.hexdigest()


def value_digest(value: bytes) -> str:
    """The digest kept for one Secret value."""
    return hashlib.sha256(value).hexdigest()
