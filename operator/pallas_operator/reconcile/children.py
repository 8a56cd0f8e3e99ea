"""The one apply loop of both reconciles: apply the wanted children, delete the unwanted ones."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from pallas_api.validation import describe
from pallas_operator.builders import Manifest
from pallas_operator.engine.context import Operator
from pallas_operator.engine.world import ChildRecord, OwnerRecord
from pallas_operator.status import Workload, workload

log = logging.getLogger(__name__)
StatusModel = TypeVar("StatusModel", bound=BaseModel)


async def apply_children(
    op: Operator,
    namespace: str,
    desired: Iterable[Manifest],
    children: Mapping[tuple[str, str], ChildRecord],
    unwanted: Iterable[tuple[str, str]],
    workload_name: str,
) -> Workload | None:
    """Apply `desired` (skipping no-ops), delete `unwanted` (kind, name) children.

    Returns the latest state of the Deployment named `workload_name`: as applied now, else as
    last seen by the watch, else None.
    """
    seen = children.get(("Deployment", workload_name))
    current = seen.workload if seen is not None else None
    for manifest in desired:
        observed = children.get((manifest["kind"], manifest["metadata"]["name"]))
        applied = await op.applier.apply(manifest, observed.seen if observed else None)
        if (
            applied is not None
            and manifest["kind"] == "Deployment"
            and manifest["metadata"]["name"] == workload_name
        ):
            current = workload(applied)
    for kind, name in unwanted:
        await op.applier.delete(namespace, kind, name)
    return current


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
