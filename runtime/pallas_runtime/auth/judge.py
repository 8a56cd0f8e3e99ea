"""What a mode's verifier offers the provider: one decision per bearer."""

from __future__ import annotations

from typing import Protocol

from pallas_api.config import AccessConfig
from pallas_runtime.auth.identity import Decision


class Judge(Protocol):
    """Turns a bearer into a decision (None: it does not authenticate)."""

    access: AccessConfig
    """The agent's access lists, replaced when they change (applied in place)."""

    async def judge(self, token: str) -> Decision | None:
        """Authenticate and authorise one bearer; raises `AuthUnavailable` when it cannot."""

    async def aclose(self) -> None:
        """Release connections."""
