"""Which resources' pods read which Secrets, kept both ways round.

A Secret's event must re-reconcile exactly the agents (and deployments: their registry reads
every provider key) whose pods read it, so a rotation rolls them; each reconcile says again what
its resource reads. Both are lookups by key here: a reconcile changes only its own entries
(before, each reconcile scanned every Secret in use in every namespace: O(N²) over a restart).
"""

from __future__ import annotations

from collections.abc import Iterable

User = tuple[str, str]
"""(AGENT | DEPLOYMENT, name) of a resource whose pods read a Secret of its namespace."""


class SecretUsers:
    """(namespace, Secret) → its users, and each user → the Secrets it reads."""

    def __init__(self) -> None:
        self._users: dict[tuple[str, str], set[User]] = {}
        """(namespace, Secret) → the resources reading it."""
        self._reads: dict[tuple[str, str, str], frozenset[str]] = {}
        """(kind, namespace, name) → the Secrets its pods read (the reverse index)."""

    def use(self, kind: str, namespace: str, name: str, secrets: Iterable[str]) -> None:
        """Record which Secrets a resource's pods read, replacing what they read before."""
        key, user = (kind, namespace, name), (kind, name)
        now = frozenset(secrets)
        before = self._reads.get(key, frozenset())
        if now == before:
            return
        for secret in before - now:
            users = self._users[(namespace, secret)]
            users.discard(user)
            if not users:
                del self._users[(namespace, secret)]
        for secret in now - before:
            self._users.setdefault((namespace, secret), set()).add(user)
        if now:
            self._reads[key] = now
        else:
            del self._reads[key]

    def forget(self, kind: str, namespace: str, name: str) -> None:
        """The resource is gone: it reads nothing any more."""
        self.use(kind, namespace, name, ())

    def users_of(self, namespace: str, secret: str) -> list[User]:
        """The resources whose pods read this Secret, in a stable order."""
        return sorted(self._users.get((namespace, secret), ()))
