"""Whether each deployment's auth-delegator ClusterRoleBinding exists, as far as this process knows.

The binding is cluster-scoped (a namespaced PallasDeployment cannot own it, so garbage collection
never removes it) and there are few of them, so it is not watched: a deployment's reconcile reads
it once (a GET) when nothing is known yet, then keeps what it applied or deleted here.
"""

from __future__ import annotations


class Delegations:
    """(namespace, deployment) → whether its binding exists; absent: not known yet."""

    def __init__(self) -> None:
        self._exists: dict[tuple[str, str], bool] = {}

    def known(self, namespace: str, deployment: str) -> bool | None:
        """Whether the binding exists, or None when this process has not seen or written it."""
        return self._exists.get((namespace, deployment))

    def record(self, namespace: str, deployment: str, *, exists: bool) -> None:
        """The binding was applied (True) or deleted or found absent (False)."""
        self._exists[(namespace, deployment)] = exists

    def forget(self, namespace: str, deployment: str) -> bool | None:
        """Drop what is known of a deployment's binding; returns what was known."""
        return self._exists.pop((namespace, deployment), None)
