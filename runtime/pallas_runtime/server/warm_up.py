"""Imports done before the agent says ready, so its first caller does not wait for them."""

from __future__ import annotations

import contextlib
import importlib
import os

LAZY_FASTMCP_IMPORTS = ("key_value.aio.adapters.pydantic", "key_value.aio.stores.memory")
"""What fastmcp 4.1.2 imports at the first tool call (its session-state store)."""
KEY_VALUE_TYPE_CHECKS = "PY_KEY_VALUE_DISABLE_BEARTYPE"
"""py-key-value's switch for its runtime type checks (beartype), read when `key_value.aio` loads."""


def import_what_fastmcp_defers() -> None:
    """Import, before the agent says ready, what fastmcp would import inside the first tool call.

    Its session-state store (py-key-value, decorated by beartype at import) took ~0.45 s of CPU
    in the first caller's request (py-spy), every time an agent started: a pod said ready and
    then made its first caller wait. Now `/readyz` says ready that much later instead (in a
    thread, while the preflight check of the provider runs on the loop).

    Without `skip_key_value_type_checks()` first, the store loads with its type checks.
    """
    for module in LAZY_FASTMCP_IMPORTS:
        with contextlib.suppress(ImportError):  # a later fastmcp may not use it
            importlib.import_module(module)


def skip_key_value_type_checks() -> None:
    """Load fastmcp's state store without py-key-value's runtime type checks, unless told otherwise.

    py-key-value installs beartype's import hook on its whole package, which type-checks every
    function it defines and only warns on a mismatch (`violation_type=UserWarning`). Its
    documented switch turns that off unless the environment already sets it: the store is
    fastmcp's, driven by fastmcp's typed code, and the hook cost ~0.3 s of every start (1.3 s
    against 1.0 s for fastmcp and the store, wall time, 2026-11-29), with no measurable change
    per message (-0.9 %, two agents loaded at once). Called when the server is built, before
    the warm-up thread and the preflight check's threads run: the environment is written while
    no other thread may be reading it.
    """
    os.environ.setdefault(KEY_VALUE_TYPE_CHECKS, "true")
