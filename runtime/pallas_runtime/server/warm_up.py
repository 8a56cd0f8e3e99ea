"""Imports done before the agent says ready, so its first caller does not wait for them."""

from __future__ import annotations

import contextlib
import importlib

LAZY_FASTMCP_IMPORTS = ("key_value.aio.adapters.pydantic", "key_value.aio.stores.memory")
"""What fastmcp 4.1.2 imports at the first tool call (its session-state store)."""


def import_what_fastmcp_defers() -> None:
    """Import, before the agent says ready, what fastmcp would import inside the first tool call.

    Its session-state store (py-key-value, decorated by beartype at import) took ~0.45 s of CPU
    in the first caller's request (py-spy), every time an agent started: a pod said ready and
    then made its first caller wait. Now `/readyz` says ready that much later instead (in a
    thread, while the preflight check of the provider runs on the loop).
    """
    for module in LAZY_FASTMCP_IMPORTS:
        with contextlib.suppress(ImportError):  # a later fastmcp may not use it
            importlib.import_module(module)
