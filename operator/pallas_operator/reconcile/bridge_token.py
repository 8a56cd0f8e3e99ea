"""A deployment's bridge credential: the Secret its agents and hosted stdio servers' bridges share.

Made once, with a random value, before the bridges that need it, and never written again: each
reconcile of a deployment hosting stdio servers asks the API server to create it, which refuses
(409) while it exists, so the value the pods hold is kept and the operator never reads it.
Deleting the Secret rotates the credential: the deployment's next reconcile makes a new one.
"""

from __future__ import annotations

import logging
import secrets

from pallas_api import names
from pallas_operator.builders import Owner
from pallas_operator.builders.stdio import bridge_token_secret
from pallas_operator.engine.context import Operator

log = logging.getLogger(__name__)

TOKEN_BYTES = 32
"""Random bytes of a credential (43 URL-safe characters)."""


async def ensure_bridge_token(op: Operator, owner: Owner) -> None:
    """Create the deployment's bridge credential Secret unless it exists."""
    manifest = bridge_token_secret(owner, secrets.token_urlsafe(TOKEN_BYTES))
    if await op.cluster.create_secret(manifest):
        name = names.bridge_token_secret_name(owner.name)
        log.info(
            "PallasDeployment %s/%s: made its bridge credential (Secret %s)",
            owner.namespace,
            owner.name,
            name,
        )
