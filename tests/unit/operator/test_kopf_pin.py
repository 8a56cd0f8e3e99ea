"""The one private kopf name the operator imports, and the kopf release it was read against.

`pallas_operator.runner` passes kopf an identity of ours (`identity=Identity(...)`): without it
kopf derives one from `getpass.getuser()`, which raises in a container whose numeric user has no
passwd entry (the image runs as 65532). `Identity` is the parameter's type but kopf does not
re-export it, so it comes from `kopf._core.engines.peering`. These tests fail on a kopf upgrade,
naming what to re-read, instead of the operator failing at import or in a pod.
"""

from __future__ import annotations

import getpass
import importlib.metadata
import inspect
import tomllib
import typing

import kopf
import pytest
from kopf._core.engines import peering

from pallas_operator import runner
from tests.support.cluster import REPO

REVIEWED = "1.45.2"
"""The kopf release whose peering and running modules the engine's design was checked against
(docs/operator.md, "The engine around kopf"). On an upgrade: re-read `kopf/_core/engines/peering.py`
(`Identity`, `detect_own_id`) and `kopf/_core/reactor/running.py` (`spawn_tasks`: the identity, the
tasks cancelled at shutdown), re-run the operator's integration tests and its bench, then move this."""


def _pin() -> str:
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    (pin,) = [d for d in dependencies if d.split("==")[0].strip().lower() == "kopf"]
    return pin.split("==")[1].strip()


def test_kopf_is_pinned_to_the_reviewed_release_and_that_release_is_installed() -> None:
    assert _pin() == REVIEWED, f"pyproject.toml pins kopf=={_pin()}; {REVIEWED} was reviewed (see REVIEWED)"
    assert importlib.metadata.version("kopf") == REVIEWED


def test_identity_is_the_private_new_type_the_runner_imports() -> None:
    assert runner.Identity is peering.Identity
    assert peering.Identity.__supertype__ is str  # a NewType: our string goes through unchanged
    assert peering.Identity("pallas-operator-0") == "pallas-operator-0"


@pytest.mark.parametrize("entry", [kopf.operator, kopf.spawn_tasks])
def test_kopf_takes_an_identity_of_that_type(entry: typing.Callable[..., typing.Any]) -> None:
    parameter = inspect.signature(entry).parameters["identity"]
    assert parameter.kind is inspect.Parameter.KEYWORD_ONLY
    assert peering.Identity in typing.get_args(parameter.annotation)


async def test_without_an_identity_kopf_asks_for_a_user_name_a_container_may_not_have(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_passwd_entry() -> str:
        raise KeyError("getpwuid(): uid not found: 65532")

    monkeypatch.delenv("POD_ID", raising=False)
    monkeypatch.setattr(getpass, "getuser", no_passwd_entry)
    with pytest.raises(KeyError, match="65532"):
        peering.detect_own_id(manual=False)
    # kopf derives its identity before it starts a single task, so nothing is left running here.
    with pytest.raises(KeyError, match="65532"):
        await kopf.spawn_tasks(registry=kopf.OperatorRegistry(), clusterwide=True, standalone=True)
