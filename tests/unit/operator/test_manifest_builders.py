"""The tests' manifest builders refuse a field the pydantic models do not know.

The API server drops an unknown field of a custom resource without a word (its pruning), so a
test whose builder misspelt one would pass for the wrong reason.
"""

from __future__ import annotations

import pytest

from tests.support.operator import agent, at, deployment, spec, unchecked


@pytest.mark.parametrize(
    ("build", "path"),
    [
        (lambda: agent("a1", spec(modle="vllm.x")), "spec.modle"),
        (lambda: agent("a1", at("spec.service.portt", 1)), "spec.service.portt"),
        (
            lambda: deployment("d1", at("spec.providers.vllm.baseUrl", "http://x/v1")),
            "spec.providers.vllm.baseUrl",
        ),
    ],
    ids=["top-level", "nested", "mis-cased"],
)
def test_a_builder_refuses_a_field_the_model_does_not_know(build, path: str) -> None:
    with pytest.raises(ValueError, match=path.replace(".", r"\.")):
        build()


def test_an_unknown_field_on_purpose_is_marked_unchecked() -> None:
    assert agent("a1", spec(modle="vllm.x"), unchecked)["spec"]["modle"] == "vllm.x"


def test_invalid_values_are_built_for_the_refusal_tests() -> None:
    assert agent("a1", spec(replicas=-1))["spec"]["replicas"] == -1
    assert deployment("d1", spec(model={"default": "nowhere.x"}))["spec"]["model"] == {"default": "nowhere.x"}
