"""Message templates: dotted paths only, and a failed render names the variable."""

from __future__ import annotations

import pytest

from pallas_api.triggers.template import TemplateError, parse_template


def test_paths_are_filled_strings_as_they_are_the_rest_as_json() -> None:
    template = parse_template(
        "Pod {{ .object.metadata.name }} restarted {{.object.count}} times; {{ .tags }}"
    )
    values = {"object": {"metadata": {"name": "web-1"}, "count": 4}, "tags": ["a", "b"]}
    assert template.render(values) == 'Pod web-1 restarted 4 times; ["a", "b"]'
    assert template.variables() == {"object", "tags"}


def test_list_items_by_index() -> None:
    assert parse_template("{{ .body.commits.0.id }}").render({"body": {"commits": [{"id": "abc"}]}}) == "abc"


def test_a_missing_value_names_the_path() -> None:
    template = parse_template("Pod {{ .object.metadata.name }}")
    with pytest.raises(TemplateError, match=r"\.object\.metadata\.name: \.object\.metadata is not there"):
        template.render({"object": {}})


@pytest.mark.parametrize(
    "source", ["{{ object.name }}", "{{ .a | upper }}", "{{ .a }} and {{ len .b }}", "{{ }}", "hello {{ .a"]
)
def test_only_dotted_paths_are_accepted(source: str) -> None:
    with pytest.raises(TemplateError):
        parse_template(source)


def test_variables_a_source_does_not_offer() -> None:
    template = parse_template("{{ .object.metadata.name }}")
    with pytest.raises(
        TemplateError, match=r"\.object\.metadata\.name: no such variable here .*\.body, \.run"
    ):
        template.check_variables({"trigger", "run", "body"})


def test_text_without_actions_and_braces_alone() -> None:
    assert parse_template("plain } text {").render({}) == "plain } text {"
