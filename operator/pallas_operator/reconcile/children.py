"""The one apply loop of both reconciles: apply the wanted children, delete the unwanted ones."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import NamedTuple, TypeVar

from pydantic import BaseModel, ValidationError

from pallas_api.validation import describe
from pallas_operator.builders import Manifest
from pallas_operator.engine.context import Operator
from pallas_operator.engine.world import ChildRecord, OwnerRecord
from pallas_operator.status import Workload, workload

log = logging.getLogger(__name__)
StatusModel = TypeVar("StatusModel", bound=BaseModel)


class Applied(NamedTuple):
    """What an apply loop leaves: the workload's state and the children it wrote."""

    workload: Workload | None
    """The Deployment named `workload_name`: as applied now, else as last seen, else as applied
    by an earlier reconcile the watch has not caught up with, else None."""
    written: frozenset[tuple[str, str]]
    """(kind, name) of each child applied now (a no-op apply is skipped, so not here)."""


async def apply_children(
    op: Operator,
    namespace: str,
    desired: Iterable[Manifest],
    children: Mapping[tuple[str, str], ChildRecord],
    unwanted: Iterable[tuple[str, str]],
    workload_name: str,
) -> Applied:
    """Apply `desired` (skipping no-ops), delete `unwanted` (kind, name) children."""
    seen = children.get(("Deployment", workload_name))
    # Until the Deployment's watch event, what this process applied is the Deployment: read as
    # absent, a new agent's status flipped to DeploymentNotCreated and back (two needless writes).
    current = (
        seen.workload
        if seen is not None
        else workload(op.applier.unseen((namespace, "Deployment", workload_name)))
    )
    written = set()
    for manifest in desired:
        key = (manifest["kind"], manifest["metadata"]["name"])
        observed = children.get(key)
        applied = await op.applier.apply(manifest, observed.seen if observed else None)
        if applied is None:
            continue
        written.add(key)
        if key == ("Deployment", workload_name):
            current = workload(applied)
    for kind, name in unwanted:
        await op.applier.delete(namespace, kind, name)
    return Applied(current, frozenset(written))


def stored_status(model: type[StatusModel], record: OwnerRecord) -> StatusModel:
    """The status as stored; one this operator cannot read counts as none (and is logged).

    Reading it as none resets every condition's transition time once; refusing it would stop
    the resource from ever being reconciled again.
    """
    try:
        return model.model_validate(record.status)
    except ValidationError as exc:
        log.warning(
            "the stored status of %s/%s cannot be read (%s); writing a fresh one",
            record.namespace,
            record.name,
            describe(exc, prefix="status", limit=1),
        )
        return model()
